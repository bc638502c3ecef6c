//! Primary-key operations: `pk-read` (RonDB-compatible), `pk-write` and
//! `pk-delete`, alone or many in one `batch`.
//!
//! Every operation of a batch is its own read-committed read or its own
//! single-row transaction. They are all planned first, then sent to the
//! data nodes together: the reads in one `Client::lookup` (every key in one
//! buffer, no allocation per read), the writes and deletes in one
//! `Client::batch`, each one round trip to each shard, all shards in
//! parallel; the answers are written into one buffer in request order.

use crate::json::{ColumnKeys, Fields, JsonOut, Scalar};
use crate::rondb::ErrorClass;
use crate::state::{ResolvedTable, Rest};
use crate::HttpError;
use latsdb_client::{Answers, Found, Lookups, Op, Outcome, Projection};
use latsdb_types::expr::Expr;
use latsdb_types::keycodec;
use latsdb_types::schema::{ColumnDef, ColumnId};
use latsdb_types::{DbError, ErrorCode, Value};
use serde::Deserialize;
use std::borrow::Cow;
use std::sync::Arc;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct Filter<'a> {
    #[serde(borrow, deserialize_with = "filter_column")]
    pub column: Cow<'a, str>,
    #[serde(borrow)]
    pub value: Scalar<'a>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ReadColumn<'a> {
    #[serde(borrow)]
    pub column: Cow<'a, str>,
    #[serde(borrow, default, rename = "dataReturnType")]
    pub data_return_type: Option<Cow<'a, str>>,
}

/// An operation's filters. Read by serde, a list of its own; read by the
/// fast path (`fastpath.rs`), a range of the batch's one list of filters
/// (`BatchBody::filters`), so that a batch item allocates none and stays
/// small to move.
#[derive(Debug)]
pub enum Filters<'a> {
    Own(Vec<Filter<'a>>),
    InBatch(std::ops::Range<u32>),
}

impl<'a> Filters<'a> {
    /// The filters, given the batch's list.
    pub fn get<'s>(&'s self, batch: &'s [Filter<'a>]) -> &'s [Filter<'a>] {
        match self {
            Filters::Own(list) => list,
            Filters::InBatch(range) => &batch[range.start as usize..range.end as usize],
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Filters::Own(list) => list.is_empty(),
            Filters::InBatch(range) => range.is_empty(),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Filters<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(Filters::Own)
    }
}

/// The body of any primary-key operation; which fields are required
/// depends on the operation and is checked in `plan`.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct OpBody<'a> {
    #[serde(borrow, default)]
    pub filters: Option<Filters<'a>>,
    /// Shared: the items of a batch that list the same columns hold one
    /// list (`fastpath`), and that list finds its projection once.
    #[serde(borrow, default, rename = "readColumns")]
    pub read_columns: Option<Arc<[ReadColumn<'a>]>>,
    #[serde(borrow, default, rename = "operationId")]
    pub operation_id: Option<Cow<'a, str>>,
    /// Column values of a `pk-write`, `pk-update` or `pk-insert`, as an
    /// object (latsdb's form; the key columns among them).
    #[serde(borrow, default)]
    pub data: Option<Fields<'a>>,
    /// The non-key column values of a write, as a list of `{column,
    /// value}` beside `filters` (RonDB's form).
    #[serde(borrow, default, rename = "writeColumns")]
    pub write_columns: Option<Vec<Filter<'a>>>,
}

impl<'a> OpBody<'a> {
    /// The operation's filters (none if it has none), given the batch's
    /// list (`Filters::InBatch`).
    pub fn filters<'s>(&'s self, batch: &'s [Filter<'a>]) -> &'s [Filter<'a>] {
        self.filters.as_ref().map(|f| f.get(batch)).unwrap_or_default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PkKind {
    Read,
    /// Insert the row or overwrite it whole.
    Write,
    /// Set the given columns of an existing row (404 when there is none).
    Update,
    /// Insert a row whose key is new (409 when it exists).
    Insert,
    Delete,
}

impl PkKind {
    /// The operation's name in a path: `pk-read` and so on.
    pub fn path(self) -> &'static str {
        match self {
            PkKind::Read => "pk-read",
            PkKind::Write => "pk-write",
            PkKind::Update => "pk-update",
            PkKind::Insert => "pk-insert",
            PkKind::Delete => "pk-delete",
        }
    }

    pub fn from_path(name: &str) -> Option<PkKind> {
        match name {
            "pk-read" => Some(PkKind::Read),
            "pk-write" => Some(PkKind::Write),
            "pk-update" => Some(PkKind::Update),
            "pk-insert" => Some(PkKind::Insert),
            "pk-delete" => Some(PkKind::Delete),
            _ => None,
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct BatchBody<'a> {
    #[serde(borrow)]
    pub operations: Vec<BatchItem<'a>>,
    /// The filters of every operation the fast path read (`Filters::InBatch`).
    #[serde(skip)]
    pub filters: Vec<Filter<'a>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct BatchItem<'a> {
    /// Absent, only this item fails (as RonDB answers); null, the batch.
    #[serde(borrow, default, deserialize_with = "method")]
    pub method: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "relative-url", deserialize_with = "relative_url")]
    pub relative_url: Cow<'a, str>,
    #[serde(borrow, deserialize_with = "op_body")]
    pub body: OpBody<'a>,
}

/// A JSON string, borrowed from the body when it has no escapes.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// A string field that may not be null; `when_null` words the error as
/// RonDB does.
fn non_null<'de, D: serde::Deserializer<'de>>(d: D, when_null: &'static str) -> Result<Cow<'de, str>, D::Error> {
    match Option::<Text<'de>>::deserialize(d)? {
        Some(Text(text)) => Ok(text),
        None => Err(serde::de::Error::custom(when_null)),
    }
}

fn filter_column<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Cow<'de, str>, D::Error> {
    non_null(d, "a Column name in the Field section is null; give each filter a 'column'")
}

