//! Native protocol frames from anyone who reaches a data node's port: the
//! body of each frame is decoded as every message a data node or the
//! management server takes, and whatever decodes as a client request or a
//! peer message runs in a real shard (one table, `input_seeds`, shared with the
//! cluster tests, which replay the findings kept in fuzz/regressions). The input
//! is a sequence of frame bodies, each behind a two-byte length, so that a
//! run can insert rows and then read, scan and abort around them. A panic
//! anywhere is a finding.
#![no_main]

// `seeds` serves the corpus writer in the cluster tests, not this target.
#[allow(dead_code)]
#[path = "../../crates/cluster/tests/input_seeds/mod.rs"]
mod input_seeds;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| input_seeds::run_frames(data));
