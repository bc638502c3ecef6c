//! MySQL packet framing and the protocol's primitive encodings
//! (length-encoded integers and strings, NUL-terminated strings).
//!
//! A packet is a 3-byte little-endian length, a sequence number and the
//! payload; payloads of 2^24-1 bytes or more continue in further packets.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const MAX_CHUNK: usize = 0xff_ffff;

/// Bytes asked of the socket at a time once reads are buffered.
const READ_CHUNK: usize = 16 * 1024;

/// Reads packets from a stream and writes answers into one buffer that is
/// flushed once per command (a result set goes out in one write).
///
/// Reads are exact (header, then payload) until [`PacketIo::buffer_reads`]:
/// before TLS starts, no byte past the SSLRequest may be taken from the
/// socket. Buffered, a command costs one `recv` instead of two, and a
/// short read tells the runtime the socket is drained, so waiting for the
/// next command costs no extra `recv` that finds nothing.
pub struct PacketIo<S> {
    stream: S,
    pub seq: u8,
    out: Vec<u8>,
    max_packet: usize,
    buffered: bool,
    input: Vec<u8>,
    consumed: usize,
}

#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the connection between packets.
    Closed,
    Io(std::io::Error),
    TooLarge(usize),
}

impl<S: AsyncRead + AsyncWrite + Unpin> PacketIo<S> {
    pub fn new(stream: S, max_packet: usize) -> Self {
        PacketIo {
            stream,
            seq: 0,
            out: Vec::with_capacity(16 * 1024),
            max_packet,
            buffered: false,
            input: Vec::new(),
            consumed: 0,
        }
    }

    /// From now on reads take whatever the socket has, up to 16 KiB.
    pub fn buffer_reads(&mut self) {
        self.buffered = true;
        self.input.reserve(READ_CHUNK);
    }

    /// Fills `out` exactly: from buffered bytes first, then the socket.
    async fn read_exact(&mut self, out: &mut [u8]) -> std::io::Result<()> {
        let have = &self.input[self.consumed..];
        let n = have.len().min(out.len());
        out[..n].copy_from_slice(&have[..n]);
        self.consumed += n;
        if self.consumed == self.input.len() {
            self.input.clear();
            self.consumed = 0;
        }
        let rest = &mut out[n..];
        if rest.is_empty() {
            return Ok(());
        }
        if !self.buffered || rest.len() >= READ_CHUNK {
            // Large payloads go straight into place.
            self.stream.read_exact(rest).await?;
            return Ok(());
        }
        // The buffer is empty here: everything in it was taken above.
        while self.input.len() < rest.len() {
            if self.input.capacity() - self.input.len() < READ_CHUNK / 2 {
                self.input.reserve(READ_CHUNK);
            }
            if self.stream.read_buf(&mut self.input).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        rest.copy_from_slice(&self.input[..rest.len()]);
        self.consumed = rest.len();
        if self.consumed == self.input.len() {
            self.input.clear();
            self.consumed = 0;
        }
        Ok(())
    }

    /// Reads one logical packet (joining continuation chunks) into `buf`.
    pub async fn read_packet(&mut self, buf: &mut Vec<u8>) -> Result<(), ReadError> {
        buf.clear();
        loop {
            let mut header = [0u8; 4];
            match self.read_exact(&mut header).await {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && buf.is_empty() => {
                    return Err(ReadError::Closed)
                }
                Err(e) => return Err(ReadError::Io(e)),
            }
            let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
            self.seq = header[3].wrapping_add(1);
            if buf.len() + len > self.max_packet {
                return Err(ReadError::TooLarge(buf.len() + len));
            }
            let start = buf.len();
            buf.resize(start + len, 0);
            self.read_exact(&mut buf[start..]).await.map_err(ReadError::Io)?;
            if len < MAX_CHUNK {
                return Ok(());
            }
        }
    }

    /// Appends one packet (split into chunks when large) to the output.
    pub fn write_packet(&mut self, payload: &[u8]) {
        let mut rest = payload;
        loop {
            let n = rest.len().min(MAX_CHUNK);
            self.out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
            self.out.push(self.seq);
            self.seq = self.seq.wrapping_add(1);
            self.out.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if n < MAX_CHUNK {
                return;
            }
        }
    }

    /// Starts a packet in the output buffer, to be finished by `end_packet`:
    /// rows are encoded in place, without a copy.
    pub fn begin_packet(&mut self) -> usize {
        let at = self.out.len();
        self.out.extend_from_slice(&[0, 0, 0, 0]);
        at
    }

    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    pub fn end_packet(&mut self, at: usize) {
        let len = self.out.len() - at - 4;
        if len >= MAX_CHUNK {
            // Rare (a row over 16 MiB): re-frame through the chunking path.
            let payload = self.out.split_off(at + 4);
            self.out.truncate(at);
            self.write_packet(&payload);
            return;
        }
        self.out[at..at + 3].copy_from_slice(&(len as u32).to_le_bytes()[..3]);
        self.out[at + 3] = self.seq;
        self.seq = self.seq.wrapping_add(1);
    }

    pub fn pending(&self) -> usize {
        self.out.len()
    }

    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out).await?;
            self.out.clear();
            if self.out.capacity() > 1 << 20 {
                self.out.shrink_to(16 * 1024);
            }
        }
        self.stream.flush().await
    }

    pub fn into_inner(self) -> S {
        assert!(!self.buffered, "a buffered reader may hold bytes the stream's next owner needs");
        self.stream
    }
}

