//! Complex features (Hopsworks types `array<..>`, `struct<..>`, `map<..>`)
//! are stored in the online table as Avro binary, each column a record of
//! one field, with the feature group's Avro schema in Hopsworks' schema
//! registry (`subjects`, `schemas`). A feature vector shows them as JSON,
//! as RonDB's REST server does: records as objects, a union with null as
//! null or its value, bytes as base64, dates and timestamps as RFC 3339
//! text in UTC, times of day as nanoseconds.

use crate::json::JsonOut;
use serde_json::Value as Json;
use std::collections::HashMap;

/// An Avro type, as far as feature values use them.
#[derive(Debug, Clone, PartialEq)]
pub enum Avro {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Record(Vec<(String, Avro)>),
    Array(Box<Avro>),
    Map(Box<Avro>),
    Union(Vec<Avro>),
    Enum(Vec<String>),
    Fixed(usize),
    /// int: days since 1970-01-01.
    Date,
    TimestampMillis,
    TimestampMicros,
    TimeMillis,
    TimeMicros,
}

/// Deepest nesting of types a schema or a value may have.
const MAX_DEPTH: usize = 64;

/// Type nodes that references to named types may copy into one schema.
const MAX_COPIED_NODES: usize = 100_000;

/// The named types a schema defined so far, each with its node count, and
/// how many nodes references may still copy. Every reference copies its
/// type, so a schema of a few lines whose types each use the one before
/// twice would otherwise grow to billions of nodes (and take the REST
/// node's memory) when a view over it is loaded.
struct Names {
    types: HashMap<String, (Avro, usize)>,
    copies_left: usize,
}

impl Names {
    fn define(&mut self, name: &str, ty: &Avro) {
        self.types.insert(name.to_string(), (ty.clone(), nodes(ty)));
    }

    /// A copy of the type `name` names, if it is defined and the budget
    /// allows.
    fn reference(&mut self, name: &str) -> Option<Result<Avro, String>> {
        let (ty, size) = self.types.get(name)?;
        if *size > self.copies_left {
            return Some(Err(format!(
                "the Avro schema expands to more than {MAX_COPIED_NODES} types through its named types"
            )));
        }
        self.copies_left -= size;
        Some(Ok(ty.clone()))
    }
}

/// The nodes of a type tree.
fn nodes(ty: &Avro) -> usize {
    1 + match ty {
        Avro::Record(fields) => fields.iter().map(|(_, t)| nodes(t)).sum(),
        Avro::Array(t) | Avro::Map(t) => nodes(t),
        Avro::Union(branches) => branches.iter().map(nodes).sum(),
        _ => 0,
    }
}

/// Reads the type of field `field` from a record schema (JSON text).
pub fn field_type(schema: &str, field: &str) -> Result<Avro, String> {
    let json: Json = serde_json::from_str(schema).map_err(|e| format!("the Avro schema is not JSON: {e}"))?;
    let mut names = Names { types: HashMap::new(), copies_left: MAX_COPIED_NODES };
    let record = parse(&json, &mut names, 0)?;
    match record {
        Avro::Record(fields) => fields
            .into_iter()
            .find(|(name, _)| name == field)
            .map(|(_, ty)| ty)
            .ok_or_else(|| format!("Cannot find schema for feature {field}")),
        _ => Err("the feature group's Avro schema is not a record".into()),
    }
}

fn parse(json: &Json, names: &mut Names, depth: usize) -> Result<Avro, String> {
    if depth > MAX_DEPTH {
        return Err("the Avro schema nests too deeply".into());
    }
    match json {
        Json::String(name) => match primitive(name) {
            Some(ty) => Ok(ty),
            None => names.reference(name).unwrap_or_else(|| Err(format!("unknown Avro type '{name}'"))),
        },
        Json::Array(branches) => {
            Ok(Avro::Union(branches.iter().map(|b| parse(b, names, depth + 1)).collect::<Result<_, _>>()?))
        }
        Json::Object(object) => {
            let ty = object.get("type").ok_or("an Avro type object has no 'type'")?;
            let logical = object.get("logicalType").and_then(Json::as_str);
            let kind = ty.as_str().unwrap_or_default();
            let parsed = match (kind, logical) {
                ("int", Some("date")) => Avro::Date,
                ("long", Some("timestamp-millis")) => Avro::TimestampMillis,
                ("long", Some("timestamp-micros")) => Avro::TimestampMicros,
                ("int", Some("time-millis")) => Avro::TimeMillis,
                ("long", Some("time-micros")) => Avro::TimeMicros,
                ("record" | "error", _) => record(object, names, depth)?,
                ("array", _) => Avro::Array(Box::new(parse(child(object, "items")?, names, depth + 1)?)),
                ("map", _) => Avro::Map(Box::new(parse(child(object, "values")?, names, depth + 1)?)),
                ("enum", _) => Avro::Enum(
                    child(object, "symbols")?
                        .as_array()
                        .ok_or("an Avro enum's symbols are not a list")?
                        .iter()
                        .map(|s| s.as_str().unwrap_or_default().to_string())
                        .collect(),
                ),
                ("fixed", _) => {
                    Avro::Fixed(child(object, "size")?.as_u64().ok_or("an Avro fixed has no size")? as usize)
                }
                // Any other logical type reads as its underlying type.
                _ => parse(ty, names, depth + 1)?,
            };
            if let Some(name) = object.get("name").and_then(Json::as_str) {
                names.define(name, &parsed);
            }
            Ok(parsed)
        }
        _ => Err("an Avro type is neither a name, a list nor an object".into()),
    }
}

