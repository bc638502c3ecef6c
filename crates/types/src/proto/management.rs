//! The management protocol: requests to the management server and its
//! commands to data nodes.

use super::*;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum MgmRequest {
    GetLayout,
    /// A data node asks for a node id and its settings (answered with
    /// `Registered`).
    RegisterDataNode {
        node_id: Option<NodeId>,
        pid: u32,
        /// The number the process drew at its start (`DataNodeInfo::process`).
        process: u64,
        protocol: u32,
    },
    /// The registered node has bound its shards (answered with `Started`);
    /// from then on the connection carries `NodeCommand`s from the
    /// management server to the node.
    DataNodeStarted {
        node_id: NodeId,
        shards: Vec<String>,
        /// What the node found on its disk (None: nothing, an initial start).
        recovery: Option<NodeRecovery>,
    },
    /// The started node restored its data (as `Started` planned) and can
    /// serve: the management server now marks it started.
    DataNodeReady {
        node_id: NodeId,
    },
    /// A restarting data node (status starting) copied every partition
    /// from the primaries and checkpointed: admit it to the view. Answered
    /// once the view that admits it is chosen.
    DataNodeSynced {
        node_id: NodeId,
    },
    /// The epoch driver reports a new durable epoch.
    EpochDurable {
        epoch: CommitEpoch,
    },
    CreateTable(TableSpec),
    DropTable {
        database: String,
        name: String,
    },
    GetTable {
        database: String,
        name: String,
    },
    ListTables,
    /// Creates an ordered index; a unique one also gets its hidden table
    /// (which the caller fills from the rows already stored).
    CreateIndex {
        database: String,
        table: String,
        index: String,
        columns: Vec<String>,
        unique: bool,
    },
    DropIndex {
        database: String,
        table: String,
        index: String,
    },
    /// Appends columns; stored rows read `fill` in them (one value per column).
    AddColumns {
        database: String,
        table: String,
        columns: Vec<ColumnDef>,
        fill: Vec<Value>,
    },
    /// Rows and data memory of every data node.
    ReportMemory,
    /// Stops every data node and then the management server.
    Shutdown,
    /// Stops one data node (its node group must keep a started replica).
    StopNode {
        node_id: NodeId,
    },
    /// Asks for a stopped data node to be started again (a node restart;
    /// `initial` empties its data directory first). The process manager
    /// that runs the cluster's processes (`latsdb start`) carries it out.
    StartNode {
        node_id: NodeId,
        initial: bool,
    },
    /// A process manager collects the pending start requests (answered
    /// with `StartRequests`): every node's (`latsdb start`), or one node's
    /// (the angel of a standalone `latsdb datanode`).
    TakeStartRequests {
        only: Option<NodeId>,
    },
    /// A data node's membership message to the arbitrator (answered with
    /// `Member`).
    Member {
        from: NodeId,
        msg: MemberMsg,
    },
    /// Renames columns or changes their defaults: definition only, no row
    /// is rewritten (answered with the new `Table`).
    ChangeColumns {
        database: String,
        table: String,
        changes: Vec<crate::schema::ColumnChange>,
    },
    /// Gives a table a new name, in the same or another database (answered
    /// with the new `Table`).
    RenameTable {
        database: String,
        table: String,
        new_database: String,
        new_name: String,
    },
    /// Adds a line to the cluster log (answered with `Done`): what a
    /// process manager decided about a data node, for instance.
    ReportEvent {
        severity: Severity,
        source: String,
        text: String,
    },
    /// The newest `last` events of the cluster log, oldest first (answered
    /// with `ClusterLog`).
    GetClusterLog {
        last: u32,
    },
    /// Starts an online backup (answered at once with `Backups`, holding
    /// the new one; `BackupStatus` follows it).
    BackupStart,
    /// One backup's state (None: the newest), answered with `Backups`.
    BackupStatus {
        id: Option<u64>,
    },
    /// Every backup this management server has run, answered with `Backups`.
    BackupList,
    /// Stops a running backup; the data nodes delete what they wrote of it.
    BackupAbort {
        id: u64,
    },
    /// The numbers `/metrics` serves, in the Prometheus text format
    /// (answered with `Report`), for `latsdb mgm report`.
    Report,
    /// Adds node groups to the running cluster: `config` is the cluster's
    /// configuration file (TOML) with `[[datanode]]` sections appended, a
    /// whole number of node groups. Their share of the partitions moves to
    /// them as they start. Answered with `Report` (what will move).
    AddNodeGroups {
        config: String,
    },
    /// The node groups, their nodes and partitions, and the moves under
    /// way, as text (answered with `Report`).
    NodeGroups,
    /// A running data node lost its connection to the management server
    /// and connects again (answered with `Done`, or with an error saying
    /// why the server no longer counts this process as running). From
    /// then on the connection carries `NodeCommand`s again, as after
    /// `DataNodeStarted`. `layout` is the last one the node had from a
    /// management server: one that restarted meanwhile resumes the
    /// running cluster from it.
    ReattachDataNode {
        node_id: NodeId,
        pid: u32,
        process: u64,
        protocol: u32,
        layout: ClusterLayout,
    },
    /// A copying ALTER TABLE begins: creates the hidden table
    /// `copy_table_name(table id)` from `spec` (its name is ignored) with
    /// `indexes`, then refuses writes to the table on every data node
    /// (`ErrorCode::TableAltering`) and waits until no transaction holds an
    /// unfinished write to it. Answered with `Tables([table, copy])`. The
    /// copy belongs to this connection: it is abandoned (the copy dropped,
    /// writes let in) if the connection closes before `CopyTableFinish`.
    CopyTableBegin {
        database: String,
        table: String,
        /// The table's version the copy was planned against: refused with
        /// `SchemaVersionMismatch` if the table changed since.
        version: u32,
        spec: TableSpec,
        indexes: Vec<crate::schema::IndexSpec>,
    },
    /// The copy holds every row: the table is dropped and its copy takes
    /// its name (answered with the new `Table`).
    CopyTableFinish {
        table: crate::schema::TableId,
    },
    /// The copy is abandoned: dropped, and writes to the table let in again
    /// (answered with `Done`).
    CopyTableAbort {
        table: crate::schema::TableId,
    },
}

