//! SQL text to statements: sqlparser's MySQL dialect, after token
//! rewrites of what it does not read itself: each `?` gets its position (so
//! parameters bind in text order whatever the planner visits first),
//! `LOCK IN SHARE MODE` becomes the equivalent `FOR SHARE`, and NDB's
//! `STORAGE DISK|MEMORY` becomes a column comment the catalog recognizes
//! (`STORAGE_MARKER`) or, as a table option, the `TABLESPACE ... STORAGE`
//! option the parser reads.

use crate::error::{SqlError, SqlResult, ER_EMPTY_QUERY};
use sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr, Statement, VisitMut, VisitorMut};
use sqlparser::dialect::MySqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer, Word};
use std::collections::HashMap;
use std::ops::ControlFlow;

/// First code point of the range that carries bytes of a query that are
/// not UTF-8 (a binary string literal sent raw, as mysql-connector-python
/// does): byte `b` becomes `BYTE_CHARS + b`, a private-use character, and
/// string literals holding such characters become binary values again.
pub const BYTE_CHARS: u32 = 0x10_FF00;

/// A column comment that stands for the column option `STORAGE DISK` or
/// `STORAGE MEMORY` (followed by the keyword), which sqlparser does not
/// read. It starts with a NUL, which a comment typed in SQL does not.
pub const STORAGE_MARKER: &str = "\u{0}latsdb storage ";

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

/// Tokens one expression may hold between commas, its parenthesised parts
/// included (`check_nesting`). 16 Ki tokens make at most 8 Ki levels of
/// `1+1+...`, which the SQL node's workers bind, evaluate and drop in well
/// under their stack (`latsdb_net::serve`, 64 MiB; about 1 KiB a level).
pub const MAX_EXPRESSION_TOKENS: usize = 16 * 1024;

/// Refuses a statement with an expression that could nest deeper than the
/// SQL node's stack allows. The parser builds `1+1+...+1` (and chains of
/// AND, OR, IS NULL ...) as a tree as deep as the chain is long without
/// recursing itself, but binding, evaluating and dropping that tree
/// recurse once per level: 10,000 terms overflowed a worker's stack and
/// aborted the node. The depth of an expression is at most the tokens
/// between its commas plus the depth of the deepest parenthesised group
/// among them, which is what this counts, before anything is built.
fn check_nesting(tokens: &[&Token]) -> SqlResult<()> {
    /// Per open parenthesis: tokens of the current comma-separated part,
    /// the deepest group closed in that part, and the deepest part so far.
    #[derive(Default)]
    struct Level {
        part: usize,
        inner: usize,
        deepest: usize,
    }
    let mut levels = vec![Level::default()];
    for token in tokens {
        let top = levels.len() - 1;
        match token {
            Token::Whitespace(_) => continue,
            Token::LParen => levels.push(Level::default()),
            Token::RParen if top > 0 => {
                let closed = &levels[top];
                let depth = closed.deepest.max(closed.part + closed.inner) + 1;
                levels.pop();
                let parent = &mut levels[top - 1];
                parent.inner = parent.inner.max(depth);
            }
            Token::Comma | Token::SemiColon => {
                let level = &mut levels[top];
                level.deepest = level.deepest.max(level.part + level.inner);
                (level.part, level.inner) = (0, 0);
            }
            _ => levels[top].part += 1,
        }
        let level = &levels[levels.len() - 1];
        if level.part + level.inner > MAX_EXPRESSION_TOKENS {
            return Err(SqlError::new(
                crate::error::ER_STACK_OVERRUN,
                "HY000",
                format!(
                    "an expression of this statement is too long or nested too deeply for the SQL node (more than {MAX_EXPRESSION_TOKENS} tokens between commas, its parentheses included); split it into several statements, or use IN (...) lists instead of long chains of OR"
                ),
            ));
        }
    }
    Ok(())
}

