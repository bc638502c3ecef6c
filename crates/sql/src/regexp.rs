//! MySQL's regular expressions: `expr REGEXP pattern` (RLIKE), REGEXP_LIKE,
//! REGEXP_INSTR, REGEXP_SUBSTR and REGEXP_REPLACE, with MySQL 8's optional
//! position, occurrence, return option and match type arguments.
//!
//! Patterns are compiled by `regex-lite` (the common syntax MySQL's ICU
//! engine and MariaDB's PCRE share; no look-around or back-references,
//! which are refused with a clear error). Matching is case-sensitive (as
//! under utf8mb4_bin in MySQL) unless the match type says 'i'. Positions
//! count characters from 1.

use crate::error::{SqlError, SqlResult};
use crate::eval::{numeric, to_text};
use latsdb_types::Value;
use regex_lite::{Regex, RegexBuilder};
use std::cell::RefCell;

/// MySQL's "Illegal argument to a regular expression".
const ER_REGEXP_ILLEGAL_ARGUMENT: u16 = 3685;
/// MySQL's "Index out of bounds in regular expression search".
const ER_REGEXP_INDEX_OUTOFBOUNDS: u16 = 3686;

/// Compiled patterns kept per thread: a pattern is usually a constant, and
/// compiling it for every row would cost more than matching.
const CACHED_PATTERNS: usize = 16;

thread_local! {
    static CACHE: RefCell<Vec<(String, Flags, Regex)>> = const { RefCell::new(Vec::new()) };
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
struct Flags {
    case_insensitive: bool,
    multi_line: bool,
    dot_matches_new_line: bool,
}

/// A match type string ("c", "i", "m", "n", "u"; the last of c and i wins).
fn flags(match_type: Option<&Value>) -> SqlResult<Flags> {
    let mut f = Flags::default();
    let Some(v) = match_type else { return Ok(f) };
    for c in to_text(v).chars() {
        match c {
            'c' => f.case_insensitive = false,
            'i' => f.case_insensitive = true,
            'm' => f.multi_line = true,
            'n' => f.dot_matches_new_line = true,
            // Unix line endings only: regex-lite knows no others.
            'u' => {}
            other => {
                return Err(SqlError::new(
                    crate::error::ER_WRONG_ARGUMENTS,
                    "HY000",
                    format!(
                        "Incorrect arguments to regular expression: unknown match type '{other}' (use c, i, m, n or u)"
                    ),
                ))
            }
        }
    }
    Ok(f)
}

/// Runs `f` with the compiled `pattern`.
fn with_regex<T>(pattern: &str, flags: Flags, f: impl FnOnce(&Regex) -> T) -> SqlResult<T> {
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(i) = cache.iter().position(|(p, fl, _)| p == pattern && *fl == flags) {
            return Ok(f(&cache[i].2));
        }
        let re = RegexBuilder::new(pattern)
            .case_insensitive(flags.case_insensitive)
            .multi_line(flags.multi_line)
            .dot_matches_new_line(flags.dot_matches_new_line)
            .build()
            .map_err(|e| {
                SqlError::new(
                    ER_REGEXP_ILLEGAL_ARGUMENT,
                    "HY000",
                    format!("Illegal argument to a regular expression: {}", e.to_string().replace('\n', " ")),
                )
            })?;
        let out = f(&re);
        if cache.len() == CACHED_PATTERNS {
            cache.remove(0);
        }
        cache.push((pattern.to_string(), flags, re));
        Ok(out)
    })
}

/// The byte offset of 1-based character position `pos` in `text`; a
/// position past the end (but the one just after it) is MySQL's error 3686.
fn byte_offset(text: &str, pos: &Value) -> SqlResult<usize> {
    let n = numeric(pos).as_i64().unwrap_or(0);
    let chars = text.chars().count() as i64;
    if n < 1 || n > chars + 1 {
        return Err(SqlError::new(
            ER_REGEXP_INDEX_OUTOFBOUNDS,
            "HY000",
            format!("Index out of bounds in regular expression search: position {n} in a string of {chars} characters"),
        ));
    }
    Ok(text.char_indices().nth(n as usize - 1).map_or(text.len(), |(i, _)| i))
}

