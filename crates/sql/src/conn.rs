//! One client connection: the v10 handshake and authentication, then the
//! command loop (COM_QUERY with text results, COM_STMT_* with binary
//! results, COM_INIT_DB, COM_PING, ...). Every answer of a command is
//! buffered and written with one syscall.

use crate::auth::{self, Account};
use crate::error::{self as err, SqlError};
use crate::eval::{format_double, to_text};
use crate::parse::parse;
use crate::session::{Planned, Response, ResultColumn, Session, Shared, SERVER_VERSION};
use crate::wire::{put_lenenc_int, put_lenenc_str, PacketIo, ReadError, Reader};
use latsdb_types::mysql_types::{bit_bytes, format_time};
use latsdb_types::schema::{ColumnType, IntWidth};
use latsdb_types::value::{civil_from_days, days_from_civil, Decimal};
use latsdb_types::Value;
use sqlparser::ast::Statement;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

// Capability flags.
const LONG_PASSWORD: u32 = 1;
const FOUND_ROWS: u32 = 2;
const LONG_FLAG: u32 = 4;
const CONNECT_WITH_DB: u32 = 8;
const PROTOCOL_41: u32 = 512;
const INTERACTIVE: u32 = 1024;
const TRANSACTIONS: u32 = 8192;
const SECURE_CONNECTION: u32 = 1 << 15;
const MULTI_STATEMENTS: u32 = 1 << 16;
const MULTI_RESULTS: u32 = 1 << 17;
const PS_MULTI_RESULTS: u32 = 1 << 18;
const PLUGIN_AUTH: u32 = 1 << 19;
const CONNECT_ATTRS: u32 = 1 << 20;
const PLUGIN_AUTH_LENENC: u32 = 1 << 21;
const DEPRECATE_EOF: u32 = 1 << 24;
const SSL: u32 = 2048;
/// An SSLRequest: capabilities, max packet, charset and 23 filler bytes.
const SSL_REQUEST_LEN: usize = 32;

const SERVER_CAPABILITIES: u32 = LONG_PASSWORD
    | FOUND_ROWS
    | LONG_FLAG
    | CONNECT_WITH_DB
    | PROTOCOL_41
    | INTERACTIVE
    | TRANSACTIONS
    | SECURE_CONNECTION
    | MULTI_STATEMENTS
    | MULTI_RESULTS
    | PS_MULTI_RESULTS
    | PLUGIN_AUTH
    | CONNECT_ATTRS
    | PLUGIN_AUTH_LENENC
    | DEPRECATE_EOF;

// Status flags.
const STATUS_IN_TRANS: u16 = 1;
const STATUS_AUTOCOMMIT: u16 = 2;
const STATUS_MORE_RESULTS: u16 = 8;

// Column types of the protocol.
const T_DECIMAL: u8 = 0;
const T_TINY: u8 = 1;
const T_SHORT: u8 = 2;
const T_LONG: u8 = 3;
const T_FLOAT: u8 = 4;
const T_DOUBLE: u8 = 5;
const T_NULL: u8 = 6;
const T_TIMESTAMP: u8 = 7;
const T_LONGLONG: u8 = 8;
const T_INT24: u8 = 9;
const T_DATE: u8 = 10;
const T_TIME: u8 = 11;
const T_DATETIME: u8 = 12;
const T_YEAR: u8 = 13;
const T_BIT: u8 = 16;
const T_NEWDECIMAL: u8 = 246;
const T_BLOB: u8 = 252;
const T_VAR_STRING: u8 = 253;
const T_STRING: u8 = 254;

const CHARSET_UTF8MB4: u16 = 46; // utf8mb4_bin
const CHARSET_BINARY: u16 = 63;
const MAX_PREPARED: usize = 16_382;

/// How a result column goes on the wire.
#[derive(Clone, Copy, Debug)]
struct Wire {
    ty: u8,
    unsigned: bool,
    binary: bool,
    decimals: u8,
    length: u32,
}

fn wire_of(ty: ColumnType) -> Wire {
    let w = |ty, length| Wire { ty, unsigned: false, binary: false, decimals: 0, length };
    match ty {
        ColumnType::Integer { width, unsigned } => {
            let (t, len) = match width {
                IntWidth::Tiny => (T_TINY, 4),
                IntWidth::Small => (T_SHORT, 6),
                IntWidth::Medium => (T_INT24, 9),
                IntWidth::Int => (T_LONG, 11),
                IntWidth::Big => (T_LONGLONG, 20),
            };
            Wire { unsigned, ..w(t, len) }
        }
        ColumnType::Float => Wire { decimals: 31, ..w(T_FLOAT, 12) },
        ColumnType::Double => Wire { decimals: 31, ..w(T_DOUBLE, 22) },
        ColumnType::Decimal { precision, scale } => Wire { decimals: scale, ..w(T_NEWDECIMAL, precision as u32 + 2) },
        ColumnType::Char(n) => w(T_STRING, n * 4),
        ColumnType::VarChar(n) => w(T_VAR_STRING, n * 4),
        ColumnType::Binary(n) => Wire { binary: true, ..w(T_STRING, n) },
        ColumnType::VarBinary(n) => Wire { binary: true, ..w(T_VAR_STRING, n) },
        // MySQL sends 65535 for TEXT when results are not converted
        // (Connector/J sets character_set_results = NULL and types BLOB
        // columns by this length: 65535 reads as TEXT, more as MEDIUMTEXT).
        ColumnType::Text => w(T_BLOB, 65_535),
        ColumnType::Blob => Wire { binary: true, ..w(T_BLOB, 65_535) },
        ColumnType::Date => w(T_DATE, 10),
        ColumnType::DateTime => Wire { decimals: 6, ..w(T_DATETIME, 26) },
        ColumnType::Timestamp => Wire { decimals: 6, ..w(T_TIMESTAMP, 26) },
        ColumnType::Boolean => w(T_TINY, 1),
        ColumnType::Time => w(T_TIME, 10),
        ColumnType::Year => Wire { unsigned: true, ..w(T_YEAR, 4) },
        ColumnType::Bit(n) => Wire { unsigned: true, ..w(T_BIT, u32::from(n)) },
        // As MySQL: text, flagged ENUM or SET in the column definition.
        ColumnType::Enum | ColumnType::Set => w(T_STRING, 1020),
    }
}

fn is_number(ty: u8) -> bool {
    matches!(ty, T_LONGLONG | T_DOUBLE | T_NEWDECIMAL)
}