fn method<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    non_null(d, "the Method section should be POST, not null").map(Some)
}

fn relative_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Cow<'de, str>, D::Error> {
    non_null(d, "the relativeUrl section is required, not null")
}

fn op_body<'de, D: serde::Deserializer<'de>>(d: D) -> Result<OpBody<'de>, D::Error> {
    Option::<OpBody<'de>>::deserialize(d)?
        .ok_or_else(|| serde::de::Error::custom("Field validation for 'Body' failed: the body is null"))
}

/// One operation, located: database, table and kind.
pub struct PkRequest<'a> {
    pub database: Cow<'a, str>,
    pub table: Cow<'a, str>,
    pub kind: PkKind,
    pub body: OpBody<'a>,
}

/// Splits a batch item's `relative-url` ("db/table/pk-read", optionally
/// with a leading "/" or the API version) into its parts.
pub fn parse_relative_url(url: &str) -> Result<(&str, &str, PkKind), String> {
    let trimmed = url.trim_start_matches('/');
    let trimmed = crate::API_VERSIONS
        .iter()
        .find_map(|v| trimmed.strip_prefix(v))
        .map(|r| r.trim_start_matches('/'))
        .unwrap_or(trimmed);
    let mut parts = trimmed.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(db), Some(table), Some(op), None) if !db.is_empty() && !table.is_empty() => {
            let kind = PkKind::from_path(op).ok_or_else(|| {
                format!("Field validation for 'RelativeURL' failed: relative-url '{url}' names operation '{op}'; use pk-read, pk-write, pk-update, pk-insert or pk-delete")
            })?;
            check_table_names(db, table)?;
            Ok((db, table, kind))
        }
        _ => Err(format!(
            "Field validation for 'RelativeURL' failed: relative-url '{url}' must look like 'database/table/pk-read'"
        )),
    }
}

/// Structural checks that make a whole batch malformed (rather than one
/// item failing): the right fields for the operation.
pub fn check_shape(kind: PkKind, body: &OpBody) -> Result<(), String> {
    match kind {
        PkKind::Read | PkKind::Delete => {
            // RonDB's sentences lead, as its clients look for them.
            let filters = body
                .filters
                .as_ref()
                .ok_or("Field validation for 'Filters' failed: the Field section is null; give 'filters', a value for every primary-key column")?;
            if filters.is_empty() {
                return Err(
                    "Field validation for 'Filters' failed: 'filters' is empty; give a value for every primary-key column"
                        .into(),
                );
            }
            if body.data.is_some() || body.write_columns.is_some() {
                return Err("'data' and 'writeColumns' belong to pk-write, pk-update and pk-insert only".into());
            }
            if kind == PkKind::Delete && body.read_columns.is_some() {
                return Err("'readColumns' belongs to pk-read only".into());
            }
        }
        PkKind::Write | PkKind::Update | PkKind::Insert => check_write_shape(body)?,
    }
    if let Some(columns) = &body.read_columns {
        if columns.is_empty() {
            return Err(
                "Field validation for 'ReadColumn' failed on the 'min' tag: 'readColumns' is empty; leave it out to read every column"
                    .into(),
            );
        }
        for c in columns.iter() {
            match c.data_return_type.as_deref() {
                None | Some("default") => {}
                Some(other) => return Err(format!("dataReturnType '{other}' is not supported; use \"default\"")),
            }
        }
    }
    if let Some(id) = &body.operation_id {
        if id.len() > 256 {
            return Err("operationId is invalid: it is longer than 256 bytes".into());
        }
    }
    Ok(())
}

