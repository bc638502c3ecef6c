//! Unique indexes, kept by the writers.
//!
//! A unique index other than the primary key has a hidden table
//! (`schema::unique_table_name`) keyed by the indexed values and holding the
//! primary key of the row that has them. Every write to the table also
//! writes the hidden table, in the same transaction: the entry of the old
//! values goes, the entry of the new values comes, and an insert of an entry
//! that exists fails with `DuplicateKey`. Two writers of the same values
//! meet on the entry's row lock, wherever their rows live, which is how NDB
//! keeps its unique hash indexes (as hidden tables maintained by triggers).
//! Rows with a NULL in the indexed columns have no entry (NULLs never
//! collide, as in MySQL).
//!
//! A write to such a table runs in up to three rounds of its transaction:
//! exclusive reads of the rows that updates, upserts and deletes replace,
//! then the removal of the entries that go, then the writes themselves with
//! the new entries (removals first, so rows may trade values).

use crate::ops::{Op, Outcome, Row};
use crate::tx::Transaction;
use crate::{Client, Table};
use latsdb_types::proto::{LockMode, OpKind};
use latsdb_types::schema::{unique_table_name, IndexDef, HIDDEN_TABLE_PREFIX};
use latsdb_types::{DbError, ErrorCode, Result, Value};
use std::sync::Arc;

/// The entry writes that keep the unique indexes of `ops`' tables unique.
struct EntryWrites {
    removals: Vec<Op>,
    inserts: Vec<Op>,
    /// Each inserted entry, in the order of `inserts`, for the message of
    /// a duplicate.
    inserted: Vec<InsertedEntry>,
}

struct InsertedEntry {
    hidden: Arc<Table>,
    index: String,
    table: String,
    /// The row's values in the index's columns, as written.
    values: Vec<Value>,
    /// The entry's key (its weight, for `_ci` columns).
    key: Vec<u8>,
}

/// The position of the first write to a table with unique indexes whose
/// row an earlier write of `ops` also writes.
fn second_write_of_a_row(ops: &[Op]) -> Option<usize> {
    let mut written: std::collections::HashSet<(latsdb_types::schema::TableId, &[u8])> =
        std::collections::HashSet::new();
    ops.iter().position(|op| {
        op.guarded.is_some() && op.op.kind.is_write() && !written.insert((op.op.table, op.op.key.as_slice()))
    })
}

/// The indexed values of a row, or None if one of them is NULL.
fn indexed(index: &IndexDef, values: &[Value]) -> Option<Vec<Value>> {
    let v: Vec<Value> = index.columns.iter().map(|&c| values[c as usize].clone()).collect();
    (!v.iter().any(Value::is_null)).then_some(v)
}

async fn hidden_table(client: &Client, table: &Table, index: &IndexDef) -> Result<Arc<Table>> {
    let def = table.def();
    let all = table
        .hidden
        .get_or_try_init(|| async {
            let mut hidden = Vec::new();
            for index in def.unique_indexes() {
                hidden.push(client.refresh_table(&def.database, &unique_table_name(def.id, index.id)).await?);
            }
            Ok::<_, DbError>(hidden)
        })
        .await
        .map_err(|e| {
            DbError::new(
                e.code,
                format!(
                    "the hidden tables of the unique indexes of {} cannot be read ({}); retry",
                    def.qualified_name(),
                    e.message
                ),
            )
        })?;
    def.unique_indexes().zip(all).find(|(i, _)| i.id == index.id).map(|(_, t)| t.clone()).ok_or_else(|| {
        DbError::internal(format!("unique index '{}' is not one of {}'s", index.name, def.qualified_name()))
    })
}

