//! A table definition with its derived row layout and key helpers, shared by
//! clients (to encode keys and route) and data nodes (to validate and store).

use crate::error::{DbError, ErrorCode, Result};
use crate::keycodec;
use crate::row::{AddedPart, RowLayout};
use crate::schema::{ColumnDef, ColumnId, IndexId, TableDef};
use crate::value::{coerce, Value};

#[derive(Debug)]
pub struct TableMeta {
    pub def: TableDef,
    pub layout: RowLayout,
}

impl TableMeta {
    pub fn new(def: TableDef) -> TableMeta {
        let added: Vec<AddedPart> = def
            .added_parts
            .iter()
            .map(|p| AddedPart { first_column: p.first_column as usize, fill: &p.fill })
            .collect();
        let layout = RowLayout::with_parts(&def.columns, &added);
        TableMeta { def, layout }
    }

    pub fn key_columns(&self) -> Vec<&ColumnDef> {
        self.def.primary_key.iter().map(|&c| &self.def.columns[c as usize]).collect()
    }

    pub fn index_columns(&self, index: IndexId) -> Result<&[ColumnId]> {
        self.def.index_by_id(index).map(|i| i.columns.as_slice()).ok_or_else(|| {
            DbError::new(
                ErrorCode::UnknownIndex,
                format!("table {} has no index with id {index}", self.def.qualified_name()),
            )
        })
    }

    /// Coerces and encodes a primary key given as values in key order.
    pub fn encode_key(&self, key: &[Value]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.def.primary_key.len() * 10);
        self.encode_key_into(key, &mut out)?;
        Ok(out)
    }

    /// Appends the encoding of primary key `key` to `out` (on an error,
    /// part of it may have been appended).
    pub fn encode_key_into(&self, key: &[Value], out: &mut Vec<u8>) -> Result<()> {
        let pk = &self.def.primary_key;
        if key.len() != pk.len() {
            return keycodec::encode_key(&self.key_columns(), key).map(|k| out.extend_from_slice(&k));
        }
        for (&c, value) in pk.iter().zip(key) {
            let column = &self.def.columns[c as usize];
            let v = coerce(value.clone(), column)?;
            keycodec::encode_value(out, column.ty, column.collation, &v);
        }
        Ok(())
    }

    /// Checks that bytes received as a key are a well-formed key of this
    /// table, without allocating.
    pub fn validate_key(&self, key: &[u8]) -> Result<()> {
        keycodec::validate_key(self.def.primary_key.iter().map(|&c| self.def.columns[c as usize].ty), key)
    }

    pub fn partition_of(&self, key: &[u8]) -> u32 {
        keycodec::partition_of(key, self.def.partitions)
    }

    /// The primary key of an encoded row.
    pub fn key_of_row(&self, row: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        self.layout.key_of(row, &self.def.primary_key, &mut out);
        out
    }

    /// Coerces a full row given in column order.
    pub fn coerce_row(&self, values: Vec<Value>) -> Result<Vec<Value>> {
        if values.len() != self.def.columns.len() {
            return Err(DbError::bad_request(format!(
                "table {} has {} columns but the row has {} values",
                self.def.qualified_name(),
                self.def.columns.len(),
                values.len()
            )));
        }
        // A dropped column has a place in the row but never a value.
        let column_value = |(v, c): (Value, &ColumnDef)| if c.is_dropped() { Ok(Value::Null) } else { coerce(v, c) };
        values.into_iter().zip(&self.def.columns).map(column_value).collect()
    }

    /// A full row from named values; unnamed columns take their default (or NULL).
    pub fn row_from_named(&self, named: &[(&str, Value)]) -> Result<Vec<Value>> {
        let mut row: Vec<Option<Value>> = vec![None; self.def.columns.len()];
        for (name, value) in named {
            let id = self.def.column_id(name)? as usize;
            if row[id].is_some() {
                return Err(DbError::bad_request(format!("column '{name}' is given twice")));
            }
            row[id] = Some(value.clone());
        }
        Ok(row
            .into_iter()
            .zip(&self.def.columns)
            .map(|(v, c)| v.unwrap_or_else(|| c.default.clone().unwrap_or(Value::Null)))
            .collect())
    }

    /// A stored row's values after an update's assignments, each computed
    /// from the row as it was (as the data node applies them).
    pub fn updated_values(&self, row: &[u8], set: &[(ColumnId, crate::expr::Expr)]) -> Result<Vec<Value>> {
        let mut assigned = Vec::with_capacity(set.len());
        for (column, expr) in set {
            let v = expr.eval(&self.layout, row);
            assigned.push((*column as usize, coerce(v, &self.def.columns[*column as usize])?));
        }
        let mut values = self.layout.decode(row);
        for (column, v) in assigned {
            values[column] = v;
        }
        Ok(values)
    }

    pub fn validate_projection(&self, projection: Option<&[ColumnId]>) -> Result<()> {
        if let Some(columns) = projection {
            if columns.is_empty() || columns.len() > self.def.columns.len() * 4 {
                return Err(DbError::bad_request("a projection must name 1 or more columns (and not absurdly many)"));
            }
            if let Some(c) = columns.iter().find(|&&c| c as usize >= self.def.columns.len()) {
                return Err(DbError::new(
                    ErrorCode::UnknownColumn,
                    format!("table {} has no column number {c}", self.def.qualified_name()),
                ));
            }
        }
        Ok(())
    }
}
