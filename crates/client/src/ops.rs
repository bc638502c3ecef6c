//! Single-row operations by primary key, their outcomes, and batches of
//! independent operations.

use crate::{route_with, Client, RowRef, Table};
use latsdb_types::expr::Expr;
use latsdb_types::proto::{BatchOf, ClientResponse, KeyOp, LockMode, OpKind, OpResult, Router, ShardAddr};
use latsdb_types::row::RowLayout;
use latsdb_types::schema::ColumnId;
use latsdb_types::{DbError, ErrorCode, Result, Value};
use std::sync::Arc;

/// A single-row operation, built against a table definition.
#[derive(Clone, Debug)]
pub struct Op {
    pub(crate) op: KeyOp,
    /// Layout of the row a read returns.
    pub(crate) layout: Arc<RowLayout>,
    /// The table, when it has unique indexes: its writes also write their
    /// hidden tables (`unique.rs`).
    pub(crate) guarded: Option<Arc<Table>>,
}

impl Op {
    pub(crate) fn new(table: &Arc<Table>, key: Vec<u8>, kind: OpKind) -> Op {
        let partition = table.meta.partition_of(&key);
        let guarded = (kind.is_write() && table.def().has_unique_indexes()).then(|| table.clone());
        Op {
            op: KeyOp {
                table: table.def().id,
                table_version: table.def().version,
                partition,
                key,
                kind,
                projection: None,
            },
            layout: table.layout.clone(),
            guarded,
        }
    }

    /// Read-committed read by primary key (values in key-column order).
    pub fn read(table: &Arc<Table>, key: &[Value]) -> Result<Op> {
        Self::read_locked(table, key, LockMode::Committed)
    }

    /// Read taking a shared or exclusive row lock (inside a transaction the
    /// lock is held until commit or abort).
    pub fn read_locked(table: &Arc<Table>, key: &[Value], lock: LockMode) -> Result<Op> {
        Ok(Self::new(table, table.meta.encode_key(key)?, OpKind::Read { lock }))
    }

    /// Inserts a full row given in column order; fails with DuplicateKey if
    /// the key exists.
    pub fn insert(table: &Arc<Table>, row: Vec<Value>) -> Result<Op> {
        let (key, row) = Self::keyed_row(table, row)?;
        Ok(Self::new(table, key, OpKind::Insert { row }))
    }

    /// Inserts a row from named values; other columns take their defaults.
    pub fn insert_named(table: &Arc<Table>, values: &[(&str, Value)]) -> Result<Op> {
        Self::insert(table, table.meta.row_from_named(values)?)
    }

    /// Inserts or overwrites a full row.
    pub fn upsert(table: &Arc<Table>, row: Vec<Value>) -> Result<Op> {
        let (key, row) = Self::keyed_row(table, row)?;
        Ok(Self::new(table, key, OpKind::Upsert { row }))
    }

    /// Sets columns to values; the outcome is NotFound if the row does not exist.
    pub fn update(table: &Arc<Table>, key: &[Value], set: &[(&str, Value)]) -> Result<Op> {
        let mut assignments = Vec::with_capacity(set.len());
        for (name, value) in set {
            let column = table.column(name)?;
            let coerced = latsdb_types::value::coerce(value.clone(), &table.def().columns[column as usize])?;
            assignments.push((column, Expr::Const(coerced)));
        }
        Self::update_expr(table, key, assignments)
    }

    /// Sets columns to expressions over the current row (`k = k + 1`),
    /// evaluated on the data node.
    pub fn update_expr(table: &Arc<Table>, key: &[Value], set: Vec<(ColumnId, Expr)>) -> Result<Op> {
        for (column, expr) in &set {
            if *column as usize >= table.def().columns.len() {
                return Err(DbError::new(ErrorCode::UnknownColumn, format!("column number {column} does not exist")));
            }
            expr.validate(table.def().columns.len())?;
        }
        Ok(Self::new(table, table.meta.encode_key(key)?, OpKind::Update { set }))
    }

