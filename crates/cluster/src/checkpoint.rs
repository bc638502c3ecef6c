//! Local checkpoints and restoring a shard from disk.
//!
//! A local checkpoint writes every row of every partition the shard holds
//! to a checkpoint file, a chunk per tick, while the shard keeps serving.
//! It is fuzzy: a row changed during the walk may be written in its old or
//! its new version. It records the REDO position (LSN) at which it started;
//! restoring loads its rows and then replays the REDO log from there, which
//! brings every row changed during the walk to its latest version (REDO
//! records are after-images, so replaying one again is harmless).
//!
//! A finished checkpoint may hold rows of its last epoch (`end_epoch`); it
//! can restore the shard only to that epoch or later, so it replaces the
//! previous one (and the REDO before its start is deleted) only once
//! `end_epoch` is durable.
//!
//! Restoring to epoch D replays the REDO records of epochs up to D and skips
//! newer ones, and the records a later `Restarted` marker discards (commits
//! of epochs after the restore point of an earlier system restart, which
//! the cluster lost and must never come back).

use crate::context::Context;
use crate::durability::DiskOp;
use crate::shard::Outbox;
use latsdb_storage::log::{self, Reader, Record};
use latsdb_types::proto::CommitEpoch;
use latsdb_types::schema::TableId;
use latsdb_types::{DbError, ErrorCode, Result};

/// Row bytes a checkpoint writes per tick of the shard (10 ms): about
/// 12 MB/s, little enough to leave the write path its disk and CPU...
const CHUNK_BYTES: usize = 128 << 10;
/// ...unless the REDO written since the checkpoint started passed the
/// trigger again: then it hurries (about 50 MB/s), so the REDO kept on disk
/// stays bounded under any write rate the disk can take.
const HURRY_CHUNK_BYTES: usize = 512 << 10;

struct Running {
    id: u64,
    start_lsn: u64,
    tables: Vec<TableId>,
    table: usize,
    partition: u32,
    resume: Option<Box<[u8]>>,
    rows: u64,
    /// Bytes written so far.
    bytes: u64,
}

/// The local checkpoint block: the checkpoint being written, and those
/// written whose end epoch is not durable yet.
#[derive(Default)]
pub(crate) struct Checkpoints {
    next_id: u64,
    /// LSN at which the last checkpoint started.
    last_start_lsn: u64,
    running: Option<Running>,
    /// A checkpoint being synced: token, id, end epoch, start LSN.
    ending: Option<(u64, u64, CommitEpoch, u64)>,
    /// Finished checkpoints whose end epoch is not durable yet.
    finished: Vec<(u64, CommitEpoch, u64)>,
    /// Checkpoints completed since the shard started (for reports).
    pub(crate) completed: u64,
    /// Size of the last checkpoint written.
    last_bytes: u64,
    /// Start one at the next tick, whatever the trigger says.
    forced: bool,
}

/// What a checkpoint file holds, if it is complete and intact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub id: u64,
    pub start_lsn: u64,
    pub end_epoch: CommitEpoch,
    pub rows: u64,
}

/// Reads a checkpoint file's header and trailer, checking every record.
pub fn checkpoint_info(bytes: &[u8]) -> Option<CheckpointInfo> {
    let mut reader = Reader::new(bytes);
    let Some((_, Record::CheckpointHeader { id, start_lsn })) = reader.next() else { return None };
    let mut rows = 0;
    for (_, record) in reader.by_ref() {
        match record {
            Record::CheckpointRow { .. } => rows += 1,
            Record::CheckpointTrailer { end_epoch, rows: n } if n == rows => {
                return (!reader.stopped_early()).then_some(CheckpointInfo { id, start_lsn, end_epoch, rows });
            }
            _ => return None,
        }
    }
    None
}