fn is_temporal(ty: u8) -> bool {
    matches!(ty, T_DATE | T_DATETIME)
}

/// The wire type of a computed column, from the values it holds.
fn infer_wire(rows: &[Vec<Value>], i: usize) -> Wire {
    let mut kind = None::<Wire>;
    for r in rows {
        let w = match r.get(i) {
            None | Some(Value::Null) => continue,
            Some(Value::Int(_) | Value::Bool(_)) => {
                Wire { ty: T_LONGLONG, unsigned: false, binary: false, decimals: 0, length: 21 }
            }
            Some(Value::UInt(_)) => Wire { ty: T_LONGLONG, unsigned: true, binary: false, decimals: 0, length: 20 },
            Some(Value::Float(_)) => Wire { ty: T_DOUBLE, unsigned: false, binary: false, decimals: 31, length: 22 },
            Some(Value::Decimal(d)) => {
                Wire { ty: T_NEWDECIMAL, unsigned: false, binary: false, decimals: d.scale, length: 66 }
            }
            Some(Value::Date(_)) => wire_of(ColumnType::Date),
            Some(Value::Time(_)) => Wire { decimals: 6, ..wire_of(ColumnType::Time) },
            Some(Value::DateTime(_) | Value::Timestamp(_)) => wire_of(ColumnType::DateTime),
            Some(Value::Bytes(_)) => {
                Wire { ty: T_VAR_STRING, unsigned: false, binary: true, decimals: 0, length: 65_535 }
            }
            Some(Value::Str(_)) => {
                Wire { ty: T_VAR_STRING, unsigned: false, binary: false, decimals: 31, length: 65_535 * 4 }
            }
        };
        kind = Some(match kind {
            None => w,
            Some(k) if k.ty == w.ty => {
                Wire { unsigned: k.unsigned && w.unsigned, decimals: k.decimals.max(w.decimals), ..k }
            }
            // Numbers of different kinds, as MySQL types an expression over
            // them: integers and decimals are DECIMAL, with a float DOUBLE.
            Some(k) if is_number(k.ty) && is_number(w.ty) => {
                let ty = if k.ty == T_DOUBLE || w.ty == T_DOUBLE { T_DOUBLE } else { T_NEWDECIMAL };
                let decimals = if ty == T_DOUBLE { 31 } else { k.decimals.max(w.decimals) };
                Wire { ty, unsigned: false, binary: false, decimals, length: 66 }
            }
            Some(k) if is_temporal(k.ty) && is_temporal(w.ty) => wire_of(ColumnType::DateTime),
            // Mixed kinds: send text.
            Some(_) => Wire { ty: T_VAR_STRING, unsigned: false, binary: false, decimals: 31, length: 65_535 * 4 },
        });
        if kind.is_some_and(|k| k.ty == T_VAR_STRING) {
            break;
        }
    }
    kind.unwrap_or(Wire { ty: T_VAR_STRING, unsigned: false, binary: false, decimals: 0, length: 0 })
}

struct PreparedStatement {
    statement: Statement,
    /// The statement's text, for SHOW PROCESSLIST.
    text: Arc<str>,
    params: usize,
    param_types: Vec<u16>,
    long_data: HashMap<u16, Vec<u8>>,
    plan: crate::session::CachedPlan,
}

pub struct Connection<S> {
    io: PacketIo<S>,
    session: Session,
    process: Arc<crate::process::Process>,
    client_caps: u32,
    statements: HashMap<u32, PreparedStatement>,
    next_statement: u32,
}

/// Serves one connection until the client quits or the socket fails.
/// TLS for client connections: the acceptor, and whether clients must use it.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub required: bool,
}

/// Serves one connection until the client quits or the socket fails. With
/// `tls`, the greeting offers CLIENT_SSL and a client that answers with an
/// SSLRequest continues over TLS.
pub async fn serve(shared: Arc<Shared>, stream: tokio::net::TcpStream, max_packet: usize, tls: Option<Tls>) {
    let metrics = shared.metrics.clone();
    metrics.connected();
    serve_connected(shared, stream, max_packet, tls).await;
    metrics.disconnected();
}

async fn serve_connected(shared: Arc<Shared>, stream: tokio::net::TcpStream, max_packet: usize, tls: Option<Tls>) {
    let connection_id = shared.connection_id();
    let host = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let mut io = PacketIo::new(stream, max_packet);
    let nonce = auth::nonce();
    let caps = SERVER_CAPABILITIES | if tls.is_some() { SSL } else { 0 };
    if greet(&mut io, connection_id, &nonce, caps).await.is_none() {
        return;
    }
    let mut buf = Vec::new();
    if io.read_packet(&mut buf).await.is_err() {
        return;
    }
    let asks_tls = buf.len() == SSL_REQUEST_LEN && Reader::new(&buf).u32().is_ok_and(|c| c & SSL != 0);
    match tls {
        Some(tls) if asks_tls => {
            let seq = io.seq;
            let tcp = io.into_inner();
            let Ok(stream) = tls.acceptor.accept(tcp).await else { return };
            let cipher = stream.get_ref().1.negotiated_cipher_suite().map(|c| format!("{:?}", c.suite()));
            let mut io = PacketIo::new(stream, max_packet);
            io.seq = seq;
            if io.read_packet(&mut buf).await.is_err() {
                return;
            }
            run_session(io, shared, connection_id, host, nonce, buf, cipher).await
        }
        Some(tls) if tls.required => {
            let e = SqlError::new(
                3159,
                "HY000",
                "Connections using insecure transport are prohibited while --require-secure-transport is on; connect with TLS (e.g. mysql --ssl)",
            );
            io.write_packet(&err_payload(&e));
            let _ = io.flush().await;
        }
        _ if asks_tls => {
            let e = SqlError::new(
                err::ER_MALFORMED_PACKET,
                "08S01",
                "this SQL node has no TLS certificate; connect without TLS",
            );
            io.write_packet(&err_payload(&e));
            let _ = io.flush().await;
        }
        _ => run_session(io, shared, connection_id, host, nonce, buf, None).await,
    }
}

