//! A client session: current database, autocommit and the open
//! transaction, session variables, and the execution of every statement
//! kind. The protocol layer (`conn`) turns the answers into packets.

use crate::catalog;
use crate::dml::{self, AutoIncrement, InsertPlan, WritePlan};
use crate::error::{SqlError, SqlResult};
use crate::eval::{to_text, Env, SessionLookup, SessionValue};
use crate::exec::{run_select, Ctx};
use crate::plan::{plan_select, Catalog, SelectPlan, SourceKind};
pub use crate::shared::Shared;
use latsdb_client::{Op, Table, Transaction};
use latsdb_types::proto::LockMode;
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth};
use latsdb_types::{Collation, Value};
use sqlparser::ast::{self, Statement};
use std::collections::HashMap;
use std::sync::Arc;

pub const SERVER_VERSION: &str = "8.0.36-latsdb";
pub const SYSTEM_DATABASE: &str = "latsdb_system";
pub(crate) const DATABASES_TABLE: &str = "sql_databases";

/// Column metadata of a result set.
#[derive(Clone, Debug)]
pub struct ResultColumn {
    pub name: String,
    pub org_name: String,
    pub table: String,
    pub org_table: String,
    pub db: String,
    /// The declared type when the column shows a table column unchanged.
    pub ty: Option<ColumnType>,
    pub nullable: bool,
    pub primary: bool,
    pub auto_increment: bool,
    /// The column's text collation and whether COLLATE named it; None when
    /// it has none of its own (a literal's), so that in a set operation the
    /// other branches' decides how its text compares.
    pub collation: Option<(Collation, bool)>,
    /// A computed column's DECIMAL scale by its type (a table column's is
    /// in `ty`): a set operation shows the other branches' integers with it.
    pub decimal_scale: Option<u8>,
    /// The places a computed DOUBLE shows (`Binder::double_decimals`).
    pub double_decimals: Option<u8>,
    /// The digits of a second a DATETIME or TIMESTAMP table column shows
    /// (its declared ones, all of them, as MySQL: `.500` in a DATETIME(3));
    /// None: as the value has them (six when it has a fraction).
    pub fraction_digits: Option<u8>,
}

impl ResultColumn {
    pub fn computed(name: &str) -> Self {
        ResultColumn {
            name: name.to_string(),
            org_name: String::new(),
            table: String::new(),
            org_table: String::new(),
            db: String::new(),
            ty: None,
            nullable: true,
            primary: false,
            auto_increment: false,
            collation: None,
            decimal_scale: None,
            double_decimals: None,
            fraction_digits: None,
        }
    }
    pub fn typed(name: &str, ty: ColumnType) -> Self {
        ResultColumn { ty: Some(ty), ..Self::computed(name) }
    }
}

#[derive(Debug)]
pub enum Response {
    Ok { affected: u64, last_insert_id: u64, info: String },
    Rows { columns: Vec<ResultColumn>, rows: Vec<Vec<Value>> },
}

impl Response {
    pub fn ok() -> Response {
        Response::Ok { affected: 0, last_insert_id: 0, info: String::new() }
    }
    fn affected(n: u64) -> Response {
        Response::Ok { affected: n, last_insert_id: 0, info: String::new() }
    }
}

/// A statement planned once and kept by a prepared statement.
#[derive(Clone, Debug)]
pub enum Planned {
    Select(Arc<SelectPlan>),
    Insert(Arc<InsertPlan>),
    Update(Arc<WritePlan>),
    Delete(Arc<WritePlan>),
}

/// A prepared statement's plan and the client's table generation it was
/// last known current at.
#[derive(Clone, Debug, Default)]
pub struct CachedPlan {
    pub plan: Option<Planned>,
    pub generation: u64,
}

enum TxState {
    None,
    Open(Transaction),
    /// The transaction failed and was rolled back by the cluster; the
    /// client must end it (ROLLBACK, or COMMIT which reports the error).
    Failed(SqlError),
}

pub struct Session {
    pub shared: Arc<Shared>,
    pub db: Option<String>,
    pub user: String,
    pub connection_id: u32,
    pub autocommit: bool,
    /// BEGIN was given (or autocommit is off and a statement ran).
    pub in_transaction: bool,
    tx: TxState,
    pub last_insert_id: u64,
    pub row_count: i64,
    pub found_rows: u64,
    vars: HashMap<String, Value>,
    pub warnings: Vec<(&'static str, u16, String)>,
    /// How many warnings and errors the statement before this one left.
    previous_warnings: (usize, usize),
    /// SET SESSION TRANSACTION READ ONLY.
    read_only_session: bool,
    /// START TRANSACTION READ ONLY (this transaction only).
    read_only_tx: bool,
    /// Keys the open transaction wrote (its scans overlay them).
    written: crate::exec::WrittenKeys,
    /// The client asked for CLIENT_FOUND_ROWS: UPDATE counts matched rows.
    pub found_rows_flag: bool,
    /// The TLS cipher suite of the connection, if it uses TLS.
    pub tls_cipher: Option<String>,
    /// Rows of the derived tables of the statement being run, by the name
    /// that stands for them.
    derived: HashMap<String, Arc<crate::plan::VirtualTable>>,
    next_derived: u64,
    /// Savepoints of the open transaction, oldest first, with the length
    /// of `undo` when each was set.
    savepoints: Vec<(String, usize)>,
    /// Writes that undo the transaction's writes since its first savepoint.
    undo: Vec<Op>,
    /// Statements of SQL-level PREPARE, by lowercase name.
    pub(crate) sql_prepared: crate::prepared::SqlPreparedStatements,
    /// When the running statement began (µs since the Unix epoch): NOW(),
    /// CURDATE() and the clock columns it fills all read this one time, as
    /// in MySQL.
    statement_time: i64,
}

pub struct NoSession;
impl SessionLookup for NoSession {
    fn session_value(&self, v: &SessionValue) -> SqlResult<Value> {
        Err(SqlError::general(format!("internal: {v:?} asked outside a session")))
    }
}

/// What expressions see of the session (a copy, so the session itself can
/// be borrowed for the transaction meanwhile).
pub(crate) struct SessionView<'a> {
    db: Option<&'a str>,
    user: &'a str,
    connection_id: u32,
    last_insert_id: u64,
    row_count: i64,
    found_rows: u64,
    autocommit: bool,
    read_only: bool,
    vars: &'a HashMap<String, Value>,
    /// Warnings and errors of the previous statement (@@warning_count).
    warning_count: usize,
    error_count: usize,
    statement_time: i64,
}

