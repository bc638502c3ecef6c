//! Compact row format.
//!
//! A row is one or more *parts*, each `[null bitmap][fixed part][variable
//! part]` over a run of columns:
//! - the null bitmap has one bit per column of the part (bit i of byte i/8),
//!   set when NULL;
//! - the fixed part holds every fixed-size column at a fixed offset (zeroed
//!   when NULL), little-endian: integers at their stored width, FLOAT as f32,
//!   DOUBLE as f64, DECIMAL as the unscaled i128 at the column's scale, DATE as
//!   i32 days, DATETIME/TIMESTAMP as i64 microseconds, BOOLEAN as one byte;
//! - the variable part holds each variable-size column in column order as a
//!   u32 little-endian length followed by the bytes (length 0 when NULL).
//!
//! A table starts with one part. `ALTER TABLE ... ADD COLUMN` appends a part
//! for the new columns without touching stored rows: a row written before
//! the change simply ends before that part, and its new columns read as the
//! part's fill values (NDB's online add column stores added columns apart
//! for the same reason). Every write stores a whole row of the current
//! layout, so rows gain the part as they are rewritten. Bytes after the
//! parts a layout knows belong to columns of a newer definition and are
//! ignored, so a reader one schema change behind still reads its columns.
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

/// Where a column sits inside its part (offsets relative to the part's start).
#[derive(Clone, Debug)]
enum Slot {
    Fixed { offset: usize, size: usize },
    Var { ordinal: usize },
}

#[derive(Clone, Debug)]
struct Part {
    /// Columns `first..end` of the row.
    first: usize,
    end: usize,
    fixed_end: usize,
    var_columns: usize,
    /// What the part's columns read as in a row stored before the part
    /// existed (empty for the first part, which every row has).
    fill: Vec<Value>,
}

/// Precomputed positions of each column of a row (or of a projection).
#[derive(Clone, Debug)]
pub struct RowLayout {
    columns: Vec<ColumnDef>,
    slots: Vec<Slot>,
    /// The part of each column.
    part_of: Vec<u16>,
    parts: Vec<Part>,
}

/// A part added by a schema change: columns from `first_column` on, and the
/// values they have in rows stored before (coerced to the columns' types).
#[derive(Clone, Debug)]
pub struct AddedPart<'a> {
    pub first_column: usize,
    pub fill: &'a [Value],
}

impl RowLayout {
    pub fn new(columns: &[ColumnDef]) -> Self {
        RowLayout::with_parts(columns, &[])
    }