impl Transaction {
    /// `exec` for operations of which some write tables with unique indexes.
    pub(crate) async fn exec_guarded(&mut self, mut ops: Vec<Op>, commit: bool) -> Result<Vec<Outcome>> {
        // A row written twice: the second write replaces what the first
        // wrote, whose entries it must find. The rounds below read rows as
        // they were before the batch, so the batch runs in pieces (in order,
        // in the transaction), each writing a row at most once.
        if let Some(at) = second_write_of_a_row(&ops) {
            let rest = ops.split_off(at);
            let mut outcomes = Box::pin(self.exec_guarded(ops, false)).await?;
            outcomes.extend(Box::pin(self.exec_guarded(rest, commit)).await?);
            return Ok(outcomes);
        }
        // Round 1: the rows that updates, upserts and deletes replace.
        let replaced: Vec<usize> = ops
            .iter()
            .enumerate()
            .filter(|(_, op)| op.guarded.is_some() && !matches!(op.op.kind, OpKind::Insert { .. }))
            .map(|(i, _)| i)
            .collect();
        let mut before: Vec<Option<Row>> = vec![None; ops.len()];
        if !replaced.is_empty() {
            let reads: Vec<Op> = replaced
                .iter()
                .filter_map(|&i| {
                    let table = ops[i].guarded.as_ref()?;
                    Some(Op::new(table, ops[i].op.key.clone(), OpKind::Read { lock: LockMode::Exclusive }))
                })
                .collect();
            for (&i, found) in replaced.iter().zip(self.exec_plain(reads, false).await?) {
                before[i] = found.into_row();
            }
        }
        let entries = self.entry_writes(&ops, &before).await?;
        // Round 2: entries that go.
        if !entries.removals.is_empty() {
            self.exec_plain(entries.removals, false).await?;
        }
        // Round 3: the writes and the entries that come.
        let n = ops.len();
        let mut all = ops;
        all.extend(entries.inserts);
        match self.exec_plain(all, commit).await {
            Ok(mut outcomes) => {
                outcomes.truncate(n);
                Ok(outcomes)
            }
            Err(e) if e.code == ErrorCode::DuplicateKey && e.message.contains(HIDDEN_TABLE_PREFIX) => {
                Err(self.name_duplicate_entry(e, &entries.inserted).await)
            }
            Err(e) => Err(e),
        }
    }

    /// The data node names the hidden table whose entry was taken; MySQL
    /// names the index and the value written: the later of two rows of the
    /// batch that take one entry, else the row whose entry a stored row
    /// holds (read committed, after the fact: the batch wrote nothing).
    async fn name_duplicate_entry(&self, e: DbError, inserted: &[InsertedEntry]) -> DbError {
        let candidates: Vec<&InsertedEntry> =
            inserted.iter().filter(|c| e.message.ends_with(&format!(".{}", c.hidden.def().name))).collect();
        let named = |c: &InsertedEntry| {
            let shown: Vec<String> = c.values.iter().map(Value::to_string).collect();
            DbError::new(
                ErrorCode::DuplicateKey,
                format!("Duplicate entry '{}' for key '{}.{}'", shown.join("-"), c.table, c.index),
            )
        };
        if let [only] = candidates.as_slice() {
            return named(only);
        }
        if let Some(i) = (0..candidates.len()).find(|&i| candidates[..i].iter().any(|c| c.key == candidates[i].key)) {
            return named(candidates[i]);
        }
        let reads: Vec<Op> = candidates
            .iter()
            .map(|c| Op::new(&c.hidden, c.key.clone(), OpKind::Read { lock: LockMode::Committed }))
            .collect();
        // A transaction of its own: this one has failed.
        if let Ok(found) = Box::pin(self.client().transaction().exec_plain(reads, true)).await {
            if let Some((c, _)) = candidates.iter().zip(found).find(|(_, f)| matches!(f, Outcome::Row(_))) {
                return named(c);
            }
        }
        match candidates.first() {
            Some(c) => {
                DbError::new(ErrorCode::DuplicateKey, format!("Duplicate entry for key '{}.{}'", c.table, c.index))
            }
            None => e,
        }
    }

