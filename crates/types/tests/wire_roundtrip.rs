//! Property tests of the wire format (docs/architecture/wire.md): every variant of every
//! message, with random fields, decodes to what was encoded, and its body
//! starts with its variant number; the borrowed codecs of the lookup path
//! encode and decode exactly as their owned twins, for random batches.
//!
//! Inputs come from the project's seeded `Rng` (the one the simulator and
//! the fuzz tests use), so a failure names the seed that replays it; no
//! generator crate is built for this.

use latsdb_types::expr::{Aggregate, Expr};
use latsdb_types::proto::*;
use latsdb_types::rng::Rng;
use latsdb_types::schema::{
    ClockFill, ColumnChange, ColumnDef, ColumnId, ColumnType, ForeignKeyDef, ForeignKeyRef, IndexDef, IndexSpec,
    IntWidth, ReferenceAction, Storage, TableDef, TableSpec,
};
use latsdb_types::{Collation, DbError, ErrorCode, Value};
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;
use std::sync::Arc;

/// Random instances per variant.
const CASES: u64 = 40;

struct Gen(Rng);

impl Gen {
    fn n(&mut self, below: u64) -> u64 {
        self.0.below(below)
    }
    fn bool(&mut self) -> bool {
        self.0.chance(50)
    }
    /// Sometimes a large number, to cover every byte of the fixed widths.
    fn u64(&mut self) -> u64 {
        if self.bool() {
            self.0.next_u64()
        } else {
            self.n(1000)
        }
    }
    fn aborts(&mut self) -> latsdb_types::work::AbortCounts {
        let mut counts = latsdb_types::work::AbortCounts::default();
        for cause in latsdb_types::work::AbortCause::ALL {
            for _ in 0..self.n(3) {
                counts.add(cause);
            }
        }
        counts
    }
    fn latency(&mut self) -> latsdb_types::work::LatencyCounts {
        let mut latency = latsdb_types::work::LatencyCounts::default();
        for _ in 0..self.n(4) {
            latency.record(self.u64() % 20_000_000);
        }
        latency
    }
    fn u32(&mut self) -> u32 {
        self.u64() as u32
    }
    fn u16(&mut self) -> u16 {
        self.u64() as u16
    }
    fn bytes(&mut self) -> Vec<u8> {
        (0..self.n(40)).map(|_| self.n(256) as u8).collect()
    }
    fn string(&mut self) -> String {
        let alphabet = ["a", "Z", "0", "_", "é", "字", " ", "😀"];
        (0..self.n(12)).map(|_| *self.0.pick(&alphabet)).collect()
    }
    fn option<T>(&mut self, f: impl FnOnce(&mut Gen) -> T) -> Option<T> {
        self.bool().then(|| f(self))
    }
    fn list<T>(&mut self, most: u64, mut f: impl FnMut(&mut Gen) -> T) -> Vec<T> {
        (0..self.n(most + 1)).map(|_| f(self)).collect()
    }
    fn backup_part(&mut self) -> BackupPart {
        BackupPart {
            node_id: self.u16(),
            host: self.string(),
            dir: self.string(),
            bytes: self.u64(),
            total_bytes: self.u64(),
            done: self.bool(),
            error: self.option(Gen::string),
        }
    }

