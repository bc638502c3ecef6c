//! Schema statements: CREATE/DROP DATABASE, CREATE/DROP/TRUNCATE/ALTER
//! TABLE, CREATE/DROP INDEX; the SHOW family and DESCRIBE; and the
//! information_schema tables connectors read.
//!
//! Databases are rows of `latsdb_system.sql_databases` (plus any database
//! that has tables), so every SQL node sees the same ones.

use crate::error::{SqlError, SqlResult};
use crate::eval::to_text;
use crate::plan::{table_name, VirtualTable};
use crate::session::{Response, ResultColumn, Session, Shared, SYSTEM_DATABASE};
use latsdb_client::Op;
use latsdb_types::schema::{
    validate_name, ColumnChange, ColumnDef, ColumnId, ColumnType, IntWidth, Storage, TableDef, TableSpec,
    DROPPED_COLUMN_PREFIX, HIDDEN_KEY_COLUMN,
};
use latsdb_types::{Collation, ErrorCode, Value};
use sqlparser::ast::{self, ColumnOption, DataType, Statement, TableConstraint};

mod alter_copy;
mod foreign_keys;

const DATABASES_TABLE: &str = "sql_databases";

fn text_col(name: &str) -> ColumnDef {
    ColumnDef::new(name, ColumnType::VarChar(255))
}
fn int_col(name: &str) -> ColumnDef {
    ColumnDef::new(name, ColumnType::int(IntWidth::Big))
}

