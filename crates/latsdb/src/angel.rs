//! The angel of a standalone `latsdb datanode` (NDB's angel process): the
//! command runs the data node as its child and starts it again when it
//! dies unasked, with the launcher's backoff and give-up rules (`Healer`).
//! It also carries out `latsdb mgm N start` for its node while the node is
//! down, and reports what it decides to the cluster log. `--no-restart`
//! runs the data node in the process itself, for supervisors such as
//! systemd, and for the launcher, which is its data nodes' angel.

use crate::healer::{describe_exit, Decision, Healer};
use latsdb_net::tls::{ClusterTls, Role};
use latsdb_net::RpcConn;
use latsdb_types::proto::{MgmRequest, MgmResponse, Severity};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How often the angel looks at its child and the management server.
const POLL: Duration = Duration::from_millis(200);
/// A node that is down and a management server that has not answered for
/// this long: the cluster was shut down, and the angel ends too.
const MGMD_GONE: Duration = Duration::from_secs(10);
/// How long a child asked to stop (the angel got SIGTERM) may take.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The data node's command line, less what the angel decides per start.
pub struct AngelArgs {
    pub mgmd: String,
    pub node_id: Option<u16>,
    /// `datanode`'s other flags (threads, data dir, diskless), passed on.
    pub flags: Vec<std::ffi::OsString>,
    /// The first start is an initial one; restarts never are (the node
    /// restores what it has and copies the rest).
    pub initial: bool,
    /// The data node's TLS directory: the angel speaks to the management
    /// server with the data node's certificate.
    pub tls: crate::TlsArgs,
}

/// Runs the data node as a child until the angel is stopped, or the
/// cluster is shut down while the node is down.
pub fn run(args: AngelArgs) -> Result<(), String> {
    let rt = crate::runtime(1)?;
    let node_id_file = std::env::temp_dir().join(format!("latsdb-angel-{}.node-id", std::process::id()));
    let mgmd = MgmdLink::new(&args.mgmd, args.tls.load(Role::DataNode)?);
    // Resolved now, by path: once the file is replaced (an upgrade in
    // place), this process's own executable reads as "... (deleted)", and
    // the restarted node is to run the new file.
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the latsdb executable: {e}"))?;
    let angel = Angel { args, exe, node: None, node_id_file, child: None, healer: Healer::default(), mgmd };
    let file = angel.node_id_file.clone();
    let result = rt.block_on(angel.watch());
    let _ = std::fs::remove_file(file);
    result
}

struct Angel {
    args: AngelArgs,
    /// The latsdb executable the data node is started from.
    exe: std::path::PathBuf,
    /// The node id, once known: given, or written by the child to
    /// `node_id_file` once it registered (pids do not tell, as they repeat
    /// across hosts and containers).
    node: Option<u16>,
    node_id_file: std::path::PathBuf,
    child: Option<Child>,
    healer: Healer,
    mgmd: MgmdLink,
}

impl Angel {
    async fn watch(mut self) -> Result<(), String> {
        self.node = self.args.node_id;
        // Installed before the first child starts, and kept: a signal that
        // came while no listener existed would be lost.
        use tokio::signal::unix::{signal, SignalKind};
        let mut sigterm =
            signal(SignalKind::terminate()).map_err(|e| format!("cannot install the SIGTERM handler: {e}"))?;
        let mut sigint =
            signal(SignalKind::interrupt()).map_err(|e| format!("cannot install the SIGINT handler: {e}"))?;
        let initial = self.args.initial;
        self.start(initial).await?;
        let mut mgmd_answered = Instant::now();
        loop {
            tokio::select! {
                _ = sigint.recv() => return self.stop("interrupt"),
                _ = sigterm.recv() => return self.stop("SIGTERM"),
                _ = tokio::time::sleep(POLL) => {}
            }
            if self.child.is_some() {
                self.reap().await?;
                mgmd_answered = Instant::now();
                continue;
            }
            let due = self.healer.due(Instant::now());
            if !due.is_empty() {
                self.start(false).await?;
                continue;
            }
            match self.start_request().await {
                Some(initial) => self.start(initial).await?,
                None if self.mgmd.is_connected() => mgmd_answered = Instant::now(),
                None if mgmd_answered.elapsed() >= MGMD_GONE => {
                    println!(
                        "angel: the data node is down and the management server has not answered for {} s (the cluster was shut down); exiting",
                        MGMD_GONE.as_secs()
                    );
                    return Ok(());
                }
                None => {}
            }
        }
    }

    fn name(&self) -> String {
        match self.node {
            Some(node) => format!("data node {node}"),
            None => "the data node".into(),
        }
    }