    /// Deletes by primary key; the outcome is NotFound if the row does not exist.
    pub fn delete(table: &Arc<Table>, key: &[Value]) -> Result<Op> {
        Ok(Self::new(table, table.meta.encode_key(key)?, OpKind::Delete))
    }

    /// Deletes the row whose primary key is `key`, already encoded (as
    /// `Lookups::push` takes it); the data node checks it is well formed.
    pub fn delete_encoded(table: &Arc<Table>, key: Vec<u8>) -> Op {
        Self::new(table, key, OpKind::Delete)
    }

    /// Returns only the named columns (for reads).
    pub fn columns(mut self, table: &Arc<Table>, names: &[&str]) -> Result<Op> {
        let ids = names.iter().map(|n| table.column(n)).collect::<Result<Vec<_>>>()?;
        self.layout = Arc::new(table.meta.layout.projection(&ids));
        self.op.projection = Some(ids.into());
        Ok(self)
    }

    /// Returns only the columns of a projection built once with
    /// `Table::projection` (cheaper than `columns` for many operations).
    pub fn with_projection(mut self, projection: &Projection) -> Op {
        self.layout = projection.layout.clone();
        self.op.projection = Some(projection.columns.clone());
        self
    }

    /// A read that takes no lock (read committed).
    pub fn is_committed_read(&self) -> bool {
        matches!(self.op.kind, OpKind::Read { lock: LockMode::Committed })
    }

    /// The table id and the encoded primary key the operation addresses.
    pub fn target(&self) -> (u32, &[u8]) {
        (self.op.table, &self.op.key)
    }

    pub fn is_insert(&self) -> bool {
        matches!(self.op.kind, OpKind::Insert { .. })
    }

    pub fn partition(&self) -> u32 {
        self.op.partition
    }

    /// For a write: an exclusive read of the row it writes (whole row), to
    /// learn what the write will replace.
    pub fn before_image_read(&self) -> Option<Op> {
        if !self.op.kind.is_write() {
            return None;
        }
        let mut read = self.clone();
        read.op.kind = OpKind::Read { lock: LockMode::Exclusive };
        read.op.projection = None;
        read.guarded = None;
        Some(read)
    }

    /// The write that puts the row this write touches back as it was:
    /// `before` is the whole row it held (None: there was none).
    pub fn undo(&self, before: Option<Vec<Value>>) -> Op {
        let mut undo = self.clone();
        undo.op.projection = None;
        undo.op.kind = match before {
            Some(row) => OpKind::Upsert { row },
            None => OpKind::Delete,
        };
        undo
    }

    fn keyed_row(table: &Arc<Table>, row: Vec<Value>) -> Result<(Vec<u8>, Vec<Value>)> {
        let row = table.meta.coerce_row(row)?;
        let key_values: Vec<Value> = table.def().primary_key.iter().map(|&c| row[c as usize].clone()).collect();
        Ok((table.meta.encode_key(&key_values)?, row))
    }
}

/// A set of columns to read, resolved against a table once and shared by
/// many operations.
#[derive(Clone, Debug)]
pub struct Projection {
    /// Shared with every operation that reads through this projection.
    columns: Arc<[ColumnId]>,
    pub(crate) layout: Arc<RowLayout>,
}

impl Projection {
    pub fn new(table: &Table, names: &[&str]) -> Result<Projection> {
        let columns = names.iter().map(|n| table.column(n)).collect::<Result<Vec<_>>>()?;
        table.meta.validate_projection(Some(&columns))?;
        let layout = Arc::new(table.meta.layout.projection(&columns));
        Ok(Projection { columns: columns.into(), layout })
    }

    /// The layout of the rows a read with this projection returns.
    pub fn layout(&self) -> &RowLayout {
        &self.layout
    }

