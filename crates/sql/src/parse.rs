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
    fn bad_and_empty_sql_are_mysql_errors() {
        assert_eq!(parse("SELEC 1").err().map(|e| e.code), Some(crate::error::ER_PARSE));
        assert_eq!(parse("  ; ").err().map(|e| e.code), Some(ER_EMPTY_QUERY));
        assert_eq!(parse("SELECT 'unterminated").err().map(|e| e.code), Some(crate::error::ER_PARSE));
        // Deep nesting is refused, not a stack overflow.
        let deep = format!("SELECT {}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse(&deep).is_err());
    }
}
