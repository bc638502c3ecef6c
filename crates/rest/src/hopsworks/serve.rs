//! `feature_store` and `batch_feature_store` for views defined in
//! Hopsworks' metadata, answered as RonDB's REST server answers them.
//!
//! A vector is filled in RonDB's order: each joined group's read fills the
//! slots of the columns it fetched; then the request's entries fill the
//! serving-key slots, in three passes (by key name, by prefixed name, by the
//! entry a required key or a join names; later passes win); then passed
//! features replace their slots. Entry and passed-feature values are echoed
//! as the request wrote them.

use super::avro;
use super::metadata::HopsView;
use crate::features::code;
use crate::json::{JsonOut, Scalar};
use crate::pk::{self, Filter};
use crate::rondb::ErrorClass;
use crate::HttpError;
use latsdb_client::{Answers, Found, Lookups};
use latsdb_types::row::ValueRef;
use latsdb_types::{DbError, ErrorCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A request's serving keys or passed features: name -> the JSON value as
/// the request wrote it.
pub type RawFields<'a> = BTreeMap<String, &'a RawValue>;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetadataOptions {
    #[serde(default)]
    feature_name: Option<bool>,
    #[serde(default)]
    feature_type: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Options {
    #[serde(default)]
    validate_passed_features: Option<bool>,
    #[serde(default)]
    include_detailed_status: Option<bool>,
}

/// The fields both endpoints share. `entries` and `passedFeatures` are an
/// object (one vector) or a list of them (a batch), parsed by each endpoint.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    #[serde(default)]
    pub feature_store_name: Option<String>,
    #[serde(default)]
    pub feature_view_name: Option<String>,
    #[serde(default)]
    pub feature_view_version: Option<u32>,
    #[serde(borrow, default)]
    pub entries: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub passed_features: Option<&'a RawValue>,
    #[serde(default)]
    pub metadata_options: Option<MetadataOptions>,
    #[serde(default)]
    pub options: Option<Options>,
}

/// Parses `raw` (a part of the request) as `T`, or says which field is wrong
/// in RonDB's words.
fn field<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>, name: &str) -> Result<Option<T>, HttpError> {
    raw.map(|raw| serde_json::from_str(raw.get()))
        .transpose()
        .map_err(|e| HttpError::bad_request(format!("Error:Field validation for 'Body' failed {name}: {e}")))
}

fn fs_error(status: u16, code: u16, message: impl Into<String>) -> HttpError {
    HttpError { status, message: message.into(), code: Some(code) }
}

/// A request's answer, or word that the view's tables changed since it was
/// read (read the view again and retry).
pub enum Served {
    Answer((u16, Vec<u8>)),
    Stale,
}

/// Whether the data nodes refused a read for a table that changed or went
/// away since the view was read.
fn stale(answers: &Answers) -> bool {
    (0..answers.len()).any(|i| {
        matches!(answers.get(i), Found::Error(e) if matches!(e.code, ErrorCode::SchemaVersionMismatch | ErrorCode::UnknownTable))
    })
}

/// What one group's read of one entry became before execution.
#[derive(Clone, Copy)]
enum Read {
    /// Planned as lookup `n`.
    Lookup(usize),
    /// Not read: the entry does not give the whole key (RonDB's read
    /// answers 400). The vector is missing this group's features.
    Partial,
    /// Not read: the group's online table does not exist (404).
    NoTable,
}

impl Request<'_> {
    /// The store, view and version, or RonDB's field-validation error.
    pub fn target(&self) -> Result<(&str, &str, u32), HttpError> {
        let field = |name: &str| HttpError::bad_request(format!("Error:Field validation for 'Body' failed {name}"));
        let store = self.feature_store_name.as_deref().filter(|s| !s.is_empty());
        let view = self.feature_view_name.as_deref().filter(|s| !s.is_empty());
        let store = store.ok_or_else(|| field("featureStoreName"))?;
        let view = view.ok_or_else(|| field("featureViewName"))?;
        let version = self.feature_view_version.ok_or_else(|| field("featureViewVersion"))?;
        Ok((store, view, version))
    }

    fn validate_passed(&self) -> bool {
        self.options.as_ref().and_then(|o| o.validate_passed_features).unwrap_or(true)
    }

    fn detailed(&self) -> bool {
        self.options.as_ref().and_then(|o| o.include_detailed_status).unwrap_or(false)
    }
}