/// The fields a write takes: `data` with every column in it (latsdb's
/// form), or `filters` with the key and `writeColumns` with the rest
/// (RonDB's form); never `readColumns`.
fn check_write_shape(body: &OpBody) -> Result<(), String> {
    if body.read_columns.is_some() {
        return Err("'readColumns' belongs to pk-read only".into());
    }
    if body.data.is_some() {
        if body.data.as_ref().is_some_and(|d| d.0.is_empty()) {
            return Err("'data' is empty: an object of column names to values".into());
        }
        if body.filters.is_some() || body.write_columns.is_some() {
            return Err(
                "a write takes 'data' (with the primary-key columns in it), or 'filters' and 'writeColumns', not both"
                    .into(),
            );
        }
        return Ok(());
    }
    match (&body.filters, &body.write_columns) {
        (None, None) => {
            Err("'data' is required: an object of column names to values (or 'filters' and 'writeColumns')".into())
        }
        (None, Some(_)) => {
            Err("Field validation for 'Filters' failed: the filters section is null; give the primary-key columns"
                .into())
        }
        (Some(f), _) if f.is_empty() => {
            Err("Field validation for 'Filters' failed: 'filters' is empty; give the primary-key columns".into())
        }
        (Some(_), None) => {
            Err("the writeColumns section is null: give the columns to write as [{\"column\", \"value\"}]".into())
        }
        (Some(_), Some(w)) if w.is_empty() => {
            Err("the writeColumns section is empty: give at least one column to write".into())
        }
        (Some(_), Some(_)) => Ok(()),
    }
}

/// Checks the names a body gives, as RonDB does before any lookup: every
/// column name is an identifier (`check_identifier`), every filter has a
/// value, and no filter and no read column is given twice (names compare
/// case-insensitively, as MySQL's column names). RonDB's sentences lead
/// the messages. (RonDB also refuses a read column that is a filter;
/// latsdb reads it, as nothing is lost by answering it.) `read_columns`
/// is false when the caller has checked this body's list already (batch
/// items share one).
pub fn check_names(body: &OpBody, batch_filters: &[Filter], read_columns: bool) -> Result<(), String> {
    let filters = body.filters(batch_filters);
    if filters.len() > MAX_COLUMNS {
        return Err(format!("Field validation for 'Filters' failed: more than {MAX_COLUMNS} filters"));
    }
    for filter in filters {
        if filter.column.is_empty() {
            return Err("a Column name in the Field section is empty: give each filter its column's name".into());
        }
        check_identifier(&filter.column)?;
        if matches!(filter.value, Scalar::Null) {
            return Err(format!(
                "a Column in the Field section is null: filter column '{}' has no value",
                shown_name(&filter.column)
            ));
        }
    }
    if let Some(name) = repeated(filters.len(), |i| &filters[i].column) {
        return Err(format!(
            "field validation for filter failed on the 'unique' tag: column '{}' is given twice",
            shown_name(name)
        ));
    }
    if let Some(columns) = body.read_columns.as_ref().filter(|_| read_columns) {
        check_read_columns(columns)?;
    }
    if let Some(data) = &body.data {
        for (name, _) in &data.0 {
            check_identifier(name)?;
        }
    }
    for written in body.write_columns.iter().flatten() {
        check_identifier(&written.column)?;
    }
    Ok(())
}

/// The most columns a request may name in one list: the most a table has
/// (NDB's 512), so that checking a list stays cheap.
pub const MAX_COLUMNS: usize = 512;

fn check_read_columns(columns: &[ReadColumn]) -> Result<(), String> {
    if columns.len() > MAX_COLUMNS {
        return Err(format!("field validation for read columns failed: more than {MAX_COLUMNS} read columns"));
    }
    for read in columns {
        if read.column.is_empty() {
            return Err("a column to read is missing a name: give each of 'readColumns' a 'column'".into());
        }
        check_identifier(&read.column)?;
    }
    if let Some(name) = repeated(columns.len(), |i| &columns[i].column) {
        return Err(format!(
            "field validation for 'ReadColumns' failed on the 'unique' tag: column '{}' is read twice",
            shown_name(name)
        ));
    }
    Ok(())
}

/// The first of `n` names (`name(i)`) that an earlier one repeats, ignoring
/// ASCII case. A few names are compared pairwise, without allocating (the
/// usual request); more through a set, so a long list costs linear time.
fn repeated<'s>(n: usize, name: impl Fn(usize) -> &'s str) -> Option<&'s str> {
    if n <= 16 {
        return (1..n)
            .map(&name)
            .zip(1..)
            .find(|(x, i)| (0..*i).any(|j| name(j).eq_ignore_ascii_case(x)))
            .map(|(x, _)| x);
    }
    let mut seen = std::collections::HashSet::with_capacity(n);
    (0..n).map(name).find(|x| !seen.insert(x.to_ascii_lowercase()))
}

/// Checks a column name as RonDB checks identifiers: 1 to 64 bytes of
/// characters from U+0001 to U+FFFF. The message starts with RonDB's words
/// and the name, as RonDB's does.
fn check_identifier(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("identifier is empty: a column name needs at least one character".into());
    }
    if name.len() > MAX_IDENTIFIER_BYTES {
        return Err(format!(
            "identifier is too large: {}; a column name is at most {MAX_IDENTIFIER_BYTES} bytes",
            shown_name(name)
        ));
    }
    if name.chars().any(|c| c == '\0' || c > '\u{FFFF}') {
        return Err(format!(
            "identifier carries an invalid character: {}; a column name holds characters U+0001 to U+FFFF",
            shown_name(name)
        ));
    }
    Ok(())
}

