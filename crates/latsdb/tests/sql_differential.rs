//! The SQL node against MariaDB, answer by answer: `tests/sql/differential.py`
//! builds the same random tables in both, then runs random queries
//! (expressions of every column type with NULLs, predicates that become
//! key lookups and index ranges, joins, grouping, DISTINCT, ORDER BY with
//! LIMIT, subqueries, derived tables, CTEs, window functions, UNION) and
//! random writes (INSERT, INSERT IGNORE, REPLACE, ON DUPLICATE KEY UPDATE,
//! UPDATE and DELETE with ORDER BY/LIMIT), comparing every answer and,
//! after each write, both tables whole; a quarter of the queries run as
//! server-side prepared statements on latsdb. Any difference fails the test with
//! the seed and the statement. `scripts/install-deps.sh` installs Debian's
//! mariadb-server, which the test starts on its own in a scratch folder.

mod common;

use common::{run_bounded, workspace, MariaDb, TestCluster};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Seeds run (about 4 s each here).
const SEEDS: u64 = 24;

#[test]
fn random_queries_and_writes_answer_as_mariadb_does() {
    let python = workspace().join("target/pyenv/bin/python3");
    assert!(python.exists(), "{} is missing: run scripts/install-deps.sh (scripts/test.sh does)", python.display());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql/differential.py");
    let mariadb = MariaDb::start();
    let cluster = TestCluster::start(&[]);
    let mariadb_addr = format!("127.0.0.1:{}", mariadb.port);
    let mut failed = Vec::new();
    let mut compared = 0;
    for seed in 1..=SEEDS {
        let mut cmd = Command::new(&python);
        cmd.arg(&script).args([cluster.sql.as_str(), mariadb_addr.as_str()]);
        cmd.args(["--seed", &seed.to_string(), "--queries", "400", "--writes", "150"]);
        let (status, out, err) = run_bounded(&mut cmd, None, Duration::from_secs(120));
        let summary = out.lines().last().unwrap_or_default().to_string();
        compared += summary
            .split_once(": ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if !status.success() {
            failed.push(format!("seed {seed} ({status}):\n{out}\n{err}"));
        }
    }
    println!("{compared} statements compared over {SEEDS} seeds");
    assert!(failed.is_empty(), "latsdb and MariaDB answered differently:\n{}", failed.join("\n"));
    assert!(compared >= SEEDS * 550, "fewer statements were compared than generated ({compared})");
}
