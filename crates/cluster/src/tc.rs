//! Transaction coordinator.
//!
//! A client runs a transaction at one coordinator (a shard holding its first
//! key's partition). The coordinator sends each operation to the shard that
//! owns its partition, where it executes under row locks and its write is
//! staged: that is the prepare phase. On commit the coordinator sends
//! `TxCommit` to every participant; each applies its staged writes, releases
//! its locks and answers `TxCommitted`; the client hears "committed" when
//! all have answered. Any failed operation aborts the whole transaction,
//! except inserts that find their key taken in a request that changed
//! nothing else and does not commit.
//!
//! ```text
//! client        TC shard            LDM shard(s)
//!   |--TxExec----->|                     |
//!   |              |--TxOps------------->|  lock, stage
//!   |              |<--TxOpResults-------|
//!   |<--TxExec-----|  (commit=false: tx stays open)
//!   |--TxExec(commit)                    |
//!   |              |--TxCommit---------->|  apply, unlock
//!   |              |<--TxCommitted-------|
//!   |<--TxExec{committed}                |
//! ```

use crate::shard::{ConnId, FastMap, Outbox, Shard};
use latsdb_types::proto::{ClientResponse, KeyOp, OpResult, PeerMsg, ShardAddr, TxId};
use latsdb_types::schema::TableId;
use latsdb_types::{DbError, ErrorCode};
use std::collections::BTreeSet;

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Executing,
    Idle,
    /// Waiting for TxCommitted from these participants.
    Committing {
        waiting: Vec<ShardAddr>,
    },
}

struct TcTx {
    conn: ConnId,
    req_id: u64,
    results: Vec<Option<OpResult>>,
    remaining: usize,
    participants: Vec<ShardAddr>,
    /// (participant, table, partition) of every operation sent: where to
    /// find the replicas that took over when a participant fails.
    touched: BTreeSet<(ShardAddr, TableId, u32)>,
    commit: bool,
    phase: Phase,
    error: Option<DbError>,
    /// The highest epoch a participant reported; the commit's epoch is at
    /// least this (see durability.rs).
    epoch: latsdb_types::proto::CommitEpoch,
}

#[derive(Default)]
pub(crate) struct TcState {
    txs: FastMap<TxId, TcTx>,
    next_seq: u64,
}

impl TcState {
    pub(crate) fn starting_at(first_seq: u64) -> TcState {
        TcState { txs: FastMap::default(), next_seq: first_seq }
    }

    pub(crate) fn open(&self) -> usize {
        self.txs.len()
    }

    /// Whether no transaction decided in an epoch below `epoch` is still
    /// waiting for a participant's `TxCommitted`.
    pub(crate) fn all_committed_below(&self, epoch: latsdb_types::proto::CommitEpoch) -> bool {
        !self.txs.values().any(|t| matches!(t.phase, Phase::Committing { .. }) && t.epoch < epoch)
    }
}