    async fn entry_writes(&self, ops: &[Op], before: &[Option<Row>]) -> Result<EntryWrites> {
        let client = self.client();
        let mut out = EntryWrites { removals: Vec::new(), inserts: Vec::new(), inserted: Vec::new() };
        for (op, old) in ops.iter().zip(before) {
            let Some(table) = &op.guarded else { continue };
            let meta = &table.meta;
            let new: Option<Vec<Value>> = match (&op.op.kind, old) {
                (OpKind::Insert { row } | OpKind::Upsert { row }, _) => Some(row.clone()),
                // Evaluated as the data node will: over the row as it is
                // now, which this transaction holds locked.
                (OpKind::Update { set }, Some(old)) => Some(meta.updated_values(old.bytes(), set)?),
                (OpKind::Update { .. } | OpKind::Delete, _) => None,
                (OpKind::Read { .. }, _) => continue,
            };
            let old_values = old.as_ref().map(Row::values);
            let key_of = |values: &[Value]| -> Vec<Value> {
                meta.def.primary_key.iter().map(|&c| values[c as usize].clone()).collect()
            };
            for index in meta.def.unique_indexes() {
                let was = old_values.as_deref().and_then(|v| indexed(index, v));
                let will = new.as_deref().and_then(|v| indexed(index, v));
                if was == will {
                    continue;
                }
                let hidden = hidden_table(&client, table, index).await?;
                if let Some(was) = was {
                    out.removals.push(Op::delete(&hidden, &was)?);
                }
                if let (Some(will), Some(new)) = (will, &new) {
                    let mut entry = will.clone();
                    entry.extend(key_of(new));
                    let insert = Op::insert(&hidden, entry)?;
                    out.inserted.push(InsertedEntry {
                        key: insert.op.key.clone(),
                        hidden,
                        index: index.name.clone(),
                        table: meta.def.name.clone(),
                        values: will,
                    });
                    out.inserts.push(insert);
                }
            }
        }
        Ok(out)
    }
}

/// A read of the entry a new row would take in a unique index, to find a
/// duplicate before writing (see `Client::unique_probes`).
pub struct UniqueProbe {
    /// Which of the rows given.
    pub row: usize,
    pub index: String,
    /// The row's values in the index's columns.
    pub values: Vec<Value>,
    /// An exclusive read of the entry: found and naming another primary key
    /// (`holds_other_row`) means a duplicate.
    pub read: Op,
    /// The entry's encoded key: equal for two probes of values the index
    /// treats as one (case-insensitive text).
    pub entry: Vec<u8>,
    /// The probed row's table and encoded primary key.
    table: Arc<Table>,
    key: Vec<u8>,
}

impl UniqueProbe {
    /// Whether the entry the read found belongs to a row other than the one
    /// probed for.
    pub fn holds_other_row(&self, found: &Outcome) -> bool {
        self.other_row(found).is_some()
    }

    /// The primary key of the other row that holds the values, if one does.
    pub fn other_row(&self, found: &Outcome) -> Option<Vec<Value>> {
        match found {
            Outcome::Row(entry) => {
                let holder = entry.values().split_off(self.values.len());
                // Compared encoded: 'Alice' and 'ALICE' are one key of a
                // case-insensitive column.
                match self.table.encode_key(&holder) {
                    Ok(k) if k == self.key => None,
                    _ => Some(holder),
                }
            }
            _ => None,
        }
    }
}

impl Client {
    /// Reads that find, before writing, whether full rows (in column order,
    /// coerced) would collide in a unique index of the table; two of the
    /// rows colliding with each other show as equal `index` and `entry`.
    pub async fn unique_probes(&self, table: &Arc<Table>, rows: &[Vec<Value>]) -> Result<Vec<UniqueProbe>> {
        let def = table.def();
        let mut probes = Vec::new();
        for index in def.unique_indexes() {
            let hidden = hidden_table(self, table, index).await?;
            for (i, row) in rows.iter().enumerate() {
                let Some(values) = indexed(index, row) else { continue };
                let key: Vec<Value> = def.primary_key.iter().map(|&c| row[c as usize].clone()).collect();
                let read = Op::read_locked(&hidden, &values, LockMode::Exclusive)?;
                probes.push(UniqueProbe {
                    row: i,
                    index: index.name.clone(),
                    // The read's key is the entry's, encoded once.
                    entry: read.target().1.to_vec(),
                    read,
                    table: table.clone(),
                    key: table.encode_key(&key)?,
                    values,
                });
            }
        }
        Ok(probes)
    }

