//! The simulated world: data nodes (membership + shards), the management
//! server's arbitrator, clients, network, virtual time, faults, checkers.

use crate::disk::{DiskImage, SimDisk, SyncDone};
use latsdb_cluster::membership::{Arbiter, MemberOut, Membership, MembershipConfig, Voter};
use latsdb_cluster::{
    checkpoint_for, node_recovery, Lease, NodeRestart, Outbox, RestartStep, Shard, ShardConfig, SyncProgress,
};
use latsdb_types::expr::Expr;
use latsdb_types::proto::{
    ClientRequest, ClientResponse, ClusterLayout, CommitEpoch, DataNodeInfo, KeyOp, LockMode, MemberMsg, NodeId,
    NodeRecovery, NodeStatus, OpKind, OpResult, PeerMsg, Router, SchemaChange, ShardAddr, TxId, ViewNumber,
};
use latsdb_types::rng::Rng;
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};
use latsdb_types::{ErrorCode, TableMeta, Value};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};

const INITIAL_BALANCE: i64 = 1000;
/// Registers each client writes with independent writes (rows of the
/// accounts table after the accounts, outside the bank).
const REGISTERS_PER_CLIENT: i64 = 2;

fn registers(cfg: &SimConfig) -> i64 {
    cfg.clients as i64 * REGISTERS_PER_CLIENT
}
const TICK_US: u64 = 10_000;

/// A simulated cluster, its workload and its fault menu. Spec files
/// (`spec.rs`) write it as TOML; missing fields take their defaults.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    pub seed: u64,
    /// Events processed before the clients stop starting new work.
    pub steps: u64,
    pub nodes: u16,
    /// Replicas per node group; `nodes` must be a multiple of it.
    pub replicas: u8,
    pub shards_per_node: u16,
    pub clients: usize,
    pub accounts: i64,
    pub max_delay_us: u64,
    pub lock_wait_timeout_us: u64,
    /// Events kept for the failure report.
    pub trace_lines: usize,
    /// Data-node crashes to inject, each at a random moment when the
    /// cluster is stable and can survive it.
    pub crashes: u32,
    /// Crashed (or shut down) data nodes to start again, each once the
    /// cluster is stable: a node restart from the node's disk (one in three
    /// is an initial node restart from an empty disk), which copies every
    /// partition from the live replicas while the workload runs, writes a
    /// checkpoint, hands its primaries back and is admitted to the view.
    pub restarts: u32,
    /// Whole-cluster crashes (every data node loses power at once), each
    /// followed by a system restart from the disks of the last view's
    /// nodes: exactly a prefix of the commits, with every durable one, must
    /// come back. Nodes that had left before stay down until a node restart
    /// (a later `restarts` fault) brings them back.
    pub cluster_crashes: u32,
    /// Failed syncs (the node stops, as a real one does, and its disk
    /// keeps only what was synced); also makes a sync now and then stall
    /// for up to 200 ms (a slow disk).
    pub disk_faults: u32,
    /// Network splits to inject (two random sides, the management server
    /// on one of them), each healed after a random time; one side must be
    /// able to continue.
    pub splits: u32,
    /// Short network glitches (healed before anyone is declared dead).
    pub glitches: u32,
    /// Connection resets between two live data nodes: one of them sees its
    /// link to the other break and suspects it at once (the other may
    /// still be serving).
    pub resets: u32,
    /// Percent of membership messages lost, and duplicated.
    pub member_fault_pct: u64,
    pub heartbeat_interval_us: u64,
    pub heartbeat_missed: u32,
    /// Stop the workload after this many events instead of `steps` (the
    /// faults stay where `steps` put them): used to shorten a failing run.
    pub stop_after: Option<u64>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            steps: 20_000,
            nodes: 2,
            replicas: 1,
            shards_per_node: 2,
            clients: 6,
            accounts: 10,
            max_delay_us: 2_000,
            lock_wait_timeout_us: 20_000,
            trace_lines: 60,
            crashes: 0,
            restarts: 0,
            cluster_crashes: 0,
            disk_faults: 0,
            splits: 0,
            glitches: 0,
            resets: 0,
            member_fault_pct: 0,
            heartbeat_interval_us: 20_000,
            heartbeat_missed: 5,
            stop_after: None,
        }
    }
}

