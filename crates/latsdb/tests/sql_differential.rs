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

use common::{run_bounded, terminate, workspace, TestCluster};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A MariaDB server of the test's own, on an ephemeral loopback port and a
/// scratch data directory; stopped (by its pid) when dropped.
struct MariaDb {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl MariaDb {
    fn start() -> MariaDb {
        let dir = tempfile::tempdir().expect("temporary directory");
        let data = dir.path().join("data");
        let root = unsafe { libc::geteuid() } == 0;
        let mut install = Command::new("mariadb-install-db");
        install.arg("--no-defaults").arg(format!("--datadir={}", data.display())).arg("--skip-test-db");
        if root {
            install.arg("--user=root");
        }
        let (status, out, err) = run_bounded(&mut install, None, Duration::from_secs(120));
        assert!(status.success(), "mariadb-install-db failed ({status}):\n{out}\n{err}");
        for attempt in 0..5 {
            let port = free_port();
            let mut server = Command::new("mariadbd");
            server
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .arg(format!("--socket={}", dir.path().join("sock").display()))
                .arg(format!("--port={port}"))
                .args(["--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-name-resolve"])
                .args(["--innodb-buffer-pool-size=64M", "--skip-log-bin"])
                .arg(format!("--log-error={}", dir.path().join("error.log").display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if root {
                server.arg("--user=root");
            }
            let mut child = server.spawn().expect("start mariadbd (scripts/install-deps.sh installs mariadb-server)");
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return MariaDb { child, port, _dir: dir };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("mariadbd did not listen on port {port} (attempt {}); trying another port", attempt + 1);
        }
        let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
        panic!("mariadbd did not start within 60 s, five times; its log:\n{log}");
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(30));
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

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
