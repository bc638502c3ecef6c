//! Multi-operation transactions, coordinated by a data-node shard.

use crate::ops::{outcome, Op, Outcome, STALE_LAYOUT_RETRIES};
use crate::Client;
use latsdb_types::proto::{ClientRequest, ClientResponse, CommitEpoch, ShardAddr, TxId};
use latsdb_types::{DbError, ErrorCode, Result};

/// A transaction. Operations run under row locks (writes and locking reads)
/// and stay invisible to others until `commit`. An operation that fails
/// aborts the whole transaction, except inserts that find their key taken
/// in an `execute` whose other writes did nothing: the call returns the
/// `DuplicateKey` error and the transaction stays open (`is_finished` tells).
/// Dropping an unfinished transaction aborts it.
pub struct Transaction {
    client: Client,
    tc: Option<ShardAddr>,
    id: Option<TxId>,
    finished: bool,
    /// The coordinator answered that the transaction committed.
    committed: bool,
    /// A commit was asked for and no answer came (the coordinator's node
    /// failed or the connection broke): it may have committed or not.
    outcome_unknown: bool,
    /// The epoch the commit belongs to, once committed.
    epoch: Option<CommitEpoch>,
}

impl Transaction {
    pub(crate) fn new(client: Client) -> Transaction {
        Transaction {
            client,
            tc: None,
            id: None,
            finished: false,
            committed: false,
            outcome_unknown: false,
            epoch: None,
        }
    }

    pub fn id(&self) -> Option<TxId> {
        self.id
    }

    /// Whether the transaction has committed or aborted (an operation that
    /// failed in the cluster aborts it).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Executes operations and keeps the transaction open.
    pub async fn execute(&mut self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        self.exec(ops, false).await
    }

    /// Executes operations and commits.
    pub async fn execute_commit(mut self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        self.exec(ops, true).await
    }

    /// Executes operations and commits in the same request, for a caller
    /// that holds the transaction by reference (one round trip where
    /// `execute` and `commit` take two). `is_committed` tells afterwards;
    /// `commit` of a committed transaction does nothing.
    pub async fn execute_and_commit(&mut self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        self.exec(ops, true).await
    }

    /// Whether the coordinator answered that the transaction committed.
    pub fn is_committed(&self) -> bool {
        self.committed
    }

    /// The epoch the transaction committed in (NDB's global checkpoint
    /// index), once it committed: every commit of epochs up to a durable
    /// epoch survives a crash of the whole cluster, and a backup at epoch
    /// E holds exactly the commits of epochs up to E. None until the
    /// coordinator answered the commit.
    pub fn commit_epoch(&self) -> Option<CommitEpoch> {
        self.epoch
    }

    /// Whether a commit was asked for and left unanswered (the coordinator
    /// failed or was unreachable): the transaction may have committed. When
    /// false, a finished transaction that did not commit was aborted
    /// everywhere (a takeover aborts what its coordinator had not decided
    /// to commit), so running it again applies it once.
    pub fn outcome_unknown(&self) -> bool {
        self.outcome_unknown
    }

    pub async fn commit(mut self) -> Result<()> {
        self.commit_keeping().await
    }

    /// `commit` for a caller that holds the transaction by reference, to
    /// ask `outcome_unknown` when it fails.
    pub async fn commit_keeping(&mut self) -> Result<()> {
        if self.committed {
            return Ok(());
        }
        if self.id.is_none() {
            self.finished = true;
            return Ok(());
        }
        self.exec(Vec::new(), true).await.map(|_| ())
    }

    pub async fn rollback(mut self) -> Result<()> {
        self.finished = true;
        let (Some(tc), Some(tx)) = (self.tc, self.id) else {
            return Ok(());
        };
        match self.client.call(tc, &ClientRequest::TxAbort { tx }).await? {
            ClientResponse::TxAborted { .. } => Ok(()),
            ClientResponse::Error(e) => Err(e),
            other => Err(DbError::internal(format!("abort was answered with {other:?}"))),
        }
    }

    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    async fn exec(&mut self, ops: Vec<Op>, commit: bool) -> Result<Vec<Outcome>> {
        if ops.iter().any(|op| op.guarded.is_some()) {
            return self.exec_guarded(ops, commit).await;
        }
        self.exec_plain(ops, commit).await
    }

