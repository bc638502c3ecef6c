//! `GET /metrics` of the management server, in the Prometheus text format
//! (`[mgmd] metrics_port`): the cluster as the management server sees it.
//! It holds the layout (nodes and their status, the durable epoch), the
//! cluster log's counts, and each started data node's usage as the alarms'
//! last poll found it (`watch_usage`, every 5 s), so a scrape sends nothing
//! to the data nodes.

use latsdb_net::metrics::header;
use latsdb_types::proto::{ClusterLayout, NodeId, NodeStatus, ShardMemory};
use latsdb_types::work::AbortCause;
use std::fmt::Write;

/// What a scrape shows, taken under the management server's locks.
pub struct Snapshot<'a> {
    pub layout: &'a ClusterLayout,
    pub formed: bool,
    /// Cluster log events so far, by severity: info, warning, alert.
    pub events: [u64; 3],
    pub usage: &'a [(NodeId, Vec<ShardMemory>)],
    pub backups: Backups,
    /// How often each data node started (first starts and restarts)
    /// since this server started.
    pub node_starts: &'a std::collections::BTreeMap<NodeId, u64>,
}

/// The backups run, for `/metrics`.
#[derive(Default)]
pub struct Backups {
    pub completed: u64,
    /// Failed or aborted.
    pub failed: u64,
    /// The newest completed one: its end (Unix ms), bytes and epoch.
    pub last: Option<(u64, u64, u64)>,
}

/// The metrics text of a snapshot.
pub fn render(s: &Snapshot<'_>) -> String {
    let mut out = String::new();
    header(&mut out, "latsdb_cluster_formed", "gauge", "1 once every data node the cluster needs has started.");
    let _ = writeln!(out, "latsdb_cluster_formed {}", u8::from(s.formed));
    header(&mut out, "latsdb_durable_epoch", "gauge", "The latest commit epoch every live data node has synced.");
    let _ = writeln!(out, "latsdb_durable_epoch {}", s.layout.durable_epoch.0);
    header(&mut out, "latsdb_layout_version", "gauge", "Version of the cluster layout.");
    let _ = writeln!(out, "latsdb_layout_version {}", s.layout.version);
    header(&mut out, "latsdb_data_node_started", "gauge", "1 for a started data node, 0 otherwise.");
    for d in &s.layout.datanodes {
        let started = u8::from(d.status == NodeStatus::Started);
        let _ = writeln!(
            out,
            "latsdb_data_node_started{{node=\"{}\",node_group=\"{}\"}} {started}",
            d.node_id, d.node_group
        );
    }
    header(
        &mut out,
        "latsdb_data_node_starts_total",
        "counter",
        "Times a data node started (first starts and node restarts) since the management server started.",
    );
    for d in &s.layout.datanodes {
        let starts = s.node_starts.get(&d.node_id).copied().unwrap_or(0);
        let _ = writeln!(out, "latsdb_data_node_starts_total{{node=\"{}\"}} {starts}", d.node_id);
    }
    header(
        &mut out,
        "latsdb_cluster_events_total",
        "counter",
        "Cluster log events since the management server started.",
    );
    for (severity, count) in ["info", "warning", "alert"].iter().zip(s.events) {
        let _ = writeln!(out, "latsdb_cluster_events_total{{severity=\"{severity}\"}} {count}");
    }
    render_backups(&mut out, s);
    render_usage(&mut out, s.usage);
    out
}

/// Backups: an alert on `time() - latsdb_last_backup_completed_seconds`
/// finds a cluster whose backups stopped.
fn render_backups(out: &mut String, s: &Snapshot<'_>) {
    header(out, "latsdb_backups_total", "counter", "Online backups run, by how they ended.");
    let _ = writeln!(out, "latsdb_backups_total{{result=\"completed\"}} {}", s.backups.completed);
    let _ = writeln!(out, "latsdb_backups_total{{result=\"failed\"}} {}", s.backups.failed);
    if let Some((finished_ms, bytes, epoch)) = s.backups.last {
        header(
            out,
            "latsdb_last_backup_completed_seconds",
            "gauge",
            "When the newest completed backup ended (Unix time).",
        );
        let _ = writeln!(out, "latsdb_last_backup_completed_seconds {}", finished_ms / 1000);
        header(
            out,
            "latsdb_last_backup_bytes",
            "gauge",
            "Bytes the newest completed backup wrote, over all data nodes.",
        );
        let _ = writeln!(out, "latsdb_last_backup_bytes {bytes}");
        header(out, "latsdb_last_backup_epoch", "gauge", "The epoch the newest completed backup restores.");
        let _ = writeln!(out, "latsdb_last_backup_epoch {epoch}");
    }
}

