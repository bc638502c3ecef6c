//! Batches of read-committed lookups by primary key, held in a few buffers
//! whatever their number: the keys of a batch in one, the rows answered in
//! another. `Client::batch` gives every operation its own key and every
//! row its own allocation; a REST node answering hundreds of lookups per
//! request uses this instead, and allocates per request, not per row.
//! On the wire a lookup batch is the same `Batch` request of committed
//! reads, and its answer the same `Batch` answer.

use crate::conn::Reply;
use crate::ops::{read_route, Projection, RouteCache, STALE_LAYOUT_RETRIES};
use crate::{Client, Table};
use latsdb_types::proto::{
    decode_batch_answer, BatchOf, ClientResponse, LookupOpRef, OpResultRef, ShardAddr, COMMITTED_READ,
};
use latsdb_types::row::{RowLayout, ValueRef};
use latsdb_types::schema::{ColumnId, TableId};
use latsdb_types::{DbError, ErrorCode, Result, Value};
use std::sync::Arc;

/// Read-committed reads by primary key, sent together with
/// `Client::lookup`; each is independent of the others.
#[derive(Default)]
pub struct Lookups {
    /// Every read's encoded key, one after the other.
    keys: Vec<u8>,
    reads: Vec<Read>,
    /// What the reads return: items of a batch mostly share one.
    shapes: Vec<Shape>,
}

struct Read {
    table: TableId,
    table_version: u32,
    partition: u32,
    /// The key is `keys[previous read's key_end..key_end]`.
    key_end: u32,
    shape: u32,
}

struct Shape {
    table: TableId,
    table_version: u32,
    columns: Option<Arc<[ColumnId]>>,
    layout: Arc<RowLayout>,
}

impl Lookups {
    /// Room for `reads` reads of keys of about `key_bytes` bytes each.
    pub fn with_capacity(reads: usize, key_bytes: usize) -> Lookups {
        Lookups { keys: Vec::with_capacity(reads * key_bytes), reads: Vec::with_capacity(reads), shapes: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.reads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Adds a read of the row of `table` whose primary key `encode` appends
    /// (its columns in key order, each as `keycodec::encode_value` writes
    /// it); `projection` picks the columns returned (None: all). Returns
    /// the read's position; an error of `encode` (of the caller's own error
    /// type) adds nothing.
    pub fn push<E: From<DbError>>(
        &mut self,
        table: &Table,
        projection: Option<&Projection>,
        encode: impl FnOnce(&mut Vec<u8>) -> std::result::Result<(), E>,
    ) -> std::result::Result<usize, E> {
        let start = self.keys.len();
        if let Err(e) = encode(&mut self.keys) {
            self.keys.truncate(start);
            return Err(e);
        }
        let Ok(key_end) = u32::try_from(self.keys.len()) else {
            self.keys.truncate(start);
            return Err(DbError::bad_request("a batch of lookups holds more than 4 GiB of keys; send fewer").into());
        };
        let partition = table.meta.partition_of(&self.keys[start..]);
        let def = table.def();
        let columns = projection.map(Projection::columns);
        // Reads of a batch alternate between a few shapes at most (a feature
        // view's tables): look for the read's among the last ones.
        const LOOK_BACK: usize = 8;
        let known = self.shapes.iter().rev().take(LOOK_BACK).position(|s| {
            s.table == def.id
                && s.table_version == def.version
                && match (&s.columns, columns) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
        });
        let shape = match known {
            Some(back) => self.shapes.len() - 1 - back,
            None => {
                self.shapes.push(Shape {
                    table: def.id,
                    table_version: def.version,
                    columns: columns.cloned(),
                    layout: projection.map_or_else(|| table.layout.clone(), |p| p.layout.clone()),
                });
                self.shapes.len() - 1
            }
        };
        self.reads.push(Read { table: def.id, table_version: def.version, partition, key_end, shape: shape as u32 });
        Ok(self.reads.len() - 1)
    }

    /// Adds a read of the row with primary key `key` (values in key-column
    /// order, coerced to the columns' types).
    pub fn push_values(&mut self, table: &Table, projection: Option<&Projection>, key: &[Value]) -> Result<usize> {
        self.push(table, projection, |out| table.meta.encode_key_into(key, out))
    }

    fn op(&self, i: u32) -> LookupOpRef<'_> {
        let read = &self.reads[i as usize];
        let start = match i {
            0 => 0,
            _ => self.reads[i as usize - 1].key_end as usize,
        };
        LookupOpRef {
            table: read.table,
            table_version: read.table_version,
            partition: read.partition,
            key: &self.keys[start..read.key_end as usize],
            kind: &COMMITTED_READ,
            projection: self.shapes[read.shape as usize].columns.as_deref(),
        }
    }
}

/// The reads of a `Lookups` that go to one shard, as the operations of a
/// `Batch` request.
struct ShardReads<'a> {
    lookups: &'a Lookups,
    members: &'a [u32],
}

