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
            "1075", "1242", "1235", "1241", "1222", "1222", "1248", "1060", "3636", "1060", "1292", "1054", "1235",
            "1054", "1305", "1062", "1062", "1062", "1062", "1062", "1060", "1366", "1235", "1050", "1049", "1146",
            "1062", "3593", "1072", "1091", "1054", "1221", "3685", "3686", "1690", "1273", "1253", "1115", "1273",
            "1062", "1062", "1062", "1062", "1062", "1292", "1292", "1166", "1054", "1054", "1072", "1054", "1166",
            "1113", "1072", "1146", "1292", "1292", "1089", "1089", "1105", "1105", "1105",
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

/// Runs statements that must succeed and returns their rows (no headers).
fn rows_of(cluster: &TestCluster, sql: &str) -> Vec<Vec<String>> {
    let (ok, out, err) = mariadb(cluster, &["--skip-column-names", "clock"], sql);
    assert!(ok, "{sql} failed: {err}");
    out.lines().map(|l| l.split('\t').map(str::to_string).collect()).collect()
}

/// The error code a statement fails with.
fn error_code(cluster: &TestCluster, sql: &str) -> String {
    let (ok, _, err) = mariadb(cluster, &["clock"], sql);
    assert!(!ok, "{sql} should have failed");
    let line = err.lines().find_map(|l| l.strip_prefix("ERROR ")).unwrap_or_default();
    line.split_whitespace().next().unwrap_or_default().to_string()
}