pub fn put_lenenc_int(out: &mut Vec<u8>, v: u64) {
    if v < 251 {
        out.push(v as u8);
    } else if v < 1 << 16 {
        out.push(0xfc);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v < 1 << 24 {
        out.push(0xfd);
        out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
    } else {
        out.push(0xfe);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

pub fn put_lenenc_str(out: &mut Vec<u8>, s: &[u8]) {
    put_lenenc_int(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// A cursor over a received payload; every read checks the bounds, since
/// the bytes come from the network.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated;

pub type WireResult<T> = Result<T, Truncated>;

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    pub fn rest(&mut self) -> &'a [u8] {
        let r = &self.buf[self.pos..];
        self.pos = self.buf.len();
        r
    }
    pub fn bytes(&mut self, n: usize) -> WireResult<&'a [u8]> {
        if self.remaining() < n {
            return Err(Truncated);
        }
        let r = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(r)
    }
    pub fn u8(&mut self) -> WireResult<u8> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> WireResult<u16> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u24(&mut self) -> WireResult<u32> {
        let b = self.bytes(3)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], 0]))
    }
    pub fn u32(&mut self) -> WireResult<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> WireResult<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    pub fn lenenc_int(&mut self) -> WireResult<u64> {
        match self.u8()? {
            v @ 0..=250 => Ok(v as u64),
            0xfc => Ok(self.u16()? as u64),
            0xfd => Ok(self.u24()? as u64),
            0xfe => self.u64(),
            // 0xfb is NULL in rows and 0xff an error header: neither is an integer.
            _ => Err(Truncated),
        }
    }
    pub fn lenenc_bytes(&mut self) -> WireResult<&'a [u8]> {
        let n = self.lenenc_int()?;
        let n = usize::try_from(n).map_err(|_| Truncated)?;
        self.bytes(n)
    }
    pub fn nul_str(&mut self) -> WireResult<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        let end = rest.iter().position(|&b| b == 0).ok_or(Truncated)?;
        self.pos += end + 1;
        Ok(&rest[..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenenc_integers_round_trip_at_every_width_boundary() {
        for v in [0u64, 250, 251, 65_535, 65_536, 16_777_215, 16_777_216, u64::MAX] {
            let mut out = Vec::new();
            put_lenenc_int(&mut out, v);
            assert_eq!(Reader::new(&out).lenenc_int(), Ok(v), "value {v}");
        }
    }

    #[test]
    fn reads_past_the_end_are_errors_not_panics() {
        let mut r = Reader::new(&[0xfc, 1]);
        assert_eq!(r.lenenc_int(), Err(Truncated));
        let mut r = Reader::new(&[5, b'a']);
        assert_eq!(r.lenenc_bytes(), Err(Truncated));
        let mut r = Reader::new(b"abc");
        assert_eq!(r.nul_str(), Err(Truncated));
    }

    #[tokio::test]
    async fn a_large_packet_is_split_and_joined_again() {
        let (a, b) = tokio::io::duplex(64 << 20);
        let mut writer = PacketIo::new(a, 64 << 20);
        let payload: Vec<u8> = (0..MAX_CHUNK + 10).map(|i| i as u8).collect();
        writer.write_packet(&payload);
        writer.flush().await.unwrap();
        let mut reader = PacketIo::new(b, 64 << 20);
        let mut got = Vec::new();
        reader.read_packet(&mut got).await.unwrap();
        assert_eq!(got, payload);
    }

    #[tokio::test]
    async fn buffered_reads_return_the_same_packets_however_the_bytes_arrive() {
        // Small packets sent back to back, one larger than the read chunk
        // and one of several chunks, through a pipe that moves 7 bytes at a
        // time and through one that moves everything at once.
        let payloads: Vec<Vec<u8>> = [3usize, 0, 40, READ_CHUNK + 5, 1, MAX_CHUNK + 3, 2]
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| (i * 7 + k) as u8).collect())
            .collect();
        for pipe in [7, 64 << 20] {
            let (a, b) = tokio::io::duplex(pipe);
            let sent = payloads.clone();
            let writer = tokio::spawn(async move {
                let mut writer = PacketIo::new(a, 64 << 20);
                for p in &sent {
                    writer.write_packet(p);
                }
                writer.flush().await.unwrap();
            });
            let mut reader = PacketIo::new(b, 64 << 20);
            reader.buffer_reads();
            let mut got = Vec::new();
            for (i, p) in payloads.iter().enumerate() {
                reader.read_packet(&mut got).await.unwrap();
                assert_eq!(got.len(), p.len(), "packet {i} through a pipe of {pipe}");
                assert!(got == *p, "packet {i} through a pipe of {pipe}");
            }
            writer.await.unwrap();
            assert!(matches!(reader.read_packet(&mut got).await, Err(ReadError::Closed)));
        }
    }
}
