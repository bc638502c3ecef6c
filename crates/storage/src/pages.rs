//! A shard's disk pages: its [`Tablespace`] (page format and cache) joined
//! to the file that holds the pages, behind the narrow [`PageFile`]
//! interface, so that the data node reads and writes a real file and the
//! simulator and the tests a map in memory.
//!
//! Two ways to wait for a page the cache misses:
//! - **Parked** (asynchronous reads on): the shard asks for the page
//!   (`request`) before it runs an operation, parks the operation, and the
//!   host reads the page on another thread and hands it back
//!   (`on_host_read`); the shard thread goes on meanwhile.
//! - **Here and now**: any access that still misses (every access with
//!   asynchronous reads off, and the few paths that do not park) reads the
//!   page on the caller's thread.
//!
//! Every partition of the shard that has disk columns shares one
//! `DiskPages` (through [`SharedPages`]), so the cache serves whichever
//! table is hot.

use crate::tablespace::{DiskRef, PageIo, PageRead, Tablespace, Want, PAGE_BYTES};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The file of a shard's pages. Page `n` is bytes `n * PAGE_BYTES ..` of
/// it; a page never written reads as zeros.
///
/// An implementation that cannot read or write stops the data node
/// (`fail`): after a failed write the file no longer holds what the
/// cache wrote back, and the node's peers hold every committed row.
pub trait PageFile: Send {
    /// Reads page `page` into `out` (`PAGE_BYTES` long).
    fn read(&mut self, page: u32, out: &mut [u8]);
    /// Reads page `page` into `out` only if that cannot wait for the
    /// device (the operating system has it cached); false, having read
    /// nothing usable, otherwise. A request whose page is read this way
    /// does not park.
    fn read_without_waiting(&mut self, _page: u32, _out: &mut [u8]) -> bool {
        false
    }
    /// Writes a whole page.
    fn write(&mut self, page: u32, bytes: &[u8]);
    /// Stops the node because the pages cannot be trusted; `why` says what
    /// was found.
    fn fail(&mut self, why: &str) -> !;
}

/// Pages kept in memory: a shard without a data directory, the simulator
/// and the tests.
#[derive(Default)]
pub struct MemoryPages {
    pages: HashMap<u32, Box<[u8]>>,
    /// Decides which reads find their page "in the operating system's
    /// cache" (`read_without_waiting`): none while 0.
    cached_state: u64,
}

impl MemoryPages {
    /// Pages of which about one read in three can be read without waiting,
    /// chosen by a generator seeded with `seed` (the simulator's seeds
    /// drive both ways of reading a page).
    pub fn sometimes_cached(seed: u64) -> MemoryPages {
        MemoryPages { pages: HashMap::new(), cached_state: seed | 1 }
    }
}

impl PageFile for MemoryPages {
    fn read(&mut self, page: u32, out: &mut [u8]) {
        match self.pages.get(&page) {
            Some(bytes) => out.copy_from_slice(bytes),
            None => out.fill(0),
        }
    }

    fn read_without_waiting(&mut self, page: u32, out: &mut [u8]) -> bool {
        if self.cached_state == 0 {
            return false;
        }
        // xorshift64: deterministic, so a seed replays.
        let mut x = self.cached_state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.cached_state = x;
        if !x.is_multiple_of(3) {
            return false;
        }
        self.read(page, out);
        true
    }

    fn write(&mut self, page: u32, bytes: &[u8]) {
        self.pages.insert(page, bytes.into());
    }

    fn fail(&mut self, why: &str) -> ! {
        panic!("the in-memory page file failed: {why}")
    }
}

/// Sizes of a shard's tablespace, from the data node's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagesConfig {
    /// Pages the cache holds.
    pub cache_pages: usize,
    /// Bytes the tablespace file may grow to; 0 is unlimited. Writes that
    /// need new pages beyond it fail with `TableFull`.
    pub limit_bytes: u64,
    /// The host reads and writes the file with `O_DIRECT` (the state
    /// machines never look at it).
    pub direct_io: bool,
}

impl Default for PagesConfig {
    fn default() -> Self {
        PagesConfig { cache_pages: 1024, limit_bytes: 0, direct_io: false }
    }
}

/// A tablespace and its file.
pub struct DiskPages {
    space: Tablespace,
    file: Box<dyn PageFile>,
    limit_bytes: u64,
    /// Operations park on a miss and the host reads pages on its own.
    parking: bool,
    /// Pages read on the shard thread (with `parking` on, what parking does
    /// not cover yet).
    read_here: u64,
    read_at_once: u64,
}

/// The handle the partitions of one shard share. Only the shard's thread
/// locks it, so the lock is never contended.
pub type SharedPages = Arc<Mutex<DiskPages>>;