#[test]
fn current_timestamp_columns_take_the_time_on_insert_and_on_change() {
    let cluster = TestCluster::start(&[]);
    let (ok, _, err) = mariadb(
        &cluster,
        &[],
        "CREATE DATABASE clock; CREATE TABLE clock.t (id INT PRIMARY KEY, \
         ts DATETIME DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, \
         ts6 DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6), d3 DATETIME(3), v INT)",
    );
    assert!(ok, "{err}");
    let create = rows_of(&cluster, "SHOW CREATE TABLE t");
    assert_eq!(
        create[0][1],
        "CREATE TABLE `t` (\\n  `id` int NOT NULL,\\n  `ts` datetime DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\\n  `ts6` datetime(6) DEFAULT CURRENT_TIMESTAMP(6),\\n  `d3` datetime(3) DEFAULT NULL,\\n  `v` int DEFAULT NULL,\\n  PRIMARY KEY (`id`)\\n) ENGINE=ndbcluster DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    );
    // What SHOW CREATE TABLE prints creates the same table again.
    let again = create[0][1].replace("\\n", "\n").replace("CREATE TABLE `t`", "CREATE TABLE `u`");
    rows_of(&cluster, &again);
    assert_eq!(rows_of(&cluster, "SHOW CREATE TABLE u")[0][1], create[0][1].replace("`t`", "`u`"));
    assert_eq!(
        rows_of(&cluster, "SELECT column_name, column_default, extra, datetime_precision, column_type FROM information_schema.columns WHERE table_schema = 'clock' AND table_name = 't' ORDER BY ordinal_position"),
        [
            vec!["id", "NULL", "", "NULL", "int"],
            vec!["ts", "CURRENT_TIMESTAMP", "DEFAULT_GENERATED on update CURRENT_TIMESTAMP", "0", "datetime"],
            vec!["ts6", "CURRENT_TIMESTAMP(6)", "DEFAULT_GENERATED", "6", "datetime(6)"],
            vec!["d3", "NULL", "", "3", "datetime(3)"],
            vec!["v", "NULL", "", "NULL", "int"],
        ]
    );

    // An INSERT that leaves the columns out (or says DEFAULT) gets the time:
    // whole seconds in a DATETIME, microseconds in a DATETIME(6); a value
    // written to a DATETIME(3) is rounded to milliseconds.
    let inserted = rows_of(
        &cluster,
        "SELECT NOW(6); INSERT INTO t (id, v, d3) VALUES (1, 1, '2024-01-01 10:00:00.12345'); \
         INSERT INTO t VALUES (2, DEFAULT, DEFAULT, '2024-01-01 10:00:00.9996', 2); SELECT NOW(6); \
         SELECT id, ts, ts6, d3, MICROSECOND(ts) FROM t ORDER BY id",
    );
    let (before, after) = (&inserted[0][0], &inserted[1][0]);
    for row in &inserted[2..] {
        assert!(row[1].len() == 19 && row[1] <= *after && row[1].as_str() >= &before[..19], "{inserted:?}");
        assert!(row[2] >= *before && row[2] <= *after, "ts6 between the two NOW(6): {inserted:?}");
        assert_eq!(row[4], "0", "a DATETIME keeps no fraction: {inserted:?}");
    }
    assert_eq!(
        (inserted[2][3].as_str(), inserted[3][3].as_str()),
        ("2024-01-01 10:00:00.123", "2024-01-01 10:00:01.000"),
        "a DATETIME(3) shows its three digits, as MySQL"
    );
    assert_eq!(rows_of(&cluster, "SELECT MICROSECOND(NOW()), MICROSECOND(CURRENT_TIMESTAMP)"), [["0", "0"]]);

    // ON UPDATE takes the time only when the row changes. Wait (polling)
    // until the clock's second has moved past the inserted one.
    let ts = inserted[2][1].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while rows_of(&cluster, "SELECT NOW()")[0][0] <= ts {
        assert!(std::time::Instant::now() < deadline, "the clock did not move past {ts}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after_update = rows_of(
        &cluster,
        "UPDATE t SET v = 1 WHERE id = 1; UPDATE t SET v = 20 WHERE id = 2; \
         SELECT id, ts > (SELECT MIN(ts6) FROM t) FROM t ORDER BY id",
    );
    assert_eq!(after_update, [["1", "0"], ["2", "1"]], "only the changed row has a new time");
    let upserted = rows_of(
        &cluster,
        "INSERT INTO t (id, v) VALUES (1, 5) ON DUPLICATE KEY UPDATE v = v + 1; SELECT v, ts > ts6 FROM t WHERE id = 1",
    );
    assert_eq!(upserted, [["2", "1"]], "ON DUPLICATE KEY UPDATE changed the row, so its time too");

    // ALTER TABLE changes a column's clock; only temporal columns take one.
    rows_of(&cluster, "ALTER TABLE t ALTER COLUMN d3 SET DEFAULT CURRENT_TIMESTAMP(3); INSERT INTO t (id) VALUES (3)");
    assert_eq!(rows_of(&cluster, "SELECT d3 IS NOT NULL, ts6 IS NOT NULL FROM t WHERE id = 3"), [["1", "1"]]);
    // One time for every row of a statement.
    rows_of(&cluster, "INSERT INTO t (id) VALUES (10), (11), (12), (13)");
    assert_eq!(rows_of(&cluster, "SELECT COUNT(DISTINCT ts6) FROM t WHERE id >= 10"), [["1"]]);
    // A key of more digits than the column keeps matches no stored value.
    rows_of(
        &cluster,
        "CREATE TABLE k (at DATETIME PRIMARY KEY, v INT); INSERT INTO k VALUES ('2024-01-01 10:00:01', 1)",
    );
    assert!(rows_of(&cluster, "SELECT v FROM k WHERE at = '2024-01-01 10:00:00.6'").is_empty());
    rows_of(&cluster, "DELETE FROM k WHERE at = '2024-01-01 10:00:00.6'");
    assert_eq!(rows_of(&cluster, "SELECT v FROM k WHERE at = '2024-01-01 10:00:01'"), [["1"]]);
    assert_eq!(error_code(&cluster, "INSERT INTO k VALUES ('9999-12-31 23:59:59.7', 2)"), "1292");
    assert_eq!(error_code(&cluster, "CREATE TABLE e (id INT PRIMARY KEY, n INT DEFAULT NOW())"), "1067");
    assert_eq!(error_code(&cluster, "CREATE TABLE e (id INT PRIMARY KEY, n INT ON UPDATE NOW())"), "1294");
    assert_eq!(error_code(&cluster, "CREATE TABLE e (id INT PRIMARY KEY, d DATETIME(7))"), "1426");
    assert_eq!(error_code(&cluster, "SELECT NOW(7)"), "1426");
    // More digits of a second: the table is copied, every value kept.
    let before = rows_of(&cluster, "SELECT COUNT(*), COUNT(d3), MAX(d3) FROM t");
    rows_of(&cluster, "ALTER TABLE t MODIFY d3 DATETIME(6)");
    let after = rows_of(&cluster, "SELECT COUNT(*), COUNT(d3), MAX(d3) FROM t");
    assert_eq!(after[0][..2], before[0][..2], "{after:?}");
    assert!(after[0][2].starts_with(&before[0][2]) && after[0][2].ends_with("000"), "{before:?} {after:?}");
}

#[test]
fn an_autocommit_write_by_key_is_one_round_trip_to_the_data_nodes() {
    let cluster = TestCluster::start(&[]);
    let (ok, _, err) = mariadb(
        &cluster,
        &[],
        "CREATE DATABASE clock; CREATE TABLE clock.t (id INT PRIMARY KEY, v INT, s VARCHAR(10)); \
         INSERT INTO clock.t VALUES (1, 1, 'a'), (2, 2, 'b')",
    );
    assert!(ok, "{err}");
    // Each statement between two readings of the counter, in one session.
    let requests = |statement: &str| -> i64 {
        let script = format!(
            "SHOW STATUS LIKE 'Latsdb_data_node_requests'; {statement}; SHOW STATUS LIKE 'Latsdb_data_node_requests'"
        );
        let rows = rows_of(&cluster, &script);
        let counts: Vec<i64> = rows
            .iter()
            .filter(|r| r[0] == "Latsdb_data_node_requests")
            .map(|r| r[1].parse().unwrap_or_else(|_| panic!("not a number: {rows:?}")))
            .collect();
        assert_eq!(counts.len(), 2, "{rows:?}");
        counts[1] - counts[0]
    };
    assert_eq!(requests("UPDATE t SET v = v + 1 WHERE id = 1"), 1, "an UPDATE by key sends its write with the commit");
    assert_eq!(
        requests("UPDATE t SET s = CONCAT(s, 'x') WHERE id = 2"),
        2,
        "a read under lock, then the write with the commit"
    );
    assert_eq!(requests("INSERT INTO t VALUES (3, 3, 'c')"), 1, "an INSERT sends its row with the commit");
    assert_eq!(requests("DELETE FROM t WHERE id = 3"), 1, "a DELETE by key sends its delete with the commit");
    assert_eq!(requests("SELECT * FROM t WHERE id = 1"), 1, "a committed read by key goes to one replica");
    assert_eq!(
        rows_of(&cluster, "SELECT id, v, s FROM t ORDER BY id"),
        [["1", "2", "a"], ["2", "2", "bx"]],
        "every write committed"
    );
}

#[test]
fn explain_shows_the_access_path_in_mysqls_columns() {
    let cluster = TestCluster::start(&[]);
    let mut setup = String::from(
        "CREATE DATABASE clock; USE clock; \
         CREATE TABLE t (id INT PRIMARY KEY, a INT, s VARCHAR(10), KEY ka (a), UNIQUE KEY us (s)); \
         CREATE TABLE u (id INT PRIMARY KEY, t_id INT);",
    );
    for i in 1..=20 {
        setup.push_str(&format!("INSERT INTO t VALUES ({i}, {}, 's{i}'); INSERT INTO u VALUES ({i}, {i});", i % 5));
    }
    let (ok, _, err) = mariadb(&cluster, &[], &setup);
    assert!(ok, "{err}");
    // id, select_type, table, partitions, type, possible_keys, key, key_len, ref, rows, filtered, Extra
    let explain = |sql: &str| -> Vec<Vec<String>> {
        rows_of(&cluster, &format!("EXPLAIN {sql}"))
            .into_iter()
            .map(|r| {
                assert_eq!(r.len(), 12, "twelve columns: {r:?}");
                assert_eq!((r[0].as_str(), r[10].as_str()), ("1", "100.00"));
                [1, 2, 4, 6, 7, 8, 9, 11].iter().map(|&i| r[i].clone()).collect()
            })
            .collect()
    };
    let row = |v: [&str; 8]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let point = rows_of(&cluster, "EXPLAIN SELECT * FROM t WHERE id = 5");
    assert!(point[0][3].starts_with('p') && !point[0][3].contains(','), "one partition: {point:?}");
    assert_eq!(
        explain("SELECT * FROM t WHERE id = 5"),
        [row(["SIMPLE", "t", "const", "PRIMARY", "4", "const", "1", "NULL"])]
    );
    assert_eq!(
        explain("SELECT * FROM t WHERE id IN (1, 2, 3)"),
        [row(["SIMPLE", "t", "range", "PRIMARY", "4", "NULL", "3", "NULL"])]
    );
    assert_eq!(explain("SELECT * FROM t WHERE a = 3"), [row(["SIMPLE", "t", "ref", "ka", "5", "const", "4", "NULL"])]);
    assert_eq!(explain("SELECT * FROM t WHERE a > 2"), [row(["SIMPLE", "t", "range", "ka", "5", "NULL", "8", "NULL"])]);
    assert_eq!(
        explain("SELECT * FROM t WHERE s = 's7'"),
        [row(["SIMPLE", "t", "const", "us", "43", "const", "1", "NULL"])]
    );
    assert_eq!(explain("SELECT * FROM t"), [row(["SIMPLE", "t", "ALL", "NULL", "NULL", "NULL", "20", "NULL"])]);
    assert_eq!(
        explain("SELECT * FROM t ORDER BY id LIMIT 3"),
        [row(["SIMPLE", "t", "index", "PRIMARY", "NULL", "NULL", "3", "NULL"])]
    );
    assert_eq!(
        explain("SELECT * FROM t ORDER BY s DESC"),
        [row(["SIMPLE", "t", "ALL", "NULL", "NULL", "NULL", "20", "Using filesort"])]
    );
    let filtered = explain("SELECT * FROM t WHERE a + id > 3");
    assert_eq!(filtered[0][..7], row(["SIMPLE", "t", "ALL", "NULL", "NULL", "NULL", "20", ""])[..7]);
    assert!(filtered[0][7].starts_with("Using"), "the condition is named: {filtered:?}");
    assert_eq!(
        explain("SELECT * FROM u JOIN t ON t.id = u.t_id"),
        [
            row(["SIMPLE", "u", "ALL", "NULL", "NULL", "NULL", "20", "NULL"]),
            row(["SIMPLE", "t", "eq_ref", "PRIMARY", "4", "clock.u.t_id", "1", "NULL"]),
        ]
    );
    assert_eq!(
        explain("UPDATE t SET a = 1 WHERE id = 2"),
        [row(["UPDATE", "t", "const", "PRIMARY", "4", "const", "1", "NULL"])]
    );
    // (A locking read checks its range condition again on the SQL node.)
    assert_eq!(
        explain("DELETE FROM t WHERE a = 3"),
        [row(["DELETE", "t", "ref", "ka", "5", "const", "4", "Using where"])]
    );
    assert_eq!(
        explain("INSERT INTO t VALUES (30, 1, 'x')"),
        [row(["INSERT", "t", "ALL", "NULL", "NULL", "NULL", "NULL", "NULL"])]
    );
    // EXPLAIN wrote nothing.
    assert_eq!(rows_of(&cluster, "SELECT COUNT(*), SUM(a) FROM t"), [["20", "40"]]);
    // Row counts from the data nodes (each partition once, not per replica).
    assert_eq!(
        rows_of(&cluster, "SELECT table_name, table_rows, data_length > 0, avg_row_length > 0 FROM information_schema.tables WHERE table_schema = 'clock' ORDER BY table_name"),
        [["t", "20", "1", "1"], ["u", "20", "1", "1"]]
    );
    let status = rows_of(&cluster, "SHOW TABLE STATUS");
    assert_eq!(
        status.iter().map(|r| (r[0].as_str(), r[4].as_str())).collect::<Vec<_>>(),
        [("t", "20"), ("u", "20")],
        "{status:?}"
    );

    let (ok, out, err) = mariadb(
        &cluster,
        &["--raw", "--skip-column-names", "clock"],
        "EXPLAIN FORMAT=JSON SELECT * FROM t WHERE a = 3",
    );
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let table = &doc["query_block"]["table"];
    assert_eq!(
        (table["table_name"].as_str(), table["access_type"].as_str(), table["key"].as_str()),
        (Some("t"), Some("ref"), Some("ka"))
    );
    assert_eq!(table["rows_examined_per_scan"].as_u64(), Some(4), "{out}");
    assert_eq!(error_code(&cluster, "EXPLAIN ANALYZE SELECT * FROM t"), "1235");
    // A subquery runs first, as the SQL node runs it; the plan is the outer
    // statement's with its result.
    assert_eq!(
        explain("SELECT * FROM t WHERE id IN (SELECT t_id FROM u WHERE id <= 3)"),
        [row(["SIMPLE", "t", "range", "PRIMARY", "4", "NULL", "3", "NULL"])]
    );
    assert_eq!(error_code(&cluster, "EXPLAIN SELECT * FROM t UNION SELECT * FROM t"), "1235");
}

/// The mariadb client's output and error codes for a script (with --force,
/// so that a failing statement does not stop it), against `host:port`.
fn script_on(host: &str, port: &str, user: &str, script: &str) -> (String, Vec<String>) {
    let mut cmd = Command::new("mariadb");
    cmd.args(["-h", host, "-P", port, "-u", user, "--batch", "--force", "--connect-timeout=10"]);
    let (_, out, err) = run_bounded(&mut cmd, Some(script), Duration::from_secs(60));
    let codes = err
        .lines()
        .filter_map(|l| l.strip_prefix("ERROR "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    (out, codes)
}

/// Runs `script` through the mariadb client on the cluster's SQL node and
/// on a MariaDB server of the test's own; asserts both print the same rows
/// and error codes, and returns latsdb's.
fn same_as_mariadb(cluster: &TestCluster, script: &str) -> (String, Vec<String>) {
    let (host, port) = host_port(cluster);
    let latsdb = script_on(&host, &port, "root", script);
    let mariadb = common::MariaDb::start();
    let peer = script_on("127.0.0.1", &mariadb.port.to_string(), "root", script);
    assert_eq!(latsdb.0, peer.0, "rows: latsdb (left) against MariaDB (right)");
    assert_eq!(latsdb.1, peer.1, "error codes: latsdb (left) against MariaDB (right)");
    latsdb
}

#[test]
fn sql_prepare_execute_and_deallocate_answer_as_mariadb_does() {
    let script = "CREATE DATABASE ps; USE ps;
        CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10));
        PREPARE ins FROM 'INSERT INTO t VALUES (?, ?)';
        SET @i = 1, @v = 'one'; EXECUTE ins USING @i, @v;
        SET @i = 2, @v = 'two'; EXECUTE ins USING @i, @v;
        SET @q = 'SELECT v FROM t WHERE id = ?';
        PREPARE sel FROM @q;
        EXECUTE sel USING @i;
        SET @i = 1; EXECUTE sel USING @i;
        ALTER TABLE t ADD COLUMN n INT DEFAULT 7;
        PREPARE Sel FROM 'SELECT * FROM t ORDER BY id';
        EXECUTE sel;
        DEALLOCATE PREPARE ins;
        EXECUTE ins USING @i, @v;
        PREPARE up FROM 'UPDATE t SET n = n + ? WHERE id = ?';
        SET @d = 5; EXECUTE up USING @d, @i;
        EXECUTE up USING @d;
        EXECUTE sel;
        DROP PREPARE sel;
        EXECUTE sel;
        DEALLOCATE PREPARE nothing;
        PREPARE two FROM 'SELECT 1; SELECT 2';
        PREPARE bad FROM 'SELEKT 1';
        SET @null = NULL; PREPARE n FROM @null;
        PREPARE p FROM 'SELECT 1'; PREPARE p FROM 'SELEKT 1'; EXECUTE p;
        DROP DATABASE ps;";
    let cluster = TestCluster::start(&[]);
    let latsdb = same_as_mariadb(&cluster, script);
    assert_eq!(latsdb.1, ["1243", "1210", "1243", "1243", "1064", "1064", "1064", "1064", "1243"], "{latsdb:?}");
}

/// Dates in MySQL's relaxed forms, DATETIME(n) shown with its n digits,
/// BINARY(n) padded with zero bytes, and TO_BASE64/FROM_BASE64, against
/// MariaDB.
#[test]
fn value_formats_and_base64_answer_as_mariadb_does() {
    let script = r"CREATE DATABASE vf; USE vf;
        CREATE TABLE t (id INT PRIMARY KEY, d DATE, dt DATETIME, dt3 DATETIME(3), dt6 DATETIME(6), b BINARY(4), vb VARBINARY(8));
        INSERT INTO t VALUES (1, '1111:11:11', '2020/01/02 10.11.12', '2020-01-02 10:11:12.5', '2020-01-02 10:11:12.123456', 'ab', 'ab');
        INSERT INTO t VALUES (2, '2021^03^04', '20210304101112', '2021-3-4 1:2:3', NULL, x'01020304', '');
        INSERT INTO t VALUES (3, '99-12-31', '991231235959', '2024-02-29 23:59:59.9994', '2024-02-29 00:00:00', '', NULL);
        INSERT INTO t VALUES (4, '2024-02-30', NULL, NULL, NULL, NULL, NULL);
        INSERT INTO t VALUES (5, '2024-02', NULL, NULL, NULL, NULL, NULL);
        SELECT id, d, dt, dt3, dt6, HEX(b), LENGTH(b), HEX(vb) FROM t ORDER BY id;
        SELECT dt3 FROM t WHERE id = 1;
        SELECT id FROM t WHERE b = 'ab';
        SELECT id FROM t WHERE b = x'61620000';
        SELECT id FROM t WHERE d = '2021/03/04';
        SELECT TO_BASE64('abc'), TO_BASE64(REPEAT('a', 60)), FROM_BASE64('YWI='), HEX(FROM_BASE64('YWI'));
        SELECT HEX(FROM_BASE64('Y W\nJj')), FROM_BASE64('!!!!'), TO_BASE64(NULL), TO_BASE64(123), FROM_BASE64(TO_BASE64(x'00ff')), FROM_BASE64('YR==');
        SELECT MICROSECOND(CAST('20210304101112.5' AS DATETIME(6))), CAST('2021-03-04 10:11:12.1234567' AS DATETIME(6));
        SELECT id, TO_BASE64(b) FROM t ORDER BY id;
        SELECT CAST('2020:01:02' AS DATE), DATE('2020.01.02'), '2020:01:02' + INTERVAL 1 DAY;
        SELECT CAST('2021-03-04 10:11:12.56' AS DATETIME), CAST('20210304101112.5' AS DATETIME(1)), CAST(CAST('2021-03-04 10:11:12.5678' AS DATETIME(2)) AS DATETIME(4)), CAST('2021-03-04' AS DATETIME(3));
        SELECT CAST('2021-03-04' AS DATETIME(7));
        CREATE TABLE n (id INT PRIMARY KEY, a DATETIME(6), b DATETIME(6));
        INSERT INTO n VALUES (1, NOW(6), NOW(6)), (2, NOW(6), NOW(6));
        SELECT COUNT(DISTINCT a), SUM(a = b), NOW(6) = NOW(6) FROM n;
        CREATE TABLE seq (id INT PRIMARY KEY);
        INSERT INTO seq WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 1000) SELECT n FROM s;
        SELECT COUNT(DISTINCT NOW(6)), COUNT(DISTINCT SYSDATE(6)) > 1 FROM seq;
        DROP DATABASE vf;";
    let cluster = TestCluster::start(&["--no-rest"]);
    let latsdb = same_as_mariadb(&cluster, script);
    assert_eq!(latsdb.1, ["1292", "1292", "1426"], "{latsdb:?}");
    let (host, port) = host_port(&cluster);
    // NOW(n) shows n digits (times differ between the servers: only the
    // shape is compared).
    let (now, _) = script_on(&host, &port, "root", "SELECT NOW(), NOW(3), NOW(6), CURRENT_TIMESTAMP(1)");
    let shown: Vec<usize> = now.lines().nth(1).unwrap_or_default().split('\t').map(str::len).collect();
    assert_eq!(shown, [19, 23, 26, 21], "{now}");
}

/// TIME(n), YEAR, BIT(n), ENUM and SET columns: values in MySQL's forms
/// written and read back, compared, taken apart and refused, against
/// MariaDB; and TIMESTAMP's range.
#[test]
fn time_year_bit_enum_and_set_columns_answer_as_mariadb_does() {
    let script = r"CREATE DATABASE ty COLLATE utf8mb4_general_ci; USE ty;
        CREATE TABLE t (id INT PRIMARY KEY, tm TIME, tm3 TIME(3), y YEAR, b BIT(10),
            e ENUM('small', 'medium', 'large') NOT NULL, s SET('a', 'b', 'c'));
        INSERT INTO t VALUES (1, '10:11:12', '-1 02:03:04.567', 2024, b'1010', 'medium', 'c,a');
        INSERT INTO t VALUES (2, 101112, '838:59:59', '69', 5, 2, 3);
        INSERT INTO t VALUES (3, '-00:00:01', NULL, 0, NULL, 'LARGE', '');
        INSERT INTO t (id) VALUES (4);
        SELECT id, tm, tm3, y, b + 0, e, s FROM t ORDER BY id;
        SELECT id FROM t WHERE tm > '10:00:00' ORDER BY id;
        SELECT id FROM t WHERE e = 'Medium' ORDER BY id;
        SELECT id FROM t WHERE y = 2069;
        SELECT id FROM t WHERE s = 'a,c';
        SELECT HOUR(tm3), MINUTE(tm3), SECOND(tm3), MICROSECOND(tm3) FROM t WHERE id = 1;
        SELECT CAST('12:34:56.789' AS TIME(2)), CAST(123456 AS TIME);
        SELECT TIME('2024-01-02 10:11:12'), TIME_TO_SEC('01:00:01'), TIME_TO_SEC(tm3), SEC_TO_TIME(3661),
            SEC_TO_TIME(10000000), MAKETIME(-12, 5, 7), MAKETIME(1, 60, 0) FROM t WHERE id = 1;
        SELECT TIMEDIFF('10:00:00', '12:30:00'), TIMEDIFF('2024-01-02 00:00:00', '2024-01-01 12:00:00'),
            TIMEDIFF('2024-01-02 00:00:00', '12:00:00'), ADDTIME('2024-01-01 23:00:00', '02:00:00'),
            SUBTIME(tm, '11:00:00'), ADDTIME(tm, tm) FROM t WHERE id = 1;
        SELECT TIMESTAMP('2022-01-21'), TIMESTAMP('2022-01-21 10:00:00.25'),
            TIMESTAMP('2022-01-21 23:00:00', '02:30:00'), TIMESTAMP(NULL);
        INSERT INTO t VALUES (5, '839:00:00', NULL, NULL, NULL, 'small', NULL);
        INSERT INTO t VALUES (6, NULL, NULL, 1900, NULL, 'small', NULL);
        INSERT INTO t VALUES (7, NULL, NULL, NULL, 1024, 'small', NULL);
        INSERT INTO t VALUES (8, NULL, NULL, NULL, NULL, 'huge', NULL);
        INSERT INTO t VALUES (9, NULL, NULL, NULL, NULL, 'small', 'a,d');
        SELECT id FROM t WHERE b = b'1010';
        SELECT TO_BASE64(b), LENGTH(b), HEX(b), MD5(b), b + 0 FROM t WHERE id = 1;
        SELECT SUM(tm), MIN(tm), MAX(y) FROM t;
        SELECT * FROM (SELECT tm3 FROM t WHERE id = 1) d;
        INSERT IGNORE INTO t VALUES (10, '-900:00:00', NULL, 1900, 1024, 'small', NULL);
        SELECT tm, tm3, y, b + 0 FROM t WHERE id = 10;
        DELETE FROM t WHERE id = 10;
        ALTER TABLE t ADD COLUMN t2 TIME NOT NULL, ADD COLUMN y2 YEAR NOT NULL;
        SELECT t2, y2 FROM t WHERE id = 1;
        UPDATE t SET e = 3, y = 1999, b = b'1111111111' WHERE id = 2;
        SELECT id, y, b + 0, e FROM t WHERE id = 2;
        CREATE TABLE k (tm TIME PRIMARY KEY, e ENUM('x', 'y'), UNIQUE KEY (e));
        INSERT INTO k VALUES ('01:00:00', 'x'), ('-01:00:00', 'y');
        INSERT INTO k VALUES ('02:00:00', 'X');
        SELECT * FROM k WHERE tm = '-01:00:00';
        SELECT * FROM k WHERE e = 'Y';
        SELECT * FROM k WHERE e = 'z';
        SELECT * FROM k WHERE tm = '-01:00:00.4';
        CREATE TABLE st (id INT PRIMARY KEY, ts TIMESTAMP NULL, KEY (ts));
        INSERT INTO st VALUES (1, '2038-01-19 03:14:07'), (4, '1970-01-01 00:00:01');
        INSERT INTO st VALUES (2, '2038-01-19 03:14:08');
        INSERT INTO st VALUES (3, '1111-11-11 11:11:11');
        SELECT * FROM st ORDER BY id;
        SELECT id FROM st WHERE ts >= '1960-01-01' ORDER BY id;
        SELECT id FROM st WHERE ts BETWEEN '2000-01-01' AND '2099-12-31' ORDER BY id;
        SELECT id FROM st WHERE ts = '1111-11-11 11:11:11';
        CREATE TABLE wide (id INT PRIMARY KEY, v VARCHAR(3), b VARBINARY(2), e ENUM('x'), t VARCHAR(4));
        INSERT INTO wide VALUES (1, 'abc', X'0102', 'x', 'abcd');
        ALTER TABLE wide MODIFY v VARCHAR(10), MODIFY b BLOB, MODIFY e ENUM('x', 'y'), MODIFY t TEXT;
        INSERT INTO wide VALUES (2, 'abcdefghij', X'010203', 'y', 'abcdefgh');
        SELECT id, v, HEX(b), e, t FROM wide ORDER BY id;
        DROP DATABASE ty;";
    let cluster = TestCluster::start(&[]);
    let (out, codes) = same_as_mariadb(&cluster, script);
    assert_eq!(codes, ["1292", "1264", "1406", "1265", "1265", "1062", "1292", "1292"], "{out}");
    assert!(out.contains("1\t10:11:12\t-26:03:04.567\t2024\t10\tmedium\ta,c"), "{out}");
    assert!(out.contains("4\tNULL\tNULL\tNULL\tNULL\tsmall\tNULL"), "{out}");
    // Members may be added at the end; other changes need the table
    // rewritten: refused, never ignored. So does growing an indexed column.
    let (ok, _, err) = mariadb(
        &cluster,
        &[],
        "CREATE DATABASE clock; CREATE TABLE clock.m (id INT PRIMARY KEY, e ENUM('a'), k VARCHAR(3), KEY (k))",
    );
    assert!(ok, "{err}");
    // Members reordered, and an indexed column grown: the table is copied.
    rows_of(&cluster, "ALTER TABLE m MODIFY e ENUM('b', 'a'); ALTER TABLE m MODIFY k VARCHAR(10)");
    let (ok, _, err) =
        mariadb(&cluster, &["clock"], "ALTER TABLE m MODIFY e ENUM('a', 'b'); INSERT INTO m VALUES (1, 'b', 'x')");
    assert!(ok, "{err}");
    // UNSIGNED on a DECIMAL is not kept: the client is told so.
    let (ok, out, err) =
        mariadb(&cluster, &["clock"], "CREATE TABLE u (id INT PRIMARY KEY, d DECIMAL(5,2) UNSIGNED); SHOW WARNINGS");
    assert!(ok && out.contains("UNSIGNED is ignored for column 'd'"), "{out}{err}");
}

#[test]
fn expressions_nested_too_deeply_are_refused_and_the_nodes_stay_up() {
    let cluster = TestCluster::start(&[]);
    // 8,000 terms: bound, evaluated and dropped on a worker's stack.
    let (ok, out, err) = mariadb(&cluster, &["--skip-column-names"], &format!("SELECT 1{};", "+1".repeat(8_000)));
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "8001");
    // A long OR chain pushed down to the data nodes as a filter.
    let ors: Vec<String> = (0..3_000).map(|i| format!("v = {i}")).collect();
    let script = format!(
        "CREATE DATABASE deep; CREATE TABLE deep.t (id INT PRIMARY KEY, v INT); \
         INSERT INTO deep.t VALUES (1, 5), (2, 5000), (3, 2999); SELECT COUNT(*) FROM deep.t WHERE {};",
        ors.join(" OR ")
    );
    let (ok, out, err) = mariadb(&cluster, &["--skip-column-names"], &script);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "2");
    // 20,000 terms aborted the SQL node once (its worker's stack overflowed):
    // now refused with MySQL's 1436 before anything is built.
    let (ok, _, err) = mariadb(&cluster, &[], &format!("SELECT 1{};", "+1".repeat(20_000)));
    assert!(!ok && err.contains("ERROR 1436"), "{err}");
    let (ok, out, err) = mariadb(&cluster, &["--skip-column-names"], "SELECT COUNT(*) FROM deep.t;");
    assert!(ok && out.trim() == "3", "the nodes still answer: {err}");
}

