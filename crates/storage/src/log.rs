//! On-disk record format of the REDO log and of local checkpoints.
//!
//! Both files are sequences of records:
//!
//! ```text
//! record := [u32 LE body length][u64 LE xxh3-64 of the body][body]
//! body   := [u8 kind][fields, integers little-endian, byte strings as u32 length + bytes]
//! ```
//!
//! A reader stops at the first record that does not fit in what is left,
//! whose checksum does not match, or whose body does not decode: that is a
//! torn or corrupt tail (a crash during a write, a bad sector), and
//! everything from there on is cut, never replayed. A zero length is also
//! the end (a preallocated or zero-filled tail).

use latsdb_types::proto::CommitEpoch;
use latsdb_types::schema::TableId;
use xxhash_rust::xxh3::xxh3_64;

const HEADER: usize = 12;
/// Larger bodies are corruption: no row or key comes near this.
const MAX_BODY: usize = 64 << 20;

const PUT: u8 = 1;
const DELETE: u8 = 2;
const SAVED: u8 = 3;
const RESTARTED: u8 = 4;
const CKPT_HEADER: u8 = 10;
const CKPT_ROW: u8 = 11;
const CKPT_TRAILER: u8 = 12;

/// One record, borrowing its byte strings from the buffer it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// REDO: the row `key` of a partition became `row` (None: deleted) by a
    /// commit of `epoch`.
    Write {
        epoch: CommitEpoch,
        table: TableId,
        partition: u32,
        key: &'a [u8],
        row: Option<&'a [u8]>,
    },
    /// REDO: every record of epochs up to `epoch` this shard will ever
    /// write precedes this one (written before the log is synced for the
    /// epoch driver).
    Saved {
        epoch: CommitEpoch,
    },
    /// REDO: the cluster restarted from epoch `restored`; records before this
    /// one with epochs in `restored+1..=discarded` were lost with the
    /// cluster and must never be replayed.
    Restarted {
        restored: CommitEpoch,
        discarded: CommitEpoch,
    },
    /// Checkpoint: the first record. Replaying the REDO log from `start_lsn`
    /// over the checkpoint's rows restores the shard.
    CheckpointHeader {
        id: u64,
        start_lsn: u64,
    },
    CheckpointRow {
        table: TableId,
        partition: u32,
        key: &'a [u8],
        row: &'a [u8],
    },
    /// Checkpoint: the last record; every row is from epoch `end_epoch` or
    /// earlier. Without it the checkpoint is incomplete.
    CheckpointTrailer {
        end_epoch: CommitEpoch,
        rows: u64,
    },
}

/// Appends one record to `out`.
pub fn encode(out: &mut Vec<u8>, record: &Record<'_>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER]);
    match record {
        Record::Write { epoch, table, partition, key, row } => {
            out.push(if row.is_some() { PUT } else { DELETE });
            out.extend_from_slice(&epoch.0.to_le_bytes());
            out.extend_from_slice(&table.to_le_bytes());
            out.extend_from_slice(&partition.to_le_bytes());
            put_bytes(out, key);
            if let Some(row) = row {
                put_bytes(out, row);
            }
        }
        Record::Saved { epoch } => {
            out.push(SAVED);
            out.extend_from_slice(&epoch.0.to_le_bytes());
        }
        Record::Restarted { restored, discarded } => {
            out.push(RESTARTED);
            out.extend_from_slice(&restored.0.to_le_bytes());
            out.extend_from_slice(&discarded.0.to_le_bytes());
        }
        Record::CheckpointHeader { id, start_lsn } => {
            out.push(CKPT_HEADER);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&start_lsn.to_le_bytes());
        }
        Record::CheckpointRow { table, partition, key, row } => {
            out.push(CKPT_ROW);
            out.extend_from_slice(&table.to_le_bytes());
            out.extend_from_slice(&partition.to_le_bytes());
            put_bytes(out, key);
            put_bytes(out, row);
        }
        Record::CheckpointTrailer { end_epoch, rows } => {
            out.push(CKPT_TRAILER);
            out.extend_from_slice(&end_epoch.0.to_le_bytes());
            out.extend_from_slice(&rows.to_le_bytes());
        }
    }
    let body_len = out.len() - start - HEADER;
    let sum = xxh3_64(&out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&(body_len as u32).to_le_bytes());
    out[start + 4..start + HEADER].copy_from_slice(&sum.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads records from a buffer; see the module comment for where it stops.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes of valid records read so far: where a torn tail begins once
    /// `next` returned None.
    pub fn valid_len(&self) -> usize {
        self.pos
    }

    /// Whether the reader stopped before the end of the buffer (a torn or
    /// corrupt tail follows).
    pub fn stopped_early(&self) -> bool {
        self.pos < self.buf.len()
    }
}

