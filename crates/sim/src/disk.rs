//! The simulated disk of one shard: its REDO log and local checkpoints,
//! and what a crash does to them.
//!
//! Operations run in order, as on the real disk thread: writes land at
//! once (in the page cache); a sync completes later (the world delivers
//! its completion after a random latency) and only then are the bytes
//! before it safe, and the operations queued behind it run. A crash loses
//! the queued operations (they were still in the process); a process crash
//! keeps every write (the kernel still has them); a power loss keeps the
//! synced bytes and a random part of the rest, possibly torn (a damaged
//! byte, or garbage where a record was half written). A checkpoint is published
//! (renamed from its temporary file) when its sync completes. Files are
//! modelled as they are seen through the REDO LSNs, which is what the
//! shard's restore works with; the segment files of the real disk only
//! change how much REDO a trim can delete.

use latsdb_cluster::{checkpoint_info, redo_summary, CheckpointInfo, DiskOp, RedoSummary};
use latsdb_types::rng::Rng;
use std::collections::{BTreeMap, VecDeque};

#[derive(Default)]
pub(crate) struct SimDisk {
    /// LSN of `redo[0]` (the REDO before it was trimmed).
    base: u64,
    redo: Vec<u8>,
    /// REDO before this LSN is on stable storage.
    synced: u64,
    /// Published checkpoints by id (synced before they were published).
    checkpoints: BTreeMap<u64, Vec<u8>>,
    /// The checkpoint file being written.
    writing: Option<(u64, Vec<u8>)>,
    /// A sync is under way: what follows it waits.
    syncing: bool,
    queued: VecDeque<DiskOp>,
}

/// A sync the disk was asked for: completes at `at`; then REDO up to
/// `redo_lsn` is safe, checkpoint `publish` (if any) is published, and the
/// shard hears `token`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncDone {
    pub token: u64,
    pub redo_lsn: u64,
    pub publish: Option<u64>,
}

/// What a disk held at start, after its damaged tail was cut.
pub(crate) struct DiskImage {
    pub summary: RedoSummary,
    pub checkpoints: Vec<CheckpointInfo>,
}

impl SimDisk {
    fn end(&self) -> u64 {
        self.base + self.redo.len() as u64
    }

    /// Takes one operation: runs it, or queues it behind a sync under way.
    /// A sync that starts is returned, to complete later. Err: the shard
    /// asked for something no real disk could do.
    pub(crate) fn submit(&mut self, op: DiskOp) -> Result<Option<SyncDone>, String> {
        if self.syncing {
            self.queued.push_back(op);
            return Ok(None);
        }
        let done = self.execute(op)?;
        self.syncing = done.is_some();
        Ok(done)
    }

    fn execute(&mut self, op: DiskOp) -> Result<Option<SyncDone>, String> {
        match op {
            DiskOp::RedoAppend(bytes) => self.redo.extend_from_slice(&bytes),
            DiskOp::RedoSync { token } => return Ok(Some(SyncDone { token, redo_lsn: self.end(), publish: None })),
            DiskOp::CheckpointBegin { id } => self.writing = Some((id, Vec::new())),
            DiskOp::CheckpointAppend { id, bytes } => {
                if let Some((_, file)) = self.writing.as_mut().filter(|(w, _)| *w == id) {
                    file.extend_from_slice(&bytes);
                }
            }
            DiskOp::CheckpointEnd { id, token } => {
                // The real disk thread syncs the file and renames it before
                // it reports the token; the REDO is not synced by it.
                let publish = self.writing.as_ref().filter(|(w, _)| *w == id).map(|_| id);
                return Ok(Some(SyncDone { token, redo_lsn: self.synced, publish }));
            }
            DiskOp::Trim { keep_checkpoint, redo_before } => {
                self.checkpoints.retain(|id, _| *id >= keep_checkpoint);
                if redo_before > self.synced {
                    return Err(format!(
                        "the shard trimmed its REDO log up to LSN {redo_before}, but only up to LSN {} is synced",
                        self.synced
                    ));
                }
                if redo_before > self.base {
                    self.redo.drain(..(redo_before - self.base) as usize);
                    self.base = redo_before;
                }
            }
        }
        Ok(None)
    }

    /// A sync completed: the operations behind it run, up to the next sync
    /// (returned).
    pub(crate) fn complete(&mut self, done: SyncDone) -> Result<Option<SyncDone>, String> {
        self.finish(done);
        self.syncing = false;
        while let Some(op) = self.queued.pop_front() {
            if let Some(next) = self.submit(op)? {
                return Ok(Some(next));
            }
        }
        Ok(None)
    }

    fn finish(&mut self, done: SyncDone) {
        self.synced = self.synced.max(done.redo_lsn.min(self.end()));
        if let Some(id) = done.publish {
            if let Some((w, file)) = self.writing.take() {
                if w == id {
                    self.checkpoints.insert(id, file);
                } else {
                    self.writing = Some((w, file));
                }
            }
        }
    }

    /// The machine lost power: unsynced REDO is partly kept, maybe torn;
    /// an unpublished checkpoint is gone.
    pub(crate) fn lose_power(&mut self, rng: &mut Rng) {
        self.kill();
        self.writing = None;
        let synced = (self.synced.max(self.base) - self.base) as usize;
        let unsynced = self.redo.len() - synced;
        let keep = synced + rng.below(unsynced as u64 + 1) as usize;
        self.redo.truncate(keep);
        if keep > synced && rng.chance(33) {
            // A torn sector: one byte of the unsynced part is wrong.
            let at = synced + rng.index(keep - synced);
            self.redo[at] ^= 1 + rng.below(255) as u8;
        }
        if rng.chance(25) {
            // A record half written: its first bytes made it.
            let n = 1 + rng.index(24);
            self.redo.extend((0..n).map(|_| rng.below(256) as u8));
        }
    }

    /// The process died: what it had not handed to the kernel is gone.
    pub(crate) fn kill(&mut self) {
        self.syncing = false;
        self.queued.clear();
    }

    /// What a starting node finds: the damaged REDO tail is cut where it
    /// starts (never replayed as data), an unfinished checkpoint deleted.
    pub(crate) fn scan(&mut self) -> DiskImage {
        self.writing = None;
        let summary = redo_summary(&self.redo);
        self.redo.truncate(summary.valid_len);
        // What is read back after a restart is on disk.
        self.synced = self.end();
        let checkpoints = self.checkpoints.values().filter_map(|bytes| checkpoint_info(bytes)).collect();
        DiskImage { summary, checkpoints }
    }

    /// An initial start: everything is deleted.
    pub(crate) fn wipe(&mut self) {
        *self = SimDisk::default();
    }

    pub(crate) fn redo(&self) -> (&[u8], u64) {
        (&self.redo, self.base)
    }

    pub(crate) fn checkpoint(&self, id: u64) -> Option<&[u8]> {
        self.checkpoints.get(&id).map(Vec::as_slice)
    }

    /// After a restore: only the checkpoint restored from is kept (newer
    /// ones may hold rows of epochs the cluster lost), and the shard's
    /// restart marker is written and synced before it serves.
    pub(crate) fn restored(&mut self, keep: Option<u64>, marker: &[u8]) {
        self.checkpoints.retain(|id, _| Some(*id) == keep);
        self.redo.extend_from_slice(marker);
        self.synced = self.end();
    }
}
