//! Commit epochs, the REDO log and the epoch driver.
//!
//! Every commit belongs to an epoch. A coordinator decides a commit in the
//! highest epoch among its own and those its participants reported with
//! their results, and every shard raises its epoch to any it sees in a
//! commit. So a transaction never lands in an earlier epoch than one whose
//! writes it read or overwrote: restoring "every epoch up to D" is a
//! consistent cut.
//!
//! Each shard appends an after-image record (`latsdb_storage::log`) for
//! every row a commit changes, tagged with the commit's epoch, to its REDO
//! log. The epoch driver (shard 0 of the lowest started data node) closes
//! epochs:
//!
//! ```text
//! driver                         every shard of every started node
//!   |--EpochSwitch(n)------------->|  new commits get epoch >= n
//!   |<--EpochCompleted(n, view)----|  once every commit below n this shard is
//!   |                              |  responsible for reached all its replicas
//!   |--EpochSave(n-1)------------->|  append Saved(n-1), write and sync the log
//!   |<--EpochSaved(n-1)------------|
//!   |--EpochDurable(n-1)---------->|  (and to the management server)
//! ```
//!
//! "Responsible" covers the commits a shard coordinates (a transaction
//! whose participants have not all answered `TxCommitted`, an independent
//! write waiting for its backups), prepared transactions whose coordinator
//! failed (a takeover may still commit them in an old epoch) and running
//! takeovers. A report from a shard that still counts a failed node as
//! started is not accepted: that node's transactions may still commit.
//!
//! The host carries out `DiskOp`s in order and calls `Shard::on_disk_done`
//! when a sync it was asked for is complete.

use crate::shard::{ConnId, Micros, Outbox, Shard};
use latsdb_storage::log::{self, Record};
use latsdb_types::proto::{ClientResponse, CommitEpoch, NodeId, NodeStatus, PeerMsg, ShardAddr};
use latsdb_types::schema::TableId;
use latsdb_types::{DbError, ErrorCode};
use std::collections::BTreeSet;

/// REDO bytes are handed to the host once this much is buffered (and at
/// every tick and sync).
const REDO_FLUSH_BYTES: usize = 256 << 10;

