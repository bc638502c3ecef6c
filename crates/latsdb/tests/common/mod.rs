//! Starts a real cluster with `latsdb start` on loopback and ephemeral
//! ports, and always stops it: on `stop`, and from `Drop` if a test fails.

#![allow(dead_code)]

pub mod tagged;

use latsdb_client::{Client, ClientOptions};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_latsdb");

pub struct TestCluster {
    pub child: Child,
    pub mgmd: String,
    /// `host:port` of the REST node.
    pub rest: String,
    /// `host:port` of the SQL node (MySQL protocol).
    pub sql: String,
    pub output: mpsc::Receiver<String>,
    pub dir: tempfile::TempDir,
    /// With `--metrics`: each process's name and its GET /metrics URL.
    pub metrics: Vec<(String, String)>,
    /// With `--tls`: the directory of the cluster's certificates.
    pub tls_dir: Option<std::path::PathBuf>,
}

impl TestCluster {
    pub fn start(extra: &[&str]) -> TestCluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut child = Command::new(BIN)
            .args(["start", "--mgmd-port", "0", "--rest-port", "0", "--sql-port", "0", "--dir"])
            .arg(dir.path().join("data"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn latsdb start");
        let rx = lines_of(child.stdout.take().expect("stdout is piped"));
        let mut cluster = TestCluster {
            child,
            mgmd: String::new(),
            rest: String::new(),
            sql: String::new(),
            output: rx,
            dir,
            metrics: Vec::new(),
            tls_dir: None,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match cluster.output.recv_timeout(left) {
                Ok(line) => line,
                Err(_) => panic!("latsdb start did not come up within 60 s"),
            };
            if let Some(addr) = line.trim().strip_prefix("mgmd") {
                cluster.mgmd = addr.trim().to_string();
            }
            if let Some(url) = line.trim().strip_prefix("rest") {
                let url = url.trim().trim_start_matches("http://").trim_start_matches("https://");
                cluster.rest = url.split('/').next().unwrap_or_default().to_string();
            }
            if let Some(words) = line.trim().strip_prefix("metrics ") {
                let words: Vec<&str> = words.split_whitespace().collect();
                if let Some((url, name)) = words.split_last() {
                    cluster.metrics.push((name.join(" "), url.to_string()));
                }
            }
            if let Some(words) = line.trim().strip_prefix("tls ") {
                cluster.tls_dir = words.split_whitespace().next().map(std::path::PathBuf::from);
            }
            if let Some(rest) = line.trim().strip_prefix("sql ") {
                cluster.sql = rest.split_whitespace().next().unwrap_or_default().to_string();
            }
            if line.starts_with("Press Ctrl-C") {
                break;
            }
        }
        assert!(!cluster.mgmd.is_empty(), "the launcher printed no mgmd address");
        cluster
    }

    /// Sends `signal` to the launcher and waits (bounded) for it to exit.
    pub fn stop_with(&mut self, signal: i32) -> std::process::ExitStatus {
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("latsdb start did not stop within 20 s of signal {signal}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Options for a native client of this cluster (with its API
    /// certificate when it runs with `--tls`).
    pub fn client_options(&self) -> ClientOptions {
        ClientOptions::with_tls_dir(self.tls_dir.as_deref()).expect("the cluster's API certificate loads")
    }

    pub fn mgm(&self, args: &[&str]) -> String {
        let mut mgm = Command::new(BIN);
        mgm.args(["mgm", "--mgmd", &self.mgmd]);
        if let Some(dir) = &self.tls_dir {
            mgm.arg("--tls-dir").arg(dir);
        }
        let out = mgm.args(args).output().expect("run latsdb mgm");
        assert!(out.status.success(), "latsdb mgm {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The cluster's own logs say why a test failed; print their ends.
            let mut logs: Vec<_> = std::fs::read_dir(self.dir.path().join("data"))
                .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "log")).collect())
                .unwrap_or_default();
            logs.sort();
            for log in logs {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!("---- last lines of {} ----", log.display());
                for line in &lines[lines.len().saturating_sub(30)..] {
                    eprintln!("{line}");
                }
            }
        }
        terminate(&mut self.child, Duration::from_secs(15));
    }
}