pub fn parse(sql: &str) -> SqlResult<Parsed> {
    let dialect = MySqlDialect {};
    let spanned = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError::parse(format!("You have an error in your SQL syntax: {e}")))?;
    let tokens: Vec<&Token> = spanned.iter().map(|t| &t.token).collect();
    check_nesting(&tokens)?;
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(tokens.len());
    let mut params = 0;
    let mut i = 0;
    let mut depth = 0usize;
    // The first two words of the statement (CREATE TABLE, ALTER TABLE).
    let mut statement: Vec<Keyword> = Vec::new();
    while i < tokens.len() {
        let t = tokens[i];
        // Rewritten tokens keep the place of what they replace.
        let at = |token: Token| TokenWithSpan { token, span: spanned[i].span };
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::SemiColon => (depth, statement) = (0, Vec::new()),
            Token::Word(w) if statement.len() < 2 => statement.push(w.keyword),
            _ => {}
        }
        let table = match statement[..] {
            [Keyword::CREATE, Keyword::TABLE] => Some(Keyword::CREATE),
            [Keyword::ALTER, Keyword::TABLE] => Some(Keyword::ALTER),
            _ => None,
        };
        if let Some((rewritten, next)) = table.and_then(|kind| storage_clause(&tokens, i, depth, kind)) {
            out.extend(rewritten.into_iter().map(at));
            i = next;
            continue;
        }
        if table.is_some() && is_charset_option(&tokens, i) {
            // MySQL's column option `CHARSET x`, a synonym the parser does
            // not read, as `CHARACTER SET x`.
            let space = Token::Whitespace(sqlparser::tokenizer::Whitespace::Space);
            out.extend([word("CHARACTER", Keyword::CHARACTER), space, word("SET", Keyword::SET)].map(at));
            i += 1;
            continue;
        }
        if let Some(next) = table.filter(|_| depth == 0).and_then(|_| partition_by_key(&tokens, i)) {
            i = next;
            continue;
        }
        if table.is_some() && index_option_visible(&tokens, i) {
            // MySQL 8's index option VISIBLE: every index is.
            i += 1;
            continue;
        }
        if table == Some(Keyword::ALTER) && is_word(t, Keyword::KEY) && previous_is(&tokens, i, Keyword::DROP) {
            // MySQL's `DROP KEY name`, a synonym the parser does not read.
            out.push(at(word("INDEX", Keyword::INDEX)));
            i += 1;
            continue;
        }
        if matches!(t, Token::Placeholder(p) if p == "?") {
            out.push(at(Token::Placeholder(format!("?{params}"))));
            params += 1;
            i += 1;
            continue;
        }
        if let Some((rewritten, next)) = prepare_clause(&tokens, i) {
            out.extend(rewritten.into_iter().map(at));
            i = next;
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
        if is_word(t, Keyword::EXTRACT) {
            // EXTRACT(YEAR_MONTH FROM d), which the parser does not read,
            // as the call EXTRACT_YEAR_MONTH(d) only the binder knows.
            let significant: Vec<usize> =
                (i + 1..tokens.len()).filter(|&j| !matches!(tokens[j], Token::Whitespace(_))).take(3).collect();
            if let [open, unit, from] = significant[..] {
                if let (Token::LParen, Token::Word(w)) = (tokens[open], tokens[unit]) {
                    if compound_word(w).is_some() && is_word(tokens[from], Keyword::FROM) {
                        let name = format!("{EXTRACT_COMPOUND}{}", w.value.to_ascii_uppercase());
                        out.push(at(Token::make_word(&name, None)));
                        out.push(at(Token::LParen));
                        i = from + 1;
                        continue;
                    }
                }
            }
        }
        if let Token::Word(w) = t {
            // MySQL's compound INTERVAL units (HOUR_MINUTE, ...) as the
            // standard's `HOUR TO MINUTE`, which the parser reads.
            if let Some((first, last)) = compound_word(w) {
                let space = || Token::Whitespace(sqlparser::tokenizer::Whitespace::Space);
                let unit = |name: &str| Token::make_keyword(name);
                out.extend([unit(first), space(), word("TO", Keyword::TO), space(), unit(last)].map(at));
                i += 1;
                continue;
            }
        }
        if is_word(t, Keyword::UPDATE) && starts_statement(&tokens[..i]) {
            // MySQL's multi-table `UPDATE a, b SET ...`, which the parser
            // does not read, as `UPDATE a CROSS JOIN b SET ...` (the same
            // join: a comma is a cross join).
            i = update_tables_as_joins(&spanned, i, &mut out, &mut params);
            continue;
        }
        if is_word(t, Keyword::LOCK) {
            // LOCK <ws> IN <ws> SHARE <ws> MODE
            let significant: Vec<usize> =
                (i..tokens.len()).filter(|&j| !matches!(tokens[j], Token::Whitespace(_))).take(4).collect();
            if significant.len() == 4
                && is_word(tokens[significant[1]], Keyword::IN)
                && is_word(tokens[significant[2]], Keyword::SHARE)
                && is_word(tokens[significant[3]], Keyword::MODE)
            {
                out.push(at(word("FOR", Keyword::FOR)));
                out.push(at(Token::Whitespace(sqlparser::tokenizer::Whitespace::Space)));
                out.push(at(word("SHARE", Keyword::SHARE)));
                i = significant[3] + 1;
                continue;
            }
        }
        out.push(spanned[i].clone());
        i += 1;
    }
    let meaningful = out.iter().any(|t| !matches!(t.token, Token::Whitespace(_) | Token::SemiColon | Token::EOF));
    if !meaningful {
        return Err(SqlError::new(ER_EMPTY_QUERY, "42000", "Query was empty"));
    }
    let mut statements = Parser::new(&dialect)
        .with_recursion_limit(64)
        .with_tokens_with_locations(out)
        .parse_statements()
        .map_err(|e| SqlError::parse(format!("You have an error in your SQL syntax: {e}")))?;
    if tokens.iter().any(|t| is_word(t, Keyword::SELECT)) {
        let items = ItemTexts { by_select: select_item_texts(sql, &spanned) };
        let _ = statements.visit(&mut { items });
    }
    Ok(Parsed { statements, params })
}

