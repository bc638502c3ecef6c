//! The stages of a node restart after its restore from disk, as one
//! sans-I/O state machine that the data node (`node/src/datanode.rs`) and
//! the simulator both drive:
//!
//! ```text
//! copy        every shard copies its partitions from their primaries
//!             (PartitionSync); done when each reports `done()`
//! checkpoint  each shard writes a local checkpoint (the copied rows are not
//!             in its REDO log) and waits until it replaced the older one
//! handover    each shard asks the primaries of the partitions it will be
//!             primary of to stop locking them (`Shard::sync_hand_over`)
//! admit       the node asks to be admitted to the view, again after
//!             `admit_retry_us`, at most `admit_tries` times
//! ```
//!
//! The host looks at the shards now and then and calls `step` with what
//! each reports; the answer says what to do. A copy that failed (a primary
//! left with no other replica to copy from) fails the restart at any stage.

use crate::context::Micros;
use crate::sync::SyncProgress;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Stage {
    Copy,
    /// Asked for checkpoints; waiting for the targets (`checkpoints_begun`).
    CheckpointAsked,
    /// Per shard, the completed checkpoint count to wait for.
    Checkpoint(Vec<u64>),
    HandOver,
    Admit {
        asked_at: Micros,
        tries: u32,
    },
}

/// What the host does after a `step`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartStep {
    /// Nothing to do yet; look again later.
    Wait,
    /// The copy is done (`summary` adds up the shards' progress): call
    /// `Shard::checkpoint_now` on every shard and hand the results, in
    /// shard order, to `checkpoints_begun`.
    Checkpoint { summary: SyncProgress },
    /// The checkpoints replaced the older ones: call
    /// `Shard::sync_hand_over` on every shard.
    HandOver,
    /// Ask to be admitted to the view (`tries` earlier requests).
    AskAdmit { tries: u32 },
    /// The restart cannot finish; the node stops, and says why.
    Fail(String),
}

/// A node restart under way.
#[derive(Debug)]
pub struct NodeRestart {
    stage: Stage,
    admit_retry_us: Micros,
    admit_tries: u32,
}

impl NodeRestart {
    /// A restart whose node asks again for admission after
    /// `admit_retry_us`, and gives up after `admit_tries` requests.
    pub fn new(admit_retry_us: Micros, admit_tries: u32) -> NodeRestart {
        assert!(admit_tries > 0, "a restart must ask for admission at least once");
        NodeRestart { stage: Stage::Copy, admit_retry_us, admit_tries }
    }

    /// The stage's name, for logs.
    pub fn stage(&self) -> &'static str {
        match self.stage {
            Stage::Copy => "copy",
            Stage::CheckpointAsked | Stage::Checkpoint(_) => "checkpoint",
            Stage::HandOver => "handover",
            Stage::Admit { .. } => "admit",
        }
    }

    /// In the checkpoint stage, the completed checkpoint count each shard
    /// must reach (`Shard::checkpoint_settled`), in shard order.
    pub fn checkpoint_targets(&self) -> Option<&[u64]> {
        match &self.stage {
            Stage::Checkpoint(targets) => Some(targets),
            _ => None,
        }
    }

    /// The shards started the checkpoints asked for by `RestartStep::Checkpoint`.
    pub fn checkpoints_begun(&mut self, targets: Vec<u64>) {
        assert_eq!(self.stage, Stage::CheckpointAsked, "checkpoints began that the restart did not ask for");
        self.stage = Stage::Checkpoint(targets);
    }

    /// One look at the node's shards: each one's copy progress, and (in the
    /// checkpoint stage) whether each reached its checkpoint target.
    pub fn step(&mut self, now: Micros, progress: &[SyncProgress], settled: &[bool]) -> RestartStep {
        assert!(!progress.is_empty(), "a node restart of a node without shards");
        if let Some(why) = progress.iter().find_map(|p| p.failed.clone()) {
            return RestartStep::Fail(why);
        }
        match &mut self.stage {
            Stage::Copy if progress.iter().all(SyncProgress::done) => {
                self.stage = Stage::CheckpointAsked;
                RestartStep::Checkpoint { summary: SyncProgress::total(progress) }
            }
            Stage::Checkpoint(targets) => {
                assert_eq!(
                    settled.len(),
                    targets.len(),
                    "settled flags for {} of {} shards",
                    settled.len(),
                    targets.len()
                );
                if !settled.iter().all(|s| *s) {
                    return RestartStep::Wait;
                }
                self.stage = Stage::HandOver;
                RestartStep::HandOver
            }
            Stage::HandOver if progress.iter().all(SyncProgress::handed_over) => {
                self.stage = Stage::Admit { asked_at: now, tries: 0 };
                RestartStep::AskAdmit { tries: 0 }
            }
            Stage::Admit { asked_at, tries } if now >= *asked_at + self.admit_retry_us => {
                *tries += 1;
                if *tries >= self.admit_tries {
                    return RestartStep::Fail(format!(
                        "no view admitted the node after {tries} requests; start it again"
                    ));
                }
                *asked_at = now;
                RestartStep::AskAdmit { tries: *tries }
            }
            _ => RestartStep::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copied(handed_over: bool) -> SyncProgress {
        SyncProgress { begun: true, partitions: 2, handover_begun: handed_over, ..SyncProgress::default() }
    }

    #[test]
    fn the_stages_follow_one_another() {
        let mut r = NodeRestart::new(100, 2);
        let copying = SyncProgress { begun: true, partitions: 2, partitions_left: 1, ..SyncProgress::default() };
        assert_eq!(r.step(0, &[copying, copied(false)], &[]), RestartStep::Wait);
        let RestartStep::Checkpoint { summary } = r.step(1, &[copied(false), copied(false)], &[]) else {
            panic!("the copy is done")
        };
        assert_eq!(summary.partitions, 4);
        assert_eq!(r.step(2, &[copied(false), copied(false)], &[]), RestartStep::Wait, "no targets yet");
        r.checkpoints_begun(vec![3, 5]);
        assert_eq!(r.checkpoint_targets(), Some(&[3, 5][..]));
        assert_eq!(r.step(3, &[copied(false), copied(false)], &[true, false]), RestartStep::Wait);
        assert_eq!(r.step(4, &[copied(false), copied(false)], &[true, true]), RestartStep::HandOver);
        assert_eq!(r.step(5, &[copied(true), copied(false)], &[]), RestartStep::Wait);
        assert_eq!(r.step(6, &[copied(true), copied(true)], &[]), RestartStep::AskAdmit { tries: 0 });
        assert_eq!(r.step(50, &[copied(true), copied(true)], &[]), RestartStep::Wait);
        assert_eq!(r.step(106, &[copied(true), copied(true)], &[]), RestartStep::AskAdmit { tries: 1 });
        assert!(matches!(r.step(206, &[copied(true), copied(true)], &[]), RestartStep::Fail(_)));
    }

    #[test]
    fn a_failed_copy_fails_the_restart_at_any_stage() {
        let failed = SyncProgress { failed: Some("the primary left".into()), ..copied(false) };
        let mut r = NodeRestart::new(100, 3);
        assert_eq!(r.step(0, &[copied(false), failed.clone()], &[]), RestartStep::Fail("the primary left".into()));
        r.step(1, &[copied(false)], &[]);
        r.checkpoints_begun(vec![1]);
        assert_eq!(r.step(2, &[failed], &[false]), RestartStep::Fail("the primary left".into()));
    }
}
