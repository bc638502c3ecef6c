//! The primary-key hash index of a partition: open addressing with linear
//! probing, each slot holding the key's hash and the row entry.
//!
//! Written for batched lookups. A lookup costs two dependent cache misses
//! (the slot, then the entry), and in a VM each miss costs hundreds of
//! nanoseconds. With a batch of keys in hand the caller first prefetches
//! every key's slot, then every key's entry, then reads, so the misses of the
//! whole batch overlap instead of being paid one after another.
//! (hashbrown offers no prefetch hooks, hence this table.)
//!
//! Deletion shifts later entries of the probe run back (no tombstones), so
//! lookups never walk over dead slots.

use std::hash::BuildHasher;

/// One stored row: `[u16 LE key length][memcomparable key][row]` in a single
/// allocation, so the key comparison touches the same cache lines as the row.
pub(crate) struct Entry(Box<[u8]>);

impl Entry {
    pub(crate) fn new(key: &[u8], row: &[u8]) -> Entry {
        assert!(key.len() <= u16::MAX as usize, "primary key of {} bytes is longer than 64 KiB", key.len());
        let mut bytes = Vec::with_capacity(2 + key.len() + row.len());
        bytes.extend_from_slice(&(key.len() as u16).to_le_bytes());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(row);
        Entry(bytes.into_boxed_slice())
    }
    /// Replaces the row, in place when the new one is as long (an update
    /// that changes no length allocates nothing).
    pub(crate) fn set_row(&mut self, row: &[u8]) {
        let start = 2 + self.key_len();
        if self.0.len() - start == row.len() {
            self.0[start..].copy_from_slice(row);
        } else {
            *self = Entry::new(self.key(), row);
        }
    }
    fn key_len(&self) -> usize {
        u16::from_le_bytes([self.0[0], self.0[1]]) as usize
    }
    pub(crate) fn key(&self) -> &[u8] {
        &self.0[2..2 + self.key_len()]
    }
    pub(crate) fn row(&self) -> &[u8] {
        &self.0[2 + self.key_len()..]
    }
}

/// 32-byte aligned: a 24-byte slot would straddle two cache lines a third of
/// the time, and the prefetch of its first line would not cover the hash.
#[repr(align(32))]
struct Slot {
    hash: u64,
    entry: Option<Entry>,
}

const MIN_SLOTS: usize = 16;

pub(crate) struct RowMap {
    slots: Vec<Slot>,
    len: usize,
    /// 64 - log2(slots): the slot of a hash is its top bits.
    shift: u32,
    hasher: foldhash::fast::RandomState,
}

/// Where a prefetch should bring a cache line.
#[derive(Clone, Copy)]
pub(crate) enum Level {
    /// L1, for what is read next.
    L1,
    /// L2: a batch issues more slot prefetches than L1 can track at once.
    L2,
}

#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T, level: Level) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    #[allow(unused_unsafe)]
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        match level {
            Level::L1 => _mm_prefetch(p as *const i8, _MM_HINT_T0),
            Level::L2 => _mm_prefetch(p as *const i8, _MM_HINT_T1),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, level);
}

fn empty_slots(n: usize) -> Vec<Slot> {
    (0..n).map(|_| Slot { hash: 0, entry: None }).collect()
}

