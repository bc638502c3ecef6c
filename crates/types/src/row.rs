//! Compact row format.
//!
//! A row is `[null bitmap][fixed part][variable part]`:
//! - the null bitmap has one bit per column (bit i of byte i/8), set when NULL;
//! - the fixed part holds every fixed-size column at a fixed offset (zeroed
//!   when NULL), little-endian: integers at their stored width, FLOAT as f32,
//!   DOUBLE as f64, DECIMAL as the unscaled i128 at the column's scale, DATE as
//!   i32 days, DATETIME/TIMESTAMP as i64 microseconds, BOOLEAN as one byte;
//! - the variable part holds each variable-size column in column order as a
//!   u32 little-endian length followed by the bytes (length 0 when NULL).
//!
//! Data nodes store rows in this format and send them to clients unchanged,
//! so a read copies a row once, into the response.

use crate::error::{DbError, Result};
use crate::keycodec;
use crate::schema::{ColumnDef, ColumnId, ColumnType, IntWidth};
use crate::value::{Decimal, Value};

/// A column's value borrowed from a row: strings and bytes point into the
/// row, fixed-size values are copied (they never allocate).
#[derive(Clone, Debug, PartialEq)]
pub enum ValueRef<'r> {
    Null,
    /// Any fixed-size type; never `Value::Str` or `Value::Bytes`.
    Scalar(Value),
    Str(&'r str),
    Bytes(&'r [u8]),
}

#[derive(Clone, Debug)]
enum Slot {
    Fixed { offset: usize, size: usize },
    Var { ordinal: usize },
}

/// Precomputed positions of each column of a row (or of a projection).
#[derive(Clone, Debug)]
pub struct RowLayout {
    columns: Vec<ColumnDef>,
    slots: Vec<Slot>,
    fixed_end: usize,
}

impl RowLayout {
    pub fn new(columns: &[ColumnDef]) -> Self {
        let null_bytes = columns.len().div_ceil(8);
        let mut offset = null_bytes;
        let mut ordinal = 0;
        let slots = columns
            .iter()
            .map(|c| match c.ty.fixed_size() {
                Some(size) => {
                    let slot = Slot::Fixed { offset, size };
                    offset += size;
                    slot
                }
                None => {
                    let slot = Slot::Var { ordinal };
                    ordinal += 1;
                    slot
                }
            })
            .collect();
        RowLayout { columns: columns.to_vec(), slots, fixed_end: offset }
    }

    /// The layout of a projection of `columns` (in the order given).
    pub fn projection(&self, columns: &[ColumnId]) -> RowLayout {
        let defs: Vec<ColumnDef> = columns.iter().map(|&c| self.columns[c as usize].clone()).collect();
        RowLayout::new(&defs)
    }

    pub fn columns(&self) -> &[ColumnDef] {
        &self.columns
    }

    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Encodes values that were already coerced to the columns' types.
    pub fn encode(&self, values: &[Value]) -> Vec<u8> {
        assert_eq!(values.len(), self.columns.len(), "encode: one value per column");
        let var_bytes: usize = values
            .iter()
            .zip(&self.slots)
            .map(|(v, s)| match (s, v) {
                (Slot::Var { .. }, Value::Str(s)) => 4 + s.len(),
                (Slot::Var { .. }, Value::Bytes(b)) => 4 + b.len(),
                (Slot::Var { .. }, _) => 4,
                _ => 0,
            })
            .sum();
        let mut out = vec![0u8; self.fixed_end];
        out.reserve(var_bytes);
        for (i, (value, column)) in values.iter().zip(&self.columns).enumerate() {
            if value.is_null() {
                out[i / 8] |= 1 << (i % 8);
            }
            if let Slot::Fixed { offset, size } = self.slots[i] {
                if !value.is_null() {
                    write_fixed(&mut out[offset..offset + size], column.ty, value);
                }
            }
        }
        for (value, slot) in values.iter().zip(&self.slots) {
            if let Slot::Var { .. } = slot {
                let bytes: &[u8] = match value {
                    Value::Str(s) => s.as_bytes(),
                    Value::Bytes(b) => b,
                    Value::Null => &[],
                    other => panic!("encode: {other:?} in a variable-size column was not coerced"),
                };
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
        out
    }

    pub fn is_null(&self, row: &[u8], column: usize) -> bool {
        row[column / 8] & (1 << (column % 8)) != 0
    }

    /// Raw bytes of a variable-size column.
    fn var_bytes<'r>(&self, row: &'r [u8], ordinal: usize) -> &'r [u8] {
        let mut pos = self.fixed_end;
        for _ in 0..ordinal {
            let len = u32::from_le_bytes([row[pos], row[pos + 1], row[pos + 2], row[pos + 3]]) as usize;
            pos += 4 + len;
        }
        let len = u32::from_le_bytes([row[pos], row[pos + 1], row[pos + 2], row[pos + 3]]) as usize;
        &row[pos + 4..pos + 4 + len]
    }

    /// Reads one column of a row that `validate` accepted (or that this
    /// process encoded).
    pub fn get(&self, row: &[u8], column: usize) -> Value {
        if self.is_null(row, column) {
            return Value::Null;
        }
        let ty = self.columns[column].ty;
        match self.slots[column] {
            Slot::Fixed { offset, size } => read_fixed(&row[offset..offset + size], ty),
            Slot::Var { ordinal } => {
                let bytes = self.var_bytes(row, ordinal);
                if ty.is_string() {
                    // Validated on the way in; lossless for valid UTF-8.
                    Value::Str(String::from_utf8_lossy(bytes).into_owned())
                } else {
                    Value::Bytes(bytes.to_vec())
                }
            }
        }
    }

    /// Reads one column without copying strings or bytes out of the row
    /// (serializers on the hot path use this).
    pub fn get_ref<'r>(&self, row: &'r [u8], column: usize) -> ValueRef<'r> {
        if self.is_null(row, column) {
            return ValueRef::Null;
        }
        let ty = self.columns[column].ty;
        match self.slots[column] {
            Slot::Fixed { offset, size } => ValueRef::Scalar(read_fixed(&row[offset..offset + size], ty)),
            Slot::Var { ordinal } => {
                let bytes = self.var_bytes(row, ordinal);
                match std::str::from_utf8(bytes) {
                    Ok(text) if ty.is_string() => ValueRef::Str(text),
                    _ => ValueRef::Bytes(bytes),
                }
            }
        }
    }

    pub fn decode(&self, row: &[u8]) -> Vec<Value> {
        (0..self.columns.len()).map(|c| self.get(row, c)).collect()
    }

    /// Checks that `row` is a well-formed row of this layout (used on rows
    /// that arrive from the network).
    pub fn validate(&self, row: &[u8]) -> Result<()> {
        let bad = |what: &str| DbError::malformed(format!("row of {} bytes is malformed: {what}", row.len()));
        if row.len() < self.fixed_end {
            return Err(bad("shorter than its fixed part"));
        }
        let mut pos = self.fixed_end;
        for (i, slot) in self.slots.iter().enumerate() {
            if let Slot::Var { .. } = slot {
                let header = row.get(pos..pos + 4).ok_or_else(|| bad("truncated length"))?;
                let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
                let bytes = row.get(pos + 4..pos + 4 + len).ok_or_else(|| bad("truncated value"))?;
                if self.columns[i].ty.is_string() && std::str::from_utf8(bytes).is_err() {
                    return Err(bad("string column is not UTF-8"));
                }
                pos += 4 + len;
            }
        }
        if pos != row.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(())
    }

    /// Encodes the given columns of `row` as a memcomparable key.
    pub fn key_of(&self, row: &[u8], columns: &[ColumnId], out: &mut Vec<u8>) {
        for &c in columns {
            let value = self.get(row, c as usize);
            keycodec::encode_value(out, self.columns[c as usize].ty, &value);
        }
    }

    /// Copies the projected columns of `row` into a new row of the
    /// projection's layout (`projection(columns)`), byte for byte: no value
    /// is decoded (a scan projects every row it returns).
    pub fn project(&self, row: &[u8], columns: &[ColumnId], projected: &RowLayout) -> Vec<u8> {
        assert_eq!(columns.len(), projected.columns.len(), "project: the layout must be projection(columns)");
        let mut out = vec![0u8; projected.fixed_end];
        // The projected variable part is at most the row's.
        out.reserve(row.len().saturating_sub(self.fixed_end));
        for (i, &c) in columns.iter().enumerate() {
            let c = c as usize;
            let null = self.is_null(row, c);
            if null {
                out[i / 8] |= 1 << (i % 8);
            }
            if let (&Slot::Fixed { offset, size }, &Slot::Fixed { offset: to, .. }) =
                (&self.slots[c], &projected.slots[i])
            {
                if !null {
                    out[to..to + size].copy_from_slice(&row[offset..offset + size]);
                }
            }
        }
        for &c in columns {
            if let Slot::Var { ordinal } = self.slots[c as usize] {
                // A NULL is stored with length 0, as `encode` writes it.
                let bytes = self.var_bytes(row, ordinal);
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
        out
    }
}

fn write_fixed(out: &mut [u8], ty: ColumnType, value: &Value) {
    match (ty, value) {
        (ColumnType::Integer { width, .. }, v) => {
            let raw = match v {
                Value::Int(i) => *i as u64,
                Value::UInt(u) => *u,
                other => panic!("write_fixed: {other:?} in an integer column was not coerced"),
            };
            let n = width.stored_bytes();
            out.copy_from_slice(&raw.to_le_bytes()[..n]);
        }
        (ColumnType::Float, Value::Float(f)) => out.copy_from_slice(&(*f as f32).to_le_bytes()),
        (ColumnType::Double, Value::Float(f)) => out.copy_from_slice(&f.to_le_bytes()),
        (ColumnType::Decimal { .. }, Value::Decimal(d)) => out.copy_from_slice(&d.unscaled.to_le_bytes()),
        (ColumnType::Date, Value::Date(d)) => out.copy_from_slice(&d.to_le_bytes()),
        (ColumnType::DateTime, Value::DateTime(t)) | (ColumnType::Timestamp, Value::Timestamp(t)) => {
            out.copy_from_slice(&t.to_le_bytes())
        }
        (ColumnType::Boolean, Value::Bool(b)) => out[0] = *b as u8,
        (ty, v) => panic!("write_fixed: {v:?} was not coerced to {ty:?}"),
    }
}

fn read_fixed(bytes: &[u8], ty: ColumnType) -> Value {
    let mut raw = [0u8; 16];
    raw[..bytes.len()].copy_from_slice(bytes);
    match ty {
        ColumnType::Integer { width, unsigned } => {
            let u = u64::from_le_bytes([raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7]]);
            if unsigned {
                Value::UInt(u)
            } else {
                let shift = 64 - 8 * width.stored_bytes() as u32;
                let shift = if width == IntWidth::Medium { 32 } else { shift };
                Value::Int(((u << shift) as i64) >> shift)
            }
        }
        ColumnType::Float => Value::Float(f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as f64),
        ColumnType::Double => {
            Value::Float(f64::from_le_bytes([raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7]]))
        }
        ColumnType::Decimal { scale, .. } => Value::Decimal(Decimal::new(i128::from_le_bytes(raw), scale)),
        ColumnType::Date => Value::Date(i32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]])),
        ColumnType::DateTime => {
            Value::DateTime(i64::from_le_bytes([raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7]]))
        }
        ColumnType::Timestamp => {
            Value::Timestamp(i64::from_le_bytes([raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7]]))
        }
        ColumnType::Boolean => Value::Bool(raw[0] != 0),
        other => panic!("read_fixed on variable-size type {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::coerce;

    fn all_types() -> Vec<ColumnDef> {
        vec![
            ColumnDef::new("ti", ColumnType::int(IntWidth::Tiny)),
            ColumnDef::new("mi", ColumnType::int(IntWidth::Medium)),
            ColumnDef::new("ub", ColumnType::uint(IntWidth::Big)),
            ColumnDef::new("f", ColumnType::Float),
            ColumnDef::new("d", ColumnType::Double),
            ColumnDef::new("dec", ColumnType::Decimal { precision: 20, scale: 4 }),
            ColumnDef::new("c", ColumnType::Char(10)),
            ColumnDef::new("vc", ColumnType::VarChar(100)),
            ColumnDef::new("b", ColumnType::Binary(4)),
            ColumnDef::new("vb", ColumnType::VarBinary(10)),
            ColumnDef::new("t", ColumnType::Text),
            ColumnDef::new("bl", ColumnType::Blob),
            ColumnDef::new("da", ColumnType::Date),
            ColumnDef::new("dt", ColumnType::DateTime),
            ColumnDef::new("ts", ColumnType::Timestamp),
            ColumnDef::new("bo", ColumnType::Boolean),
        ]
    }

    #[test]
    fn every_type_round_trips() {
        let cols = all_types();
        let layout = RowLayout::new(&cols);
        let values = vec![
            Value::Int(-128),
            Value::Int(-8_388_608),
            Value::UInt(u64::MAX),
            Value::Float(1.5),
            Value::Float(-2.25e100),
            Value::Str("-1234.5678".into()),
            Value::Str("héllo".into()),
            Value::Null,
            Value::Bytes(vec![0, 1, 2, 3]),
            Value::Bytes(vec![]),
            Value::Str("long text".into()),
            Value::Bytes(vec![9; 300]),
            Value::Str("2020-01-31".into()),
            Value::Str("2020-01-31 10:11:12.5".into()),
            Value::Timestamp(1_700_000_000_000_000),
            Value::Bool(true),
        ];
        let coerced: Vec<Value> = values.into_iter().zip(&cols).map(|(v, c)| coerce(v, c).unwrap()).collect();
        let row = layout.encode(&coerced);
        layout.validate(&row).unwrap();
        assert_eq!(layout.decode(&row), coerced);
        assert!(layout.validate(&row[..row.len() - 1]).is_err());
        for (i, value) in coerced.iter().enumerate() {
            let borrowed = match layout.get_ref(&row, i) {
                ValueRef::Null => Value::Null,
                ValueRef::Scalar(v) => v,
                ValueRef::Str(s) => Value::Str(s.to_string()),
                ValueRef::Bytes(b) => Value::Bytes(b.to_vec()),
            };
            assert_eq!(&borrowed, value, "column {}", cols[i].name);
        }
    }

    #[test]
    fn projection_keeps_requested_columns_in_order() {
        let cols = all_types();
        let layout = RowLayout::new(&cols);
        let mut values = vec![Value::Null; cols.len()];
        values[2] = Value::UInt(7);
        values[7] = Value::Str("x".into());
        let row = layout.encode(&values);
        let projected = layout.projection(&[7, 2]);
        let p = layout.project(&row, &[7, 2], &projected);
        assert_eq!(projected.decode(&p), vec![Value::Str("x".into()), Value::UInt(7)]);
    }

    #[test]
    fn projections_copy_the_bytes_an_encode_would_write() {
        let cols = all_types();
        let layout = RowLayout::new(&cols);
        // Every other column NULL, in both phases, so NULL fixed and
        // variable columns sit between non-NULL ones.
        for phase in 0..2 {
            let values: Vec<Value> = (0..cols.len())
                .map(|i| {
                    if i % 2 == phase {
                        return Value::Null;
                    }
                    let v = match cols[i].ty {
                        ColumnType::Integer { unsigned: true, .. } => Value::UInt(i as u64 * 3),
                        ColumnType::Integer { .. } => Value::Int(-(i as i64)),
                        ColumnType::Float | ColumnType::Double => Value::Float(i as f64 + 0.5),
                        ColumnType::Decimal { .. } => Value::Str("12.5".into()),
                        ColumnType::Date => Value::Str("2021-02-03".into()),
                        ColumnType::DateTime => Value::Str("2021-02-03 04:05:06".into()),
                        ColumnType::Timestamp => Value::Timestamp(1_600_000_000_000_000),
                        ColumnType::Boolean => Value::Bool(true),
                        ty if ty.is_binary() => Value::Bytes(vec![i as u8; 3]),
                        _ => Value::Str(format!("v{i}")),
                    };
                    coerce(v, &cols[i]).unwrap()
                })
                .collect();
            let row = layout.encode(&values);
            for columns in [vec![0u16, 6, 7], vec![15, 11, 3, 10, 1], (0..cols.len() as u16).rev().collect()] {
                let projected = layout.projection(&columns);
                let expected: Vec<Value> = columns.iter().map(|&c| values[c as usize].clone()).collect();
                let p = layout.project(&row, &columns, &projected);
                assert_eq!(p, projected.encode(&expected), "columns {columns:?}, phase {phase}");
                projected.validate(&p).unwrap();
            }
        }
    }
}
