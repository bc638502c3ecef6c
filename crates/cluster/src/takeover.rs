//! Takeover of a failed coordinator's transactions (non-blocking commit).
//!
//! When a node leaves, every live shard reports to the takeover shard (the
//! lowest live shard address) which of the transactions coordinated on that
//! node it holds prepared (locks and staged rows, as primary or backup) and
//! which it has seen committed (a `TxCommit` or `ReplicaCommit` arrived).
//! Commit happens only after every participant prepared, so one report of a
//! commit means the coordinator decided to commit: the takeover shard then
//! commits the transaction wherever it is still prepared. With no such
//! report the coordinator cannot have told the client "committed", and the
//! transaction is aborted everywhere. Participants hold their locks until
//! the decision arrives.
//!
//! A shard reports on every node that is not started each time it
//! installs a new layout version, to the takeover shard of that layout, so
//! a takeover shard that fails is replaced by the next one without losing
//! anything. The takeover shard keeps one round per failed node for as long
//! as the node stays failed (it is dropped once the node is started again),
//! counting reports made in the membership view in which it first saw the
//! node failed or a later one: an older report may belong to an earlier
//! failure of the same node and is ignored (its sender reports again). (A
//! node fails again only through a new view; layouts of one view may differ
//! in the management server's part, so views are compared, not versions.) The round
//! decides once every live shard reported; a report that comes later gets
//! the decision for its transactions at once. Deciding again (a new
//! takeover shard) is harmless: a decision depends only on whether some
//! shard saw the commit, and every shard that could have seen one reported.
//! A node that is starting again counts as failed: it coordinates nothing
//! until admitted, so every transaction of its id is one of its previous
//! process, which only a takeover can finish.
//!
//! ```text
//! every live shard              takeover shard
//!   |--TakeoverReport----------->|  (prepared, committed) per shard
//!   |<--TakeoverCommit / Abort---|  once every live shard reported
//! ```

use crate::ldm::CommitReply;
use crate::shard::{Outbox, Shard};
use latsdb_types::proto::{CommitEpoch, NodeId, NodeStatus, PeerMsg, ShardAddr, TakeoverReport, TxId};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub(crate) struct Takeover {
    /// The layout version in which this shard first saw the node failed
    /// (this time); `None` while its layout still shows it started.
    since: Option<u64>,
    /// Reports that came before this shard saw the failure.
    early: Vec<(ShardAddr, TakeoverReport)>,
    /// Shards whose report counted.
    reported: BTreeSet<ShardAddr>,
    prepared: BTreeMap<TxId, BTreeSet<ShardAddr>>,
    /// Transactions some shard saw committed, with their epoch.
    committed: BTreeMap<TxId, CommitEpoch>,
    decided: bool,
}

impl Takeover {
    fn pending(&self) -> bool {
        self.since.is_some() && !self.decided
    }
}

fn view_of(layout_version: u64) -> u64 {
    latsdb_types::proto::ClusterLayout::view_epoch_of(layout_version)
}

impl Shard {
    fn live_shards(&self, except: NodeId) -> Vec<ShardAddr> {
        let mut shards: Vec<ShardAddr> = self
            .layout
            .datanodes
            .iter()
            .filter(|d| d.status.takes_writes() && d.node_id != except)
            .flat_map(|d| (0..d.shards.len()).map(move |s| ShardAddr { node: d.node_id, shard: s as u16 }))
            .collect();
        shards.sort_unstable();
        shards
    }

    /// Whether this shard, as the takeover shard, still waits for reports
    /// on a failed node (which holds up epochs: the decision may commit).
    pub(crate) fn takeover_pending(&self) -> bool {
        let me = self.cfg.me;
        self.takeovers.iter().any(|(dead, round)| round.pending() && self.live_shards(*dead).first() == Some(&me))
    }

    fn failed_nodes(&self) -> Vec<NodeId> {
        let mut gone: Vec<NodeId> =
            self.layout.datanodes.iter().filter(|d| d.status != NodeStatus::Started).map(|d| d.node_id).collect();
        gone.sort_unstable();
        gone
    }

    /// Reports on every node that is not started, in this layout version.
    pub(crate) fn takeover_report_all(&mut self, out: &mut Outbox) {
        self.reported_version = self.layout.version;
        for dead in self.failed_nodes() {
            self.takeover_report(dead, out);
        }
    }