/// Authenticates the handshake response in `buf`, then runs the command loop.
async fn run_session<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: PacketIo<S>,
    shared: Arc<Shared>,
    connection_id: u32,
    host: String,
    nonce: [u8; 20],
    mut buf: Vec<u8>,
    tls_cipher: Option<String>,
) {
    // Past the SSLRequest: nothing else takes the stream over.
    io.buffer_reads();
    let (user, caps, db) = match authenticate(&mut io, &shared, &nonce, &mut buf).await {
        Some(x) => x,
        None => return,
    };
    let registered = shared.processes.register(connection_id, &user, &host, db.as_deref());
    let process = registered.process.clone();
    let mut session = Session::new(shared, user, connection_id);
    session.tls_cipher = tls_cipher;
    if let Some(db) = db {
        match crate::catalog::database_exists(&session.shared, &db).await {
            Ok(true) => session.db = Some(db),
            Ok(false) => {
                let mut c = Connection::new(io, session, process.clone(), caps);
                c.err(&SqlError::bad_db(&db));
                let _ = c.io.flush().await;
                return;
            }
            Err(e) => {
                let mut c = Connection::new(io, session, process.clone(), caps);
                c.err(&e);
                let _ = c.io.flush().await;
                return;
            }
        }
    }
    session.found_rows_flag = caps & FOUND_ROWS != 0;
    let mut c = Connection::new(io, session, process.clone(), caps);
    c.ok(0, 0, "");
    if c.io.flush().await.is_err() {
        return;
    }
    c.run().await;
    // An open transaction of a vanished (or killed) client is rolled back.
    let _ = c.session.rollback().await;
    drop(registered);
}

/// The v10 greeting with the nonce and our capabilities.
async fn greet<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut PacketIo<S>,
    connection_id: u32,
    nonce: &[u8; 20],
    caps: u32,
) -> Option<()> {
    let mut p = Vec::with_capacity(128);
    p.push(10);
    p.extend_from_slice(SERVER_VERSION.as_bytes());
    p.push(0);
    p.extend_from_slice(&connection_id.to_le_bytes());
    p.extend_from_slice(&nonce[..8]);
    p.push(0);
    p.extend_from_slice(&(caps as u16).to_le_bytes());
    p.push(45); // utf8mb4_general_ci, known to every client
    p.extend_from_slice(&STATUS_AUTOCOMMIT.to_le_bytes());
    p.extend_from_slice(&((caps >> 16) as u16).to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend_from_slice(&nonce[8..]);
    p.push(0);
    p.extend_from_slice(auth::NATIVE.as_bytes());
    p.push(0);
    io.seq = 0;
    io.write_packet(&p);
    io.flush().await.ok()
}

/// Checks the handshake response in `buf` (switching the client to
/// mysql_native_password when it used another plugin). Returns the user,
/// the client's capabilities and the database it asked for.
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut PacketIo<S>,
    shared: &Shared,
    nonce: &[u8; 20],
    buf: &mut Vec<u8>,
) -> Option<(String, u32, Option<String>)> {
    let parsed = parse_handshake_response(buf);
    let Some(HandshakeResponse { caps, user, mut response, db, mut plugin }) = parsed else {
        let e = SqlError::new(
            err::ER_MALFORMED_PACKET,
            "08S01",
            "malformed handshake response (a MySQL 4.1+ client is needed)",
        );
        io.write_packet(&err_payload(&e));
        let _ = io.flush().await;
        return None;
    };
    if plugin != auth::NATIVE && plugin != auth::CACHING_SHA2 {
        // Ask the client to answer the same nonce with mysql_native_password.
        let mut p = vec![0xfe];
        p.extend_from_slice(auth::NATIVE.as_bytes());
        p.push(0);
        p.extend_from_slice(nonce);
        p.push(0);
        io.write_packet(&p);
        io.flush().await.ok()?;
        io.read_packet(buf).await.ok()?;
        response = buf.clone();
        plugin = auth::NATIVE.to_string();
    }
    let account: Option<&Account> = shared.accounts.iter().find(|a| a.user == user);
    let ok = account.is_some_and(|a| a.verify(&plugin, nonce, &response));
    if !ok {
        let e = SqlError::new(
            err::ER_ACCESS_DENIED,
            "28000",
            format!(
                "Access denied for user '{user}'@'localhost' (using password: {})",
                if response.is_empty() { "NO" } else { "YES" }
            ),
        );
        io.write_packet(&err_payload(&e));
        let _ = io.flush().await;
        return None;
    }
    if plugin == auth::CACHING_SHA2 && !response.is_empty() && response != [0] {
        // fast_auth_success: the scramble matched the known hash.
        io.write_packet(&[0x01, 0x03]);
    }
    Some((user, caps & (SERVER_CAPABILITIES | SSL), db))
}

/// What a client answers to the greeting.
#[derive(Debug)]
pub struct HandshakeResponse {
    pub caps: u32,
    pub user: String,
    pub response: Vec<u8>,
    pub db: Option<String>,
    pub plugin: String,
}

/// Decodes a HandshakeResponse41; None when it is malformed or from a
/// pre-4.1 client.
pub fn parse_handshake_response(buf: &[u8]) -> Option<HandshakeResponse> {
    let parsed = (|| -> Result<_, crate::wire::Truncated> {
        let mut r = Reader::new(buf);
        let caps = r.u32()?;
        if caps & PROTOCOL_41 == 0 {
            return Ok(None);
        }
        let _max_packet = r.u32()?;
        let _charset = r.u8()?;
        r.bytes(23)?;
        let user = String::from_utf8_lossy(r.nul_str()?).into_owned();
        let response = if caps & PLUGIN_AUTH_LENENC != 0 {
            r.lenenc_bytes()?.to_vec()
        } else if caps & SECURE_CONNECTION != 0 {
            let n = r.u8()? as usize;
            r.bytes(n)?.to_vec()
        } else {
            r.nul_str()?.to_vec()
        };
        let db = if caps & CONNECT_WITH_DB != 0 && !r.is_empty() {
            let d = String::from_utf8_lossy(r.nul_str()?).into_owned();
            (!d.is_empty()).then_some(d)
        } else {
            None
        };
        let plugin = if caps & PLUGIN_AUTH != 0 && !r.is_empty() {
            String::from_utf8_lossy(r.nul_str().unwrap_or(b"")).into_owned()
        } else {
            auth::NATIVE.to_string()
        };
        Ok(Some(HandshakeResponse { caps, user, response, db, plugin }))
    })();
    parsed.ok().flatten()
}

/// Decodes the parameters of a COM_STMT_EXECUTE body for a statement with
/// `params` parameters, whose types were `types` at the last execution.
pub fn decode_execute(body: &[u8], params: usize, types: &mut Vec<u16>) -> Result<Vec<Value>, SqlError> {
    let mut r = Reader::new(body);
    r.u32().map_err(|_| SqlError::new(err::ER_MALFORMED_PACKET, "08S01", "malformed COM_STMT_EXECUTE"))?;
    decode_params(&mut r, params, types, &HashMap::new())
}