impl serde::Serialize for ShardReads<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_seq(self.members.iter().map(|&i| self.lookups.op(i)))
    }
}

/// The outcome of every read of a `Lookups`, in the order they were added.
pub struct Answers {
    /// The bytes of every row found, one after the other.
    rows: Vec<u8>,
    items: Vec<Item>,
    errors: Vec<DbError>,
    layouts: Vec<Arc<RowLayout>>,
}

#[derive(Clone, Copy)]
enum Item {
    Waiting,
    Row {
        start: u32,
        len: u32,
        shape: u32,
    },
    NotFound,
    /// `errors[i]`.
    Failed(u32),
}

/// One read's outcome.
pub enum Found<'a> {
    Row(RowRef<'a>),
    NotFound,
    Error(&'a DbError),
}

/// A row found by a lookup, borrowed from its `Answers`.
#[derive(Clone, Copy)]
pub struct RowRef<'a> {
    layout: &'a RowLayout,
    bytes: &'a [u8],
}

impl<'a> RowRef<'a> {
    pub(crate) fn new(layout: &'a RowLayout, bytes: &'a [u8]) -> RowRef<'a> {
        RowRef { layout, bytes }
    }

    pub fn layout(&self) -> &'a RowLayout {
        self.layout
    }

    /// The value of the i-th returned column, borrowed from the row.
    pub fn get_ref(&self, i: usize) -> ValueRef<'a> {
        assert!(i < self.layout.len(), "column {i} of a row with {} columns", self.layout.len());
        self.layout.get_ref(self.bytes, i)
    }

    pub fn get(&self, i: usize) -> Value {
        assert!(i < self.layout.len(), "column {i} of a row with {} columns", self.layout.len());
        self.layout.get(self.bytes, i)
    }

    pub fn len(&self) -> usize {
        self.layout.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layout.is_empty()
    }
}

impl Answers {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The outcome of read `i`.
    pub fn get(&self, i: usize) -> Found<'_> {
        match self.items[i] {
            Item::Row { start, len, shape } => Found::Row(RowRef {
                layout: &self.layouts[shape as usize],
                bytes: &self.rows[start as usize..(start + len) as usize],
            }),
            Item::NotFound => Found::NotFound,
            Item::Failed(e) => Found::Error(&self.errors[e as usize]),
            Item::Waiting => unreachable!("`lookup` gives every read an outcome"),
        }
    }

    fn fail(&mut self, i: u32, e: DbError) {
        self.items[i as usize] = Item::Failed(self.errors.len() as u32);
        self.errors.push(e);
    }

    /// Keeps a row answered to read `i`, once it proves well formed.
    fn row(&mut self, i: u32, shape: u32, bytes: &[u8]) {
        if let Err(e) = self.layouts[shape as usize].validate(bytes) {
            return self.fail(i, e);
        }
        let (start, len) = (self.rows.len(), bytes.len());
        match (u32::try_from(start), u32::try_from(start + len)) {
            (Ok(start), Ok(_)) => {
                self.rows.extend_from_slice(bytes);
                self.items[i as usize] = Item::Row { start, len: len as u32, shape };
            }
            _ => self.fail(i, DbError::bad_request("the rows of a batch of lookups exceed 4 GiB; ask for fewer")),
        }
    }
}

