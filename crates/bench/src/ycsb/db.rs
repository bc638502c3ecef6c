//! Where `bench ycsb` sends its operations: latsdb through the native
//! client; a Redis server with YCSB's Redis data model (the binding
//! `site.ycsb.db.RedisClient`): a hash per record, and a sorted set
//! `_indices` of the keys scored by Java's `String.hashCode`, which scans
//! walk; or a MySQL server (latsdb's SQL node, MariaDB) with the
//! statements of YCSB's JDBC binding (`site.ycsb.db.JdbcDBClient`), each
//! prepared once per connection. One generator drives them all.

use super::run::Failure;
use latsdb_client::{Client, Op, Scan, Table};
use latsdb_types::Value;
use std::ops::Bound;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The target of a run, shared by its tasks.
#[derive(Clone)]
pub(super) enum Db {
    Native {
        client: Client,
        table: Arc<Table>,
    },
    /// `host:port` of a Redis server (each task opens a connection).
    Redis {
        address: String,
    },
    /// A MySQL server (each task opens a connection) and the statements.
    Mysql {
        opts: mysql_async::Opts,
        statements: Arc<Statements>,
    },
}

/// One task's way to the target.
pub(super) enum Session {
    Native { client: Client, table: Arc<Table> },
    Redis(Resp),
    Mysql { conn: mysql_async::Conn, statements: Arc<Statements> },
}

impl Db {
    pub(super) async fn session(&self) -> Result<Session, Failure> {
        match self {
            Db::Native { client, table } => Ok(Session::Native { client: client.clone(), table: table.clone() }),
            Db::Redis { address } => Ok(Session::Redis(Resp::connect(address).await?)),
            Db::Mysql { opts, statements } => {
                let conn = mysql_async::Conn::new(opts.clone()).await.map_err(mysql_failure)?;
                Ok(Session::Mysql { conn, statements: statements.clone() })
            }
        }
    }
}

/// The SQL statements of YCSB's JDBC binding for one table.
pub(super) struct Statements {
    read: String,
    scan: String,
    insert: String,
    /// `UPDATE ... SET` up to the assignments.
    update_head: String,
    /// ` WHERE YCSB_KEY = ?`.
    update_tail: String,
}

impl Statements {
    pub(super) fn new(table: &str, fieldcount: usize) -> Statements {
        let marks = vec!["?"; fieldcount + 1].join(",");
        let columns: Vec<String> = (0..fieldcount).map(|i| format!(",FIELD{i}")).collect();
        Statements {
            read: format!("SELECT * FROM {table} WHERE YCSB_KEY = ?"),
            scan: format!("SELECT * FROM {table} WHERE YCSB_KEY >= ? ORDER BY YCSB_KEY LIMIT ?"),
            insert: format!("INSERT INTO {table} (YCSB_KEY{}) VALUES ({marks})", columns.concat()),
            update_head: format!("UPDATE {table} SET "),
            update_tail: " WHERE YCSB_KEY = ?".into(),
        }
    }

    fn update(&self, fields: &[(&str, String)]) -> String {
        let sets: Vec<String> = fields.iter().map(|(f, _)| format!("{f}=?")).collect();
        format!("{}{}{}", self.update_head, sets.join(","), self.update_tail)
    }
}

/// Creates YCSB's table as its JDBC binding's documentation does
/// (`YCSB_KEY VARCHAR(255) PRIMARY KEY`, `FIELDn TEXT`), dropping an old
/// one, in `database` (created if missing).
pub(super) async fn mysql_create_table(
    opts: &mysql_async::Opts,
    database: &str,
    table: &str,
    fieldcount: usize,
) -> Result<(), Failure> {
    use mysql_async::prelude::Queryable;
    // Connected to no database: `database` may not exist yet.
    let anywhere = mysql_async::OptsBuilder::from_opts(opts.clone()).db_name(None::<String>);
    let mut conn = mysql_async::Conn::new(anywhere).await.map_err(mysql_failure)?;
    let fields: Vec<String> = (0..fieldcount).map(|i| format!(", FIELD{i} TEXT")).collect();
    for sql in [
        format!("CREATE DATABASE IF NOT EXISTS {database}"),
        format!("DROP TABLE IF EXISTS {database}.{table}"),
        format!("CREATE TABLE {database}.{table} (YCSB_KEY VARCHAR(255) PRIMARY KEY{})", fields.concat()),
    ] {
        conn.query_drop(&sql).await.map_err(mysql_failure)?;
    }
    conn.disconnect().await.map_err(mysql_failure)
}

/// A MySQL error as YCSB would count it: the server's error code, or the
/// client's kind of failure.
fn mysql_failure(e: mysql_async::Error) -> Failure {
    match &e {
        mysql_async::Error::Server(s) => Failure::new(&format!("MYSQL {}", s.code), s.message.clone()),
        _ => Failure::new("MYSQL", e.to_string()),
    }
}

