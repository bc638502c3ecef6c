//! The SQL node's counters for `GET /metrics` (`latsdb sql --metrics-port`):
//! connections, and statements by kind with their errors and latencies.
//! Shared by every worker thread of the node and updated without a lock.

use latsdb_net::metrics::{header, Histogram};
use sqlparser::ast::Statement;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Statement kinds counted apart, as their metric label.
const KINDS: [&str; 7] = ["select", "insert", "update", "delete", "ddl", "transaction", "other"];

/// The kind of `stmt`: an index into `KINDS`.
fn kind_of(stmt: &Statement) -> usize {
    match stmt {
        Statement::Query(_) => 0,
        Statement::Insert(_) => 1,
        Statement::Update(_) => 2,
        Statement::Delete(_) => 3,
        Statement::CreateTable(_)
        | Statement::CreateIndex(_)
        | Statement::CreateDatabase { .. }
        | Statement::AlterTable(_)
        | Statement::Drop { .. }
        | Statement::Truncate(_)
        | Statement::RenameTable(_) => 4,
        Statement::StartTransaction { .. }
        | Statement::Commit { .. }
        | Statement::Rollback { .. }
        | Statement::Savepoint { .. }
        | Statement::ReleaseSavepoint { .. } => 5,
        _ => 6,
    }
}

#[derive(Default)]
pub struct SqlMetrics {
    connections_total: AtomicU64,
    connections_open: AtomicI64,
    statements: [AtomicU64; KINDS.len()],
    errors: [AtomicU64; KINDS.len()],
    latency: [Histogram; KINDS.len()],
}

impl SqlMetrics {
    /// A client connected; `disconnected` must follow when it leaves.
    pub fn connected(&self) {
        self.connections_total.fetch_add(1, Ordering::Relaxed);
        self.connections_open.fetch_add(1, Ordering::Relaxed);
    }

    pub fn disconnected(&self) {
        let before = self.connections_open.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a connection left that never arrived");
    }

    /// A statement ran for `micros`, and failed when `failed`.
    pub fn statement(&self, stmt: &Statement, micros: u64, failed: bool) {
        let kind = kind_of(stmt);
        self.statements[kind].fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors[kind].fetch_add(1, Ordering::Relaxed);
        }
        self.latency[kind].record(micros);
    }

    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        header(&mut out, "latsdb_sql_connections_total", "counter", "Client connections accepted.");
        let _ = writeln!(out, "latsdb_sql_connections_total {}", self.connections_total.load(Ordering::Relaxed));
        header(&mut out, "latsdb_sql_connections", "gauge", "Client connections open now.");
        let _ = writeln!(out, "latsdb_sql_connections {}", self.connections_open.load(Ordering::Relaxed).max(0));
        let per_kind = [
            ("latsdb_sql_statements_total", "Statements run, by kind.", &self.statements),
            ("latsdb_sql_statement_errors_total", "Statements answered with an error, by kind.", &self.errors),
        ];
        for (name, help, counters) in per_kind {
            header(&mut out, name, "counter", help);
            for (kind, counter) in KINDS.iter().zip(counters) {
                let _ = writeln!(out, "{name}{{kind=\"{kind}\"}} {}", counter.load(Ordering::Relaxed));
            }
        }
        let name = "latsdb_sql_statement_seconds";
        header(&mut out, name, "histogram", "Time a statement took on the SQL node, from parsed to answered, by kind.");
        for (kind, histogram) in KINDS.iter().zip(&self.latency) {
            histogram.render(&mut out, name, &format!("kind=\"{kind}\""));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_counted_by_kind_with_errors_and_latency() {
        let m = SqlMetrics::default();
        let parsed = crate::parse::parse("SELECT 1; UPDATE t SET a = 1; BEGIN; SET @x = 1").unwrap();
        for (stmt, micros) in parsed.statements.iter().zip([300, 2_000, 50, 10]) {
            m.statement(stmt, micros, micros == 2_000);
        }
        m.connected();
        let text = m.render();
        for line in [
            "latsdb_sql_connections 1\n",
            "latsdb_sql_statements_total{kind=\"select\"} 1\n",
            "latsdb_sql_statements_total{kind=\"update\"} 1\n",
            "latsdb_sql_statements_total{kind=\"transaction\"} 1\n",
            "latsdb_sql_statements_total{kind=\"other\"} 1\n",
            "latsdb_sql_statement_errors_total{kind=\"update\"} 1\n",
            "latsdb_sql_statement_errors_total{kind=\"select\"} 0\n",
            "latsdb_sql_statement_seconds_bucket{kind=\"select\",le=\"0.0005\"} 1\n",
            "latsdb_sql_statement_seconds_count{kind=\"update\"} 1\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        m.disconnected();
        assert!(m.render().contains("latsdb_sql_connections 0\n"));
    }
}
