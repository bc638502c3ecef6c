//! A data node's part of an online backup, and the manifest that
//! `latsdb restore` reads.
//!
//! A backup is consistent at one durable epoch E: it holds every commit of
//! epochs up to E and none after, on every node (restoring "every epoch up
//! to E" is a consistent cut, see durability.rs). The management server
//! runs it in two steps (`mgmd/backup.rs`):
//!
//! 1. **Hold.** Every started data node makes each shard's disk thread keep
//!    its files: trims wait, so the checkpoint and REDO that restore any
//!    epoch from then on stay. Each shard reports the durable epoch it knew
//!    as the hold began; E is the highest of them. Every trim done before a
//!    hold was decided by a durable epoch no later than E, so each shard
//!    still has a checkpoint that ends at or before E.
//! 2. **Write.** Each node copies, per shard, that checkpoint and the REDO
//!    log from its start to the end written so far (which holds every
//!    commit up to E, since E is durable), checks that the copy reaches E,
//!    syncs it, writes a manifest last, and lets the files go.
//!
//! ```text
//! <data dir>/backups/BACKUP-<id>/datanode-<n>/
//!     shard-<k>.ckpt   the shard's checkpoint that restores E (absent if it has none)
//!     shard-<k>.redo   its REDO log from the checkpoint's start
//!     manifest.json    written last: backup id, epoch, schema, and per shard
//!                      its partitions and files with their sizes and XXH3-128 checksums
//! ```
//!
//! The copy runs on a thread of its own: the shard threads serve on, and
//! the disk threads append on (a backup costs reads, not stalls). A hold
//! that no write follows within `HOLD_LEASE` is let go, so a management
//! server that died mid-backup cannot keep a node's REDO growing.

use crate::disk::DiskMsg;
use latsdb_types::proto::{BackupPart, CommitEpoch, NodeId, NodeReply};
use latsdb_types::schema::{TableDef, TableId};
use latsdb_types::{DbError, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a held backup may wait for the management server's write.
const HOLD_LEASE: Duration = Duration::from_secs(60);

/// The manifest's format; `latsdb restore` refuses others.
pub const MANIFEST_FORMAT: u32 = 1;
pub const MANIFEST_FILE: &str = "manifest.json";

/// What a data node wrote of a backup (`manifest.json`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Manifest {
    pub format: u32,
    pub backup_id: u64,
    /// The epoch the backup restores.
    pub epoch: u64,
    pub node_id: NodeId,
    pub created_unix_ms: u64,
    /// The schema when the backup began (hidden tables of unique indexes
    /// included; a restore rebuilds them from their tables' rows).
    pub tables: Vec<TableDef>,
    pub shards: Vec<ShardPart>,
}

/// One shard's files in a backup.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ShardPart {
    pub shard: u16,
    /// (table, partition) of every partition replica the shard held.
    pub partitions: Vec<(TableId, u32)>,
    pub checkpoint: Option<FileEntry>,
    pub redo: FileEntry,
    /// LSN of the REDO file's first byte.
    pub redo_base: u64,
}

/// A file of a backup, by name within its folder.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FileEntry {
    pub name: String,
    pub bytes: u64,
    /// XXH3-128 of the file, in hex: it finds damage at memory speed
    /// (SHA-256 took a second per 0.5 GB of a backup's CPU on both ends).
    pub xxh3_128: String,
}

/// A shard's files held for a backup (`Control::BackupHold`).
pub struct HeldShard {
    pub shard: u16,
    pub dir: PathBuf,
    /// The durable epoch the shard knew as the hold began, and the epoch
    /// it was committing in.
    pub durable: CommitEpoch,
    pub current: CommitEpoch,
    pub partitions: Vec<(TableId, u32)>,
    /// The shard's disk thread, to let the files go.
    pub disk: std::sync::mpsc::Sender<DiskMsg>,
}

use crate::disk::io_error;

fn checksum(bytes: &[u8]) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes))
}

/// The folder a node writes backup `id` in, under its data directory.
pub fn part_dir(data_dir: &Path, id: u64, node_id: NodeId) -> PathBuf {
    data_dir.join("backups").join(format!("BACKUP-{id}")).join(format!("datanode-{node_id}"))
}

