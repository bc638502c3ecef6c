//! The tablespace of a shard: the pages that hold the disk-resident parts
//! of rows (columns declared `STORAGE DISK`), and the page cache in front
//! of them.
//!
//! Sans-I/O, like the rest of this crate: the tablespace never reads or
//! writes a file itself. An operation whose page is not in the cache
//! answers `Err(Miss(page))` and queues a read of it (`take_io`); the
//! caller parks the operation, the host carries out the queued `PageIo`s
//! *in order* (a read of a page queued after its write-back sees the
//! written bytes) and hands each page read back (`on_read`); the caller
//! then runs the operation again. A dirty page evicted from the cache is
//! queued for writing back. So the shard thread never waits for the disk.
//!
//! # Page format (all integers little-endian)
//!
//! ```text
//! offset        size  field
//! 0             4     checksum: low 32 bits of xxh3-64 of bytes 4..PAGE_BYTES
//! 4             2     slots: entries in the slot directory
//! 6             2     top: end of the record area (records lie in 16..top)
//! 8             2     live: bytes of live records (for free-space bookkeeping)
//! 10            6     zero
//! 16 .. top           records, each the disk part of one row
//! top .. dir          free
//! dir .. PAGE_BYTES   slot directory, slot i at PAGE_BYTES - 4 (i + 1):
//!                     [u16 offset][u16 length]; offset 0 is a free slot
//! ```
//!
//! A record is found by `DiskRef { page, slot }` (6 bytes in the row's
//! memory part). Deleting or shrinking a record gives its bytes back to the
//! page: a record that does not fit at `top` compacts the page first. A
//! page with no live record is free again. Page 0 of a file is an ordinary
//! page; a page never written reads as zeros, which is an empty page (its
//! checksum is checked only once it has slots).
//!
//! # Eviction
//!
//! Scan-resistant (2Q): a page read for the first time enters a probation
//! queue (first in, first out); a page hit again while there, or read again
//! soon after it left (it is remembered among the recently evicted), goes to
//! the protected set, evicted least recently used. Probation is evicted
//! first while it holds more than a quarter of the cache, so a scan that
//! touches every page once cannot push the hot pages out.

use std::collections::{BTreeSet, HashMap};
use xxhash_rust::xxh3::xxh3_64;

/// Bytes of a page. 16 KiB holds three 4 KiB rows (YCSB's records) with
/// room to grow; the choice is measured against 8 and 32 KiB in the
/// benchmarks of disk columns.
pub const PAGE_BYTES: usize = 16 << 10;
const HEADER: usize = 16;
const SLOT: usize = 4;
/// The largest disk part of one row (a record and its slot fill a page).
pub const MAX_RECORD: usize = PAGE_BYTES - HEADER - SLOT;

/// Where a row's disk part lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DiskRef {
    pub page: u32,
    pub slot: u16,
}

impl DiskRef {
    /// Bytes of `encode`.
    pub const ENCODED: usize = 6;

    pub fn encode(self) -> [u8; Self::ENCODED] {
        let mut out = [0; Self::ENCODED];
        out[..4].copy_from_slice(&self.page.to_le_bytes());
        out[4..].copy_from_slice(&self.slot.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8; Self::ENCODED]) -> DiskRef {
        DiskRef {
            page: u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            slot: u16::from_le_bytes([bytes[4], bytes[5]]),
        }
    }
}

/// The page an operation needs that is not in the cache (its read is
/// queued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Miss(pub u32);

/// Page I/O for the host, to be carried out in order.
#[derive(Debug, PartialEq, Eq)]
pub enum PageIo {
    /// Read the page and hand it to `on_read`.
    Read { page: u32 },
    /// Write the page's bytes (a dirty page leaving the cache, or a flush).
    Write { page: u32, bytes: Box<[u8]> },
}

/// Why a page read back cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub enum PageError {
    /// Its checksum does not match: the file is corrupt (the node must stop).
    Corrupt { page: u32 },
    /// A page that was not asked for, or of the wrong size.
    Unexpected { page: u32 },
}

/// A read of a page the host carries out on its own (asynchronously,
/// `Tablespace::request`), answered with `on_host_read`. The ticket tells
/// an answer apart from an older read of the same page that was
/// overtaken (the page was read another way meanwhile, changed and
/// written back): such an answer is stale and dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageRead {
    pub page: u32,
    pub ticket: u64,
}

