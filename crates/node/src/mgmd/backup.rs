//! Online backups, as the management server runs them (NDB's START
//! BACKUP): one at a time, in two steps over every started data node (see
//! `crate::backup` for what a node does and why the cut is consistent).
//!
//! 1. Under the schema lock (no table changes meanwhile), every node holds
//!    its files and reports its shards' durable epoch and partitions. The
//!    backup's epoch is the highest durable epoch reported; every partition
//!    of every table must have a replica on a node that holds.
//! 2. Every node writes its part in the background; the server polls their
//!    progress until all are done, or one failed (then every node deletes
//!    its part) or the operator aborted.
//!
//! The backups run are kept in `backups.json` in the server's data folder,
//! so ids are never used twice and `latsdb mgm backup list` shows them
//! after a restart of the server.

use super::Mgmd;
use latsdb_types::proto::{
    BackupInfo, BackupPart, BackupState, CommitEpoch, MgmResponse, NodeCommand, NodeId, NodeReply, NodeStatus, Severity,
};
use latsdb_types::schema::TableId;
use latsdb_types::{DbError, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const BACKUPS_FILE: &str = "backups.json";
/// How often a running backup's progress is polled.
const POLL: Duration = Duration::from_millis(200);
/// How long the backup's epoch may take to become durable.
const DURABLE_WAIT: Duration = Duration::from_secs(30);

/// The backups this server has run (the newest last).
#[derive(Default, Serialize, Deserialize)]
pub(super) struct Backups {
    next_id: u64,
    list: Vec<BackupInfo>,
    /// The operator asked to abort the running backup.
    #[serde(skip)]
    abort: bool,
}

impl Backups {
    /// Reads `backups.json`; a missing file is no backup yet, a damaged
    /// one is refused (ids must never repeat).
    pub(super) fn load(dir: Option<&Path>) -> Result<Backups> {
        let Some(path) = dir.map(|d| d.join(BACKUPS_FILE)) else {
            // Nothing recorded across restarts: ids from the clock (in
            // seconds) do not repeat those of an earlier run.
            return Ok(Backups { next_id: crate::unix_ms() / 1000, ..Backups::default() });
        };
        let mut backups: Backups = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                DbError::new(ErrorCode::Io, format!("{} is damaged ({e}); repair or remove it", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Backups::default(),
            Err(e) => return Err(DbError::io(&format!("reading {}", path.display()), e)),
        };
        // A backup that was running when the server stopped did not finish.
        for b in backups.list.iter_mut().filter(|b| b.state == BackupState::Running) {
            b.state = BackupState::Failed("the management server stopped while it ran".into());
        }
        Ok(backups)
    }

    fn save(&self, dir: Option<&Path>) -> Result<()> {
        let Some(dir) = dir else { return Ok(()) };
        let json = serde_json::to_vec_pretty(self).map_err(|e| DbError::internal(format!("encoding backups: {e}")))?;
        let tmp = dir.join(format!("{BACKUPS_FILE}.tmp"));
        std::fs::write(&tmp, json).map_err(|e| DbError::io(&format!("writing {}", tmp.display()), e))?;
        std::fs::rename(&tmp, dir.join(BACKUPS_FILE)).map_err(|e| DbError::io("renaming backups.json", e))
    }

    fn running(&self) -> Option<&BackupInfo> {
        self.list.iter().find(|b| b.state == BackupState::Running)
    }

    fn get_mut(&mut self, id: u64) -> &mut BackupInfo {
        self.list.iter_mut().find(|b| b.id == id).expect("a running backup is listed")
    }
}

impl Mgmd {
    fn backups(&self) -> std::sync::MutexGuard<'_, Backups> {
        self.backups.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn save_backups(&self) {
        let saved = self.backups().save(self.data_dir.as_deref());
        if let Err(e) = saved {
            self.event(Severity::Warning, format!("cannot record the backups: {}", e.message));
        }
    }

    /// For `/metrics`: the backups run and the newest completed one.
    pub(super) fn backup_counts(&self) -> super::metrics::Backups {
        let backups = self.backups();
        let mut counts = super::metrics::Backups::default();
        for b in &backups.list {
            match b.state {
                BackupState::Completed => {
                    counts.completed += 1;
                    counts.last = Some((b.finished_unix_ms, b.parts.iter().map(|p| p.bytes).sum(), b.epoch.0));
                }
                BackupState::Failed(_) | BackupState::Aborted => counts.failed += 1,
                BackupState::Running => {}
            }
        }
        counts
    }

    /// `MgmRequest::BackupStart`: starts one in the background.
    pub(super) fn start_backup(self: &Arc<Self>) -> Result<MgmResponse> {
        if !self.lock().formed {
            return Err(DbError::new(
                ErrorCode::NodeUnavailable,
                "the cluster has not formed yet; take the backup once every data node has started",
            ));
        }
        let info = {
            let mut backups = self.backups();
            if let Some(running) = backups.running() {
                return Err(DbError::bad_request(format!(
                    "backup {} is running; wait for it (latsdb mgm backup status) or abort it",
                    running.id
                )));
            }
            backups.next_id = backups.next_id.max(1);
            let info = BackupInfo {
                id: backups.next_id,
                state: BackupState::Running,
                epoch: CommitEpoch::NONE,
                started_unix_ms: crate::unix_ms(),
                finished_unix_ms: 0,
                parts: Vec::new(),
            };
            backups.next_id += 1;
            backups.abort = false;
            backups.list.push(info.clone());
            info
        };
        self.save_backups();
        tokio::spawn(self.clone().run_backup(info.id));
        Ok(MgmResponse::Backups(vec![info]))
    }

    /// `MgmRequest::BackupStatus`/`BackupList`.
    pub(super) fn backup_status(&self, id: Option<u64>, all: bool) -> Result<MgmResponse> {
        let backups = self.backups();
        if all {
            return Ok(MgmResponse::Backups(backups.list.clone()));
        }
        let found = match id {
            Some(id) => backups.list.iter().find(|b| b.id == id),
            None => backups.list.last(),
        };
        match found {
            Some(b) => Ok(MgmResponse::Backups(vec![b.clone()])),
            None => Err(DbError::bad_request(match id {
                Some(id) => format!("there is no backup {id}; latsdb mgm backup list shows them"),
                None => "no backup has been taken; start one with latsdb mgm backup start".into(),
            })),
        }
    }

    /// `MgmRequest::BackupAbort`.
    pub(super) fn abort_backup(&self, id: u64) -> Result<MgmResponse> {
        let mut backups = self.backups();
        match backups.running() {
            Some(b) if b.id == id => {
                backups.abort = true;
                Ok(MgmResponse::Done)
            }
            _ => Err(DbError::bad_request(format!("backup {id} is not running"))),
        }
    }

    async fn run_backup(self: Arc<Self>, id: u64) {
        let began = std::time::Instant::now();
        let mut nodes = Vec::new();
        let outcome = self.take_backup(id, &mut nodes).await;
        if outcome.is_err() {
            // Every node deletes what it wrote and lets its files go.
            self.send_to(&nodes, NodeCommand::BackupAbort { id }).await;
        }
        let (state, text, severity) = match outcome {
            Ok(()) => {
                let backups = self.backups();
                let b = backups.list.iter().find(|b| b.id == id).expect("the backup is listed");
                let bytes: u64 = b.parts.iter().map(|p| p.bytes).sum();
                let places: Vec<String> =
                    b.parts.iter().map(|p| format!("data node {} {}:{}", p.node_id, p.host, p.dir)).collect();
                let text = format!(
                    "backup {id} completed in {:.1} s: {:.1} MB, consistent at epoch {}; {}",
                    began.elapsed().as_secs_f64(),
                    bytes as f64 / 1e6,
                    b.epoch,
                    places.join(", ")
                );
                (BackupState::Completed, text, Severity::Info)
            }
            Err(e) if e.message == "aborted" => {
                (BackupState::Aborted, format!("backup {id} aborted; its files were deleted"), Severity::Warning)
            }
            Err(e) => (
                BackupState::Failed(e.message.clone()),
                format!("backup {id} failed: {}; its files were deleted", e.message),
                Severity::Alert,
            ),
        };
        {
            let mut backups = self.backups();
            let b = backups.get_mut(id);
            b.state = state;
            b.finished_unix_ms = crate::unix_ms();
        }
        self.save_backups();
        self.event(severity, text);
    }

    /// The two steps; `nodes` gets the data nodes that took part.
    async fn take_backup(&self, id: u64, nodes: &mut Vec<NodeId>) -> Result<()> {
        let (epoch, tables) = {
            // No schema change while the nodes hold: the schema written
            // with the backup is the one of its rows.
            let _schema = self.schema_lock.lock().await;
            let tables = self.lock().tables.clone();
            nodes.extend(
                self.lock().layout.datanodes.iter().filter(|d| d.status == NodeStatus::Started).map(|d| d.node_id),
            );
            let epoch = self.hold_everywhere(id, nodes, &tables).await?;
            (epoch, tables)
        };
        self.await_durable(epoch).await?;
        self.event(Severity::Info, format!("backup {id} started: consistent at epoch {epoch}, data nodes {nodes:?}"));
        for (node, reply) in self.send_to(nodes, NodeCommand::BackupWrite { id, epoch, tables }).await {
            node_answer(node, reply)?;
        }
        loop {
            tokio::time::sleep(POLL).await;
            if self.backups().abort {
                return Err(DbError::new(ErrorCode::Internal, "aborted"));
            }
            let mut parts = Vec::new();
            for (node, reply) in self.send_to(nodes, NodeCommand::BackupProgress { id }).await {
                match node_answer(node, reply)? {
                    NodeReply::BackupProgress(part) => parts.push(part),
                    other => return Err(DbError::internal(format!("data node {node} answered {other:?}"))),
                }
            }
            if let Some((node, why)) = parts.iter().find_map(|p| p.error.as_ref().map(|e| (p.node_id, e))) {
                return Err(DbError::new(ErrorCode::Internal, format!("data node {node}: {why}")));
            }
            let done = parts.iter().all(|p| p.done);
            self.backups().get_mut(id).parts = parts;
            if done {
                return Ok(());
            }
        }
    }

    /// Waits until the data nodes report `epoch` durable (they do about
    /// once a second).
    async fn await_durable(&self, epoch: CommitEpoch) -> Result<()> {
        let deadline = tokio::time::Instant::now() + DURABLE_WAIT;
        while self.lock().layout.durable_epoch < epoch {
            if tokio::time::Instant::now() >= deadline {
                return Err(DbError::new(
                    ErrorCode::Timeout,
                    format!(
                        "epoch {epoch} did not become durable within {} s; see the cluster log",
                        DURABLE_WAIT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Step 1: every node holds; returns the backup's epoch: the highest
    /// any shard was committing in, so that the backup holds every commit
    /// acknowledged before it began.
    async fn hold_everywhere(
        &self,
        id: u64,
        nodes: &[NodeId],
        tables: &[latsdb_types::schema::TableDef],
    ) -> Result<CommitEpoch> {
        let mut epoch = CommitEpoch::NONE;
        let mut covered: BTreeSet<(TableId, u32)> = BTreeSet::new();
        let mut parts = Vec::new();
        for (node, reply) in self.send_to(nodes, NodeCommand::BackupHold { id }).await {
            match node_answer(node, reply)? {
                NodeReply::BackupHeld { durable, current, partitions, dir } => {
                    epoch = epoch.max(durable).max(current);
                    covered.extend(partitions);
                    let host = self.lock().layout.datanode(node).map(|d| d.host.clone()).unwrap_or_default();
                    parts.push(BackupPart {
                        node_id: node,
                        host,
                        dir,
                        bytes: 0,
                        total_bytes: 0,
                        done: false,
                        error: None,
                    });
                }
                other => return Err(DbError::internal(format!("data node {node} answered {other:?}"))),
            }
        }
        for t in tables {
            if let Some(p) = (0..t.partitions).find(|p| !covered.contains(&(t.id, *p))) {
                return Err(DbError::new(
                    ErrorCode::NodeUnavailable,
                    format!(
                        "partition {p} of table {} has no replica on a started data node; start its node group's nodes and try again",
                        t.qualified_name()
                    ),
                ));
            }
        }
        if epoch == CommitEpoch::NONE {
            return Err(DbError::new(ErrorCode::NodeUnavailable, "no epoch is durable yet; try again in a second"));
        }
        let mut backups = self.backups();
        let b = backups.get_mut(id);
        b.epoch = epoch;
        b.parts = parts;
        Ok(epoch)
    }
}

/// A node's answer, its error (or a lost connection) as the backup's.
fn node_answer(node: NodeId, reply: Result<NodeReply>) -> Result<NodeReply> {
    match reply {
        Ok(NodeReply::Error(e)) | Err(e) => Err(DbError::new(e.code, format!("data node {node}: {}", e.message))),
        Ok(other) => Ok(other),
    }
}
