//! The REST node of latsdb (`latsdb rest`): batched primary-key lookups and
//! feature vectors over HTTP/JSON, compatible with RonDB's REST API 0.1.0.
//!
//! Endpoints (all JSON; the OpenAPI document is `openapi.json` beside this
//! crate and is served at `/0.1.0/openapi.json`):
//! - `POST /0.1.0/{db}/{table}/pk-read|pk-write|pk-update|pk-insert|pk-delete`
//! - `POST /0.1.0/batch`: many of the above, each its own operation
//! - `POST /0.1.0/batchwrite`, `POST /0.1.0/batchdelete`: RonDB's batches of writes only, deletes only
//! - `POST /0.1.0/feature_store`, `POST /0.1.0/batch_feature_store`
//! - `POST|GET /0.1.0/feature_view`, `GET|DELETE /0.1.0/feature_view/{store}/{name}/{version}`
//! - `GET /0.1.0/health` (RonDB's `1`/`0`), `GET /0.1.0/health/details`, `GET /0.1.0/ping`, `GET /metrics`
//!
//! Every endpoint is served at `/0.2.0/` too, as RonDB 24.10 serves it.
//!
//! HTTP/1.1 with keep-alive on hyper; a worker thread per CPU, each with its
//! own tokio runtime and cluster client (`serve_per_thread`). A request's
//! key operations go to the data nodes in one round trip per shard.

pub mod auth;
pub mod fastpath;
pub mod features;
pub mod hopsworks;
pub mod json;
pub mod metrics;
pub mod pk;
pub mod rondb;
pub mod state;

use auth::{AuthMode, Grant};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use json::JsonOut;
use latsdb_client::{Answers, Client, Lookups};
use latsdb_types::{DbError, ErrorCode};
use metrics::Endpoint;
use pk::{Filter, ItemResult, OpBody, PkKind, PkRequest, Planned};
use rondb::ErrorClass;
use state::Rest;
use std::borrow::Cow;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const API_VERSION: &str = "0.1.0";
/// Every API version this server answers at: RonDB 24.10 serves the same
/// endpoints at 0.2.0 as at 0.1.0.
pub const API_VERSIONS: [&str; 2] = ["0.1.0", "0.2.0"];

/// The rest of a path after `/{version}/`, for a version this server serves.
pub fn strip_api_version(path: &str) -> Option<&str> {
    API_VERSIONS.iter().find_map(|v| path.strip_prefix(v).and_then(|p| p.strip_prefix('/')))
}

/// The OpenAPI document of every endpoint.
pub const OPENAPI: &str = include_str!("../openapi.json");

#[derive(Clone, Debug)]
pub struct RestConfig {
    pub auth: AuthMode,
    /// Health and ping answer without an API key.
    pub open_health: bool,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Most operations in one batch (and entries in one batch feature request).
    pub max_batch_ops: usize,
}

impl Default for RestConfig {
    fn default() -> Self {
        RestConfig { auth: AuthMode::ApiKey, open_health: true, max_body_bytes: 4 << 20, max_batch_ops: 256 }
    }
}

/// An answer that is not a success: its status and a message that says
/// what went wrong and what to do. Feature-store errors carry RonDB's code;
/// errors RonDB words with a fixed sentence carry its class, and their
/// message leads with that sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpError {
    pub status: u16,
    pub message: String,
    pub code: Option<u16>,
}

impl HttpError {
    pub fn new(status: u16, message: String) -> HttpError {
        HttpError { status, message, code: None }
    }
    pub fn bad_request(message: impl Into<String>) -> HttpError {
        HttpError::new(400, message.into())
    }
    pub fn internal(message: String) -> HttpError {
        HttpError::new(500, message)
    }
    /// An error of one of RonDB's classes: RonDB's sentence, then `detail`.
    pub fn rondb(status: u16, class: ErrorClass, detail: &str) -> HttpError {
        HttpError::new(status, format!("{} {detail}", class.text()))
    }
    /// A 400 of one of RonDB's classes.
    pub fn invalid(class: ErrorClass, detail: &str) -> HttpError {
        HttpError::rondb(400, class, detail)
    }
    pub fn from_db(e: DbError) -> HttpError {
        let status = pk::status_of(&e);
        match pk::class_of(&e) {
            Some(class) => HttpError::rondb(status, class, &e.message),
            None => HttpError::new(status, e.message),
        }
    }