/// What `Tablespace::request` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// The page is in the cache.
    Cached,
    /// A read of it is under way already.
    Coming,
    /// Nobody reads it yet: the host must, and answer with this.
    Read(PageRead),
}

/// An unanswered read.
#[derive(Clone, Copy, Debug)]
struct Reading {
    ticket: u64,
    /// Handed to the host (`request`) rather than queued in `io`.
    by_host: bool,
}

/// Counters for reports (`mgm report-memory`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Accesses served from the cache without waiting for a read.
    pub hits: u64,
    /// Accesses that had to wait for their page to be read.
    pub misses: u64,
    pub reads: u64,
    pub writes: u64,
    pub evictions: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    Probation,
    Protected,
}

struct Frame {
    bytes: Box<[u8]>,
    dirty: bool,
    pins: u32,
    queue: Queue,
    /// Last use, for least-recently-used eviction of protected pages.
    used: u64,
    /// Its key in its queue: when it entered the queue. A protected page
    /// is not moved in its queue when used (a hit costs no ordered-set
    /// update); eviction moves a page used since it was queued to the back
    /// first, so the protected set is still evicted least recently used.
    queued: u64,
    /// Used since it entered the cache. The operation whose miss read the
    /// page runs again once it is here: that is its first use, not a
    /// second touch.
    used_once: bool,
}

/// Maps keyed by page number, hashed by foldhash (every access of a row's
/// disk part looks its page up; SipHash's resistance to chosen keys buys
/// nothing for page numbers the tablespace hands out itself).
type PageMap<V> = HashMap<u32, V, foldhash::fast::RandomState>;

/// The pages of one shard and its page cache.
pub struct Tablespace {
    capacity: usize,
    frames: PageMap<Frame>,
    /// Probation pages by when they entered (first in, first out).
    probation: BTreeSet<(u64, u32)>,
    /// Protected pages by last use.
    protected: BTreeSet<(u64, u32)>,
    /// Pages recently evicted from probation (a read of one is a second touch).
    ghosts: BTreeSet<(u64, u32)>,
    /// The same pages, with when they left, to look one up.
    ghost_since: PageMap<u64>,
    /// Reads asked for and not yet answered, by page.
    reading: PageMap<Reading>,
    /// The ticket of the next read handed to the host.
    next_ticket: u64,
    io: Vec<PageIo>,
    /// Pages with free bytes, by (free bytes, page); pages past the end are new.
    free: BTreeSet<(u16, u32)>,
    /// Free bytes of every page, by page number.
    page_free: Vec<u16>,
    /// The sum of `page_free`.
    free_total: u64,
    clock: u64,
    stats: CacheStats,
}

impl Tablespace {
    /// A tablespace with a cache of `cache_pages` pages (at least one).
    pub fn new(cache_pages: usize) -> Tablespace {
        let capacity = cache_pages.max(1);
        Tablespace {
            capacity,
            frames: PageMap::with_capacity_and_hasher(capacity, Default::default()),
            probation: BTreeSet::new(),
            protected: BTreeSet::new(),
            ghosts: BTreeSet::new(),
            ghost_since: PageMap::default(),
            reading: PageMap::default(),
            next_ticket: 1,
            io: Vec::new(),
            free: BTreeSet::new(),
            page_free: Vec::new(),
            free_total: 0,
            clock: 0,
            stats: CacheStats::default(),
        }
    }

    /// Pages the tablespace spans (the file's length in pages).
    pub fn pages(&self) -> u32 {
        self.page_free.len() as u32
    }

    /// Bytes held by live records and their slots.
    pub fn used_bytes(&self) -> u64 {
        self.pages() as u64 * (PAGE_BYTES - HEADER) as u64 - self.free_total
    }

    /// Free bytes in the pages the tablespace spans.
    pub fn free_bytes(&self) -> u64 {
        self.free_total
    }

    /// The most free bytes of any one page (a record needs them in one).
    pub fn largest_free(&self) -> u16 {
        self.free.last().map_or(0, |(free, _)| *free)
    }

    /// A page with at least `need` free bytes, cached or not (the one with
    /// the least that has them).
    pub fn page_with_room(&self, need: usize) -> Option<u32> {
        let need = u16::try_from(need).ok()?;
        self.free.range((need, 0)..).next().map(|(_, page)| *page)
    }