fn err_payload(e: &SqlError) -> Vec<u8> {
    let mut p = Vec::with_capacity(16 + e.message.len());
    p.push(0xff);
    p.extend_from_slice(&e.code.to_le_bytes());
    p.push(b'#');
    let state = e.state.as_bytes();
    p.extend_from_slice(&state[..state.len().min(5)]);
    p.resize(p.len() + 5 - state.len().min(5), b'0');
    // Keep messages bounded: a client shows them to a person.
    let msg = e.message.as_bytes();
    p.extend_from_slice(&msg[..msg.len().min(2000)]);
    p
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    fn new(io: PacketIo<S>, session: Session, process: Arc<crate::process::Process>, client_caps: u32) -> Self {
        Connection { io, session, process, client_caps, statements: HashMap::new(), next_statement: 1 }
    }

    fn status(&self, more: bool) -> u16 {
        let mut s = 0;
        if self.session.autocommit {
            s |= STATUS_AUTOCOMMIT;
        }
        if self.session.in_transaction {
            s |= STATUS_IN_TRANS;
        }
        if more {
            s |= STATUS_MORE_RESULTS;
        }
        s
    }

    fn ok_with(&mut self, header: u8, affected: u64, insert_id: u64, info: &str, more: bool) {
        let mut p = Vec::with_capacity(16 + info.len());
        p.push(header);
        put_lenenc_int(&mut p, affected);
        put_lenenc_int(&mut p, insert_id);
        p.extend_from_slice(&self.status(more).to_le_bytes());
        p.extend_from_slice(&(self.session.warnings.len().min(65_535) as u16).to_le_bytes());
        // MySQL writes the info text length-encoded (net_store_data), and
        // clients read it so.
        if !info.is_empty() {
            put_lenenc_str(&mut p, info.as_bytes());
        }
        self.io.write_packet(&p);
    }

    fn ok(&mut self, affected: u64, insert_id: u64, info: &str) {
        self.ok_with(0, affected, insert_id, info, false)
    }

    fn eof(&mut self, more: bool) {
        let mut p = vec![0xfe];
        p.extend_from_slice(&(self.session.warnings.len().min(65_535) as u16).to_le_bytes());
        p.extend_from_slice(&self.status(more).to_le_bytes());
        self.io.write_packet(&p);
    }

    /// End of a result set: EOF, or an OK with the EOF header when the
    /// client asked for CLIENT_DEPRECATE_EOF.
    fn end_rows(&mut self, more: bool) {
        if self.client_caps & DEPRECATE_EOF != 0 {
            self.ok_with(0xfe, 0, 0, "", more);
        } else {
            self.eof(more);
        }
    }

    fn err(&mut self, e: &SqlError) {
        self.io.write_packet(&err_payload(e));
    }

    fn column_def(&mut self, c: &ResultColumn, w: Wire) {
        let at = self.io.begin_packet();
        let p = self.io.buf();
        put_lenenc_str(p, b"def");
        put_lenenc_str(p, c.db.as_bytes());
        put_lenenc_str(p, c.table.as_bytes());
        put_lenenc_str(p, c.org_table.as_bytes());
        // MySQL cuts a column name at 256 characters.
        let name = match c.name.char_indices().nth(256) {
            Some((end, _)) => &c.name[..end],
            None => &c.name,
        };
        put_lenenc_str(p, name.as_bytes());
        put_lenenc_str(p, c.org_name.as_bytes());
        p.push(0x0c);
        let text = matches!(w.ty, T_STRING | T_VAR_STRING | T_BLOB) && !w.binary;
        let charset = if text { CHARSET_UTF8MB4 } else { CHARSET_BINARY };
        p.extend_from_slice(&charset.to_le_bytes());
        p.extend_from_slice(&w.length.to_le_bytes());
        p.push(w.ty);
        let mut flags: u16 = 0;
        if !c.nullable {
            flags |= 1;
        }
        if c.primary {
            flags |= 2;
        }
        if w.unsigned {
            flags |= 32;
        }
        if w.ty == T_BLOB {
            flags |= 16;
        }
        if c.auto_increment {
            flags |= 0x200;
        }
        match c.ty {
            Some(ColumnType::Enum) => flags |= 0x100,
            Some(ColumnType::Set) => flags |= 0x800,
            // MySQL flags a YEAR ZEROFILL.
            Some(ColumnType::Year) => flags |= 0x40,
            _ => {}
        }
        if w.binary || !text {
            flags |= 128;
        }
        p.extend_from_slice(&flags.to_le_bytes());
        p.push(w.decimals);
        p.extend_from_slice(&[0, 0]);
        self.io.end_packet(at);
    }

    fn wires(columns: &[ResultColumn], rows: &[Vec<Value>]) -> Vec<Wire> {
        columns.iter().enumerate().map(|(i, c)| Self::wire_of_column(c, rows, i)).collect()
    }

    fn wire_of_column(c: &ResultColumn, rows: &[Vec<Value>], i: usize) -> Wire {
        let w = c.ty.map(wire_of).unwrap_or_else(|| infer_wire(rows, i));
        match (c.double_decimals, c.fraction_digits) {
            // A DOUBLE whose type fixes its places tells the client.
            (Some(d), _) if w.ty == T_DOUBLE => Wire { decimals: d, ..w },
            // 'YYYY-MM-DD hh:mm:ss' and a point before the digits, if any.
            (_, Some(d)) if matches!(w.ty, T_DATETIME | T_TIMESTAMP) => {
                Wire { decimals: d, length: 19 + if d > 0 { u32::from(d) + 1 } else { 0 }, ..w }
            }
            // '[-]hhh:mm:ss' and a point before the digits, if any.
            (_, Some(d)) if w.ty == T_TIME => {
                Wire { decimals: d, length: 10 + if d > 0 { u32::from(d) + 1 } else { 0 }, ..w }
            }
            _ => w,
        }
    }

    fn result_set(&mut self, columns: &[ResultColumn], rows: &[Vec<Value>], binary: bool, more: bool) {
        let wires = Self::wires(columns, rows);
        let mut head = Vec::with_capacity(9);
        put_lenenc_int(&mut head, columns.len() as u64);
        self.io.write_packet(&head);
        for (c, w) in columns.iter().zip(&wires) {
            self.column_def(c, *w);
        }
        if self.client_caps & DEPRECATE_EOF == 0 {
            self.eof(false);
        }
        for r in rows {
            let at = self.io.begin_packet();
            let p = self.io.buf();
            if binary {
                binary_row(p, r, &wires);
            } else {
                for ((v, w), c) in r.iter().zip(&wires).zip(columns) {
                    match (v, w.ty) {
                        (Value::DateTime(us) | Value::Timestamp(us), T_DATETIME | T_TIMESTAMP)
                            if c.fraction_digits.is_some() =>
                        {
                            put_lenenc_str(p, latsdb_types::value::format_datetime_digits(*us, w.decimals).as_bytes())
                        }
                        (Value::Time(us), T_TIME) if c.fraction_digits.is_some() => {
                            put_lenenc_str(p, format_time(*us, Some(w.decimals)).as_bytes())
                        }
                        (Value::UInt(bits), T_BIT) => put_lenenc_str(p, &bit_bytes(*bits, w.length as u8)),
                        (Value::UInt(year), T_YEAR) => put_lenenc_str(p, format!("{year:04}").as_bytes()),
                        (Value::Float(f), T_FLOAT) => {
                            put_lenenc_str(p, crate::eval::format_float(*f as f32).as_bytes())
                        }
                        (Value::Float(f), T_DOUBLE) if w.decimals < 31 => {
                            put_lenenc_str(p, crate::eval::format_double_places(*f, w.decimals).as_bytes())
                        }
                        _ => match text_value(v) {
                            None => p.push(0xfb),
                            Some(b) => put_lenenc_str(p, &b),
                        },
                    }
                }
            }
            self.io.end_packet(at);
        }
        self.end_rows(more);
    }

    fn respond(&mut self, r: Response, binary: bool, more: bool) {
        match r {
            Response::Ok { affected, last_insert_id, info } => self.ok_with(0, affected, last_insert_id, &info, more),
            Response::Rows { columns, rows } => self.result_set(&columns, &rows, binary, more),
        }
    }

    async fn run(&mut self) {
        let mut packet = Vec::new();
        let process = self.process.clone();
        loop {
            let read = tokio::select! {
                // A killed connection answers nothing more.
                biased;
                () = process.killed() => return,
                r = self.io.read_packet(&mut packet) => r,
            };
            match read {
                Ok(()) => {}
                Err(ReadError::TooLarge(n)) => {
                    let e = SqlError::new(
                        err::ER_NET_PACKET_TOO_LARGE,
                        "08S01",
                        format!("Got a packet of {n} bytes, bigger than 'max_allowed_packet'; send smaller statements"),
                    );
                    self.err(&e);
                    let _ = self.io.flush().await;
                    return;
                }
                Err(_) => return,
            }
            let Some((&command, body)) = packet.split_first() else {
                self.err(&SqlError::new(err::ER_MALFORMED_PACKET, "08S01", "empty command packet"));
                if self.io.flush().await.is_err() {
                    return;
                }
                continue;
            };
            let body = body.to_vec();
            // COM_QUERY and COM_STMT_EXECUTE register with their statement
            // text themselves.
            if !matches!(command, COM_QUERY | COM_STMT_EXECUTE) {
                self.process.begin(command_name(command), None);
            }
            let keep_going = self.command(command, &body).await;
            self.process.idle(self.session.db.as_deref());
            if !keep_going || self.process.is_killed() {
                let _ = self.io.flush().await;
                return;
            }
            if self.io.pending() > 0 && self.io.flush().await.is_err() {
                return;
            }
        }
    }

    /// Handles one command; false ends the connection.
    async fn command(&mut self, command: u8, body: &[u8]) -> bool {
        match command {
            0x01 => return false, // COM_QUIT
            0x02 => {
                // COM_INIT_DB
                let db = String::from_utf8_lossy(body).into_owned();
                match crate::catalog::database_exists(&self.session.shared, &db).await {
                    Ok(true) => {
                        self.session.db = Some(db);
                        self.ok(0, 0, "");
                    }
                    Ok(false) => self.err(&SqlError::bad_db(&db)),
                    Err(e) => self.err(&e),
                }
            }
            COM_QUERY => self.query(body).await,
            0x04 => self.field_list(body).await,
            0x09 => {
                // COM_STATISTICS (mysqladmin status): what the node counts.
                let shared = &self.session.shared;
                let stats = format!(
                    "Uptime: {}  Threads: {}",
                    shared.started.elapsed().as_secs(),
                    shared.processes.snapshot().len()
                );
                self.io.write_packet(stats.as_bytes());
            }
            0x0e => self.ok(0, 0, ""), // COM_PING
            0x16 => self.prepare(body).await,
            COM_STMT_EXECUTE => self.execute(body).await,
            0x18 => self.send_long_data(body),
            0x19 => {
                // COM_STMT_CLOSE: no answer.
                if let Ok(id) = Reader::new(body).u32() {
                    self.statements.remove(&id);
                }
            }
            0x1a => {
                // COM_STMT_RESET
                match Reader::new(body).u32().ok().and_then(|id| self.statements.get_mut(&id)) {
                    Some(s) => {
                        s.long_data.clear();
                        self.ok(0, 0, "");
                    }
                    None => self.err(&unknown_statement()),
                }
            }
            0x1b => {
                // COM_SET_OPTION: multi-statements on (0) or off (1).
                match Reader::new(body).u16() {
                    Ok(0) => {
                        self.client_caps |= MULTI_STATEMENTS;
                        self.eof(false);
                    }
                    Ok(1) => {
                        self.client_caps &= !MULTI_STATEMENTS;
                        self.eof(false);
                    }
                    _ => self.err(&SqlError::new(err::ER_UNKNOWN_COM, "08S01", "unknown COM_SET_OPTION value")),
                }
            }
            0x1f => {
                // COM_RESET_CONNECTION
                let _ = self.session.rollback().await;
                let shared = self.session.shared.clone();
                let db = self.session.db.clone();
                let user = self.session.user.clone();
                let found_rows = self.session.found_rows_flag;
                self.session = Session::new(shared, user, self.session.connection_id);
                self.session.db = db;
                self.session.found_rows_flag = found_rows;
                self.statements.clear();
                self.ok(0, 0, "");
            }
            other => self.err(&SqlError::new(
                err::ER_UNKNOWN_COM,
                "08S01",
                format!("command 0x{other:02x} is not supported by latsdb's SQL node"),
            )),
        }
        true
    }

    async fn query(&mut self, body: &[u8]) {
        let text = crate::parse::decode_query(body);
        self.process.begin("Query", Some(Arc::from(text.as_ref())));
        let parsed = match parse(&text) {
            Ok(p) => p,
            Err(e) => {
                self.err(&e);
                return;
            }
        };
        if parsed.params > 0 {
            self.err(&SqlError::parse("'?' parameters need a prepared statement (COM_STMT_PREPARE)"));
            return;
        }
        if parsed.statements.len() > 1 && self.client_caps & MULTI_STATEMENTS == 0 {
            self.err(&SqlError::parse("several statements in one query need CLIENT_MULTI_STATEMENTS"));
            return;
        }
        let n = parsed.statements.len();
        for (i, stmt) in parsed.statements.iter().enumerate() {
            let more = i + 1 < n;
            match self.session.execute(stmt, &[], None).await {
                Ok(r) => self.respond(r, false, more),
                Err(e) => {
                    // The statements after a failed one are not run.
                    self.err(&e);
                    return;
                }
            }
        }
    }

    async fn field_list(&mut self, body: &[u8]) {
        let table = String::from_utf8_lossy(body.split(|&b| b == 0).next().unwrap_or(b"")).into_owned();
        let Some(db) = self.session.db.clone() else {
            self.err(&SqlError::no_db());
            return;
        };
        match self.session.shared.table(&db, &table).await {
            Ok(t) => {
                let def = t.def().clone();
                for (i, c) in def.visible_columns() {
                    let rc = ResultColumn {
                        name: c.name.clone(),
                        org_name: c.name.clone(),
                        table: def.name.clone(),
                        org_table: def.name.clone(),
                        db: db.clone(),
                        ty: Some(c.ty),
                        nullable: c.nullable,
                        primary: def.primary_key.contains(&i),
                        auto_increment: false,
                        collation: c.ty.is_string().then_some((c.collation, false)),
                        decimal_scale: None,
                        double_decimals: None,
                        fraction_digits: crate::session::keeps_fractions(c.ty).then_some(c.fraction_digits),
                    };
                    self.column_def(&rc, Self::wire_of_column(&rc, &[], 0));
                }
                self.eof(false);
            }
            Err(e) => self.err(&e),
        }
    }

    async fn prepare(&mut self, body: &[u8]) {
        if self.statements.len() >= MAX_PREPARED {
            self.err(&SqlError::new(
                1461,
                "42000",
                format!("Can't create more than max_prepared_stmt_count statements (current value: {MAX_PREPARED}); close some"),
            ));
            return;
        }
        let text = crate::parse::decode_query(body);
        let parsed = match parse(&text) {
            Ok(p) => p,
            Err(e) => {
                self.err(&e);
                return;
            }
        };
        let mut statements = parsed.statements.into_iter();
        let (Some(statement), None) = (statements.next(), statements.next()) else {
            self.err(&SqlError::parse("a prepared statement holds exactly one statement"));
            return;
        };
        // Plan now when possible: errors (unknown table, ...) surface at
        // prepare as in MySQL, and the columns are known.
        let generation = self.session.shared.client.tables_generation();
        // A union or a statement with subqueries is planned at each
        // execution: its columns are sent with its result sets only.
        let plan = if crate::session::Session::planned_at_execution(&statement) {
            None
        } else {
            match self.session.plan(&statement).await {
                Ok(p) => p,
                Err(e) => {
                    self.err(&e);
                    return;
                }
            }
        };
        let columns: Vec<ResultColumn> = match &plan {
            Some(Planned::Select(s)) => crate::session::result_columns_of(s, &self.session.shared),
            _ => Vec::new(),
        };
        let id = self.next_statement;
        self.next_statement = self.next_statement.wrapping_add(1).max(1);
        let mut p = vec![0];
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&(columns.len() as u16).to_le_bytes());
        p.extend_from_slice(&(parsed.params as u16).to_le_bytes());
        p.push(0);
        p.extend_from_slice(&0u16.to_le_bytes());
        self.io.write_packet(&p);
        if parsed.params > 0 {
            let param = ResultColumn::computed("?");
            let w = Wire { ty: T_VAR_STRING, unsigned: false, binary: true, decimals: 0, length: 0 };
            for _ in 0..parsed.params {
                self.column_def(&param, w);
            }
            if self.client_caps & DEPRECATE_EOF == 0 {
                self.eof(false);
            }
        }
        if !columns.is_empty() {
            let wires = Self::wires(&columns, &[]);
            for (c, w) in columns.iter().zip(wires) {
                self.column_def(c, w);
            }
            if self.client_caps & DEPRECATE_EOF == 0 {
                self.eof(false);
            }
        }
        self.statements.insert(
            id,
            PreparedStatement {
                statement,
                text: Arc::from(text.as_ref()),
                params: parsed.params,
                param_types: Vec::new(),
                long_data: HashMap::new(),
                plan: crate::session::CachedPlan { plan, generation },
            },
        );
    }

    fn send_long_data(&mut self, body: &[u8]) {
        let mut r = Reader::new(body);
        let (Ok(id), Ok(param)) = (r.u32(), r.u16()) else { return };
        if let Some(s) = self.statements.get_mut(&id) {
            if (param as usize) < s.params {
                s.long_data.entry(param).or_default().extend_from_slice(r.rest());
            }
        }
    }

    async fn execute(&mut self, body: &[u8]) {
        let mut r = Reader::new(body);
        let Ok(id) = r.u32() else {
            self.err(&SqlError::new(err::ER_MALFORMED_PACKET, "08S01", "malformed COM_STMT_EXECUTE"));
            return;
        };
        let Some(mut stmt) = self.statements.remove(&id) else {
            self.err(&unknown_statement());
            return;
        };
        let params = match decode_params(&mut r, stmt.params, &mut stmt.param_types, &stmt.long_data) {
            Ok(p) => p,
            Err(e) => {
                self.statements.insert(id, stmt);
                self.err(&e);
                return;
            }
        };
        stmt.long_data.clear();
        self.process.begin("Execute", Some(stmt.text.clone()));
        let result = self.session.execute(&stmt.statement, &params, Some(&mut stmt.plan)).await;
        self.statements.insert(id, stmt);
        match result {
            Ok(r) => self.respond(r, true, false),
            Err(e) => self.err(&e),
        }
    }
}