/// The longest database, table or column name: MySQL's 64.
const MAX_IDENTIFIER_BYTES: usize = 64;

/// A name for a message: its first 256 characters (all of a name one
/// byte too long), control characters escaped.
fn shown_name(name: &str) -> String {
    name.chars().take(256).flat_map(char::escape_debug).collect()
}

/// Checks the database and table names of a request before any lookup,
/// in RonDB's words: 1 to 64 bytes, characters U+0001 to U+FFFF, and none
/// of the characters no table name can hold ('/', '.', '`', control
/// characters).
pub fn check_table_names(database: &str, table: &str) -> Result<(), String> {
    for (field, kind, name) in [("DB", "db", database), ("Table", "table", table)] {
        if name.is_empty() {
            return Err(format!("Field validation for '{field}' failed on the 'min' tag: the {kind} name is empty"));
        }
        if name.len() > MAX_IDENTIFIER_BYTES {
            return Err(format!(
                "Field validation for '{field}' failed on the 'max' tag: the {kind} name '{}' is longer than 64 bytes",
                shown_name(name)
            ));
        }
        let forbidden = |c: char| c.is_control() || c > '\u{FFFF}' || matches!(c, '/' | '.' | '`');
        if name.chars().any(forbidden) {
            return Err(format!(
                "{kind} name is invalid: identifier carries an invalid character: '{}' (no name holds control characters, '/', '.', '`' or characters past U+FFFF)",
                shown_name(name)
            ));
        }
    }
    Ok(())
}

/// What to do with an operation's answer.
pub struct Planned<'a> {
    pub kind: PkKind,
    pub operation_id: Option<Cow<'a, str>>,
}

/// An item's outcome before rendering: an HTTP status and a message for errors.
pub enum ItemResult {
    /// A read's row: `found[answers].get(read)` (`write_item`).
    Row {
        answers: u32,
        read: u32,
    },
    NotFound,
    Done,
    Error(HttpError),
}

impl ItemResult {
    pub fn status(&self) -> u16 {
        match self {
            ItemResult::Row { .. } | ItemResult::Done => 200,
            ItemResult::NotFound => 404,
            ItemResult::Error(e) => e.status,
        }
    }
}

/// The projection of the last `readColumns` list planned in a batch, for
/// the items after it that share the list (`OpBody::read_columns`).
#[derive(Default)]
pub struct LastProjection<'a>(Option<(Arc<ResolvedTable>, Arc<[ReadColumn<'a>]>, Projection)>);

/// Adds a pk-read to `lookups`, or says why it is invalid.
pub fn plan_read<'a>(
    rest: &Rest,
    table: &Arc<ResolvedTable>,
    request: &PkRequest<'a>,
    batch_filters: &[Filter<'a>],
    lookups: &mut Lookups,
    last: &mut LastProjection<'a>,
) -> Result<usize, HttpError> {
    debug_assert_eq!(request.kind, PkKind::Read);
    let filters = request.body.filters(batch_filters);
    // The key's shape is checked before the read columns, as RonDB does.
    check_key(table)?;
    check_key_count(table, filters.len())?;
    let projection = match &request.body.read_columns {
        None => table.shown.as_ref(),
        Some(columns) => {
            let reused = last.0.as_ref().is_some_and(|(t, c, _)| Arc::ptr_eq(t, table) && Arc::ptr_eq(c, columns));
            if !reused {
                last.0 = Some((table.clone(), columns.clone(), rest.projection(table, columns)?));
            }
            last.0.as_ref().map(|(_, _, projection)| projection)
        }
    };
    lookups.push(&table.table, projection, |key| encode_key(table, filters, key))
}

/// Builds the client operation of a pk-write, pk-update, pk-insert or
/// pk-delete, or says why it is invalid.
pub fn plan_write(table: &Arc<ResolvedTable>, request: &PkRequest, batch_filters: &[Filter]) -> Result<Op, HttpError> {
    plan_write_as(table, request, batch_filters, request.kind)
}

/// Whether a pk-write sets only the columns it gives (RonDB's form, with
/// `writeColumns`): then it is planned as an update, and a row it does not
/// find is inserted by `insert_missing` (lib.rs). A pk-write with `data`
/// overwrites the whole row.
pub fn writes_given_columns_only(request: &PkRequest) -> bool {
    request.kind == PkKind::Write && request.body.data.is_none()
}