impl MgmRequest {
    /// The name of a request only a data node may send (its lifecycle, its
    /// durable epoch, its membership votes); None for any other. With TLS
    /// the management server takes these only from a data node's
    /// certificate.
    pub fn data_node_only(&self) -> Option<&'static str> {
        Some(match self {
            MgmRequest::RegisterDataNode { .. } => "RegisterDataNode",
            MgmRequest::ReattachDataNode { .. } => "ReattachDataNode",
            MgmRequest::DataNodeStarted { .. } => "DataNodeStarted",
            MgmRequest::DataNodeReady { .. } => "DataNodeReady",
            MgmRequest::DataNodeSynced { .. } => "DataNodeSynced",
            MgmRequest::EpochDurable { .. } => "EpochDurable",
            MgmRequest::Member { .. } => "Member",
            _ => return None,
        })
    }
}

/// Where an online backup is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum BackupState {
    Running,
    /// Every data node wrote and synced its part, manifest last.
    Completed,
    Failed(String),
    Aborted,
}

/// An online backup as the management server tracks it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BackupInfo {
    pub id: u64,
    pub state: BackupState,
    /// The epoch the backup restores: every commit up to it, none after
    /// (NONE until every data node holds its files).
    pub epoch: CommitEpoch,
    /// Milliseconds since the Unix epoch (0: not finished).
    pub started_unix_ms: u64,
    pub finished_unix_ms: u64,
    /// Each data node's part.
    pub parts: Vec<BackupPart>,
}

/// One data node's part of a backup: where it writes and how far it is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BackupPart {
    pub node_id: NodeId,
    pub host: String,
    /// The folder on that host.
    pub dir: String,
    pub bytes: u64,
    /// Bytes to write (known once writing began).
    pub total_bytes: u64,
    pub done: bool,
    pub error: Option<String>,
}

