//! `latsdb mgm`: the admin client.

use clap::{Args, Subcommand};
use latsdb_net::RpcConn;
use latsdb_types::proto::{ClusterLayout, MgmRequest, MgmResponse, NodeStatus, ShardMemory};
use latsdb_types::usage::{usage_severity, UsageLimit};
use std::time::Duration;

/// The data-node commands, which clap cannot list (they start with a
/// number).
const NODE_COMMANDS: &str = "Data node commands (N is a data node id, as `show` prints it):
  N stop                 Stop data node N (the cluster serves on from its replicas)
  N start [--initial]    Start data node N: it restores its disk, copies what changed from a live
                         replica, checkpoints and rejoins; --initial empties its disk first
  N restart [--initial]  Stop data node N, then start it
  Each waits until the node is stopped or started; --timeout SECS (default 600) or --no-wait.
  Starting needs a process manager: `latsdb start`, or the angel of `latsdb datanode`.";

#[derive(Args)]
#[command(after_help = NODE_COMMANDS)]
pub struct MgmArgs {
    /// Address of the management server.
    #[arg(long, env = "LATSDB_MGMD", default_value = crate::DEFAULT_MGMD)]
    mgmd: String,
    #[command(flatten)]
    tls: crate::TlsArgs,
    #[command(subcommand)]
    command: MgmCommand,
}

#[derive(Subcommand)]
enum MgmCommand {
    /// Nodes, roles, addresses, status and node groups.
    Show,
    /// Tables and their partitions and indexes.
    Tables,
    /// Rows and data memory of every data node (used of budget).
    ReportMemory,
    /// Every number the management server's /metrics serves (node status,
    /// events, per-shard usage, backups), one per line.
    Report,
    /// Stop every data node and the management server.
    Shutdown,
    /// The newest events of the cluster log (nodes started, stopped, lost
    /// and restarted, views, schema changes, alarms); all of them are in
    /// cluster.log in the management server's data folder.
    Log {
        /// How many events to show.
        #[arg(long, default_value_t = 50)]
        lines: u32,
    },
    /// Online backups: `backup start [--no-wait]`, `backup status [ID]`,
    /// `backup list`, `backup abort ID` (restore with `latsdb restore`).
    Backup {
        #[command(subcommand)]
        action: crate::backup::BackupAction,
    },
    /// Node groups: `nodegroup add --config FILE` adds the data nodes that
    /// FILE (the cluster's configuration with [[datanode]] sections
    /// appended) lists beyond the cluster's, as new node groups, and moves
    /// their share of the partitions to them online; `nodegroup status`.
    Nodegroup {
        #[command(subcommand)]
        action: NodeGroupAction,
    },
    /// `N stop`, `N start [--initial]`, `N restart [--initial]`: stop or
    /// (re)start data node N. A start is a node restart: the node restores
    /// its disk, copies what changed from a live replica, checkpoints, and
    /// rejoins; `--initial` empties its disk first and copies everything.
    /// Starting needs a process manager (`latsdb start`, or the angel of
    /// `latsdb datanode`). Add
    /// `--timeout SECS` (default 600) or `--no-wait`.
    #[command(external_subcommand)]
    Node(Vec<String>),
}

#[derive(Subcommand)]
enum NodeGroupAction {
    /// Add node groups and move partitions to them while the cluster
    /// serves; shows the moves until they are done.
    Add {
        /// The cluster's configuration file with the new [[datanode]]
        /// sections appended (a whole number of node groups).
        #[arg(long)]
        config: std::path::PathBuf,
        /// Return once the nodes are added instead of waiting for the moves.
        #[arg(long)]
        no_wait: bool,
        /// Give up waiting after this many seconds (the moves go on).
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// Node groups, their data nodes and partitions, and the moves under way.
    Status,
}

/// A parsed `N stop|start|restart` command.
struct NodeAction {
    node: u16,
    stop: bool,
    start: bool,
    initial: bool,
    wait: bool,
    timeout: Duration,
}

fn parse_node_action(args: &[String]) -> Result<NodeAction, String> {
    let usage = "usage: latsdb mgm N stop | N start [--initial] | N restart [--initial] [--timeout SECS] [--no-wait]";
    let node = args
        .first()
        .and_then(|n| n.parse::<u16>().ok())
        .ok_or_else(|| format!("unknown command {:?}; {usage}", args.first().map(String::as_str).unwrap_or("")))?;
    let (stop, start) = match args.get(1).map(String::as_str) {
        Some("stop") => (true, false),
        Some("start") => (false, true),
        Some("restart") => (true, true),
        other => return Err(format!("unknown action {:?} for data node {node}; {usage}", other.unwrap_or(""))),
    };
    let mut action = NodeAction { node, stop, start, initial: false, wait: true, timeout: Duration::from_secs(600) };
    let mut rest = args[2..].iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--initial" if start => action.initial = true,
            "--no-wait" => action.wait = false,
            "--timeout" => {
                let secs =
                    rest.next().and_then(|v| v.parse::<u64>().ok()).ok_or("--timeout needs a number of seconds")?;
                action.timeout = Duration::from_secs(secs.max(1));
            }
            other => return Err(format!("unknown option {other:?}; {usage}")),
        }
    }
    Ok(action)
}

