//! A shard's files: REDO log segments and local checkpoints.
//!
//! ```text
//! <data dir>/datanode-<id>/shard-<n>/
//!     redo-<start LSN, 20 digits>.log   REDO segments; the LSN is the byte offset in the shard's log
//!     lcp-<id, 20 digits>.ckpt          published (complete, synced) local checkpoints
//!     lcp-<id, 20 digits>.tmp           a checkpoint being written (deleted at start)
//!     tablespace.dat                    pages of the disk parts of rows (made empty at each start)
//! ```
//!
//! The tablespace file holds no state a restart needs: checkpoints and the
//! REDO log carry whole rows, disk columns included, so a start makes the
//! file empty and the restore fills it again. It is therefore never
//! synced (see docs/architecture/datanode.md, "Disk columns").
//!
//! At start `scan` reads what is there, cuts a torn or corrupt REDO tail
//! (truncating the segment it is in and deleting later ones), and drops
//! unfinished checkpoints. While the shard runs, a disk thread carries out
//! its `DiskOp`s in order: appends, fsyncs, checkpoint files, trimming.
//! A failed write or fsync stops the data node: after a failed fsync the
//! kernel may have dropped the dirty pages, so nothing written since can
//! be trusted (its peers still hold every committed row).
//!
//! REDO segments and checkpoint files are written with `O_DIRECT` where
//! the file system allows it (`AppendFile`): a data node under a write
//! load appends well over 100 MB/s, and copying that into the page cache
//! (and writing it back from there) cost its disk thread most of its CPU
//! and pushed the rows out of the CPU caches. Direct writes must be whole
//! aligned blocks, so the last block of a file is written again, zero
//! padded, with each append; a finished file is cut to its length, and a
//! crash can leave zeros after the last record of the newest segment,
//! which `scan` cuts like any torn tail (quietly: it is not damage).

use latsdb_cluster::{checkpoint_info, redo_summary, CheckpointInfo, DiskOp, RedoSummary};
use latsdb_types::proto::CommitEpoch;
use latsdb_types::{DbError, ErrorCode, Result};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A new REDO segment starts once the current one is this large.
const SEGMENT_BYTES: u64 = 64 << 20;

/// Alignment of direct writes: of the buffer's address, the file offset
/// and the length. 4 KiB covers devices with 512-byte and 4 KiB sectors.
const BLOCK: usize = 4096;

pub(crate) fn io_error(what: &str, path: &Path, e: std::io::Error) -> DbError {
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
        // Torn or corrupt tail: cut it where it starts. Zeros alone are
        // the padding of a direct write's last block (see `AppendFile`).
        let cut = redo_base + summary.valid_len as u64;
        if redo[summary.valid_len..].iter().any(|&b| b != 0) {
            crate::log(
                "datanode",
                format!(
                    "{}: REDO log damaged after LSN {cut} ({} bytes cut)",
                    dir.display(),
                    redo.len() - summary.valid_len
                ),
            );
        }
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

/// Free bytes (for unprivileged users) and total bytes of the file system
/// holding `dir`, if it can be read.
pub fn space(dir: &Path) -> Option<(u64, u64)> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: statvfs writes the struct it is given and reads a
    // NUL-terminated path; the struct is read only when it succeeded.
    let stats = unsafe {
        if libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) != 0 {
            return None;
        }
        stats.assume_init()
    };
    let block = stats.f_frsize as u64;
    Some((stats.f_bavail as u64 * block, stats.f_blocks as u64 * block))
}

/// A shard's files that restore epoch `epoch`, as a backup copies them.
pub struct BackupImage {
    /// The newest intact checkpoint that ends at or before the epoch, if any.
    pub checkpoint: Option<(CheckpointInfo, Vec<u8>)>,
    /// The intact REDO log from LSN `redo_base`, the start of the segment
    /// that holds the checkpoint's start (or of the oldest segment).
    pub redo_base: u64,
    pub redo: Vec<u8>,
}