impl SimConfig {
    /// The fault menu of the CI sweeps: `crashes` crashes, one split, one
    /// glitch, two connection resets, lossy membership messages.
    pub fn with_faults(mut self, crashes: u32) -> SimConfig {
        self.crashes = crashes;
        self.splits = 1;
        self.glitches = 1;
        self.resets = 2;
        self.member_fault_pct = 3;
        self
    }
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SimReport {
    pub seed: u64,
    pub events: u64,
    /// A hash (xxh3) of every event delivered, in order: its time, sender,
    /// receiver and message. Two runs of one seed and configuration give
    /// the same hash only if they replayed byte for byte. (Not a count:
    /// left out of the spec checks' fields.)
    #[serde(skip)]
    pub trace_hash: u64,
    pub virtual_ms: u64,
    pub committed_transfers: u64,
    pub aborted_transfers: u64,
    pub abandoned: u64,
    /// Transfers whose commit was in flight when their node failed.
    pub unknown_outcomes: u64,
    /// Nodes crashed by the fault injector.
    pub crashes: u32,
    /// Nodes started again (and admitted after copying their data).
    pub restarts: u32,
    /// Of those, initial node restarts (from an empty disk).
    pub initial_restarts: u32,
    /// Whole-cluster crashes, each followed by a system restart.
    pub system_restarts: u32,
    /// Syncs that failed (each stopped its node).
    pub failed_syncs: u32,
    /// Node restarts that gave up (the node stopped).
    pub failed_restarts: u32,
    /// Partition copies of restarting nodes that started over from a new
    /// primary (the one they copied from failed or handed its role back).
    pub copy_switches: u64,
    /// Commits acknowledged as durable (`WaitDurable`) and checked after
    /// every system restart.
    pub durable_acks: u64,
    /// The highest epoch declared durable.
    pub durable_epoch: CommitEpoch,
    /// Network splits injected (not counting glitches).
    pub splits: u32,
    pub glitches: u32,
    pub resets: u32,
    /// Nodes that shut themselves down (removed from the view or cut off).
    pub shutdowns: u32,
    /// The number of the final view.
    pub final_view: ViewNumber,
    /// Connections dropped while a lock step or audit was still executing.
    pub dropped_while_waiting: u64,
    pub audits: u64,
    pub reads: u64,
    /// Register writes (independent writes of a batch) acknowledged.
    pub register_writes: u64,
    /// Requests refused because the node's lease had run out.
    pub refused: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Endpoint {
    Shard(usize),
    Client(usize),
    /// The membership of data node `i` (node id 2 + i).
    Node(usize),
    Mgmd,
}

#[derive(Debug)]
enum Payload {
    Peer {
        from: ShardAddr,
        msg: PeerMsg,
    },
    Request {
        conn: u64,
        req_id: u64,
        req: ClientRequest,
    },
    Disconnect {
        conn: u64,
    },
    Response {
        req_id: u64,
        resp: ClientResponse,
    },
    Tick,
    Wake,
    /// The client drops its connection if request `req` is still unanswered.
    DropIfWaiting {
        req: u64,
    },
    /// The client's connection to a failed node broke while request
    /// `req_id` was outstanding.
    ConnectionLost {
        req_id: u64,
    },
    /// A shard applies the layout of a view its node installed.
    Layout(Box<ClusterLayout>),
    Member {
        from: Voter,
        msg: MemberMsg,
    },
    MemberTick,
    Heal,
    /// A sync of the shard's disk completed.
    DiskDone(SyncDone),
    /// The management server starts every data node again after a
    /// whole-cluster crash.
    SystemRestart,
}

impl Payload {
    /// Timers and membership chatter go on forever; the rest is work.
    fn is_background(&self) -> bool {
        matches!(self, Payload::Tick | Payload::MemberTick | Payload::Member { .. })
    }
}

#[derive(Clone, Copy, Debug)]
struct Account {
    balance: i64,
    version: i64,
}

#[derive(Debug)]
enum Doing {
    Idle,
    Locking {
        shard: usize,
        req: u64,
        a: i64,
        b: i64,
        amount: i64,
        abandon: bool,
    },
    Writing {
        shard: usize,
        req: u64,
        writes: [(i64, Account); 2],
        abandon: bool,
        tx: TxId,
    },
    Auditing {
        req: u64,
        shard: usize,
    },
    /// Waits until an acknowledged transfer's epoch is durable.
    Durable {
        req: u64,
        shard: usize,
        transfer: Transfer,
    },
    /// `floor`: the newest version of the account acknowledged before the
    /// read was sent; the read must not return an older one.
    Reading {
        req: u64,
        account: i64,
        shard: usize,
        floor: i64,
    },
    /// Independent writes of the client's registers in one batch (not a
    /// transaction: each write commits on its own), `(register, value)`.
    Registering {
        req: u64,
        shard: usize,
        writes: Vec<(i64, i64)>,
    },
}

impl Doing {
    fn waiting_on(&self) -> Option<(usize, u64)> {
        match *self {
            Doing::Locking { shard, req, .. }
            | Doing::Writing { shard, req, .. }
            | Doing::Auditing { req, shard }
            | Doing::Durable { req, shard, .. }
            | Doing::Reading { req, shard, .. }
            | Doing::Registering { req, shard, .. } => Some((shard, req)),
            Doing::Idle => None,
        }
    }
}

struct Client {
    generation: u64,
    next_req: u64,
    doing: Doing,
    /// Per account, the newest version this client's commits wrote: its
    /// later reads, from any replica, must not see an older one.
    own_versions: HashMap<i64, i64>,
}

/// An acknowledged transfer: the versions it wrote of its two accounts.
#[derive(Clone, Copy, Debug)]
struct Transfer {
    a: i64,
    version_a: i64,
    b: i64,
    version_b: i64,
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Crash,
    Restart,
    Split,
    Glitch,
    Reset,
    ClusterCrash,
    DiskFailure,
}

struct Split {
    side_a: BTreeSet<usize>,
    mgmd_in_a: bool,
}

struct World {
    cfg: SimConfig,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    /// Scheduled events: (from, to, payload, sent at).
    events: HashMap<u64, (Endpoint, Endpoint, Payload, u64)>,
    link_last: HashMap<(Endpoint, Endpoint), u64>,
    shards: Vec<Shard>,
    addrs: Vec<ShardAddr>,
    memberships: Vec<Membership>,
    leases: Vec<Lease>,
    /// Every node started: the layout views are derived from.
    base_layout: ClusterLayout,
    arbiter: Arbiter,
    /// Clients route by the management server's view.
    router: Router,
    meta: TableMeta,
    clients: Vec<Client>,
    stopped: bool,
    /// Per account: version -> balance of every committed transfer.
    committed: Vec<BTreeMap<i64, i64>>,
    /// (account, version, balance) sent with a commit request.
    written: HashSet<(i64, i64, i64)>,
    /// Per account: version -> balances written by transfers whose outcome
    /// is unknown (their commit was in flight when a node failed).
    maybe: Vec<BTreeMap<i64, Vec<i64>>>,
    /// Per account: the newest acknowledged version.
    acked_max: Vec<i64>,
    /// The next value a register write sets (values only grow, so a
    /// register's value is also its version).
    next_register_value: i64,
    /// Crashed or shut-down nodes (by index).
    dead: BTreeSet<usize>,
    /// Per node, when it was last started again: what was sent to it
    /// before went to the process that died.
    restarted_at: Vec<u64>,
    /// Restarting nodes not admitted yet, and when their admission was
    /// last asked for (0: not yet).
    joining: BTreeSet<usize>,
    /// The node restarts under way, by node (the stages every restarting
    /// data node runs: `latsdb_cluster::NodeRestart`).
    restarts: BTreeMap<usize, NodeRestart>,
    /// Each shard's disk.
    disks: Vec<SimDisk>,
    /// A node whose next sync fails.
    failing_disk: Option<usize>,
    /// No fault is injected before this time.
    quiet_until: u64,
    /// The nodes live at a whole-cluster crash (their view).
    last_view: Vec<usize>,
    /// Every transfer acknowledged since the last system restart, and
    /// those acknowledged as durable.
    transfers: Vec<Transfer>,
    durable_transfers: Vec<Transfer>,
    /// The table every shard holds.
    def: TableDef,
    /// Faults still to inject: (not before event number, kind).
    plan: Vec<(u64, Fault)>,
    split: Option<Split>,
    /// Data messages on cut links: delivered at the heal, as TCP would.
    held: Vec<(Endpoint, Endpoint, Payload)>,
    /// Every view installed anywhere, by epoch: two different views with
    /// one epoch would be a split brain.
    views: BTreeMap<ViewNumber, Vec<NodeId>>,
    violation: Option<String>,
    trace: VecDeque<String>,
    trace_hasher: xxhash_rust::xxh3::Xxh3,
    report: SimReport,
}

/// Answers a client accepts as "not done, try again": lock-wait timeouts,
/// and (around failures) a participant that left, a stale route, or a node
/// that cannot confirm its membership.
fn retriable(e: &latsdb_types::DbError) -> bool {
    matches!(
        e.code,
        ErrorCode::LockWaitTimeout
            | ErrorCode::NodeUnavailable
            | ErrorCode::NotServing
            | ErrorCode::WrongShard
            | ErrorCode::UnknownTransaction
    )
}

fn node_id(i: usize) -> NodeId {
    2 + i as NodeId
}

fn layout(cfg: &SimConfig) -> ClusterLayout {
    ClusterLayout::builder("sim")
        .replicas(cfg.replicas)
        .mgmd(1, "sim")
        .datanodes(
            (0..cfg.nodes)
                .map(|n| DataNodeInfo {
                    node_id: 2 + n,
                    node_group: (n / cfg.replicas as u16) as u32,
                    host: "sim".into(),
                    status: NodeStatus::Started,
                    shards: (0..cfg.shards_per_node).map(|s| format!("sim:{n}.{s}")).collect(),
                    pid: 0,
                })
                .collect(),
        )
        .node_groups((cfg.nodes / cfg.replicas as u16) as u32)
        .lock_wait_timeout_ms(cfg.lock_wait_timeout_us / 1000)
        .heartbeat(cfg.heartbeat_interval_us / 1000, cfg.heartbeat_missed)
        // The simulation starts checkpoints itself (its REDO logs stay far
        // below a megabyte).
        .checkpoint_trigger_mb(0)
        .first_view(ViewNumber(1))
        .build()
}

impl World {
    /// Changes a node's status in the management server's layout, which
    /// makes it a new version (as the management server does).
    fn set_base_status(&mut self, n: usize, status: NodeStatus) {
        if self.base_layout.datanodes[n].status != status {
            self.base_layout.datanodes[n].status = status;
            self.base_layout.version += 1;
        }
    }
}

/// A shard of a new data-node process (with its disk, the table applied).
fn new_shard(
    cfg: &SimConfig,
    me: ShardAddr,
    layout: &ClusterLayout,
    def: &TableDef,
    first_tx_seq: u64,
    lease: &Lease,
) -> Result<Shard, String> {
    let shard_cfg = ShardConfig {
        me,
        lock_wait_timeout_us: cfg.lock_wait_timeout_us,
        first_tx_seq,
        data_memory_bytes: 0,
        lease: lease.clone(),
        durable: true,
        node_shards: cfg.shards_per_node,
    };
    let mut shard = Shard::new(shard_cfg, layout.clone());
    shard
        .apply_schema(SchemaChange::CreateTable(def.clone()))
        .map_err(|e| format!("a shard refused the schema: {e}"))?;
    Ok(shard)
}

/// Runs one seeded simulation; Err explains the first violated check, with
/// the seed and the events before it. The failing run is shortened first:
/// the fewest workload steps that still fail are searched for, and that
/// run's trace is printed.
pub fn run(cfg: &SimConfig) -> Result<SimReport, String> {
    match run_once(cfg) {
        Ok(report) => Ok(report),
        Err(first) => {
            let (mut lo, mut hi) = (1, cfg.stop_after.unwrap_or(cfg.steps));
            let mut shortest = None;
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match run_once(&SimConfig { stop_after: Some(mid), ..cfg.clone() }) {
                    Err(e) => {
                        shortest = Some((mid, e));
                        hi = mid;
                    }
                    Ok(_) => lo = mid + 1,
                }
            }
            match shortest {
                Some((stop, e)) => Err(format!(
                    "{first}\n\nthe same run with the workload stopped after {stop} events (`--stop-after {stop}`) fails too; its trace is the shortest found:\n{e}"
                )),
                _ => Err(first),
            }
        }
    }
}

fn run_once(cfg: &SimConfig) -> Result<SimReport, String> {
    let mut world = World::new(cfg.clone())?;
    match world.run() {
        Ok(()) => Ok(world.report.clone()),
        Err(e) => Err(format!(
            "simulation seed {} failed after {} events at {} us: {e}\nlast events:\n{}",
            cfg.seed,
            world.report.events,
            world.now,
            world.trace.iter().cloned().collect::<Vec<_>>().join("\n")
        )),
    }
}

impl World {
    fn new(cfg: SimConfig) -> Result<World, String> {
        if cfg.nodes == 0 || cfg.shards_per_node == 0 || cfg.clients == 0 || cfg.accounts < 2 {
            return Err("the simulation needs at least 1 node, 1 shard, 1 client and 2 accounts".into());
        }
        if !(1..=4).contains(&cfg.replicas) {
            return Err(format!("--replicas is {}; a node group has 1 to 4 replicas", cfg.replicas));
        }
        if !cfg.nodes.is_multiple_of(cfg.replicas as u16) {
            return Err(format!("{} nodes cannot form node groups of {} replicas", cfg.nodes, cfg.replicas));
        }
        if (cfg.crashes > 0 || cfg.splits > 0) && cfg.replicas < 2 {
            return Err("crashes and splits need at least 2 replicas".into());
        }
        if cfg.heartbeat_missed < 4 || cfg.heartbeat_interval_us < 1000 {
            return Err("heartbeats need an interval of at least 1 ms and at least 4 missed beats".into());
        }
        let layout = layout(&cfg);
        let spec = TableSpec::new("sim", "accounts")
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
            .column(ColumnDef::new("balance", ColumnType::int(IntWidth::Big)).not_null())
            .column(ColumnDef::new("version", ColumnType::int(IntWidth::Big)).not_null())
            .primary_key(&["id"]);
        let partitions = (cfg.nodes as u32 * cfg.shards_per_node as u32 * 2).max(4);
        let def = TableDef::from_spec(&spec, 1, partitions).map_err(|e| e.to_string())?;
        let mut shards = Vec::new();
        let mut addrs = Vec::new();
        let mut memberships = Vec::new();
        let mut leases = Vec::new();
        let groups: BTreeMap<NodeId, u32> = layout.datanodes.iter().map(|d| (d.node_id, d.node_group)).collect();
        for n in 0..cfg.nodes {
            let lease = Lease::unlimited();
            let mut m = Membership::new(MembershipConfig {
                me: 2 + n,
                interval_us: cfg.heartbeat_interval_us,
                detect_us: cfg.heartbeat_interval_us * cfg.heartbeat_missed as u64,
                groups: groups.clone(),
            });
            m.activate(0);
            lease.set(m.serving_until());
            for s in 0..cfg.shards_per_node {
                let me = ShardAddr { node: 2 + n, shard: s };
                shards.push(new_shard(&cfg, me, &layout, &def, 0, &lease)?);
                addrs.push(me);
            }
            memberships.push(m);
            leases.push(lease);
        }
        let clients = (0..cfg.clients)
            .map(|_| Client { generation: 0, next_req: 1, doing: Doing::Idle, own_versions: HashMap::new() })
            .collect();
        let accounts = (cfg.accounts + registers(&cfg)) as usize;
        let cfg_nodes = cfg.nodes as usize;
        let shard_count = shards.len();
        let arbiter = Arbiter::new(layout.datanodes.iter().map(|d| d.node_id).collect());
        let mut world = World {
            rng: Rng::new(cfg.seed),
            cfg,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            link_last: HashMap::new(),
            shards,
            addrs,
            memberships,
            leases,
            router: Router::new(&layout),
            base_layout: layout,
            arbiter,
            meta: TableMeta::new(def.clone()),
            clients,
            stopped: false,
            committed: vec![BTreeMap::new(); accounts],
            written: HashSet::new(),
            maybe: vec![BTreeMap::new(); accounts],
            acked_max: vec![0; accounts],
            next_register_value: 1,
            dead: BTreeSet::new(),
            restarted_at: vec![0; cfg_nodes],
            joining: BTreeSet::new(),
            restarts: BTreeMap::new(),
            disks: (0..shard_count).map(|_| SimDisk::default()).collect(),
            failing_disk: None,
            quiet_until: 0,
            last_view: Vec::new(),
            transfers: Vec::new(),
            durable_transfers: Vec::new(),
            def,
            plan: Vec::new(),
            split: None,
            held: Vec::new(),
            views: BTreeMap::new(),
            violation: None,
            trace: VecDeque::new(),
            trace_hasher: xxhash_rust::xxh3::Xxh3::new(),
            report: SimReport::default(),
        };
        world.report.seed = world.cfg.seed;
        // Faults are spread over the first half of the workload, crashes and
        // splits in a random order (each waits until the cluster can
        // survive it), glitches and resets among them.
        let steps = world.cfg.steps;
        let mut kinds: Vec<Fault> = Vec::new();
        kinds.extend((0..world.cfg.crashes).map(|_| Fault::Crash));
        kinds.extend((0..world.cfg.splits).map(|_| Fault::Split));
        kinds.extend((0..world.cfg.resets).map(|_| Fault::Reset));
        if world.rng.chance(2) {
            kinds.reverse();
        }
        for _ in 0..world.cfg.glitches {
            let at = world.rng.below(kinds.len() as u64 + 1) as usize;
            kinds.insert(at, Fault::Glitch);
        }
        // Whole-cluster crashes (each starts crashed nodes again first) and
        // failed syncs fall anywhere among those.
        let others = (0..world.cfg.cluster_crashes)
            .map(|_| Fault::ClusterCrash)
            .chain((0..world.cfg.disk_faults).map(|_| Fault::DiskFailure))
            .collect::<Vec<_>>();
        for kind in others {
            let at = world.rng.below(kinds.len() as u64 + 1) as usize;
            kinds.insert(at, kind);
        }
        // Restarts come last: each needs a node that crashed before.
        kinds.extend((0..world.cfg.restarts).map(|_| Fault::Restart));
        let mut times: Vec<u64> = kinds.iter().map(|_| steps / 20 + world.rng.below(steps / 2 + 1)).collect();
        times.sort_unstable();
        let mut plan: Vec<(u64, Fault)> = times.into_iter().zip(kinds).collect();
        plan.reverse();
        world.plan = plan;
        world.load_accounts()?;
        for s in 0..world.shards.len() {
            let at = world.rng.below(TICK_US);
            world.schedule(at, Endpoint::Shard(s), Endpoint::Shard(s), Payload::Tick);
        }
        for n in 0..world.memberships.len() {
            let at = world.rng.below(TICK_US);
            world.schedule(at, Endpoint::Node(n), Endpoint::Node(n), Payload::MemberTick);
        }
        for c in 0..world.clients.len() {
            let at = world.rng.below(1000);
            world.schedule(at, Endpoint::Client(c), Endpoint::Client(c), Payload::Wake);
        }
        Ok(world)
    }