/// `plan_write` as if the request were of `kind`.
pub fn plan_write_as(
    table: &Arc<ResolvedTable>,
    request: &PkRequest,
    batch_filters: &[Filter],
    kind: PkKind,
) -> Result<Op, HttpError> {
    match kind {
        PkKind::Read => Err(HttpError::internal("a pk-read was planned as a write".into())),
        PkKind::Delete => {
            let filters = request.body.filters(batch_filters);
            check_key(table)?;
            check_key_count(table, filters.len())?;
            let mut key = Vec::new();
            encode_key(table, filters, &mut key)?;
            Ok(Op::delete_encoded(&table.table, key))
        }
        PkKind::Write | PkKind::Update | PkKind::Insert => {
            check_key(table)?;
            let row = given_row(table, &request.body, batch_filters)?;
            // RonDB's pk-write keeps the columns it does not give (NDB's
            // writeTuple): an update first, unless it gives them all.
            let partial = writes_given_columns_only(request) && row.iter().any(Option::is_none);
            written_op(table, if partial && kind == PkKind::Write { PkKind::Update } else { kind }, row)
        }
    }
}

/// The values a write gives, by column, checked against their columns:
/// from `data`, or from `filters` and `writeColumns`. Every key column
/// must be among them.
fn given_row(table: &ResolvedTable, body: &OpBody, batch_filters: &[Filter]) -> Result<Vec<Option<Value>>, HttpError> {
    let def = &table.table.meta.def;
    let mut row: Vec<Option<Value>> = vec![None; def.columns.len()];
    let mut give = |name: &str, scalar: &Scalar| -> Result<(), HttpError> {
        let column = def.column_id(name).map_err(HttpError::from_db)? as usize;
        if row[column].is_some() {
            return Err(HttpError::bad_request(format!("column '{name}' is given twice")));
        }
        row[column] = Some(scalar.to_column_value(&def.columns[column])?);
        Ok(())
    };
    match &body.data {
        Some(data) => data.0.iter().try_for_each(|(name, scalar)| give(name, scalar))?,
        None => {
            let filters = body.filters(batch_filters);
            check_key_count(table, filters.len())?;
            for filter in filters {
                if !def.primary_key.contains(&def.column_id(&filter.column).map_err(HttpError::from_db)?) {
                    return Err(HttpError::invalid(
                        ErrorClass::WrongKeyColumn,
                        &format!(
                            "filter column '{}' is not part of the primary key ({})",
                            filter.column, table.key_names
                        ),
                    ));
                }
                give(&filter.column, &filter.value)?;
            }
            for written in body.write_columns.iter().flatten() {
                give(&written.column, &written.value)?;
            }
        }
    }
    if def.primary_key.iter().any(|&k| row[k as usize].is_none()) {
        return Err(HttpError::invalid(
            ErrorClass::WrongKeyCount,
            &format!(
                "a write must give every primary-key column of {}.{} ({})",
                def.database, def.name, table.key_names
            ),
        ));
    }
    Ok(row)
}

/// The client operation of a write of `row` (key columns all given):
/// pk-write overwrites the whole row (columns not given take their
/// defaults), pk-insert inserts it, pk-update sets the given columns.
fn written_op(table: &ResolvedTable, kind: PkKind, row: Vec<Option<Value>>) -> Result<Op, HttpError> {
    let def = &table.table.meta.def;
    let whole_row = || -> Vec<Value> {
        row.iter()
            .zip(&def.columns)
            .map(|(v, c)| v.clone().unwrap_or_else(|| c.default.clone().unwrap_or(Value::Null)))
            .collect()
    };
    match kind {
        PkKind::Write => Op::upsert(&table.table, whole_row()).map_err(HttpError::from_db),
        PkKind::Insert => Op::insert(&table.table, whole_row()).map_err(HttpError::from_db),
        PkKind::Update => {
            let key: Vec<Value> = def.primary_key.iter().filter_map(|&k| row[k as usize].clone()).collect();
            let set: Vec<(ColumnId, Expr)> = row
                .into_iter()
                .enumerate()
                .filter(|(i, v)| v.is_some() && !def.primary_key.contains(&(*i as ColumnId)))
                .filter_map(|(i, v)| Some((i as ColumnId, Expr::Const(v?))))
                .collect();
            if set.is_empty() {
                return Err(HttpError::bad_request("pk-update sets no column: give a column outside the primary key"));
            }
            Op::update_expr(&table.table, &key, set).map_err(HttpError::from_db)
        }
        PkKind::Read | PkKind::Delete => Err(HttpError::internal(format!("a {kind:?} was planned as a write"))),
    }
}

