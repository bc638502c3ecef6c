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
//! Reports belong to a layout version. Every shard reports on every failed
//! node each time it installs a new layout, and the takeover shard counts
//! a round per failed node and version: it decides once every shard live
//! in that layout reported in it. A round of an older version is dropped
//! when a newer layout arrives (its reporters report again in the new
//! one), so a late or repeated report never completes, or blocks, the
//! wrong round. Deciding again in a later round is harmless: a decision
//! depends only on whether some shard saw the commit, and a takeover's own
//! commit is logged like the coordinator's.
//!
//! ```text
//! every live shard              takeover shard
//!   |--TakeoverReport----------->|  (prepared, committed) per shard
//!   |<--TakeoverCommit / Abort---|  once every live shard reported
//! ```

use crate::ldm::CommitReply;
use crate::shard::{Outbox, Shard};
use latsdb_types::proto::{NodeId, PeerMsg, ShardAddr, TakeoverReport, TxId};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub(crate) struct Takeover {
    /// The layout version the reports of this round were made in.
    pub(crate) version: u64,
    /// Shards that reported in this round.
    pub(crate) reported: BTreeSet<ShardAddr>,
    prepared: BTreeMap<TxId, BTreeSet<ShardAddr>>,
    /// Transactions some shard saw committed, with their epoch.
    committed: std::collections::BTreeMap<TxId, latsdb_types::proto::CommitEpoch>,
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

    /// Reports on every node that is not started, not only on the ones
    /// that just left, in every layout version: a takeover shard that left
    /// took its unfinished takeovers with it, and the next one starts them
    /// again from these reports; and a round counts the reports of one
    /// version. A node that is starting again counts as failed too: it
    /// coordinates nothing until admitted, so every transaction of its id
    /// is one of its previous process, which only a takeover can finish.
    pub(crate) fn takeover_report_all(&mut self, out: &mut Outbox) {
        self.reported_version = self.layout.version;
        let mut gone: Vec<NodeId> = self
            .layout
            .datanodes
            .iter()
            .filter(|d| d.status != latsdb_types::proto::NodeStatus::Started)
            .map(|d| d.node_id)
            .collect();
        gone.sort_unstable();
        for dead in gone {
            self.takeover_report(dead, out);
        }
    }

    /// Node `dead` is not live in this shard's layout: report what this
    /// shard holds of its transactions, for this layout version.
    fn takeover_report(&mut self, dead: NodeId, out: &mut Outbox) {
        let Some(&takeover) = self.live_shards(dead).first() else { return };
        let mut prepared: BTreeSet<TxId> = self.ldm.txs.keys().filter(|t| t.tc.node == dead).copied().collect();
        prepared.extend(self.ldm.replica_txs.keys().filter(|t| t.tc.node == dead));
        let committed = self.ldm.commit_log.coordinated_by(dead);
        let version = self.layout.version;
        let msg =
            PeerMsg::TakeoverReport(TakeoverReport { dead, version, prepared: prepared.into_iter().collect(), committed });
        self.send_peer(takeover, msg, out);
    }

    pub(crate) fn takeover_on_report(&mut self, from: ShardAddr, report: TakeoverReport, out: &mut Outbox) {
        let TakeoverReport { dead, version, prepared, committed } = report;
        if version < self.layout.version {
            // Made in a layout this shard left behind: the reporter reports
            // again in the newer one.
            return;
        }
        let round = self.takeovers.entry(dead).or_insert_with(|| Takeover { version, ..Default::default() });
        if round.version > version {
            return;
        }
        if round.version < version {
            *round = Takeover { version, ..Default::default() };
        }
        if !round.reported.insert(from) {
            return;
        }
        for tx in prepared {
            round.prepared.entry(tx).or_default().insert(from);
        }
        round.committed.extend(committed);
        self.takeover_try_decide(dead, out);
    }

    /// A new layout: rounds of older versions are void (everyone reports
    /// again), and a round of this version may be complete already (reports
    /// can arrive before the takeover shard's own layout update).
    pub(crate) fn takeover_layout_changed(&mut self, out: &mut Outbox) {
        let version = self.layout.version;
        self.takeovers.retain(|_, round| round.version >= version);
        let mut dead: Vec<NodeId> = self.takeovers.keys().copied().collect();
        dead.sort_unstable();
        for d in dead {
            self.takeover_try_decide(d, out);
        }
    }

    fn takeover_try_decide(&mut self, dead: NodeId, out: &mut Outbox) {
        let Some(round) = self.takeovers.get(&dead) else { return };
        if round.version != self.layout.version {
            return;
        }
        if self.live_shards(dead).iter().all(|s| round.reported.contains(s)) {
            self.takeover_decide(dead, out);
        }
    }

    /// Every live shard reported: commit what any of them saw committed,
    /// abort the rest.
    fn takeover_decide(&mut self, dead: NodeId, out: &mut Outbox) {
        let Some(t) = self.takeovers.remove(&dead) else { return };
        for (tx, holders) in t.prepared {
            let commit = t.committed.get(&tx).copied();
            for holder in holders {
                let msg = match commit {
                    Some(epoch) => PeerMsg::TakeoverCommit { tx, epoch },
                    None => PeerMsg::TakeoverAbort { tx },
                };
                self.send_peer(holder, msg, out);
            }
        }
    }

    pub(crate) fn takeover_commit(&mut self, tx: TxId, epoch: latsdb_types::proto::CommitEpoch, out: &mut Outbox) {
        self.ldm_commit_with(tx, CommitReply::Nobody, epoch, out);
    }
}
