//! Order-preserving ("memcomparable") key encoding.
//!
//! Byte-wise comparison of two encoded keys gives the same order as comparing
//! their values column by column, and every encoded value is self-delimiting,
//! so a concatenation of encodings (index columns followed by primary-key
//! columns) still sorts correctly. The encoding is part of the wire and
//! on-disk format: the partition of a row is `xxh3_64(encoded primary key) mod
//! partitions`, so neither the encoding nor the hash may change silently.
//!
//! Layout of one value: a tag byte 0x00 for NULL (nothing follows) or 0x01
//! for a value, then
//! - signed integers, dates, datetimes, timestamps: 8 bytes big-endian with the
//!   sign bit flipped;
//! - unsigned integers: 8 bytes big-endian;
//! - floats: the IEEE bits, all bits flipped for negatives, sign bit set for
//!   positives, 8 bytes big-endian;
//! - decimals: the unscaled i128 at the column's scale, sign bit flipped,
//!   16 bytes big-endian;
//! - booleans: one byte;
//! - strings and binaries: the bytes with every 0x00 written as 0x00 0xFF,
//!   closed by 0x00 0x01; text of a case-insensitive column is folded first
//!   (`Collation::fold`) and loses its trailing spaces, so the key holds the
//!   value's weight, not the value, and equal-comparing texts share a key
//!   (decoding such a key gives the folded text).

use crate::collation::Collation;
use crate::error::{DbError, Result};
use crate::schema::{ColumnDef, ColumnType};
use crate::value::{coerce, fit_text, Decimal, Value};

const TAG_NULL: u8 = 0x00;
const TAG_VALUE: u8 = 0x01;

/// Hash used for partitioning. xxh3-64 with seed 0: stable by specification.
pub fn partition_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

pub fn partition_of(key: &[u8], partitions: u32) -> u32 {
    debug_assert!(partitions > 0);
    (partition_hash(key) % partitions as u64) as u32
}

/// Appends the encoding of an already-coerced value of type `ty` (and
/// `collation`, for text).
pub fn encode_value(out: &mut Vec<u8>, ty: ColumnType, collation: Collation, value: &Value) {
    let v = match value {
        Value::Null => {
            out.push(TAG_NULL);
            return;
        }
        v => v,
    };
    out.push(TAG_VALUE);
    match (ty, v) {
        (ColumnType::Integer { unsigned: false, .. }, Value::Int(i)) => {
            out.extend_from_slice(&((*i as u64) ^ (1 << 63)).to_be_bytes())
        }
        (ColumnType::Integer { unsigned: true, .. } | ColumnType::Year | ColumnType::Bit(_), Value::UInt(u)) => {
            out.extend_from_slice(&u.to_be_bytes())
        }
        (ColumnType::Float | ColumnType::Double, Value::Float(f)) => {
            let bits = f.to_bits();
            let bits = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
            out.extend_from_slice(&bits.to_be_bytes());
        }
        (ColumnType::Decimal { .. }, Value::Decimal(d)) => {
            out.extend_from_slice(&((d.unscaled as u128) ^ (1 << 127)).to_be_bytes())
        }
        (ColumnType::Date, Value::Date(d)) => out.extend_from_slice(&((*d as i64 as u64) ^ (1 << 63)).to_be_bytes()),
        (ColumnType::DateTime, Value::DateTime(t))
        | (ColumnType::Timestamp, Value::Timestamp(t))
        | (ColumnType::Time, Value::Time(t)) => out.extend_from_slice(&((*t as u64) ^ (1 << 63)).to_be_bytes()),
        (ColumnType::Boolean, Value::Bool(b)) => out.push(*b as u8),
        (_, Value::Str(s)) if collation.is_case_insensitive() => encode_bytes(out, collation.weight(s).as_bytes()),
        (_, Value::Str(s)) => encode_bytes(out, s.as_bytes()),
        (_, Value::Bytes(b)) => encode_bytes(out, b),
        (ty, v) => panic!("encode_value: value {v:?} was not coerced to {ty:?}"),
    }
}

fn encode_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    escape_bytes(out, bytes);
    out.extend_from_slice(&[0x00, 0x01]);
}

fn escape_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
}