    fn load_accounts(&mut self) -> Result<(), String> {
        for id in 0..self.cfg.accounts + registers(&self.cfg) {
            let op =
                self.op(id, OpKind::Insert { row: vec![Value::Int(id), Value::Int(INITIAL_BALANCE), Value::Int(0)] });
            let shard = self.owner(&op)?;
            match self.request_now(shard, ClientRequest::Batch(vec![op])).pop() {
                Some(ClientResponse::Batch(r)) if r == vec![OpResult::Done] => {}
                other => return Err(format!("loading account {id} failed: {other:?}")),
            }
        }
        Ok(())
    }

    fn node_of_shard(&self, s: usize) -> usize {
        (self.addrs[s].node - 2) as usize
    }

    /// The shards of node `n`, by index.
    fn shards_of(&self, n: usize) -> Vec<usize> {
        (0..self.shards.len()).filter(|s| self.node_of_shard(*s) == n).collect()
    }

    /// Sends a layout to every shard of node `n`.
    fn send_layout(&mut self, from: Endpoint, n: usize, layout: &ClusterLayout) {
        for s in self.shards_of(n) {
            self.send(from, Endpoint::Shard(s), Payload::Layout(Box::new(layout.clone())));
        }
    }

    /// Runs a request outside simulated time (setup and final checks): the
    /// shards' messages are delivered at once until none is left.
    fn request_now(&mut self, shard: usize, req: ClientRequest) -> Vec<ClientResponse> {
        let mut out = Outbox::default();
        self.shards[shard].on_client(u64::MAX, 0, req, self.now, &mut out);
        self.run_disk_ops(shard, &mut out);
        let mut answers = Vec::new();
        let mut queue: VecDeque<(ShardAddr, ShardAddr, PeerMsg)> = VecDeque::new();
        loop {
            answers.extend(out.client.drain(..).map(|(_, _, r)| r));
            let from = self.addrs[shard];
            queue.extend(out.peer.drain(..).map(|(to, msg)| (from, to, msg)));
            let Some((src, to, msg)) = queue.pop_front() else { return answers };
            if self.dead.contains(&((to.node - 2) as usize)) {
                continue;
            }
            let t = self.addrs.iter().position(|a| *a == to).expect("peer is a simulated shard");
            self.shards[t].on_peer(src, msg, self.now, &mut out);
            self.run_disk_ops(t, &mut out);
            let from = self.addrs[t];
            queue.extend(out.peer.drain(..).map(|(to, msg)| (from, to, msg)));
        }
    }

    fn op(&self, id: i64, kind: OpKind) -> KeyOp {
        let key = self.meta.encode_key(&[Value::Int(id)]).expect("account ids are valid keys");
        KeyOp { table: 1, table_version: 1, partition: self.meta.partition_of(&key), key, kind, projection: None }
    }

    fn owner(&self, op: &KeyOp) -> Result<usize, String> {
        let addr = self
            .router
            .primary_of(op.partition)
            .ok_or_else(|| format!("partition {} has no started replica in the clients' layout", op.partition))?;
        Ok(self.addrs.iter().position(|a| *a == addr).expect("owner is a simulated shard"))
    }

