//! JSON in and out of the REST node.
//!
//! Requests are parsed into borrowed structures (strings point into the
//! request body unless they contain escapes), and answers are written
//! straight into one output buffer from row bytes, without building an
//! intermediate document. Both are on the lookup hot path.

use crate::rondb::ErrorClass;
use base64::Engine;
use latsdb_types::mysql_types::{MICROS_PER_DAY, TIMESTAMP_RANGE};
use latsdb_types::row::{RowLayout, ValueRef};
use latsdb_types::schema::{ColumnDef, ColumnType};
use latsdb_types::value::{coerce, format_date, format_datetime, temporal_text};
use latsdb_types::Value;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;

/// A JSON scalar from a request: the value of a filter, a written column or
/// a serving key. Arrays and objects are rejected where a scalar belongs.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number, string, boolean or null")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Scalar::UInt(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v)))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Null)
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// Why a JSON value cannot go into its column: RonDB's class of the error
/// and latsdb's words for it (which column, which value).
#[derive(Debug, Clone, PartialEq)]
pub struct BadValue {
    pub class: ErrorClass,
    pub message: String,
}

impl BadValue {
    fn new(class: ErrorClass, message: String) -> BadValue {
        BadValue { class, message }
    }
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<BadValue> for crate::HttpError {
    fn from(bad: BadValue) -> crate::HttpError {
        crate::HttpError::invalid(bad.class, &bad.message)
    }
}

impl Scalar<'_> {
    /// The value as it goes into a column of type `column`, checked and
    /// converted; the error says which column and why, in RonDB's class:
    /// text or bytes too long (or not base64) are invalid column data, a
    /// string that is no date or time an invalid date/time, and any other
    /// value of the wrong type or out of range a wrong data type.
    pub fn to_column_value(&self, column: &ColumnDef) -> Result<Value, BadValue> {
        let value = match self {
            Scalar::Null => Value::Null,
            Scalar::Bool(b) => Value::Bool(*b),
            Scalar::Int(i) => Value::Int(*i),
            Scalar::UInt(u) => Value::UInt(*u),
            Scalar::Float(f) => Value::Float(*f),
            Scalar::Str(s) if column.ty.is_binary() || matches!(column.ty, ColumnType::Bit(_)) => {
                let bytes = base64::engine::general_purpose::STANDARD.decode(s.as_bytes()).map_err(|e| {
                    BadValue::new(
                        ErrorClass::InvalidColumnData,
                        format!("column '{}' is {}: send its value as base64 ({e})", column.name, column.ty.sql_name()),
                    )
                })?;
                Value::Bytes(bytes)
            }
            // RonDB reads a number written as a string for an integer
            // column ("1" for an INT key).
            Scalar::Str(s) if matches!(column.ty, ColumnType::Integer { .. }) => integer_text(s, column)?,
            Scalar::Str(s) if column.ty == ColumnType::Date => date_text(s, column)?,
            Scalar::Str(s) => Value::Str(s.to_string()),
        };
        if column.ty.is_binary() && !matches!(value, Value::Bytes(_) | Value::Null) {
            return Err(BadValue::new(
                ErrorClass::WrongDataType,
                format!("column '{}' is {}: send its value as a base64 string", column.name, column.ty.sql_name()),
            ));
        }
        let class = match (&value, column.ty) {
            (Value::Str(_), ColumnType::DateTime | ColumnType::Timestamp | ColumnType::Time) => {
                ErrorClass::InvalidDateTime
            }
            (Value::Str(_) | Value::Bytes(_), ty) if ty.is_free_text() || ty.is_binary() => {
                ErrorClass::InvalidColumnData
            }
            _ => ErrorClass::WrongDataType,
        };
        let value = coerce(value, column).map_err(|e| BadValue::new(class, e.message))?;
        if let Value::Timestamp(us) = value {
            if !TIMESTAMP_RANGE.contains(&us) {
                return Err(BadValue::new(
                    ErrorClass::InvalidDateTime,
                    format!(
                        "value '{}' is outside the TIMESTAMP range ('1970-01-01 00:00:01' to '2038-01-19 03:14:07.999999' UTC) of column '{}'",
                        format_datetime(us),
                        column.name
                    ),
                ));
            }
        }
        Ok(within_digits(value, column.fraction_digits))
    }
}