fn child<'j>(object: &'j serde_json::Map<String, Json>, key: &str) -> Result<&'j Json, String> {
    object.get(key).ok_or_else(|| format!("an Avro type has no '{key}'"))
}

fn record(object: &serde_json::Map<String, Json>, names: &mut Names, depth: usize) -> Result<Avro, String> {
    let fields = child(object, "fields")?.as_array().ok_or("an Avro record's fields are not a list")?;
    let mut out = Vec::with_capacity(fields.len());
    for field in fields {
        let name = field.get("name").and_then(Json::as_str).ok_or("an Avro field has no name")?;
        out.push((name.to_string(), parse(field.get("type").ok_or("an Avro field has no type")?, names, depth + 1)?));
    }
    Ok(Avro::Record(out))
}

fn primitive(name: &str) -> Option<Avro> {
    Some(match name {
        "null" => Avro::Null,
        "boolean" => Avro::Boolean,
        "int" => Avro::Int,
        "long" => Avro::Long,
        "float" => Avro::Float,
        "double" => Avro::Double,
        "bytes" => Avro::Bytes,
        "string" => Avro::String,
        _ => return None,
    })
}

/// Decodes one value of type `ty` from Avro binary `bytes` and writes it
/// as JSON. The whole input must be the value.
pub fn write_json(out: &mut JsonOut, ty: &Avro, bytes: &[u8]) -> Result<(), String> {
    // Items of a type that takes no bytes (null) would let a few bytes
    // claim billions of items: no value may hold more items than bytes,
    // give or take a margin for empty ones.
    let mut reader = Reader { bytes, at: 0, items_left: bytes.len().saturating_mul(8).saturating_add(64) };
    reader.value(out, ty, 0)?;
    if reader.at != bytes.len() {
        return Err(format!("{} bytes are left after the value", bytes.len() - reader.at));
    }
    Ok(())
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
    /// Array and map items the value may still hold.
    items_left: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or("the value ends early")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// A zig-zag variable-length long (ints are encoded the same way).
    fn long(&mut self) -> Result<i64, String> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err("a variable-length number is longer than 10 bytes".into())
    }

    fn length(&mut self) -> Result<usize, String> {
        usize::try_from(self.long()?).map_err(|_| "a negative length".to_string())
    }

    fn value(&mut self, out: &mut JsonOut, ty: &Avro, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("the value nests too deeply".into());
        }
        match ty {
            Avro::Null => out.raw("null"),
            Avro::Boolean => out.raw(if self.take(1)?[0] != 0 { "true" } else { "false" }),
            Avro::Int | Avro::Long => out.int(self.long()?),
            Avro::Float => {
                let raw: [u8; 4] = self.take(4)?.try_into().map_err(|_| "a float ends early")?;
                out.float32(f32::from_le_bytes(raw));
            }
            Avro::Double => {
                let raw: [u8; 8] = self.take(8)?.try_into().map_err(|_| "a double ends early")?;
                out.double(f64::from_le_bytes(raw));
            }
            Avro::Bytes => {
                let n = self.length()?;
                out.base64(self.take(n)?);
            }
            Avro::Fixed(n) => out.base64(self.take(*n)?),
            Avro::String => {
                let n = self.length()?;
                let text = std::str::from_utf8(self.take(n)?).map_err(|_| "a string is not UTF-8")?;
                out.str(text);
            }
            Avro::Enum(symbols) => {
                let i = self.length()?;
                out.str(symbols.get(i).ok_or("an enum index past its symbols")?);
            }
            Avro::Record(fields) => {
                out.byte(b'{');
                for (i, (name, field)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.byte(b',');
                    }
                    out.str(name);
                    out.byte(b':');
                    self.value(out, field, depth + 1)?;
                }
                out.byte(b'}');
            }
            Avro::Array(items) => self.blocks(out, b'[', b']', |reader, out| reader.value(out, items, depth + 1))?,
            Avro::Map(values) => self.blocks(out, b'{', b'}', |reader, out| {
                let n = reader.length()?;
                let key = std::str::from_utf8(reader.take(n)?).map_err(|_| "a map key is not UTF-8")?;
                out.str(key);
                out.byte(b':');
                reader.value(out, values, depth + 1)
            })?,
            Avro::Union(branches) => {
                let i = self.length()?;
                self.value(out, branches.get(i).ok_or("a union index past its branches")?, depth + 1)?;
            }
            Avro::Date => {
                let days = i32::try_from(self.long()?).map_err(|_| "a date out of range")?;
                out.str(&format!("{}T00:00:00Z", latsdb_types::value::format_date(days)));
            }
            Avro::TimestampMillis => {
                let micros = self.long()?.checked_mul(1000).ok_or("a timestamp out of range")?;
                out.str(&rfc3339(micros));
            }
            Avro::TimestampMicros => out.str(&rfc3339(self.long()?)),
            Avro::TimeMillis => out.int(self.long()?.saturating_mul(1_000_000)),
            Avro::TimeMicros => out.int(self.long()?.saturating_mul(1000)),
        }
        Ok(())
    }

    /// An array's or a map's blocks: a count (negative: then its size in
    /// bytes), that many items, until a count of zero.
    fn blocks(
        &mut self,
        out: &mut JsonOut,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self, &mut JsonOut) -> Result<(), String>,
    ) -> Result<(), String> {
        out.byte(open);
        let mut first = true;
        loop {
            let mut count = self.long()?;
            if count == 0 {
                break;
            }
            if count < 0 {
                count = count.checked_neg().ok_or("a block count out of range")?;
                self.long()?;
            }
            let count = usize::try_from(count).map_err(|_| "a block count out of range")?;
            self.items_left =
                self.items_left.checked_sub(count).ok_or("the value claims more items than its bytes hold")?;
            for _ in 0..count {
                if !first {
                    out.byte(b',');
                }
                first = false;
                item(self, out)?;
            }
        }
        out.byte(close);
        Ok(())
    }
}