/// How one node's part of a backup goes, shared with its writer thread.
#[derive(Default)]
struct Progress {
    bytes: AtomicU64,
    total: AtomicU64,
    /// The write began (the hold's lease no longer applies).
    writing: AtomicBool,
    done: AtomicBool,
    abort: AtomicBool,
    error: Mutex<Option<String>>,
}

impl Progress {
    fn fail(&self, why: String) {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(why);
    }

    fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// One backup on this node: its folder, the shards it holds (until the
/// files are let go) and its progress.
struct Job {
    dir: PathBuf,
    held: Arc<Mutex<Vec<HeldShard>>>,
    progress: Arc<Progress>,
}

/// Lets every held file of a backup go (once: the list is emptied).
fn release(held: &Mutex<Vec<HeldShard>>) {
    for shard in held.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
        let _ = shard.disk.send(DiskMsg::Release);
    }
}

/// The backups of one data node.
pub struct NodeBackups {
    node_id: NodeId,
    host: String,
    data_dir: Option<PathBuf>,
    jobs: HashMap<u64, Job>,
    /// How long a hold waits for its write (`HOLD_LEASE`).
    lease: Duration,
}

impl NodeBackups {
    pub fn new(node_id: NodeId, host: String, data_dir: Option<PathBuf>) -> NodeBackups {
        NodeBackups { node_id, host, data_dir, jobs: HashMap::new(), lease: HOLD_LEASE }
    }

    /// `NodeCommand::BackupHold`: holds every shard's files; answers with
    /// the highest durable epoch they knew and the partitions they hold.
    pub async fn hold(&mut self, id: u64, shards: Vec<HeldShard>) -> Result<NodeReply> {
        let Some(data_dir) = &self.data_dir else {
            release(&Mutex::new(shards));
            return Err(DbError::bad_request(format!(
                "data node {} has no data directory: a backup needs data nodes that keep their data on disk",
                self.node_id
            )));
        };
        let dir = part_dir(data_dir, id, self.node_id);
        if self.jobs.contains_key(&id) || dir.exists() {
            release(&Mutex::new(shards));
            return Err(DbError::bad_request(format!(
                "backup {id} already exists on data node {} ({}); a backup id is used once",
                self.node_id,
                dir.display()
            )));
        }
        let durable = shards.iter().map(|s| s.durable).max().unwrap_or(CommitEpoch::NONE);
        let current = shards.iter().map(|s| s.current).max().unwrap_or(CommitEpoch::NONE);
        let mut partitions: Vec<(TableId, u32)> = shards.iter().flat_map(|s| s.partitions.iter().copied()).collect();
        partitions.sort_unstable();
        partitions.dedup();
        let held = Arc::new(Mutex::new(shards));
        let progress = Arc::new(Progress::default());
        // The lease: a hold that no write follows lets its files go.
        let (lease_held, lease_progress, lease) = (held.clone(), progress.clone(), self.lease);
        tokio::spawn(async move {
            tokio::time::sleep(lease).await;
            if !lease_progress.writing.swap(true, Ordering::AcqRel) {
                lease_progress.fail(format!("no write followed the hold within {} s", lease.as_secs()));
                release(&lease_held);
            }
        });
        self.jobs.insert(id, Job { dir: dir.clone(), held, progress });
        debug_assert!(
            self.jobs.get(&id).is_some_and(|j| !j.progress.writing.load(Ordering::Acquire)),
            "a new hold is not yet written"
        );
        debug_assert!(durable <= current, "a shard committed in an epoch below its durable one");
        Ok(NodeReply::BackupHeld { durable, current, partitions, dir: dir.display().to_string() })
    }