/// NDB's `STORAGE DISK|MEMORY` at `tokens[i]`, rewritten into what the
/// parser reads, and the index after it. Inside the parentheses of a
/// CREATE TABLE, and anywhere in an ALTER TABLE, it is a column option;
/// after them, a table option. `TABLESPACE name STORAGE DISK` is left to
/// the parser.
fn storage_clause(tokens: &[&Token], i: usize, depth: usize, statement: Keyword) -> Option<(Vec<Token>, usize)> {
    if !is_word(tokens[i], Keyword::STORAGE) {
        return None;
    }
    let significant = |from: usize| (from..tokens.len()).find(|&j| !matches!(tokens[j], Token::Whitespace(_)));
    let value = significant(i + 1)?;
    let kind = match tokens[value] {
        Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
        _ => return None,
    };
    if kind != "DISK" && kind != "MEMORY" {
        return None;
    }
    let before: Vec<&Token> =
        tokens[..i].iter().rev().filter(|t| !matches!(t, Token::Whitespace(_))).take(2).copied().collect();
    if before.get(1).is_some_and(|t| is_word(t, Keyword::TABLESPACE)) {
        return None;
    }
    // A column named `storage` (`(storage disk_type ...`, `CHANGE storage
    // disk ...`, `ADD COLUMN storage ...`), not the option.
    let names_a_column = [Keyword::CHANGE, Keyword::COLUMN, Keyword::MODIFY, Keyword::ADD];
    let first = before.first();
    if first.is_some_and(|t| names_a_column.iter().any(|k| is_word(t, *k)) || matches!(t, Token::LParen | Token::Comma))
    {
        return None;
    }
    let space = || Token::Whitespace(sqlparser::tokenizer::Whitespace::Space);
    let column_option = depth > 0 || statement == Keyword::ALTER;
    let rewritten = if column_option {
        vec![word("COMMENT", Keyword::COMMENT), space(), Token::SingleQuotedString(format!("{STORAGE_MARKER}{kind}"))]
    } else {
        vec![
            word("TABLESPACE", Keyword::TABLESPACE),
            space(),
            Token::make_word("latsdb", None),
            space(),
            word("STORAGE", Keyword::STORAGE),
            space(),
            Token::make_word(&kind, None),
        ]
    };
    Some((rewritten, value + 1))
}