    fn epoch(&mut self) -> CommitEpoch {
        CommitEpoch(self.u64())
    }
    fn shard(&mut self) -> ShardAddr {
        ShardAddr { node: self.u16(), shard: self.u16() }
    }
    fn tx(&mut self) -> TxId {
        TxId { tc: self.shard(), seq: self.u64() }
    }
    fn error(&mut self) -> DbError {
        let codes = [ErrorCode::Malformed, ErrorCode::WrongShard, ErrorCode::DuplicateKey, ErrorCode::NotServing];
        DbError::new(*self.0.pick(&codes), self.string())
    }
    fn value(&mut self) -> Value {
        match self.n(12) {
            0 => Value::Null,
            1 => Value::Int(self.u64() as i64),
            2 => Value::UInt(self.u64()),
            3 => Value::Float(self.n(1 << 20) as f64 / 7.0),
            4 => Value::Decimal(latsdb_types::value::Decimal { unscaled: self.u64() as i128, scale: self.n(10) as u8 }),
            5 => Value::Str(self.string()),
            6 => Value::Bytes(self.bytes()),
            7 => Value::Date(self.u32() as i32),
            8 => Value::DateTime(self.u64() as i64),
            9 => Value::Timestamp(self.u64() as i64),
            _ => Value::Bool(self.bool()),
        }
    }
    fn expr(&mut self, depth: u32) -> Expr {
        if depth == 0 || self.n(3) == 0 {
            return if self.bool() { Expr::Column(self.u16()) } else { Expr::Const(self.value()) };
        }
        match self.n(5) {
            0 => Expr::And(self.list(3, |g| g.expr(depth - 1))),
            1 => Expr::Not(Box::new(self.expr(depth - 1))),
            2 => Expr::In(Box::new(self.expr(depth - 1)), self.list(3, Gen::value)),
            3 => Expr::Like(Box::new(self.expr(depth - 1)), self.string()),
            _ => Expr::Column(self.u16()).eq(self.value()),
        }
    }
    fn columns(&mut self) -> Arc<[ColumnId]> {
        Arc::from(self.list(4, Gen::u16))
    }
    fn op_kind(&mut self) -> OpKind {
        let locks = [LockMode::Committed, LockMode::Shared, LockMode::Exclusive];
        match self.n(5) {
            0 => OpKind::Read { lock: *self.0.pick(&locks) },
            1 => OpKind::Insert { row: self.list(4, Gen::value) },
            2 => OpKind::Upsert { row: self.list(4, Gen::value) },
            3 => OpKind::Update { set: self.list(3, |g| (g.u16(), g.expr(2))) },
            _ => OpKind::Delete,
        }
    }
    fn key_op(&mut self) -> KeyOp {
        KeyOp {
            table: self.u32(),
            table_version: self.u32(),
            partition: self.u32(),
            key: self.bytes(),
            kind: self.op_kind(),
            projection: self.option(Gen::columns),
        }
    }
    fn committed_read(&mut self) -> KeyOp {
        KeyOp { kind: OpKind::Read { lock: LockMode::Committed }, ..self.key_op() }
    }
    fn op_result(&mut self) -> OpResult {
        match self.n(5) {
            0 => OpResult::Row(self.bytes()),
            1 => OpResult::NotFound,
            2 => OpResult::Done,
            3 => OpResult::Error(self.error()),
            _ => OpResult::Unchanged,
        }
    }
    fn bound(&mut self) -> KeyBound {
        match self.n(3) {
            0 => KeyBound::Unbounded,
            1 => KeyBound::Included(self.bytes()),
            _ => KeyBound::Excluded(self.bytes()),
        }
    }
    fn scan(&mut self) -> ScanRequest {
        ScanRequest {
            table: self.u32(),
            table_version: self.u32(),
            partition: self.u32(),
            index: self.u16(),
            lower: self.bound(),
            upper: self.bound(),
            resume_after: self.option(Gen::bytes),
            filter: self.option(|g| g.expr(3)),
            projection: self.option(|g| g.list(4, Gen::u16)),
            max_rows: self.u32(),
            aggregates: self.list(3, |g| if g.bool() { Aggregate::CountRows } else { Aggregate::Sum(g.u16()) }),
        }
    }
    fn range(&mut self) -> SyncRange {
        SyncRange { after: self.option(Gen::bytes), upto: self.option(Gen::bytes) }
    }
    fn write(&mut self) -> ReplicaWrite {
        ReplicaWrite {
            idx: self.u32(),
            table: self.u32(),
            partition: self.u32(),
            key: self.bytes(),
            image: self.option(Gen::bytes),
        }
    }
    fn nodes(&mut self) -> Vec<NodeId> {
        self.list(4, Gen::u16)
    }
    fn ballot(&mut self) -> Ballot {
        Ballot { round: self.u64(), node: self.u16() }
    }
    fn column_def(&mut self) -> ColumnDef {
        let types = [
            ColumnType::Integer { width: IntWidth::Big, unsigned: false },
            ColumnType::VarChar(40),
            ColumnType::Double,
            ColumnType::Decimal { precision: 10, scale: 2 },
        ];
        let mut c = ColumnDef::new(self.string(), *self.0.pick(&types));
        c.nullable = self.bool();
        c.default = self.option(Gen::value);
        c.collation = Collation::Bin;
        c.storage = *self.0.pick(&[Storage::Memory, Storage::Disk]);
        c.fraction_digits = (self.u16() % 7) as u8;
        c.clock = ClockFill { on_insert: self.bool(), on_update: self.bool() };
        c
    }
    fn table_def(&mut self) -> TableDef {
        TableDef {
            id: self.u32(),
            version: self.u32(),
            database: self.string(),
            name: self.string(),
            columns: self.list(4, Gen::column_def),
            primary_key: vec![0],
            partitions: self.u32(),
            indexes: vec![IndexDef { id: 0, name: "PRIMARY".into(), columns: vec![0], unique: true }],
            added_parts: Vec::new(),
            foreign_keys: self.list(2, Gen::foreign_key),
            referenced_by: self.list(2, |g| ForeignKeyRef {
                database: g.string(),
                table: g.string(),
                name: g.string(),
            }),
        }
    }
    fn foreign_key(&mut self) -> ForeignKeyDef {
        let actions =
            [ReferenceAction::Restrict, ReferenceAction::NoAction, ReferenceAction::Cascade, ReferenceAction::SetNull];
        ForeignKeyDef {
            name: self.string(),
            columns: self.list(3, Gen::u16),
            parent_database: self.string(),
            parent_table: self.string(),
            parent_columns: self.list(3, Gen::string),
            on_delete: *self.0.pick(&actions),
            on_update: *self.0.pick(&actions),
        }
    }
    fn layout(&mut self) -> ClusterLayout {
        let datanodes = (0..self.n(4))
            .map(|i| DataNodeInfo {
                node_id: 2 + i as NodeId,
                node_group: 0,
                host: self.string(),
                status: [NodeStatus::NotStarted, NodeStatus::Starting, NodeStatus::Started][self.n(3) as usize],
                shards: self.list(2, Gen::string),
                pid: self.u32(),
                process: self.u64(),
                location_domain: self.option(Gen::string),
            })
            .collect();
        ClusterLayout::builder(self.string())
            .version(self.u64())
            .replicas(1 + self.n(4) as u8)
            .mgmd(self.u16(), self.string())
            .datanodes(datanodes)
            .node_groups(1)
            .durable_epoch(self.epoch())
            .first_view(ViewNumber(self.u64()))
            .view(ViewNumber(self.u64()))
            .default_column_storage(*self.0.pick(&[Storage::Memory, Storage::Disk]))
            .placement(
                self.list(3, |g| PartitionPlace { group: 0, slot: g.u32() }),
                self.u32(),
                self.list(2, |g| PartitionMove { partition: g.u32(), to: PartitionPlace { group: 0, slot: g.u32() } }),
            )
            .build()
    }
    fn shard_memory(&mut self) -> ShardMemory {
        ShardMemory {
            shard: self.u16(),
            rows: self.u64(),
            used_bytes: self.u64(),
            budget_bytes: self.u64(),
            tablespace_bytes: self.u64(),
            tablespace_used_bytes: self.u64(),
            tablespace_limit_bytes: self.u64(),
            page_cache_hits: self.u64(),
            page_cache_misses: self.u64(),
            page_waits: self.u64(),
            pages_read_on_shard_thread: self.u64(),
            pages_read_at_once: self.u64(),
            partitions: self.list(3, |g| PartitionSize {
                table: g.u32(),
                partition: g.u32(),
                rows: g.u64(),
                bytes: g.u64(),
            }),
            redo_bytes: self.u64(),
            redo_limit_bytes: self.u64(),
            ops: OpCounts {
                key_ops: self.u64(),
                scan_pages: self.u64(),
                committed: self.u64(),
                aborts: self.aborts(),
                lock_waits: self.u64(),
                lock_wait_timeouts: self.u64(),
                tx_request_latency: self.latency(),
                checkpoints: self.u64(),
                redo_written_bytes: self.u64(),
            },
        }
    }
}