    /// `NodeCommand::BackupWrite`: starts writing the held files at `epoch`.
    pub fn write(&mut self, id: u64, epoch: CommitEpoch, tables: Vec<TableDef>) -> Result<()> {
        let job = self.job(id)?;
        // Whoever sets `writing` first owns the holds: this write, the
        // lease, or an abort.
        if job.progress.writing.swap(true, Ordering::AcqRel) {
            let why = job.progress.error().unwrap_or_else(|| "it is already being written".into());
            return Err(DbError::new(
                ErrorCode::Internal,
                format!("backup {id} cannot be written on this node: {why}"),
            ));
        }
        let (dir, held, progress, node_id) = (job.dir.clone(), job.held.clone(), job.progress.clone(), self.node_id);
        let thread_held = held.clone();
        let spawned = std::thread::Builder::new().name(format!("backup-{id}")).spawn(move || {
            yield_to_the_shards();
            let written = write_part(&dir, node_id, id, epoch, tables, &thread_held, &progress);
            release(&thread_held);
            let aborted = progress.abort.load(Ordering::Acquire);
            match written {
                Ok(()) if !aborted => progress.done.store(true, Ordering::Release),
                outcome => {
                    let _ = std::fs::remove_dir_all(&dir);
                    progress.fail(outcome.err().map_or_else(|| "aborted".to_string(), |e| e.message));
                }
            }
        });
        if let Err(e) = spawned {
            release(&held);
            job.progress.fail(format!("cannot start a backup thread: {e}"));
            return Err(DbError::io("spawning a backup thread", e));
        }
        Ok(())
    }

    /// `NodeCommand::BackupProgress`.
    pub fn progress(&self, id: u64) -> Result<BackupPart> {
        let job = self.job(id)?;
        let p = &job.progress;
        Ok(BackupPart {
            node_id: self.node_id,
            host: self.host.clone(),
            dir: job.dir.display().to_string(),
            bytes: p.bytes.load(Ordering::Relaxed),
            total_bytes: p.total.load(Ordering::Relaxed),
            done: p.done.load(Ordering::Acquire),
            error: p.error(),
        })
    }

    /// `NodeCommand::BackupAbort`: a hold lets its files go now, a running
    /// write stops at its next file and deletes the folder, and a finished
    /// part is deleted (another node's part failed).
    pub fn abort(&mut self, id: u64) {
        let Some(job) = self.jobs.get(&id) else { return };
        job.progress.abort.store(true, Ordering::Release);
        if !job.progress.writing.swap(true, Ordering::AcqRel) {
            job.progress.fail("aborted".into());
            release(&job.held);
        } else if job.progress.done.swap(false, Ordering::AcqRel) {
            let _ = std::fs::remove_dir_all(&job.dir);
            job.progress.fail("aborted".into());
        }
    }

    fn job(&self, id: u64) -> Result<&Job> {
        self.jobs.get(&id).ok_or_else(|| {
            DbError::bad_request(format!("data node {} knows no backup {id} (did it restart?)", self.node_id))
        })
    }
}

/// Lowers the calling thread's CPU priority to the least (nice 19): a
/// backup copies gigabytes and checksums them, and on a host with few
/// CPUs it would otherwise take them from the shard threads that serve.
fn yield_to_the_shards() {
    // SAFETY: setpriority reads its arguments only; on Linux, PRIO_PROCESS
    // with 0 names the calling thread.
    let lowered = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    if lowered != 0 {
        crate::log("datanode", "cannot lower the backup thread's priority; it competes with the shards for CPU");
    }
}