impl<'a> Iterator for Reader<'a> {
    /// The record and its offset in the buffer.
    type Item = (usize, Record<'a>);

    fn next(&mut self) -> Option<(usize, Record<'a>)> {
        let rest = &self.buf[self.pos..];
        if rest.len() < HEADER {
            return None;
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().ok()?) as usize;
        if len == 0 || len > MAX_BODY || rest.len() < HEADER + len {
            return None;
        }
        let sum = u64::from_le_bytes(rest[4..HEADER].try_into().ok()?);
        let body = &rest[HEADER..HEADER + len];
        if xxh3_64(body) != sum {
            return None;
        }
        let record = decode_body(body)?;
        let at = self.pos;
        self.pos += HEADER + len;
        Some((at, record))
    }
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

fn decode_body(body: &[u8]) -> Option<Record<'_>> {
    let (&kind, rest) = body.split_first()?;
    let mut c = Cursor(rest);
    let record = match kind {
        PUT | DELETE => {
            let epoch = CommitEpoch(c.u64()?);
            let table = c.u32()?;
            let partition = c.u32()?;
            let key = c.bytes()?;
            let row = if kind == PUT { Some(c.bytes()?) } else { None };
            Record::Write { epoch, table, partition, key, row }
        }
        SAVED => Record::Saved { epoch: CommitEpoch(c.u64()?) },
        RESTARTED => Record::Restarted { restored: CommitEpoch(c.u64()?), discarded: CommitEpoch(c.u64()?) },
        CKPT_HEADER => Record::CheckpointHeader { id: c.u64()?, start_lsn: c.u64()? },
        CKPT_ROW => {
            let table = c.u32()?;
            let partition = c.u32()?;
            let key = c.bytes()?;
            let row = c.bytes()?;
            Record::CheckpointRow { table, partition, key, row }
        }
        CKPT_TRAILER => Record::CheckpointTrailer { end_epoch: CommitEpoch(c.u64()?), rows: c.u64()? },
        _ => return None,
    };
    // Trailing bytes inside a checksummed body mean a format mismatch.
    c.0.is_empty().then_some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut buf = Vec::new();
        encode(
            &mut buf,
            &Record::Write { epoch: CommitEpoch(7), table: 3, partition: 1, key: b"k1", row: Some(b"row-one") },
        );
        encode(&mut buf, &Record::Write { epoch: CommitEpoch(7), table: 3, partition: 1, key: b"k2", row: None });
        encode(&mut buf, &Record::Saved { epoch: CommitEpoch(7) });
        encode(&mut buf, &Record::Restarted { restored: CommitEpoch(5), discarded: CommitEpoch(9) });
        buf
    }

    #[test]
    fn round_trips_every_kind() {
        let mut buf = sample();
        encode(&mut buf, &Record::CheckpointHeader { id: 2, start_lsn: 1234 });
        encode(&mut buf, &Record::CheckpointRow { table: 1, partition: 0, key: b"", row: b"r" });
        encode(&mut buf, &Record::CheckpointTrailer { end_epoch: CommitEpoch(8), rows: 1 });
        let mut reader = Reader::new(&buf);
        let records: Vec<Record<'_>> = reader.by_ref().map(|(_, r)| r).collect();
        assert_eq!(records.len(), 7);
        assert_eq!(
            records[0],
            Record::Write { epoch: CommitEpoch(7), table: 3, partition: 1, key: b"k1", row: Some(b"row-one") }
        );
        assert_eq!(records[1], Record::Write { epoch: CommitEpoch(7), table: 3, partition: 1, key: b"k2", row: None });
        assert_eq!(records[3], Record::Restarted { restored: CommitEpoch(5), discarded: CommitEpoch(9) });
        assert_eq!(records[6], Record::CheckpointTrailer { end_epoch: CommitEpoch(8), rows: 1 });
        assert!(!reader.stopped_early());
    }

    #[test]
    fn a_torn_tail_is_cut_at_the_last_whole_record() {
        let buf = sample();
        let whole: Vec<usize> = Reader::new(&buf).map(|(at, _)| at).collect();
        // Every cut inside the last record keeps exactly the first three.
        for cut in whole[3] + 1..buf.len() {
            let mut reader = Reader::new(&buf[..cut]);
            assert_eq!(reader.by_ref().count(), 3, "cut at {cut}");
            assert_eq!(reader.valid_len(), whole[3]);
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_stops_the_reader_at_that_record() {
        let buf = sample();
        let starts: Vec<usize> = Reader::new(&buf).map(|(at, _)| at).collect();
        for byte in 0..buf.len() {
            let mut bad = buf.clone();
            bad[byte] ^= 0x10;
            let damaged = starts.iter().rposition(|&s| s <= byte).unwrap_or(0);
            let mut reader = Reader::new(&bad);
            let read = reader.by_ref().count();
            // Records before the damaged one survive; it and what follows do not
            // (a corrupted length may still frame a record that fails its checksum).
            assert_eq!(read, damaged, "flipped byte {byte}");
        }
    }

    #[test]
    fn zeros_are_the_end() {
        let mut buf = sample();
        let len = buf.len();
        buf.extend_from_slice(&[0u8; 100]);
        let mut reader = Reader::new(&buf);
        assert_eq!(reader.by_ref().count(), 4);
        assert_eq!(reader.valid_len(), len);
    }
}
