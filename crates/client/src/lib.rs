//! The native async client of latsdb (the role of NDB's NDB API).
//!
//! ```no_run
//! # async fn demo() -> latsdb_types::Result<()> {
//! use latsdb_client::{Client, Op};
//! use latsdb_types::{ColumnDef, ColumnType, IntWidth, TableSpec, Value};
//! let client = Client::connect("127.0.0.1:1186").await?;
//! let users = client
//!     .create_table(TableSpec::new("app", "users")
//!         .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
//!         .column(ColumnDef::new("name", ColumnType::VarChar(64)))
//!         .primary_key(&["id"]))
//!     .await?;
//! client.batch(vec![Op::insert(&users, vec![Value::Int(1), Value::Str("ada".into())])?]).await?;
//! let found = client.get(&users, &[Value::Int(1)]).await?;
//! assert_eq!(found.unwrap().get_by_name("name")?, Value::Str("ada".into()));
//! # Ok(()) }
//! ```
//!
//! The client learns the cluster layout and table definitions from the
//! management server and then talks to data-node shards directly: every key
//! operation goes to the shard holding its partition, a batch of independent
//! operations is split per shard and sent in one round trip to each, and all
//! shards are asked in parallel.

mod conn;
mod lookup;
mod ops;
mod scan;
mod tx;
mod unique;

pub use lookup::{Answers, Found, Lookups, RowRef};
pub use ops::{Op, Outcome, Projection, Row};
pub use scan::Scan;
pub use tx::Transaction;
pub use unique::UniqueProbe;

pub use latsdb_types::expr::{Aggregate, ArithOp, CmpOp, Expr};
pub use latsdb_types::proto::LockMode;
pub use latsdb_types::{DbError, ErrorCode, Result, Value};

use conn::{Reply, ShardConn};
use latsdb_net::RpcConn;
use latsdb_types::proto::{
    ClientRequest, ClientResponse, ClusterLayout, MgmRequest, MgmResponse, NodeStatus, Router, ShardAddr,
};
use latsdb_types::row::RowLayout;
use latsdb_types::schema::{ColumnDef, ColumnId, TableDef, TableSpec};
use latsdb_types::TableMeta;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::oneshot;

#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub name: String,
    pub connect_timeout: Duration,
    /// Longest wait for one answer from a data node.
    pub request_timeout: Duration,
    /// How long `connect` waits for every data node to be started.
    pub wait_for_cluster: Duration,
    /// Acknowledge a commit (a transaction's, or a batch's writes) only once
    /// its epoch is durable: synced to the REDO log of every live data node,
    /// so it survives a crash of the whole cluster. Costs up to two epoch
    /// lengths of latency per commit.
    pub wait_durable: bool,
    /// How requests to a data node are written: `YieldOnce` lets requests
    /// of tasks ready in the same scheduler round share one write (best for
    /// many requests in flight); `Never` writes at once (one request at a
    /// time per caller, as a SQL session sends them).
    pub coalesce: latsdb_net::Coalesce,
    /// This client's identity in a cluster that requires TLS (the cluster
    /// CA and an `api` certificate, `ClusterTls::load(dir, Role::Api)`);
    /// None speaks plain TCP, which such a cluster refuses.
    pub tls: Option<Arc<latsdb_net::tls::ClusterTls>>,
    /// The location domain (availability zone) this client runs in: its
    /// committed reads go to a started replica in that domain when the
    /// partition has one, and its transactions are coordinated there
    /// (`Router::for_domain`). None routes without regard to domains.
    pub location_domain: Option<String>,
}

impl ClientOptions {
    /// The defaults, with the API role's certificate from `dir` (as
    /// `latsdb certs create` writes it) when a directory is given.
    pub fn with_tls_dir(dir: Option<&std::path::Path>) -> std::result::Result<ClientOptions, String> {
        let tls = match dir {
            Some(dir) => Some(
                latsdb_net::tls::ClusterTls::load(dir, latsdb_net::tls::Role::Api)
                    .map_err(|e| format!("--tls-dir: {e}"))?,
            ),
            None => None,
        };
        Ok(ClientOptions { tls, ..Default::default() })
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            name: "latsdb-client".into(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            wait_for_cluster: Duration::from_secs(30),
            wait_durable: false,
            coalesce: latsdb_net::Coalesce::YieldOnce,
            tls: None,
            location_domain: None,
        }
    }
}

