//! Where `bench ycsb` sends its operations: latsdb through the native
//! client, or a Redis server with YCSB's Redis data model (the binding
//! `site.ycsb.db.RedisClient`): a hash per record, and a sorted set
//! `_indices` of the keys scored by Java's `String.hashCode`, which scans
//! walk. One generator drives both in the same run.

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
}

/// One task's way to the target.
pub(super) enum Session {
    Native { client: Client, table: Arc<Table> },
    Redis(Resp),
}

impl Db {
    pub(super) async fn session(&self) -> Result<Session, Failure> {
        match self {
            Db::Native { client, table } => Ok(Session::Native { client: client.clone(), table: table.clone() }),
            Db::Redis { address } => Ok(Session::Redis(Resp::connect(address).await?)),
        }
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