pub fn default_variable(name: &str) -> Option<Value> {
    let s = |v: &str| Some(Value::Str(v.to_string()));
    let i = |v: i64| Some(Value::Int(v));
    match name {
        "version" => s(SERVER_VERSION),
        "version_comment" => s("latsdb"),
        "version_compile_os" => s("Linux"),
        "version_compile_machine" => s("x86_64"),
        "sql_mode" => s("STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION"),
        "character_set_client"
        | "character_set_connection"
        | "character_set_results"
        | "character_set_server"
        | "character_set_database"
        | "character_set_system" => s("utf8mb4"),
        "collation_connection" | "collation_server" | "collation_database" => s("utf8mb4_bin"),
        "transaction_isolation" | "tx_isolation" => s("READ-COMMITTED"),
        "transaction_read_only" | "tx_read_only" | "read_only" => i(0),
        "max_allowed_packet" => i(64 << 20),
        "net_buffer_length" => i(16384),
        "net_write_timeout" => i(60),
        "net_read_timeout" => i(30),
        "wait_timeout" | "interactive_timeout" => i(28800),
        "lower_case_table_names" => i(0),
        "auto_increment_increment" | "auto_increment_offset" => i(1),
        "time_zone" => s("SYSTEM"),
        "system_time_zone" => s("UTC"),
        "license" => s("Apache-2.0"),
        "init_connect" => s(""),
        "performance_schema" => i(0),
        "query_cache_size" => i(0),
        "query_cache_type" => s("OFF"),
        "have_ssl" | "have_openssl" => s("DISABLED"),
        "default_storage_engine" | "storage_engine" => s("ndbcluster"),
        "innodb_lock_wait_timeout" | "lock_wait_timeout" => i(2),
        "max_connections" => i(4096),
        "port" => i(3306),
        "hostname" => s("localhost"),
        "sql_select_limit" => Some(Value::UInt(u64::MAX)),
        "sql_auto_is_null" | "sql_safe_updates" | "unique_checks" => i(0),
        "foreign_key_checks" => i(1),
        // Set and restored by mysqldump's and Hopsworks' schema files.
        "sql_notes" | "sql_quote_show_create" => i(1),
        "sql_warnings" => i(0),
        "warning_count" | "error_count" => i(0),
        "default_authentication_plugin" => s(crate::auth::NATIVE),
        "session_track_schema" | "session_track_state_change" => s("OFF"),
        "explicit_defaults_for_timestamp" => i(1),
        "div_precision_increment" => i(4),
        "group_concat_max_len" => i(1024),
        "cte_max_recursion_depth" => i(1000),
        "last_insert_id" | "identity" => i(0),
        "server_id" => i(1),
        "protocol_version" => i(10),
        _ => None,
    }
}

impl SessionLookup for SessionView<'_> {
    fn session_value(&self, v: &SessionValue) -> SqlResult<Value> {
        Ok(match v {
            SessionValue::Database => self.db.map(|d| Value::Str(d.to_string())).unwrap_or(Value::Null),
            SessionValue::User => Value::Str(format!("{}@localhost", self.user)),
            SessionValue::ConnectionId => Value::Int(self.connection_id as i64),
            SessionValue::LastInsertId => Value::UInt(self.last_insert_id),
            SessionValue::RowCount => Value::Int(self.row_count),
            SessionValue::FoundRows => Value::UInt(self.found_rows),
            SessionValue::Now(digits) => Value::DateTime(to_digits(self.statement_time, *digits)),
            SessionValue::SysDate(digits) => Value::DateTime(to_digits(now_micros(), *digits)),
            SessionValue::CurDate => Value::Date(self.statement_time.div_euclid(86_400_000_000) as i32),
            SessionValue::Variable(name) => {
                if name.starts_with('@') {
                    return Ok(self.vars.get(name).cloned().unwrap_or(Value::Null));
                }
                match name.as_str() {
                    "autocommit" => Value::Int(self.autocommit as i64),
                    "transaction_read_only" | "tx_read_only" => Value::Int(self.read_only as i64),
                    "last_insert_id" | "identity" => Value::UInt(self.last_insert_id),
                    "warning_count" => Value::UInt(self.warning_count as u64),
                    "error_count" => Value::UInt(self.error_count as u64),
                    _ => match self.vars.get(name).cloned().or_else(|| default_variable(name)) {
                        Some(v) => v,
                        None => {
                            return Err(SqlError::new(
                                crate::error::ER_UNKNOWN_SYSTEM_VARIABLE,
                                "HY000",
                                format!("Unknown system variable '{name}'"),
                            ))
                        }
                    },
                }
            }
        })
    }
}

pub(crate) fn now_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// A time cut to `digits` digits of a second (0-6): MySQL's NOW(n)
/// truncates, so a stored clock value is never in the future.
pub(crate) fn to_digits(micros: i64, digits: u8) -> i64 {
    let step = fraction_step(digits);
    micros.div_euclid(step) * step
}

/// Microseconds in the last digit a time with `digits` digits of a second
/// keeps (1 for 6 digits, 1,000,000 for none).
pub(crate) fn fraction_step(digits: u8) -> i64 {
    debug_assert!(digits <= 6, "at most 6 digits of a second: {digits}");
    10i64.pow(6 - u32::from(digits.min(6)))
}

/// Table lookup for the planner, in the session's current database.
pub struct SessionCatalog<'a> {
    pub shared: &'a Shared,
    pub db: Option<&'a str>,
    /// Derived tables of the statement being planned.
    pub derived: &'a HashMap<String, Arc<crate::plan::VirtualTable>>,
}

impl Catalog for SessionCatalog<'_> {
    async fn resolve(&self, db: Option<&str>, name: &str) -> SqlResult<(String, SourceKind)> {
        if let Some(v) = db.is_none().then(|| self.derived.get(name)).flatten() {
            return Ok((String::new(), SourceKind::Virtual(v.clone())));
        }
        if db.is_none() && name.eq_ignore_ascii_case("dual") {
            // SELECT ... FROM DUAL: one row, no columns, no database needed.
            let v = crate::plan::VirtualTable { columns: Vec::new(), rows: vec![Vec::new()] };
            return Ok((String::new(), SourceKind::Virtual(Arc::new(v))));
        }
        let db = match db.or(self.db) {
            Some(d) => d.to_string(),
            None => return Err(SqlError::no_db()),
        };
        if db.eq_ignore_ascii_case("information_schema") {
            let v = catalog::information_schema(self.shared, name).await?;
            return Ok(("information_schema".into(), SourceKind::Virtual(Arc::new(v))));
        }
        let t = self.shared.table(&db, name).await?;
        Ok((db, SourceKind::Stored(t)))
    }
}

impl Session {
    pub fn new(shared: Arc<Shared>, user: String, connection_id: u32) -> Session {
        Session {
            shared,
            db: None,
            user,
            connection_id,
            autocommit: true,
            in_transaction: false,
            tx: TxState::None,
            last_insert_id: 0,
            row_count: -1,
            found_rows: 0,
            vars: HashMap::new(),
            warnings: Vec::new(),
            previous_warnings: (0, 0),
            statement_time: now_micros(),
            read_only_session: false,
            read_only_tx: false,
            written: HashMap::new(),
            found_rows_flag: false,
            tls_cipher: None,
            derived: HashMap::new(),
            next_derived: 0,
            savepoints: Vec::new(),
            undo: Vec::new(),
            sql_prepared: Default::default(),
        }
    }

    fn read_only(&self) -> bool {
        self.read_only_session || self.read_only_tx
    }

    /// Applies transaction modes; other isolation levels than READ
    /// COMMITTED are accepted with a warning (latsdb runs READ COMMITTED).
    fn transaction_modes(&mut self, modes: &[ast::TransactionMode], session_scope: bool) {
        for m in modes {
            match m {
                ast::TransactionMode::AccessMode(a) => {
                    let ro = matches!(a, ast::TransactionAccessMode::ReadOnly);
                    if session_scope {
                        self.read_only_session = ro;
                    } else {
                        self.read_only_tx = ro;
                    }
                }
                ast::TransactionMode::IsolationLevel(
                    ast::TransactionIsolationLevel::ReadCommitted | ast::TransactionIsolationLevel::ReadUncommitted,
                ) => {}
                ast::TransactionMode::IsolationLevel(level) => self.warnings.push((
                    "Warning",
                    crate::error::ER_NOT_SUPPORTED_YET,
                    format!("isolation level {level} is not supported: latsdb runs READ COMMITTED"),
                )),
            }
        }
    }

