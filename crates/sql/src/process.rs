//! The connections of a SQL node as SHOW PROCESSLIST lists them, and how
//! KILL reaches one: every worker thread's connections register in one
//! list shared by the node.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Statement text shown without FULL is cut to this many characters, as
/// MySQL does.
pub const SHORT_INFO_CHARS: usize = 100;

/// One client connection.
pub struct Process {
    pub id: u32,
    pub user: String,
    pub host: String,
    state: Mutex<State>,
    killed: AtomicBool,
    kill: tokio::sync::Notify,
}

struct State {
    db: Option<String>,
    command: &'static str,
    since: Instant,
    info: Option<Arc<str>>,
}

/// What SHOW PROCESSLIST shows of a connection at one moment.
pub struct Snapshot {
    pub id: u32,
    pub user: String,
    pub host: String,
    pub db: Option<String>,
    pub command: &'static str,
    pub seconds: u64,
    pub info: Option<Arc<str>>,
}

impl Process {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection starts a command (`info`: the statement, if any).
    pub fn begin(&self, command: &'static str, info: Option<Arc<str>>) {
        let mut s = self.state();
        s.command = command;
        s.since = Instant::now();
        s.info = info;
    }

    /// The command is done; the connection waits for the next one.
    pub fn idle(&self, db: Option<&str>) {
        let mut s = self.state();
        s.command = "Sleep";
        s.since = Instant::now();
        s.info = None;
        if s.db.as_deref() != db {
            s.db = db.map(str::to_string);
        }
    }

    /// Asks the connection to close: at once when it waits for a command,
    /// else when its current statement is done.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill.notify_one();
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Completes when the connection is killed (at once if it was already).
    pub async fn killed(&self) {
        if !self.is_killed() {
            self.kill.notified().await;
        }
    }

    fn snapshot(&self) -> Snapshot {
        let s = self.state();
        Snapshot {
            id: self.id,
            user: self.user.clone(),
            host: self.host.clone(),
            db: s.db.clone(),
            command: s.command,
            seconds: s.since.elapsed().as_secs(),
            info: s.info.clone(),
        }
    }
}

/// The node's connections by id.
#[derive(Default)]
pub struct ProcessList {
    processes: Mutex<BTreeMap<u32, Arc<Process>>>,
}

/// A connection's place in the list; leaving it (dropping this) takes the
/// connection off.
pub struct Registered {
    pub process: Arc<Process>,
    list: Arc<ProcessList>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.list.lock().remove(&self.process.id);
    }
}

impl ProcessList {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Arc<Process>>> {
        self.processes.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn register(self: &Arc<Self>, id: u32, user: &str, host: &str, db: Option<&str>) -> Registered {
        let process = Arc::new(Process {
            id,
            user: user.to_string(),
            host: host.to_string(),
            state: Mutex::new(State {
                db: db.map(str::to_string),
                command: "Sleep",
                since: Instant::now(),
                info: None,
            }),
            killed: AtomicBool::new(false),
            kill: tokio::sync::Notify::new(),
        });
        let previous = self.lock().insert(id, process.clone());
        assert!(previous.is_none(), "connection id {id} registered twice");
        Registered { process, list: self.clone() }
    }

    pub fn get(&self, id: u32) -> Option<Arc<Process>> {
        self.lock().get(&id).cloned()
    }

    /// Every connection, by id.
    pub fn snapshot(&self) -> Vec<Snapshot> {
        let processes: Vec<Arc<Process>> = self.lock().values().cloned().collect();
        processes.iter().map(|p| p.snapshot()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_killed_connection_learns_it_whether_or_not_it_was_waiting() {
        let list = Arc::new(ProcessList::default());
        let a = list.register(1, "root", "127.0.0.1:5000", Some("db"));
        let b = list.register(2, "app", "127.0.0.1:5001", None);
        a.process.begin("Query", Some(Arc::from("SELECT 1")));
        let shown = list.snapshot();
        assert_eq!(shown.iter().map(|s| (s.id, s.command)).collect::<Vec<_>>(), vec![(1, "Query"), (2, "Sleep")]);
        assert_eq!(shown[0].info.as_deref(), Some("SELECT 1"));
        a.process.idle(Some("other"));
        assert_eq!(list.snapshot()[0].db.as_deref(), Some("other"));

        // Killed while busy: the next wait ends at once.
        list.get(1).expect("registered").kill();
        tokio::time::timeout(std::time::Duration::from_secs(5), a.process.killed()).await.expect("already killed");
        // Killed while waiting.
        let waiter = b.process.clone();
        let waiting = tokio::spawn(async move { waiter.killed().await });
        tokio::task::yield_now().await;
        list.get(2).expect("registered").kill();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.expect("woken").expect("joined");

        drop(a);
        assert!(list.get(1).is_none(), "a closed connection leaves the list");
        assert_eq!(list.snapshot().len(), 1);
    }
}