/// A DATE given as text. RonDB takes a datetime whose time of day is
/// midnight as its date, and refuses one with any other time as invalid
/// column data; text that is no date is an invalid date/time.
fn date_text(text: &str, column: &ColumnDef) -> Result<Value, BadValue> {
    let invalid = |class| {
        let shown: String = text.chars().take(40).collect();
        BadValue::new(class, format!("value '{shown}' is not a valid DATE for column '{}'", column.name))
    };
    if let Ok(date) = coerce(Value::Str(text.to_string()), column) {
        return Ok(date);
    }
    let as_datetime = ColumnDef::new(&column.name, ColumnType::DateTime).fraction_digits(6);
    match coerce(Value::Str(text.to_string()), &as_datetime) {
        Ok(Value::DateTime(us)) if us.rem_euclid(MICROS_PER_DAY) == 0 => {
            let days =
                i32::try_from(us.div_euclid(MICROS_PER_DAY)).map_err(|_| invalid(ErrorClass::InvalidDateTime))?;
            Ok(Value::Date(days))
        }
        Ok(_) => Err(invalid(ErrorClass::InvalidColumnData)),
        Err(_) => Err(invalid(ErrorClass::InvalidDateTime)),
    }
}

/// An integer given as text (digits with an optional sign), or why not.
fn integer_text(text: &str, column: &ColumnDef) -> Result<Value, BadValue> {
    let parsed = match text.strip_prefix('-') {
        Some(_) => text.parse::<i64>().ok().map(Value::Int),
        None => text.parse::<u64>().ok().map(Value::UInt),
    };
    parsed.ok_or_else(|| {
        let message = format!(
            "column '{}' is {} but the value is string ({})",
            column.name,
            column.ty.sql_name(),
            text.chars().take(40).collect::<String>()
        );
        BadValue::new(ErrorClass::WrongDataType, message)
    })
}

/// A time cut to the digits of a second its column keeps, as RonDB reads
/// one (a key of '11:11:11.123' finds 11:11:11 in a TIME(0) column).
fn within_digits(value: Value, digits: u8) -> Value {
    let step = 10i64.pow(6 - u32::from(digits.min(6)));
    let cut = |us: i64| us - us % step;
    match value {
        Value::DateTime(us) => Value::DateTime(us.div_euclid(step) * step),
        Value::Timestamp(us) => Value::Timestamp(us.div_euclid(step) * step),
        // Toward zero, so that -00:00:01.5 is -00:00:01 in a TIME(0).
        Value::Time(us) => Value::Time(cut(us)),
        other => other,
    }
}

/// A name and its scalar value in a JSON object.
pub type Field<'a> = (Cow<'a, str>, Scalar<'a>);

/// A JSON object of column or feature names to scalars, in request order.
#[derive(Debug, Default)]
pub struct Fields<'a>(pub Vec<Field<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut out = Vec::new();
        deserializer.deserialize_map(AppendFields(&mut out))?;
        Ok(Fields(out))
    }
}

/// A JSON array of objects like `Fields`, all their fields in one list
/// (a request of a thousand objects allocates as one of ten does).
#[derive(Debug, Default)]
pub struct FieldsList<'a> {
    fields: Vec<Field<'a>>,
    /// Where each object's fields end in `fields`.
    ends: Vec<u32>,
}

impl<'a> FieldsList<'a> {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The fields of object `i`.
    pub fn get(&self, i: usize) -> &[Field<'a>] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.fields[start..self.ends[i] as usize]
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for FieldsList<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = FieldsList<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of objects of names to scalar values")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut list = FieldsList::default();
                while let Some(()) = seq.next_element_seed(AppendFields(&mut list.fields))? {
                    let end = u32::try_from(list.fields.len()).map_err(|_| de::Error::custom("too many fields"))?;
                    list.ends.push(end);
                }
                Ok(list)
            }
        }
        deserializer.deserialize_seq(ListVisitor)
    }
}

