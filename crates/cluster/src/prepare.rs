//! What an operation must pass before it runs: it belongs here (this
//! shard holds its partition and may serve it now), its key and new row
//! are well formed, and there is room for it in the REDO log and the
//! tablespace.

use crate::context::{owned_partition, wrong_shard, Context};
use crate::sync::PartitionSync;
use latsdb_storage::Partition;
use latsdb_types::proto::{KeyOp, LockMode, OpKind, ShardAddr};
use latsdb_types::schema::ColumnId;
use latsdb_types::{DbError, ErrorCode, Result, TableMeta};
use std::sync::Arc;

/// An operation that passed validation, with its new row already encoded.
pub(crate) struct Prepared {
    pub(crate) op: KeyOp,
    pub(crate) meta: Arc<TableMeta>,
    pub(crate) new_row: Option<Box<[u8]>>,
    /// The key's hash in its partition's index.
    pub(crate) hash: u64,
}

/// An operation this shard did not prepare, and why.
pub(crate) struct Unprepared {
    pub(crate) error: DbError,
    /// The operation itself when this shard looked at nothing but where it
    /// belongs: it is not the partition's primary in this shard's layout, or
    /// the partition is being handed to another primary. Sent again once the
    /// layout moves on, it may succeed.
    pub(crate) returned: Option<KeyOp>,
}

impl From<DbError> for Unprepared {
    fn from(error: DbError) -> Self {
        Unprepared { error, returned: None }
    }
}

/// The operation's partition, when this shard may execute the operation
/// there now.
fn routed_here<'t>(
    cx: &Context,
    sync: &PartitionSync,
    table: &'t crate::context::TableState,
    op: &KeyOp,
) -> Result<&'t Partition> {
    let partition = owned_partition(table, op.partition, cx.cfg.me)?;
    // Backups serve committed reads; writes and locking reads go to the primary.
    let needs_primary = !matches!(op.kind, OpKind::Read { lock: LockMode::Committed });
    if needs_primary && !table.is_primary(op.partition, cx.cfg.me) {
        return Err(wrong_shard(op.partition, cx.cfg.me));
    }
    if needs_primary && sync.frozen(op.table, op.partition) {
        return Err(DbError::new(
            ErrorCode::NotServing,
            format!(
                "partition {} is being handed to its restarted primary; nothing was done, retry in a moment",
                op.partition
            ),
        ));
    }
    Ok(partition)
}

/// Validates an operation against the schema and ownership, and encodes
/// its new row.
pub(crate) fn prepare(cx: &Context, sync: &PartitionSync, op: KeyOp) -> Result<Prepared, Unprepared> {
    let table = cx.table(op.table, op.table_version)?;
    let meta = &table.meta;
    let partition = match routed_here(cx, sync, table, &op) {
        Ok(p) => p,
        Err(error) => {
            let elsewhere = matches!(error.code, ErrorCode::WrongShard | ErrorCode::NotServing);
            return Err(Unprepared { error, returned: elsewhere.then_some(op) });
        }
    };
    check_key(meta, &op.key, op.partition, op.projection.as_deref())?;
    let new_row = match &op.kind {
        OpKind::Insert { row } | OpKind::Upsert { row } => {
            let values = meta.coerce_row(row.clone())?;
            let encoded = meta.layout.encode(&values);
            if meta.key_of_row(&encoded) != op.key {
                return Err(Unprepared::from(DbError::bad_request(
                    "the operation's key does not match the primary-key columns of its row",
                )));
            }
            Some(encoded.into_boxed_slice())
        }
        OpKind::Update { set } => {
            if set.is_empty() {
                return Err(Unprepared::from(DbError::bad_request("an update must assign at least one column")));
            }
            for (column, expr) in set {
                if *column as usize >= meta.def.columns.len() {
                    return Err(Unprepared::from(DbError::new(
                        ErrorCode::UnknownColumn,
                        format!("update names column number {column}, which does not exist"),
                    )));
                }
                if meta.def.primary_key.contains(column) {
                    return Err(Unprepared::from(DbError::bad_request(format!(
                        "primary-key column '{}' cannot be updated; delete the row and insert it again",
                        meta.def.columns[*column as usize].name
                    ))));
                }
                expr.validate(meta.def.columns.len())?;
            }
            None
        }
        OpKind::Read { .. } | OpKind::Delete => None,
    };
    // Start loading the key's index slot now; it is read a little later.
    let hash = partition.key_hash(&op.key);
    partition.prefetch_slot(hash);
    Ok(Prepared { meta: meta.clone(), op, new_row, hash })
}

/// Checks that `key` is a well-formed key of the table, of `partition`,
/// and that `projection` names its columns.
pub(crate) fn check_key(meta: &TableMeta, key: &[u8], partition: u32, projection: Option<&[ColumnId]>) -> Result<()> {
    meta.validate_key(key)?;
    if meta.partition_of(key) != partition {
        return Err(DbError::bad_request(format!(
            "the key belongs to partition {} but the request names partition {partition}",
            meta.partition_of(key)
        )));
    }
    meta.validate_projection(projection)
}

/// Refuses a write while the shard keeps as much REDO as its limit allows
/// (`ShardConfig::redo_limit_bytes`): the disk must not fill up, which would
/// stop the node. A checkpoint lets older REDO go (one starts at half the
/// limit), so the refusal is temporary unless checkpoints are off.
pub(crate) fn check_redo_room(
    redo: &crate::context::Redo,
    limit: u64,
    checkpoint_trigger_mb: u64,
    me: ShardAddr,
) -> Result<()> {
    let kept = redo.kept();
    if limit == 0 || !redo.enabled || kept < limit {
        return Ok(());
    }
    let remedy = if checkpoint_trigger_mb == 0 {
        "checkpoints are off (checkpoint_trigger_mb = 0), so none is let go: turn them on"
    } else {
        "retry once the running checkpoint ends; if this repeats, raise redo_limit_mb"
    };
    Err(DbError::new(
        ErrorCode::RedoFull,
        format!(
            "the REDO log of shard {me} is full: it keeps {} MiB, its limit is {} MiB until a checkpoint lets older records go; {remedy}",
            kept >> 20,
            limit >> 20
        ),
    ))
}

/// Refuses a write whose disk part does not fit a page, or whose table's
/// tablespace has reached its limit (as the data memory check does for
/// memory: it counts committed rows, so writes staged at the same time may
/// pass it together and take the tablespace a little past its limit).
pub(crate) fn check_tablespace(
    partition: &Partition,
    key: &[u8],
    new: Option<&[u8]>,
    meta: &TableMeta,
    me: ShardAddr,
) -> Result<()> {
    let Some(pages) = partition.pages() else { return Ok(()) };
    if let Some(row) = new {
        partition.check_row(row)?;
    }
    // Without a limit there is nothing to weigh (and no old record to read).
    if latsdb_storage::pages::DiskPages::lock(pages).limit_bytes() == 0 {
        return Ok(());
    }
    let growth = partition.disk_growth(key, new);
    // A record that grows may have to move to another page whole, so the
    // room asked for is its new length, not its growth.
    let need = new.map_or(0, |row| partition.disk_len(row)) as u64 + 4;
    let pages = latsdb_storage::pages::DiskPages::lock(pages);
    if growth > 0 && !pages.has_room(need) {
        return Err(DbError::new(
            ErrorCode::TableFull,
            format!(
                "table {} is full: the tablespace of shard {me} reached its limit of {} MiB; delete rows or raise tablespace_mb in the cluster configuration",
                meta.def.qualified_name(),
                pages.limit_bytes() >> 20
            ),
        ));
    }
    Ok(())
}