/// The lines a child prints, read on a thread of their own so that a
/// test can wait for one with a timeout.
pub fn lines_of(stdout: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Stops a child process the test started: SIGTERM, then SIGKILL if it has
/// not exited within `grace`.
pub fn terminate(child: &mut Child, grace: Duration) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

pub fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Process ids of the data nodes listed by `latsdb mgm show`.
pub fn datanode_pids(show: &str) -> Vec<i32> {
    show.lines()
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("pid=")))
        .map(|p| p.parse().expect("mgm show prints numeric pids"))
        .collect()
}

/// The text a GET of `url` (http://host:port/path) answers with 200.
pub fn scrape(url: &str) -> String {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (address, path) = rest.split_once('/').expect("a path");
    let (status, body) = http(address, "GET", &format!("/{path}"), &[], b"");
    assert_eq!(status, 200, "GET {url}: {body}");
    body
}

/// The sum of the samples of metric `name` in Prometheus text (every label
/// set), without a parser: for counting, not for checking the format.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A minimal HTTP/1.1 client for the REST tests: one request per
/// connection, whole answer read with a timeout.
pub fn http(address: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let stream = std::net::TcpStream::connect(address).expect("connect to the REST node");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("set a read timeout");
    exchange(stream, address, method, path, headers, body)
}

/// Like `http`, over TLS, trusting only the certificate in `ca_pem`.
pub fn https(address: &str, ca_pem: &std::path::Path, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(ca_pem).expect("read the certificate") {
        roots.add(cert.expect("a PEM certificate")).expect("a usable certificate");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let ip: std::net::SocketAddr = address.parse().expect("an ip:port address");
    let name = rustls_pki_types::ServerName::IpAddress(ip.ip().into());
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("a TLS client");
    let tcp = std::net::TcpStream::connect(address).expect("connect to the REST node");
    tcp.set_read_timeout(Some(Duration::from_secs(30))).expect("set a read timeout");
    exchange(rustls::StreamOwned::new(conn, tcp), address, method, path, &[], body)
}

/// Sends one request with `Connection: close` and reads the whole answer.
fn exchange(
    mut stream: impl std::io::Read + std::io::Write,
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("send the request head");
    // A server may answer (413) before reading a large body; ignore a reset.
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    // (Over TLS the server closes without a close_notify after the answer.)
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP answer head in {text:?}"));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    (status, body.to_string())
}

/// A self-signed certificate for 127.0.0.1 and its key (by openssl).
pub fn self_signed_certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let mut openssl = Command::new("openssl");
    openssl.args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days", "2"]);
    openssl.args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"]);
    // An end-entity certificate (webpki refuses a CA certificate as one).
    openssl.args(["-addext", "basicConstraints=critical,CA:FALSE", "-keyout"]);
    openssl.arg(&key).arg("-out").arg(&cert);
    let (status, _, err) = run_bounded(&mut openssl, None, Duration::from_secs(60));
    assert!(status.success(), "openssl could not make a certificate: {err}");
    (cert, key)
}

/// The workspace root (this crate is `crates/latsdb`).
pub fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs a command with a deadline, feeding it `input` and reading its
/// output as it comes (so a chatty program cannot block on a full pipe).
/// Panics with the output so far when the deadline passes; returns the exit
/// status, stdout and stderr otherwise.
pub fn run_bounded(
    cmd: &mut Command,
    input: Option<&str>,
    limit: Duration,
) -> (std::process::ExitStatus, String, String) {
    use std::io::{Read, Write};
    let mut child = cmd
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?} ({e}); scripts/install-deps.sh installs the test tools"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout is piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr is piped")));
    if let Some(text) = input {
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let text = text.to_string();
        // Written from a thread: a program that answers before reading all
        // of its input must not block us.
        std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        });
    }
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
    match status {
        Some(status) => (status, out, err),
        None => panic!("{cmd:?} did not finish within {limit:?}\nstdout:\n{out}\nstderr:\n{err}"),
    }
}

/// Data nodes this test started itself; killed when it ends, however it ends.
pub struct Restarted(pub Vec<Child>);