/// Appends the encoding of text given for text column `column` (CHAR,
/// VARCHAR or TEXT): what `encode_value` appends for the text coerced to
/// the column, without making a `String` of it, so that a lookup's key is
/// encoded straight from the request's text.
pub fn encode_text(out: &mut Vec<u8>, column: &ColumnDef, text: &str) -> Result<()> {
    let text = fit_text(text, column)?;
    out.push(TAG_VALUE);
    if column.collation.is_case_insensitive() {
        // The weight: every character folded, trailing spaces dropped.
        let mut kept = out.len();
        let mut utf8 = [0u8; 4];
        for c in text.chars().map(|c| column.collation.fold_char(c)) {
            escape_bytes(out, c.encode_utf8(&mut utf8).as_bytes());
            if c != ' ' {
                kept = out.len();
            }
        }
        out.truncate(kept);
    } else {
        escape_bytes(out, text.as_bytes());
    }
    out.extend_from_slice(&[0x00, 0x01]);
    Ok(())
}

/// Coerces `values` to `columns` and encodes them as one key.
pub fn encode_key(columns: &[&ColumnDef], values: &[Value]) -> Result<Vec<u8>> {
    if values.len() != columns.len() {
        return Err(DbError::bad_request(format!(
            "the key has {} columns ({}) but {} values were given",
            columns.len(),
            columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "),
            values.len()
        )));
    }
    let mut out = Vec::with_capacity(columns.len() * 9);
    for (column, value) in columns.iter().zip(values) {
        let v = coerce(value.clone(), column)?;
        encode_value(&mut out, column.ty, column.collation, &v);
    }
    Ok(out)
}

/// Encodes a key prefix (the first `values.len()` columns), for range bounds.
pub fn encode_prefix(columns: &[&ColumnDef], values: &[Value]) -> Result<Vec<u8>> {
    if values.len() > columns.len() {
        return Err(DbError::bad_request(format!(
            "the bound has {} values but the index has only {} columns",
            values.len(),
            columns.len()
        )));
    }
    let mut out = Vec::new();
    for (column, value) in columns.iter().zip(values) {
        // A NULL bound is allowed even on NOT NULL columns: it sorts first.
        let v = if value.is_null() {
            Value::Null
        } else {
            let mut nullable = (*column).clone();
            nullable.nullable = true;
            coerce(value.clone(), &nullable)?
        };
        encode_value(&mut out, column.ty, column.collation, &v);
    }
    Ok(out)
}

/// Decodes one value at the front of `input`, returning it and the rest.
pub fn decode_value<'a>(ty: ColumnType, input: &'a [u8]) -> Result<(Value, &'a [u8])> {
    let bad = || DbError::malformed(format!("truncated or invalid key encoding for a {} value", ty.sql_name()));
    let (&tag, rest) = input.split_first().ok_or_else(bad)?;
    match tag {
        TAG_NULL => return Ok((Value::Null, rest)),
        TAG_VALUE => {}
        _ => return Err(bad()),
    }
    let take = |n: usize| -> Result<(&'a [u8], &'a [u8])> {
        if rest.len() < n {
            Err(bad())
        } else {
            Ok(rest.split_at(n))
        }
    };
    let be8 = |b: &[u8]| u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    Ok(match ty {
        ColumnType::Integer { unsigned: false, .. } => {
            let (b, r) = take(8)?;
            (Value::Int((be8(b) ^ (1 << 63)) as i64), r)
        }
        ColumnType::Integer { unsigned: true, .. } | ColumnType::Year | ColumnType::Bit(_) => {
            let (b, r) = take(8)?;
            (Value::UInt(be8(b)), r)
        }
        ColumnType::Time => {
            let (b, r) = take(8)?;
            (Value::Time((be8(b) ^ (1 << 63)) as i64), r)
        }
        ColumnType::Float | ColumnType::Double => {
            let (b, r) = take(8)?;
            let bits = be8(b);
            let bits = if bits >> 63 == 1 { bits & !(1 << 63) } else { !bits };
            (Value::Float(f64::from_bits(bits)), r)
        }
        ColumnType::Decimal { scale, .. } => {
            let (b, r) = take(16)?;
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            (Value::Decimal(Decimal::new((u128::from_be_bytes(a) ^ (1 << 127)) as i128, scale)), r)
        }
        ColumnType::Date => {
            let (b, r) = take(8)?;
            let v = (be8(b) ^ (1 << 63)) as i64;
            (Value::Date(i32::try_from(v).map_err(|_| bad())?), r)
        }
        ColumnType::DateTime => {
            let (b, r) = take(8)?;
            (Value::DateTime((be8(b) ^ (1 << 63)) as i64), r)
        }
        ColumnType::Timestamp => {
            let (b, r) = take(8)?;
            (Value::Timestamp((be8(b) ^ (1 << 63)) as i64), r)
        }
        ColumnType::Boolean => {
            let (b, r) = take(1)?;
            (Value::Bool(b[0] != 0), r)
        }
        _ => {
            let mut bytes = Vec::new();
            let mut i = 0;
            loop {
                let b = *rest.get(i).ok_or_else(bad)?;
                if b == 0 {
                    match rest.get(i + 1) {
                        Some(0xFF) => {
                            bytes.push(0);
                            i += 2;
                        }
                        Some(0x01) => break,
                        _ => return Err(bad()),
                    }
                } else {
                    bytes.push(b);
                    i += 1;
                }
            }
            let r = &rest[i + 2..];
            if ty.is_string() {
                let s = String::from_utf8(bytes).map_err(|_| bad())?;
                (Value::Str(s), r)
            } else {
                (Value::Bytes(bytes), r)
            }
        }
    })
}