/// Microseconds since the epoch as RFC 3339 text in UTC, without trailing
/// zeros in the fraction (Go's RFC3339Nano, which RonDB's answers use).
fn rfc3339(micros: i64) -> String {
    let text = latsdb_types::value::format_datetime(micros).replacen(' ', "T", 1);
    let text = match text.split_once('.') {
        Some((whole, fraction)) => {
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                whole.to_string()
            } else {
                format!("{whole}.{fraction}")
            }
        }
        None => text,
    };
    format!("{text}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_types_that_double_at_each_step_are_refused() {
        // T0 is a long; each Tn is a record of two T(n-1): 2^40 nodes.
        let mut types = vec![r#"{"type":"record","name":"T0","fields":[{"name":"a","type":"long"}]}"#.to_string()];
        for n in 1..=40 {
            let p = n - 1;
            types.push(format!(
                r#"{{"type":"record","name":"T{n}","fields":[{{"name":"a","type":"T{p}"}},{{"name":"b","type":"T{p}"}}]}}"#
            ));
        }
        let defs: Vec<String> =
            types.iter().enumerate().map(|(i, t)| format!(r#"{{"name":"d{i}","type":{t}}}"#)).collect();
        let schema = format!(r#"{{"type":"record","name":"r","fields":[{}]}}"#, defs.join(","));
        let e = field_type(&schema, "d40").expect_err("too many copies");
        assert!(e.contains("named types"), "{e}");
        // A few references are fine.
        let small = format!(r#"{{"type":"record","name":"r","fields":[{}]}}"#, defs[..4].join(","));
        assert!(field_type(&small, "d3").is_ok());
    }

    fn json(ty: &Avro, bytes: &[u8]) -> String {
        let mut out = JsonOut::default();
        write_json(&mut out, ty, bytes).unwrap();
        String::from_utf8(out.buf).unwrap()
    }

    #[test]
    fn a_feature_groups_schema_gives_a_fields_type() {
        let schema = r#"{"type":"record","name":"fg","namespace":"x","fields":[
            {"name":"id","type":["null","long"]},
            {"name":"items","type":["null",{"type":"array","items":["null",{"type":"record","name":"r",
              "fields":[{"name":"sku","type":["null","string"]},
                        {"name":"ts","type":["null",{"type":"long","logicalType":"timestamp-micros"}]}]}]}]}]}"#;
        let items = field_type(schema, "items").unwrap();
        // [null | array of [null | {sku, ts}]]: one item, sku "a", ts 1.5 s.
        let bytes = [2, 2, 2, 2, 2, b'a', 2, 0xc0, 0x8d, 0xb7, 0x01, 0];
        assert_eq!(json(&items, &bytes), r#"[{"sku":"a","ts":"1970-01-01T00:00:01.5Z"}]"#);
        assert_eq!(json(&items, &[0]), "null");
        assert!(field_type(schema, "nope").unwrap_err().contains("Cannot find schema for feature nope"));
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        let ty = Avro::Array(Box::new(Avro::String));
        let mut out = JsonOut::default();
        assert!(write_json(&mut out, &ty, &[2, 20, b'a']).is_err());
        assert!(write_json(&mut out, &ty, &[0xff; 12]).is_err());
        assert!(write_json(&mut out, &Avro::Long, &[2, 0]).is_err());
        assert!(write_json(&mut out, &Avro::Union(vec![Avro::Null]), &[4]).is_err());
        // A billion nulls in five bytes are refused, not written.
        let nulls = Avro::Array(Box::new(Avro::Null));
        assert!(write_json(&mut out, &nulls, &[0x80, 0xa8, 0xd6, 0xb9, 0x07, 0]).is_err());
        assert_eq!(json(&nulls, &[4, 0]), "[null,null]");
    }
}