    /// Notes the child's node id once it wrote it, and decides what to do
    /// when the child exits.
    async fn reap(&mut self) -> Result<(), String> {
        if self.node.is_none() {
            // Read before the exit is looked at: a child that registered
            // and died since the last poll still named its node.
            self.node = std::fs::read_to_string(&self.node_id_file).ok().and_then(|t| t.trim().parse().ok());
        }
        let Some(child) = self.child.as_mut() else { return Ok(()) };
        let pid = child.id();
        let status = match child.try_wait() {
            Ok(Some(status)) => status,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("cannot wait for the data node (pid {pid}): {e}")),
        };
        self.child = None;
        // A child that died before it registered has no node id: its
        // deaths are counted under id 0.
        let decision = self.healer.on_exit(self.node.unwrap_or(0), status.success(), Instant::now());
        let (severity, text) = describe_exit(&self.name(), status, &decision);
        self.report(severity, text).await;
        if self.node.is_none() && !matches!(decision, Decision::Restart { .. }) {
            // `latsdb mgm N start` names a node: it cannot reach this angel.
            return Err(format!(
                "the data node exited ({status}) before it took a node id; see its output above, then start `latsdb datanode` again"
            ));
        }
        Ok(())
    }

    /// Starts the data node (`initial`: from an empty data directory).
    async fn start(&mut self, initial: bool) -> Result<(), String> {
        debug_assert!(self.child.is_none(), "one data node per angel");
        let mut cmd = Command::new(&self.exe);
        cmd.args(["datanode", "--no-restart", "--mgmd", &self.args.mgmd]).args(&self.args.flags);
        match self.node {
            Some(node) => cmd.args(["--node-id", &node.to_string()]),
            None => cmd.arg("--node-id-file").arg(&self.node_id_file),
        };
        if initial {
            cmd.arg("--initial");
        }
        cmd.stdin(Stdio::null());
        let angel = std::process::id() as libc::pid_t;
        // SAFETY: prctl, getppid and _exit are async-signal-safe. The data
        // node stops when the angel dies, even by SIGKILL, so no data node
        // runs unwatched; one whose angel died before the prctl took
        // effect stops at once.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                if libc::getppid() != angel {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| format!("cannot start the data node: {e}"))?;
        let how = if initial { " from an empty data directory" } else { "" };
        let text = format!("{} started{how} (pid {})", self.name(), child.id());
        self.child = Some(child);
        self.report(Severity::Info, text).await;
        Ok(())
    }

    /// The angel was asked to stop: so is its data node (it stops cleanly,
    /// as on `latsdb mgm N stop`).
    fn stop(&mut self, why: &str) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            println!("angel: stopping ({why})");
            return Ok(());
        };
        println!("angel: stopping ({why}); stopping {} (pid {}) first", self.name(), child.id());
        // SAFETY: signalling the child this angel started and has not reaped.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_GRACE;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    println!("angel: {} exited ({status})", self.name());
                    return Ok(());
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    println!("angel: {} did not stop within {} s; killing it", self.name(), STOP_GRACE.as_secs());
                    let _ = child.kill();
                    let _ = child.wait();
                    return Ok(());
                }
            }
        }
    }

    /// A pending `latsdb mgm N start` for this node: Some(initial).
    async fn start_request(&mut self) -> Option<bool> {
        let node = self.node?;
        let requests = self.mgmd.take_start_requests(Some(node)).await;
        let initial = requests.iter().find(|(n, _)| *n == node).map(|&(_, initial)| initial)?;
        self.healer.on_requested_start(node);
        Some(initial)
    }

    /// Prints a decision and adds it to the cluster log.
    async fn report(&mut self, severity: Severity, text: String) {
        println!("angel: {text}");
        let source = format!("angel of {}", self.name());
        self.mgmd.report_event(severity, &source, &text).await;
    }
}

/// The management server as the angel and the launcher ask it: connected
/// when needed (None while it does not answer; the next poll tries again).
pub struct MgmdLink {
    address: String,
    tls: Option<std::sync::Arc<ClusterTls>>,
    conn: Option<RpcConn>,
}

impl MgmdLink {
    pub fn new(address: &str, tls: Option<std::sync::Arc<ClusterTls>>) -> MgmdLink {
        MgmdLink { address: address.to_string(), tls, conn: None }
    }

    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    async fn connected(&mut self) -> Option<&mut RpcConn> {
        if self.conn.is_none() {
            self.conn = RpcConn::connect(&self.address, Duration::from_secs(1), self.tls.as_deref()).await.ok();
        }
        self.conn.as_mut()
    }

    /// Start requests queued at the management server, every node's or
    /// `only` one's (none when it cannot be asked right now: the next poll
    /// asks again).
    pub async fn take_start_requests(&mut self, only: Option<u16>) -> Vec<(u16, bool)> {
        let Some(c) = self.connected().await else { return Vec::new() };
        match c.call(&MgmRequest::TakeStartRequests { only }).await {
            Ok(MgmResponse::StartRequests(r)) => r,
            Ok(_) => Vec::new(),
            Err(_) => {
                self.conn = None;
                Vec::new()
            }
        }
    }

    /// Adds an event to the cluster log. One that cannot be delivered (the
    /// management server is down) stays only in this process's output.
    pub async fn report_event(&mut self, severity: Severity, source: &str, text: &str) {
        let Some(c) = self.connected().await else { return };
        let event = MgmRequest::ReportEvent { severity, source: source.to_string(), text: text.to_string() };
        if c.call::<_, MgmResponse>(&event).await.is_err() {
            self.conn = None;
        }
    }
}