/// Per shard gauges and counters of the data nodes' last usage reports.
/// Each shard's usage and operation counts, labelled by node and shard (the
/// management server's view of every data node, and each data node's own).
pub(crate) fn render_usage(out: &mut String, usage: &[(NodeId, Vec<ShardMemory>)]) {
    type Field = fn(&ShardMemory) -> u64;
    let series: [(&str, &str, &str, Field); 17] = [
        ("latsdb_rows", "gauge", "Rows of the partition replicas a shard holds.", |m| m.rows),
        ("latsdb_data_memory_used_bytes", "gauge", "Data memory a shard uses.", |m| m.used_bytes),
        ("latsdb_data_memory_limit_bytes", "gauge", "A shard's data memory limit (0: none).", |m| m.budget_bytes),
        ("latsdb_tablespace_used_bytes", "gauge", "Bytes of live disk-column records.", |m| m.tablespace_used_bytes),
        ("latsdb_tablespace_file_bytes", "gauge", "Bytes of a shard's tablespace file.", |m| m.tablespace_bytes),
        ("latsdb_tablespace_limit_bytes", "gauge", "A shard's tablespace limit (0: none).", |m| {
            m.tablespace_limit_bytes
        }),
        ("latsdb_redo_kept_bytes", "gauge", "REDO a shard keeps for a restart.", |m| m.redo_bytes),
        ("latsdb_redo_limit_bytes", "gauge", "A shard's REDO limit (0: none).", |m| m.redo_limit_bytes),
        ("latsdb_page_cache_hits_total", "counter", "Page cache lookups that found the page.", |m| m.page_cache_hits),
        ("latsdb_page_cache_misses_total", "counter", "Page cache lookups that read the page.", |m| {
            m.page_cache_misses
        }),
        ("latsdb_key_operations_total", "counter", "Keyed reads and writes clients sent a shard.", |m| m.ops.key_ops),
        ("latsdb_scan_pages_total", "counter", "Scan pages clients asked a shard for.", |m| m.ops.scan_pages),
        ("latsdb_transactions_committed_total", "counter", "Transactions a shard coordinated that committed.", |m| {
            m.ops.committed
        }),
        ("latsdb_lock_waits_total", "counter", "Row-lock requests that had to wait.", |m| m.ops.lock_waits),
        ("latsdb_lock_wait_timeouts_total", "counter", "Row-lock waits that timed out.", |m| m.ops.lock_wait_timeouts),
        ("latsdb_checkpoints_total", "counter", "Local checkpoints a shard completed.", |m| m.ops.checkpoints),
        (
            "latsdb_redo_written_bytes_total",
            "counter",
            "Bytes a shard appended to its REDO log since it started.",
            |m| m.ops.redo_written_bytes,
        ),
    ];
    for (name, kind, help, field) in series {
        header(out, name, kind, help);
        for (node, shards) in usage {
            for shard in shards {
                let _ = writeln!(out, "{name}{{node=\"{node}\",shard=\"{}\"}} {}", shard.shard, field(shard));
            }
        }
    }
    render_work(out, usage);
}

