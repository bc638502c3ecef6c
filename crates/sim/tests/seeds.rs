//! A seed of the deterministic simulation replays exactly. (The sweeps of
//! many seeds under faults are spec files, `crates/sim/specs/`, run by
//! `tests/specs.rs`.)

use latsdb_sim::{run, SimConfig};

/// 8,000 steps on one shard per node with two crashes, two restarts and
/// every network fault.
fn every_fault(seed: u64, nodes: u16, replicas: u8) -> SimConfig {
    SimConfig { seed, steps: 8_000, nodes, replicas, shards_per_node: 1, restarts: 2, ..Default::default() }
        .with_faults(2)
}

/// A seed replays byte for byte: the hash of every event delivered (time,
/// endpoints, message) is the same in a second run, with every fault on;
/// another seed gives another trace.
#[test]
fn a_seed_replays_its_trace_byte_for_byte() {
    for seed in [3, 17, 40] {
        let cfg = every_fault(seed, 6, 3);
        let first = run(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let second = run(&cfg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(first.trace_hash, second.trace_hash, "seed {seed} did not replay: {first:?} vs {second:?}");
        assert_eq!(first.events, second.events, "seed {seed}");
        let other = run(&SimConfig { seed: seed + 1000, ..cfg }).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(first.trace_hash, other.trace_hash, "seeds {seed} and {} gave the same trace", seed + 1000);
    }
}