impl Shard {
    pub(crate) fn tc_exec(
        &mut self,
        conn: ConnId,
        req_id: u64,
        tx: Option<TxId>,
        ops: Vec<KeyOp>,
        commit: bool,
        out: &mut Outbox,
    ) {
        let id = match tx {
            None => {
                self.tc.next_seq += 1;
                let id = TxId { tc: self.cfg.me, seq: self.tc.next_seq };
                self.tc.txs.insert(
                    id,
                    TcTx {
                        conn,
                        req_id,
                        results: Vec::new(),
                        remaining: 0,
                        participants: Vec::new(),
                        touched: BTreeSet::new(),
                        commit,
                        phase: Phase::Idle,
                        error: None,
                        epoch: 0,
                    },
                );
                id
            }
            Some(id) => match self.tc.txs.get(&id) {
                Some(t) if t.conn == conn && t.phase == Phase::Idle => id,
                Some(t) if t.conn == conn => {
                    let e = DbError::bad_request(
                        "the transaction is still executing a previous request; wait for its answer",
                    );
                    out.client.push((conn, req_id, ClientResponse::Error(e)));
                    return;
                }
                _ => {
                    let e = DbError::new(
                        ErrorCode::UnknownTransaction,
                        format!(
                            "transaction {}:{} is not open at this coordinator (it finished or was aborted)",
                            id.tc, id.seq
                        ),
                    );
                    out.client.push((conn, req_id, ClientResponse::Error(e)));
                    return;
                }
            },
        };
        // Route every operation before sending any, so a bad one aborts cleanly.
        let mut routed: Vec<(ShardAddr, Vec<(u32, KeyOp)>)> = Vec::new();
        let mut route_error = None;
        for (idx, op) in ops.into_iter().enumerate() {
            match self.tc_route(&op) {
                Ok(shard) => match routed.iter_mut().find(|(s, _)| *s == shard) {
                    Some((_, list)) => list.push((idx as u32, op)),
                    None => routed.push((shard, vec![(idx as u32, op)])),
                },
                Err(e) => {
                    route_error = Some(e);
                    break;
                }
            }
        }
        let count = routed.iter().map(|(_, l)| l.len()).sum();
        let t = self.tc.txs.get_mut(&id).expect("transaction exists");
        t.req_id = req_id;
        t.commit = commit;
        if let Some(e) = route_error {
            self.tc_abort(id, Some(e), out);
            return;
        }
        t.results = (0..count).map(|_| None).collect();
        t.remaining = count;
        for (shard, ops) in &routed {
            if !t.participants.contains(shard) {
                t.participants.push(*shard);
            }
            for (_, op) in ops {
                t.touched.insert((*shard, op.table, op.partition));
            }
        }
        if count == 0 {
            t.phase = Phase::Idle;
            self.tc_executed(id, out);
            return;
        }
        t.phase = Phase::Executing;
        for (shard, ops) in routed {
            self.send_peer(shard, PeerMsg::TxOps { tx: id, ops }, out);
        }
    }

    fn tc_route(&self, op: &KeyOp) -> Result<ShardAddr, DbError> {
        let table = self.table(op.table, op.table_version)?;
        if op.partition >= table.meta.def.partitions {
            return Err(DbError::bad_request(format!(
                "partition {} does not exist; table {} has {} partitions",
                op.partition,
                table.meta.def.qualified_name(),
                table.meta.def.partitions
            )));
        }
        self.router.primary_of(op.partition).ok_or_else(|| {
            DbError::new(
                ErrorCode::NodeUnavailable,
                format!("no started data node holds partition {}; retry later", op.partition),
            )
        })
    }

    pub(crate) fn tc_op_results(
        &mut self,
        from: ShardAddr,
        tx: TxId,
        results: Vec<(u32, OpResult)>,
        epoch: latsdb_types::proto::CommitEpoch,
        out: &mut Outbox,
    ) {
        let Some(t) = self.tc.txs.get_mut(&tx) else {
            return;
        };
        // Late answers (after an abort), answers from a shard that was not
        // asked, and repeated answers are ignored.
        if t.phase != Phase::Executing || !t.participants.contains(&from) {
            return;
        }
        t.epoch = t.epoch.max(epoch);
        for (idx, r) in results {
            let Some(slot) = t.results.get_mut(idx as usize) else { continue };
            if slot.is_some() {
                continue;
            }
            if let OpResult::Error(e) = &r {
                if t.error.is_none() {
                    t.error = Some(e.clone());
                }
            }
            *slot = Some(r);
            t.remaining -= 1;
        }
        if t.remaining == 0 {
            t.phase = Phase::Idle;
            self.tc_executed(tx, out);
        }
    }