/// An occurrence argument: which match counts (1 for the first).
fn occurrence(v: Option<&Value>) -> i64 {
    v.map_or(1, |v| numeric(v).as_i64().unwrap_or(1))
}

/// `text REGEXP pattern` and REGEXP_LIKE(text, pattern [, match_type]).
pub fn like(args: &[Value]) -> SqlResult<Value> {
    if args.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    let (text, pattern) = (to_text(&args[0]), to_text(&args[1]));
    with_regex(&pattern, flags(args.get(2))?, |re| Value::Int(re.is_match(&text) as i64))
}

/// REGEXP_INSTR(text, pattern [, pos [, occurrence [, return_option [,
/// match_type]]]]): the character position of the match (or just after it
/// with return_option 1), 0 without one.
pub fn instr(args: &[Value]) -> SqlResult<Value> {
    if args.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    let after = match args.get(4).map(|v| numeric(v).as_i64()) {
        None | Some(Some(0)) => false,
        Some(Some(1)) => true,
        Some(_) => {
            return Err(SqlError::new(
                crate::error::ER_WRONG_ARGUMENTS,
                "HY000",
                "Incorrect arguments to regexp_instr: the return option must be 0 or 1",
            ))
        }
    };
    let (text, found) = nth_match(args, args.get(5))?;
    Ok(Value::Int(match found {
        Some((from, to)) => text[..if after { to } else { from }].chars().count() as i64 + 1,
        None => 0,
    }))
}

/// REGEXP_SUBSTR(text, pattern [, pos [, occurrence [, match_type]]]): the
/// matching text, NULL without a match.
pub fn substr(args: &[Value]) -> SqlResult<Value> {
    if args.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    let (text, found) = nth_match(args, args.get(4))?;
    Ok(found.map_or(Value::Null, |(from, to)| Value::Str(text[from..to].into())))
}

/// The text (argument 0) and the byte range of the pattern's (argument 1)
/// `occurrence`-th match (argument 3, default 1) from character position
/// `pos` on (argument 2, default 1), for REGEXP_INSTR and REGEXP_SUBSTR.
fn nth_match(args: &[Value], match_type: Option<&Value>) -> SqlResult<(String, Option<(usize, usize)>)> {
    let (text, pattern) = (to_text(&args[0]), to_text(&args[1]));
    let start = args.get(2).map_or(Ok(0), |p| byte_offset(&text, p))?;
    let nth = occurrence(args.get(3)).max(1) as usize - 1;
    let found = with_regex(&pattern, flags(match_type)?, |re| {
        re.find_iter(&text[start..]).nth(nth).map(|m| (start + m.start(), start + m.end()))
    })?;
    Ok((text, found))
}