    /// The layout of a table whose columns from each `added` part's first
    /// column on were added later (in increasing order of first column).
    pub fn with_parts(columns: &[ColumnDef], added: &[AddedPart]) -> Self {
        let mut bounds: Vec<(usize, Vec<Value>)> = vec![(0, Vec::new())];
        for part in added {
            let last = bounds.last().map_or(0, |b| b.0);
            assert!(
                part.first_column > last && part.first_column < columns.len(),
                "row parts must start at increasing columns inside the row"
            );
            bounds.push((part.first_column, part.fill.to_vec()));
        }
        let mut slots = Vec::with_capacity(columns.len());
        let mut part_of = Vec::with_capacity(columns.len());
        let mut parts = Vec::with_capacity(bounds.len());
        for (i, (first, fill)) in bounds.iter().enumerate() {
            let end = bounds.get(i + 1).map_or(columns.len(), |b| b.0);
            assert!(i == 0 || fill.len() == end - first, "a fill value for every column of an added part");
            let mut offset = (end - first).div_ceil(8);
            let mut ordinal = 0;
            for c in &columns[*first..end] {
                slots.push(match c.ty.fixed_size() {
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
                });
                part_of.push(i as u16);
            }
            parts.push(Part { first: *first, end, fixed_end: offset, var_columns: ordinal, fill: fill.clone() });
        }
        RowLayout { columns: columns.to_vec(), slots, part_of, parts }
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
        let fixed: usize = self.parts.iter().map(|p| p.fixed_end).sum();
        let mut out = Vec::with_capacity(fixed + var_bytes);
        for part in &self.parts {
            let start = out.len();
            out.resize(start + part.fixed_end, 0);
            let columns = part.first..part.end;
            let in_part = || values[columns.clone()].iter().zip(&self.slots[columns.clone()]);
            for (local, ((value, slot), column)) in in_part().zip(&self.columns[columns.clone()]).enumerate() {
                if value.is_null() {
                    out[start + local / 8] |= 1 << (local % 8);
                } else if let &Slot::Fixed { offset, size } = slot {
                    write_fixed(&mut out[start + offset..start + offset + size], column.ty, value);
                }
            }
            for (value, slot) in in_part() {
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
        }
        out
    }

    /// Where a part starts in `row`, or None when the row was stored before
    /// the part existed.
    fn part_start(&self, row: &[u8], part: usize) -> Option<usize> {
        let mut pos = 0;
        for p in &self.parts[..part] {
            if pos >= row.len() {
                return None;
            }
            pos = var_end(row, pos + p.fixed_end, p.var_columns);
        }
        (pos < row.len()).then_some(pos)
    }

    /// The fill value of a column of a part the row does not have.
    fn fill(&self, column: usize) -> &Value {
        let part = &self.parts[self.part_of[column] as usize];
        &part.fill[column - part.first]
    }

    /// Where the column's part starts in `row` and the column's number
    /// within the part, or None if the row was stored before the part existed.
    #[inline]
    fn locate(&self, row: &[u8], column: usize) -> Option<(usize, usize)> {
        if self.parts.len() == 1 {
            return Some((0, column));
        }
        let p = self.part_of[column] as usize;
        let start = if p == 0 { 0 } else { self.part_start(row, p)? };
        Some((start, column - self.parts[p].first))
    }

    pub fn is_null(&self, row: &[u8], column: usize) -> bool {
        match self.locate(row, column) {
            Some((start, local)) => row[start + local / 8] & (1 << (local % 8)) != 0,
            None => self.fill(column).is_null(),
        }
    }

    /// Raw bytes of a variable-size column of the part starting at `start`.
    fn var_bytes<'r>(&self, row: &'r [u8], start: usize, column: usize, ordinal: usize) -> &'r [u8] {
        let part = &self.parts[self.part_of[column] as usize];
        let pos = var_end(row, start + part.fixed_end, ordinal);
        let len = u32::from_le_bytes([row[pos], row[pos + 1], row[pos + 2], row[pos + 3]]) as usize;
        &row[pos + 4..pos + 4 + len]
    }

    /// Reads one column of a row that `validate` accepted (or that this
    /// process encoded).
    pub fn get(&self, row: &[u8], column: usize) -> Value {
        match self.get_ref(row, column) {
            ValueRef::Null => Value::Null,
            ValueRef::Scalar(v) => v,
            // Validated on the way in; lossless for valid UTF-8.
            ValueRef::Str(s) => Value::Str(s.to_string()),
            ValueRef::Bytes(b) if self.columns[column].ty.is_string() => {
                Value::Str(String::from_utf8_lossy(b).into_owned())
            }
            ValueRef::Bytes(b) => Value::Bytes(b.to_vec()),
        }
    }

    /// Reads one column without copying strings or bytes out of the row
    /// (serializers on the hot path use this).
    pub fn get_ref<'r>(&'r self, row: &'r [u8], column: usize) -> ValueRef<'r> {
        let Some((start, local)) = self.locate(row, column) else {
            return match self.fill(column) {
                Value::Null => ValueRef::Null,
                Value::Str(s) => ValueRef::Str(s),
                Value::Bytes(b) => ValueRef::Bytes(b),
                scalar => ValueRef::Scalar(scalar.clone()),
            };
        };
        if row[start + local / 8] & (1 << (local % 8)) != 0 {
            return ValueRef::Null;
        }
        let ty = self.columns[column].ty;
        match self.slots[column] {
            Slot::Fixed { offset, size } => {
                ValueRef::Scalar(read_fixed(&row[start + offset..start + offset + size], ty))
            }
            Slot::Var { ordinal } => {
                let bytes = self.var_bytes(row, start, column, ordinal);
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
    /// that arrive from the network or the disk): the first part whole, then
    /// whole parts; bytes after the last known part belong to a newer
    /// definition of the table and are not looked at.
    pub fn validate(&self, row: &[u8]) -> Result<()> {
        let bad = |what: &str| DbError::malformed(format!("row of {} bytes is malformed: {what}", row.len()));
        let mut pos = 0;
        for (p, part) in self.parts.iter().enumerate() {
            if p > 0 && pos == row.len() {
                break;
            }
            if row.len() < pos + part.fixed_end {
                return Err(bad("shorter than its fixed part"));
            }
            pos += part.fixed_end;
            for i in part.first..part.end {
                if let Slot::Var { .. } = self.slots[i] {
                    let header = row.get(pos..pos + 4).ok_or_else(|| bad("truncated length"))?;
                    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
                    let bytes = row.get(pos + 4..pos + 4 + len).ok_or_else(|| bad("truncated value"))?;
                    if self.columns[i].ty.is_string() && std::str::from_utf8(bytes).is_err() {
                        return Err(bad("string column is not UTF-8"));
                    }
                    pos += 4 + len;
                }
            }
        }
        Ok(())
    }

    /// Encodes the given columns of `row` as a memcomparable key.
    pub fn key_of(&self, row: &[u8], columns: &[ColumnId], out: &mut Vec<u8>) {
        for &c in columns {
            let value = self.get(row, c as usize);
            let column = &self.columns[c as usize];
            keycodec::encode_value(out, column.ty, column.collation, &value);
        }
    }

    /// Copies the given columns of `row` into a new row of the layout
    /// `projection(columns)` would have, byte for byte: no value is decoded
    /// and no layout is built (a scan projects every row it returns, a
    /// lookup with read columns every row it finds).
    pub fn project(&self, row: &[u8], columns: &[ColumnId]) -> Vec<u8> {
        let mut out = Vec::new();
        self.project_into(row, columns, &mut out);
        out
    }

    /// The length of `project(row, columns)`, without building it.
    pub fn projected_len(&self, row: &[u8], columns: &[ColumnId]) -> usize {
        if self.parts.len() > 1 {
            return self.project(row, columns).len();
        }
        let sizes = columns.iter().map(|&c| match self.slots[c as usize] {
            Slot::Fixed { size, .. } => size,
            Slot::Var { ordinal } => 4 + self.var_bytes(row, 0, c as usize, ordinal).len(),
        });
        columns.len().div_ceil(8) + sizes.sum::<usize>()
    }

    /// Appends the projection of `row` on `columns` to `out`.
    pub fn project_into(&self, row: &[u8], columns: &[ColumnId], out: &mut Vec<u8>) {
        if self.parts.len() > 1 {
            // Rows of altered tables may lack parts: go through values.
            let values: Vec<Value> = columns.iter().map(|&c| self.get(row, c as usize)).collect();
            return out.extend_from_slice(&self.projection(columns).encode(&values));
        }
        let base = out.len();
        let null_bytes = columns.len().div_ceil(8);
        let fixed: usize = columns
            .iter()
            .map(|&c| match self.slots[c as usize] {
                Slot::Fixed { size, .. } => size,
                Slot::Var { .. } => 0,
            })
            .sum();
        // The projected variable part is at most the row's.
        out.reserve(null_bytes + fixed + row.len().saturating_sub(self.parts[0].fixed_end));
        out.resize(base + null_bytes + fixed, 0);
        let mut to = base + null_bytes;
        for (i, &c) in columns.iter().enumerate() {
            let c = c as usize;
            let null = row[c / 8] & (1 << (c % 8)) != 0;
            if null {
                out[base + i / 8] |= 1 << (i % 8);
            }
            if let Slot::Fixed { offset, size } = self.slots[c] {
                if !null {
                    out[to..to + size].copy_from_slice(&row[offset..offset + size]);
                }
                to += size;
            }
        }
        for &c in columns {
            if let Slot::Var { ordinal } = self.slots[c as usize] {
                // A NULL is stored with length 0, as `encode` writes it.
                let bytes = self.var_bytes(row, 0, c as usize, ordinal);
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
}

impl RowLayout {
    /// Appends a row of this layout whose column `c` is column
    /// `origin[c].1` of row `sources[origin[c].0]`, copying bytes as
    /// `project_into` does. It puts back together a row whose columns were
    /// stored apart (the memory and the disk part of a row of a table
    /// with disk columns). This layout and every source's have one part,
    /// and each column has the type of the column it comes from.
    pub fn gather_into(&self, sources: &[(&RowLayout, &[u8])], origin: &[(usize, usize)], out: &mut Vec<u8>) {
        assert_eq!(self.parts.len(), 1, "gather_into builds rows of one part");
        assert_eq!(origin.len(), self.columns.len(), "gather_into: a source for every column");
        debug_assert!(sources.iter().all(|(layout, _)| layout.parts.len() == 1), "sources of one part");
        let base = out.len();
        out.resize(base + self.parts[0].fixed_end, 0);
        for (c, &(source, at)) in origin.iter().enumerate() {
            let (layout, row) = sources[source];
            debug_assert_eq!(layout.columns[at].ty, self.columns[c].ty, "gathered column {c} changes type");
            let null = row[at / 8] & (1 << (at % 8)) != 0;
            if null {
                out[base + c / 8] |= 1 << (c % 8);
            }
            if let (Slot::Fixed { offset, size }, false) = (&self.slots[c], null) {
                let Slot::Fixed { offset: from, .. } = layout.slots[at] else {
                    panic!("gathered column {c} is fixed-size here and not in its source")
                };
                out[base + offset..base + offset + size].copy_from_slice(&row[from..from + size]);
            }
        }
        for (c, &(source, at)) in origin.iter().enumerate() {
            if let Slot::Var { .. } = self.slots[c] {
                let (layout, row) = sources[source];
                let Slot::Var { ordinal } = layout.slots[at] else {
                    panic!("gathered column {c} is variable-size here and not in its source")
                };
                let bytes = layout.var_bytes(row, 0, at, ordinal);
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
}

/// The position after `count` variable-size values starting at `pos`.
fn var_end(row: &[u8], mut pos: usize, count: usize) -> usize {
    for _ in 0..count {
        let len = u32::from_le_bytes([row[pos], row[pos + 1], row[pos + 2], row[pos + 3]]) as usize;
        pos += 4 + len;
    }
    pos
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
        (ColumnType::Time, Value::Time(t)) => out.copy_from_slice(&t.to_le_bytes()),
        (ColumnType::Year, Value::UInt(y)) => {
            debug_assert!(*y <= 2155, "YEAR {y} was not coerced");
            out.copy_from_slice(&(*y as u16).to_le_bytes())
        }
        (ColumnType::Bit(_), Value::UInt(u)) => out.copy_from_slice(&u.to_le_bytes()),
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
        ColumnType::Time => {
            Value::Time(i64::from_le_bytes([raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7]]))
        }
        ColumnType::Year => Value::UInt(u64::from(u16::from_le_bytes([raw[0], raw[1]]))),
        ColumnType::Bit(_) => {
            Value::UInt(u64::from_le_bytes([raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7]]))
        }
        other => panic!("read_fixed on variable-size type {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::coerce;

    fn owned(v: ValueRef) -> Value {
        match v {
            ValueRef::Null => Value::Null,
            ValueRef::Scalar(v) => v,
            ValueRef::Str(s) => Value::Str(s.to_string()),
            ValueRef::Bytes(b) => Value::Bytes(b.to_vec()),
        }
    }

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
            assert_eq!(&owned(layout.get_ref(&row, i)), value, "column {}", cols[i].name);
        }
    }

    #[test]
    fn a_row_split_in_two_projections_gathers_back_byte_for_byte() {
        let cols = all_types();
        let layout = RowLayout::new(&cols);
        for nulls in [0usize, 1, 2, 3] {
            let values: Vec<Value> = (0..cols.len())
                .map(|i| match (i % 4 == nulls, &cols[i].ty) {
                    (true, _) => Value::Null,
                    (false, ColumnType::Integer { unsigned: true, .. }) => Value::UInt(i as u64),
                    (false, ColumnType::Integer { .. }) => Value::Int(-(i as i64)),
                    (false, ty) if ty.is_string() => Value::Str(format!("v{i}")),
                    (false, ColumnType::Binary(_) | ColumnType::VarBinary(_) | ColumnType::Blob) => {
                        Value::Bytes(vec![i as u8; 3])
                    }
                    (false, ColumnType::Boolean) => Value::Bool(true),
                    (false, ColumnType::Date) => Value::Date(i as i32),
                    (false, ColumnType::DateTime) => Value::DateTime(i as i64),
                    (false, ColumnType::Timestamp) => Value::Timestamp(i as i64),
                    (false, _) => Value::Float(i as f64),
                })
                .zip(&cols)
                .map(|(v, c)| coerce(v, c).unwrap())
                .collect();
            let row = layout.encode(&values);
            let first: Vec<ColumnId> = (0..cols.len() as ColumnId).filter(|c| c % 3 != 1).collect();
            let second: Vec<ColumnId> = (0..cols.len() as ColumnId).filter(|c| c % 3 == 1).collect();
            let (a, b) = (layout.projection(&first), layout.projection(&second));
            let (ra, rb) = (layout.project(&row, &first), layout.project(&row, &second));
            let origin: Vec<(usize, usize)> = (0..cols.len() as ColumnId)
                .map(|c| match first.iter().position(|&f| f == c) {
                    Some(p) => (0, p),
                    None => (1, second.iter().position(|&s| s == c).unwrap()),
                })
                .collect();
            assert_eq!(layout.projected_len(&row, &first), ra.len());
            assert_eq!(layout.projected_len(&row, &second), rb.len());
            let mut out = vec![0xAA];
            layout.gather_into(&[(&a, &ra), (&b, &rb)], &origin, &mut out);
            assert_eq!(&out[1..], &row[..], "NULL in every fourth column from {nulls}");
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
        let p = layout.project(&row, &[7, 2]);
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
                    value_of(&cols[i], i)
                })
                .collect();
            let row = layout.encode(&values);
            for columns in [vec![0u16, 6, 7], vec![15, 11, 3, 10, 1], (0..cols.len() as u16).rev().collect()] {
                let projected = layout.projection(&columns);
                let expected: Vec<Value> = columns.iter().map(|&c| values[c as usize].clone()).collect();
                let p = layout.project(&row, &columns);
                assert_eq!(p, projected.encode(&expected), "columns {columns:?}, phase {phase}");
                projected.validate(&p).unwrap();
            }
        }
    }

    /// The table of `all_types`, created with its first 6 columns; columns
    /// 6..12 were added by one change and 12.. by another.
    fn altered() -> (Vec<ColumnDef>, Vec<Value>, RowLayout, RowLayout, RowLayout) {
        let cols = all_types();
        let fill: Vec<Value> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| match c.ty {
                _ if i % 3 == 0 => Value::Null,
                ColumnType::Integer { .. } | ColumnType::Float | ColumnType::Double | ColumnType::Decimal { .. } => {
                    coerce(Value::Int(i as i64), c).unwrap()
                }
                ColumnType::Date => coerce(Value::Str("2001-02-03".into()), c).unwrap(),
                ColumnType::DateTime => coerce(Value::Str("2001-02-03 04:05:06".into()), c).unwrap(),
                ColumnType::Timestamp => Value::Timestamp(7),
                ColumnType::Boolean => Value::Bool(true),
                ty if ty.is_binary() => coerce(Value::Bytes(vec![i as u8; 2]), c).unwrap(),
                _ => coerce(Value::Str(format!("fill{i}")), c).unwrap(),
            })
            .collect();
        let created = RowLayout::new(&cols[..6]);
        let once = RowLayout::with_parts(&cols[..12], &[AddedPart { first_column: 6, fill: &fill[6..12] }]);
        let twice = RowLayout::with_parts(
            &cols,
            &[AddedPart { first_column: 6, fill: &fill[6..12] }, AddedPart { first_column: 12, fill: &fill[12..] }],
        );
        (cols, fill, created, once, twice)
    }

    /// A non-NULL value of column `i`, coerced.
    fn value_of(column: &ColumnDef, i: usize) -> Value {
        let v = match column.ty {
            ColumnType::Integer { unsigned: true, .. } => Value::UInt(100 + i as u64),
            ColumnType::Integer { .. } => Value::Int(-(i as i64) - 1),
            ColumnType::Float | ColumnType::Double => Value::Float(i as f64 + 0.25),
            ColumnType::Decimal { .. } => Value::Str("3.5".into()),
            ColumnType::Date => Value::Str("2024-05-06".into()),
            ColumnType::DateTime => Value::Str("2024-05-06 07:08:09".into()),
            ColumnType::Timestamp => Value::Timestamp(99),
            ColumnType::Boolean => Value::Bool(false),
            ty if ty.is_binary() => Value::Bytes(vec![9, i as u8]),
            _ => Value::Str(format!("v{i}")),
        };
        coerce(v, column).unwrap()
    }

    fn sample(cols: &[ColumnDef], n: usize) -> Vec<Value> {
        (0..n).map(|i| value_of(&cols[i], i)).collect()
    }

    #[test]
    fn rows_stored_before_columns_were_added_read_the_fill_values() {
        let (cols, fill, created, once, twice) = altered();
        let old = created.encode(&sample(&cols, 6));
        let middle = once.encode(&sample(&cols, 12));
        let new = twice.encode(&sample(&cols, cols.len()));
        for row in [&old, &middle, &new] {
            twice.validate(row).unwrap();
        }
        let mut expected_old = sample(&cols, 6);
        expected_old.extend_from_slice(&fill[6..]);
        assert_eq!(twice.decode(&old), expected_old);
        let mut expected_middle = sample(&cols, 12);
        expected_middle.extend_from_slice(&fill[12..]);
        assert_eq!(twice.decode(&middle), expected_middle);
        assert_eq!(twice.decode(&new), sample(&cols, cols.len()));
        for (i, value) in expected_old.iter().enumerate() {
            assert_eq!(twice.is_null(&old, i), value.is_null(), "column {i}");
            assert_eq!(&owned(twice.get_ref(&old, i)), value, "column {}", cols[i].name);
        }
        // A reader that has not seen the changes reads its own columns of a
        // newer row and ignores the rest.
        created.validate(&new).unwrap();
        assert_eq!(created.decode(&new), sample(&cols, 6));
        assert_eq!(once.decode(&new), sample(&cols, 12));
        // Truncating inside a part is still damage.
        assert!(twice.validate(&new[..new.len() - 1]).is_err());
        assert!(twice.validate(&middle[..old.len() + 1]).is_err());
    }

    #[test]
    fn projections_of_altered_rows_match_an_encode_of_the_values() {
        let (cols, _, created, _, twice) = altered();
        let old = created.encode(&sample(&cols, 6));
        let new = twice.encode(&sample(&cols, cols.len()));
        for row in [old, new] {
            let values = twice.decode(&row);
            for columns in [vec![0u16, 13, 7], vec![15, 2], (0..cols.len() as u16).rev().collect()] {
                let projected = twice.projection(&columns);
                let expected: Vec<Value> = columns.iter().map(|&c| values[c as usize].clone()).collect();
                assert_eq!(twice.project(&row, &columns), projected.encode(&expected));
            }
            let mut key = Vec::new();
            twice.key_of(&row, &[14, 0], &mut key);
            let mut direct = Vec::new();
            keycodec::encode_value(&mut direct, cols[14].ty, cols[14].collation, &values[14]);
            keycodec::encode_value(&mut direct, cols[0].ty, cols[0].collation, &values[0]);
            assert_eq!(key, direct);
        }
    }
}