    /// Pages in the cache now.
    pub fn cached_pages(&self) -> usize {
        self.frames.len()
    }

    pub fn stats(&self) -> CacheStats {
        // An access that missed is counted again as a use once its page is
        // read and the access runs again: it is no hit.
        CacheStats { hits: self.stats.hits.saturating_sub(self.stats.misses), ..self.stats }
    }

    /// Whether `page` is in the cache now.
    pub fn is_cached(&self, page: u32) -> bool {
        self.frames.contains_key(&page)
    }

    /// Asks for `page` to be in the cache, for a caller that parks its
    /// operation until it is (the host reads it on another thread).
    pub fn request(&mut self, page: u32) -> Want {
        assert!(
            (page as usize) < self.page_free.len(),
            "page {page} is beyond the tablespace's {} pages",
            self.pages()
        );
        if self.frames.contains_key(&page) {
            return Want::Cached;
        }
        if self.reading.contains_key(&page) {
            return Want::Coming;
        }
        // The host reads the file now: a write-back of this page still
        // queued would make it read an old copy.
        assert!(
            !self.io.iter().any(|io| matches!(io, PageIo::Write { page: p, .. } if *p == page)),
            "page {page} is asked for while its write-back is still queued"
        );
        self.stats.misses += 1;
        let ticket = self.new_ticket();
        let replaced = self.reading.insert(page, Reading { ticket, by_host: true });
        debug_assert!(replaced.is_none(), "page {page} was asked for twice");
        Want::Read(PageRead { page, ticket })
    }

    /// The host's answer to a `Want::Read`. `Ok(false)`: the read was
    /// overtaken and its bytes are dropped.
    pub fn on_host_read(&mut self, read: PageRead, bytes: Box<[u8]>) -> Result<bool, PageError> {
        match self.reading.get(&read.page) {
            Some(r) if r.by_host && r.ticket == read.ticket => {}
            _ => return Ok(false),
        }
        self.on_read(read.page, bytes).map(|()| true)
    }

