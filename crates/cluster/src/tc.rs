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
//! A participant that cannot take an operation now (its partition is being
//! handed to a restarted primary, one of the two layouts lags the other, or
//! the participant has no lease, restarts or stops) hands it back
//! unexecuted (`TxOpsReturned`); a shard that only handed operations back
//! is no participant. A transaction
//! that holds nothing yet keeps such operations and sends them again on
//! every tick and layout change, routed by its layout of the moment, for as
//! long as a lock wait may last: a node restart or a partition move stays
//! invisible to its client. One that may hold a lock fails them at once,
//! as any failed operation: a handover waits for the locks on its partition
//! to go, and a transaction waiting for a handover while it holds one could
//! be what that handover, or another one, waits for.
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

use crate::context::{ConnId, Context, FastMap, Micros};
use crate::shard::Outbox;
use latsdb_types::proto::{ClientResponse, CommitEpoch, KeyOp, OpResult, PeerMsg, ShardAddr, TxId};
use latsdb_types::schema::TableId;
use latsdb_types::{DbError, ErrorCode};
use std::collections::{BTreeSet, VecDeque};

/// How often, at most, open transactions are checked for inactivity.
const INACTIVITY_CHECK_US: Micros = 100_000;
/// Transactions aborted for inactivity remembered, so that their client's
/// next request learns why rather than that the transaction is unknown.
const EXPIRED_KEPT: usize = 1024;

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
    /// When the request `req_id` arrived (for the request latency).
    req_started: Micros,
    /// When the transaction last answered its client and began waiting
    /// for its next request (`expire_inactive`).
    idle_since: Micros,
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
    epoch: CommitEpoch,
    /// Operations of the current request a participant handed back
    /// unexecuted, by index, to send again; with why they were handed back
    /// (their result if they cannot be placed by `retry_until`).
    returned: Vec<(u32, KeyOp)>,
    returned_error: Option<DbError>,
    /// Set when the current request has its first operation handed back:
    /// a request is never resent for longer than a lock wait may last.
    retry_until: Option<Micros>,
    /// A participant answered an operation of the transaction (even a
    /// `DuplicateKey` keeps its row lock): it may hold a lock.
    may_hold_locks: bool,
    /// Operations of the current request sent to each shard and neither
    /// answered nor handed back yet.
    in_flight: Vec<(ShardAddr, u32)>,
    /// Shards that answered an operation of the transaction: participants
    /// that may hold its state. A shard that only handed operations back
    /// holds none and stops being a participant (it may not even listen to
    /// this coordinator's commit).
    answered_by: Vec<ShardAddr>,
}

impl TcTx {
    fn new(conn: ConnId, req_id: u64, commit: bool, now: Micros) -> TcTx {
        TcTx {
            conn,
            req_id,
            req_started: now,
            idle_since: now,
            results: Vec::new(),
            remaining: 0,
            participants: Vec::new(),
            touched: BTreeSet::new(),
            commit,
            phase: Phase::Idle,
            error: None,
            epoch: CommitEpoch::NONE,
            returned: Vec::new(),
            returned_error: None,
            retry_until: None,
            may_hold_locks: false,
            in_flight: Vec::new(),
            answered_by: Vec::new(),
        }
    }