/// How much a cluster event asks of an operator.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Something happened as planned (a node started, a table was created).
    Info,
    /// Something needs watching (a node died and is being restarted, memory
    /// is running out).
    Warning,
    /// Something needs an operator (a node left down after dying too often,
    /// a limit reached).
    Alert,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warning => "WARNING",
            Severity::Alert => "ALERT",
        }
    }
}

/// One line of the cluster log, kept by the management server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ClusterEvent {
    /// Milliseconds since the Unix epoch, by the management server's clock.
    pub unix_ms: u64,
    pub severity: Severity,
    /// Who reported it: `mgmd`, `data node 3`, `angel of data node 3`.
    pub source: String,
    pub text: String,
}

impl std::fmt::Display for ClusterEvent {
    /// One line, as the cluster log file and `latsdb mgm log` show it:
    /// `2026-11-27 22:40:01.123 UTC WARNING angel of data node 3: ...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = i64::try_from(self.unix_ms).unwrap_or(i64::MAX / 1000);
        let whole = crate::value::format_datetime(ms.div_euclid(1000).saturating_mul(1_000_000));
        write!(f, "{whole}.{:03} UTC {:<7} {}: {}", ms.rem_euclid(1000), self.severity.name(), self.source, self.text)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum MgmResponse {
    Layout(ClusterLayout),
    Registered {
        node_id: NodeId,
        host: String,
        port: u16,
        threads: u16,
        /// 0 lets the node choose from its memory and `nodes_on_host`.
        data_memory_mb: u64,
        /// 0 lets the node choose from its data memory.
        disk_page_cache_mb: u64,
        /// 0: no limit.
        tablespace_mb: u64,
        /// 0 lets the node choose from its disk's free space.
        redo_limit_mb: u64,
        /// Tablespace files bypass the OS page cache (`O_DIRECT`).
        disk_direct_io: bool,
        /// Data nodes configured on the same host (they share its memory
        /// and CPUs).
        nodes_on_host: u16,
        /// This node's position among them, in configuration order.
        host_index: u16,
        cpu_bind: crate::config::CpuBind,
        /// Explicit CPUs for the shard threads, one per thread.
        cpus: Option<Vec<u32>>,
        /// Keep idle CPUs polling while the node runs (`DataNodeDefaults::idle_poll`).
        idle_poll: bool,
        /// Serve `GET /metrics` on this port (`ClusterConfig::metrics_port_of`).
        metrics_port: Option<u16>,
    },
    Started {
        layout: ClusterLayout,
        tables: Vec<TableDef>,
        /// How the node's shards begin (restore from disk or start empty).
        start: StartPlan,
    },
    Table(TableDef),
    Tables(Vec<TableDef>),
    /// Per started data node, its shards' usage.
    Memory(Vec<(NodeId, Vec<ShardMemory>)>),
    /// The arbitrator's answer to a membership message, if any.
    Member(Option<MemberMsg>),
    /// Data nodes to start: (node, initial).
    StartRequests(Vec<(NodeId, bool)>),
    Done,
    Error(DbError),
    ClusterLog(Vec<ClusterEvent>),
    Backups(Vec<BackupInfo>),
    Report(String),
}

/// What a data node's disk holds, reported when it starts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NodeRecovery {
    /// The latest epoch every shard of the node synced (its REDO logs hold
    /// every commit up to it).
    pub saved_epoch: CommitEpoch,
    /// The highest epoch any of its REDO records carries.
    pub max_epoch: CommitEpoch,
}

/// The management server's answer to a starting data node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct StartPlan {
    /// Restore the local checkpoint and REDO log up to this epoch (None:
    /// start empty and discard what the disk holds).
    pub restore_epoch: Option<CommitEpoch>,
    /// New commits begin in this epoch, above any epoch a REDO log of the
    /// cluster has ever carried.
    pub first_epoch: CommitEpoch,
    /// The cluster is running: after restoring, the node joins it as a
    /// starting node and copies its partitions from the primaries (a node
    /// restart) instead of serving at once.
    pub join: bool,
}