impl RowMap {
    pub(crate) fn new() -> RowMap {
        RowMap {
            slots: empty_slots(MIN_SLOTS),
            len: 0,
            shift: 64 - MIN_SLOTS.trailing_zeros(),
            hasher: Default::default(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        (hash >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// First step of a batched lookup: bring the key's home slot into cache.
    #[inline]
    pub(crate) fn prefetch_slot(&self, hash: u64) {
        prefetch(&self.slots[self.home(hash)], Level::L2);
    }

    /// Second step: bring the entries whose stored hash matches into cache
    /// (the slots are expected to be cached by now).
    #[inline]
    pub(crate) fn prefetch_entry(&self, hash: u64) {
        let mut i = self.home(hash);
        loop {
            let slot = &self.slots[i];
            match &slot.entry {
                None => return,
                Some(e) if slot.hash == hash => {
                    // Every cache line of the entry (its length is in the
                    // slot), up to 4: the row is copied right after.
                    let bytes = e.0.as_ptr();
                    let lines = e.0.len().div_ceil(64).min(4);
                    for line in 0..lines {
                        prefetch(bytes.wrapping_add(line * 64), Level::L1);
                    }
                    return;
                }
                Some(_) => i = (i + 1) & self.mask(),
            }
        }
    }

    #[inline]
    pub(crate) fn get(&self, key: &[u8], hash: u64) -> Option<&Entry> {
        self.find(key, hash).map(|i| self.slots[i].entry.as_ref().expect("found slots are full"))
    }

    fn find(&self, key: &[u8], hash: u64) -> Option<usize> {
        let mut i = self.home(hash);
        loop {
            let slot = &self.slots[i];
            match &slot.entry {
                None => return None,
                Some(e) if slot.hash == hash && e.key() == key => return Some(i),
                Some(_) => i = (i + 1) & self.mask(),
            }
        }
    }

    /// The entry of `key`, to replace it in place.
    pub(crate) fn get_mut(&mut self, key: &[u8], hash: u64) -> Option<&mut Entry> {
        let i = self.find(key, hash)?;
        self.slots[i].entry.as_mut()
    }

    /// Inserts an entry whose key is not present; `hash` is `self.hash(key)`.
    pub(crate) fn insert_new_hashed(&mut self, entry: Entry, hash: u64) {
        // Grow at 7/8 full: linear probing stays short up to there with a
        // good hash, and slots are only 32 bytes.
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
        }
        debug_assert!(self.find(entry.key(), hash).is_none(), "insert_new of a present key");
        let mut i = self.home(hash);
        while self.slots[i].entry.is_some() {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = Slot { hash, entry: Some(entry) };
        self.len += 1;
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let hash = self.hash(key);
        let mut hole = self.find(key, hash)?;
        let removed = self.slots[hole].entry.take();
        self.len -= 1;
        // Backward shift: move later members of the run into the hole when
        // their home is at or before it, so every entry stays reachable.
        let mask = self.mask();
        let mut i = (hole + 1) & mask;
        while self.slots[i].entry.is_some() {
            let home = self.home(self.slots[i].hash);
            // Distance from home to i, and from home to the hole, around the ring.
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                let moved = Slot { hash: self.slots[i].hash, entry: self.slots[i].entry.take() };
                self.slots[hole] = moved;
                hole = i;
            }
            i = (i + 1) & mask;
        }
        removed
    }

    fn grow(&mut self) {
        let new_len = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, empty_slots(new_len));
        self.shift = 64 - new_len.trailing_zeros();
        let mask = self.mask();
        for slot in old {
            if let Some(entry) = slot.entry {
                let mut i = self.home(slot.hash);
                while self.slots[i].entry.is_some() {
                    i = (i + 1) & mask;
                }
                self.slots[i] = Slot { hash: slot.hash, entry: Some(entry) };
            }
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().filter_map(|s| s.entry.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random inserts and removes against a std HashMap as the model.
    #[test]
    fn matches_a_model_under_random_inserts_and_removes() {
        let mut map = RowMap::new();
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut seed = 0x1234_5678_9abc_def0u64;
        for step in 0..200_000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let key = (seed % 5000).to_be_bytes().to_vec();
            if seed.is_multiple_of(3) {
                let removed = map.remove(&key).map(|e| e.row().to_vec());
                assert_eq!(removed, model.remove(&key), "step {step}");
            } else if let std::collections::hash_map::Entry::Vacant(slot) = model.entry(key.clone()) {
                let row = step.to_le_bytes().to_vec();
                map.insert_new_hashed(Entry::new(&key, &row), map.hash(&key));
                slot.insert(row);
            }
            if step % 997 == 0 {
                for (k, v) in &model {
                    let h = map.hash(k);
                    map.prefetch_slot(h);
                    map.prefetch_entry(h);
                    assert_eq!(map.get(k, h).map(|e| e.row()), Some(&v[..]));
                }
                assert_eq!(map.len(), model.len());
                assert_eq!(map.iter().count(), model.len());
            }
        }
    }
}
