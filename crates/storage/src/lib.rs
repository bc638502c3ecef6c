//! The in-memory store of one table partition.
//!
//! A partition keeps its rows in a hash map keyed by the memcomparable
//! primary key (the lookup path: one hash probe per key read), plus one
//! B-tree per ordered index whose entries are `index key ++ primary key`
//! (range scans and full scans; index 0 is the primary key's). A partition is
//! owned by exactly one shard thread, so it needs no locking.
//!
//! Row locks and transaction staging live above this crate (in the cluster
//! crate's local data manager); this crate only sees committed rows.
//!
//! A table with disk columns keeps the memory part of each row here and
//! its disk part on a page of the shard's tablespace (`split.rs`); the
//! partition's reads answer whole rows either way.

pub mod log;
pub mod pages;
mod rowmap;
mod split;
pub mod tablespace;

use latsdb_types::expr::Aggregate;
use latsdb_types::keycodec::prefix_successor;
use latsdb_types::proto::{KeyBound, ScanPage, ScanRequest};
use latsdb_types::row::RowLayout;
use latsdb_types::schema::{ColumnId, IndexId};
use latsdb_types::{DbError, Result, TableMeta};
use pages::SharedPages;
use rowmap::{Entry, RowMap};
use split::DiskSplit;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Largest scan page a data node sends, in row bytes; a page ends early (with
/// a resume key) when it is reached.
pub const MAX_PAGE_BYTES: usize = 1 << 20;
/// Most rows a client may ask for in one page.
pub const MAX_PAGE_ROWS: u32 = 100_000;

struct OrderedIndex {
    id: IndexId,
    /// The index's columns in the table (as its definition names them).
    columns: Vec<ColumnId>,
    /// The same columns in stored rows (the memory parts of a table with
    /// disk columns; else the same as `columns`).
    stored_columns: Vec<ColumnId>,
    /// Entry -> offset of the primary key inside the entry.
    entries: BTreeMap<Box<[u8]>, u32>,
}

impl OrderedIndex {
    /// The entry of a stored row, whose layout is `layout`.
    fn entry(&self, layout: &RowLayout, key: &[u8], stored: &[u8]) -> (Box<[u8]>, u32) {
        if self.id == 0 {
            return (key.into(), 0);
        }
        let mut out = Vec::with_capacity(key.len() + 16);
        layout.key_of(stored, &self.stored_columns, &mut out);
        let offset = out.len() as u32;
        out.extend_from_slice(key);
        (out.into_boxed_slice(), offset)
    }
}

pub struct Partition {
    rows: RowMap,
    indexes: Vec<OrderedIndex>,
    row_bytes: usize,
    /// Estimated heap bytes of rows and index entries (see `entry_cost`).
    memory: usize,
    /// Bytes of the disk parts of rows (of a table with disk columns).
    disk_bytes: usize,
    /// Some for a table with disk columns: how its rows are split.
    disk: Option<DiskSplit>,
}

/// The layout of the rows a partition stores.
fn stored_layout<'a>(disk: &'a Option<DiskSplit>, meta: &'a TableMeta) -> &'a RowLayout {
    match disk {
        Some(split) => split.memory_layout(),
        None => &meta.layout,
    }
}

impl Partition {
    /// A partition of a table whose columns are all in memory.
    pub fn new(meta: &TableMeta) -> Partition {
        assert!(!meta.def.has_disk_columns(), "a table with disk columns needs the shard's pages");
        Partition::build(meta, None)
    }

    /// A partition of any table; the disk parts of its rows (if the table
    /// has disk columns) go to `pages`.
    pub fn for_table(meta: &TableMeta, pages: &SharedPages) -> Partition {
        let disk = meta.def.has_disk_columns().then(|| DiskSplit::new(meta, pages.clone()));
        Partition::build(meta, disk)
    }

    fn build(meta: &TableMeta, disk: Option<DiskSplit>) -> Partition {
        let mut p =
            Partition { rows: RowMap::new(), indexes: Vec::new(), row_bytes: 0, memory: 0, disk_bytes: 0, disk };
        p.rebuild_indexes(meta);
        p
    }

    /// Gives the disk parts of every row back to the tablespace (the table
    /// is dropped); the partition is empty after.
    pub fn free_disk_parts(&mut self) {
        if let Some(split) = &self.disk {
            for stored in self.rows.iter() {
                split.free(stored.row());
            }
        }
        self.rows = RowMap::new();
        for index in &mut self.indexes {
            index.entries.clear();
        }
        (self.row_bytes, self.memory, self.disk_bytes) = (0, 0, 0);
    }

    /// Bytes of the disk parts of the rows.
    pub fn disk_bytes(&self) -> usize {
        self.disk_bytes
    }

    /// The shard's pages, for a table with disk columns.
    pub fn pages(&self) -> Option<&SharedPages> {
        self.disk.as_ref().map(|d| d.pages())
    }

    /// Checks that a row can be stored: its disk part fits a page. Run
    /// before a write is staged, since storing a committed row cannot fail.
    pub fn check_row(&self, row: &[u8]) -> Result<()> {
        match &self.disk {
            Some(split) => split.check_len(row),
            None => Ok(()),
        }
    }

    /// Bytes of the disk part of `row` (0 for a table without disk columns).
    pub fn disk_len(&self, row: &[u8]) -> usize {
        self.disk.as_ref().map_or(0, |split| split.disk_len(row))
    }

    /// How many bytes of records the tablespace gains if `key` gets `row`
    /// (None deletes); 0 for a table without disk columns.
    pub fn disk_growth(&self, key: &[u8], row: Option<&[u8]>) -> isize {
        let Some(split) = &self.disk else { return 0 };
        let old = self.rows.get(key, self.rows.hash(key)).map_or(0, |e| split.record_len(e.row()));
        let new = row.map_or(0, |r| split.disk_len(r));
        new as isize - old as isize
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.len() == 0
    }

    /// Bytes held by row keys and values (without map overhead).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Estimated heap bytes this partition holds.
    pub fn memory(&self) -> usize {
        self.memory
    }

    /// Estimated heap bytes of one row: its entry (key and row), its share
    /// of the hash index (a 32-byte slot at most half full), and one entry
    /// (a key copy plus B-tree overhead) in every ordered index.
    /// `stored` is the row as the partition keeps it (for a table with
    /// disk columns, its memory part and disk reference).
    pub fn entry_cost(&self, key: &[u8], stored: &[u8]) -> usize {
        self.entry_cost_of(key.len(), stored.len())
    }

    fn entry_cost_of(&self, key_len: usize, stored_len: usize) -> usize {
        let entry = 2 + key_len + stored_len + 16;
        let slot = 64;
        let ordered = self.indexes.len() * (2 * key_len + 48);
        entry + slot + ordered
    }

    /// How much `memory()` grows if `key` gets `row` (None deletes).
    pub fn write_growth(&self, key: &[u8], row: Option<&[u8]>) -> isize {
        let old = self.rows.get(key, self.rows.hash(key)).map_or(0, |e| self.entry_cost(key, e.row())) as isize;
        let stored_len = |r: &[u8]| match &self.disk {
            Some(split) => split.stored_len(r),
            None => r.len(),
        };
        let new = row.map_or(0, |r| self.entry_cost_of(key.len(), stored_len(r))) as isize;
        new - old
    }

    pub fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.get_hashed(key, self.rows.hash(key))
    }

    /// `get` with the key's hash already computed (see `key_hash`).
    pub fn get_hashed(&self, key: &[u8], hash: u64) -> Option<Cow<'_, [u8]>> {
        self.rows.get(key, hash).map(|e| self.whole(e.row()))
    }

    /// Appends the whole row of `key` to `out` (its hash already computed);
    /// false when there is none. For a table with disk columns this puts
    /// the row together right in `out`.
    pub fn read_into(&self, key: &[u8], hash: u64, out: &mut Vec<u8>) -> bool {
        let Some(entry) = self.rows.get(key, hash) else { return false };
        match &self.disk {
            None => out.extend_from_slice(entry.row()),
            Some(split) => split.assemble_into(entry.row(), out),
        }
        true
    }

    /// Batched lookups of a table with disk columns, steps 3 and 4 of 4
    /// (after `prefetch_row`): start loading the slot of the row's disk
    /// part in its page (`record` false), then the record itself (true).
    /// Nothing for other tables, or a page not cached.
    pub fn prefetch_disk(&self, key: &[u8], hash: u64, record: bool) {
        if let (Some(split), Some(entry)) = (&self.disk, self.rows.get(key, hash)) {
            split.prefetch(entry.row(), record);
        }
    }

    /// The page that holds the disk part of the row of `key`, for a table
    /// with disk columns (an operation on the row needs it cached).
    pub fn disk_page(&self, key: &[u8], hash: u64) -> Option<u32> {
        let entry = self.rows.get(key, hash)?;
        self.disk.as_ref().map(|_| split::disk_ref(entry.row()).page)
    }

    /// Whether the table has disk columns (its rows are put together on
    /// every read).
    pub fn has_disk_columns(&self) -> bool {
        self.disk.is_some()
    }

    /// The whole row of a stored row: the stored bytes themselves, or for
    /// a table with disk columns, its memory part and disk part put back
    /// together (which reads the disk part's page if it is not cached).
    fn whole<'a>(&self, stored: &'a [u8]) -> Cow<'a, [u8]> {
        match &self.disk {
            None => Cow::Borrowed(stored),
            Some(split) => {
                let mut row = Vec::with_capacity(stored.len() * 4);
                split.assemble_into(stored, &mut row);
                Cow::Owned(row)
            }
        }
    }

    /// Hash of a key in this partition's index, for the prefetch steps.
    pub fn key_hash(&self, key: &[u8]) -> u64 {
        self.rows.hash(key)
    }

    /// Batched lookups, step 1 of 2: start loading the key's index slot.
    pub fn prefetch_slot(&self, hash: u64) {
        self.rows.prefetch_slot(hash)
    }

    /// Batched lookups, step 2 of 2: start loading the key's row.
    pub fn prefetch_row(&self, hash: u64) {
        self.rows.prefetch_entry(hash)
    }

    /// Inserts or replaces the row of `key`, keeping every index in step.
    /// Returns whether a row was replaced.
    ///
    /// Hot path for writes: a replaced row is swapped in its slot, and an
    /// ordered index is touched only when the row's entry in it changes (never
    /// for PRIMARY, since a primary key cannot change).
    pub fn put(&mut self, meta: &TableMeta, key: &[u8], row: &[u8]) -> bool {
        let hash = self.rows.hash(key);
        self.put_hashed(meta, key, row, hash)
    }

    /// [`Partition::put`] with the key's hash already computed (by
    /// [`Partition::key_hash`], for a batch prefetched beforehand).
    pub fn put_hashed(&mut self, meta: &TableMeta, key: &[u8], row: &[u8], hash: u64) -> bool {
        debug_assert_eq!(meta.key_of_row(row), key, "row and key disagree");
        debug_assert_eq!(hash, self.rows.hash(key), "hash of another key");
        // The row as stored: itself, or its memory part after its disk
        // part was written (over the old one when the row is replaced).
        let (new, disk_growth): (Cow<[u8]>, isize) = match &self.disk {
            None => (Cow::Borrowed(row), 0),
            Some(split) => {
                let old = self.rows.get(key, hash).map(|e| split::disk_ref(e.row()));
                let (stored, old_len) = split.store(row, old);
                (Cow::Owned(stored), split.disk_len(row) as isize - old_len as isize)
            }
        };
        debug_assert!(self.disk_bytes as isize + disk_growth >= 0, "more disk bytes freed than stored");
        self.disk_bytes = (self.disk_bytes as isize + disk_growth) as usize;
        let layout = stored_layout(&self.disk, meta);
        if let Some(stored) = self.rows.get_mut(key, hash) {
            for index in self.indexes.iter_mut().filter(|i| i.id != 0) {
                let (old_entry, _) = index.entry(layout, key, stored.row());
                let (new_entry, offset) = index.entry(layout, key, &new);
                if old_entry != new_entry {
                    let removed = index.entries.remove(&old_entry);
                    assert!(removed.is_some(), "ordered index {} lost an entry", index.id);
                    index.entries.insert(new_entry, offset);
                }
            }
            self.row_bytes = self.row_bytes + new.len() - stored.row().len();
            let old_cost = 2 + key.len() + stored.row().len();
            stored.set_row(&new);
            self.memory = self.memory + (2 + key.len() + new.len()) - old_cost;
            return true;
        }
        for index in &mut self.indexes {
            let (entry, offset) = index.entry(layout, key, &new);
            index.entries.insert(entry, offset);
        }
        self.row_bytes += key.len() + new.len();
        self.memory += self.entry_cost(key, &new);
        self.rows.insert_new_hashed(Entry::new(key, &new), hash);
        false
    }

    /// Removes the row of `key`; returns whether there was one.
    pub fn remove(&mut self, meta: &TableMeta, key: &[u8]) -> bool {
        let Some(stored) = self.rows.remove(key) else { return false };
        if let Some(split) = &self.disk {
            let freed = split.record_len(stored.row());
            assert!(freed <= self.disk_bytes, "a record of {freed} bytes but only {} counted", self.disk_bytes);
            self.disk_bytes -= freed;
            split.free(stored.row());
        }
        let layout = stored_layout(&self.disk, meta);
        for index in &mut self.indexes {
            let (entry, _) = index.entry(layout, stored.key(), stored.row());
            let removed = index.entries.remove(&entry);
            assert!(removed.is_some(), "ordered index {} lost an entry", index.id);
        }
        self.row_bytes -= stored.key().len() + stored.row().len();
        self.memory -= self.entry_cost(stored.key(), stored.row());
        true
    }

    /// Brings the set of ordered indexes in line with the table definition
    /// (after an index was added or dropped), building new ones from the rows.
    pub fn rebuild_indexes(&mut self, meta: &TableMeta) {
        let wanted: Vec<_> = meta.def.indexes.iter().map(|i| (i.id, i.columns.clone())).collect();
        self.indexes.retain(|ix| wanted.iter().any(|(id, cols)| *id == ix.id && *cols == ix.columns));
        let layout = stored_layout(&self.disk, meta);
        for (id, columns) in wanted {
            if self.indexes.iter().any(|ix| ix.id == id) {
                continue;
            }
            let stored_columns = match &self.disk {
                None => columns.clone(),
                Some(split) => columns
                    .iter()
                    .map(|&c| split.memory_column(c).expect("indexed columns are kept in memory"))
                    .collect(),
            };
            let mut index = OrderedIndex { id, columns, stored_columns, entries: BTreeMap::new() };
            for stored in self.rows.iter() {
                let (entry, offset) = index.entry(layout, stored.key(), stored.row());
                index.entries.insert(entry, offset);
            }
            self.indexes.push(index);
        }
        self.memory = self.rows.iter().map(|e| self.entry_cost(e.key(), e.row())).sum();
    }

    /// Iterates every row (for checks and tests).
    pub fn rows(&self) -> impl Iterator<Item = (&[u8], Cow<'_, [u8]>)> {
        self.rows.iter().map(|e| (e.key(), self.whole(e.row())))
    }

    /// Visits rows in primary-key order after `after` (from the start when
    /// None) until about `max_bytes` of keys and rows were visited; returns
    /// the last key visited when rows remain. Resuming from that key visits
    /// every row that existed throughout exactly once, however the partition
    /// changed in between (a local checkpoint walks a partition this way
    /// while it serves writes).
    pub fn rows_after(
        &self,
        after: Option<&[u8]>,
        max_bytes: usize,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Option<Box<[u8]>> {
        // Rows are found by key in the hash index: a walk of a whole
        // partition (a checkpoint) would pay two cache misses per row one
        // after another, so keys are taken a batch at a time and their
        // slots and rows prefetched first, as batched lookups do.
        const BATCH: usize = 32;
        let primary = &self.indexes.first()?.entries;
        let lower = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let mut keys = primary.range::<[u8], _>((lower, Bound::Unbounded)).map(|(key, _)| key);
        let mut batch: Vec<(&Box<[u8]>, u64)> = Vec::with_capacity(BATCH);
        let mut used = 0;
        let mut last: Option<&Box<[u8]>> = None;
        loop {
            batch.clear();
            batch.extend(keys.by_ref().take(BATCH).map(|key| (key, self.rows.hash(key))));
            if batch.is_empty() {
                return None;
            }
            for &(_, hash) in &batch {
                self.rows.prefetch_slot(hash);
            }
            for &(_, hash) in &batch {
                self.rows.prefetch_entry(hash);
            }
            for &(key, hash) in &batch {
                if let Some(done) = last.filter(|_| used >= max_bytes) {
                    // Resume after the last row visited (this one is not yet).
                    return Some(done.clone());
                }
                if let Some(row) = self.get_hashed(key, hash) {
                    used += key.len() + row.len();
                    visit(key, &row);
                }
                last = Some(key);
            }
        }
    }

    /// A digest of the committed rows after `after`, in key order, until
    /// at least `max_bytes` of keys and rows were hashed: the digest, the
    /// number of rows, and the last key hashed when rows remain after it
    /// (the range hashed is then `(after, that key]`, else `(after, end)`).
    /// [`Partition::digest_between`] hashes a given range the same way.
    pub fn digest_after(&self, after: Option<&[u8]>, max_bytes: usize) -> (u64, u64, Option<Box<[u8]>>) {
        let mut h = RowDigest::default();
        let upto = self.rows_after(after, max_bytes, |k, r| h.add(k, r));
        (h.finish(), h.rows, upto)
    }

    /// The digest of the committed rows in `(after, upto]`, as
    /// [`Partition::digest_after`] computes it.
    pub fn digest_between(&self, after: Option<&[u8]>, upto: Option<&[u8]>) -> u64 {
        let mut h = RowDigest::default();
        self.rows_between(after, upto, |k, r| h.add(k, r));
        h.finish()
    }

    /// Visits the committed rows with keys after `after` (exclusive) up to
    /// `upto` (inclusive), in key order; None leaves that side unbounded.
    pub fn rows_between(&self, after: Option<&[u8]>, upto: Option<&[u8]>, mut visit: impl FnMut(&[u8], &[u8])) {
        let Some(primary) = self.indexes.first().map(|i| &i.entries) else { return };
        if let (Some(a), Some(u)) = (after, upto) {
            if a >= u {
                return;
            }
        }
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let upper = upto.map_or(Bound::Unbounded, Bound::Included);
        for (key, _) in primary.range::<[u8], _>((lower, upper)) {
            if let Some(row) = self.get(key) {
                visit(key, &row);
            }
        }
    }

    /// One page of a read-committed scan along an ordered index.
    pub fn scan(&self, meta: &TableMeta, req: &ScanRequest) -> Result<ScanPage> {
        let index = self.indexes.iter().find(|i| i.id == req.index).ok_or_else(|| {
            DbError::new(latsdb_types::ErrorCode::UnknownIndex, format!("index {} does not exist", req.index))
        })?;
        let mut page = ScanPage { rows: Vec::new(), resume: None, aggregates: Vec::new() };
        let Some((start, end)) = scan_bounds(&req.lower, &req.upper, req.resume_after.as_deref()) else {
            page.aggregates = req.aggregates.iter().map(|a| a.initial()).collect();
            return Ok(page);
        };
        let range = index.entries.range::<[u8], _>((start.as_ref().map(|v| &v[..]), end.as_ref().map(|v| &v[..])));

        if !req.aggregates.is_empty() {
            let mut acc: Vec<_> = req.aggregates.iter().map(|a| a.initial()).collect();
            for (_, row) in self.rows_in_order(range) {
                if req.filter.as_ref().is_some_and(|f| !f.matches(&meta.layout, &row)) {
                    continue;
                }
                for (a, slot) in req.aggregates.iter().zip(acc.iter_mut()) {
                    let value = match a {
                        Aggregate::CountRows => latsdb_types::Value::Null,
                        other => meta.layout.get(&row, other.column().unwrap_or(0) as usize),
                    };
                    a.accumulate(slot, value);
                }
            }
            page.aggregates = acc;
            return Ok(page);
        }
        let max_rows = req.max_rows.clamp(1, MAX_PAGE_ROWS) as usize;
        let mut bytes = 0;
        let mut last_visited: Option<&[u8]> = None;
        for (entry, row) in self.rows_in_order(range) {
            if page.rows.len() >= max_rows || bytes >= MAX_PAGE_BYTES {
                // Stopped early: the next page starts after the last entry looked at.
                page.resume = last_visited.map(|e| e.to_vec());
                break;
            }
            last_visited = Some(entry);
            if req.filter.as_ref().is_some_and(|f| !f.matches(&meta.layout, &row)) {
                continue;
            }
            let out = match &req.projection {
                Some(cols) => meta.layout.project(&row, cols),
                None => row.into_owned(),
            };
            bytes += out.len();
            page.rows.push(out.into());
        }
        Ok(page)
    }

    /// The rows of ordered-index entries, in the entries' order. Each row
    /// costs two dependent cache misses in the hash index (its slot, then
    /// its entry); entries are taken a group at a time and the group's slots
    /// and then rows are prefetched first, so the misses overlap as in a
    /// batched lookup.
    fn rows_in_order<'a>(
        &'a self,
        entries: impl Iterator<Item = (&'a Box<[u8]>, &'a u32)>,
    ) -> impl Iterator<Item = (&'a [u8], Cow<'a, [u8]>)> {
        const GROUP: usize = 16;
        let mut entries = entries.peekable();
        let mut group: std::collections::VecDeque<(&'a [u8], &'a [u8], u64)> = Default::default();
        std::iter::from_fn(move || {
            if group.is_empty() {
                entries.peek()?;
                for (entry, &offset) in entries.by_ref().take(GROUP) {
                    let key = &entry[offset as usize..];
                    let hash = self.rows.hash(key);
                    self.rows.prefetch_slot(hash);
                    group.push_back((&entry[..], key, hash));
                }
                for &(_, _, hash) in &group {
                    self.rows.prefetch_entry(hash);
                }
            }
            let (entry, key, hash) = group.pop_front()?;
            match self.rows.get(key, hash) {
                Some(stored) => Some((entry, self.whole(stored.row()))),
                None => panic!("ordered index entry without a row"),
            }
        })
    }
}