/// Appends the primary key that `filters` give, encoded, to `out`. Text
/// is encoded straight from the request and numbers need no allocation,
/// so a lookup's key costs no allocation of its own.
/// The caller has checked the table has a usable key and the filters
/// their count (`check_key`, `check_key_count`).
fn encode_key(table: &ResolvedTable, filters: &[Filter], out: &mut Vec<u8>) -> Result<(), HttpError> {
    let def = &table.table.meta.def;
    debug_assert_eq!(filters.len(), def.primary_key.len(), "the caller checks the count");
    // The usual lookup: one filter on a one-column key.
    if let ([filter], &[key_column]) = (filters, def.primary_key.as_slice()) {
        let column = &def.columns[key_column as usize];
        if column.name.eq_ignore_ascii_case(&filter.column) {
            return encode_filter(out, filter, column);
        }
    }
    for (i, filter) in filters.iter().enumerate() {
        let column = def.column_id(&filter.column).map_err(HttpError::from_db)?;
        if !def.primary_key.contains(&column) {
            return Err(HttpError::invalid(
                ErrorClass::WrongKeyColumn,
                &format!(
                    "filter column '{}' is not part of the primary key of {}.{} (primary key: {})",
                    filter.column, def.database, def.name, table.key_names
                ),
            ));
        }
        if filters[..i].iter().any(|f| def.column_id(&f.column).ok() == Some(column)) {
            return Err(HttpError::bad_request(format!("filter column '{}' is given twice", filter.column)));
        }
    }
    for &key_column in &def.primary_key {
        let column = &def.columns[key_column as usize];
        let filter = filters
            .iter()
            .find(|f| def.column_id(&f.column).ok() == Some(key_column))
            .ok_or_else(|| HttpError::internal(format!("no filter gives key column '{}'", column.name)))?;
        encode_filter(out, filter, column)?;
    }
    Ok(())
}

/// Refuses filters that cannot give the whole primary key by their count
/// alone: checked before the columns are looked up, as RonDB does.
pub fn check_key_count(table: &ResolvedTable, given: usize) -> Result<(), HttpError> {
    let def = &table.table.meta.def;
    if given == def.primary_key.len() {
        return Ok(());
    }
    Err(HttpError::invalid(
        ErrorClass::WrongKeyCount,
        &format!(
            "Expecting: {} Got: {given}. The filters must give every primary-key column of {}.{} ({})",
            def.primary_key.len(),
            def.database,
            def.name,
            table.key_names
        ),
    ))
}

/// Appends one key column's value as a filter gives it.
pub(crate) fn encode_filter(out: &mut Vec<u8>, filter: &Filter, column: &ColumnDef) -> Result<(), HttpError> {
    match &filter.value {
        Scalar::Str(text) if column.ty.is_free_text() => keycodec::encode_text(out, column, text)
            .map_err(|e| HttpError::invalid(ErrorClass::InvalidColumnData, &e.message)),
        _ => {
            let value = key_value(filter, column)?;
            keycodec::encode_value(out, column.ty, column.collation, &value);
            Ok(())
        }
    }
}

/// Refuses key operations on a table whose key a client cannot give: one
/// without a primary key, or with a FLOAT or DOUBLE key column.
fn check_key(table: &ResolvedTable) -> Result<(), HttpError> {
    let def = &table.table.meta.def;
    if def.hidden_key().is_some() {
        return Err(HttpError::bad_request(no_key(def)));
    }
    if table.float_key {
        return Err(HttpError::invalid(
            ErrorClass::UnsupportedKeyType,
            &format!(
                "The primary key of {}.{} ({}) has a FLOAT or DOUBLE column, which cannot name a row exactly; read it through SQL",
                def.database, def.name, table.key_names
            ),
        ));
    }
    Ok(())
}

/// Why a table created without a primary key cannot be reached by key.
pub fn no_key(def: &latsdb_types::schema::TableDef) -> String {
    format!(
        "table {}.{} was created without a PRIMARY KEY, so its rows have no key to read, write or delete them by; give the table a PRIMARY KEY",
        def.database, def.name
    )
}

/// A filter's value as its key column stores it; NULL is no key.
fn key_value(filter: &Filter, column: &latsdb_types::schema::ColumnDef) -> Result<Value, HttpError> {
    let value = filter.value.to_column_value(column)?;
    if value.is_null() {
        return Err(HttpError::bad_request(format!("filter column '{}' is NULL", filter.column)));
    }
    Ok(value)
}

/// Builds a projection from `readColumns`, reusing the table's cached ones.
pub fn build_projection(table: &ResolvedTable, columns: &[ReadColumn]) -> Result<Projection, HttpError> {
    let names: Vec<&str> = columns.iter().map(|c| c.column.as_ref()).collect();
    for (i, name) in names.iter().enumerate() {
        if names[..i].iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return Err(HttpError::bad_request(format!("readColumns names column '{name}' twice")));
        }
    }
    Projection::new(&table.table, &names).map_err(HttpError::from_db)
}

/// A write's or delete's outcome as an item's.
pub fn write_result(outcome: latsdb_types::Result<Outcome>) -> ItemResult {
    match outcome {
        Ok(Outcome::Row(_)) => ItemResult::Error(HttpError::internal("a write returned a row".into())),
        Ok(Outcome::NotFound) => ItemResult::NotFound,
        // A write found its row as it would leave it: done all the same.
        Ok(Outcome::Done | Outcome::Unchanged) => ItemResult::Done,
        Err(e) => ItemResult::Error(HttpError::from_db(e)),
    }
}