impl Client {
    /// Runs a batch of lookups: the reads are grouped per shard and sent in
    /// one round trip to each, all shards in parallel, like `batch`. A read
    /// refused by a shard that no longer holds its partition, or that was
    /// lost with its node, is sent again by the new layout.
    pub async fn lookup(&self, lookups: &Lookups) -> Result<Answers> {
        let n = lookups.reads.len();
        let mut answers = Answers {
            // Rows mostly come back smaller than 128 bytes.
            rows: Vec::with_capacity(n * 128),
            items: vec![Item::Waiting; n],
            errors: Vec::new(),
            layouts: lookups.shapes.iter().map(|s| s.layout.clone()).collect(),
        };
        let prefer = self.next_read_replica(&self.router());
        let mut todo: Vec<u32> = (0..n as u32).collect();
        for attempt in 0..=STALE_LAYOUT_RETRIES {
            let last = attempt == STALE_LAYOUT_RETRIES;
            let router = self.router();
            let mut routes = RouteCache::default();
            let mut groups: Vec<(ShardAddr, Vec<u32>)> = Vec::new();
            let routed = todo.len();
            for &i in &todo {
                let partition = lookups.reads[i as usize].partition;
                match routes.get(partition, true, |p| read_route(&router, p, prefer)) {
                    Ok(shard) => match groups.iter_mut().find(|(s, _)| *s == shard) {
                        Some((_, members)) => members.push(i),
                        None => groups.push((shard, {
                            let mut members = Vec::with_capacity(routed);
                            members.push(i);
                            members
                        })),
                    },
                    Err(e) => answers.fail(i, e),
                }
            }
            todo.clear();
            // Send to every shard before waiting for any answer.
            let mut inflight = Vec::with_capacity(groups.len());
            for (shard, members) in groups {
                let started = self.start_raw(shard, &BatchOf(ShardReads { lookups, members: &members })).await;
                inflight.push((members, started));
            }
            let mut stale = false;
            for (members, started) in inflight {
                let reply = match started {
                    Ok(rx) => self.finish_raw(rx).await,
                    Err(e) => Err(e),
                };
                let whole = match reply {
                    Ok(Reply::Raw(body)) => {
                        let mut next = members.iter();
                        let decoded = decode_batch_answer(&body, |result| {
                            let &i = next.next().ok_or_else(|| {
                                DbError::malformed("a batch was answered with more results than reads")
                            })?;
                            match result {
                                OpResultRef::Row(bytes) => answers.row(i, lookups.reads[i as usize].shape, bytes),
                                OpResultRef::NotFound => answers.items[i as usize] = Item::NotFound,
                                OpResultRef::Error(e) if e.code == ErrorCode::WrongShard && !last => {
                                    stale = true;
                                    todo.push(i);
                                }
                                OpResultRef::Error(e) => answers.fail(i, e),
                                OpResultRef::Done | OpResultRef::Unchanged => {
                                    answers.fail(i, DbError::internal("a read was answered as a write"))
                                }
                            }
                            Ok(())
                        });
                        match decoded {
                            Ok(Ok(count)) if count == members.len() => None,
                            Ok(Ok(count)) => Some(DbError::malformed(format!(
                                "a batch of {} reads was answered with {count} results",
                                members.len()
                            ))),
                            Ok(Err(ClientResponse::Error(e))) | Err(e) => Some(e),
                            Ok(Err(other)) => Some(DbError::internal(format!("a batch was answered with {other:?}"))),
                        }
                    }
                    Ok(Reply::Decoded(other)) => {
                        Some(DbError::internal(format!("a batch was answered with {other:?}")))
                    }
                    Err(e) => Some(e),
                };
                if let Some(e) = whole {
                    // Reads are safe to send again: a lost node's, or a
                    // refusing node's, go wherever the new layout says.
                    let retry = matches!(e.code, ErrorCode::NodeUnavailable | ErrorCode::NotServing) && !last;
                    stale |= retry;
                    for &i in &members {
                        if retry {
                            todo.push(i);
                        } else {
                            answers.fail(i, e.clone());
                        }
                    }
                }
            }
            if stale {
                self.after_stale_layout(attempt, !todo.is_empty()).await?;
            }
            if todo.is_empty() {
                break;
            }
        }
        for i in 0..n {
            if matches!(answers.items[i], Item::Waiting) {
                answers.fail(i as u32, DbError::internal("a read got no result"));
            }
        }
        Ok(answers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;
    use latsdb_types::proto::{frame, KeyOp};
    use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};

    fn table(name: &str, id: u32) -> Arc<Table> {
        let spec = TableSpec::new("d", name)
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
            .column(ColumnDef::new("v", ColumnType::int(IntWidth::Int)))
            .primary_key(&["id"]);
        Table::from_def(TableDef::from_spec(&spec, id, 8).unwrap())
    }

    /// The reads of a `Lookups` go out as the `Op::read`s of the same keys
    /// would: a failed key leaves nothing behind, and reads alternating
    /// between two tables share their two shapes.
    #[test]
    fn lookups_send_what_the_same_reads_as_operations_send() {
        let (a, b) = (table("a", 1), table("b", 2));
        let only_v = Projection::new(&a, &["v"]).unwrap();
        let mut lookups = Lookups::default();
        let mut ops: Vec<KeyOp> = Vec::new();
        for i in 0..20i64 {
            let (t, projection) = if i % 2 == 0 { (&a, Some(&only_v)) } else { (&b, None) };
            assert_eq!(lookups.push_values(t, projection, &[Value::Int(i)]).unwrap(), ops.len());
            let op = Op::read(t, &[Value::Int(i)]).unwrap();
            ops.push(projection.map_or(op.clone(), |p| op.with_projection(p)).op);
            // A key that does not encode adds nothing.
            assert!(lookups.push_values(&a, None, &[Value::Str("not a number".into())]).is_err());
            assert!(lookups
                .push(&a, None, |out| {
                    out.extend_from_slice(b"half a key");
                    Err(DbError::bad_request("no"))
                })
                .is_err());
        }
        assert_eq!(lookups.len(), 20);
        assert_eq!(lookups.shapes.len(), 2, "two shapes, shared by the reads");
        let members: Vec<u32> = (0..20).rev().collect();
        let sent = frame(3, &BatchOf(ShardReads { lookups: &lookups, members: &members }));
        let reversed: Vec<KeyOp> = ops.into_iter().rev().collect();
        assert_eq!(sent, frame(3, &BatchOf(reversed.as_slice())));
    }
}