/// Translates prefix bounds and a resume point into byte bounds over index
/// entries; None when the range is empty.
type ByteRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

fn scan_bounds(lower: &KeyBound, upper: &KeyBound, resume: Option<&[u8]>) -> Option<ByteRange> {
    let mut start = match lower {
        KeyBound::Unbounded => Bound::Unbounded,
        KeyBound::Included(p) => Bound::Included(p.clone()),
        KeyBound::Excluded(p) => Bound::Included(prefix_successor(p)?),
    };
    let end = match upper {
        KeyBound::Unbounded => Bound::Unbounded,
        KeyBound::Included(p) => prefix_successor(p).map_or(Bound::Unbounded, Bound::Excluded),
        KeyBound::Excluded(p) => Bound::Excluded(p.clone()),
    };
    if let Some(r) = resume {
        let after_start = match &start {
            Bound::Unbounded => true,
            Bound::Included(s) => r >= &s[..],
            Bound::Excluded(s) => r >= &s[..],
        };
        if after_start {
            start = Bound::Excluded(r.to_vec());
        }
    }
    // BTreeMap::range panics on an inverted range; treat it as empty.
    let nonempty = match (&start, &end) {
        (Bound::Included(s), Bound::Included(e)) => s <= e,
        (Bound::Included(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e))
        | (Bound::Excluded(s), Bound::Excluded(e)) => s < e,
        _ => true,
    };
    nonempty.then_some((start, end))
}

