//! When a process manager (the launcher of `latsdb start`, or the angel of
//! a standalone `latsdb datanode`) starts a data node again after it died
//! unasked (NDB's angel process): the decisions only, from exits and the time, so they
//! can be tested without processes. A node that exits cleanly (stopped by
//! `latsdb mgm N stop` or `restart`, or the cluster's shutdown) is left
//! alone; one that crashes or is killed is started again after a backoff
//! that doubles with each death in the window (1 s, then 2 s: the third
//! death ends it; at most 30 s were `MAX_DEATHS` raised); one that dies
//! `MAX_DEATHS` times within `WINDOW` stays down, as
//! a node that cannot run (a broken disk, a bad configuration) would only
//! die again, until an operator starts it.

use latsdb_types::proto::Severity;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// Deaths within `WINDOW` after which a node stays down.
pub const MAX_DEATHS: usize = 3;
pub const WINDOW: Duration = Duration::from_secs(600);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What the launcher does about a data node that exited.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Stopped cleanly: not started again unless asked.
    LeaveStopped,
    /// Started again after `after`; `deaths` within the window so far.
    Restart { after: Duration, deaths: usize },
    /// Died `deaths` times within the window: stays down.
    GiveUp { deaths: usize },
}

#[derive(Default)]
struct NodeDeaths {
    /// When the node died unasked, within the window.
    deaths: VecDeque<Instant>,
    restart_at: Option<Instant>,
}

#[derive(Default)]
pub struct Healer {
    nodes: BTreeMap<u16, NodeDeaths>,
}

impl Healer {
    /// A data node exited; `clean` when it stopped as asked (exit status 0).
    pub fn on_exit(&mut self, node: u16, clean: bool, now: Instant) -> Decision {
        let n = self.nodes.entry(node).or_default();
        n.restart_at = None;
        if clean {
            return Decision::LeaveStopped;
        }
        while n.deaths.front().is_some_and(|&t| now.saturating_duration_since(t) > WINDOW) {
            n.deaths.pop_front();
        }
        n.deaths.push_back(now);
        let deaths = n.deaths.len();
        // A node that gave up is only started again by an operator, which
        // forgets its deaths: it cannot die more often than that.
        debug_assert!(deaths <= MAX_DEATHS, "node {node} died {deaths} times in the window without being started");
        if deaths >= MAX_DEATHS {
            return Decision::GiveUp { deaths };
        }
        let after = FIRST_BACKOFF.saturating_mul(1 << (deaths - 1).min(16)).min(MAX_BACKOFF);
        debug_assert!((FIRST_BACKOFF..=MAX_BACKOFF).contains(&after));
        n.restart_at = Some(now + after);
        Decision::Restart { after, deaths }
    }

    /// Nodes whose restart is due at `now` (each returned once).
    pub fn due(&mut self, now: Instant) -> Vec<u16> {
        let mut due = Vec::new();
        for (&node, n) in &mut self.nodes {
            if n.restart_at.is_some_and(|t| t <= now) {
                n.restart_at = None;
                due.push(node);
            }
        }
        due
    }

    /// An operator asked for the node (`latsdb mgm N start`): a pending
    /// restart is dropped (the start does it) and its deaths are forgiven.
    pub fn on_requested_start(&mut self, node: u16) {
        self.nodes.remove(&node);
    }
}

/// What an exit and the decision about it mean, for the operator: the
/// cluster log's severity and text (`name` is e.g. "data node 3").
pub fn describe_exit(name: &str, status: std::process::ExitStatus, decision: &Decision) -> (Severity, String) {
    let window = WINDOW.as_secs() / 60;
    match decision {
        Decision::Restart { after, deaths } => (
            Severity::Warning,
            format!(
                "{name} died ({status}); starting it again in {} s (death {deaths} of {MAX_DEATHS} allowed within {window} min)",
                after.as_secs()
            ),
        ),
        Decision::GiveUp { deaths } => (
            Severity::Alert,
            format!(
                "{name} died ({status}) {deaths} times within {window} min; leaving it down until `latsdb mgm N start` (see its log for why it dies)"
            ),
        ),
        Decision::LeaveStopped if status.success() => (
            Severity::Info,
            format!("{name} exited ({status}) as asked (`latsdb mgm N stop`, or the cluster's shutdown); it stays down until `latsdb mgm N start`"),
        ),
        // Only when restarts are off (`--no-restart`).
        Decision::LeaveStopped => (
            Severity::Warning,
            format!("{name} died ({status}); not started again (restarts are off); `latsdb mgm N start` starts it"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_node_is_restarted_with_a_doubling_backoff_until_it_dies_too_often() {
        let t0 = Instant::now();
        let mut h = Healer::default();
        assert_eq!(h.on_exit(3, false, t0), Decision::Restart { after: Duration::from_secs(1), deaths: 1 });
        assert!(h.due(t0).is_empty(), "not before its backoff");
        assert_eq!(h.due(t0 + Duration::from_secs(1)), vec![3]);
        assert!(h.due(t0 + Duration::from_secs(2)).is_empty(), "returned once");
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(h.on_exit(3, false, t1), Decision::Restart { after: Duration::from_secs(2), deaths: 2 });
        assert_eq!(h.on_exit(3, false, t1 + Duration::from_secs(5)), Decision::GiveUp { deaths: 3 });
        assert!(h.due(t1 + Duration::from_secs(60)).is_empty(), "a node that gave up is not restarted");
        // An operator's start forgives it.
        h.on_requested_start(3);
        assert!(matches!(h.on_exit(3, false, t1 + Duration::from_secs(70)), Decision::Restart { deaths: 1, .. }));
    }

    #[test]
    fn clean_stops_are_left_alone_and_old_deaths_are_forgotten() {
        let t0 = Instant::now();
        let mut h = Healer::default();
        assert_eq!(h.on_exit(2, true, t0), Decision::LeaveStopped);
        assert!(h.due(t0 + WINDOW).is_empty());
        h.on_exit(2, false, t0);
        h.on_exit(2, false, t0 + Duration::from_secs(10));
        // Both deaths are older than the window: this one is the first.
        let later = t0 + WINDOW + Duration::from_secs(11);
        assert_eq!(h.on_exit(2, false, later), Decision::Restart { after: Duration::from_secs(1), deaths: 1 });
        // A clean stop cancels a pending restart.
        assert_eq!(h.on_exit(2, true, later), Decision::LeaveStopped);
        assert!(h.due(later + MAX_BACKOFF).is_empty());
    }
}