/// Writes a node's part of a backup: per shard its checkpoint and REDO,
/// then the manifest.
fn write_part(
    dir: &Path,
    node_id: NodeId,
    id: u64,
    epoch: CommitEpoch,
    tables: Vec<TableDef>,
    held: &Mutex<Vec<HeldShard>>,
    progress: &Progress,
) -> Result<()> {
    // What to copy, taken from the holds (which stay until the end).
    type ShardToCopy = (u16, PathBuf, Vec<(TableId, u32)>);
    let shards: Vec<ShardToCopy> = held
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|s| (s.shard, s.dir.clone(), s.partitions.clone()))
        .collect();
    if shards.is_empty() {
        return Err(DbError::new(ErrorCode::Internal, "the node no longer holds its files for this backup"));
    }
    std::fs::create_dir_all(dir).map_err(|e| io_error("cannot create the backup folder", dir, e))?;
    let total: u64 = shards.iter().map(|(_, d, _)| files_bytes(d)).sum();
    progress.total.store(total, Ordering::Relaxed);
    let mut parts = Vec::new();
    for (shard, shard_dir, partitions) in shards {
        if progress.abort.load(Ordering::Acquire) {
            return Err(DbError::new(ErrorCode::Internal, "aborted"));
        }
        let image = crate::disk::read_for_backup(&shard_dir, epoch)?;
        let reached = latsdb_cluster::redo_summary(&image.redo).saved_epoch;
        if reached < epoch {
            return Err(DbError::new(
                ErrorCode::Internal,
                format!(
                    "shard {node_id}.{shard}: its REDO log is saved through epoch {reached}, not the backup's {epoch}; try again"
                ),
            ));
        }
        let checkpoint = match &image.checkpoint {
            Some((_, bytes)) => Some(write_file(dir, &format!("shard-{shard}.ckpt"), bytes, progress)?),
            None => None,
        };
        let redo = write_file(dir, &format!("shard-{shard}.redo"), &image.redo, progress)?;
        parts.push(ShardPart { shard, partitions, checkpoint, redo, redo_base: image.redo_base });
    }
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        backup_id: id,
        epoch: epoch.0,
        node_id,
        created_unix_ms: crate::unix_ms(),
        tables,
        shards: parts,
    };
    let json = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| DbError::internal(format!("cannot encode the backup manifest: {e}")))?;
    let tmp = dir.join("manifest.json.tmp");
    write_synced(&tmp, &json)?;
    let path = dir.join(MANIFEST_FILE);
    std::fs::rename(&tmp, &path).map_err(|e| io_error("cannot publish", &path, e))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error("cannot sync", dir, e))
}

/// Bytes of a shard's checkpoint and REDO files (the most a backup copies).
fn files_bytes(dir: &Path) -> u64 {
    let (redo, checkpoints) = crate::disk::ShardDisk::usage(dir);
    redo + checkpoints
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = std::fs::File::create(path).map_err(|e| io_error("cannot create", path, e))?;
    file.write_all(bytes).map_err(|e| io_error("cannot write", path, e))?;
    file.sync_all().map_err(|e| io_error("cannot sync", path, e))
}

/// Writes and syncs one file of a backup, counting its bytes. A file that
/// would leave less than 5% of the disk free is not written: the data
/// node's REDO log shares the disk, and a full disk stops the node.
fn write_file(dir: &Path, name: &str, bytes: &[u8], progress: &Progress) -> Result<FileEntry> {
    if let Some((free, total)) = crate::disk::space(dir) {
        let keep = total / 20;
        if free < bytes.len() as u64 + keep {
            return Err(DbError::new(
                ErrorCode::Io,
                format!(
                    "not enough disk space for the backup in {}: {} MB free, {} MB to write and 5% of the disk kept free; free space (old backups?) and try again",
                    dir.display(),
                    free >> 20,
                    bytes.len() >> 20
                ),
            ));
        }
    }
    write_synced(&dir.join(name), bytes)?;
    progress.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(FileEntry { name: name.to_string(), bytes: bytes.len() as u64, xxh3_128: checksum(bytes) })
}

/// Reads a backup file and checks its size and checksum against the manifest.
pub fn read_checked(dir: &Path, entry: &FileEntry) -> Result<Vec<u8>> {
    let path = dir.join(&entry.name);
    let bytes = std::fs::read(&path).map_err(|e| {
        DbError::new(ErrorCode::Io, format!("the backup is incomplete: cannot read {}: {e}", path.display()))
    })?;
    if bytes.len() as u64 != entry.bytes || checksum(&bytes) != entry.xxh3_128 {
        return Err(DbError::new(
            ErrorCode::Io,
            format!(
                "the backup is corrupt: {} ({} bytes) does not match its manifest ({} bytes, XXH3-128 {})",
                path.display(),
                bytes.len(),
                entry.bytes,
                entry.xxh3_128
            ),
        ));
    }
    Ok(bytes)
}

/// Reads a node's manifest, refusing one of another format.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    let bytes = std::fs::read(&path).map_err(|e| io_error("cannot read", &path, e))?;
    let manifest: Manifest = serde_json::from_slice(&bytes)
        .map_err(|e| DbError::new(ErrorCode::Io, format!("the backup manifest {} is damaged: {e}", path.display())))?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(DbError::bad_request(format!(
            "{} is of backup format {}; this latsdb reads format {MANIFEST_FORMAT}",
            path.display(),
            manifest.format
        )));
    }
    Ok(manifest)
}

