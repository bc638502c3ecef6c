//! The I/O shell of latsdb's server roles.
//!
//! - [`shard_host`]: one OS thread per shard, each a single-threaded tokio
//!   runtime that owns a [`latsdb_cluster::Shard`] and its sockets. Requests
//!   are handled on the thread that read them, with no hand-off to another
//!   thread, and answers leave through a coalescing writer.
//! - [`backup`]: a data node's part of an online backup, and the manifest
//!   a restore reads.
//! - [`cpus`]: which CPU each shard thread is bound to.
//! - [`datanode`]: the `latsdb datanode` process: registers with the
//!   management server, starts its shards, applies schema changes.
//! - [`disk`]: a shard's REDO log segments and checkpoint files, read at
//!   start and written by a disk thread per shard.
//! - [`mgmd`]: the `latsdb mgmd` process: configuration, node ids, cluster
//!   layout, schema metadata, admin requests.

pub mod backup;
pub mod cpus;
pub mod datanode;
pub mod disk;
pub mod mgmd;
pub mod shard_host;

/// Milliseconds since the Unix epoch by this host's clock (0 if it reads
/// before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Prints a timestamped log line to stderr.
pub fn log(role: &str, message: impl std::fmt::Display) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs();
    eprintln!(
        "{:02}:{:02}:{:02}.{:03} [{role}] {message}",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60,
        now.subsec_millis()
    );
}