/// Aborts by cause and the coordinators' request latency, per shard.
fn render_work(out: &mut String, usage: &[(NodeId, Vec<ShardMemory>)]) {
    let shards = || usage.iter().flat_map(|(node, shards)| shards.iter().map(move |s| (*node, s)));
    let name = "latsdb_transactions_aborted_total";
    header(out, name, "counter", "Transactions a shard coordinated that aborted, by cause.");
    for (node, s) in shards() {
        for cause in AbortCause::ALL {
            let (shard, count, cause) = (s.shard, s.ops.aborts.of(cause), cause.name());
            let _ = writeln!(out, "{name}{{node=\"{node}\",shard=\"{shard}\",cause=\"{cause}\"}} {count}");
        }
    }
    let name = "latsdb_transaction_request_seconds";
    header(
        out,
        name,
        "histogram",
        "How long a shard's coordinator took to answer a transaction request (its results, commit or abort).",
    );
    for (node, s) in shards() {
        let labels = format!("node=\"{node}\",shard=\"{}\"", s.shard);
        latsdb_net::metrics::render_latency(out, name, &labels, &s.ops.tx_request_latency);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latsdb_types::proto::{CommitEpoch, DataNodeInfo};

    #[test]
    fn a_snapshot_renders_as_prometheus_text() {
        let mut layout = ClusterLayout::builder("c")
            .datanodes(vec![
                DataNodeInfo {
                    node_id: 2,
                    node_group: 0,
                    host: "h".into(),
                    status: NodeStatus::Started,
                    shards: Vec::new(),
                    pid: 1,
                    process: 1,
                    location_domain: None,
                },
                DataNodeInfo {
                    node_id: 3,
                    node_group: 0,
                    host: "h".into(),
                    status: NodeStatus::NotStarted,
                    shards: Vec::new(),
                    pid: 0,
                    process: 0,
                    location_domain: None,
                },
            ])
            .build();
        layout.durable_epoch = CommitEpoch(42);
        let shard = ShardMemory {
            shard: 0,
            rows: 7,
            used_bytes: 100,
            budget_bytes: 1000,
            tablespace_bytes: 0,
            tablespace_used_bytes: 0,
            tablespace_limit_bytes: 0,
            page_cache_hits: 5,
            page_cache_misses: 1,
            page_waits: 0,
            pages_read_on_shard_thread: 0,
            pages_read_at_once: 0,
            partitions: Vec::new(),
            redo_bytes: 64,
            redo_limit_bytes: 128,
            ops: latsdb_types::proto::OpCounts { key_ops: 9, checkpoints: 3, ..Default::default() },
        };
        let mut shard = shard;
        shard.ops.aborts.add(AbortCause::LockWaitTimeout);
        shard.ops.tx_request_latency.record(300);
        let node_starts = [(2, 4)].into_iter().collect();
        let usage = [(2, vec![shard])];
        let snapshot = Snapshot {
            layout: &layout,
            formed: true,
            events: [5, 1, 0],
            usage: &usage,
            backups: Backups { completed: 2, failed: 1, last: Some((1_800_000_000_500, 4096, 40)) },
            node_starts: &node_starts,
        };
        let text = render(&snapshot);
        for line in [
            "latsdb_cluster_formed 1",
            "latsdb_durable_epoch 42",
            "latsdb_data_node_started{node=\"2\",node_group=\"0\"} 1",
            "latsdb_data_node_started{node=\"3\",node_group=\"0\"} 0",
            "latsdb_cluster_events_total{severity=\"warning\"} 1",
            "latsdb_rows{node=\"2\",shard=\"0\"} 7",
            "latsdb_redo_kept_bytes{node=\"2\",shard=\"0\"} 64",
            "# TYPE latsdb_page_cache_hits_total counter",
            "latsdb_page_cache_hits_total{node=\"2\",shard=\"0\"} 5",
            "latsdb_backups_total{result=\"failed\"} 1",
            "latsdb_key_operations_total{node=\"2\",shard=\"0\"} 9",
            "latsdb_last_backup_completed_seconds 1800000000",
            "latsdb_last_backup_epoch 40",
            "latsdb_data_node_starts_total{node=\"2\"} 4",
            "latsdb_data_node_starts_total{node=\"3\"} 0",
            "latsdb_checkpoints_total{node=\"2\",shard=\"0\"} 3",
            "latsdb_transactions_aborted_total{node=\"2\",shard=\"0\",cause=\"lock_wait_timeout\"} 1",
            "latsdb_transactions_aborted_total{node=\"2\",shard=\"0\",cause=\"client\"} 0",
            "latsdb_transaction_request_seconds_bucket{node=\"2\",shard=\"0\",le=\"0.00025\"} 0",
            "latsdb_transaction_request_seconds_bucket{node=\"2\",shard=\"0\",le=\"0.0005\"} 1",
            "latsdb_transaction_request_seconds_count{node=\"2\",shard=\"0\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
        }
        // Every sample belongs to a metric with HELP and TYPE lines.
        for sample in text.lines().filter(|l| !l.starts_with('#')) {
            let name = sample.split(['{', ' ']).next().unwrap_or_default();
            let histogram = ["_bucket", "_sum", "_count"].iter().find_map(|suffix| name.strip_suffix(suffix));
            let typed = |n: &str| text.contains(&format!("# TYPE {n} "));
            assert!(typed(name) || histogram.is_some_and(typed), "{name} has no TYPE line");
        }
    }
}