/// Encodes `message` in a frame, checks the body starts with `variant`
/// (docs/architecture/wire.md: an enum is its u32 variant number, then its fields) and
/// decodes it back unchanged.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(message: &T, variant: u64, seed: u64) {
    let frame = frame(seed, message);
    let body = &frame[FRAME_HEADER..];
    assert_eq!(u32::from_le_bytes(frame[0..4].try_into().unwrap()) as usize, frame.len() - 4, "frame length");
    assert_eq!(u64::from_le_bytes(frame[4..12].try_into().unwrap()), seed, "request id");
    assert_eq!(u32::from_le_bytes(body[0..4].try_into().unwrap()) as u64, variant, "variant number of {message:?}");
    let back: T = decode_body(body).unwrap_or_else(|e| panic!("seed {seed}: {message:?} does not decode: {e}"));
    assert_eq!(&back, message, "seed {seed}");
    // Cut short anywhere, the body is refused cleanly.
    for cut in [0, body.len() / 2, body.len().saturating_sub(1)] {
        if cut < body.len() {
            let _ = decode_body::<T>(&body[..cut]);
        }
    }
}

/// Round-trips `CASES` random instances of each of `variants` variants.
fn any_severity(g: &mut Gen) -> Severity {
    [Severity::Info, Severity::Warning, Severity::Alert][g.u16() as usize % 3]
}