/// Sorted set of every key, as YCSB's Redis binding keeps it.
const INDEX: &str = "_indices";

impl Session {
    /// Reads a record (all fields, or one); false if it does not exist.
    pub(super) async fn read(&mut self, key: &str, field: Option<&str>) -> Result<bool, Failure> {
        match self {
            Session::Native { client, table } => {
                let mut op = Op::read(table, &[Value::Str(key.to_string())])?;
                if let Some(field) = field {
                    op = op.columns(table, &[field])?;
                }
                Ok(single(client.batch(vec![op]).await)?.into_row().is_some())
            }
            Session::Redis(conn) => {
                let reply = match field {
                    None => conn.call(&["HGETALL", key]).await?,
                    Some(field) => conn.call(&["HMGET", key, field]).await?,
                };
                Ok(match reply {
                    Reply::Array(items) => items.iter().any(|i| !matches!(i, Reply::Nil)),
                    _ => false,
                })
            }
            // The JDBC binding reads every column whatever it was asked for.
            Session::Mysql { conn, statements } => {
                use mysql_async::prelude::Queryable;
                let row: Option<mysql_async::Row> =
                    conn.exec_first(statements.read.as_str(), (key,)).await.map_err(mysql_failure)?;
                Ok(row.is_some())
            }
        }
    }

    pub(super) async fn update(&mut self, key: &str, values: &[(&str, String)]) -> Result<(), Failure> {
        match self {
            Session::Native { client, table } => {
                let set: Vec<(&str, Value)> = values.iter().map(|(f, v)| (*f, Value::Str(v.clone()))).collect();
                let op = Op::update(table, &[Value::Str(key.to_string())], &set)?;
                single(client.batch(vec![op]).await)?;
                Ok(())
            }
            Session::Redis(conn) => conn.hmset(key, values).await,
            Session::Mysql { conn, statements } => {
                use mysql_async::prelude::Queryable;
                let mut params: Vec<mysql_async::Value> = values.iter().map(|(_, v)| v.as_str().into()).collect();
                params.push(key.into());
                conn.exec_drop(statements.update(values), params).await.map_err(mysql_failure)
            }
        }
    }

    pub(super) async fn insert(&mut self, key: &str, values: &[(&str, String)]) -> Result<(), Failure> {
        match self {
            Session::Native { client, table } => {
                let mut row = vec![Value::Str(key.to_string())];
                row.extend(values.iter().map(|(_, v)| Value::Str(v.clone())));
                single(client.batch(vec![Op::insert(table, row)?]).await)?;
                Ok(())
            }
            Session::Redis(conn) => {
                conn.hmset(key, values).await?;
                let score = java_hash(key).to_string();
                conn.call(&["ZADD", INDEX, &score, key]).await?;
                Ok(())
            }
            Session::Mysql { conn, statements } => {
                use mysql_async::prelude::Queryable;
                let mut params: Vec<mysql_async::Value> = vec![key.into()];
                params.extend(values.iter().map(|(_, v)| mysql_async::Value::from(v.as_str())));
                conn.exec_drop(statements.insert.as_str(), params).await.map_err(mysql_failure)
            }
        }
    }

    /// Up to `count` records in key order from `start` (Redis: in the
    /// order of the keys' hash codes, as YCSB's binding scans).
    pub(super) async fn scan(&mut self, start: &str, count: u64, field: Option<&str>) -> Result<(), Failure> {
        match self {
            Session::Native { client, table } => {
                let mut scan = Scan::all()
                    .range(Bound::Included(vec![Value::Str(start.to_string())]), Bound::Unbounded)
                    .ordered()
                    .limit(count as usize)
                    .page_rows(count.min(4096) as u32);
                if let Some(field) = field {
                    scan = scan.columns(&["YCSB_KEY", field]);
                }
                client.scan(table, scan).await?;
                Ok(())
            }
            Session::Redis(conn) => {
                let from = java_hash(start).to_string();
                let limit = count.to_string();
                let keys = conn.call(&["ZRANGEBYSCORE", INDEX, &from, "+inf", "LIMIT", "0", &limit]).await?;
                let Reply::Array(keys) = keys else {
                    return Err(Failure::new("REDIS", "ZRANGEBYSCORE did not answer an array".into()));
                };
                for key in keys {
                    if let Reply::Bulk(key) = key {
                        let key = String::from_utf8_lossy(&key).into_owned();
                        self.read(&key, field).await?;
                    }
                }
                Ok(())
            }
            Session::Mysql { conn, statements } => {
                use mysql_async::prelude::Queryable;
                let rows: Vec<mysql_async::Row> =
                    conn.exec(statements.scan.as_str(), (start, count)).await.map_err(mysql_failure)?;
                drop(rows);
                Ok(())
            }
        }
    }
}