    /// Sends operations as they are (writes of tables with unique indexes
    /// must come with their entries, see `unique.rs`).
    ///
    /// A transaction's first request that the cluster refused or aborted
    /// because of its own change (a node failed or restarts, a partition
    /// moves: `nothing_done`) left nothing behind, so it runs again as a new
    /// transaction, routed by a fresh layout, up to `STALE_LAYOUT_RETRIES`
    /// times: the application sees no error for what the cluster does to
    /// itself. A later request cannot be run again this way: what the
    /// transaction read before may have changed.
    pub(crate) async fn exec_plain(&mut self, ops: Vec<Op>, commit: bool) -> Result<Vec<Outcome>> {
        if self.finished {
            return Err(DbError::new(
                ErrorCode::UnknownTransaction,
                "the transaction has already committed or aborted",
            ));
        }
        let first_partition = match ops.first() {
            Some(op) => op.op.partition,
            None if self.tc.is_none() => {
                return Err(DbError::bad_request("a transaction's first request needs at least one operation"))
            }
            None => 0,
        };
        let layouts: Vec<_> = ops.iter().map(|o| o.layout.clone()).collect();
        let request = ClientRequest::TxExec { tx: self.id, ops: ops.into_iter().map(|o| o.op).collect(), commit };
        let fresh = self.id.is_none();
        let mut attempt = 0;
        loop {
            // Start at the shard that holds the first key (its operation is
            // then local), or at its replica in the client's domain.
            let tc = match self.tc {
                Some(tc) => tc,
                None => *self.tc.insert(self.client.coordinator_for(first_partition)?),
            };
            // A request that could not be sent (no connection to the
            // coordinator) did nothing; one sent and left unanswered may have.
            let (answer, sent) = match self.client.start(tc, &request).await {
                Ok(rx) => (self.client.finish(rx).await, true),
                Err(e) => (Err(e), false),
            };
            let undone = match &answer {
                Ok(ClientResponse::TxAborted { error: Some(e), .. }) | Ok(ClientResponse::Error(e)) => nothing_done(e),
                Err(e) => !sent && nothing_done(e),
                Ok(_) => false,
            };
            // (If the layout cannot be read again, the request's own error
            // says more than the refresh's.)
            if fresh && undone && attempt < STALE_LAYOUT_RETRIES {
                debug_assert!(self.id.is_none() && !self.committed, "a transaction that began is run again");
                self.tc = None;
                if self.client.after_stale_layout(attempt, true).await.is_ok() {
                    attempt += 1;
                    continue;
                }
            }
            return self.answered(answer, sent, commit, tc, layouts).await;
        }
    }

    /// The transaction's state and the request's outcomes from the
    /// coordinator's answer (or the failure to get one).
    async fn answered(
        &mut self,
        answer: Result<ClientResponse>,
        sent: bool,
        commit: bool,
        tc: ShardAddr,
        layouts: Vec<std::sync::Arc<latsdb_types::row::RowLayout>>,
    ) -> Result<Vec<Outcome>> {
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                // The coordinator is unreachable: its node may have failed. The
                // outcome is unknown if a commit was sent; either way the
                // next transaction should route by a fresh layout. If the
                // coordinator lives after all (the request was not sent, or
                // its answer is late), the transaction must not stay open
                // there holding its locks: it is asked to abort (a commit
                // under way can no longer be, and says so).
                self.abort_in_background();
                self.finished = true;
                self.outcome_unknown = commit && sent;
                debug_assert!(!self.committed, "a committed transaction sends nothing more");
                if e.code == ErrorCode::NodeUnavailable {
                    let _ = self.client.refresh_layout().await;
                }
                return Err(e);
            }
        };
        match answer {
            ClientResponse::TxExec { tx, results, committed, epoch } => {
                self.id = Some(tx);
                self.finished = committed;
                self.committed = committed;
                if committed {
                    self.epoch = Some(epoch);
                }
                debug_assert!(!self.outcome_unknown, "an answered transaction has a known outcome");
                if committed && self.client.inner.opts.wait_durable {
                    self.client.await_durable(tc).await?;
                }
                if results.len() != layouts.len() {
                    return Err(DbError::internal(format!(
                        "{} results for {} operations",
                        results.len(),
                        layouts.len()
                    )));
                }
                results.into_iter().zip(layouts).map(|(r, l)| outcome(r, l)).collect()
            }
            ClientResponse::TxAborted { error, .. } => {
                self.finished = true;
                if error.as_ref().is_some_and(|e| e.code == ErrorCode::NodeUnavailable) {
                    let _ = self.client.refresh_layout().await;
                }
                Err(error.unwrap_or_else(|| DbError::new(ErrorCode::TransactionAborted, "the transaction was aborted")))
            }
            ClientResponse::Error(e) => Err(e),
            other => Err(DbError::internal(format!("a transaction request was answered with {other:?}"))),
        }
    }
}

/// Whether a refusal or an abort with this error left nothing of the
/// transaction behind, because the cluster was changing: a node failed or
/// is restarting, or a partition moved or is being handed over. (A lock
/// wait timeout also undoes the transaction, but it is the application's
/// contention, and the application decides.)
fn nothing_done(e: &DbError) -> bool {
    matches!(e.code, ErrorCode::NotServing | ErrorCode::NodeUnavailable | ErrorCode::WrongShard)
}

impl Transaction {
    /// Asks the coordinator to abort the transaction, without waiting.
    fn abort_in_background(&self) {
        let (Some(tc), Some(tx)) = (self.tc, self.id) else {
            return;
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            handle.spawn(async move {
                let _ = client.call(tc, &ClientRequest::TxAbort { tx }).await;
            });
        }
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.finished {
            self.abort_in_background();
        }
    }
}
