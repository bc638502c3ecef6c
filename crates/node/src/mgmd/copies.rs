//! Copying ALTER TABLE, as the management server runs it (MySQL's
//! ALGORITHM=COPY, NDB's offline ALTER): for the changes that rewrite every
//! row (a column's type, position, NOT NULL, collation or storage).
//!
//! 1. `begin_copy`: the hidden table `copy_table_name(id)` is created with
//!    the new definition and indexes; then every data node refuses writes
//!    to the table (`SchemaChange::Fence`), and the server waits until no
//!    transaction holds a write to it that it staged before. From then on
//!    the table's rows cannot change.
//! 2. The client that asked (the SQL node) reads every row and writes it,
//!    converted, into the copy.
//! 3. `finish_copy`: the table steps aside (renamed), the copy takes its
//!    name, and the old table is dropped.
//!
//! A copy belongs to the connection that began it: when that connection
//! closes first, or the client gives up (`abort_copy`), the copy is
//! dropped and writes are let in again. Data nodes learn the fenced tables
//! again whenever their command link is made (`send_fences`), so a node
//! that restarts during a copy refuses the writes too, and a server that
//! restarted (and forgot its copies) lets them in.

use super::{Mgmd, State};
use latsdb_types::proto::{MgmRequest, MgmResponse, NodeCommand, SchemaChange, Severity};
use latsdb_types::schema::{copy_table_name, IndexSpec, TableDef, TableId, TableSpec, COPY_TABLE_PREFIX};
use latsdb_types::{DbError, ErrorCode, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a copy waits for transactions holding writes to its table
/// (less than a client's wait for the management server's answer).
const DRAIN_WAIT: Duration = Duration::from_secs(3);

/// How often it asks the data nodes meanwhile.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// The foreign keys of `old` for its copy `copy`, their columns found by
/// name. A key whose column the copy names otherwise (a renamed column) is
/// left out here; the SQL node that copied sets the keys right afterwards
/// (`settle_foreign_keys`), and refuses to copy without a column a key reads.
fn carried_foreign_keys(old: &TableDef, copy: &TableDef) -> Vec<latsdb_types::schema::ForeignKeyDef> {
    let mut keys = Vec::with_capacity(old.foreign_keys.len());
    for key in &old.foreign_keys {
        let columns: Option<Vec<_>> =
            key.columns.iter().map(|&c| copy.column_id(&old.columns[c as usize].name).ok()).collect();
        if let Some(columns) = columns {
            keys.push(latsdb_types::schema::ForeignKeyDef { columns, ..key.clone() });
        }
    }
    keys
}

/// The name a copied table steps aside to while its copy takes its name.
fn retired_table_name(table: TableId) -> String {
    format!("{COPY_TABLE_PREFIX}{table}$old")
}

impl Mgmd {
    /// Step 1: the copy made and the table's writes fenced (answered with
    /// the table and its copy). `version` is the table's version the
    /// client planned the copy against.
    pub(super) async fn begin_copy(
        &self,
        database: &str,
        table: &str,
        version: u32,
        spec: TableSpec,
        indexes: Vec<IndexSpec>,
    ) -> Result<MgmResponse> {
        let _guard = self.schema_lock.lock().await;
        self.refuse_schema_change_now()?;
        let old = self.find_table(database, table)?;
        if old.version != version {
            return Err(DbError::new(
                ErrorCode::SchemaVersionMismatch,
                format!(
                    "table {} changed since the ALTER TABLE read it; run the ALTER TABLE again",
                    old.qualified_name()
                ),
            ));
        }
        if self.lock().copies.contains(&old.id) {
            return Err(DbError::bad_request(format!(
                "an ALTER TABLE already copies table {}; wait until it ends",
                old.qualified_name()
            )));
        }
        self.drop_leftover_copies().await?;
        let copy = self.create_copy(&old, spec, &indexes).await?;
        self.lock().copies.insert(old.id);
        if let Err(e) = self.fence_until_drained().await {
            self.lock().copies.remove(&old.id);
            let _ = self.apply_fences().await;
            let _ = self.drop_with_unique_tables(&copy).await;
            return Err(e);
        }
        self.event(Severity::Info, format!("ALTER TABLE copies table {}; its writes wait", old.qualified_name()));
        Ok(MgmResponse::Tables(vec![old, copy]))
    }

    /// Drops the copies and replaced tables that earlier ALTER TABLEs left
    /// behind (their server stopped midway, or a drop failed): every table
    /// named as a copy whose table no ALTER TABLE copies now.
    async fn drop_leftover_copies(&self) -> Result<()> {
        let leftovers: Vec<TableDef> = {
            let state = self.lock();
            let in_use =
                |name: &str| state.copies.iter().any(|t| name == copy_table_name(*t) || name == retired_table_name(*t));
            state.tables.iter().filter(|t| t.name.starts_with(COPY_TABLE_PREFIX) && !in_use(&t.name)).cloned().collect()
        };
        for table in &leftovers {
            self.drop_with_unique_tables(table).await?;
        }
        Ok(())
    }

    /// Creates the copy of `old` with the definition `spec` and `indexes`,
    /// checked under the table's own name first, so that a refusal names
    /// the table the user altered.
    async fn create_copy(&self, old: &TableDef, spec: TableSpec, indexes: &[IndexSpec]) -> Result<TableDef> {
        let spec =
            TableSpec { database: old.database.clone(), name: old.name.clone(), partitions: old.partitions, ..spec };
        let mut checked = TableDef::from_spec(&spec, old.id, old.partitions)?;
        for index in indexes {
            checked = checked.with_index(&index.name, &index.columns, index.unique)?;
        }
        let copy = self.create_table(TableSpec { name: copy_table_name(old.id), ..spec }).await?;
        match self.add_indexes(copy.clone(), indexes).await {
            Ok(copy) => Ok(copy),
            Err(e) => {
                let _ = self.drop_with_unique_tables(&copy).await;
                Err(e)
            }
        }
    }

    /// Step 3: the copy takes the table's name (answered with its
    /// definition); the table goes.
    pub(super) async fn finish_copy(&self, table: TableId) -> Result<MgmResponse> {
        let _guard = self.schema_lock.lock().await;
        self.refuse_schema_change_now()?;
        let (old, copy) = self.copy_of(table)?;
        let mut retired = old.renamed(&old.database, &retired_table_name(table))?;
        // The copy takes the references; the retired table is hidden.
        retired.referenced_by.clear();
        let mut def = copy.renamed(&old.database, &old.name)?;
        def.foreign_keys = carried_foreign_keys(&old, &def);
        def.referenced_by = old.referenced_by.clone();
        self.swap_names(&[(&old, &retired), (&copy, &def)]).await?;
        // The old table stays fenced until it is gone: a write a node
        // took for it meanwhile would be lost with it.
        if let Err(e) = self.drop_with_unique_tables(&retired).await {
            self.event(
                Severity::Warning,
                format!("the table ALTER TABLE replaced ({}) could not be dropped: {}", retired.name, e.message),
            );
            return self.link_references(MgmResponse::Table(def)).await;
        }
        self.lock().copies.remove(&table);
        debug_assert!(!self.lock().copies.contains(&table), "a finished copy still fences its table");
        let _ = self.apply_fences().await;
        self.event(Severity::Info, format!("ALTER TABLE copied table {}", def.qualified_name()));
        self.link_references(MgmResponse::Table(def)).await
    }

    /// Gives tables new definitions (here: names) on every data node, then
    /// in this server's schema at once, kept on disk once: a client that
    /// looks a name up finds the old table or the new one, never neither.
    async fn swap_names(&self, changes: &[(&TableDef, &TableDef)]) -> Result<()> {
        for (done, (before, after)) in changes.iter().enumerate() {
            if let Err(e) = self.apply_everywhere(SchemaChange::AlterTable((*after).clone())).await {
                for (before, _) in &changes[..=done] {
                    let _ = self.apply_everywhere(SchemaChange::AlterTable((*before).clone())).await;
                }
                return Err(e);
            }
            debug_assert_eq!(before.id, after.id, "a rename keeps the table id");
        }
        {
            let mut state = self.lock();
            for (_, after) in changes {
                if let Some(t) = state.tables.iter_mut().find(|t| t.id == after.id) {
                    *t = (*after).clone();
                }
            }
        }
        self.persist()
    }

    /// The copy is abandoned: dropped, and the table's writes let in.
    pub(super) async fn abort_copy(&self, table: TableId) -> Result<MgmResponse> {
        let _guard = self.schema_lock.lock().await;
        let (old, copy) = self.copy_of(table)?;
        self.lock().copies.remove(&table);
        let fences = self.apply_fences().await;
        let dropped = self.drop_with_unique_tables(&copy).await;
        self.event(Severity::Info, format!("ALTER TABLE stopped copying table {}", old.qualified_name()));
        fences.and(dropped).map(|()| MgmResponse::Done)
    }

    /// The table under copy `table` and its copy.
    fn copy_of(&self, table: TableId) -> Result<(TableDef, TableDef)> {
        let state = self.lock();
        let missing = || {
            DbError::bad_request(format!(
                "no ALTER TABLE copies table id {table}: it was given up (its connection to the management server closed, or the server restarted); run the ALTER TABLE again"
            ))
        };
        if !state.copies.contains(&table) {
            return Err(missing());
        }
        let old = state.tables.iter().find(|t| t.id == table).cloned().ok_or_else(missing)?;
        let name = copy_table_name(table);
        let copy = state.tables.iter().find(|t| t.database == old.database && t.name == name).cloned();
        Ok((old, copy.ok_or_else(missing)?))
    }

    /// Refuses a schema change of a table an ALTER TABLE copies: the copy
    /// would not have it.
    pub(super) fn refuse_while_copied(&self, database: &str, table: &str) -> Result<()> {
        let state = self.lock();
        let copied = state.tables.iter().find(|t| t.database == database && t.name == table);
        match copied {
            Some(t) if state.copies.contains(&t.id) => Err(DbError::new(
                ErrorCode::TableAltering,
                format!("an ALTER TABLE copies table {}; change it once that ends", t.qualified_name()),
            )),
            _ => Ok(()),
        }
    }

    /// Tells every data node which tables are fenced, and asks again while
    /// a transaction still holds a write to one of them. Two rounds in a
    /// row must find none: shards answer at different moments, and a
    /// backup asked before a write's prepare reached it while its primary,
    /// asked later, had committed it would both answer none; by the next
    /// round the backup holds that write until it applies it.
    async fn fence_until_drained(&self) -> Result<()> {
        let started = Instant::now();
        let mut clean = 0;
        while clean < 2 {
            self.refuse_unlinked_nodes()?;
            match self.apply_fences().await {
                Ok(()) => clean += 1,
                Err(e) if e.code == ErrorCode::TableAltering && started.elapsed() < DRAIN_WAIT => {
                    clean = 0;
                    tokio::time::sleep(DRAIN_POLL).await;
                }
                Err(e) if e.code == ErrorCode::TableAltering => {
                    return Err(DbError::new(
                        ErrorCode::LockWaitTimeout,
                        format!(
                            "transactions that wrote the table did not end within {DRAIN_WAIT:?} ({}); end them and run the ALTER TABLE again",
                            e.message
                        ),
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A data node that takes writes but has no command link would not
    /// learn of the fence.
    fn refuse_unlinked_nodes(&self) -> Result<()> {
        let state = self.lock();
        let writers = state.layout.datanodes.iter().filter(|d| d.status != latsdb_types::proto::NodeStatus::NotStarted);
        match writers.map(|d| d.node_id).find(|n| !state.links.contains_key(n)) {
            Some(node) => Err(DbError::new(
                ErrorCode::NodeUnavailable,
                format!("data node {node} runs but is not connected to the management server, so its writes cannot be fenced; retry the ALTER TABLE once it is"),
            )),
            None => Ok(()),
        }
    }

    /// Sends the fenced tables to every data node (its answer says whether
    /// writes to them are still open).
    async fn apply_fences(&self) -> Result<()> {
        let fenced: Vec<TableId> = self.lock().copies.iter().copied().collect();
        self.apply_everywhere(SchemaChange::Fence(fenced)).await
    }

    async fn drop_with_unique_tables(&self, def: &TableDef) -> Result<()> {
        self.drop_table(def).await?;
        for index in def.unique_indexes() {
            self.drop_unique_table(def, index).await?;
        }
        Ok(())
    }

    /// Adds indexes to a new table (a unique one with its hidden table,
    /// which is empty as the table is).
    async fn add_indexes(&self, mut def: TableDef, indexes: &[IndexSpec]) -> Result<TableDef> {
        for index in indexes {
            let with = def.with_index(&index.name, &index.columns, index.unique)?;
            if index.unique {
                self.create_table(with.unique_table_spec(with.index(&index.name)?)).await?;
            }
            def = self.alter(with).await?;
        }
        Ok(def)
    }
}

/// Queues the fenced tables on a data node's new command link, ahead of
/// anything else sent on it (a node that starts or connects again during a
/// copy must refuse its writes too; one that connects to a restarted
/// server, which forgot its copies, lets them in again).
pub(super) fn send_fences(state: &State, commands: &tokio::sync::mpsc::UnboundedSender<super::Command>) {
    let fenced: Vec<TableId> = state.copies.iter().copied().collect();
    let (tx, _rx) = oneshot::channel();
    let _ = commands.send((NodeCommand::ApplySchema(SchemaChange::Fence(fenced)), tx));
}

/// What a request on a client's connection does to the copies it owns.
pub(super) enum CopyStep {
    Begin,
    End(TableId),
    Other,
}

impl CopyStep {
    pub(super) fn of(request: &MgmRequest) -> CopyStep {
        match request {
            MgmRequest::CopyTableBegin { .. } => CopyStep::Begin,
            MgmRequest::CopyTableFinish { table } | MgmRequest::CopyTableAbort { table } => CopyStep::End(*table),
            _ => CopyStep::Other,
        }
    }
}

/// The copies a client's connection began and has not ended: abandoned
/// when the connection closes (dropped with it).
pub(super) struct CopyOwner {
    mgmd: Arc<Mgmd>,
    tables: Vec<TableId>,
}

impl CopyOwner {
    pub(super) fn new(mgmd: Arc<Mgmd>) -> CopyOwner {
        CopyOwner { mgmd, tables: Vec::new() }
    }

    /// Notes a copy begun or ended by the request just answered.
    pub(super) fn follow(&mut self, step: CopyStep, response: &MgmResponse) {
        match (step, response) {
            (CopyStep::Begin, MgmResponse::Tables(tables)) => {
                let table = tables.first().map(|t| t.id);
                debug_assert!(table.is_some(), "a begun copy is answered with its table");
                self.tables.extend(table);
            }
            // A failed finish or abort leaves the copy this connection's.
            (CopyStep::End(_), MgmResponse::Error(_)) => {}
            (CopyStep::End(table), _) => self.tables.retain(|t| *t != table),
            _ => {}
        }
    }
}

impl Drop for CopyOwner {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        for table in std::mem::take(&mut self.tables) {
            let mgmd = self.mgmd.clone();
            runtime.spawn(async move {
                if let Err(e) = mgmd.abort_copy(table).await {
                    log_abandoned(table, &e);
                }
            });
        }
    }
}

fn log_abandoned(table: TableId, e: &DbError) {
    crate::log("mgmd", format!("the copy of table id {table} whose client left could not be dropped: {}", e.message));
}