    /// Every operation of the current request has its result.
    fn tc_executed(&mut self, tx: TxId, out: &mut Outbox) {
        let t = self.tc.txs.get_mut(&tx).expect("transaction exists");
        if let Some(e) = t.error.take() {
            // A request whose writes all found their keys taken changed
            // nothing but took locks: its transaction goes on, and the client
            // decides (a SQL node fails only the statement, as MySQL does).
            let only_duplicates = t.results.iter().all(|r| match r {
                Some(OpResult::Error(e)) => e.code == ErrorCode::DuplicateKey,
                Some(OpResult::Done) => false,
                _ => true,
            });
            if !only_duplicates || t.commit {
                self.tc_abort(tx, Some(e), out);
                return;
            }
        }
        if t.commit {
            if t.participants.is_empty() {
                self.tc_finish_commit(tx, out);
                return;
            }
            // The commit decision: its epoch is this shard's or a higher one a
            // participant reported.
            let epoch = t.epoch.max(self.dur.current);
            t.epoch = epoch;
            t.phase = Phase::Committing { waiting: t.participants.clone() };
            let participants = t.participants.clone();
            self.observe_epoch(epoch);
            for shard in participants {
                self.send_peer(shard, PeerMsg::TxCommit { tx, epoch }, out);
            }
            return;
        }
        let results = std::mem::take(&mut t.results).into_iter().map(|r| r.expect("result present")).collect();
        out.client.push((t.conn, t.req_id, ClientResponse::TxExec { tx, results, committed: false }));
    }

    pub(crate) fn tc_committed(&mut self, from: ShardAddr, tx: TxId, out: &mut Outbox) {
        let Some(t) = self.tc.txs.get_mut(&tx) else {
            return;
        };
        let Phase::Committing { waiting } = &mut t.phase else {
            return;
        };
        waiting.retain(|s| *s != from);
        if waiting.is_empty() {
            self.tc_finish_commit(tx, out);
        }
    }

    fn tc_finish_commit(&mut self, tx: TxId, out: &mut Outbox) {
        let t = self.tc.txs.remove(&tx).expect("transaction exists");
        let results = t.results.into_iter().map(|r| r.expect("result present")).collect();
        out.client.push((t.conn, t.req_id, ClientResponse::TxExec { tx, results, committed: true }));
    }

    /// Aborts at every participant and tells the client.
    fn tc_abort(&mut self, tx: TxId, error: Option<DbError>, out: &mut Outbox) {
        let Some(t) = self.tc.txs.remove(&tx) else {
            return;
        };
        self.tc_send_abort(tx, &t, out);
        out.client.push((t.conn, t.req_id, ClientResponse::TxAborted { tx, error }));
    }

    /// Tells every shard that may hold state of `t` to drop it: its
    /// participants and every live replica of every partition it touched.
    /// (A primary also forwards the abort to its backups; telling backups
    /// directly covers a primary that fails before it forwards.)
    fn tc_send_abort(&mut self, tx: TxId, t: &TcTx, out: &mut Outbox) {
        let mut targets: BTreeSet<ShardAddr> = t.participants.iter().copied().collect();
        for (_, _, partition) in &t.touched {
            targets.extend(self.router.replicas_of(*partition));
        }
        for target in targets {
            self.send_peer(target, PeerMsg::TxAbort { tx }, out);
        }
    }

    pub(crate) fn tc_client_abort(&mut self, conn: ConnId, req_id: u64, tx: TxId, out: &mut Outbox) {
        match self.tc.txs.get_mut(&tx) {
            Some(t) if t.conn == conn && !matches!(t.phase, Phase::Committing { .. }) => {
                if t.phase == Phase::Executing {
                    // The request still executing is answered too.
                    out.client.push((conn, t.req_id, ClientResponse::TxAborted { tx, error: None }));
                }
                t.req_id = req_id;
                self.tc_abort(tx, None, out);
            }
            Some(t) if t.conn == conn => {
                let e = DbError::bad_request("the transaction is committing and can no longer be aborted");
                out.client.push((conn, req_id, ClientResponse::Error(e)));
            }
            Some(_) => {
                let e = DbError::new(ErrorCode::UnknownTransaction, "the transaction belongs to another connection");
                out.client.push((conn, req_id, ClientResponse::Error(e)));
            }
            // Already finished or aborted: aborting again is a no-op.
            None => out.client.push((conn, req_id, ClientResponse::TxAborted { tx, error: None })),
        }
    }

