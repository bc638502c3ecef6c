//! The SQL node driven by MySQL Connector/J (JDBC) against `latsdb start`:
//! `tests/sql/JdbcClient.java` runs the same checks with client-side prepared
//! statements (text protocol) and with server-side ones (binary protocol):
//! typed inserts and batches, generated keys, exact values read back,
//! result set metadata, row counts, commit and rollback, a duplicate key,
//! DatabaseMetaData. `scripts/install-deps.sh` installs a JDK and fetches the
//! pinned driver into `target/jdbc/`.

mod common;

use common::{run_bounded, workspace, TestCluster};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The driver jar install-deps.sh fetched (the newest, should there be more).
fn driver_jar() -> PathBuf {
    let dir = workspace().join("target/jdbc");
    let mut jars: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    name.starts_with("mysql-connector-j-") && name.ends_with(".jar")
                })
                .map(|p| (p.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH), p))
                .collect()
        })
        .unwrap_or_default();
    jars.sort();
    match jars.pop() {
        Some((_, jar)) => jar,
        None => panic!("no mysql-connector-j-*.jar in {}: run scripts/install-deps.sh", dir.display()),
    }
}

fn java() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin/java"))
        .filter(|java| java.exists())
        .unwrap_or_else(|| PathBuf::from("java"))
}

#[test]
fn connector_j_passes_its_checks_with_client_and_server_prepared_statements() {
    let jar = driver_jar();
    let source = workspace().join("crates/latsdb/tests/sql/JdbcClient.java");
    let cluster = TestCluster::start(&[]);
    let (host, port) = cluster.sql.rsplit_once(':').expect("the launcher printed the SQL node's address");
    let mut cmd = Command::new(java());
    // Java 11+ runs a single source file directly.
    cmd.arg("-cp").arg(&jar).arg(&source).args([host, port]);
    let (status, out, err) = run_bounded(&mut cmd, None, Duration::from_secs(180));
    assert!(status.success(), "JdbcClient.java failed against {}:\nstdout:\n{out}\nstderr:\n{err}", cluster.sql);
    let modes = out.lines().filter(|l| l.starts_with("ok: ")).count();
    assert_eq!(modes, 2, "one 'ok' line per statement mode:\nstdout:\n{out}\nstderr:\n{err}");
}