    pub fn catalog(&self) -> SessionCatalog<'_> {
        SessionCatalog { shared: &self.shared, db: self.db.as_deref(), derived: &self.derived }
    }

    /// Plans what can be planned ahead (queries and writes).
    pub async fn plan(&self, stmt: &Statement) -> SqlResult<Option<Planned>> {
        let catalog = self.catalog();
        Ok(Some(match stmt {
            Statement::Query(q) => {
                let plan = plan_select(&catalog, q).await?;
                // Known before the result's column flags are written.
                for t in plan.sources.iter().filter_map(|s| s.stored()) {
                    self.shared.auto_column(t).await?;
                }
                Planned::Select(Arc::new(plan))
            }
            Statement::Insert(i) => Planned::Insert(Arc::new(dml::plan_insert(&catalog, i).await?)),
            Statement::Update(_) => Planned::Update(Arc::new(dml::plan_write(&catalog, stmt).await?)),
            Statement::Delete(_) => Planned::Delete(Arc::new(dml::plan_write(&catalog, stmt).await?)),
            _ => return Ok(None),
        }))
    }

    /// Runs a statement; `cached` is the prepared statement's plan (made on
    /// first use and kept while the tables are unchanged).
    pub async fn execute(
        &mut self,
        stmt: &Statement,
        params: &[Value],
        cached: Option<&mut CachedPlan>,
    ) -> SqlResult<Response> {
        let shows_warnings = matches!(stmt, Statement::ShowVariable { variable }
            if variable.first().is_some_and(|w| w.value.eq_ignore_ascii_case("warnings") || w.value.eq_ignore_ascii_case("errors")));
        if !shows_warnings {
            let errors = self.warnings.iter().filter(|(level, ..)| *level == "Error").count();
            self.previous_warnings = (self.warnings.len(), errors);
            self.warnings.clear();
        }
        self.statement_time = now_micros();
        let started = std::time::Instant::now();
        let result = self.dispatch(stmt, params, cached).await;
        self.shared.metrics.statement(stmt, started.elapsed().as_micros() as u64, result.is_err());
        match &result {
            Ok(Response::Ok { affected, .. }) => self.row_count = *affected as i64,
            Ok(Response::Rows { rows, .. }) => {
                self.row_count = -1;
                self.found_rows = rows.len() as u64;
            }
            Err(_) => {}
        }
        result
    }

    /// `execute` without the bookkeeping of ROW_COUNT() and FOUND_ROWS().
    async fn dispatch(
        &mut self,
        stmt: &Statement,
        params: &[Value],
        cached: Option<&mut CachedPlan>,
    ) -> SqlResult<Response> {
        if let Statement::Insert(insert) = stmt {
            // INSERT INTO t WITH ... SELECT: the CTEs first, as for a query.
            if let Some((with, main)) = insert_without_with(insert) {
                return self.execute_with_ctes(&with, Statement::Insert(main), params).await;
            }
        }
        if let Statement::Query(q) = stmt {
            if let Some(with) = &q.with {
                let mut main = q.clone();
                main.with = None;
                return self.execute_with_ctes(with, Statement::Query(main), params).await;
            }
            if crate::union::is_set_operation(q) {
                return self.execute_union(q, params).await;
            }
        }
        // A statement with a cached plan has no subqueries or derived
        // tables (those are planned anew each time, over their results).
        if cached.as_ref().is_none_or(|slot| slot.plan.is_none()) && crate::subquery::has_nested_query(stmt) {
            let subqueries = crate::subquery::outermost(stmt);
            if !subqueries.is_empty() {
                return self.execute_with_subqueries(stmt, params, subqueries).await;
            }
            let derived = crate::subquery::derived_tables(stmt)?;
            if !derived.is_empty() {
                return self.execute_with_derived(stmt, params, derived).await;
            }
        }
        let planned = match cached {
            Some(slot) => {
                // No cached table changed since the plan was checked: no
                // need to look its tables up again.
                let generation = self.shared.client.tables_generation();
                match &slot.plan {
                    Some(p) if slot.generation == generation || self.plan_is_current(p).await => {
                        slot.generation = generation;
                        Some(p.clone())
                    }
                    _ => {
                        let p = self.plan(stmt).await?;
                        *slot = CachedPlan { plan: p.clone(), generation };
                        p
                    }
                }
            }
            None => self.plan(stmt).await?,
        };
        let Some(p) = planned else { return self.run_other(stmt).await };
        let result = self.run_planned(&p, params).await;
        match result {
            Err(e) if e.code == crate::error::ER_GET_TEMPORARY_ERRMSG && self.may_run_again(&p) => {
                self.run_again(&p, params, e).await
            }
            Err(e) if e.code == crate::error::ER_TABLE_DEF_CHANGED || e.code == crate::error::ER_NO_SUCH_TABLE => {
                // Another node changed, renamed or dropped a table of the
                // plan: read the definitions again (a table gone under its
                // name leaves the cache), so the statement plans against
                // what is there now.
                // With the tables their foreign keys read, down every chain
                // (a cascade writes grandchildren too).
                let mut todo: Vec<(String, String)> =
                    tables_of(&p).iter().map(|t| (t.def().database.clone(), t.def().name.clone())).collect();
                let mut seen = std::collections::HashSet::new();
                while let Some((database, name)) = todo.pop() {
                    if seen.len() >= crate::foreign::MAX_RELATED || !seen.insert((database.clone(), name.clone())) {
                        continue;
                    }
                    if let Ok(fresh) = self.shared.client.refresh_table(&database, &name).await {
                        todo.extend(crate::foreign::related_tables(fresh.def()));
                    }
                }
                if self.in_transaction {
                    return Err(e);
                }
                // Alone in its transaction, which was rolled back whole: run
                // it again, once, against the new definitions.
                match self.plan(stmt).await? {
                    Some(p) => self.run_planned(&p, params).await,
                    None => Err(e),
                }
            }
            other => other,
        }
    }

    /// Whether a statement that failed with a temporary error (a data node
    /// failed, the cluster is changing its layout) left nothing behind, so
    /// that running it again applies it once: an autocommit statement (its
    /// transaction was aborted whole, and a commit left unanswered is 1180,
    /// not this), or a committed read inside an open transaction.
    fn may_run_again(&self, p: &Planned) -> bool {
        if !self.in_transaction {
            return true;
        }
        matches!((p, &self.tx), (Planned::Select(s), TxState::Open(_)) if s.lock == LockMode::Committed)
    }

    /// Runs a statement again after a temporary error, as NDB's API users
    /// are told to, so that the client never sees a data node fail: with
    /// the layout read again and a growing pause (50 ms doubling to 1 s), for
    /// at most `RUN_AGAIN_FOR`. The last error is returned past that.
    async fn run_again(&mut self, p: &Planned, params: &[Value], mut error: SqlError) -> SqlResult<Response> {
        debug_assert!(self.may_run_again(p), "only a statement that left nothing behind runs again");
        debug_assert_eq!(error.code, crate::error::ER_GET_TEMPORARY_ERRMSG);
        const RUN_AGAIN_FOR: std::time::Duration = std::time::Duration::from_secs(10);
        let deadline = std::time::Instant::now() + RUN_AGAIN_FOR;
        let mut pause = std::time::Duration::from_millis(50);
        while std::time::Instant::now() + pause < deadline {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_secs(1));
            let _ = self.shared.client.refresh_layout().await;
            match self.run_planned(p, params).await {
                Err(e) if e.code == crate::error::ER_GET_TEMPORARY_ERRMSG && self.may_run_again(p) => error = e,
                other => return other,
            }
        }
        Err(error)
    }

    /// Whether a statement is planned at every execution instead of once
    /// (a CTE, a union, or a statement with subqueries or derived tables).
    pub fn planned_at_execution(stmt: &Statement) -> bool {
        matches!(stmt, Statement::Query(q) if q.with.is_some() || crate::union::is_set_operation(q))
            || matches!(stmt, Statement::Insert(i) if i.source.as_ref().is_some_and(|q| q.with.is_some()))
            || crate::subquery::has_nested_query(stmt)
    }

    /// Runs a query and keeps its rows as a table: a derived table or a
    /// CTE. `names` renames its columns (a CTE's column list).
    async fn materialize(
        &mut self,
        query: ast::Query,
        params: &[Value],
        names: &[String],
    ) -> SqlResult<crate::plan::VirtualTable> {
        let query = Statement::Query(Box::new(query));
        let (columns, rows) = match Box::pin(self.execute(&query, params, None)).await? {
            Response::Rows { columns, rows } => (columns, rows),
            Response::Ok { .. } => {
                return Err(SqlError::new(crate::error::ER_INTERNAL, "HY000", "a derived table returned no result set"))
            }
        };
        if !names.is_empty() && names.len() != columns.len() {
            return Err(SqlError::new(
                1353,
                "HY000",
                format!(
                    "In definition of a common table expression, {} column names are given for {} columns",
                    names.len(),
                    columns.len()
                ),
            ));
        }
        let mut defs: Vec<ColumnDef> = Vec::with_capacity(columns.len());
        for (i, c) in columns.iter().enumerate() {
            let name = names.get(i).unwrap_or(&c.name);
            if defs.iter().any(|d| d.name.eq_ignore_ascii_case(name)) {
                return Err(SqlError::new(1060, "42S21", format!("Duplicate column name '{name}'")));
            }
            // The result keeps an ENUM's or SET's text, not its members.
            let ty = match c.ty {
                Some(ColumnType::Enum | ColumnType::Set) => ColumnType::Text,
                Some(ty) => ty,
                None => column_type_of(&rows, i),
            };
            // A table column's digits of a second go with it (TIME(3)).
            let digits = c.fraction_digits.filter(|_| keeps_fractions(ty)).unwrap_or(0);
            defs.push(ColumnDef::new(name.clone(), ty).fraction_digits(digits));
        }
        Ok(crate::plan::VirtualTable { columns: defs, rows })
    }

    /// A recursive common table expression: the anchor's rows, then the
    /// recursive SELECT run again and again over the rows the previous
    /// round added (visible under the CTE's name) until a round adds none.
    /// UNION DISTINCT adds only rows not seen before. Column names and types
    /// come from the anchor, as in MySQL.
    async fn materialize_recursive(
        &mut self,
        name: &str,
        anchor: ast::Query,
        step: ast::Query,
        all: bool,
        params: &[Value],
        names: &[String],
    ) -> SqlResult<crate::plan::VirtualTable> {
        let max_depth = self
            .variable("cte_max_recursion_depth")
            .and_then(|v| v.as_u64().or_else(|| v.as_i64().and_then(|i| u64::try_from(i).ok())))
            .unwrap_or(1000);
        let first = self.materialize(anchor, params, names).await?;
        let columns = first.columns;
        let mut seen = std::collections::HashSet::new();
        let mut key = String::new();
        let mut fresh = |rows: Vec<Vec<Value>>, seen: &mut std::collections::HashSet<String>| -> Vec<Vec<Value>> {
            if all {
                return rows;
            }
            rows.into_iter()
                .filter(|r| {
                    crate::exec::group_key(r, &mut key);
                    seen.insert(key.clone())
                })
                .collect()
        };
        let mut working = fresh(first.rows, &mut seen);
        let mut rows = working.clone();
        let step = Statement::Query(Box::new(step));
        let mut depth = 0u64;
        while !working.is_empty() {
            depth += 1;
            if depth > max_depth {
                return Err(SqlError::new(
                    3636,
                    "HY000",
                    format!(
                        "Recursive query aborted after {depth} iterations. Try increasing @@cte_max_recursion_depth to a larger value"
                    ),
                ));
            }
            let table = crate::plan::VirtualTable { columns: columns.clone(), rows: std::mem::take(&mut working) };
            let added = match self.execute_over(&step, params, vec![(name.to_string(), table)]).await? {
                Response::Rows { rows, .. } => rows,
                Response::Ok { .. } => {
                    return Err(SqlError::new(
                        crate::error::ER_INTERNAL,
                        "HY000",
                        "a recursive SELECT returned no rows",
                    ))
                }
            };
            if added.first().is_some_and(|r| r.len() != columns.len()) {
                return Err(SqlError::new(
                    1222,
                    "21000",
                    "The used SELECT statements have a different number of columns",
                ));
            }
            working = fresh(added, &mut seen);
            rows.extend(working.iter().cloned());
        }
        Ok(crate::plan::VirtualTable { columns, rows })
    }

    /// Runs a statement with `tables` (name, table) visible by name, then
    /// forgets them.
    async fn execute_over(
        &mut self,
        stmt: &Statement,
        params: &[Value],
        tables: Vec<(String, crate::plan::VirtualTable)>,
    ) -> SqlResult<Response> {
        let mut shadowed = Vec::new();
        for (name, table) in tables {
            shadowed.push((name.clone(), self.derived.insert(name, Arc::new(table))));
        }
        let result = Box::pin(self.execute(stmt, params, None)).await;
        self.restore_tables(shadowed);
        result
    }

    /// Undoes insertions into `derived`, latest first.
    fn restore_tables(&mut self, shadowed: Vec<(String, Option<Arc<crate::plan::VirtualTable>>)>) {
        for (name, before) in shadowed.into_iter().rev() {
            match before {
                Some(t) => self.derived.insert(name, t),
                None => self.derived.remove(&name),
            };
        }
    }

    /// Runs the derived tables of a statement, then the statement over
    /// their rows.
    async fn execute_with_derived(
        &mut self,
        stmt: &Statement,
        params: &[Value],
        derived: Vec<ast::Query>,
    ) -> SqlResult<Response> {
        let mut tables = Vec::with_capacity(derived.len());
        for query in derived {
            let table = self.materialize(query, params, &[]).await?;
            self.next_derived += 1;
            tables.push((format!("latsdb derived table {}", self.next_derived), table));
        }
        let mut stmt = stmt.clone();
        crate::subquery::replace_derived(&mut stmt, tables.iter().map(|(name, _)| name.clone()).collect());
        self.execute_over(&stmt, params, tables).await
    }

    /// WITH a AS (...), b AS (...) SELECT ... (or an INSERT's SELECT): each
    /// common table expression runs in turn (seeing those before it), then
    /// `main`, the statement without its WITH, over them.
    async fn execute_with_ctes(&mut self, with: &ast::With, main: Statement, params: &[Value]) -> SqlResult<Response> {
        let mut shadowed = Vec::new();
        let mut result = Ok(());
        for cte in &with.cte_tables {
            let names: Vec<String> = cte.alias.columns.iter().map(|c| c.name.value.clone()).collect();
            let made = match recursive_parts(with.recursive, &cte.alias.name.value, &cte.query) {
                Some((anchor, step, all)) => {
                    self.materialize_recursive(&cte.alias.name.value, anchor, step, all, params, &names).await
                }
                None => self.materialize(cte.query.as_ref().clone(), params, &names).await,
            };
            match made {
                Ok(table) => {
                    let name = cte.alias.name.value.clone();
                    shadowed.push((name.clone(), self.derived.insert(name, Arc::new(table))));
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let response = match result {
            Ok(()) => Box::pin(self.execute(&main, params, None)).await,
            Err(e) => Err(e),
        };
        self.restore_tables(shadowed);
        response
    }

    /// Runs each SELECT of a set operation, then puts their rows together.
    async fn execute_union(&mut self, q: &ast::Query, params: &[Value]) -> SqlResult<Response> {
        let mut stack: Vec<crate::union::RowSet> = Vec::new();
        for step in crate::union::steps(q)? {
            match step {
                crate::union::Step::Select(select) => {
                    let select = Statement::Query(select);
                    match Box::pin(self.execute(&select, params, None)).await? {
                        Response::Rows { columns, rows } => stack.push((columns, rows)),
                        Response::Ok { .. } => {
                            return Err(SqlError::new(
                                crate::error::ER_INTERNAL,
                                "HY000",
                                "a SELECT of a set operation returned no result set",
                            ))
                        }
                    }
                }
                crate::union::Step::Combine { op, all } => {
                    let (Some(right), Some(left)) = (stack.pop(), stack.pop()) else {
                        return Err(SqlError::general("internal: a set operation is missing an operand"));
                    };
                    stack.push(crate::union::combine(op, all, left, right)?);
                }
            }
        }
        let (Some((columns, mut rows)), true) = (stack.pop(), stack.is_empty()) else {
            return Err(SqlError::general("internal: a set operation left other than one result"));
        };
        let order = crate::union::order(q, &columns)?;
        let view = self.view();
        let (offset, limit) = crate::union::limits(q, &Env { params, session: &view, strict_numbers: false })?;
        crate::union::finish(&mut rows, &columns, &order, offset, limit);
        Ok(Response::Rows { columns, rows })
    }

    /// Runs a statement's uncorrelated subqueries, then the statement with
    /// their results as parameters.
    async fn execute_with_subqueries(
        &mut self,
        stmt: &Statement,
        params: &[Value],
        subqueries: Vec<(crate::subquery::Use, ast::Query)>,
    ) -> SqlResult<Response> {
        let mut results = Vec::with_capacity(subqueries.len());
        for (kind, query) in subqueries {
            // A correlated scalar subquery linked by one equality runs once
            // for all outer values and becomes a CASE over them.
            if kind == crate::subquery::Use::Scalar {
                if let Some(lookup) = crate::subquery::decorrelate_scalar(&query)? {
                    results.push(self.scalar_lookup(lookup, params).await?);
                    continue;
                }
            }
            // A correlated EXISTS of the simple kind runs once, without its
            // link to the outer query, and becomes `outer IN (...)`.
            let (query, outer) = match kind {
                crate::subquery::Use::Exists => match crate::subquery::decorrelate(&query)? {
                    Some((once, outer)) => (once, Some(outer)),
                    None => (query, None),
                },
                _ => (query, None),
            };
            let query = Statement::Query(Box::new(query));
            let (rows, collation) = match Box::pin(self.execute(&query, params, None)).await {
                Ok(Response::Rows { rows, columns }) => (rows, columns.first().and_then(|c| c.collation)),
                Ok(Response::Ok { .. }) => {
                    return Err(SqlError::new(crate::error::ER_INTERNAL, "HY000", "a subquery returned no result set"))
                }
                Err(e) if e.code == 1054 => {
                    return Err(SqlError::unsupported(format!(
                        "{}: a subquery can refer to the outer query only as [NOT] EXISTS (SELECT ... WHERE inner_column = outer_table.column ...) (other correlated subqueries are not supported); use a join",
                        e.message
                    )))
                }
                Err(e) => return Err(e),
            };
            results.push(match outer {
                Some(outer) => {
                    // Each value once, as written (a byte-for-byte equal one
                    // adds nothing to `outer IN (...)`).
                    let mut rows = rows;
                    crate::exec::retain_distinct(&mut rows, &[]);
                    let values = rows.into_iter().filter_map(|r| r.into_iter().next()).collect();
                    crate::subquery::Found::Semi { outer: Box::new(outer), values, collation }
                }
                None => crate::subquery::Found::Rows(kind, rows, collation),
            });
        }
        let mut stmt = stmt.clone();
        let mut all = params.to_vec();
        crate::subquery::replace(&mut stmt, results, &mut all)?;
        Box::pin(self.execute(&stmt, &all, None)).await
    }

    async fn scalar_lookup(
        &mut self,
        lookup: crate::subquery::ScalarLookup,
        params: &[Value],
    ) -> SqlResult<crate::subquery::Found> {
        let rows_of = async |session: &mut Self, q: ast::Query| -> SqlResult<Vec<Vec<Value>>> {
            match Box::pin(session.execute(&Statement::Query(Box::new(q)), params, None)).await? {
                Response::Rows { rows, .. } => Ok(rows),
                _ => Err(SqlError::new(crate::error::ER_INTERNAL, "HY000", "a subquery returned no result set")),
            }
        };
        let rows = rows_of(self, lookup.per_key).await?;
        let mut pairs: Vec<(Value, Value)> = Vec::with_capacity(rows.len());
        let (mut seen, mut key) = (std::collections::HashSet::new(), String::new());
        for row in rows {
            let mut row = row.into_iter();
            let (Some(k), Some(v)) = (row.next(), row.next()) else {
                return Err(SqlError::new(crate::error::ER_INTERNAL, "HY000", "a subquery lookup row lacks a column"));
            };
            // Without an aggregate, a key with two rows is a subquery that
            // returns more than one row for that outer value.
            if !lookup.aggregate && !k.is_null() {
                crate::exec::group_key(std::slice::from_ref(&k), &mut key);
                if !seen.insert(key.clone()) {
                    return Err(SqlError::new(1242, "21000", "Subquery returns more than 1 row"));
                }
            }
            pairs.push((k, v));
        }
        let otherwise = rows_of(self, lookup.empty)
            .await?
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .unwrap_or(Value::Null);
        Ok(crate::subquery::Found::Lookup { outer: Box::new(lookup.outer), pairs, otherwise })
    }

    /// A cached plan is stale when one of its tables changed or was dropped
    /// and created again.
    async fn plan_is_current(&self, p: &Planned) -> bool {
        for t in tables_of(p) {
            match self.shared.client.table(&t.def().database, &t.def().name).await {
                Ok(now) if Arc::ptr_eq(&now, &t) => {}
                _ => return false,
            }
        }
        true
    }

    fn needs_tx(&self, p: &Planned) -> bool {
        match p {
            Planned::Select(s) => self.in_transaction || s.lock != LockMode::Committed,
            _ => true,
        }
    }

    async fn run_planned(&mut self, p: &Planned, params: &[Value]) -> SqlResult<Response> {
        if let TxState::Failed(e) = &self.tx {
            return Err(tx_failed(e));
        }
        if self.read_only() && !matches!(p, Planned::Select(_)) {
            return Err(SqlError::new(1792, "25006", "Cannot execute statement in a READ ONLY transaction."));
        }
        let touches_tables = match p {
            Planned::Select(s) => s.sources.iter().any(|src| src.stored().is_some()),
            _ => true,
        };
        if !self.autocommit && !self.in_transaction && touches_tables {
            self.in_transaction = true;
        }
        let use_tx = self.needs_tx(p);
        let mut tx = match std::mem::replace(&mut self.tx, TxState::None) {
            TxState::Open(t) => Some(t),
            _ if use_tx => Some(self.shared.client.transaction()),
            _ => None,
        };
        // Taken out so the session can be borrowed for its view meanwhile.
        let mut written_keys = std::mem::take(&mut self.written);
        let mut undo_log = std::mem::take(&mut self.undo);
        let view = self.view();
        let written = if self.in_transaction { Some(&mut written_keys) } else { None };
        let undo = if self.in_transaction && !self.savepoints.is_empty() { Some(&mut undo_log) } else { None };
        let mut ctx = Ctx {
            client: &self.shared.client,
            tx: if use_tx { tx.as_mut() } else { None },
            env: Env { params, session: &view, strict_numbers: false },
            written,
            count_matched: self.found_rows_flag,
            undo,
            foreign_key_checks: self.foreign_key_checks(),
        };
        let result: SqlResult<(Response, Option<u64>, dml::Warnings)> = async {
            Ok(match p {
                Planned::Select(s) => {
                    let rows = run_select(s, &mut ctx).await?;
                    (Response::Rows { columns: result_columns_of(s, &self.shared), rows }, None, Vec::new())
                }
                Planned::Insert(i) => {
                    let r = dml::run_insert(i, &mut ctx, self.shared.as_ref()).await?;
                    (
                        Response::Ok {
                            affected: r.affected,
                            last_insert_id: r.last_insert_id.unwrap_or(0),
                            info: String::new(),
                        },
                        r.last_insert_id,
                        r.warnings,
                    )
                }
                Planned::Update(w) => {
                    let a = dml::run_update(w, &mut ctx, false).await?;
                    let affected = if ctx.count_matched { a.matched } else { a.changed };
                    let info = format!("Rows matched: {}  Changed: {}  Warnings: 0", a.matched, a.changed);
                    (Response::Ok { affected, last_insert_id: 0, info }, None, Vec::new())
                }
                Planned::Delete(w) => {
                    (Response::affected(dml::run_update(w, &mut ctx, true).await?.matched), None, Vec::new())
                }
            })
        }
        .await;
        self.written = written_keys;
        self.undo = undo_log;
        match result {
            Ok((response, insert_id, warnings)) => {
                if let Some(id) = insert_id {
                    self.last_insert_id = id;
                }
                self.warnings.extend(warnings.into_iter().map(|(code, message)| ("Warning", code, message)));
                if let Some(mut t) = tx {
                    if self.in_transaction {
                        self.tx = TxState::Open(t);
                    } else if let Err(e) = t.commit_keeping().await {
                        let unknown = t.outcome_unknown() || t.is_committed();
                        return Err(crate::error::after_failure(e.into(), unknown, false));
                    }
                }
                Ok(response)
            }
            Err(mut e) => {
                match tx {
                    // The SQL node refused the statement before the cluster
                    // failed anything (a duplicate key found by the insert's
                    // pre-check, a bad value): as in MySQL only the
                    // statement fails and the transaction goes on.
                    Some(t) if self.in_transaction && !t.is_finished() => self.tx = TxState::Open(t),
                    // A failed operation aborted the cluster transaction.
                    Some(t) => {
                        // (Committed but not answered as durable: it took effect.)
                        let unknown = t.outcome_unknown() || t.is_committed();
                        e = crate::error::after_failure(e, unknown, self.in_transaction);
                        let _ = t.rollback().await;
                        if self.in_transaction {
                            self.tx = TxState::Failed(e.clone());
                        }
                        self.written.clear();
                        self.savepoints.clear();
                        self.undo.clear();
                    }
                    None => {}
                }
                Err(e)
            }
        }
    }

    pub async fn commit(&mut self) -> SqlResult<()> {
        self.in_transaction = false;
        self.read_only_tx = false;
        self.written.clear();
        self.savepoints.clear();
        self.undo.clear();
        match std::mem::replace(&mut self.tx, TxState::None) {
            TxState::None => Ok(()),
            TxState::Open(mut t) => match t.commit_keeping().await {
                Ok(()) => Ok(()),
                Err(e) => Err(crate::error::after_failure(e.into(), t.outcome_unknown() || t.is_committed(), true)),
            },
            TxState::Failed(e) => Err(tx_failed(&e)),
        }
    }

    pub async fn rollback(&mut self) -> SqlResult<()> {
        self.in_transaction = false;
        self.read_only_tx = false;
        self.written.clear();
        self.savepoints.clear();
        self.undo.clear();
        match std::mem::replace(&mut self.tx, TxState::None) {
            TxState::Open(t) => Ok(t.rollback().await?),
            _ => Ok(()),
        }
    }

    /// Position of a savepoint of the open transaction.
    fn savepoint(&self, name: &str) -> SqlResult<usize> {
        self.savepoints
            .iter()
            .position(|(n, _)| n.eq_ignore_ascii_case(name))
            .ok_or_else(|| SqlError::new(1305, "42000", format!("SAVEPOINT {name} does not exist")))
    }

    /// ROLLBACK TO SAVEPOINT: the writes since it are undone, newest first,
    /// inside the transaction (which keeps the row locks they took, as
    /// InnoDB does); the savepoint stays, later ones go.
    async fn rollback_to(&mut self, name: &str) -> SqlResult<()> {
        let at = self.savepoint(name)?;
        let mut undo = self.undo.split_off(self.savepoints[at].1);
        self.savepoints.truncate(at + 1);
        if undo.is_empty() {
            return Ok(());
        }
        undo.reverse();
        match &mut self.tx {
            TxState::Open(t) => match t.execute(undo).await {
                Ok(_) => Ok(()),
                Err(e) => {
                    let e = SqlError::from(e);
                    self.tx = TxState::Failed(e.clone());
                    Err(e)
                }
            },
            TxState::Failed(e) => Err(tx_failed(e)),
            TxState::None => Ok(()),
        }
    }

    async fn begin(&mut self) -> SqlResult<()> {
        // MySQL commits an open transaction on BEGIN.
        if self.in_transaction {
            self.commit().await?;
        }
        self.in_transaction = true;
        Ok(())
    }

    pub(crate) fn view(&self) -> SessionView<'_> {
        SessionView {
            db: self.db.as_deref(),
            user: &self.user,
            connection_id: self.connection_id,
            last_insert_id: self.last_insert_id,
            row_count: self.row_count,
            found_rows: self.found_rows,
            autocommit: self.autocommit,
            read_only: self.read_only(),
            vars: &self.vars,
            warning_count: self.previous_warnings.0,
            error_count: self.previous_warnings.1,
            statement_time: self.statement_time,
        }
    }

    /// Evaluates a constant expression (SET values, SELECT without FROM).
    pub(crate) fn constant(&self, e: &ast::Expr) -> SqlResult<Value> {
        let bound = crate::bind::Binder::new(&[], "field list").bind(e)?;
        let view = self.view();
        bound.eval(&[], &Env { params: &[], session: &view, strict_numbers: false })
    }

    async fn run_other(&mut self, stmt: &Statement) -> SqlResult<Response> {
        match stmt {
            Statement::StartTransaction { modes, .. } => {
                self.begin().await?;
                self.transaction_modes(modes, false);
                Ok(Response::ok())
            }
            Statement::Commit { .. } => {
                self.commit().await?;
                Ok(Response::ok())
            }
            Statement::Rollback { savepoint: None, .. } => {
                self.rollback().await?;
                Ok(Response::ok())
            }
            Statement::Savepoint { name } => {
                // Outside a transaction a savepoint has nothing to keep.
                if self.in_transaction {
                    self.savepoints.retain(|(n, _)| !n.eq_ignore_ascii_case(&name.value));
                    self.savepoints.push((name.value.clone(), self.undo.len()));
                }
                Ok(Response::ok())
            }
            Statement::ReleaseSavepoint { name } => {
                let at = self.savepoint(&name.value)?;
                self.savepoints.truncate(at);
                if self.savepoints.is_empty() {
                    self.undo.clear();
                }
                Ok(Response::ok())
            }
            Statement::Rollback { savepoint: Some(name), .. } => {
                self.rollback_to(&name.value).await?;
                Ok(Response::ok())
            }
            Statement::Set(set) => self.set(set).await,
            Statement::Use(u) => {
                let name = match u {
                    ast::Use::Object(n) | ast::Use::Database(n) | ast::Use::Schema(n) => n.to_string(),
                    _ => return Err(SqlError::parse("USE needs a database name")),
                };
                let name = name.trim_matches('`').to_string();
                if !catalog::database_exists(&self.shared, &name).await? {
                    return Err(SqlError::bad_db(&name));
                }
                self.db = Some(name);
                Ok(Response::ok())
            }
            Statement::LockTables { .. } | Statement::UnlockTables | Statement::Flush { .. } => Ok(Response::ok()),
            Statement::Prepare { name, statement, data_types } if data_types.is_empty() => {
                self.prepare_sql(name, statement)
            }
            Statement::Execute { name: Some(name), parameters, using, immediate: false, into, .. }
                if parameters.is_empty() && into.is_empty() =>
            {
                self.execute_sql(name, using).await
            }
            Statement::Deallocate { name, .. } => self.deallocate_sql(name),
            Statement::Explain { statement, format, analyze, .. } => {
                crate::explain::explain(self, statement, format.as_ref(), *analyze).await
            }
            _ => {
                // DDL and SHOW/DESCRIBE implicitly end a transaction in MySQL.
                if is_ddl(stmt) && self.in_transaction {
                    self.commit().await?;
                }
                let db = self.db.clone();
                catalog::run(self, db.as_deref(), stmt).await
            }
        }
    }

    async fn set(&mut self, set: &ast::Set) -> SqlResult<Response> {
        let assignments: Vec<(String, &ast::Expr)> = match set {
            ast::Set::SingleAssignment { variable, values, .. } => {
                let [value] = values.as_slice() else {
                    return Err(SqlError::parse("SET takes one value per variable"));
                };
                vec![(variable.to_string(), value)]
            }
            ast::Set::MultipleAssignments { assignments } => {
                assignments.iter().map(|a| (a.name.to_string(), &a.value)).collect()
            }
            // SET NAMES: the server speaks utf8mb4 (and its subsets) only.
            ast::Set::SetNames { charset_name, .. } => {
                let cs = charset_name.value.to_ascii_lowercase();
                if !matches!(cs.as_str(), "utf8mb4" | "utf8" | "utf8mb3" | "ascii" | "binary") {
                    return Err(SqlError::new(
                        1115,
                        "42000",
                        format!(
                            "Unknown character set: '{cs}': latsdb speaks utf8mb4 only; connect with charset utf8mb4"
                        ),
                    ));
                }
                return Ok(Response::ok());
            }
            ast::Set::SetNamesDefault {} => return Ok(Response::ok()),
            ast::Set::SetTransaction { modes, session, .. } => {
                // Without SESSION the modes apply to the next transaction;
                // latsdb keeps them for the session either way.
                let _ = session;
                self.transaction_modes(modes, true);
                return Ok(Response::ok());
            }
            ast::Set::SetTimeZone { .. } => return Ok(Response::ok()),
            _ => return Err(SqlError::unsupported(format!("{set} is not supported"))),
        };
        for (name, value) in assignments {
            let lower = name.to_ascii_lowercase();
            let var = lower
                .strip_prefix("@@session.")
                .or_else(|| lower.strip_prefix("@@global."))
                .or_else(|| lower.strip_prefix("@@local."))
                .or_else(|| lower.strip_prefix("@@"))
                .or_else(|| lower.strip_prefix("session."))
                .or_else(|| lower.strip_prefix("global."))
                .unwrap_or(&lower)
                .to_string();
            // ON/OFF and bare words are values, not column names.
            // A variable (`SET @old = @@sql_notes`) is read, not taken as a word.
            let v = match value {
                ast::Expr::Identifier(id) if id.quote_style.is_none() && !id.value.starts_with('@') => {
                    match id.value.to_ascii_uppercase().as_str() {
                        "ON" | "TRUE" => Value::Int(1),
                        "OFF" | "FALSE" => Value::Int(0),
                        "DEFAULT" => default_variable(&var).unwrap_or(Value::Null),
                        other => Value::Str(other.to_string()),
                    }
                }
                e => self.constant(e)?,
            };
            if var.starts_with('@') {
                self.vars.insert(var, v);
                continue;
            }
            match var.as_str() {
                "autocommit" => {
                    let valid = match &v {
                        Value::Int(0 | 1) | Value::UInt(0 | 1) => true,
                        Value::Str(t) => {
                            matches!(t.to_ascii_uppercase().as_str(), "ON" | "OFF" | "0" | "1" | "TRUE" | "FALSE")
                        }
                        _ => false,
                    };
                    if !valid {
                        return Err(SqlError::new(
                            crate::error::ER_WRONG_VALUE_FOR_VAR,
                            "42000",
                            format!("Variable 'autocommit' can't be set to the value of '{}'", to_text(&v)),
                        ));
                    }
                    let v = match &v {
                        Value::Str(t) => {
                            Value::Int(matches!(t.to_ascii_uppercase().as_str(), "ON" | "1" | "TRUE") as i64)
                        }
                        other => other.clone(),
                    };
                    let on = crate::eval::truth(&v).ok_or_else(|| {
                        SqlError::new(
                            crate::error::ER_WRONG_VALUE_FOR_VAR,
                            "42000",
                            "Variable 'autocommit' can't be set to the value of 'NULL'",
                        )
                    })?;
                    if on && !self.autocommit && self.in_transaction {
                        self.commit().await?;
                    }
                    self.autocommit = on;
                }
                "names" | "character set" => {}
                "transaction_read_only" | "tx_read_only" => {
                    self.read_only_session = crate::eval::truth(&v) == Some(true)
                }
                "transaction_isolation" | "tx_isolation" => {
                    let level = to_text(&v).to_ascii_uppercase().replace(['-', '_'], " ");
                    if level != "READ COMMITTED" && level != "READ UNCOMMITTED" {
                        self.warnings.push((
                            "Warning",
                            crate::error::ER_NOT_SUPPORTED_YET,
                            format!("isolation level {level} is not supported: latsdb runs READ COMMITTED"),
                        ));
                    }
                }
                _ => {
                    if default_variable(&var).is_none() && !self.vars.contains_key(&var) {
                        return Err(SqlError::new(
                            crate::error::ER_UNKNOWN_SYSTEM_VARIABLE,
                            "HY000",
                            format!("Unknown system variable '{var}'"),
                        ));
                    }
                    self.vars.insert(var, v);
                }
            }
        }
        Ok(Response::ok())
    }

    /// Whether foreign keys are checked (`SET foreign_key_checks = 0`
    /// turns them off, as schema dumps do while they load).
    pub fn foreign_key_checks(&self) -> bool {
        match self.vars.get("foreign_key_checks") {
            None => true,
            Some(Value::Str(t)) => matches!(t.to_ascii_uppercase().as_str(), "ON" | "1" | "TRUE"),
            Some(v) => crate::eval::truth(v) == Some(true),
        }
    }

    /// Session variables as SHOW VARIABLES lists them.
    pub fn variable(&self, name: &str) -> Option<Value> {
        self.view().session_value(&SessionValue::Variable(name.to_string())).ok()
    }
}

fn tx_failed(e: &SqlError) -> SqlError {
    SqlError::new(
        crate::error::ER_LOCK_DEADLOCK,
        "40001",
        format!("the transaction was rolled back after an earlier error ({}); run ROLLBACK and retry it", e.message),
    )
}

/// The stored tables a plan reads or writes.
fn tables_of(p: &Planned) -> Vec<Arc<Table>> {
    match p {
        Planned::Select(s) => s.sources.iter().filter_map(|s| s.stored().cloned()).collect(),
        Planned::Insert(i) => vec![i.table.clone()],
        Planned::Update(w) | Planned::Delete(w) => vec![w.table.clone()],
    }
}

fn is_ddl(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::CreateTable(_)
            | Statement::CreateIndex(_)
            | Statement::Drop { .. }
            | Statement::AlterTable(_)
            | Statement::Truncate(_)
            | Statement::CreateDatabase { .. }
            | Statement::CreateSchema { .. }
    )
}