/// ALTER TABLE DROP COLUMN against MariaDB: the column leaves `*`, INSERT
/// without a column list, information_schema and the indexes of that
/// column alone; rows written before and after read the same; a column of
/// the same name can come back. Then a primary-key column, which latsdb
/// refuses, and a column of an index of several columns, which leaves the
/// index by a copy of the table.
#[test]
fn dropped_columns_leave_the_table_as_in_mariadb() {
    let script = "CREATE DATABASE dc; USE dc;
        CREATE TABLE t (id INT PRIMARY KEY, a INT NOT NULL, b VARCHAR(20) DEFAULT 'x', c INT, d INT, e TEXT,
            KEY kc (c), UNIQUE KEY ud (d));
        INSERT INTO t VALUES (1, 10, 'one', 100, 1000, 'e1'), (2, 20, 'two', 200, 2000, 'e2');
        ALTER TABLE t DROP COLUMN b;
        SELECT * FROM t ORDER BY id;
        INSERT INTO t VALUES (3, 30, 300, 3000, 'e3');
        INSERT INTO t (id, a) VALUES (4, 40);
        UPDATE t SET a = a + 1 WHERE id = 1;
        UPDATE t SET id = 5 WHERE id = 2;
        SELECT * FROM t ORDER BY id;
        SELECT b FROM t;
        ALTER TABLE t DROP c, DROP COLUMN d;
        SELECT * FROM t ORDER BY id;
        INSERT INTO t VALUES (6, 60, 'e6');
        SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'dc' AND TABLE_NAME = 't' ORDER BY INDEX_NAME;
        ALTER TABLE t ADD COLUMN b INT DEFAULT 7;
        SELECT * FROM t ORDER BY id;
        SELECT COLUMN_NAME, ORDINAL_POSITION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'dc' AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION;
        ALTER TABLE t DROP COLUMN nope;
        ALTER TABLE t DROP COLUMN IF EXISTS nope;
        ALTER TABLE t DROP COLUMN e, DROP COLUMN e;
        SELECT * FROM t WHERE a > 30 ORDER BY id;
        UPDATE t SET e = 'x';
        ALTER TABLE t DROP COLUMN a;
        TRUNCATE TABLE t;
        INSERT INTO t VALUES (1, 'after', 8);
        SELECT * FROM t;
        CREATE TABLE nk (x INT);
        INSERT INTO nk VALUES (1);
        ALTER TABLE nk DROP COLUMN x;
        SELECT * FROM nk;
        DROP DATABASE dc;";
    let cluster = TestCluster::start(&[]);
    let (rows, codes) = same_as_mariadb(&cluster, script);
    assert_eq!(codes, ["1054", "1091", "1091", "1090"], "{rows}");
    assert!(rows.contains("5\t20\t200\t2000\te2"), "a row written before the drop moved to a new key:\n{rows}");

    let (host, port) = host_port(&cluster);
    let refused = "CREATE DATABASE dk; USE dk;
        CREATE TABLE k (id INT, part INT, v INT, w INT, PRIMARY KEY (id, part), KEY vw (v, w));
        ALTER TABLE k DROP COLUMN part;
        ALTER TABLE k DROP COLUMN v;
        ALTER TABLE k DROP COLUMN `$row_id`;
        ALTER TABLE k ADD COLUMN `$dropped$9` INT;
        SHOW CREATE TABLE k;";
    let (out, codes) = script_on(&host, &port, "root", refused);
    assert_eq!(codes, ["1235", "1091", "1166"], "{out}");
    assert!(
        out.contains("`w` int DEFAULT NULL,\\n  PRIMARY KEY (`id`,`part`),\\n  KEY `vw` (`w`)\\n)"),
        "v left its index of two columns, which kept w (the table was copied, as MySQL narrows it):\n{out}"
    );
}

