//! `latsdb mgm`: the admin client.

use clap::{Args, Subcommand};
use latsdb_net::RpcConn;
use latsdb_types::proto::{ClusterLayout, MgmRequest, MgmResponse, NodeStatus};
use std::time::Duration;

#[derive(Args)]
pub struct MgmArgs {
    /// Address of the management server.
    #[arg(long, env = "LATSDB_MGMD", default_value = crate::DEFAULT_MGMD)]
    mgmd: String,
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
    /// Stop every data node and the management server.
    Shutdown,
}

pub async fn run(args: MgmArgs) -> Result<(), String> {
    let mut conn = RpcConn::connect(&args.mgmd, Duration::from_secs(5)).await.map_err(|e| {
        format!("{}; is the management server running at {}? (set --mgmd or LATSDB_MGMD)", e.message, args.mgmd)
    })?;
    let call = |r: latsdb_types::Result<MgmResponse>| match r {
        Ok(MgmResponse::Error(e)) | Err(e) => Err(e.to_string()),
        Ok(other) => Ok(other),
    };
    match args.command {
        MgmCommand::Show => match call(conn.call(&MgmRequest::GetLayout).await)? {
            MgmResponse::Layout(layout) => {
                print!("{}", render_show(&layout));
                Ok(())
            }
            other => Err(format!("unexpected answer {other:?}")),
        },
        MgmCommand::Tables => match call(conn.call(&MgmRequest::ListTables).await)? {
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
        MgmCommand::ReportMemory => match call(conn.call(&MgmRequest::ReportMemory).await)? {
            MgmResponse::Memory(nodes) => {
                print!("{}", render_memory(&nodes));
                Ok(())
            }
            other => Err(format!("unexpected answer {other:?}")),
        },
        MgmCommand::Shutdown => {
            call(conn.call(&MgmRequest::Shutdown).await)?;
            println!("cluster shut down");
            Ok(())
        }
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
        out.push('\n');
    }
    out
}

pub fn render_memory(nodes: &[(u16, Vec<latsdb_types::proto::ShardMemory>)]) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut out = String::new();
    for (node, shards) in nodes {
        let rows: u64 = shards.iter().map(|s| s.rows).sum();
        let used: u64 = shards.iter().map(|s| s.used_bytes).sum();
        let budget: u64 = shards.iter().map(|s| s.budget_bytes).sum();
        let share =
            if budget > 0 { format!("{:.1}%", used as f64 * 100.0 / budget as f64) } else { "unlimited".into() };
        out.push_str(&format!(
            "node {node}: data memory {:.1} MiB used of {:.0} MiB ({share}), {rows} rows in {} shard(s)\n",
            mib(used),
            mib(budget),
            shards.len()
        ));
    }
    out
}