    fn new_ticket(&mut self) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        ticket
    }

    /// The I/O queued since the last call, in the order it must be done.
    pub fn take_io(&mut self) -> Vec<PageIo> {
        std::mem::take(&mut self.io)
    }

    /// The record at `at`.
    pub fn get(&mut self, at: DiskRef) -> Result<&[u8], Miss> {
        self.touch(at.page)?;
        let frame = &self.frames[&at.page];
        let (offset, len) = slot(&frame.bytes, at.slot);
        assert!(offset != 0, "a row refers to the free slot {at:?}");
        Ok(&frame.bytes[offset..offset + len])
    }

    /// Starts loading the slot of the record at `at` if its page is cached
    /// (batched reads, first of two steps; counts nothing).
    pub fn prefetch_slot(&self, at: DiskRef) {
        if let Some(frame) = self.frames.get(&at.page) {
            let slot = PAGE_BYTES - SLOT * (at.slot as usize + 1);
            crate::rowmap::prefetch(frame.bytes.as_ptr().wrapping_add(slot), crate::rowmap::Level::L1);
        }
    }

    /// Starts loading the record at `at` if its page is cached (batched
    /// reads, second step: its slot should be cached by now).
    pub fn prefetch_record(&self, at: DiskRef) {
        if let Some(frame) = self.frames.get(&at.page) {
            let (offset, len) = slot(&frame.bytes, at.slot);
            let start = frame.bytes.as_ptr().wrapping_add(offset);
            for line in 0..len.div_ceil(64).min(4) {
                crate::rowmap::prefetch(start.wrapping_add(line * 64), crate::rowmap::Level::L1);
            }
        }
    }

    /// Stores a new record; its page is one in the cache with room, or a
    /// new page (never a read: an insert does not wait for the disk).
    pub fn insert(&mut self, record: &[u8]) -> DiskRef {
        assert!(record.len() <= MAX_RECORD, "a record of {} bytes is larger than a page holds", record.len());
        let need = (record.len() + SLOT) as u16;
        let cached = self.free.range((need, 0)..).find(|(_, page)| self.frames.contains_key(page)).map(|(_, p)| *p);
        let page = match cached {
            Some(page) => {
                self.touch(page).expect("the page is in the cache");
                page
            }
            // A new page is not a second touch: it stays on probation.
            None => self.new_page(),
        };
        let slot = self.place(page, record, None);
        DiskRef { page, slot }
    }

    /// Replaces the record at `at`; it moves to another page (a new
    /// `DiskRef`) only when its page cannot hold the new length.
    pub fn update(&mut self, at: DiskRef, record: &[u8]) -> Result<DiskRef, Miss> {
        assert!(record.len() <= MAX_RECORD, "a record of {} bytes is larger than a page holds", record.len());
        self.touch(at.page)?;
        let (_, old_len) = slot(&self.frames[&at.page].bytes, at.slot);
        let room = self.page_free[at.page as usize] as usize + old_len;
        if record.len() <= room {
            self.place(at.page, record, Some(at.slot));
            return Ok(at);
        }
        self.delete(at)?;
        Ok(self.insert(record))
    }

    /// Frees the record at `at`; its bytes go back to the page.
    pub fn delete(&mut self, at: DiskRef) -> Result<(), Miss> {
        self.touch(at.page)?;
        let frame = self.frames.get_mut(&at.page).expect("touched above");
        let (offset, len) = slot(&frame.bytes, at.slot);
        assert!(offset != 0, "deleting the free slot {at:?}");
        set_slot(&mut frame.bytes, at.slot, 0, 0);
        let live = get_u16(&frame.bytes, 8) as usize - len;
        put_u16(&mut frame.bytes, 8, live as u16);
        frame.dirty = true;
        self.set_free(at.page);
        Ok(())
    }

    /// Keeps `page` in the cache until `unpin` (a parked operation's pages,
    /// so that reading one does not evict another).
    pub fn pin(&mut self, page: u32) -> Result<(), Miss> {
        self.touch(page)?;
        self.frames.get_mut(&page).expect("touched above").pins += 1;
        Ok(())
    }

    /// Pins a cached page without counting a use: a parked request holds
    /// its pages this way, and its run is the one use (a pin that touched
    /// would promote a page read once out of probation, and count a hit).
    pub fn hold(&mut self, page: u32) {
        let frame = self.frames.get_mut(&page).unwrap_or_else(|| panic!("page {page} is held but not cached"));
        frame.pins += 1;
    }

    pub fn unpin(&mut self, page: u32) {
        let frame = self.frames.get_mut(&page).expect("an unpinned page is in the cache");
        assert!(frame.pins > 0, "page {page} unpinned more often than pinned");
        frame.pins -= 1;
        // Pinned pages may have held the cache over its size.
        while self.frames.len() > self.capacity && self.evict_one() {}
    }

    /// A page the host read, as asked by a queued `PageIo::Read`.
    pub fn on_read(&mut self, page: u32, bytes: Box<[u8]>) -> Result<(), PageError> {
        if self.reading.remove(&page).is_none() || bytes.len() != PAGE_BYTES {
            return Err(PageError::Unexpected { page });
        }
        debug_assert!(!self.frames.contains_key(&page), "page {page} was read while it was cached");
        if get_u16(&bytes, 4) > 0 && checksum(&bytes) != u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) {
            return Err(PageError::Corrupt { page });
        }
        let mut bytes = bytes;
        if get_u16(&bytes, 4) == 0 {
            // Never written (or emptied): an empty page.
            bytes.fill(0);
            put_u16(&mut bytes, 6, HEADER as u16);
        }
        self.stats.reads += 1;
        let second_touch = match self.ghost_since.remove(&page) {
            Some(since) => self.ghosts.remove(&(since, page)),
            None => false,
        };
        self.install(page, bytes, if second_touch { Queue::Protected } else { Queue::Probation });
        Ok(())
    }

    /// Queues every dirty page for writing, and marks them clean.
    pub fn flush(&mut self) {
        let mut dirty: Vec<u32> = self.frames.iter().filter(|(_, f)| f.dirty).map(|(p, _)| *p).collect();
        dirty.sort_unstable();
        for page in dirty {
            let frame = self.frames.get_mut(&page).expect("listed above");
            frame.dirty = false;
            seal(&mut frame.bytes);
            self.io.push(PageIo::Write { page, bytes: frame.bytes.clone() });
            self.stats.writes += 1;
        }
    }

    /// Checks the cache's bookkeeping (run by the simulator and tests).
    pub fn check(&self) {
        let pinned = self.frames.values().filter(|f| f.pins > 0).count();
        assert!(
            self.frames.len() <= self.capacity.max(pinned + 1),
            "{} pages cached in a cache of {} ({pinned} pinned)",
            self.frames.len(),
            self.capacity
        );
        for (page, frame) in &self.frames {
            let queue = match frame.queue {
                Queue::Probation => &self.probation,
                Queue::Protected => &self.protected,
            };
            assert!(queue.contains(&(frame.queued, *page)), "page {page} is not in its queue under its key");
        }
        let probation = self.frames.values().filter(|f| f.queue == Queue::Probation).count();
        assert_eq!(probation, self.probation.len(), "probation queue and frames disagree");
        assert_eq!(self.frames.len() - probation, self.protected.len(), "protected set and frames disagree");
        for (page, frame) in &self.frames {
            let live = get_u16(&frame.bytes, 8) as usize;
            let expected = (PAGE_BYTES - HEADER - live - SLOT * get_u16(&frame.bytes, 4) as usize) as u16;
            assert_eq!(self.page_free[*page as usize], expected, "page {page}'s free bytes are miscounted");
        }
        assert!(self.reading.keys().all(|p| !self.frames.contains_key(p)), "a page being read is also cached");
        assert_eq!(self.ghosts.len(), self.ghost_since.len(), "ghost list and index disagree");
        assert!(self.ghost_since.keys().all(|p| !self.frames.contains_key(p)), "a cached page is also a ghost");
        let listed = self.page_free.iter().filter(|f| **f > 0).count();
        assert_eq!(listed, self.free.len(), "free-space map and page list disagree");
        let total: u64 = self.page_free.iter().map(|f| *f as u64).sum();
        assert_eq!(total, self.free_total, "the free-byte total drifted from the pages' free bytes");
    }

    /// Makes `page` usable now, counting a hit; on a miss queues its read.
    fn touch(&mut self, page: u32) -> Result<(), Miss> {
        assert!(
            (page as usize) < self.page_free.len(),
            "page {page} is beyond the tablespace's {} pages",
            self.pages()
        );
        self.clock += 1;
        let clock = self.clock;
        let Some(frame) = self.frames.get_mut(&page) else {
            self.stats.misses += 1;
            // A read the host carries out is overtaken: the caller waits
            // for this one (its answer will be dropped as stale).
            if self.reading.get(&page).is_none_or(|r| r.by_host) {
                let ticket = self.new_ticket();
                self.reading.insert(page, Reading { ticket, by_host: false });
                self.io.push(PageIo::Read { page });
            }
            return Err(Miss(page));
        };
        self.stats.hits += 1;
        frame.used = clock;
        match frame.queue {
            Queue::Probation if !frame.used_once => frame.used_once = true,
            Queue::Probation => {
                let was = self.probation.remove(&(frame.queued, page));
                debug_assert!(was, "cached page {page} was not in its probation queue");
                (frame.queue, frame.queued) = (Queue::Protected, clock);
                self.protected.insert((clock, page));
            }
            // Moved to the back lazily, by `requeue_used`.
            Queue::Protected => {}
        }
        Ok(())
    }

    /// Appends a new, empty page, in the cache.
    fn new_page(&mut self) -> u32 {
        let page = self.page_free.len() as u32;
        assert!(page < u32::MAX, "the tablespace is full");
        self.page_free.push((PAGE_BYTES - HEADER) as u16);
        self.free_total += (PAGE_BYTES - HEADER) as u64;
        self.free.insert(((PAGE_BYTES - HEADER) as u16, page));
        let mut bytes = vec![0u8; PAGE_BYTES].into_boxed_slice();
        put_u16(&mut bytes, 6, HEADER as u16);
        self.install(page, bytes, Queue::Probation);
        let frame = self.frames.get_mut(&page).expect("installed");
        frame.dirty = true;
        frame.used_once = true;
        page
    }

    /// Puts a page read or made into the cache, evicting if it is full.
    fn install(&mut self, page: u32, bytes: Box<[u8]>, queue: Queue) {
        while self.frames.len() >= self.capacity {
            if !self.evict_one() {
                break;
            }
        }
        self.clock += 1;
        let frame =
            Frame { bytes, dirty: false, pins: 0, queue, used: self.clock, queued: self.clock, used_once: false };
        match queue {
            Queue::Probation => {
                self.probation.insert((self.clock, page));
            }
            Queue::Protected => {
                self.protected.insert((self.clock, page));
            }
        }
        let replaced = self.frames.insert(page, frame);
        assert!(replaced.is_none(), "page {page} was cached twice");
    }

    /// Evicts one unpinned page (probation first while it holds over a
    /// quarter of the cache); says false if every page is pinned.
    fn evict_one(&mut self) -> bool {
        self.requeue_used();
        let from_probation = self.probation.len() * 4 > self.capacity || self.protected.is_empty();
        let (first, then) =
            if from_probation { (&self.probation, &self.protected) } else { (&self.protected, &self.probation) };
        let unpinned = |queue: &BTreeSet<(u64, u32)>| queue.iter().map(|(_, p)| *p).find(|p| self.frames[p].pins == 0);
        let victim = unpinned(first).or_else(|| unpinned(then));
        let Some(page) = victim else { return false };
        let mut frame = self.frames.remove(&page).expect("a victim is cached");
        match frame.queue {
            Queue::Probation => {
                self.probation.remove(&(frame.queued, page));
                self.clock += 1;
                self.ghosts.insert((self.clock, page));
                let replaced = self.ghost_since.insert(page, self.clock);
                debug_assert!(replaced.is_none(), "evicted page {page} was already a ghost");
                while self.ghosts.len() > self.capacity / 2 {
                    if let Some((_, old)) = self.ghosts.pop_first() {
                        self.ghost_since.remove(&old);
                    }
                }
            }
            Queue::Protected => {
                self.protected.remove(&(frame.queued, page));
            }
        }
        if frame.dirty {
            seal(&mut frame.bytes);
            self.io.push(PageIo::Write { page, bytes: frame.bytes });
            self.stats.writes += 1;
        }
        self.stats.evictions += 1;
        true
    }

    /// Moves the protected pages at the front of their queue that were used
    /// since they were queued to the back, at their last use, until the
    /// front one was not: it is then the least recently used.
    fn requeue_used(&mut self) {
        while let Some(&(queued, page)) = self.protected.first() {
            let frame = self.frames.get_mut(&page).expect("a protected page is cached");
            if frame.used == queued {
                return;
            }
            debug_assert!(frame.used > queued, "page {page} was used before it was queued");
            self.protected.pop_first();
            frame.queued = frame.used;
            self.protected.insert((frame.used, page));
        }
    }

    /// Writes `record` into `page` (cached, with room), in slot `reuse` or
    /// a free slot; compacts the page when the record does not fit at top.
    fn place(&mut self, page: u32, record: &[u8], reuse: Option<u16>) -> u16 {
        let frame = self.frames.get_mut(&page).expect("a page written to is cached");
        let bytes = &mut frame.bytes;
        let slots = get_u16(bytes, 4);
        let mut live = get_u16(bytes, 8) as usize;
        if let Some(s) = reuse {
            let (offset, len) = slot(bytes, s);
            live -= len;
            if record.len() <= len {
                // Same size or smaller: overwritten where it is (the bytes
                // it no longer uses are free, reclaimed by a compaction).
                bytes[offset..offset + record.len()].copy_from_slice(record);
                set_slot(bytes, s, offset as u16, record.len() as u16);
                put_u16(bytes, 8, (live + record.len()) as u16);
                frame.dirty = true;
                self.set_free(page);
                return s;
            }
            set_slot(bytes, s, 0, 0);
        }
        let index = reuse.or_else(|| (0..slots).find(|s| slot(bytes, *s).0 == 0)).unwrap_or(slots);
        let new_slots = slots.max(index + 1) as usize;
        let dir = PAGE_BYTES - SLOT * new_slots;
        if get_u16(bytes, 6) as usize + record.len() > dir {
            compact(bytes);
        }
        let top = get_u16(bytes, 6) as usize;
        assert!(top + record.len() <= dir, "page {page} has no room for {} bytes", record.len());
        bytes[top..top + record.len()].copy_from_slice(record);
        set_slot(bytes, index, top as u16, record.len() as u16);
        put_u16(bytes, 4, new_slots as u16);
        put_u16(bytes, 6, (top + record.len()) as u16);
        put_u16(bytes, 8, (live + record.len()) as u16);
        debug_assert!(top + record.len() <= PAGE_BYTES - SLOT * new_slots, "records ran into the slot directory");
        debug_assert_eq!(slot(bytes, index), (top, record.len()), "the slot does not point at the record written");
        frame.dirty = true;
        self.set_free(page);
        index
    }

    /// Records the free bytes of a cached page in the free-space map.
    fn set_free(&mut self, page: u32) {
        let bytes = &self.frames[&page].bytes;
        let used = get_u16(bytes, 8) as usize + SLOT * get_u16(bytes, 4) as usize;
        let free = (PAGE_BYTES - HEADER - used) as u16;
        let old = std::mem::replace(&mut self.page_free[page as usize], free);
        self.free_total = self.free_total + free as u64 - old as u64;
        self.free.remove(&(old, page));
        if free > 0 {
            self.free.insert((free, page));
        }
    }
}