/// A read's outcome as an item's (`found` is `answers[index]`).
pub fn read_result(found: Found, answers: u32, read: usize) -> ItemResult {
    match found {
        Found::Row(_) => ItemResult::Row { answers, read: read as u32 },
        Found::NotFound => ItemResult::NotFound,
        Found::Error(e) => ItemResult::Error(HttpError::from_db(e.clone())),
    }
}

/// Writes an item's answer body (its status is `result.status()`).
/// `keys` carries the rendered column names from one item to the next.
/// `found` holds the rows of `ItemResult::Row`.
pub fn write_item(out: &mut JsonOut, keys: &mut ColumnKeys, planned: &Planned, result: &ItemResult, found: &[Answers]) {
    out.byte(b'{');
    if let Some(id) = &planned.operation_id {
        out.key("operationId");
        out.str(id);
        out.byte(b',');
    }
    match result {
        ItemResult::Row { answers, read } => {
            let row = match found.get(*answers as usize).map(|a| a.get(*read as usize)) {
                Some(Found::Row(row)) => row,
                _ => unreachable!("an item's row is in its answers"),
            };
            out.key("data");
            out.byte(b'{');
            let layout = row.layout();
            keys.use_layout(layout);
            for (i, column) in layout.columns().iter().enumerate() {
                out.bytes(keys.key(i));
                out.value_ref(&row.get_ref(i), column);
                out.byte(b',');
            }
            out.trim_comma();
            out.byte(b'}');
        }
        ItemResult::Done => out.trim_comma(),
        ItemResult::NotFound => {
            out.key("message");
            out.str("Not Found");
        }
        ItemResult::Error(e) => {
            out.key("message");
            out.str(&e.message);
        }
    }
    out.byte(b'}');
}

/// The RonDB error class of a database error, for those RonDB words with a
/// fixed sentence.
pub fn class_of(e: &DbError) -> Option<ErrorClass> {
    match e.code {
        ErrorCode::UnknownTable => Some(ErrorClass::TableNotExist),
        ErrorCode::UnknownColumn => Some(ErrorClass::ColumnNotExist),
        ErrorCode::TypeError => Some(ErrorClass::WrongDataType),
        _ => None,
    }
}