pub async fn databases(shared: &Shared) -> SqlResult<Vec<String>> {
    let mut names: Vec<String> = vec!["information_schema".into()];
    let t = shared.client.table(SYSTEM_DATABASE, DATABASES_TABLE).await?;
    for r in shared.client.scan(&t, latsdb_client::Scan::all()).await? {
        names.push(to_text(&r.get(0)));
    }
    for def in shared.client.list_tables().await? {
        names.push(def.database);
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// The collation a database gives new tables' text: the one CREATE
/// DATABASE named, else the server's default, utf8mb4_bin.
async fn database_collation(shared: &Shared, name: &str) -> SqlResult<Collation> {
    let t = shared.client.table(SYSTEM_DATABASE, DATABASES_TABLE).await?;
    let row = shared.client.get(&t, &[Value::Str(name.to_string())]).await?;
    Ok(match row.and_then(|r| r.get(1).as_str().map(str::to_string)) {
        Some(named) => Collation::named(&named).unwrap_or(Collation::Bin),
        None => Collation::Bin,
    })
}

pub async fn database_exists(shared: &Shared, name: &str) -> SqlResult<bool> {
    Ok(databases(shared).await?.iter().any(|d| d == name))
}

async fn tables_of(shared: &Shared, db: &str) -> SqlResult<Vec<TableDef>> {
    let mut t: Vec<TableDef> = shared.client.list_tables().await?.into_iter().filter(|d| d.database == db).collect();
    t.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(t)
}

fn rows_response(columns: Vec<ColumnDef>, rows: Vec<Vec<Value>>) -> Response {
    Response::Rows { columns: columns.iter().map(|c| ResultColumn::typed(&c.name, c.ty)).collect(), rows }
}

fn like_filter(filter: &Option<ast::ShowStatementFilter>, name: &str) -> bool {
    match filter {
        Some(ast::ShowStatementFilter::Like(p)) | Some(ast::ShowStatementFilter::NoKeyword(p)) => {
            latsdb_types::expr::like(name.to_lowercase().as_bytes(), p.to_lowercase().as_bytes())
        }
        _ => true,
    }
}

fn show_filter(options: &ast::ShowStatementOptions) -> Option<ast::ShowStatementFilter> {
    match &options.filter_position {
        Some(ast::ShowStatementFilterPosition::Infix(f)) | Some(ast::ShowStatementFilterPosition::Suffix(f)) => {
            Some(f.clone())
        }
        None => None,
    }
}

fn show_in(options: &ast::ShowStatementOptions) -> Option<String> {
    options.show_in.as_ref().and_then(|i| i.parent_name.as_ref()).map(|n| n.to_string().trim_matches('`').to_string())
}

pub async fn run(session: &mut Session, db: Option<&str>, stmt: &Statement) -> SqlResult<Response> {
    let shared = session.shared.clone();
    let need_db =
        |d: Option<String>| -> SqlResult<String> { d.or_else(|| db.map(str::to_string)).ok_or_else(SqlError::no_db) };
    match stmt {
        Statement::CreateDatabase { db_name, if_not_exists, .. }
        | Statement::CreateSchema { schema_name: ast::SchemaName::Simple(db_name), if_not_exists, .. } => {
            let name = db_name.to_string().trim_matches('`').to_string();
            validate_name("database", &name)?;
            let collation = match stmt {
                Statement::CreateDatabase { default_collation: Some(c), .. } => Some(collation_named(c)?),
                Statement::CreateDatabase { default_charset: Some(c), .. } => Some(charset_collation(c)?),
                _ => None,
            };
            if database_exists(&shared, &name).await? {
                if *if_not_exists {
                    return Ok(Response::ok());
                }
                return Err(SqlError::new(
                    crate::error::ER_DB_CREATE_EXISTS,
                    "HY000",
                    format!("Can't create database '{name}'; database exists"),
                ));
            }
            let t = shared.client.table(SYSTEM_DATABASE, DATABASES_TABLE).await?;
            let collation = collation.map_or(Value::Null, |c| Value::Str(c.name().into()));
            shared
                .client
                .transaction()
                .execute_commit(vec![Op::upsert(&t, vec![Value::Str(name), collation])?])
                .await?;
            Ok(Response::Ok { affected: 1, last_insert_id: 0, info: String::new() })
        }
        Statement::Drop {
            object_type: ast::ObjectType::Database | ast::ObjectType::Schema, if_exists, names, ..
        } => {
            let mut affected = 0;
            for n in names {
                let name = n.to_string().trim_matches('`').to_string();
                if name == SYSTEM_DATABASE || name.eq_ignore_ascii_case("information_schema") {
                    return Err(SqlError::new(
                        1044,
                        "42000",
                        format!("Access denied: database '{name}' belongs to the system"),
                    ));
                }
                if !database_exists(&shared, &name).await? {
                    if *if_exists {
                        continue;
                    }
                    return Err(SqlError::new(
                        crate::error::ER_DB_DROP_EXISTS,
                        "HY000",
                        format!("Can't drop database '{name}'; database doesn't exist"),
                    ));
                }
                for def in tables_of(&shared, &name).await? {
                    drop_table(&shared, &def).await?;
                    affected += 1;
                }
                let t = shared.client.table(SYSTEM_DATABASE, DATABASES_TABLE).await?;
                shared.client.transaction().execute_commit(vec![Op::delete(&t, &[Value::Str(name.clone())])?]).await?;
                if session.db.as_deref() == Some(&name) {
                    session.db = None;
                }
            }
            Ok(Response::Ok { affected, last_insert_id: 0, info: String::new() })
        }
        Statement::CreateTable(ct) => create_table(session, ct).await,
        Statement::Drop { object_type: ast::ObjectType::Table, if_exists, names, .. } => {
            let mut dropped = Vec::with_capacity(names.len());
            for n in names {
                let (d, t) = table_name(n)?;
                dropped.push((need_db(d)?, t));
            }
            // Every table is checked before the first is dropped.
            if session.foreign_key_checks() {
                for (d, t) in &dropped {
                    if let Ok(table) = shared.client.refresh_table(d, t).await {
                        refuse_referenced(table.def(), &dropped)?;
                    }
                }
            }
            for n in names {
                let (d, t) = table_name(n)?;
                let d = need_db(d)?;
                match shared.client.refresh_table(&d, &t).await {
                    Ok(table) => {
                        let def = table.def().clone();
                        drop_table(&shared, &def).await?;
                    }
                    Err(e) if e.code == ErrorCode::UnknownTable => {
                        if !*if_exists {
                            return Err(SqlError::new(1051, "42S02", format!("Unknown table '{d}.{t}'")));
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(Response::ok())
        }
        Statement::Drop { object_type: ast::ObjectType::Index, names, table: Some(table), .. } => {
            let (d, t) = table_name(table)?;
            let d = need_db(d)?;
            for n in names {
                let index = n.to_string().trim_matches('`').to_string();
                shared.table(&d, &t).await?;
                let def = shared.client.refresh_table(&d, &t).await?.def().clone();
                let dropped = [index.clone()];
                foreign_keys::refuse_needed_indexes(&shared, &foreign_keys::without(&def, &dropped, &[]), &dropped)
                    .await?;
                shared.client.drop_index(&d, &t, &index).await?;
            }
            Ok(Response::ok())
        }
        Statement::CreateIndex(ci) => {
            let (d, t) = table_name(&ci.table_name)?;
            let d = need_db(d)?;
            let name = ci
                .name
                .as_ref()
                .map(|n| n.to_string().trim_matches('`').to_string())
                .ok_or_else(|| SqlError::parse("CREATE INDEX needs an index name"))?;
            let cols: Vec<String> =
                ci.columns.iter().map(|c| c.column.expr.to_string().trim_matches('`').to_string()).collect();
            create_index(&shared, &d, &t, &name, &cols, ci.unique).await?;
            Ok(Response::ok())
        }
        Statement::Truncate(tr) => {
            for target in &tr.table_names {
                let (d, t) = table_name(&target.name)?;
                let d = need_db(d)?;
                shared.table(&d, &t).await?;
                let def = shared.client.refresh_table(&d, &t).await?.def().clone();
                if let Some(r) = def.referenced_by.iter().find(|r| !(r.database == def.database && r.table == def.name))
                {
                    if session.foreign_key_checks() {
                        let child = shared.table(&r.database, &r.table).await?;
                        let key = child.def().foreign_keys.iter().find(|k| k.name == r.name);
                        let text = key.map(|k| crate::foreign::constraint_text(child.def(), k)).unwrap_or_default();
                        return Err(SqlError::new(
                            1701,
                            "42000",
                            format!(
                                "Cannot truncate a table referenced in a foreign key constraint (`{}`.`{}`, {text})",
                                r.database, r.table
                            ),
                        ));
                    }
                }
                let auto = shared.auto_counter(def.id).await?;
                drop_table(&shared, &def).await?;
                let spec = TableSpec {
                    database: def.database.clone(),
                    name: def.name.clone(),
                    // The new table has no place for dropped columns.
                    columns: def.columns.iter().filter(|c| !c.is_dropped()).cloned().collect(),
                    primary_key: def.primary_key.iter().map(|&c| def.columns[c as usize].name.clone()).collect(),
                    partitions: def.partitions,
                };
                let mut created = shared.client.create_table(spec).await?;
                for index in def.indexes.iter().skip(1) {
                    let names: Vec<String> =
                        index.columns.iter().map(|&c| def.columns[c as usize].name.clone()).collect();
                    created =
                        create_index(&shared, &def.database, &def.name, &index.name, &names, index.unique).await?;
                }
                if let Some((column, _)) = auto {
                    if let Ok(c) = created.def().column_id(&column) {
                        shared.register_auto_column(&created, c, 1).await?;
                    }
                }
                // The new table's columns are found by name (no dropped ones).
                let keys: Vec<ColumnChange> = def
                    .foreign_keys
                    .iter()
                    .filter_map(|k| {
                        let columns =
                            k.columns.iter().map(|&c| created.def().column_id(&def.columns[c as usize].name).ok());
                        let columns = columns.collect::<Option<Vec<_>>>()?;
                        Some(ColumnChange::AddForeignKey(latsdb_types::schema::ForeignKeyDef { columns, ..k.clone() }))
                    })
                    .collect();
                if !keys.is_empty() {
                    shared.client.change_columns(&def.database, &def.name, keys).await?;
                }
            }
            Ok(Response::ok())
        }
        Statement::AlterTable(at) => {
            let (d, t) = table_name(&at.name)?;
            let d = need_db(d)?;
            // Nothing changes when part of the statement cannot be done.
            if let Some(op) = at.operations.iter().find(|op| !alter_supported(op)) {
                return Err(SqlError::unsupported(format!("ALTER TABLE {op} is not supported")));
            }
            // Columns first, so the statement may also index them.
            let added: Vec<_> = at
                .operations
                .iter()
                .filter_map(|op| match op {
                    ast::AlterTableOperation::AddColumn { if_not_exists, column_def, column_position, .. } => {
                        Some((column_def, *if_not_exists, column_position))
                    }
                    _ => None,
                })
                .collect();
            // Checked before anything changes: column changes that would
            // rewrite rows, and the new table name.
            shared.table(&d, &t).await?;
            // The current definition: a foreign key of another table may
            // have changed this one's list of references.
            let before = shared.client.refresh_table(&d, &t).await?.def().clone();
            let renamed_to = match at.operations.iter().rev().find_map(|op| match op {
                ast::AlterTableOperation::RenameTable { table_name } => Some(table_name),
                _ => None,
            }) {
                Some(ast::RenameTableNameKind::As(n) | ast::RenameTableNameKind::To(n)) => {
                    let (nd, nt) = table_name(n)?;
                    Some(rename_target(&shared, &d, &t, nd.unwrap_or_else(|| d.clone()), nt).await?)
                }
                None => None,
            };
            if alter_copy::needs_copy(session, &before, &at.operations).await {
                // The current definition: the copy is planned against it.
                let table = shared.client.refresh_table(&d, &t).await?;
                return alter_copy::alter_by_copy(session, &table, &at.operations, renamed_to).await;
            }
            let ColumnPlan { changes, auto_renamed, auto_dropped, drop_first } =
                column_changes(session, &before, &at.operations).await?;
            check_index_clauses(&before, &changes, &added, &at.operations)?;
            let renamed_columns: Vec<(String, String)> = changes
                .iter()
                .filter_map(|c| match c {
                    ColumnChange::Rename { from, to } => Some((from.clone(), to.clone())),
                    _ => None,
                })
                .collect();
            // The indexes the statement drops (named, or with their
            // columns) may not be needed by a key it keeps; checked before
            // anything changes.
            let mut dropped_indexes = drop_first.clone();
            for op in &at.operations {
                if let ast::AlterTableOperation::DropIndex { name } = op {
                    dropped_indexes.push(name.value.clone());
                }
            }
            let remaining = foreign_keys::without(&before, &dropped_indexes, &at.operations);
            foreign_keys::refuse_needed_indexes(&shared, &remaining, &dropped_indexes).await?;
            if !added.is_empty() {
                add_columns(session, &d, &t, &added).await?;
            }
            // Keys the statement drops go first: their columns may leave.
            for op in &at.operations {
                if let ast::AlterTableOperation::DropForeignKey { name, .. } = op {
                    drop_foreign_key(&shared, &d, &t, &name.value).await?;
                }
            }
            // The indexes of dropped columns go first: a column in an
            // index cannot leave the table.
            for index in &drop_first {
                shared.client.drop_index(&d, &t, index).await?;
            }
            if !changes.is_empty() {
                shared.client.change_columns(&d, &t, changes).await?;
                if auto_dropped {
                    shared.forget_auto_column(before.id).await?;
                } else if let Some(new_name) = auto_renamed {
                    shared.rename_auto_column(before.id, &new_name).await?;
                }
            }
            for op in &at.operations {
                match op {
                    ast::AlterTableOperation::AddConstraint { constraint: TableConstraint::Index(ic), .. } => {
                        let cols = index_column_names(&ic.columns);
                        let name = index_name(&index_names(&shared, &d, &t).await?, ic.name.as_ref(), &cols)?;
                        create_index(&shared, &d, &t, &name, &cols, false).await?;
                    }
                    ast::AlterTableOperation::AddConstraint { constraint: TableConstraint::Unique(u), .. } => {
                        let cols = index_column_names(&u.columns);
                        let given = u.index_name.as_ref().or(u.name.as_ref());
                        let name = index_name(&index_names(&shared, &d, &t).await?, given, &cols)?;
                        create_index(&shared, &d, &t, &name, &cols, true).await?;
                    }
                    ast::AlterTableOperation::AddConstraint { constraint: TableConstraint::ForeignKey(fk), .. } => {
                        add_foreign_key(session, &d, &t, fk).await?
                    }
                    ast::AlterTableOperation::DropIndex { name }
                        if !drop_first.iter().any(|i| i.eq_ignore_ascii_case(&name.value)) =>
                    {
                        shared.client.drop_index(&d, &t, name.value.as_str()).await?;
                    }
                    // Added and changed above: all columns of one statement
                    // are one change; the table is renamed last.
                    _ => {}
                }
            }
            let (final_db, final_name) = renamed_to.clone().unwrap_or_else(|| (d.clone(), t.clone()));
            if let Some((nd, nt)) = renamed_to {
                shared.client.rename_table(&d, &t, &nd, &nt).await?;
            }
            foreign_keys::repoint_children(&shared, &before, (&final_db, &final_name), &renamed_columns).await?;
            Ok(Response::ok())
        }
        Statement::RenameTable(renames) => {
            // Each pair in turn, as MySQL does; a failing pair stops the rest.
            for r in renames {
                let (od, ot) = table_name(&r.old_name)?;
                let od = need_db(od)?;
                shared.table(&od, &ot).await?;
                let (nd, nt) = table_name(&r.new_name)?;
                let (nd, nt) = rename_target(&shared, &od, &ot, need_db(nd)?, nt).await?;
                let before = shared.client.refresh_table(&od, &ot).await?.def().clone();
                shared.client.rename_table(&od, &ot, &nd, &nt).await?;
                foreign_keys::repoint_children(&shared, &before, (&nd, &nt), &[]).await?;
            }
            Ok(Response::ok())
        }
        Statement::ShowDatabases { show_options, .. } | Statement::ShowSchemas { show_options, .. } => {
            let filter = show_filter(show_options);
            let rows = databases(&shared)
                .await?
                .into_iter()
                .filter(|d| d != SYSTEM_DATABASE && like_filter(&filter, d))
                .map(|d| vec![Value::Str(d)])
                .collect();
            Ok(rows_response(vec![text_col("Database")], rows))
        }
        Statement::ShowTables { show_options, full, .. } => {
            let d = need_db(show_in(show_options))?;
            let filter = show_filter(show_options);
            let mut rows = Vec::new();
            for def in tables_of(&shared, &d).await? {
                if like_filter(&filter, &def.name) {
                    let mut r = vec![Value::Str(def.name)];
                    if *full {
                        r.push(Value::Str("BASE TABLE".into()));
                    }
                    rows.push(r);
                }
            }
            let mut cols = vec![text_col(&format!("Tables_in_{d}"))];
            if *full {
                cols.push(text_col("Table_type"));
            }
            Ok(rows_response(cols, rows))
        }
        Statement::ShowColumns { show_options, full, .. } => {
            let name = show_in(show_options).ok_or_else(|| SqlError::parse("SHOW COLUMNS needs FROM table"))?;
            let obj = sqlparser::ast::ObjectName::from(
                name.split('.').map(|p| ast::Ident::new(p.trim_matches('`'))).collect::<Vec<_>>(),
            );
            let (d, t) = table_name(&obj)?;
            describe(&shared, &need_db(d)?, &t, *full).await
        }
        Statement::ExplainTable { table_name: n, .. } => {
            let (d, t) = table_name(n)?;
            describe(&shared, &need_db(d)?, &t, false).await
        }
        Statement::ShowCreate { obj_type: ast::ShowCreateObject::Table, obj_name } => {
            let (d, t) = table_name(obj_name)?;
            let d = need_db(d)?;
            let table = shared.table(&d, &t).await?;
            let auto = shared.auto_counter(table.def().id).await?;
            let sql = show_create(table.def(), auto.as_ref().map(|(c, n)| (c.as_str(), *n)));
            Ok(rows_response(
                vec![text_col("Table"), text_col("Create Table")],
                vec![vec![Value::Str(t), Value::Str(sql)]],
            ))
        }
        Statement::ShowProcessList { full } => {
            let columns = vec![
                int_col("Id"),
                text_col("User"),
                text_col("Host"),
                text_col("db"),
                text_col("Command"),
                int_col("Time"),
                text_col("State"),
                text_col("Info"),
            ];
            Ok(rows_response(columns, processlist_rows(&shared, *full)))
        }
        Statement::Kill { modifier, id } => {
            if matches!(modifier, Some(ast::KillType::Query | ast::KillType::Mutation)) {
                return Err(SqlError::unsupported(
                    "KILL QUERY is not supported: a statement cannot be stopped midway; KILL CONNECTION ends the connection once its current statement is done",
                ));
            }
            let target = u32::try_from(*id)
                .ok()
                .and_then(|id| shared.processes.get(id))
                .ok_or_else(|| SqlError::new(1094, "HY000", format!("Unknown thread id: {id}")))?;
            if target.user != session.user && session.user != "root" {
                return Err(SqlError::new(1095, "HY000", format!("You are not owner of thread {id}")));
            }
            target.kill();
            Ok(Response::ok())
        }
        Statement::ShowVariables { filter, .. } => {
            let mut names: Vec<&str> = VARIABLE_NAMES.to_vec();
            names.sort_unstable();
            let rows = names
                .into_iter()
                .filter(|n| like_filter(filter, n))
                .filter_map(|n| session.variable(n).map(|v| vec![Value::Str(n.into()), Value::Str(to_text(&v))]))
                .collect();
            Ok(rows_response(vec![text_col("Variable_name"), text_col("Value")], rows))
        }
        Statement::ShowStatus { filter, .. } => {
            let cipher = session.tls_cipher.clone().unwrap_or_default();
            let version = if session.tls_cipher.is_some() { "TLS".to_string() } else { String::new() };
            let shared = &session.shared;
            let status = [
                ("Latsdb_data_node_requests", shared.client.requests_sent().to_string()),
                ("Ssl_cipher", cipher),
                ("Ssl_version", version),
                ("Threads_connected", shared.processes.snapshot().len().to_string()),
                ("Uptime", shared.started.elapsed().as_secs().to_string()),
            ];
            let rows = status
                .iter()
                .filter(|(n, _)| like_filter(filter, n))
                .map(|(n, v)| vec![Value::Str(n.to_string()), Value::Str(v.clone())])
                .collect();
            Ok(rows_response(vec![text_col("Variable_name"), text_col("Value")], rows))
        }
        Statement::ShowCollation { .. } => Ok(rows_response(
            vec![
                text_col("Collation"),
                text_col("Charset"),
                int_col("Id"),
                text_col("Default"),
                text_col("Compiled"),
                int_col("Sortlen"),
            ],
            [("utf8mb4_general_ci", 45, "Yes"), ("utf8mb4_bin", 46, "")]
                .into_iter()
                .map(|(name, id, default)| {
                    vec![
                        Value::Str(name.into()),
                        Value::Str("utf8mb4".into()),
                        Value::Int(id),
                        Value::Str(default.into()),
                        Value::Str("Yes".into()),
                        Value::Int(1),
                    ]
                })
                .collect(),
        )),
        Statement::ShowVariable { variable } => {
            let words: Vec<String> = variable.iter().map(|i| i.value.clone()).collect();
            let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
            match upper.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
                ["WARNINGS", ..] | ["ERRORS", ..] | ["COUNT(*)", "WARNINGS"] => {
                    let rows = session
                        .warnings
                        .iter()
                        .map(|(l, c, m)| vec![Value::Str(l.to_string()), Value::Int(*c as i64), Value::Str(m.clone())])
                        .collect();
                    Ok(rows_response(vec![text_col("Level"), int_col("Code"), text_col("Message")], rows))
                }
                ["INDEX" | "INDEXES" | "KEYS", "FROM" | "IN", ..] => {
                    let name = words.get(2).cloned().ok_or_else(|| SqlError::parse("SHOW INDEX needs FROM table"))?;
                    let (mut d, t) = match name.split_once('.') {
                        Some((d, t)) => (Some(d.to_string()), t.to_string()),
                        None => (None, name.clone()),
                    };
                    if matches!(upper.get(3).map(String::as_str), Some("FROM" | "IN")) {
                        d = words.get(4).cloned();
                    }
                    show_index(&shared, &need_db(d)?, &t).await
                }
                ["ENGINES"] => Ok(rows_response(
                    vec![
                        text_col("Engine"),
                        text_col("Support"),
                        text_col("Comment"),
                        text_col("Transactions"),
                        text_col("XA"),
                        text_col("Savepoints"),
                    ],
                    vec![["ndbcluster", "DEFAULT", "latsdb: distributed, replicated, in-memory", "YES", "NO", "NO"]
                        .iter()
                        .map(|v| Value::Str(v.to_string()))
                        .collect()],
                )),
                ["TABLE", "STATUS", rest @ ..] => {
                    let d = match rest {
                        ["FROM" | "IN", ..] => words.get(3).cloned(),
                        _ => None,
                    };
                    let d = need_db(d)?;
                    let sizes = shared.client.table_sizes().await?;
                    let rows = tables_of(&shared, &d)
                        .await?
                        .into_iter()
                        .map(|t| {
                            let collation = shown_table_collation(&t);
                            let (rows, avg, bytes) = size_columns(&t, &sizes);
                            vec![
                                Value::Str(t.name),
                                Value::Str("ndbcluster".into()),
                                Value::Int(10),
                                Value::Str("Dynamic".into()),
                                rows,
                                avg,
                                bytes,
                                Value::Str(collation.name().into()),
                                Value::Str(String::new()),
                            ]
                        })
                        .collect();
                    Ok(rows_response(
                        vec![
                            text_col("Name"),
                            text_col("Engine"),
                            int_col("Version"),
                            text_col("Row_format"),
                            int_col("Rows"),
                            int_col("Avg_row_length"),
                            int_col("Data_length"),
                            text_col("Collation"),
                            text_col("Comment"),
                        ],
                        rows,
                    ))
                }
                _ => Err(SqlError::unsupported(format!("SHOW {} is not supported", words.join(" ")))),
            }
        }
        _ => {
            let text = stmt.to_string();
            Err(SqlError::unsupported(format!("statement '{}' is not supported", first_words(&text))))
        }
    }
}

async fn show_index(shared: &Shared, db: &str, t: &str) -> SqlResult<Response> {
    let table = shared.table(db, t).await?;
    let def = table.def();
    let mut rows = Vec::new();
    for ix in def.visible_indexes() {
        for (seq, &c) in ix.columns.iter().enumerate() {
            let col = &def.columns[c as usize];
            rows.push(vec![
                Value::Str(def.name.clone()),
                Value::Int(!ix.unique as i64),
                Value::Str(ix.name.clone()),
                Value::Int(seq as i64 + 1),
                Value::Str(col.name.clone()),
                Value::Str("A".into()),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Str(if col.nullable { "YES" } else { "" }.into()),
                Value::Str("BTREE".into()),
                Value::Str(String::new()),
                Value::Str(String::new()),
                Value::Str("YES".into()),
                Value::Null,
            ]);
        }
    }
    let cols = [
        "Table",
        "Non_unique",
        "Key_name",
        "Seq_in_index",
        "Column_name",
        "Collation",
        "Cardinality",
        "Sub_part",
        "Packed",
        "Null",
        "Index_type",
        "Comment",
        "Index_comment",
        "Visible",
        "Expression",
    ];
    let columns = cols
        .iter()
        .map(|c| {
            if matches!(*c, "Non_unique" | "Seq_in_index" | "Cardinality" | "Sub_part") {
                int_col(c)
            } else {
                text_col(c)
            }
        })
        .collect();
    Ok(rows_response(columns, rows))
}

fn first_words(s: &str) -> String {
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// A column's own `REFERENCES t (c)` is parsed and ignored, as MySQL
/// ignores it; the client is warned, as MySQL does not.
fn inline_reference_ignored(session: &mut Session) {
    session.warnings.push((
        "Warning",
        crate::error::ER_NOT_SUPPORTED_YET,
        "a column's REFERENCES clause is ignored, as in MySQL: declare FOREIGN KEY (column) REFERENCES ... to have the reference kept and checked".into(),
    ));
}

/// The ALTER TABLE operations latsdb carries out.
fn alter_supported(op: &ast::AlterTableOperation) -> bool {
    use ast::AlterTableOperation as Op;
    matches!(
        op,
        Op::AddConstraint {
            constraint: TableConstraint::Index(_) | TableConstraint::Unique(_) | TableConstraint::ForeignKey(_),
            ..
        } | Op::DropForeignKey { .. }
            | Op::DropIndex { .. }
            | Op::AddColumn { .. }
            | Op::DropColumn { .. }
            | Op::RenameColumn { .. }
            | Op::ChangeColumn { .. }
            | Op::ModifyColumn { .. }
            | Op::AlterColumn {
                op: ast::AlterColumnOperation::SetDefault { .. } | ast::AlterColumnOperation::DropDefault,
                ..
            }
            | Op::RenameTable { .. }
    )
}

/// Checks the index clauses of an ALTER TABLE against the table as the
/// statement's column clauses leave it, before anything changes: indexed
/// columns must exist, dropped indexes must exist, new index names must be
/// free. (What only the cluster can find, such as values a new unique
/// index finds twice, still fails after the earlier clauses are done.)
fn check_index_clauses(
    before: &TableDef,
    changes: &[ColumnChange],
    added: &[(&ast::ColumnDef, bool, &Option<ast::MySQLColumnPosition>)],
    ops: &[ast::AlterTableOperation],
) -> SqlResult<()> {
    use ast::AlterTableOperation as AOp;
    let mut columns: Vec<String> = before.visible_columns().map(|(_, c)| c.name.clone()).collect();
    for change in changes {
        match change {
            ColumnChange::Rename { from, to } => {
                if let Some(c) = columns.iter_mut().find(|c| c.eq_ignore_ascii_case(from)) {
                    *c = to.clone();
                }
            }
            ColumnChange::Drop { column } => columns.retain(|c| !c.eq_ignore_ascii_case(column)),
            _ => {}
        }
    }
    columns.extend(added.iter().map(|(c, _, _)| c.name.value.clone()));
    let mut indexes: Vec<String> = before.indexes.iter().map(|i| i.name.clone()).collect();
    for op in ops {
        let (given, cols) = match op {
            AOp::AddConstraint { constraint: TableConstraint::Index(ic), .. } => {
                (ic.name.as_ref(), index_column_names(&ic.columns))
            }
            AOp::AddConstraint { constraint: TableConstraint::Unique(u), .. } => {
                (u.index_name.as_ref().or(u.name.as_ref()), index_column_names(&u.columns))
            }
            AOp::DropIndex { name } => {
                let at = indexes.iter().position(|i| i.eq_ignore_ascii_case(&name.value)).ok_or_else(|| {
                    SqlError::new(
                        crate::error::ER_CANT_DROP_KEY,
                        "42000",
                        format!("Can't DROP '{}'; check that column/key exists", name.value),
                    )
                })?;
                indexes.remove(at);
                continue;
            }
            _ => continue,
        };
        for c in &cols {
            if !columns.iter().any(|n| n.eq_ignore_ascii_case(c)) {
                return Err(SqlError::new(1072, "42000", format!("Key column '{c}' doesn't exist in table")));
            }
        }
        let name = index_name(&indexes, given, &cols)?;
        if indexes.iter().any(|i| i.eq_ignore_ascii_case(&name)) {
            return Err(SqlError::new(crate::error::ER_DUP_KEYNAME, "42000", format!("Duplicate key name '{name}'")));
        }
        indexes.push(name);
    }
    Ok(())
}

/// Where `RENAME` moves a table, checked: an existing database other than
/// the system's, and a free name.
async fn rename_target(
    shared: &Shared,
    db: &str,
    table: &str,
    new_db: String,
    new_table: String,
) -> SqlResult<(String, String)> {
    for d in [db, new_db.as_str()] {
        if d == SYSTEM_DATABASE || d.eq_ignore_ascii_case("information_schema") {
            return Err(SqlError::new(1044, "42000", format!("Access denied: database '{d}' belongs to the system")));
        }
    }
    validate_name("table", &new_table)?;
    if new_db != db && !database_exists(shared, &new_db).await? {
        return Err(SqlError::bad_db(&new_db));
    }
    if new_db == db && new_table == table {
        return Ok((new_db, new_table));
    }
    if shared.client.table(&new_db, &new_table).await.is_ok() {
        return Err(SqlError::new(
            crate::error::ER_TABLE_EXISTS,
            "42S01",
            format!("Table '{new_table}' already exists"),
        ));
    }
    Ok((new_db, new_table))
}

/// What the column clauses of an ALTER TABLE change.
struct ColumnPlan {
    /// Changes that leave stored rows as they are (renames, defaults, NOT
    /// NULL relaxed to NULL, growing types, dropped columns).
    changes: Vec<ColumnChange>,
    /// The auto-increment column's new name when it is renamed.
    auto_renamed: Option<String>,
    /// The auto-increment column is dropped.
    auto_dropped: bool,
    /// Indexes to drop before the changes: those of dropped columns.
    drop_first: Vec<String>,
}

/// The column changes of an ALTER TABLE that leave stored rows as they are.
/// A CHANGE or MODIFY that would change a column's type is refused before
/// anything changes, and so is a DROP COLUMN of a key column.
async fn column_changes(
    session: &mut Session,
    def: &TableDef,
    ops: &[ast::AlterTableOperation],
) -> SqlResult<ColumnPlan> {
    use ast::AlterTableOperation as AOp;
    let shared = session.shared.clone();
    let auto = shared.auto_counter(def.id).await?.map(|(c, _)| c);
    // Names as they will be after the changes so far (a column dropped by
    // an earlier clause takes its dropped name, which no clause can name).
    let mut names: Vec<String> = def.columns.iter().map(|c| c.name.clone()).collect();
    let find = |names: &[String], name: &str| column_now(def, names, name);
    let mut auto_dropped = false;
    let mut drop_first = Vec::new();
    let mut changes = Vec::new();
    let mut auto_renamed = None;
    let mut rename = |names: &mut Vec<String>, changes: &mut Vec<ColumnChange>, id: usize, to: &str| -> SqlResult<()> {
        if names[id] == to {
            return Ok(());
        }
        reserved_name(to)?;
        if names.iter().enumerate().any(|(i, n)| i != id && n.eq_ignore_ascii_case(to)) {
            return Err(SqlError::new(
                crate::error::ER_DUP_FIELDNAME,
                "42S21",
                format!("Duplicate column name '{to}'"),
            ));
        }
        if auto.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(&def.columns[id].name)) {
            auto_renamed = Some(to.to_string());
        }
        changes.push(ColumnChange::Rename { from: names[id].clone(), to: to.to_string() });
        names[id] = to.to_string();
        Ok(())
    };
    for op in ops {
        match op {
            AOp::RenameColumn { old_column_name, new_column_name } => {
                let id = find(&names, &old_column_name.value)?;
                rename(&mut names, &mut changes, id, &new_column_name.value)?;
            }
            AOp::ChangeColumn { old_name, new_name, data_type, options, column_position }
            | AOp::ModifyColumn { col_name: old_name @ new_name, data_type, options, column_position } => {
                let id = find(&names, &old_name.value)?;
                if column_position.is_some() {
                    return Err(SqlError::unsupported(format!(
                        "moving column '{}' with FIRST/AFTER is not supported: columns keep their order",
                        old_name.value
                    )));
                }
                let given = ast::ColumnDef {
                    name: new_name.clone(),
                    data_type: data_type.clone(),
                    options: options.iter().map(|o| ast::ColumnOptionDef { name: None, option: o.clone() }).collect(),
                };
                let spec = column_spec(session, &given, def.columns[id].collation)?;
                let current = &def.columns[id];
                let is_auto = auto.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(&current.name));
                let widened = check_in_place(def, id, &spec, is_auto)?;
                let in_key = def.primary_key.contains(&(id as ColumnId));
                rename(&mut names, &mut changes, id, &new_name.value)?;
                if widened {
                    changes.push(ColumnChange::Widen {
                        column: names[id].clone(),
                        ty: spec.def.ty,
                        members: spec.def.members.clone(),
                    });
                }
                if spec.def.nullable && !current.nullable && !in_key {
                    changes.push(ColumnChange::AllowNull { column: names[id].clone() });
                }
                if spec.def.default != current.default {
                    changes.push(ColumnChange::SetDefault { column: names[id].clone(), default: spec.def.default });
                }
                if spec.def.clock != current.clock {
                    changes.push(ColumnChange::SetClock { column: names[id].clone(), clock: spec.def.clock });
                }
            }
            AOp::DropColumn { column_names, if_exists, .. } => {
                for name in column_names {
                    let Some(id) = dropped_column(session, def, &names, &name.value, *if_exists, ops)? else {
                        continue;
                    };
                    drop_first.extend(indexes_of_dropped(def, id, ops)?);
                    auto_dropped |= auto.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(&def.columns[id].name));
                    changes.push(ColumnChange::Drop { column: names[id].clone() });
                    names[id] = format!("{DROPPED_COLUMN_PREFIX}{id}");
                }
                if (0..names.len()).all(|i| column_now(def, &names, &names[i]).is_err()) {
                    return Err(SqlError::new(
                        1090,
                        "42000",
                        "You can't delete all columns with ALTER TABLE; use DROP TABLE instead",
                    ));
                }
            }
            AOp::AlterColumn { column_name, op } => {
                let id = find(&names, &column_name.value)?;
                let current = &def.columns[id];
                let (default, on_insert) = altered_default(op, current)?;
                changes.push(ColumnChange::SetDefault { column: names[id].clone(), default });
                if on_insert != current.clock.on_insert {
                    let clock = latsdb_types::schema::ClockFill { on_insert, on_update: current.clock.on_update };
                    changes.push(ColumnChange::SetClock { column: names[id].clone(), clock });
                }
            }
            _ => {}
        }
    }
    drop_first.sort_unstable();
    drop_first.dedup();
    Ok(ColumnPlan { changes, auto_renamed, auto_dropped, drop_first })
}

/// Checks that a CHANGE or MODIFY of column `id` to `spec` leaves stored
/// rows as they are, and says whether it grows the column's type.
fn check_in_place(def: &TableDef, id: usize, spec: &ColumnSpec, is_auto: bool) -> SqlResult<bool> {
    let current = &def.columns[id];
    let in_key = def.primary_key.contains(&(id as ColumnId));
    let retyped = spec.def.ty != current.ty || spec.def.members != current.members;
    let indexed = def.is_indexed(id as ColumnId);
    let widened = retyped
        && spec.def.fraction_digits == current.fraction_digits
        && current.ty.widens_to(spec.def.ty)
        && spec.def.members.starts_with(&current.members)
        && !indexed
        && current.storage == latsdb_types::schema::Storage::Memory;
    if (retyped && !widened) || spec.def.fraction_digits != current.fraction_digits {
        return Err(SqlError::unsupported(format!(
            "changing the type of column '{}' from {} to {} is not supported: only its name, DEFAULT, ON UPDATE and NULL can change, or a non-indexed text or binary column grow (add a new column and copy the values)",
            current.name,
            column_type_text(current),
            column_type_text(&spec.def)
        )));
    }
    if spec.def.collation != current.collation {
        return Err(SqlError::unsupported(format!(
            "changing the collation of column '{}' from {} to {} is not supported: keys and indexes are built on it (add a new column and copy the values)",
            current.name,
            current.collation.name(),
            spec.def.collation.name()
        )));
    }
    if spec.storage.is_some_and(|s| s != current.storage) {
        return Err(SqlError::unsupported(format!(
            "moving column '{}' to STORAGE {} is not supported yet: copy the table into a new one whose column says where it lives",
            current.name,
            spec.storage.unwrap_or_default().keyword()
        )));
    }
    if spec.auto_increment != is_auto || spec.unique || (spec.primary_key && !in_key) {
        return Err(SqlError::unsupported(format!(
            "changing AUTO_INCREMENT, UNIQUE or PRIMARY KEY of column '{}' with CHANGE/MODIFY is not supported",
            current.name
        )));
    }
    if !spec.def.nullable && current.nullable {
        return Err(SqlError::unsupported(format!(
            "making column '{}' NOT NULL is not supported: existing rows may hold NULL",
            current.name
        )));
    }
    Ok(widened)
}

/// The column `name` names while an ALTER TABLE's clauses rename and drop
/// columns (`names`: every column's name so far, a dropped one's its
/// dropped name, which no clause can name).
fn column_now(def: &TableDef, names: &[String], name: &str) -> SqlResult<usize> {
    (0..names.len())
        .find(|&i| {
            def.is_visible(i as ColumnId)
                && !names[i].starts_with(DROPPED_COLUMN_PREFIX)
                && names[i].eq_ignore_ascii_case(name)
        })
        .ok_or_else(|| SqlError::bad_field(name, &def.name))
}

/// The column a DROP COLUMN clause names, or None for a missing one under
/// IF EXISTS (MariaDB's form); MySQL's error 1091 otherwise.
/// Whether the statement has `DROP FOREIGN KEY name`.
fn drops_foreign_key(ops: &[ast::AlterTableOperation], name: &str) -> bool {
    ops.iter().any(
        |op| matches!(op, ast::AlterTableOperation::DropForeignKey { name: n, .. } if n.value.eq_ignore_ascii_case(name)),
    )
}

fn dropped_column(
    session: &mut Session,
    def: &TableDef,
    names: &[String],
    name: &str,
    if_exists: bool,
    ops: &[ast::AlterTableOperation],
) -> SqlResult<Option<usize>> {
    // A key the same statement drops is gone first.
    let kept = |key: &&latsdb_types::schema::ForeignKeyDef| !drops_foreign_key(ops, &key.name);
    match column_now(def, names, name) {
        Ok(id) => match def.foreign_keys_of(id as u16).find(kept) {
            Some(key) => Err(SqlError::new(
                1828,
                "HY000",
                format!("Cannot drop column '{name}': needed in a foreign key constraint '{}'", key.name),
            )),
            None => Ok(Some(id)),
        },
        Err(_) if if_exists => {
            missing_column_noted(session, name);
            Ok(None)
        }
        Err(_) => Err(SqlError::new(
            crate::error::ER_CANT_DROP_KEY,
            "42000",
            format!("Can't DROP COLUMN `{name}`; check that it exists"),
        )),
    }
}

/// The default an ALTER COLUMN SET/DROP DEFAULT gives `column`, and
/// whether the clock fills it (SET DEFAULT CURRENT_TIMESTAMP).
fn altered_default(op: &ast::AlterColumnOperation, column: &ColumnDef) -> SqlResult<(Option<Value>, bool)> {
    let default = match op {
        ast::AlterColumnOperation::SetDefault { value } => constant_default(value, column)?,
        _ => None,
    };
    let on_insert = matches!(op, ast::AlterColumnOperation::SetDefault { .. }) && default.is_none();
    if on_insert {
        takes_the_clock(column, 1067, "Invalid default value")?;
    }
    Ok((default, on_insert))
}

/// MariaDB's note for DROP COLUMN IF EXISTS of a missing column.
fn missing_column_noted(session: &mut Session, name: &str) {
    let note = format!("Can't DROP COLUMN `{name}`; check that it exists");
    session.warnings.push(("Note", crate::error::ER_CANT_DROP_KEY, note));
}

/// The indexes that go with dropped column `id`, as MySQL drops them: one
/// of that column alone. A primary-key column cannot be dropped, nor one of
/// an index of several columns unless the statement drops that index too
/// (MySQL would narrow the index, which latsdb cannot do in place).
fn indexes_of_dropped(def: &TableDef, id: usize, ops: &[ast::AlterTableOperation]) -> SqlResult<Vec<String>> {
    let column = &def.columns[id].name;
    let id = id as ColumnId;
    if def.primary_key.contains(&id) {
        return Err(SqlError::unsupported(format!(
            "dropping column '{column}' of the primary key is not supported: a table's primary key cannot change (copy the table into a new one)"
        )));
    }
    let dropped_by_statement = |index: &str| {
        ops.iter().any(
            |op| matches!(op, ast::AlterTableOperation::DropIndex { name } if name.value.eq_ignore_ascii_case(index)),
        )
    };
    let mut drop = Vec::new();
    for index in def.indexes.iter().skip(1).filter(|i| i.columns.contains(&id)) {
        if index.columns.len() > 1 && !dropped_by_statement(&index.name) {
            return Err(SqlError::unsupported(format!(
                "dropping column '{column}' is not supported while index '{}' has it with other columns: drop the index in the same statement (DROP INDEX `{}`), or first",
                index.name, index.name
            )));
        }
        drop.push(index.name.clone());
    }
    Ok(drop)
}

/// The node's connections as SHOW PROCESSLIST lists them (`full`: whole
/// statement texts).
fn processlist_rows(shared: &Shared, full: bool) -> Vec<Vec<Value>> {
    let text = |v: &str| Value::Str(v.to_string());
    shared
        .processes
        .snapshot()
        .into_iter()
        .map(|p| {
            let info = p.info.as_deref().map(|i| {
                if full {
                    text(i)
                } else {
                    Value::Str(i.chars().take(crate::process::SHORT_INFO_CHARS).collect())
                }
            });
            vec![
                Value::Int(p.id as i64),
                text(&p.user),
                text(&p.host),
                p.db.as_deref().map_or(Value::Null, text),
                text(p.command),
                Value::Int(p.seconds as i64),
                text(if p.command == "Sleep" { "" } else { "executing" }),
                info.unwrap_or(Value::Null),
            ]
        })
        .collect()
}

/// The names of a table's indexes, as they are now.
async fn index_names(shared: &Shared, db: &str, t: &str) -> SqlResult<Vec<String>> {
    Ok(shared.client.table(db, t).await?.def().indexes.iter().map(|i| i.name.clone()).collect())
}

/// Creates an index, unique or not, through the client.
async fn create_index(
    shared: &Shared,
    db: &str,
    t: &str,
    name: &str,
    cols: &[String],
    unique: bool,
) -> SqlResult<std::sync::Arc<latsdb_client::Table>> {
    if let Some(c) = cols.iter().find(|c| c.eq_ignore_ascii_case(HIDDEN_KEY_COLUMN)) {
        return Err(SqlError::new(1072, "42000", format!("Key column '{c}' doesn't exist in table")));
    }
    let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    Ok(if unique {
        shared.client.create_unique_index(db, t, name, &refs).await?
    } else {
        shared.client.create_index(db, t, name, &refs).await?
    })
}

fn index_column_names(cols: &[ast::IndexColumn]) -> Vec<String> {
    cols.iter().map(|c| c.column.expr.to_string().trim_matches('`').to_string()).collect()
}

/// An index's name: the one given, or as MySQL names it, after its first
/// column (`col`, `col_2`, ... when taken).
fn index_name(taken: &[String], given: Option<&ast::Ident>, cols: &[String]) -> SqlResult<String> {
    if let Some(n) = given {
        return Ok(n.value.clone());
    }
    let first = cols.first().ok_or_else(|| SqlError::parse("an index needs at least one column"))?;
    let free = |n: &String| !taken.iter().any(|t| t.eq_ignore_ascii_case(n));
    let mut name = first.clone();
    let mut suffix = 2;
    while !free(&name) {
        name = format!("{first}_{suffix}");
        suffix += 1;
    }
    Ok(name)
}

/// Variables SHOW VARIABLES lists.
const VARIABLE_NAMES: &[&str] = &[
    "autocommit",
    "version",
    "version_comment",
    "sql_mode",
    "character_set_client",
    "character_set_connection",
    "character_set_results",
    "character_set_server",
    "character_set_database",
    "collation_connection",
    "collation_server",
    "collation_database",
    "transaction_isolation",
    "tx_isolation",
    "max_allowed_packet",
    "net_buffer_length",
    "net_write_timeout",
    "wait_timeout",
    "interactive_timeout",
    "lower_case_table_names",
    "auto_increment_increment",
    "auto_increment_offset",
    "time_zone",
    "system_time_zone",
    "license",
    "init_connect",
    "performance_schema",
    "query_cache_size",
    "query_cache_type",
    "have_ssl",
    "default_storage_engine",
    "max_connections",
    "innodb_lock_wait_timeout",
    "lock_wait_timeout",
];

async fn drop_table(shared: &Shared, def: &TableDef) -> SqlResult<()> {
    shared.client.drop_table(&def.database, &def.name).await?;
    shared.forget_auto_column(def.id).await
}

/// MySQL deprecates UNSIGNED on DECIMAL, FLOAT and DOUBLE; latsdb stores
/// such a column signed, so it does not refuse a negative value: the client
/// is warned rather than left to believe it does.
fn signed_anyway(session: &mut Session, column: &str, t: &DataType) {
    use DataType as D;
    if matches!(t, D::DecimalUnsigned(_) | D::DecUnsigned(_) | D::FloatUnsigned(_) | D::DoubleUnsigned(_)) {
        session.warnings.push((
            "Warning",
            crate::error::ER_NOT_SUPPORTED_YET,
            format!("UNSIGNED is ignored for column '{column}': latsdb stores DECIMAL, FLOAT and DOUBLE signed and does not refuse negative values"),
        ));
    }
}

/// Maps a SQL type to a column type.
pub fn column_type(t: &DataType) -> SqlResult<ColumnType> {
    use DataType as D;
    let len = |l: &Option<ast::CharacterLength>, default: u32| -> SqlResult<u32> {
        match l {
            None => Ok(default),
            Some(ast::CharacterLength::IntegerLength { length, .. }) => {
                u32::try_from(*length).map_err(|_| SqlError::parse(format!("length {length} is too large")))
            }
            Some(ast::CharacterLength::Max) => Err(SqlError::parse("MAX is not a MySQL length")),
        }
    };
    Ok(match t {
        D::TinyInt(_) => ColumnType::int(IntWidth::Tiny),
        D::TinyIntUnsigned(_) => ColumnType::uint(IntWidth::Tiny),
        D::SmallInt(_) => ColumnType::int(IntWidth::Small),
        D::SmallIntUnsigned(_) => ColumnType::uint(IntWidth::Small),
        D::MediumInt(_) => ColumnType::int(IntWidth::Medium),
        D::MediumIntUnsigned(_) => ColumnType::uint(IntWidth::Medium),
        D::Int(_) | D::Integer(_) => ColumnType::int(IntWidth::Int),
        D::IntUnsigned(_) | D::IntegerUnsigned(_) => ColumnType::uint(IntWidth::Int),
        D::BigInt(_) => ColumnType::int(IntWidth::Big),
        D::BigIntUnsigned(_) => ColumnType::uint(IntWidth::Big),
        D::Float(_) | D::FloatUnsigned(_) | D::Float4 => ColumnType::Float,
        D::Double(_) | D::DoubleUnsigned(_) | D::DoublePrecision | D::Real | D::Float8 => ColumnType::Double,
        D::Decimal(i) | D::Numeric(i) | D::Dec(i) | D::DecimalUnsigned(i) | D::DecUnsigned(i) => {
            let (p, s) = match i {
                ast::ExactNumberInfo::None => (10, 0),
                ast::ExactNumberInfo::Precision(p) => (*p, 0),
                ast::ExactNumberInfo::PrecisionAndScale(p, s) => (*p, (*s).max(0) as u64),
            };
            if p > 38 || s > p {
                return Err(SqlError::new(
                    1426,
                    "42000",
                    format!("DECIMAL({p},{s}) is out of range: precision at most 38, scale at most the precision"),
                ));
            }
            ColumnType::Decimal { precision: p as u8, scale: s as u8 }
        }
        D::Char(l) | D::Character(l) => ColumnType::Char(len(l, 1)?),
        D::Varchar(l) | D::CharVarying(l) | D::CharacterVarying(l) | D::Nvarchar(l) => match l {
            None => return Err(SqlError::parse("VARCHAR needs a length, e.g. VARCHAR(255)")),
            l => ColumnType::VarChar(len(l, 0)?),
        },
        D::Binary(l) => ColumnType::Binary(l.unwrap_or(1) as u32),
        D::Varbinary(l) => match l {
            Some(ast::BinaryLength::IntegerLength { length }) => ColumnType::VarBinary(*length as u32),
            _ => return Err(SqlError::parse("VARBINARY needs a length")),
        },
        D::Text | D::TinyText | D::MediumText | D::LongText => ColumnType::Text,
        D::Blob(_) | D::TinyBlob | D::MediumBlob | D::LongBlob => ColumnType::Blob,
        D::Date => ColumnType::Date,
        D::Datetime(_) => ColumnType::DateTime,
        D::Timestamp(..) => ColumnType::Timestamp,
        D::Bool | D::Boolean => ColumnType::Boolean,
        D::Time(_, ast::TimezoneInfo::None | ast::TimezoneInfo::WithoutTimeZone) => ColumnType::Time,
        D::Bit(n) => match n.unwrap_or(1) {
            n @ 1..=64 => ColumnType::Bit(n as u8),
            n => {
                return Err(SqlError::new(1439, "42000", format!("Display width out of range for BIT({n}) (max = 64)")))
            }
        },
        D::Enum(_, None) => ColumnType::Enum,
        D::Set(_) => ColumnType::Set,
        D::Custom(name, modifiers) if name.to_string().eq_ignore_ascii_case("year") => match modifiers.as_slice() {
            [] => ColumnType::Year,
            [width] if width == "4" => ColumnType::Year,
            _ => return Err(SqlError::parse("YEAR takes no width but 4 (MySQL's YEAR(4))")),
        },
        other => return Err(SqlError::unsupported(format!("column type {other} is not supported"))),
    })
}

/// A column definition: the stored column and what it says beyond it.
struct ColumnSpec {
    def: ColumnDef,
    primary_key: bool,
    /// `UNIQUE` on the column: a unique index of it alone.
    unique: bool,
    auto_increment: bool,
    /// `STORAGE DISK|MEMORY` on the column, if it says.
    storage: Option<Storage>,
}

/// The members an ENUM or SET declares, without trailing spaces (MySQL
/// drops them when the table is created); none for other types.
fn members(ty: &ast::DataType) -> Vec<String> {
    let names: Vec<&str> = match ty {
        ast::DataType::Enum(members, _) => members
            .iter()
            .map(|m| match m {
                ast::EnumMember::Name(name) | ast::EnumMember::NamedValue(name, _) => name.as_str(),
            })
            .collect(),
        ast::DataType::Set(members) => members.iter().map(String::as_str).collect(),
        _ => return Vec::new(),
    };
    names.into_iter().map(|n| n.trim_end_matches(' ').to_string()).collect()
}

/// The digits of a second a DATETIME(n), TIMESTAMP(n) or TIME(n) keeps (MySQL
/// refuses more than 6 with 1426); 0 for every other type.
fn fraction_digits(column: &str, ty: &ast::DataType) -> SqlResult<u8> {
    let digits = match ty {
        ast::DataType::Datetime(n) | ast::DataType::Timestamp(n, _) | ast::DataType::Time(n, _) => n.unwrap_or(0),
        _ => 0,
    };
    if digits > 6 {
        return Err(SqlError::new(
            1426,
            "42000",
            format!("Too big precision {digits} specified for column '{column}'. Maximum is 6."),
        ));
    }
    Ok(digits as u8)
}

/// Only DATETIME and TIMESTAMP columns take the current time (MySQL: 1067
/// for a DEFAULT, 1294 for an ON UPDATE).
fn takes_the_clock(column: &ColumnDef, code: u16, what: &str) -> SqlResult<()> {
    if matches!(column.ty, ColumnType::DateTime | ColumnType::Timestamp) {
        return Ok(());
    }
    Err(SqlError::new(
        code,
        if code == 1067 { "42000" } else { "HY000" },
        format!(
            "{what} for '{}': only DATETIME and TIMESTAMP columns take CURRENT_TIMESTAMP, and '{}' is {}",
            column.name,
            column.name,
            column.ty.sql_name()
        ),
    ))
}

/// A column's DEFAULT as the value it stores, fitted to the column; `None`
/// for DEFAULT CURRENT_TIMESTAMP and the like, which are not stored.
fn constant_default(e: &ast::Expr, column: &ColumnDef) -> SqlResult<Option<Value>> {
    let bound = crate::bind::Binder::new(&[], "default").bind(e)?;
    if !bound.is_row_free() || matches!(bound, crate::eval::SExpr::Session(_)) {
        if matches!(bound, crate::eval::SExpr::Session(crate::eval::SessionValue::Now(_))) {
            return Ok(None);
        }
        return Err(SqlError::unsupported(format!("default {e} of column '{}' is not a constant", column.name)));
    }
    let v = bound
        .eval(&[], &crate::eval::Env { params: &[], session: &crate::session::NoSession, strict_numbers: false })?;
    Ok(Some(if v.is_null() { v } else { crate::eval::to_column(v, column)? }))
}

/// The collation a COLLATE clause names; error 1273 for one latsdb lacks.
pub fn collation_named(name: &str) -> SqlResult<Collation> {
    let name = name.trim_matches(|c| matches!(c, '\'' | '"' | '`'));
    Collation::named(name).ok_or_else(|| {
        SqlError::new(
            1273,
            "HY000",
            format!("Unknown collation: '{name}' (latsdb offers utf8mb4_bin, which the case-sensitive *_general_cs, utf8mb4_0900_as_cs and utf8mb4_0900_bin also name, and the case-insensitive utf8mb4_general_ci, which utf8mb4_unicode_ci, utf8mb4_unicode_520_ci and utf8mb4_0900_ai_ci also name; language collations are not offered)"),
        )
    })
}

fn charset_collation(name: &str) -> SqlResult<Collation> {
    let name = name.trim_matches(|c| matches!(c, '\'' | '"' | '`'));
    Collation::of_charset(name).ok_or_else(|| {
        SqlError::new(
            1115,
            "42000",
            format!("Unknown character set: '{name}' (latsdb stores text as utf8mb4; use utf8mb4, utf8mb3, latin1, ascii or binary)"),
        )
    })
}

/// The options of a CREATE TABLE, however they were written.
fn option_list(options: &ast::CreateTableOptions) -> &[ast::SqlOption] {
    match options {
        ast::CreateTableOptions::None => &[],
        ast::CreateTableOptions::With(l)
        | ast::CreateTableOptions::Options(l)
        | ast::CreateTableOptions::Plain(l)
        | ast::CreateTableOptions::TableProperties(l) => l,
    }
}

/// The table option `STORAGE DISK|MEMORY` (also as `TABLESPACE name
/// STORAGE ...`), if given.
fn table_storage(options: &ast::CreateTableOptions) -> SqlResult<Option<Storage>> {
    let list = option_list(options);
    Ok(list.iter().rev().find_map(|option| match option {
        ast::SqlOption::TableSpace(ast::TablespaceOption { storage: Some(kind), .. }) => Some(match kind {
            ast::StorageType::Disk => Storage::Disk,
            ast::StorageType::Memory => Storage::Memory,
        }),
        _ => None,
    }))
}

/// Decides where each column of a new table lives: where it says, else
/// where the table (or the cluster's default) says. A table on disk keeps
/// in memory its indexed columns and its columns of fixed size (numbers,
/// dates: a disk reference would take about their room, and an index
/// created later can still use them); a column that says `STORAGE DISK`
/// goes to disk whatever its type, unless an index names it, which is an
/// error.
fn place_columns(
    columns: &mut [ColumnDef],
    declared: &[Option<Storage>],
    indexed: &[&String],
    table: Storage,
) -> SqlResult<()> {
    // A hidden key column was put first: it has no declaration.
    let offset = columns.len() - declared.len();
    for (i, column) in columns.iter_mut().enumerate() {
        let is_indexed = indexed.iter().any(|c| c.eq_ignore_ascii_case(&column.name));
        let declared = if i < offset { Some(Storage::Memory) } else { declared[i - offset] };
        column.storage = match declared {
            Some(Storage::Disk) if is_indexed => {
                return Err(SqlError::new(
                    1089,
                    "HY000",
                    format!(
                        "column '{}' is STORAGE DISK but an index or the primary key names it: indexed columns stay in memory; declare it STORAGE MEMORY",
                        column.name
                    ),
                ))
            }
            Some(storage) => storage,
            None if table == Storage::Disk && !is_indexed && column.ty.fixed_size().is_none() => Storage::Disk,
            None => Storage::Memory,
        };
    }
    Ok(())
}

/// The collation a new table gives text columns that name none: its
/// `[DEFAULT] COLLATE` option, else the default collation of its `[DEFAULT]
/// CHARSET` (case-insensitive for utf8mb4, as in MySQL); None when it names
/// neither (its database's then applies).
fn table_collation(options: &ast::CreateTableOptions) -> SqlResult<Option<Collation>> {
    let list = option_list(options);
    let (mut collate, mut charset) = (None, None);
    for option in list {
        if let ast::SqlOption::KeyValue { key, value } = option {
            match key.value.to_ascii_uppercase().as_str() {
                "COLLATE" | "DEFAULT COLLATE" => collate = Some(collation_named(&value.to_string())?),
                "CHARSET" | "DEFAULT CHARSET" | "CHARACTER SET" | "DEFAULT CHARACTER SET" => {
                    charset = Some(charset_collation(&value.to_string())?)
                }
                _ => {}
            }
        }
    }
    Ok(collate.or(charset))
}

/// The collation SHOW CREATE TABLE names for a table, and ALTER TABLE ADD
/// COLUMN gives new text columns: that of most of its text columns (a
/// table keeps no default of its own; each text column of another
/// collation names its own, so the statement recreates the table exactly).
pub fn shown_table_collation(def: &TableDef) -> Collation {
    let texts: Vec<&ColumnDef> = def.visible_columns().map(|(_, c)| c).filter(|c| c.ty.is_string()).collect();
    let insensitive = texts.iter().filter(|c| c.collation.is_case_insensitive()).count();
    if insensitive * 2 > texts.len() {
        Collation::GeneralCi
    } else {
        Collation::Bin
    }
}

/// A user column may not take the hidden key's name.
fn reserved_name(name: &str) -> SqlResult<()> {
    let prefix = DROPPED_COLUMN_PREFIX;
    if name.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix)) {
        return Err(SqlError::new(
            1166,
            "42000",
            format!("Incorrect column name '{name}': latsdb keeps names starting with '{prefix}' for dropped columns; choose another name"),
        ));
    }
    if name.eq_ignore_ascii_case(HIDDEN_KEY_COLUMN) {
        return Err(SqlError::new(
            1166,
            "42000",
            format!(
                "Incorrect column name '{name}': latsdb keeps that name for the primary key it adds to a table created without one; choose another name"
            ),
        ));
    }
    Ok(())
}

fn column_spec(session: &mut Session, c: &ast::ColumnDef, collation: Collation) -> SqlResult<ColumnSpec> {
    reserved_name(&c.name.value)?;
    let ty = column_type(&c.data_type)?;
    signed_anyway(session, &c.name.value, &c.data_type);
    let mut spec = ColumnSpec {
        def: ColumnDef::new(c.name.value.clone(), ty)
            .collated(collation)
            .fraction_digits(fraction_digits(&c.name.value, &c.data_type)?)
            .members(members(&c.data_type)),
        primary_key: false,
        unique: false,
        auto_increment: false,
        storage: None,
    };
    for o in &c.options {
        match &o.option {
            ColumnOption::NotNull => spec.def.nullable = false,
            ColumnOption::Null => spec.def.nullable = true,
            ColumnOption::Default(e) => match constant_default(e, &spec.def)? {
                Some(v) => {
                    spec.def.default = Some(v);
                    spec.def.clock.on_insert = false;
                }
                None => {
                    takes_the_clock(&spec.def, 1067, "Invalid default value")?;
                    spec.def.default = None;
                    spec.def.clock.on_insert = true;
                }
            },
            ColumnOption::OnUpdate(e) => {
                let bound = crate::bind::Binder::new(&[], "on update").bind(e)?;
                if !matches!(bound, crate::eval::SExpr::Session(crate::eval::SessionValue::Now(_))) {
                    return Err(SqlError::new(
                        1294,
                        "HY000",
                        format!(
                            "Invalid ON UPDATE clause for '{}' column: only CURRENT_TIMESTAMP (or NOW()) is allowed",
                            c.name.value
                        ),
                    ));
                }
                takes_the_clock(&spec.def, 1294, "Invalid ON UPDATE clause")?;
                spec.def.clock.on_update = true;
            }
            ColumnOption::PrimaryKey(_) => spec.primary_key = true,
            ColumnOption::Unique(_) => spec.unique = true,
            ColumnOption::DialectSpecific(tokens)
                if tokens.iter().any(|t| t.to_string().eq_ignore_ascii_case("AUTO_INCREMENT")) =>
            {
                if !matches!(ty, ColumnType::Integer { .. }) {
                    return Err(SqlError::new(
                        1063,
                        "42000",
                        format!(
                            "Incorrect column specifier for column '{}': AUTO_INCREMENT needs an integer column",
                            c.name.value
                        ),
                    ));
                }
                spec.auto_increment = true;
            }
            ColumnOption::ForeignKey(_) => inline_reference_ignored(session),
            ColumnOption::Collation(name) => {
                let collation = collation_named(&name.to_string())?;
                if !ty.is_string() {
                    return Err(SqlError::new(
                        1253,
                        "42000",
                        format!(
                            "COLLATE '{name}' is not valid for column '{}': only text columns have a collation",
                            c.name.value
                        ),
                    ));
                }
                spec.def.collation = collation;
            }
            ColumnOption::CharacterSet(name) => {
                // A COLLATE clause, before or after, takes precedence.
                let named_collation = c.options.iter().any(|o| matches!(o.option, ColumnOption::Collation(_)));
                let collation = charset_collation(&name.to_string())?;
                if !named_collation {
                    spec.def = spec.def.collated(collation);
                }
            }
            ColumnOption::Comment(text) if text.starts_with(crate::parse::STORAGE_MARKER) => {
                let disk = text.ends_with("DISK");
                spec.storage = Some(if disk { Storage::Disk } else { Storage::Memory });
            }
            ColumnOption::Comment(_) => {}
            other => return Err(SqlError::unsupported(format!("column option {other} is not supported"))),
        }
    }
    // A NOT NULL ENUM without a DEFAULT takes its first member (MySQL).
    if spec.def.ty == ColumnType::Enum && !spec.def.nullable && spec.def.default.is_none() {
        spec.def.default = spec.def.members.first().cloned().map(Value::Str);
    }
    Ok(spec)
}

/// `ALTER TABLE ... ADD [COLUMN] ...`: the new columns go after the existing
/// ones, and rows already stored read each new column's DEFAULT (NULL
/// without one; for NOT NULL columns the type's zero value, as MySQL fills
/// them) without being rewritten.
async fn add_columns(
    session: &mut Session,
    db: &str,
    t: &str,
    added: &[(&ast::ColumnDef, bool, &Option<ast::MySQLColumnPosition>)],
) -> SqlResult<()> {
    let shared = session.shared.clone();
    let def = shared.client.table(db, t).await?.def().clone();
    let mut columns: Vec<ColumnDef> = Vec::new();
    let mut fill = Vec::new();
    let mut unique = Vec::new();
    for &(c, if_not_exists, position) in added {
        let name = &c.name.value;
        let exists = def.visible_columns().map(|(_, d)| d).chain(&columns).any(|d| d.name.eq_ignore_ascii_case(name));
        if exists && if_not_exists {
            session.warnings.push(("Note", crate::error::ER_DUP_FIELDNAME, format!("Duplicate column name '{name}'")));
            continue;
        }
        if exists {
            return Err(SqlError::new(
                crate::error::ER_DUP_FIELDNAME,
                "42S21",
                format!("Duplicate column name '{name}'"),
            ));
        }
        if position.is_some() {
            return Err(SqlError::unsupported(format!(
                "ADD COLUMN {name} FIRST/AFTER is not supported: new columns go after the existing ones (drop the position clause)"
            )));
        }
        let mut spec = column_spec(session, c, shown_table_collation(&def))?;
        // Refused below for a disk column (tables with disk columns add none).
        spec.def.storage = spec.storage.unwrap_or_default();
        if spec.primary_key || spec.auto_increment {
            return Err(SqlError::unsupported(format!(
                "ADD COLUMN {name} with PRIMARY KEY or AUTO_INCREMENT is not supported: a table's primary key is fixed when it is created"
            )));
        }
        let value = fill_value(&spec.def)?;
        if spec.unique {
            unique.push(spec.def.name.clone());
        }
        columns.push(spec.def);
        fill.push(value);
    }
    if !columns.is_empty() {
        shared.client.add_columns(db, t, columns, fill).await?;
    }
    let mut taken: Vec<String> = def.indexes.iter().map(|i| i.name.clone()).collect();
    for column in unique {
        let name = index_name(&taken, None, std::slice::from_ref(&column))?;
        taken.push(name.clone());
        create_index(&shared, db, t, &name, &[column], true).await?;
    }
    Ok(())
}

/// What existing rows hold in a new column: the current time in one the
/// clock fills, its DEFAULT, NULL, or MySQL's implicit default.
fn fill_value(column: &ColumnDef) -> SqlResult<Value> {
    if column.clock.on_insert {
        let now = crate::session::to_digits(crate::session::now_micros(), column.fraction_digits);
        return crate::eval::to_column(Value::DateTime(now), column);
    }
    match &column.default {
        Some(default) => Ok(default.clone()),
        None if column.nullable => Ok(Value::Null),
        None => implicit_default(column),
    }
}

/// What MySQL stores in existing rows for a new NOT NULL column without a
/// DEFAULT.
fn implicit_default(column: &ColumnDef) -> SqlResult<Value> {
    let zero = match column.ty {
        ColumnType::Integer { unsigned: true, .. } => Value::UInt(0),
        ColumnType::Integer { .. } => Value::Int(0),
        ColumnType::Float | ColumnType::Double => Value::Float(0.0),
        ColumnType::Decimal { .. } => Value::Int(0),
        ColumnType::Boolean => Value::Bool(false),
        ColumnType::Time => Value::Time(0),
        ColumnType::Year | ColumnType::Bit(_) => Value::UInt(0),
        // A NOT NULL ENUM's default is its first member (column_spec).
        ColumnType::Enum => column.default.clone().unwrap_or(Value::Null),
        ColumnType::Date | ColumnType::DateTime | ColumnType::Timestamp => {
            return Err(SqlError::new(
                1292,
                "22007",
                format!(
                    "Incorrect date value: '0000-00-00' for column '{}': give the new NOT NULL column a DEFAULT for existing rows",
                    column.name
                ),
            ))
        }
        ty if ty.is_binary() => Value::Bytes(Vec::new()),
        _ => Value::Str(String::new()),
    };
    crate::eval::to_column(zero, column)
}

async fn create_table(session: &mut Session, ct: &ast::CreateTable) -> SqlResult<Response> {
    let shared = session.shared.clone();
    if ct.query.is_some() || ct.like.is_some() {
        return Err(SqlError::unsupported("CREATE TABLE ... SELECT / LIKE is not supported"));
    }
    let (d, t) = table_name(&ct.name)?;
    let db = d.or_else(|| session.db.clone()).ok_or_else(SqlError::no_db)?;
    if !database_exists(&shared, &db).await? {
        return Err(SqlError::bad_db(&db));
    }
    if ct.columns.is_empty() {
        return Err(SqlError::new(1113, "42000", "A table must have at least 1 column"));
    }
    let mut columns = Vec::new();
    let mut primary: Vec<String> = Vec::new();
    let mut auto: Option<String> = None;
    // (name, columns, unique), created in this order after the table.
    let mut indexes: Vec<(String, Vec<String>, bool)> = Vec::new();
    let mut unique_columns = Vec::new();
    let mut declared_storage = Vec::new();
    let collation = match table_collation(&ct.table_options)? {
        Some(c) => c,
        None => database_collation(&shared, &db).await?,
    };
    for c in &ct.columns {
        let column = column_spec(session, c, collation)?;
        if column.primary_key {
            primary = vec![c.name.value.clone()];
        }
        if column.unique {
            unique_columns.push(c.name.value.clone());
        }
        if column.auto_increment {
            if auto.is_some() {
                return Err(SqlError::new(
                    1075,
                    "42000",
                    "Incorrect table definition; there can be only one auto column",
                ));
            }
            auto = Some(c.name.value.clone());
        }
        declared_storage.push(column.storage);
        columns.push(column.def);
    }
    let mut uniques: Vec<(Option<&ast::Ident>, Vec<String>)> =
        unique_columns.into_iter().map(|c| (None, vec![c])).collect();
    let mut named: Vec<(Option<&ast::Ident>, Vec<String>)> = Vec::new();
    let mut key_clauses = Vec::new();
    for constraint in &ct.constraints {
        match constraint {
            TableConstraint::PrimaryKey(pk) => primary = index_column_names(&pk.columns),
            TableConstraint::Index(ic) => named.push((ic.name.as_ref(), index_column_names(&ic.columns))),
            TableConstraint::Unique(u) => {
                uniques.push((u.index_name.as_ref().or(u.name.as_ref()), index_column_names(&u.columns)))
            }
            TableConstraint::ForeignKey(fk) => key_clauses.push(foreign_keys::clause(&db, fk)?),
            other => return Err(SqlError::unsupported(format!("table constraint {other} is not supported"))),
        }
    }
    let mut taken: Vec<String> = vec!["PRIMARY".into()];
    for (given, cols) in named {
        let name = index_name(&taken, given, &cols)?;
        taken.push(name.clone());
        indexes.push((name, cols, false));
    }
    let same_columns =
        |a: &[String], b: &[String]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.eq_ignore_ascii_case(y));
    for (given, cols) in uniques {
        // The primary key is unique already.
        if same_columns(&cols, &primary) {
            continue;
        }
        let name = index_name(&taken, given, &cols)?;
        taken.push(name.clone());
        indexes.push((name, cols, true));
    }
    // A table without a primary key gets a hidden one, numbered like an
    // AUTO_INCREMENT column (rows are distributed by their primary key).
    if primary.is_empty() {
        if let Some(a) = &auto {
            return Err(SqlError::new(
                1075,
                "42000",
                format!(
                    "Incorrect table definition: the AUTO_INCREMENT column '{a}' of a table without a PRIMARY KEY must be its PRIMARY KEY in latsdb"
                ),
            ));
        }
        columns.insert(
            0,
            ColumnDef::new(HIDDEN_KEY_COLUMN, ColumnType::Integer { width: IntWidth::Big, unsigned: true }).not_null(),
        );
        primary = vec![HIDDEN_KEY_COLUMN.to_string()];
    }
    if let Some(a) = &auto {
        if !primary.iter().any(|p| p.eq_ignore_ascii_case(a))
            && !indexes.iter().any(|(_, c, _)| c.first().is_some_and(|f| f.eq_ignore_ascii_case(a)))
        {
            return Err(SqlError::new(
                1075,
                "42000",
                "Incorrect table definition; there can be only one auto column and it must be defined as a key",
            ));
        }
    }
    let keys = create_foreign_keys(session, (&db, &t), &columns, &primary, &mut indexes, &key_clauses).await?;
    // Every key column must exist before anything is created: a failed
    // index would leave the table behind.
    let exists = |name: &String| columns.iter().any(|c| c.name.eq_ignore_ascii_case(name));
    let missing = indexes
        .iter()
        .flat_map(|(_, cols, _)| cols)
        .find(|c| c.eq_ignore_ascii_case(HIDDEN_KEY_COLUMN) || !exists(c))
        .or_else(|| primary.iter().find(|c| !exists(c)));
    if let Some(key_column) = missing {
        return Err(SqlError::new(1072, "42000", format!("Key column '{key_column}' doesn't exist in table")));
    }
    let indexed: Vec<&String> = primary.iter().chain(indexes.iter().flat_map(|(_, cols, _)| cols)).collect();
    let table_storage = table_storage(&ct.table_options)?.unwrap_or(shared.client.layout().default_column_storage);
    place_columns(&mut columns, &declared_storage, &indexed, table_storage)?;
    let spec = TableSpec { database: db.clone(), name: t.clone(), columns, primary_key: primary, partitions: 0 };
    create_and_index(&shared, spec, ct.if_not_exists, auto, &indexes, keys).await
}

