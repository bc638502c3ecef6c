//! Framed connections (see `latsdb_types::proto` for the frame format).
//!
//! The reader pulls as many bytes as the socket has into one buffer and hands
//! out every complete frame in it before reading again, so a burst of small
//! requests costs one read. The writer gathers every frame queued while it
//! was busy into one write, so answers to many requests share a syscall.

pub mod link;
pub mod metrics;
pub mod serve;
pub mod tls;

pub use link::{accept_link, connect_link, link_failed, Link, LinkReader, LinkWriter};

use latsdb_types::proto::{self, FRAME_HEADER};
use latsdb_types::{DbError, ErrorCode, Result};
use serde::{de::DeserializeOwned, Serialize};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

const READ_CHUNK: usize = 64 << 10;
const WRITE_BATCH: usize = 256 << 10;

#[derive(Debug)]
pub enum FrameError {
    Io(std::io::Error),
    /// The announced frame is larger than allowed; the connection cannot be
    /// resynchronised and must be closed after answering.
    TooLarge {
        request_id: u64,
        len: usize,
        max: usize,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::TooLarge { len, max, .. } => {
                write!(f, "frame of {len} bytes exceeds the limit of {max} bytes")
            }
        }
    }
}

pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    max_frame: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R, max_frame: usize) -> Self {
        FrameReader { inner, buf: Vec::with_capacity(READ_CHUNK), start: 0, max_frame }
    }

    /// Whether a complete frame is already buffered (no read needed).
    pub fn has_frame(&self) -> bool {
        let avail = &self.buf[self.start..];
        avail.len() >= 4 && avail.len() >= 4 + u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]) as usize
    }

    /// The next frame as (request id, body); None at a clean end of stream.
    pub async fn next(&mut self) -> std::result::Result<Option<(u64, &[u8])>, FrameError> {
        loop {
            let avail = self.buf.len() - self.start;
            if avail >= FRAME_HEADER {
                let b = &self.buf[self.start..];
                let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
                let request_id = u64::from_le_bytes([b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11]]);
                if len < 8 {
                    return Err(FrameError::Io(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "frame length smaller than its header",
                    )));
                }
                if len > self.max_frame {
                    return Err(FrameError::TooLarge { request_id, len, max: self.max_frame });
                }
                if avail >= 4 + len {
                    let body_start = self.start + FRAME_HEADER;
                    let body_end = self.start + 4 + len;
                    self.start = body_end;
                    return Ok(Some((request_id, &self.buf[body_start..body_end])));
                }
                // Make room for the rest of this frame.
                if self.buf.capacity() - self.start < 4 + len {
                    self.buf.reserve(4 + len);
                }
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let old_len = self.buf.len();
            if self.buf.capacity() - old_len < READ_CHUNK {
                self.buf.reserve(READ_CHUNK);
            }
            // `read_buf` appends only what it read, so this future may be
            // dropped at the await (a `select!` branch losing) without
            // losing or corrupting buffered bytes: `next` is cancel-safe.
            let n = self.inner.read_buf(&mut self.buf).await.map_err(FrameError::Io)?;
            if n == 0 {
                if old_len == 0 {
                    return Ok(None);
                }
                return Err(FrameError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed inside a frame",
                )));
            }
        }
    }
}

/// How a writer waits for company before writing a lone frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coalesce {
    /// Write at once.
    Never,
    /// Yield to the scheduler once, so tasks ready in the same round can add
    /// their frames to the same write (a send delay that costs no time).
    YieldOnce,
}

/// Writes queued frames, many per syscall, until the queue closes or the
/// socket fails.
pub async fn write_frames<W: AsyncWrite + Unpin>(
    mut out: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    coalesce: Coalesce,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_BATCH);
    while let Some(first) = rx.recv().await {
        if coalesce == Coalesce::YieldOnce && rx.is_empty() {
            tokio::task::yield_now().await;
        }
        let second = match rx.try_recv() {
            Ok(frame) if first.len() < WRITE_BATCH => frame,
            Ok(frame) => {
                // A large frame goes out on its own, without a copy.
                if out.write_all(&first).await.is_err() {
                    return;
                }
                frame
            }
            Err(_) => {
                // Nothing else queued: write the frame as it is.
                if out.write_all(&first).await.is_err() {
                    return;
                }
                continue;
            }
        };
        // A large first frame was written above; a small one leads the batch.
        if first.len() < WRITE_BATCH {
            buf.extend_from_slice(&first);
        }
        buf.extend_from_slice(&second);
        while buf.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(frame) => buf.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        if out.write_all(&buf).await.is_err() {
            return;
        }
        buf.clear();
    }
    let _ = out.shutdown().await;
}