    /// Operations of the current request go to `shard`.
    fn sent_to(&mut self, shard: ShardAddr, ops: &[(u32, KeyOp)]) {
        if !self.participants.contains(&shard) {
            self.participants.push(shard);
        }
        for (_, op) in ops {
            self.touched.insert((shard, op.table, op.partition));
        }
        let n = ops.len() as u32;
        match self.in_flight.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, count)) => *count += n,
            None => self.in_flight.push((shard, n)),
        }
    }

    /// `shard` answered or handed back one operation.
    fn came_back(&mut self, shard: ShardAddr) {
        let entry = self.in_flight.iter_mut().find(|(s, _)| *s == shard);
        let Some((_, count)) = entry else {
            debug_assert!(false, "an operation came back from {shard}, which was sent none");
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.in_flight.retain(|(s, _)| *s != shard);
        }
    }

    /// An operation of the current request fails with `error` without
    /// having reached a participant.
    fn fail(&mut self, idx: u32, error: DbError) {
        let slot = &mut self.results[idx as usize];
        debug_assert!(slot.is_none(), "operation {idx} failed after its result came");
        *slot = Some(OpResult::Error(error.clone()));
        self.remaining -= 1;
        self.error.get_or_insert(error);
    }

    /// The transaction's invariants, whatever its phase.
    fn check(&self, id: TxId, commit_epoch: CommitEpoch) {
        let unanswered = self.results.iter().filter(|r| r.is_none()).count();
        assert!(self.epoch <= commit_epoch, "tx {id:?}: epoch {} above the shard's {commit_epoch}", self.epoch);
        let distinct: BTreeSet<&ShardAddr> = self.participants.iter().collect();
        assert_eq!(distinct.len(), self.participants.len(), "tx {id:?}: a participant listed twice");
        let in_flight: u32 = self.in_flight.iter().map(|(_, n)| n).sum();
        assert_eq!(
            in_flight as usize + self.returned.len(),
            self.remaining,
            "tx {id:?}: unanswered operations are neither in flight nor handed back"
        );
        assert!(
            self.in_flight.iter().all(|(s, n)| *n > 0 && self.participants.contains(s)),
            "tx {id:?}: operations in flight to a shard that is not a participant"
        );
        assert_eq!(
            self.returned.is_empty(),
            self.returned_error.is_none(),
            "tx {id:?}: returned operations without why"
        );
        assert!(
            self.returned.is_empty() || self.phase == Phase::Executing,
            "tx {id:?}: operations waiting to be sent again while {:?}",
            self.phase
        );
        assert!(
            self.returned.iter().all(|(idx, _)| self.results.get(*idx as usize).is_some_and(Option::is_none)),
            "tx {id:?}: a returned operation already has its result"
        );
        match &self.phase {
            Phase::Executing => {
                assert!(self.remaining > 0, "tx {id:?}: executing with no operation outstanding");
                assert_eq!(self.remaining, unanswered, "tx {id:?}: outstanding count differs from unanswered slots");
            }
            Phase::Idle => assert_eq!(self.remaining, 0, "tx {id:?}: idle with operations outstanding"),
            Phase::Committing { waiting } => {
                assert!(self.commit, "tx {id:?}: committing without a commit request");
                assert!(!waiting.is_empty(), "tx {id:?}: committing and waiting for nobody");
                assert!(
                    unanswered == 0 && self.error.is_none(),
                    "tx {id:?}: committing with a failed or missing result"
                );
                assert!(
                    waiting.iter().all(|w| self.participants.contains(w)),
                    "tx {id:?}: waiting for a commit from a shard that is not a participant"
                );
            }
        }
    }
}

/// The transaction coordinator block: the transactions this shard
/// coordinates, by id.
#[derive(Default)]
pub(crate) struct Coordinator {
    txs: FastMap<TxId, TcTx>,
    next_seq: u64,
    /// Transactions with operations handed back, to send again (ordered,
    /// so the simulation replays).
    with_returned: BTreeSet<TxId>,
    /// Transactions this shard coordinated that committed, and that
    /// aborted by cause (for reports).
    pub(crate) committed: u64,
    pub(crate) aborts: latsdb_types::work::AbortCounts,
    /// From a transaction request's arrival to its answer (for reports).
    pub(crate) request_latency: latsdb_types::work::LatencyCounts,
    /// Transactions aborted for inactivity, newest last, with how long
    /// they had waited (at most `EXPIRED_KEPT`).
    expired: VecDeque<(TxId, Micros)>,
    /// No inactivity check before this time.
    next_inactivity_check: Micros,
}

impl Coordinator {
    pub(crate) fn starting_at(first_seq: u64) -> Coordinator {
        Coordinator {
            txs: FastMap::default(),
            next_seq: first_seq,
            with_returned: BTreeSet::new(),
            committed: 0,
            aborts: Default::default(),
            request_latency: Default::default(),
            expired: VecDeque::new(),
            next_inactivity_check: 0,
        }
    }

    /// How a transaction this shard coordinates stands, for a log line
    /// that explains a wait (None: not open here).
    pub(crate) fn describe(&self, tx: &TxId) -> Option<String> {
        let t = self.txs.get(tx)?;
        Some(format!(
            "coordinator: {:?}, client connection {:?} request {}, participants {:?}, in flight {:?}, {} handed back, {} of {} results missing",
            t.phase,
            t.conn,
            t.req_id,
            t.participants,
            t.in_flight,
            t.returned.len(),
            t.remaining,
            t.results.len()
        ))
    }