/// Reads what restores epoch `epoch` from a running shard's directory,
/// changing nothing. The caller holds the files (`DiskMsg::Hold`) so that
/// no trim deletes them meanwhile; the disk thread may still append to the
/// newest segment, whose torn tail (if the read meets an append) is cut
/// like any other.
pub fn read_for_backup(dir: &Path, epoch: CommitEpoch) -> Result<BackupImage> {
    let names = list(dir)?;
    let mut segments: Vec<u64> = names.iter().filter_map(|n| parse_number(n, "redo-", ".log")).collect();
    segments.sort_unstable();
    let Some(&first) = segments.first() else {
        return Err(DbError::new(ErrorCode::Io, format!("{}: the shard has no REDO log to back up", dir.display())));
    };
    let mut ids: Vec<u64> = names.iter().filter_map(|n| parse_number(n, "lcp-", ".ckpt")).collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    let mut checkpoint = None;
    for id in ids {
        let path = dir.join(checkpoint_name(id, true));
        let bytes = fs::read(&path).map_err(|e| io_error("cannot read checkpoint", &path, e))?;
        match checkpoint_info(&bytes) {
            Some(info) if info.id == id && info.end_epoch <= epoch && info.start_lsn >= first => {
                checkpoint = Some((info, bytes));
                break;
            }
            Some(info) if info.id == id => {}
            // Published only after a sync: this is damage, and the one
            // the backup needs may be this one.
            _ => {
                return Err(DbError::new(
                    ErrorCode::Io,
                    format!(
                        "{} is damaged; this node would not restart from it either: restart it with `latsdb mgm N restart --initial`",
                        path.display()
                    ),
                ))
            }
        }
    }
    // Without a checkpoint the REDO must reach back to the log's start:
    // segments go only after a checkpoint that replaces them.
    if checkpoint.is_none() && first > 0 {
        return Err(DbError::new(
            ErrorCode::Internal,
            format!("{}: no checkpoint restores epoch {epoch} and the REDO log starts at LSN {first}", dir.display()),
        ));
    }
    let from = checkpoint.as_ref().map_or(first, |(info, _)| info.start_lsn);
    let start_at = segments.iter().rposition(|&s| s <= from).unwrap_or(0);
    let redo_base = segments[start_at];
    let mut redo = Vec::new();
    for (i, &start) in segments.iter().enumerate().skip(start_at) {
        if redo_base + redo.len() as u64 != start {
            return Err(DbError::new(
                ErrorCode::Io,
                format!("{}: the REDO log has a gap before LSN {start}", dir.display()),
            ));
        }
        let path = dir.join(segment_name(start));
        let mut bytes = fs::read(&path).map_err(|e| io_error("cannot read REDO segment", &path, e))?;
        if let Some(&next) = segments.get(i + 1) {
            // A finished segment ends where the next one begins.
            bytes.truncate(next.saturating_sub(start) as usize);
        }
        redo.extend_from_slice(&bytes);
    }
    let summary = redo_summary(&redo);
    redo.truncate(summary.valid_len);
    Ok(BackupImage { checkpoint, redo_base, redo })
}

/// A file written by appending, with `O_DIRECT` where the file system
/// supports it (not tmpfs, for one) and through the page cache otherwise.
///
/// Direct writes go from an aligned staging buffer that starts with the
/// file's last partial block: each append writes that block again followed
/// by the new bytes, zero padded to whole blocks. So the file on disk may
/// end in up to a block of zeros after `len` until `finish` cuts them.
/// Rewriting the last block is what the page cache's writeback does too.
pub struct AppendFile {
    file: File,
    path: PathBuf,
    /// Bytes appended so far (the file's length once finished).
    len: u64,
    /// Over-allocated so that `stage[align..]` starts on a block boundary;
    /// empty when writes go through the page cache.
    stage: Vec<u8>,
    align: usize,
    /// Bytes of the last partial block, kept at the start of the aligned
    /// region (`len % BLOCK` of them).
    tail: usize,
}