impl Drop for Restarted {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts data nodes again from their data directories, each logging to
/// `datanode-<id>-restart.log` there.
pub fn start_datanodes(cluster: &TestCluster, data_dir: &std::path::Path, ids: &[&str]) -> Restarted {
    let mut nodes = Restarted(Vec::new());
    for node in ids {
        let log = std::fs::File::create(data_dir.join(format!("datanode-{node}-restart.log"))).unwrap();
        let child = Command::new(BIN)
            .args(["datanode", "--no-restart", "--mgmd", &cluster.mgmd, "--node-id", node, "--data-dir"])
            .arg(data_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        nodes.0.push(child);
    }
    nodes
}

/// Starts data nodes again and connects a client that waits for the
/// cluster to form.
pub async fn restart(cluster: &TestCluster, data_dir: &std::path::Path, ids: &[&str]) -> (Restarted, Client) {
    let nodes = start_datanodes(cluster, data_dir, ids);
    let client = Client::connect_with(
        &cluster.mgmd,
        ClientOptions { wait_for_cluster: Duration::from_secs(60), ..Default::default() },
    )
    .await
    .unwrap();
    (nodes, client)
}

/// Kills data nodes with SIGKILL and waits until they are gone.
pub fn kill_all(pids: &[i32]) {
    signal_all(pids, libc::SIGKILL, Duration::from_secs(10));
}

/// Sends `signal` to data nodes and waits (at most `within`) until they
/// are gone.
pub fn signal_all(pids: &[i32], signal: i32, within: Duration) {
    for &pid in pids {
        send(pid, signal);
    }
    let deadline = Instant::now() + within;
    while pids.iter().any(|&p| process_exists(p)) {
        assert!(Instant::now() < deadline, "the data nodes did not stop within {within:?} of signal {signal}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn sigkill(pid: i32) {
    send(pid, libc::SIGKILL);
}

pub fn send(pid: i32, signal: i32) {
    // SAFETY: signalling a data node process this test's cluster started.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Runs `latsdb mgm ARGS` off the async workers.
pub async fn mgm(cluster: &TestCluster, args: &[&str]) -> String {
    let (bin, mgmd) = (BIN, cluster.mgmd.clone());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin).args(["mgm", "--mgmd", &mgmd]).args(&args).output().expect("run latsdb mgm")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "latsdb mgm failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

pub fn host_port(cluster: &TestCluster) -> (String, String) {
    let (h, p) = cluster.sql.rsplit_once(':').expect("the launcher printed the SQL node's address");
    (h.to_string(), p.to_string())
}

/// The mariadb client in batch mode; returns (success, stdout, stderr).
pub fn mariadb(cluster: &TestCluster, extra: &[&str], script: &str) -> (bool, String, String) {
    let (host, port) = host_port(cluster);
    let mut cmd = Command::new("mariadb");
    cmd.args(["-h", &host, "-P", &port, "-u", "root", "--batch", "--connect-timeout=10"]).args(extra);
    let (status, out, err) = run_bounded(&mut cmd, Some(script), Duration::from_secs(60));
    (status.success(), out, err)
}

/// A MariaDB server of the test's own, on an ephemeral loopback port and a
/// scratch data directory; stopped (by its pid) when dropped.
pub struct MariaDb {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl MariaDb {
    pub fn start() -> MariaDb {
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
                // The greeting names the server: a port another process
                // took between free_port and mariadbd's bind must not pass.
                if answers_with(port, b"", b"MariaDB") {
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

/// A Redis server of the test's own on a free loopback port, without
/// persistence, stopped by its PID when dropped.
pub struct Redis {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        let dir = tempfile::tempdir().expect("temporary directory");
        for attempt in 0..5 {
            let port = free_port();
            let mut child = Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .arg("--logfile")
                .arg(dir.path().join("redis.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("start redis-server (scripts/install-deps.sh installs redis-server)");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                // PONG proves it is this Redis listening, not a process that
                // took the port between free_port and redis-server's bind.
                if answers_with(port, b"PING\r\n", b"+PONG") {
                    return Redis { child, port, _dir: dir };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("redis-server did not answer on port {port} (attempt {}); trying another port", attempt + 1);
        }
        let log = std::fs::read_to_string(dir.path().join("redis.log")).unwrap_or_default();
        panic!("redis-server did not start within 10 s, five times; its log:\n{log}");
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        terminate(&mut self.child, Duration::from_secs(10));
    }
}

/// Whether the server on loopback `port` answers `request` (sent first,
/// if not empty) with bytes that contain `expected` within a second.
fn answers_with(port: u16, request: &[u8], expected: &[u8]) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if !request.is_empty() && stream.write_all(request).is_err() {
        return false;
    }
    let mut reply = [0u8; 256];
    match stream.read(&mut reply) {
        Ok(n) => reply[..n].windows(expected.len()).any(|w| w == expected),
        Err(_) => false,
    }
}

pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}