/// Maps database errors to HTTP statuses.
pub fn status_of(e: &DbError) -> u16 {
    match e.code {
        ErrorCode::UnknownTable => 404,
        ErrorCode::Malformed
        | ErrorCode::BadRequest
        | ErrorCode::UnknownColumn
        | ErrorCode::UnknownIndex
        | ErrorCode::TypeError
        | ErrorCode::FrameTooLarge => 400,
        ErrorCode::DuplicateKey
        | ErrorCode::TableExists
        | ErrorCode::IndexExists
        | ErrorCode::ColumnExists
        | ErrorCode::NodeIdInUse => 409,
        ErrorCode::LockWaitTimeout
        | ErrorCode::NodeUnavailable
        | ErrorCode::ClusterNotReady
        | ErrorCode::Timeout
        | ErrorCode::NotServing
        | ErrorCode::WrongShard
        | ErrorCode::SchemaVersionMismatch
        | ErrorCode::TransactionAborted
        | ErrorCode::UnknownTransaction
        | ErrorCode::RedoFull
        | ErrorCode::TableAltering
        | ErrorCode::OutOfMemory => 503,
        ErrorCode::TableFull => 507,
        // AccessDenied: the REST node itself was refused by the cluster.
        ErrorCode::Io | ErrorCode::Internal | ErrorCode::AccessDenied => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_urls_name_database_table_and_operation() {
        assert_eq!(parse_relative_url("db/t/pk-read").unwrap(), ("db", "t", PkKind::Read));
        assert_eq!(parse_relative_url("/0.1.0/db/t/pk-write").unwrap(), ("db", "t", PkKind::Write));
        assert!(parse_relative_url("db/t/scan").unwrap_err().contains("use pk-read"));
        assert!(parse_relative_url("db/pk-read").unwrap_err().contains("must look like"));
        assert!(parse_relative_url("db//pk-read").is_err());
    }

    #[test]
    fn shapes_are_checked_per_operation() {
        let read: OpBody = crate::json::parse(br#"{"filters":[{"column":"id","value":1}]}"#).unwrap();
        assert!(check_shape(PkKind::Read, &read).is_ok());
        assert!(check_shape(PkKind::Write, &read).unwrap_err().contains("the writeColumns section is null"));
        let nothing: OpBody = crate::json::parse(b"{}").unwrap();
        assert!(check_shape(PkKind::Update, &nothing).unwrap_err().contains("'data' is required"));
        let rondb: OpBody =
            crate::json::parse(br#"{"filters":[{"column":"id","value":1}],"writeColumns":[{"column":"v","value":2}]}"#)
                .unwrap();
        assert_eq!(check_shape(PkKind::Insert, &rondb), Ok(()));
        assert!(check_shape(PkKind::Read, &rondb).unwrap_err().contains("belong to pk-write, pk-update and pk-insert"));
        let no_key: OpBody = crate::json::parse(br#"{"writeColumns":[{"column":"v","value":2}]}"#).unwrap();
        assert!(check_shape(PkKind::Write, &no_key).unwrap_err().contains("the filters section is null"));
        let empty: OpBody = crate::json::parse(b"{}").unwrap();
        assert!(check_shape(PkKind::Read, &empty).unwrap_err().contains("the Field section is null"));
        let typo = crate::json::parse::<OpBody>(br#"{"filter":[]}"#).unwrap_err();
        assert!(typo.contains("unknown field `filter`"), "{typo}");
        let bad_type: OpBody = crate::json::parse(
            br#"{"filters":[{"column":"id","value":1}],"readColumns":[{"column":"a","dataReturnType":"x"}]}"#,
        )
        .unwrap();
        assert!(check_shape(PkKind::Read, &bad_type).unwrap_err().contains("dataReturnType 'x'"));
    }

    /// The names a body gives are checked before any lookup, in RonDB's words.
    #[test]
    fn names_are_checked_as_rondb_checks_identifiers() {
        let refused = |body: &str| {
            let body: OpBody = crate::json::parse(body.as_bytes()).unwrap();
            check_names(&body, &[], true).unwrap_err()
        };
        let long = "c".repeat(65);
        let e = refused(&format!(r#"{{"filters":[{{"column":"{long}","value":1}}]}}"#));
        assert!(e.starts_with(&format!("identifier is too large: {long}")), "{e}");
        let e = refused(r#"{"filters":[{"column":"a\u0000","value":1}]}"#);
        assert!(e.starts_with("identifier carries an invalid character"), "{e}");
        let e = refused(r#"{"filters":[{"column":"","value":1}]}"#);
        assert!(e.starts_with("a Column name in the Field section is empty"), "{e}");
        let e = refused(r#"{"filters":[{"column":"a","value":null}]}"#);
        assert!(e.starts_with("a Column in the Field section is null"), "{e}");
        let e = refused(r#"{"filters":[{"column":"a","value":1},{"column":"a","value":2}]}"#);
        assert!(e.starts_with("field validation for filter failed on the 'unique' tag"), "{e}");
        let e = refused(r#"{"filters":[{"column":"a","value":1}],"readColumns":[{"column":"b"},{"column":"b"}]}"#);
        assert!(e.starts_with("field validation for 'ReadColumns' failed on the 'unique' tag"), "{e}");
        let key_too: OpBody =
            crate::json::parse(br#"{"filters":[{"column":"a","value":1}],"readColumns":[{"column":"a"}]}"#).unwrap();
        assert_eq!(check_names(&key_too, &[], true), Ok(()), "a key column may be read");
        let e = refused(r#"{"filters":[{"column":"a","value":1}],"readColumns":[{"column":""}]}"#);
        assert!(e.starts_with("a column to read is missing a name"), "{e}");
        let fine: OpBody = crate::json::parse(br#"{"filters":[{"column":"\u00e9\uffff","value":1}]}"#).unwrap();
        assert_eq!(check_names(&fine, &[], true), Ok(()));
        let e = refused(r#"{"filters":[{"column":"a","value":1},{"column":"A","value":2}]}"#);
        assert!(e.starts_with("field validation for filter failed on the 'unique' tag: column 'A'"), "{e}");
        let many: Vec<String> = (0..40).map(|i| format!(r#"{{"column":"c{i}"}}"#)).collect();
        let body = format!(
            r#"{{"filters":[{{"column":"a","value":1}}],"readColumns":[{},{{"column":"C7"}}]}}"#,
            many.join(",")
        );
        assert!(refused(&body).contains("column 'C7' is read twice"));
        let too_many: Vec<String> = (0..=MAX_COLUMNS).map(|i| format!(r#"{{"column":"c{i}"}}"#)).collect();
        let body = format!(r#"{{"filters":[{{"column":"a","value":1}}],"readColumns":[{}]}}"#, too_many.join(","));
        assert!(refused(&body).contains("more than 512 read columns"));
        let e = crate::json::parse::<OpBody>(br#"{"filters":[{"column":null,"value":1}]}"#).unwrap_err();
        assert!(e.contains("a Column name in the Field section is null"), "{e}");
    }

    #[test]
    fn table_names_are_checked_before_any_lookup() {
        assert_eq!(check_table_names("db", "t"), Ok(()));
        assert!(check_table_names("", "t")
            .unwrap_err()
            .starts_with("Field validation for 'DB' failed on the 'min' tag"));
        let long = "t".repeat(65);
        let e = check_table_names("db", &long).unwrap_err();
        assert!(e.starts_with("Field validation for 'Table' failed on the 'max' tag"), "{e}");
        let e = check_table_names("db\u{10000}", "t").unwrap_err();
        assert!(e.starts_with("db name is invalid"), "{e}");
        assert!(check_table_names("db", "a.b").unwrap_err().starts_with("table name is invalid"));
        let e = parse_relative_url("db/t/pk-scan").unwrap_err();
        assert!(e.starts_with("Field validation for 'RelativeURL' failed"), "{e}");
    }
}