/// Whether `tokens[i]` is the column option `CHARSET` (not the table
/// option `[DEFAULT] CHARSET [=] x`, which the parser reads): inside a
/// column definition, followed by a name rather than `=`.
fn is_charset_option(tokens: &[&Token], i: usize) -> bool {
    let Token::Word(w) = tokens[i] else { return false };
    if w.quote_style.is_some() || !w.value.eq_ignore_ascii_case("CHARSET") {
        return false;
    }
    let next = tokens[i + 1..].iter().find(|t| !matches!(t, Token::Whitespace(_)));
    let before = tokens[..i].iter().rev().find(|t| !matches!(t, Token::Whitespace(_)));
    let after_type = matches!(before, Some(Token::RParen) | Some(Token::Word(_)))
        && !before.is_some_and(|t| {
            is_word(t, Keyword::DEFAULT) || matches!(t, Token::Word(w) if w.value.eq_ignore_ascii_case("TABLE"))
        });
    after_type && matches!(next, Some(Token::Word(_)) | Some(Token::SingleQuotedString(_)))
}

/// Whether the significant token before `tokens[i]` is the keyword `kw`.
fn previous_is(tokens: &[&Token], i: usize, kw: Keyword) -> bool {
    tokens[..i].iter().rev().find(|t| !matches!(t, Token::Whitespace(_))).is_some_and(|t| is_word(t, kw))
}

/// Whether `tokens[i]` is MySQL 8's index option `VISIBLE`: the word right
/// after an index's column list. (`INVISIBLE` is left to fail: latsdb has
/// no index the planner ignores.)
fn index_option_visible(tokens: &[&Token], i: usize) -> bool {
    let visible =
        matches!(tokens[i], Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("VISIBLE"));
    visible
        && tokens[..i]
            .iter()
            .rev()
            .find(|t| !matches!(t, Token::Whitespace(_)))
            .is_some_and(|t| matches!(t, Token::RParen))
}

/// NDB's and MySQL's `PARTITION BY KEY (columns) [PARTITIONS n]` after a
/// CREATE TABLE's columns (mysqldump writes it inside `/*!50100 ... */`):
/// the index after it, so that it is left out. latsdb places every table's
/// rows by the hash of its whole primary key over the cluster's partitions
/// (docs/limitations.md), which gives the same rows to every query.
fn partition_by_key(tokens: &[&Token], i: usize) -> Option<usize> {
    if !is_word(tokens[i], Keyword::PARTITION) {
        return None;
    }
    let significant: Vec<usize> = (i..tokens.len()).filter(|&j| !matches!(tokens[j], Token::Whitespace(_))).collect();
    let (by, key, open) = (significant.get(1)?, significant.get(2)?, significant.get(3)?);
    let linear = |t: &Token| matches!(t, Token::Word(w) if w.value.eq_ignore_ascii_case("KEY"));
    if !is_word(tokens[*by], Keyword::BY) || !linear(tokens[*key]) || !matches!(tokens[*open], Token::LParen) {
        return None;
    }
    let close = (*open..tokens.len()).find(|&j| matches!(tokens[j], Token::RParen))?;
    let rest: Vec<usize> = significant.iter().copied().filter(|&j| j > close).take(2).collect();
    match rest[..] {
        [partitions, count]
            if matches!(tokens[partitions], Token::Word(w) if w.value.eq_ignore_ascii_case("PARTITIONS"))
                && matches!(tokens[count], Token::Number(..)) =>
        {
            Some(count + 1)
        }
        _ => Some(close + 1),
    }
}