fn single(
    results: latsdb_types::Result<Vec<latsdb_types::Result<latsdb_client::Outcome>>>,
) -> Result<latsdb_client::Outcome, Failure> {
    let mut results = results?;
    match (results.pop(), results.is_empty()) {
        (Some(r), true) => Ok(r?),
        _ => Err(Failure::new("INTERNAL", "a batch of one operation did not answer once".into())),
    }
}

/// Java's `String.hashCode` (YCSB's Redis binding scores keys with it).
pub(super) fn java_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// A RESP reply.
#[derive(Debug, PartialEq)]
pub(super) enum Reply {
    Status(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

/// One connection speaking RESP2, one command at a time (as YCSB's Jedis
/// client per thread).
pub(super) struct Resp {
    stream: BufReader<TcpStream>,
    out: Vec<u8>,
}

/// Largest bulk string or array accepted from the server (a bad or
/// hostile answer must not make the client allocate without bound).
const MAX_REPLY_LEN: usize = 64 << 20;

impl Resp {
    async fn connect(address: &str) -> Result<Resp, Failure> {
        let stream = TcpStream::connect(address)
            .await
            .map_err(|e| Failure::new("REDIS", format!("cannot connect to Redis at {address}: {e}")))?;
        let _ = stream.set_nodelay(true);
        Ok(Resp { stream: BufReader::new(stream), out: Vec::new() })
    }

    async fn hmset(&mut self, key: &str, values: &[(&str, String)]) -> Result<(), Failure> {
        let mut args = vec!["HMSET", key];
        for (field, value) in values {
            args.push(field);
            args.push(value);
        }
        self.call(&args).await.map(|_| ())
    }

    /// Sends a command and reads its reply; a Redis error is a failure.
    pub(super) async fn call(&mut self, args: &[&str]) -> Result<Reply, Failure> {
        self.out.clear();
        self.out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            self.out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            self.out.extend_from_slice(a.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        }
        let io = |e: std::io::Error| Failure::new("REDIS", format!("the connection to Redis failed: {e}"));
        self.stream.get_mut().write_all(&self.out).await.map_err(io)?;
        Box::pin(self.reply()).await
    }

    async fn line(&mut self) -> Result<String, Failure> {
        let mut line = String::new();
        let n = self
            .stream
            .read_line(&mut line)
            .await
            .map_err(|e| Failure::new("REDIS", format!("reading from Redis failed: {e}")))?;
        if n == 0 || !line.ends_with("\r\n") {
            return Err(Failure::new("REDIS", "Redis closed the connection mid-reply".into()));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    async fn reply(&mut self) -> Result<Reply, Failure> {
        let line = self.line().await?;
        let (kind, rest) = line.split_at(line.len().min(1));
        let number = || -> Result<i64, Failure> {
            rest.parse().map_err(|_| Failure::new("REDIS", format!("Redis sent a malformed length: {line:?}")))
        };
        match kind {
            "+" => Ok(Reply::Status(rest.to_string())),
            "-" => Err(Failure::new("REDIS", format!("Redis answered an error: {rest}"))),
            ":" => Ok(Reply::Integer(number()?)),
            "$" => match number()? {
                -1 => Ok(Reply::Nil),
                n if n >= 0 && (n as usize) <= MAX_REPLY_LEN => {
                    let mut bytes = vec![0u8; n as usize + 2];
                    self.stream
                        .read_exact(&mut bytes)
                        .await
                        .map_err(|e| Failure::new("REDIS", format!("reading from Redis failed: {e}")))?;
                    bytes.truncate(n as usize);
                    Ok(Reply::Bulk(bytes))
                }
                n => Err(Failure::new("REDIS", format!("Redis sent a bulk string of length {n}"))),
            },
            "*" => match number()? {
                -1 => Ok(Reply::Nil),
                n if n >= 0 && (n as usize) <= MAX_REPLY_LEN / 16 => {
                    let mut items = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        items.push(Box::pin(self.reply()).await?);
                    }
                    Ok(Reply::Array(items))
                }
                n => Err(Failure::new("REDIS", format!("Redis sent an array of length {n}"))),
            },
            _ => Err(Failure::new("REDIS", format!("Redis sent an unknown reply: {line:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_scored_by_javas_string_hash() {
        // Values of "".hashCode(), "a".hashCode() and "user1".hashCode() in Java.
        assert_eq!(java_hash(""), 0);
        assert_eq!(java_hash("a"), 97);
        assert_eq!(java_hash("user1"), 111_578_566);
    }
}