/// ALTER TABLE clauses that rewrite every row (a type, NOT NULL, a
/// position, a column leaving an index of several columns) copy the table,
/// against MariaDB: the rows convert as in strict mode, a value that does
/// not fit fails the statement and leaves the table as it was, indexes and
/// the auto-increment counter carry over.
#[test]
fn copying_alter_table_answers_as_mariadb() {
    let script = "CREATE DATABASE ca; USE ca;
        CREATE TABLE t (id INT PRIMARY KEY AUTO_INCREMENT, a INT, b VARCHAR(20), c INT, KEY kbc (b, c), UNIQUE KEY ua (a));
        INSERT INTO t (a, b, c) VALUES (1, 'one', 10), (2, 'two', 20), (NULL, 'three', 1000);
        ALTER TABLE t MODIFY a BIGINT, ADD COLUMN z INT DEFAULT 5 AFTER id, MODIFY b VARCHAR(8) NOT NULL FIRST;
        SELECT * FROM t ORDER BY id;
        INSERT INTO t (a, b, c) VALUES (4, 'four', 40);
        INSERT INTO t (a, b, c) VALUES (4, 'dup', 41);
        SELECT * FROM t ORDER BY id;
        ALTER TABLE t MODIFY b VARCHAR(3);
        ALTER TABLE t MODIFY a INT NOT NULL;
        ALTER TABLE t MODIFY c TINYINT;
        UPDATE t SET c = 30 WHERE id = 3;
        ALTER TABLE t MODIFY c TINYINT;
        SELECT * FROM t ORDER BY id;
        ALTER TABLE t DROP COLUMN c, CHANGE COLUMN a aa INT;
        SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = 'ca' AND TABLE_NAME = 't' AND INDEX_NAME <> 'PRIMARY' ORDER BY INDEX_NAME, SEQ_IN_INDEX;
        SELECT COLUMN_NAME, DATA_TYPE, IS_NULLABLE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'ca' AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION;
        UPDATE t SET aa = aa * 10 WHERE id = 2;
        SELECT * FROM t WHERE b = 'two';
        ALTER TABLE t MODIFY z DECIMAL(5,2) NOT NULL DEFAULT 1.5 FIRST, ADD COLUMN w VARCHAR(4) NOT NULL AFTER b;
        SELECT * FROM t ORDER BY id;
        ALTER TABLE t ADD COLUMN u INT UNIQUE FIRST;
        INSERT INTO t (b, w, u) VALUES ('five', 'w5', 1);
        INSERT INTO t (b, w, u) VALUES ('six', 'w6', 1);
        SELECT * FROM t ORDER BY id;
        ALTER TABLE t DROP COLUMN IF EXISTS nope, MODIFY w VARCHAR(6) NOT NULL AFTER u;
        SHOW WARNINGS;
        SELECT * FROM t ORDER BY id;
        ALTER TABLE t MODIFY nope INT;
        SHOW TABLES;
        DROP DATABASE ca;";
    let cluster = TestCluster::start(&[]);
    let (rows, codes) = same_as_mariadb(&cluster, script);
    assert!(rows.contains("four\t4\t5\t4\t40"), "the next AUTO_INCREMENT value follows the copied rows:\n{rows}");
    assert_eq!(codes, ["1062", "1265", "1265", "1264", "1062", "1054"], "{rows}");
}