/// Creates the table CREATE TABLE describes, then its auto-increment
/// counter, its indexes and its foreign keys (the table goes again when its
/// keys are refused).
async fn create_and_index(
    shared: &Shared,
    spec: TableSpec,
    if_not_exists: bool,
    auto: Option<String>,
    indexes: &[(String, Vec<String>, bool)],
    keys: Vec<latsdb_types::schema::ForeignKeyDef>,
) -> SqlResult<Response> {
    let (db, t) = (spec.database.clone(), spec.name.clone());
    let table = match shared.client.create_table(spec).await {
        Ok(t) => t,
        Err(e) if e.code == ErrorCode::TableExists && if_not_exists => return Ok(Response::ok()),
        Err(e) if e.code == ErrorCode::TableExists => {
            return Err(SqlError::new(crate::error::ER_TABLE_EXISTS, "42S01", format!("Table '{t}' already exists")))
        }
        Err(e) => return Err(e.into()),
    };
    // The counter first: the table takes rows as soon as it exists.
    let numbered = match auto {
        Some(a) => Some(table.def().column_id(&a)?),
        None => table.def().hidden_key(),
    };
    if let Some(c) = numbered {
        shared.register_auto_column(&table, c, 1).await?;
    }
    for (name, cols, unique) in indexes {
        create_index(shared, &db, &t, name, cols, *unique).await?;
    }
    if !keys.is_empty() {
        let changes = keys.into_iter().map(ColumnChange::AddForeignKey).collect();
        if let Err(e) = shared.client.change_columns(&db, &t, changes).await {
            // CREATE TABLE is one statement: the table goes with its keys.
            let _ = drop_table(shared, table.def()).await;
            return Err(e.into());
        }
    }
    Ok(Response::ok())
}

