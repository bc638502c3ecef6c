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

use crate::context::{ConnId, Context, Micros};
use crate::shard::Outbox;
use latsdb_storage::log::Record;
use latsdb_types::proto::{ClientResponse, CommitEpoch, NodeId, NodeStatus, PeerMsg, ShardAddr};
use latsdb_types::{DbError, ErrorCode};
use std::collections::BTreeSet;

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
            DriverPhase::Saving => Some(PeerMsg::EpochSave { epoch: self.epoch.prev() }),
            DriverPhase::Idle => None,
        }
    }

    /// Sends the current phase's message to every shard that takes writes.
    fn ask(&mut self, cx: &mut Context, out: &mut Outbox) {
        let shards: BTreeSet<ShardAddr> = cx.writer_shards(None).into_iter().collect();
        self.waiting = shards.clone();
        self.asked = shards.clone();
        self.asked_at = cx.now;
        let Some(msg) = self.message() else { return };
        for s in shards {
            cx.send_peer(s, msg.clone(), out);
        }
    }

    /// Every shard saved `epoch`: it is durable.
    fn declare_durable(&mut self, cx: &mut Context, out: &mut Outbox, epoch: CommitEpoch) {
        debug_assert_eq!(epoch.next(), self.epoch, "the driver declared an epoch it was not saving");
        let interval = cx.layout.epoch_interval_ms.max(1) * 1000;
        self.phase = DriverPhase::Idle;
        self.next_at = self.started_at + interval;
        for s in cx.writer_shards(None) {
            cx.send_peer(s, PeerMsg::EpochDurable { epoch }, out);
        }
        out.durable = Some(epoch);
    }
}

/// The durability block: the epochs of one shard, and the epoch driver
/// when this shard drives them.
pub(crate) struct Epochs {
    /// Latest epoch known durable.
    pub(crate) durable: CommitEpoch,
    /// The latest epoch this shard's log (with its checkpoint) holds every
    /// commit of: the newest `Saved` marker appended, or the restored epoch.
    pub(crate) saved: CommitEpoch,
    /// A switch waiting until this shard's older commits completed.
    switch: Option<(CommitEpoch, ShardAddr)>,
    /// Syncs in flight: token, epoch saved, driver to tell.
    syncs: Vec<(u64, CommitEpoch, ShardAddr)>,
    /// `WaitDurable` requests: connection, request id, epoch awaited.
    waiters: Vec<(ConnId, u64, CommitEpoch)>,
    driver: Option<Driver>,
}

impl Epochs {
    pub(crate) fn new() -> Self {
        Epochs {
            durable: CommitEpoch::NONE,
            saved: CommitEpoch::NONE,
            switch: None,
            syncs: Vec::new(),
            waiters: Vec::new(),
            driver: None,
        }
    }

    /// Checks the block's invariants (run by the simulator after every step).
    pub(crate) fn check(&self, cx: &Context) {
        let me = cx.me();
        assert!(self.waiters.iter().all(|w| w.2 > self.durable), "shard {me}: a durability wait outlived its epoch");
        if !cx.redo.enabled {
            assert!(self.syncs.is_empty() && self.waiters.is_empty(), "shard {me}: syncs or waits without a disk");
        }
        if let Some(driver) = &self.driver {
            assert!(driver.waiting.is_subset(&driver.asked), "shard {me}: the driver waits for a shard it did not ask");
            assert!(driver.epoch <= cx.commit_epoch, "shard {me}: the driver switched beyond the commit epoch");
            assert!(
                driver.phase == DriverPhase::Idle || driver.epoch > self.durable,
                "shard {me}: the driver switches to epoch {} that is already durable",
                driver.epoch
            );
        }
    }

    /// A switch to `epoch` from the driver: recorded, and answered by
    /// `check_switch` once this shard's commits below it completed.
    pub(crate) fn on_switch(&mut self, cx: &mut Context, from: ShardAddr, epoch: CommitEpoch) {
        cx.observe_epoch(epoch);
        if self.switch.is_none_or(|(e, _)| epoch >= e) {
            self.switch = Some((epoch, from));
        }
    }

    /// Answers a pending switch once this shard's older commits completed.
    pub(crate) fn check_switch(
        &mut self,
        cx: &mut Context,
        out: &mut Outbox,
        completed_below: impl Fn(&Context, CommitEpoch) -> bool,
    ) {
        let Some((epoch, driver)) = self.switch else { return };
        if !completed_below(cx, epoch) {
            return;
        }
        debug_assert!(epoch <= cx.commit_epoch, "a switch answered before the shard took its epoch");
        self.switch = None;
        let view = cx.layout.writer_nodes();
        cx.send_peer(driver, PeerMsg::EpochCompleted { epoch, view }, out);
    }

    /// The driver asks to save `epoch`: a `Saved` marker is logged and the
    /// log synced; the driver hears once the host's sync is done.
    pub(crate) fn on_save(&mut self, cx: &mut Context, out: &mut Outbox, from: ShardAddr, epoch: CommitEpoch) {
        if !cx.redo.enabled {
            cx.send_peer(from, PeerMsg::EpochSaved { epoch }, out);
            return;
        }
        cx.redo.append(&Record::Saved { epoch });
        self.saved = self.saved.max(epoch);
        cx.redo.flush(out, true);
        let token = cx.redo.token();
        out.disk.push(DiskOp::RedoSync { token });
        self.syncs.push((token, epoch, from));
    }

    /// The host finished the disk operation `token`; says whether it was
    /// a sync of this block.
    pub(crate) fn on_disk_done(&mut self, cx: &mut Context, out: &mut Outbox, token: u64) -> bool {
        let Some(i) = self.syncs.iter().position(|(t, _, _)| *t == token) else { return false };
        let (_, epoch, driver) = self.syncs.remove(i);
        cx.send_peer(driver, PeerMsg::EpochSaved { epoch }, out);
        true
    }