/// Whether the next token starts a statement: only whitespace and
/// comments, or a `;`, come before it.
fn starts_statement(before: &[&Token]) -> bool {
    before.iter().rev().find(|t| !matches!(t, Token::Whitespace(_))).is_none_or(|t| matches!(t, Token::SemiColon))
}

/// Prefix of the function EXTRACT(<compound unit> FROM d) is read as.
pub const EXTRACT_COMPOUND: &str = "EXTRACT_";

/// MySQL's compound interval unit `w` (an unquoted word) as its first and
/// last unit.
fn compound_word(w: &Word) -> Option<(&'static str, &'static str)> {
    if w.quote_style.is_some() {
        return None;
    }
    compound_unit(&w.value)
}

/// The table list of `UPDATE a, b SET ...` from token `i` (the UPDATE) to
/// its SET, with each top-level comma as ` CROSS JOIN ` and each `?`
/// numbered; returns the index of the first token not copied.
fn update_tables_as_joins(
    spanned: &[TokenWithSpan],
    mut i: usize,
    out: &mut Vec<TokenWithSpan>,
    params: &mut usize,
) -> usize {
    out.push(spanned[i].clone());
    let mut depth = 0usize;
    i += 1;
    while i < spanned.len() {
        let at = |token: Token| TokenWithSpan { token, span: spanned[i].span };
        match &spanned[i].token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            Token::SemiColon | Token::EOF => break,
            t if depth == 0 && is_word(t, Keyword::SET) => break,
            Token::Comma if depth == 0 => {
                let space = || Token::Whitespace(sqlparser::tokenizer::Whitespace::Space);
                out.extend(
                    [space(), word("CROSS", Keyword::CROSS), space(), word("JOIN", Keyword::JOIN), space()].map(at),
                );
                i += 1;
                continue;
            }
            _ => {}
        }
        if matches!(&spanned[i].token, Token::Placeholder(p) if p == "?") {
            out.push(at(Token::Placeholder(format!("?{params}"))));
            *params += 1;
        } else {
            out.push(spanned[i].clone());
        }
        i += 1;
    }
    i
}

/// MySQL's SQL-level prepared statements in the forms the parser reads:
/// `PREPARE name FROM text` as `PREPARE name AS SELECT text` (the session
/// takes the SELECT's one expression as the statement's text; a string or
/// a user variable), and `DROP PREPARE name` as `DEALLOCATE PREPARE name`.
/// Returns the tokens in place of tokens `i..next`.
fn prepare_clause(tokens: &[&Token], i: usize) -> Option<(Vec<Token>, usize)> {
    let first = is_word(tokens[i], Keyword::PREPARE) || is_word(tokens[i], Keyword::DROP);
    if !first || !starts_statement(&tokens[..i]) {
        return None;
    }
    let significant: Vec<usize> =
        (i..tokens.len()).filter(|&j| !matches!(tokens[j], Token::Whitespace(_))).take(3).collect();
    let space = || Token::Whitespace(sqlparser::tokenizer::Whitespace::Space);
    match significant[..] {
        [prepare, name, from]
            if is_word(tokens[prepare], Keyword::PREPARE)
                && matches!(tokens[name], Token::Word(_))
                && is_word(tokens[from], Keyword::FROM) =>
        {
            let rewritten = vec![
                word("PREPARE", Keyword::PREPARE),
                space(),
                tokens[name].clone(),
                space(),
                word("AS", Keyword::AS),
                space(),
                word("SELECT", Keyword::SELECT),
            ];
            Some((rewritten, from + 1))
        }
        [drop, prepare, _] if is_word(tokens[drop], Keyword::DROP) && is_word(tokens[prepare], Keyword::PREPARE) => {
            Some((
                vec![word("DEALLOCATE", Keyword::DEALLOCATE), space(), word("PREPARE", Keyword::PREPARE)],
                prepare + 1,
            ))
        }
        _ => None,
    }
}