/// A shard's rows at a backup's epoch: (table, partition, key) -> row.
pub type ShardRows = HashMap<(TableId, u32, Vec<u8>), Vec<u8>>;

/// The rows of the chosen partitions of one shard of a backup at its
/// epoch: the checkpoint replayed with the REDO up to the epoch
/// (`latsdb_cluster::replay`), files checked.
pub fn shard_rows(
    dir: &Path,
    part: &ShardPart,
    epoch: CommitEpoch,
    wanted: &std::collections::HashSet<(TableId, u32)>,
) -> Result<ShardRows> {
    let checkpoint = part.checkpoint.as_ref().map(|c| read_checked(dir, c)).transpose()?;
    let redo = read_checked(dir, &part.redo)?;
    let mut rows = ShardRows::new();
    latsdb_cluster::replay(checkpoint.as_deref(), &redo, part.redo_base, epoch, |table, partition, key, row| {
        if !wanted.contains(&(table, partition)) {
            return Ok(false);
        }
        match row {
            Some(row) => rows.insert((table, partition, key.to_vec()), row.to_vec()),
            None => rows.remove(&(table, partition, key.to_vec())),
        };
        Ok(true)
    })
    .map_err(|e| DbError::new(ErrorCode::Io, format!("shard {} of {}: {}", part.shard, dir.display(), e.message)))?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::Receiver;

    fn shards(n: u16, dir: &Path) -> (Vec<HeldShard>, Vec<Receiver<DiskMsg>>) {
        (0..n)
            .map(|shard| {
                let (disk, rx) = std::sync::mpsc::channel();
                let held = HeldShard {
                    shard,
                    dir: dir.join(format!("missing-shard-{shard}")),
                    durable: CommitEpoch(3),
                    current: CommitEpoch(4),
                    partitions: vec![(1, shard as u32)],
                    disk,
                };
                (held, rx)
            })
            .unzip()
    }

    fn releases(rxs: &[Receiver<DiskMsg>]) -> Vec<usize> {
        rxs.iter().map(|rx| rx.try_iter().filter(|m| matches!(m, DiskMsg::Release)).count()).collect()
    }

    /// A hold is let go exactly once, by whichever comes first: an abort,
    /// its lease, or the end of its write (here a failing one); and what
    /// let it go keeps the others from writing.
    #[tokio::test]
    async fn every_hold_is_let_go_once_whoever_ends_it() {
        let dir = std::env::temp_dir().join(format!("latsdb-backup-holds-{}", std::process::id()));
        let mut backups = NodeBackups::new(2, "h".into(), Some(dir.clone()));
        backups.lease = Duration::from_millis(20);

        let (held, aborted) = shards(2, &dir);
        match backups.hold(1, held).await.unwrap() {
            NodeReply::BackupHeld { durable, current, partitions, .. } => {
                assert_eq!((durable, current), (CommitEpoch(3), CommitEpoch(4)));
                assert_eq!(partitions, vec![(1, 0), (1, 1)]);
            }
            other => panic!("{other:?}"),
        }
        backups.abort(1);
        assert_eq!(releases(&aborted), [1, 1]);
        assert!(backups.write(1, CommitEpoch(4), Vec::new()).is_err(), "an aborted backup is not written");

        let (held, leased) = shards(2, &dir);
        backups.hold(2, held).await.unwrap();
        let (again, refused) = shards(1, &dir);
        assert!(backups.hold(2, again).await.is_err(), "an id is held once");
        assert_eq!(releases(&refused), [1], "a refused hold lets its shards go at once");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(releases(&leased), [1, 1]);
        let late = backups.write(2, CommitEpoch(4), Vec::new()).unwrap_err();
        assert!(late.message.contains("no write followed"), "{}", late.message);
        backups.abort(2);
        assert_eq!(releases(&leased), [0, 0], "an abort after the lease lets nothing go twice");

        let (held, written) = shards(2, &dir);
        backups.hold(3, held).await.unwrap();
        backups.write(3, CommitEpoch(4), Vec::new()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while backups.progress(3).unwrap().error.is_none() {
            assert!(std::time::Instant::now() < deadline, "the write of missing shards did not fail");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(releases(&written), [1, 1]);
        assert!(!part_dir(&dir, 3, 2).exists(), "a failed write leaves no folder");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