/// Disk work a shard asks its host for, carried out in order.
#[derive(Debug, PartialEq)]
pub enum DiskOp {
    /// Append whole REDO records at the end of the log.
    RedoAppend(Vec<u8>),
    /// Make every REDO byte appended so far durable, then call
    /// `Shard::on_disk_done(token)`.
    RedoSync {
        token: u64,
    },
    /// Start writing local checkpoint `id` (not visible until it ends).
    CheckpointBegin {
        id: u64,
    },
    CheckpointAppend {
        id: u64,
        bytes: Vec<u8>,
    },
    /// Sync checkpoint `id`, publish it, then call `Shard::on_disk_done(token)`.
    CheckpointEnd {
        id: u64,
        token: u64,
    },
    /// Checkpoint `keep` can restore the shard: delete older checkpoints and
    /// the REDO log wholly before `redo_before`.
    Trim {
        keep_checkpoint: u64,
        redo_before: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DriverPhase {
    Idle,
    Switching,
    Saving,
}

/// The epoch driver's state (on one shard of the cluster).
struct Driver {
    /// The epoch last switched to (or being switched to).
    epoch: CommitEpoch,
    phase: DriverPhase,
    /// The shards asked in this phase, and those that have not answered.
    asked: BTreeSet<ShardAddr>,
    waiting: BTreeSet<ShardAddr>,
    asked_at: Micros,
    started_at: Micros,
    next_at: Micros,
}

impl Driver {
    /// What the current phase asks of every shard.
    fn message(&self) -> Option<PeerMsg> {
        match self.phase {
            DriverPhase::Switching => Some(PeerMsg::EpochSwitch { epoch: self.epoch }),
            DriverPhase::Saving => Some(PeerMsg::EpochSave { epoch: self.epoch - 1 }),
            DriverPhase::Idle => None,
        }
    }
}

/// Epoch and REDO state of one shard.
pub(crate) struct Durability {
    /// The shard has a disk (`ShardConfig::durable`): it logs and checkpoints.
    pub(crate) enabled: bool,
    /// Epoch of commits decided here now.
    pub(crate) current: CommitEpoch,
    /// Latest epoch known durable.
    pub(crate) durable: CommitEpoch,
    /// The latest epoch this shard's log (with its checkpoint) holds every
    /// commit of: the newest `Saved` marker appended, or the restored epoch.
    pub(crate) saved: CommitEpoch,
    /// REDO records not yet handed to the host.
    redo: Vec<u8>,
    /// Log sequence number: REDO bytes produced so far, buffered or not.
    pub(crate) lsn: u64,
    /// A switch waiting until this shard's older commits completed.
    switch: Option<(CommitEpoch, ShardAddr)>,
    /// Syncs in flight: token, epoch saved, driver to tell.
    syncs: Vec<(u64, CommitEpoch, ShardAddr)>,
    next_token: u64,
    /// `WaitDurable` requests: connection, request id, epoch awaited.
    waiters: Vec<(ConnId, u64, CommitEpoch)>,
    driver: Option<Driver>,
    pub(crate) lcp: crate::checkpoint::Lcp,
}

impl Durability {
    pub(crate) fn new(enabled: bool) -> Self {
        Durability {
            enabled,
            current: 1,
            durable: 0,
            saved: 0,
            redo: Vec::new(),
            lsn: 0,
            switch: None,
            syncs: Vec::new(),
            next_token: 1,
            waiters: Vec::new(),
            driver: None,
            lcp: Default::default(),
        }
    }

    /// Appends one REDO record.
    pub(crate) fn append(&mut self, record: &Record<'_>) {
        let before = self.redo.len();
        log::encode(&mut self.redo, record);
        self.lsn += (self.redo.len() - before) as u64;
    }

    /// Appends the REDO record of one committed row change (nothing
    /// without a disk).
    pub(crate) fn log_write(
        &mut self,
        epoch: CommitEpoch,
        table: TableId,
        partition: u32,
        key: &[u8],
        row: Option<&[u8]>,
    ) {
        if self.enabled {
            self.append(&Record::Write { epoch, table, partition, key, row });
        }
    }

    pub(crate) fn take_redo(&mut self) -> Vec<u8> {
        // The next buffer likely fills as far as this one did: starting it
        // at that size (and a record or two more, for the one that crosses
        // the flush size) saves growing and copying it a dozen times.
        let expected = self.redo.len().min(REDO_FLUSH_BYTES);
        let next = Vec::with_capacity(expected + expected / 8);
        std::mem::replace(&mut self.redo, next)
    }

    pub(crate) fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }
}

impl Shard {
    /// Raises this shard's epoch to one seen in a commit or a report.
    pub(crate) fn observe_epoch(&mut self, epoch: CommitEpoch) {
        if epoch > self.dur.current {
            self.dur.current = epoch;
        }
    }

    /// Hands buffered REDO bytes to the host.
    pub(crate) fn flush_redo(&mut self, out: &mut Outbox, force: bool) {
        if !self.dur.redo.is_empty() && (force || self.dur.redo.len() >= REDO_FLUSH_BYTES) {
            out.disk.push(DiskOp::RedoAppend(self.dur.take_redo()));
        }
    }

    /// The latest epoch known durable on every live data node.
    pub fn durable_epoch(&self) -> CommitEpoch {
        self.dur.durable
    }

    /// The epoch commits decided here now get.
    pub fn current_epoch(&self) -> CommitEpoch {
        self.dur.current
    }

    /// The nodes that take writes (started, or starting and catching up):
    /// each syncs its REDO log for an epoch to become durable.
    fn started_nodes(&self) -> Vec<NodeId> {
        self.layout.writer_nodes()
    }

    fn started_shards(&self) -> BTreeSet<ShardAddr> {
        self.layout
            .datanodes
            .iter()
            .filter(|d| d.status.takes_writes())
            .flat_map(|d| (0..d.shards.len()).map(move |s| ShardAddr { node: d.node_id, shard: s as u16 }))
            .collect()
    }

    /// Whether every commit this shard is responsible for in an epoch below
    /// `epoch` has reached all its replicas (see the module comment).
    fn completed_below(&self, epoch: CommitEpoch) -> bool {
        if self.takeover_pending() || !self.tc.all_committed_below(epoch) {
            return false;
        }
        if self.ldm.committing.values().any(|c| c.epoch < epoch) {
            return false;
        }
        // Writes a backup applied at once in an older epoch, not committed here yet.
        if self.ldm.txs.values().any(|l| l.applied_in.is_some_and(|e| e < epoch)) {
            return false;
        }
        let layout = &self.layout;
        self.ldm.txs.keys().chain(self.ldm.replica_txs.keys()).all(|tx| layout.takes_writes(tx.tc.node))
    }