/// A table definition as the client uses it.
#[derive(Debug)]
pub struct Table {
    pub meta: TableMeta,
    pub(crate) layout: Arc<RowLayout>,
    /// The hidden tables of its unique indexes (in `unique_indexes()`
    /// order), read from the management server on first use by this
    /// definition: a changed definition reads them again.
    pub(crate) hidden: tokio::sync::OnceCell<Vec<Arc<Table>>>,
}

impl Table {
    /// A table handle from a definition, for planning without a cluster
    /// (tests, tools); operations built on it carry its version.
    pub fn from_def(def: TableDef) -> Arc<Table> {
        Self::new(def)
    }

    fn new(def: TableDef) -> Arc<Table> {
        let meta = TableMeta::new(def);
        let layout = Arc::new(meta.layout.clone());
        Arc::new(Table { meta, layout, hidden: tokio::sync::OnceCell::new() })
    }

    pub fn def(&self) -> &TableDef {
        &self.meta.def
    }

    /// The encoded primary key of `key` (values in key order): equal for
    /// two keys that find the same row.
    pub fn encode_key(&self, key: &[Value]) -> Result<Vec<u8>> {
        self.meta.encode_key(key)
    }

    pub fn column(&self, name: &str) -> Result<ColumnId> {
        self.meta.def.column_id(name)
    }

    /// A column reference for filters and update expressions.
    pub fn col(&self, name: &str) -> Result<Expr> {
        Ok(Expr::Column(self.column(name)?))
    }
}

struct Inner {
    mgmd: String,
    opts: ClientOptions,
    layout: RwLock<Arc<ClusterLayout>>,
    router: RwLock<Arc<Router>>,
    conns: Mutex<HashMap<ShardAddr, Arc<ShardConn>>>,
    connecting: tokio::sync::Mutex<()>,
    tables: Arc<TableCache>,
    mgm: tokio::sync::Mutex<Option<RpcConn>>,
    /// Rotates committed-read batches over the replicas.
    read_rotation: std::sync::atomic::AtomicUsize,
    /// Requests sent to data nodes, by this client and its siblings.
    requests: Arc<std::sync::atomic::AtomicU64>,
}

/// Table definitions by (database, name); shared by sibling clients.
#[derive(Default)]
struct TableCache {
    map: RwLock<HashMap<(String, String), Arc<Table>>>,
    /// Bumped whenever `map` changes.
    generation: std::sync::atomic::AtomicU64,
}

impl TableCache {
    fn get(&self, key: &(String, String)) -> Option<Arc<Table>> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).get(key).cloned()
    }

    fn insert(&self, key: (String, String), table: Arc<Table>) {
        self.map.write().unwrap_or_else(|p| p.into_inner()).insert(key, table);
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    fn remove(&self, key: &(String, String)) {
        self.map.write().unwrap_or_else(|p| p.into_inner()).remove(key);
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Release);
    }
}

/// A handle to a latsdb cluster; cheap to clone and share between tasks.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

fn unexpected(what: &str, got: MgmResponse) -> DbError {
    match got {
        MgmResponse::Error(e) => e,
        other => DbError::internal(format!("the management server answered {what} with {other:?}")),
    }
}

impl Client {
    /// Connects through the management server at `mgmd` ("host:port") and
    /// waits until every data node is started.
    pub async fn connect(mgmd: &str) -> Result<Client> {
        Self::connect_with(mgmd, ClientOptions::default()).await
    }

    pub async fn connect_with(mgmd: &str, opts: ClientOptions) -> Result<Client> {
        Self::connect_sharing(mgmd, opts, Arc::default(), Arc::default()).await
    }

    /// Another client of the same cluster with its own connections (to the
    /// management server and the data nodes, driven by the runtime this is
    /// called on) but the same table definitions: a table this one creates
    /// or drops is seen by the sibling at once. A server with a runtime per
    /// thread gives each thread a sibling, so that no request crosses threads.
    pub async fn connect_sibling(&self) -> Result<Client> {
        let inner = &self.inner;
        Self::connect_sharing(&inner.mgmd, inner.opts.clone(), inner.tables.clone(), inner.requests.clone()).await
    }