    pub(crate) fn tc_disconnect(&mut self, conn: ConnId, out: &mut Outbox) {
        let mut orphans: Vec<TxId> = self
            .tc
            .txs
            .iter()
            .filter(|(_, t)| t.conn == conn && !matches!(t.phase, Phase::Committing { .. }))
            .map(|(id, _)| *id)
            .collect();
        // Hash-map order is random; the simulation needs a replayable order.
        orphans.sort_unstable();
        for tx in orphans {
            let t = self.tc.txs.remove(&tx).expect("transaction exists");
            self.tc_send_abort(tx, &t, out);
        }
    }
}

impl Shard {
    /// A new layout arrived: transactions with a participant on a node that
    /// left are finished without it. One still executing (or idle) is
    /// aborted everywhere it may have left state, with a retriable error; one
    /// already committing sends its commit to the replicas that took over the
    /// lost participant's partitions, which commit what they staged as
    /// backups. (A coordinator that fails is the takeover protocol's job.)
    pub(crate) fn tc_layout_changed(&mut self, out: &mut Outbox) {
        let layout = &self.layout;
        let alive = |a: &ShardAddr| layout.takes_writes(a.node);
        let mut affected: Vec<(TxId, Vec<ShardAddr>)> = self
            .tc
            .txs
            .iter()
            .filter_map(|(id, t)| {
                let dead: Vec<ShardAddr> = t.participants.iter().filter(|p| !alive(p)).copied().collect();
                (!dead.is_empty()).then_some((*id, dead))
            })
            .collect();
        affected.sort_unstable();
        for (tx, dead) in affected {
            let committing = matches!(self.tc.txs.get(&tx).map(|t| &t.phase), Some(Phase::Committing { .. }));
            if committing {
                self.tc_recommit(tx, &dead, out);
            } else {
                self.tc_abort_for_failure(tx, &dead, out);
            }
        }
    }

    fn tc_abort_for_failure(&mut self, tx: TxId, dead: &[ShardAddr], out: &mut Outbox) {
        let Some(t) = self.tc.txs.remove(&tx) else { return };
        self.tc_send_abort(tx, &t, out);
        let nodes: Vec<String> = dead.iter().map(|d| d.node.to_string()).collect();
        let error = DbError::new(
            ErrorCode::NodeUnavailable,
            format!("data node {} failed while the transaction ran; it was aborted, retry it", nodes.join(", ")),
        );
        out.client.push((t.conn, t.req_id, ClientResponse::TxAborted { tx, error: Some(error) }));
    }

    fn tc_recommit(&mut self, tx: TxId, dead: &[ShardAddr], out: &mut Outbox) {
        let Some(t) = self.tc.txs.get(&tx) else { return };
        let mut successors = BTreeSet::new();
        // Every live replica of what the dead participant touched: the new
        // primary and any other backup may each hold the staged rows (with
        // three or more replicas, the new primary does not pass the commit
        // on to the other backups by itself).
        for (participant, _, partition) in &t.touched {
            if dead.contains(participant) {
                successors.extend(self.router.replicas_of(*partition));
            }
        }
        let t = self.tc.txs.get_mut(&tx).expect("checked above");
        t.participants.retain(|p| !dead.contains(p));
        let Phase::Committing { waiting } = &mut t.phase else { return };
        waiting.retain(|p| !dead.contains(p));
        for s in &successors {
            if !waiting.contains(s) {
                waiting.push(*s);
            }
            if !t.participants.contains(s) {
                t.participants.push(*s);
            }
        }
        let done = waiting.is_empty();
        let epoch = t.epoch;
        for s in successors {
            self.send_peer(s, PeerMsg::TxCommit { tx, epoch }, out);
        }
        if done {
            self.tc_finish_commit(tx, out);
        }
    }
}
