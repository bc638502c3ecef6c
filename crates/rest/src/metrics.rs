//! Counters for `GET /metrics`, in the Prometheus text format.

use latsdb_net::metrics::{header, Histogram};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    PkRead,
    PkWrite,
    PkDelete,
    Batch,
    FeatureStore,
    BatchFeatureStore,
    FeatureView,
    Health,
    Ping,
    Metrics,
    OpenApi,
    Other,
}

const ENDPOINTS: [Endpoint; 12] = [
    Endpoint::PkRead,
    Endpoint::PkWrite,
    Endpoint::PkDelete,
    Endpoint::Batch,
    Endpoint::FeatureStore,
    Endpoint::BatchFeatureStore,
    Endpoint::FeatureView,
    Endpoint::Health,
    Endpoint::Ping,
    Endpoint::Metrics,
    Endpoint::OpenApi,
    Endpoint::Other,
];

impl Endpoint {
    fn label(self) -> &'static str {
        match self {
            Endpoint::PkRead => "pk-read",
            Endpoint::PkWrite => "pk-write",
            Endpoint::PkDelete => "pk-delete",
            Endpoint::Batch => "batch",
            Endpoint::FeatureStore => "feature_store",
            Endpoint::BatchFeatureStore => "batch_feature_store",
            Endpoint::FeatureView => "feature_view",
            Endpoint::Health => "health",
            Endpoint::Ping => "ping",
            Endpoint::Metrics => "metrics",
            Endpoint::OpenApi => "openapi",
            Endpoint::Other => "other",
        }
    }
}

/// Status classes counted per endpoint: 2xx, 4xx, 5xx.
const CLASSES: [&str; 3] = ["2xx", "4xx", "5xx"];

#[derive(Default)]
pub struct Metrics {
    requests: [[AtomicU64; 3]; 12],
    latency: Histogram,
    /// Key operations executed inside requests, by outcome.
    pub ops_ok: AtomicU64,
    pub ops_not_found: AtomicU64,
    pub ops_failed: AtomicU64,
}

impl Metrics {
    pub fn record(&self, endpoint: Endpoint, status: u16, micros: u64) {
        let class = match status {
            0..=399 => 0,
            400..=499 => 1,
            _ => 2,
        };
        let index = ENDPOINTS.iter().position(|&e| e == endpoint).unwrap_or(ENDPOINTS.len() - 1);
        self.requests[index][class].fetch_add(1, Ordering::Relaxed);
        self.latency.record(micros);
    }

    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        out.push_str("# HELP latsdb_rest_requests_total HTTP requests answered, by endpoint and status class.\n");
        out.push_str("# TYPE latsdb_rest_requests_total counter\n");
        for (e, endpoint) in ENDPOINTS.iter().enumerate() {
            for (c, class) in CLASSES.iter().enumerate() {
                let n = self.requests[e][c].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "latsdb_rest_requests_total{{endpoint=\"{}\",status=\"{class}\"}} {n}",
                    endpoint.label()
                );
            }
        }
        out.push_str("# HELP latsdb_rest_key_operations_total Primary-key operations inside requests, by outcome.\n");
        out.push_str("# TYPE latsdb_rest_key_operations_total counter\n");
        for (label, counter) in [("ok", &self.ops_ok), ("not_found", &self.ops_not_found), ("failed", &self.ops_failed)]
        {
            let _ = writeln!(
                out,
                "latsdb_rest_key_operations_total{{outcome=\"{label}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        header(&mut out, "latsdb_rest_request_seconds", "histogram", "Time from a request's arrival to its answer.");
        self.latency.render(&mut out, "latsdb_rest_request_seconds", "");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_up_in_the_text_format() {
        let m = Metrics::default();
        m.record(Endpoint::Batch, 200, 300);
        m.record(Endpoint::Batch, 404, 3_000_000);
        let text = m.render();
        assert!(text.contains("latsdb_rest_requests_total{endpoint=\"batch\",status=\"2xx\"} 1"), "{text}");
        assert!(text.contains("latsdb_rest_requests_total{endpoint=\"batch\",status=\"4xx\"} 1"));
        assert!(text.contains("latsdb_rest_request_seconds_bucket{le=\"0.0005\"} 1"));
        assert!(text.contains("latsdb_rest_request_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("latsdb_rest_request_seconds_count 2"));
    }
}
