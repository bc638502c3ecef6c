//! A shard's files: REDO log segments and local checkpoints.
//!
//! ```text
//! <data dir>/datanode-<id>/shard-<n>/
//!     redo-<start LSN, 20 digits>.log   REDO segments; the LSN is the byte offset in the shard's log
//!     lcp-<id, 20 digits>.ckpt          published (complete, synced) local checkpoints
//!     lcp-<id, 20 digits>.tmp           a checkpoint being written (deleted at start)
//! ```
//!
//! At start `scan` reads what is there, cuts a torn or corrupt REDO tail
//! (truncating the segment it is in and deleting later ones), and drops
//! unfinished checkpoints. While the shard runs, a disk thread carries out
//! its `DiskOp`s in order: appends, fsyncs, checkpoint files, trimming.
//! A failed write or fsync stops the data node: after a failed fsync the
//! kernel may have dropped the dirty pages, so nothing written since can
//! be trusted (its peers still hold every committed row).

use latsdb_cluster::{checkpoint_info, redo_summary, CheckpointInfo, DiskOp, RedoSummary};
use latsdb_types::proto::CommitEpoch;
use latsdb_types::{DbError, ErrorCode, Result};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A new REDO segment starts once the current one is this large.
const SEGMENT_BYTES: u64 = 64 << 20;

fn io_error(what: &str, path: &Path, e: std::io::Error) -> DbError {
    DbError::new(ErrorCode::Io, format!("{what} {}: {e}", path.display()))
}

fn segment_name(lsn: u64) -> String {
    format!("redo-{lsn:020}.log")
}

fn checkpoint_name(id: u64, published: bool) -> String {
    format!("lcp-{id:020}.{}", if published { "ckpt" } else { "tmp" })
}

fn parse_number(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()
}

/// What a shard directory held at start.
pub struct ShardImage {
    pub dir: PathBuf,
    /// The intact REDO log, from LSN `redo_base`.
    pub redo: Vec<u8>,
    pub redo_base: u64,
    pub summary: RedoSummary,
    /// Published checkpoints, oldest first.
    pub checkpoints: Vec<CheckpointInfo>,
    /// Whether the directory held anything at all.
    pub has_data: bool,
}

impl ShardImage {
    /// The newest checkpoint that can restore epoch `epoch`.
    pub fn checkpoint_for(&self, epoch: CommitEpoch) -> Option<CheckpointInfo> {
        latsdb_cluster::checkpoint_for(&self.checkpoints, self.redo_base, epoch)
    }

    pub fn read_checkpoint(&self, id: u64) -> Result<Vec<u8>> {
        let path = self.dir.join(checkpoint_name(id, true));
        fs::read(&path).map_err(|e| io_error("cannot read checkpoint", &path, e))
    }

    /// LSN just after the intact REDO log.
    pub fn redo_end(&self) -> u64 {
        self.redo_base + self.summary.valid_len as u64
    }
}

fn list(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_error("cannot list", dir, e))? {
        let entry = entry.map_err(|e| io_error("cannot list", dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("cannot delete", path, e)),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error("cannot sync directory", dir, e))
}