/// ALTER TABLE ... DROP FOREIGN KEY `name` (1091 when the table has none).
async fn drop_foreign_key(shared: &Shared, db: &str, t: &str, name: &str) -> SqlResult<()> {
    let def = shared.client.refresh_table(db, t).await?;
    let Some(key) = def.def().foreign_keys.iter().find(|k| k.name.eq_ignore_ascii_case(name)) else {
        return Err(SqlError::new(1091, "42000", format!("Can't DROP FOREIGN KEY `{name}`; check that it exists")));
    };
    let change = ColumnChange::DropForeignKey { name: key.name.clone() };
    shared.client.change_columns(db, t, vec![change]).await?;
    Ok(())
}

/// DROP TABLE of a parent whose children stay (MySQL 8's 3730): a key of
/// the table itself, or of a table the same statement drops, is no obstacle.
fn refuse_referenced(def: &TableDef, dropped: &[(String, String)]) -> SqlResult<()> {
    let staying = def.referenced_by.iter().find(|r| {
        !dropped.iter().any(|(d, t)| d.eq_ignore_ascii_case(&r.database) && t.eq_ignore_ascii_case(&r.table))
    });
    match staying {
        Some(r) => Err(SqlError::new(
            3730,
            "HY000",
            format!(
                "Cannot drop table '{}' referenced by a foreign key constraint '{}' on table '{}'.",
                def.name, r.name, r.table
            ),
        )),
        None => Ok(()),
    }
}

