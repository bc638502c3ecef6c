//! Every simulation spec in `crates/sim/specs/` (workload, cluster shapes,
//! fault menus, seeds and what the reports must show): each seed of each
//! spec passes every check of the simulation, and the spec's bounds on the
//! reports hold. A failing seed replays with `latsdb sim --spec FILE` or
//! `latsdb sim --seed S` and the config's flags.

use latsdb_sim::Spec;
use std::path::Path;

fn specs() -> Vec<(String, Spec)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "only {} spec files in {}", files.len(), dir.display());
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a readable spec");
            let spec = Spec::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.file_name().unwrap().to_string_lossy().into_owned(), spec)
        })
        .collect()
}

/// The specs run on as many threads as the machine has CPUs (each spec
/// on one thread: a seed replays the same wherever it runs).
#[test]
fn every_spec_passes() {
    let specs = specs();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let runs: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut runs = 0;
                    while let Some((name, spec)) = specs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        let outcome = spec.run(|_, _| {}).unwrap_or_else(|e| panic!("spec {name}: {e}"));
                        runs += outcome.runs;
                    }
                    runs
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a spec thread panicked")).sum()
    });
    // The sweeps the suite relies on: thousands of seeds with faults.
    assert!(runs >= 2_000, "the specs ran only {runs} seeds");
}

#[test]
fn a_spec_states_its_bounds_on_known_fields() {
    let good = "description = \"x\"\nseeds = [0, 2]\n[[config]]\nsteps = 500\n[each]\n\"crashes + shutdowns\" = 0\n";
    assert!(Spec::parse(good).is_ok());
    let unknown_field = good.replace("crashes + shutdowns", "crashez");
    assert!(Spec::parse(&unknown_field).unwrap_err().contains("'crashez' is not a field"));
    let unknown_setting = good.replace("steps = 500", "stepz = 500");
    assert!(Spec::parse(&unknown_setting).unwrap_err().contains("stepz"));
    let empty = good.replace("[0, 2]", "[2, 2]");
    assert!(Spec::parse(&empty).unwrap_err().contains("empty range"));
    // A bound a run cannot meet fails the spec, naming the seed.
    let strict = good.replace("\"crashes + shutdowns\" = 0", "crashes = 1");
    let failure = Spec::parse(&strict).unwrap().run(|_, _| {}).unwrap_err();
    assert!(failure.contains("seed 0") && failure.contains("crashes is 0, below 1"), "{failure}");
}