/// Rows and estimated data memory of one shard.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ShardMemory {
    pub shard: u16,
    pub rows: u64,
    pub used_bytes: u64,
    /// 0 means unlimited.
    pub budget_bytes: u64,
    /// The shard's tablespace: its file's bytes, the bytes of live records
    /// in it, and its limit (0: none).
    pub tablespace_bytes: u64,
    pub tablespace_used_bytes: u64,
    pub tablespace_limit_bytes: u64,
    /// Page-cache lookups of the disk parts of rows that found the page
    /// cached, and that had to read it.
    pub page_cache_hits: u64,
    pub page_cache_misses: u64,
    /// Requests that waited for pages read off the shard thread, and pages
    /// read on the shard thread itself (by paths that do not wait).
    pub page_waits: u64,
    pub pages_read_on_shard_thread: u64,
    /// Pages the operating system had cached, read without waiting.
    pub pages_read_at_once: u64,
    /// Rows and row bytes of each partition the shard holds a replica of.
    pub partitions: Vec<PartitionSize>,
    /// REDO bytes the shard keeps for a restart, and its limit (0: none).
    pub redo_bytes: u64,
    pub redo_limit_bytes: u64,
    /// What clients asked of the shard since it started.
    pub ops: OpCounts,
}

/// A shard's work since it started.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Keyed operations (reads and writes, alone or in transactions).
    pub key_ops: u64,
    /// Pages of scans.
    pub scan_pages: u64,
    /// Transactions this shard coordinated that committed, and that
    /// aborted by cause.
    pub committed: u64,
    pub aborts: crate::work::AbortCounts,
    /// Row-lock requests that waited, and waits that timed out.
    pub lock_waits: u64,
    pub lock_wait_timeouts: u64,
    /// How long this shard's coordinator took to answer transaction
    /// requests (from a request's arrival to its results, commit or abort).
    pub tx_request_latency: crate::work::LatencyCounts,
    /// Local checkpoints completed since the shard started.
    pub checkpoints: u64,
    /// REDO bytes the shard appended since it started (0 without a disk).
    pub redo_written_bytes: u64,
}

/// Rows of one partition replica and the bytes of their keys and values.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionSize {
    pub table: crate::schema::TableId,
    pub partition: u32,
    pub rows: u64,
    pub bytes: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum SchemaChange {
    CreateTable(TableDef),
    /// A new definition of an existing table (an index was added or dropped).
    AlterTable(TableDef),
    DropTable(TableId),
    /// The tables whose writes are refused while ALTER TABLE copies them:
    /// exactly these (a data node forgets any other). A shard answers
    /// `TableAltering` while a transaction still holds an unfinished write
    /// to one of them; the management server asks again until none does.
    Fence(Vec<TableId>),
}

/// Sent by the management server to a registered data node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum NodeCommand {
    /// Are you alive? Answered with `Done`.
    Heartbeat,
    SetLayout(ClusterLayout),
    ApplySchema(SchemaChange),
    ReportMemory,
    Stop,
    /// To the president of the view: propose a view that adds this
    /// starting node (answered once it is chosen).
    Admit(NodeId),
    /// Backup `id`: keep every file that restores this node's shards (no
    /// checkpoint or REDO is deleted until the backup lets them go);
    /// answered with `BackupHeld`.
    BackupHold {
        id: u64,
    },
    /// Write this node's part of backup `id` at `epoch` with the schema
    /// `tables`, in the background; answered with `Done` at once.
    BackupWrite {
        id: u64,
        epoch: CommitEpoch,
        tables: Vec<TableDef>,
    },
    /// How this node's part of backup `id` goes; answered with `BackupProgress`.
    BackupProgress {
        id: u64,
    },
    /// Stop backup `id`, delete what it wrote and let the held files go.
    BackupAbort {
        id: u64,
    },
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum NodeReply {
    Done,
    Memory(Vec<ShardMemory>),
    Error(DbError),
    /// The node holds its files for a backup: the latest durable epoch its
    /// shards knew when they began holding, the highest epoch they were
    /// committing in (the backup holds every commit up to it), the
    /// partitions (table, partition) they hold replicas of, and the folder
    /// it will write.
    BackupHeld {
        durable: CommitEpoch,
        current: CommitEpoch,
        partitions: Vec<(crate::schema::TableId, u32)>,
        dir: String,
    },
    BackupProgress(BackupPart),
}