/// ALTER TABLE ... ADD FOREIGN KEY: the key is resolved against the table,
/// its columns get an index if none starts with them, and with
/// `foreign_key_checks` on every stored row must find its parent (1452).
async fn add_foreign_key(session: &Session, db: &str, t: &str, fk: &ast::ForeignKeyConstraint) -> SqlResult<()> {
    let shared = &session.shared;
    let clause = foreign_keys::clause(db, fk)?;
    let table = shared.table(db, t).await?;
    let def = table.def();
    let checks = session.foreign_key_checks();
    let key = foreign_keys::resolve(shared, checks, &foreign_keys::Child::of(def), &clause).await?;
    let primary: Vec<String> = def.primary_key.iter().map(|&c| def.columns[c as usize].name.clone()).collect();
    let indexes: Vec<Vec<String>> = def
        .indexes
        .iter()
        .filter(|i| i.id != 0)
        .map(|i| i.columns.iter().map(|&c| def.columns[c as usize].name.clone()).collect())
        .collect();
    if !foreign_keys::has_index(&primary, &indexes, &clause.columns) {
        let given = ast::Ident::new(clause.index_name.clone().unwrap_or_else(|| key.name.clone()));
        let taken = index_names(shared, db, t).await?;
        let free = !taken.iter().any(|n| n.eq_ignore_ascii_case(&given.value));
        let name = index_name(&taken, free.then_some(&given), &clause.columns)?;
        create_index(shared, db, t, &name, &clause.columns, false).await?;
    }
    // The key first, then the rows: a write from then on is checked by its
    // writer (one planned before is refused with a changed version), so no
    // row slips between the check and the key.
    let name = key.name.clone();
    let table = match shared.client.change_columns(db, t, vec![ColumnChange::AddForeignKey(key.clone())]).await {
        Ok(table) => table,
        Err(e) => {
            // Added but not linked to its parent (the management server
            // could not give the parent its new version): take it back.
            let _ = shared.client.change_columns(db, t, vec![ColumnChange::DropForeignKey { name }]).await;
            return Err(e.into());
        }
    };
    if checks {
        if let Err(e) = crate::foreign::check_stored_rows(&shared.client, table.def(), &key).await {
            let _ = shared.client.change_columns(db, t, vec![ColumnChange::DropForeignKey { name }]).await;
            return Err(e);
        }
    }
    Ok(())
}