impl AppendFile {
    /// Creates (or empties) the file at `path`.
    pub fn create(path: &Path) -> Result<AppendFile> {
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.write(true).create(true).truncate(true);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (file, direct) = match open(true) {
            Ok(f) => (Ok(f), true),
            // EINVAL: the file system has no direct I/O.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(false), false),
            Err(e) => (Err(e), false),
        };
        let file = file.map_err(|e| io_error("cannot create", path, e))?;
        let mut f = AppendFile { file, path: path.to_path_buf(), len: 0, stage: Vec::new(), align: 0, tail: 0 };
        if direct {
            f.reserve(BLOCK);
        }
        Ok(f)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn direct(&self) -> bool {
        !self.stage.is_empty()
    }

    /// Makes the aligned region hold at least `bytes`, keeping its tail.
    fn reserve(&mut self, bytes: usize) {
        let aligned = bytes.div_ceil(BLOCK) * BLOCK;
        if self.stage.len() >= self.align + aligned && self.direct() {
            return;
        }
        let mut stage = vec![0u8; aligned + BLOCK];
        let align = stage.as_ptr().align_offset(BLOCK);
        assert!(align < BLOCK, "cannot align a staging buffer");
        stage[align..align + self.tail].copy_from_slice(&self.stage[self.align..self.align + self.tail]);
        self.stage = stage;
        self.align = align;
    }

    pub fn append(&mut self, bytes: &[u8]) -> Result<()> {
        if !self.direct() {
            self.file.write_all(bytes).map_err(|e| io_error("cannot write", &self.path, e))?;
            self.len += bytes.len() as u64;
            return Ok(());
        }
        let used = self.tail + bytes.len();
        self.reserve(used);
        let padded = used.div_ceil(BLOCK) * BLOCK;
        let region = &mut self.stage[self.align..self.align + padded];
        region[self.tail..used].copy_from_slice(bytes);
        region[used..].fill(0);
        let offset = self.len - self.tail as u64;
        debug_assert_eq!(offset % BLOCK as u64, 0);
        self.file.write_all_at(region, offset).map_err(|e| io_error("cannot write", &self.path, e))?;
        // The new last partial block moves to the front for the next append.
        let kept = used % BLOCK;
        region.copy_within(used - kept..used, 0);
        self.tail = kept;
        self.len += bytes.len() as u64;
        Ok(())
    }

    pub fn sync_data(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| io_error("cannot sync", &self.path, e))
    }

    /// Cuts the padding after the last append and syncs data and metadata.
    pub fn finish(&mut self) -> Result<()> {
        if self.direct() {
            self.file.set_len(self.len).map_err(|e| io_error("cannot truncate", &self.path, e))?;
        }
        self.file.sync_all().map_err(|e| io_error("cannot sync", &self.path, e))
    }
}

/// The REDO writer and checkpoint files of one shard, used by its disk thread.
pub struct ShardDisk {
    dir: PathBuf,
    /// Current segment: its start LSN and file.
    segment: (u64, AppendFile),
    segment_bytes: u64,
    checkpoint: Option<(u64, AppendFile)>,
}

impl ShardDisk {
    /// Starts a new REDO segment at `lsn` (the end of the intact log).
    pub fn open(dir: &Path, lsn: u64) -> Result<ShardDisk> {
        Self::open_with(dir, lsn, SEGMENT_BYTES)
    }

    fn open_with(dir: &Path, lsn: u64, segment_bytes: u64) -> Result<ShardDisk> {
        let file = Self::new_segment(dir, lsn)?;
        Ok(ShardDisk { dir: dir.to_path_buf(), segment: (lsn, file), segment_bytes, checkpoint: None })
    }

    fn new_segment(dir: &Path, lsn: u64) -> Result<AppendFile> {
        let file = AppendFile::create(&dir.join(segment_name(lsn)))?;
        sync_dir(dir)?;
        Ok(file)
    }

