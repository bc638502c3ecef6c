//! MySQL's TIME, YEAR, BIT, ENUM and SET: how a value of each is read from
//! what a client gives, checked against the column, and shown.
//!
//! TIME values are `Value::Time` (signed microseconds); YEAR and BIT values
//! are unsigned integers (`Value::UInt`); ENUM and SET values are their text
//! (`Value::Str`), spelled as the column declares its members, a SET's
//! members in declared order. Keeping ENUM and SET as text lets data nodes,
//! the REST node and keys treat them as any text column; the price is that
//! they compare and sort as text, where MySQL sorts by member number.

use crate::error::{DbError, Result};
use crate::schema::ColumnDef;
use crate::value::{Decimal, Value};

/// The largest span a TIME holds either way: 838:59:59 (MySQL's range).
pub const MAX_TIME_MICROS: i64 = (838 * 3600 + 59 * 60 + 59) * 1_000_000;

/// Microseconds in a day.
pub const MICROS_PER_DAY: i64 = 86_400_000_000;

/// The TIMESTAMP range, in microseconds since 1970-01-01 00:00:00 UTC:
/// '1970-01-01 00:00:01' to '2038-01-19 03:14:07.999999', as MySQL's.
pub const TIMESTAMP_RANGE: std::ops::RangeInclusive<i64> = 1_000_000..=2_147_483_647_999_999;

/// A TIME as MySQL shows it: `[-]hh:mm:ss`, hours of two digits or more,
/// then `digits` digits of a second (`None`: six when there is a fraction,
/// as an expression's time shows).
pub fn format_time(micros: i64, digits: Option<u8>) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let magnitude = micros.unsigned_abs();
    let seconds = magnitude / 1_000_000;
    let fraction = magnitude % 1_000_000;
    let whole = format!("{sign}{:02}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60);
    let digits = match digits {
        Some(d) => d.min(6),
        None if fraction == 0 => 0,
        None => 6,
    };
    if digits == 0 {
        return whole;
    }
    let shown = fraction / 10u64.pow(6 - u32::from(digits));
    format!("{whole}.{shown:0width$}", width = usize::from(digits))
}

/// Reads a TIME as MySQL reads one from text: `[-][D ]hh:mm[:ss][.f]`
/// (D days, hours past 24 allowed), `[-][D ]hh`, the digits alone
/// (`hhmmss`, `mmss`, `ss`, each with a fraction), or a date and time, of
/// which the time of day is kept. None when it is none of these or lies
/// beyond 838:59:59 either way.
pub fn parse_time(text: &str) -> Option<i64> {
    let text = text.trim();
    if names_a_date(text) {
        let micros = crate::value::parse_datetime(text)?;
        return Some(micros.rem_euclid(MICROS_PER_DAY));
    }
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, text),
    };
    let (whole, fraction) = match body.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (body, None),
    };
    let seconds =
        if whole.contains(':') || whole.contains(' ') { clock_seconds(whole)? } else { digit_seconds(whole)? };
    let micros = seconds.checked_mul(1_000_000)?.checked_add(fraction_micros(fraction)?)?;
    if micros > MAX_TIME_MICROS {
        return None;
    }
    Some(if negative { -micros } else { micros })
}

/// Whether text read as a time names a date too: a part before a space
/// with more than digits in it ('2024-01-02 10:00'; '1 10:00' is a span of
/// days), or a date alone ('2024-01-02'; '-01:00:00' is a negative time).
pub fn names_a_date(text: &str) -> bool {
    let text = text.trim();
    let date_part = text.split_once([' ', 'T']).map(|(d, _)| d);
    date_part.is_some_and(|d| d.trim_start_matches('-').contains(|c: char| !c.is_ascii_digit()))
        || (text.contains('-') && !text.starts_with('-') && crate::value::parse_date(text).is_some())
}