/// The foreign keys of a table CREATE TABLE makes, resolved against its
/// columns; an index is added to `indexes` for each key no index starts with.
async fn create_foreign_keys(
    session: &Session,
    (db, t): (&str, &str),
    columns: &[ColumnDef],
    primary: &[String],
    indexes: &mut Vec<(String, Vec<String>, bool)>,
    clauses: &[foreign_keys::Clause],
) -> SqlResult<Vec<latsdb_types::schema::ForeignKeyDef>> {
    let unique_keys: Vec<Vec<String>> = std::iter::once(primary.to_vec())
        .chain(indexes.iter().filter(|(_, _, unique)| *unique).map(|(_, c, _)| c.clone()))
        .collect();
    let mut child = foreign_keys::Child { database: db, name: t, columns, unique_keys, taken: Vec::new() };
    let mut keys = Vec::with_capacity(clauses.len());
    for clause in clauses {
        let key = foreign_keys::resolve(&session.shared, session.foreign_key_checks(), &child, clause).await?;
        let index_columns: Vec<Vec<String>> = indexes.iter().map(|(_, c, _)| c.clone()).collect();
        if !foreign_keys::has_index(primary, &index_columns, &clause.columns) {
            let taken: Vec<String> =
                std::iter::once("PRIMARY".to_string()).chain(indexes.iter().map(|(n, _, _)| n.clone())).collect();
            let given = ast::Ident::new(clause.index_name.clone().unwrap_or_else(|| key.name.clone()));
            let free = !taken.iter().any(|n| n.eq_ignore_ascii_case(&given.value));
            let name = index_name(&taken, free.then_some(&given), &clause.columns)?;
            indexes.push((name, clause.columns.clone(), false));
        }
        child.taken.push(key.name.clone());
        keys.push(key);
    }
    Ok(keys)
}