fn every_variant<T: Serialize + DeserializeOwned + PartialEq + Debug>(
    variants: u64,
    make: impl Fn(&mut Gen, u64) -> T,
) {
    for variant in 0..variants {
        for case in 0..CASES {
            let seed = variant * 1000 + case;
            let message = make(&mut Gen(Rng::new(seed)), variant);
            round_trip(&message, variant, seed);
        }
    }
}

#[test]
fn client_messages_round_trip() {
    every_variant(2, |g, v| match v {
        0 => Hello::Client { protocol: g.u32(), name: g.string() },
        _ => Hello::Peer { protocol: g.u32(), from: g.shard(), process: g.u64() },
    });
    every_variant(6, |g, v| match v {
        0 => ClientRequest::Batch(g.list(5, Gen::key_op)),
        1 => ClientRequest::TxExec { tx: g.option(Gen::tx), ops: g.list(5, Gen::key_op), commit: g.bool() },
        2 => ClientRequest::TxAbort { tx: g.tx() },
        3 => ClientRequest::Scan(g.scan()),
        4 => ClientRequest::Ping,
        _ => ClientRequest::WaitDurable,
    });
    every_variant(8, |g, v| match v {
        0 => ClientResponse::Hello { shard: g.shard() },
        1 => ClientResponse::Batch(g.list(5, Gen::op_result)),
        2 => ClientResponse::TxExec {
            tx: g.tx(),
            results: g.list(5, Gen::op_result),
            committed: g.bool(),
            epoch: CommitEpoch(g.u64()),
        },
        3 => ClientResponse::TxAborted { tx: g.tx(), error: g.option(Gen::error) },
        4 => ClientResponse::Scan(ScanPage {
            rows: g.list(3, |g| serde_bytes::ByteBuf::from(g.bytes())),
            resume: g.option(Gen::bytes),
            aggregates: g.list(3, Gen::value),
        }),
        5 => ClientResponse::Pong,
        6 => ClientResponse::Durable(g.epoch()),
        _ => ClientResponse::Error(g.error()),
    });
}