/// Foreign keys are enforced inside the statement's transaction, against
/// MariaDB (InnoDB): a child row needs its parent (1452), a parent row's
/// delete or key change runs each key's action down the chain (CASCADE,
/// SET NULL) or is refused (RESTRICT, NO ACTION: 1451), a refused
/// statement leaves nothing behind, and `foreign_key_checks = 0` lets
/// anything through.
#[test]
fn foreign_keys_act_as_in_mariadb() {
    let script = "CREATE DATABASE fk; USE fk;
        CREATE TABLE p (id INT PRIMARY KEY, code VARCHAR(8) NOT NULL, UNIQUE KEY uc (code));
        CREATE TABLE c (id INT PRIMARY KEY, pid INT, v INT,
            CONSTRAINT c_p FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE ON UPDATE CASCADE);
        CREATE TABLE g (id INT PRIMARY KEY, cid INT, FOREIGN KEY (cid) REFERENCES c (id) ON DELETE SET NULL);
        CREATE TABLE r (id INT PRIMARY KEY, code VARCHAR(8), FOREIGN KEY (code) REFERENCES p (code) ON UPDATE NO ACTION);
        INSERT INTO p VALUES (1, 'one'), (2, 'two'), (3, 'three'), (4, 'four');
        INSERT INTO c VALUES (10, 1, 0), (11, 1, 0), (12, 2, 0), (13, NULL, 0);
        INSERT INTO g VALUES (100, 10), (101, 12), (102, NULL);
        INSERT INTO r VALUES (50, 'three');
        INSERT INTO c VALUES (14, 9, 0);
        INSERT INTO c VALUES (15, 2, 0), (16, 9, 0);
        SELECT * FROM c ORDER BY id;
        INSERT INTO r VALUES (51, 'nine');
        UPDATE c SET pid = 9 WHERE id = 12;
        UPDATE c SET v = 1 WHERE id = 12;
        DELETE FROM p WHERE id = 3;
        UPDATE p SET code = 'drei' WHERE id = 3;
        UPDATE p SET id = 30 WHERE id = 3;
        DELETE FROM p WHERE id = 1;
        SELECT * FROM c ORDER BY id;
        SELECT * FROM g ORDER BY id;
        UPDATE p SET id = 20 WHERE id = 2;
        SELECT * FROM c ORDER BY id;
        SELECT * FROM g ORDER BY id;
        DELETE FROM c WHERE id = 12;
        SELECT * FROM g ORDER BY id;
        BEGIN;
        INSERT INTO c VALUES (17, 4, 0);
        DELETE FROM p WHERE id = 4;
        SELECT * FROM c WHERE id = 17;
        INSERT INTO r VALUES (52, 'four');
        DELETE FROM p WHERE id = 4;
        ROLLBACK;
        SELECT * FROM c ORDER BY id;
        SELECT * FROM p ORDER BY id;
        INSERT IGNORE INTO c VALUES (18, 4, 0), (19, 8, 0);
        SELECT id FROM c ORDER BY id;
        INSERT INTO c VALUES (18, 4, 5) ON DUPLICATE KEY UPDATE pid = 7;
        INSERT INTO c VALUES (18, 4, 5) ON DUPLICATE KEY UPDATE pid = 30;
        SELECT * FROM c WHERE id = 18;
        CREATE TABLE t (id INT PRIMARY KEY, up INT, FOREIGN KEY (up) REFERENCES t (id) ON DELETE CASCADE);
        INSERT INTO t VALUES (1, NULL), (2, 1), (3, 2), (4, 1), (5, NULL);
        INSERT INTO t VALUES (6, 7), (7, NULL);
        DELETE FROM t WHERE id = 2;
        SELECT * FROM t ORDER BY id;
        SET foreign_key_checks = 0;
        INSERT INTO c VALUES (90, 99, 0);
        DELETE FROM p WHERE id = 30;
        SET foreign_key_checks = 1;
        SELECT * FROM c WHERE id = 90;
        SELECT * FROM r;
        CREATE TABLE late (id INT PRIMARY KEY, pid INT);
        INSERT INTO late VALUES (1, 20), (2, 77);
        ALTER TABLE late ADD CONSTRAINT late_p FOREIGN KEY (pid) REFERENCES p (id);
        DELETE FROM late WHERE id = 2;
        ALTER TABLE late ADD CONSTRAINT late_p FOREIGN KEY (pid) REFERENCES p (id);
        DELETE FROM p WHERE id = 20;
        ALTER TABLE late DROP FOREIGN KEY late_p;
        ALTER TABLE late DROP FOREIGN KEY late_p;
        DELETE FROM p WHERE id = 20;
        SELECT * FROM c ORDER BY id;
        SELECT * FROM g ORDER BY id;
        CREATE TABLE d2 (id INT PRIMARY KEY, pid INT, x INT, CONSTRAINT d2_p FOREIGN KEY (pid) REFERENCES p (id));
        ALTER TABLE d2 DROP FOREIGN KEY d2_p, DROP COLUMN pid;
        ALTER TABLE d2 DROP FOREIGN KEY nope, DROP COLUMN x;
        INSERT INTO d2 VALUES (1, 4);
        ALTER TABLE d2 ADD CONSTRAINT d3 FOREIGN KEY (x) REFERENCES p (id);
        INSERT INTO d2 VALUES (2, 5);
        SELECT * FROM d2;
        INSERT INTO p VALUES (61, 'x61'), (62, 'x62'), (63, 'x63');
        CREATE TABLE two (id INT PRIMARY KEY, a INT, b INT,
            FOREIGN KEY (a) REFERENCES p (id) ON DELETE SET NULL, FOREIGN KEY (b) REFERENCES p (id));
        INSERT INTO two VALUES (1, 61, 61), (2, 62, 61);
        DELETE FROM p WHERE id = 61;
        DELETE FROM p WHERE id = 62;
        SELECT * FROM two ORDER BY id;
        CREATE TABLE sn (id INT PRIMARY KEY, a INT, b INT,
            FOREIGN KEY (a) REFERENCES p (id) ON DELETE SET NULL, FOREIGN KEY (b) REFERENCES p (id) ON DELETE SET NULL);
        INSERT INTO sn VALUES (1, 63, 63);
        DELETE FROM p WHERE id = 63;
        SELECT * FROM sn;
        CREATE TABLE t2 (id INT PRIMARY KEY, up INT, FOREIGN KEY (up) REFERENCES t2 (id));
        INSERT INTO t2 VALUES (1, NULL), (2, 1);
        UPDATE t2 SET id = id + 10;
        UPDATE t2 SET id = 5 WHERE id = 2;
        SELECT * FROM t2 ORDER BY id;
        DROP DATABASE fk;";
    let cluster = TestCluster::start(&[]);
    let (rows, codes) = same_as_mariadb(&cluster, script);
    assert_eq!(
        codes,
        [
            "1452", "1452", "1452", "1452", "1451", "1451", "1452", "1452", "1452", "1452", "1451", "1091", "1091",
            "1452", "1451", "1451"
        ],
        "{rows}"
    );
    assert!(rows.contains("11\t1\t0"), "the first rows were written:\n{rows}");
}