    pub(crate) fn columns(&self) -> &Arc<[ColumnId]> {
        &self.columns
    }
}

/// A row returned by a read or scan, decoded lazily.
#[derive(Clone, Debug)]
pub struct Row {
    layout: Arc<RowLayout>,
    bytes: Vec<u8>,
}

impl Row {
    pub(crate) fn new(layout: Arc<RowLayout>, bytes: Vec<u8>) -> Result<Row> {
        layout.validate(&bytes)?;
        Ok(Row { layout, bytes })
    }

    /// The row borrowed, as `Client::lookup` returns rows.
    pub fn borrowed(&self) -> RowRef<'_> {
        RowRef::new(&self.layout, &self.bytes)
    }

    /// The value of the i-th returned column.
    pub fn get(&self, i: usize) -> Value {
        self.borrowed().get(i)
    }

    /// The value of the i-th returned column, borrowed from the row.
    pub fn get_ref(&self, i: usize) -> latsdb_types::row::ValueRef<'_> {
        self.borrowed().get_ref(i)
    }

    pub fn get_by_name(&self, name: &str) -> Result<Value> {
        let i = self
            .layout
            .columns()
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| DbError::new(ErrorCode::UnknownColumn, format!("the row has no column '{name}'")))?;
        Ok(self.get(i))
    }

    pub fn values(&self) -> Vec<Value> {
        self.layout.decode(&self.bytes)
    }

    /// The row's bytes in its layout.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn len(&self) -> usize {
        self.layout.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layout.is_empty()
    }

    pub fn layout(&self) -> &RowLayout {
        &self.layout
    }
}

#[derive(Clone, Debug)]
pub enum Outcome {
    /// A read found its row.
    Row(Row),
    /// The row does not exist (read, update, delete).
    NotFound,
    /// A write took effect.
    Done,
    /// An update found its row and left it as it was (nothing written).
    Unchanged,
}

impl Outcome {
    pub fn into_row(self) -> Option<Row> {
        match self {
            Outcome::Row(r) => Some(r),
            _ => None,
        }
    }
}

/// Takes the operation's layout by value: a returned row keeps it without
/// another reference count (two atomic operations per row).
pub(crate) fn outcome(result: OpResult, layout: Arc<RowLayout>) -> Result<Outcome> {
    match result {
        OpResult::Row(bytes) => Ok(Outcome::Row(Row::new(layout, bytes)?)),
        OpResult::NotFound => Ok(Outcome::NotFound),
        OpResult::Done => Ok(Outcome::Done),
        OpResult::Unchanged => Ok(Outcome::Unchanged),
        OpResult::Error(e) => Err(e),
    }
}

/// Attempts to route and resend operations that hit a stale layout.
pub(crate) const STALE_LAYOUT_RETRIES: usize = 8;