#[test]
fn peer_messages_round_trip() {
    every_variant(28, |g, v| {
        let (tx, epoch, table, partition, attempt) = (g.tx(), g.epoch(), g.u32(), g.u32(), g.u64());
        match v {
            0 => PeerMsg::TxOps { tx, ops: g.list(4, |g| (g.u32(), g.key_op())) },
            1 => PeerMsg::TxOpResults { tx, results: g.list(4, |g| (g.u32(), g.op_result())), epoch },
            2 => PeerMsg::TxCommit { tx, epoch },
            3 => PeerMsg::TxCommitted { tx },
            4 => PeerMsg::TxAbort { tx },
            5 => PeerMsg::ReplicaPrepare { tx, writes: g.list(4, Gen::write) },
            6 => PeerMsg::ReplicaPrepared { tx, results: g.list(4, |g| (g.u32(), g.option(Gen::error))) },
            7 => PeerMsg::ReplicaCommit { tx, epoch },
            8 => PeerMsg::ReplicaCommitted { tx },
            9 => PeerMsg::ReplicaAbort { tx },
            10 => PeerMsg::ReplicaApply { tx, epoch, writes: g.list(4, Gen::write) },
            11 => PeerMsg::TakeoverReport(TakeoverReport {
                dead: g.u16(),
                version: g.u64(),
                prepared: g.list(4, Gen::tx),
                committed: g.list(4, |g| (g.tx(), g.epoch())),
            }),
            12 => PeerMsg::TakeoverCommit { tx, epoch },
            13 => PeerMsg::TakeoverAbort { tx },
            14 => PeerMsg::Member(any_member_message(g)),
            15 => PeerMsg::EpochSwitch { epoch },
            16 => PeerMsg::EpochCompleted { epoch, view: g.nodes() },
            17 => PeerMsg::EpochSave { epoch },
            18 => PeerMsg::EpochSaved { epoch },
            19 => PeerMsg::EpochDurable { epoch },
            20 => PeerMsg::SyncRequest { table, partition, attempt },
            21 => PeerMsg::SyncDigest { table, partition, attempt, range: g.range(), digest: g.u64() },
            22 => PeerMsg::SyncFetch { table, partition, attempt, range: g.range() },
            23 => PeerMsg::SyncRows {
                table,
                partition,
                attempt,
                range: g.range(),
                rows: g.list(4, |g| SyncRow { key: g.bytes(), row: g.bytes() }),
                epoch,
            },
            24 => PeerMsg::SyncHandover { table, partition },
            25 => PeerMsg::SyncHandedOver { table, partition },
            26 => PeerMsg::SyncRefused { table, partition, attempt, error: g.error() },
            _ => PeerMsg::TxOpsReturned { tx, ops: g.list(4, |g| (g.u32(), g.key_op())), error: g.error() },
        }
    });
}

fn member_message(g: &mut Gen, variant: u64) -> MemberMsg {
    let (epoch, ballot) = (ViewNumber(g.u64()), g.ballot());
    match variant {
        0 => MemberMsg::Heartbeat { epoch, sent_at: g.u64(), echo: g.option(Gen::u64) },
        1 => MemberMsg::Prepare { epoch, ballot, base: g.nodes() },
        2 => MemberMsg::Promise { epoch, ballot, accepted: g.option(|g| (g.ballot(), g.nodes())) },
        3 => MemberMsg::Accept { epoch, ballot, members: g.nodes() },
        4 => MemberMsg::Accepted { epoch, ballot },
        5 => MemberMsg::Reject {
            epoch,
            promised: g.option(Gen::ballot),
            installed: g.option(|g| (ViewNumber(g.u64()), g.nodes())),
        },
        6 => MemberMsg::Install { epoch, members: g.nodes() },
        _ => MemberMsg::InstallAck { epoch },
    }
}

fn any_member_message(g: &mut Gen) -> MemberMsg {
    let variant = g.n(8);
    member_message(g, variant)
}

