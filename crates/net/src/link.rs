//! A native-protocol connection, plain TCP or TLS, and its two halves.
//!
//! Every native link (client to data node, data node to data node, any
//! process to the management server) is one of these, so a cluster with
//! certificates runs every byte through TLS and one without runs plain TCP
//! with no indirection on its hot path: the halves are enums, not boxes.

use crate::tls::{ClusterTls, PeerIdentity, Role};
use latsdb_types::proto::FRAME_HEADER;
use latsdb_types::{DbError, ErrorCode, Result};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// What TLS runs over: the socket behind a read buffer. rustls reads at
/// most 4 KiB per call, so a 12 KiB answer would cost three `recv`s (and
/// rustls a compaction of its buffer after each); one 64 KiB read serves
/// them all. Writes go straight through.
pub type TlsIo = tokio::io::BufReader<TcpStream>;
const TLS_READ_BUFFER: usize = 64 << 10;

type ClientTls = tokio_rustls::client::TlsStream<TlsIo>;
type ServerTls = tokio_rustls::server::TlsStream<TlsIo>;

/// One native connection after its TLS handshake (if the cluster has TLS).
pub enum Link {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TlsIo>>),
}

pub enum LinkReader {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<tokio_rustls::TlsStream<TlsIo>>),
}

pub enum LinkWriter {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<tokio_rustls::TlsStream<TlsIo>>),
}

impl Link {
    pub fn into_split(self) -> (LinkReader, LinkWriter) {
        match self {
            Link::Plain(stream) => {
                let (r, w) = stream.into_split();
                (LinkReader::Plain(r), LinkWriter::Plain(w))
            }
            Link::Tls(stream) => {
                let (r, w) = tokio::io::split(*stream);
                (LinkReader::Tls(r), LinkWriter::Tls(w))
            }
        }
    }

    /// Who is at the other end, by its certificate; None on plain TCP.
    pub fn peer_identity(&self) -> Option<PeerIdentity> {
        let Link::Tls(stream) = self else { return None };
        let certificates = stream.get_ref().1.peer_certificates()?;
        certificates.first().map(|c| PeerIdentity::new(c.clone().into_owned()))
    }
}

/// Connects to a native port: TCP, then the TLS handshake when `tls` is
/// given, after which the server must hold a certificate of the `server`
/// role (a data node's shard, or the management server): another
/// certificate of the cluster, an API node's, valid for the same host must
/// not be able to pose as either. The error names the address and, for
/// TLS, what to check.
pub async fn connect_link(address: &str, timeout: Duration, tls: Option<&ClusterTls>, server: Role) -> Result<Link> {
    let stream = crate::connect(address, timeout).await?;
    let Some(tls) = tls else { return Ok(Link::Plain(stream)) };
    let handshake = tls.connect(address, TlsIo::with_capacity(TLS_READ_BUFFER, stream))?;
    let stream: ClientTls = tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| {
            DbError::new(
                ErrorCode::NodeUnavailable,
                format!("the TLS handshake with {address} timed out after {timeout:?}"),
            )
        })?
        .map_err(|e| link_failed(address, &e))?;
    let link = Link::Tls(Box::new(stream.into()));
    match link.peer_identity() {
        Some(identity) if identity.has_role(server) => Ok(link),
        _ => Err(DbError::new(
            ErrorCode::AccessDenied,
            format!(
                "{address} answered with a certificate of this cluster's CA that does not hold the {} role; \
                 is something else listening at that address?",
                server.file_stem()
            ),
        )),
    }
}

/// The error for a native connection that failed. rustls's own errors (a
/// certificate refused by either side, an alert received, which under TLS
/// 1.3 a client may only read after its handshake) are `AccessDenied` and
/// say what to check; anything else is the connection failing, which a
/// client retries like any unreachable node.
pub fn link_failed(address: &str, e: &io::Error) -> DbError {
    let from_tls = e.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
    if !from_tls {
        return DbError::new(ErrorCode::NodeUnavailable, format!("the connection to {address} failed: {e}"));
    }
    DbError::new(
        ErrorCode::AccessDenied,
        format!(
            "TLS with {address} failed: {e}. The cluster's nodes authenticate each other with certificates \
             of one cluster CA: check that --tls-dir holds this cluster's ca.pem and this process's \
             certificate of the same CA (`latsdb certs create`), and that the certificate names the host \
             it is reached by"
        ),
    )
}