/// Checks that every entry names a serving key (RonDB's step before reads).
fn check_entries(view: &HopsView, entries: &RawFields) -> Result<(), HttpError> {
    if entries.is_empty() {
        return Err(fs_error(400, code::INCORRECT_PRIMARY_KEY, "No entries found"));
    }
    for name in entries.keys() {
        if !view.valid_keys.iter().any(|k| k == name) {
            return Err(fs_error(
                400,
                code::INCORRECT_PRIMARY_KEY,
                format!("Provided primary key `{name}` does not belong to the set of primary keys."),
            ));
        }
    }
    Ok(())
}

/// The JSON kind RonDB expects of a passed feature of Hopsworks type `ty`.
fn expected_kind(ty: &str) -> &'static str {
    match ty {
        "boolean" => "BOOLEAN",
        "tinyint" | "int" | "smallint" | "bigint" | "float" | "double" | "decimal" => "NUMBER",
        "date" | "string" | "binary" | "timestamp" => "STRING",
        _ => "OTHER",
    }
}

fn kind_of(raw: &RawValue) -> &'static str {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"') => "STRING",
        Some(b't' | b'f') => "BOOLEAN",
        Some(b'n') => "NIL",
        Some(b'{' | b'[') => "OTHER",
        _ => "NUMBER",
    }
}

/// Checks passed features: each must be a served feature (not a label)
/// whose JSON kind matches its type.
fn check_passed(view: &HopsView, passed: &RawFields) -> Result<(), HttpError> {
    for (name, raw) in passed {
        let Some(slots) = view.by_name.get(name) else {
            return Err(fs_error(
                400,
                code::FEATURE_NOT_EXIST,
                format!("Feature `{name}` does not exist in the feature view or it is a label which cannot be a passed feature."),
            ));
        };
        for &slot in slots {
            let ty = &view.features[slot].type_name;
            let (got, expected) = (kind_of(raw), expected_kind(ty));
            if got != expected {
                return Err(fs_error(
                    400,
                    code::WRONG_DATA_TYPE,
                    format!("Got: '{got}', expected: '{expected}' (offline type: {ty})"),
                ));
            }
        }
    }
    Ok(())
}

/// Plans one entry's reads (one per joined group) into `lookups`. An error
/// is the entry's: it fails a single request, or marks a batch entry.
fn plan_entry(view: &HopsView, entries: &RawFields, lookups: &mut Lookups) -> Result<Vec<Read>, HttpError> {
    let mut reads = Vec::with_capacity(view.groups.len());
    for group in &view.groups {
        let (Some(table), Some(projection)) = (&group.table, &group.projection) else {
            reads.push(Read::NoTable);
            continue;
        };
        let def = table.table.def();
        // Each serving key's value: the required entry, the prefixed name,
        // or the key's own name, whichever the request gives first.
        let given: Vec<(&str, &RawValue)> = group
            .keys
            .iter()
            .filter_map(|k| {
                [&k.required_entry, &k.prefixed, &k.column]
                    .into_iter()
                    .find_map(|name| entries.get(name.as_str()))
                    .map(|raw| (k.column.as_str(), *raw))
            })
            .collect();
        if given.len() != def.primary_key.len() {
            reads.push(Read::Partial);
            continue;
        }
        let mut key = Vec::new();
        for &column_id in &def.primary_key {
            let column = &def.columns[column_id as usize];
            let Some((_, raw)) = given.iter().find(|(name, _)| name.eq_ignore_ascii_case(&column.name)) else {
                return Err(fs_error(
                    400,
                    code::INCORRECT_PRIMARY_KEY,
                    format!(
                        "{} The serving keys do not name key column '{}'",
                        ErrorClass::WrongKeyColumn.text(),
                        column.name
                    ),
                ));
            };
            encode_key_value(&mut key, raw, column)?;
        }
        let lookup = lookups
            .push(&table.table, Some(projection), |out| {
                out.extend_from_slice(&key);
                Ok::<(), DbError>(())
            })
            .map_err(HttpError::from_db)?;
        reads.push(Read::Lookup(lookup));
    }
    Ok(reads)
}