#[test]
fn membership_messages_round_trip() {
    every_variant(8, member_message);
}

fn register_request(g: &mut Gen) -> MgmRequest {
    MgmRequest::RegisterDataNode { node_id: g.option(Gen::u16), pid: g.u32(), process: g.u64(), protocol: g.u32() }
}

#[test]
fn management_messages_round_trip() {
    every_variant(34, |g, v| {
        let (database, table, node_id) = (g.string(), g.string(), g.u16());
        match v {
            0 => MgmRequest::GetLayout,
            1 => register_request(g),
            2 => MgmRequest::DataNodeStarted {
                node_id,
                shards: g.list(3, Gen::string),
                recovery: g.option(|g| NodeRecovery { saved_epoch: g.epoch(), max_epoch: g.epoch() }),
            },
            3 => MgmRequest::DataNodeReady { node_id },
            4 => MgmRequest::DataNodeSynced { node_id },
            5 => MgmRequest::EpochDurable { epoch: g.epoch() },
            6 => {
                let mut spec = TableSpec::new(database, table);
                spec.columns = g.list(3, Gen::column_def);
                spec.primary_key = g.list(2, Gen::string);
                spec.partitions = g.u32();
                MgmRequest::CreateTable(spec)
            }
            7 => MgmRequest::DropTable { database, name: table },
            8 => MgmRequest::GetTable { database, name: table },
            9 => MgmRequest::ListTables,
            10 => MgmRequest::CreateIndex {
                database,
                table,
                index: g.string(),
                columns: g.list(3, Gen::string),
                unique: g.bool(),
            },
            11 => MgmRequest::DropIndex { database, table, index: g.string() },
            12 => MgmRequest::AddColumns {
                database,
                table,
                columns: g.list(3, Gen::column_def),
                fill: g.list(3, Gen::value),
            },
            13 => MgmRequest::ReportMemory,
            14 => MgmRequest::Shutdown,
            15 => MgmRequest::StopNode { node_id },
            16 => MgmRequest::StartNode { node_id, initial: g.bool() },
            17 => MgmRequest::TakeStartRequests { only: g.option(Gen::u16) },
            18 => MgmRequest::Member { from: node_id, msg: any_member_message(g) },
            19 => MgmRequest::ChangeColumns {
                database,
                table,
                changes: vec![
                    ColumnChange::Rename { from: g.string(), to: g.string() },
                    ColumnChange::SetDefault { column: g.string(), default: g.option(Gen::value) },
                    ColumnChange::SetClock {
                        column: g.string(),
                        clock: ClockFill { on_insert: g.bool(), on_update: g.bool() },
                    },
                    ColumnChange::Drop { column: g.string() },
                    ColumnChange::AddForeignKey(g.foreign_key()),
                    ColumnChange::DropForeignKey { name: g.string() },
                ],
            },
            20 => MgmRequest::RenameTable { database, table, new_database: g.string(), new_name: g.string() },
            21 => MgmRequest::ReportEvent { severity: any_severity(g), source: g.string(), text: g.string() },
            22 => MgmRequest::GetClusterLog { last: g.u32() },
            23 => MgmRequest::BackupStart,
            24 => MgmRequest::BackupStatus { id: g.option(Gen::u64) },
            25 => MgmRequest::BackupList,
            26 => MgmRequest::BackupAbort { id: g.u64() },
            27 => MgmRequest::Report,
            28 => MgmRequest::AddNodeGroups { config: g.string() },
            29 => MgmRequest::NodeGroups,
            30 => MgmRequest::ReattachDataNode {
                node_id,
                pid: g.u32(),
                process: g.u64(),
                protocol: g.u32(),
                layout: g.layout(),
            },
            31 => {
                let mut spec = TableSpec::new(database.clone(), table.clone());
                spec.columns = g.list(3, Gen::column_def);
                spec.primary_key = g.list(2, Gen::string);
                let index =
                    |g: &mut Gen| IndexSpec { name: g.string(), columns: g.list(2, Gen::string), unique: g.bool() };
                MgmRequest::CopyTableBegin { database, table, version: g.u32(), spec, indexes: g.list(2, index) }
            }
            32 => MgmRequest::CopyTableFinish { table: g.u32() },
            _ => MgmRequest::CopyTableAbort { table: g.u32() },
        }
    });
    every_variant(13, |g, v| match v {
        0 => MgmResponse::Layout(g.layout()),
        1 => MgmResponse::Registered {
            node_id: g.u16(),
            host: g.string(),
            port: g.u16(),
            threads: g.u16(),
            data_memory_mb: g.u64(),
            disk_page_cache_mb: g.u64(),
            tablespace_mb: g.u64(),
            redo_limit_mb: g.u64(),
            disk_direct_io: g.bool(),
            nodes_on_host: g.u16(),
            host_index: g.u16(),
            cpu_bind: Default::default(),
            cpus: g.option(|g| g.list(4, Gen::u32)),
            idle_poll: g.bool(),
            metrics_port: g.option(Gen::u16),
        },
        2 => MgmResponse::Started {
            layout: g.layout(),
            tables: g.list(2, Gen::table_def),
            start: StartPlan { restore_epoch: g.option(Gen::epoch), first_epoch: g.epoch(), join: g.bool() },
        },
        3 => MgmResponse::Table(g.table_def()),
        4 => MgmResponse::Tables(g.list(2, Gen::table_def)),
        5 => MgmResponse::Memory(g.list(3, |g| (g.u16(), g.list(2, Gen::shard_memory)))),
        6 => MgmResponse::Member(g.option(any_member_message)),
        7 => MgmResponse::StartRequests(g.list(3, |g| (g.u16(), g.bool()))),
        8 => MgmResponse::Done,
        9 => MgmResponse::Error(g.error()),
        10 => MgmResponse::ClusterLog(g.list(3, |g| ClusterEvent {
            unix_ms: g.u64(),
            severity: any_severity(g),
            source: g.string(),
            text: g.string(),
        })),
        11 => MgmResponse::Backups(g.list(2, |g| BackupInfo {
            id: g.u64(),
            state: match g.n(4) {
                0 => BackupState::Running,
                1 => BackupState::Completed,
                2 => BackupState::Failed(g.string()),
                _ => BackupState::Aborted,
            },
            epoch: g.epoch(),
            started_unix_ms: g.u64(),
            finished_unix_ms: g.u64(),
            parts: g.list(3, Gen::backup_part),
        })),
        _ => MgmResponse::Report(g.string()),
    });
}

