//! Deterministic simulation of a latsdb cluster.
//!
//! The data-node shards (the same `latsdb_cluster::Shard` state machines the
//! real data nodes run) and a set of simulated clients live in one thread on
//! virtual time. Every message goes through a simulated network that delays
//! it by a random amount while keeping each link first-in-first-out (as TCP
//! does), so messages on different links arrive in every possible order.
//! Everything random comes from one seed: a failing run replays exactly.
//!
//! Workload (bank + registers): each account row holds a balance and a
//! version. Clients run transfers (lock two accounts exclusively, in random
//! order, so deadlocks happen and are broken by lock-wait timeouts), audits
//! (shared locks on every account), committed reads, transactions they
//! abandon after writing, and connections they drop while a transaction is
//! still executing. Checkers:
//! - a transfer commits version v+1 of an account only once (two commits of
//!   the same version would be a lost update);
//! - an audit under locks always sees the bank total;
//! - a committed read only ever sees values that a committing transaction
//!   wrote (never a value of a transaction that aborted);
//! - at the end, every account's version counts exactly the committed
//!   transfers that touched it, its balance is the one written with that
//!   version, and the total is unchanged.
//!
//! Faults (`SimConfig`): data-node crashes and restarts (from disk or
//! empty), whole-cluster crashes, failed and slow syncs, network splits and
//! short glitches, connection resets, and lost or duplicated membership
//! messages. After every step of every shard, `Shard::check` asserts the
//! blocks' invariants; every run's events are hashed (`SimReport::trace_hash`)
//! so a seed's replay can be compared byte for byte.

mod disk;
pub mod spec;
mod world;

pub use latsdb_types::rng::Rng;
pub use spec::Spec;
pub use world::{run, SimConfig, SimReport};