    /// `epoch` is durable on every live data node; says whether it is news.
    pub(crate) fn on_durable(&mut self, out: &mut Outbox, epoch: CommitEpoch) -> bool {
        if epoch <= self.durable {
            return false;
        }
        self.durable = epoch;
        let mut i = 0;
        while i < self.waiters.len() {
            if self.waiters[i].2 <= epoch {
                let (conn, req_id, _) = self.waiters.swap_remove(i);
                out.client.push((conn, req_id, ClientResponse::Durable(epoch)));
            } else {
                i += 1;
            }
        }
        true
    }

    /// `WaitDurable`: answered once the current epoch (which every commit
    /// this shard acknowledged so far belongs to, or precedes) is durable.
    pub(crate) fn wait_durable(&mut self, cx: &Context, out: &mut Outbox, conn: ConnId, req_id: u64) {
        if !cx.redo.enabled {
            let e = DbError::new(
                ErrorCode::BadRequest,
                format!(
                    "data node {} runs without a data directory: its commits are never durable; start it with --data-dir to wait for durability",
                    cx.me().node
                ),
            );
            out.client.push((conn, req_id, ClientResponse::Error(e)));
            return;
        }
        let target = cx.commit_epoch;
        if target <= self.durable {
            out.client.push((conn, req_id, ClientResponse::Durable(self.durable)));
        } else {
            self.waiters.push((conn, req_id, target));
        }
    }

    /// A client connection closed: its durability waits are dropped.
    pub(crate) fn on_disconnect(&mut self, conn: ConnId) {
        self.waiters.retain(|w| w.0 != conn);
    }

    /// Periodic work of the epoch driver.
    pub(crate) fn tick(&mut self, cx: &mut Context, out: &mut Outbox) {
        cx.redo.flush(out, true);
        let interval = cx.layout.epoch_interval_ms.max(1) * 1000;
        if !is_epoch_driver(cx) || cx.layout.datanodes.is_empty() {
            self.driver = None;
            return;
        }
        let now = cx.now;
        let current = cx.commit_epoch;
        let driver = self.driver.get_or_insert(Driver {
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
                driver.epoch = driver.epoch.max(current).next();
                driver.phase = DriverPhase::Switching;
                driver.started_at = now;
                driver.ask(cx, out);
            }
            DriverPhase::Switching | DriverPhase::Saving if now >= driver.asked_at + resend_after(interval) => {
                // Ask again whoever has not answered (a reply refused for a
                // stale view, or a link that broke and came back).
                let waiting: Vec<ShardAddr> = driver.waiting.iter().copied().collect();
                driver.asked_at = now;
                let Some(msg) = driver.message() else { return };
                for s in waiting {
                    cx.send_peer(s, msg.clone(), out);
                }
            }
            _ => {}
        }
    }

    /// A shard completed the switch to `epoch` (`EpochCompleted`), counting
    /// the nodes of `view`.
    pub(crate) fn on_completed(
        &mut self,
        cx: &mut Context,
        out: &mut Outbox,
        from: ShardAddr,
        epoch: CommitEpoch,
        view: Vec<NodeId>,
    ) {
        let started = cx.layout.writer_nodes();
        let Some(driver) = self.driver.as_mut() else { return };
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
            driver.ask(cx, out);
        }
    }

    /// A shard saved `epoch` (`EpochSaved`).
    pub(crate) fn on_saved(&mut self, cx: &mut Context, out: &mut Outbox, from: ShardAddr, epoch: CommitEpoch) {
        let Some(driver) = self.driver.as_mut() else { return };
        if driver.phase != DriverPhase::Saving || driver.epoch.prev() != epoch {
            return;
        }
        driver.waiting.remove(&from);
        if driver.waiting.is_empty() {
            driver.declare_durable(cx, out, epoch);
        }
    }

    /// A new layout: shards that left are not waited for. While switching,
    /// a node leaving voids the answers already counted: they trusted that
    /// node's coordinators to finish their commits, and a takeover may now
    /// finish them, in an epoch below the new one, after those answers.
    /// Everyone is asked again (and answers once the takeover is done).
    pub(crate) fn on_layout_changed(&mut self, cx: &mut Context, out: &mut Outbox) {
        let shards: BTreeSet<ShardAddr> = cx.writer_shards(None).into_iter().collect();
        let Some(driver) = self.driver.as_mut() else { return };
        if driver.phase == DriverPhase::Switching && !driver.asked.is_subset(&shards) {
            driver.ask(cx, out);
            return;
        }
        driver.waiting.retain(|s| shards.contains(s));
        if driver.phase != DriverPhase::Idle && driver.waiting.is_empty() {
            // Everyone left answered: finish the phase as if the last one had.
            match driver.phase {
                DriverPhase::Switching => {
                    driver.phase = DriverPhase::Saving;
                    driver.ask(cx, out);
                }
                _ => {
                    let epoch = driver.epoch.prev();
                    driver.declare_durable(cx, out, epoch);
                }
            }
        }
    }
}

/// Whether this shard drives the epochs: shard 0 of the lowest started
/// node (a starting node never does).
fn is_epoch_driver(cx: &Context) -> bool {
    let lowest = cx.layout.datanodes.iter().filter(|d| d.status == NodeStatus::Started).map(|d| d.node_id).min();
    cx.me().shard == 0 && lowest == Some(cx.me().node)
}

fn resend_after(interval: Micros) -> Micros {
    (10 * interval).max(1_000_000)
}