const COM_QUERY: u8 = 0x03;
const COM_STMT_EXECUTE: u8 = 0x17;

/// A command as SHOW PROCESSLIST names it.
fn command_name(command: u8) -> &'static str {
    match command {
        0x01 => "Quit",
        0x02 => "Init DB",
        COM_QUERY => "Query",
        0x04 => "Field List",
        0x09 => "Statistics",
        0x0e => "Ping",
        0x16 => "Prepare",
        COM_STMT_EXECUTE => "Execute",
        0x18 => "Long Data",
        0x19 => "Close stmt",
        0x1a => "Reset stmt",
        0x1b => "Set option",
        0x1f => "Reset connection",
        _ => "Error",
    }
}

fn unknown_statement() -> SqlError {
    SqlError::new(
        err::ER_UNKNOWN_STMT_HANDLER,
        "HY000",
        "Unknown prepared statement handler given to mysqld_stmt_execute",
    )
}

/// The parameter values of a COM_STMT_EXECUTE body (after the statement
/// id); `types` are the parameter types of the last execution and are
/// replaced when the client sends new ones.
fn decode_params(
    r: &mut Reader,
    n: usize,
    types: &mut Vec<u16>,
    long_data: &HashMap<u16, Vec<u8>>,
) -> Result<Vec<Value>, SqlError> {
    let malformed =
        |what: &str| SqlError::new(err::ER_MALFORMED_PACKET, "08S01", format!("malformed COM_STMT_EXECUTE: {what}"));
    let _flags = r.u8().map_err(|_| malformed("flags"))?;
    let _iterations = r.u32().map_err(|_| malformed("iteration count"))?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let nulls = r.bytes(n.div_ceil(8)).map_err(|_| malformed("NULL bitmap"))?.to_vec();
    let bound = r.u8().map_err(|_| malformed("new-params-bound flag"))?;
    if bound == 1 {
        let mut new_types = Vec::with_capacity(n);
        for _ in 0..n {
            new_types.push(r.u16().map_err(|_| malformed("parameter types"))?);
        }
        *types = new_types;
    }
    if types.len() != n {
        return Err(SqlError::wrong_args("parameter types were never sent for this statement"));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if nulls[i / 8] & (1 << (i % 8)) != 0 {
            out.push(Value::Null);
            continue;
        }
        if let Some(data) = long_data.get(&(i as u16)) {
            out.push(bytes_value(data));
            continue;
        }
        let ty = types[i];
        let unsigned = ty & 0x8000 != 0;
        let v = match (ty & 0xff) as u8 {
            T_NULL => Value::Null,
            T_TINY => int_param(r.u8().map_err(|_| malformed("TINY value"))? as u64, 8, unsigned),
            T_SHORT | T_YEAR => int_param(r.u16().map_err(|_| malformed("SHORT value"))? as u64, 16, unsigned),
            T_LONG | T_INT24 => int_param(r.u32().map_err(|_| malformed("LONG value"))? as u64, 32, unsigned),
            T_LONGLONG => int_param(r.u64().map_err(|_| malformed("LONGLONG value"))?, 64, unsigned),
            T_FLOAT => Value::Float(f32::from_bits(r.u32().map_err(|_| malformed("FLOAT value"))?) as f64),
            T_DOUBLE => Value::Float(f64::from_bits(r.u64().map_err(|_| malformed("DOUBLE value"))?)),
            T_DATE | T_DATETIME | T_TIMESTAMP => {
                let len = r.u8().map_err(|_| malformed("date length"))? as usize;
                let b = r.bytes(len).map_err(|_| malformed("date value"))?;
                temporal_param(b).ok_or_else(|| malformed("date value"))?
            }
            T_TIME => {
                let len = r.u8().map_err(|_| malformed("time length"))? as usize;
                let b = r.bytes(len).map_err(|_| malformed("time value"))?;
                time_param(b).ok_or_else(|| malformed("time value"))?
            }
            T_NEWDECIMAL | T_DECIMAL => {
                let b = r.lenenc_bytes().map_err(|_| malformed("decimal value"))?;
                let s = String::from_utf8_lossy(b);
                Decimal::parse(&s).map(Value::Decimal).unwrap_or(Value::Str(s.into_owned()))
            }
            _ => bytes_value(r.lenenc_bytes().map_err(|_| malformed("string value"))?),
        };
        out.push(v);
    }
    Ok(out)
}

