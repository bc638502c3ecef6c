//! The simulated world: shards, clients, network, virtual time, checkers.

use crate::rng::Rng;
use latsdb_cluster::{Outbox, Shard, ShardConfig};
use latsdb_types::expr::Expr;
use latsdb_types::proto::{
    ClientRequest, ClientResponse, ClusterLayout, DataNodeInfo, KeyOp, LockMode, NodeStatus, OpKind, OpResult, PeerMsg,
    Router, SchemaChange, ShardAddr, TxId,
};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};
use latsdb_types::{ErrorCode, TableMeta, Value};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

const INITIAL_BALANCE: i64 = 1000;
const TICK_US: u64 = 10_000;

#[derive(Clone, Debug)]
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
    /// Crash one data node once, at a random moment (needs replicas >= 2).
    pub crash: bool,
    /// Longest time before the survivors learn of the crash.
    pub detect_us_max: u64,
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
            crash: false,
            detect_us_max: 200_000,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct SimReport {
    pub seed: u64,
    pub events: u64,
    pub virtual_ms: u64,
    pub committed_transfers: u64,
    pub aborted_transfers: u64,
    pub abandoned: u64,
    /// Transfers whose commit was in flight when their node crashed.
    pub unknown_outcomes: u64,
    /// The node that crashed, if any.
    pub crashed_node: Option<u16>,
    /// Connections dropped while a lock step or audit was still executing.
    pub dropped_while_waiting: u64,
    pub audits: u64,
    pub reads: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Endpoint {
    Shard(usize),
    Client(usize),
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
    /// The client's connection to a crashed node broke while request
    /// `req_id` was outstanding.
    ConnectionLost {
        req_id: u64,
    },
    /// A survivor learns the new layout (the crash was detected).
    Layout(Box<ClusterLayout>),
}

#[derive(Clone, Copy, Debug)]
struct Account {
    balance: i64,
    version: i64,
}

#[derive(Debug)]
enum Doing {
    Idle,
    Locking { shard: usize, req: u64, a: i64, b: i64, amount: i64, abandon: bool },
    Writing { shard: usize, req: u64, writes: [(i64, Account); 2], abandon: bool, tx: TxId },
    Auditing { req: u64, shard: usize },
    Reading { req: u64, account: i64, shard: usize },
}

struct Client {
    generation: u64,
    next_req: u64,
    doing: Doing,
    /// Per account, the newest version this client's commits wrote: its
    /// later reads, from any replica, must not see an older one.
    own_versions: HashMap<i64, i64>,
}

struct World {
    cfg: SimConfig,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: HashMap<u64, (Endpoint, Endpoint, Payload)>,
    link_last: HashMap<(Endpoint, Endpoint), u64>,
    shards: Vec<Shard>,
    addrs: Vec<ShardAddr>,
    router: Router,
    meta: TableMeta,
    clients: Vec<Client>,
    stopped: bool,
    /// Per account: version -> balance of every committed transfer.
    committed: Vec<BTreeMap<i64, i64>>,
    /// (account, version, balance) sent with a commit request.
    written: HashSet<(i64, i64, i64)>,
    /// Per account: version -> balances written by transfers whose outcome
    /// is unknown (their commit was in flight when a node crashed).
    maybe: Vec<BTreeMap<i64, Vec<i64>>>,
    crashed: Option<u16>,
    crash_event: u64,
    /// The clients' routing after a crash, from the given time on.
    pending_router: Option<(u64, Router)>,
    trace: VecDeque<String>,
    report: SimReport,
}

/// Answers a client accepts as "not done, try again": lock-wait timeouts,
/// and (around a crash) a participant that left or a stale route.
fn retriable(e: &latsdb_types::DbError) -> bool {
    matches!(
        e.code,
        ErrorCode::LockWaitTimeout | ErrorCode::NodeUnavailable | ErrorCode::WrongShard | ErrorCode::UnknownTransaction
    )
}

fn layout(cfg: &SimConfig) -> ClusterLayout {
    ClusterLayout {
        version: 1,
        cluster_name: "sim".into(),
        replicas: cfg.replicas,
        mgmd_node_id: 1,
        mgmd_address: "sim".into(),
        datanodes: (0..cfg.nodes)
            .map(|n| DataNodeInfo {
                node_id: 2 + n,
                node_group: (n / cfg.replicas as u16) as u32,
                host: "sim".into(),
                status: NodeStatus::Started,
                shards: (0..cfg.shards_per_node).map(|s| format!("sim:{n}.{s}")).collect(),
                pid: 0,
            })
            .collect(),
        node_groups: (cfg.nodes / cfg.replicas as u16) as u32,
        default_partitions: 0,
        lock_wait_timeout_ms: cfg.lock_wait_timeout_us / 1000,
    }
}

/// Runs one seeded simulation; Err explains the first violated check, with
/// the seed and the last events.
pub fn run(cfg: &SimConfig) -> Result<SimReport, String> {
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
        if cfg.replicas == 0 || !cfg.nodes.is_multiple_of(cfg.replicas as u16) {
            return Err(format!("{} nodes cannot form node groups of {} replicas", cfg.nodes, cfg.replicas));
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
        for n in 0..cfg.nodes {
            for s in 0..cfg.shards_per_node {
                let me = ShardAddr { node: 2 + n, shard: s };
                let shard_cfg = ShardConfig {
                    me,
                    lock_wait_timeout_us: cfg.lock_wait_timeout_us,
                    first_tx_seq: 0,
                    data_memory_bytes: 0,
                };
                let mut shard = Shard::new(shard_cfg, layout.clone());
                shard.apply_schema(SchemaChange::CreateTable(def.clone())).map_err(|e| e.to_string())?;
                shards.push(shard);
                addrs.push(me);
            }
        }
        let clients = (0..cfg.clients)
            .map(|_| Client { generation: 0, next_req: 1, doing: Doing::Idle, own_versions: HashMap::new() })
            .collect();
        let accounts = cfg.accounts as usize;
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
            router: Router::new(&layout),
            meta: TableMeta::new(def),
            clients,
            stopped: false,
            committed: vec![BTreeMap::new(); accounts],
            written: HashSet::new(),
            maybe: vec![BTreeMap::new(); accounts],
            crashed: None,
            crash_event: 0,
            pending_router: None,
            trace: VecDeque::new(),
            report: SimReport::default(),
        };
        world.report.seed = world.cfg.seed;
        if world.cfg.crash {
            if world.cfg.replicas < 2 {
                return Err("crash faults need at least 2 replicas".into());
            }
            let steps = world.cfg.steps;
            world.crash_event = steps / 5 + world.rng.below(steps / 3 + 1);
        }
        world.load_accounts()?;
        for s in 0..world.shards.len() {
            let at = world.rng.below(TICK_US);
            world.schedule(at, Endpoint::Shard(s), Endpoint::Shard(s), Payload::Tick);
        }
        for c in 0..world.clients.len() {
            let at = world.rng.below(1000);
            world.schedule(at, Endpoint::Client(c), Endpoint::Client(c), Payload::Wake);
        }
        Ok(world)
    }

    fn load_accounts(&mut self) -> Result<(), String> {
        for id in 0..self.cfg.accounts {
            let op =
                self.op(id, OpKind::Insert { row: vec![Value::Int(id), Value::Int(INITIAL_BALANCE), Value::Int(0)] });
            let shard = self.owner(&op);
            match self.request_now(shard, ClientRequest::Batch(vec![op])).pop() {
                Some(ClientResponse::Batch(r)) if r == vec![OpResult::Done] => {}
                other => return Err(format!("loading account {id} failed: {other:?}")),
            }
        }
        Ok(())
    }

    /// Runs a request outside simulated time (setup and final checks): the
    /// shards' messages are delivered at once until none is left.
    fn request_now(&mut self, shard: usize, req: ClientRequest) -> Vec<ClientResponse> {
        let mut out = Outbox::default();
        self.shards[shard].on_client(u64::MAX, 0, req, self.now, &mut out);
        let mut answers = Vec::new();
        let mut queue: VecDeque<(ShardAddr, ShardAddr, PeerMsg)> = VecDeque::new();
        loop {
            answers.extend(out.client.drain(..).map(|(_, _, r)| r));
            let from = self.addrs[shard];
            queue.extend(out.peer.drain(..).map(|(to, msg)| (from, to, msg)));
            let Some((src, to, msg)) = queue.pop_front() else { return answers };
            if Some(to.node) == self.crashed {
                continue;
            }
            let t = self.addrs.iter().position(|a| *a == to).expect("peer is a simulated shard");
            self.shards[t].on_peer(src, msg, self.now, &mut out);
            let from = self.addrs[t];
            queue.extend(out.peer.drain(..).map(|(to, msg)| (from, to, msg)));
        }
    }

    fn op(&self, id: i64, kind: OpKind) -> KeyOp {
        let key = self.meta.encode_key(&[Value::Int(id)]).expect("account ids are valid keys");
        KeyOp { table: 1, table_version: 1, partition: self.meta.partition_of(&key), key, kind, projection: None }
    }

    fn owner(&self, op: &KeyOp) -> usize {
        let addr = self.router.primary_of(op.partition).expect("every simulated node is started");
        self.addrs.iter().position(|a| *a == addr).expect("owner is a simulated shard")
    }

    fn schedule(&mut self, at: u64, from: Endpoint, to: Endpoint, payload: Payload) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, (from, to, payload));
    }

    /// Sends over the simulated network: a random delay, but never ahead of
    /// an earlier message on the same link.
    fn send(&mut self, from: Endpoint, to: Endpoint, payload: Payload) {
        let delay = 1 + self.rng.below(self.cfg.max_delay_us);
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

    fn run(&mut self) -> Result<(), String> {
        let limit = self.cfg.steps * 20 + 100_000;
        while let Some(Reverse((at, seq))) = self.queue.pop() {
            let (from, to, payload) = self.events.remove(&seq).expect("scheduled events are stored");
            self.now = at;
            self.report.events += 1;
            if self.report.events == self.cfg.steps {
                self.stopped = true;
            }
            if self.cfg.crash && self.report.events == self.crash_event {
                self.crash();
            }
            if self.pending_router.as_ref().is_some_and(|(at, _)| self.now >= *at) {
                self.router = self.pending_router.take().expect("checked").1;
            }
            if let (Endpoint::Shard(s), Some(dead)) = (to, self.crashed) {
                if self.addrs[s].node == dead {
                    // A crashed node hears nothing; a client asking it finds its connection broken.
                    if let (Payload::Request { req_id, .. }, Endpoint::Client(c)) = (&payload, from) {
                        let at = self.now + 1 + self.rng.below(1_000);
                        self.schedule(at, from, Endpoint::Client(c), Payload::ConnectionLost { req_id: *req_id });
                    }
                    continue;
                }
            }
            if self.report.events > limit {
                return Err(format!(
                    "no quiescence: {} clients still busy after {limit} events (a transaction hangs)",
                    self.busy_clients()
                ));
            }
            if !matches!(payload, Payload::Tick) {
                self.trace(format!("{at:>9} {from:?} -> {to:?}: {payload:?}"));
            }
            match to {
                Endpoint::Shard(s) => self.at_shard(s, from, payload),
                Endpoint::Client(c) => self.at_client(c, payload)?,
            }
            // Done when the workload has stopped, every client is idle and
            // nothing but timer ticks is still on its way.
            if self.stopped && self.busy_clients() == 0 && self.only_ticks_left() {
                break;
            }
        }
        self.report.virtual_ms = self.now / 1000;
        self.final_check()
    }

    fn only_ticks_left(&self) -> bool {
        self.events.values().all(|(_, _, p)| matches!(p, Payload::Tick))
    }

    fn at_shard(&mut self, s: usize, from: Endpoint, payload: Payload) {
        let mut out = Outbox::default();
        let now = self.now;
        match payload {
            Payload::Peer { from, msg } => self.shards[s].on_peer(from, msg, now, &mut out),
            Payload::Request { conn, req_id, req } => self.shards[s].on_client(conn, req_id, req, now, &mut out),
            Payload::Disconnect { conn } => self.shards[s].on_disconnect(conn, now, &mut out),
            Payload::Tick => {
                self.shards[s].on_tick(now, &mut out);
                self.schedule(now + TICK_US, Endpoint::Shard(s), Endpoint::Shard(s), Payload::Tick);
            }
            Payload::Layout(layout) => self.shards[s].set_layout(*layout, now, &mut out),
            Payload::Response { .. }
            | Payload::Wake
            | Payload::DropIfWaiting { .. }
            | Payload::ConnectionLost { .. } => {
                unreachable!("clients' events are not sent to shards")
            }
        }
        let _ = from;
        let me = self.addrs[s];
        for (to, msg) in out.peer.drain(..) {
            let t = self.addrs.iter().position(|a| *a == to).expect("peer is a simulated shard");
            self.send(Endpoint::Shard(s), Endpoint::Shard(t), Payload::Peer { from: me, msg });
        }
        for (conn, req_id, resp) in out.client.drain(..) {
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
                    let conn = self.conn(c);
                    self.clients[c].generation += 1;
                    self.send(Endpoint::Client(c), Endpoint::Shard(shard), Payload::Disconnect { conn });
                    self.report.dropped_while_waiting += 1;
                    self.wake_later(c);
                }
                Ok(())
            }
            other => Err(format!("client {c} got a shard's event {other:?}")),
        }
    }

    fn start_action(&mut self, c: usize) {
        let roll = self.rng.below(100);
        let n = self.cfg.accounts as u64;
        if roll < 60 {
            let a = self.rng.below(n) as i64;
            let b = (a + 1 + self.rng.below(n - 1) as i64) % n as i64;
            let amount = 1 + self.rng.below(100) as i64;
            let abandon = self.rng.chance(8);
            // Lock in random order, so transfers deadlock now and then.
            let ops = vec![
                self.op(a, OpKind::Read { lock: LockMode::Exclusive }),
                self.op(b, OpKind::Read { lock: LockMode::Exclusive }),
            ];
            let shard = self.owner(&ops[0]);
            let req = self.request(c, shard, ClientRequest::TxExec { tx: None, ops, commit: false });
            self.clients[c].doing = Doing::Locking { shard, req, a, b, amount, abandon };
            self.maybe_drop_early(c, req);
        } else if roll < 75 {
            let ops: Vec<KeyOp> =
                (0..self.cfg.accounts).map(|id| self.op(id, OpKind::Read { lock: LockMode::Shared })).collect();
            let shard = self.owner(&ops[0]);
            let req = self.request(c, shard, ClientRequest::TxExec { tx: None, ops, commit: true });
            self.clients[c].doing = Doing::Auditing { req, shard };
            self.maybe_drop_early(c, req);
        } else {
            let account = self.rng.below(n) as i64;
            let op = self.op(account, OpKind::Read { lock: LockMode::Committed });
            // Committed reads may be served by any replica.
            let replicas = self.router.replicas_of(op.partition);
            let pick = replicas[self.rng.below(replicas.len() as u64) as usize];
            let shard = self.addrs.iter().position(|a| *a == pick).expect("replica is a simulated shard");
            let req = self.request(c, shard, ClientRequest::Batch(vec![op]));
            self.clients[c].doing = Doing::Reading { req, account, shard };
        }
    }

    /// One data node crashes: it stops, clients waiting on it see their
    /// connections break, and after a detection delay every survivor learns
    /// the new layout (each at a slightly different time).
    fn crash(&mut self) {
        let dead = 2 + self.rng.below(self.cfg.nodes as u64) as u16;
        self.crashed = Some(dead);
        self.report.crashed_node = Some(dead);
        self.trace(format!("{:>9} CRASH of node {dead}", self.now));
        for c in 0..self.clients.len() {
            let waiting = match self.clients[c].doing {
                Doing::Locking { shard, req, .. }
                | Doing::Writing { shard, req, .. }
                | Doing::Auditing { req, shard }
                | Doing::Reading { req, shard, .. } => Some((shard, req)),
                Doing::Idle => None,
            };
            if let Some((shard, req)) = waiting {
                if self.addrs[shard].node == dead {
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
        let mut layout = layout(&self.cfg);
        layout.version += 1;
        if let Some(d) = layout.datanodes.iter_mut().find(|d| d.node_id == dead) {
            d.status = NodeStatus::NotStarted;
            d.shards.clear();
        }
        let detected = self.now + 1 + self.rng.below(self.cfg.detect_us_max);
        for s in 0..self.shards.len() {
            if self.addrs[s].node != dead {
                let at = detected + self.rng.below(5_000);
                self.schedule(at, Endpoint::Shard(s), Endpoint::Shard(s), Payload::Layout(Box::new(layout.clone())));
            }
        }
        // Clients route by the new layout from the detection on.
        self.pending_router = Some((detected, Router::new(&layout)));
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
            Doing::Locking { req, .. }
            | Doing::Writing { req, .. }
            | Doing::Auditing { req, .. }
            | Doing::Reading { req, .. }
                if req == req_id => {}
            other => {
                self.clients[c].doing = other;
                return;
            }
        }
        self.clients[c].generation += 1;
        self.wake_later(c);
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
                        let versions = &mut self.committed[id as usize];
                        if let Some(previous) = versions.insert(acc.version, acc.balance) {
                            return Err(format!(
                                "lost update: version {} of account {id} was committed twice (balances {previous} and {}) by transaction {tx:?}",
                                acc.version, acc.balance
                            ));
                        }
                    }
                    self.report.committed_transfers += 1;
                    self.wake_later(c);
                    Ok(())
                }
                ClientResponse::TxExec { committed: false, .. } if abandon => {
                    // Walk away with staged writes and locks: the connection drops.
                    let conn = self.conn(c);
                    self.clients[c].generation += 1;
                    self.send(Endpoint::Client(c), Endpoint::Shard(shard), Payload::Disconnect { conn });
                    self.report.abandoned += 1;
                    self.wake_later(c);
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
            Doing::Reading { req, account, .. } if req == req_id => match resp {
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
            other => {
                // An answer to an older request (its connection was dropped) is ignored.
                self.clients[c].doing = other;
                Ok(())
            }
        }
    }

    fn final_check(&mut self) -> Result<(), String> {
        let mut total = 0;
        for id in 0..self.cfg.accounts {
            let op = self.op(id, OpKind::Read { lock: LockMode::Committed });
            let shard = self.owner(&op);
            let acc = match self.request_now(shard, ClientRequest::Batch(vec![op])).pop() {
                Some(ClientResponse::Batch(r)) if r.len() == 1 => self.account_of(&r[0])?,
                other => return Err(format!("final read of account {id} failed: {other:?}")),
            };
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
                let known = (acc.version == 0 && acc.balance == INITIAL_BALANCE)
                    || versions.get(&acc.version) == Some(&acc.balance)
                    || maybe.get(&acc.version).is_some_and(|b| b.contains(&acc.balance));
                if !known {
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
                return Err(format!("the replicas {replicas:?} of partition {partition} hold different rows"));
            }
        }
        for (i, shard) in self.shards.iter().enumerate() {
            if Some(self.addrs[i].node) == self.crashed {
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
