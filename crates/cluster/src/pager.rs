//! The pager (NDB's PGMAN role for waiting requests): a client request
//! whose rows' disk parts are not in the page cache waits here while the
//! host reads their pages on another thread, so the shard thread goes on
//! with other requests; the request runs once every page it needs is
//! cached.
//!
//! Before a request runs, the shard lists the pages it needs (the disk
//! part of every row it reads or writes, found from the rows' memory
//! parts) and asks the tablespace for each (`DiskPages::request`). If all
//! are cached it runs at once. Otherwise it parks here: its cached pages
//! are pinned so that the reads it waits for cannot evict them, each read
//! is handed to the host (`Outbox::page_reads`) unless one is under way,
//! and every page that arrives is pinned for the requests waiting for it.
//! The last one wakes the request; it runs from the start (a parked
//! request did nothing yet, so running it again is running it once) and
//! its pins are released after.
//!
//! A request that runs again can still miss: a row written meanwhile may
//! have moved its disk part to another page. It then parks again. Paths
//! that do not park (replicas applying writes, commits, scans, restores)
//! read a missed page on the shard thread (`DiskPages::read_here`).

use crate::context::ConnId;
use latsdb_storage::pages::{DiskPages, SharedPages};
use latsdb_storage::tablespace::{PageRead, Want};
use latsdb_types::proto::KeyOp;

/// A request parked until its pages are cached.
#[derive(Debug)]
pub(crate) enum Waiting {
    /// A frame of committed reads (`Shard::on_lookups`).
    Lookups { conn: ConnId, req_id: u64, body: Vec<u8> },
    /// A client's batch of single-row operations (`ClientRequest::Batch`).
    Batch { conn: ConnId, req_id: u64, ops: Vec<KeyOp> },
}

impl Waiting {
    fn conn(&self) -> ConnId {
        match self {
            Waiting::Lookups { conn, .. } | Waiting::Batch { conn, .. } => *conn,
        }
    }
}

#[derive(Debug)]
struct Parked {
    work: Waiting,
    /// Pages not cached yet.
    missing: Vec<u32>,
    /// Pages this request pinned (released once it ran or was dropped).
    pinned: Vec<u32>,
}

/// A woken request, with the pins to release once it ran.
pub(crate) struct Woken {
    pub(crate) work: Waiting,
    pub(crate) pinned: Vec<u32>,
}

#[derive(Default)]
pub(crate) struct Pager {
    parked: Vec<Parked>,
    /// Requests that parked, for the report.
    pub(crate) parks: u64,
}

impl Pager {
    /// Whether a request that needs `pages` must park: parking is on and
    /// one of them is not cached.
    pub(crate) fn must_wait(shared: &SharedPages, pages: &[u32]) -> bool {
        if pages.is_empty() {
            return false;
        }
        let space = DiskPages::lock(shared);
        space.parks_on_miss() && !pages.iter().all(|p| space.tablespace().is_cached(*p))
    }

    /// Parks `work` (`must_wait` said so) until every page in `pages` is
    /// cached. Reads to start go to `reads`. If every page turns out to be
    /// readable at once (the operating system had it cached), `work` is
    /// handed back to run now, with its pins.
    pub(crate) fn park(
        &mut self,
        shared: &SharedPages,
        work: Waiting,
        pages: &[u32],
        reads: &mut Vec<PageRead>,
    ) -> Option<Woken> {
        let mut space = DiskPages::lock(shared);
        let (mut missing, mut pinned) = (Vec::new(), Vec::new());
        for &page in pages {
            if missing.contains(&page) || pinned.contains(&page) {
                continue;
            }
            match space.request(page) {
                Want::Cached => {
                    space.hold(page);
                    pinned.push(page);
                }
                Want::Coming => missing.push(page),
                Want::Read(read) => {
                    reads.push(read);
                    missing.push(page);
                }
            }
        }
        debug_assert!(pinned.iter().all(|p| !missing.contains(p)), "a page is both held and waited for");
        debug_assert!(
            missing.iter().all(|p| !space.tablespace().is_cached(*p)),
            "a request waits for a page that is cached"
        );
        if missing.is_empty() {
            return Some(Woken { work, pinned });
        }
        self.parks += 1;
        self.parked.push(Parked { work, missing, pinned });
        None
    }

    /// The host read a page; answers the requests that have all their
    /// pages now. A read that was overtaken (its page read another way
    /// meanwhile) still wakes its waiters if the page is cached; if it is
    /// not (it was evicted again), the page is asked for again.
    pub(crate) fn on_read(
        &mut self,
        shared: &SharedPages,
        read: PageRead,
        bytes: Box<[u8]>,
        reads: &mut Vec<PageRead>,
    ) -> Vec<Woken> {
        let mut space = DiskPages::lock(shared);
        space.on_host_read(read, bytes);
        let page = read.page;
        if !self.parked.iter().any(|p| p.missing.contains(&page)) {
            return Vec::new();
        }
        if !space.tablespace().is_cached(page) {
            match space.request(page) {
                // Read at once: the waiters wake below.
                Want::Cached => {}
                Want::Coming => return Vec::new(),
                Want::Read(again) => {
                    reads.push(again);
                    return Vec::new();
                }
            }
        }
        let mut woken = Vec::new();
        let mut i = 0;
        while i < self.parked.len() {
            let parked = &mut self.parked[i];
            if let Some(at) = parked.missing.iter().position(|p| *p == page) {
                parked.missing.swap_remove(at);
                space.hold(page);
                parked.pinned.push(page);
                if parked.missing.is_empty() {
                    // In the order they parked: requests for the same row
                    // run in the order they arrived.
                    let Parked { work, pinned, .. } = self.parked.remove(i);
                    woken.push(Woken { work, pinned });
                    continue;
                }
            }
            i += 1;
        }
        debug_assert!(
            self.parked.iter().all(|p| !p.missing.contains(&page)),
            "a request still waits for page {page}, which arrived"
        );
        woken
    }

    /// Releases the pins of a request that ran.
    pub(crate) fn release(shared: &SharedPages, pinned: &[u32]) {
        let mut space = DiskPages::lock(shared);
        for page in pinned {
            space.unpin(*page);
        }
    }

    /// Drops the parked requests of a closed connection.
    pub(crate) fn on_disconnect(&mut self, shared: &SharedPages, conn: ConnId) {
        let mut i = 0;
        while i < self.parked.len() {
            if self.parked[i].work.conn() == conn {
                let parked = self.parked.remove(i);
                Self::release(shared, &parked.pinned);
            } else {
                i += 1;
            }
        }
    }

    /// Every parked request waits for a page and holds a pin on each page
    /// it has. (A page it waits for may be cached already: read on the
    /// shard thread by a path that does not park. The host's read of it
    /// still answers, and wakes the request.)
    pub(crate) fn check(&self, shared: &SharedPages) {
        let space = DiskPages::lock(shared);
        for parked in &self.parked {
            assert!(!parked.missing.is_empty(), "a parked request waits for nothing: {:?}", parked.work);
            for page in &parked.pinned {
                assert!(space.tablespace().is_cached(*page), "a parked request's pinned page {page} left the cache");
            }
        }
    }
}