#[test]
fn node_commands_and_replies_round_trip() {
    every_variant(10, |g, v| match v {
        0 => NodeCommand::Heartbeat,
        1 => NodeCommand::SetLayout(g.layout()),
        2 => NodeCommand::ApplySchema(match g.n(4) {
            0 => SchemaChange::CreateTable(g.table_def()),
            1 => SchemaChange::AlterTable(g.table_def()),
            2 => SchemaChange::DropTable(g.u32()),
            _ => SchemaChange::Fence(g.list(3, Gen::u32)),
        }),
        3 => NodeCommand::ReportMemory,
        4 => NodeCommand::Stop,
        5 => NodeCommand::Admit(g.u16()),
        6 => NodeCommand::BackupHold { id: g.u64() },
        7 => NodeCommand::BackupWrite { id: g.u64(), epoch: g.epoch(), tables: g.list(2, Gen::table_def) },
        8 => NodeCommand::BackupProgress { id: g.u64() },
        _ => NodeCommand::BackupAbort { id: g.u64() },
    });
    every_variant(5, |g, v| match v {
        0 => NodeReply::Done,
        1 => NodeReply::Memory(g.list(3, Gen::shard_memory)),
        2 => NodeReply::Error(g.error()),
        3 => NodeReply::BackupHeld {
            durable: g.epoch(),
            current: g.epoch(),
            partitions: g.list(4, |g| (g.u32(), g.u32())),
            dir: g.string(),
        },
        _ => NodeReply::BackupProgress(g.backup_part()),
    });
}