/// Seconds of `[D ]hh[:mm[:ss]]`.
fn clock_seconds(text: &str) -> Option<i64> {
    let (days, clock) = match text.split_once(' ') {
        Some((d, c)) => (number(d)?, c.trim()),
        None => (0, text),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    if parts.len() > 3 || (days == 0 && parts.len() == 1 && !text.contains(' ')) {
        return None;
    }
    let hours = number(parts[0])?;
    let minutes = parts.get(1).map_or(Some(0), |p| number(p))?;
    let seconds = parts.get(2).map_or(Some(0), |p| number(p))?;
    if minutes > 59 || seconds > 59 || days > 34 {
        return None;
    }
    Some((days * 24 + hours) * 3600 + minutes * 60 + seconds)
}

/// Seconds of digits alone: the last two are seconds, the two before them
/// minutes, the rest hours.
fn digit_seconds(text: &str) -> Option<i64> {
    let n = number(text)?;
    let (hours, minutes, seconds) = (n / 10_000, n / 100 % 100, n % 100);
    if minutes > 59 || seconds > 59 {
        return None;
    }
    hours.checked_mul(3600)?.checked_add(minutes * 60 + seconds)
}

fn number(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 12 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Microseconds of the digits after a point (past the sixth dropped, as
/// MariaDB does).
fn fraction_micros(fraction: Option<&str>) -> Option<i64> {
    let Some(digits) = fraction else { return Some(0) };
    if digits.is_empty() {
        return Some(0);
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let kept = &digits[..digits.len().min(6)];
    Some(kept.parse::<i64>().ok()? * 10i64.pow(6 - kept.len() as u32))
}

fn mismatch(value: &Value, column: &ColumnDef) -> DbError {
    DbError::type_error(format!(
        "value {} is not a valid {} for column '{}'",
        shown(value),
        column.ty.sql_name(),
        column.name
    ))
}

fn out_of_range(value: &Value, column: &ColumnDef) -> DbError {
    DbError::type_error(format!(
        "value {} is out of range for column '{}' ({})",
        shown(value),
        column.name,
        column.ty.sql_name()
    ))
}

fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(40) {
        Some((end, _)) => format!("'{}...'", &text[..end]),
        None => format!("'{text}'"),
    }
}

/// A whole number a numeric value holds (a float rounded, as MySQL rounds
/// one written to an integer column); None for any other value.
fn whole_number(value: &Value) -> Option<i128> {
    match value {
        Value::Int(i) => Some(i128::from(*i)),
        Value::UInt(u) => Some(i128::from(*u)),
        Value::Bool(b) => Some(i128::from(*b)),
        Value::Decimal(d) => d.rescale(0).map(|r| r.unscaled),
        Value::Float(f) if f.is_finite() && f.abs() < 1e30 => Some(f.round() as i128),
        _ => None,
    }
}

/// A TIME column's value: a time, text MySQL reads as one, a number
/// written as `hhmmss[.f]`, or the time of day of a date and time.
pub fn coerce_time(value: Value, column: &ColumnDef) -> Result<Value> {
    let micros = match &value {
        Value::Time(us) => Some(*us).filter(|us| us.unsigned_abs() <= MAX_TIME_MICROS as u64),
        Value::DateTime(us) | Value::Timestamp(us) => Some(us.rem_euclid(MICROS_PER_DAY)),
        Value::Str(s) => parse_time(s),
        Value::Int(_) | Value::UInt(_) | Value::Decimal(_) => parse_time(&value.to_string()),
        Value::Float(f) if f.is_finite() => Decimal::of_double(*f).and_then(|d| parse_time(&d.to_string())),
        _ => return Err(mismatch(&value, column)),
    };
    let micros = micros.ok_or_else(|| mismatch(&value, column))?;
    debug_assert!(micros.unsigned_abs() <= MAX_TIME_MICROS as u64, "a TIME within its range");
    Ok(Value::Time(micros))
}

/// A YEAR column's value: 1901-2155 or 0, a number or text of one or two
/// digits being a year of 1970-2069 (text '0' is 2000, the number 0 is 0).
pub fn coerce_year(value: Value, column: &ColumnDef) -> Result<Value> {
    let (n, short_text) = match &value {
        Value::Str(s) => {
            let digits = s.trim();
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 4 {
                return Err(mismatch(&value, column));
            }
            (digits.parse::<i128>().map_err(|_| mismatch(&value, column))?, digits.len() <= 2)
        }
        // A date's year (MySQL takes YEAR(NOW()) from NOW()).
        Value::Date(d) => (i128::from(crate::value::civil_from_days(i64::from(*d)).0), false),
        Value::DateTime(us) | Value::Timestamp(us) => {
            (i128::from(crate::value::civil_from_days(us.div_euclid(MICROS_PER_DAY)).0), false)
        }
        other => (whole_number(other).ok_or_else(|| mismatch(&value, column))?, false),
    };
    let year = match n {
        0 if short_text => 2000,
        0 => 0,
        1..=69 => 2000 + n,
        70..=99 => 1900 + n,
        1901..=2155 => n,
        _ => return Err(out_of_range(&value, column)),
    };
    debug_assert!(year == 0 || (1901..=2155).contains(&year), "a YEAR within its range: {year}");
    Ok(Value::UInt(year as u64))
}

/// A BIT(n) column's value: a non-negative number of at most n bits, or
/// bytes (and text, as its bytes) read as a big-endian number, as MySQL
/// reads b'101' and x'05'.
pub fn coerce_bit(value: Value, column: &ColumnDef, bits: u8) -> Result<Value> {
    let n: u64 = match &value {
        Value::Bytes(b) => big_endian(b).ok_or_else(|| out_of_range(&value, column))?,
        Value::Str(s) => big_endian(s.as_bytes()).ok_or_else(|| out_of_range(&value, column))?,
        other => {
            let n = whole_number(other).ok_or_else(|| mismatch(&value, column))?;
            u64::try_from(n).map_err(|_| out_of_range(&value, column))?
        }
    };
    if bits < 64 && n >> bits != 0 {
        return Err(out_of_range(&value, column));
    }
    Ok(Value::UInt(n))
}

/// The number bytes spell big-endian (a BIT value, b'1010', x'0A'); None
/// past 8 significant bytes.
pub fn big_endian(bytes: &[u8]) -> Option<u64> {
    let significant = &bytes[bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len())..];
    if significant.len() > 8 {
        return None;
    }
    Some(significant.iter().fold(0u64, |n, &b| n << 8 | u64::from(b)))
}

/// The bytes of a BIT(n) value as MySQL sends them: big-endian, in
/// (n + 7) / 8 bytes.
pub fn bit_bytes(value: u64, bits: u8) -> Vec<u8> {
    let len = usize::from(bits.clamp(1, 64)).div_ceil(8);
    value.to_be_bytes()[8 - len..].to_vec()
}

/// The number (from 0) of the member `text` names, compared under the
/// column's collation with trailing spaces ignored.
fn member_number(column: &ColumnDef, text: &str) -> Option<usize> {
    let wanted = column.collation.fold(text.trim_end_matches(' '));
    column.members.iter().position(|m| column.collation.fold(m.trim_end_matches(' ')) == wanted)
}

/// An ENUM column's value: a member's text (spelled as declared), or its
/// number from 1. MySQL's strict mode refuses anything else, '' included.
pub fn coerce_enum(value: Value, column: &ColumnDef) -> Result<Value> {
    let number = match &value {
        // Text that names no member may be a member's number ('2'), as
        // MySQL reads it.
        Value::Str(s) => member_number(column, s).or_else(|| {
            s.trim().parse::<usize>().ok().and_then(|n| n.checked_sub(1)).filter(|&i| i < column.members.len())
        }),
        other => whole_number(other).and_then(|n| usize::try_from(n).ok()).and_then(|n| n.checked_sub(1)),
    };
    match number.and_then(|i| column.members.get(i)) {
        Some(member) => Ok(Value::Str(member.clone())),
        None => Err(not_a_member(&value, column)),
    }
}

/// A SET column's value: members' texts joined by commas (any order,
/// repeats allowed), or a number whose bit i names member i + 1; kept as
/// the members named, in declared order.
pub fn coerce_set(value: Value, column: &ColumnDef) -> Result<Value> {
    let mask = match &value {
        Value::Str(s) if s.is_empty() => 0u64,
        Value::Str(s) => {
            let mut mask = 0u64;
            for part in s.split(',') {
                let i = member_number(column, part).ok_or_else(|| not_a_member(&value, column))?;
                mask |= 1 << i;
            }
            mask
        }
        other => {
            let n = whole_number(other).ok_or_else(|| mismatch(&value, column))?;
            let n = u64::try_from(n).map_err(|_| not_a_member(&value, column))?;
            if column.members.len() < 64 && n >> column.members.len() != 0 {
                return Err(not_a_member(&value, column));
            }
            n
        }
    };
    let named: Vec<&str> =
        column.members.iter().enumerate().filter(|(i, _)| mask >> i & 1 == 1).map(|(_, m)| m.as_str()).collect();
    debug_assert_eq!(named.len() as u32, mask.count_ones(), "every bit names a member");
    Ok(Value::Str(named.join(",")))
}

fn not_a_member(value: &Value, column: &ColumnDef) -> DbError {
    DbError::type_error(format!(
        "value {} is not a member of {} column '{}' ({})",
        shown(value),
        column.ty.sql_name(),
        column.name,
        column.members.iter().map(|m| format!("'{m}'")).collect::<Vec<_>>().join(",")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ColumnType;

    fn column(ty: ColumnType) -> ColumnDef {
        ColumnDef::new("c", ty)
    }

    fn time(text: &str) -> Option<String> {
        parse_time(text).map(|us| format_time(us, None))
    }

    #[test]
    fn times_are_read_in_mysqls_forms() {
        assert_eq!(time("10:11:12").as_deref(), Some("10:11:12"));
        assert_eq!(time("-838:59:59").as_deref(), Some("-838:59:59"));
        assert_eq!(time("839:00:00"), None);
        assert_eq!(time("1 10:00").as_deref(), Some("34:00:00"));
        assert_eq!(time("2 3").as_deref(), Some("51:00:00"));
        assert_eq!(time("10:11").as_deref(), Some("10:11:00"));
        assert_eq!(time("101112").as_deref(), Some("10:11:12"));
        assert_eq!(time("1112").as_deref(), Some("00:11:12"));
        assert_eq!(time("12").as_deref(), Some("00:00:12"));
        assert_eq!(time("12.5").as_deref(), Some("00:00:12.500000"));
        assert_eq!(time("10:11:12.1234567").as_deref(), Some("10:11:12.123456"));
        assert_eq!(time("2024-01-02 03:04:05").as_deref(), Some("03:04:05"));
        assert_eq!(time("10:61:00"), None);
        assert_eq!(time("1061"), None);
        assert_eq!(time("ten"), None);
        assert_eq!(time(""), None);
        assert_eq!(format_time(-1_500_000, Some(3)), "-00:00:01.500");
        assert_eq!(format_time(3_600_000_000, Some(2)), "01:00:00.00");
    }

    #[test]
    fn years_take_two_and_four_digits() {
        let c = column(ColumnType::Year);
        let year = |v: Value| coerce_year(v, &c).map(|v| v.as_u64().unwrap_or(9999));
        assert_eq!(year(Value::Int(0)).unwrap(), 0);
        assert_eq!(year(Value::Str("0".into())).unwrap(), 2000);
        assert_eq!(year(Value::Str("0000".into())).unwrap(), 0);
        assert_eq!(year(Value::Int(69)).unwrap(), 2069);
        assert_eq!(year(Value::Int(70)).unwrap(), 1970);
        assert_eq!(year(Value::Str("2155".into())).unwrap(), 2155);
        assert!(year(Value::Int(1900)).is_err());
        assert!(year(Value::Int(2156)).is_err());
        assert!(year(Value::Str("20x4".into())).is_err());
        assert_eq!(year(Value::Date(crate::value::parse_date("2024-05-06").unwrap_or(0))).unwrap(), 2024);
    }

    #[test]
    fn bits_fit_their_width() {
        let c = column(ColumnType::Bit(4));
        assert_eq!(coerce_bit(Value::Int(15), &c, 4).unwrap(), Value::UInt(15));
        assert!(coerce_bit(Value::Int(16), &c, 4).is_err());
        assert!(coerce_bit(Value::Int(-1), &c, 4).is_err());
        assert_eq!(coerce_bit(Value::Bytes(vec![0, 5]), &c, 4).unwrap(), Value::UInt(5));
        assert_eq!(coerce_bit(Value::UInt(u64::MAX), &c, 64).unwrap(), Value::UInt(u64::MAX));
        assert_eq!(bit_bytes(0x0102, 10), vec![1, 2]);
        assert_eq!(bit_bytes(1, 1), vec![1]);
    }

    #[test]
    fn enum_and_set_values_are_members() {
        let e = column(ColumnType::Enum).collated(crate::Collation::GeneralCi).members(["small", "Large"]);
        assert_eq!(coerce_enum(Value::Str("LARGE ".into()), &e).unwrap(), Value::Str("Large".into()));
        assert_eq!(coerce_enum(Value::Int(1), &e).unwrap(), Value::Str("small".into()));
        assert!(coerce_enum(Value::Int(0), &e).is_err());
        assert!(coerce_enum(Value::Str("".into()), &e).is_err());
        assert!(coerce_enum(Value::Str("medium".into()), &e).is_err());
        assert_eq!(coerce_enum(Value::Str("2".into()), &e).unwrap(), Value::Str("Large".into()));
        let s = column(ColumnType::Set).members(["a", "b", "c"]);
        assert_eq!(coerce_set(Value::Str("c,a,c".into()), &s).unwrap(), Value::Str("a,c".into()));
        assert_eq!(coerce_set(Value::Int(6), &s).unwrap(), Value::Str("b,c".into()));
        assert_eq!(coerce_set(Value::Str("".into()), &s).unwrap(), Value::Str("".into()));
        assert!(coerce_set(Value::Int(8), &s).is_err());
        assert!(coerce_set(Value::Str("a,d".into()), &s).is_err());
    }
}
