//! Test specifications as data files (FoundationDB's habit): a spec names
//! one or more cluster shapes with their fault menus, a range of seeds to
//! run each over, and what the runs' reports must show, per seed and in
//! total. The suite runs every file of `crates/sim/specs/`
//! (`tests/specs.rs`); `latsdb sim --spec FILE` runs one.
//!
//! ```toml
//! description = "One node crashes and restarts from its disk."
//! seeds = [0, 200]                  # START..END, each run under every config
//!
//! [[config]]                        # any field of SimConfig; the rest default
//! replicas = 2
//! crashes = 1
//! restarts = 1
//!
//! [each]                            # every run's report: field >= value
//! restarts = 1
//! "crashes + shutdowns" = 1         # a sum of report fields
//!
//! [total]                           # summed over every run: field >= value
//! unknown_outcomes = 1
//!
//! [total_max]                       # summed over every run: field <= value
//! failed_restarts = 0
//! ```

use crate::world::{run, SimConfig, SimReport};
use serde::Deserialize;
use std::collections::BTreeMap;

/// A spec file, parsed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub description: String,
    /// The seeds, `[start, end)`.
    pub seeds: [u64; 2],
    /// The cluster shapes and fault menus; every seed runs under each.
    pub config: Vec<SimConfig>,
    /// Lower bounds on every run's report.
    #[serde(default)]
    pub each: BTreeMap<String, u64>,
    /// Lower bounds on the reports summed over every run.
    #[serde(default)]
    pub total: BTreeMap<String, u64>,
    /// Upper bounds on the reports summed over every run.
    #[serde(default)]
    pub total_max: BTreeMap<String, u64>,
}

/// What a spec's runs added up to.
#[derive(Debug, Default)]
pub struct SpecOutcome {
    pub runs: u64,
    /// Every report field summed over the runs, by name.
    pub totals: BTreeMap<String, u64>,
}

impl Spec {
    /// Parses a spec file's text; the error names what is wrong.
    pub fn parse(text: &str) -> Result<Spec, String> {
        let spec: Spec = toml::from_str(text).map_err(|e| format!("not a simulation spec: {e}"))?;
        if spec.seeds[0] >= spec.seeds[1] {
            return Err(format!("seeds [{}, {}] is an empty range", spec.seeds[0], spec.seeds[1]));
        }
        if spec.config.is_empty() {
            return Err("a spec needs at least one [[config]]".into());
        }
        let fields = report_fields(&SimReport::default());
        for name in spec.each.keys().chain(spec.total.keys()).chain(spec.total_max.keys()) {
            for part in name.split('+').map(str::trim) {
                if !fields.contains_key(part) {
                    return Err(format!(
                        "'{part}' is not a field of the simulation report; it has {:?}",
                        fields.keys()
                    ));
                }
            }
        }
        Ok(spec)
    }

    /// Runs every seed under every config, checking each report as it
    /// comes; `progress` hears every finished run. The first failure stops
    /// the spec with the run's seed, config and what failed.
    pub fn run(&self, mut progress: impl FnMut(u64, &SimReport)) -> Result<SpecOutcome, String> {
        let mut outcome = SpecOutcome::default();
        for (i, config) in self.config.iter().enumerate() {
            for seed in self.seeds[0]..self.seeds[1] {
                let report = run(&SimConfig { seed, ..config.clone() }).map_err(|e| format!("config {i}: {e}"))?;
                let fields = report_fields(&report);
                for (name, min) in &self.each {
                    let value = sum_of(&fields, name);
                    if value < *min {
                        return Err(format!(
                            "config {i}, seed {seed}: {name} is {value}, below {min} (`latsdb sim --seed {seed}` with that config replays it): {report:?}"
                        ));
                    }
                }
                for (name, value) in fields {
                    *outcome.totals.entry(name).or_default() += value;
                }
                outcome.runs += 1;
                progress(seed, &report);
            }
        }
        for (name, min) in &self.total {
            let value = sum_of(&outcome.totals, name);
            if value < *min {
                return Err(format!(
                    "over {} runs, {name} totals {value}, below {min}: the faults are too gentle",
                    outcome.runs
                ));
            }
        }
        for (name, max) in &self.total_max {
            let value = sum_of(&outcome.totals, name);
            if value > *max {
                return Err(format!("over {} runs, {name} totals {value}, above {max}", outcome.runs));
            }
        }
        Ok(outcome)
    }
}

/// The numeric fields of a report, by name.
fn report_fields(report: &SimReport) -> BTreeMap<String, u64> {
    let table = toml::Table::try_from(report).expect("a report is a table of numbers");
    table.into_iter().filter_map(|(name, value)| value.as_integer().map(|v| (name, v as u64))).collect()
}

/// A field, or a sum of fields written `a + b`.
fn sum_of(fields: &BTreeMap<String, u64>, name: &str) -> u64 {
    name.split('+').map(|part| fields.get(part.trim()).copied().unwrap_or(0)).sum()
}