    /// The body as API 0.1.0 answers it: `{"message": ..}`, or a feature
    /// store's `{"code", "reason", "message"}`.
    fn body(&self) -> Vec<u8> {
        match self.code {
            None => json::message_body(&self.message),
            Some(code) => {
                let mut out = JsonOut::with_capacity(self.message.len() + 64);
                out.raw("{\"code\":");
                out.uint(code as u64);
                out.raw(",\"reason\":");
                out.str(features::code::reason(code));
                out.raw(",\"message\":");
                out.str(&self.message);
                out.byte(b'}');
                out.buf
            }
        }
    }

    /// The body as API 0.2.0 answers it, RonDB's shape: `{"error": {"code":
    /// <status>, "message": .., "status", "classification", "ndbCode",
    /// "mysqlCode"}}`, the last four -1 as RonDB gives them for errors the
    /// REST server finds itself. Feature-store errors keep their shape.
    fn body_v2(&self) -> Vec<u8> {
        if self.code.is_some() {
            return self.body();
        }
        let mut out = JsonOut::with_capacity(self.message.len() + 96);
        out.raw("{\"error\":{\"code\":");
        out.uint(self.status as u64);
        out.raw(",\"message\":");
        out.str(&self.message);
        out.raw(",\"status\":-1,\"classification\":-1,\"ndbCode\":-1,\"mysqlCode\":-1}}");
        out.buf
    }
}

/// A database error as the HTTP answer `from_db` gives it.
impl From<DbError> for HttpError {
    fn from(e: DbError) -> HttpError {
        HttpError::from_db(e)
    }
}

type Answer = Result<(u16, Vec<u8>), HttpError>;

fn response(status: u16, body: Vec<u8>, content_type: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Reads the whole body, refusing more than the configured limit.
async fn read_body(rest: &Rest, request: Request<Incoming>) -> Result<Bytes, HttpError> {
    let limit = rest.config.max_body_bytes;
    let too_large = |len: String| {
        HttpError::new(
            413,
            format!("the request body ({len} bytes) exceeds the limit of {limit} bytes; send smaller batches"),
        )
    };
    if let Some(len) = request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok()) {
        if len > limit as u64 {
            return Err(too_large(len.to_string()));
        }
    }
    match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large("more than that".into())),
        Err(e) => Err(HttpError::bad_request(format!("could not read the request body: {e}"))),
    }
}

async fn handle(rest: Arc<Rest>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let started = Instant::now();
    let json_errors = request.uri().path().starts_with("/0.2.0/");
    let (endpoint, answer, content_type) = route(&rest, request).await;
    let (status, body) = match answer {
        Ok(ok) => ok,
        Err(e) if json_errors => (e.status, e.body_v2()),
        Err(e) => (e.status, e.body()),
    };
    rest.metrics.record(endpoint, status, started.elapsed().as_micros() as u64);
    Ok(response(status, body, content_type))
}

const JSON: &str = "application/json";