/// An integer parameter of `bits` bits, sign-extended unless unsigned. An
/// unsigned one that fits BIGINT is a plain integer: drivers flag every
/// non-negative number unsigned (mysql-connector-python does), and an
/// unsigned operand would make `-7 * ?` an out-of-range error.
fn int_param(raw: u64, bits: u32, unsigned: bool) -> Value {
    if unsigned {
        return i64::try_from(raw).map_or(Value::UInt(raw), Value::Int);
    }
    let shift = 64 - bits;
    Value::Int(((raw << shift) as i64) >> shift)
}

fn bytes_value(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::Str(s.to_string()),
        Err(_) => Value::Bytes(b.to_vec()),
    }
}

fn temporal_param(b: &[u8]) -> Option<Value> {
    if b.is_empty() {
        return Some(Value::DateTime(days_from_civil(0, 1, 1) * 86_400_000_000));
    }
    if b.len() < 4 {
        return None;
    }
    let year = u16::from_le_bytes([b[0], b[1]]) as i64;
    let (month, day) = (b[2] as u32, b[3] as u32);
    let days = days_from_civil(year, month.max(1), day.max(1));
    if b.len() == 4 {
        return Some(Value::Date(days as i32));
    }
    if b.len() < 7 {
        return None;
    }
    let secs = b[4] as i64 * 3600 + b[5] as i64 * 60 + b[6] as i64;
    let micros = if b.len() >= 11 { u32::from_le_bytes([b[7], b[8], b[9], b[10]]) as i64 } else { 0 };
    Some(Value::DateTime(days * 86_400_000_000 + secs * 1_000_000 + micros))
}