/// Decodes a whole key; fails if bytes are left over or missing.
pub fn decode_key(columns: &[&ColumnDef], mut input: &[u8]) -> Result<Vec<Value>> {
    let mut values = Vec::with_capacity(columns.len());
    for column in columns {
        let (v, rest) = decode_value(column.ty, input)?;
        values.push(v);
        input = rest;
    }
    if !input.is_empty() {
        return Err(DbError::malformed(format!("{} unexpected bytes after the key", input.len())));
    }
    Ok(values)
}

/// Checks that `input` is exactly one encoded value of each type, without
/// allocating (the data node's check of keys from the network).
pub fn validate_key<'a>(types: impl Iterator<Item = ColumnType>, input: &'a [u8]) -> Result<()> {
    let mut rest: &'a [u8] = input;
    for ty in types {
        rest = skip_value(ty, rest)?;
    }
    if !rest.is_empty() {
        return Err(DbError::malformed(format!("{} unexpected bytes after the key", rest.len())));
    }
    Ok(())
}

fn skip_value(ty: ColumnType, input: &[u8]) -> Result<&[u8]> {
    let bad = || DbError::malformed(format!("truncated or invalid key encoding for a {} value", ty.sql_name()));
    let (&tag, rest) = input.split_first().ok_or_else(bad)?;
    match tag {
        TAG_NULL => return Ok(rest),
        TAG_VALUE => {}
        _ => return Err(bad()),
    }
    let fixed = match ty {
        ColumnType::Integer { .. }
        | ColumnType::Float
        | ColumnType::Double
        | ColumnType::DateTime
        | ColumnType::Timestamp
        | ColumnType::Time
        | ColumnType::Year
        | ColumnType::Bit(_) => 8,
        ColumnType::Decimal { .. } => 16,
        ColumnType::Boolean => 1,
        ColumnType::Date => {
            // Dates must fit an i32 day number.
            let b = rest.get(..8).ok_or_else(bad)?;
            let v = (u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) ^ (1 << 63)) as i64;
            i32::try_from(v).map_err(|_| bad())?;
            return Ok(&rest[8..]);
        }
        _ => {
            // Escaped bytes: 0x00 0xFF is a zero byte, 0x00 0x01 ends the value.
            // UTF-8 is checked per run between zero bytes (a zero byte never
            // sits inside a multi-byte character).
            let mut i = 0;
            let mut run_start = 0;
            loop {
                match rest.get(i) {
                    None => return Err(bad()),
                    Some(0) => {
                        if ty.is_string() && std::str::from_utf8(&rest[run_start..i]).is_err() {
                            return Err(bad());
                        }
                        match rest.get(i + 1) {
                            Some(0xFF) => {
                                i += 2;
                                run_start = i;
                            }
                            Some(0x01) => return Ok(&rest[i + 2..]),
                            _ => return Err(bad()),
                        }
                    }
                    Some(_) => i += 1,
                }
            }
        }
    };
    if rest.len() < fixed {
        return Err(bad());
    }
    Ok(&rest[fixed..])
}

