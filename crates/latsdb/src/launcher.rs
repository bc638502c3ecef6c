//! `latsdb start`: the embedded default cluster. Starts the management
//! server and the data nodes as separate processes on loopback, prints the
//! endpoints, and stops them all on Ctrl-C or SIGTERM.

use crate::angel::MgmdLink;
use crate::healer::{describe_exit, Decision, Healer};
use clap::Args;
use latsdb_net::RpcConn;
use latsdb_types::config::{ClusterConfig, CpuBind};
use latsdb_types::proto::{ClusterLayout, MgmRequest, MgmResponse, Severity};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum CpuBindArg {
    Auto,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
pub enum OnOffArg {
    On,
    Off,
}

/// Where the SQL node keeps the columns of new tables that name no `STORAGE`.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
pub enum StorageArg {
    Memory,
    Disk,
}

#[derive(Args, Clone)]
pub struct StartArgs {
    /// Folder for configuration, logs and data.
    #[arg(long, default_value = "latsdb-data")]
    dir: PathBuf,
    /// Management server port (0 picks a free port).
    #[arg(long, default_value_t = 1186)]
    mgmd_port: u16,
    /// Serve the management server's GET /metrics (Prometheus) on this port.
    #[arg(long)]
    mgmd_metrics_port: Option<u16>,
    /// Serve GET /metrics from every process on free ports (the management
    /// server's on --mgmd-metrics-port if given) and print their addresses;
    /// the REST node always answers GET /metrics on its own port.
    #[arg(long)]
    metrics: bool,
    /// Data nodes to start.
    #[arg(long, default_value_t = 2)]
    datanodes: u16,
    /// Replicas per node group (the default: one node group of two replicas).
    #[arg(long, default_value_t = 2)]
    replicas: u8,
    /// Shard threads per data node (0 = automatic).
    #[arg(long, default_value_t = 0)]
    threads: u16,
    /// Data memory per data node in MiB (0 = half the machine's memory, shared).
    #[arg(long, default_value_t = 0)]
    data_memory_mb: u64,
    /// Page cache per data node in MiB for columns kept on disk (0 = a quarter of the data memory).
    #[arg(long, default_value_t = 0)]
    disk_page_cache_mb: u64,
    /// Largest tablespace per data node in MiB (0 = no limit but the disk's).
    #[arg(long, default_value_t = 0)]
    tablespace_mb: u64,
    /// REDO log each data node may keep on disk in MiB (0 = half the disk's free space at start).
    #[arg(long, default_value_t = 0)]
    redo_limit_mb: u64,
    /// Read and write tablespace files with O_DIRECT, so only the page cache caches disk columns (on or off).
    #[arg(long, value_enum, default_value = "off")]
    disk_direct_io: OnOffArg,
    /// Where SQL keeps the columns of new tables that name no STORAGE (disk: their unindexed strings and binaries).
    #[arg(long, value_enum, default_value = "memory")]
    default_column_storage: StorageArg,
    /// Bind shard threads to CPUs of their own when there are enough (auto), or leave them to the OS (off).
    #[arg(long, value_enum, default_value = "auto")]
    cpu_bind: CpuBindArg,
    /// Data nodes keep idle CPUs polling instead of halting while they run (on), or not (off).
    #[arg(long, value_enum, default_value = "on")]
    idle_poll: OnOffArg,
    /// Length of a commit epoch in ms (REDO sync interval; 0 = the default).
    #[arg(long, default_value_t = 0)]
    epoch_interval_ms: u64,
    /// MiB of REDO between local checkpoints (0 disables them; default 64).
    #[arg(long)]
    checkpoint_trigger_mb: Option<u64>,
    /// Use this cluster configuration instead of the generated one.
    #[arg(long)]
    config: Option<PathBuf>,
    /// REST node port (0 picks a free port).
    #[arg(long, default_value_t = 4406)]
    rest_port: u16,
    /// REST authentication: none (default, loopback only) or api-key.
    #[arg(long, value_enum, default_value = "none")]
    rest_auth: crate::rest_cmd::AuthArg,
    /// Do not start a REST node.
    #[arg(long)]
    no_rest: bool,
    /// SQL node (MySQL protocol) port (0 picks a free port).
    #[arg(long, default_value_t = 3306)]
    sql_port: u16,
    /// SQL accounts as USER or USER:PASSWORD (default: root without password).
    #[arg(long = "sql-user")]
    sql_users: Vec<String>,
    /// Do not start a SQL node.
    #[arg(long)]
    no_sql: bool,
    /// TLS certificate (PEM) for the REST node; with --rest-tls-key it serves HTTPS only.
    #[arg(long, requires = "rest_tls_key")]
    rest_tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for the REST node.
    #[arg(long, requires = "rest_tls_cert")]
    rest_tls_key: Option<PathBuf>,
    /// TLS certificate (PEM) for the SQL node; with --sql-tls-key, clients may use TLS.
    #[arg(long, requires = "sql_tls_key")]
    sql_tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for the SQL node.
    #[arg(long, requires = "sql_tls_cert")]
    sql_tls_key: Option<PathBuf>,
    /// How long to wait for the cluster to come up, in seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Leave a data node that dies down instead of starting it again (by
    /// default it is restarted after 1 s, then 2 s, and left down at the
    /// third death within 10 minutes).
    #[arg(long)]
    no_restart: bool,
    /// Run every native link (clients, data nodes, the management server)
    /// over TLS with mutual authentication: a cluster CA and a certificate
    /// per role are made in <dir>/tls on the first start, and kept.
    #[arg(long)]
    tls: bool,
}

struct Proc {
    name: String,
    log: PathBuf,
    child: Child,
    /// Exited (and reported) while the cluster ran.
    gone: bool,
}

/// Children die with the launcher even if it is killed outright.
fn spawn(name: &str, args: &[String], log: &Path) -> Result<Proc, String> {
    spawn_logging(name, args, log, false)
}

/// `spawn`, appending to the log when `append` (a restarted process keeps
/// its predecessor's log).
fn spawn_logging(name: &str, args: &[String], log: &Path, append: bool) -> Result<Proc, String> {
    // Resolved once: a data node restarted later runs the same executable
    // even if the file was replaced meanwhile (an upgrade in place).
    static EXE: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let exe = EXE
        .get_or_init(|| std::env::current_exe().map_err(|e| format!("cannot find the latsdb executable: {e}")))
        .clone()?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(log)
        .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| format!("cannot open {}: {e}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: prctl is async-signal-safe; it only sets a flag of the new process.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("cannot start {name}: {e}"))?;
    Ok(Proc { name: name.to_string(), log: log.to_path_buf(), child, gone: false })
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

fn check_alive(procs: &mut [Proc]) -> Result<(), String> {
    for p in procs.iter_mut() {
        if let Ok(Some(status)) = p.child.try_wait() {
            return Err(format!(
                "{} exited ({status}) during start-up; last lines of {}:\n{}",
                p.name,
                p.log.display(),
                log_tail(&p.log)
            ));
        }
    }
    Ok(())
}

fn stop_all(procs: &mut [Proc]) {
    // In order: the API nodes (no new work), the data nodes (each waits
    // until what it committed is durable, which needs the others still
    // running, so they stop together), then the management server (which
    // records the last view as the data nodes leave).
    let api = |p: &Proc| p.name == "rest" || p.name == "sql";
    let data = |p: &Proc| p.name.starts_with("datanode");
    stop_group(procs, api, Duration::from_secs(10));
    stop_group(procs, data, Duration::from_secs(20));
    stop_group(procs, |p| !api(p) && !data(p), Duration::from_secs(10));
}

/// SIGTERM to every process of the group, then waits for them, killing
/// those still running after `grace`.
fn stop_group(procs: &mut [Proc], member: impl Fn(&Proc) -> bool, grace: Duration) {
    for p in procs.iter_mut().filter(|p| member(p)) {
        // SAFETY: sending a signal to a child process we started and have not reaped.
        unsafe {
            libc::kill(p.child.id() as i32, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + grace;
    for p in procs.iter_mut().filter(|p| member(p)) {
        loop {
            match p.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    eprintln!("{} did not stop within {} s; killing it", p.name, grace.as_secs());
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

pub fn run(args: StartArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.dir).map_err(|e| format!("cannot create {}: {e}", args.dir.display()))?;
    let dir = args.dir.canonicalize().map_err(|e| format!("cannot resolve {}: {e}", args.dir.display()))?;
    let config = cluster_config(&args)?;
    let config_path = dir.join("config.toml");
    std::fs::write(&config_path, config.to_toml())
        .map_err(|e| format!("cannot write {}: {e}", config_path.display()))?;
    let ready = dir.join("mgmd.addr");
    let _ = std::fs::remove_file(&ready);
    let tls = if args.tls { make_certificates(&dir, &config)? } else { crate::TlsArgs::default() };
    let api_tls = tls.load(latsdb_net::tls::Role::Api)?;

    let rt = crate::runtime(1)?;
    let mut procs: Vec<Proc> = Vec::new();
    let result = rt.block_on(async {
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| format!("cannot install the SIGTERM handler: {e}"))?;
        let mgmd_args = vec![
            "mgmd".to_string(),
            "--config".into(),
            config_path.display().to_string(),
            "--port".into(),
            config.mgmd.port.to_string(),
            "--ready-file".into(),
            ready.display().to_string(),
            "--data-dir".into(),
            dir.display().to_string(),
        ]
        .into_iter()
        .chain(tls.flags())
        .collect::<Vec<String>>();
        procs.push(spawn("mgmd", &mgmd_args, &dir.join("mgmd.log"))?);
        let deadline = Instant::now() + Duration::from_secs(args.timeout);
        let address = loop {
            check_alive(&mut procs)?;
            if let Ok(a) = std::fs::read_to_string(&ready) {
                if !a.is_empty() {
                    break a;
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("the management server did not start within {} s; see {}", args.timeout, dir.join("mgmd.log").display()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let datanode_args = |node: u16| {
            vec![
                "datanode".to_string(),
                // The launcher is its data nodes' angel.
                "--no-restart".into(),
                "--mgmd".into(),
                address.clone(),
                "--node-id".into(),
                node.to_string(),
                "--data-dir".into(),
                dir.display().to_string(),
            ]
            .into_iter()
            .chain(args.metrics.then(|| ["--metrics-port".to_string(), "0".into()]).into_iter().flatten())
            .chain(tls.flags())
            .collect::<Vec<String>>()
        };
        for d in &config.datanodes {
            let name = format!("datanode {}", d.node_id);
            procs.push(spawn(&name, &datanode_args(d.node_id), &dir.join(format!("datanode-{}.log", d.node_id)))?);
        }
        let layout = wait_started(&address, api_tls.as_deref(), &mut procs, deadline).await?;
        let rest_address = if args.no_rest {
            None
        } else {
            let auth = match args.rest_auth {
                crate::rest_cmd::AuthArg::None => "none",
                crate::rest_cmd::AuthArg::ApiKey => "api-key",
            };
            let mut rest_args = vec!["rest".to_string(), "--mgmd".into(), address.clone(), "--port".into(), args.rest_port.to_string(), "--auth".into(), auth.into()];
            if let (Some(cert), Some(key)) = (&args.rest_tls_cert, &args.rest_tls_key) {
                rest_args.extend(["--tls-cert".to_string(), cert.display().to_string(), "--tls-key".into(), key.display().to_string()]);
            }
            rest_args.extend(tls.flags());
            Some((start_api_node("rest", "REST", rest_args, &dir, &mut procs, deadline, args.timeout).await?, auth))
        };
        let sql_address = if args.no_sql {
            None
        } else {
            let mut sql_args = vec!["sql".to_string(), "--mgmd".into(), address.clone(), "--port".into(), args.sql_port.to_string()];
            for u in &args.sql_users {
                sql_args.extend(["--user".to_string(), u.clone()]);
            }
            if args.metrics {
                sql_args.extend(["--metrics-port".to_string(), "0".into()]);
            }
            if let (Some(cert), Some(key)) = (&args.sql_tls_cert, &args.sql_tls_key) {
                sql_args.extend(["--tls-cert".to_string(), cert.display().to_string(), "--tls-key".into(), key.display().to_string()]);
            }
            sql_args.extend(tls.flags());
            Some(start_api_node("sql", "SQL", sql_args, &dir, &mut procs, deadline, args.timeout).await?)
        };
        println!("latsdb cluster \"{}\" is up ({} data nodes, {} replica(s))", layout.cluster_name, layout.datanodes.len(), layout.replicas);
        println!("  mgmd         {address}");
        for d in &layout.datanodes {
            println!("  datanode {:<3} {}", d.node_id, d.shards.join(" "));
        }
        if let Some(sql) = &sql_address {
            let (host, port) = sql.rsplit_once(':').unwrap_or((sql.as_str(), "3306"));
            println!("  sql          {sql} (MySQL protocol; try: mysql -h {host} -P {port} -u root)");
        }
        if let Some((rest, auth)) = &rest_address {
            let scheme = if args.rest_tls_cert.is_some() { "https" } else { "http" };
            println!("  rest         {scheme}://{rest}/{} (auth: {auth})", latsdb_rest::API_VERSION);
        }
        if args.metrics {
            for (name, at) in metrics_addresses(&procs) {
                println!("  metrics      {name:<12} {at}");
            }
        }
        if let Some(tls_dir) = &tls.tls_dir {
            println!("  tls          {} (every native link; give clients --tls-dir or LATSDB_TLS_DIR)", tls_dir.display());
        }
        println!("  logs         {}", dir.display());
        println!("Try: latsdb mgm --mgmd {address} show");
        println!("Press Ctrl-C to stop.");
        // This launcher is the cluster's process manager: it starts the
        // data nodes that `latsdb mgm N start` asks for, and those that die
        // unasked (unless --no-restart).
        let mut manager = MgmdLink::new(&address, api_tls.clone());
        let mut healer = Healer::default();
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => { println!("stopping (interrupt)"); break; }
                _ = sigterm.recv() => { println!("stopping (SIGTERM)"); break; }
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    let mut tending = Tending { procs: &mut procs, healer: &mut healer, heal: !args.no_restart, dir: &dir, events: Vec::new() };
                    tending.reap()?;
                    let requested = manager.take_start_requests(None).await;
                    tending.start(requested, &datanode_args);
                    for (severity, text) in tending.events {
                        manager.report_event(severity, "launcher", &text).await;
                    }
                }
            }
        }
        Ok(())
    });
    stop_all(&mut procs);
    if result.is_ok() {
        println!("cluster stopped");
    }
    result
}

/// What the launcher looks after while the cluster runs: its processes,
/// and which data nodes to start again.
struct Tending<'a> {
    procs: &'a mut Vec<Proc>,
    healer: &'a mut Healer,
    /// Start data nodes that die unasked again (not `--no-restart`).
    heal: bool,
    dir: &'a Path,
    /// What it decided, for the cluster log.
    events: Vec<(Severity, String)>,
}

impl Tending<'_> {
    /// Notes the processes that exited. The cluster stops if the
    /// management server or an API node did; a data node may be started
    /// again (`Healer`).
    fn reap(&mut self) -> Result<(), String> {
        for p in self.procs.iter_mut().filter(|p| !p.gone) {
            if let Ok(Some(status)) = p.child.try_wait() {
                p.gone = true;
                if p.name == "mgmd" || p.name == "rest" || p.name == "sql" {
                    return Err(format!(
                        "{} exited unexpectedly ({status}); see {}; stopping the cluster",
                        p.name,
                        p.log.display()
                    ));
                }
                let node = p.name.strip_prefix("datanode ").and_then(|n| n.parse::<u16>().ok());
                let decision = match node {
                    Some(node) if self.heal => self.healer.on_exit(node, status.success(), Instant::now()),
                    _ => Decision::LeaveStopped,
                };
                let name = node.map_or_else(|| p.name.clone(), |n| format!("data node {n}"));
                let (severity, text) = describe_exit(&name, status, &decision);
                println!("{text}; see {}", p.log.display());
                self.events.push((severity, text));
            }
        }
        Ok(())
    }

    /// Starts the data nodes `latsdb mgm N start` asked for (node,
    /// initial) and those whose restart is due.
    fn start(&mut self, requested: Vec<(u16, bool)>, datanode_args: &impl Fn(u16) -> Vec<String>) {
        for &(node, _) in &requested {
            self.healer.on_requested_start(node);
        }
        let healing = self.healer.due(Instant::now()).into_iter().map(|node| (node, false));
        for (node, initial) in healing.chain(requested) {
            let name = format!("datanode {node}");
            if self.procs.iter_mut().any(|p| p.name == name && !p.gone && matches!(p.child.try_wait(), Ok(None))) {
                println!("{name} is still running; not starting another");
                continue;
            }
            let mut args = datanode_args(node);
            if initial {
                args.push("--initial".into());
            }
            match spawn_logging(&name, &args, &self.dir.join(format!("datanode-{node}.log")), true) {
                Ok(p) => {
                    let how = if initial { " from an empty disk" } else { "" };
                    println!("{name} restarting{how} (pid {})", p.child.id());
                    self.events
                        .push((Severity::Info, format!("data node {node} started again{how} (pid {})", p.child.id())));
                    self.procs.retain(|q| q.name != name);
                    self.procs.push(p);
                }
                Err(e) => {
                    println!("cannot restart {name}: {e}");
                    self.events.push((Severity::Alert, format!("cannot start data node {node}: {e}")));
                }
            }
        }
    }
}

/// The cluster's configuration: the file given with `--config`, or a local
/// cluster shaped by the command line.
fn cluster_config(args: &StartArgs) -> Result<ClusterConfig, String> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            ClusterConfig::parse(&text).map_err(|e| format!("{}: {}", path.display(), e.message))?
        }
        None => {
            if args.datanodes == 0 {
                return Err("--datanodes must be at least 1".into());
            }
            ClusterConfig::local(args.datanodes, args.replicas, args.mgmd_port)
        }
    };
    if args.config.is_none() {
        config.datanode_defaults.threads = args.threads;
        config.datanode_defaults.data_memory_mb = args.data_memory_mb;
        config.datanode_defaults.disk_page_cache_mb = args.disk_page_cache_mb;
        config.datanode_defaults.tablespace_mb = args.tablespace_mb;
        config.datanode_defaults.redo_limit_mb = args.redo_limit_mb;
        config.datanode_defaults.disk_direct_io = args.disk_direct_io == OnOffArg::On;
        config.datanode_defaults.cpu_bind = match args.cpu_bind {
            CpuBindArg::Auto => CpuBind::Auto,
            CpuBindArg::Off => CpuBind::Off,
        };
        config.datanode_defaults.idle_poll = args.idle_poll == OnOffArg::On;
        if args.epoch_interval_ms > 0 {
            config.cluster.epoch_interval_ms = args.epoch_interval_ms;
        }
        if let Some(mb) = args.checkpoint_trigger_mb {
            config.cluster.checkpoint_trigger_mb = mb;
        }
        config.cluster.default_column_storage = match args.default_column_storage {
            StorageArg::Memory => latsdb_types::Storage::Memory,
            StorageArg::Disk => latsdb_types::Storage::Disk,
        };
        config.validate().map_err(|e| e.message)?;
    }
    if args.mgmd_metrics_port.is_some() {
        config.mgmd.metrics_port = args.mgmd_metrics_port;
    } else if args.metrics {
        config.mgmd.metrics_port = Some(0);
    }
    config.validate().map_err(|e| e.message)?;
    Ok(config)
}

/// The cluster's certificates in `<dir>/tls`, made on the first start
/// for the hosts of the configuration and kept afterwards.
fn make_certificates(dir: &Path, config: &ClusterConfig) -> Result<crate::TlsArgs, String> {
    let tls_dir = dir.join("tls");
    let mut hosts = vec![config.mgmd.host.clone(), "localhost".to_string()];
    hosts.extend(config.datanodes.iter().map(|d| d.host.clone()));
    hosts.sort();
    hosts.dedup();
    let roles = latsdb_net::tls::Role::ALL;
    for line in crate::certs::create(&tls_dir, &hosts, &roles, 365, false)? {
        if !line.starts_with("kept") {
            println!("tls: {line}");
        }
    }
    Ok(crate::TlsArgs { tls_dir: Some(tls_dir) })
}

async fn wait_started(
    address: &str,
    tls: Option<&latsdb_net::tls::ClusterTls>,
    procs: &mut [Proc],
    deadline: Instant,
) -> Result<ClusterLayout, String> {
    let mut conn: Option<RpcConn> = None;
    loop {
        check_alive(procs)?;
        if conn.is_none() {
            conn = RpcConn::connect(address, Duration::from_secs(2), tls).await.ok();
        }
        if let Some(c) = conn.as_mut() {
            match c.call::<_, MgmResponse>(&MgmRequest::GetLayout).await {
                Ok(MgmResponse::Layout(l)) if l.all_started() => return Ok(l),
                Ok(_) => {}
                Err(_) => conn = None,
            }
        }
        if Instant::now() >= deadline {
            return Err("the data nodes did not all start in time; see the datanode logs".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts an API node (`rest`, `sql`) and waits until it writes its
/// listening address to `<name>.addr`.
/// Where each started process serves GET /metrics, as its log says (a
/// process given `--metrics-port 0` prints the address it got).
fn metrics_addresses(procs: &[Proc]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for p in procs {
        let text = std::fs::read_to_string(&p.log).unwrap_or_default();
        let address = text
            .split_whitespace()
            .rev()
            .find(|w| w.starts_with("http://") && w.ends_with("/metrics"))
            .map(|w| w.trim_end_matches(['.', ',']).to_string());
        if let Some(address) = address {
            found.push((p.name.clone(), address));
        }
    }
    found
}

async fn start_api_node(
    name: &str,
    what: &str,
    mut node_args: Vec<String>,
    dir: &std::path::Path,
    procs: &mut Vec<Proc>,
    deadline: Instant,
    timeout: u64,
) -> Result<String, String> {
    let ready = dir.join(format!("{name}.addr"));
    let _ = std::fs::remove_file(&ready);
    node_args.extend(["--ready-file".to_string(), ready.display().to_string()]);
    let log = dir.join(format!("{name}.log"));
    procs.push(spawn(name, &node_args, &log)?);
    loop {
        check_alive(procs)?;
        if let Ok(a) = std::fs::read_to_string(&ready) {
            if !a.is_empty() {
                return Ok(a);
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("the {what} node did not start within {timeout} s; see {}", log.display()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