/// A batch of reads sent from borrowed keys (`BatchOf` of `LookupOpRef`)
/// is the owned `ClientRequest::Batch` byte for byte, and
/// `decode_lookups` reads back exactly the owned reads; a batch with any
/// other operation is left to the owned decoder.
#[test]
fn borrowed_lookups_match_their_owned_twin() {
    for seed in 0..500 {
        let g = &mut Gen(Rng::new(seed));
        let reads = g.list(20, Gen::committed_read);
        let borrowed: Vec<LookupOpRef> = reads
            .iter()
            .map(|op| LookupOpRef {
                table: op.table,
                table_version: op.table_version,
                partition: op.partition,
                key: &op.key,
                kind: &COMMITTED_READ,
                projection: op.projection.as_deref(),
            })
            .collect();
        let owned = frame(seed, &ClientRequest::Batch(reads.clone()));
        assert_eq!(owned, frame(seed, &BatchOf(&borrowed[..])), "seed {seed}");
        let (mut decoded, mut columns) = (Vec::new(), Vec::new());
        assert!(decode_lookups(&owned[FRAME_HEADER..], &mut decoded, &mut columns), "seed {seed}");
        let back: Vec<KeyOp> = decoded
            .iter()
            .map(|r| KeyOp {
                table: r.table,
                table_version: r.table_version,
                partition: r.partition,
                key: r.key.to_vec(),
                kind: OpKind::Read { lock: LockMode::Committed },
                projection: r.projection.map(|(s, e)| Arc::from(&columns[s as usize..e as usize])),
            })
            .collect();
        assert_eq!(back, reads, "seed {seed}");
        // One operation of another kind anywhere: not a batch of lookups.
        if !reads.is_empty() {
            let mut mixed = reads.clone();
            let at = g.n(mixed.len() as u64) as usize;
            mixed[at] = loop {
                let op = g.key_op();
                if op.kind != (OpKind::Read { lock: LockMode::Committed }) {
                    break op;
                }
            };
            let body = frame(seed, &ClientRequest::Batch(mixed));
            assert!(!decode_lookups(&body[FRAME_HEADER..], &mut Vec::new(), &mut Vec::new()), "seed {seed}");
        }
    }
}

/// A batch's answer written borrowed (`BatchAnswerOf` of `OpResultRef`)
/// is the owned `ClientResponse::Batch` byte for byte, and
/// `decode_batch_answer` hands back exactly the owned results.
#[test]
fn borrowed_answers_match_their_owned_twin() {
    for seed in 0..500 {
        let g = &mut Gen(Rng::new(seed));
        let results = g.list(20, Gen::op_result);
        let borrowed: Vec<OpResultRef> = results
            .iter()
            .map(|r| match r {
                OpResult::Row(bytes) => OpResultRef::Row(bytes),
                OpResult::NotFound => OpResultRef::NotFound,
                OpResult::Done => OpResultRef::Done,
                OpResult::Error(e) => OpResultRef::Error(e.clone()),
                OpResult::Unchanged => OpResultRef::Unchanged,
            })
            .collect();
        let owned = frame(seed, &ClientResponse::Batch(results.clone()));
        assert_eq!(owned, frame(seed, &BatchAnswerOf(&borrowed[..])), "seed {seed}");
        let mut seen = Vec::new();
        let count = decode_batch_answer(&owned[FRAME_HEADER..], |r| {
            seen.push(match r {
                OpResultRef::Row(bytes) => OpResult::Row(bytes.to_vec()),
                OpResultRef::NotFound => OpResult::NotFound,
                OpResultRef::Done => OpResult::Done,
                OpResultRef::Error(e) => OpResult::Error(e),
                OpResultRef::Unchanged => OpResult::Unchanged,
            });
            Ok(())
        })
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(count, Ok(results.len()), "seed {seed}");
        assert_eq!(seen, results, "seed {seed}");
    }
}
