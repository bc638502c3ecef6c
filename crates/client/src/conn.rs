//! One multiplexed connection to a data-node shard: many requests in flight,
//! matched to answers by request id.

use crate::ClientOptions;
use latsdb_net::{write_frames, FrameError, FrameReader};
use latsdb_types::proto::{self, ClientRequest, ClientResponse, Hello, ShardAddr, PROTOCOL_VERSION};
use latsdb_types::{DbError, ErrorCode, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

type Waiter = oneshot::Sender<Result<Reply>>;

/// A data node's answer: decoded, or the frame's body for the caller to
/// decode (a batch of lookups reads its rows straight from it).
pub(crate) enum Reply {
    Decoded(ClientResponse),
    Raw(Vec<u8>),
}

/// A request waiting for its answer, with the sweep tick it was sent in.
struct Pending {
    waiter: Waiter,
    sent_at: u64,
    /// The answer is handed over undecoded (`Reply::Raw`).
    raw: bool,
}

/// Sweeps per request timeout: a request times out between 8 and 9 sweeps
/// after it was sent.
const SWEEPS_PER_TIMEOUT: u32 = 8;

pub(crate) struct ShardConn {
    shard: ShardAddr,
    frames: mpsc::UnboundedSender<Vec<u8>>,
    pending: Mutex<HashMap<u64, Pending, foldhash::fast::RandomState>>,
    next_id: AtomicU64,
    alive: AtomicBool,
    /// Advanced by the connection's sweeper. Requests carry the tick
    /// instead of a timer each: arming a runtime timer per request cost a
    /// wake-up of the runtime's driver (an eventfd write and an extra
    /// epoll_wait) per request.
    tick: AtomicU64,
}

impl ShardConn {
    pub(crate) async fn open(shard: ShardAddr, address: &str, opts: &ClientOptions) -> Result<Arc<ShardConn>> {
        let link = latsdb_net::connect_link(
            address,
            opts.connect_timeout,
            opts.tls.as_deref(),
            latsdb_net::tls::Role::DataNode,
        )
        .await?;
        let (r, w) = link.into_split();
        let (frames, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_frames(w, rx, opts.coalesce));
        let conn = Arc::new(ShardConn {
            shard,
            frames,
            pending: Mutex::new(HashMap::default()),
            next_id: AtomicU64::new(1),
            alive: AtomicBool::new(true),
            tick: AtomicU64::new(0),
        });
        tokio::spawn(sweep(Arc::downgrade(&conn), opts.request_timeout));
        let (tx, hello_rx) = oneshot::channel();
        conn.pending().insert(0, Pending { waiter: tx, sent_at: 0, raw: false });
        let _ =
            conn.frames.send(proto::frame(0, &Hello::Client { protocol: PROTOCOL_VERSION, name: opts.name.clone() }));
        tokio::spawn(read_loop(conn.clone(), FrameReader::new(r, proto::DEFAULT_MAX_FRAME_BYTES)));
        let answer = tokio::time::timeout(opts.connect_timeout, hello_rx)
            .await
            .map_err(|_| {
                DbError::new(
                    ErrorCode::Timeout,
                    format!("shard {shard} at {address} did not greet within {:?}", opts.connect_timeout),
                )
            })?
            .map_err(|_| {
                DbError::new(ErrorCode::NodeUnavailable, format!("shard {shard} at {address} closed the connection"))
            })??;
        match answer.decoded()? {
            ClientResponse::Hello { shard: s } if s == shard => Ok(conn),
            ClientResponse::Hello { shard: s } => Err(DbError::new(
                ErrorCode::WrongShard,
                format!("{address} is shard {s}, not {shard}; the cluster layout is stale"),
            )),
            ClientResponse::Error(e) => Err(e),
            other => Err(DbError::internal(format!("shard {shard} greeted with {other:?}"))),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending, foldhash::fast::RandomState>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests sent on this connection and not answered yet.
    pub(crate) fn in_flight(&self) -> usize {
        self.pending().len()
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Sends a request; with `raw` its answer comes back undecoded.
    pub(crate) fn send<T: serde::Serialize>(&self, request: &T, raw: bool) -> Result<oneshot::Receiver<Result<Reply>>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending().insert(id, Pending { waiter: tx, sent_at: self.tick.load(Ordering::Relaxed), raw });
        if !self.is_alive() || self.frames.send(proto::frame(id, request)).is_err() {
            self.pending().remove(&id);
            return Err(DbError::new(
                ErrorCode::NodeUnavailable,
                format!("the connection to shard {} is closed", self.shard),
            ));
        }
        Ok(rx)
    }

    /// The answer to a request that timed out: a transaction it reports
    /// open would hold its locks at the coordinator for good, waiting for a
    /// next request that never comes, so it is aborted. (Its caller counts
    /// it finished; when the request was the transaction's first, its id is
    /// in this answer only, so nothing else can.)
    fn abort_if_open(&self, reply: ClientResponse) {
        let ClientResponse::TxExec { tx, committed: false, .. } = reply else { return };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Its answer has no waiter either, and is dropped when it comes.
        let _ = self.frames.send(proto::frame(id, &ClientRequest::TxAbort { tx }));
    }

    fn fail_all(&self, why: &str) {
        self.alive.store(false, Ordering::Release);
        let waiters: Vec<Waiter> = self.pending().drain().map(|(_, p)| p.waiter).collect();
        for w in waiters {
            let _ = w.send(Err(DbError::new(
                ErrorCode::NodeUnavailable,
                format!("connection to shard {} lost: {why}", self.shard),
            )));
        }
    }
}

impl Reply {
    /// The answer decoded (a raw one is decoded now).
    pub(crate) fn decoded(self) -> Result<ClientResponse> {
        match self {
            Reply::Decoded(response) => Ok(response),
            Reply::Raw(body) => proto::decode_body(&body),
        }
    }
}

async fn read_loop(conn: Arc<ShardConn>, mut reader: FrameReader<latsdb_net::LinkReader>) {
    loop {
        match reader.next().await {
            Ok(Some((id, body))) => {
                match conn.pending().remove(&id) {
                    Some(p) => {
                        let answer = match p.raw {
                            true => Ok(Reply::Raw(body.to_vec())),
                            false => proto::decode_body::<ClientResponse>(body).map(Reply::Decoded),
                        };
                        let _ = p.waiter.send(answer);
                    }
                    // It timed out, and its caller was told so (a
                    // transaction then counts as finished for it): the
                    // answer comes after the caller gave up.
                    None => {
                        if let Ok(reply) = proto::decode_body::<ClientResponse>(body) {
                            conn.abort_if_open(reply);
                        }
                    }
                }
            }
            Ok(None) => return conn.fail_all("closed by the data node"),
            Err(FrameError::TooLarge { len, .. }) => {
                return conn.fail_all(&format!("answer of {len} bytes exceeds the frame limit"))
            }
            Err(FrameError::Io(e)) => return conn.fail_all(&e.to_string()),
        }
    }
}

/// Fails the requests of a connection that have waited longer than
/// `timeout` for an answer; ends with the connection.
async fn sweep(conn: std::sync::Weak<ShardConn>, timeout: std::time::Duration) {
    let period =
        (timeout / SWEEPS_PER_TIMEOUT).clamp(std::time::Duration::from_millis(10), std::time::Duration::from_secs(1));
    // Whole periods a request may wait, plus the one it was sent in.
    let allowed = timeout.as_nanos().div_ceil(period.as_nanos().max(1)) as u64 + 1;
    loop {
        tokio::time::sleep(period).await;
        let Some(conn) = conn.upgrade() else { return };
        if !conn.is_alive() {
            return;
        }
        let now = conn.tick.fetch_add(1, Ordering::Relaxed) + 1;
        let expired: Vec<Waiter> = {
            let mut pending = conn.pending();
            let ids: Vec<u64> =
                pending.iter().filter(|(_, p)| now.saturating_sub(p.sent_at) > allowed).map(|(id, _)| *id).collect();
            ids.into_iter().filter_map(|id| pending.remove(&id)).map(|p| p.waiter).collect()
        };
        for waiter in expired {
            let _ = waiter.send(Err(DbError::new(
                ErrorCode::Timeout,
                format!("no answer from the data node within {timeout:?}"),
            )));
        }
    }
}