    pub(crate) fn epoch_on_switch(&mut self, from: ShardAddr, epoch: CommitEpoch, out: &mut Outbox) {
        self.observe_epoch(epoch);
        if self.dur.switch.is_none_or(|(e, _)| epoch >= e) {
            self.dur.switch = Some((epoch, from));
        }
        self.epoch_check_switch(out);
    }

    /// Answers a pending switch once this shard's older commits completed.
    pub(crate) fn epoch_check_switch(&mut self, out: &mut Outbox) {
        let Some((epoch, driver)) = self.dur.switch else { return };
        if !self.completed_below(epoch) {
            return;
        }
        self.dur.switch = None;
        let view = self.started_nodes();
        self.send_peer(driver, PeerMsg::EpochCompleted { epoch, view }, out);
    }

    pub(crate) fn epoch_on_save(&mut self, from: ShardAddr, epoch: CommitEpoch, out: &mut Outbox) {
        if !self.dur.enabled {
            self.send_peer(from, PeerMsg::EpochSaved { epoch }, out);
            return;
        }
        self.dur.append(&Record::Saved { epoch });
        self.dur.saved = self.dur.saved.max(epoch);
        self.flush_redo(out, true);
        let token = self.dur.token();
        out.disk.push(DiskOp::RedoSync { token });
        self.dur.syncs.push((token, epoch, from));
    }

    /// The host finished a sync or a checkpoint it was asked for.
    pub fn on_disk_done(&mut self, token: u64, now: Micros, out: &mut Outbox) {
        self.now = now;
        if let Some(i) = self.dur.syncs.iter().position(|(t, _, _)| *t == token) {
            let (_, epoch, driver) = self.dur.syncs.remove(i);
            self.send_peer(driver, PeerMsg::EpochSaved { epoch }, out);
        } else {
            self.lcp_on_disk_done(token, out);
        }
        self.finish_turn(out);
    }

    pub(crate) fn epoch_on_durable(&mut self, epoch: CommitEpoch, out: &mut Outbox) {
        if epoch <= self.dur.durable {
            return;
        }
        self.dur.durable = epoch;
        let mut i = 0;
        while i < self.dur.waiters.len() {
            if self.dur.waiters[i].2 <= epoch {
                let (conn, req_id, _) = self.dur.waiters.swap_remove(i);
                out.client.push((conn, req_id, ClientResponse::Durable(epoch)));
            } else {
                i += 1;
            }
        }
        self.lcp_on_durable(out);
    }

    /// `WaitDurable`: answered once the current epoch (which every commit
    /// this shard acknowledged so far belongs to, or precedes) is durable.
    pub(crate) fn epoch_wait_durable(&mut self, conn: ConnId, req_id: u64, out: &mut Outbox) {
        if !self.dur.enabled {
            let e = DbError::new(
                ErrorCode::BadRequest,
                format!(
                    "data node {} runs without a data directory: its commits are never durable; start it with --data-dir to wait for durability",
                    self.cfg.me.node
                ),
            );
            out.client.push((conn, req_id, ClientResponse::Error(e)));
            return;
        }
        let target = self.dur.current;
        if target <= self.dur.durable {
            out.client.push((conn, req_id, ClientResponse::Durable(self.dur.durable)));
        } else {
            self.dur.waiters.push((conn, req_id, target));
        }
    }

    /// A client connection closed: its durability waits are dropped.
    pub(crate) fn epoch_disconnect(&mut self, conn: ConnId) {
        self.dur.waiters.retain(|w| w.0 != conn);
    }

    /// Whether this shard drives the epochs: shard 0 of the lowest started
    /// node (a starting node never does).
    fn is_epoch_driver(&self) -> bool {
        let lowest = self.layout.datanodes.iter().filter(|d| d.status == NodeStatus::Started).map(|d| d.node_id).min();
        self.cfg.me.shard == 0 && lowest == Some(self.cfg.me.node)
    }

