//! The SQL node driven by the Python MySQL drivers against `latsdb start`:
//! `tests/sql/python_clients.py` runs the same checks with PyMySQL and with
//! mysql-connector-python (pure Python and its C extension): connecting with
//! the drivers' defaults, DDL, executemany, lastrowid, typed values read
//! back, rowcounts, commit and rollback, server-side prepared statements, a
//! duplicate key. `scripts/install-deps.sh` installs the pinned drivers of
//! `scripts/requirements-sql-clients.txt` into `target/pyenv`.

mod common;

use common::{run_bounded, workspace, TestCluster};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn pymysql_and_mysql_connector_python_pass_the_client_script() {
    let python = workspace().join("target/pyenv/bin/python3");
    assert!(python.exists(), "{} is missing: run scripts/install-deps.sh (scripts/test.sh does)", python.display());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql/python_clients.py");
    let cluster = TestCluster::start(&[]);
    let (host, port) = cluster.sql.rsplit_once(':').expect("the launcher printed the SQL node's address");
    let limit = Duration::from_secs(120);
    let (status, out, err) = run_bounded(Command::new(&python).arg(&script).args([host, port]), None, limit);
    print!("{out}");
    assert!(status.success(), "python_clients.py failed ({status}):\nstdout:\n{out}\nstderr:\n{err}");
    for driver in ["ok PyMySQL", "ok mysql-connector-python"] {
        assert!(out.lines().any(|l| l.starts_with(driver)), "no '{driver}' line in the output:\n{out}\n{err}");
    }
}