/// Appends an entry's value, as key column `column` stores it, to `key`.
fn encode_key_value(key: &mut Vec<u8>, raw: &RawValue, column: &latsdb_types::ColumnDef) -> Result<(), HttpError> {
    let wrong_type = || {
        fs_error(
            415,
            code::WRONG_DATA_TYPE,
            format!("Primary key '{}' should be in '{}' format.", column.name, column.ty.sql_name().to_uppercase()),
        )
    };
    let mut value: Scalar = serde_json::from_str(raw.get()).map_err(|_| wrong_type())?;
    // RonDB reads a number given for a text key as its digits.
    if column.ty.is_free_text() && matches!(value, Scalar::Int(_) | Scalar::UInt(_) | Scalar::Float(_)) {
        value = Scalar::Str(Cow::Borrowed(raw.get().trim()));
    }
    let filter = Filter { column: Cow::Borrowed(column.name.as_str()), value };
    pk::encode_filter(key, &filter, column).map_err(|e| {
        if e.message.starts_with(ErrorClass::WrongDataType.text()) {
            wrong_type()
        } else {
            fs_error(400, code::READ_FROM_DB_FAIL_BAD_INPUT, e.message)
        }
    })
}

/// The HTTP status of each group's read, in group order.
fn statuses(reads: &[Read], answers: &Answers) -> Vec<u16> {
    reads
        .iter()
        .map(|read| match read {
            Read::Partial => 400,
            Read::NoTable => 404,
            Read::Lookup(n) => match answers.get(*n) {
                Found::Row(_) => 200,
                Found::NotFound => 404,
                Found::Error(e) => pk::status_of(e),
            },
        })
        .collect()
}

/// RonDB's status of a vector from its reads: a read that failed makes
/// it ERROR; a missing row or an incomplete key, MISSING.
fn status_text(view: &HopsView, reads: &[Read], statuses: &[u16]) -> &'static str {
    let partial = |(read, _): &(&Read, &u16)| matches!(read, Read::Partial);
    if reads.iter().zip(statuses).filter(|r| !partial(r)).any(|(_, &s)| s != 200 && s != 404) {
        "ERROR"
    } else if view.has_spine || statuses.iter().any(|&s| s != 200) {
        "MISSING"
    } else {
        "COMPLETE"
    }
}

/// Writes one entry's vector, or says which complex feature's bytes are
/// not a value of its Avro type.
fn write_vector(
    out: &mut JsonOut,
    view: &HopsView,
    reads: &[Read],
    answers: &Answers,
    entries: &RawFields,
    passed: Option<&RawFields>,
) -> Result<(), String> {
    // Each slot's value: a column of a read row, or a request's JSON text.
    enum Slot<'r> {
        Null,
        Column(usize, usize),
        Raw(&'r RawValue),
    }
    let mut slots: Vec<Slot> = (0..view.features.len()).map(|_| Slot::Null).collect();
    for (g, (group, read)) in view.groups.iter().zip(reads).enumerate() {
        if let Read::Lookup(n) = read {
            if let Found::Row(_) = answers.get(*n) {
                for (position, &slot) in group.slots.iter().enumerate() {
                    slots[slot] = Slot::Column(g, position);
                }
            }
        }
    }
    for pass in &view.fill_passes {
        for (name, raw) in entries {
            for key in pass.get(name).into_iter().flatten() {
                for &slot in view.by_name.get(key).into_iter().flatten() {
                    slots[slot] = Slot::Raw(raw);
                }
            }
        }
    }
    for (name, raw) in passed.into_iter().flatten() {
        for &slot in view.by_name.get(name).into_iter().flatten() {
            slots[slot] = Slot::Raw(raw);
        }
    }
    out.byte(b'[');
    for slot in &slots {
        match slot {
            Slot::Null => out.raw("null"),
            Slot::Raw(raw) => out.raw(raw.get()),
            Slot::Column(g, position) => {
                let (group, Read::Lookup(n)) = (&view.groups[*g], reads[*g]) else {
                    unreachable!("a column slot comes from a planned read")
                };
                let Found::Row(row) = answers.get(n) else {
                    out.raw("null");
                    continue;
                };
                let value = row.get_ref(*position);
                match (&group.avro[*position], &value) {
                    (Some(ty), ValueRef::Bytes(bytes)) => avro::write_json(out, ty, bytes),
                    (Some(ty), ValueRef::Str(text)) => avro::write_json(out, ty, text.as_bytes()),
                    _ => {
                        out.value_ref(&value, &group.columns[*position]);
                        Ok(())
                    }
                }
                .map_err(|e| format!("Feature name: {}; {e}", group.columns[*position].name))?;
            }
        }
        out.byte(b',');
    }
    out.trim_comma();
    out.byte(b']');
    Ok(())
}

