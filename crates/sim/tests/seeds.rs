//! Many seeds of the deterministic simulation; each one replays with
//! `latsdb sim --seed S`.

use latsdb_sim::{run, SimConfig};

#[test]
fn two_hundred_seeds_pass_every_check() {
    let mut committed = 0;
    for seed in 0..200 {
        let report = run(&SimConfig { seed, steps: 8_000, ..Default::default() }).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.committed_transfers > 0, "seed {seed} committed nothing: {report:?}");
        committed += report.committed_transfers;
    }
    assert!(committed > 1000);
}

#[test]
fn a_seed_replays_exactly() {
    let cfg = SimConfig { seed: 42, steps: 5_000, ..Default::default() };
    let a = run(&cfg).unwrap();
    let b = run(&cfg).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}
