//! The cluster configuration file (TOML), read by the management server.
//! Every key and its default is documented in docs/configuration.md.

use crate::error::{DbError, Result};
use crate::proto::NodeId;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    #[serde(default)]
    pub cluster: ClusterSection,
    #[serde(default)]
    pub mgmd: MgmdSection,
    #[serde(default)]
    pub datanode_defaults: DataNodeDefaults,
    #[serde(default, rename = "datanode")]
    pub datanodes: Vec<DataNodeSection>,
    #[serde(default)]
    pub tls: TlsSection,
}

/// TLS on the native protocol. Each process names its certificates with
/// `--tls-dir`; this section states the cluster's policy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    /// The management server refuses to start without `--tls-dir`, so a
    /// cluster meant to run with TLS cannot come up without it by mistake.
    /// (A process with `--tls-dir` always speaks TLS and refuses peers
    /// without a certificate of its CA, whatever this says.)
    pub require_tls: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    pub name: String,
    /// Replicas per node group (NoOfReplicas), 1..=4.
    pub replicas: u8,
    /// Partitions of a new table when it does not say; 0 chooses from the
    /// cluster size.
    pub partitions_per_table: u32,
    pub lock_wait_timeout_ms: u64,
    /// A transaction's coordinator aborts it once it has waited this long
    /// for its client's next request (NDB's TransactionInactiveTimeout),
    /// releasing its locks; 0 never does.
    pub transaction_inactive_timeout_ms: u64,
    pub max_frame_bytes: usize,
    /// The management server checks every data node this often.
    pub heartbeat_interval_ms: u64,
    /// A data node that has not answered for this many intervals is
    /// declared dead (a broken connection counts at once).
    pub heartbeat_missed: u32,
    /// Length of a commit epoch in milliseconds: every data node syncs its
    /// REDO log and the durable epoch advances this often. A crash of the
    /// whole cluster loses at most the last epoch or two.
    pub epoch_interval_ms: u64,
    /// A shard starts a local checkpoint once this many MiB of REDO (or,
    /// if more, as much REDO as its last checkpoint's size) were written
    /// since its last one started (REDO behind a completed checkpoint is deleted); 0
    /// disables checkpoints (REDO then grows).
    pub checkpoint_trigger_mb: u64,
    /// Where a SQL node keeps the columns of a new table that name no
    /// `STORAGE`: "memory", or "disk" for its columns of variable size
    /// (strings and binaries) that no index of the CREATE TABLE names.
    pub default_column_storage: crate::schema::Storage,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            name: "latsdb".into(),
            replicas: 1,
            partitions_per_table: 0,
            lock_wait_timeout_ms: 1500,
            transaction_inactive_timeout_ms: 0,
            max_frame_bytes: crate::proto::DEFAULT_MAX_FRAME_BYTES,
            heartbeat_interval_ms: 100,
            heartbeat_missed: 5,
            epoch_interval_ms: 100,
            checkpoint_trigger_mb: 64,
            default_column_storage: crate::schema::Storage::Memory,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MgmdSection {
    pub node_id: NodeId,
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
    /// Port of the management server's `GET /metrics` (Prometheus text
    /// format) on `host`; unset serves none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_port: Option<u16>,
    /// The location domain (availability zone) of the management server,
    /// which is the arbitrator: it belongs in a third domain, so that
    /// either domain of data nodes can go on without the other.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location_domain: Option<String>,
}