async fn describe(shared: &Shared, db: &str, t: &str, full: bool) -> SqlResult<Response> {
    let table = shared.table(db, t).await?;
    let def = table.def();
    let auto = shared.auto_counter(def.id).await?.map(|(c, _)| c);
    let mut rows = Vec::new();
    for (i, c) in def.visible_columns() {
        let key = if def.primary_key.contains(&i) {
            "PRI"
        } else if def.indexes.iter().any(|ix| ix.columns.first() == Some(&i)) {
            "MUL"
        } else {
            ""
        };
        let extra = column_extra(c, auto.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(&c.name)));
        let mut r = vec![Value::Str(c.name.clone()), Value::Str(column_type_text(c))];
        if full {
            r.push(if c.ty.is_string() { Value::Str(c.collation.name().into()) } else { Value::Null });
        }
        r.extend([
            Value::Str(if c.nullable { "YES" } else { "NO" }.into()),
            Value::Str(key.into()),
            shown_default(c),
            Value::Str(extra),
        ]);
        if full {
            r.extend([Value::Str("select,insert,update,references".into()), Value::Str(String::new())]);
        }
        rows.push(r);
    }
    let mut cols = vec![text_col("Field"), text_col("Type")];
    if full {
        cols.push(text_col("Collation"));
    }
    cols.extend([text_col("Null"), text_col("Key"), text_col("Default"), text_col("Extra")]);
    if full {
        cols.extend([text_col("Privileges"), text_col("Comment")]);
    }
    Ok(rows_response(cols, rows))
}

/// A column's type as MySQL spells it in DESCRIBE, SHOW CREATE TABLE and
/// information_schema.COLUMNS (BOOLEAN is stored as tinyint(1), which
/// drivers map back to a boolean; DATETIME(3) names its digits).
fn column_type_text(c: &ColumnDef) -> String {
    let members = || {
        let quoted = c.members.iter().map(|m| format!("'{}'", m.replace('\\', "\\\\").replace('\'', "''")));
        quoted.collect::<Vec<_>>().join(",")
    };
    match c.ty {
        ColumnType::Boolean => "tinyint(1)".into(),
        ColumnType::DateTime | ColumnType::Timestamp | ColumnType::Time if c.fraction_digits > 0 => {
            format!("{}({})", c.ty.sql_name().to_lowercase(), c.fraction_digits)
        }
        ColumnType::Enum => format!("enum({})", members()),
        ColumnType::Set => format!("set({})", members()),
        other => other.sql_name().to_lowercase(),
    }
}

/// The current time as a column's clock writes it, spelled as MySQL shows
/// it: `CURRENT_TIMESTAMP`, or `CURRENT_TIMESTAMP(3)` for a DATETIME(3).
fn clock_text(c: &ColumnDef) -> String {
    match c.fraction_digits {
        0 => "CURRENT_TIMESTAMP".into(),
        n => format!("CURRENT_TIMESTAMP({n})"),
    }
}

/// The Default of DESCRIBE and information_schema.COLUMNS.
fn shown_default(c: &ColumnDef) -> Value {
    if c.clock.on_insert {
        return Value::Str(clock_text(c));
    }
    c.default.as_ref().map(|d| Value::Str(default_text(d, c))).unwrap_or(Value::Null)
}

/// A column's default as MySQL shows it: times with the column's digits,
/// a BIT as its bits (`b'101'` in SHOW CREATE TABLE, the quotes added by
/// [`quote`]).
fn default_text(d: &Value, c: &ColumnDef) -> String {
    match (d, c.ty) {
        (Value::UInt(bits), ColumnType::Bit(_)) => format!("b'{bits:b}'"),
        (Value::UInt(year), ColumnType::Year) => format!("{year:04}"),
        _ => latsdb_types::value::temporal_text(d, c).unwrap_or_else(|| to_text(d)),
    }
}

/// The Extra of DESCRIBE and information_schema.COLUMNS, in MySQL 8's words.
fn column_extra(c: &ColumnDef, auto_increment: bool) -> String {
    let mut extra = Vec::new();
    if auto_increment {
        extra.push("auto_increment".to_string());
    }
    if c.clock.on_insert {
        extra.push("DEFAULT_GENERATED".into());
    }
    if c.clock.on_update {
        extra.push(format!("on update {}", clock_text(c)));
    }
    extra.join(" ")
}

fn quote(v: &Value, c: &ColumnDef) -> String {
    match (v, c.ty) {
        (Value::Null, _) => "NULL".into(),
        (Value::UInt(_), ColumnType::Bit(_)) => default_text(v, c),
        (Value::UInt(_), ColumnType::Year) => format!("'{}'", default_text(v, c)),
        (Value::Int(_) | Value::UInt(_) | Value::Decimal(_) | Value::Float(_), _) => format!("'{}'", to_text(v)),
        _ => format!("'{}'", default_text(v, c).replace('\'', "''")),
    }
}

pub fn show_create(def: &TableDef, auto: Option<(&str, u64)>) -> String {
    let mut lines = Vec::new();
    let collation = shown_table_collation(def);
    // The hidden key's counter is no AUTO_INCREMENT the user declared.
    let auto = auto.filter(|(a, _)| def.column_id(a).is_ok_and(|c| def.is_visible(c)));
    for (_, c) in def.visible_columns() {
        let mut l = format!("  `{}` {}", c.name, column_type_text(c));
        if c.ty.is_string() && c.collation != collation {
            l.push_str(&format!(" COLLATE {}", c.collation.name()));
        }
        if !c.nullable {
            l.push_str(" NOT NULL");
        }
        if auto.is_some_and(|(a, _)| a.eq_ignore_ascii_case(&c.name)) {
            l.push_str(" AUTO_INCREMENT");
        } else if c.clock.on_insert {
            l.push_str(&format!(" DEFAULT {}", clock_text(c)));
        } else if let Some(d) = &c.default {
            l.push_str(&format!(" DEFAULT {}", quote(d, c)));
        } else if c.nullable {
            l.push_str(" DEFAULT NULL");
        }
        if c.clock.on_update {
            l.push_str(&format!(" ON UPDATE {}", clock_text(c)));
        }
        if c.storage == Storage::Disk {
            // As NDB shows it: a version comment MySQL servers read too.
            l.push_str(" /*!50120 STORAGE DISK */");
        }
        lines.push(l);
    }
    let col_list =
        |ids: &[u16]| ids.iter().map(|&i| format!("`{}`", def.columns[i as usize].name)).collect::<Vec<_>>().join(",");
    if def.hidden_key().is_none() {
        lines.push(format!("  PRIMARY KEY ({})", col_list(&def.primary_key)));
    }
    for ix in def.indexes.iter().skip(1) {
        let kind = if ix.unique { "UNIQUE KEY" } else { "KEY" };
        lines.push(format!("  {kind} `{}` ({})", ix.name, col_list(&ix.columns)));
    }
    for key in &def.foreign_keys {
        lines.push(format!("  {}", crate::foreign::constraint_text(def, key)));
    }
    let auto_part = auto.map(|(_, n)| format!(" AUTO_INCREMENT={n}")).unwrap_or_default();
    format!(
        "CREATE TABLE `{}` (\n{}\n) ENGINE=ndbcluster{} DEFAULT CHARSET=utf8mb4 COLLATE={}",
        def.name,
        lines.join(",\n"),
        auto_part,
        collation.name()
    )
}

/// A table's Rows, Avg_row_length and Data_length (SHOW TABLE STATUS,
/// information_schema.TABLES) from the data nodes' counts: the rows and the
/// bytes of their keys and values, without index or map overhead. A table
/// missing from the counts (created a moment ago) shows 0.
fn size_columns(t: &TableDef, sizes: &std::collections::HashMap<u32, (u64, u64)>) -> (Value, Value, Value) {
    let (rows, bytes) = sizes.get(&t.id).copied().unwrap_or((0, 0));
    let avg = bytes.checked_div(rows).unwrap_or(0);
    (Value::UInt(rows), Value::UInt(avg), Value::UInt(bytes))
}