    pub(crate) fn open(&self) -> usize {
        self.txs.len()
    }

    /// Whether no transaction decided in an epoch below `epoch` is still
    /// waiting for a participant's `TxCommitted`.
    pub(crate) fn all_committed_below(&self, epoch: CommitEpoch) -> bool {
        !self.txs.values().any(|t| matches!(t.phase, Phase::Committing { .. }) && t.epoch < epoch)
    }

    /// Checks every open transaction's invariants (run by the simulator
    /// after every step).
    pub(crate) fn check(&self, cx: &Context) {
        for (id, t) in &self.txs {
            assert_eq!(id.tc, cx.me(), "shard {} coordinates transaction {id:?} of another shard", cx.me());
            assert!(id.seq <= self.next_seq, "transaction {id:?} numbered beyond {}", self.next_seq);
            t.check(*id, cx.commit_epoch);
            assert_eq!(
                self.with_returned.contains(id),
                !t.returned.is_empty(),
                "transaction {id:?}: its returned operations are not tracked"
            );
        }
        assert!(
            self.with_returned.iter().all(|id| self.txs.contains_key(id)),
            "a finished transaction still has operations to send again"
        );
    }

    /// A client's `TxExec`: opens the transaction if `tx` is None, routes
    /// the operations to their primaries and, with `commit`, commits once
    /// they all succeeded.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn exec(
        &mut self,
        cx: &mut Context,
        out: &mut Outbox,
        conn: ConnId,
        req_id: u64,
        tx: Option<TxId>,
        ops: Vec<KeyOp>,
        commit: bool,
    ) {
        let Some(id) = self.open_for(cx, out, conn, req_id, tx, commit) else { return };
        // Route every operation before sending any, so a bad one aborts cleanly.
        let mut routed: Vec<(ShardAddr, Vec<(u32, KeyOp)>)> = Vec::new();
        let mut route_error = None;
        for (idx, op) in ops.into_iter().enumerate() {
            match route(cx, &op) {
                Ok(shard) => add_routed(&mut routed, shard, idx as u32, op),
                Err(e) => {
                    route_error = Some(e);
                    break;
                }
            }
        }
        let count = routed.iter().map(|(_, l)| l.len()).sum();
        let t = self.txs.get_mut(&id).expect("transaction exists");
        debug_assert_eq!(t.phase, Phase::Idle, "a request ran on a transaction that was not idle");
        t.req_id = req_id;
        t.req_started = cx.now;
        t.commit = commit;
        t.retry_until = None;
        if let Some(e) = route_error {
            self.abort(cx, out, id, Some(e));
            return;
        }
        t.results = (0..count).map(|_| None).collect();
        t.remaining = count;
        debug_assert!(t.in_flight.is_empty(), "a request began with operations of the last one in flight");
        for (shard, ops) in &routed {
            t.sent_to(*shard, ops);
        }
        if count == 0 {
            self.executed(cx, out, id);
            return;
        }
        t.phase = Phase::Executing;
        for (shard, ops) in routed {
            cx.send_peer(shard, PeerMsg::TxOps { tx: id, ops }, out);
        }
    }

    /// The transaction a request runs in: a new one, or the client's open
    /// and idle one. Answers the client with the error and says None when
    /// there is none.
    fn open_for(
        &mut self,
        cx: &Context,
        out: &mut Outbox,
        conn: ConnId,
        req_id: u64,
        tx: Option<TxId>,
        commit: bool,
    ) -> Option<TxId> {
        let Some(id) = tx else {
            self.next_seq += 1;
            let id = TxId { tc: cx.me(), seq: self.next_seq };
            let fresh = self.txs.insert(id, TcTx::new(conn, req_id, commit, cx.now)).is_none();
            debug_assert!(fresh, "transaction number {} reused", self.next_seq);
            return Some(id);
        };
        let error = match self.txs.get(&id) {
            Some(t) if t.conn == conn && t.phase == Phase::Idle => return Some(id),
            Some(t) if t.conn == conn => {
                DbError::bad_request("the transaction is still executing a previous request; wait for its answer")
            }
            _ => match self.expired.iter().find(|(expired, _)| *expired == id) {
                Some((_, idle)) => DbError::new(
                    ErrorCode::TransactionAborted,
                    format!(
                        "transaction {}:{} was aborted after {} ms without a request from its client (cluster.transaction_inactive_timeout_ms); run it again",
                        id.tc,
                        id.seq,
                        idle / 1000
                    ),
                ),
                None => DbError::new(
                    ErrorCode::UnknownTransaction,
                    format!(
                        "transaction {}:{} is not open at this coordinator (it finished or was aborted)",
                        id.tc, id.seq
                    ),
                ),
            },
        };
        out.client.push((conn, req_id, ClientResponse::Error(error)));
        None
    }

    /// A participant's results for operations of `tx` (its `TxOpResults`).
    pub(crate) fn on_op_results(
        &mut self,
        cx: &mut Context,
        out: &mut Outbox,
        from: ShardAddr,
        tx: TxId,
        results: Vec<(u32, OpResult)>,
        epoch: CommitEpoch,
    ) {
        let Some(t) = self.txs.get_mut(&tx) else {
            // A transaction this coordinator does not have: it finished
            // (every participant hears its end anyway), or it was begun by
            // this shard's previous process, whose operations reached the
            // participant late (held back by a network fault) and were
            // executed there after the takeover had ended. Nothing would
            // ever end it: the participant is told to abort (an abort is
            // idempotent, and it passes it on to the backups it staged on).
            cx.send_peer(from, PeerMsg::TxAbort { tx }, out);
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
            t.may_hold_locks = true;
            t.came_back(from);
            if !t.answered_by.contains(&from) {
                t.answered_by.push(from);
            }
        }
        if t.remaining == 0 {
            t.phase = Phase::Idle;
            self.executed(cx, out, tx);
        } else if !t.returned.is_empty() && t.remaining == t.returned.len() {
            // Only operations handed back are left: whether they may wait
            // is known now.
            self.send_again(cx, out, tx, None);
        }
    }

    /// A participant handed operations of `tx` back unexecuted
    /// (`TxOpsReturned`): they are kept to be sent again. One that goes
    /// to another shard in this layout already is sent at once, once the
    /// rest of the request is answered.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_ops_returned(
        &mut self,
        cx: &mut Context,
        out: &mut Outbox,
        from: ShardAddr,
        tx: TxId,
        ops: Vec<(u32, KeyOp)>,
        error: DbError,
    ) {
        let Some(t) = self.txs.get_mut(&tx) else { return };
        if t.phase != Phase::Executing || !t.participants.contains(&from) {
            return;
        }
        let before = t.returned.len();
        for (idx, op) in ops {
            let unanswered = t.results.get(idx as usize).is_some_and(Option::is_none);
            if unanswered && !t.returned.iter().any(|(i, _)| *i == idx) {
                t.returned.push((idx, op));
                t.came_back(from);
            }
        }
        if t.returned.len() == before {
            return;
        }
        if !t.answered_by.contains(&from) && !t.in_flight.iter().any(|(s, _)| *s == from) {
            t.participants.retain(|s| *s != from);
        }
        t.retry_until.get_or_insert(cx.now + cx.cfg.lock_wait_timeout_us);
        t.returned_error = Some(error);
        self.with_returned.insert(tx);
        self.send_again(cx, out, tx, Some(from));
    }

    /// Sends the returned operations of every transaction again (each
    /// tick and layout change), routed by the layout of the moment.
    pub(crate) fn send_returned_again(&mut self, cx: &mut Context, out: &mut Outbox) {
        if self.with_returned.is_empty() {
            return;
        }
        let txs: Vec<TxId> = self.with_returned.iter().copied().collect();
        for tx in txs {
            self.send_again(cx, out, tx, None);
        }
    }

    /// Sends the returned operations of `tx` to their primaries, except
    /// those that would go to `not_to` (which just handed them back). It
    /// waits while other operations of the request are unanswered. They
    /// fail with the error they were handed back with once `retry_until`
    /// has passed, when the transaction may hold a lock, or when another
    /// operation failed; the request then finishes as any failed one does.
    fn send_again(&mut self, cx: &mut Context, out: &mut Outbox, tx: TxId, not_to: Option<ShardAddr>) {
        let Some(t) = self.txs.get_mut(&tx) else { return };
        debug_assert!(t.phase == Phase::Executing && !t.returned.is_empty(), "tx {tx:?}: nothing to send again");
        let timed_out = t.retry_until.is_some_and(|until| cx.now >= until);
        if t.remaining > t.returned.len() && !timed_out {
            return;
        }
        let expired = timed_out || t.may_hold_locks || t.error.is_some();
        let why = t.returned_error.take().expect("returned operations have their error");
        let mut routed: Vec<(ShardAddr, Vec<(u32, KeyOp)>)> = Vec::new();
        for (idx, op) in std::mem::take(&mut t.returned) {
            match route(cx, &op) {
                Ok(shard) if Some(shard) != not_to && !expired => add_routed(&mut routed, shard, idx, op),
                // No primary now, or the same one: the next tick or layout
                // change tries again.
                Ok(_) | Err(DbError { code: ErrorCode::NodeUnavailable, .. }) if !expired => t.returned.push((idx, op)),
                Ok(_) | Err(DbError { code: ErrorCode::NodeUnavailable, .. }) => t.fail(idx, why.clone()),
                Err(e) => t.fail(idx, e),
            }
        }
        for (shard, ops) in &routed {
            t.sent_to(*shard, ops);
        }
        if t.returned.is_empty() {
            self.with_returned.remove(&tx);
        } else {
            t.returned_error = Some(why);
        }
        let answered = t.remaining == 0;
        for (shard, ops) in routed {
            cx.send_peer(shard, PeerMsg::TxOps { tx, ops }, out);
        }
        if answered {
            t.phase = Phase::Idle;
            self.executed(cx, out, tx);
        }
    }

    /// Every operation of the current request has its result.
    fn executed(&mut self, cx: &mut Context, out: &mut Outbox, tx: TxId) {
        let t = self.txs.get_mut(&tx).expect("transaction exists");
        debug_assert!(t.remaining == 0 && t.results.iter().all(Option::is_some), "executed with results missing");
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
                self.abort(cx, out, tx, Some(e));
                return;
            }
        }
        if t.commit {
            if t.participants.is_empty() {
                self.finish_commit(out, tx, cx.now);
                return;
            }
            // The commit decision: its epoch is this shard's or a higher one a
            // participant reported.
            let epoch = t.epoch.max(cx.commit_epoch);
            t.epoch = epoch;
            t.phase = Phase::Committing { waiting: t.participants.clone() };
            let participants = t.participants.clone();
            cx.observe_epoch(epoch);
            for shard in participants {
                cx.send_peer(shard, PeerMsg::TxCommit { tx, epoch }, out);
            }
            return;
        }
        let results = std::mem::take(&mut t.results).into_iter().map(|r| r.expect("result present")).collect();
        self.request_latency.record(cx.now.saturating_sub(t.req_started));
        t.idle_since = cx.now;
        out.client.push((
            t.conn,
            t.req_id,
            ClientResponse::TxExec { tx, results, committed: false, epoch: CommitEpoch::NONE },
        ));
    }

    /// A participant applied the commit of `tx` on every replica.
    pub(crate) fn on_committed(&mut self, out: &mut Outbox, from: ShardAddr, tx: TxId, now: Micros) {
        let Some(t) = self.txs.get_mut(&tx) else {
            return;
        };
        let Phase::Committing { waiting } = &mut t.phase else {
            return;
        };
        waiting.retain(|s| *s != from);
        if waiting.is_empty() {
            self.finish_commit(out, tx, now);
        }
    }

    fn finish_commit(&mut self, out: &mut Outbox, tx: TxId, now: Micros) {
        let t = self.txs.remove(&tx).expect("transaction exists");
        debug_assert!(t.commit && t.error.is_none(), "a transaction finished committing without a commit decision");
        self.committed += 1;
        self.request_latency.record(now.saturating_sub(t.req_started));
        let results = t.results.into_iter().map(|r| r.expect("result present")).collect();
        // A transaction that wrote nothing has no participant and no epoch.
        debug_assert!(t.epoch > CommitEpoch::NONE || t.participants.is_empty(), "a commit without its epoch");
        let epoch = t.epoch;
        out.client.push((t.conn, t.req_id, ClientResponse::TxExec { tx, results, committed: true, epoch }));
    }

    /// Aborts at every participant and tells the client.
    fn abort(&mut self, cx: &mut Context, out: &mut Outbox, tx: TxId, error: Option<DbError>) {
        let Some(t) = self.txs.remove(&tx) else {
            return;
        };
        self.with_returned.remove(&tx);
        debug_assert!(!matches!(t.phase, Phase::Committing { .. }), "a committing transaction was aborted");
        self.aborts.add(latsdb_types::work::AbortCause::of(error.as_ref()));
        // An abort the client asked for answers its TxAbort, which is no
        // transaction request of its own (`on_client_abort` timed the
        // request it cut short).
        if error.is_some() {
            self.request_latency.record(cx.now.saturating_sub(t.req_started));
        }
        send_abort(cx, out, tx, &t);
        out.client.push((t.conn, t.req_id, ClientResponse::TxAborted { tx, error }));
    }

    /// A client's `TxAbort`.
    pub(crate) fn on_client_abort(&mut self, cx: &mut Context, out: &mut Outbox, conn: ConnId, req_id: u64, tx: TxId) {
        match self.txs.get_mut(&tx) {
            Some(t) if t.conn == conn && !matches!(t.phase, Phase::Committing { .. }) => {
                if t.phase == Phase::Executing {
                    // The request still executing is answered too.
                    self.request_latency.record(cx.now.saturating_sub(t.req_started));
                    out.client.push((conn, t.req_id, ClientResponse::TxAborted { tx, error: None }));
                }
                t.req_id = req_id;
                self.abort(cx, out, tx, None);
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

    /// Aborts every transaction that has waited
    /// `transaction_inactive_timeout_ms` for its client's next request
    /// (checked every 100 ms at most), as NDB's TransactionInactiveTimeout
    /// does: its locks and staged writes go at the participants, so an
    /// idle client holds back neither other writers nor a node restart's
    /// copy. Its client learns of it at its next request.
    pub(crate) fn expire_inactive(&mut self, cx: &mut Context, out: &mut Outbox) {
        let timeout = cx.layout.transaction_inactive_timeout_ms.saturating_mul(1000);
        if timeout == 0 || cx.now < self.next_inactivity_check {
            return;
        }
        self.next_inactivity_check = cx.now + INACTIVITY_CHECK_US.min(timeout);
        let now = cx.now;
        let mut idle: Vec<TxId> = self
            .txs
            .iter()
            .filter(|(_, t)| t.phase == Phase::Idle && now.saturating_sub(t.idle_since) >= timeout)
            .map(|(id, _)| *id)
            .collect();
        // Hash-map order is random; the simulation needs a replayable order.
        idle.sort_unstable();
        for tx in idle {
            let t = self.txs.remove(&tx).expect("transaction exists");
            debug_assert!(t.in_flight.is_empty() && t.returned.is_empty(), "an idle transaction had operations out");
            self.with_returned.remove(&tx);
            self.aborts.add(latsdb_types::work::AbortCause::Inactive);
            send_abort(cx, out, tx, &t);
            if self.expired.len() == EXPIRED_KEPT {
                self.expired.pop_front();
            }
            self.expired.push_back((tx, now.saturating_sub(t.idle_since)));
        }
        debug_assert!(self.expired.len() <= EXPIRED_KEPT, "more expired transactions kept than promised");
    }

    /// A client connection closed: its transactions that are not
    /// committing are aborted.
    pub(crate) fn on_disconnect(&mut self, cx: &mut Context, out: &mut Outbox, conn: ConnId) {
        let mut orphans: Vec<TxId> = self
            .txs
            .iter()
            .filter(|(_, t)| t.conn == conn && !matches!(t.phase, Phase::Committing { .. }))
            .map(|(id, _)| *id)
            .collect();
        // Hash-map order is random; the simulation needs a replayable order.
        orphans.sort_unstable();
        for tx in orphans {
            let t = self.txs.remove(&tx).expect("transaction exists");
            self.with_returned.remove(&tx);
            self.aborts.add(latsdb_types::work::AbortCause::Disconnect);
            send_abort(cx, out, tx, &t);
        }
        debug_assert!(
            self.txs.values().all(|t| t.conn != conn || matches!(t.phase, Phase::Committing { .. })),
            "a transaction of a closed connection stayed open"
        );
    }

    /// A new layout arrived: transactions with a participant on a node that
    /// left are finished without it. One still executing (or idle) is
    /// aborted everywhere it may have left state, with a retriable error; one
    /// already committing sends its commit to the replicas that took over the
    /// lost participant's partitions, which commit what they staged as
    /// backups. (A coordinator that fails is the takeover protocol's job.)
    pub(crate) fn on_layout_changed(&mut self, cx: &mut Context, out: &mut Outbox) {
        let layout = &cx.layout;
        let alive = |a: &ShardAddr| layout.takes_writes(a.node);
        let mut affected: Vec<(TxId, Vec<ShardAddr>)> = self
            .txs
            .iter()
            .filter_map(|(id, t)| {
                let dead: Vec<ShardAddr> = t.participants.iter().filter(|p| !alive(p)).copied().collect();
                (!dead.is_empty()).then_some((*id, dead))
            })
            .collect();
        affected.sort_unstable();
        for (tx, dead) in affected {
            let committing = matches!(self.txs.get(&tx).map(|t| &t.phase), Some(Phase::Committing { .. }));
            if committing {
                self.recommit(cx, out, tx, &dead);
            } else {
                self.abort_for_failure(cx, out, tx, &dead);
            }
        }
        self.send_returned_again(cx, out);
    }

    fn abort_for_failure(&mut self, cx: &mut Context, out: &mut Outbox, tx: TxId, dead: &[ShardAddr]) {
        let Some(t) = self.txs.remove(&tx) else { return };
        self.with_returned.remove(&tx);
        self.aborts.add(latsdb_types::work::AbortCause::NodeFailure);
        // An idle transaction's last request was answered (and timed)
        // already; this answer waits for its next one.
        if t.phase == Phase::Executing {
            self.request_latency.record(cx.now.saturating_sub(t.req_started));
        }
        send_abort(cx, out, tx, &t);
        let nodes: Vec<String> = dead.iter().map(|d| d.node.to_string()).collect();
        let error = DbError::new(
            ErrorCode::NodeUnavailable,
            format!("data node {} failed while the transaction ran; it was aborted, retry it", nodes.join(", ")),
        );
        out.client.push((t.conn, t.req_id, ClientResponse::TxAborted { tx, error: Some(error) }));
    }

    fn recommit(&mut self, cx: &mut Context, out: &mut Outbox, tx: TxId, dead: &[ShardAddr]) {
        let Some(t) = self.txs.get_mut(&tx) else { return };
        let mut successors = BTreeSet::new();
        // Every live replica of what the dead participant touched: the new
        // primary and any other backup may each hold the staged rows (with
        // three or more replicas, the new primary does not pass the commit
        // on to the other backups by itself).
        for (participant, _, partition) in &t.touched {
            if dead.contains(participant) {
                successors.extend(cx.router.replicas_of(*partition));
            }
        }
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
            cx.send_peer(s, PeerMsg::TxCommit { tx, epoch }, out);
        }
        if done {
            self.finish_commit(out, tx, cx.now);
        }
    }
}

/// Adds an operation to the list of those going to `shard`.
fn add_routed(routed: &mut Vec<(ShardAddr, Vec<(u32, KeyOp)>)>, shard: ShardAddr, idx: u32, op: KeyOp) {
    match routed.iter_mut().find(|(s, _)| *s == shard) {
        Some((_, list)) => list.push((idx, op)),
        None => routed.push((shard, vec![(idx, op)])),
    }
}

/// The primary of the operation's partition.
fn route(cx: &Context, op: &KeyOp) -> Result<ShardAddr, DbError> {
    let table = cx.table(op.table, op.table_version)?;
    if op.partition >= table.meta.def.partitions {
        return Err(DbError::bad_request(format!(
            "partition {} does not exist; table {} has {} partitions",
            op.partition,
            table.meta.def.qualified_name(),
            table.meta.def.partitions
        )));
    }
    cx.router.primary_of(op.partition).ok_or_else(|| {
        DbError::new(
            ErrorCode::NodeUnavailable,
            format!("no started data node holds partition {}; retry later", op.partition),
        )
    })
}

/// Tells every shard that may hold state of `t` to drop it: its
/// participants and every live replica of every partition it touched.
/// (A primary also forwards the abort to its backups; telling backups
/// directly covers a primary that fails before it forwards.)
fn send_abort(cx: &mut Context, out: &mut Outbox, tx: TxId, t: &TcTx) {
    let mut targets: BTreeSet<ShardAddr> = t.participants.iter().copied().collect();
    for (_, _, partition) in &t.touched {
        targets.extend(cx.router.replicas_of(*partition));
    }
    for target in targets {
        cx.send_peer(target, PeerMsg::TxAbort { tx }, out);
    }
}