/// MySQL's compound interval unit `name` as the first and last unit the
/// parser and `dates::Compound::new` take.
pub fn compound_unit(name: &str) -> Option<(&'static str, &'static str)> {
    const UNITS: &[(&str, &str, &str)] = &[
        ("YEAR_MONTH", "YEAR", "MONTH"),
        ("DAY_HOUR", "DAY", "HOUR"),
        ("DAY_MINUTE", "DAY", "MINUTE"),
        ("DAY_SECOND", "DAY", "SECOND"),
        ("DAY_MICROSECOND", "DAY", "MICROSECOND"),
        ("HOUR_MINUTE", "HOUR", "MINUTE"),
        ("HOUR_SECOND", "HOUR", "SECOND"),
        ("HOUR_MICROSECOND", "HOUR", "MICROSECOND"),
        ("MINUTE_SECOND", "MINUTE", "SECOND"),
        ("MINUTE_MICROSECOND", "MINUTE", "MICROSECOND"),
        // Turned around: the parser takes nothing after `SECOND TO`.
        ("SECOND_MICROSECOND", "MICROSECOND", "SECOND"),
    ];
    UNITS.iter().find(|(unit, ..)| name.eq_ignore_ascii_case(unit)).map(|&(_, first, last)| (first, last))
}

/// The text of every select-list item as written, by the place of its
/// SELECT keyword. MySQL names an unaliased computed column by that text
/// (`a+1`, `count(*)`), not by the expression printed back.
struct ItemTexts {
    by_select: HashMap<Location, Vec<String>>,
}

impl VisitorMut for ItemTexts {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        self.name_items(&mut query.body);
        ControlFlow::Continue(())
    }
}

impl ItemTexts {
    /// Gives each unaliased computed item of the SELECTs of `body` its text
    /// as an alias (columns, literals and variables keep the names the
    /// planner gives them).
    fn name_items(&self, body: &mut SetExpr) {
        match body {
            SetExpr::Select(select) => {
                let Some(texts) = self.by_select.get(&select.select_token.0.span.start) else { return };
                if texts.len() != select.projection.len() {
                    return;
                }
                for (item, text) in select.projection.iter_mut().zip(texts) {
                    let SelectItem::UnnamedExpr(expr) = item else { continue };
                    if matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_) | Expr::Value(_)) {
                        continue;
                    }
                    let expr = std::mem::replace(expr, Expr::Value(sqlparser::ast::Value::Null.into()));
                    *item = SelectItem::ExprWithAlias { expr, alias: Ident::with_quote('`', text.clone()) };
                }
            }
            SetExpr::SetOperation { left, right, .. } => {
                self.name_items(left);
                self.name_items(right);
            }
            _ => {}
        }
    }
}

