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

use crate::context::{Context, FastMap};
use crate::ldm::Ldm;
use crate::shard::Outbox;
use latsdb_types::proto::{CommitEpoch, NodeId, NodeStatus, PeerMsg, ShardAddr, TakeoverReport, TxId};
use std::collections::{BTreeMap, BTreeSet};

/// One failed node's takeover round, at the takeover shard.
#[derive(Default)]
struct Round {
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

impl Round {
    fn pending(&self) -> bool {
        self.since.is_some() && !self.decided
    }
}

/// The takeover block: the rounds this shard runs (as the takeover shard
/// of a failed node), and the layout version it last reported in.
#[derive(Default)]
pub(crate) struct Takeovers {
    rounds: FastMap<NodeId, Round>,
    /// The layout version this shard last sent its takeover reports in.
    reported_version: u64,
}

fn view_of(layout_version: u64) -> latsdb_types::proto::ViewNumber {
    latsdb_types::proto::ClusterLayout::view_of(layout_version)
}

/// The nodes of the layout that are not started, in order.
fn failed_nodes(cx: &Context) -> Vec<NodeId> {
    let mut gone: Vec<NodeId> =
        cx.layout.datanodes.iter().filter(|d| d.status != NodeStatus::Started).map(|d| d.node_id).collect();
    gone.sort_unstable();
    gone
}

impl Takeovers {
    /// Whether this shard, as the takeover shard, still waits for reports
    /// on a failed node (which holds up epochs: the decision may commit).
    pub(crate) fn pending(&self, cx: &Context) -> bool {
        let me = cx.me();
        self.rounds.iter().any(|(dead, round)| round.pending() && cx.writer_shards(Some(*dead)).first() == Some(&me))
    }

    /// Whether this shard has not yet reported in the current layout.
    pub(crate) fn report_due(&self, cx: &Context) -> bool {
        cx.layout.version != self.reported_version
    }

    /// Checks the rounds' invariants (run by the simulator after every step).
    pub(crate) fn check(&self, cx: &Context) {
        assert!(
            self.reported_version <= cx.layout.version,
            "shard {} reported in layout {} beyond its own {}",
            cx.me(),
            self.reported_version,
            cx.layout.version
        );
        for (dead, round) in &self.rounds {
            if round.decided {
                assert!(round.since.is_some(), "the round of node {dead} decided before it began");
                assert!(round.prepared.is_empty(), "the round of node {dead} decided but kept prepared transactions");
            }
            if round.since.is_none() {
                assert!(round.reported.is_empty(), "the round of node {dead} counted reports before it began");
            }
            assert!(
                round.prepared.keys().chain(round.committed.keys()).all(|tx| tx.tc.node == *dead),
                "the round of node {dead} holds another node's transaction"
            );
        }
    }

    /// Reports on every node that is not started, in this layout version.
    pub(crate) fn report_all(&mut self, cx: &mut Context, ldm: &Ldm, out: &mut Outbox) {
        self.reported_version = cx.layout.version;
        for dead in failed_nodes(cx) {
            report(cx, ldm, out, dead);
        }
    }

    /// A shard's report (`TakeoverReport`).
    pub(crate) fn on_report(&mut self, cx: &mut Context, out: &mut Outbox, from: ShardAddr, report: TakeoverReport) {
        let round = self.rounds.entry(report.dead).or_default();
        match round.since {
            None => round.early.push((from, report)),
            Some(since) if view_of(report.version) < view_of(since) => {}
            Some(_) => self.count(cx, out, from, report),
        }
    }

    fn count(&mut self, cx: &mut Context, out: &mut Outbox, from: ShardAddr, report: TakeoverReport) {
        let TakeoverReport { dead, prepared, committed, .. } = report;
        let Some(round) = self.rounds.get_mut(&dead) else { return };
        debug_assert!(round.since.is_some(), "a report counted before the round began");
        round.committed.extend(committed);
        if round.decided {
            // Late: the decision is made; this shard's share gets it now.
            let decisions: Vec<(TxId, Option<CommitEpoch>)> =
                prepared.into_iter().map(|tx| (tx, round.committed.get(&tx).copied())).collect();
            for (tx, commit) in decisions {
                send_decision(cx, out, from, tx, commit);
            }
            return;
        }
        round.reported.insert(from);
        for tx in prepared {
            round.prepared.entry(tx).or_default().insert(from);
        }
        self.try_decide(cx, out, dead);
    }

    /// A new layout: rounds of nodes started again are over; a failure seen
    /// for the first time starts counting (with the reports that came
    /// early, if made since); a round may be complete now that a shard
    /// that never reported left.
    pub(crate) fn on_layout_changed(&mut self, cx: &mut Context, out: &mut Outbox) {
        let failed = failed_nodes(cx);
        let version = cx.layout.version;
        self.rounds.retain(|dead, round| {
            if failed.contains(dead) {
                return true;
            }
            // Started (again), or not in this layout yet (a node of a node
            // group being added): the round is over, but reports made in
            // newer layouts may be about a failure this shard has yet to
            // see. (Counted once it sees it, only if made in its view or a
            // later one.)
            round.early.retain(|(_, r)| r.version > version);
            *round = Round { early: std::mem::take(&mut round.early), ..Default::default() };
            !round.early.is_empty()
        });
        for dead in failed {
            let round = self.rounds.entry(dead).or_default();
            if round.since.is_none() {
                round.since = Some(version);
                let early = std::mem::take(&mut round.early);
                for (from, report) in early {
                    if view_of(report.version) >= view_of(version) {
                        self.count(cx, out, from, report);
                    }
                }
            }
            self.try_decide(cx, out, dead);
        }
    }

    fn try_decide(&mut self, cx: &mut Context, out: &mut Outbox, dead: NodeId) {
        let live = cx.writer_shards(Some(dead));
        let Some(round) = self.rounds.get_mut(&dead) else { return };
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
            send_decision(cx, out, holder, tx, commit);
        }
    }
}

/// What this shard holds of the transactions of node `dead`, to the
/// takeover shard.
fn report(cx: &mut Context, ldm: &Ldm, out: &mut Outbox, dead: NodeId) {
    let Some(&takeover) = cx.writer_shards(Some(dead)).first() else { return };
    let (prepared, committed) = ldm.coordinated_by(dead);
    let version = cx.layout.version;
    let msg = PeerMsg::TakeoverReport(TakeoverReport { dead, version, prepared, committed });
    cx.send_peer(takeover, msg, out);
}

fn send_decision(cx: &mut Context, out: &mut Outbox, to: ShardAddr, tx: TxId, commit: Option<CommitEpoch>) {
    let msg = match commit {
        Some(epoch) => PeerMsg::TakeoverCommit { tx, epoch },
        None => PeerMsg::TakeoverAbort { tx },
    };
    cx.send_peer(to, msg, out);
}
