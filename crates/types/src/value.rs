//! Typed values as they cross the client API and the wire, coercion of a
//! value into a column's type (with clear errors), and SQL-style comparison.

use crate::error::{DbError, Result};
use crate::schema::{ColumnDef, ColumnType, MAX_LOB_BYTES};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

/// A fixed-point number: `unscaled * 10^-scale`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decimal {
    pub unscaled: i128,
    pub scale: u8,
}

const POW10: [i128; 39] = {
    let mut table = [1i128; 39];
    let mut i = 1;
    while i < 39 {
        table[i] = table[i - 1] * 10;
        i += 1;
    }
    table
};

impl Decimal {
    pub fn new(unscaled: i128, scale: u8) -> Self {
        Decimal { unscaled, scale }
    }

    /// Re-expresses the number with another scale; None when digits would be
    /// lost or the result overflows.
    /// A DOUBLE as MySQL converts it: through its shortest decimal text
    /// (0.25, not 0.2499999...). None when that has too many digits.
    pub fn of_double(f: f64) -> Option<Decimal> {
        Decimal::parse(&format!("{f}"))
    }

    pub fn rescale(self, scale: u8) -> Option<Decimal> {
        // Scales above 38 come only from bad input; they cannot be rescaled.
        if scale as usize >= POW10.len() || self.scale as usize >= POW10.len() {
            return (self.unscaled == 0).then_some(Decimal { unscaled: 0, scale });
        }
        if scale >= self.scale {
            let factor = POW10[(scale - self.scale) as usize];
            self.unscaled.checked_mul(factor).map(|u| Decimal { unscaled: u, scale })
        } else {
            let factor = POW10[(self.scale - scale) as usize];
            if self.unscaled % factor != 0 {
                // Round half away from zero, as MySQL does on insert.
                let q = self.unscaled / factor;
                let r = (self.unscaled % factor).abs();
                let q = if r * 2 >= factor { q + self.unscaled.signum() } else { q };
                return Some(Decimal { unscaled: q, scale });
            }
            Some(Decimal { unscaled: self.unscaled / factor, scale })
        }
    }

    pub fn to_f64(self) -> f64 {
        self.unscaled as f64 / 10f64.powi(self.scale as i32)
    }

    /// Number of decimal digits of the integer part plus scale.
    pub fn digits(self) -> u32 {
        let mut n = self.unscaled.unsigned_abs();
        let mut d = 0;
        while n > 0 {
            n /= 10;
            d += 1;
        }
        d.max(1)
    }