/// Splits the select list after every SELECT keyword of `tokens` into its
/// items' source text: items end at a comma outside parentheses, and the
/// list at the clause that follows it (or a closing parenthesis, `;` or
/// the end).
fn select_item_texts(sql: &str, tokens: &[TokenWithSpan]) -> HashMap<Location, Vec<String>> {
    const MODIFIERS: &[&str] = &[
        "DISTINCT",
        "DISTINCTROW",
        "ALL",
        "HIGH_PRIORITY",
        "STRAIGHT_JOIN",
        "SQL_SMALL_RESULT",
        "SQL_BIG_RESULT",
        "SQL_BUFFER_RESULT",
        "SQL_NO_CACHE",
        "SQL_CACHE",
        "SQL_CALC_FOUND_ROWS",
    ];
    const ENDS: &[Keyword] = &[
        Keyword::FROM,
        Keyword::WHERE,
        Keyword::GROUP,
        Keyword::HAVING,
        Keyword::ORDER,
        Keyword::LIMIT,
        Keyword::INTO,
        Keyword::UNION,
        Keyword::EXCEPT,
        Keyword::INTERSECT,
        Keyword::WINDOW,
        Keyword::FOR,
        Keyword::LOCK,
    ];
    let line_starts: Vec<usize> = std::iter::once(0).chain(sql.match_indices('\n').map(|(i, _)| i + 1)).collect();
    let offset = |loc: Location| -> Option<usize> {
        let start = *line_starts.get((loc.line as usize).checked_sub(1)?)?;
        let col = (loc.column as usize).checked_sub(1)?;
        match sql[start..].char_indices().nth(col) {
            Some((i, _)) => Some(start + i),
            None => Some(sql.len()),
        }
    };
    let text = |from: &TokenWithSpan, to: &TokenWithSpan| -> Option<String> {
        Some(sql.get(offset(from.span.start)?..offset(to.span.end)?)?.to_string())
    };
    let mut out = HashMap::new();
    for (i, t) in tokens.iter().enumerate() {
        if !is_word(&t.token, Keyword::SELECT) {
            continue;
        }
        let mut items = Vec::new();
        let mut depth = 0i32;
        let (mut first, mut last): (Option<usize>, Option<usize>) = (None, None);
        let mut complete = true;
        for (j, u) in tokens.iter().enumerate().skip(i + 1) {
            match &u.token {
                Token::Whitespace(_) => continue,
                Token::Word(w)
                    if depth == 0
                        && first.is_none()
                        && items.is_empty()
                        && w.quote_style.is_none()
                        && MODIFIERS.iter().any(|m| w.value.eq_ignore_ascii_case(m)) =>
                {
                    continue
                }
                Token::Word(w) if depth == 0 && w.quote_style.is_none() && ENDS.contains(&w.keyword) => break,
                Token::SemiColon | Token::EOF => break,
                Token::RParen if depth == 0 => break,
                Token::Comma if depth == 0 => {
                    match (first, last) {
                        (Some(a), Some(b)) => items.push(text(&tokens[a], &tokens[b])),
                        _ => complete = false,
                    }
                    (first, last) = (None, None);
                    continue;
                }
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ => {}
            }
            first.get_or_insert(j);
            last = Some(j);
        }
        if let (Some(a), Some(b)) = (first, last) {
            items.push(text(&tokens[a], &tokens[b]));
        }
        if complete {
            if let Some(items) = items.into_iter().collect::<Option<Vec<String>>>() {
                out.insert(t.span.start, items);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_deeper_than_the_stack_allows_are_refused_before_parsing() {
        let chain = |terms: usize| format!("SELECT 1{}", "+1".repeat(terms));
        // 8 Ki terms make 16 Ki tokens: the limit, taken.
        assert!(parse(&chain(MAX_EXPRESSION_TOKENS / 2 - 1)).is_ok());
        let e = parse(&chain(MAX_EXPRESSION_TOKENS)).err().expect("too deep");
        assert_eq!(e.code, crate::error::ER_STACK_OVERRUN, "{}", e.message);
        // Parentheses add their contents to the part that holds them.
        let half = "+1".repeat(MAX_EXPRESSION_TOKENS / 4);
        assert!(parse(&format!("SELECT 1{half} + (1{half})")).is_err());
        // Commas end a part: long lists and many rows are fine.
        let list = vec!["1"; 3 * MAX_EXPRESSION_TOKENS].join(", ");
        assert!(parse(&format!("SELECT * FROM t WHERE a IN ({list})")).is_ok());
        let rows = vec!["(1, -2, 'x')"; MAX_EXPRESSION_TOKENS].join(", ");
        assert!(parse(&format!("INSERT INTO t VALUES {rows}")).is_ok());
    }

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
    fn computed_columns_are_named_as_written() {
        let p = parse("SELECT a+1, id, count(*)  ,  CONCAT( 'x', ?), x AS y, 'lit', (SELECT b*2 FROM u) FROM t\nWHERE a IN (SELECT 1 UNION SELECT c  +  1)").unwrap();
        let shown = p.statements[0].to_string();
        assert!(shown.contains("a + 1 AS `a+1`"), "{shown}");
        assert!(shown.contains("count(*) AS `count(*)`"), "{shown}");
        assert!(shown.contains("CONCAT('x', ?0) AS `CONCAT( 'x', ?)`"), "{shown}");
        assert!(shown.contains("b * 2 AS `b*2`"), "{shown}");
        assert!(shown.contains("c + 1 AS `c  +  1`"), "{shown}");
        assert!(shown.contains("SELECT 1 UNION"), "{shown}");
        assert!(shown.contains("x AS y, 'lit', (SELECT"), "{shown}");
        assert!(shown.contains("t WHERE"), "{shown}");
        let p =
            parse("SELECT DISTINCT SQL_CALC_FOUND_ROWS\n  SUBSTRING(s FROM 2 FOR 3), 1+1 FROM t FOR UPDATE").unwrap();
        let shown = p.statements[0].to_string();
        assert!(shown.contains("AS `SUBSTRING(s FROM 2 FOR 3)`") && shown.contains("AS `1+1`"), "{shown}");
    }

    #[test]
    fn extract_of_a_compound_unit_is_a_call() {
        let p =
            parse("SELECT EXTRACT( day_minute FROM d), EXTRACT(YEAR FROM d), d + INTERVAL '1:2' HOUR_MINUTE FROM t")
                .unwrap();
        let shown = p.statements[0].to_string();
        assert!(shown.contains("EXTRACT_DAY_MINUTE(d)"), "{shown}");
        assert!(shown.contains("EXTRACT(YEAR FROM d)"), "{shown}");
        assert!(shown.contains("INTERVAL '1:2' HOUR TO MINUTE"), "{shown}");
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

    #[test]
    fn storage_options_are_read_only_where_they_are_options() {
        let text = |sql: &str| parse(sql).unwrap().statements[0].to_string();
        let create = text("CREATE TABLE t (a INT STORAGE DISK, b INT) /*!50100 STORAGE DISK */");
        assert!(create.contains(&format!("COMMENT '{STORAGE_MARKER}DISK'")), "{create}");
        assert!(create.contains("TABLESPACE latsdb STORAGE DISK"), "{create}");
        let ndb = text("CREATE TABLE t (a INT) TABLESPACE ts1 STORAGE MEMORY");
        assert!(ndb.contains("TABLESPACE ts1 STORAGE MEMORY"), "{ndb}");
        // A column named `storage` is no option.
        let rename = text("ALTER TABLE t CHANGE storage memory TEXT");
        assert!(!rename.contains(STORAGE_MARKER), "{rename}");
        let view = text("CREATE VIEW v AS SELECT storage memory FROM t");
        assert!(!view.contains("TABLESPACE"), "{view}");
        let modify = text("ALTER TABLE t MODIFY c TEXT STORAGE MEMORY");
        assert!(modify.contains(&format!("{STORAGE_MARKER}MEMORY")), "{modify}");
    }

    #[test]
    fn column_charset_and_partition_by_key_as_mysqldump_writes_them() {
        let text = |sql: &str| parse(sql).unwrap().statements[0].to_string();
        let create = text(
            "CREATE TABLE t (a INT, b VARCHAR(3) CHARSET utf8mb4 COLLATE utf8mb4_0900_ai_ci, PRIMARY KEY (a, b))
             ENGINE=ndbcluster DEFAULT CHARSET = latin1 /*!50100 PARTITION BY KEY (a) */",
        );
        assert!(create.contains("CHARACTER SET utf8mb4"), "{create}");
        assert!(!create.contains("PARTITION"), "{create}");
        let counted = text("CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY KEY (a) PARTITIONS 4");
        assert!(!counted.contains("PARTITION"), "{counted}");
        // A column named charset, and other partitionings, are left alone.
        assert!(text("CREATE TABLE t (charset INT)").contains("charset INT"));
        assert!(parse("CREATE TABLE t (a INT) PARTITION BY RANGE (a) (PARTITION p VALUES LESS THAN (5))").is_err());
        assert!(parse("SELECT charset FROM t").is_ok());
        let alter = text("ALTER TABLE t DROP KEY k, ADD UNIQUE INDEX u (a ASC, b ASC) VISIBLE");
        assert!(alter.contains("DROP INDEX k") && !alter.contains("VISIBLE"), "{alter}");
        assert!(parse("ALTER TABLE t ADD INDEX i (a) INVISIBLE").is_err());
    }
}
