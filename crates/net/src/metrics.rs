//! What every process's `GET /metrics` shares: the Prometheus text format's
//! HELP/TYPE lines, a latency histogram of atomic counters, and a small
//! HTTP server that answers `GET /metrics` with whatever its render
//! function returns (the management server, the data nodes and the SQL
//! node serve it on a port of their own; the REST node answers it on its
//! HTTP port).

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::convert::Infallible;
use std::fmt::Write;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One metric's HELP and TYPE lines.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

pub use latsdb_types::work::{LatencyCounts, LATENCY_BUCKETS_US};

/// A latency histogram in seconds (`_bucket`, `_sum`, `_count`), recorded
/// from any thread without a lock.
#[derive(Default)]
pub struct Histogram {
    /// Per bucket, the observations at most its bound and above the one
    /// before (made cumulative when rendered).
    buckets: [AtomicU64; LATENCY_BUCKETS_US.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn record(&self, micros: u64) {
        if let Some(bucket) = LATENCY_BUCKETS_US.iter().position(|&b| micros <= b) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(micros, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The series of metric `name` with `labels` (`key="value",...` or
    /// empty); the caller writes the header once per metric.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut snapshot = LatencyCounts::default();
        for (to, from) in snapshot.buckets.iter_mut().zip(&self.buckets) {
            *to = from.load(Ordering::Relaxed);
        }
        // Read after the buckets: a count never below their sum.
        snapshot.count = self.count().max(snapshot.buckets.iter().sum());
        snapshot.sum_us = self.sum_us.load(Ordering::Relaxed);
        render_latency(out, name, labels, &snapshot);
    }
}

/// The `_bucket`, `_sum` and `_count` series of a latency histogram in
/// seconds, metric `name` with `labels` (`key="value",...` or empty); the
/// caller writes the header once per metric.
pub fn render_latency(out: &mut String, name: &str, labels: &str, latency: &LatencyCounts) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0;
    for (bound, count) in LATENCY_BUCKETS_US.iter().zip(&latency.buckets) {
        cumulative += count;
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{}\"}} {cumulative}", *bound as f64 / 1e6);
    }
    let count = latency.count.max(cumulative);
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
    let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
    let _ = writeln!(out, "{name}_sum{braces} {}", latency.sum_us as f64 / 1e6);
    let _ = writeln!(out, "{name}_count{braces} {count}");
}

/// Serves `GET /metrics` on `listener` until the process ends; each scrape
/// gets the text `render` makes then. `who` names the process in errors.
pub async fn serve<F, Fut>(listener: TcpListener, who: &'static str, render: F)
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = String> + Send,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper::service::service_fn(move |request| answer(who, render.clone(), request));
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(Duration::from_secs(30));
            // A scraper that goes away mid-request is not an error of ours.
            let _ = builder.serve_connection(io, service).await;
        });
    }
}

async fn answer<F, Fut>(
    who: &'static str,
    render: F,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible>
where
    F: Fn() -> Fut,
    Fut: Future<Output = String>,
{
    let (status, body) = if request.uri().path() != "/metrics" {
        (404, format!("not found: the {who} serves GET /metrics only\n"))
    } else if request.method() != hyper::Method::GET {
        (405, "use GET for /metrics\n".to_string())
    } else {
        (200, render().await)
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(CONTENT_TYPE));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_renders_cumulative_buckets_sum_and_count() {
        let h = Histogram::default();
        for us in [50, 300, 300, 20_000_000] {
            h.record(us);
        }
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "kind=\"a\"");
        assert!(out.contains("x_seconds_bucket{kind=\"a\",le=\"0.0001\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{kind=\"a\",le=\"0.0005\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{kind=\"a\",le=\"10\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{kind=\"a\",le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_sum{kind=\"a\"} 20.00065\n"), "{out}");
        assert!(out.contains("x_seconds_count{kind=\"a\"} 4\n"), "{out}");
        let mut bare = String::new();
        Histogram::default().render(&mut bare, "y_seconds", "");
        assert!(bare.contains("y_seconds_bucket{le=\"+Inf\"} 0\n") && bare.contains("y_seconds_count 0\n"), "{bare}");
    }
}
