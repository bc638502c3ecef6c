//! The SQL node driven by real MySQL clients against `latsdb start`:
//! sysbench (every OLTP workload, prepared and text protocol) with the rows
//! checked afterwards, and Debian's mariadb command-line client running a
//! script with expected output and a script of statements that must fail
//! with MySQL's error codes. `scripts/install-deps.sh` installs both tools.

mod common;

use common::{host_port, mariadb, run_bounded, TestCluster};
use std::process::Command;
use std::time::Duration;

fn query_one_row(cluster: &TestCluster, sql: &str) -> Vec<String> {
    let (ok, out, err) = mariadb(cluster, &["--skip-column-names", "sbtest"], sql);
    assert!(ok, "{sql} failed: {err}");
    out.lines().next().unwrap_or_default().split('\t').map(str::to_string).collect()
}

fn count_and_sum(cluster: &TestCluster) -> (i64, i64) {
    let row = query_one_row(cluster, "SELECT COUNT(*), SUM(k) FROM sbtest1");
    let n = |s: &String| s.parse::<i64>().unwrap_or_else(|_| panic!("not a number: {row:?}"));
    (n(&row[0]), n(&row[1]))
}

fn sysbench(cluster: &TestCluster, workload: &str, command: &str, ps_mode: &str) -> String {
    let (host, port) = host_port(cluster);
    let mut cmd = Command::new("sysbench");
    cmd.args([
        workload,
        "--db-driver=mysql",
        &format!("--mysql-host={host}"),
        &format!("--mysql-port={port}"),
        "--mysql-user=root",
        "--mysql-db=sbtest",
        "--tables=1",
        "--table-size=5000",
        &format!("--db-ps-mode={ps_mode}"),
        "--threads=4",
        "--time=3",
        command,
    ]);
    let (status, out, err) = run_bounded(&mut cmd, None, Duration::from_secs(120));
    assert!(status.success(), "sysbench {workload} {command} --db-ps-mode={ps_mode} failed:\n{out}\n{err}");
    out
}

/// "transactions: N" and "ignored errors: N" of a sysbench run.
fn sysbench_counts(out: &str) -> (i64, i64) {
    let field = |name: &str| -> i64 {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no '{name}' in sysbench output:\n{out}"))
    };
    (field("transactions:"), field("ignored errors:"))
}

#[test]
fn sysbench_workloads_run_in_both_statement_modes_and_leave_consistent_rows() {
    let cluster = TestCluster::start(&[]);
    let (ok, _, err) = mariadb(&cluster, &[], "CREATE DATABASE sbtest");
    assert!(ok, "{err}");
    for ps_mode in ["auto", "disable"] {
        for workload in [
            "oltp_read_write",
            "oltp_read_only",
            "oltp_point_select",
            "oltp_insert",
            "oltp_update_index",
            "oltp_delete",
        ] {
            sysbench(&cluster, workload, "prepare", ps_mode);
            let (rows, sum) = count_and_sum(&cluster);
            assert_eq!(rows, 5000, "{workload}: prepare loaded {rows} rows");
            let max_id = query_one_row(&cluster, "SELECT MAX(id), MIN(id) FROM sbtest1");
            assert_eq!(max_id, ["5000", "1"], "{workload}: AUTO_INCREMENT gave ids 1..=5000");
            let out = sysbench(&cluster, workload, "run", ps_mode);
            let (transactions, ignored) = sysbench_counts(&out);
            assert!(transactions > 0, "{workload} ({ps_mode}) ran no transaction:\n{out}");
            let (rows_after, sum_after) = count_and_sum(&cluster);
            match workload {
                // Each event inserts one row with a fresh AUTO_INCREMENT id.
                "oltp_insert" => assert_eq!(rows_after, rows + transactions - ignored, "{workload} ({ps_mode})"),
                // Each event adds 1 to k of one existing row.
                "oltp_update_index" => {
                    assert_eq!(rows_after, rows, "{workload} ({ps_mode})");
                    assert_eq!(sum_after, sum + transactions - ignored, "{workload} ({ps_mode}): SUM(k)");
                }
                "oltp_read_only" | "oltp_point_select" => {
                    assert_eq!((rows_after, sum_after), (rows, sum), "{workload} ({ps_mode}) changed rows")
                }
                // Each event deletes one random id (some twice): at most one
                // row per transaction disappears.
                "oltp_delete" => {
                    let deleted = rows - rows_after;
                    assert!(
                        deleted > 0 && deleted <= transactions,
                        "{workload} ({ps_mode}): {deleted} rows gone after {transactions} deletes"
                    );
                }
                // Deletes are followed by inserts of the same ids inside one
                // transaction: the count never changes.
                _ => assert_eq!(rows_after, rows, "{workload} ({ps_mode})"),
            }
            eprintln!("{workload} --db-ps-mode={ps_mode}: {transactions} transactions, {ignored} ignored errors");
            sysbench(&cluster, workload, "cleanup", ps_mode);
            let (ok, _, err) = mariadb(&cluster, &["sbtest"], "SELECT * FROM sbtest1");
            assert!(!ok && err.contains("1146"), "cleanup left the table behind: {err}");
        }
    }
}