/// Reads a shard directory (creating it if missing) and repairs its tail.
pub fn scan(dir: &Path) -> Result<ShardImage> {
    fs::create_dir_all(dir).map_err(|e| io_error("cannot create", dir, e))?;
    let names = list(dir)?;
    let mut segments: Vec<u64> = names.iter().filter_map(|n| parse_number(n, "redo-", ".log")).collect();
    segments.sort_unstable();
    let mut checkpoints = Vec::new();
    for name in &names {
        if name.ends_with(".tmp") {
            remove(&dir.join(name))?;
        } else if let Some(id) = parse_number(name, "lcp-", ".ckpt") {
            let path = dir.join(name);
            let bytes = fs::read(&path).map_err(|e| io_error("cannot read checkpoint", &path, e))?;
            match checkpoint_info(&bytes) {
                Some(info) if info.id == id => checkpoints.push(info),
                // Published only after a sync, so this is damage: not used.
                _ => crate::log("datanode", format!("{}: damaged checkpoint, ignored", path.display())),
            }
        }
    }
    checkpoints.sort_by_key(|c| c.id);
    let has_data = !segments.is_empty() || !checkpoints.is_empty();
    let redo_base = segments.first().copied().unwrap_or(0);
    let mut redo = Vec::new();
    let mut starts = Vec::new();
    for (i, &start) in segments.iter().enumerate() {
        if redo_base + redo.len() as u64 != start {
            // A gap: what follows cannot be replayed in order.
            for &later in &segments[i..] {
                remove(&dir.join(segment_name(later)))?;
            }
            break;
        }
        let path = dir.join(segment_name(start));
        let bytes = fs::read(&path).map_err(|e| io_error("cannot read REDO segment", &path, e))?;
        starts.push((start, bytes.len()));
        redo.extend_from_slice(&bytes);
    }
    let summary = redo_summary(&redo);
    if summary.valid_len < redo.len() {
        // Torn or corrupt tail: cut it where it starts.
        let cut = redo_base + summary.valid_len as u64;
        crate::log(
            "datanode",
            format!(
                "{}: REDO log damaged after LSN {cut} ({} bytes cut)",
                dir.display(),
                redo.len() - summary.valid_len
            ),
        );
        for &(start, len) in &starts {
            let path = dir.join(segment_name(start));
            if start >= cut {
                remove(&path)?;
            } else if start + len as u64 > cut {
                let f = OpenOptions::new().write(true).open(&path).map_err(|e| io_error("cannot open", &path, e))?;
                f.set_len(cut - start).map_err(|e| io_error("cannot truncate", &path, e))?;
                f.sync_all().map_err(|e| io_error("cannot sync", &path, e))?;
            }
        }
        redo.truncate(summary.valid_len);
    }
    Ok(ShardImage { dir: dir.to_path_buf(), redo, redo_base, summary, checkpoints, has_data })
}

/// Deletes everything in a shard directory (an initial start).
pub fn wipe(dir: &Path) -> Result<()> {
    for name in list(dir)? {
        if name.starts_with("redo-") || name.starts_with("lcp-") {
            remove(&dir.join(name))?;
        }
    }
    sync_dir(dir)
}

/// Deletes the checkpoints other than `keep` (those newer than the restore
/// point hold rows the cluster lost).
pub fn drop_checkpoints_except(dir: &Path, keep: Option<u64>) -> Result<()> {
    for name in list(dir)? {
        if let Some(id) = parse_number(&name, "lcp-", ".ckpt") {
            if Some(id) != keep {
                remove(&dir.join(name))?;
            }
        }
    }
    Ok(())
}

/// The REDO writer and checkpoint files of one shard, used by its disk thread.
pub struct ShardDisk {
    dir: PathBuf,
    /// Current segment: its start LSN and file.
    segment: (u64, File),
    segment_len: u64,
    checkpoint: Option<(u64, File)>,
}

impl ShardDisk {
    /// Starts a new REDO segment at `lsn` (the end of the intact log).
    pub fn open(dir: &Path, lsn: u64) -> Result<ShardDisk> {
        let file = Self::new_segment(dir, lsn)?;
        Ok(ShardDisk { dir: dir.to_path_buf(), segment: (lsn, file), segment_len: 0, checkpoint: None })
    }