    /// Periodic work of the epoch driver.
    pub(crate) fn epoch_tick(&mut self, out: &mut Outbox) {
        self.flush_redo(out, true);
        let interval = self.layout.epoch_interval_ms.max(1) * 1000;
        if !self.is_epoch_driver() || self.layout.datanodes.is_empty() {
            self.dur.driver = None;
            return;
        }
        let now = self.now;
        let current = self.dur.current;
        let driver = self.dur.driver.get_or_insert(Driver {
            epoch: current,
            phase: DriverPhase::Idle,
            asked: BTreeSet::new(),
            waiting: BTreeSet::new(),
            asked_at: now,
            started_at: now,
            next_at: now,
        });
        match driver.phase {
            DriverPhase::Idle if now >= driver.next_at => {
                driver.epoch = driver.epoch.max(current) + 1;
                driver.phase = DriverPhase::Switching;
                driver.started_at = now;
                self.driver_ask(out);
            }
            DriverPhase::Switching | DriverPhase::Saving if now >= driver.asked_at + resend_after(interval) => {
                // Ask again whoever has not answered (a reply refused for a
                // stale view, or a link that broke and came back).
                let waiting: Vec<ShardAddr> = driver.waiting.iter().copied().collect();
                driver.asked_at = now;
                let Some(msg) = driver.message() else { return };
                for s in waiting {
                    self.send_peer(s, msg.clone(), out);
                }
            }
            _ => {}
        }
    }

    /// Sends the driver's current phase message to every started shard.
    fn driver_ask(&mut self, out: &mut Outbox) {
        let shards = self.started_shards();
        let now = self.now;
        let Some(driver) = self.dur.driver.as_mut() else { return };
        driver.waiting = shards.clone();
        driver.asked = shards.clone();
        driver.asked_at = now;
        let Some(msg) = driver.message() else { return };
        for s in shards {
            self.send_peer(s, msg.clone(), out);
        }
    }

    pub(crate) fn driver_on_completed(
        &mut self,
        from: ShardAddr,
        epoch: CommitEpoch,
        view: Vec<NodeId>,
        out: &mut Outbox,
    ) {
        let started = self.started_nodes();
        let Some(driver) = self.dur.driver.as_mut() else { return };
        if driver.phase != DriverPhase::Switching || driver.epoch != epoch {
            return;
        }
        if view.iter().any(|n| !started.contains(n)) {
            // It still counts a failed node: ask again later.
            return;
        }
        driver.waiting.remove(&from);
        if driver.waiting.is_empty() {
            driver.phase = DriverPhase::Saving;
            self.driver_ask(out);
        }
    }

    pub(crate) fn driver_on_saved(&mut self, from: ShardAddr, epoch: CommitEpoch, out: &mut Outbox) {
        let Some(driver) = self.dur.driver.as_mut() else { return };
        if driver.phase != DriverPhase::Saving || driver.epoch - 1 != epoch {
            return;
        }
        driver.waiting.remove(&from);
        if driver.waiting.is_empty() {
            self.driver_declare_durable(epoch, out);
        }
    }

    /// Every started shard saved `epoch`: it is durable.
    fn driver_declare_durable(&mut self, epoch: CommitEpoch, out: &mut Outbox) {
        let interval = self.layout.epoch_interval_ms.max(1) * 1000;
        let Some(driver) = self.dur.driver.as_mut() else { return };
        driver.phase = DriverPhase::Idle;
        driver.next_at = driver.started_at + interval;
        for s in self.started_shards() {
            self.send_peer(s, PeerMsg::EpochDurable { epoch }, out);
        }
        out.durable = Some(epoch);
    }

    /// A new layout: shards that left are not waited for. While switching,
    /// a node leaving voids the answers already counted: they trusted that
    /// node's coordinators to finish their commits, and a takeover may now
    /// finish them, in an epoch below the new one, after those answers.
    /// Everyone is asked again (and answers once the takeover is done).
    pub(crate) fn epoch_layout_changed(&mut self, out: &mut Outbox) {
        let shards = self.started_shards();
        let Some(driver) = self.dur.driver.as_mut() else { return };
        if driver.phase == DriverPhase::Switching && !driver.asked.is_subset(&shards) {
            self.driver_ask(out);
            return;
        }
        driver.waiting.retain(|s| shards.contains(s));
        if driver.phase != DriverPhase::Idle && driver.waiting.is_empty() {
            // Everyone left answered: finish the phase as if the last one had.
            match driver.phase {
                DriverPhase::Switching => {
                    driver.phase = DriverPhase::Saving;
                    self.driver_ask(out);
                }
                _ => {
                    let epoch = driver.epoch - 1;
                    self.driver_declare_durable(epoch, out);
                }
            }
        }
    }
}

fn resend_after(interval: Micros) -> Micros {
    (10 * interval).max(1_000_000)
}