/// Result-set columns of a SELECT plan.
/// The type of a computed column of a derived table, from all its values:
/// integers with decimals are DECIMAL, numbers with a float DOUBLE, dates
/// with datetimes DATETIME, and anything else mixed TEXT.
fn column_type_of(rows: &[Vec<Value>], i: usize) -> ColumnType {
    let kind = |v: &Value| match v {
        Value::Int(_) | Value::Bool(_) | Value::Null => ColumnType::int(IntWidth::Big),
        Value::UInt(_) => ColumnType::Integer { width: IntWidth::Big, unsigned: true },
        Value::Float(_) => ColumnType::Double,
        Value::Decimal(d) => ColumnType::Decimal { precision: 38, scale: d.scale },
        Value::Str(_) => ColumnType::Text,
        Value::Bytes(_) => ColumnType::Blob,
        Value::Date(_) => ColumnType::Date,
        Value::DateTime(_) => ColumnType::DateTime,
        Value::Timestamp(_) => ColumnType::Timestamp,
        Value::Time(_) => ColumnType::Time,
    };
    let mut merged: Option<ColumnType> = None;
    for v in rows.iter().filter_map(|r| r.get(i)).filter(|v| !v.is_null()) {
        let k = kind(v);
        merged = Some(match (merged, k) {
            (None, k) => k,
            (Some(m), k) if m == k => m,
            (Some(ColumnType::Decimal { scale: a, .. }), ColumnType::Decimal { scale: b, .. }) => {
                ColumnType::Decimal { precision: 38, scale: a.max(b) }
            }
            (Some(ColumnType::Integer { .. }), ColumnType::Integer { .. }) => {
                ColumnType::Decimal { precision: 38, scale: 0 }
            }
            (Some(ColumnType::Decimal { scale, .. }), ColumnType::Integer { .. })
            | (Some(ColumnType::Integer { .. }), ColumnType::Decimal { scale, .. }) => {
                ColumnType::Decimal { precision: 38, scale }
            }
            (Some(m), k) if is_numeric(m) && is_numeric(k) => ColumnType::Double,
            (Some(m), k) if is_temporal(m) && is_temporal(k) => ColumnType::DateTime,
            (Some(ColumnType::Blob), _) | (_, ColumnType::Blob) => ColumnType::Blob,
            _ => ColumnType::Text,
        });
        if merged == Some(ColumnType::Text) {
            break;
        }
    }
    merged.unwrap_or(ColumnType::int(IntWidth::Big))
}

