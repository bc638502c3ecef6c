//! `latsdb mgm backup ...` (online backups, run by the management server)
//! and `latsdb restore` (loads a backup into a running cluster of any
//! shape through the native client).

use clap::{Args, Subcommand};
use latsdb_client::{Client, Op, Table};
use latsdb_net::RpcConn;
use latsdb_node::backup::{read_checked, read_manifest, shard_rows, Manifest, MANIFEST_FILE};
use latsdb_types::meta::TableMeta;
use latsdb_types::proto::{BackupInfo, BackupState, CommitEpoch, MgmRequest, MgmResponse};
use latsdb_types::schema::{ColumnChange, TableDef, TableId, TableSpec};
use latsdb_types::{ErrorCode, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The database of the SQL and REST nodes' metadata; a restore merges its
/// tables into the target's instead of creating them.
const SYSTEM_DATABASE: &str = "latsdb_system";
/// Its table of auto-increment counters, keyed by table id.
const AUTOINC_TABLE: &str = "sql_auto_increment";
/// Its table of the SQL node's databases.
const DATABASES_TABLE: &str = "sql_databases";

#[derive(Subcommand)]
pub enum BackupAction {
    /// Take an online backup: consistent at one durable epoch across all
    /// data nodes while writes go on; each data node writes its part under
    /// its data folder (backups/BACKUP-<id>/datanode-<n>/).
    Start {
        /// Return at once instead of showing progress until it finishes.
        #[arg(long)]
        no_wait: bool,
    },
    /// A backup's state and progress (the newest without an id).
    Status { id: Option<u64> },
    /// Every backup this management server has run.
    List,
    /// Stop a running backup; the data nodes delete what they wrote of it.
    Abort { id: u64 },
}

fn one(response: MgmResponse) -> Result<BackupInfo, String> {
    match response {
        MgmResponse::Backups(mut list) if list.len() == 1 => Ok(list.remove(0)),
        other => Err(format!("unexpected answer {other:?}")),
    }
}

pub async fn run_backup(conn: &mut RpcConn, action: BackupAction) -> Result<(), String> {
    let call = |r: latsdb_types::Result<MgmResponse>| crate::mgm::answer(r);
    match action {
        BackupAction::Start { no_wait } => {
            let info = one(call(conn.call(&MgmRequest::BackupStart).await)?)?;
            println!("backup {} started", info.id);
            if no_wait {
                return Ok(());
            }
            wait_for(conn, info.id).await
        }
        BackupAction::Status { id } => {
            let info = one(call(conn.call(&MgmRequest::BackupStatus { id }).await)?)?;
            print!("{}", describe(&info));
            Ok(())
        }
        BackupAction::List => match call(conn.call(&MgmRequest::BackupList).await)? {
            MgmResponse::Backups(list) => {
                if list.is_empty() {
                    println!("no backup has been taken");
                }
                for info in list {
                    print!("{}", describe(&info));
                }
                Ok(())
            }
            other => Err(format!("unexpected answer {other:?}")),
        },
        BackupAction::Abort { id } => {
            call(conn.call(&MgmRequest::BackupAbort { id }).await)?;
            println!("backup {id}: abort requested");
            wait_for(conn, id).await
        }
    }
}

/// Shows a backup's progress until it ends; an error unless it completed.
async fn wait_for(conn: &mut RpcConn, id: u64) -> Result<(), String> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("backup {msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(id.to_string());
    loop {
        let info = one(crate::mgm::answer(conn.call(&MgmRequest::BackupStatus { id: Some(id) }).await)?)?;
        bar.set_length(info.parts.iter().map(|p| p.total_bytes).sum());
        bar.set_position(info.parts.iter().map(|p| p.bytes).sum());
        if info.state != BackupState::Running {
            bar.finish_and_clear();
            print!("{}", describe(&info));
            return match info.state {
                BackupState::Completed => Ok(()),
                _ => Err(format!("backup {id} did not complete")),
            };
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A backup as `status`, `list` and a finished `start` show it.
fn describe(info: &BackupInfo) -> String {
    let state = match &info.state {
        BackupState::Running => "running".to_string(),
        BackupState::Completed => "completed".to_string(),
        BackupState::Failed(why) => format!("failed: {why}"),
        BackupState::Aborted => "aborted".to_string(),
    };
    let bytes: u64 = info.parts.iter().map(|p| p.bytes).sum();
    let seconds = info.finished_unix_ms.saturating_sub(info.started_unix_ms) as f64 / 1000.0;
    let mut out = format!("backup {}: {state}; epoch {}; {:.1} MB", info.id, info.epoch, bytes as f64 / 1e6);
    if info.finished_unix_ms > 0 {
        out.push_str(&format!(" in {seconds:.1} s"));
    }
    out.push('\n');
    for p in &info.parts {
        out.push_str(&format!(
            "  data node {} {}:{}{}\n",
            p.node_id,
            p.host,
            p.dir,
            if p.done { "" } else { " (unfinished)" }
        ));
    }
    out
}

#[derive(Args)]
pub struct RestoreArgs {
    /// Address of the management server of the cluster to load into.
    #[arg(long, env = "LATSDB_MGMD", default_value = crate::DEFAULT_MGMD)]
    mgmd: String,
    #[command(flatten)]
    tls: crate::TlsArgs,
    /// A backup folder: BACKUP-<id> (its datanode-<n> folders are read),
    /// or one data node's part. Repeat for parts on several hosts; every
    /// partition must be in one of them.
    #[arg(long = "backup", required = true)]
    backups: Vec<PathBuf>,
    /// Restore only these tables (database.table, comma-separated).
    #[arg(long, value_delimiter = ',')]
    tables: Vec<String>,
    /// Restore only the tables of these databases (comma-separated).
    #[arg(long, value_delimiter = ',')]
    databases: Vec<String>,
    /// Write batches in flight at once.
    #[arg(long, default_value_t = 8)]
    parallel: usize,
}

/// One data node's part of a backup, as found on disk.
struct Part {
    dir: PathBuf,
    manifest: Manifest,
}

/// The node parts under the given folders.
fn find_parts(folders: &[PathBuf]) -> Result<Vec<Part>, String> {
    let mut dirs = Vec::new();
    for folder in folders {
        if folder.join(MANIFEST_FILE).exists() {
            dirs.push(folder.clone());
            continue;
        }
        let entries = std::fs::read_dir(folder).map_err(|e| format!("cannot read {}: {e}", folder.display()))?;
        let mut found: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.join(MANIFEST_FILE).exists()).collect();
        if found.is_empty() {
            return Err(format!(
                "{} holds no backup manifest (expected BACKUP-<id>/datanode-<n>/{MANIFEST_FILE}); a backup that did not complete has none",
                folder.display()
            ));
        }
        found.sort();
        dirs.extend(found);
    }
    let mut parts: Vec<Part> = Vec::new();
    for dir in dirs {
        let manifest = read_manifest(&dir).map_err(|e| e.message)?;
        if let Some(first) = parts.first() {
            if (first.manifest.backup_id, first.manifest.epoch) != (manifest.backup_id, manifest.epoch)
                || first.manifest.tables != manifest.tables
            {
                return Err(format!(
                    "{} is part of backup {} (epoch {}), {} of backup {} (epoch {}): give the parts of one backup",
                    dir.display(),
                    manifest.backup_id,
                    manifest.epoch,
                    first.dir.display(),
                    first.manifest.backup_id,
                    first.manifest.epoch
                ));
            }
        }
        // Two copies of one node's part are both kept: the plan takes the
        // first intact one.
        parts.push(Part { dir, manifest });
    }
    parts.sort_by_key(|p| p.manifest.node_id);
    Ok(parts)
}

/// Checks what a restore relies on in a table definition read from a
/// manifest (column ids in range, row parts in order), so a damaged one
/// is refused rather than crashing the restore.
fn check_def(def: &TableDef) -> Result<(), String> {
    let n = def.columns.len();
    let in_range = |c: &u16| (*c as usize) < n;
    let parts_ok = def.added_parts.windows(2).all(|w| w[0].first_column < w[1].first_column)
        && def.added_parts.iter().all(|p| in_range(&p.first_column) && p.first_column > 0);
    if n == 0
        || def.partitions == 0
        || def.primary_key.is_empty()
        || !def.primary_key.iter().all(in_range)
        || !def.indexes.iter().all(|i| i.columns.iter().all(in_range))
        || !parts_ok
    {
        return Err(format!(
            "the backup's definition of table {} is damaged (column numbers out of range); the manifest cannot be used",
            def.qualified_name()
        ));
    }
    Ok(())
}

/// The tables to restore: user tables the filters name (all without
/// filters), plus the system tables, never the hidden ones.
fn chosen_tables(all: &[TableDef], tables: &[String], databases: &[String]) -> Result<Vec<TableDef>, String> {
    for name in tables {
        match all.iter().find(|t| t.qualified_name() == *name) {
            None => return Err(format!("the backup has no table {name} (give database.table)")),
            Some(t) if t.is_hidden() => {
                return Err(format!("{name} is the hidden table of a unique index; restore its table instead"))
            }
            Some(_) => {}
        }
    }
    for db in databases {
        if !all.iter().any(|t| t.database == *db) {
            return Err(format!("the backup has no table in database {db}"));
        }
    }
    for def in all {
        check_def(def)?;
    }
    let filtered = !tables.is_empty() || !databases.is_empty();
    Ok(all
        .iter()
        .filter(|t| !t.is_hidden())
        .filter(|t| {
            t.database == SYSTEM_DATABASE
                || !filtered
                || tables.contains(&t.qualified_name())
                || databases.contains(&t.database)
        })
        .cloned()
        .collect())
}

/// For each node part and shard, the partitions to take from it: each
/// partition of a chosen table from the first part that holds it.
type Plan = Vec<(usize, usize, HashSet<(TableId, u32)>)>;

fn plan(parts: &[Part], tables: &[TableDef], intact: &HashSet<(usize, usize)>) -> Result<Plan, String> {
    let mut taken: HashMap<(TableId, u32), (usize, usize)> = HashMap::new();
    for (pi, part) in parts.iter().enumerate() {
        for (si, shard) in part.manifest.shards.iter().enumerate() {
            if !intact.contains(&(pi, si)) {
                continue;
            }
            for key in &shard.partitions {
                taken.entry(*key).or_insert((pi, si));
            }
        }
    }
    let mut plan: BTreeMap<(usize, usize), HashSet<(TableId, u32)>> = BTreeMap::new();
    for t in tables {
        for p in 0..t.partitions {
            let Some(&at) = taken.get(&(t.id, p)) else {
                let nodes: Vec<u16> = parts.iter().map(|p| p.manifest.node_id).collect();
                return Err(format!(
                    "the backup is incomplete: partition {p} of table {} is in none of the parts given (data nodes {nodes:?}); give the part of every data node (or of one per node group)",
                    t.qualified_name()
                ));
            };
            plan.entry(at).or_default().insert((t.id, p));
        }
    }
    Ok(plan.into_iter().map(|((pi, si), wanted)| (pi, si, wanted)).collect())
}

/// A plan whose every shard's files are intact: shards found damaged
/// are left out and the plan made again. Returns it with what was wrong
/// with the shards left out.
fn checked_plan(parts: &[Part], tables: &[TableDef]) -> Result<(Plan, Vec<String>), String> {
    let mut intact: HashSet<(usize, usize)> =
        parts.iter().enumerate().flat_map(|(pi, p)| (0..p.manifest.shards.len()).map(move |si| (pi, si))).collect();
    let mut checked = HashSet::new();
    let mut damaged = Vec::new();
    loop {
        let plan = plan(parts, tables, &intact).map_err(|e| match damaged.is_empty() {
            true => e,
            false => format!("{e}\n{}", damaged.join("\n")),
        })?;
        let mut all_intact = true;
        for (pi, si, _) in &plan {
            if !checked.insert((*pi, *si)) {
                continue;
            }
            let shard = &parts[*pi].manifest.shards[*si];
            let verified = shard
                .checkpoint
                .iter()
                .chain([&shard.redo])
                .try_for_each(|f| read_checked(&parts[*pi].dir, f).map(drop));
            if let Err(e) = verified {
                intact.remove(&(*pi, *si));
                damaged.push(e.message);
                all_intact = false;
            }
        }
        if all_intact {
            return Ok((plan, damaged));
        }
    }
}

/// The spec that creates a table like `def` (indexes come after; the new
/// cluster chooses the partition count for its shape).
fn spec_of(def: &TableDef) -> TableSpec {
    let mut spec = TableSpec::new(def.database.clone(), def.name.clone());
    spec.columns = def.columns.clone();
    spec.primary_key = def.primary_key.iter().map(|&c| def.columns[c as usize].name.clone()).collect();
    spec
}

/// Creates the chosen tables and their indexes in the target cluster;
/// system tables that exist there already are used as they are.
async fn create_tables(client: &Client, tables: &[TableDef]) -> Result<HashMap<TableId, Arc<Table>>, String> {
    // Every name is checked before the first table is created, so a
    // refused restore leaves the target as it was.
    for def in tables.iter().filter(|t| t.database != SYSTEM_DATABASE) {
        match client.table(&def.database, &def.name).await {
            Ok(_) => {
                return Err(format!(
                    "table {} already exists in the target cluster; restore into an empty cluster, drop the table, or leave it out with --tables",
                    def.qualified_name()
                ))
            }
            Err(e) if e.code == ErrorCode::UnknownTable => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let mut created = HashMap::new();
    for def in tables {
        let system = def.database == SYSTEM_DATABASE;
        let table = match client.table(&def.database, &def.name).await {
            Ok(t) if system => t,
            Ok(_) => {
                return Err(format!(
                    "table {} already exists in the target cluster; restore into an empty cluster, drop the table, or leave it out with --tables",
                    def.qualified_name()
                ))
            }
            Err(e) if e.code == ErrorCode::UnknownTable => {
                let mut table = client.create_table(spec_of(def)).await.map_err(|e| e.to_string())?;
                for index in def.visible_indexes().filter(|i| i.id != 0) {
                    let columns: Vec<&str> = index.columns.iter().map(|&c| def.columns[c as usize].name.as_str()).collect();
                    table = match index.unique {
                        true => client.create_unique_index(&def.database, &def.name, &index.name, &columns).await,
                        false => client.create_index(&def.database, &def.name, &index.name, &columns).await,
                    }
                    .map_err(|e| format!("creating index {} of {}: {e}", index.name, def.qualified_name()))?;
                }
                table
            }
            Err(e) => return Err(e.to_string()),
        };
        created.insert(def.id, table);
    }
    // The keys last: the columns kept their ids (`spec_of`), and each key
    // gives its parent a new version, so every table is read again after.
    for def in tables.iter().filter(|t| !t.foreign_keys.is_empty() && created.contains_key(&t.id)) {
        let keys = def.foreign_keys.iter().cloned().map(ColumnChange::AddForeignKey).collect();
        client
            .change_columns(&def.database, &def.name, keys)
            .await
            .map_err(|e| format!("creating the foreign keys of {}: {e}", def.qualified_name()))?;
    }
    if tables.iter().any(|t| !t.foreign_keys.is_empty()) {
        for table in created.values_mut() {
            let (database, name) = (table.def().database.clone(), table.def().name.clone());
            *table = client.refresh_table(&database, &name).await.map_err(|e| e.to_string())?;
        }
    }
    Ok(created)
}

pub async fn run_restore(args: RestoreArgs) -> Result<(), String> {
    let began = Instant::now();
    let parts = find_parts(&args.backups)?;
    let first = &parts[0].manifest;
    let (backup_id, epoch) = (first.backup_id, CommitEpoch(first.epoch));
    let tables = chosen_tables(&first.tables, &args.tables, &args.databases)?;
    let nodes: Vec<u16> = parts.iter().map(|p| p.manifest.node_id).collect();
    println!("backup {backup_id}: epoch {epoch}, parts of data nodes {nodes:?}, {} table(s)", tables.len());
    // The files restored from are checked before the target cluster is
    // touched; a damaged shard's partitions come from another replica.
    let (plan, damaged) = checked_plan(&parts, &tables)?;
    for why in &damaged {
        eprintln!("warning: {why} (its partitions come from another replica's part)");
    }
    println!("checksums verified");
    let client = Client::connect_with(&args.mgmd, args.tls.client_options()?)
        .await
        .map_err(|e| format!("{}; is the cluster running at {}? (set --mgmd or LATSDB_MGMD)", e.message, args.mgmd))?;
    let created = create_tables(&client, &tables).await?;
    let metas: HashMap<TableId, TableMeta> = tables.iter().map(|t| (t.id, TableMeta::new(t.clone()))).collect();
    let new_ids: HashMap<u64, u64> = created.iter().map(|(old, t)| (*old as u64, t.def().id as u64)).collect();
    let databases: HashSet<String> =
        tables.iter().filter(|t| t.database != SYSTEM_DATABASE).map(|t| t.database.clone()).collect();
    let bar = indicatif::ProgressBar::new(plan.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("restore {bar:30} {pos}/{len} shards {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let loader = Loader {
        client: &client,
        created: &created,
        metas: &metas,
        new_ids: &new_ids,
        filtered: !args.tables.is_empty() || !args.databases.is_empty(),
        databases: &databases,
    };
    // The next shard is replayed on a blocking thread while the rows of
    // the one before are written.
    let parts = Arc::new(parts);
    let replay = |(pi, si, wanted): (usize, usize, HashSet<(TableId, u32)>)| {
        let parts = parts.clone();
        tokio::task::spawn_blocking(move || {
            let part = &parts[pi];
            shard_rows(&part.dir, &part.manifest.shards[si], epoch, &wanted).map_err(|e| e.message)
        })
    };
    let mut plan = plan.into_iter();
    let mut next = plan.next().map(replay);
    let mut rows = 0u64;
    while let Some(replaying) = next.take() {
        let found = replaying.await.map_err(|e| format!("a replay task failed: {e}"))??;
        next = plan.next().map(replay);
        rows += loader.load(found, args.parallel.max(1)).await?;
        bar.set_message(format!("{rows} rows"));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let seconds = began.elapsed().as_secs_f64();
    println!(
        "restored backup {backup_id} (epoch {epoch}): {rows} rows of {} table(s) in {seconds:.1} s ({:.0} rows/s)",
        tables.len(),
        rows as f64 / seconds.max(1e-9)
    );
    Ok(())
}

/// Writes restored rows into the target cluster.
struct Loader<'a> {
    client: &'a Client,
    created: &'a HashMap<TableId, Arc<Table>>,
    metas: &'a HashMap<TableId, TableMeta>,
    /// Old table id -> new, for the auto-increment counters.
    new_ids: &'a HashMap<u64, u64>,
    /// `--tables`/`--databases` chose the tables: of the system tables
    /// only the counters and database entries of those tables are merged.
    filtered: bool,
    databases: &'a HashSet<String>,
}

/// Rows written per batch.
const BATCH: usize = 256;

impl Loader<'_> {
    /// Inserts the rows (system tables' rows are merged), `parallel`
    /// batches at once; returns how many were written.
    async fn load(&self, rows: latsdb_node::backup::ShardRows, parallel: usize) -> Result<u64, String> {
        let mut count = 0u64;
        let mut rows = rows.into_iter();
        let mut running = tokio::task::JoinSet::new();
        loop {
            // Decoded a batch at a time: the rows stay bytes until written.
            let mut batch = Vec::with_capacity(BATCH);
            for ((table, _, _), row) in rows.by_ref() {
                if let Some(op) = self.op(table, &row)? {
                    batch.push(op);
                    if batch.len() == BATCH {
                        break;
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            count += batch.len() as u64;
            if running.len() >= parallel {
                finished(running.join_next().await)?;
            }
            let client = self.client.clone();
            running.spawn(async move { write_batch(&client, batch).await });
        }
        while let Some(done) = running.join_next().await {
            finished(Some(done))?;
        }
        Ok(count)
    }

    /// The write of one restored row (None: the row is left out).
    fn op(&self, table: TableId, row: &[u8]) -> Result<Option<Op>, String> {
        let (Some(meta), Some(target)) = (self.metas.get(&table), self.created.get(&table)) else { return Ok(None) };
        let def = &meta.def;
        meta.layout.validate(row).map_err(|e| {
            format!(
                "a row of table {} in the backup does not match its definition: {}",
                def.qualified_name(),
                e.message
            )
        })?;
        let mut values = meta.layout.decode(row);
        if def.database != SYSTEM_DATABASE {
            return Op::insert(target, values).map(Some).map_err(|e| e.to_string());
        }
        // A system table of another shape in the target (another version
        // of latsdb) is left as it is.
        if !target.def().columns.iter().map(|c| &c.name).eq(def.columns.iter().map(|c| &c.name)) {
            return Ok(None);
        }
        match def.name.as_str() {
            AUTOINC_TABLE => {
                // Counters are keyed by table id, which the target renumbers;
                // the counter of a table not restored is left out.
                let Some(Value::UInt(old)) = values.first() else { return Ok(None) };
                let Some(&new) = self.new_ids.get(old) else { return Ok(None) };
                values[0] = Value::UInt(new);
            }
            DATABASES_TABLE if self.filtered => {
                let restored = matches!(values.first(), Some(Value::Str(db)) if self.databases.contains(db));
                if !restored {
                    return Ok(None);
                }
            }
            _ if self.filtered => return Ok(None),
            _ => {}
        }
        Op::upsert(target, values).map(Some).map_err(|e| e.to_string())
    }
}

async fn write_batch(client: &Client, batch: Vec<Op>) -> Result<(), String> {
    for result in client.batch(batch).await.map_err(|e| e.to_string())? {
        result.map_err(|e| match e.code {
            ErrorCode::DuplicateKey => format!("{e}: the target table is not empty; restore into empty tables"),
            _ => e.to_string(),
        })?;
    }
    Ok(())
}

fn finished(done: Option<Result<Result<(), String>, tokio::task::JoinError>>) -> Result<(), String> {
    match done {
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(format!("a restore task failed: {e}")),
        None => Ok(()),
    }
}