/// A TIME parameter: a sign, days, hours, minutes, seconds and, in 12
/// bytes, microseconds; no bytes at all is zero.
fn time_param(b: &[u8]) -> Option<Value> {
    if b.is_empty() {
        return Some(Value::Time(0));
    }
    if b.len() < 8 {
        return None;
    }
    let days = i64::from(u32::from_le_bytes([b[1], b[2], b[3], b[4]]));
    let (hours, minutes, seconds) = (i64::from(b[5]), i64::from(b[6]), i64::from(b[7]));
    let fraction = if b.len() >= 12 { i64::from(u32::from_le_bytes([b[8], b[9], b[10], b[11]])) } else { 0 };
    // MySQL's TIME spans at most 34 days and some hours; anything else is
    // no TIME (and must not overflow the sum below).
    if days > 34 || hours > 23 || minutes > 59 || seconds > 59 || fraction > 999_999 {
        return None;
    }
    let micros = ((days * 24 + hours) * 3600 + minutes * 60 + seconds) * 1_000_000 + fraction;
    Some(Value::Time(if b[0] == 1 { -micros } else { micros }))
}

/// A value as text-protocol bytes; None for NULL.
fn text_value(v: &Value) -> Option<Cow<'_, [u8]>> {
    Some(match v {
        Value::Null => return None,
        Value::Str(s) => Cow::Borrowed(s.as_bytes()),
        Value::Bytes(b) => Cow::Borrowed(b.as_slice()),
        Value::Int(i) => Cow::Owned(itoa::Buffer::new().format(*i).as_bytes().to_vec()),
        Value::UInt(u) => Cow::Owned(itoa::Buffer::new().format(*u).as_bytes().to_vec()),
        Value::Float(f) => Cow::Owned(format_double(*f).into_bytes()),
        other => Cow::Owned(to_text(other).into_bytes()),
    })
}

