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

/// One panel of a line chart: its title and lines of (x, y) points.
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
}

/// Line colours, in the order lines are drawn.
const COLOURS: [&str; 6] = ["steelblue", "darkorange", "seagreen", "crimson", "purple", "saddlebrown"];

fn escaped(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Panels side by side, each with its axes from 0 to 1.1x its largest
/// value, the largest value written at the top of the y axis and a legend
/// naming each line: enough to read a benchmark's timeline at a glance.
pub fn line_chart_svg(title: &str, panels: &[Panel]) -> String {
    let (panel_w, h, pad) = (420.0, 340.0, 60.0);
    let w = pad + panels.len().max(1) as f64 * (panel_w + pad);
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="{w}" height="{h}" fill="white"/><text x="{pad}" y="20">{}</text>"#,
        escaped(title)
    );
    for (i, panel) in panels.iter().enumerate() {
        let x0 = pad + i as f64 * (panel_w + pad);
        let points = panel.lines.iter().flat_map(|(_, p)| p.iter());
        let (x_max, y_max) = points.fold((0.0f64, 0.0f64), |(xm, ym), &(x, y)| (xm.max(x), ym.max(y)));
        let (x_top, y_top) = (x_max.max(1e-9), y_max.max(1e-9) * 1.1);
        let x = |v: f64| x0 + v / x_top * panel_w;
        let y = |v: f64| h - pad - v / y_top * (h - 2.0 * pad);
        out.push_str(&format!(
            r#"<line x1="{x0}" y1="{b}" x2="{r}" y2="{b}" stroke="black"/><line x1="{x0}" y1="{pad}" x2="{x0}" y2="{b}" stroke="black"/><text x="{x0}" y="{t}">{name}</text><text x="{r}" y="{xl}" text-anchor="end">{xlabel} (to {x_max:.0})</text><text x="{yl}" y="{ym:.1}" text-anchor="end">{y_max:.0}</text>"#,
            b = h - pad,
            r = x0 + panel_w,
            t = pad - 20.0,
            name = escaped(&panel.title),
            xl = h - pad + 18.0,
            xlabel = escaped(&panel.x_label),
            yl = x0 - 4.0,
            ym = y(y_max) + 4.0,
        ));
        for (j, (label, line)) in panel.lines.iter().enumerate() {
            let colour = COLOURS[j % COLOURS.len()];
            let coords: Vec<String> = line.iter().map(|&(px, py)| format!("{:.1},{:.1}", x(px), y(py))).collect();
            out.push_str(&format!(
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/><text x="{:.1}" y="{:.1}" fill="{colour}">{}</text>"#,
                coords.join(" "),
                x0 + 10.0 + 110.0 * (j % 4) as f64,
                h - pad + 34.0 + 14.0 * (j / 4) as f64,
                escaped(label)
            ));
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_chart_draws_every_line_of_every_panel() {
        let panel = |t: &str| Panel {
            title: t.into(),
            x_label: "seconds".into(),
            lines: vec![("a".into(), vec![(0.0, 1.0), (10.0, 2.0)]), ("b<c".into(), vec![(0.0, 3.0)])],
        };
        let s = line_chart_svg("title & more", &[panel("one"), panel("two")]);
        assert_eq!(s.matches("<polyline").count(), 4, "{s}");
        assert!(s.contains("b&lt;c") && s.contains("title &amp; more"), "{s}");
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        // No points at all still gives a drawable (empty) chart.
        let empty = line_chart_svg("t", &[Panel { title: "x".into(), x_label: "s".into(), lines: Vec::new() }]);
        assert!(!empty.contains("NaN") && !empty.contains("inf"), "{empty}");
    }
}