    fn new_segment(dir: &Path, lsn: u64) -> Result<File> {
        let path = dir.join(segment_name(lsn));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io_error("cannot create REDO segment", &path, e))?;
        sync_dir(dir)?;
        Ok(file)
    }

    /// Carries out one operation; returns the token to report, if any.
    pub fn execute(&mut self, op: DiskOp) -> Result<Option<u64>> {
        match op {
            DiskOp::RedoAppend(bytes) => {
                if self.segment_len >= SEGMENT_BYTES {
                    let lsn = self.segment.0 + self.segment_len;
                    self.segment.1.sync_data().map_err(|e| io_error("cannot sync", &self.dir, e))?;
                    self.segment = (lsn, Self::new_segment(&self.dir, lsn)?);
                    self.segment_len = 0;
                }
                self.segment.1.write_all(&bytes).map_err(|e| io_error("cannot write the REDO log in", &self.dir, e))?;
                self.segment_len += bytes.len() as u64;
                Ok(None)
            }
            DiskOp::RedoSync { token } => {
                self.segment.1.sync_data().map_err(|e| io_error("cannot sync the REDO log in", &self.dir, e))?;
                Ok(Some(token))
            }
            DiskOp::CheckpointBegin { id } => {
                let path = self.dir.join(checkpoint_name(id, false));
                let file = File::create(&path).map_err(|e| io_error("cannot create checkpoint", &path, e))?;
                self.checkpoint = Some((id, file));
                Ok(None)
            }
            DiskOp::CheckpointAppend { id, bytes } => {
                if let Some((cid, file)) = self.checkpoint.as_mut() {
                    if *cid == id {
                        file.write_all(&bytes).map_err(|e| io_error("cannot write a checkpoint in", &self.dir, e))?;
                    }
                }
                Ok(None)
            }
            DiskOp::CheckpointEnd { id, token } => {
                if let Some((cid, file)) = self.checkpoint.take() {
                    if cid == id {
                        file.sync_all().map_err(|e| io_error("cannot sync a checkpoint in", &self.dir, e))?;
                        drop(file);
                        let from = self.dir.join(checkpoint_name(id, false));
                        let to = self.dir.join(checkpoint_name(id, true));
                        fs::rename(&from, &to).map_err(|e| io_error("cannot publish checkpoint", &to, e))?;
                        sync_dir(&self.dir)?;
                    }
                }
                Ok(Some(token))
            }
            DiskOp::Trim { keep_checkpoint, redo_before } => {
                let names = list(&self.dir)?;
                for name in &names {
                    if parse_number(name, "lcp-", ".ckpt").is_some_and(|id| id < keep_checkpoint) {
                        remove(&self.dir.join(name))?;
                    }
                }
                let mut segments: Vec<u64> = names.iter().filter_map(|n| parse_number(n, "redo-", ".log")).collect();
                segments.sort_unstable();
                // A segment goes when the next one starts at or before the cut.
                for pair in segments.windows(2) {
                    if pair[1] <= redo_before && pair[0] != self.segment.0 {
                        remove(&self.dir.join(segment_name(pair[0])))?;
                    }
                }
                Ok(None)
            }
        }
    }

    /// Bytes of REDO and checkpoint files in the directory.
    pub fn usage(dir: &Path) -> (u64, u64) {
        let mut redo = 0;
        let mut lcp = 0;
        if let Ok(entries) = fs::read_dir(dir) {
            for e in entries.flatten() {
                let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                match e.file_name().to_str() {
                    Some(n) if n.starts_with("redo-") => redo += len,
                    Some(n) if n.starts_with("lcp-") => lcp += len,
                    _ => {}
                }
            }
        }
        (redo, lcp)
    }
}

/// Runs a shard's disk thread: operations in order; each finished sync's
/// token goes to `done`. A failure stops the process.
pub fn spawn_disk_thread(
    mut disk: ShardDisk,
    name: String,
    done: tokio::sync::mpsc::UnboundedSender<u64>,
) -> Result<std::sync::mpsc::Sender<DiskOp>> {
    let (tx, rx) = std::sync::mpsc::channel::<DiskOp>();
    std::thread::Builder::new()
        .name(format!("disk-{name}"))
        .spawn(move || {
            while let Ok(op) = rx.recv() {
                match disk.execute(op) {
                    Ok(Some(token)) => {
                        let _ = done.send(token);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        crate::log(
                            "datanode",
                            format!(
                                "shard {name}: {}; stopping this data node (its peers hold every committed row; fix the disk and restart it)",
                                e.message
                            ),
                        );
                        std::process::exit(3);
                    }
                }
            }
        })
        .map_err(|e| DbError::io("spawning a disk thread", e))?;
    Ok(tx)
}