fn binary_row(p: &mut Vec<u8>, row: &[Value], wires: &[Wire]) {
    p.push(0);
    let bitmap_at = p.len();
    let bitmap_len = (row.len() + 7 + 2) / 8;
    p.resize(bitmap_at + bitmap_len, 0);
    for (i, (v, w)) in row.iter().zip(wires).enumerate() {
        if v.is_null() {
            let bit = i + 2;
            p[bitmap_at + bit / 8] |= 1 << (bit % 8);
            continue;
        }
        let int = || -> i64 {
            match v {
                Value::Int(i) => *i,
                Value::UInt(u) => *u as i64,
                Value::Bool(b) => *b as i64,
                other => crate::eval::numeric(other).as_f64().unwrap_or(0.0) as i64,
            }
        };
        match w.ty {
            T_TINY => p.push(int() as u8),
            T_SHORT | T_YEAR => p.extend_from_slice(&(int() as u16).to_le_bytes()),
            T_LONG | T_INT24 => p.extend_from_slice(&(int() as u32).to_le_bytes()),
            T_LONGLONG => p.extend_from_slice(&(int() as u64).to_le_bytes()),
            T_FLOAT => p.extend_from_slice(&(crate::eval::numeric(v).as_f64().unwrap_or(0.0) as f32).to_le_bytes()),
            T_DOUBLE => p.extend_from_slice(&crate::eval::numeric(v).as_f64().unwrap_or(0.0).to_le_bytes()),
            T_DATE | T_DATETIME | T_TIMESTAMP => {
                let micros = match v {
                    Value::Date(d) => *d as i64 * 86_400_000_000,
                    Value::DateTime(us) | Value::Timestamp(us) => *us,
                    _ => 0,
                };
                let days = micros.div_euclid(86_400_000_000);
                let rest = micros.rem_euclid(86_400_000_000);
                let (y, m, d) = civil_from_days(days);
                let (h, mi, s, us) =
                    (rest / 3_600_000_000, rest / 60_000_000 % 60, rest / 1_000_000 % 60, rest % 1_000_000);
                if w.ty == T_DATE {
                    p.push(4);
                    p.extend_from_slice(&(y as u16).to_le_bytes());
                    p.extend_from_slice(&[m as u8, d as u8]);
                } else {
                    p.push(11);
                    p.extend_from_slice(&(y as u16).to_le_bytes());
                    p.extend_from_slice(&[m as u8, d as u8, h as u8, mi as u8, s as u8]);
                    p.extend_from_slice(&(us as u32).to_le_bytes());
                }
            }
            T_TIME => put_binary_time(p, v),
            T_BIT => match v {
                Value::UInt(bits) => put_lenenc_str(p, &bit_bytes(*bits, w.length as u8)),
                other => put_lenenc_str(p, &text_value(other).unwrap_or_default()),
            },
            _ => match text_value(v) {
                Some(b) => put_lenenc_str(p, &b),
                None => put_lenenc_str(p, b""),
            },
        }
    }
}

/// A TIME in the binary protocol: 0, 8 or 12 bytes after their count (a
/// sign, days, hours, minutes, seconds, then microseconds if any).
fn put_binary_time(p: &mut Vec<u8>, v: &Value) {
    let micros = match v {
        Value::Time(us) => *us,
        other => latsdb_types::mysql_types::parse_time(&to_text(other)).unwrap_or(0),
    };
    if micros == 0 {
        p.push(0);
        return;
    }
    let magnitude = micros.unsigned_abs();
    let seconds = magnitude / 1_000_000;
    let fraction = (magnitude % 1_000_000) as u32;
    p.push(if fraction == 0 { 8 } else { 12 });
    p.push(u8::from(micros < 0));
    p.extend_from_slice(&((seconds / 86_400) as u32).to_le_bytes());
    p.extend_from_slice(&[(seconds / 3600 % 24) as u8, (seconds / 60 % 60) as u8, (seconds % 60) as u8]);
    if fraction != 0 {
        p.extend_from_slice(&fraction.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_parameters_are_sign_extended_unless_unsigned() {
        assert_eq!(int_param(1 << 63, 64, true), Value::UInt(1 << 63));
        assert_eq!(int_param(0xff, 8, false), Value::Int(-1));
        assert_eq!(int_param(0xff, 8, true), Value::Int(255));
        assert_eq!(int_param(0x8000, 16, false), Value::Int(-32768));
        assert_eq!(int_param(0xffff_fffe, 32, false), Value::Int(-2));
        assert_eq!(int_param(u64::MAX, 64, false), Value::Int(-1));
        assert_eq!(int_param(u64::MAX, 64, true), Value::UInt(u64::MAX));
    }

    #[test]
    fn date_and_datetime_parameters_decode_to_days_and_microseconds() {
        // 2024-02-29
        assert_eq!(temporal_param(&[0xe8, 0x07, 2, 29]), Some(Value::Date(days_from_civil(2024, 2, 29) as i32)));
        // 1970-01-01 00:00:01.000002
        assert_eq!(temporal_param(&[0xb2, 0x07, 1, 1, 0, 0, 1, 2, 0, 0, 0]), Some(Value::DateTime(1_000_002)));
        assert_eq!(temporal_param(&[1, 2]), None, "a truncated date is malformed");
    }
}