/// A management server's answer, its error as the command's error.
pub(crate) fn answer(r: latsdb_types::Result<MgmResponse>) -> Result<MgmResponse, String> {
    match r {
        Ok(MgmResponse::Error(e)) | Err(e) => Err(e.to_string()),
        Ok(other) => Ok(other),
    }
}

async fn node_status(conn: &mut RpcConn, node: u16) -> Result<NodeStatus, String> {
    match answer(conn.call(&MgmRequest::GetLayout).await)? {
        MgmResponse::Layout(l) => l
            .datanode(node)
            .map(|d| d.status)
            .ok_or_else(|| format!("data node {node} is not in the cluster configuration")),
        other => Err(format!("unexpected answer {other:?}")),
    }
}

/// Polls the layout until data node `node` has status `want`, printing
/// each status it passes through.
async fn wait_status(conn: &mut RpcConn, node: u16, want: NodeStatus, timeout: Duration) -> Result<(), String> {
    let began = tokio::time::Instant::now();
    let deadline = began + timeout;
    let mut last = None;
    let mut hinted = false;
    loop {
        let status = node_status(conn, node).await?;
        if want == NodeStatus::Started
            && status == NodeStatus::NotStarted
            && !hinted
            && began.elapsed() >= Duration::from_secs(15)
        {
            hinted = true;
            println!(
                "data node {node} has not come up after 15 s: it may still be restoring, or no process manager picked up the request (`latsdb start`, or the angel of a `latsdb datanode` on its host; otherwise run `latsdb datanode --node-id {node}` there); waiting up to {} s",
                timeout.as_secs()
            );
        }
        if last != Some(status) {
            if last.is_some() || status == want {
                println!("data node {node}: {}", status_name(status));
            }
            last = Some(status);
        }
        if status == want {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "data node {node} is {} after {} s, not {}; see its log (a start needs a process manager: `latsdb start`, or the angel of a `latsdb datanode` on its host; otherwise run `latsdb datanode --node-id {node}` there)",
                status_name(status),
                timeout.as_secs(),
                status_name(want)
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn status_name(status: NodeStatus) -> &'static str {
    match status {
        NodeStatus::Started => "started",
        NodeStatus::Starting => "starting (copying from live replicas)",
        NodeStatus::NotStarted => "not started",
    }
}

async fn run_node_action(conn: &mut RpcConn, action: NodeAction) -> Result<(), String> {
    let node = action.node;
    if action.stop {
        answer(conn.call(&MgmRequest::StopNode { node_id: node }).await)?;
        println!("data node {node}: stopping");
        wait_status(conn, node, NodeStatus::NotStarted, Duration::from_secs(60)).await?;
    }
    if action.start {
        answer(conn.call(&MgmRequest::StartNode { node_id: node, initial: action.initial }).await)?;
        println!("data node {node}: start requested{}", if action.initial { " (initial: empty disk)" } else { "" });
        if action.wait {
            wait_status(conn, node, NodeStatus::Started, action.timeout).await?;
        }
    }
    Ok(())
}

pub async fn run(args: MgmArgs) -> Result<(), String> {
    let tls = args.tls.load(latsdb_net::tls::Role::Api)?;
    let mut conn = RpcConn::connect(&args.mgmd, Duration::from_secs(5), tls.as_deref()).await.map_err(|e| {
        format!("{}; is the management server running at {}? (set --mgmd or LATSDB_MGMD)", e.message, args.mgmd)
    })?;
    match args.command {
        MgmCommand::Show => match answer(conn.call(&MgmRequest::GetLayout).await)? {
            MgmResponse::Layout(layout) => {
                print!("{}", render_show(&layout));
                Ok(())
            }
            other => Err(format!("unexpected answer {other:?}")),
        },
        MgmCommand::Tables => match answer(conn.call(&MgmRequest::ListTables).await)? {
            MgmResponse::Tables(tables) => {
                if tables.is_empty() {
                    println!("no tables");
                }
                for t in tables {
                    let indexes: Vec<&str> = t.indexes.iter().map(|i| i.name.as_str()).collect();
                    println!(
                        "{}  id={} version={} columns={} partitions={} indexes={}",
                        t.qualified_name(),
                        t.id,
                        t.version,
                        t.columns.len(),
                        t.partitions,
                        indexes.join(",")
                    );
                }
                Ok(())
            }
            other => Err(format!("unexpected answer {other:?}")),
        },
        MgmCommand::ReportMemory => match answer(conn.call(&MgmRequest::ReportMemory).await)? {
            MgmResponse::Memory(nodes) => {
                print!("{}", render_memory(&nodes));
                Ok(())
            }
            other => Err(format!("unexpected answer {other:?}")),
        },
        MgmCommand::Report => match answer(conn.call(&MgmRequest::Report).await)? {
            MgmResponse::Report(text) => {
                // The samples without the HELP and TYPE lines.
                for line in text.lines().filter(|l| !l.starts_with('#')) {
                    println!("{line}");
                }
                Ok(())
            }
            other => Err(format!("unexpected answer {other:?}")),
        },
        MgmCommand::Shutdown => {
            answer(conn.call(&MgmRequest::Shutdown).await)?;
            println!("cluster shut down");
            Ok(())
        }
        MgmCommand::Log { lines } => match answer(conn.call(&MgmRequest::GetClusterLog { last: lines }).await)? {
            MgmResponse::ClusterLog(events) => {
                if events.is_empty() && lines > 0 {
                    println!("the cluster log is empty (it starts when the management server does)");
                }
                for event in events {
                    println!("{event}");
                }
                Ok(())
            }
            other => Err(format!("unexpected answer {other:?}")),
        },
        MgmCommand::Backup { action } => crate::backup::run_backup(&mut conn, action).await,
        MgmCommand::Nodegroup { action } => run_node_group_action(&mut conn, action).await,
        MgmCommand::Node(args) => run_node_action(&mut conn, parse_node_action(&args)?).await,
    }
}

async fn node_group_text(conn: &mut RpcConn, request: &MgmRequest) -> Result<String, String> {
    match answer(conn.call(request).await)? {
        MgmResponse::Report(text) => Ok(text),
        other => Err(format!("unexpected answer {other:?}")),
    }
}

async fn run_node_group_action(conn: &mut RpcConn, action: NodeGroupAction) -> Result<(), String> {
    let (config, no_wait, timeout) = match action {
        NodeGroupAction::Status => {
            print!("{}", node_group_text(conn, &MgmRequest::NodeGroups).await?);
            return Ok(());
        }
        NodeGroupAction::Add { config, no_wait, timeout } => (config, no_wait, timeout),
    };
    let text = std::fs::read_to_string(&config).map_err(|e| format!("cannot read {}: {e}", config.display()))?;
    print!("{}", node_group_text(conn, &MgmRequest::AddNodeGroups { config: text }).await?);
    if no_wait {
        return Ok(());
    }
    // Progress: the status whenever it changes, until nothing moves.
    let deadline = std::time::Instant::now() + Duration::from_secs(timeout.max(1));
    let mut shown = String::new();
    loop {
        let status = node_group_text(conn, &MgmRequest::NodeGroups).await?;
        if status != shown {
            print!("{status}");
            shown = status;
        }
        if shown.contains("no partition is moving") {
            println!("done: every partition is in its new place");
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "the partitions did not finish moving within {timeout} s (they go on; `latsdb mgm nodegroup status` and `latsdb mgm log` show where they are)"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub fn render_show(layout: &ClusterLayout) -> String {
    let mut out = String::new();
    let started = layout.datanodes.iter().filter(|d| d.status == NodeStatus::Started).count();
    out.push_str(&format!(
        "Cluster \"{}\": 1 mgmd, {} data nodes ({} started), {} node group(s) of {} replica(s), layout version {}, durable epoch {}\n",
        layout.cluster_name,
        layout.datanodes.len(),
        started,
        layout.node_groups,
        layout.replicas,
        layout.version,
        layout.durable_epoch
    ));
    out.push_str("\n[mgmd]\n");
    out.push_str(&format!("id={:<3} {:<22} started\n", layout.mgmd_node_id, layout.mgmd_address));
    out.push_str("\n[datanode]\n");
    for d in &layout.datanodes {
        let status = match d.status {
            NodeStatus::Started => "started",
            NodeStatus::Starting => "starting",
            NodeStatus::NotStarted => "not started",
        };
        let addr = d.shards.first().cloned().unwrap_or_else(|| d.host.clone());
        out.push_str(&format!(
            "id={:<3} {:<22} {:<12} nodegroup={} shards={}",
            d.node_id,
            addr,
            status,
            d.node_group,
            d.shards.len()
        ));
        if d.pid != 0 {
            out.push_str(&format!(" pid={}", d.pid));
        }
        if let Some(domain) = &d.location_domain {
            out.push_str(&format!(" domain={domain}"));
        }
        out.push('\n');
    }
    out
}

/// ", WARNING: shard 2.1 at 83%" when a shard's usage is at a level the
/// cluster log warns about (the fullest shard is named).
fn usage_flag(node: u16, shards: &[ShardMemory], limit: UsageLimit) -> String {
    match limit.fullest(shards).and_then(|(p, s)| usage_severity(p).map(|severity| (severity, p, s.shard))) {
        Some((severity, p, shard)) => format!(", {}: shard {node}.{shard} at {p:.0}%", severity.name()),
        None => String::new(),
    }
}

pub fn render_memory(nodes: &[(u16, Vec<ShardMemory>)]) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut out = String::new();
    for (node, shards) in nodes {
        let rows: u64 = shards.iter().map(|s| s.rows).sum();
        let used: u64 = shards.iter().map(|s| s.used_bytes).sum();
        let budget: u64 = shards.iter().map(|s| s.budget_bytes).sum();
        let share =
            if budget > 0 { format!("{:.1}%", used as f64 * 100.0 / budget as f64) } else { "unlimited".into() };
        out.push_str(&format!(
            "node {node}: data memory {:.1} MiB used of {:.0} MiB ({share}{}), {rows} rows in {} shard(s)\n",
            mib(used),
            mib(budget),
            usage_flag(*node, shards, UsageLimit::DataMemory),
            shards.len()
        ));
        let redo_limit: u64 = shards.iter().map(|s| s.redo_limit_bytes).sum();
        if redo_limit > 0 {
            let kept: u64 = shards.iter().map(|s| s.redo_bytes).sum();
            out.push_str(&format!(
                "node {node}: REDO log {:.1} MiB kept of {:.0} MiB{}\n",
                mib(kept),
                mib(redo_limit),
                usage_flag(*node, shards, UsageLimit::Redo)
            ));
        }
        let file: u64 = shards.iter().map(|s| s.tablespace_bytes).sum();
        if file > 0 {
            let live: u64 = shards.iter().map(|s| s.tablespace_used_bytes).sum();
            let limit: u64 = shards.iter().map(|s| s.tablespace_limit_bytes).sum();
            let hits: u64 = shards.iter().map(|s| s.page_cache_hits).sum();
            let misses: u64 = shards.iter().map(|s| s.page_cache_misses).sum();
            let waits: u64 = shards.iter().map(|s| s.page_waits).sum();
            let read_here: u64 = shards.iter().map(|s| s.pages_read_on_shard_thread).sum();
            let at_once: u64 = shards.iter().map(|s| s.pages_read_at_once).sum();
            let limit = if limit > 0 { format!("of {:.0} MiB", mib(limit)) } else { "(no limit)".into() };
            let lookups = (hits + misses).max(1);
            out.push_str(&format!(
                "node {node}: tablespace {:.1} MiB {limit}, {:.1} MiB in live records{}; page cache hit rate {:.1}% ({hits} hits, {misses} misses); {waits} requests waited for pages read off the shard thread, {at_once} pages read at once from the OS cache, {read_here} pages read on the shard thread otherwise\n",
                mib(file),
                mib(live),
                usage_flag(*node, shards, UsageLimit::Tablespace),
                hits as f64 * 100.0 / lookups as f64,
            ));
        }
    }
    out
}