/// A name borrowed from the request when it has no escapes (serde reads a
/// `Cow<str>` as an owned `String` unless told to borrow).
struct Name<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Name<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Name(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Name(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// Reads one object's fields onto the end of a list.
struct AppendFields<'l, 'a>(&'l mut Vec<Field<'a>>);

impl<'de> de::DeserializeSeed<'de> for AppendFields<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AppendFields<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of names to scalar values")
    }
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<(), M::Error> {
        let start = self.0.len();
        while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
            if self.0[start..].iter().any(|(n, _)| *n == name) {
                return Err(de::Error::custom(format!("'{name}' is given twice")));
            }
            let value = map.next_value::<Scalar<'de>>()?;
            self.0.push((name, value));
        }
        Ok(())
    }
}

/// Parses a request body, turning serde's message into one a user can act on.
/// The body must be a JSON object (serde would also take a struct from an array).
pub fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => {}
        None => return Err("the request body is empty: send a JSON object".into()),
        Some(_) => return Err("the request body is not valid: it must be a JSON object".into()),
    }
    // One UTF-8 check of the whole body is cheaper than one per string.
    let text = std::str::from_utf8(body).map_err(|e| {
        format!("the request body is not valid UTF-8 (at byte {}); send JSON text in UTF-8", e.valid_up_to())
    })?;
    serde_json::from_str(text).map_err(|e| format!("the request body is not valid: {e}"))
}

/// The `"name":` keys of one row layout's columns, escaped once and reused
/// for every row of an answer that has that layout (the rows of a batch
/// nearly always share one), instead of escaping each name again per row.
#[derive(Default)]
pub struct ColumnKeys {
    /// Address of the layout the keys were rendered for; only compared,
    /// never followed. The rows being written hold that layout alive, so
    /// no other layout can take its address while they are written.
    layout: usize,
    text: JsonOut,
    ends: Vec<usize>,
}

impl ColumnKeys {
    /// Makes the keys those of `layout` (rendering them if they are not).
    pub fn use_layout(&mut self, layout: &RowLayout) {
        let address = layout as *const RowLayout as usize;
        if self.layout == address {
            return;
        }
        self.layout = address;
        self.text.buf.clear();
        self.ends.clear();
        for column in layout.columns() {
            self.text.key(&column.name);
            self.ends.push(self.text.buf.len());
        }
    }

    /// The rendered key of column `i` of the layout last used.
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text.buf[start..self.ends[i]]
    }
}