/// The bytes a TLS client sends first: a handshake record of TLS 1.0-1.3.
fn looks_like_tls(first: &[u8]) -> bool {
    first.len() >= 2 && first[0] == 0x16 && first[1] == 0x03
}

/// Takes an accepted TCP connection through the TLS handshake when `tls` is
/// given. A peer that speaks plain native frames to a TLS port is answered
/// with one error frame made by `refusal` (so that it reads why), and the
/// connection is closed.
pub async fn accept_link(
    stream: TcpStream,
    tls: Option<&ClusterTls>,
    refusal: impl FnOnce(u64, DbError) -> Vec<u8>,
) -> std::result::Result<Link, String> {
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else { return Ok(Link::Plain(stream)) };
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "an unknown address".into());
    let mut first = [0u8; FRAME_HEADER];
    let peeked = tokio::time::timeout(ACCEPT_TIMEOUT, peek_at_least(&stream, &mut first, 2))
        .await
        .map_err(|_| format!("{peer} sent nothing within {ACCEPT_TIMEOUT:?}"))?
        .map_err(|e| format!("{peer}: {e}"))?;
    if !looks_like_tls(&first[..peeked]) {
        refuse_plain(stream, &peer, refusal).await;
        return Err(format!("{peer} spoke without TLS; this cluster requires TLS (refused)"));
    }
    let stream: ServerTls =
        tokio::time::timeout(ACCEPT_TIMEOUT, tls.acceptor().accept(TlsIo::with_capacity(TLS_READ_BUFFER, stream)))
            .await
            .map_err(|_| format!("the TLS handshake with {peer} timed out"))?
            .map_err(|e| format!("the TLS handshake with {peer} failed: {e}"))?;
    Ok(Link::Tls(Box::new(stream.into())))
}

/// How long an accepted connection may take to finish its TLS handshake.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5);

async fn peek_at_least(stream: &TcpStream, buf: &mut [u8], at_least: usize) -> io::Result<usize> {
    loop {
        let n = stream.peek(buf).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed before saying anything"));
        }
        if n >= at_least {
            return Ok(n);
        }
        // The socket stays readable while the byte that came waits, so
        // waiting for readiness would spin: look again a little later.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Answers a plain-TCP peer's first frame with an error it can decode, then
/// closes. The frame's header is read (bounded in time) for its request id.
async fn refuse_plain(mut stream: TcpStream, peer: &str, refusal: impl FnOnce(u64, DbError) -> Vec<u8>) {
    use tokio::io::AsyncWriteExt;
    let mut header = [0u8; FRAME_HEADER];
    let read = tokio::time::timeout(Duration::from_secs(1), stream.read_exact(&mut header)).await;
    let request_id = match read {
        Ok(Ok(_)) => u64::from_le_bytes(header[4..12].try_into().unwrap_or([0; 8])),
        _ => 0,
    };
    let error = DbError::new(
        ErrorCode::AccessDenied,
        format!(
            "this cluster requires TLS with a certificate of its CA, and this process connected without it \
             (from {peer}): give it --tls-dir (or LATSDB_TLS_DIR) with the cluster's ca.pem and a certificate \
             made by `latsdb certs create`"
        ),
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&refusal(request_id, error))).await;
    let _ = stream.shutdown().await;
}

impl AsyncRead for LinkReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkReader::Plain(r) => Pin::new(r).poll_read(cx, buf),
            LinkReader::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for LinkWriter {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            LinkWriter::Plain(w) => Pin::new(w).poll_write(cx, buf),
            LinkWriter::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkWriter::Plain(w) => Pin::new(w).poll_flush(cx),
            LinkWriter::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LinkWriter::Plain(w) => Pin::new(w).poll_shutdown(cx),
            LinkWriter::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            LinkWriter::Plain(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            LinkWriter::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            LinkWriter::Plain(w) => w.is_write_vectored(),
            LinkWriter::Tls(w) => w.is_write_vectored(),
        }
    }
}