impl DiskPages {
    pub fn new(config: PagesConfig, file: Box<dyn PageFile>) -> DiskPages {
        DiskPages {
            space: Tablespace::new(config.cache_pages),
            file,
            limit_bytes: config.limit_bytes,
            parking: false,
            read_here: 0,
            read_at_once: 0,
        }
    }

    /// Turns parking on: the host reads pages asked for by `request` on
    /// another thread (a data node with a tablespace file, the simulator).
    pub fn park_on_miss(&mut self) {
        self.parking = true;
    }

    pub fn parks_on_miss(&self) -> bool {
        self.parking
    }

    /// Pages read on the shard thread itself, for the report.
    pub fn read_here(&self) -> u64 {
        self.read_here
    }

    /// Asks for `page` to be cached (see `Tablespace::request`); with
    /// parking off every page counts as cached (an access reads it).
    pub fn request(&mut self, page: u32) -> Want {
        if !self.parking {
            return Want::Cached;
        }
        match self.space.request(page) {
            Want::Read(read) => {
                // A page the operating system has cached is read at once:
                // handing it to another thread would cost more than the copy.
                let mut bytes = vec![0u8; PAGE_BYTES].into_boxed_slice();
                if !self.file.read_without_waiting(page, &mut bytes) {
                    return Want::Read(read);
                }
                self.read_at_once += 1;
                let fresh = self.on_host_read(read, bytes);
                debug_assert!(fresh, "page {page} was asked for a moment ago");
                Want::Cached
            }
            want => want,
        }
    }

    /// Pages the host would have read off the shard thread that the
    /// operating system had cached (read at once instead).
    pub fn read_at_once(&self) -> u64 {
        self.read_at_once
    }

    /// The host's answer to a `Want::Read`; false if it was overtaken. A
    /// page that fails its checksum stops the node.
    pub fn on_host_read(&mut self, read: PageRead, bytes: Box<[u8]>) -> bool {
        let fresh = match self.space.on_host_read(read, bytes) {
            Ok(fresh) => fresh,
            Err(e) => self.file.fail(&format!("page {} of the tablespace cannot be used: {e:?}", read.page)),
        };
        // Installing it may have evicted a dirty page: written back now,
        // before anyone can ask the host to read that page again.
        self.do_io();
        fresh
    }

    /// Reads a page from the file as the host's reader does (the
    /// simulator answers `Want::Read`s with it).
    pub fn read_file(&mut self, page: u32) -> Box<[u8]> {
        let mut bytes = vec![0u8; PAGE_BYTES].into_boxed_slice();
        self.file.read(page, &mut bytes);
        bytes
    }

    /// Keeps a cached page in the cache until `unpin`, without counting a
    /// use (`Tablespace::hold`); the page must be cached.
    pub fn hold(&mut self, page: u32) {
        self.space.hold(page)
    }

    pub fn unpin(&mut self, page: u32) {
        self.space.unpin(page);
        // Pages evicted as the cache shrinks back to its size are written.
        self.do_io();
    }

    pub fn shared(self) -> SharedPages {
        Arc::new(Mutex::new(self))
    }

    /// Locks a shared handle; a panic while it was held (which stops the
    /// node anyway) does not hide the pages from the checker.
    pub fn lock(shared: &SharedPages) -> MutexGuard<'_, DiskPages> {
        shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn tablespace(&self) -> &Tablespace {
        &self.space
    }

    /// Whether a record of `growth` more bytes (with its slot) fits under
    /// the configured limit: in a new page, or in the free bytes of a page
    /// the tablespace has.
    pub fn has_room(&self, growth: u64) -> bool {
        if self.limit_bytes == 0 {
            return true;
        }
        !self.at_limit() || self.space.largest_free() as u64 >= growth
    }