/// Writes JSON into a growing buffer.
#[derive(Default)]
pub struct JsonOut {
    pub buf: Vec<u8>,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl JsonOut {
    pub fn with_capacity(bytes: usize) -> JsonOut {
        JsonOut { buf: Vec::with_capacity(bytes) }
    }

    pub fn raw(&mut self, text: &str) {
        self.buf.extend_from_slice(text.as_bytes());
    }

    pub fn byte(&mut self, b: u8) {
        self.buf.push(b);
    }

    pub fn bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// A quoted, escaped JSON string.
    pub fn str(&mut self, text: &str) {
        self.buf.push(b'"');
        let bytes = text.as_bytes();
        // Names and most values need no escaping: check all bytes at once.
        if !bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\') {
            self.buf.extend_from_slice(bytes);
            self.buf.push(b'"');
            return;
        }
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let escape: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0..=0x1f => b"",
                _ => continue,
            };
            self.buf.extend_from_slice(&bytes[start..i]);
            if escape.is_empty() {
                self.buf.extend_from_slice(b"\\u00");
                self.buf.push(HEX[(b >> 4) as usize]);
                self.buf.push(HEX[(b & 0xf) as usize]);
            } else {
                self.buf.extend_from_slice(escape);
            }
            start = i + 1;
        }
        self.buf.extend_from_slice(&bytes[start..]);
        self.buf.push(b'"');
    }

    /// `"key":`
    pub fn key(&mut self, key: &str) {
        self.str(key);
        self.buf.push(b':');
    }

    pub fn int(&mut self, v: i64) {
        self.buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }

    pub fn uint(&mut self, v: u64) {
        self.buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }

    /// A float as JSON: the shortest digits that read back as the same
    /// number ("1.0" stays a float for the client).
    pub fn float(&mut self, v: f64) {
        if v.is_finite() {
            self.raw(ryu::Buffer::new().format_finite(v));
        } else {
            // JSON has no NaN or infinity; the column types never store them.
            self.raw("null");
        }
    }

    /// A DOUBLE column's value as MySQL prints it: the shortest digits that
    /// read back as the same number, without ".0" on a whole number.
    pub fn double(&mut self, v: f64) {
        if v.is_finite() {
            self.shortest(ryu::Buffer::new().format_finite(v));
        } else {
            self.raw("null");
        }
    }

    /// A FLOAT as MySQL prints it: the shortest digits that read back as
    /// the same 4-byte float (-123.123, not -123.12300109863281).
    pub fn float32(&mut self, v: f32) {
        if v.is_finite() {
            self.shortest(ryu::Buffer::new().format_finite(v));
        } else {
            self.raw("null");
        }
    }

    fn shortest(&mut self, digits: &str) {
        self.raw(digits.strip_suffix(".0").unwrap_or(digits));
    }

    /// A column value in the documented JSON rendering of its type:
    /// numbers for integers, floats and decimals, strings for text, base64
    /// for binary, ISO-8601 strings for dates and times, null for NULL.
    pub fn value_ref(&mut self, value: &ValueRef<'_>, column: &ColumnDef) {
        let ty = column.ty;
        match value {
            ValueRef::Null => self.raw("null"),
            ValueRef::Str(s) => self.str(s),
            ValueRef::Bytes(b) if ty.is_string() => self.str(&String::from_utf8_lossy(b)),
            ValueRef::Bytes(b) => self.base64(b),
            ValueRef::Scalar(v) => match (v, ty) {
                (Value::Float(f), ColumnType::Float) => self.float32(*f as f32),
                (Value::Float(f), _) => self.double(*f),
                // A BIT as MySQL sends it: its bytes, big-endian.
                (Value::UInt(bits), ColumnType::Bit(width)) => {
                    self.base64(&latsdb_types::mysql_types::bit_bytes(*bits, width))
                }
                // Times with the column's digits of a second, as RonDB and
                // MySQL show them.
                (Value::DateTime(_) | Value::Timestamp(_) | Value::Time(_), _) => match temporal_text(v, column) {
                    Some(text) => self.str(&text),
                    None => self.value(v),
                },
                _ => self.value(v),
            },
        }
    }

    pub fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.raw("null"),
            Value::Int(i) => self.int(*i),
            Value::UInt(u) => self.uint(*u),
            Value::Float(f) => self.float(*f),
            Value::Decimal(d) => self.raw(&d.to_string()),
            Value::Str(s) => self.str(s),
            Value::Bytes(b) => self.base64(b),
            Value::Date(d) => self.str(&format_date(*d)),
            Value::DateTime(us) => self.str(&format_datetime(*us)),
            Value::Timestamp(us) => self.str(&format_datetime(*us)),
            Value::Bool(b) => self.raw(if *b { "true" } else { "false" }),
            Value::Time(us) => self.str(&latsdb_types::mysql_types::format_time(*us, None)),
        }
    }

    /// Binary data as a quoted base64 string, encoded in place.
    pub fn base64(&mut self, bytes: &[u8]) {
        let engine = &base64::engine::general_purpose::STANDARD;
        self.buf.push(b'"');
        let start = self.buf.len();
        let len = base64::encoded_len(bytes.len(), true).unwrap_or(0);
        self.buf.resize(start + len, 0);
        let written = engine.encode_slice(bytes, &mut self.buf[start..]).unwrap_or(0);
        self.buf.truncate(start + written);
        self.buf.push(b'"');
    }

    /// A scalar from a request echoed back (passed features).
    pub fn scalar(&mut self, value: &Scalar<'_>) {
        match value {
            Scalar::Null => self.raw("null"),
            Scalar::Bool(b) => self.raw(if *b { "true" } else { "false" }),
            Scalar::Int(i) => self.int(*i),
            Scalar::UInt(u) => self.uint(*u),
            Scalar::Float(f) => self.float(*f),
            Scalar::Str(s) => self.str(s),
        }
    }

    /// Removes a trailing comma left by a loop.
    pub fn trim_comma(&mut self) {
        if self.buf.last() == Some(&b',') {
            self.buf.pop();
        }
    }
}