impl Default for MgmdSection {
    fn default() -> Self {
        MgmdSection { node_id: 1, host: "127.0.0.1".into(), port: 1186, metrics_port: None, location_domain: None }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DataNodeDefaults {
    /// Shard threads per data node; 0 chooses from the CPUs the process may use.
    pub threads: u16,
    /// Data memory per data node in MiB (rows and indexes); 0 chooses half
    /// of the machine's memory shared by the data nodes configured on it.
    pub data_memory_mb: u64,
    /// Page cache per data node in MiB for the disk parts of rows (columns
    /// declared `STORAGE DISK`); 0 chooses a quarter of its data memory
    /// (at least 16 MiB). Shared by its shard threads.
    pub disk_page_cache_mb: u64,
    /// Largest size in MiB of a data node's tablespace files (the disk
    /// parts of rows, all shards together); 0 is no limit but the disk's.
    /// A write that would grow a full tablespace fails with "table is full".
    pub tablespace_mb: u64,
    /// REDO log a data node may keep on disk in MiB (all shards together);
    /// 0 chooses half of the free space of its data directory's file
    /// system when it starts. A checkpoint starts once a shard keeps half
    /// its share; at its share, writes fail with a temporary error until a
    /// checkpoint lets older REDO go, instead of filling the disk.
    pub redo_limit_mb: u64,
    /// Whether tablespace files are read and written with `O_DIRECT`,
    /// bypassing the operating system's page cache (so that only
    /// `disk_page_cache_mb` caches disk columns).
    pub disk_direct_io: bool,
    /// Whether shard threads are bound to CPUs of their own.
    pub cpu_bind: CpuBind,
    /// Whether a data node asks the kernel to keep idle CPUs polling
    /// instead of halting while it runs (`/dev/cpu_dma_latency` = 0), so a
    /// message to a thread whose CPU is idle is seen at once.
    pub idle_poll: bool,
    /// Port of each data node's `GET /metrics` on its host; the data
    /// nodes configured on one host take this port and the next ones, in
    /// configuration order. Unset serves none (`latsdb datanode
    /// --metrics-port` overrides it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_port: Option<u16>,
}

impl Default for DataNodeDefaults {
    fn default() -> Self {
        DataNodeDefaults {
            threads: 0,
            data_memory_mb: 0,
            disk_page_cache_mb: 0,
            tablespace_mb: 0,
            redo_limit_mb: 0,
            disk_direct_io: false,
            cpu_bind: CpuBind::Auto,
            idle_poll: true,
            metrics_port: None,
        }
    }
}

/// How a data node places its shard threads on CPUs.
///
/// Shards of a replicated write wake each other over loopback TCP, and
/// Linux puts a thread woken that way on the waker's CPU: unbound, two
/// shards can end up taking turns on one CPU while another idles.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum CpuBind {
    /// Each shard thread of the data nodes configured on a host gets a CPU
    /// of its own when there are enough CPUs for all of them; otherwise the
    /// OS places them.
    #[default]
    Auto,
    /// The OS places shard threads.
    Off,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataNodeSection {
    pub node_id: NodeId,
    #[serde(default = "default_host")]
    pub host: String,
    /// Port of the first shard; further shards use the following ports. 0
    /// picks free ports.
    #[serde(default)]
    pub port: u16,
    /// Overrides `datanode_defaults.threads`.
    #[serde(default)]
    pub threads: Option<u16>,
    /// Overrides `datanode_defaults.data_memory_mb`.
    #[serde(default)]
    pub data_memory_mb: Option<u64>,
    /// CPUs for this node's shard threads, one per thread in shard order
    /// (overrides `datanode_defaults.cpu_bind`).
    #[serde(default)]
    pub cpus: Option<Vec<u32>>,
    /// The location domain (availability zone, rack) this node runs in:
    /// clients of the same domain read committed rows from it and choose
    /// their transactions' coordinators on it (`crate::location`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location_domain: Option<String>,
    /// Overrides the port `datanode_defaults.metrics_port` gives this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_port: Option<u16>,
}

/// Whether `host` names no address in particular (the wildcard a server
/// may bind, which no other process can connect to): `0.0.0.0`, `::`,
/// `[::]`, or `0`, which the resolver reads as `0.0.0.0`.
fn is_unspecified(host: &str) -> bool {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare == "0" || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_unspecified())
}

fn default_host() -> String {
    "127.0.0.1".into()
}

impl ClusterConfig {
    /// The embedded default: `datanodes` data nodes on loopback.
    pub fn local(datanodes: u16, replicas: u8, mgmd_port: u16) -> ClusterConfig {
        ClusterConfig {
            cluster: ClusterSection { replicas, ..Default::default() },
            mgmd: MgmdSection { port: mgmd_port, ..Default::default() },
            datanode_defaults: DataNodeDefaults::default(),
            datanodes: (0..datanodes)
                .map(|i| DataNodeSection {
                    node_id: 2 + i,
                    host: default_host(),
                    port: 0,
                    threads: None,
                    data_memory_mb: None,
                    cpus: None,
                    location_domain: None,
                    metrics_port: None,
                })
                .collect(),
            tls: TlsSection::default(),
        }
    }