/// information_schema tables: SCHEMATA, TABLES, COLUMNS, STATISTICS.
pub async fn information_schema(shared: &Shared, name: &str) -> SqlResult<VirtualTable> {
    let s = |v: &str| Value::Str(v.to_string());
    let tables: Vec<TableDef> =
        shared.client.list_tables().await?.into_iter().filter(|t| t.database != SYSTEM_DATABASE).collect();
    Ok(match name.to_ascii_uppercase().as_str() {
        "SCHEMATA" => VirtualTable {
            columns: [
                "CATALOG_NAME",
                "SCHEMA_NAME",
                "DEFAULT_CHARACTER_SET_NAME",
                "DEFAULT_COLLATION_NAME",
                "SQL_PATH",
            ]
            .iter()
            .map(|c| text_col(c))
            .collect(),
            rows: {
                let mut rows = Vec::new();
                for d in databases(shared).await?.into_iter().filter(|d| d != SYSTEM_DATABASE) {
                    let collation = database_collation(shared, &d).await?;
                    rows.push(vec![s("def"), Value::Str(d), s("utf8mb4"), s(collation.name()), Value::Null]);
                }
                rows
            },
        },
        "TABLES" => VirtualTable {
            columns: vec![
                text_col("TABLE_CATALOG"),
                text_col("TABLE_SCHEMA"),
                text_col("TABLE_NAME"),
                text_col("TABLE_TYPE"),
                text_col("ENGINE"),
                int_col("VERSION"),
                text_col("ROW_FORMAT"),
                int_col("TABLE_ROWS"),
                int_col("AVG_ROW_LENGTH"),
                int_col("DATA_LENGTH"),
                int_col("AUTO_INCREMENT"),
                text_col("TABLE_COLLATION"),
                text_col("TABLE_COMMENT"),
            ],
            rows: {
                let sizes = shared.client.table_sizes().await?;
                tables
                    .iter()
                    .map(|t| {
                        let (rows, avg, bytes) = size_columns(t, &sizes);
                        vec![
                            s("def"),
                            s(&t.database),
                            s(&t.name),
                            s("BASE TABLE"),
                            s("ndbcluster"),
                            Value::Int(10),
                            s("Dynamic"),
                            rows,
                            avg,
                            bytes,
                            Value::Null,
                            s(shown_table_collation(t).name()),
                            s(""),
                        ]
                    })
                    .collect()
            },
        },
        "COLUMNS" => {
            let mut rows = Vec::new();
            for t in &tables {
                let auto = match shared.client.table(&t.database, &t.name).await {
                    Ok(handle) => {
                        use crate::dml::AutoIncrement;
                        shared.auto_column(&handle).await?
                    }
                    Err(_) => None,
                };
                for (position, (i, c)) in t.visible_columns().enumerate() {
                    let (data_type, max_len, precision, scale) = info_type(c);
                    rows.push(vec![
                        s("def"),
                        s(&t.database),
                        s(&t.name),
                        s(&c.name),
                        Value::Int(position as i64 + 1),
                        shown_default(c),
                        s(if c.nullable { "YES" } else { "NO" }),
                        s(data_type),
                        max_len,
                        precision,
                        scale,
                        if c.ty.is_string() { s("utf8mb4") } else { Value::Null },
                        if c.ty.is_string() { s(c.collation.name()) } else { Value::Null },
                        s(&column_type_text(c)),
                        s(if t.primary_key.contains(&i) {
                            "PRI"
                        } else if t.indexes.iter().any(|ix| ix.columns.first() == Some(&i)) {
                            "MUL"
                        } else {
                            ""
                        }),
                        s(&column_extra(c, auto == Some(i))),
                        s(""),
                        match c.ty {
                            ColumnType::DateTime | ColumnType::Timestamp => Value::Int(c.fraction_digits.into()),
                            ColumnType::Date => Value::Int(0),
                            _ => Value::Null,
                        },
                        match c.ty {
                            ColumnType::Char(n) | ColumnType::VarChar(n) => Value::Int(n as i64 * 4),
                            ColumnType::Binary(n) | ColumnType::VarBinary(n) => Value::Int(n as i64),
                            ColumnType::Text | ColumnType::Blob => Value::Int(65_535),
                            _ => Value::Null,
                        },
                        s("select,insert,update,references"),
                        Value::Null,
                    ]);
                }
            }
            VirtualTable {
                columns: vec![
                    text_col("TABLE_CATALOG"),
                    text_col("TABLE_SCHEMA"),
                    text_col("TABLE_NAME"),
                    text_col("COLUMN_NAME"),
                    int_col("ORDINAL_POSITION"),
                    text_col("COLUMN_DEFAULT"),
                    text_col("IS_NULLABLE"),
                    text_col("DATA_TYPE"),
                    int_col("CHARACTER_MAXIMUM_LENGTH"),
                    int_col("NUMERIC_PRECISION"),
                    int_col("NUMERIC_SCALE"),
                    text_col("CHARACTER_SET_NAME"),
                    text_col("COLLATION_NAME"),
                    text_col("COLUMN_TYPE"),
                    text_col("COLUMN_KEY"),
                    text_col("EXTRA"),
                    text_col("COLUMN_COMMENT"),
                    int_col("DATETIME_PRECISION"),
                    int_col("CHARACTER_OCTET_LENGTH"),
                    text_col("PRIVILEGES"),
                    text_col("GENERATION_EXPRESSION"),
                ],
                rows,
            }
        }
        "STATISTICS" => {
            let mut rows = Vec::new();
            for t in &tables {
                for ix in t.visible_indexes() {
                    for (seq, &c) in ix.columns.iter().enumerate() {
                        rows.push(vec![
                            s("def"),
                            s(&t.database),
                            s(&t.name),
                            Value::Int(!ix.unique as i64),
                            s(&t.database),
                            s(&ix.name),
                            Value::Int(seq as i64 + 1),
                            s(&t.columns[c as usize].name),
                            s("BTREE"),
                            s("A"),
                            Value::Null,
                            Value::Null,
                            Value::Null,
                            s(if t.columns[c as usize].nullable { "YES" } else { "" }),
                            s(""),
                            s(""),
                        ]);
                    }
                }
            }
            VirtualTable {
                columns: vec![
                    text_col("TABLE_CATALOG"),
                    text_col("TABLE_SCHEMA"),
                    text_col("TABLE_NAME"),
                    int_col("NON_UNIQUE"),
                    text_col("INDEX_SCHEMA"),
                    text_col("INDEX_NAME"),
                    int_col("SEQ_IN_INDEX"),
                    text_col("COLUMN_NAME"),
                    text_col("INDEX_TYPE"),
                    text_col("COLLATION"),
                    int_col("CARDINALITY"),
                    int_col("SUB_PART"),
                    text_col("PACKED"),
                    text_col("NULLABLE"),
                    text_col("COMMENT"),
                    text_col("INDEX_COMMENT"),
                ],
                rows,
            }
        }
        "KEY_COLUMN_USAGE" => {
            let mut rows = Vec::new();
            for t in &tables {
                for ix in t.visible_indexes().filter(|i| i.unique) {
                    for (seq, &c) in ix.columns.iter().enumerate() {
                        rows.push(vec![
                            s("def"),
                            s(&t.database),
                            s(&ix.name),
                            s("def"),
                            s(&t.database),
                            s(&t.name),
                            s(&t.columns[c as usize].name),
                            Value::Int(seq as i64 + 1),
                            Value::Null,
                            Value::Null,
                            Value::Null,
                            Value::Null,
                        ]);
                    }
                }
                for key in &t.foreign_keys {
                    for (seq, (&c, parent_column)) in key.columns.iter().zip(&key.parent_columns).enumerate() {
                        rows.push(vec![
                            s("def"),
                            s(&t.database),
                            s(&key.name),
                            s("def"),
                            s(&t.database),
                            s(&t.name),
                            s(&t.columns[c as usize].name),
                            Value::Int(seq as i64 + 1),
                            Value::Int(seq as i64 + 1),
                            s(&key.parent_database),
                            s(&key.parent_table),
                            s(parent_column),
                        ]);
                    }
                }
            }
            let text = [
                "CONSTRAINT_CATALOG",
                "CONSTRAINT_SCHEMA",
                "CONSTRAINT_NAME",
                "TABLE_CATALOG",
                "TABLE_SCHEMA",
                "TABLE_NAME",
                "COLUMN_NAME",
            ];
            let refs = ["REFERENCED_TABLE_SCHEMA", "REFERENCED_TABLE_NAME", "REFERENCED_COLUMN_NAME"];
            VirtualTable {
                columns: text
                    .iter()
                    .map(|c| text_col(c))
                    .chain([int_col("ORDINAL_POSITION"), int_col("POSITION_IN_UNIQUE_CONSTRAINT")])
                    .chain(refs.iter().map(|c| text_col(c)))
                    .collect(),
                rows,
            }
        }
        "PROCESSLIST" => VirtualTable {
            columns: vec![
                int_col("ID"),
                text_col("USER"),
                text_col("HOST"),
                text_col("DB"),
                text_col("COMMAND"),
                int_col("TIME"),
                text_col("STATE"),
                ColumnDef::new("INFO", ColumnType::Text),
            ],
            rows: processlist_rows(shared, true),
        },
        "TABLE_CONSTRAINTS" => VirtualTable {
            columns: [
                "CONSTRAINT_CATALOG",
                "CONSTRAINT_SCHEMA",
                "CONSTRAINT_NAME",
                "TABLE_SCHEMA",
                "TABLE_NAME",
                "CONSTRAINT_TYPE",
                "ENFORCED",
            ]
            .iter()
            .map(|c| text_col(c))
            .collect(),
            rows: tables
                .iter()
                .flat_map(|t| t.visible_indexes().filter(|i| i.unique).map(move |i| (t, i)))
                .map(|(t, i)| {
                    let kind = if i.id == 0 { "PRIMARY KEY" } else { "UNIQUE" };
                    vec![s("def"), s(&t.database), s(&i.name), s(&t.database), s(&t.name), s(kind), s("YES")]
                })
                .chain(tables.iter().flat_map(|t| {
                    t.foreign_keys.iter().map(move |k| {
                        vec![
                            s("def"),
                            s(&t.database),
                            s(&k.name),
                            s(&t.database),
                            s(&t.name),
                            s("FOREIGN KEY"),
                            s("YES"),
                        ]
                    })
                }))
                .collect(),
        },
        "REFERENTIAL_CONSTRAINTS" => VirtualTable {
            columns: [
                "CONSTRAINT_CATALOG",
                "CONSTRAINT_SCHEMA",
                "CONSTRAINT_NAME",
                "UNIQUE_CONSTRAINT_CATALOG",
                "UNIQUE_CONSTRAINT_SCHEMA",
                "UNIQUE_CONSTRAINT_NAME",
                "MATCH_OPTION",
                "UPDATE_RULE",
                "DELETE_RULE",
                "TABLE_NAME",
                "REFERENCED_TABLE_NAME",
            ]
            .iter()
            .map(|c| text_col(c))
            .collect(),
            rows: referential_rows(&tables),
        },
        other => return Err(SqlError::no_such_table("information_schema", other)),
    })
}

/// information_schema.REFERENTIAL_CONSTRAINTS: a row per foreign key, with
/// the parent's unique constraint its columns use (NULL while the parent
/// is missing).
fn referential_rows(tables: &[TableDef]) -> Vec<Vec<Value>> {
    let s = |v: &str| Value::Str(v.to_string());
    let mut rows = Vec::new();
    for t in tables {
        for key in &t.foreign_keys {
            let parent = tables.iter().find(|p| key.references(&p.database, &p.name));
            let unique = parent.and_then(|p| {
                p.indexes.iter().filter(|i| i.unique).find(|i| {
                    i.columns.len() == key.parent_columns.len()
                        && i.columns.iter().all(|&c| {
                            key.parent_columns.iter().any(|n| n.eq_ignore_ascii_case(&p.columns[c as usize].name))
                        })
                })
            });
            rows.push(vec![
                s("def"),
                s(&t.database),
                s(&key.name),
                s("def"),
                s(&key.parent_database),
                unique.map_or(Value::Null, |i| s(&i.name)),
                s("NONE"),
                s(key.on_update.sql()),
                s(key.on_delete.sql()),
                s(&t.name),
                s(&key.parent_table),
            ]);
        }
    }
    rows
}

fn info_type(c: &ColumnDef) -> (&'static str, Value, Value, Value) {
    let n = |v: u32| Value::Int(v as i64);
    // An ENUM's longest member, a SET's members with commas between.
    let member_chars = |joined: bool| {
        let lengths = c.members.iter().map(|m| m.chars().count() as u32);
        if joined {
            lengths.sum::<u32>() + c.members.len().saturating_sub(1) as u32
        } else {
            lengths.max().unwrap_or(0)
        }
    };
    match c.ty {
        ColumnType::Integer { width, .. } => (
            match width {
                IntWidth::Tiny => "tinyint",
                IntWidth::Small => "smallint",
                IntWidth::Medium => "mediumint",
                IntWidth::Int => "int",
                IntWidth::Big => "bigint",
            },
            Value::Null,
            n(match width {
                IntWidth::Tiny => 3,
                IntWidth::Small => 5,
                IntWidth::Medium => 7,
                IntWidth::Int => 10,
                IntWidth::Big => 19,
            }),
            n(0),
        ),
        ColumnType::Float => ("float", Value::Null, n(12), Value::Null),
        ColumnType::Double => ("double", Value::Null, n(22), Value::Null),
        ColumnType::Decimal { precision, scale } => ("decimal", Value::Null, n(precision as u32), n(scale as u32)),
        ColumnType::Char(l) => ("char", n(l), Value::Null, Value::Null),
        ColumnType::VarChar(l) => ("varchar", n(l), Value::Null, Value::Null),
        ColumnType::Binary(l) => ("binary", n(l), Value::Null, Value::Null),
        ColumnType::VarBinary(l) => ("varbinary", n(l), Value::Null, Value::Null),
        ColumnType::Text => ("text", n(65535), Value::Null, Value::Null),
        ColumnType::Blob => ("blob", n(65535), Value::Null, Value::Null),
        ColumnType::Date => ("date", Value::Null, Value::Null, Value::Null),
        ColumnType::DateTime => ("datetime", Value::Null, Value::Null, Value::Null),
        ColumnType::Timestamp => ("timestamp", Value::Null, Value::Null, Value::Null),
        ColumnType::Boolean => ("tinyint", Value::Null, n(3), n(0)),
        ColumnType::Time => ("time", Value::Null, Value::Null, Value::Null),
        ColumnType::Year => ("year", Value::Null, Value::Null, Value::Null),
        ColumnType::Bit(bits) => ("bit", Value::Null, n(u32::from(bits)), Value::Null),
        ColumnType::Enum => ("enum", n(member_chars(false)), Value::Null, Value::Null),
        ColumnType::Set => ("set", n(member_chars(true)), Value::Null, Value::Null),
    }
}