#[test]
fn the_mysql_cli_runs_a_script_with_the_expected_output() {
    let cluster = TestCluster::start(&[]);
    let script = include_str!("sql/cli_script.sql");
    let (ok, out, err) = mariadb(&cluster, &[], script);
    assert!(ok, "the script failed:\n{err}\noutput so far:\n{out}");
    let expected = include_str!("sql/cli_expected.txt");
    if out != expected {
        for (i, (got, want)) in out.lines().zip(expected.lines()).enumerate() {
            assert_eq!(got, want, "line {} of the output differs", i + 1);
        }
        assert_eq!(out.lines().count(), expected.lines().count(), "output has a different number of lines:\n{out}");
    }
}

#[test]
fn errors_carry_mysql_codes_and_the_session_stays_usable() {
    let cluster = TestCluster::start(&[]);
    let (_, out, err) = mariadb(&cluster, &["--force"], include_str!("sql/errors_script.sql"));
    let codes: Vec<&str> =
        err.lines().filter_map(|l| l.strip_prefix("ERROR ")).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(
        codes,
        [
            "1064", "1146", "1054", "1062", "1406", "1048", "1366", "1364", "1136", "1050", "1049", "1193", "1305",
            "1075", "1242", "1235", "1241", "1222", "1222", "1248", "1060", "3636", "1060", "1292", "1235", "1235",
            "1054", "1305", "1062", "1062", "1062", "1062", "1062", "1060", "1235", "1235", "1050", "1049", "1146",
            "1062", "3593", "1072", "1091", "1054", "1221", "3685", "3686", "1690", "1273", "1253", "1115", "1235",
            "1062", "1062", "1062", "1062", "1062", "1292", "1292", "1166", "1054", "1054", "1072", "1054", "1166",
            "1113", "1072", "1146", "1292", "1292", "1089", "1089", "1105", "1105", "1235",
        ],
        "error codes, in statement order:\n{err}"
    );
    // A duplicate is named by the value written, not the stored one's nor
    // its collation weight ('Creme' against a stored 'crème').
    for message in [
        "Duplicate entry 'Creme' for key 'ci.PRIMARY'",
        "Duplicate entry 'BOB' for key 'ci.un'",
        "Duplicate entry 'ANN' for key 'ci.un'",
        "Duplicate entry 'CREME' for key 'ci.PRIMARY'",
        "Duplicate entry 'CRÈME' for key 'ci.PRIMARY'",
    ] {
        assert!(err.contains(message), "expected {message:?} among the errors:\n{err}");
    }
    assert!(err.contains("ERROR 1062 (23000)"), "duplicate keys carry SQLSTATE 23000:\n{err}");
    assert!(
        err.contains("refers to the outer query is supported only as"),
        "a correlated subquery says what works:\n{err}"
    );
    assert_eq!(
        out, "id\tv\tn\n1\ta\t1\n9\tn\t9\nid\te\n1\ta\n2\tb\n4\td\n",
        "after the errors the session still answers, no failed insert left a row, and a duplicate inside a transaction failed only its statement"
    );
}

#[test]
fn clients_may_switch_to_tls_with_the_configured_certificate() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (cert, key) = common::self_signed_certificate(dir.path());
    let cluster = TestCluster::start(&[
        "--sql-tls-cert",
        cert.to_str().expect("utf-8 path"),
        "--sql-tls-key",
        key.to_str().expect("utf-8 path"),
    ]);
    // With TLS the client reports the cipher and the server sees it too.
    let (ok, out, err) =
        mariadb(&cluster, &["--ssl", "--ssl-verify-server-cert=0"], "status; SHOW STATUS LIKE 'Ssl_cipher';");
    assert!(ok, "{err}");
    assert!(out.contains("Cipher in use is TLS"), "the client did not use TLS:\n{out}");
    assert!(out.lines().any(|l| l.starts_with("Ssl_cipher\tTLS")), "the server saw no TLS cipher:\n{out}");
    // TLS is offered, not required: a plain connection still works.
    let (ok, out, err) = mariadb(&cluster, &["--skip-ssl", "--skip-column-names"], "SHOW STATUS LIKE 'Ssl_cipher';");
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "Ssl_cipher", "a plain connection reports no cipher: {out:?}");
}