/// What latsdb says where MariaDB's words differ (MySQL 8's codes), and
/// the definition's own rules: SHOW CREATE TABLE shows a key, a parent
/// cannot be dropped or truncated under its children, a key needs the
/// parent's primary key or a unique index, a renamed parent is followed.
#[test]
fn foreign_key_definitions_are_kept_checked_and_followed() {
    let cluster = TestCluster::start(&[]);
    let (host, port) = host_port(&cluster);
    let script = "CREATE DATABASE fd; USE fd;
        CREATE TABLE p (id INT PRIMARY KEY, n INT, m INT NOT NULL, KEY kn (n));
        CREATE TABLE c (id INT PRIMARY KEY, pid INT NOT NULL, FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE);
        SHOW CREATE TABLE c;
        DROP TABLE p;
        TRUNCATE TABLE p;
        CREATE TABLE e1 (id INT PRIMARY KEY, x INT, FOREIGN KEY (x) REFERENCES p (n));
        CREATE TABLE e2 (id INT PRIMARY KEY, x INT, FOREIGN KEY (x) REFERENCES nowhere (id));
        CREATE TABLE e3 (id INT PRIMARY KEY, x BIGINT, FOREIGN KEY (x) REFERENCES p (id));
        CREATE TABLE e4 (id INT PRIMARY KEY, x INT NOT NULL, FOREIGN KEY (x) REFERENCES p (id) ON DELETE SET NULL);
        CREATE TABLE e5 (id INT PRIMARY KEY, x INT, FOREIGN KEY (x) REFERENCES p (id) ON DELETE SET DEFAULT);
        ALTER TABLE c DROP INDEX c_ibfk_1;
        ALTER TABLE c DROP COLUMN pid;
        CREATE TABLE e6 (id INT PRIMARY KEY, x INT, FOREIGN KEY (x) REFERENCES P (id));
        CREATE TABLE ix (id INT PRIMARY KEY, a INT, b INT, c INT, KEY i1 (a, b), KEY i2 (a, c), FOREIGN KEY (a) REFERENCES p (id));
        ALTER TABLE ix DROP INDEX i1, DROP INDEX i2;
        ALTER TABLE ix DROP INDEX i1;
        ALTER TABLE ix ADD COLUMN z INT, DROP INDEX i2;
        SHOW CREATE TABLE ix;
        CREATE TABLE q (id INT PRIMARY KEY, x INT NOT NULL, z INT NOT NULL, UNIQUE KEY ux (x), UNIQUE KEY uz (z));
        CREATE TABLE m (id INT PRIMARY KEY, a INT, b INT, UNIQUE KEY uab (a, b),
            FOREIGN KEY (a) REFERENCES q (x) ON UPDATE CASCADE, FOREIGN KEY (b) REFERENCES q (z) ON UPDATE CASCADE);
        CREATE TABLE gm (id INT PRIMARY KEY, a INT, b INT, FOREIGN KEY (a, b) REFERENCES m (a, b) ON UPDATE CASCADE);
        INSERT INTO q VALUES (1, 1, 5); INSERT INTO m VALUES (1, 1, 5); INSERT INTO gm VALUES (1, 1, 5);
        UPDATE q SET x = 2, z = 6;
        UPDATE q SET x = 3;
        SELECT a, b FROM gm;
        REPLACE INTO p VALUES (1, 1, 1);
        RENAME TABLE p TO parent;
        SHOW CREATE TABLE c;
        INSERT INTO parent VALUES (1, 1, 1);
        INSERT INTO c VALUES (1, 1);
        DELETE FROM parent;
        SELECT COUNT(*) FROM c;
        SET foreign_key_checks = 0;
        CREATE TABLE orphan (id INT PRIMARY KEY, x INT, FOREIGN KEY (x) REFERENCES later (id));
        INSERT INTO orphan VALUES (1, 5);
        SET foreign_key_checks = 1;
        INSERT INTO orphan VALUES (2, 5);
        CREATE TABLE later (id INT PRIMARY KEY);
        INSERT INTO later VALUES (5);
        INSERT INTO orphan VALUES (2, 5);
        DELETE FROM later;
        DROP TABLE c, ix, parent;
        DROP DATABASE fd;";
    let (out, codes) = script_on(&host, &port, "root", script);
    assert_eq!(
        codes,
        [
            "3730", "1701", "1822", "1824", "3780", "1830", "1235", "1553", "1828", "1824", "1553", "1553", "1235",
            "1235", "1452", "1451"
        ],
        "{out}"
    );
    assert!(
        out.contains("KEY `c_ibfk_1` (`pid`),\\n  CONSTRAINT `c_ibfk_1` FOREIGN KEY (`pid`) REFERENCES `p` (`id`) ON DELETE CASCADE\\n)"),
        "{out}"
    );
    assert!(out.contains("REFERENCES `parent` (`id`) ON DELETE CASCADE"), "the renamed parent is followed:\n{out}");
    assert!(
        out.contains("KEY `i2` (`a`,`c`),\\n  CONSTRAINT") && !out.contains("`z` int"),
        "a refused ALTER TABLE kept the index a key needs and added no column:\n{out}"
    );
    assert!(out.contains("COUNT(*)\n0\n"), "the delete cascaded:\n{out}");
    assert!(out.contains("a\tb\n3\t5\n"), "one key's update cascaded two tables down:\n{out}");
}