pub async fn connect(address: &str, timeout: Duration) -> Result<TcpStream> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(address))
        .await
        .map_err(|_| {
            DbError::new(ErrorCode::NodeUnavailable, format!("connecting to {address} timed out after {timeout:?}"))
        })?
        .map_err(|e| DbError::new(ErrorCode::NodeUnavailable, format!("cannot connect to {address}: {e}")))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// A simple sequential request/response connection: the management
/// protocol, to the management server.
pub struct RpcConn {
    reader: FrameReader<LinkReader>,
    writer: LinkWriter,
    next_id: u64,
    address: String,
    timeout: Duration,
}

impl RpcConn {
    /// Connects, through TLS with this process's identity when `tls` is given.
    pub async fn connect(address: &str, timeout: Duration, tls: Option<&tls::ClusterTls>) -> Result<RpcConn> {
        let link = connect_link(address, timeout, tls, tls::Role::Mgmd).await?;
        Ok(RpcConn::from_link(link, address, timeout))
    }

    pub fn from_link(link: Link, address: &str, timeout: Duration) -> RpcConn {
        let (r, w) = link.into_split();
        RpcConn {
            reader: FrameReader::new(r, proto::DEFAULT_MAX_FRAME_BYTES),
            writer: w,
            next_id: 1,
            address: address.to_string(),
            timeout,
        }
    }

    /// Continues a connection whose first frames were read elsewhere
    /// (keeping whatever the reader has buffered).
    pub fn from_parts(
        reader: FrameReader<LinkReader>,
        writer: LinkWriter,
        address: &str,
        timeout: Duration,
    ) -> RpcConn {
        RpcConn { reader, writer, next_id: 1, address: address.to_string(), timeout }
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    pub async fn send<T: Serialize>(&mut self, message: &T) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.send_with_id(id, message).await?;
        Ok(id)
    }

    pub async fn send_with_id<T: Serialize>(&mut self, id: u64, message: &T) -> Result<()> {
        let frame = proto::frame(id, message);
        self.writer.write_all(&frame).await.map_err(|e| link_failed(&self.address, &e))
    }

    /// Waits for the next frame; None when the peer closed the connection.
    pub async fn receive<T: DeserializeOwned>(&mut self) -> Result<Option<(u64, T)>> {
        match self.reader.next().await {
            Ok(Some((id, body))) => Ok(Some((id, proto::decode_body(body)?))),
            Ok(None) => Ok(None),
            Err(FrameError::Io(e)) => Err(link_failed(&self.address, &e)),
            Err(e) => Err(self.lost(e.to_string())),
        }
    }

    pub async fn call<Q: Serialize, A: DeserializeOwned>(&mut self, message: &Q) -> Result<A> {
        self.call_within(message, self.timeout).await
    }

    /// `call`, waiting for the answer up to `timeout` instead of the
    /// connection's (for requests answered only once something else
    /// happened, such as the cluster forming).
    pub async fn call_within<Q: Serialize, A: DeserializeOwned>(
        &mut self,
        message: &Q,
        timeout: Duration,
    ) -> Result<A> {
        let id = self.send(message).await?;
        let answer = tokio::time::timeout(timeout, self.receive::<A>()).await.map_err(|_| {
            DbError::new(ErrorCode::Timeout, format!("{} did not answer within {timeout:?}", self.address))
        })??;
        match answer {
            Some((got, a)) if got == id => Ok(a),
            Some((got, _)) => {
                Err(DbError::internal(format!("{} answered request {got} while {id} was expected", self.address)))
            }
            None => Err(self.lost("connection closed".into())),
        }
    }

    fn lost(&self, why: String) -> DbError {
        DbError::new(ErrorCode::NodeUnavailable, format!("connection to {} failed: {why}", self.address))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reader_splits_coalesced_frames_and_rejects_oversized() {
        let mut bytes = Vec::new();
        proto::encode_frame(&mut bytes, 7, &"hello".to_string());
        proto::encode_frame(&mut bytes, 8, &"world".to_string());
        let mut r = FrameReader::new(&bytes[..], 1024);
        let (id, body) = r.next().await.unwrap().unwrap();
        assert_eq!((id, proto::decode_body::<String>(body).unwrap()), (7, "hello".to_string()));
        assert!(r.has_frame());
        let (id, _) = r.next().await.unwrap().unwrap();
        assert_eq!(id, 8);
        assert!(r.next().await.unwrap().is_none());

        let mut big = Vec::new();
        proto::encode_frame(&mut big, 9, &vec![0u8; 5000]);
        let mut r = FrameReader::new(&big[..], 1024);
        assert!(matches!(r.next().await, Err(FrameError::TooLarge { request_id: 9, .. })));
        let mut r = FrameReader::new(&big[..100], 1 << 20);
        assert!(matches!(r.next().await, Err(FrameError::Io(_))));
    }
}