/// Hashes a sequence of (key, row) pairs, each length-prefixed so that no
/// two different sequences hash the same input.
#[derive(Default)]
struct RowDigest {
    hasher: xxhash_rust::xxh3::Xxh3,
    rows: u64,
}

/// The digest of a range without rows.
pub fn empty_digest() -> u64 {
    RowDigest { hasher: xxhash_rust::xxh3::Xxh3::new(), rows: 0 }.finish()
}

impl RowDigest {
    fn add(&mut self, key: &[u8], row: &[u8]) {
        self.hasher.update(&(key.len() as u32).to_le_bytes());
        self.hasher.update(key);
        self.hasher.update(&(row.len() as u32).to_le_bytes());
        self.hasher.update(row);
        self.rows += 1;
    }

    fn finish(&self) -> u64 {
        self.hasher.digest() ^ self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latsdb_types::expr::{CmpOp, Expr};
    use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};
    use latsdb_types::Value;

    fn meta() -> TableMeta {
        let spec = TableSpec::new("db", "t")
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)))
            .column(ColumnDef::new("k", ColumnType::int(IntWidth::Int)))
            .column(ColumnDef::new("c", ColumnType::VarChar(20)))
            .primary_key(&["id"]);
        let def = TableDef::from_spec(&spec, 1, 1).unwrap();
        let def = def.with_index("k_idx", &["k".into()], false).unwrap();
        TableMeta::new(def)
    }

    fn fill(meta: &TableMeta, p: &mut Partition, n: i64) {
        for id in 0..n {
            let row =
                meta.coerce_row(vec![Value::Int(id), Value::Int(id % 10), Value::Str(format!("row{id}"))]).unwrap();
            let row = meta.layout.encode(&row);
            let key = meta.key_of_row(&row);
            p.put(meta, &key, &row);
        }
    }

    #[test]
    fn rows_between_chunks_tile_the_partition() {
        let meta = meta();
        let mut p = Partition::new(&meta);
        fill(&meta, &mut p, 300);
        let all: Vec<Vec<u8>> =
            p.rows().map(|(k, _)| k.to_vec()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        // The ranges (None, k50], (k50, k199], (k199, None) cover each row once.
        let cuts = [None, Some(all[50].clone()), Some(all[199].clone()), None];
        let mut seen = Vec::new();
        for w in cuts.windows(2) {
            p.rows_between(w[0].as_deref(), w[1].as_deref(), |k, _| seen.push(k.to_vec()));
        }
        assert_eq!(seen, all);
        let mut none = 0;
        p.rows_between(Some(&all[10]), Some(&all[10]), |_, _| none += 1);
        p.rows_between(Some(&all[11]), Some(&all[10]), |_, _| none += 1);
        assert_eq!(none, 0, "empty and inverted ranges visit nothing");
        // A chunk's digest matches the digest of the range it reports.
        let (d, rows, upto) = p.digest_after(Some(&all[20]), 500);
        let upto = upto.expect("rows remain");
        assert!(rows > 1);
        assert_eq!(d, p.digest_between(Some(&all[20]), Some(&upto)));
        let (d_end, _, none_left) = p.digest_after(Some(&upto), usize::MAX);
        assert!(none_left.is_none());
        assert_eq!(d_end, p.digest_between(Some(&upto), None));
        // Any changed row changes the digest.
        let mut q = Partition::new(&meta);
        fill(&meta, &mut q, 300);
        q.remove(&meta, &all[25]);
        assert_ne!(d, q.digest_between(Some(&all[20]), Some(&upto)));
    }

    #[test]
    fn rows_after_in_chunks_visits_every_row_that_stays_exactly_once() {
        let meta = meta();
        let mut p = Partition::new(&meta);
        fill(&meta, &mut p, 1000);
        for budget in [0, 1, 37, 500, 1 << 20] {
            let mut seen: Vec<Vec<u8>> = Vec::new();
            let mut resume: Option<Box<[u8]>> = None;
            let mut p = Partition::new(&meta);
            fill(&meta, &mut p, 1000);
            let mut round = 0i64;
            loop {
                resume = p.rows_after(resume.as_deref(), budget, |k, _| seen.push(k.to_vec()));
                // Rows inserted behind the cursor between chunks.
                round += 1;
                let row = meta.coerce_row(vec![Value::Int(-round), Value::Int(0), Value::Str("new".into())]).unwrap();
                let row = meta.layout.encode(&row);
                p.put(&meta, &meta.key_of_row(&row), &row);
                if resume.is_none() {
                    break;
                }
            }
            let original: Vec<Vec<u8>> = {
                let mut q = Partition::new(&meta);
                fill(&meta, &mut q, 1000);
                q.rows().map(|(k, _)| k.to_vec()).collect()
            };
            for k in &original {
                assert_eq!(seen.iter().filter(|s| *s == k).count(), 1, "budget {budget}");
            }
            let mut sorted = seen.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), seen.len(), "a row was visited twice with budget {budget}");
        }
    }

    fn scan_all(meta: &TableMeta, p: &Partition, mut req: ScanRequest) -> Vec<Vec<Value>> {
        let mut out = Vec::new();
        let layout = match &req.projection {
            Some(cols) => meta.layout.projection(cols),
            None => meta.layout.clone(),
        };
        loop {
            let page = p.scan(meta, &req).unwrap();
            out.extend(page.rows.iter().map(|r| layout.decode(r)));
            match page.resume {
                Some(r) => req.resume_after = Some(r),
                None => return out,
            }
        }
    }

    fn request(index: IndexId, lower: KeyBound, upper: KeyBound) -> ScanRequest {
        ScanRequest {
            table: 1,
            table_version: 2,
            partition: 0,
            index,
            lower,
            upper,
            resume_after: None,
            filter: None,
            projection: None,
            max_rows: 7,
            aggregates: vec![],
        }
    }

    fn key(meta: &TableMeta, cols: &[ColumnId], v: i64) -> Vec<u8> {
        let defs: Vec<_> = cols.iter().map(|&c| &meta.def.columns[c as usize]).collect();
        latsdb_types::keycodec::encode_prefix(&defs, &[Value::Int(v)]).unwrap()
    }

    #[test]
    fn primary_range_with_paging_returns_exact_rows_in_order() {
        let meta = meta();
        let mut p = Partition::new(&meta);
        fill(&meta, &mut p, 100);
        let rows = scan_all(
            &meta,
            &p,
            request(0, KeyBound::Included(key(&meta, &[0], 10)), KeyBound::Excluded(key(&meta, &[0], 30))),
        );
        let ids: Vec<i64> = rows.iter().map(|r| r[0].as_i64().unwrap()).collect();
        assert_eq!(ids, (10..30).collect::<Vec<_>>());
    }

    #[test]
    fn secondary_index_range_filter_projection_and_updates() {
        let meta = meta();
        let mut p = Partition::new(&meta);
        fill(&meta, &mut p, 100);
        let mut req = request(1, KeyBound::Included(key(&meta, &[1], 3)), KeyBound::Included(key(&meta, &[1], 4)));
        req.filter = Some(Expr::cmp(CmpOp::Lt, Expr::col(0), Expr::val(Value::Int(50))));
        req.projection = Some(vec![0]);
        let ids: Vec<i64> = scan_all(&meta, &p, req.clone()).iter().map(|r| r[0].as_i64().unwrap()).collect();
        assert_eq!(ids, vec![3, 13, 23, 33, 43, 4, 14, 24, 34, 44]);
        // Moving a row to another index key moves its index entry.
        let row = meta.layout.encode(&meta.coerce_row(vec![Value::Int(13), Value::Int(9), Value::Null]).unwrap());
        p.put(&meta, &meta.key_of_row(&row), &row);
        let ids: Vec<i64> = scan_all(&meta, &p, req.clone()).iter().map(|r| r[0].as_i64().unwrap()).collect();
        assert_eq!(ids, vec![3, 23, 33, 43, 4, 14, 24, 34, 44]);
        assert!(p.remove(&meta, &key(&meta, &[0], 4)));
        assert_eq!(scan_all(&meta, &p, req).len(), 8);
        assert_eq!(p.len(), 99);
    }

    /// The table of `meta()` with `c` and a new `pad` on disk.
    fn disk_meta() -> TableMeta {
        use latsdb_types::schema::Storage;
        let spec = TableSpec::new("db", "d")
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)))
            .column(ColumnDef::new("c", ColumnType::VarChar(20)).storage(Storage::Disk))
            .column(ColumnDef::new("k", ColumnType::int(IntWidth::Int)))
            .column(ColumnDef::new("pad", ColumnType::Blob).storage(Storage::Disk))
            .primary_key(&["id"]);
        let def = TableDef::from_spec(&spec, 1, 1).unwrap();
        TableMeta::new(def.with_index("k_idx", &["k".into()], false).unwrap())
    }

    fn disk_row(meta: &TableMeta, id: i64, k: i64, pad: usize) -> Vec<u8> {
        let c = if id % 5 == 0 { Value::Null } else { Value::Str(format!("c{id}")) };
        let values = vec![Value::Int(id), c, Value::Int(k), Value::Bytes(vec![id as u8; pad])];
        meta.layout.encode(&meta.coerce_row(values).unwrap())
    }

    #[test]
    fn disk_columns_read_back_whole_rows_through_a_small_cache() {
        use crate::pages::{DiskPages, MemoryPages, PagesConfig};
        let disk = disk_meta();
        let memory = TableMeta::new(TableDef {
            columns: disk.def.columns.iter().cloned().map(|c| c.storage(Default::default())).collect(),
            ..disk.def.clone()
        });
        let pages = DiskPages::new(PagesConfig { cache_pages: 4, ..Default::default() }, Box::<MemoryPages>::default());
        let pages = pages.shared();
        let mut on_disk = Partition::for_table(&disk, &pages);
        let mut in_memory = Partition::new(&memory);
        let metas = (&disk, &memory);
        let both = (&mut on_disk, &mut in_memory);
        let mut apply = |id: i64, row: Option<Vec<u8>>| {
            let key = key(metas.0, &[0], id);
            match row {
                Some(row) => assert_eq!(both.0.put(metas.0, &key, &row), both.1.put(metas.1, &key, &row)),
                None => assert_eq!(both.0.remove(metas.0, &key), both.1.remove(metas.1, &key)),
            }
        };
        for id in 0..300 {
            apply(id, Some(disk_row(&disk, id, id % 7, 500 + id as usize * 3)));
        }
        for id in (0..300).step_by(4) {
            apply(id, Some(disk_row(&disk, id, 100 + id % 3, if id % 8 == 0 { 40 } else { 3000 })));
        }
        for id in (1..300).step_by(9) {
            apply(id, None);
        }
        DiskPages::lock(&pages).check();
        let stats = DiskPages::lock(&pages).tablespace().stats();
        assert!(stats.evictions > 0, "the rows must not all fit the cache");
        // Every read path answers the same rows as the table in memory.
        for id in 0..300 {
            let k = key(&disk, &[0], id);
            assert_eq!(on_disk.get(&k).as_deref(), in_memory.get(&k).as_deref(), "row {id}");
        }
        let mut req = request(1, KeyBound::Included(key(&disk, &[2], 100)), KeyBound::Unbounded);
        req.filter = Some(Expr::cmp(CmpOp::Lt, Expr::col(0), Expr::val(Value::Int(200))));
        assert_eq!(scan_all(&disk, &on_disk, req.clone()), scan_all(&memory, &in_memory, req));
        let all = request(0, KeyBound::Unbounded, KeyBound::Unbounded);
        assert_eq!(scan_all(&disk, &on_disk, all.clone()), scan_all(&memory, &in_memory, all));
        assert_eq!(on_disk.digest_after(None, usize::MAX), in_memory.digest_after(None, usize::MAX));
        // Memory holds keys, k and the disk reference; the rest is on pages.
        assert!(on_disk.memory() * 4 < in_memory.memory(), "{} vs {}", on_disk.memory(), in_memory.memory());
        let live: usize = on_disk.rows().map(|(_, r)| disk.layout.project(&r, &[1, 3]).len()).sum();
        assert_eq!(on_disk.disk_bytes(), live);
        // Deleting every row gives every byte back to the pages.
        for id in 0..300 {
            let k = key(&disk, &[0], id);
            on_disk.remove(&disk, &k);
        }
        assert_eq!(on_disk.disk_bytes(), 0);
        assert_eq!(on_disk.memory(), 0);
        DiskPages::lock(&pages).check();
        let t = DiskPages::lock(&pages);
        // Emptied slots stay in their pages' directories until reused.
        let slots = t.tablespace().used_bytes();
        assert!(slots < t.tablespace().pages() as u64 * 64, "{slots} bytes still used after every row was deleted");
    }

    #[test]
    fn an_index_on_a_disk_column_is_refused() {
        let disk = disk_meta();
        let e = disk.def.with_index("c_idx", &["c".into()], false).unwrap_err();
        assert!(e.message.contains("STORAGE DISK"), "{}", e.message);
    }

    #[test]
    fn aggregates_and_empty_ranges() {
        let meta = meta();
        let mut p = Partition::new(&meta);
        fill(&meta, &mut p, 20);
        let mut req = request(0, KeyBound::Unbounded, KeyBound::Unbounded);
        req.aggregates = vec![Aggregate::CountRows, Aggregate::Sum(1), Aggregate::Max(0)];
        let page = p.scan(&meta, &req).unwrap();
        assert_eq!(page.aggregates[0], Value::UInt(20));
        assert_eq!(page.aggregates[1].to_string(), "90");
        assert_eq!(page.aggregates[2], Value::Int(19));
        // Inverted bounds are an empty range, not a panic.
        let req = request(0, KeyBound::Included(key(&meta, &[0], 9)), KeyBound::Excluded(key(&meta, &[0], 3)));
        assert!(p.scan(&meta, &req).unwrap().rows.is_empty());
    }
}