async fn route(rest: &Rest, request: Request<Incoming>) -> (Endpoint, Answer, &'static str) {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    if path == "/metrics" {
        if method != Method::GET {
            return (Endpoint::Metrics, Err(wrong_method("GET")), JSON);
        }
        return (Endpoint::Metrics, Ok((200, rest.metrics.render().into_bytes())), "text/plain; version=0.0.4");
    }
    let Some(rest_of_path) = path.strip_prefix('/').and_then(strip_api_version) else {
        return (Endpoint::Other, Err(not_found(&path)), JSON);
    };
    let segments: Vec<&str> = rest_of_path.split('/').collect();
    match segments.as_slice() {
        ["health"] => (Endpoint::Health, health(rest, &method, request, Health::Rondb).await, JSON),
        ["health", "details"] => (Endpoint::Health, health(rest, &method, request, Health::Details).await, JSON),
        ["ping"] => (Endpoint::Ping, ping(rest, &method, request).await, JSON),
        ["openapi.json"] if method == Method::GET => (Endpoint::OpenApi, Ok((200, OPENAPI.as_bytes().to_vec())), JSON),
        ["batch"] => (Endpoint::Batch, with_body(rest, &method, request, Body::Batch(Batch::Any)).await, JSON),
        ["batchwrite"] => (Endpoint::Batch, with_body(rest, &method, request, Body::Batch(Batch::Writes)).await, JSON),
        ["batchdelete"] => {
            (Endpoint::Batch, with_body(rest, &method, request, Body::Batch(Batch::Deletes)).await, JSON)
        }
        ["feature_store"] => {
            (Endpoint::FeatureStore, with_body(rest, &method, request, Body::FeatureStore).await, JSON)
        }
        ["batch_feature_store"] => {
            (Endpoint::BatchFeatureStore, with_body(rest, &method, request, Body::BatchFeatureStore).await, JSON)
        }
        ["feature_view", rest_path @ ..] => {
            let rest_path: Vec<String> = rest_path.iter().map(|s| s.to_string()).collect();
            (Endpoint::FeatureView, feature_view(rest, &method, request, &rest_path).await, JSON)
        }
        [db, table, op] => match PkKind::from_path(op) {
            Some(kind) => {
                let endpoint = match kind {
                    PkKind::Read => Endpoint::PkRead,
                    PkKind::Write | PkKind::Update | PkKind::Insert => Endpoint::PkWrite,
                    PkKind::Delete => Endpoint::PkDelete,
                };
                let names = decoded(db).and_then(|db| Ok((db, decoded(table)?)));
                let answer = match names {
                    Ok((db, table)) => with_body(rest, &method, request, Body::Pk { db, table, kind }).await,
                    Err(e) => Err(e),
                };
                (endpoint, answer, JSON)
            }
            None => (Endpoint::Other, Err(not_found(&path)), JSON),
        },
        _ => (Endpoint::Other, Err(not_found(&path)), JSON),
    }
}

/// A path segment with its `%XX` escapes decoded, as RonDB reads names in
/// paths; one that does not decode to UTF-8 names nothing.
fn decoded(segment: &str) -> Result<String, HttpError> {
    match percent_encoding::percent_decode_str(segment).decode_utf8() {
        Ok(name) => Ok(name.into_owned()),
        Err(_) => Err(HttpError::bad_request(format!(
            "Field validation for the name '{segment}' failed: its %-escapes do not decode to UTF-8"
        ))),
    }
}

fn not_found(path: &str) -> HttpError {
    HttpError::new(
        404,
        format!("no endpoint at '{path}'; see /{API_VERSION}/openapi.json for the endpoints this server offers"),
    )
}

fn wrong_method(allowed: &str) -> HttpError {
    HttpError::new(405, format!("this endpoint takes {allowed} requests"))
}

fn api_key(request: &Request<Incoming>) -> Option<Vec<u8>> {
    request.headers().get("x-api-key").map(|v| v.as_bytes().to_vec())
}

/// What a health request answers: RonDB's body (`1` while the cluster
/// serves, `0` otherwise), or latsdb's JSON with the data nodes' counts.
#[derive(Clone, Copy, PartialEq)]
enum Health {
    Rondb,
    Details,
}

async fn health(rest: &Rest, method: &Method, request: Request<Incoming>, shape: Health) -> Answer {
    if method != Method::GET {
        return Err(wrong_method("GET"));
    }
    if !rest.config.open_health {
        rest.keys.authenticate(api_key(&request).as_deref()).await?;
    }
    if !read_body(rest, request).await?.is_empty() {
        return Err(HttpError::bad_request("a health request has no body"));
    }
    let layout = rest.client.layout();
    let started = layout.datanodes.iter().filter(|d| d.status == latsdb_types::proto::NodeStatus::Started).count();
    let mut out = JsonOut::default();
    let healthy = rest.client.ping().await.is_ok();
    let status = if healthy { 200 } else { 503 };
    if shape == Health::Rondb {
        return Ok((status, if healthy { b"1".to_vec() } else { b"0".to_vec() }));
    }
    out.raw("{\"status\":");
    out.str(if healthy { "ok" } else { "unavailable" });
    out.raw(",\"datanodesStarted\":");
    out.uint(started as u64);
    out.raw(",\"datanodes\":");
    out.uint(layout.datanodes.len() as u64);
    out.byte(b'}');
    Ok((status, out.buf))
}

async fn ping(rest: &Rest, method: &Method, request: Request<Incoming>) -> Answer {
    if method != Method::GET {
        return Err(wrong_method("GET"));
    }
    if !rest.config.open_health {
        rest.keys.authenticate(api_key(&request).as_deref()).await?;
    }
    if !read_body(rest, request).await?.is_empty() {
        return Err(HttpError::bad_request("a ping request has no body"));
    }
    Ok((200, Vec::new()))
}

