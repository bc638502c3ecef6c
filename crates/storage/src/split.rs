//! How the rows of a table with disk columns are stored: apart.
//!
//! ```text
//! in memory (the partition's row map)   [memory part][DiskRef: page u32, slot u16]
//! on a page of the shard's tablespace   [disk part]
//! ```
//!
//! The memory part is the row projected on the memory columns (every key
//! and index column among them), the disk part the row projected on the
//! disk columns, both in the row format of `row.rs`. An index entry is
//! computed from the memory part alone, so keeping indexes never reads a
//! page; a read of a whole row reads one record from one page, and
//! `gather_into` puts the two parts back into the table's row format byte
//! for byte, so nothing above the partition sees the split.

use crate::pages::{DiskPages, SharedPages};
use crate::tablespace::{DiskRef, MAX_RECORD};
use latsdb_types::row::RowLayout;
use latsdb_types::schema::{ColumnId, Storage};
use latsdb_types::{DbError, ErrorCode, Result, TableMeta};

pub(crate) struct DiskSplit {
    pages: SharedPages,
    memory_columns: Vec<ColumnId>,
    disk_columns: Vec<ColumnId>,
    memory_layout: RowLayout,
    disk_layout: RowLayout,
    /// For each column of the table: (0 memory / 1 disk, its place there).
    origin: Vec<(usize, usize)>,
    /// The table's layout (one part: tables with disk columns do not add
    /// columns).
    full: RowLayout,
}

impl DiskSplit {
    pub(crate) fn new(meta: &TableMeta, pages: SharedPages) -> DiskSplit {
        let columns = &meta.def.columns;
        assert!(meta.def.added_parts.is_empty(), "a table with disk columns never added columns");
        let (disk_columns, memory_columns): (Vec<ColumnId>, Vec<ColumnId>) =
            (0..columns.len() as ColumnId).partition(|&c| columns[c as usize].storage == Storage::Disk);
        assert!(!disk_columns.is_empty(), "a split table has disk columns");
        for index in &meta.def.indexes {
            assert!(
                index.columns.iter().all(|c| memory_columns.contains(c)),
                "index {} reads a disk column",
                index.name
            );
        }
        let origin = (0..columns.len() as ColumnId)
            .map(|c| match memory_columns.binary_search(&c) {
                Ok(at) => (0, at),
                Err(_) => (1, disk_columns.binary_search(&c).expect("a column is in memory or on disk")),
            })
            .collect();
        DiskSplit {
            pages,
            memory_layout: meta.layout.projection(&memory_columns),
            disk_layout: meta.layout.projection(&disk_columns),
            memory_columns,
            disk_columns,
            origin,
            full: meta.layout.clone(),
        }
    }

    /// The layout of stored rows (their memory parts).
    pub(crate) fn memory_layout(&self) -> &RowLayout {
        &self.memory_layout
    }

    /// Where a column of the table is in the memory part; None for a disk
    /// column.
    pub(crate) fn memory_column(&self, column: ColumnId) -> Option<ColumnId> {
        self.memory_columns.binary_search(&column).ok().map(|at| at as ColumnId)
    }

    /// The disk part of a row of the table.
    pub(crate) fn disk_record(&self, row: &[u8]) -> Result<Vec<u8>> {
        self.check_len(row)?;
        Ok(self.full.project(row, &self.disk_columns))
    }

    /// Refuses a row whose disk part would not fit a page.
    pub(crate) fn check_len(&self, row: &[u8]) -> Result<()> {
        let len = self.disk_len(row);
        if len > MAX_RECORD {
            return Err(DbError::new(
                ErrorCode::BadRequest,
                format!(
                    "the STORAGE DISK columns of this row take {len} bytes, more than the {MAX_RECORD} a tablespace page holds; keep some of them in memory"
                ),
            ));
        }
        Ok(())
    }

    /// Bytes the row map keeps for a row of the table.
    pub(crate) fn stored_len(&self, row: &[u8]) -> usize {
        self.full.projected_len(row, &self.memory_columns) + DiskRef::ENCODED
    }

    /// Writes the row's disk part (over the one at `old`, if any) and
    /// answers what the row map keeps (the memory part and where the disk
    /// part is now) and the length of the disk part it replaced.
    pub(crate) fn store(&self, row: &[u8], old: Option<DiskRef>) -> (Vec<u8>, usize) {
        let record = self.disk_record(row).expect("a row's disk part was checked before it was committed");
        let mut pages = DiskPages::lock(&self.pages);
        let (at, old_len) = match old {
            Some(old) => {
                let old_len = pages.read_with(old, <[u8]>::len);
                (pages.update(old, &record), old_len)
            }
            None => (pages.insert(&record), 0),
        };
        drop(pages);
        let mut stored = Vec::with_capacity(row.len());
        self.full.project_into(row, &self.memory_columns, &mut stored);
        stored.extend_from_slice(&at.encode());
        debug_assert_eq!(disk_ref(&stored), at, "a stored row ends with where its disk part is");
        debug_assert_eq!(stored.len(), self.stored_len(row), "the memory part is as long as stored_len says");
        (stored, old_len)
    }

    /// Frees the disk part of a stored row.
    pub(crate) fn free(&self, stored: &[u8]) {
        DiskPages::lock(&self.pages).delete(disk_ref(stored));
    }

    /// Appends the whole row of a stored row to `out`.
    pub(crate) fn assemble_into(&self, stored: &[u8], out: &mut Vec<u8>) {
        let memory = &stored[..stored.len() - DiskRef::ENCODED];
        DiskPages::lock(&self.pages).read_with(disk_ref(stored), |record| {
            self.full.gather_into(&[(&self.memory_layout, memory), (&self.disk_layout, record)], &self.origin, out)
        });
    }

    /// Starts loading the page slot (`record` false) or the record (true)
    /// of a stored row's disk part, for batched reads.
    pub(crate) fn prefetch(&self, stored: &[u8], record: bool) {
        let pages = DiskPages::lock(&self.pages);
        match record {
            false => pages.tablespace().prefetch_slot(disk_ref(stored)),
            true => pages.tablespace().prefetch_record(disk_ref(stored)),
        }
    }

    /// Bytes of the disk part of a stored row.
    pub(crate) fn record_len(&self, stored: &[u8]) -> usize {
        DiskPages::lock(&self.pages).read_with(disk_ref(stored), <[u8]>::len)
    }

    /// Bytes of the disk part of a row (for the tablespace's room check).
    pub(crate) fn disk_len(&self, row: &[u8]) -> usize {
        self.full.projected_len(row, &self.disk_columns)
    }

    pub(crate) fn pages(&self) -> &SharedPages {
        &self.pages
    }
}

/// Where the disk part of a stored row is.
pub(crate) fn disk_ref(stored: &[u8]) -> DiskRef {
    let tail = &stored[stored.len() - DiskRef::ENCODED..];
    DiskRef::decode(tail.try_into().expect("a stored row ends with its disk reference"))
}