/// The smallest byte string greater than every string that starts with
/// `prefix`; None when no such string exists (the prefix is all 0xFF).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while let Some(last) = out.pop() {
        if last < 0xFF {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::IntWidth;

    fn enc(ty: ColumnType, v: Value) -> Vec<u8> {
        let col = ColumnDef::new("c", ty);
        encode_key(&[&col], &[v]).unwrap()
    }

    #[test]
    fn order_is_preserved() {
        let ints = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ints.windows(2) {
            assert!(
                enc(ColumnType::int(IntWidth::Big), Value::Int(w[0]))
                    < enc(ColumnType::int(IntWidth::Big), Value::Int(w[1]))
            );
        }
        let floats = [-1e300, -2.5, -0.0, 0.5, 3.0, 1e300];
        for w in floats.windows(2) {
            assert!(enc(ColumnType::Double, Value::Float(w[0])) < enc(ColumnType::Double, Value::Float(w[1])), "{w:?}");
        }
        let strs = ["", "a", "a\0", "a\0b", "ab", "b"];
        for w in strs.windows(2) {
            assert!(
                enc(ColumnType::VarChar(10), Value::Str(w[0].into()))
                    < enc(ColumnType::VarChar(10), Value::Str(w[1].into())),
                "{w:?}"
            );
        }
    }

    #[test]
    fn case_insensitive_keys_are_weights() {
        let ci = ColumnDef::new("name", ColumnType::VarChar(20)).collated(Collation::GeneralCi);
        let key = |s: &str| encode_key(&[&ci], &[Value::Str(s.into())]).unwrap();
        assert_eq!(key("Alice"), key("ALICE  "));
        assert_eq!(key("crème"), key("CREME"));
        assert_ne!(key("Alice"), key("Alicia"));
        let sorted = ["a", "B", "c", "Ö", "z"];
        for w in sorted.windows(2) {
            assert!(key(w[0]) < key(w[1]), "{w:?}");
        }
        let bin = ColumnDef::new("name", ColumnType::VarChar(20));
        assert_ne!(
            encode_key(&[&bin], &[Value::Str("Alice".into())]).unwrap(),
            encode_key(&[&bin], &[Value::Str("ALICE".into())]).unwrap()
        );
    }

    #[test]
    fn keys_round_trip_and_reject_garbage() {
        let a = ColumnDef::new("a", ColumnType::VarChar(20));
        let b = ColumnDef::new("b", ColumnType::int(IntWidth::Int));
        let values = vec![Value::Str("x\0y".into()), Value::Int(-3)];
        let key = encode_key(&[&a, &b], &values).unwrap();
        assert_eq!(decode_key(&[&a, &b], &key).unwrap(), values);
        assert!(decode_key(&[&a, &b], &key[..key.len() - 1]).is_err());
        assert!(decode_key(&[&a], &key).is_err());
        let types = || [a.ty, b.ty].into_iter();
        validate_key(types(), &key).unwrap();
        assert!(validate_key(types(), &key[..key.len() - 1]).is_err());
        assert!(validate_key(types(), &[&key[..], &[0]].concat()).is_err());
        let mut bad_utf8 = vec![1, 0xC3, 0x00, 0xFF, 0x28, 0x00, 0x01];
        bad_utf8.extend_from_slice(&key[key.len() - 9..]);
        assert!(validate_key(types(), &bad_utf8).is_err());
    }

    #[test]
    fn prefix_successor_bounds_all_extensions() {
        let s = prefix_successor(&[1, 2, 0xFF]).unwrap();
        assert_eq!(s, vec![1, 3]);
        assert!(prefix_successor(&[0xFF, 0xFF]).is_none());
    }

    #[test]
    fn partition_hash_is_stable() {
        // Part of the on-disk format: this value must never change.
        assert_eq!(partition_hash(b"latsdb"), xxhash_rust::xxh3::xxh3_64(b"latsdb"));
        assert_eq!(partition_hash(b""), 0x2D06800538D394C2);
    }

    /// Text encoded straight from the request's string is the key the
    /// coerced value gives, or the same error.
    #[test]
    fn text_encodes_as_its_coerced_value_does() {
        let texts = [
            "",
            "a",
            "abc",
            "abcd",
            "abcde",
            "abcdef",
            "ab  ",
            "abcd   ",
            "abcde  ",
            " a ",
            "    ",
            "a\0b",
            "\0",
            "straße",
            "ÀÉÎõü",
            "Ünïcödé  ",
            "日本語のテキスト",
            "😀x",
            "ǅa",
            "mixed Case",
        ];
        let mut columns = Vec::new();
        for ty in [ColumnType::Char(4), ColumnType::VarChar(5), ColumnType::Text] {
            columns.push(ColumnDef::new("c", ty));
            columns.push(ColumnDef::new("c", ty).collated(Collation::GeneralCi));
        }
        for column in &columns {
            for text in texts {
                let coerced = coerce(Value::Str(text.to_string()), column).map(|v| {
                    let mut out = vec![7];
                    encode_value(&mut out, column.ty, column.collation, &v);
                    out
                });
                let mut direct = vec![7];
                let direct = encode_text(&mut direct, column, text).map(|_| direct);
                match (coerced, direct) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{text:?} as {column:?}"),
                    (Err(a), Err(b)) => assert_eq!(a.message, b.message),
                    (a, b) => panic!("{text:?} as {column:?}: coerced {a:?}, direct {b:?}"),
                }
            }
        }
    }
}