    /// Carries out one operation; returns the token to report, if any.
    pub fn execute(&mut self, op: DiskOp) -> Result<Option<u64>> {
        match op {
            DiskOp::RedoAppend(bytes) => {
                let (start, file) = &mut self.segment;
                if file.len() >= self.segment_bytes {
                    // Only the newest segment may end in padding: `scan`
                    // reads the segments as one log.
                    file.finish()?;
                    let lsn = *start + file.len();
                    self.segment = (lsn, Self::new_segment(&self.dir, lsn)?);
                }
                self.segment.1.append(&bytes)?;
                Ok(None)
            }
            DiskOp::RedoSync { token } => {
                self.segment.1.sync_data()?;
                Ok(Some(token))
            }
            DiskOp::CheckpointBegin { id } => {
                let file = AppendFile::create(&self.dir.join(checkpoint_name(id, false)))?;
                self.checkpoint = Some((id, file));
                Ok(None)
            }
            DiskOp::CheckpointAppend { id, bytes } => {
                if let Some((cid, file)) = self.checkpoint.as_mut() {
                    if *cid == id {
                        file.append(&bytes)?;
                    }
                }
                Ok(None)
            }
            DiskOp::CheckpointEnd { id, token } => {
                if let Some((cid, mut file)) = self.checkpoint.take() {
                    if cid == id {
                        file.finish()?;
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

/// Name of a shard's tablespace file.
pub const TABLESPACE_FILE: &str = "tablespace.dat";

/// A shard's tablespace file (`latsdb_cluster::PageFile`), read and
/// written by the shard thread at page offsets.
pub struct TablespaceFile {
    file: File,
    path: PathBuf,
    /// Opened with `O_DIRECT`: every read and write goes through `scratch`,
    /// a page aligned as direct I/O requires.
    direct: bool,
    scratch: AlignedPage,
}

/// Alignment of buffers and offsets for `O_DIRECT` (the largest logical
/// block size of common devices).
const DIRECT_ALIGN: usize = 4096;

/// A page-sized buffer at a `DIRECT_ALIGN`-aligned address (a slice of a
/// slightly larger allocation, so no unsafe allocation is needed).
struct AlignedPage {
    buffer: Vec<u8>,
    start: usize,
}

impl AlignedPage {
    fn new() -> AlignedPage {
        let buffer = vec![0u8; latsdb_cluster::PAGE_BYTES + DIRECT_ALIGN];
        let start = buffer.as_ptr().align_offset(DIRECT_ALIGN);
        assert!(start < DIRECT_ALIGN, "a byte buffer cannot be aligned to {DIRECT_ALIGN}");
        AlignedPage { buffer, start }
    }

    fn bytes(&mut self) -> &mut [u8] {
        &mut self.buffer[self.start..self.start + latsdb_cluster::PAGE_BYTES]
    }
}

impl TablespaceFile {
    /// Creates the file in `dir`, empty (a previous run's pages are stale).
    /// With `direct`, it is opened with `O_DIRECT`; a file system that
    /// refuses it (tmpfs) gets buffered I/O, and the log says so.
    pub fn create(dir: &Path, direct: bool) -> Result<TablespaceFile> {
        let path = dir.join(TABLESPACE_FILE);
        let open = |flags: i32| {
            OpenOptions::new().read(true).write(true).create(true).truncate(true).custom_flags(flags).open(&path)
        };
        let (file, direct) = match direct {
            false => (open(0), false),
            true => match open(libc::O_DIRECT) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    crate::log(
                        "datanode",
                        format!(
                            "{}: the file system refuses O_DIRECT; the tablespace goes through the OS page cache (disk_direct_io has no effect here)",
                            path.display()
                        ),
                    );
                    (open(0), false)
                }
                file => (file, true),
            },
        };
        let file = file.map_err(|e| io_error("cannot create the tablespace file", &path, e))?;
        Ok(TablespaceFile { file, path, direct, scratch: AlignedPage::new() })
    }

    fn offset(page: u32) -> u64 {
        page as u64 * latsdb_cluster::PAGE_BYTES as u64
    }

    /// A second handle on the file, for reads on other threads (the
    /// shard's requests wait for them instead of the shard thread).
    pub fn reader(&self) -> Result<PageReader> {
        let file =
            self.file.try_clone().map_err(|e| io_error("cannot open the tablespace file again", &self.path, e))?;
        Ok(PageReader { file, path: self.path.clone(), direct: self.direct })
    }
}

/// Reads pages of a shard's tablespace file on any thread (`pread`).
pub struct PageReader {
    file: File,
    path: PathBuf,
    direct: bool,
}

impl PageReader {
    /// Reads page `page`; an I/O error stops the node, as a failed write does.
    pub fn read(&self, page: u32) -> Box<[u8]> {
        let mut bytes = vec![0u8; latsdb_cluster::PAGE_BYTES].into_boxed_slice();
        let read = match self.direct {
            false => read_page(&self.file, page, &mut bytes),
            true => {
                let mut aligned = AlignedPage::new();
                read_page(&self.file, page, aligned.bytes()).map(|()| bytes.copy_from_slice(aligned.bytes()))
            }
        };
        if let Err(e) = read {
            stop_for_tablespace(&self.path, &format!("reading page {page} failed: {e}"));
        }
        bytes
    }
}

/// Reads a page into `out`; past the end of the file (a page never
/// written) it reads as zeros.
fn read_page(file: &File, page: u32, out: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < out.len() {
        match file.read_at(&mut out[done..], TablespaceFile::offset(page) + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    out[done..].fill(0);
    Ok(())
}

/// Stops the data node over its tablespace file: after a failed read or
/// write the pages cannot be trusted, and the node's peers hold every
/// committed row.
fn stop_for_tablespace(path: &Path, why: &str) -> ! {
    crate::log(
        "datanode",
        format!(
            "{}: {why}; stopping this data node (its peers hold every committed row; fix the disk and restart it)",
            path.display()
        ),
    );
    std::process::exit(3);
}

impl latsdb_cluster::PageFile for TablespaceFile {
    fn read(&mut self, page: u32, out: &mut [u8]) {
        let read = match self.direct {
            false => read_page(&self.file, page, out),
            true => {
                read_page(&self.file, page, self.scratch.bytes()).map(|()| out.copy_from_slice(self.scratch.bytes()))
            }
        };
        if let Err(e) = read {
            self.fail(&format!("reading page {page} failed: {e}"));
        }
    }

    /// `preadv2` with `RWF_NOWAIT`: the kernel copies the page if it has
    /// all of it cached and answers `EAGAIN` instead of waiting for the
    /// device. Anything but a whole page (a part cached, an error, a
    /// kernel without the flag) goes to the reader threads, which report
    /// real errors. With `O_DIRECT` nothing is cached: always false.
    fn read_without_waiting(&mut self, page: u32, out: &mut [u8]) -> bool {
        use std::os::fd::AsRawFd;
        if self.direct {
            return false;
        }
        let iov = libc::iovec { iov_base: out.as_mut_ptr().cast(), iov_len: out.len() };
        let offset = Self::offset(page) as libc::off_t;
        // SAFETY: `iov` describes `out`, which lives and is not otherwise
        // borrowed for the call; the descriptor is this file's own.
        let read = unsafe { libc::preadv2(self.file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        read == out.len() as isize
    }

    fn write(&mut self, page: u32, bytes: &[u8]) {
        let written = match self.direct {
            false => self.file.write_all_at(bytes, Self::offset(page)),
            true => {
                self.scratch.bytes().copy_from_slice(bytes);
                self.file.write_all_at(self.scratch.bytes(), Self::offset(page))
            }
        };
        if let Err(e) = written {
            self.fail(&format!("writing page {page} failed: {e}"));
        }
    }

    fn fail(&mut self, why: &str) -> ! {
        stop_for_tablespace(&self.path, why)
    }
}

/// What a shard's disk thread is sent: the shard's operations, and the
/// holds of backups on its files.
pub enum DiskMsg {
    Op(DiskOp),
    /// A backup keeps every file from now on: trims wait until as many
    /// `Release`s came. Acknowledged once every operation sent before it
    /// is done, so the files are then what the backup will read.
    Hold(tokio::sync::oneshot::Sender<()>),
    Release,
}

/// Runs a shard's disk thread: operations in order; each finished sync's
/// token goes to `done`. A failure stops the process. While a backup holds
/// the files, the latest trim waits (a trim deletes everything older than
/// what it keeps, so the latest one does the work of all).
pub fn spawn_disk_thread(
    mut disk: ShardDisk,
    name: String,
    done: tokio::sync::mpsc::UnboundedSender<u64>,
) -> Result<std::sync::mpsc::Sender<DiskMsg>> {
    let (tx, rx) = std::sync::mpsc::channel::<DiskMsg>();
    std::thread::Builder::new()
        .name(format!("disk-{name}"))
        .spawn(move || {
            let mut holds = 0u32;
            let mut waiting_trim = None;
            while let Ok(msg) = rx.recv() {
                let op = match msg {
                    DiskMsg::Op(op @ DiskOp::Trim { .. }) if holds > 0 => {
                        waiting_trim = Some(op);
                        continue;
                    }
                    DiskMsg::Op(op) => op,
                    DiskMsg::Hold(ack) => {
                        holds += 1;
                        let _ = ack.send(());
                        continue;
                    }
                    DiskMsg::Release => {
                        debug_assert!(holds > 0, "shard {name}: a backup let go of files it did not hold");
                        holds = holds.saturating_sub(1);
                        match waiting_trim.take() {
                            Some(op) if holds == 0 => op,
                            kept => {
                                waiting_trim = kept;
                                continue;
                            }
                        }
                    }
                };
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

#[cfg(test)]
mod tests {
    use super::*;
    use latsdb_cluster::DiskOp;
    use latsdb_storage::log::Record;

    fn scratch(name: &str) -> PathBuf {
        // Under the workspace's target folder, not /tmp: direct I/O is
        // what is tested, and /tmp may be a tmpfs without it.
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/test-scratch")
            .join(format!("disk-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Bytes that differ from position to position, so a misplaced block shows.
    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
    }

    #[test]
    fn appends_of_every_size_read_back_in_order() {
        let dir = scratch("append");
        let path = dir.join("f");
        let mut f = AppendFile::create(&path).unwrap();
        let mut expected = Vec::new();
        for (i, len) in [1, 4095, 4096, 1, 0, 8191, 3, 70_000, 12, 4096 * 3].into_iter().enumerate() {
            let bytes = pattern(len, i as u8);
            f.append(&bytes).unwrap();
            expected.extend_from_slice(&bytes);
            f.sync_data().unwrap();
            // Before `finish` the file may end in zeros, never in anything else.
            let on_disk = fs::read(&path).unwrap();
            assert_eq!(&on_disk[..expected.len()], &expected[..]);
            assert!(on_disk[expected.len()..].iter().all(|&b| b == 0));
            assert!(on_disk.len() < expected.len() + BLOCK);
        }
        assert_eq!(f.len(), expected.len() as u64);
        f.finish().unwrap();
        assert_eq!(fs::read(&path).unwrap(), expected);
        fs::remove_dir_all(&dir).unwrap();
    }

    fn redo_record(i: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let key = i.to_le_bytes();
        let row = pattern(100 + (i as usize % 300), i as u8);
        let record = Record::Write {
            epoch: latsdb_types::proto::CommitEpoch(1),
            table: 7,
            partition: 0,
            key: &key,
            row: Some(&row),
        };
        latsdb_storage::log::encode(&mut out, &record);
        out
    }

    #[test]
    fn segments_and_a_padded_tail_scan_back_as_one_log() {
        let dir = scratch("segments");
        // Small segments, so the log rolls over several times.
        let mut disk = ShardDisk::open_with(&dir, 0, 10_000).unwrap();
        let mut log = Vec::new();
        for i in 0..400u32 {
            let rec = redo_record(i);
            log.extend_from_slice(&rec);
            disk.execute(DiskOp::RedoAppend(rec)).unwrap();
            if i % 37 == 0 {
                assert_eq!(disk.execute(DiskOp::RedoSync { token: i as u64 }).unwrap(), Some(i as u64));
            }
        }
        disk.execute(DiskOp::RedoSync { token: 0 }).unwrap();
        // A crash now: the newest segment ends in a direct write's padding.
        drop(disk);
        let image = scan(&dir).unwrap();
        assert_eq!(image.redo_base, 0);
        assert_eq!(image.redo, log);
        assert_eq!(image.redo_end(), log.len() as u64);
        // The scan cut the padding, so a new segment continues the log.
        let mut disk = ShardDisk::open_with(&dir, image.redo_end(), 10_000).unwrap();
        let rec = redo_record(1000);
        log.extend_from_slice(&rec);
        disk.execute(DiskOp::RedoAppend(rec)).unwrap();
        disk.execute(DiskOp::RedoSync { token: 1 }).unwrap();
        drop(disk);
        assert_eq!(scan(&dir).unwrap().redo, log);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_published_checkpoint_has_no_padding() {
        let dir = scratch("checkpoint");
        let mut disk = ShardDisk::open(&dir, 0).unwrap();
        disk.execute(DiskOp::CheckpointBegin { id: 3 }).unwrap();
        let mut written = Vec::new();
        for i in 0..5u8 {
            let bytes = pattern(5000 + i as usize, i);
            written.extend_from_slice(&bytes);
            disk.execute(DiskOp::CheckpointAppend { id: 3, bytes }).unwrap();
        }
        assert_eq!(disk.execute(DiskOp::CheckpointEnd { id: 3, token: 9 }).unwrap(), Some(9));
        assert_eq!(fs::read(dir.join(checkpoint_name(3, true))).unwrap(), written);
        assert!(!dir.join(checkpoint_name(3, false)).exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Writes checkpoint `id` (header, one row, trailer ending at `end`)
    /// through the disk ops, starting at the log's current `lsn`.
    fn checkpoint(disk: &mut ShardDisk, id: u64, start_lsn: u64, end: u64) {
        let mut bytes = Vec::new();
        latsdb_storage::log::encode(&mut bytes, &Record::CheckpointHeader { id, start_lsn });
        let row = pattern(50, id as u8);
        let record = Record::CheckpointRow { table: 7, partition: 0, key: &[1, 2], row: &row };
        latsdb_storage::log::encode(&mut bytes, &record);
        let end_epoch = latsdb_types::proto::CommitEpoch(end);
        latsdb_storage::log::encode(&mut bytes, &Record::CheckpointTrailer { end_epoch, rows: 1 });
        disk.execute(DiskOp::CheckpointBegin { id }).unwrap();
        disk.execute(DiskOp::CheckpointAppend { id, bytes }).unwrap();
        disk.execute(DiskOp::CheckpointEnd { id, token: 0 }).unwrap();
    }

    #[test]
    fn a_backup_reads_the_newest_checkpoint_of_its_epoch_and_refuses_damage() {
        let dir = scratch("backup");
        let mut disk = ShardDisk::open_with(&dir, 0, 10_000).unwrap();
        let mut lsn = 0u64;
        let mut append = |disk: &mut ShardDisk, n: u32| {
            for i in 0..n {
                let rec = redo_record(i);
                lsn += rec.len() as u64;
                disk.execute(DiskOp::RedoAppend(rec)).unwrap();
            }
            disk.execute(DiskOp::RedoSync { token: 0 }).unwrap();
            lsn
        };
        let first_start = append(&mut disk, 100);
        checkpoint(&mut disk, 1, first_start, 5);
        let second_start = append(&mut disk, 100);
        checkpoint(&mut disk, 2, second_start, 9);
        let end = append(&mut disk, 10);

        let at_7 = read_for_backup(&dir, latsdb_types::proto::CommitEpoch(7)).unwrap();
        let (info, _) = at_7.checkpoint.expect("checkpoint 1 ends at epoch 5");
        assert_eq!((info.id, info.start_lsn), (1, first_start));
        assert!(at_7.redo_base <= first_start, "the REDO copied starts at or before the checkpoint");
        assert_eq!(at_7.redo_base + at_7.redo.len() as u64, end, "the REDO copied runs to the end written");
        let at_9 = read_for_backup(&dir, latsdb_types::proto::CommitEpoch(9)).unwrap();
        assert_eq!(at_9.checkpoint.map(|(c, _)| c.id), Some(2));
        // Before either checkpoint ends, with the log's start still there:
        // the whole log and no checkpoint.
        let at_2 = read_for_backup(&dir, latsdb_types::proto::CommitEpoch(2)).unwrap();
        assert!(at_2.checkpoint.is_none() && at_2.redo_base == 0);

        // A damaged checkpoint may be the one a backup needs: refused.
        let path = dir.join(checkpoint_name(2, true));
        let mut bytes = fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x55;
        fs::write(&path, bytes).unwrap();
        let err = read_for_backup(&dir, latsdb_types::proto::CommitEpoch(9)).err().expect("a damaged checkpoint");
        assert!(err.message.contains("is damaged"), "{}", err.message);
        fs::remove_dir_all(&dir).unwrap();
    }
}