fn write_metadata(out: &mut JsonOut, view: &HopsView, options: Option<&MetadataOptions>, always: bool) {
    let wanted = options.filter(|o| o.feature_name.is_some() || o.feature_type.is_some());
    if wanted.is_none() && !always {
        out.raw("[]");
        return;
    }
    let (name, ty) = wanted.map_or((false, false), |o| (o.feature_name == Some(true), o.feature_type == Some(true)));
    let features = view.features.iter().map(|f| (f.name.as_str(), f.type_name.as_str()));
    crate::features::write_feature_metadata(out, features, name, ty);
}

fn write_detailed(out: &mut JsonOut, view: &HopsView, statuses: &[u16]) {
    let groups = view.groups.iter().map(|g| g.feature_group_id);
    crate::features::write_group_statuses(out, groups.zip(statuses.iter().copied()));
}

/// The error a single request fails with for a read that failed, as RonDB
/// translates a pk-read's error; None for an incomplete key (a missing
/// vector, not an error).
fn read_error(answers: &Answers, reads: &[Read]) -> Option<HttpError> {
    reads.iter().find_map(|read| match read {
        Read::Lookup(n) => match answers.get(*n) {
            Found::Error(e) => {
                let status = pk::status_of(e);
                Some(if status == 400 {
                    fs_error(400, code::READ_FROM_DB_FAIL_BAD_INPUT, e.message.clone())
                } else {
                    fs_error(status.max(500), code::READ_FAILED, e.message.clone())
                })
            }
            _ => None,
        },
        Read::Partial | Read::NoTable => None,
    })
}

/// `POST /feature_store` for a Hopsworks view: checks, reads, answers.
pub async fn one(rest: &crate::state::Rest, view: &HopsView, request: &Request<'_>) -> Result<Served, HttpError> {
    let passed: Option<RawFields> = field(request.passed_features, "passedFeatures")?;
    let entries: RawFields = field(request.entries, "entries")?
        .ok_or_else(|| HttpError::bad_request("Error:Field validation for 'Body' failed entries".to_string()))?;
    let (entries, passed) = (&entries, passed.as_ref());
    check_entries(view, entries)?;
    if let (Some(passed), true) = (passed, request.validate_passed()) {
        check_passed(view, passed)?;
    }
    let mut lookups = Lookups::with_capacity(view.groups.len(), 16);
    let reads = plan_entry(view, entries, &mut lookups)?;
    if view.groups.is_empty() {
        return Err(fs_error(400, code::INCORRECT_PRIMARY_KEY, "Feature store does not exist"));
    }
    let answers = rest.client.lookup(&lookups).await.map_err(HttpError::from_db)?;
    if stale(&answers) {
        return Ok(Served::Stale);
    }
    if let Some(e) = read_error(&answers, &reads) {
        return Err(e);
    }
    let statuses = statuses(&reads, &answers);
    let mut out = JsonOut::with_capacity(64 + 24 * view.features.len());
    out.raw("{\"features\":");
    write_vector(&mut out, view, &reads, &answers, entries, passed)
        .map_err(|message| fs_error(500, code::DESERIALISE_FEATURE_FAIL, message))?;
    out.raw(",\"metadata\":");
    write_metadata(&mut out, view, request.metadata_options.as_ref(), false);
    out.raw(",\"status\":");
    out.str(status_text(view, &reads, &statuses));
    out.raw(",\"detailedStatus\":");
    if request.detailed() {
        write_detailed(&mut out, view, &statuses);
    } else {
        out.raw("null");
    }
    out.byte(b'}');
    Ok(Served::Answer((200, out.buf)))
}

