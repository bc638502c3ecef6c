//! The cluster under test: a management server on host 0 and four data
//! nodes (two node groups of two replicas) on hosts 1 to 4, each a real
//! `latsdb` process in its own network namespace. Each data node runs
//! under its angel (`latsdb datanode` without `--no-restart`), as in
//! production, so a killed node comes back by itself; the campaign
//! signals the data node process (the angel's child).
//!
//! Every process is started from the thread that owns the `Cluster` (the
//! parent-death signal is tied to the starting thread) in a process group
//! of its own, and is ended by its process id on drop.

use crate::hosts::Hosts;
use latsdb_client::{Client, ClientOptions};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Node ids of the data nodes, in configuration order: nodes 2 and 3 form
/// node group 0, nodes 4 and 5 node group 1.
pub const DATA_NODES: [u16; 4] = [2, 3, 4, 5];
pub const HEARTBEAT_INTERVAL_MS: u64 = 100;
pub const HEARTBEAT_MISSED: u64 = 5;

pub struct Cluster {
    exe: PathBuf,
    dir: PathBuf,
    mgmd_address: String,
    mgmd: Child,
    /// Management server processes started after the first (each logs to
    /// `mgmd-<n>.log`).
    mgmd_restarts: u32,
    angels: BTreeMap<u16, Child>,
}

/// The host index of data node `id` (host 0 is the management server's).
pub fn host_of(id: u16) -> usize {
    let position = DATA_NODES.iter().position(|&n| n == id);
    assert!(position.is_some(), "node {id} is not a data node of the campaign");
    position.unwrap_or(0) + 1
}

fn config(hosts: &Hosts) -> String {
    let mut text = format!(
        "[cluster]\nname = \"chaos\"\nreplicas = 2\nheartbeat_interval_ms = {HEARTBEAT_INTERVAL_MS}\n\
         heartbeat_missed = {HEARTBEAT_MISSED}\nlock_wait_timeout_ms = 1000\n\n\
         [mgmd]\nnode_id = 1\nhost = \"{}\"\nport = 0\n\n\
         [datanode_defaults]\nthreads = 1\ndata_memory_mb = 256\ncpu_bind = \"off\"\nidle_poll = false\n",
        hosts.address(0)
    );
    for id in DATA_NODES {
        text += &format!("\n[[datanode]]\nnode_id = {id}\nhost = \"{}\"\nport = 0\n", hosts.address(host_of(id)));
    }
    text
}

impl Cluster {
    /// Starts the management server and the data nodes in `dir` and waits
    /// until every data node has started.
    pub fn start(exe: &Path, dir: &Path, hosts: &Hosts) -> Result<Cluster, String> {
        let config_path = dir.join("config.toml");
        std::fs::write(&config_path, config(hosts))
            .map_err(|e| format!("cannot write {}: {e}", config_path.display()))?;
        let ready = dir.join("mgmd.addr");
        let mgmd = spawn_logged(mgmd_command(hosts, exe, dir, None), &dir.join("mgmd.log"))?;
        let mut cluster = Cluster {
            exe: exe.to_path_buf(),
            dir: dir.to_path_buf(),
            mgmd_address: String::new(),
            mgmd,
            mgmd_restarts: 0,
            angels: BTreeMap::new(),
        };
        cluster.mgmd_address = wait_for_file(&ready, Duration::from_secs(20)).map_err(|e| {
            format!("the management server did not start ({e}); see {}", dir.join("mgmd.log").display())
        })?;
        for id in DATA_NODES {
            let mut cmd = hosts.command(host_of(id), exe);
            cmd.args(["datanode", "--mgmd", &cluster.mgmd_address, "--node-id", &id.to_string(), "--data-dir"]);
            cmd.arg(dir.join("data"));
            let angel = spawn_logged(cmd, &dir.join(format!("datanode-{id}.log")))?;
            cluster.angels.insert(id, angel);
        }
        Ok(cluster)
    }

    pub fn mgmd_address(&self) -> &str {
        &self.mgmd_address
    }

    /// The log of the management server's current process.
    fn mgmd_log(&self) -> PathBuf {
        match self.mgmd_restarts {
            0 => self.dir.join("mgmd.log"),
            n => self.dir.join(format!("mgmd-{n}.log")),
        }
    }

    /// Kills the management server (SIGKILL) and starts a new one on the
    /// same port with the same data folder, as an operator or a process
    /// manager would after a crash; waits until it listens.
    pub fn restart_mgmd(&mut self, hosts: &Hosts) -> Result<(), String> {
        // SAFETY: the process group of the management server this campaign started.
        unsafe {
            libc::kill(-(self.mgmd.id() as i32), libc::SIGKILL);
        }
        let _ = self.mgmd.wait();
        let port = self.mgmd_address.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        let Some(port) = port else {
            return Err(format!("the management server's address {} names no port", self.mgmd_address));
        };
        let ready = self.dir.join("mgmd.addr");
        let _ = std::fs::remove_file(&ready);
        self.mgmd_restarts += 1;
        let log = self.mgmd_log();
        self.mgmd = spawn_logged(mgmd_command(hosts, &self.exe, &self.dir, Some(port)), &log)?;
        let address = wait_for_file(&ready, Duration::from_secs(20))
            .map_err(|e| format!("the management server did not start again ({e}); see {}", log.display()))?;
        if address != self.mgmd_address {
            return Err(format!("the management server started again at {address}, not {}", self.mgmd_address));
        }
        Ok(())
    }

