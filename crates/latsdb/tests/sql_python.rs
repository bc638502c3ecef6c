//! The SQL node driven by the Python MySQL drivers against `latsdb start`:
//! `tests/sql/python_clients.py` runs the same checks with PyMySQL and with
//! mysql-connector-python (pure Python and its C extension): connecting with
//! the drivers' defaults, DDL, executemany, lastrowid, typed values read
//! back, rowcounts, commit and rollback, server-side prepared statements, a
//! duplicate key. `scripts/install-deps.sh` installs the pinned drivers of
//! `scripts/requirements-sql-clients.txt` into `target/pyenv`.

mod common;

use common::TestCluster;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The workspace root: this crate is `crates/latsdb`.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs a command with a deadline, reading its output as it comes; returns
/// (exit status, or None when it was killed at the deadline; stdout; stderr).
fn run_bounded(cmd: &mut Command, limit: Duration) -> (Option<std::process::ExitStatus>, String, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?} ({e}); scripts/install-deps.sh installs target/pyenv"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout is piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr is piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for python3") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default())
}

#[test]
fn pymysql_and_mysql_connector_python_pass_the_client_script() {
    let python = workspace().join("target/pyenv/bin/python3");
    assert!(python.exists(), "{} is missing: run scripts/install-deps.sh (scripts/test.sh does)", python.display());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql/python_clients.py");
    let cluster = TestCluster::start(&[]);
    let (host, port) = cluster.sql.rsplit_once(':').expect("the launcher printed the SQL node's address");
    let limit = Duration::from_secs(120);
    let (status, out, err) = run_bounded(Command::new(&python).arg(&script).args([host, port]), limit);
    let status = status
        .unwrap_or_else(|| panic!("python_clients.py did not finish within {limit:?}\nstdout:\n{out}\nstderr:\n{err}"));
    print!("{out}");
    assert!(status.success(), "python_clients.py failed ({status}):\nstdout:\n{out}\nstderr:\n{err}");
    for driver in ["ok PyMySQL", "ok mysql-connector-python"] {
        assert!(out.lines().any(|l| l.starts_with(driver)), "no '{driver}' line in the output:\n{out}\n{err}");
    }
}
