//! The cluster log (NDB's cluster log): what happened to the cluster as a
//! whole, in one place for the operator. The management server records its
//! own decisions (nodes started, stopped and lost, views, schema changes,
//! memory alarms) and what process managers report (a data node restarted
//! by its angel, or left down). Each event is appended to `cluster.log` in
//! the management server's data folder and kept in memory for `latsdb mgm
//! log`, which shows the newest ones.

use latsdb_types::proto::{ClusterEvent, Severity};
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Events kept in memory for `latsdb mgm log`; the file keeps them all.
pub const KEPT: usize = 2000;
/// A reported event's source and text are cut to these many bytes: they
/// come from other processes and must not grow the log without bound.
const MAX_SOURCE: usize = 100;
const MAX_TEXT: usize = 2000;

pub struct ClusterLog {
    recent: VecDeque<ClusterEvent>,
    /// Events recorded so far by severity (info, warning, alert).
    counts: [u64; 3],
    file: Option<(PathBuf, std::fs::File)>,
    /// The file could not be written once: said once on stderr, not per event.
    file_failed: bool,
}

impl ClusterLog {
    /// A log that appends to `cluster.log` in `dir` (None: memory only).
    pub fn open(dir: Option<&Path>) -> latsdb_types::Result<ClusterLog> {
        let file = match dir {
            Some(dir) => {
                let path = dir.join("cluster.log");
                let file = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(|e| {
                    latsdb_types::DbError::io(&format!("opening the cluster log {}", path.display()), e)
                })?;
                Some((path, file))
            }
            None => None,
        };
        Ok(ClusterLog { recent: VecDeque::new(), counts: [0; 3], file, file_failed: false })
    }

    /// Records an event at `unix_ms` and returns it as recorded.
    pub fn record(&mut self, unix_ms: u64, severity: Severity, source: &str, text: &str) -> ClusterEvent {
        let event = ClusterEvent {
            unix_ms,
            severity,
            source: cut(source, MAX_SOURCE).replace(['\n', '\r'], " "),
            // One event is one line of the file.
            text: cut(text, MAX_TEXT).replace(['\n', '\r'], " "),
        };
        if let Some((path, file)) = &mut self.file {
            if let Err(e) = writeln!(file, "{event}") {
                if !self.file_failed {
                    crate::log("mgmd", format!("cannot write the cluster log {}: {e}", path.display()));
                    self.file_failed = true;
                }
            }
        }
        self.counts[severity as usize] += 1;
        if self.recent.len() == KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(event.clone());
        debug_assert!(self.recent.len() <= KEPT);
        event
    }

    /// Events recorded so far by severity: info, warning, alert.
    pub fn counts(&self) -> [u64; 3] {
        self.counts
    }

    /// The newest `last` events, oldest first.
    pub fn last(&self, last: usize) -> Vec<ClusterEvent> {
        let skip = self.recent.len().saturating_sub(last);
        self.recent.iter().skip(skip).cloned().collect()
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a
/// character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_events_and_writes_every_one_as_a_line() {
        let dir = std::env::temp_dir().join(format!("latsdb-cluster-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join("cluster.log"));
        let mut log = ClusterLog::open(Some(&dir)).unwrap();
        for i in 0..KEPT + 5 {
            log.record(1_764_280_801_123 + i as u64, Severity::Info, "mgmd", &format!("event {i}\nsecond line"));
        }
        let last = log.last(3);
        assert_eq!(last.len(), 3);
        assert_eq!(last[2].text, format!("event {} second line", KEPT + 4));
        assert_eq!(log.last(usize::MAX).len(), KEPT, "memory keeps at most KEPT events");
        let file = std::fs::read_to_string(dir.join("cluster.log")).unwrap();
        assert_eq!(file.lines().count(), KEPT + 5, "the file keeps every event, one per line");
        assert!(file.starts_with("2025-11-27 22:00:01.123 UTC INFO    mgmd: event 0 second line"), "{file:.80}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reported_event_is_cut_to_its_bounds_on_a_character_boundary() {
        let mut log = ClusterLog::open(None).unwrap();
        let event = log.record(0, Severity::Alert, &"é".repeat(80), &"x".repeat(5000));
        assert!(event.source.len() <= MAX_SOURCE && event.source.chars().all(|c| c == 'é'));
        assert_eq!(event.text.len(), MAX_TEXT);
    }
}