impl Client {
    /// Runs independent single-row operations, each its own transaction.
    /// They are grouped per shard and sent in one round trip to each shard,
    /// all shards in parallel. Returns one result per operation, in order;
    /// the outer error is only for failures that hit the whole call.
    pub async fn batch(&self, ops: Vec<Op>) -> Result<Vec<Result<Outcome>>> {
        let mut results: Vec<Option<Result<Outcome>>> = (0..ops.len()).map(|_| None).collect();
        let mut todo: Vec<(usize, Op)> = Vec::with_capacity(ops.len());
        let mut guarded = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            if op.guarded.is_some() {
                guarded.push((i, op));
            } else {
                todo.push((i, op));
            }
        }
        // A write to a table with unique indexes writes its hidden tables
        // too: it runs as a transaction of its own, all of them at once.
        // (A JoinSet allocates: made only when there is such a write.)
        let mut own = (!guarded.is_empty()).then(tokio::task::JoinSet::new);
        for (i, op) in guarded {
            let client = self.clone();
            if let Some(own) = own.as_mut() {
                own.spawn(
                    async move { (i, client.transaction().execute_commit(vec![op]).await.map(|mut o| o.remove(0))) },
                );
            }
        }
        // All committed reads of this call go to the same replica position,
        // so a batch reaches one node per node group; calls rotate over them.
        let prefer = self.next_read_replica(&self.router());
        for attempt in 0..=STALE_LAYOUT_RETRIES {
            let groups = group_by_shard(&self.router(), prefer, &mut todo, &mut results);
            // Send to every shard before waiting for any answer.
            let mut inflight = Vec::with_capacity(groups.len());
            for group in groups {
                let started = self.start(group.shard, &BatchOf(group.ops.as_slice())).await;
                inflight.push((group, started));
            }
            let mut stale = false;
            let mut wrote: Vec<(ShardAddr, Vec<usize>)> = Vec::new();
            for (group, started) in inflight {
                let answer = match started {
                    Ok(rx) => self.finish(rx).await,
                    Err(e) => Err(e),
                };
                let ShardGroup { shard, slots, ops, layouts } = group;
                match answer {
                    Ok(ClientResponse::Batch(list)) if list.len() == slots.len() => {
                        if self.inner.opts.wait_durable {
                            let writes: Vec<usize> = slots
                                .iter()
                                .zip(&ops)
                                .zip(&list)
                                .filter(|((_, op), r)| op.kind.is_write() && matches!(r, OpResult::Done))
                                .map(|((i, _), _)| *i)
                                .collect();
                            if !writes.is_empty() {
                                wrote.push((shard, writes));
                            }
                        }
                        for (((i, op), layout), r) in slots.into_iter().zip(ops).zip(layouts).zip(list) {
                            match r {
                                // An operation refused unexecuted (`NotServing`: its
                                // partition is being handed to a restarted primary) is
                                // sent again too, a write included.
                                OpResult::Error(e)
                                    if matches!(e.code, ErrorCode::WrongShard | ErrorCode::NotServing)
                                        && attempt < STALE_LAYOUT_RETRIES =>
                                {
                                    stale = true;
                                    todo.push((i, Op { op, layout, guarded: None }));
                                }
                                r => results[i] = Some(outcome(r, layout)),
                            }
                        }
                    }
                    Ok(ClientResponse::Error(e)) | Err(e) => {
                        // A lost node: committed reads are safe to send again once the
                        // layout shows who took over; a write's outcome is unknown, so
                        // it is reported (retriable) and never sent twice. A node that
                        // refused the whole batch unexecuted (NotServing) gets all of it
                        // again, writes included.
                        let lost = e.code == ErrorCode::NodeUnavailable && attempt < STALE_LAYOUT_RETRIES;
                        let refused = e.code == ErrorCode::NotServing && attempt < STALE_LAYOUT_RETRIES;
                        stale |= lost || refused;
                        for ((i, op), layout) in slots.into_iter().zip(ops).zip(layouts) {
                            let is_committed_read = matches!(op.kind, OpKind::Read { lock: LockMode::Committed });
                            if refused || (lost && is_committed_read) {
                                todo.push((i, Op { op, layout, guarded: None }));
                            } else {
                                results[i] = Some(Err(e.clone()));
                            }
                        }
                    }
                    Ok(other) => {
                        let e = DbError::internal(format!("a batch was answered with {other:?}"));
                        for i in slots {
                            results[i] = Some(Err(e.clone()));
                        }
                    }
                }
            }
            // Writes are acknowledged once durable (with `wait_durable`). The
            // shards wait for the same epochs, so asking them one after the
            // other costs about one wait.
            for (shard, slots) in &wrote {
                if let Err(e) = self.await_durable(*shard).await {
                    for &i in slots {
                        results[i] = Some(Err(e.clone()));
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
        if let Some(mut own) = own {
            while let Some(done) = own.join_next().await {
                match done {
                    Ok((i, r)) => results[i] = Some(r),
                    // A panic in the task is a bug; its operation gets no result.
                    Err(e) => return Err(DbError::internal(format!("a write's transaction task failed: {e}"))),
                }
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(DbError::internal("operation got no result"))))
            .collect())
    }
}

/// Routes the operations of `todo` (draining it) to their shards, in
/// groups of one shard each: committed reads to the replica at position
/// `prefer`, the rest to the primary. An operation that cannot be routed
/// gets its error in `results`.
fn group_by_shard(
    router: &Router,
    prefer: usize,
    todo: &mut Vec<(usize, Op)>,
    results: &mut [Option<Result<Outcome>>],
) -> Vec<ShardGroup> {
    let mut routes = RouteCache::default();
    let mut groups: Vec<ShardGroup> = Vec::new();
    // Sized for the common case of one shard taking the whole batch.
    let routed = todo.len();
    for (i, op) in todo.drain(..) {
        let committed_read = matches!(op.op.kind, OpKind::Read { lock: LockMode::Committed });
        let route = routes.get(op.op.partition, committed_read, |p| {
            if committed_read {
                read_route(router, p, prefer)
            } else {
                route_with(router, p)
            }
        });
        match route {
            Ok(shard) => {
                let group = match groups.iter_mut().position(|g| g.shard == shard) {
                    Some(pos) => &mut groups[pos],
                    None => {
                        groups.push(ShardGroup {
                            shard,
                            slots: Vec::with_capacity(routed),
                            ops: Vec::with_capacity(routed),
                            layouts: Vec::with_capacity(routed),
                        });
                        groups.last_mut().expect("just pushed")
                    }
                };
                group.slots.push(i);
                group.ops.push(op.op);
                group.layouts.push(op.layout);
            }
            Err(e) => results[i] = Some(Err(e)),
        }
    }
    groups
}

impl Client {
    /// After answers that showed a stale layout: gives the management
    /// server a moment to see a failed node go (when `retrying`), then
    /// routes the retries, and later calls, by the new layout.
    pub(crate) async fn after_stale_layout(&self, attempt: usize, retrying: bool) -> Result<()> {
        if retrying {
            tokio::time::sleep(std::time::Duration::from_millis(50 * (attempt as u64 + 1))).await;
        }
        self.refresh_layout().await.map(|_| ())
    }
}

/// The shard a committed read of `partition` goes to: the replica at
/// position `prefer` of its node group (`Router::read_replica_of`).
pub(crate) fn read_route(router: &Router, partition: u32, prefer: usize) -> Result<ShardAddr> {
    router.read_replica_of(partition, prefer).ok_or_else(|| crate::no_replica(partition))
}

/// The shards of the partitions a batch touched so far, for committed reads
/// and for the rest: a batch's hundreds of operations fall on a table's
/// few partitions, and routing one takes several integer divisions.
pub(crate) struct RouteCache {
    /// Indexed by `partition * 2 + committed_read`, for low partition numbers.
    known: [Option<ShardAddr>; 64],
}

impl Default for RouteCache {
    fn default() -> Self {
        RouteCache { known: [None; 64] }
    }
}

impl RouteCache {
    pub(crate) fn get(
        &mut self,
        partition: u32,
        committed_read: bool,
        route: impl FnOnce(u32) -> Result<ShardAddr>,
    ) -> Result<ShardAddr> {
        let slot = partition as usize * 2 + committed_read as usize;
        match self.known.get(slot) {
            Some(Some(shard)) => Ok(*shard),
            Some(None) => {
                let shard = route(partition)?;
                self.known[slot] = Some(shard);
                Ok(shard)
            }
            None => route(partition),
        }
    }
}

/// The operations of one batch that go to one shard.
struct ShardGroup {
    shard: ShardAddr,
    slots: Vec<usize>,
    ops: Vec<KeyOp>,
    layouts: Vec<Arc<RowLayout>>,
}
