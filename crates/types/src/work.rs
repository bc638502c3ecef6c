//! What a shard counts of its work for reports and `/metrics`: why the
//! transactions it coordinated aborted, and how long its coordinator took
//! to answer transaction requests. Plain counters: each shard thread owns
//! its own and sends a copy with its usage report (`proto::OpCounts`).

use crate::error::{DbError, ErrorCode};
use serde::{Deserialize, Serialize};

/// Why a transaction aborted, as its coordinator saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortCause {
    /// The client asked (rollback).
    Client,
    /// The client's connection closed with the transaction open.
    Disconnect,
    /// A participant's node failed while the transaction executed.
    NodeFailure,
    /// A row lock was not granted within the lock-wait timeout.
    LockWaitTimeout,
    /// Data memory, tablespace or REDO log full.
    Resources,
    /// The cluster was changing (a partition moving, a node restarting,
    /// a stale layout): the client runs it again.
    ClusterChange,
    /// An operation failed (a duplicate key, a bad value, an unknown
    /// table...).
    Error,
    /// The client sent no request for `transaction_inactive_timeout_ms`.
    Inactive,
}

impl AbortCause {
    pub const ALL: [AbortCause; 8] = [
        AbortCause::Client,
        AbortCause::Disconnect,
        AbortCause::NodeFailure,
        AbortCause::LockWaitTimeout,
        AbortCause::Resources,
        AbortCause::ClusterChange,
        AbortCause::Error,
        AbortCause::Inactive,
    ];

    /// The cause of an abort answered with `error` (None: the client asked).
    pub fn of(error: Option<&DbError>) -> AbortCause {
        let Some(e) = error else { return AbortCause::Client };
        match e.code {
            ErrorCode::LockWaitTimeout => AbortCause::LockWaitTimeout,
            ErrorCode::TableFull | ErrorCode::RedoFull => AbortCause::Resources,
            ErrorCode::NodeUnavailable => AbortCause::NodeFailure,
            ErrorCode::NotServing | ErrorCode::WrongShard | ErrorCode::SchemaVersionMismatch => {
                AbortCause::ClusterChange
            }
            _ => AbortCause::Error,
        }
    }

    /// The label value of the cause in `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            AbortCause::Client => "client",
            AbortCause::Disconnect => "disconnect",
            AbortCause::NodeFailure => "node_failure",
            AbortCause::LockWaitTimeout => "lock_wait_timeout",
            AbortCause::Resources => "resources",
            AbortCause::ClusterChange => "cluster_change",
            AbortCause::Error => "error",
            AbortCause::Inactive => "inactive",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Aborted transactions by cause.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbortCounts([u64; AbortCause::ALL.len()]);

impl AbortCounts {
    pub fn add(&mut self, cause: AbortCause) {
        self.0[cause.index()] += 1;
    }

    pub fn of(&self, cause: AbortCause) -> u64 {
        self.0[cause.index()]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Upper bounds of the latency buckets, in microseconds: 100 us to 10 s
/// (every process's latency histograms use them).
pub const LATENCY_BUCKETS_US: [u64; 15] = [
    100, 250, 500, 1_000, 2_000, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    10_000_000,
];

/// A latency histogram of one thread's observations.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyCounts {
    /// Per bucket, the observations at most its bound and above the one
    /// before (not cumulative); those above the last bound are only in
    /// `count`.
    pub buckets: [u64; LATENCY_BUCKETS_US.len()],
    pub count: u64,
    pub sum_us: u64,
}

impl LatencyCounts {
    pub fn record(&mut self, micros: u64) {
        if let Some(bucket) = LATENCY_BUCKETS_US.iter().position(|&b| micros <= b) {
            self.buckets[bucket] += 1;
        }
        self.count += 1;
        self.sum_us = self.sum_us.saturating_add(micros);
        debug_assert!(self.buckets.iter().sum::<u64>() <= self.count, "a latency bucket counted past the total");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aborts_are_told_apart_by_their_error() {
        let e = |code| DbError::new(code, "x");
        assert_eq!(AbortCause::of(None), AbortCause::Client);
        assert_eq!(AbortCause::of(Some(&e(ErrorCode::LockWaitTimeout))), AbortCause::LockWaitTimeout);
        assert_eq!(AbortCause::of(Some(&e(ErrorCode::RedoFull))), AbortCause::Resources);
        assert_eq!(AbortCause::of(Some(&e(ErrorCode::NotServing))), AbortCause::ClusterChange);
        assert_eq!(AbortCause::of(Some(&e(ErrorCode::DuplicateKey))), AbortCause::Error);
        let mut counts = AbortCounts::default();
        counts.add(AbortCause::Disconnect);
        counts.add(AbortCause::Disconnect);
        counts.add(AbortCause::Error);
        assert_eq!((counts.of(AbortCause::Disconnect), counts.of(AbortCause::Error), counts.total()), (2, 1, 3));
        let names: std::collections::BTreeSet<_> = AbortCause::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), AbortCause::ALL.len(), "every cause has its own name");
        assert!(AbortCause::ALL.iter().enumerate().all(|(i, c)| c.index() == i));
    }

    #[test]
    fn latencies_fall_in_their_buckets() {
        let mut l = LatencyCounts::default();
        for us in [50, 100, 101, 20_000_000] {
            l.record(us);
        }
        assert_eq!(&l.buckets[..2], &[2, 1]);
        assert_eq!(l.buckets.iter().sum::<u64>(), 3, "above the last bound only the count has it");
        assert_eq!((l.count, l.sum_us), (4, 20_000_251));
    }
}