/// `{"message": text}`: the body of every error answer.
pub fn message_body(text: &str) -> Vec<u8> {
    let mut out = JsonOut::with_capacity(text.len() + 16);
    out.raw("{\"message\":");
    out.str(text);
    out.byte(b'}');
    out.buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use latsdb_types::IntWidth;

    #[test]
    fn strings_are_escaped_as_json() {
        let mut out = JsonOut::default();
        out.str("a\"b\\c\nd\u{1}é");
        let text = String::from_utf8(out.buf).unwrap();
        assert_eq!(text, "\"a\\\"b\\\\c\\nd\\u0001é\"");
        let back: String = serde_json::from_str(&text).unwrap();
        assert_eq!(back, "a\"b\\c\nd\u{1}é");
    }

    #[test]
    fn scalars_borrow_unescaped_strings_and_reject_nesting() {
        let body =
            br#"{"a": "plain", "b": "esc\"aped", "c": -5, "d": 18446744073709551615, "e": 1.5, "f": null, "g": true}"#;
        let fields: Fields = parse(body).unwrap();
        assert!(matches!(fields.0[0].1, Scalar::Str(Cow::Borrowed("plain"))));
        assert_eq!(fields.0[1].1, Scalar::Str(Cow::Owned("esc\"aped".into())));
        assert_eq!(fields.0[2].1, Scalar::Int(-5));
        assert_eq!(fields.0[3].1, Scalar::UInt(u64::MAX));
        assert_eq!(fields.0[4].1, Scalar::Float(1.5));
        assert_eq!(fields.0[5].1, Scalar::Null);
        assert_eq!(fields.0[6].1, Scalar::Bool(true));
        let nested = parse::<Fields>(br#"{"a": [1]}"#).unwrap_err();
        assert!(nested.contains("a number, string, boolean or null"), "{nested}");
        let twice = parse::<Fields>(br#"{"a": 1, "a": 2}"#).unwrap_err();
        assert!(twice.contains("'a' is given twice"), "{twice}");
    }

    #[test]
    fn bodies_must_be_utf8_json_objects() {
        let e = parse::<Fields>(b"{\"a\": \"\xff\"}").unwrap_err();
        assert!(e.contains("not valid UTF-8 (at byte 7)"), "{e}");
        assert!(parse::<Fields>(b"[1]").unwrap_err().contains("must be a JSON object"));
        assert!(parse::<Fields>(b"  ").unwrap_err().contains("is empty"));
        let e = parse::<Fields>(b"{\"a\": 1,}").unwrap_err();
        assert!(e.contains("the request body is not valid: trailing comma"), "{e}");
    }

    #[test]
    fn column_values_are_checked_against_the_column_type() {
        let id = ColumnDef::new("id", ColumnType::int(IntWidth::Int));
        assert_eq!(Scalar::Int(7).to_column_value(&id), Ok(Value::Int(7)));
        assert_eq!(Scalar::Str("7".into()).to_column_value(&id), Ok(Value::Int(7)));
        assert_eq!(Scalar::Str("-7".into()).to_column_value(&id), Ok(Value::Int(-7)));
        let e = Scalar::Str("7x".into()).to_column_value(&id).unwrap_err();
        assert!(e.message.contains("column 'id' is INT but the value is string"), "{e}");
        assert_eq!(e.class, ErrorClass::WrongDataType);
        let e = Scalar::Int(1 << 40).to_column_value(&id).unwrap_err();
        assert!(e.message.contains("out of range"), "{e}");
        assert_eq!(e.class, ErrorClass::WrongDataType);
        let bin = ColumnDef::new("b", ColumnType::VarBinary(8));
        assert_eq!(Scalar::Str("AAEC".into()).to_column_value(&bin), Ok(Value::Bytes(vec![0, 1, 2])));
        assert!(Scalar::Str("not base64!".into()).to_column_value(&bin).unwrap_err().message.contains("base64"));
        assert!(Scalar::Int(3).to_column_value(&bin).unwrap_err().message.contains("base64"));
        let e = Scalar::Str("AAECAwQFBgcI".into()).to_column_value(&bin).unwrap_err();
        assert_eq!(e.class, ErrorClass::InvalidColumnData, "{e}");
    }

    #[test]
    fn date_and_time_keys_are_read_as_rondb_reads_them() {
        let date = ColumnDef::new("d", ColumnType::Date);
        let day = Scalar::Str("2024-02-29".into()).to_column_value(&date).unwrap();
        assert_eq!(Scalar::Str("2024-02-29 00:00:00".into()).to_column_value(&date), Ok(day.clone()));
        assert_eq!(Scalar::Str("2024-02-29 00:00:00.000000".into()).to_column_value(&date), Ok(day));
        let e = Scalar::Str("2024-02-29 11:00:00".into()).to_column_value(&date).unwrap_err();
        assert_eq!(e.class, ErrorClass::InvalidColumnData, "{e}");
        let e = Scalar::Str("2024-13-29".into()).to_column_value(&date).unwrap_err();
        assert_eq!(e.class, ErrorClass::InvalidDateTime, "{e}");
        let datetime = ColumnDef::new("t", ColumnType::DateTime);
        let e = Scalar::Str("2024-13-29 11:00:00".into()).to_column_value(&datetime).unwrap_err();
        assert_eq!(e.class, ErrorClass::InvalidDateTime, "{e}");
        let time = ColumnDef::new("t", ColumnType::Time);
        let e = Scalar::Str("11:61:00".into()).to_column_value(&time).unwrap_err();
        assert_eq!(e.class, ErrorClass::InvalidDateTime, "{e}");
        let timestamp = ColumnDef::new("t", ColumnType::Timestamp);
        assert!(Scalar::Str("1970-01-01 00:00:01".into()).to_column_value(&timestamp).is_ok());
        assert!(Scalar::Str("2038-01-19 03:14:07".into()).to_column_value(&timestamp).is_ok());
        for outside in ["1970-01-01 00:00:00", "1111-11-11 11:11:11", "2038-01-19 03:14:08"] {
            let e = Scalar::Str(outside.into()).to_column_value(&timestamp).unwrap_err();
            assert_eq!(e.class, ErrorClass::InvalidDateTime, "{e}");
        }
    }

    #[test]
    fn values_render_per_type() {
        let mut out = JsonOut::default();
        out.value_ref(&ValueRef::Bytes(&[0, 1, 2]), &ColumnDef::new("b", ColumnType::Blob));
        out.byte(b' ');
        out.value(&Value::Date(0));
        out.byte(b' ');
        out.value(&Value::DateTime(1_500_000));
        out.byte(b' ');
        out.value(&Value::Decimal(latsdb_types::Decimal::new(-12345, 2)));
        out.byte(b' ');
        out.value(&Value::Float(0.1));
        assert_eq!(
            String::from_utf8(out.buf).unwrap(),
            "\"AAEC\" \"1970-01-01\" \"1970-01-01 00:00:01.500000\" -123.45 0.1"
        );
    }

    #[test]
    fn floats_print_as_mysql_prints_them() {
        let shown = |value: f64, ty: ColumnType| {
            let mut out = JsonOut::default();
            out.value_ref(&ValueRef::Scalar(Value::Float(value)), &ColumnDef::new("f", ty));
            String::from_utf8(out.buf).unwrap()
        };
        assert_eq!(shown(-123.123f32 as f64, ColumnType::Float), "-123.123");
        assert_eq!(shown(0.0, ColumnType::Float), "0");
        assert_eq!(shown(-5.0, ColumnType::Double), "-5");
        assert_eq!(shown(0.1, ColumnType::Double), "0.1");
        assert_eq!(shown(1.5e300, ColumnType::Double), "1.5e300");
    }
}