enum Body {
    Batch(Batch),
    FeatureStore,
    BatchFeatureStore,
    Pk { db: String, table: String, kind: PkKind },
}

async fn with_body(rest: &Rest, method: &Method, request: Request<Incoming>, what: Body) -> Answer {
    if method != Method::POST {
        return Err(wrong_method("POST"));
    }
    let key = api_key(&request);
    let json_errors = request.uri().path().starts_with("/0.2.0/");
    let body = read_body(rest, request).await?;
    match what {
        Body::Pk { db, table, kind } => {
            let op: OpBody = json::parse(&body).map_err(HttpError::bad_request)?;
            pk::check_shape(kind, &op).map_err(HttpError::bad_request)?;
            pk::check_table_names(&db, &table).map_err(HttpError::bad_request)?;
            pk::check_names(&op, &[], true).map_err(HttpError::bad_request)?;
            let grant = rest.keys.authenticate(key.as_deref()).await?;
            grant.check(&db)?;
            let request = PkRequest { database: Cow::Borrowed(&db), table: Cow::Borrowed(&table), kind, body: op };
            single(rest, request, json_errors).await
        }
        Body::Batch(kinds) => answer_batch(rest, key.as_deref(), &body, kinds).await,
        Body::FeatureStore => {
            let grant = rest.keys.authenticate(key.as_deref()).await?;
            features::serve_one(rest, &grant, &body).await
        }
        Body::BatchFeatureStore => {
            let grant = rest.keys.authenticate(key.as_deref()).await?;
            features::serve_batch(rest, &grant, &body).await
        }
    }
}

async fn feature_view(rest: &Rest, method: &Method, request: Request<Incoming>, path: &[String]) -> Answer {
    let key = api_key(&request);
    let grant = rest.keys.authenticate(key.as_deref()).await?;
    let path: Vec<&str> = path.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
    match (method.clone(), path.is_empty()) {
        (Method::POST, true) => {
            let body = read_body(rest, request).await?;
            features::create(rest, &grant, &body).await
        }
        (Method::GET, true) => features::list(rest, &grant).await,
        (Method::GET, false) => features::get_or_drop(rest, &grant, &path, false).await,
        (Method::DELETE, false) => features::get_or_drop(rest, &grant, &path, true).await,
        (_, true) => Err(wrong_method("GET (list) or POST (create)")),
        (_, false) => Err(wrong_method("GET or DELETE")),
    }
}

/// The database, table and operation of batch item `i`.
fn locate(i: usize, url: &str) -> Result<(&str, &str, PkKind), HttpError> {
    pk::parse_relative_url(url).map_err(|m| HttpError::bad_request(format!("operation {i}: {m}")))
}

/// Which operations a batch endpoint takes: `batch` any, RonDB's
/// `batchwrite` pk-write, pk-update and pk-insert, its `batchdelete`
/// pk-delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batch {
    Any,
    Writes,
    Deletes,
}

impl Batch {
    /// Why an operation of `kind` does not belong in this batch, or nothing.
    fn refuses(self, kind: PkKind) -> Option<&'static str> {
        match (self, kind) {
            (Batch::Writes, PkKind::Read | PkKind::Delete) => {
                Some("a batchwrite operation is pk-write, pk-update, or pk-insert")
            }
            (Batch::Deletes, PkKind::Delete) | (Batch::Any, _) | (Batch::Writes, _) => None,
            (Batch::Deletes, _) => Some("a batchdelete operation is pk-delete"),
        }
    }
}

/// The answer (status and JSON body) to a `POST /0.1.0/batch` (or
/// `batchwrite`, `batchdelete`) with `body`, sent with API key `key`.
pub async fn answer_batch(rest: &Rest, key: Option<&[u8]>, body: &[u8], kinds: Batch) -> Answer {
    let (requests, filters) = parse_batch(rest, body, kinds)?;
    let grant = rest.keys.authenticate(key).await?;
    batch(rest, &grant, requests, &filters, kinds).await
}