    pub fn parse(text: &str) -> Result<ClusterConfig> {
        let config: ClusterConfig =
            toml::from_str(text).map_err(|e| DbError::bad_request(format!("invalid cluster configuration: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(DbError::bad_request(format!("invalid cluster configuration: {m}")));
        let replicas = self.cluster.replicas;
        if !(1..=4).contains(&replicas) {
            return bad(format!("cluster.replicas is {replicas}; it must be 1 to 4"));
        }
        if self.datanodes.is_empty() {
            return bad("no [[datanode]] sections; the cluster needs at least one data node".into());
        }
        if !self.datanodes.len().is_multiple_of(replicas as usize) {
            return bad(format!(
                "{} data nodes cannot form node groups of {replicas} replicas; use a multiple of cluster.replicas",
                self.datanodes.len()
            ));
        }
        if self.cluster.lock_wait_timeout_ms == 0 {
            return bad("cluster.lock_wait_timeout_ms must be positive".into());
        }
        if self.cluster.heartbeat_interval_ms == 0 || self.cluster.heartbeat_missed < 4 {
            return bad(format!(
                "cluster.heartbeat_interval_ms must be positive and cluster.heartbeat_missed at least 4 (got {} and {}): a node's lease lasts 3 intervals and must end before its peers give up on it",
                self.cluster.heartbeat_interval_ms, self.cluster.heartbeat_missed
            ));
        }
        if !(1..=60_000).contains(&self.cluster.epoch_interval_ms) {
            return bad(format!(
                "cluster.epoch_interval_ms is {}; it must be 1 to 60000 (a crash of the whole cluster may lose the last epoch)",
                self.cluster.epoch_interval_ms
            ));
        }
        if self.cluster.max_frame_bytes < 4096 {
            return bad("cluster.max_frame_bytes must be at least 4096".into());
        }
        let mut ids: Vec<NodeId> = self.datanodes.iter().map(|d| d.node_id).collect();
        ids.push(self.mgmd.node_id);
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return bad("node ids must be unique across mgmd and data nodes".into());
        }
        if ids.contains(&0) {
            return bad("node id 0 is reserved".into());
        }
        let hosts = self.datanodes.iter().map(|d| (format!("datanode {}", d.node_id), &d.host));
        for (who, host) in hosts.chain([("mgmd".to_string(), &self.mgmd.host)]) {
            if is_unspecified(host) {
                return bad(format!(
                    "{who}: host {host} is not an address others can reach: the layout gives every process the address each node listens on; name the node's own address or host name"
                ));
            }
        }
        let domains = self.datanodes.iter().map(|d| (format!("datanode {}", d.node_id), &d.location_domain));
        for (who, domain) in domains.chain([("mgmd".to_string(), &self.mgmd.location_domain)]) {
            if let Err(why) = domain.as_deref().map_or(Ok(()), crate::location::check_domain) {
                return bad(format!("{who}: location_domain {why}"));
            }
        }
        for d in &self.datanodes {
            let Some(cpus) = &d.cpus else { continue };
            let mut sorted = cpus.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if cpus.is_empty() || sorted.len() != cpus.len() {
                return bad(format!(
                    "datanode {}: cpus must list distinct CPU numbers, one per shard thread (got {cpus:?}); remove it to let cpu_bind decide",
                    d.node_id
                ));
            }
            if let Some(threads) = d.threads.or(Some(self.datanode_defaults.threads)).filter(|&t| t > 0) {
                if cpus.len() < threads as usize {
                    return bad(format!(
                        "datanode {}: cpus lists {} CPU(s) for {threads} shard threads; list one CPU per thread",
                        d.node_id,
                        cpus.len()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Node group of each data node: nodes in configuration order, grouped
    /// `replicas` at a time.
    pub fn node_group_of(&self, node_id: NodeId) -> Option<u32> {
        let pos = self.datanodes.iter().position(|d| d.node_id == node_id)?;
        Some((pos / self.cluster.replicas as usize) as u32)
    }

    /// The port of data node `section`'s `GET /metrics`: its own, else the
    /// default's plus its position among the data nodes of its host (0
    /// stays 0: a free port).
    pub fn metrics_port_of(&self, section: &DataNodeSection) -> Option<u16> {
        if section.metrics_port.is_some() {
            return section.metrics_port;
        }
        let base = self.datanode_defaults.metrics_port?;
        let on_host = self.datanodes.iter().filter(|d| d.host == section.host);
        let position = on_host.take_while(|d| d.node_id != section.node_id).count() as u16;
        Some(if base == 0 { 0 } else { base.saturating_add(position) })
    }

    /// A configured data node as the layout lists it before it starts.
    pub fn not_started(&self, section: &DataNodeSection) -> crate::proto::DataNodeInfo {
        crate::proto::DataNodeInfo {
            node_id: section.node_id,
            node_group: self.node_group_of(section.node_id).unwrap_or(0),
            host: section.host.clone(),
            status: crate::proto::NodeStatus::NotStarted,
            shards: Vec::new(),
            pid: 0,
            process: 0,
            location_domain: section.location_domain.clone(),
        }
    }

    pub fn node_groups(&self) -> u32 {
        (self.datanodes.len() / self.cluster.replicas as usize) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_nodes_on_one_host_take_consecutive_metrics_ports() {
        let mut c = ClusterConfig::local(4, 2, 0);
        c.datanodes[2].host = "10.0.0.2".into();
        let ports = |c: &ClusterConfig| c.datanodes.iter().map(|d| c.metrics_port_of(d)).collect::<Vec<_>>();
        assert_eq!(ports(&c), [None, None, None, None]);
        c.datanode_defaults.metrics_port = Some(9100);
        assert_eq!(ports(&c), [Some(9100), Some(9101), Some(9100), Some(9102)]);
        c.datanodes[1].metrics_port = Some(7000);
        assert_eq!(ports(&c)[1], Some(7000), "a node's own port wins");
        c.datanode_defaults.metrics_port = Some(0);
        assert_eq!(ports(&c)[3], Some(0), "0 stays a free port");
    }

    #[test]
    fn the_configuration_refuses_an_address_nobody_can_reach() {
        let mut c = ClusterConfig::local(2, 2, 0);
        c.mgmd.host = "0.0.0.0".into();
        assert!(c.validate().unwrap_err().message.contains("mgmd: host 0.0.0.0 is not an address others can reach"));
        c.mgmd.host = "db-mgmd-0.db".into();
        c.datanodes[0].host = "::".into();
        assert!(c.validate().unwrap_err().message.contains("datanode 2: host :: is not"));
        for wildcard in ["[::]", "0"] {
            c.datanodes[0].host = wildcard.into();
            assert!(c.validate().is_err(), "{wildcard} was taken for a reachable address");
        }
        c.datanodes[0].host = "10.0.0.7".into();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn parses_and_validates() {
        let cfg = ClusterConfig::parse(
            r#"
            [cluster]
            replicas = 2
            [[datanode]]
            node_id = 2
            [[datanode]]
            node_id = 3
            "#,
        )
        .unwrap();
        assert_eq!(cfg.node_groups(), 1);
        assert_eq!(cfg.cluster.lock_wait_timeout_ms, 1500);
        let err = ClusterConfig::parse("[cluster]\nreplicas = 2\n[[datanode]]\nnode_id = 2\n").unwrap_err();
        assert!(err.message.contains("multiple of cluster.replicas"), "{}", err.message);
        let err = ClusterConfig::parse("[cluster]\nreplicaz = 2\n").unwrap_err();
        assert!(err.message.contains("replicaz"), "{}", err.message);
    }

    #[test]
    fn cpu_binding_is_parsed_and_checked() {
        let base = "[[datanode]]\nnode_id = 2\n";
        let cfg = ClusterConfig::parse(base).unwrap();
        assert_eq!(cfg.datanode_defaults.cpu_bind, CpuBind::Auto);
        let cfg = ClusterConfig::parse(&format!("[datanode_defaults]\ncpu_bind = \"off\"\n{base}")).unwrap();
        assert_eq!(cfg.datanode_defaults.cpu_bind, CpuBind::Off);
        let err = ClusterConfig::parse(&format!("[datanode_defaults]\ncpu_bind = \"on\"\n{base}")).unwrap_err();
        assert!(err.message.contains("auto") && err.message.contains("off"), "{}", err.message);
        let cfg = ClusterConfig::parse(&format!("{base}cpus = [1, 0]\n")).unwrap();
        assert_eq!(cfg.datanodes[0].cpus, Some(vec![1, 0]));
        for (cpus, wanted) in [("[]", "distinct"), ("[1, 1]", "distinct"), ("[0]", "one CPU per thread")] {
            let err = ClusterConfig::parse(&format!("{base}threads = 2\ncpus = {cpus}\n")).unwrap_err();
            assert!(err.message.contains(wanted), "{cpus}: {}", err.message);
        }
    }

    #[test]
    fn local_config_round_trips_through_toml() {
        let cfg = ClusterConfig::local(2, 1, 0);
        assert_eq!(ClusterConfig::parse(&cfg.to_toml()).unwrap(), cfg);
    }
}