    /// Whether another page would take the file past its limit.
    fn at_limit(&self) -> bool {
        let file_bytes = self.space.pages() as u64 * PAGE_BYTES as u64;
        self.limit_bytes > 0 && file_bytes + PAGE_BYTES as u64 > self.limit_bytes
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Appends the record at `at` to `out`.
    pub fn read_into(&mut self, at: DiskRef, out: &mut Vec<u8>) {
        self.read_with(at, |record| out.extend_from_slice(record))
    }

    /// Hands the record at `at` to `f`, in its page (no copy).
    pub fn read_with<R>(&mut self, at: DiskRef, f: impl FnOnce(&[u8]) -> R) -> R {
        if self.space.get(at).is_err() {
            self.do_io();
        }
        match self.space.get(at) {
            Ok(record) => f(record),
            Err(miss) => panic!("page {} is not cached right after it was read", miss.0),
        }
    }

    pub fn insert(&mut self, record: &[u8]) -> DiskRef {
        // At the limit, the tablespace would start a new page rather than
        // read one with room: read it first (`has_room` counted it).
        let room = if self.at_limit() { self.space.page_with_room(record.len() + 4) } else { None };
        if let Some(page) = room {
            if self.space.pin(page).is_err() {
                self.do_io();
                self.space.pin(page).expect("the page was read just now");
            }
        }
        let at = self.space.insert(record);
        if let Some(page) = room {
            self.space.unpin(page);
        }
        self.do_io();
        at
    }

    /// Replaces the record at `at`; the answer is where it lives now.
    pub fn update(&mut self, at: DiskRef, record: &[u8]) -> DiskRef {
        let moved = match self.space.update(at, record) {
            Ok(moved) => moved,
            Err(_) => {
                self.do_io();
                self.space.update(at, record).expect("the page was read just now")
            }
        };
        self.do_io();
        moved
    }

    pub fn delete(&mut self, at: DiskRef) {
        if self.space.delete(at).is_err() {
            self.do_io();
            self.space.delete(at).expect("the page was read just now");
        }
        self.do_io();
    }

    /// Writes every dirty page to the file.
    pub fn flush(&mut self) {
        self.space.flush();
        self.do_io();
    }

    /// Carries out the tablespace's queued reads and writes, in order.
    fn do_io(&mut self) {
        loop {
            let io = self.space.take_io();
            if io.is_empty() {
                return;
            }
            for op in io {
                match op {
                    PageIo::Read { page } => {
                        self.read_here += 1;
                        let bytes = self.read_file(page);
                        if let Err(e) = self.space.on_read(page, bytes) {
                            self.file.fail(&format!("page {page} of the tablespace cannot be used: {e:?}"));
                        }
                    }
                    PageIo::Write { page, bytes } => self.file.write(page, &bytes),
                }
            }
        }
    }

    pub fn check(&self) {
        self.space.check();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_eviction_through_the_file() {
        let mut pages =
            DiskPages::new(PagesConfig { cache_pages: 4, ..Default::default() }, Box::<MemoryPages>::default());
        let records: Vec<Vec<u8>> = (0..200u32).map(|i| vec![i as u8; 1000 + i as usize]).collect();
        let mut at: Vec<DiskRef> = records.iter().map(|r| pages.insert(r)).collect();
        assert!(pages.tablespace().pages() > 4, "the records span more pages than the cache holds");
        for (i, r) in records.iter().enumerate() {
            let mut out = Vec::new();
            pages.read_into(at[i], &mut out);
            assert_eq!(&out, r, "record {i}");
        }
        // Grow every third record so that some move to other pages.
        for i in (0..records.len()).step_by(3) {
            at[i] = pages.update(at[i], &vec![7u8; 3000]);
        }
        for i in (1..records.len()).step_by(3) {
            pages.delete(at[i]);
        }
        pages.check();
        for i in 0..records.len() {
            let mut out = Vec::new();
            match i % 3 {
                0 => {
                    pages.read_into(at[i], &mut out);
                    assert_eq!(out, vec![7u8; 3000]);
                }
                1 => {}
                _ => {
                    pages.read_into(at[i], &mut out);
                    assert_eq!(out, records[i]);
                }
            }
        }
        assert!(pages.tablespace().stats().evictions > 0 && pages.tablespace().stats().reads > 0);
        pages.check();
    }

    #[test]
    fn a_limited_tablespace_says_when_it_has_no_room() {
        let limit = 3 * PAGE_BYTES as u64;
        let mut pages = DiskPages::new(
            PagesConfig { cache_pages: 8, limit_bytes: limit, ..Default::default() },
            Box::<MemoryPages>::default(),
        );
        let record = vec![1u8; 5000];
        let mut stored = 0;
        while pages.has_room(record.len() as u64 + 4) {
            pages.insert(&record);
            stored += 1;
            assert!(stored < 100, "the limit never stopped inserts");
        }
        assert!(pages.tablespace().pages() as u64 * PAGE_BYTES as u64 <= limit);
        assert_eq!(stored, 9, "three records of 5,000 bytes fit a 16 KiB page");
    }

    #[test]
    fn at_its_limit_a_tablespace_reuses_room_in_pages_the_cache_let_go() {
        let limit = 8 * PAGE_BYTES as u64;
        let mut pages = DiskPages::new(
            PagesConfig { cache_pages: 4, limit_bytes: limit, ..Default::default() },
            Box::<MemoryPages>::default(),
        );
        let record = vec![1u8; 5000];
        let at: Vec<DiskRef> = (0..24).map(|_| pages.insert(&record)).collect();
        assert_eq!(pages.tablespace().pages(), 8);
        assert!(!pages.has_room(5004), "eight pages of three records are full");
        pages.delete(at[0]);
        // Reading the records of the last pages pushes page 0 out again.
        for &later in &at[12..] {
            pages.read_into(later, &mut Vec::new());
        }
        assert!(pages.has_room(5004));
        pages.insert(&record);
        assert_eq!(pages.tablespace().pages(), 8, "an insert at the limit started a new page");
        assert!(!pages.has_room(5004));
        pages.check();
    }
}
