//! The simulated world: data nodes (membership + shards), the management
//! server's arbitrator, clients, network, virtual time, faults, checkers.

mod checkers;
mod faults;
mod network;
mod workload;

use crate::disk::{DiskImage, SimDisk, SyncDone};
use faults::{Fault, Split};
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
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, Storage, TableDef, TableSpec};
use latsdb_types::{ErrorCode, TableMeta, Value};
use network::{Endpoint, Payload};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use workload::{registers, Account, Client, Doing, Transfer, INITIAL_BALANCE};

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
    /// Node groups added to the running cluster (`replicas` new data nodes
    /// each, as `latsdb mgm nodegroup add` adds them), each once every data
    /// node is started: the new nodes copy the partitions moving to their
    /// group while the workload runs, and the view that admits the group's
    /// first node moves them.
    pub add_groups: u32,
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
            add_groups: 0,
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
    /// Node groups added, and partitions moved to them.
    pub groups_added: u32,
    pub partitions_moved: u32,
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
    /// Pages read off the shard thread for parked requests (half the
    /// seeds park on a miss, the others read on the shard thread).
    pub page_reads: u64,
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
    /// Nodes of node groups not added yet (`add_groups`; dead until then).
    spares: BTreeSet<usize>,
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
                    // Each process has its own number, as a real one draws
                    // at its start; a node started again gets a new one
                    // (`new_process`).
                    process: 1 + n as u64,
                    location_domain: None,
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
    /// The number of node `n`'s running process (`DataNodeInfo::process`).
    fn process_of(&self, n: usize) -> u64 {
        self.base_layout.datanodes[n].process
    }

    /// Node `n` runs a new process: the layouts name it by a number no
    /// process had before, so that what the previous one sent and the
    /// network held back is not taken for the new one's.
    pub(super) fn new_process(&mut self, n: usize) {
        let process = self.base_layout.datanodes.iter().map(|d| d.process).max().unwrap_or(0) + 1;
        self.base_layout.datanodes[n].process = process;
        self.base_layout.version += 1;
        debug_assert!(
            self.base_layout.datanodes.iter().filter(|d| d.process == process).count() == 1,
            "a process number is used once"
        );
    }

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
/// A trace line, cut after `TRACE_LINE` bytes: rows of kilobytes would
/// otherwise be printed in full, as lists of numbers, for every event
/// (formatting them took most of a run's time).
fn bounded(args: std::fmt::Arguments<'_>) -> String {
    const TRACE_LINE: usize = 1_500;
    struct Cut(String);
    impl std::fmt::Write for Cut {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let room = TRACE_LINE.saturating_sub(self.0.len());
            match s.len() <= room {
                true => {
                    self.0.push_str(s);
                    Ok(())
                }
                false => {
                    let end = (0..=room).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
                    self.0.push_str(&s[..end]);
                    self.0.push_str(" ...");
                    Err(std::fmt::Error)
                }
            }
        }
    }
    let mut line = Cut(String::new());
    // The error only says the line was cut.
    let _ = std::fmt::write(&mut line, args);
    line.0
}

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
        redo_limit_bytes: 0,
        lease: lease.clone(),
        durable: true,
        node_shards: cfg.shards_per_node,
        // A cache of one page, so that pages are evicted and read again.
        pages: latsdb_cluster::PagesConfig { cache_pages: 1, ..Default::default() },
    };
    let mut shard = Shard::new(shard_cfg, layout.clone());
    if cfg.seed.is_multiple_of(2) {
        shard.set_page_file(Box::new(latsdb_cluster::MemoryPages::sometimes_cached(cfg.seed ^ first_tx_seq)));
        shard.park_on_miss();
    }
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
            // On the shards' tablespace pages, so that every run drives
            // the disk columns through commits, restarts and copies.
            .column(ColumnDef::new("version", ColumnType::int(IntWidth::Big)).not_null().storage(Storage::Disk))
            // Kilobytes per row, so that a shard's rows span more pages than
            // its cache holds: reads miss and wait for pages.
            .column(ColumnDef::new("pad", ColumnType::VarBinary(workload::MAX_PAD as u32)).storage(Storage::Disk))
            .primary_key(&["id"]);
        let partitions = (cfg.nodes as u32 * cfg.shards_per_node as u32 * 2).max(4);
        let def = TableDef::from_spec(&spec, 1, partitions).map_err(|e| e.to_string())?;
        let mut shards = Vec::new();
        let mut addrs = Vec::new();
        let mut memberships = Vec::new();
        let mut leases = Vec::new();
        let groups: BTreeMap<NodeId, u32> = layout.datanodes.iter().map(|d| (d.node_id, d.node_group)).collect();
        let all_nodes = cfg.nodes + (cfg.add_groups * cfg.replicas as u32) as u16;
        for n in 0..all_nodes {
            let lease = Lease::unlimited();
            let mut m = Membership::new(MembershipConfig {
                me: 2 + n,
                interval_us: cfg.heartbeat_interval_us,
                detect_us: cfg.heartbeat_interval_us * cfg.heartbeat_missed as u64,
                groups: groups.clone(),
            });
            // A spare node's membership starts when its group is added.
            if n < cfg.nodes {
                m.activate(0);
            }
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
        let cfg_nodes = all_nodes as usize;
        let spares: BTreeSet<usize> = (cfg.nodes as usize..cfg_nodes).collect();
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
            dead: spares.clone(),
            spares,
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
        world.plan_faults();
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

    /// The faults to inject, in order, each with the event number it may
    /// come at: spread over the first half of the workload.
    fn plan_faults(&mut self) {
        // Faults are spread over the first half of the workload, crashes and
        // splits in a random order (each waits until the cluster can
        // survive it), glitches and resets among them.
        let steps = self.cfg.steps;
        let mut kinds: Vec<Fault> = Vec::new();
        kinds.extend((0..self.cfg.crashes).map(|_| Fault::Crash));
        kinds.extend((0..self.cfg.splits).map(|_| Fault::Split));
        kinds.extend((0..self.cfg.resets).map(|_| Fault::Reset));
        if self.rng.chance(2) {
            kinds.reverse();
        }
        // Node groups are added first, so that the other faults hit the
        // moves (each addition waits until every data node is started).
        for _ in 0..self.cfg.add_groups {
            kinds.insert(0, Fault::AddGroup);
        }
        for _ in 0..self.cfg.glitches {
            let at = self.rng.below(kinds.len() as u64 + 1) as usize;
            kinds.insert(at, Fault::Glitch);
        }
        // Whole-cluster crashes (each starts crashed nodes again first) and
        // failed syncs fall anywhere among those.
        let others = (0..self.cfg.cluster_crashes)
            .map(|_| Fault::ClusterCrash)
            .chain((0..self.cfg.disk_faults).map(|_| Fault::DiskFailure))
            .collect::<Vec<_>>();
        for kind in others {
            let at = self.rng.below(kinds.len() as u64 + 1) as usize;
            kinds.insert(at, kind);
        }
        // Restarts come last: each needs a node that crashed before.
        kinds.extend((0..self.cfg.restarts).map(|_| Fault::Restart));
        let mut times: Vec<u64> = kinds.iter().map(|_| steps / 20 + self.rng.below(steps / 2 + 1)).collect();
        times.sort_unstable();
        let mut plan: Vec<(u64, Fault)> = times.into_iter().zip(kinds).collect();
        plan.reverse();
        self.plan = plan;
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
        self.read_pages_now(shard, &mut out);
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
            let process = self.process_of((src.node - 2) as usize);
            self.shards[t].on_peer(src, process, msg, self.now, &mut out);
            self.read_pages_now(t, &mut out);
            self.run_disk_ops(t, &mut out);
            let from = self.addrs[t];
            queue.extend(out.peer.drain(..).map(|(to, msg)| (from, to, msg)));
        }
    }

    /// Answers the page reads shard `s` asked for at once (for requests
    /// made outside the event loop, which wait for their answer).
    fn read_pages_now(&mut self, s: usize, out: &mut Outbox) {
        while let Some(read) = out.page_reads.pop() {
            let bytes = self.shards[s].read_page_file(read.page);
            self.shards[s].on_page_read(read, bytes, self.now, out);
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
                let line = bounded(format_args!("{at:>9} {from:?} -> {to:?}: {payload:?}"));
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
            let layout = self.node_layout(n, &mgmd);
            self.send_layout(Endpoint::Node(n), n, &layout);
        }
    }

    /// The layout node `n`'s shards use, composed as a data node composes
    /// it (`effective_layout` in crates/node): the management server's when
    /// that is of a newer view than the node's membership installed (or the
    /// node is joining), else the server's statuses in the node's own view.
    fn node_layout(&self, n: usize, mgmd: &ClusterLayout) -> ClusterLayout {
        let m = &self.memberships[n];
        if self.joining.contains(&n) || mgmd.view > m.epoch() {
            mgmd.clone()
        } else {
            self.base_layout.of_view(m.epoch(), &m.members())
        }
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
        let out = self.memberships[n].step(&self.leases[n], self.now, f);
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
            // The management server settles the moves the view finished.
            let moved = self.base_layout.settle_moves();
            if !moved.is_empty() {
                self.base_layout.version += 1;
                self.report.partitions_moved += moved.len() as u32;
                self.trace(format!("{:>9} partitions {moved:?} MOVED to their new node group", self.now));
            }
            let layout = self.node_layout(n, &self.mgmd_layout());
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
            Payload::Peer { from, process, msg } => {
                self.shard_step(s, |shard, now, out| shard.on_peer(from, process, msg, now, out))
            }
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
            Payload::PageRead(read) => {
                // Read when it completes, as the host's reader does: no
                // write of a page being read can come between.
                let bytes = self.shards[s].read_page_file(read.page);
                self.shard_step(s, |shard, now, out| shard.on_page_read(read, bytes, now, out));
            }
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
        // Page reads take a random time each (so they finish out of
        // order), now and then a long one when disk faults are on.
        for read in out.page_reads.drain(..) {
            self.report.page_reads += 1;
            let mut latency = 10 + self.rng.below(300);
            if self.cfg.disk_faults > 0 && self.rng.below(50) == 0 {
                latency += 5_000 + self.rng.below(50_000);
            }
            self.schedule(self.now + latency, Endpoint::Shard(s), Endpoint::Shard(s), Payload::PageRead(read));
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
        let process = self.process_of(self.node_of_shard(s));
        for (to, msg) in out.peer.drain(..) {
            let t = self.addrs.iter().position(|a| *a == to).expect("peer is a simulated shard");
            self.send(Endpoint::Shard(s), Endpoint::Shard(t), Payload::Peer { from: me, process, msg });
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
}
