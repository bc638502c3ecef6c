//! SQL text to statements: sqlparser's MySQL dialect, after two token
//! rewrites it does not do itself: each `?` gets its position (so
//! parameters bind in text order whatever the planner visits first), and
//! `LOCK IN SHARE MODE` becomes the equivalent `FOR SHARE`.

use crate::error::{SqlError, SqlResult, ER_EMPTY_QUERY};
use sqlparser::ast::Statement;
use sqlparser::dialect::MySqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer, Word};

/// First code point of the range that carries bytes of a query that are
/// not UTF-8 (a binary string literal sent raw, as mysql-connector-python
/// does): byte `b` becomes `BYTE_CHARS + b`, a private-use character, and
/// string literals holding such characters become binary values again.
pub const BYTE_CHARS: u32 = 0x10_FF00;

/// The query as text; invalid UTF-8 bytes are carried losslessly (see
/// `BYTE_CHARS`).
pub fn decode_query(body: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(body) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(body.len() + 16);
    for chunk in body.utf8_chunks() {
        out.push_str(chunk.valid());
        for &b in chunk.invalid() {
            out.push(char::from_u32(BYTE_CHARS + b as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A string literal back as the client's bytes: Bytes when it carried
/// non-UTF-8 bytes, Str otherwise.
pub fn literal_value(s: &str) -> latsdb_types::Value {
    let carries = |c: char| (BYTE_CHARS..BYTE_CHARS + 256).contains(&(c as u32));
    if !s.chars().any(carries) {
        return latsdb_types::Value::Str(s.to_string());
    }
    let mut bytes = Vec::with_capacity(s.len());
    for c in s.chars() {
        if carries(c) {
            bytes.push((c as u32 - BYTE_CHARS) as u8);
        } else {
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    latsdb_types::Value::Bytes(bytes)
}

pub struct Parsed {
    pub statements: Vec<Statement>,
    /// Number of `?` parameters.
    pub params: usize,
}

fn is_word(t: &Token, kw: Keyword) -> bool {
    matches!(t, Token::Word(w) if w.keyword == kw && w.quote_style.is_none())
}

fn word(kw: &str, keyword: Keyword) -> Token {
    Token::Word(Word { value: kw.to_string(), quote_style: None, keyword })
}

pub fn parse(sql: &str) -> SqlResult<Parsed> {
    let dialect = MySqlDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(|e| SqlError::parse(format!("You have an error in your SQL syntax: {e}")))?;
    let mut out: Vec<Token> = Vec::with_capacity(tokens.len());
    let mut params = 0;
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if matches!(t, Token::Placeholder(p) if p == "?") {
            out.push(Token::Placeholder(format!("?{params}")));
            params += 1;
            i += 1;
            continue;
        }
        if is_word(t, Keyword::WITH) {
            // START TRANSACTION WITH CONSISTENT SNAPSHOT: a read-committed
            // cluster has no snapshot to take; the clause is accepted.
            let significant: Vec<usize> =
                (i..tokens.len()).filter(|&j| !matches!(tokens[j], Token::Whitespace(_))).take(3).collect();
            let word_is = |j: usize, w: &str| matches!(&tokens[j], Token::Word(x) if x.value.eq_ignore_ascii_case(w));
            if significant.len() == 3 && word_is(significant[1], "CONSISTENT") && word_is(significant[2], "SNAPSHOT") {
                i = significant[2] + 1;
                continue;
            }
        }
        if is_word(t, Keyword::LOCK) {
            // LOCK <ws> IN <ws> SHARE <ws> MODE
            let significant: Vec<usize> =
                (i..tokens.len()).filter(|&j| !matches!(tokens[j], Token::Whitespace(_))).take(4).collect();
            if significant.len() == 4
                && is_word(&tokens[significant[1]], Keyword::IN)
                && is_word(&tokens[significant[2]], Keyword::SHARE)
                && is_word(&tokens[significant[3]], Keyword::MODE)
            {
                out.push(word("FOR", Keyword::FOR));
                out.push(Token::Whitespace(sqlparser::tokenizer::Whitespace::Space));
                out.push(word("SHARE", Keyword::SHARE));
                i = significant[3] + 1;
                continue;
            }
        }
        out.push(t.clone());
        i += 1;
    }
    let meaningful = out.iter().any(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon | Token::EOF));
    if !meaningful {
        return Err(SqlError::new(ER_EMPTY_QUERY, "42000", "Query was empty"));
    }
    let statements = Parser::new(&dialect)
        .with_recursion_limit(64)
        .with_tokens(out)
        .parse_statements()
        .map_err(|e| SqlError::parse(format!("You have an error in your SQL syntax: {e}")))?;
    Ok(Parsed { statements, params })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_text_order() {
        let p = parse("INSERT INTO t (a, b) VALUES (?, ?) ON DUPLICATE KEY UPDATE b = ?").unwrap();
        assert_eq!(p.params, 3);
        let text = p.statements[0].to_string();
        assert!(text.contains("?0") && text.contains("?1") && text.contains("?2"), "{text}");
    }

    #[test]
    fn lock_in_share_mode_reads_as_for_share() {
        let p = parse("SELECT c FROM t WHERE id = 1 LOCK IN SHARE MODE").unwrap();
        assert!(p.statements[0].to_string().ends_with("FOR SHARE"), "{}", p.statements[0]);
    }

    #[test]
    fn non_utf8_bytes_in_a_string_literal_come_back_as_bytes() {
        let text = decode_query(b"INSERT INTO t VALUES (1, '\xfe\xff')");
        let p = parse(&text).unwrap();
        let shown = p.statements[0].to_string();
        let literal = shown.split('\'').nth(1).unwrap();
        assert_eq!(literal_value(literal), latsdb_types::Value::Bytes(vec![0xfe, 0xff]));
        assert_eq!(literal_value("plain"), latsdb_types::Value::Str("plain".into()));
    }

    #[test]
    fn start_transaction_with_consistent_snapshot_parses() {
        assert!(parse("START TRANSACTION WITH CONSISTENT SNAPSHOT").is_ok());
    }

    #[test]
    fn bad_and_empty_sql_are_mysql_errors() {
        assert_eq!(parse("SELEC 1").err().map(|e| e.code), Some(crate::error::ER_PARSE));
        assert_eq!(parse("  ; ").err().map(|e| e.code), Some(ER_EMPTY_QUERY));
        assert_eq!(parse("SELECT 'unterminated").err().map(|e| e.code), Some(crate::error::ER_PARSE));
        // Deep nesting is refused, not a stack overflow.
        let deep = format!("SELECT {}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse(&deep).is_err());
    }
}