    /// What this shard holds of the transactions of node `dead`.
    fn takeover_report(&mut self, dead: NodeId, out: &mut Outbox) {
        let Some(&takeover) = self.live_shards(dead).first() else { return };
        let mut prepared: BTreeSet<TxId> = self.ldm.txs.keys().filter(|t| t.tc.node == dead).copied().collect();
        prepared.extend(self.ldm.replica_txs.keys().filter(|t| t.tc.node == dead));
        let committed = self.ldm.commit_log.coordinated_by(dead);
        let version = self.layout.version;
        let msg = PeerMsg::TakeoverReport(TakeoverReport {
            dead,
            version,
            prepared: prepared.into_iter().collect(),
            committed,
        });
        self.send_peer(takeover, msg, out);
    }

    pub(crate) fn takeover_on_report(&mut self, from: ShardAddr, report: TakeoverReport, out: &mut Outbox) {
        let round = self.takeovers.entry(report.dead).or_default();
        match round.since {
            None => round.early.push((from, report)),
            Some(since) if view_of(report.version) < view_of(since) => {}
            Some(_) => self.takeover_count(from, report, out),
        }
    }

    fn takeover_count(&mut self, from: ShardAddr, report: TakeoverReport, out: &mut Outbox) {
        let TakeoverReport { dead, prepared, committed, .. } = report;
        let Some(round) = self.takeovers.get_mut(&dead) else { return };
        round.committed.extend(committed);
        if round.decided {
            // Late: the decision is made; this shard's share gets it now.
            let decisions: Vec<(TxId, Option<CommitEpoch>)> =
                prepared.into_iter().map(|tx| (tx, round.committed.get(&tx).copied())).collect();
            for (tx, commit) in decisions {
                self.takeover_send(from, tx, commit, out);
            }
            return;
        }
        round.reported.insert(from);
        for tx in prepared {
            round.prepared.entry(tx).or_default().insert(from);
        }
        self.takeover_try_decide(dead, out);
    }

    /// A new layout: rounds of nodes started again are over; a failure seen
    /// for the first time starts counting (with the reports that came
    /// early, if made since); a round may be complete now that a shard
    /// that never reported left.
    pub(crate) fn takeover_layout_changed(&mut self, out: &mut Outbox) {
        let failed = self.failed_nodes();
        let version = self.layout.version;
        self.takeovers.retain(|dead, round| {
            if failed.contains(dead) {
                return true;
            }
            // Started (again): the round is over, but reports made in newer
            // views may be about a failure this shard has yet to see.
            round.early.retain(|(_, r)| view_of(r.version) > view_of(version));
            *round = Takeover { early: std::mem::take(&mut round.early), ..Default::default() };
            !round.early.is_empty()
        });
        for dead in failed {
            let round = self.takeovers.entry(dead).or_default();
            if round.since.is_none() {
                round.since = Some(version);
                let early = std::mem::take(&mut round.early);
                for (from, report) in early {
                    if view_of(report.version) >= view_of(version) {
                        self.takeover_count(from, report, out);
                    }
                }
            }
            self.takeover_try_decide(dead, out);
        }
    }

    fn takeover_try_decide(&mut self, dead: NodeId, out: &mut Outbox) {
        let live = self.live_shards(dead);
        let Some(round) = self.takeovers.get_mut(&dead) else { return };
        if !round.pending() || !live.iter().all(|s| round.reported.contains(s)) {
            return;
        }
        // Every live shard reported: commit what any of them saw committed,
        // abort the rest.
        round.decided = true;
        let prepared = std::mem::take(&mut round.prepared);
        let decisions: Vec<(ShardAddr, TxId, Option<CommitEpoch>)> = prepared
            .into_iter()
            .flat_map(|(tx, holders)| {
                let commit = round.committed.get(&tx).copied();
                holders.into_iter().map(move |h| (h, tx, commit))
            })
            .collect();
        for (holder, tx, commit) in decisions {
            self.takeover_send(holder, tx, commit, out);
        }
    }

    fn takeover_send(&mut self, to: ShardAddr, tx: TxId, commit: Option<CommitEpoch>, out: &mut Outbox) {
        let msg = match commit {
            Some(epoch) => PeerMsg::TakeoverCommit { tx, epoch },
            None => PeerMsg::TakeoverAbort { tx },
        };
        self.send_peer(to, msg, out);
    }

    pub(crate) fn takeover_commit(&mut self, tx: TxId, epoch: CommitEpoch, out: &mut Outbox) {
        self.ldm_commit_with(tx, CommitReply::Nobody, epoch, out);
    }
}