    async fn connect_sharing(
        mgmd: &str,
        opts: ClientOptions,
        tables: Arc<TableCache>,
        requests: Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<Client> {
        if let Some(domain) = &opts.location_domain {
            latsdb_types::location::check_domain(domain)
                .map_err(|why| DbError::bad_request(format!("the client's location domain {why}")))?;
        }
        let mut mgm =
            RpcConn::connect(mgmd, opts.connect_timeout, opts.tls.as_deref()).await.map_err(|e| match e.code {
                // Refused by it: it runs; its message says what to fix.
                ErrorCode::AccessDenied => e,
                _ => DbError::new(e.code, format!("{}; is the management server running at {mgmd}?", e.message)),
            })?;
        let deadline = tokio::time::Instant::now() + opts.wait_for_cluster;
        let layout = loop {
            let layout = match mgm.call::<_, MgmResponse>(&MgmRequest::GetLayout).await? {
                MgmResponse::Layout(l) => l,
                other => return Err(unexpected("GetLayout", other)),
            };
            if layout.first_view > latsdb_types::proto::ViewNumber::NONE {
                break layout;
            }
            if tokio::time::Instant::now() >= deadline {
                let missing: Vec<String> = layout
                    .datanodes
                    .iter()
                    .filter(|d| d.status != NodeStatus::Started)
                    .map(|d| d.node_id.to_string())
                    .collect();
                return Err(DbError::new(
                    latsdb_types::ErrorCode::ClusterNotReady,
                    format!("data node(s) {} did not start within {:?}", missing.join(", "), opts.wait_for_cluster),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let router = Router::for_domain(&layout, opts.location_domain.as_deref());
        Ok(Client {
            inner: Arc::new(Inner {
                mgmd: mgmd.to_string(),
                opts,
                router: RwLock::new(Arc::new(router)),
                layout: RwLock::new(Arc::new(layout)),
                conns: Mutex::new(HashMap::new()),
                connecting: tokio::sync::Mutex::new(()),
                tables,
                mgm: tokio::sync::Mutex::new(Some(mgm)),
                read_rotation: std::sync::atomic::AtomicUsize::new(0),
                requests,
            }),
        })
    }

    /// Requests this client and its siblings have sent to data nodes. Each
    /// is one round trip: a batch that reaches several shards counts one
    /// per shard, a transaction one per `execute` or `commit` (NDB's
    /// `Ndb_api_wait_exec_complete_count` counts the same waits).
    pub fn requests_sent(&self) -> u64 {
        self.inner.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Rows and bytes of row data (keys and values, without index or map
    /// overhead) of every table, by table id, as the data nodes hold them
    /// now: each partition counted once, from its fullest replica.
    pub async fn table_sizes(&self) -> Result<HashMap<latsdb_types::schema::TableId, (u64, u64)>> {
        let nodes = match self.mgm(MgmRequest::ReportMemory).await? {
            MgmResponse::Memory(nodes) => nodes,
            other => return Err(unexpected("ReportMemory", other)),
        };
        let mut partitions: HashMap<(latsdb_types::schema::TableId, u32), (u64, u64)> = HashMap::new();
        for size in nodes.iter().flat_map(|(_, shards)| shards.iter().flat_map(|s| s.partitions.iter())) {
            let slot = partitions.entry((size.table, size.partition)).or_default();
            *slot = (slot.0.max(size.rows), slot.1.max(size.bytes));
        }
        let mut tables: HashMap<latsdb_types::schema::TableId, (u64, u64)> = HashMap::new();
        for ((table, _), (rows, bytes)) in partitions {
            let t = tables.entry(table).or_default();
            *t = (t.0 + rows, t.1 + bytes);
        }
        Ok(tables)
    }

    /// The management server this client reaches the cluster through.
    pub fn mgmd(&self) -> &str {
        &self.inner.mgmd
    }

    pub fn layout(&self) -> Arc<ClusterLayout> {
        self.inner.layout.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Fetches the current layout from the management server.
    pub async fn refresh_layout(&self) -> Result<Arc<ClusterLayout>> {
        let layout = match self.mgm(MgmRequest::GetLayout).await? {
            MgmResponse::Layout(l) => Arc::new(l),
            other => return Err(unexpected("GetLayout", other)),
        };
        let router = Router::for_domain(&layout, self.inner.opts.location_domain.as_deref());
        *self.inner.router.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(router);
        *self.inner.layout.write().unwrap_or_else(|p| p.into_inner()) = layout.clone();
        Ok(layout)
    }

    async fn mgm(&self, request: MgmRequest) -> Result<MgmResponse> {
        let mut guard = self.inner.mgm.lock().await;
        for attempt in 0..2 {
            if guard.is_none() {
                *guard = Some(
                    RpcConn::connect(&self.inner.mgmd, self.inner.opts.connect_timeout, self.inner.opts.tls.as_deref())
                        .await?,
                );
            }
            let conn = guard.as_mut().expect("connected above");
            match conn.call::<_, MgmResponse>(&request).await {
                Err(e) if e.code == latsdb_types::ErrorCode::NodeUnavailable && attempt == 0 => *guard = None,
                // The answer may still come: on this connection it would
                // be taken for the next request's, so the connection goes.
                Err(e) if e.code == latsdb_types::ErrorCode::Timeout => {
                    *guard = None;
                    return Err(e);
                }
                other => return other,
            }
        }
        unreachable!("the loop returns on its second attempt")
    }

    pub async fn create_table(&self, spec: TableSpec) -> Result<Arc<Table>> {
        self.table_answer("CreateTable", MgmRequest::CreateTable(spec)).await
    }

    pub async fn drop_table(&self, database: &str, name: &str) -> Result<()> {
        let request = MgmRequest::DropTable { database: database.into(), name: name.into() };
        self.inner.tables.remove(&(database.to_string(), name.to_string()));
        match self.mgm(request).await? {
            MgmResponse::Done => Ok(()),
            other => Err(unexpected("DropTable", other)),
        }
    }

    /// Changes whenever a cached table definition is added, replaced or
    /// dropped: something built against cached tables is still current
    /// while this stays the same.
    pub fn tables_generation(&self) -> u64 {
        self.inner.tables.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The table's definition, from the cache or the management server.
    pub async fn table(&self, database: &str, name: &str) -> Result<Arc<Table>> {
        let key = (database.to_string(), name.to_string());
        if let Some(t) = self.inner.tables.get(&key) {
            return Ok(t);
        }
        self.refresh_table(database, name).await
    }

    /// Re-reads a table's definition (after `SchemaVersionMismatch`).
    /// A table that no longer exists under this name (dropped or renamed
    /// elsewhere) leaves the cache, so a table created later under the same
    /// name is found.
    pub async fn refresh_table(&self, database: &str, name: &str) -> Result<Arc<Table>> {
        match self.mgm(MgmRequest::GetTable { database: database.into(), name: name.into() }).await? {
            MgmResponse::Table(def) => Ok(self.cache_table(def)),
            MgmResponse::Error(e) if e.code == ErrorCode::UnknownTable => {
                self.inner.tables.remove(&(database.to_string(), name.to_string()));
                Err(e)
            }
            other => Err(unexpected("GetTable", other)),
        }
    }

    /// The tables of the cluster (without the hidden tables of unique indexes).
    pub async fn list_tables(&self) -> Result<Vec<TableDef>> {
        match self.mgm(MgmRequest::ListTables).await? {
            MgmResponse::Tables(t) => Ok(t.into_iter().filter(|t| !t.is_hidden()).collect()),
            other => Err(unexpected("ListTables", other)),
        }
    }

    /// Creates an ordered index and returns the table's new definition.
    pub async fn create_index(&self, database: &str, table: &str, index: &str, columns: &[&str]) -> Result<Arc<Table>> {
        self.create_index_of_kind(database, table, index, columns, false).await
    }

    pub(crate) async fn create_index_of_kind(
        &self,
        database: &str,
        table: &str,
        index: &str,
        columns: &[&str],
        unique: bool,
    ) -> Result<Arc<Table>> {
        let request = MgmRequest::CreateIndex {
            database: database.into(),
            table: table.into(),
            index: index.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            unique,
        };
        self.table_answer("CreateIndex", request).await
    }

    pub async fn drop_index(&self, database: &str, table: &str, index: &str) -> Result<Arc<Table>> {
        let request = MgmRequest::DropIndex { database: database.into(), table: table.into(), index: index.into() };
        self.table_answer("DropIndex", request).await
    }

    /// Appends columns to a table and returns its new definition. Rows
    /// already stored are not rewritten: their new columns read as `fill`
    /// (one value per column, typically each column's default).
    pub async fn add_columns(
        &self,
        database: &str,
        table: &str,
        columns: Vec<ColumnDef>,
        fill: Vec<Value>,
    ) -> Result<Arc<Table>> {
        let request = MgmRequest::AddColumns { database: database.into(), table: table.into(), columns, fill };
        self.table_answer("AddColumns", request).await
    }

    /// Renames columns or changes their defaults. Stored rows are not
    /// touched; other clients holding the old definition are told to
    /// refresh it (`SchemaVersionMismatch`).
    pub async fn change_columns(
        &self,
        database: &str,
        table: &str,
        changes: Vec<latsdb_types::schema::ColumnChange>,
    ) -> Result<Arc<Table>> {
        let request = MgmRequest::ChangeColumns { database: database.into(), table: table.into(), changes };
        self.table_answer("ChangeColumns", request).await
    }

    /// Gives a table a new name (and possibly database). Clients that look
    /// it up by its old name get `UnknownTable` once they refresh it.
    pub async fn rename_table(
        &self,
        database: &str,
        table: &str,
        new_database: &str,
        new_name: &str,
    ) -> Result<Arc<Table>> {
        let request = MgmRequest::RenameTable {
            database: database.into(),
            table: table.into(),
            new_database: new_database.into(),
            new_name: new_name.into(),
        };
        let renamed = self.table_answer("RenameTable", request).await;
        self.inner.tables.remove(&(database.to_string(), table.to_string()));
        renamed
    }

    /// Sends a schema request the management server answers with the
    /// table's (new) definition, and caches that.
    /// Begins a copying ALTER TABLE (see `MgmRequest::CopyTableBegin`):
    /// makes the table's copy with the definition `spec` and `indexes`,
    /// and has every data node refuse writes to the table until the copy
    /// ends. Returns the table and its (empty) copy. The copy belongs to
    /// this client's connection to the management server. Refused with
    /// `SchemaVersionMismatch` if `table` is not the current definition.
    pub async fn copy_table_begin(
        &self,
        table: &Table,
        spec: TableSpec,
        indexes: Vec<latsdb_types::schema::IndexSpec>,
    ) -> Result<(Arc<Table>, Arc<Table>)> {
        let def = table.def();
        let (database, table, version) = (def.database.clone(), def.name.clone(), def.version);
        let request = MgmRequest::CopyTableBegin { database, table, version, spec, indexes };
        match self.mgm(request).await? {
            MgmResponse::Tables(tables) => match <[TableDef; 2]>::try_from(tables) {
                Ok([old, copy]) => Ok((self.cache_table(old), self.cache_table(copy))),
                Err(tables) => Err(DbError::internal(format!("CopyTableBegin answered {} tables", tables.len()))),
            },
            other => Err(unexpected("CopyTableBegin", other)),
        }
    }

    /// The copy holds every row: it takes the table's name, and the table
    /// is dropped. Returns the new definition.
    pub async fn copy_table_finish(&self, table: latsdb_types::schema::TableId) -> Result<Arc<Table>> {
        self.table_answer("CopyTableFinish", MgmRequest::CopyTableFinish { table }).await
    }

    /// Gives the copy up: it is dropped and the table takes writes again.
    pub async fn copy_table_abort(&self, table: latsdb_types::schema::TableId) -> Result<()> {
        match self.mgm(MgmRequest::CopyTableAbort { table }).await? {
            MgmResponse::Done => Ok(()),
            other => Err(unexpected("CopyTableAbort", other)),
        }
    }

    async fn table_answer(&self, what: &str, request: MgmRequest) -> Result<Arc<Table>> {
        match self.mgm(request).await? {
            MgmResponse::Table(def) => Ok(self.cache_table(def)),
            other => Err(unexpected(what, other)),
        }
    }

    fn cache_table(&self, def: TableDef) -> Arc<Table> {
        let key = (def.database.clone(), def.name.clone());
        let table = Table::new(def);
        self.inner.tables.insert(key, table.clone());
        table
    }

    /// The replica position the committed reads of the next call prefer:
    /// the next in turn, unless its nodes have clearly more of this
    /// client's requests in flight than another position's. A node that
    /// stops answering for a while (its CPU taken by something else) then
    /// gets no new reads until it catches up, instead of every other batch;
    /// healthy nodes keep alternating (always taking the least loaded one
    /// sent runs of batches to one node and cost 6% of peak reads).
    pub(crate) fn next_read_replica(&self, router: &Router) -> usize {
        const MAX_REPLICAS: usize = 4;
        let turn = self.inner.read_rotation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let replicas = router.replicas().min(MAX_REPLICAS);
        // A client of a location domain takes turns over its domain's
        // replicas (`read_replica_of` counts `turn` over them): a position
        // below `replicas` would favour the first of two local nodes of
        // three.
        if replicas <= 1 || router.has_local() {
            return turn;
        }
        let mut load = [0usize; MAX_REPLICAS];
        for (addr, conn) in self.inner.conns.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if let Some(p) = router.replica_position(addr.node).filter(|&p| p < replicas) {
                load[p] += conn.in_flight();
            }
        }
        choose_replica(&load[..replicas], turn)
    }

    pub(crate) fn router(&self) -> Arc<Router> {
        self.inner.router.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The shard a scan page of `partition` goes to: in this client's
    /// location domain if one is named and holds the partition
    /// (`Router::scan_replica_of`), else the partition's primary.
    fn scan_route(&self, partition: u32) -> Result<ShardAddr> {
        self.router().scan_replica_of(partition).ok_or_else(|| no_replica(partition))
    }

    /// The shard to coordinate a transaction whose first operation is on
    /// `partition`: in this client's location domain if one is named
    /// (`Router::coordinator_of`), else the partition's primary.
    pub(crate) fn coordinator_for(&self, partition: u32) -> Result<ShardAddr> {
        self.router().coordinator_of(partition).ok_or_else(|| no_replica(partition))
    }

    async fn shard_conn(&self, shard: ShardAddr) -> Result<Arc<ShardConn>> {
        if let Some(c) = self.inner.conns.lock().unwrap_or_else(|p| p.into_inner()).get(&shard) {
            if c.is_alive() {
                return Ok(c.clone());
            }
        }
        let _guard = self.inner.connecting.lock().await;
        if let Some(c) = self.inner.conns.lock().unwrap_or_else(|p| p.into_inner()).get(&shard) {
            if c.is_alive() {
                return Ok(c.clone());
            }
        }
        let address = self.layout().shard_address(shard).map(|s| s.to_string()).ok_or_else(|| {
            DbError::new(
                latsdb_types::ErrorCode::NodeUnavailable,
                format!("shard {shard} is not in the cluster layout"),
            )
        })?;
        let conn = ShardConn::open(shard, &address, &self.inner.opts).await?;
        self.inner.conns.lock().unwrap_or_else(|p| p.into_inner()).insert(shard, conn.clone());
        Ok(conn)
    }

    /// Sends a request without waiting; `finish` waits for its answer.
    pub(crate) async fn start<T: serde::Serialize>(
        &self,
        shard: ShardAddr,
        request: &T,
    ) -> Result<oneshot::Receiver<Result<Reply>>> {
        let sent = self.shard_conn(shard).await?.send(request, false)?;
        self.inner.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(sent)
    }

    /// Like `start`, for an answer the caller decodes (`finish_raw`).
    pub(crate) async fn start_raw<T: serde::Serialize>(
        &self,
        shard: ShardAddr,
        request: &T,
    ) -> Result<oneshot::Receiver<Result<Reply>>> {
        let sent = self.shard_conn(shard).await?.send(request, true)?;
        self.inner.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(sent)
    }

    /// The answer to a request; a request unanswered for the request
    /// timeout fails with `Timeout` (the connection's sweeper enforces it).
    pub(crate) async fn finish(&self, rx: oneshot::Receiver<Result<Reply>>) -> Result<ClientResponse> {
        self.finish_raw(rx).await?.decoded()
    }

    /// The answer to a request sent with `start_raw`: the frame's body.
    pub(crate) async fn finish_raw(&self, rx: oneshot::Receiver<Result<Reply>>) -> Result<Reply> {
        match rx.await {
            Ok(r) => r,
            Err(_) => {
                Err(DbError::new(latsdb_types::ErrorCode::NodeUnavailable, "the connection to the data node closed"))
            }
        }
    }

    pub(crate) async fn call(&self, shard: ShardAddr, request: &ClientRequest) -> Result<ClientResponse> {
        let rx = self.start(shard, request).await?;
        self.finish(rx).await
    }

    /// Round trip to every shard (a liveness check).
    /// Waits until every commit `shard` acknowledged so far is durable;
    /// returns the durable epoch.
    pub(crate) async fn await_durable(&self, shard: ShardAddr) -> Result<latsdb_types::proto::CommitEpoch> {
        match self.call(shard, &ClientRequest::WaitDurable).await {
            Ok(ClientResponse::Durable(epoch)) => Ok(epoch),
            Ok(ClientResponse::Error(e)) => Err(e),
            Ok(other) => Err(DbError::internal(format!("a durability wait was answered with {other:?}"))),
            Err(e) => Err(DbError::new(
                e.code,
                format!(
                    "the commit was applied in memory, but whether it became durable is unknown ({}); read it back to check",
                    e.message
                ),
            )),
        }
    }

    pub async fn ping(&self) -> Result<()> {
        let layout = self.layout();
        for node in &layout.datanodes {
            for shard in 0..node.shards.len() {
                let addr = ShardAddr { node: node.node_id, shard: shard as u16 };
                match self.call(addr, &ClientRequest::Ping).await? {
                    ClientResponse::Pong => {}
                    other => return Err(DbError::internal(format!("shard {addr} answered a ping with {other:?}"))),
                }
            }
        }
        Ok(())
    }

    /// Starts a transaction; it runs at a coordinator chosen by its first operation.
    pub fn transaction(&self) -> Transaction {
        Transaction::new(self.clone())
    }

    /// Reads one row by primary key (read-committed).
    pub async fn get(&self, table: &Arc<Table>, key: &[Value]) -> Result<Option<Row>> {
        let op = Op::read(table, key)?;
        match self.batch(vec![op]).await?.pop() {
            Some(Ok(Outcome::Row(row))) => Ok(Some(row)),
            Some(Ok(_)) => Ok(None),
            Some(Err(e)) => Err(e),
            None => Err(DbError::internal("a batch of one operation returned no result")),
        }
    }
}

pub(crate) fn route_with(router: &Router, partition: u32) -> Result<ShardAddr> {
    router.primary_of(partition).ok_or_else(|| no_replica(partition))
}

/// The error of a request for `partition` when no started node holds it.
pub(crate) fn no_replica(partition: u32) -> DbError {
    DbError::new(
        latsdb_types::ErrorCode::NodeUnavailable,
        format!("no started data node holds partition {partition}; retry later"),
    )
}

/// Position `turn` (modulo the positions), unless it has more than half
/// again plus one requests in flight than the least loaded position: then
/// that one.
fn choose_replica(load: &[usize], turn: usize) -> usize {
    let in_turn = turn % load.len();
    let least = (0..load.len()).map(|i| (turn + i) % load.len()).min_by_key(|&p| load[p]).unwrap_or(in_turn);
    if load[in_turn] > load[least] + 1 + load[least] / 2 {
        least
    } else {
        in_turn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rotate_over_replicas_and_avoid_one_with_a_backlog() {
        // Healthy nodes alternate, even when their loads differ a little.
        for load in [[0, 0], [2, 2], [20, 18], [1, 0]] {
            assert_eq!((0..4).map(|t| choose_replica(&load, t)).collect::<Vec<_>>(), [0, 1, 0, 1], "{load:?}");
        }
        // A node whose requests pile up gets none until it catches up.
        assert_eq!((0..4).map(|t| choose_replica(&[2, 0], t)).collect::<Vec<_>>(), [1, 1, 1, 1]);
        assert_eq!((0..4).map(|t| choose_replica(&[9, 40], t)).collect::<Vec<_>>(), [0, 0, 0, 0]);
        assert_eq!(choose_replica(&[5, 0, 1], 0), 1);
        assert_eq!(choose_replica(&[5, 1, 0], 0), 2);
    }
}