    fn schedule(&mut self, at: u64, from: Endpoint, to: Endpoint, payload: Payload) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, (from, to, payload, self.now));
    }

    /// Which side of a network split an endpoint is on: data nodes by
    /// index, the management server as None; clients reach every node.
    fn site(&self, e: Endpoint) -> Option<Option<usize>> {
        match e {
            Endpoint::Shard(s) => Some(Some(self.node_of_shard(s))),
            Endpoint::Node(n) => Some(Some(n)),
            Endpoint::Mgmd => Some(None),
            Endpoint::Client(_) => None,
        }
    }

    fn cut(&self, from: Endpoint, to: Endpoint) -> bool {
        let Some(split) = &self.split else { return false };
        let (Some(a), Some(b)) = (self.site(from), self.site(to)) else { return false };
        let side = |site: Option<usize>| match site {
            Some(n) => split.side_a.contains(&n),
            None => split.mgmd_in_a,
        };
        side(a) != side(b)
    }

    /// Sends over the simulated network. Data links behave like TCP: a
    /// random delay, never ahead of an earlier message on the same link,
    /// and held (not lost) while a split cuts them. Membership messages
    /// may be lost, duplicated and reordered, and are lost on cut links.
    fn send(&mut self, from: Endpoint, to: Endpoint, payload: Payload) {
        let delay = 1 + self.rng.below(self.cfg.max_delay_us);
        if matches!(payload, Payload::Member { .. }) {
            if self.cut(from, to) || self.rng.below(100) < self.cfg.member_fault_pct {
                self.trace(format!("{:>9} {from:?} -> {to:?}: LOST {payload:?}", self.now));
                return;
            }
            if self.rng.below(100) < self.cfg.member_fault_pct {
                if let Payload::Member { from: f, msg } = &payload {
                    let copy = Payload::Member { from: *f, msg: msg.clone() };
                    let later = self.now + delay + self.rng.below(self.cfg.max_delay_us * 4);
                    self.schedule(later, from, to, copy);
                }
            }
            self.schedule(self.now + delay, from, to, payload);
            return;
        }
        if self.cut(from, to) {
            self.held.push((from, to, payload));
            return;
        }
        let last = self.link_last.get(&(from, to)).copied().unwrap_or(0);
        let at = (self.now + delay).max(last);
        self.link_last.insert((from, to), at);
        self.schedule(at, from, to, payload);
    }

    fn trace(&mut self, line: String) {
        if self.trace.len() >= self.cfg.trace_lines.max(1) {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    fn busy_clients(&self) -> usize {
        self.clients.iter().filter(|c| !matches!(c.doing, Doing::Idle)).count()
    }

    fn live(&self) -> Vec<usize> {
        (0..self.memberships.len()).filter(|n| !self.dead.contains(n)).collect()
    }

    /// Every live node agrees on a view that holds exactly the live nodes,
    /// and no split is in force.
    fn stable(&self) -> bool {
        if self.split.is_some() || !self.held.is_empty() {
            return false;
        }
        let live = self.live();
        let ids: Vec<NodeId> = live.iter().map(|n| node_id(*n)).collect();
        let Some(first) = live.first() else { return false };
        let epoch = self.memberships[*first].epoch();
        live.iter().all(|n| {
            let m = &self.memberships[*n];
            m.epoch() == epoch && m.members() == ids && self.leases[*n].valid_at(self.now)
        })
    }

    fn run(&mut self) -> Result<(), String> {
        let limit = self.cfg.steps * 40 + 200_000;
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            let (from, to, payload, sent_at) = self.events.remove(&seq).expect("scheduled events are stored");
            self.now = at;
            self.report.events += 1;
            if self.report.events == self.cfg.stop_after.unwrap_or(self.cfg.steps) {
                self.stopped = true;
            }
            self.maybe_inject_fault();
            let gone =
                |n: usize| self.dead.contains(&n) || (self.restarted_at[n] > sent_at && self.restarted_at[n] > 0);
            let dead_target = match to {
                Endpoint::Shard(s) => gone(self.node_of_shard(s)),
                Endpoint::Node(n) => gone(n),
                _ => false,
            };
            if dead_target {
                // A failed node hears nothing; a client asking it finds its connection broken.
                if let (Payload::Request { req_id, .. }, Endpoint::Client(c)) = (&payload, from) {
                    let at = self.now + 1 + self.rng.below(1_000);
                    self.schedule(at, from, Endpoint::Client(c), Payload::ConnectionLost { req_id: *req_id });
                }
                continue;
            }
            if self.report.events > limit {
                let work: Vec<String> = self
                    .events
                    .values()
                    .filter(|(_, _, p, _)| !p.is_background())
                    .take(3)
                    .map(|(from, to, p, _)| format!("{from:?} -> {to:?}: {p:?}"))
                    .collect();
                return Err(format!(
                    "no quiescence: {} clients still busy after {limit} events (a transaction hangs, or the membership never settles); stable: {}; work pending: {work:?}",
                    self.busy_clients(),
                    self.stable()
                ));
            }
            if matches!(payload, Payload::Tick | Payload::MemberTick) {
                self.trace_hasher.update(&at.to_le_bytes());
                self.trace_hasher.update(format!("{from:?}{to:?}{payload:?}").as_bytes());
            } else {
                let line = format!("{at:>9} {from:?} -> {to:?}: {payload:?}");
                self.trace_hasher.update(line.as_bytes());
                self.trace(line);
            }
            match to {
                Endpoint::Shard(s) => self.at_shard(s, payload),
                Endpoint::Client(c) => self.at_client(c, payload)?,
                Endpoint::Node(n) => self.at_node(n, payload),
                Endpoint::Mgmd => self.at_mgmd(from, payload),
            }
            if let Some(v) = self.violation.take() {
                return Err(v);
            }
            // Done when the workload has stopped, every client is idle, the
            // membership has settled and nothing but background chatter is
            // still on its way.
            if self.stopped && self.busy_clients() == 0 && self.stable() && self.only_background_left() {
                break;
            }
        }
        self.report.virtual_ms = self.now / 1000;
        self.report.trace_hash = self.trace_hasher.digest();
        self.report.durable_acks += self.durable_transfers.len() as u64;
        self.final_check()
    }

    fn only_background_left(&self) -> bool {
        self.events.values().all(|(_, _, p, _)| p.is_background())
    }

    fn maybe_inject_fault(&mut self) {
        let Some(&(at, kind)) = self.plan.last() else { return };
        if self.report.events < at || !self.stable() || self.failing_disk.is_some() || self.now < self.quiet_until {
            return;
        }
        if self.stopped {
            // Too late: the workload is over.
            self.plan.clear();
            return;
        }
        let injected = match kind {
            Fault::Crash => self.inject_crash(),
            Fault::Restart => self.inject_restart(),
            Fault::Split => self.inject_split(false),
            Fault::Glitch => self.inject_split(true),
            Fault::Reset => self.inject_reset(),
            Fault::ClusterCrash => self.inject_cluster_crash(),
            Fault::DiskFailure => self.inject_disk_failure(),
        };
        if injected {
            self.plan.pop();
        } else if let Some(i) = self.plan.iter().position(|(_, k)| matches!(k, Fault::Restart)) {
            // The cluster cannot take this fault now (say, a split left too
            // few nodes): a pending restart may make it able to.
            if !matches!(kind, Fault::Restart) && self.inject_restart() {
                self.plan.remove(i);
            }
        }
    }

    /// Can these nodes continue by the view-change rule (every node group
    /// present; a majority of the current view, or half of it plus the
    /// arbitrator)?
    fn viable(&self, side: &[usize], with_arbiter: bool) -> bool {
        let view = self.live().len();
        let groups = self.cfg.nodes / self.cfg.replicas as u16;
        let present: BTreeSet<u16> = side.iter().map(|n| *n as u16 / self.cfg.replicas as u16).collect();
        present.len() == groups as usize && (2 * side.len() > view || (2 * side.len() == view && with_arbiter))
    }

    /// Live nodes whose loss the cluster survives.
    fn survivable_losses(&self) -> Vec<usize> {
        let live = self.live();
        live.iter()
            .copied()
            .filter(|c| {
                let rest: Vec<usize> = live.iter().copied().filter(|n| n != c).collect();
                self.viable(&rest, true)
            })
            .collect()
    }

    fn inject_crash(&mut self) -> bool {
        let candidates = self.survivable_losses();
        if candidates.is_empty() {
            return false;
        }
        let victim = candidates[self.rng.below(candidates.len() as u64) as usize];
        self.report.crashes += 1;
        // The process dies (its writes are in the kernel's page cache), or
        // the machine loses power.
        let power = self.rng.chance(50);
        if power {
            self.lose_power(victim);
        }
        self.stop_node(victim, if power { "loses power".into() } else { "crashed".into() });
        true
    }

    /// Every disk of node `n` loses what a power loss loses.
    fn lose_power(&mut self, n: usize) {
        for s in self.shards_of(n) {
            self.disks[s].lose_power(&mut self.rng);
        }
    }

    /// The next sync of a node whose loss the cluster survives fails (no
    /// other fault comes until it has).
    fn inject_disk_failure(&mut self) -> bool {
        let candidates = self.survivable_losses();
        if candidates.is_empty() {
            return false;
        }
        let victim = candidates[self.rng.below(candidates.len() as u64) as usize];
        self.trace(format!("{:>9} node {}'s next sync will FAIL", self.now, node_id(victim)));
        self.failing_disk = Some(victim);
        true
    }

    /// Every data node loses power at once; the management server starts
    /// those of the last view again a little later (a system restart).
    /// Nodes that had left before stay down until a node restart.
    fn inject_cluster_crash(&mut self) -> bool {
        // The accounts were loaded in epoch 1: the checkers need them to
        // survive (a crash before it is durable would rightly lose them).
        if !self.joining.is_empty() || self.report.durable_epoch == CommitEpoch::NONE {
            return false;
        }
        self.trace(format!("{:>9} WHOLE-CLUSTER CRASH", self.now));
        self.last_view = self.live();
        for n in self.live() {
            self.lose_power(n);
            self.stop_node(n, "loses power with the whole cluster".into());
        }
        let at = self.now + 1_000 + self.rng.below(50_000);
        self.schedule(at, Endpoint::Mgmd, Endpoint::Mgmd, Payload::SystemRestart);
        true
    }

    /// Reads the disks of node `n`'s shards (an initial start empties them
    /// first), as a starting data node does: what each holds, and what it
    /// reports to the management server (the epoch every shard synced
    /// through and the highest epoch any record carries; None: no data).
    fn scan_node(&mut self, n: usize, initial: bool) -> (Vec<(usize, DiskImage)>, Option<NodeRecovery>) {
        let mut images = Vec::new();
        for s in self.shards_of(n) {
            if initial {
                self.disks[s].wipe();
            }
            images.push((s, self.disks[s].scan()));
        }
        let has_data = images.iter().any(|(_, i)| i.summary.valid_len > 0 || !i.checkpoints.is_empty());
        let recovery = has_data.then(|| node_recovery(images.iter().map(|(_, i)| &i.summary)));
        (images, recovery)
    }

    /// Starts a new process of shard `s` and restores it from its disk to
    /// `restore_epoch` (None: empty), as the real host does.
    fn restore_shard(
        &mut self,
        s: usize,
        image: &DiskImage,
        layout: &ClusterLayout,
        lease: &Lease,
        restore_epoch: Option<CommitEpoch>,
        first_epoch: CommitEpoch,
    ) {
        // Transaction ids of the new process differ from the old one's.
        let shard = new_shard(&self.cfg, self.addrs[s], layout, &self.def, self.now << 8, lease);
        let mut shard = match shard {
            Ok(shard) => shard,
            Err(e) => {
                self.violation.get_or_insert(e);
                return;
            }
        };
        let disk = &mut self.disks[s];
        let (restored, keep) = match restore_epoch {
            Some(epoch) => {
                let (redo, base) = disk.redo();
                let checkpoint = checkpoint_for(&image.checkpoints, base, epoch);
                let bytes = checkpoint.and_then(|c| disk.checkpoint(c.id));
                (shard.restore(bytes, redo, base, epoch, first_epoch), checkpoint.map(|c| c.id))
            }
            None => {
                disk.wipe();
                (shard.restore(None, &[], 0, CommitEpoch::NONE, first_epoch), None)
            }
        };
        if let Err(e) = restored {
            self.violation
                .get_or_insert(format!("shard {} cannot restore from its disk: {}", self.addrs[s], e.message));
        }
        let marker = shard.take_redo();
        self.disks[s].restored(keep, &marker);
        self.shards[s] = shard;
        let at = self.now + self.rng.below(TICK_US);
        self.schedule(at, Endpoint::Shard(s), Endpoint::Shard(s), Payload::Tick);
    }

    /// Starts a crashed node again, empty: it joins as starting, copies its
    /// partitions from the primaries while the workload runs, and is
    /// admitted to the view once done.
    fn inject_restart(&mut self) -> bool {
        // The management server lets a node start again only once the view
        // that removed it reached it (until then it counts it as a member).
        let members = self.arbiter.view().1.to_vec();
        let Some(&n) = self.dead.iter().find(|n| !members.contains(&node_id(**n))) else { return false };
        self.dead.remove(&n);
        self.restarted_at[n] = self.now;
        self.report.restarts += 1;
        self.trace(format!("{:>9} node {} RESTARTS", self.now, node_id(n)));
        let groups: BTreeMap<NodeId, u32> =
            self.base_layout.datanodes.iter().map(|d| (d.node_id, d.node_group)).collect();
        let mut m = Membership::new(MembershipConfig {
            me: node_id(n),
            interval_us: self.cfg.heartbeat_interval_us,
            detect_us: self.cfg.heartbeat_interval_us * self.cfg.heartbeat_missed as u64,
            groups,
        });
        m.activate_joining();
        let lease = Lease::unlimited();
        lease.set(m.serving_until());
        self.memberships[n] = m;
        self.leases[n] = lease.clone();
        self.set_base_status(n, NodeStatus::Starting);
        let layout = self.mgmd_layout();
        // A node restart restores what the node's disk holds up to the
        // epoch it synced through, then copies what changed.
        let initial = self.rng.chance(33);
        if initial {
            self.report.initial_restarts += 1;
        }
        let (images, recovery) = self.scan_node(n, initial);
        let first_epoch =
            recovery.as_ref().map_or(CommitEpoch::NONE, |r| r.max_epoch).max(self.report.durable_epoch).next();
        for (s, image) in images {
            self.restore_shard(s, &image, &layout, &lease, recovery.as_ref().map(|r| r.saved_epoch), first_epoch);
        }
        let at = self.now + self.rng.below(TICK_US);
        self.schedule(at, Endpoint::Node(n), Endpoint::Node(n), Payload::MemberTick);
        self.joining.insert(n);
        // A joining node asks again to be admitted every 20 heartbeats, for
        // as long as it takes (the simulator's views always come).
        self.restarts.insert(n, NodeRestart::new(20 * self.cfg.heartbeat_interval_us, u32::MAX));
        self.broadcast_layouts();
        true
    }

    /// The layout the management server hands out: the arbitrator's view
    /// over the node statuses it knows.
    fn mgmd_layout(&self) -> ClusterLayout {
        let (epoch, members) = self.arbiter.view();
        self.base_layout.of_view(epoch, members)
    }

    /// The management server changed a node's status: every live node's
    /// shards get the layout of their node's view (a joining node's: the
    /// management server's), and clients route by it.
    fn broadcast_layouts(&mut self) {
        let mgmd = self.mgmd_layout();
        self.router = Router::new(&mgmd);
        for n in self.live() {
            let layout = if self.joining.contains(&n) {
                mgmd.clone()
            } else {
                let m = &self.memberships[n];
                self.base_layout.of_view(m.epoch(), &m.members())
            };
            self.send_layout(Endpoint::Node(n), n, &layout);
        }
    }

    /// A joining node's progress, checked on its membership timer: the
    /// stages of a real node restart (`NodeRestart`, the state machine the
    /// data node runs), carried out on the simulated shards; admission is
    /// the president's (a live member's) `admit`.
    fn check_joining(&mut self, n: usize) {
        let shards = self.shards_of(n);
        let Some(restart) = self.restarts.get(&n) else { return };
        let progress: Vec<SyncProgress> = shards.iter().map(|s| self.shards[*s].sync_progress()).collect();
        let settled: Vec<bool> = match restart.checkpoint_targets() {
            Some(targets) => shards.iter().zip(targets).map(|(s, t)| self.shards[*s].checkpoint_settled(*t)).collect(),
            None => Vec::new(),
        };
        let step = self.restarts.get_mut(&n).expect("looked up above").step(self.now, &progress, &settled);
        match step {
            RestartStep::Wait => {}
            RestartStep::Checkpoint { summary } => {
                self.report.copy_switches += summary.sources_switched;
                let targets = shards.iter().map(|s| self.shards[*s].checkpoint_now()).collect();
                self.restarts.get_mut(&n).expect("looked up above").checkpoints_begun(targets);
            }
            RestartStep::HandOver => {
                for s in shards {
                    self.shard_step(s, |shard, _, out| shard.sync_hand_over(out));
                }
            }
            RestartStep::AskAdmit { .. } => {
                let president = self.live().into_iter().find(|k| !self.joining.contains(k));
                let Some(president) = president else { return };
                self.trace(format!(
                    "{:>9} node {} copied its partitions; node {} admits it",
                    self.now,
                    node_id(n),
                    node_id(president)
                ));
                self.member_step(president, |m, now, out| m.admit(node_id(n), now, out));
            }
            RestartStep::Fail(why) => {
                self.report.failed_restarts += 1;
                self.report.copy_switches += progress.iter().map(|p| p.sources_switched).sum::<u64>();
                self.stop_node(n, format!("node restart failed: {why}"));
            }
        }
    }

    fn inject_reset(&mut self) -> bool {
        let live = self.live();
        let victims = self.survivable_losses();
        if victims.is_empty() {
            return false;
        }
        let victim = victims[self.rng.below(victims.len() as u64) as usize];
        let others: Vec<usize> = live.iter().copied().filter(|n| *n != victim).collect();
        let observer = others[self.rng.below(others.len() as u64) as usize];
        self.trace(format!(
            "{:>9} RESET: node {} sees its link to node {} break",
            self.now,
            node_id(observer),
            node_id(victim)
        ));
        self.report.resets += 1;
        self.member_step(observer, |m, now, out| m.on_link_lost(node_id(victim), now, out));
        // The view change that may follow is not visible yet: the next
        // fault waits for it (together they could take more nodes than
        // the cluster survives).
        self.quiet_until = self.now + self.cfg.heartbeat_interval_us * self.cfg.heartbeat_missed as u64;
        true
    }

    fn inject_split(&mut self, glitch: bool) -> bool {
        let live = self.live();
        for _ in 0..20 {
            let side_a: BTreeSet<usize> = live.iter().copied().filter(|_| self.rng.chance(50)).collect();
            if side_a.is_empty() || side_a.len() == live.len() {
                continue;
            }
            let mgmd_in_a = self.rng.chance(50);
            let a: Vec<usize> = side_a.iter().copied().collect();
            let b: Vec<usize> = live.iter().copied().filter(|n| !side_a.contains(n)).collect();
            if !glitch && !self.viable(&a, mgmd_in_a) && !self.viable(&b, !mgmd_in_a) {
                continue;
            }
            let interval = self.cfg.heartbeat_interval_us;
            let detect = interval * self.cfg.heartbeat_missed as u64;
            let lasts = if glitch {
                // Long enough for leases to run out, too short to suspect
                // anyone (unless heartbeats around it are lost too).
                2 * interval + self.rng.below(interval)
            } else {
                3 * detect + self.rng.below(3 * detect)
            };
            self.trace(format!(
                "{:>9} {} {:?} | {:?}, management server with the {} side, for {} us",
                self.now,
                if glitch { "GLITCH" } else { "SPLIT" },
                a.iter().map(|n| node_id(*n)).collect::<Vec<_>>(),
                b.iter().map(|n| node_id(*n)).collect::<Vec<_>>(),
                if mgmd_in_a { "first" } else { "second" },
                lasts
            ));
            if glitch {
                self.report.glitches += 1;
            } else {
                self.report.splits += 1;
            }
            self.split = Some(Split { side_a, mgmd_in_a });
            self.schedule(self.now + lasts, Endpoint::Mgmd, Endpoint::Mgmd, Payload::Heal);
            return true;
        }
        false
    }

    fn heal(&mut self) {
        self.split = None;
        self.trace(format!("{:>9} HEAL", self.now));
        for (from, to, payload) in std::mem::take(&mut self.held) {
            self.send(from, to, payload);
        }
    }

    /// The management server starts every data node again after a
    /// whole-cluster crash, as it plans a system restart: each node reports
    /// what its disk holds; all restore epoch D, the latest epoch every
    /// node synced through, and new commits begin above any epoch a log
    /// holds. Then the restored data is checked.
    fn system_restart(&mut self) {
        let nodes = std::mem::take(&mut self.last_view);
        let mut scanned = Vec::new();
        let mut restore = CommitEpoch::MAX;
        let mut logged = CommitEpoch::NONE;
        let mut reports = Vec::new();
        for &n in &nodes {
            let (images, recovery) = self.scan_node(n, false);
            let Some(NodeRecovery { saved_epoch: saved, max_epoch: max }) = recovery else {
                self.violation.get_or_insert(format!(
                    "system restart: data node {} was in the last view but its disk holds nothing",
                    node_id(n)
                ));
                return;
            };
            restore = restore.min(saved);
            logged = logged.max(max);
            reports.push((node_id(n), saved, max));
            scanned.push((n, images));
        }
        if restore < self.report.durable_epoch {
            self.violation.get_or_insert(format!(
                "system restart: the disks hold every epoch up to {restore} only, but epoch {} was declared durable (per node: synced through, highest logged: {reports:?})",
                self.report.durable_epoch
            ));
            return;
        }
        let first_epoch = logged.max(self.report.durable_epoch).next();
        self.report.system_restarts += 1;
        self.trace(format!(
            "{:>9} SYSTEM RESTART: restore epoch {restore}, new commits from epoch {first_epoch}",
            self.now
        ));
        let ids: Vec<NodeId> = nodes.iter().map(|n| node_id(*n)).collect();
        // The first view of the new run comes after every earlier one (a
        // late message of a dead process is then stale).
        let first = self.views.keys().max().copied().unwrap_or(ViewNumber(1)).max(self.arbiter.view().0).next();
        self.arbiter = Arbiter::new_at(first, ids.clone());
        self.views.insert(first, ids.clone());
        for n in 0..self.memberships.len() {
            let status = if nodes.contains(&n) { NodeStatus::Started } else { NodeStatus::NotStarted };
            self.set_base_status(n, status);
        }
        self.base_layout.version += 1;
        let layout = self.base_layout.of_view(first, &ids);
        let groups: BTreeMap<NodeId, u32> =
            self.base_layout.datanodes.iter().map(|d| (d.node_id, d.node_group)).collect();
        for (n, images) in scanned {
            self.dead.remove(&n);
            self.restarted_at[n] = self.now;
            let mut m = Membership::new(MembershipConfig {
                me: node_id(n),
                interval_us: self.cfg.heartbeat_interval_us,
                detect_us: self.cfg.heartbeat_interval_us * self.cfg.heartbeat_missed as u64,
                groups: groups.clone(),
            });
            m.activate_with(self.now, &ids, first);
            let lease = Lease::unlimited();
            lease.set(m.serving_until());
            self.memberships[n] = m;
            self.leases[n] = lease.clone();
            for (s, image) in images {
                self.restore_shard(s, &image, &layout, &lease, Some(restore), first_epoch);
            }
            let at = self.now + self.rng.below(TICK_US);
            self.schedule(at, Endpoint::Node(n), Endpoint::Node(n), Payload::MemberTick);
        }
        self.router = Router::new(&layout);
        if let Err(e) = self.check_restored(restore) {
            self.violation.get_or_insert(e);
        }
    }

    /// After a system restart exactly a prefix of the commits must be
    /// back: each account holds a value some transfer wrote (or its
    /// initial one), every transfer is wholly there or wholly gone, every
    /// transfer acknowledged as durable is there, and the bank total holds.
    /// The history is then cut to what came back (new transfers write the
    /// lost versions again).
    fn check_restored(&mut self, restored: CommitEpoch) -> Result<(), String> {
        let mut accounts = Vec::new();
        for id in 0..self.cfg.accounts + registers(&self.cfg) {
            let acc = self.read_account_now(id, "after the system restart")?;
            if !self.possibly_written(id, acc) {
                return Err(format!(
                    "after the system restart (epoch {restored}) account {id} holds version {} balance {}, which no (possibly) committed transfer wrote",
                    acc.version, acc.balance
                ));
            }
            accounts.push(acc);
        }
        let version = |id: i64| accounts[id as usize].version;
        let present = |t: &Transfer| (version(t.a) >= t.version_a, version(t.b) >= t.version_b);
        for t in &self.transfers {
            let (a, b) = present(t);
            if a != b {
                return Err(format!(
                    "after the system restart (epoch {restored}) transfer {t:?} is half there: the accounts hold versions {} and {}",
                    version(t.a),
                    version(t.b)
                ));
            }
        }
        for t in &self.durable_transfers {
            if present(t) != (true, true) {
                return Err(format!(
                    "after the system restart (epoch {restored}) transfer {t:?}, acknowledged as durable, is lost: the accounts hold versions {} and {}",
                    version(t.a),
                    version(t.b)
                ));
            }
        }
        let total: i64 = accounts[..self.cfg.accounts as usize].iter().map(|a| a.balance).sum();
        if total != INITIAL_BALANCE * self.cfg.accounts {
            return Err(format!("after the system restart (epoch {restored}) the bank total is {total}"));
        }
        for (id, acc) in accounts.iter().enumerate() {
            self.committed[id].retain(|v, _| *v <= acc.version);
            self.maybe[id].retain(|v, _| *v <= acc.version);
            self.acked_max[id] = acc.version;
        }
        self.written.retain(|(id, v, _)| *v <= accounts[*id as usize].version);
        for c in &mut self.clients {
            for (id, v) in c.own_versions.iter_mut() {
                *v = (*v).min(accounts[*id as usize].version);
            }
        }
        self.transfers.retain(|t| present(t).0);
        self.report.durable_acks += self.durable_transfers.len() as u64;
        self.durable_transfers.clear();
        Ok(())
    }

    /// A node stops (crash or shutdown): clients waiting on it see their
    /// connections break.
    fn stop_node(&mut self, n: usize, why: String) {
        if !self.dead.insert(n) {
            return;
        }
        self.trace(format!("{:>9} node {} STOPS: {why}", self.now, node_id(n)));
        self.restarts.remove(&n);
        for s in self.shards_of(n) {
            self.disks[s].kill();
        }
        if self.failing_disk == Some(n) {
            self.failing_disk = None;
        }
        if self.joining.remove(&n) {
            // No member yet: the management server (which it reports to)
            // sees it go and tells the others.
            self.set_base_status(n, NodeStatus::NotStarted);
            self.broadcast_layouts();
        }
        for c in 0..self.clients.len() {
            if let Some((shard, req)) = self.clients[c].doing.waiting_on() {
                if self.node_of_shard(shard) == n {
                    let at = self.now + 1 + self.rng.below(1_000);
                    self.schedule(
                        at,
                        Endpoint::Client(c),
                        Endpoint::Client(c),
                        Payload::ConnectionLost { req_id: req },
                    );
                }
            }
        }
    }

    fn member_step(&mut self, n: usize, f: impl FnOnce(&mut Membership, u64, &mut MemberOut)) {
        let mut out = MemberOut::default();
        f(&mut self.memberships[n], self.now, &mut out);
        self.leases[n].set(self.memberships[n].serving_until());
        for (to, msg) in out.send {
            let dest = match to {
                Voter::Node(id) => Endpoint::Node((id - 2) as usize),
                Voter::Arbiter => Endpoint::Mgmd,
            };
            self.send(Endpoint::Node(n), dest, Payload::Member { from: Voter::Node(node_id(n)), msg });
        }
        if let Some((epoch, members)) = out.installed {
            match self.views.get(&epoch) {
                Some(other) if *other != members => {
                    self.violation.get_or_insert(format!(
                        "split brain: node {} installed view {epoch} = {members:?}, but view {epoch} = {other:?} was installed elsewhere",
                        node_id(n)
                    ));
                }
                _ => {
                    self.views.insert(epoch, members.clone());
                }
            }
            if self.joining.contains(&n) && members.contains(&node_id(n)) {
                self.joining.remove(&n);
                self.restarts.remove(&n);
                self.trace(format!("{:>9} node {} ADMITTED in view {epoch}", self.now, node_id(n)));
            }
            for id in &members {
                // An admitted node is started in the management server's
                // records from now on.
                let k = (*id - 2) as usize;
                if self.base_layout.datanodes[k].status == NodeStatus::Starting && !self.joining.contains(&k) {
                    self.set_base_status(k, NodeStatus::Started);
                }
            }
            let layout = self.base_layout.of_view(epoch, &members);
            self.send_layout(Endpoint::Node(n), n, &layout);
        }
        if let Some(reason) = out.shutdown {
            self.report.shutdowns += 1;
            self.stop_node(n, reason);
        }
    }

    fn at_node(&mut self, n: usize, payload: Payload) {
        match payload {
            Payload::MemberTick => {
                self.member_step(n, |m, now, out| m.on_tick(now, out));
                self.check_joining(n);
                self.schedule(self.now + TICK_US, Endpoint::Node(n), Endpoint::Node(n), Payload::MemberTick);
            }
            Payload::Member { from, msg } => self.member_step(n, |m, now, out| m.on_message(from, msg, now, out)),
            other => unreachable!("a membership got {other:?}"),
        }
    }

    fn at_mgmd(&mut self, from: Endpoint, payload: Payload) {
        match payload {
            Payload::Heal => self.heal(),
            Payload::SystemRestart => self.system_restart(),
            Payload::Member { msg, .. } => {
                let before = self.arbiter.view().0;
                let answer = self.arbiter.on_message(msg);
                let (epoch, members) = self.arbiter.view();
                if epoch > before {
                    // Clients read the layout from the management server.
                    let layout = self.base_layout.of_view(epoch, members);
                    self.router = Router::new(&layout);
                    // Joining nodes are no members: they learn views from it.
                    let joining: Vec<usize> = self.joining.iter().copied().collect();
                    for n in joining {
                        self.send_layout(Endpoint::Mgmd, n, &layout);
                    }
                }
                if let Some(answer) = answer {
                    self.send(Endpoint::Mgmd, from, Payload::Member { from: Voter::Arbiter, msg: answer });
                }
            }
            other => unreachable!("the management server got {other:?}"),
        }
    }

    fn at_shard(&mut self, s: usize, payload: Payload) {
        match payload {
            Payload::Peer { from, msg } => self.shard_step(s, |shard, now, out| shard.on_peer(from, msg, now, out)),
            Payload::Request { conn, req_id, req } => self.shard_step(s, |shard, now, out| {
                // As a data node does: a batch of committed reads runs
                // straight from its frame, anything else decoded.
                let frame = matches!(req, ClientRequest::Batch(_)).then(|| latsdb_types::proto::frame(req_id, &req));
                let body = frame.as_deref().map(|f| &f[latsdb_types::proto::FRAME_HEADER..]);
                if !body.is_some_and(|body| shard.on_lookups(conn, req_id, body, now, out)) {
                    shard.on_client(conn, req_id, req, now, out)
                }
            }),
            Payload::Disconnect { conn } => self.shard_step(s, |shard, now, out| shard.on_disconnect(conn, now, out)),
            Payload::Tick => {
                let n = self.node_of_shard(s);
                if !self.joining.contains(&n) && self.rng.below(150) == 0 {
                    // The trigger is off: checkpoints start at random.
                    self.shards[s].checkpoint_now();
                }
                self.shard_step(s, |shard, now, out| shard.on_tick(now, out));
                self.schedule(self.now + TICK_US, Endpoint::Shard(s), Endpoint::Shard(s), Payload::Tick);
            }
            Payload::Layout(layout) => self.shard_step(s, |shard, now, out| shard.set_layout(*layout, now, out)),
            Payload::DiskDone(done) => {
                let n = self.node_of_shard(s);
                if self.failing_disk == Some(n) {
                    self.failing_disk = None;
                    self.report.failed_syncs += 1;
                    // As a real data node does: a failed sync stops it (the
                    // kernel may have dropped the unsynced pages).
                    self.lose_power(n);
                    self.stop_node(n, format!("a sync of shard {}'s disk failed", self.addrs[s]));
                    return;
                }
                let next = self.disks[s].complete(done);
                self.sync_started(s, next);
                self.shard_step(s, |shard, now, out| shard.on_disk_done(done.token, now, out));
            }
            other => unreachable!("a shard got {other:?}"),
        }
    }

    /// Hands the disk work a step of shard `s` asked for to its disk.
    fn run_disk_ops(&mut self, s: usize, out: &mut Outbox) {
        if let Some(epoch) = out.durable.take() {
            self.report.durable_epoch = self.report.durable_epoch.max(epoch);
        }
        for op in out.disk.drain(..) {
            let started = self.disks[s].submit(op);
            self.sync_started(s, started);
        }
    }

    /// A sync of shard `s`'s disk started: it completes after a random
    /// latency (now and then a long stall when disk faults are on).
    fn sync_started(&mut self, s: usize, started: Result<Option<SyncDone>, String>) {
        match started {
            Err(e) => {
                self.violation.get_or_insert(format!("shard {}: {e}", self.addrs[s]));
            }
            Ok(None) => {}
            Ok(Some(done)) => {
                let mut latency = 20 + self.rng.below(400);
                if self.cfg.disk_faults > 0 && self.rng.below(200) == 0 {
                    latency += 20_000 + self.rng.below(180_000);
                }
                self.schedule(self.now + latency, Endpoint::Shard(s), Endpoint::Shard(s), Payload::DiskDone(done));
            }
        }
    }

    /// Runs one step of shard `s` and sends what it produced.
    fn shard_step(&mut self, s: usize, f: impl FnOnce(&mut Shard, u64, &mut Outbox)) {
        let mut out = Outbox::default();
        f(&mut self.shards[s], self.now, &mut out);
        // Every block states its invariants; a broken one panics here,
        // with the seed that replays it.
        self.shards[s].check();
        self.run_disk_ops(s, &mut out);
        let me = self.addrs[s];
        for (to, msg) in out.peer.drain(..) {
            let t = self.addrs.iter().position(|a| *a == to).expect("peer is a simulated shard");
            self.send(Endpoint::Shard(s), Endpoint::Shard(t), Payload::Peer { from: me, msg });
        }
        let encoded = out.frames.drain(..).map(|(conn, frame)| {
            let header = latsdb_types::proto::FRAME_HEADER;
            let req_id = u64::from_le_bytes(frame[4..header].try_into().expect("a frame header holds a request id"));
            let resp = latsdb_types::proto::decode_body(&frame[header..]).expect("a shard's answer decodes");
            (conn, req_id, resp)
        });
        for (conn, req_id, resp) in out.client.drain(..).chain(encoded) {
            let client = (conn >> 16) as usize;
            let generation = conn & 0xFFFF;
            // Answers to a dropped connection are lost with it.
            if client < self.clients.len() && self.clients[client].generation & 0xFFFF == generation {
                self.send(Endpoint::Shard(s), Endpoint::Client(client), Payload::Response { req_id, resp });
            }
        }
    }

    fn conn(&self, c: usize) -> u64 {
        ((c as u64) << 16) | (self.clients[c].generation & 0xFFFF)
    }

    fn request(&mut self, c: usize, shard: usize, req: ClientRequest) -> u64 {
        let req_id = self.clients[c].next_req;
        self.clients[c].next_req += 1;
        let conn = self.conn(c);
        self.send(Endpoint::Client(c), Endpoint::Shard(shard), Payload::Request { conn, req_id, req });
        req_id
    }

    fn wake_later(&mut self, c: usize) {
        self.clients[c].doing = Doing::Idle;
        let at = self.now + 1 + self.rng.below(3_000);
        self.schedule(at, Endpoint::Client(c), Endpoint::Client(c), Payload::Wake);
    }

    /// The client drops its connection (its open transaction is aborted by
    /// the coordinator) and tries something else later.
    fn drop_connection(&mut self, c: usize, shard: usize) {
        let conn = self.conn(c);
        self.clients[c].generation += 1;
        self.send(Endpoint::Client(c), Endpoint::Shard(shard), Payload::Disconnect { conn });
        self.wake_later(c);
    }

    fn at_client(&mut self, c: usize, payload: Payload) -> Result<(), String> {
        match payload {
            Payload::Wake => {
                if !self.stopped && matches!(self.clients[c].doing, Doing::Idle) {
                    self.start_action(c);
                }
                Ok(())
            }
            Payload::Response { req_id, resp } => self.on_response(c, req_id, resp),
            Payload::ConnectionLost { req_id } => {
                self.on_connection_lost(c, req_id);
                Ok(())
            }
            Payload::DropIfWaiting { req } => {
                let (waiting, shard) = match self.clients[c].doing {
                    Doing::Locking { req: r, shard, .. } if r == req => (true, shard),
                    Doing::Auditing { req: r, shard } if r == req => (true, shard),
                    _ => (false, 0),
                };
                if waiting {
                    self.report.dropped_while_waiting += 1;
                    self.drop_connection(c, shard);
                }
                Ok(())
            }
            other => Err(format!("client {c} got a shard's event {other:?}")),
        }
    }

    fn on_connection_lost(&mut self, c: usize, req_id: u64) {
        let doing = std::mem::replace(&mut self.clients[c].doing, Doing::Idle);
        match doing {
            Doing::Writing { req, writes, abandon: false, .. } if req == req_id => {
                // The commit may or may not have happened.
                for (id, acc) in writes {
                    self.maybe[id as usize].entry(acc.version).or_default().push(acc.balance);
                }
                self.report.unknown_outcomes += 1;
            }
            // A register write's outcome stays unknown (its values were
            // recorded as possibly written when it was sent).
            Doing::Locking { req, .. }
            | Doing::Writing { req, .. }
            | Doing::Auditing { req, .. }
            | Doing::Durable { req, .. }
            | Doing::Reading { req, .. }
            | Doing::Registering { req, .. }
                if req == req_id => {}
            other => {
                self.clients[c].doing = other;
                return;
            }
        }
        self.clients[c].generation += 1;
        self.wake_later(c);
    }

    fn start_action(&mut self, c: usize) {
        let roll = self.rng.below(100);
        let n = self.cfg.accounts as u64;
        if roll < 50 {
            let a = self.rng.below(n) as i64;
            let b = (a + 1 + self.rng.below(n - 1) as i64) % n as i64;
            let amount = 1 + self.rng.below(100) as i64;
            let abandon = self.rng.chance(8);
            // Lock in random order, so transfers deadlock now and then.
            let ops = vec![
                self.op(a, OpKind::Read { lock: LockMode::Exclusive }),
                self.op(b, OpKind::Read { lock: LockMode::Exclusive }),
            ];
            let Ok(shard) = self.owner(&ops[0]) else { return self.wake_later(c) };
            let req = self.request(c, shard, ClientRequest::TxExec { tx: None, ops, commit: false });
            self.clients[c].doing = Doing::Locking { shard, req, a, b, amount, abandon };
            self.maybe_drop_early(c, req);
        } else if roll < 65 {
            let ops: Vec<KeyOp> =
                (0..self.cfg.accounts).map(|id| self.op(id, OpKind::Read { lock: LockMode::Shared })).collect();
            let Ok(shard) = self.owner(&ops[0]) else { return self.wake_later(c) };
            let req = self.request(c, shard, ClientRequest::TxExec { tx: None, ops, commit: true });
            self.clients[c].doing = Doing::Auditing { req, shard };
            self.maybe_drop_early(c, req);
        } else if roll < 80 {
            self.write_registers(c);
        } else {
            // An account or a register.
            let account = self.rng.below(n + registers(&self.cfg) as u64) as i64;
            let op = self.op(account, OpKind::Read { lock: LockMode::Committed });
            // Committed reads may be served by any replica.
            let replicas = self.router.replicas_of(op.partition);
            if replicas.is_empty() {
                return self.wake_later(c);
            }
            let pick = replicas[self.rng.below(replicas.len() as u64) as usize];
            let shard = self.addrs.iter().position(|a| *a == pick).expect("replica is a simulated shard");
            let floor = self.acked_max[account as usize];
            let req = self.request(c, shard, ClientRequest::Batch(vec![op]));
            self.clients[c].doing = Doing::Reading { req, account, shard, floor };
        }
    }

    /// One batch of independent writes to the client's own registers
    /// (only this client writes them, one request at a time, so a newer
    /// value is always written after an older one was answered): both
    /// registers when one primary holds them, now and then one register
    /// twice. Every value is unique and larger than all before it.
    fn write_registers(&mut self, c: usize) {
        let first = self.cfg.accounts + (c as i64) * REGISTERS_PER_CLIENT;
        let mut ids = vec![first + self.rng.below(REGISTERS_PER_CLIENT as u64) as i64];
        if self.rng.chance(4) {
            ids.push(ids[0]);
        } else if self.rng.chance(2) {
            ids.push(if ids[0] == first { first + 1 } else { first });
        }
        let mut ops = Vec::new();
        let mut writes = Vec::new();
        let mut shard = None;
        for id in ids {
            let value = self.next_register_value;
            let op = self.op(id, OpKind::Upsert { row: vec![Value::Int(id), Value::Int(value), Value::Int(value)] });
            let Ok(owner) = self.owner(&op) else { return self.wake_later(c) };
            if shard.is_some_and(|s| s != owner) {
                continue;
            }
            shard = Some(owner);
            self.next_register_value += 1;
            ops.push(op);
            writes.push((id, value));
            self.written.insert((id, value, value));
            self.maybe[id as usize].entry(value).or_default().push(value);
        }
        let Some(shard) = shard else { return self.wake_later(c) };
        let req = self.request(c, shard, ClientRequest::Batch(ops));
        self.clients[c].doing = Doing::Registering { req, shard, writes };
    }

    /// Now and then the client gives up on a request that has not been
    /// answered yet: its connection drops while the transaction executes
    /// (possibly queued for a lock). An audit may already be committing then;
    /// it only reads, so its outcome does not matter to the checkers.
    fn maybe_drop_early(&mut self, c: usize, req: u64) {
        if self.rng.chance(5) {
            let at = self.now + self.rng.below(4_000);
            self.schedule(at, Endpoint::Client(c), Endpoint::Client(c), Payload::DropIfWaiting { req });
        }
    }

    fn account_of(&self, result: &OpResult) -> Result<Account, String> {
        match result {
            OpResult::Row(row) => {
                let balance = self.meta.layout.get(row, 1).as_i64().ok_or("balance is not an integer")?;
                let version = self.meta.layout.get(row, 2).as_i64().ok_or("version is not an integer")?;
                Ok(Account { balance, version })
            }
            other => Err(format!("expected an account row, got {other:?}")),
        }
    }

    fn on_response(&mut self, c: usize, req_id: u64, resp: ClientResponse) -> Result<(), String> {
        if let ClientResponse::Error(e) = &resp {
            // Refused before anything ran (the node's lease ran out, or it
            // left the view): a transaction the client holds open there is
            // ended by dropping the connection.
            if let Some((shard, req)) = self.clients[c].doing.waiting_on() {
                if req == req_id && retriable(e) {
                    self.report.refused += 1;
                    if let Doing::Locking { .. } | Doing::Writing { .. } = self.clients[c].doing {
                        self.report.aborted_transfers += 1;
                    }
                    self.drop_connection(c, shard);
                    return Ok(());
                }
            }
        }
        let doing = std::mem::replace(&mut self.clients[c].doing, Doing::Idle);
        match doing {
            Doing::Locking { shard, req, a, b, amount, abandon } if req == req_id => match resp {
                ClientResponse::TxExec { tx, results, committed: false } => {
                    let old = [self.account_of(&results[0])?, self.account_of(&results[1])?];
                    let new_a = Account { balance: old[0].balance - amount, version: old[0].version + 1 };
                    let new_b = Account { balance: old[1].balance + amount, version: old[1].version + 1 };
                    let writes = [(a, new_a), (b, new_b)];
                    let set = |acc: Account| {
                        vec![(1, Expr::Const(Value::Int(acc.balance))), (2, Expr::Const(Value::Int(acc.version)))]
                    };
                    let ops = vec![
                        self.op(a, OpKind::Update { set: set(new_a) }),
                        self.op(b, OpKind::Update { set: set(new_b) }),
                    ];
                    if !abandon {
                        for (id, acc) in writes {
                            self.written.insert((id, acc.version, acc.balance));
                        }
                    }
                    let req = self.request(c, shard, ClientRequest::TxExec { tx: Some(tx), ops, commit: !abandon });
                    self.clients[c].doing = Doing::Writing { shard, req, writes, abandon, tx };
                    Ok(())
                }
                ClientResponse::TxAborted { error: Some(e), .. } if retriable(&e) => {
                    self.report.aborted_transfers += 1;
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: transfer lock step answered {other:?}")),
            },
            Doing::Writing { shard, req, writes, abandon, tx } if req == req_id => match resp {
                ClientResponse::TxExec { committed: true, .. } if !abandon => {
                    for (id, acc) in writes {
                        let own = self.clients[c].own_versions.entry(id).or_insert(0);
                        *own = (*own).max(acc.version);
                        let acked = &mut self.acked_max[id as usize];
                        *acked = (*acked).max(acc.version);
                        let versions = &mut self.committed[id as usize];
                        if let Some(previous) = versions.insert(acc.version, acc.balance) {
                            return Err(format!(
                                "lost update: version {} of account {id} was committed twice (balances {previous} and {}) by transaction {tx:?}",
                                acc.version, acc.balance
                            ));
                        }
                    }
                    self.report.committed_transfers += 1;
                    let transfer = Transfer {
                        a: writes[0].0,
                        version_a: writes[0].1.version,
                        b: writes[1].0,
                        version_b: writes[1].1.version,
                    };
                    self.transfers.push(transfer);
                    if self.rng.chance(33) {
                        // The client waits for its commit to be durable.
                        let req = self.request(c, shard, ClientRequest::WaitDurable);
                        self.clients[c].doing = Doing::Durable { req, shard, transfer };
                    } else {
                        self.wake_later(c);
                    }
                    Ok(())
                }
                ClientResponse::TxExec { committed: false, .. } if abandon => {
                    // Walk away with staged writes and locks: the connection drops.
                    self.report.abandoned += 1;
                    self.drop_connection(c, shard);
                    Ok(())
                }
                // The transaction was aborted (a participant's node left, or
                // the coordinator already aborted it): nothing committed.
                ClientResponse::TxAborted { error: Some(e), .. } | ClientResponse::Error(e) if retriable(&e) => {
                    self.report.aborted_transfers += 1;
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: transfer write step answered {other:?}")),
            },
            Doing::Durable { req, transfer, .. } if req == req_id => match resp {
                ClientResponse::Durable(_) => {
                    self.durable_transfers.push(transfer);
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: the wait for durability answered {other:?}")),
            },
            Doing::Auditing { req, .. } if req == req_id => match resp {
                ClientResponse::TxExec { results, committed: true, .. } => {
                    let mut total = 0;
                    for r in &results {
                        total += self.account_of(r)?.balance;
                    }
                    let expected = INITIAL_BALANCE * self.cfg.accounts;
                    if total != expected {
                        return Err(format!("audit under shared locks saw a total of {total}, expected {expected}"));
                    }
                    self.report.audits += 1;
                    self.wake_later(c);
                    Ok(())
                }
                ClientResponse::TxAborted { error: Some(e), .. } if retriable(&e) => {
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: audit answered {other:?}")),
            },
            Doing::Reading { req, account, floor, .. } if req == req_id => match resp {
                ClientResponse::Batch(results) if results.len() == 1 => {
                    let acc = self.account_of(&results[0])?;
                    let known = (acc.version == 0 && acc.balance == INITIAL_BALANCE)
                        || self.written.contains(&(account, acc.version, acc.balance));
                    if !known {
                        return Err(format!(
                            "committed read of account {account} saw version {} balance {}, which no committing transaction wrote",
                            acc.version, acc.balance
                        ));
                    }
                    if acc.version < floor {
                        return Err(format!(
                            "stale read: committed read of account {account} saw version {} although version {floor} was acknowledged before the read was sent",
                            acc.version
                        ));
                    }
                    let own = self.clients[c].own_versions.get(&account).copied().unwrap_or(0);
                    if acc.version < own {
                        return Err(format!(
                            "client {c} committed version {own} of account {account} but then read version {} (its own committed write is missing on a replica)",
                            acc.version
                        ));
                    }
                    self.report.reads += 1;
                    self.wake_later(c);
                    Ok(())
                }
                ClientResponse::Batch(results) if matches!(&results[..], [OpResult::Error(e)] if retriable(e)) => {
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: read answered {other:?}")),
            },
            Doing::Registering { req, writes, .. } if req == req_id => match resp {
                ClientResponse::Batch(results) if results.len() == writes.len() => {
                    for ((id, value), result) in writes.into_iter().zip(results) {
                        match result {
                            OpResult::Done => {
                                self.committed[id as usize].insert(value, value);
                                let acked = &mut self.acked_max[id as usize];
                                *acked = (*acked).max(value);
                                let own = self.clients[c].own_versions.entry(id).or_insert(0);
                                *own = (*own).max(value);
                                self.report.register_writes += 1;
                            }
                            // Not applied, or (a replica failed) maybe applied.
                            OpResult::Error(e) if retriable(&e) => {}
                            other => return Err(format!("client {c}: write of register {id} answered {other:?}")),
                        }
                    }
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: register writes answered {other:?}")),
            },
            other => {
                // An answer to an older request (its connection was dropped) is ignored.
                self.clients[c].doing = other;
                Ok(())
            }
        }
    }

    /// A committed read of an account outside simulated time, from the
    /// primary the clients' layout names.
    fn read_account_now(&mut self, id: i64, when: &str) -> Result<Account, String> {
        let op = self.op(id, OpKind::Read { lock: LockMode::Committed });
        let shard = self.owner(&op)?;
        match self.request_now(shard, ClientRequest::Batch(vec![op])).pop() {
            Some(ClientResponse::Batch(r)) if r.len() == 1 => self.account_of(&r[0]),
            other => Err(format!("reading account {id} {when} failed: {other:?}")),
        }
    }

    /// Whether an account's value is its initial one, or one an
    /// acknowledged or possibly committed transfer wrote.
    fn possibly_written(&self, id: i64, acc: Account) -> bool {
        (acc.version == 0 && acc.balance == INITIAL_BALANCE)
            || self.committed[id as usize].get(&acc.version) == Some(&acc.balance)
            || self.maybe[id as usize].get(&acc.version).is_some_and(|b| b.contains(&acc.balance))
    }

    fn final_check(&mut self) -> Result<(), String> {
        if !self.stable() {
            return Err("the run ended without a settled membership".into());
        }
        // Final reads route by the view the live nodes agree on.
        let live = self.live();
        let m = &self.memberships[live[0]];
        self.report.final_view = m.epoch();
        self.router = Router::new(&self.base_layout.of_view(m.epoch(), &m.members()));
        let mut total = 0;
        for id in 0..self.cfg.accounts {
            let acc = self.read_account_now(id, "at the end")?;
            let versions = &self.committed[id as usize];
            let maybe = &self.maybe[id as usize];
            if !maybe.is_empty() {
                // Some transfers of this account have unknown outcomes: every
                // acknowledged commit must be there, and the final value must
                // be one that an acknowledged or possibly committed transfer wrote.
                let newest_acked = versions.keys().max().copied().unwrap_or(0);
                if acc.version < newest_acked {
                    return Err(format!(
                        "acknowledged commit lost: account {id} ends at version {} but version {newest_acked} was acknowledged",
                        acc.version
                    ));
                }
                if !self.possibly_written(id, acc) {
                    return Err(format!(
                        "account {id} ends at version {} with balance {}, which no (possibly) committed transfer wrote",
                        acc.version, acc.balance
                    ));
                }
                total += acc.balance;
                continue;
            }
            let expected_version = versions.len() as i64;
            if acc.version != expected_version || versions.keys().copied().ne(1..=expected_version) {
                return Err(format!(
                    "account {id} ends at version {} but {expected_version} committed transfers touched it (versions {:?})",
                    acc.version,
                    versions.keys().collect::<Vec<_>>()
                ));
            }
            let expected_balance = versions.get(&acc.version).copied().unwrap_or(INITIAL_BALANCE);
            if acc.balance != expected_balance {
                return Err(format!(
                    "account {id} ends with balance {} but version {} committed {expected_balance}",
                    acc.balance, acc.version
                ));
            }
            total += acc.balance;
        }
        if total != INITIAL_BALANCE * self.cfg.accounts {
            return Err(format!("the bank total ends at {total}"));
        }
        // Registers: every acknowledged write (or a newer one) is there, and
        // the value is one a write sent.
        for id in self.cfg.accounts..self.cfg.accounts + registers(&self.cfg) {
            let acc = self.read_account_now(id, "at the end")?;
            let newest_acked = self.acked_max[id as usize];
            if acc.version < newest_acked {
                return Err(format!(
                    "acknowledged write lost: register {id} ends at value {} but value {newest_acked} was acknowledged",
                    acc.version
                ));
            }
            if !self.possibly_written(id, acc) {
                return Err(format!("register {id} ends at value {}, which no write sent", acc.version));
            }
        }
        // Every replica of a partition holds exactly the same rows.
        for partition in 0..self.meta.def.partitions {
            let replicas = self.router.replicas_of(partition);
            let copies: Vec<_> = replicas
                .iter()
                .map(|r| {
                    let i = self.addrs.iter().position(|a| a == r).expect("replica is a simulated shard");
                    self.shards[i].partition_rows(1, partition)
                })
                .collect();
            if copies.iter().any(|c| c.is_none()) {
                return Err(format!("a replica of partition {partition} does not hold it ({replicas:?})"));
            }
            if copies.windows(2).any(|w| w[0] != w[1]) {
                return Err(format!(
                    "the replicas {replicas:?} of partition {partition} hold different rows: {copies:?}"
                ));
            }
        }
        for (i, shard) in self.shards.iter().enumerate() {
            if self.dead.contains(&((self.addrs[i].node - 2) as usize)) {
                continue;
            }
            if shard.activity() != (0, 0, 0) {
                return Err(format!(
                    "shard {} still has (transactions, participations, locked rows) = {:?} after quiescence; participating in {:?}",
                    self.addrs[i],
                    shard.activity(),
                    shard.participations()
                ));
            }
        }
        Ok(())
    }
}