    /// Creates a unique index and fills its hidden table from the rows
    /// already stored; if two of them share values, the index is dropped
    /// again and the error says so. Writers that started meanwhile already
    /// keep the index (their table definition changed first).
    pub async fn create_unique_index(
        &self,
        database: &str,
        table: &str,
        index: &str,
        columns: &[&str],
    ) -> Result<Arc<Table>> {
        let created = self.create_index_of_kind(database, table, index, columns, true).await?;
        if let Err(e) = self.fill_unique_index(&created, index).await {
            let _ = self.drop_index(database, table, index).await;
            return Err(e);
        }
        Ok(created)
    }

    async fn fill_unique_index(&self, table: &Arc<Table>, name: &str) -> Result<()> {
        let index = table.def().index(name)?.clone();
        let hidden = hidden_table(self, table, &index).await?;
        let rows = self.scan(table, crate::Scan::all()).await?;
        let def = table.def();
        for chunk in rows.chunks(100) {
            let tx_result: Result<()> = async {
                let mut tx = self.transaction();
                // The rows as they are now, locked: a row deleted or changed
                // since the scan is taken as it is (its writer kept the index).
                let reads = chunk
                    .iter()
                    .map(|r| {
                        let values = r.values();
                        let key: Vec<Value> = def.primary_key.iter().map(|&c| values[c as usize].clone()).collect();
                        Op::read_locked(table, &key, LockMode::Shared)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let current: Vec<Vec<Value>> =
                    tx.execute(reads).await?.into_iter().filter_map(|o| o.into_row().map(|r| r.values())).collect();
                let wanted: Vec<(Vec<Value>, Vec<Value>)> = current
                    .iter()
                    .filter_map(|values| {
                        let key: Vec<Value> = def.primary_key.iter().map(|&c| values[c as usize].clone()).collect();
                        indexed(&index, values).map(|v| (v, key))
                    })
                    .collect();
                if wanted.is_empty() {
                    return tx.commit().await;
                }
                let probes = wanted
                    .iter()
                    .map(|(v, _)| Op::read_locked(&hidden, v, LockMode::Exclusive))
                    .collect::<Result<Vec<_>>>()?;
                let mut inserts = Vec::new();
                for ((values, key), found) in wanted.iter().zip(tx.execute(probes).await?) {
                    match found.into_row() {
                        Some(entry) => {
                            let holder = entry.values().split_off(values.len());
                            if holder != *key {
                                return Err(duplicate_values(def, &index, values));
                            }
                        }
                        None => {
                            let mut entry = values.clone();
                            entry.extend(key.iter().cloned());
                            inserts.push(Op::insert(&hidden, entry)?);
                        }
                    }
                }
                tx.execute_commit(inserts).await.map(|_| ()).map_err(|e| match e.code {
                    ErrorCode::DuplicateKey => DbError::new(
                        ErrorCode::DuplicateKey,
                        format!(
                            "cannot create unique index '{}': rows of {} share values in its columns",
                            index.name,
                            def.qualified_name()
                        ),
                    ),
                    _ => e,
                })
            }
            .await;
            tx_result?;
        }
        Ok(())
    }
}

fn duplicate_values(def: &latsdb_types::TableDef, index: &IndexDef, values: &[Value]) -> DbError {
    let shown: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    DbError::new(
        ErrorCode::DuplicateKey,
        format!(
            "cannot create unique index '{}': more than one row of {} has the value(s) {}",
            index.name,
            def.qualified_name(),
            shown.join(", ")
        ),
    )
}