    pub fn parse(text: &str) -> Option<Decimal> {
        let text = text.trim();
        let (neg, body) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (int_part, frac_part) = match body.split_once('.') {
            Some((i, f)) => (i, f),
            None => (body, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        if !int_part.bytes().all(|b| b.is_ascii_digit()) || !frac_part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if frac_part.len() > 38 {
            return None;
        }
        let mut unscaled: i128 = 0;
        for b in int_part.bytes().chain(frac_part.bytes()) {
            unscaled = unscaled.checked_mul(10)?.checked_add((b - b'0') as i128)?;
        }
        if neg {
            unscaled = -unscaled;
        }
        Some(Decimal { unscaled, scale: frac_part.len() as u8 })
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.unscaled < 0 { "-" } else { "" };
        let digits = self.unscaled.unsigned_abs().to_string();
        let scale = self.scale as usize;
        if scale == 0 {
            return write!(f, "{sign}{digits}");
        }
        // Works for any scale, including ones larger than i128 has digits.
        let padded =
            if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale + 1 - digits.len())) } else { digits };
        let (int_part, frac_part) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{int_part}.{frac_part}")
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    UInt(u64),
    /// FLOAT and DOUBLE.
    Float(f64),
    Decimal(Decimal),
    Str(String),
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since 1970-01-01 00:00:00.
    DateTime(i64),
    /// Microseconds since the Unix epoch, UTC.
    Timestamp(i64),
    Bool(bool),
    /// A TIME: signed microseconds (see [`crate::mysql_types`]).
    Time(i64),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Int(_) => "integer",
            Value::UInt(_) => "unsigned integer",
            Value::Float(_) => "float",
            Value::Decimal(_) => "decimal",
            Value::Str(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::Date(_) => "date",
            Value::DateTime(_) => "datetime",
            Value::Timestamp(_) => "timestamp",
            Value::Bool(_) => "boolean",
            Value::Time(_) => "time",
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Int(v) => Some(v),
            Value::UInt(v) => i64::try_from(v).ok(),
            Value::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Int(v) => u64::try_from(v).ok(),
            Value::UInt(v) => Some(v),
            Value::Bool(b) => Some(b as u64),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(v) => Some(v as f64),
            Value::UInt(v) => Some(v as f64),
            Value::Float(v) => Some(v),
            Value::Decimal(d) => Some(d.to_f64()),
            Value::Bool(b) => Some(b as i64 as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Str(s) => Some(s.as_bytes()),
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    fn as_decimal(&self) -> Option<Decimal> {
        match *self {
            Value::Int(v) => Some(Decimal::new(v as i128, 0)),
            Value::UInt(v) => Some(Decimal::new(v as i128, 0)),
            Value::Decimal(d) => Some(d),
            Value::Bool(b) => Some(Decimal::new(b as i128, 0)),
            _ => None,
        }
    }

    fn is_numeric(&self) -> bool {
        matches!(self, Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Decimal(_) | Value::Bool(_))
    }

    /// SQL comparison. None when either side is NULL or the types cannot be
    /// compared.
    pub fn sql_cmp(&self, other: &Value) -> Option<Ordering> {
        use Value::*;
        match (self, other) {
            (Null, _) | (_, Null) => None,
            (Int(a), Int(b)) => Some(a.cmp(b)),
            (UInt(a), UInt(b)) => Some(a.cmp(b)),
            (Int(a), UInt(b)) => Some((*a as i128).cmp(&(*b as i128))),
            (UInt(a), Int(b)) => Some((*a as i128).cmp(&(*b as i128))),
            (Str(a), Str(b)) => Some(pad_space_cmp(a.as_bytes(), b.as_bytes())),
            (Bytes(a), Bytes(b)) => Some(a.cmp(b)),
            (Str(a), Bytes(b)) => Some(a.as_bytes().cmp(b)),
            (Bytes(a), Str(b)) => Some(a.as_slice().cmp(b.as_bytes())),
            (Date(a), Date(b)) => Some(a.cmp(b)),
            (DateTime(a), DateTime(b)) | (Timestamp(a), Timestamp(b)) => Some(a.cmp(b)),
            (Date(a), DateTime(b)) => Some((*a as i64 * 86_400_000_000).cmp(b)),
            (DateTime(a), Date(b)) => Some(a.cmp(&(*b as i64 * 86_400_000_000))),
            (Bool(a), Bool(b)) => Some(a.cmp(b)),
            (Time(a), Time(b)) => Some(a.cmp(b)),
            (a, b) if a.is_numeric() && b.is_numeric() => {
                if let (Some(x), Some(y)) = (a.as_decimal(), b.as_decimal()) {
                    let scale = x.scale.max(y.scale);
                    if let (Some(x), Some(y)) = (x.rescale(scale), y.rescale(scale)) {
                        return Some(x.unscaled.cmp(&y.unscaled));
                    }
                }
                a.as_f64()?.partial_cmp(&b.as_f64()?)
            }
            _ => None,
        }
    }
}

/// Text as MySQL's utf8mb4_bin compares it: byte by byte, the shorter
/// side read as padded with spaces (PAD SPACE), so 'a' = 'a  '.
pub fn pad_space_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    match a[..n].cmp(&b[..n]) {
        Ordering::Equal => {}
        other => return other,
    }
    let beyond = |rest: &[u8]| rest.iter().find(|&&c| c != b' ').map_or(Ordering::Equal, |c| c.cmp(&b' '));
    if a.len() > n {
        beyond(&a[n..])
    } else {
        beyond(&b[n..]).reverse()
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => write!(f, "NULL"),
            Value::Int(v) => write!(f, "{v}"),
            Value::UInt(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Decimal(d) => write!(f, "{d}"),
            Value::Str(s) => write!(f, "{s}"),
            Value::Bytes(b) => {
                write!(f, "0x")?;
                for byte in b {
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
            Value::Date(d) => write!(f, "{}", crate::value::format_date(*d)),
            Value::DateTime(us) | Value::Timestamp(us) => write!(f, "{}", format_datetime(*us)),
            Value::Bool(b) => write!(f, "{}", *b as u8),
            Value::Time(us) => write!(f, "{}", crate::mysql_types::format_time(*us, None)),
        }
    }
}

/// Civil date from days since 1970-01-01 (proleptic Gregorian).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Days since 1970-01-01 of a civil date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub fn format_date(days: i32) -> String {
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

pub fn format_datetime(micros: i64) -> String {
    let days = micros.div_euclid(86_400_000_000);
    let rest = micros.rem_euclid(86_400_000_000);
    let (y, m, d) = civil_from_days(days);
    let secs = rest / 1_000_000;
    let frac = rest % 1_000_000;
    let base = format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
    if frac == 0 {
        base
    } else {
        format!("{base}.{frac:06}")
    }
}

/// A date and time with exactly `digits` digits of a second, as MySQL
/// shows a DATETIME(`digits`) column ('2026-11-27 10:00:00.500' for 3).
pub fn format_datetime_digits(micros: i64, digits: u8) -> String {
    let seconds = micros.div_euclid(1_000_000);
    let whole = format_datetime(seconds * 1_000_000);
    if digits == 0 {
        return whole;
    }
    let digits = digits.min(6);
    let fraction = micros.rem_euclid(1_000_000) / 10i64.pow(6 - u32::from(digits));
    format!("{whole}.{fraction:0width$}", width = usize::from(digits))
}

/// A value of column `column` as text, temporal values with the column's
/// digits of a second (MySQL shows a DATETIME(3) as '... 10:00:00.500'
/// and a TIME as '10:00:00'), or all six where the value holds finer ones
/// (the native client stores what it is given, unrounded): text never
/// hides what is stored. None for values not temporal.
pub fn temporal_text(value: &Value, column: &ColumnDef) -> Option<String> {
    let micros = match value {
        Value::DateTime(us) | Value::Timestamp(us) | Value::Time(us) => *us,
        _ => return None,
    };
    let declared = column.fraction_digits.min(6);
    let step = 10i64.pow(6 - u32::from(declared));
    let digits = if micros % step == 0 { declared } else { 6 };
    match value {
        Value::DateTime(us) | Value::Timestamp(us) => Some(format_datetime_digits(*us, digits)),
        Value::Time(us) => Some(crate::mysql_types::format_time(*us, Some(digits))),
        _ => None,
    }
}

/// Parses a date as MySQL reads one from a string: `YYYY-MM-DD` with any
/// punctuation character between the parts ('2024:02:29', '2024/2/29'),
/// a two-digit year (70-99 in the 1900s, 00-69 in the 2000s), or the
/// digits alone (`YYYYMMDD`, `YYMMDD`).
pub fn parse_date(text: &str) -> Option<i32> {
    let text = text.trim();
    let (y, m, d, year_digits) = if text.bytes().all(|b| b.is_ascii_digit()) {
        let (y, rest) = match text.len() {
            8 => text.split_at(4),
            6 => text.split_at(2),
            _ => return None,
        };
        (y.parse().ok()?, rest[..2].parse().ok()?, rest[2..].parse().ok()?, y.len())
    } else {
        let (parts, seps) = digit_runs(text)?;
        if parts.len() != 3 || seps.iter().any(|s| !s.is_ascii_punctuation()) {
            return None;
        }
        (parts[0].parse().ok()?, parts[1].parse().ok()?, parts[2].parse().ok()?, parts[0].len())
    };
    civil_days(full_year(y, year_digits), m, d)
}

/// A year as written with `digits` digits: two or fewer are MySQL's
/// two-digit years.
fn full_year(y: i64, digits: usize) -> i64 {
    match (digits, y) {
        (0..=2, 70..) => 1900 + y,
        (0..=2, _) => 2000 + y,
        _ => y,
    }
}

/// Days since 1970-01-01 of a valid date in years 0-9999.
fn civil_days(y: i64, m: u32, d: u32) -> Option<i32> {
    if !(1..=12).contains(&m) || d == 0 || d > 31 || !(0..=9999).contains(&y) {
        return None;
    }
    let days = days_from_civil(y, m, d);
    // Reject dates such as 2023-02-30 that do not round-trip.
    (civil_from_days(days) == (y, m, d)).then_some(days as i32)
}

/// The runs of digits of `text` and the single characters between them
/// (None when it does not start and end with a digit, or two characters
/// separate two runs).
fn digit_runs(text: &str) -> Option<(Vec<&str>, Vec<char>)> {
    let mut parts = Vec::new();
    let mut seps = Vec::new();
    let mut rest = text;
    loop {
        let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        parts.push(&rest[..end]);
        rest = &rest[end..];
        let mut chars = rest.chars();
        match chars.next() {
            None => return Some((parts, seps)),
            Some(c) => {
                seps.push(c);
                rest = chars.as_str();
            }
        }
    }
}

/// Parses a date and time as MySQL reads one from a string: a date as
/// `parse_date` reads it, then a space or `T`, then the time with any
/// punctuation between hours, minutes and seconds and a `.` before the
/// fraction (digits past the sixth dropped); or the digits alone
/// (`YYYYMMDDhhmmss`, `YYMMDDhhmmss`, either with a fraction).
pub fn parse_datetime(text: &str) -> Option<i64> {
    let text = text.trim();
    // The digits alone may have a fraction: '20210304101112.5'.
    let (digits, fraction) = match text.split_once('.') {
        Some((d, f)) if d.len() >= 12 && d.bytes().all(|b| b.is_ascii_digit()) => (d, Some(f)),
        _ => (text, None),
    };
    let (date, time) = if digits.len() >= 12 && digits.bytes().all(|b| b.is_ascii_digit()) {
        let date_len = digits.len() - 6;
        let (hh, mm, ss) =
            (&digits[date_len..date_len + 2], &digits[date_len + 2..date_len + 4], &digits[date_len + 4..]);
        let time = match fraction {
            Some(f) => format!("{hh}:{mm}:{ss}.{f}"),
            None => format!("{hh}:{mm}:{ss}"),
        };
        (&digits[..date_len], Some(time))
    } else {
        match text.find([' ', 'T']) {
            Some(pos) => (&text[..pos], Some(text[pos + 1..].to_string())),
            None => (text, None),
        }
    };
    let days = parse_date(date)? as i64;
    // MySQL skips any run of spaces and punctuation between the date and
    // the time ('1111-11-11 -11:11:11' is 11:11:11).
    let time = match time {
        Some(time) => {
            time_of_day(time.trim_start_matches(|c: char| c.is_ascii_punctuation() || c.is_whitespace()).trim())?
        }
        None => 0,
    };
    Some(days * 86_400_000_000 + time)
}

/// Microseconds since midnight of `hh:mm[:ss][.ffffff]`, any punctuation
/// between the parts and `.` before the fraction.
fn time_of_day(time: &str) -> Option<i64> {
    let (mut parts, seps) = digit_runs(time)?;
    let frac = if parts.len() == 4 {
        if seps[2] != '.' {
            return None;
        }
        parts.pop()
    } else {
        None
    };
    if !(2..=3).contains(&parts.len()) || seps[..parts.len() - 1].iter().any(|s| !s.is_ascii_punctuation()) {
        return None;
    }
    let h: i64 = parts[0].parse().ok()?;
    let mi: i64 = parts[1].parse().ok()?;
    let s: i64 = parts.get(2).map_or(Some(0), |s| s.parse().ok())?;
    if h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let mut micros = (h * 3600 + mi * 60 + s) * 1_000_000;
    if let Some(frac) = frac {
        // Digits past the sixth are dropped, as MariaDB does.
        let frac = &frac[..frac.len().min(6)];
        let f: i64 = frac.parse().ok()?;
        micros += f * 10i64.pow(6 - frac.len() as u32);
    }
    Some(micros)
}

fn mismatch(value: &Value, column: &ColumnDef) -> DbError {
    DbError::type_error(format!(
        "column '{}' is {} but the value is {} ({})",
        column.name,
        column.ty.sql_name(),
        value.type_name(),
        truncate_for_message(&value.to_string())
    ))
}

fn truncate_for_message(text: &str) -> String {
    if text.len() <= 40 {
        return text.to_string();
    }
    let mut end = 40;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Converts a value into the canonical representation of the column's type,
/// or explains why it does not fit. NULL is accepted only for nullable columns.
/// What text column `column` keeps of `s` (a prefix of it), or why `s`
/// does not fit: MySQL returns a CHAR without its trailing spaces, and cuts
/// spaces beyond a VARCHAR's length without complaint.
pub fn fit_text<'s>(s: &'s str, column: &ColumnDef) -> Result<&'s str> {
    let n = match column.ty {
        ColumnType::Char(n) | ColumnType::VarChar(n) => n as usize,
        ColumnType::Text if s.len() <= MAX_LOB_BYTES => return Ok(s),
        ColumnType::Text => {
            return Err(DbError::type_error(format!(
                "value of {} bytes is larger than the {MAX_LOB_BYTES}-byte limit of column '{}'",
                s.len(),
                column.name
            )))
        }
        _ => return Err(mismatch(&Value::Str(s.to_string()), column)),
    };
    let mut s = s;
    if matches!(column.ty, ColumnType::Char(_)) {
        s = s.trim_end_matches(' ');
    }
    let mut chars = s.chars().count();
    if chars > n && s[s.trim_end_matches(' ').len()..].len() >= chars - n {
        s = &s[..s.len() - (chars - n)];
        chars = n;
    }
    if chars > n {
        return Err(DbError::type_error(format!(
            "value of {chars} characters is too long for column '{}' ({})",
            column.name,
            column.ty.sql_name()
        )));
    }
    Ok(s)
}

pub fn coerce(value: Value, column: &ColumnDef) -> Result<Value> {
    if value.is_null() {
        if column.nullable {
            return Ok(Value::Null);
        }
        return Err(DbError::type_error(format!("column '{}' cannot be NULL", column.name)));
    }
    let out_of_range = |v: &dyn fmt::Display| {
        DbError::type_error(format!(
            "value {v} is out of range for column '{}' ({})",
            column.name,
            column.ty.sql_name()
        ))
    };
    match column.ty {
        ColumnType::Integer { width, unsigned } => {
            let wide: i128 = match &value {
                Value::Int(v) => *v as i128,
                Value::UInt(v) => *v as i128,
                Value::Bool(b) => *b as i128,
                Value::Decimal(d) if d.rescale(0).is_some_and(|r| r.rescale(d.scale) == Some(*d)) => {
                    d.rescale(0).map(|r| r.unscaled).unwrap_or_default()
                }
                _ => return Err(mismatch(&value, column)),
            };
            if unsigned {
                if wide < 0 || wide > width.unsigned_max() as i128 {
                    return Err(out_of_range(&value));
                }
                Ok(Value::UInt(wide as u64))
            } else {
                let (lo, hi) = width.signed_range();
                if wide < lo as i128 || wide > hi as i128 {
                    return Err(out_of_range(&value));
                }
                Ok(Value::Int(wide as i64))
            }
        }
        ColumnType::Float | ColumnType::Double => {
            let v = value.as_f64().ok_or_else(|| mismatch(&value, column))?;
            if !v.is_finite() {
                return Err(out_of_range(&value));
            }
            if column.ty == ColumnType::Float {
                if v.abs() > f32::MAX as f64 {
                    return Err(out_of_range(&value));
                }
                return Ok(Value::Float(v as f32 as f64));
            }
            Ok(Value::Float(v))
        }
        ColumnType::Decimal { precision, scale } => {
            let d = match &value {
                Value::Float(f) => {
                    if !f.is_finite() {
                        return Err(out_of_range(&value));
                    }
                    // MySQL converts a DOUBLE through its shortest decimal
                    // text (0.25, not 0.2499999...), then rounds half away
                    // from zero like any DECIMAL: 0.25 into DECIMAL(4,1) is 0.3.
                    match Decimal::of_double(*f) {
                        Some(d) => d,
                        None if f.abs() < 1.0 => {
                            Decimal::parse(&format!("{f:.*}", scale as usize)).ok_or_else(|| out_of_range(&value))?
                        }
                        None => return Err(out_of_range(&value)),
                    }
                }
                Value::Str(s) => Decimal::parse(s).ok_or_else(|| mismatch(&value, column))?,
                other => other.as_decimal().ok_or_else(|| mismatch(&value, column))?,
            };
            let d = d.rescale(scale).ok_or_else(|| out_of_range(&value))?;
            if d.digits() > precision as u32 {
                return Err(out_of_range(&value));
            }
            Ok(Value::Decimal(d))
        }
        ColumnType::Char(_) | ColumnType::VarChar(_) | ColumnType::Text => match value {
            Value::Str(mut s) => {
                let kept = fit_text(&s, column)?.len();
                s.truncate(kept);
                Ok(Value::Str(s))
            }
            other => Err(mismatch(&other, column)),
        },
        ColumnType::Binary(_) | ColumnType::VarBinary(_) | ColumnType::Blob => {
            let bytes = match value {
                Value::Bytes(b) => b,
                Value::Str(s) => s.into_bytes(),
                other => return Err(mismatch(&other, column)),
            };
            let mut bytes = bytes;
            let limit = match column.ty {
                ColumnType::Binary(n) | ColumnType::VarBinary(n) => n as usize,
                _ => MAX_LOB_BYTES,
            };
            if bytes.len() > limit {
                return Err(DbError::type_error(format!(
                    "value of {} bytes is too long for column '{}' ({})",
                    bytes.len(),
                    column.name,
                    column.ty.sql_name()
                )));
            }
            // MySQL pads a BINARY(n) value with zero bytes to n bytes.
            if let ColumnType::Binary(n) = column.ty {
                bytes.resize(n as usize, 0);
            }
            Ok(Value::Bytes(bytes))
        }
        ColumnType::Date => match value {
            Value::Date(d) => Ok(Value::Date(d)),
            Value::Str(ref s) => parse_date(s).map(Value::Date).ok_or_else(|| mismatch(&value, column)),
            other => Err(mismatch(&other, column)),
        },
        ColumnType::DateTime | ColumnType::Timestamp => {
            let micros = match value {
                Value::DateTime(us) | Value::Timestamp(us) => us,
                Value::Date(d) => d as i64 * 86_400_000_000,
                Value::Str(ref s) => parse_datetime(s).ok_or_else(|| mismatch(&value, column))?,
                other => return Err(mismatch(&other, column)),
            };
            Ok(if column.ty == ColumnType::DateTime { Value::DateTime(micros) } else { Value::Timestamp(micros) })
        }
        ColumnType::Boolean => match value {
            Value::Bool(b) => Ok(Value::Bool(b)),
            Value::Int(v) => Ok(Value::Bool(v != 0)),
            Value::UInt(v) => Ok(Value::Bool(v != 0)),
            other => Err(mismatch(&other, column)),
        },
        ColumnType::Time => crate::mysql_types::coerce_time(value, column),
        ColumnType::Year => crate::mysql_types::coerce_year(value, column),
        ColumnType::Bit(bits) => crate::mysql_types::coerce_bit(value, column, bits),
        ColumnType::Enum => crate::mysql_types::coerce_enum(value, column),
        ColumnType::Set => crate::mysql_types::coerce_set(value, column),
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Value {
        Value::Int(v as i64)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::UInt(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Str(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Str(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Value {
        Value::Bytes(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ColumnType, IntWidth};

    #[test]
    fn char_drops_trailing_spaces_and_varchar_cuts_extra_ones() {
        let char3 = ColumnDef::new("c", ColumnType::Char(3));
        assert_eq!(coerce(Value::Str("ab   ".into()), &char3).unwrap(), Value::Str("ab".into()));
        assert_eq!(coerce(Value::Str(" a ".into()), &char3).unwrap(), Value::Str(" a".into()));
        assert!(coerce(Value::Str("abcd".into()), &char3).is_err());
        let varchar3 = ColumnDef::new("v", ColumnType::VarChar(3));
        assert_eq!(coerce(Value::Str("ab ".into()), &varchar3).unwrap(), Value::Str("ab ".into()));
        assert_eq!(coerce(Value::Str("ab    ".into()), &varchar3).unwrap(), Value::Str("ab ".into()));
        assert!(coerce(Value::Str("ab  x".into()), &varchar3).is_err());
    }

    #[test]
    fn integer_ranges_are_enforced() {
        let col = ColumnDef::new("a", ColumnType::int(IntWidth::Tiny));
        assert_eq!(coerce(Value::Int(127), &col).unwrap(), Value::Int(127));
        assert_eq!(coerce(Value::Int(128), &col).unwrap_err().code, crate::ErrorCode::TypeError);
        let col = ColumnDef::new("a", ColumnType::uint(IntWidth::Big));
        assert_eq!(coerce(Value::Int(-1), &col).unwrap_err().code, crate::ErrorCode::TypeError);
        assert_eq!(coerce(Value::UInt(u64::MAX), &col).unwrap(), Value::UInt(u64::MAX));
    }

    #[test]
    fn strings_respect_length_and_type() {
        let col = ColumnDef::new("s", ColumnType::VarChar(3));
        assert!(coerce(Value::Str("äbc".into()), &col).is_ok());
        assert!(coerce(Value::Str("abcd".into()), &col).is_err());
        let err = coerce(Value::Int(5), &col).unwrap_err();
        assert!(err.message.contains("column 's' is VARCHAR(3)"), "{}", err.message);
    }

    #[test]
    fn decimals_parse_rescale_and_format() {
        let col = ColumnDef::new("d", ColumnType::Decimal { precision: 6, scale: 2 });
        assert_eq!(coerce(Value::Str("12.5".into()), &col).unwrap(), Value::Decimal(Decimal::new(1250, 2)));
        assert_eq!(Decimal::new(-1250, 2).to_string(), "-12.50");
        assert_eq!(Decimal::new(5, 3).to_string(), "0.005");
        // Scales beyond 38 arrive only as bad input; they must not panic.
        assert_eq!(Decimal::new(7, 64).to_string().len(), 66);
        assert_eq!(Decimal::new(7, 200).rescale(2), None);
        assert!(coerce(Value::Decimal(Decimal::new(7, 255)), &col).is_err());
        assert!(coerce(Value::Str("12345.5".into()), &col).is_err());
    }

    #[test]
    fn dates_round_trip() {
        // MySQL's relaxed forms.
        for text in ["2024:02:29", "2024/2/29", "24-02-29", "20240229", "240229", " 2024^02^29 "] {
            assert_eq!(parse_date(text), parse_date("2024-02-29"), "{text}");
        }
        assert_eq!(parse_date("99-12-31"), parse_date("1999-12-31"));
        for bad in ["2024-02", "2024--02-29", "2024-02-29x", "2024 02 29", "2024022", "", "x"] {
            assert!(parse_date(bad).is_none(), "{bad}");
        }
        assert_eq!(parse_datetime("2020/01/02 10.11.12"), parse_datetime("2020-01-02 10:11:12"));
        assert_eq!(parse_datetime("20210304101112"), parse_datetime("2021-03-04 10:11:12"));
        assert_eq!(parse_datetime("2021-3-4 1:2:3.5"), parse_datetime("2021-03-04 01:02:03.500000"));
        assert_eq!(parse_datetime("2021-03-04T10:11"), parse_datetime("2021-03-04 10:11:00"));
        assert_eq!(parse_datetime("20210304101112.5"), parse_datetime("2021-03-04 10:11:12.5"));
        assert_eq!(parse_datetime("1111-11-11 -11:11:11.5"), parse_datetime("1111-11-11 11:11:11.5"));
        assert_eq!(parse_datetime("1111-11-11  :11:11:11"), parse_datetime("1111-11-11 11:11:11"));
        assert_eq!(parse_datetime("2021-03-04 10:11:12.1234567"), parse_datetime("2021-03-04 10:11:12.123456"));
        for bad in ["2021-03-04 10:11:12:13", "2021-03-04 24:00:00", "2021-03-04 10:11:12.", "20210304101112.x"] {
            assert!(parse_datetime(bad).is_none(), "{bad}");
        }
        let d = parse_date("2024-02-29").unwrap();
        assert_eq!(format_date(d), "2024-02-29");
        assert!(parse_date("2023-02-29").is_none());
        let t = parse_datetime("1999-12-31 23:59:58.25").unwrap();
        assert_eq!(format_datetime(t), "1999-12-31 23:59:58.250000");
    }

    #[test]
    fn null_only_in_nullable_columns() {
        let col = ColumnDef::new("a", ColumnType::int(IntWidth::Int)).not_null();
        assert!(coerce(Value::Null, &col).is_err());
    }

    #[test]
    fn cross_type_numeric_comparison() {
        assert_eq!(Value::Int(-1).sql_cmp(&Value::UInt(0)), Some(Ordering::Less));
        assert_eq!(Value::Decimal(Decimal::new(150, 2)).sql_cmp(&Value::Int(1)), Some(Ordering::Greater));
        assert_eq!(Value::Null.sql_cmp(&Value::Int(1)), None);
        let text = |a: &str, b: &str| Value::Str(a.into()).sql_cmp(&Value::Str(b.into()));
        assert_eq!(text("a", "a  "), Some(Ordering::Equal));
        assert_eq!(text("a ", "a"), Some(Ordering::Equal));
        assert_eq!(text("a\t", "a"), Some(Ordering::Less));
        assert_eq!(text("a", "a\t"), Some(Ordering::Greater));
        assert_eq!(text("ab", "a "), Some(Ordering::Greater));
        assert_eq!(text("a b", "a"), Some(Ordering::Greater));
    }
}