fn is_numeric(t: ColumnType) -> bool {
    matches!(t, ColumnType::Integer { .. } | ColumnType::Decimal { .. } | ColumnType::Double)
}

/// Types whose columns keep a declared number of digits of a second.
pub(crate) fn keeps_fractions(t: ColumnType) -> bool {
    matches!(t, ColumnType::DateTime | ColumnType::Timestamp | ColumnType::Time)
}

fn is_temporal(t: ColumnType) -> bool {
    matches!(t, ColumnType::Date | ColumnType::DateTime | ColumnType::Timestamp)
}

pub fn result_columns_of(plan: &SelectPlan, shared: &Shared) -> Vec<ResultColumn> {
    let collation_of = |i: usize| plan.output_collations.get(i).copied().flatten();
    plan.outputs
        .iter()
        .enumerate()
        .map(|(i, o)| match o.origin {
            Some((t, c)) => {
                let src = &plan.sources[t];
                let col = &src.scope.columns[c as usize];
                let primary = src.stored().is_some_and(|tb| tb.def().primary_key.contains(&c));
                let auto_increment = src.stored().is_some_and(|tb| shared.cached_auto_column(tb.def().id) == Some(c));
                ResultColumn {
                    name: o.name.clone(),
                    org_name: col.name.clone(),
                    table: src.scope.alias.clone(),
                    org_table: src.scope.name.clone(),
                    db: src.scope.db.clone(),
                    ty: Some(col.ty),
                    nullable: col.nullable,
                    primary,
                    auto_increment,
                    collation: collation_of(i),
                    decimal_scale: None,
                    double_decimals: None,
                    fraction_digits: keeps_fractions(col.ty).then_some(col.fraction_digits),
                }
            }
            None => ResultColumn {
                collation: collation_of(i),
                decimal_scale: o.decimal_scale,
                double_decimals: o.double_decimals,
                fraction_digits: o.fraction_digits,
                ty: o.float.then_some(ColumnType::Float),
                ..ResultColumn::computed(&o.name)
            },
        })
        .collect()
}