/// The checkpoint to restore epoch `epoch` from: the newest (of those
/// given, oldest first) that ends at or before it and starts within the
/// REDO log kept (from LSN `redo_base`).
pub fn checkpoint_for(checkpoints: &[CheckpointInfo], redo_base: u64, epoch: CommitEpoch) -> Option<CheckpointInfo> {
    checkpoints.iter().rev().find(|c| c.end_epoch <= epoch && c.start_lsn >= redo_base).copied()
}

/// What a REDO log holds: how much of it is intact, the latest epoch it
/// was synced through, and the highest epoch any record carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RedoSummary {
    pub valid_len: usize,
    pub saved_epoch: CommitEpoch,
    pub max_epoch: CommitEpoch,
}

pub fn redo_summary(bytes: &[u8]) -> RedoSummary {
    let mut reader = Reader::new(bytes);
    let mut s = RedoSummary::default();
    for (_, record) in reader.by_ref() {
        match record {
            Record::Write { epoch, .. } => s.max_epoch = s.max_epoch.max(epoch),
            Record::Saved { epoch } => s.saved_epoch = s.saved_epoch.max(epoch),
            Record::Restarted { discarded, restored } => {
                s.max_epoch = s.max_epoch.max(discarded);
                s.saved_epoch = s.saved_epoch.max(restored);
            }
            _ => {}
        }
    }
    s.valid_len = reader.valid_len();
    s
}

/// What a starting node reports of its shards' REDO logs: the latest epoch
/// every one of them was saved through, and the highest epoch any record
/// carries.
pub fn node_recovery<'a>(summaries: impl IntoIterator<Item = &'a RedoSummary>) -> latsdb_types::proto::NodeRecovery {
    let (saved_epoch, max_epoch) =
        summaries.into_iter().fold((CommitEpoch::MAX, CommitEpoch::NONE), |(saved, max), s| {
            (saved.min(s.saved_epoch), max.max(s.max_epoch))
        });
    let saved_epoch = if saved_epoch == CommitEpoch::MAX { CommitEpoch::NONE } else { saved_epoch };
    latsdb_types::proto::NodeRecovery { saved_epoch, max_epoch }
}

/// What restoring a shard did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub checkpoint_rows: u64,
    pub redo_applied: u64,
    pub redo_skipped: u64,
}

/// What [`replay`] went through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replayed {
    pub report: RestoreReport,
    /// The checkpoint's id, if one was given.
    pub checkpoint_id: Option<u64>,
    /// LSN from which the REDO log was replayed (the checkpoint's start).
    pub replay_from: u64,
    /// Bytes of `redo` that are intact.
    pub redo_len: usize,
}

