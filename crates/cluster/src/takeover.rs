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
//! ```text
//! every live shard              takeover shard
//!   |--TakeoverReport----------->|  (prepared, committed) per shard
//!   |<--TakeoverCommit / Abort---|  once every live shard reported
//! ```

use crate::ldm::CommitReply;
use crate::shard::{Outbox, Shard};
use latsdb_types::proto::{NodeId, PeerMsg, ShardAddr, TxId};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub(crate) struct Takeover {
    /// Live shards whose report is still missing.
    waiting: BTreeSet<ShardAddr>,
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

    /// Node `dead` left: report what this shard holds of its transactions.
    pub(crate) fn takeover_report(&mut self, dead: NodeId, out: &mut Outbox) {
        let Some(&takeover) = self.live_shards(dead).first() else { return };
        let mut prepared: BTreeSet<TxId> = self.ldm.txs.keys().filter(|t| t.tc.node == dead).copied().collect();
        prepared.extend(self.ldm.replica_txs.keys().filter(|t| t.tc.node == dead));
        let committed = self.ldm.commit_log.coordinated_by(dead);
        let msg = PeerMsg::TakeoverReport { dead, prepared: prepared.into_iter().collect(), committed };
        self.send_peer(takeover, msg, out);
    }

    pub(crate) fn takeover_on_report(
        &mut self,
        from: ShardAddr,
        dead: NodeId,
        prepared: Vec<TxId>,
        committed: Vec<(TxId, latsdb_types::proto::CommitEpoch)>,
        out: &mut Outbox,
    ) {
        if !self.takeovers.contains_key(&dead) {
            // The report may come before this shard's own layout update:
            // the dead node is excluded explicitly.
            let waiting = self.live_shards(dead).into_iter().collect();
            self.takeovers.insert(dead, Takeover { waiting, ..Default::default() });
        }
        let t = self.takeovers.get_mut(&dead).expect("inserted above");
        if !t.waiting.remove(&from) {
            return;
        }
        for tx in prepared {
            t.prepared.entry(tx).or_default().insert(from);
        }
        t.committed.extend(committed);
        if t.waiting.is_empty() {
            self.takeover_decide(dead, out);
        }
    }

    /// The layout changed again while takeovers ran: shards that left will
    /// never report, so they are not waited for.
    pub(crate) fn takeover_layout_changed(&mut self, out: &mut Outbox) {
        let layout = &self.layout;
        let started = |a: &ShardAddr| layout.takes_writes(a.node);
        let mut done = Vec::new();
        for (dead, t) in self.takeovers.iter_mut() {
            t.waiting.retain(started);
            if t.waiting.is_empty() {
                done.push(*dead);
            }
        }
        done.sort_unstable();
        for dead in done {
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