/// `POST /batch_feature_store` for a Hopsworks view. An entry that fails
/// its checks gets status "ERROR" and an empty vector; the others are read
/// in one batch, and a failed read marks only its entry.
pub async fn batch(rest: &crate::state::Rest, view: &HopsView, request: &Request<'_>) -> Result<Served, HttpError> {
    let entries: Vec<RawFields> = field(request.entries, "entries")?.unwrap_or_default();
    let passed: Vec<Option<RawFields>> = field(request.passed_features, "passedFeatures")?.unwrap_or_default();
    if entries.is_empty() {
        return Err(HttpError::bad_request("No primary key is given.".to_string()));
    }
    if !passed.is_empty() && passed.len() != entries.len() {
        return Err(HttpError::bad_request(
            "Length of passed feature does not equal to that of the entries provided in the request.".to_string(),
        ));
    }
    if entries.len() > rest.config.max_batch_ops {
        return Err(HttpError::bad_request(format!(
            "{} entries exceed the limit of {} per request; split the request",
            entries.len(),
            rest.config.max_batch_ops
        )));
    }
    let mut lookups = Lookups::with_capacity(view.groups.len() * entries.len(), 16);
    let plans: Vec<Option<Vec<Read>>> = entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let passed = passed.get(i).and_then(Option::as_ref);
            check_entries(view, entry).ok()?;
            if let (Some(passed), true) = (passed, request.validate_passed()) {
                check_passed(view, passed).ok()?;
            }
            plan_entry(view, entry, &mut lookups).ok()
        })
        .collect();
    let answers = rest.client.lookup(&lookups).await.map_err(HttpError::from_db)?;
    if stale(&answers) {
        return Ok(Served::Stale);
    }
    let mut out = JsonOut::with_capacity(64 + 24 * view.features.len() * entries.len());
    let mut texts = Vec::with_capacity(entries.len());
    let mut all_statuses = Vec::with_capacity(entries.len());
    out.raw("{\"features\":[");
    for (i, plan) in plans.iter().enumerate() {
        match plan {
            Some(reads) => {
                let statuses = statuses(reads, &answers);
                let passed = passed.get(i).and_then(Option::as_ref);
                let start = out.buf.len();
                match write_vector(&mut out, view, reads, &answers, &entries[i], passed) {
                    Ok(()) => texts.push(status_text(view, reads, &statuses)),
                    // A complex feature that cannot be decoded fails its entry.
                    Err(_) => {
                        out.buf.truncate(start);
                        out.raw("[]");
                        texts.push("ERROR");
                    }
                }
                all_statuses.push(Some(statuses));
            }
            None => {
                out.raw("[]");
                texts.push("ERROR");
                all_statuses.push(None);
            }
        }
        out.byte(b',');
    }
    out.trim_comma();
    out.raw("],\"metadata\":");
    write_metadata(&mut out, view, request.metadata_options.as_ref(), true);
    out.raw(",\"status\":[");
    for text in &texts {
        out.str(text);
        out.byte(b',');
    }
    out.trim_comma();
    out.raw("],\"detailedStatus\":[");
    if request.detailed() {
        for statuses in &all_statuses {
            match statuses {
                Some(s) => write_detailed(&mut out, view, s),
                None => out.raw("null"),
            }
            out.byte(b',');
        }
        out.trim_comma();
    }
    out.raw("]}");
    Ok(Served::Answer((200, out.buf)))
}
