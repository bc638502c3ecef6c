//! Sans-I/O state machines of a data node.
//!
//! A data node runs one or more *shards*; each shard is a thread that owns a
//! set of partitions and reacts to messages: requests from clients, messages
//! from other shards (local or remote) and timer ticks. It does no I/O: the
//! caller hands it the current time and collects what it wants sent from an
//! [`Outbox`]. The same code runs on real threads and sockets (crates/node)
//! and inside a deterministic simulation.
//!
//! A shard (`shard.rs`) composes blocks, each a type that owns its state and
//! reacts to messages with a shared `Context` (`context.rs`: configuration,
//! layout, tables, clock, commit epoch, REDO buffer); they are named after
//! their NDB counterparts:
//! - `Coordinator` (`tc`): runs multi-operation transactions and their
//!   two-phase commit over the participating shards;
//! - `Ldm` (`ldm`, `replica`): executes key operations on its own partitions
//!   under row locks (`locks`), stages transactional writes until commit,
//!   and stages every write on the partition's backups before it is
//!   acknowledged (the backup side is `replica`; what an operation must
//!   pass before it runs is `prepare`);
//! - `Takeovers` (`takeover`): the transactions of a failed coordinator are
//!   committed or aborted consistently by the survivors;
//! - `Epochs` (`durability`) and `Checkpoints` (`checkpoint`): commit epochs,
//!   the REDO log, the epoch driver, local checkpoints and restoring from
//!   disk;
//! - `Pager` (`pager`): a client request whose rows' disk parts are not in
//!   the page cache waits there while the host reads their pages;
//! - `PartitionSync` (`sync`): a restarting node copies its partitions from
//!   their primaries while it already takes part in their writes; the
//!   stages of the whole node's restart (`restart`: copy, checkpoint,
//!   handover, admission) are one state machine, `NodeRestart`, that the
//!   data node and the simulator both drive.
//!
//! Each block checks its invariants in `check()`; `Shard::check` runs them
//! all (the simulator does after every step).
//!
//! Beside the shards, each data node runs `membership`: heartbeats, views of
//! the live nodes chosen by consensus, leases and split-brain protection.

mod checkpoint;
mod context;
mod durability;
mod ldm;
mod locks;
pub mod membership;
mod pager;
mod prepare;
mod replica;
mod restart;
mod shard;
mod sync;
mod takeover;
mod tc;

pub use checkpoint::{
    checkpoint_for, checkpoint_info, node_recovery, redo_summary, replay, CheckpointInfo, RedoSummary, Replayed,
    RestoreReport,
};
pub use context::{ConnId, Micros};
pub use durability::DiskOp;
pub use latsdb_storage::pages::{MemoryPages, PageFile, PagesConfig};
pub use latsdb_storage::tablespace::{PageRead, PAGE_BYTES};
pub use restart::{NodeRestart, RestartStep};
pub use shard::{DiskUsage, Lease, Outbox, Shard, ShardConfig};
pub use sync::SyncProgress;