/// Parses and checks a whole batch; any malformed item rejects all of it.
/// Returns the requests and the filters they hold by range (`pk::Filters`).
fn parse_batch<'a>(
    rest: &Rest,
    body: &'a [u8],
    kinds: Batch,
) -> Result<(Vec<PkRequest<'a>>, Vec<Filter<'a>>), HttpError> {
    // The usual shape by the fast path; anything else (and every error) by serde.
    let batch = match std::str::from_utf8(body).ok().and_then(fastpath::parse_batch) {
        Some(batch) => batch,
        None => json::parse::<pk::BatchBody>(body).map_err(HttpError::bad_request)?,
    };
    if batch.operations.is_empty() {
        return Err(HttpError::invalid(
            ErrorClass::NoOperations,
            "('operations' is empty): give at least one operation",
        ));
    }
    if batch.operations.len() > rest.config.max_batch_ops {
        return Err(HttpError::bad_request(format!(
            "the batch has {} operations, more than the limit of {}; split it",
            batch.operations.len(),
            rest.config.max_batch_ops
        )));
    }
    let mut requests = Vec::with_capacity(batch.operations.len());
    // Batches mostly repeat one relative-url: split it once.
    let mut last_url: Option<(&'a str, (&'a str, &'a str, PkKind))> = None;
    let mut last_read_columns: Option<Arc<[pk::ReadColumn<'a>]>> = None;
    for (i, item) in batch.operations.into_iter().enumerate() {
        // RonDB validates every item before it checks the API key, so a
        // malformed batch is a 400 even for databases the key may not read.
        match item.method.as_deref() {
            Some("POST") => {}
            Some(method) => {
                return Err(HttpError::bad_request(format!(
                    "operation {i}: the Method section should be POST, not \"{method}\""
                )))
            }
            None => {
                return Err(HttpError::bad_request(format!(
                    "operation {i}: the Method section should be POST: 'method' is missing"
                )))
            }
        }
        // Unescaped URLs (the usual case) lend the names straight from the body.
        let (database, table, kind): (Cow<'a, str>, Cow<'a, str>, PkKind) = match item.relative_url {
            Cow::Borrowed(url) => {
                let (d, t, kind) = match last_url {
                    Some((previous, located)) if previous == url => located,
                    _ => {
                        let located = locate(i, url)?;
                        last_url = Some((url, located));
                        located
                    }
                };
                (Cow::Borrowed(d), Cow::Borrowed(t), kind)
            }
            Cow::Owned(url) => {
                let (d, t, kind) = locate(i, &url)?;
                (Cow::Owned(d.to_string()), Cow::Owned(t.to_string()), kind)
            }
        };
        if let Some(why) = kinds.refuses(kind) {
            return Err(HttpError::bad_request(format!(
                "operation {i}: Field validation for 'RelativeURL' failed: {why}, not '{database}/{table}/{}'",
                kind.path()
            )));
        }
        // Items that share the previous item's readColumns list (the fast
        // path's) need it checked once.
        let shared = match (&item.body.read_columns, &last_read_columns) {
            (Some(list), Some(last)) => Arc::ptr_eq(list, last),
            _ => false,
        };
        if !shared {
            last_read_columns = item.body.read_columns.clone();
        }
        pk::check_shape(kind, &item.body)
            .and_then(|()| pk::check_names(&item.body, &batch.filters, !shared))
            .map_err(|m| HttpError::bad_request(format!("operation {i}: {m}")))?;
        requests.push(PkRequest { database, table, kind, body: item.body });
    }
    Ok((requests, batch.filters))
}

/// RonDB's pk-write of some of a row's columns (`writeColumns`) was
/// planned as an update; where it found no row, the row is inserted (the
/// other columns take their defaults), and where a concurrent writer
/// inserted it first, updated once more. Each step is its own single-row
/// transaction, as every batch item is.
async fn insert_missing<'a>(
    rest: &Rest,
    requests: &[PkRequest<'a>],
    filters: &[Filter<'a>],
    results: &mut [ItemResult],
) {
    let mut todo: Vec<usize> = (0..requests.len())
        .filter(|&i| pk::writes_given_columns_only(&requests[i]) && matches!(results[i], ItemResult::NotFound))
        .collect();
    for kind in [PkKind::Insert, PkKind::Update] {
        if todo.is_empty() {
            return;
        }
        let mut ops = Vec::with_capacity(todo.len());
        let mut planned = Vec::with_capacity(todo.len());
        for &i in &todo {
            let request = &requests[i];
            let op = match rest.table(&request.database, &request.table).await {
                Ok(table) => pk::plan_write_as(&table, request, filters, kind),
                Err(e) => Err(e),
            };
            match op {
                Ok(op) => {
                    ops.push(op);
                    planned.push(i);
                }
                Err(e) => results[i] = ItemResult::Error(e),
            }
        }
        let mut raced = Vec::new();
        match rest.client.batch(ops).await {
            Ok(outcomes) => {
                for (i, outcome) in planned.into_iter().zip(outcomes) {
                    let duplicate = matches!(&outcome, Err(e) if e.code == ErrorCode::DuplicateKey);
                    match (kind, pk::write_result(outcome)) {
                        // Either a concurrent writer inserted the row first
                        // (the update that follows finds it), or the row
                        // breaks a unique index: kept as the answer in case
                        // the update finds no row.
                        (PkKind::Insert, result) if duplicate => {
                            results[i] = result;
                            raced.push(i);
                        }
                        // The row went away again: the insert's refusal stands.
                        (PkKind::Update, ItemResult::NotFound) => {}
                        (_, result) => results[i] = result,
                    }
                }
            }
            Err(e) => fail_all(&planned, HttpError::from_db(e), results),
        }
        todo = raced;
    }
}

/// The outcomes of primary-key requests: an item's row is in `found`.
struct Executed<'a> {
    items: Vec<(Planned<'a>, ItemResult)>,
    found: Vec<Answers>,
}

/// Plans, executes and collects the outcomes of primary-key requests. Items
/// that the data nodes refuse because the table changed or went away since
/// it was cached are planned again against a fresh definition, once.
async fn execute<'a>(rest: &Rest, requests: Vec<PkRequest<'a>>, filters: &[Filter<'a>]) -> Executed<'a> {
    let mut results: Vec<ItemResult> = requests.iter().map(|_| ItemResult::Done).collect();
    let mut found = Vec::new();
    let mut todo: Vec<usize> = (0..requests.len()).collect();
    for round in 0..2 {
        let stale = execute_round(rest, &requests, filters, &todo, &mut results, &mut found).await;
        if stale.is_empty() || round == 1 {
            break;
        }
        for &i in &stale {
            rest.forget_table(&requests[i].database, &requests[i].table);
        }
        todo = stale;
    }
    insert_missing(rest, &requests, filters, &mut results).await;
    // Counted here and added once: the counters are shared by all workers.
    let (mut ok, mut not_found, mut failed) = (0, 0, 0);
    for result in &results {
        match result {
            ItemResult::Row { .. } | ItemResult::Done => ok += 1,
            ItemResult::NotFound => not_found += 1,
            ItemResult::Error(_) => failed += 1,
        }
    }
    for (counter, n) in
        [(&rest.metrics.ops_ok, ok), (&rest.metrics.ops_not_found, not_found), (&rest.metrics.ops_failed, failed)]
    {
        if n > 0 {
            counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let items = requests
        .into_iter()
        .zip(results)
        .map(|(request, result)| (Planned { kind: request.kind, operation_id: request.body.operation_id }, result))
        .collect();
    Executed { items, found }
}

/// Runs the items `todo`, writing their results: the reads as one batch of
/// lookups (whose answers go to `found`), the writes as one batch of
/// operations, both at once. Returns the items refused for a stale or
/// missing table definition.
async fn execute_round<'a>(
    rest: &Rest,
    requests: &[PkRequest<'a>],
    filters: &[Filter<'a>],
    todo: &[usize],
    results: &mut [ItemResult],
    found: &mut Vec<Answers>,
) -> Vec<usize> {
    // Sized for keys of one or two numbers.
    let mut lookups = Lookups::with_capacity(todo.len(), 12);
    let mut reads = Vec::with_capacity(todo.len());
    let (mut writes, mut written) = (Vec::new(), Vec::new());
    // Batches mostly repeat one table: reuse the previous item's.
    let mut last: Option<(&str, &str, Arc<state::ResolvedTable>)> = None;
    let mut last_projection = pk::LastProjection::default();
    for &i in todo {
        let request = &requests[i];
        let table = match &last {
            Some((d, t, table)) if *d == request.database && *t == request.table => Ok(table.clone()),
            _ => rest.table(&request.database, &request.table).await,
        };
        if let Ok(t) = &table {
            last = Some((&request.database, &request.table, t.clone()));
        }
        let planned = table.and_then(|table| match request.kind {
            PkKind::Read => {
                pk::plan_read(rest, &table, request, filters, &mut lookups, &mut last_projection).map(|_| reads.push(i))
            }
            PkKind::Write | PkKind::Update | PkKind::Insert | PkKind::Delete => {
                pk::plan_write(&table, request, filters).map(|op| {
                    writes.push(op);
                    written.push(i);
                })
            }
        });
        if let Err(e) = planned {
            results[i] = ItemResult::Error(e);
        }
    }
    let client = &rest.client;
    let (read, wrote) = tokio::join!(
        async {
            if lookups.is_empty() {
                None
            } else {
                Some(client.lookup(&lookups).await)
            }
        },
        async {
            if writes.is_empty() {
                None
            } else {
                Some(client.batch(writes).await)
            }
        },
    );
    let mut stale = Vec::new();
    let mut refused = |i: usize, e: &DbError| {
        if matches!(e.code, ErrorCode::SchemaVersionMismatch | ErrorCode::UnknownTable) {
            stale.push(i);
        }
    };
    match read {
        Some(Ok(answers)) => {
            let index = found.len() as u32;
            for (read, &i) in reads.iter().enumerate() {
                let outcome = answers.get(read);
                if let latsdb_client::Found::Error(e) = &outcome {
                    refused(i, e);
                }
                results[i] = pk::read_result(outcome, index, read);
            }
            found.push(answers);
        }
        Some(Err(e)) => fail_all(&reads, HttpError::from_db(e), results),
        None => {}
    }
    match wrote {
        Some(Ok(outcomes)) => {
            for (i, outcome) in written.into_iter().zip(outcomes) {
                if let Err(e) = &outcome {
                    refused(i, e);
                }
                results[i] = match outcome {
                    // RonDB's clients know a pk-insert's conflict by NDB's sentence.
                    Err(e) if e.code == ErrorCode::DuplicateKey && requests[i].kind == PkKind::Insert => {
                        ItemResult::Error(HttpError::rondb(409, ErrorClass::TupleExists, &e.message))
                    }
                    outcome => pk::write_result(outcome),
                };
            }
        }
        Some(Err(e)) => fail_all(&written, HttpError::from_db(e), results),
        None => {}
    }
    stale
}

fn fail_all(items: &[usize], e: HttpError, results: &mut [ItemResult]) {
    for &i in items {
        results[i] = ItemResult::Error(e.clone());
    }
}

/// One pk-read, pk-write, ... alone. An error answers as the request's API
/// version shapes errors: at 0.2.0 RonDB's `{"error": ..}`, at 0.1.0 the
/// item's body, `{"operationId", "message"}`.
async fn single(rest: &Rest, request: PkRequest<'_>, json_errors: bool) -> Answer {
    let Executed { mut items, found } = execute(rest, vec![request], &[]).await;
    let (planned, result) = items.pop().ok_or_else(|| HttpError::internal("a request got no answer".into()))?;
    if let (ItemResult::Error(e), true) = (&result, json_errors) {
        return Err(e.clone());
    }
    let mut out = JsonOut::with_capacity(256);
    pk::write_item(&mut out, &mut json::ColumnKeys::default(), &planned, &result, &found);
    Ok((result.status(), out.buf))
}

/// Runs a batch and answers each item's outcome in order. A `batchwrite`
/// with a pk-insert that found its key taken fails as a whole with 409, as
/// RonDB's does (the items that succeeded stay written: a batch is not a
/// transaction).
async fn batch<'a>(
    rest: &Rest,
    grant: &Grant,
    requests: Vec<PkRequest<'a>>,
    filters: &[Filter<'a>],
    kinds: Batch,
) -> Answer {
    for request in &requests {
        grant.check(&request.database)?;
    }
    let Executed { items, found } = execute(rest, requests, filters).await;
    if kinds == Batch::Writes {
        let conflict = items.iter().find_map(|(planned, result)| match result {
            ItemResult::Error(e) if planned.kind == PkKind::Insert && e.status == 409 => Some(e),
            _ => None,
        });
        if let Some(e) = conflict {
            return Err(e.clone());
        }
    }
    let mut out = JsonOut::with_capacity(64 + items.len() * 128);
    out.raw("{\"result\":[");
    let mut keys = json::ColumnKeys::default();
    for (planned, result) in &items {
        out.raw("{\"code\":");
        out.uint(result.status() as u64);
        out.raw(",\"body\":");
        pk::write_item(&mut out, &mut keys, planned, result, &found);
        out.raw("},");
    }
    out.trim_comma();
    out.raw("]}");
    Ok((200, out.buf))
}

/// Options of a REST node process.
#[derive(Clone, Debug)]
pub struct RestOptions {
    pub mgmd: String,
    pub listen: SocketAddr,
    pub config: RestConfig,
    /// Worker threads (0: one per CPU).
    pub threads: usize,
    /// PEM certificate and private key: serve HTTPS instead of HTTP.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Written with the listening address once the node serves.
    pub ready_file: Option<PathBuf>,
    /// The node's identity towards the cluster when it requires TLS.
    pub cluster_tls: Option<Arc<latsdb_net::tls::ClusterTls>>,
    /// The location domain this node runs in (`ClientOptions::location_domain`).
    pub location_domain: Option<String>,
}

/// Runs a REST node until SIGTERM or Ctrl-C: a thread per worker, each
/// with its own runtime and its own cluster client (`serve_per_thread`);
/// caches, API keys and metrics are shared (`Rest::with_client`).
pub fn run(options: RestOptions) -> Result<(), String> {
    let threads = latsdb_net::serve::worker_threads(options.threads);
    let tls = match &options.tls {
        Some((cert, key)) => Some(latsdb_net::tls::acceptor(cert, key)?),
        None => None,
    };
    let (mgmd, config) = (options.mgmd.clone(), options.config.clone());
    let client_options = latsdb_client::ClientOptions {
        tls: options.cluster_tls.clone(),
        location_domain: options.location_domain.clone(),
        ..Default::default()
    };
    let init = move || async move {
        let client = connect_client(&mgmd, client_options).await?;
        auth::ensure_system_tables(&client)
            .await
            .map_err(|e| format!("cannot create the metadata tables in {}: {}", auth::SYSTEM_DATABASE, e.message))?;
        Ok(Arc::new(Rest::new(client, config)))
    };
    let join = |first: Arc<Rest>| async move {
        let client = first
            .client
            .connect_sibling()
            .await
            .map_err(|e| format!("cannot reach the cluster through {}: {}", first.client.mgmd(), e.message))?;
        Ok(Arc::new(first.with_client(client)))
    };
    let https = tls.is_some();
    let listening = |address: SocketAddr| {
        println!(
            "latsdb rest node listening on {}://{address}/{API_VERSION}/ ({threads} worker threads, auth: {})",
            if https { "https" } else { "http" },
            match options.config.auth {
                AuthMode::None => "none",
                AuthMode::ApiKey => "api-key",
            }
        );
        latsdb_net::serve::write_ready_file(options.ready_file.as_deref(), address)
    };
    let serve = move |rest: &Arc<Rest>, stream| serve_stream(rest.clone(), tls.clone(), stream);
    latsdb_net::serve::serve_per_thread("rest-worker", threads, options.listen, init, join, listening, serve)?;
    println!("latsdb rest node stopped");
    Ok(())
}

async fn connect_client(mgmd: &str, options: latsdb_client::ClientOptions) -> Result<Client, String> {
    Client::connect_with(mgmd, options)
        .await
        .map_err(|e| format!("cannot reach the cluster through {mgmd}: {}", e.message))
}

async fn serve_stream(rest: Arc<Rest>, tls: Option<tokio_rustls::TlsAcceptor>, stream: tokio::net::TcpStream) {
    match tls {
        // A client that is not speaking TLS, or gives up during the
        // handshake, just loses its connection.
        Some(tls) => {
            if let Ok(stream) = tls.accept(stream).await {
                serve_connection(rest, stream).await
            }
        }
        None => serve_connection(rest, stream).await,
    }
}

/// Serves one connection; public so tests and embedders can serve on
/// their own listener.
pub async fn serve_connection<S>(rest: Arc<Rest>, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(stream);
    let service = hyper::service::service_fn(move |request| handle(rest.clone(), request));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .keep_alive(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .max_buf_size(1 << 20);
    // A client that goes away mid-request is not an error of ours.
    let _ = builder.serve_connection(io, service).await;
}
