//! How full a data node's shards are against their limits, and what that
//! asks of an operator: shared by the management server's alarms and `latsdb
//! mgm report-memory`.

use crate::proto::{Severity, ShardMemory};

/// Usage (percent of a limit) from which the cluster log warns, and from
/// which it raises an alert; a shard at 100% refuses writes.
pub const USAGE_WARNING_PERCENT: f64 = 80.0;
pub const USAGE_ALERT_PERCENT: f64 = 95.0;

/// A limit a shard's usage is weighed against (the alarms and `mgm
/// report-memory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UsageLimit {
    DataMemory,
    Tablespace,
    Redo,
}

impl UsageLimit {
    pub const ALL: [UsageLimit; 3] = [UsageLimit::DataMemory, UsageLimit::Tablespace, UsageLimit::Redo];

    pub fn name(self) -> &'static str {
        match self {
            UsageLimit::DataMemory => "data memory",
            UsageLimit::Tablespace => "tablespace",
            UsageLimit::Redo => "REDO log",
        }
    }

    /// A shard's bytes in use and its limit (0: none). A tablespace counts
    /// its live records: deletes lower it, as their space is reused.
    pub fn used_and_limit(self, shard: &ShardMemory) -> (u64, u64) {
        match self {
            UsageLimit::DataMemory => (shard.used_bytes, shard.budget_bytes),
            UsageLimit::Tablespace => (shard.tablespace_used_bytes, shard.tablespace_limit_bytes),
            UsageLimit::Redo => (shard.redo_bytes, shard.redo_limit_bytes),
        }
    }

    /// Percent of the limit a shard uses (None: no limit).
    pub fn percent(self, shard: &ShardMemory) -> Option<f64> {
        let (used, limit) = self.used_and_limit(shard);
        (limit > 0).then(|| used as f64 * 100.0 / limit as f64)
    }

    /// The shard nearest its limit, and its percent: it refuses writes
    /// first (None: no shard has a limit).
    pub fn fullest(self, shards: &[ShardMemory]) -> Option<(f64, &ShardMemory)> {
        shards.iter().filter_map(|s| self.percent(s).map(|p| (p, s))).max_by(|a, b| a.0.total_cmp(&b.0))
    }
}

/// What a usage percent asks of an operator: nothing below the warning
/// level, else a warning or an alert.
pub fn usage_severity(percent: f64) -> Option<Severity> {
    if percent >= USAGE_ALERT_PERCENT {
        Some(Severity::Alert)
    } else if percent >= USAGE_WARNING_PERCENT {
        Some(Severity::Warning)
    } else {
        None
    }
}