/// REGEXP_REPLACE(text, pattern, replacement [, pos [, occurrence [,
/// match_type]]]): every match from `pos` on replaced (only the
/// `occurrence`-th one when it is above 0); `$1` in the replacement is the
/// first group. An empty text stays empty (as in MariaDB), even where the
/// pattern matches it.
pub fn replace(args: &[Value]) -> SqlResult<Value> {
    if args.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    let (text, pattern, with) = (to_text(&args[0]), to_text(&args[1]), to_text(&args[2]));
    if text.is_empty() {
        return Ok(Value::Str(text));
    }
    let start = args.get(3).map_or(Ok(0), |p| byte_offset(&text, p))?;
    let nth = args.get(4).map_or(0, |v| numeric(v).as_i64().unwrap_or(0));
    with_regex(&pattern, flags(args.get(5))?, |re| {
        let tail = &text[start..];
        let mut out = String::with_capacity(text.len());
        out.push_str(&text[..start]);
        let mut last = 0;
        for (i, caps) in re.captures_iter(tail).enumerate() {
            if nth > 0 && i as i64 + 1 != nth {
                continue;
            }
            let Some(m) = caps.get(0) else { continue };
            out.push_str(&tail[last..m.start()]);
            caps.expand(&with, &mut out);
            last = m.end();
            if nth > 0 {
                break;
            }
        }
        out.push_str(&tail[last..]);
        Value::Str(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        Value::Str(x.into())
    }

    #[test]
    fn like_is_case_sensitive_unless_asked() {
        assert_eq!(like(&[s("Apple pie"), s("^app")]).unwrap(), Value::Int(0));
        assert_eq!(like(&[s("Apple pie"), s("^app"), s("i")]).unwrap(), Value::Int(1));
        assert_eq!(like(&[s("Apple pie"), s("^app"), s("ic")]).unwrap(), Value::Int(0));
        assert_eq!(like(&[s("a1"), s("[[:digit:]]$")]).unwrap(), Value::Int(1));
        assert_eq!(like(&[Value::Null, s("a")]).unwrap(), Value::Null);
        assert_eq!(like(&[s("a\nb"), s("^b$")]).unwrap(), Value::Int(0));
        assert_eq!(like(&[s("a\nb"), s("^b$"), s("m")]).unwrap(), Value::Int(1));
    }

    #[test]
    fn bad_patterns_and_arguments_are_errors() {
        let e = like(&[s("a"), s("(a")]).unwrap_err();
        assert_eq!(e.code, ER_REGEXP_ILLEGAL_ARGUMENT);
        assert_eq!(like(&[s("a"), s("a"), s("x")]).unwrap_err().code, crate::error::ER_WRONG_ARGUMENTS);
        // A pattern too big to compile is refused, not built for minutes.
        assert_eq!(like(&[s("a"), s("((a{1000}){1000}){1000}")]).unwrap_err().code, ER_REGEXP_ILLEGAL_ARGUMENT);
        // Look-around is not in the engine: a clear error.
        let e = like(&[s("ab"), s("a(?=b)")]).unwrap_err();
        assert!(e.message.contains("Illegal argument"), "{}", e.message);
        assert_eq!(substr(&[s("abc"), s("b"), Value::Int(5)]).unwrap_err().code, ER_REGEXP_INDEX_OUTOFBOUNDS);
        assert_eq!(substr(&[s("abc"), s("b"), Value::Int(0)]).unwrap_err().code, ER_REGEXP_INDEX_OUTOFBOUNDS);
    }

    #[test]
    fn positions_count_characters() {
        let text = s("dög cat dog");
        assert_eq!(instr(&[text.clone(), s("d.g")]).unwrap(), Value::Int(1));
        assert_eq!(instr(&[text.clone(), s("d.g"), Value::Int(2)]).unwrap(), Value::Int(9));
        assert_eq!(
            instr(&[text.clone(), s("d.g"), Value::Int(1), Value::Int(2), Value::Int(1)]).unwrap(),
            Value::Int(12)
        );
        assert_eq!(instr(&[text.clone(), s("x")]).unwrap(), Value::Int(0));
        assert_eq!(substr(&[text.clone(), s("[a-z]+"), Value::Int(1), Value::Int(2)]).unwrap(), s("g"));
        assert_eq!(substr(&[text.clone(), s("c[a-z]+")]).unwrap(), s("cat"));
        assert_eq!(substr(&[text, s("z")]).unwrap(), Value::Null);
    }

    #[test]
    fn replace_all_or_one_occurrence() {
        let text = s("a1 b22 c333");
        assert_eq!(replace(&[text.clone(), s("[0-9]+"), s("#")]).unwrap(), s("a# b# c#"));
        assert_eq!(
            replace(&[text.clone(), s("[0-9]+"), s("#"), Value::Int(1), Value::Int(2)]).unwrap(),
            s("a1 b# c333")
        );
        assert_eq!(replace(&[text.clone(), s("[0-9]+"), s("#"), Value::Int(4)]).unwrap(), s("a1 b# c#"));
        assert_eq!(replace(&[text, s("([a-z])([0-9])"), s("$2$1")]).unwrap(), s("1a 2b2 3c33"));
        assert_eq!(replace(&[s(""), s("^$"), s("#")]).unwrap(), s(""));
        assert_eq!(replace(&[s("a"), s("^"), s("#")]).unwrap(), s("#a"));
    }
}