/// Moves the live records of a page together, from the header on (in
/// slot order, through one copy of the page).
fn compact(bytes: &mut [u8]) {
    let before = bytes.to_vec();
    let mut top = HEADER;
    for s in 0..get_u16(&before, 4) {
        let (offset, len) = slot(&before, s);
        if offset != 0 {
            bytes[top..top + len].copy_from_slice(&before[offset..offset + len]);
            set_slot(bytes, s, top as u16, len as u16);
            top += len;
        }
    }
    put_u16(bytes, 6, top as u16);
}

fn slot(bytes: &[u8], index: u16) -> (usize, usize) {
    let at = PAGE_BYTES - SLOT * (index as usize + 1);
    (get_u16(bytes, at) as usize, get_u16(bytes, at + 2) as usize)
}

fn set_slot(bytes: &mut [u8], index: u16, offset: u16, len: u16) {
    let at = PAGE_BYTES - SLOT * (index as usize + 1);
    put_u16(bytes, at, offset);
    put_u16(bytes, at + 2, len);
}

fn get_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn put_u16(bytes: &mut [u8], at: usize, value: u16) {
    bytes[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

fn checksum(bytes: &[u8]) -> u32 {
    xxh3_64(&bytes[4..]) as u32
}

/// Writes the page's checksum before it leaves the cache.
fn seal(bytes: &mut [u8]) {
    let sum = checksum(bytes);
    bytes[..4].copy_from_slice(&sum.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use latsdb_types::rng::Rng;
    use std::collections::VecDeque;

    /// A disk that carries out I/O in order and answers reads later.
    #[derive(Default)]
    struct Disk {
        pages: HashMap<u32, Box<[u8]>>,
        pending: VecDeque<u32>,
    }

    impl Disk {
        fn take(&mut self, ts: &mut Tablespace) {
            for io in ts.take_io() {
                match io {
                    PageIo::Write { page, bytes } => {
                        self.pages.insert(page, bytes);
                    }
                    PageIo::Read { page } => self.pending.push_back(page),
                }
            }
        }
        fn answer_one(&mut self, ts: &mut Tablespace) {
            if let Some(page) = self.pending.pop_front() {
                let bytes = self.pages.get(&page).cloned().unwrap_or_else(|| vec![0; PAGE_BYTES].into_boxed_slice());
                ts.on_read(page, bytes).unwrap();
            }
        }
    }

    /// Runs `op` until it stops missing, answering reads in between.
    fn retry<T>(ts: &mut Tablespace, disk: &mut Disk, mut op: impl FnMut(&mut Tablespace) -> Result<T, Miss>) -> T {
        loop {
            match op(ts) {
                Ok(v) => return v,
                Err(Miss(_)) => {
                    disk.take(ts);
                    disk.answer_one(ts);
                }
            }
        }
    }

    /// Random inserts, updates, deletes and reads against a map, through a
    /// small cache (every operation may miss and evict): the records read
    /// are always the ones written, and the bookkeeping holds.
    #[test]
    fn records_match_a_model_through_a_small_cache() {
        for seed in 0..20 {
            let mut rng = Rng::new(seed);
            let mut ts = Tablespace::new(4);
            let mut disk = Disk::default();
            let mut model: HashMap<DiskRef, Vec<u8>> = HashMap::new();
            let mut refs: Vec<DiskRef> = Vec::new();
            for step in 0..3000 {
                let len = if rng.chance(5) { rng.index(MAX_RECORD + 1) } else { rng.index(900) };
                let record: Vec<u8> = (0..len).map(|i| (i as u64 ^ seed ^ step) as u8).collect();
                match rng.below(4) {
                    0 | 1 if refs.len() < 500 => {
                        let at = ts.insert(&record);
                        assert!(model.insert(at, record).is_none(), "seed {seed}: {at:?} handed out twice");
                        refs.push(at);
                    }
                    2 if !refs.is_empty() => {
                        let i = rng.index(refs.len());
                        let at = retry(&mut ts, &mut disk, |ts| ts.update(refs[i], &record));
                        model.remove(&refs[i]);
                        assert!(model.insert(at, record).is_none(), "seed {seed}: {at:?} handed out twice");
                        refs[i] = at;
                    }
                    _ if !refs.is_empty() => {
                        let i = rng.index(refs.len());
                        if rng.chance(30) {
                            retry(&mut ts, &mut disk, |ts| ts.delete(refs[i]));
                            model.remove(&refs.swap_remove(i));
                        } else {
                            let want = &model[&refs[i]];
                            let got = retry(&mut ts, &mut disk, |ts| ts.get(refs[i]).map(<[u8]>::to_vec));
                            assert_eq!(&got, want, "seed {seed}, step {step}: record {:?}", refs[i]);
                        }
                    }
                    _ => {}
                }
                disk.take(&mut ts);
                ts.check();
            }
            // Deleted space is reused: the file stays near the live data.
            let live: usize = model.values().map(|r| r.len() + SLOT).sum();
            assert!(
                ts.pages() as usize * PAGE_BYTES < live * 3 + 8 * PAGE_BYTES,
                "seed {seed}: {} pages for {live} bytes",
                ts.pages()
            );
        }
    }

    /// A page whose bytes changed on disk is refused when read back.
    #[test]
    fn a_corrupt_page_is_refused() {
        let mut ts = Tablespace::new(4);
        let mut disk = Disk::default();
        let at = ts.insert(b"hello");
        ts.flush();
        disk.take(&mut ts);
        // Push the page out of the cache with new pages.
        for _ in 0..8 {
            ts.insert(&[7; MAX_RECORD]);
        }
        disk.take(&mut ts);
        disk.pages.get_mut(&at.page).unwrap()[100] ^= 1;
        assert_eq!(ts.get(at), Err(Miss(at.page)));
        disk.take(&mut ts);
        let page = disk.pending.pop_front().unwrap();
        let bytes = disk.pages[&page].clone();
        assert_eq!(ts.on_read(page, bytes), Err(PageError::Corrupt { page: at.page }));
    }

    /// A hot set read over and over keeps its pages cached through a scan
    /// that touches many more pages once each.
    #[test]
    fn hot_pages_survive_a_scan() {
        let mut ts = Tablespace::new(16);
        let mut disk = Disk::default();
        let refs: Vec<DiskRef> = (0..64).map(|_| ts.insert(&[1; MAX_RECORD])).collect();
        disk.take(&mut ts);
        let hot = &refs[..4];
        for _ in 0..3 {
            for at in hot {
                retry(&mut ts, &mut disk, |ts| ts.get(*at).map(|_| ()));
            }
        }
        for at in &refs[4..] {
            retry(&mut ts, &mut disk, |ts| ts.get(*at).map(|_| ()));
        }
        let before = ts.stats().misses;
        for at in hot {
            retry(&mut ts, &mut disk, |ts| ts.get(*at).map(|_| ()));
        }
        assert_eq!(ts.stats().misses, before, "a hot page was evicted by the scan");
    }

    /// Pinned pages stay cached while others come and go.
    #[test]
    fn pinned_pages_are_not_evicted() {
        let mut ts = Tablespace::new(4);
        let mut disk = Disk::default();
        let kept = ts.insert(b"kept");
        ts.pin(kept.page).unwrap();
        for _ in 0..20 {
            ts.insert(&[3; MAX_RECORD]);
            disk.take(&mut ts);
        }
        assert_eq!(ts.get(kept).unwrap(), b"kept");
        ts.unpin(kept.page);
        ts.check();
    }

    #[test]
    fn a_disk_ref_encodes_in_six_bytes() {
        let at = DiskRef { page: 0x0102_0304, slot: 0x0506 };
        assert_eq!(DiskRef::decode(&at.encode()), at);
    }
}
