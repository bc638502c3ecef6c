//! Latency histograms, live progress and the printed/JSON results of a phase.

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

pub struct PhaseResult {
    pub name: String,
    pub ops: u64,
    pub failed_ops: u64,
    pub batches: u64,
    pub seconds: f64,
    /// Latency of one round trip (a whole batch), microseconds.
    pub latency: Histogram<u64>,
    /// Failed operations by error: count and the first message seen.
    pub errors: std::collections::BTreeMap<String, (u64, String)>,
}

/// Counts a failed operation under its error code, keeping one message.
pub fn count_error(errors: &mut std::collections::BTreeMap<String, (u64, String)>, code: String, message: &str) {
    let entry = errors.entry(code).or_insert_with(|| (0, message.to_string()));
    entry.0 += 1;
}

pub fn new_histogram() -> Histogram<u64> {
    // 1 µs .. 60 s with 3 significant digits; the bounds are constants, so this cannot fail.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

impl PhaseResult {
    pub fn ops_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }

    pub fn print(&self) {
        let h = &self.latency;
        println!(
            "{:<7} {:>12.0} ops/s  {:>10} ops in {:>6.2} s  batch latency us p50 {:>6} p95 {:>6} p99 {:>6} max {:>7}{}",
            self.name,
            self.ops_per_sec(),
            self.ops,
            self.seconds,
            h.value_at_quantile(0.50),
            h.value_at_quantile(0.95),
            h.value_at_quantile(0.99),
            h.max(),
            if self.failed_ops > 0 { format!("  FAILED ops: {}", self.failed_ops) } else { String::new() }
        );
        for (code, (count, message)) in &self.errors {
            println!("        failed: {count} x {code}, e.g. {message}");
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let h = &self.latency;
        serde_json::json!({
            "phase": self.name,
            "ops": self.ops,
            "failed_ops": self.failed_ops,
            "errors": self.errors.iter().map(|(code, (count, message))| serde_json::json!({"code": code, "count": count, "example": message})).collect::<Vec<_>>(),
            "batches": self.batches,
            "seconds": self.seconds,
            "ops_per_sec": self.ops_per_sec(),
            "batch_latency_us": {
                "p50": h.value_at_quantile(0.50),
                "p95": h.value_at_quantile(0.95),
                "p99": h.value_at_quantile(0.99),
                "max": h.max(),
                "mean": h.mean(),
            }
        })
    }
}

pub fn progress(phase: &str, total: Option<u64>) -> ProgressBar {
    let bar = match total {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    let template = match total {
        Some(_) => "{prefix:>7} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}",
        None => "{prefix:>7} [{elapsed_precise}] {spinner} {msg}",
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.set_prefix(phase.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