/// An INSERT whose SELECT has a WITH: the WITH, and the INSERT without it.
fn insert_without_with(insert: &ast::Insert) -> Option<(ast::With, ast::Insert)> {
    let with = insert.source.as_ref()?.with.clone()?;
    let mut main = insert.clone();
    if let Some(source) = main.source.as_mut() {
        source.with = None;
    }
    Some((with, main))
}

/// The anchor SELECT, the recursive SELECT and UNION ALL (true) or
/// DISTINCT of a common table expression that refers to itself; None when
/// it is not recursive (it then runs once, like any other).
fn recursive_parts(recursive: bool, name: &str, query: &ast::Query) -> Option<(ast::Query, ast::Query, bool)> {
    use ast::{SetExpr, SetOperator, SetQuantifier};
    if !recursive {
        return None;
    }
    let SetExpr::SetOperation { op: SetOperator::Union, set_quantifier, left, right } = query.body.as_ref() else {
        return None;
    };
    let step = crate::union::operand(query, right);
    let mut refers = false;
    let _ = sqlparser::ast::visit_relations(&step, |relation| {
        if relation.0.last().and_then(|p| p.as_ident()).is_some_and(|i| i.value.eq_ignore_ascii_case(name)) {
            refers = true;
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    refers.then(|| (crate::union::operand(query, left), step, matches!(set_quantifier, SetQuantifier::All)))
}
