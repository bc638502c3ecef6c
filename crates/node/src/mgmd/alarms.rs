//! Alarms on the data nodes' limits: the management server asks every
//! started data node for its usage now and then, and the cluster log gets a
//! warning when a shard's data memory, tablespace or REDO log passes 80% of its
//! limit, an alert from 95% (at 100% the shard refuses writes with
//! `TableFull`, or `RedoFull` for the REDO log), and a note when it is back below. A level is left only a
//! few points below where it was entered, so a usage hovering at a
//! threshold does not fill the log. The decisions only, from reports, so
//! they can be tested without a cluster.

use latsdb_types::proto::{NodeId, Severity, ShardMemory};
use latsdb_types::usage::{usage_severity, UsageLimit};
use std::collections::HashMap;

/// Percent points below a level's threshold that leave it.
const HYSTERESIS: f64 = 5.0;

/// What a shard at a limit does, and what the operator can do about it.
fn remedy(limit: UsageLimit) -> &'static str {
    match limit {
        UsageLimit::DataMemory => {
            "a shard refuses writes when its data memory is full: delete rows, or raise data_memory_mb in the configuration and restart the cluster"
        }
        UsageLimit::Tablespace => {
            "a shard refuses writes to disk columns when its tablespace is full: delete rows, or raise tablespace_mb in the configuration and restart the cluster"
        }
        UsageLimit::Redo => {
            "a shard refuses writes (a temporary error) when its REDO log is full, until a checkpoint lets older records go: check that checkpoints run and keep up (checkpoint_trigger_mb), or raise redo_limit_mb in the configuration and restart the cluster"
        }
    }
}

/// The level each (node, resource) is at; absent: below the warning level.
#[derive(Default)]
pub struct Alarms {
    raised: HashMap<(NodeId, UsageLimit), Severity>,
}

impl Alarms {
    /// A data node's usage report: the events its changes of level make.
    pub fn check(&mut self, node: NodeId, shards: &[ShardMemory]) -> Vec<(Severity, String)> {
        let mut events = Vec::new();
        for resource in UsageLimit::ALL {
            // The fullest shard decides: it is the one that refuses writes first.
            let Some((percent, shard)) = resource.fullest(shards) else { continue };
            let was = self.raised.get(&(node, resource)).copied();
            let now = level(percent, was);
            if now == was {
                continue;
            }
            match now {
                Some(s) => self.raised.insert((node, resource), s),
                None => self.raised.remove(&(node, resource)),
            };
            let (used, limit) = resource.used_and_limit(shard);
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            let what = format!(
                "data node {node}: {} {percent:.0}% used (shard {node}.{}: {:.1} of {:.0} MiB)",
                resource.name(),
                shard.shard,
                mib(used),
                mib(limit)
            );
            events.push(match now {
                Some(severity) => (severity, format!("{what}; {}", remedy(resource))),
                None => (Severity::Info, format!("{what}: below the warning level again")),
            });
        }
        debug_assert!(events.len() <= 3, "one event per resource at most");
        events
    }
}

/// The level for `percent`, given the level it was at: a level is entered
/// at its threshold and left `HYSTERESIS` points below it.
fn level(percent: f64, was: Option<Severity>) -> Option<Severity> {
    let kept = was.min(usage_severity(percent + HYSTERESIS));
    usage_severity(percent).max(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(shard: u16, used_mib: u64, budget_mib: u64) -> ShardMemory {
        ShardMemory {
            shard,
            rows: 0,
            used_bytes: used_mib << 20,
            budget_bytes: budget_mib << 20,
            tablespace_bytes: 0,
            tablespace_used_bytes: 0,
            tablespace_limit_bytes: 0,
            page_cache_hits: 0,
            page_cache_misses: 0,
            page_waits: 0,
            pages_read_on_shard_thread: 0,
            pages_read_at_once: 0,
            partitions: Vec::new(),
            redo_bytes: 0,
            redo_limit_bytes: 0,
            ops: Default::default(),
        }
    }

    #[test]
    fn the_fullest_shard_raises_a_warning_then_an_alert_and_each_is_said_once() {
        let mut alarms = Alarms::default();
        assert!(alarms.check(2, &[shard(0, 50, 100), shard(1, 79, 100)]).is_empty());
        let events = alarms.check(2, &[shard(0, 50, 100), shard(1, 82, 100)]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, Severity::Warning);
        assert!(
            events[0]
                .1
                .starts_with("data node 2: data memory 82% used (shard 2.1: 82.0 of 100 MiB); a shard refuses writes"),
            "{}",
            events[0].1
        );
        assert!(alarms.check(2, &[shard(1, 90, 100)]).is_empty(), "still a warning: said once");
        let events = alarms.check(2, &[shard(1, 100, 100)]);
        assert_eq!(events[0].0, Severity::Alert);
        assert!(alarms.check(3, &[shard(0, 10, 100)]).is_empty(), "another node has its own level");
        // Unlimited shards never alarm.
        assert!(alarms.check(4, &[shard(0, 10_000, 0)]).is_empty());
    }

    #[test]
    fn a_full_redo_log_raises_its_own_alert() {
        let mut alarms = Alarms::default();
        let mut s = shard(0, 10, 100);
        s.redo_bytes = 97 << 20;
        s.redo_limit_bytes = 100 << 20;
        let events = alarms.check(2, &[s]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, Severity::Alert);
        assert!(
            events[0].1.starts_with("data node 2: REDO log 97% used (shard 2.0: 97.0 of 100 MiB)"),
            "{}",
            events[0].1
        );
    }

    #[test]
    fn a_level_is_left_only_well_below_its_threshold() {
        let mut alarms = Alarms::default();
        assert_eq!(alarms.check(2, &[shard(0, 96, 100)])[0].0, Severity::Alert);
        assert!(alarms.check(2, &[shard(0, 91, 100)]).is_empty(), "within 5 points of 95%: still an alert");
        assert_eq!(alarms.check(2, &[shard(0, 89, 100)])[0].0, Severity::Warning);
        assert!(alarms.check(2, &[shard(0, 76, 100)]).is_empty(), "within 5 points of 80%: still a warning");
        let events = alarms.check(2, &[shard(0, 74, 100)]);
        assert_eq!(events[0].0, Severity::Info);
        assert!(events[0].1.ends_with("below the warning level again"), "{}", events[0].1);
        assert!(alarms.check(2, &[shard(0, 78, 100)]).is_empty(), "rising below 80% raises nothing");
    }

    #[test]
    fn levels_follow_thresholds_with_hysteresis() {
        use Severity::*;
        assert_eq!(level(79.9, None), None);
        assert_eq!(level(80.0, None), Some(Warning));
        assert_eq!(level(94.0, Some(Alert)), Some(Alert));
        assert_eq!(level(89.9, Some(Alert)), Some(Warning));
        assert_eq!(level(75.0, Some(Alert)), Some(Warning));
        assert_eq!(level(74.9, Some(Warning)), None);
        assert_eq!(level(99.0, Some(Warning)), Some(Alert));
    }
}