/// Replays a shard's disk image to epoch `restore_epoch`: every row of
/// the checkpoint, then the REDO records after its start of epochs up to
/// `restore_epoch` that no later `Restarted` marker voids, each handed to
/// `apply(table, partition, key, row or None for a delete)`, which answers
/// whether it used the row. A data node restores its shards with it, and
/// `latsdb restore` a backup's.
///
/// `redo` is the REDO log from LSN `redo_base`. The checkpoint (if any)
/// must start at or after `redo_base` and end at or before `restore_epoch`.
pub fn replay(
    checkpoint: Option<&[u8]>,
    redo: &[u8],
    redo_base: u64,
    restore_epoch: CommitEpoch,
    mut apply: impl FnMut(TableId, u32, &[u8], Option<&[u8]>) -> Result<bool>,
) -> Result<Replayed> {
    let corrupt = |what: String| DbError::new(ErrorCode::Internal, what);
    let mut replayed = Replayed { replay_from: redo_base, ..Replayed::default() };
    if let Some(bytes) = checkpoint {
        let info =
            checkpoint_info(bytes).ok_or_else(|| corrupt("the checkpoint chosen for restore is incomplete".into()))?;
        if info.end_epoch > restore_epoch || info.start_lsn < redo_base {
            return Err(corrupt(format!(
                "checkpoint {} (start LSN {}, end epoch {}) cannot restore epoch {restore_epoch} from REDO starting at LSN {redo_base}",
                info.id, info.start_lsn, info.end_epoch
            )));
        }
        for (_, record) in Reader::new(bytes) {
            if let Record::CheckpointRow { table, partition, key, row } = record {
                if apply(table, partition, key, Some(row))? {
                    replayed.report.checkpoint_rows += 1;
                }
            }
        }
        replayed.replay_from = info.start_lsn;
        replayed.checkpoint_id = Some(info.id);
    }
    // Ranges of epochs discarded by later restarts, with the offset of
    // the marker: a record before a marker in its range is void.
    let mut discarded: Vec<(usize, CommitEpoch, CommitEpoch)> = Vec::new();
    let mut reader = Reader::new(redo);
    for (at, record) in reader.by_ref() {
        if let Record::Restarted { restored, discarded: upto } = record {
            discarded.push((at, restored, upto));
        }
    }
    replayed.redo_len = reader.valid_len();
    let skip_to = (replayed.replay_from - redo_base) as usize;
    for (at, record) in Reader::new(&redo[..replayed.redo_len]) {
        if at < skip_to {
            continue;
        }
        let Record::Write { epoch, table, partition, key, row } = record else { continue };
        let void = discarded.iter().any(|&(m, lo, hi)| m > at && epoch > lo && epoch <= hi);
        if epoch > restore_epoch || void {
            replayed.report.redo_skipped += 1;
            continue;
        }
        if apply(table, partition, key, row)? {
            replayed.report.redo_applied += 1;
        }
    }
    Ok(replayed)
}

impl Checkpoints {
    /// Checks the block's invariants (run by the simulator after every step).
    pub(crate) fn check(&self, cx: &Context) {
        let me = cx.me();
        assert!(self.last_start_lsn <= cx.redo.lsn, "shard {me}: a checkpoint started beyond the REDO log's end");
        assert!(
            self.running.is_none() || self.ending.is_none(),
            "shard {me}: a checkpoint runs while another one is being synced"
        );
        if let Some(run) = &self.running {
            assert!(
                run.id == self.next_id && run.start_lsn == self.last_start_lsn,
                "shard {me}: the running checkpoint is not the last one started"
            );
            assert!(run.table <= run.tables.len(), "shard {me}: the checkpoint walked past its last table");
        }
        assert!(self.finished.windows(2).all(|w| w[0].0 < w[1].0), "shard {me}: finished checkpoints out of order");
        if !cx.redo.enabled {
            assert!(
                self.running.is_none() && self.ending.is_none() && self.finished.is_empty(),
                "shard {me}: a checkpoint without a disk"
            );
        }
    }

    /// Periodic checkpoint work: start one when enough REDO was written,
    /// write the next chunk of a running one. None starts while the shard's
    /// partitions are being copied (`copying`): its rows are incomplete,
    /// and only the checkpoint after the copy counts.
    pub(crate) fn tick(&mut self, cx: &mut Context, out: &mut Outbox, copying: bool) {
        if !cx.redo.enabled {
            return;
        }
        // A checkpoint rewrites every row: started only after as much REDO
        // as the last one's size, it never writes more than the REDO does,
        // and a load that grows the data from nothing takes a few
        // checkpoints (the size doubles each time), not one per trigger.
        let trigger = match cx.layout.checkpoint_trigger_mb << 20 {
            0 => 0,
            mb => mb.max(self.last_bytes),
        };
        // With a REDO limit, a checkpoint is also due once half of it is
        // kept: it lets the older records go before writes are refused.
        let limit = cx.cfg.redo_limit_bytes;
        let trigger = match limit {
            0 => trigger,
            _ if trigger == 0 => 0,
            _ => trigger.min((limit / 2).max(1)),
        };
        if self.running.is_none() && self.ending.is_none() {
            let due = trigger != 0 && cx.redo.lsn - self.last_start_lsn >= trigger && !copying;
            if !self.forced && !due {
                return;
            }
            self.begin(cx, out);
        }
        let chunk = match &self.running {
            Some(run) if cx.redo.lsn - run.start_lsn > trigger => HURRY_CHUNK_BYTES,
            _ => CHUNK_BYTES,
        };
        self.write_chunk(cx, out, chunk);
    }

