//! Collations of text columns: how two strings compare.
//!
//! `Bin` (utf8mb4_bin) compares bytes. `GeneralCi` (utf8mb4_general_ci, the
//! collation MariaDB gives utf8mb4 by default) compares every character by
//! its weight: its upper-case letter with accents removed ('a' = 'A' = 'á',
//! 'ß' = 's'), as MariaDB's WEIGHT_STRING reports for each character of the
//! Basic Multilingual Plane (`collation_table.rs`). Characters beyond it
//! (emoji and the like) weigh as themselves, where MariaDB gives them all one
//! weight. Both collations PAD SPACE: trailing spaces do not count.
//!
//! A case-insensitive comparison is a byte comparison of the two folded
//! texts (`fold`), because a folded text's UTF-8 bytes sort in weight
//! order. Keys of case-insensitive columns are encoded folded
//! (`keycodec`), so a primary key, a unique index, an ordered index and a
//! row's partition all treat 'Alice' and 'ALICE' as one value, while the row
//! keeps the text as written.

use crate::collation_table::GENERAL_CI;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Collation {
    #[default]
    Bin,
    GeneralCi,
}

impl Collation {
    /// The collation a name given in SQL stands for: `binary` and every
    /// `_bin` collation of a character set latsdb accepts compare bytes;
    /// the general and Unicode case-insensitive ones of utf8mb4 and utf8mb3
    /// (and latin1's and ascii's defaults) are `GeneralCi`, whose rules
    /// they share for Latin, Greek and Cyrillic case and accents (text is
    /// stored as utf8mb4 whatever the character set). The case- and
    /// accent-sensitive ones (`latin1_general_cs`, `utf8mb4_0900_as_cs`,
    /// `utf8mb4_0900_bin`) are `Bin`: they hold equal exactly the texts
    /// bytes hold equal, though they order 'a' before 'B' where bytes put
    /// 'B' first. Language collations (swedish, turkish, ...) and the
    /// accent-sensitive case-insensitive ones are not offered: their rules
    /// differ.
    pub fn named(name: &str) -> Option<Collation> {
        let name = name.to_ascii_lowercase();
        if name == "binary" {
            return Some(Collation::Bin);
        }
        let (charset, rest) = name.split_once('_')?;
        if Collation::of_charset(charset).is_none() || charset == "binary" {
            return None;
        }
        let unicode = matches!(charset, "utf8mb4" | "utf8mb3" | "utf8");
        match rest {
            "bin" | "general_cs" => Some(Collation::Bin),
            "0900_as_cs" | "0900_bin" if unicode => Some(Collation::Bin),
            "general_ci" => Some(Collation::GeneralCi),
            "unicode_ci" | "unicode_520_ci" | "0900_ai_ci" | "uca1400_ai_ci" if unicode => Some(Collation::GeneralCi),
            "swedish_ci" if charset == "latin1" => Some(Collation::GeneralCi),
            _ => None,
        }
    }

    /// The default collation of a character set, as MySQL and MariaDB have
    /// them: case-insensitive for every text character set.
    pub fn of_charset(name: &str) -> Option<Collation> {
        match name.to_ascii_lowercase().as_str() {
            "utf8mb4" | "utf8mb3" | "utf8" | "latin1" | "ascii" => Some(Collation::GeneralCi),
            "binary" => Some(Collation::Bin),
            _ => None,
        }
    }

    /// The name SHOW CREATE TABLE and information_schema print.
    pub fn name(self) -> &'static str {
        match self {
            Collation::Bin => "utf8mb4_bin",
            Collation::GeneralCi => "utf8mb4_general_ci",
        }
    }

    pub fn is_case_insensitive(self) -> bool {
        self == Collation::GeneralCi
    }

    /// The text whose bytes compare as `text` does under this collation
    /// (trailing spaces kept: comparisons PAD SPACE, LIKE does not).
    pub fn fold(self, text: &str) -> Cow<'_, str> {
        match self {
            Collation::Bin => Cow::Borrowed(text),
            Collation::GeneralCi => fold_general_ci(text),
        }
    }
}

impl Collation {
    /// A value as comparisons under this collation see it: text folded
    /// (`fold`), other values unchanged.
    pub fn fold_value(self, value: crate::Value) -> crate::Value {
        match value {
            crate::Value::Str(s) => match self.fold(&s) {
                Cow::Borrowed(_) => crate::Value::Str(s),
                Cow::Owned(folded) => crate::Value::Str(folded),
            },
            other => other,
        }
    }