    /// The data node process of node `id` (its angel's child), if running.
    pub fn datanode_pid(&self, id: u16) -> Option<i32> {
        let angel = self.angels.get(&id)?.id();
        let children = std::fs::read_to_string(format!("/proc/{angel}/task/{angel}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Sends `signal` to data node `id`; false when it is not running.
    pub fn signal(&self, id: u16, signal: i32) -> bool {
        let Some(pid) = self.datanode_pid(id) else { return false };
        // SAFETY: a signal to a process this campaign started (through its angel).
        unsafe { libc::kill(pid, signal) == 0 }
    }

    /// Runs `latsdb mgm --mgmd ADDRESS args...` from the campaign's host
    /// and returns its output, or why it failed.
    pub fn mgm(&self, args: &[&str]) -> Result<String, String> {
        let output = std::process::Command::new(&self.exe)
            .args(["mgm", "--mgmd", &self.mgmd_address])
            .args(args)
            .output()
            .map_err(|e| format!("cannot run latsdb mgm: {e}"))?;
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        if output.status.success() {
            Ok(text)
        } else {
            Err(format!("`latsdb mgm {}` failed: {}", args.join(" "), text.trim()))
        }
    }

    /// Whether every process the campaign started is still running (a data
    /// node's angel, not the node, which may be down on purpose).
    pub fn check_alive(&mut self) -> Result<(), String> {
        if let Ok(Some(status)) = self.mgmd.try_wait() {
            return Err(format!("the management server exited ({status}); see {}", self.mgmd_log().display()));
        }
        for (id, angel) in &mut self.angels {
            if let Ok(Some(status)) = angel.try_wait() {
                let log = self.dir.join(format!("datanode-{id}.log"));
                return Err(format!("the angel of data node {id} exited ({status}); see {}", log.display()));
            }
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut children: Vec<&mut Child> = self.angels.values_mut().collect();
        children.push(&mut self.mgmd);
        for child in children {
            // SAFETY: the process group of a child this campaign started
            // (its angel's data node is in the same group).
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }
}

/// The management server's command on host 0: `config.toml` and the data
/// folder `mgmd` in `dir`, its address written to `dir/mgmd.addr`; on
/// `port` when given, else on the configuration's (any free one).
fn mgmd_command(hosts: &Hosts, exe: &Path, dir: &Path, port: Option<u16>) -> std::process::Command {
    let mut cmd = hosts.command(0, exe);
    cmd.arg("mgmd").arg("--config").arg(dir.join("config.toml")).arg("--data-dir").arg(dir.join("mgmd"));
    cmd.arg("--ready-file").arg(dir.join("mgmd.addr"));
    if let Some(port) = port {
        cmd.args(["--port", &port.to_string()]);
    }
    cmd
}

/// Starts `cmd` with its output in `log`, in a process group of its own
/// (so that a signal to the group reaches an angel's data node too), dying
/// with the thread that started it.
pub fn spawn_logged(mut cmd: std::process::Command, log: &Path) -> Result<Child, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| format!("cannot open {}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err).process_group(0);
    // SAFETY: prctl is async-signal-safe; it only sets a flag of the new process.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))
}

/// Waits (bounded) until `path` holds text (a process's ready file) and
/// returns it trimmed.
pub fn wait_for_file(path: &Path, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if !text.trim().is_empty() {
                return Ok(text.trim().to_string());
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("{} did not appear within {} s", path.display(), timeout.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long the layout must show every data node started, unchanged,
/// before the cluster counts as whole: a node admitted again while a
/// fault's effects still play out may be removed a moment later.
const STABLE: Duration = Duration::from_millis(2 * HEARTBEAT_INTERVAL_MS * HEARTBEAT_MISSED);

/// Asks the management server until every data node has been started, in
/// the same layout, for `STABLE`, or `timeout` passes; returns how long it
/// took.
pub async fn wait_all_started(mgmd: &str, timeout: Duration) -> Result<Duration, String> {
    let start = Instant::now();
    let mut client: Option<Client> = None;
    // Since when, and in which layout version, every node was started.
    let mut whole: Option<(Instant, u64)> = None;
    loop {
        if client.is_none() {
            let options = ClientOptions {
                connect_timeout: Duration::from_secs(2),
                wait_for_cluster: Duration::from_secs(1),
                ..ClientOptions::default()
            };
            client = Client::connect_with(mgmd, options).await.ok();
        }
        if let Some(c) = &client {
            match c.refresh_layout().await {
                Ok(layout) if layout.all_started() => match whole {
                    Some((since, version)) if version == layout.version => {
                        if since.elapsed() >= STABLE {
                            return Ok(since.duration_since(start));
                        }
                    }
                    _ => whole = Some((Instant::now(), layout.version)),
                },
                Ok(_) => whole = None,
                Err(_) => {
                    client = None;
                    whole = None;
                }
            }
        }
        if start.elapsed() >= timeout {
            return Err(format!("the data nodes were not all started within {} s", timeout.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The data nodes the management server does not list as started.
pub async fn not_started(client: &Client) -> Vec<u16> {
    match client.refresh_layout().await {
        Ok(layout) => layout
            .datanodes
            .iter()
            .filter(|d| d.status != latsdb_types::proto::NodeStatus::Started)
            .map(|d| d.node_id)
            .collect(),
        Err(_) => DATA_NODES.to_vec(),
    }
}