    /// Starts a checkpoint at the REDO log's current position.
    fn begin(&mut self, cx: &mut Context, out: &mut Outbox) {
        debug_assert!(self.running.is_none() && self.ending.is_none(), "a checkpoint began while one ran");
        self.forced = false;
        self.next_id += 1;
        let id = self.next_id;
        let start_lsn = cx.redo.lsn;
        self.last_start_lsn = start_lsn;
        let mut tables: Vec<TableId> = cx.tables.keys().copied().collect();
        tables.sort_unstable();
        self.running = Some(Running { id, start_lsn, tables, table: 0, partition: 0, resume: None, rows: 0, bytes: 0 });
        // Every REDO record before the start LSN must be on its way to
        // disk before the checkpoint can stand in for them.
        cx.redo.flush(out, true);
        out.disk.push(DiskOp::CheckpointBegin { id });
        let mut bytes = Vec::new();
        log::encode(&mut bytes, &Record::CheckpointHeader { id, start_lsn });
        out.disk.push(DiskOp::CheckpointAppend { id, bytes });
    }

    fn write_chunk(&mut self, cx: &mut Context, out: &mut Outbox, chunk: usize) {
        let Some(mut run) = self.running.take() else { return };
        let mut bytes = Vec::with_capacity(chunk + 4096);
        while bytes.len() < chunk {
            let Some(&table_id) = run.tables.get(run.table) else { break };
            let Some(table) = cx.tables.get(&table_id) else {
                // Dropped while the checkpoint ran.
                run.table += 1;
                run.partition = 0;
                run.resume = None;
                continue;
            };
            let Some(slot) = table.partitions.get(run.partition as usize) else {
                run.table += 1;
                run.partition = 0;
                run.resume = None;
                continue;
            };
            let Some(partition) = slot else {
                // Not held here (or freed after it moved to another group
                // while the checkpoint wrote it).
                run.partition += 1;
                run.resume = None;
                continue;
            };
            let budget = chunk - bytes.len();
            let p = run.partition;
            let mut rows = 0;
            let resume = partition.rows_after(run.resume.as_deref(), budget, |key, row| {
                log::encode(&mut bytes, &Record::CheckpointRow { table: table_id, partition: p, key, row });
                rows += 1;
            });
            run.rows += rows;
            match resume {
                Some(k) => run.resume = Some(k),
                None => {
                    run.partition += 1;
                    run.resume = None;
                }
            }
        }
        let id = run.id;
        if run.table >= run.tables.len() {
            let end_epoch = cx.commit_epoch;
            log::encode(&mut bytes, &Record::CheckpointTrailer { end_epoch, rows: run.rows });
            self.last_bytes = run.bytes + bytes.len() as u64;
            out.disk.push(DiskOp::CheckpointAppend { id, bytes });
            let token = cx.redo.token();
            out.disk.push(DiskOp::CheckpointEnd { id, token });
            self.ending = Some((token, id, end_epoch, run.start_lsn));
        } else {
            run.bytes += bytes.len() as u64;
            if !bytes.is_empty() {
                out.disk.push(DiskOp::CheckpointAppend { id, bytes });
            }
            self.running = Some(run);
        }
    }

    /// The host finished the disk operation `token`: if it ended the
    /// checkpoint being synced, that one is finished.
    pub(crate) fn on_disk_done(
        &mut self,
        cx: &mut Context,
        out: &mut Outbox,
        token: u64,
        durable: CommitEpoch,
        saved: CommitEpoch,
    ) {
        let Some((t, id, end_epoch, start_lsn)) = self.ending else { return };
        if t != token {
            return;
        }
        self.ending = None;
        self.completed += 1;
        self.finished.push((id, end_epoch, start_lsn));
        self.on_durable(cx, out, durable, saved);
    }