    /// One character as comparisons under this collation see it (`fold`
    /// is this applied to every character).
    pub fn fold_char(self, c: char) -> char {
        match self {
            Collation::Bin => c,
            Collation::GeneralCi => weight(c),
        }
    }

    /// The text every text comparing equal to `text` shares: folded and
    /// without trailing spaces (PAD SPACE); a key's and a group's form.
    pub fn weight(self, text: &str) -> Cow<'_, str> {
        match self.fold(text) {
            Cow::Borrowed(t) => Cow::Borrowed(t.trim_end_matches(' ')),
            Cow::Owned(mut t) => {
                t.truncate(t.trim_end_matches(' ').len());
                Cow::Owned(t)
            }
        }
    }
}

fn fold_general_ci(text: &str) -> Cow<'_, str> {
    let unchanged = |c: char| if c.is_ascii() { !c.is_ascii_lowercase() } else { weight(c) == c };
    match text.char_indices().find(|&(_, c)| !unchanged(c)) {
        None => Cow::Borrowed(text),
        Some((at, _)) => {
            let mut out = String::with_capacity(text.len());
            out.push_str(&text[..at]);
            out.extend(text[at..].chars().map(weight));
            Cow::Owned(out)
        }
    }
}

/// One character's utf8mb4_general_ci weight, as a character.
fn weight(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    let Ok(code) = u16::try_from(c as u32) else { return c };
    match GENERAL_CI.binary_search_by_key(&code, |&(from, _)| from) {
        Ok(i) => char::from_u32(GENERAL_CI[i].1 as u32).unwrap_or(c),
        Err(_) => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_the_two_collations() {
        assert_eq!(Collation::named("utf8mb4_bin"), Some(Collation::Bin));
        assert_eq!(Collation::named("UTF8MB4_GENERAL_CI"), Some(Collation::GeneralCi));
        assert_eq!(Collation::named("latin1_general_cs"), Some(Collation::Bin));
        assert_eq!(Collation::named("utf8mb4_0900_as_cs"), Some(Collation::Bin));
        assert_eq!(Collation::named("utf8mb4_0900_as_ci"), None);
        assert_eq!(Collation::named("latin1_0900_as_cs"), None);
        assert_eq!(Collation::named("utf8mb4_0900_ai_ci"), Some(Collation::GeneralCi));
        assert_eq!(Collation::named("utf8_unicode_ci"), Some(Collation::GeneralCi));
        assert_eq!(Collation::named("latin1_swedish_ci"), Some(Collation::GeneralCi));
        assert_eq!(Collation::named("binary"), Some(Collation::Bin));
        assert_eq!(Collation::named("utf8mb4_turkish_ci"), None, "a language's own rules are not general_ci's");
        assert_eq!(Collation::named("utf8mb4_klingon_ci"), None);
        assert_eq!(Collation::named("koi8r_general_ci"), None);
        assert_eq!(Collation::of_charset("UTF8MB4"), Some(Collation::GeneralCi));
    }

    #[test]
    fn general_ci_folds_case_and_accents_as_mariadb_weighs_them() {
        let ci = Collation::GeneralCi;
        assert_eq!(ci.fold("Alice"), "ALICE");
        assert!(matches!(ci.fold("ALICE 42"), Cow::Borrowed(_)), "nothing to fold, nothing copied");
        assert_eq!(ci.fold("Crème Brûlée"), "CREME BRULEE");
        assert_eq!(ci.fold("straße"), "STRASSE".replace("SS", "S"));
        assert_eq!(ci.fold("ёлка"), "ЕЛКА");
        assert_eq!(ci.fold("ÆØǼ"), "ÆØÆ");
        assert_eq!(ci.fold("a😀"), "A😀", "beyond the BMP a character weighs as itself");
        assert_eq!(Collation::Bin.fold("Alice"), "Alice");
        assert_eq!(ci.weight("Crème  "), "CREME");
        assert_eq!(Collation::Bin.weight("a  "), "a");
    }

    #[test]
    fn the_table_is_sorted_for_binary_search() {
        assert!(GENERAL_CI.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(GENERAL_CI
            .iter()
            .all(|&(c, w)| char::from_u32(c as u32).is_some() && char::from_u32(w as u32).is_some()));
    }
}