    /// Finished checkpoints whose end epoch became durable replace the
    /// older ones; the REDO before the newest one's start goes. `saved` is
    /// the epoch the shard's log is saved through.
    pub(crate) fn on_durable(&mut self, cx: &mut Context, out: &mut Outbox, durable: CommitEpoch, saved: CommitEpoch) {
        let Some(newest) = self.finished.iter().filter(|f| f.1 <= durable).max_by_key(|f| f.0).copied() else {
            return;
        };
        self.finished.retain(|f| f.0 > newest.0);
        // The REDO about to go may hold the only marker of the epoch this
        // log is saved through (the shard saved it before the checkpoint
        // began): state it again behind the checkpoint's start, synced
        // before anything is deleted. A restart must not find less saved
        // than the cluster counted on.
        cx.redo.append(&Record::Saved { epoch: saved });
        cx.redo.flush(out, true);
        let token = cx.redo.token();
        out.disk.push(DiskOp::RedoSync { token });
        out.disk.push(DiskOp::Trim { keep_checkpoint: newest.0, redo_before: newest.2 });
        cx.redo.kept_from = cx.redo.kept_from.max(newest.2);
    }

    /// Restores the tables in `cx` from a checkpoint and the REDO log that
    /// follows it, to epoch `restore_epoch` (see [`replay`]).
    pub(crate) fn restore(
        &mut self,
        cx: &mut Context,
        checkpoint: Option<&[u8]>,
        redo: &[u8],
        redo_base: u64,
        restore_epoch: CommitEpoch,
    ) -> Result<RestoreReport> {
        let replayed = replay(checkpoint, redo, redo_base, restore_epoch, |table, partition, key, row| {
            restore_row(cx, table, partition, key, row)
        })?;
        if let Some(id) = replayed.checkpoint_id {
            self.next_id = id;
        }
        cx.recount_memory();
        cx.redo.lsn = redo_base + replayed.redo_len as u64;
        cx.redo.kept_from = redo_base;
        self.last_start_lsn = replayed.replay_from;
        Ok(replayed.report)
    }

    /// Starts a checkpoint at the next tick (after a node restart copied
    /// rows that its REDO log does not hold). Returns the count of completed
    /// checkpoints that [`Checkpoints::settled`] waits for.
    pub(crate) fn request(&mut self, enabled: bool) -> u64 {
        if !enabled {
            return self.completed;
        }
        self.forced = true;
        // One already running began before the request and does not count.
        self.completed + if self.running.is_some() || self.ending.is_some() { 2 } else { 1 }
    }

    /// Whether `target` checkpoints completed and the newest one replaced
    /// the older ones (its end epoch is durable).
    pub(crate) fn settled(&self, target: u64) -> bool {
        self.completed >= target && self.finished.is_empty() && !self.forced
    }
}

/// Applies one restored row to a partition this shard holds; rows of
/// dropped tables and of partitions held elsewhere are skipped.
fn restore_row(cx: &mut Context, table: TableId, partition: u32, key: &[u8], row: Option<&[u8]>) -> Result<bool> {
    let Some(state) = cx.tables.get_mut(&table) else { return Ok(false) };
    let meta = state.meta.clone();
    let Some(Some(p)) = state.partitions.get_mut(partition as usize) else { return Ok(false) };
    match row {
        Some(row) => {
            meta.layout.validate(row).map_err(|e| {
                DbError::new(
                    ErrorCode::Internal,
                    format!(
                        "a restored row of table {} does not match its definition ({}); the data directory belongs to another schema",
                        meta.def.qualified_name(),
                        e.message
                    ),
                )
            })?;
            p.put(&meta, key, row);
        }
        None => {
            p.remove(&meta, key);
        }
    }
    Ok(true)
}
