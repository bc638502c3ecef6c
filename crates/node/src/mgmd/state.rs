//! The management server's state file, `mgmd-state.bin`: the schema, the
//! next table id, the latest durable epoch and the last view, and the
//! older formats of the file it still reads.

use latsdb_types::proto::{self, NodeId};
use latsdb_types::schema::TableDef;
use latsdb_types::{DbError, ErrorCode, Result};

/// What the management server keeps on disk.
#[derive(serde::Serialize, serde::Deserialize, Default)]
pub(super) struct Persisted {
    pub(super) tables: Vec<TableDef>,
    pub(super) next_table_id: u32,
    pub(super) durable_epoch: latsdb_types::proto::CommitEpoch,
    /// Data nodes of the last view while the cluster ran, and its epoch
    /// (the next run's views come after it).
    pub(super) last_view: Vec<NodeId>,
    pub(super) last_view_number: latsdb_types::proto::ViewNumber,
}

const STATE_FILE: &str = "mgmd-state.bin";
/// Format of the state file, kept in its frame's request-id field. Format 0
/// predates `TableDef::added_parts` (ALTER TABLE ADD COLUMN) and
/// `IndexDef::unique`; format 1 predates `ColumnDef::storage` (disk
/// columns); format 2 predates `ColumnDef::fraction_digits` and
/// `ColumnDef::clock` (DATETIME(n), DEFAULT/ON UPDATE CURRENT_TIMESTAMP);
/// format 3 predates `ColumnDef::members` (ENUM and SET); format 4
/// predates `TableDef::foreign_keys` and `TableDef::referenced_by`.
const STATE_FORMAT: u64 = 5;

/// A column as formats 0 and 1 wrote it (every column was in memory).
#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct ColumnDefV1 {
    name: String,
    ty: latsdb_types::schema::ColumnType,
    nullable: bool,
    default: Option<latsdb_types::Value>,
    collation: latsdb_types::Collation,
}

impl From<ColumnDefV1> for ColumnDefV2 {
    fn from(old: ColumnDefV1) -> Self {
        ColumnDefV2 {
            name: old.name,
            ty: old.ty,
            nullable: old.nullable,
            default: old.default,
            collation: old.collation,
            storage: latsdb_types::schema::Storage::Memory,
        }
    }
}

/// A column as format 2 wrote it.
#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct ColumnDefV2 {
    name: String,
    ty: latsdb_types::schema::ColumnType,
    nullable: bool,
    default: Option<latsdb_types::Value>,
    collation: latsdb_types::Collation,
    storage: latsdb_types::schema::Storage,
}

impl From<ColumnDefV2> for ColumnDefV3 {
    fn from(old: ColumnDefV2) -> Self {
        use latsdb_types::schema::ColumnType;
        // Until format 3 DATETIME and TIMESTAMP columns kept whatever
        // microseconds they were given: they are declared with all six
        // digits so that no stored value is shown otherwise than it was.
        let digits = if matches!(old.ty, ColumnType::DateTime | ColumnType::Timestamp) { 6 } else { 0 };
        ColumnDefV3 {
            name: old.name,
            ty: old.ty,
            nullable: old.nullable,
            default: old.default,
            collation: old.collation,
            storage: old.storage,
            fraction_digits: digits,
            clock: latsdb_types::schema::ClockFill::default(),
        }
    }
}

impl From<ColumnDefV1> for ColumnDefV3 {
    fn from(old: ColumnDefV1) -> Self {
        ColumnDefV2::from(old).into()
    }
}

impl From<ColumnDefV1> for latsdb_types::schema::ColumnDef {
    fn from(old: ColumnDefV1) -> Self {
        ColumnDefV3::from(old).into()
    }
}

impl From<ColumnDefV2> for latsdb_types::schema::ColumnDef {
    fn from(old: ColumnDefV2) -> Self {
        ColumnDefV3::from(old).into()
    }
}

/// A column as format 3 wrote it.
#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct ColumnDefV3 {
    name: String,
    ty: latsdb_types::schema::ColumnType,
    nullable: bool,
    default: Option<latsdb_types::Value>,
    collation: latsdb_types::Collation,
    storage: latsdb_types::schema::Storage,
    fraction_digits: u8,
    clock: latsdb_types::schema::ClockFill,
}

impl From<ColumnDefV3> for latsdb_types::schema::ColumnDef {
    /// Columns of format 3 and before had no ENUM or SET, so no members.
    fn from(old: ColumnDefV3) -> Self {
        latsdb_types::schema::ColumnDef {
            name: old.name,
            ty: old.ty,
            nullable: old.nullable,
            default: old.default,
            collation: old.collation,
            storage: old.storage,
            fraction_digits: old.fraction_digits,
            clock: old.clock,
            members: Vec::new(),
        }
    }
}

/// The state file as formats 1 to 4 wrote it, with their columns `C`.
#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct PersistedV1<C> {
    tables: Vec<TableDefV1<C>>,
    next_table_id: u32,
    durable_epoch: latsdb_types::proto::CommitEpoch,
    last_view: Vec<NodeId>,
    last_view_number: latsdb_types::proto::ViewNumber,
}

#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct TableDefV1<C> {
    id: latsdb_types::schema::TableId,
    version: u32,
    database: String,
    name: String,
    columns: Vec<C>,
    primary_key: Vec<latsdb_types::schema::ColumnId>,
    partitions: u32,
    indexes: Vec<latsdb_types::schema::IndexDef>,
    added_parts: Vec<latsdb_types::schema::RowPart>,
}

impl<C: Into<latsdb_types::schema::ColumnDef>> From<PersistedV1<C>> for Persisted {
    fn from(old: PersistedV1<C>) -> Persisted {
        let tables = old
            .tables
            .into_iter()
            .map(|t| TableDef {
                id: t.id,
                version: t.version,
                database: t.database,
                name: t.name,
                columns: t.columns.into_iter().map(Into::into).collect(),
                primary_key: t.primary_key,
                partitions: t.partitions,
                indexes: t.indexes,
                added_parts: t.added_parts,
                // Until format 5 no table kept a foreign key.
                foreign_keys: Vec::new(),
                referenced_by: Vec::new(),
            })
            .collect();
        Persisted {
            tables,
            next_table_id: old.next_table_id,
            durable_epoch: old.durable_epoch,
            last_view: old.last_view,
            last_view_number: old.last_view_number,
        }
    }
}

/// The state file as format 0 wrote it.
#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct PersistedV0 {
    tables: Vec<TableDefV0>,
    next_table_id: u32,
    durable_epoch: latsdb_types::proto::CommitEpoch,
    last_view: Vec<NodeId>,
    last_view_number: latsdb_types::proto::ViewNumber,
}

#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct TableDefV0 {
    id: latsdb_types::schema::TableId,
    version: u32,
    database: String,
    name: String,
    columns: Vec<ColumnDefV1>,
    primary_key: Vec<latsdb_types::schema::ColumnId>,
    partitions: u32,
    indexes: Vec<IndexDefV0>,
}

#[derive(serde::Deserialize)]
#[cfg_attr(test, derive(serde::Serialize))]
struct IndexDefV0 {
    id: latsdb_types::schema::IndexId,
    name: String,
    columns: Vec<latsdb_types::schema::ColumnId>,
}

/// Format 0 is read as format 1 without added columns, then migrated on.
impl From<PersistedV0> for PersistedV1<ColumnDefV1> {
    fn from(old: PersistedV0) -> PersistedV1<ColumnDefV1> {
        let tables = old
            .tables
            .into_iter()
            .map(|t| TableDefV1 {
                id: t.id,
                version: t.version,
                database: t.database,
                name: t.name,
                columns: t.columns,
                primary_key: t.primary_key,
                partitions: t.partitions,
                indexes: t
                    .indexes
                    .into_iter()
                    // Format 0 had no unique indexes but the primary key.
                    .map(|i| latsdb_types::schema::IndexDef {
                        unique: i.id == 0,
                        id: i.id,
                        name: i.name,
                        columns: i.columns,
                    })
                    .collect(),
                added_parts: Vec::new(),
            })
            .collect();
        PersistedV1 {
            tables,
            next_table_id: old.next_table_id,
            durable_epoch: old.durable_epoch,
            last_view: old.last_view,
            last_view_number: old.last_view_number,
        }
    }
}

pub(super) fn load_state(dir: &std::path::Path) -> Result<Persisted> {
    let path = dir.join(STATE_FILE);
    let Some((format, bytes)) = read_framed(&path)? else { return Ok(Persisted::default()) };
    let Some(format) = format else {
        return Err(DbError::new(
            ErrorCode::Io,
            format!(
                "{} is damaged (truncated); restore it from a backup or remove it to start without the schema",
                path.display()
            ),
        ));
    };
    let unreadable =
        |e: DbError| DbError::new(ErrorCode::Io, format!("{} cannot be read: {}", path.display(), e.message));
    match format {
        0 => proto::decode_body::<PersistedV0>(&bytes[12..])
            .map(|v0| Persisted::from(PersistedV1::from(v0)))
            .map_err(unreadable),
        1 => proto::decode_body::<PersistedV1<ColumnDefV1>>(&bytes[12..]).map(Persisted::from).map_err(unreadable),
        2 => proto::decode_body::<PersistedV1<ColumnDefV2>>(&bytes[12..]).map(Persisted::from).map_err(unreadable),
        3 => proto::decode_body::<PersistedV1<ColumnDefV3>>(&bytes[12..]).map(Persisted::from).map_err(unreadable),
        4 => proto::decode_body::<PersistedV1<latsdb_types::schema::ColumnDef>>(&bytes[12..])
            .map(Persisted::from)
            .map_err(unreadable),
        STATE_FORMAT => proto::decode_body(&bytes[12..]).map_err(unreadable),
        newer => Err(DbError::new(
            ErrorCode::Io,
            format!(
                "{} has format {newer}, newer than this latsdb understands ({STATE_FORMAT}); run the latsdb version that wrote it",
                path.display()
            ),
        )),
    }
}

/// Writes the state atomically: a temporary file, synced, renamed over the
/// old one, and the folder synced.
pub(super) fn write_state(dir: &std::path::Path, state: &Persisted) -> Result<()> {
    write_framed(dir, STATE_FILE, STATE_FORMAT, state)
}

/// The arbitrator's votes (`Arbiter`: the view it knows, what it promised
/// and accepted), in a file of their own: they change with every view
/// change, apart from the schema.
const VOTES_FILE: &str = "arbiter-votes.bin";
const VOTES_FORMAT: u64 = 1;

/// Keeps the arbitrator's votes on disk, synced, before it answers.
pub(super) fn write_votes(dir: &std::path::Path, votes: &latsdb_cluster::membership::Arbiter) -> Result<()> {
    write_framed(dir, VOTES_FILE, VOTES_FORMAT, votes)
}

/// The arbitrator's votes as the last process kept them; None if it kept
/// none (a first start, or a server that ran without a data folder).
pub(super) fn load_votes(dir: &std::path::Path) -> Result<Option<latsdb_cluster::membership::Arbiter>> {
    let path = dir.join(VOTES_FILE);
    let Some((format, bytes)) = read_framed(&path)? else { return Ok(None) };
    let damaged = |why: String| {
        DbError::new(
            ErrorCode::Io,
            format!(
                "{} is damaged ({why}); the arbitrator's votes cannot be known: remove the file only if no data node of this cluster runs (start them all again: a system restart)",
                path.display()
            ),
        )
    };
    let Some(format) = format else { return Err(damaged("truncated".into())) };
    if format != VOTES_FORMAT {
        return Err(damaged(format!("format {format}, where this latsdb writes {VOTES_FORMAT}")));
    }
    proto::decode_body(&bytes[12..]).map(Some).map_err(|e| damaged(e.message))
}

/// A file `write_framed` wrote: None if it does not exist, else its format
/// (None if the frame is not whole: a truncated file) and its bytes, the
/// body from byte 12.
fn read_framed(path: &std::path::Path) -> Result<Option<(Option<u64>, Vec<u8>)>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(DbError::io(&format!("reading {}", path.display()), e)),
    };
    let whole =
        bytes.len() >= 12 && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize + 4 == bytes.len();
    // `whole` checked the 12-byte header is there.
    let format = whole.then(|| {
        u64::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10], bytes[11]])
    });
    Ok(Some((format, bytes)))
}

/// Writes `value` framed with `format` atomically: a temporary file,
/// synced, renamed over the old one, and the folder synced.
fn write_framed<T: serde::Serialize>(dir: &std::path::Path, file: &str, format: u64, value: &T) -> Result<()> {
    let bytes = proto::frame(format, value);
    let tmp = dir.join(format!("{file}.tmp"));
    let path = dir.join(file);
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| DbError::io(&format!("writing {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use latsdb_types::proto::CommitEpoch;
    use latsdb_types::schema::TableSpec;
    use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, Storage};
    use latsdb_types::Value;
    use std::path::PathBuf;

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("latsdb-mgmd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn table() -> TableDef {
        let spec = TableSpec::new("db", "t")
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)))
            .column(ColumnDef::new("v", ColumnType::VarChar(10)))
            .primary_key(&["id"]);
        TableDef::from_spec(&spec, 7, 4).unwrap()
    }

    #[test]
    fn a_state_file_of_the_format_before_added_columns_still_loads() {
        let dir = scratch_dir("v0");
        let t = table();
        let old = PersistedV0 {
            tables: vec![TableDefV0 {
                id: t.id,
                version: 3,
                database: t.database.clone(),
                name: t.name.clone(),
                columns: t.columns.iter().map(old_column).collect(),
                primary_key: t.primary_key.clone(),
                partitions: t.partitions,
                indexes: t
                    .indexes
                    .iter()
                    .map(|i| IndexDefV0 { id: i.id, name: i.name.clone(), columns: i.columns.clone() })
                    .collect(),
            }],
            next_table_id: 8,
            durable_epoch: CommitEpoch(41),
            last_view: vec![1, 2],
            last_view_number: latsdb_types::proto::ViewNumber(5),
        };
        std::fs::write(dir.join(STATE_FILE), proto::frame(0, &old)).unwrap();
        let loaded = load_state(&dir).unwrap();
        assert_eq!(loaded.tables, vec![TableDef { version: 3, ..t }]);
        assert_eq!(
            (loaded.next_table_id, loaded.durable_epoch, loaded.last_view_number),
            (8, CommitEpoch(41), latsdb_types::proto::ViewNumber(5))
        );
        assert_eq!(loaded.last_view, vec![1, 2]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn old_column(c: &ColumnDef) -> ColumnDefV1 {
        ColumnDefV1 {
            name: c.name.clone(),
            ty: c.ty,
            nullable: c.nullable,
            default: c.default.clone(),
            collation: c.collation,
        }
    }

    /// `t` as formats 1 to 3 wrote it, its columns made by `column`.
    fn old_state<C>(t: &TableDef, column: impl Fn(&ColumnDef) -> C) -> PersistedV1<C> {
        PersistedV1 {
            tables: vec![TableDefV1 {
                id: t.id,
                version: t.version,
                database: t.database.clone(),
                name: t.name.clone(),
                columns: t.columns.iter().map(column).collect(),
                primary_key: t.primary_key.clone(),
                partitions: t.partitions,
                indexes: t.indexes.clone(),
                added_parts: t.added_parts.clone(),
            }],
            next_table_id: 8,
            durable_epoch: CommitEpoch(9),
            last_view: vec![3],
            last_view_number: latsdb_types::proto::ViewNumber(2),
        }
    }

    #[test]
    fn a_state_file_of_the_format_before_disk_columns_still_loads() {
        let dir = scratch_dir("v1");
        let t = table().with_columns(&[ColumnDef::new("n", ColumnType::Double)], &[Value::Float(0.5)]).unwrap();
        let old = old_state(&t, old_column);
        std::fs::write(dir.join(STATE_FILE), proto::frame(1, &old)).unwrap();
        let loaded = load_state(&dir).unwrap();
        assert_eq!(loaded.tables, vec![t]);
        assert_eq!((loaded.next_table_id, loaded.durable_epoch), (8, CommitEpoch(9)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_state_file_of_the_format_before_fraction_digits_still_loads() {
        let dir = scratch_dir("v2");
        let mut t = table().with_columns(&[ColumnDef::new("at", ColumnType::DateTime)], &[Value::Null]).unwrap();
        t.columns[1].storage = Storage::Disk;
        let old_column = |c: &ColumnDef| ColumnDefV2 {
            name: c.name.clone(),
            ty: c.ty,
            nullable: c.nullable,
            default: c.default.clone(),
            collation: c.collation,
            storage: c.storage,
        };
        let old = old_state(&t, old_column);
        std::fs::write(dir.join(STATE_FILE), proto::frame(2, &old)).unwrap();
        let loaded = load_state(&dir).unwrap();
        // The DATETIME column kept microseconds before format 3: it keeps six digits.
        let mut expected = t;
        expected.columns[2].fraction_digits = 6;
        assert_eq!(loaded.tables, vec![expected]);
        assert_eq!(loaded.tables[0].columns[1].storage, Storage::Disk);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_state_file_of_the_format_before_enum_members_still_loads() {
        let dir = scratch_dir("v3");
        let at = ColumnDef::new("at", ColumnType::DateTime).fraction_digits(3);
        let t = table().with_columns(&[at], &[Value::Null]).unwrap();
        let old_column = |c: &ColumnDef| ColumnDefV3 {
            name: c.name.clone(),
            ty: c.ty,
            nullable: c.nullable,
            default: c.default.clone(),
            collation: c.collation,
            storage: c.storage,
            fraction_digits: c.fraction_digits,
            clock: c.clock,
        };
        let old = old_state(&t, old_column);
        std::fs::write(dir.join(STATE_FILE), proto::frame(3, &old)).unwrap();
        assert_eq!(load_state(&dir).unwrap().tables, vec![t]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_state_file_of_the_format_before_foreign_keys_still_loads() {
        let dir = scratch_dir("v4");
        let size = ColumnDef::new("size", ColumnType::Enum).members(["small", "large"]);
        let t = table().with_columns(&[size], &[Value::Null]).unwrap();
        let old = old_state(&t, ColumnDef::clone);
        std::fs::write(dir.join(STATE_FILE), proto::frame(4, &old)).unwrap();
        assert_eq!(load_state(&dir).unwrap().tables, vec![t]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_current_format_keeps_added_columns_and_a_newer_one_is_refused() {
        let dir = scratch_dir("v5");
        let size = ColumnDef::new("size", ColumnType::Enum).members(["small", "large"]);
        let t = table()
            .with_columns(&[ColumnDef::new("n", ColumnType::Double), size], &[Value::Float(0.5), Value::Null])
            .unwrap();
        let t = TableDef {
            columns: t.columns.into_iter().map(|c| if c.name == "v" { c.storage(Storage::Disk) } else { c }).collect(),
            ..t
        };
        let key = latsdb_types::schema::ForeignKeyDef {
            name: "t_ibfk_1".into(),
            columns: vec![2],
            parent_database: "db".into(),
            parent_table: "p".into(),
            parent_columns: vec!["id".into()],
            on_delete: latsdb_types::schema::ReferenceAction::Cascade,
            on_update: latsdb_types::schema::ReferenceAction::Restrict,
        };
        let mut t = t.with_changed_columns(&[latsdb_types::schema::ColumnChange::AddForeignKey(key)]).unwrap();
        t.referenced_by.push(latsdb_types::schema::ForeignKeyRef {
            database: "db".into(),
            table: "c".into(),
            name: "c_ibfk_1".into(),
        });
        let state = Persisted { tables: vec![t.clone()], next_table_id: 8, ..Persisted::default() };
        std::fs::write(dir.join(STATE_FILE), proto::frame(STATE_FORMAT, &state)).unwrap();
        assert_eq!(load_state(&dir).unwrap().tables, vec![t]);
        std::fs::write(dir.join(STATE_FILE), proto::frame(STATE_FORMAT + 1, &state)).unwrap();
        let refused = load_state(&dir).err().unwrap();
        assert!(refused.message.contains("newer than this latsdb understands"), "{}", refused.message);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A management server that restarts keeps what its arbitrator promised:
    /// a proposer with a lower ballot for the same view is still refused, and
    /// the promise's view is still the one it knows.
    #[test]
    fn the_arbitrators_votes_survive_a_restart() {
        use latsdb_cluster::membership::Arbiter;
        use latsdb_types::proto::{Ballot, MemberMsg, ViewNumber};
        let dir = scratch_dir("votes");
        assert!(load_votes(&dir).unwrap().is_none(), "a first start has no votes");
        let mut arbiter = Arbiter::new_at(ViewNumber(4), vec![2, 3, 4, 5]);
        let high = Ballot { round: 9, node: 3 };
        let prepare = MemberMsg::Prepare { epoch: ViewNumber(5), ballot: high, base: vec![2, 3, 4, 5] };
        assert!(matches!(arbiter.on_message(prepare), Some(MemberMsg::Promise { .. })));
        write_votes(&dir, &arbiter).unwrap();

        let mut restarted = load_votes(&dir).unwrap().expect("votes were kept");
        assert_eq!(restarted, arbiter);
        let low = Ballot { round: 8, node: 2 };
        let accept = MemberMsg::Accept { epoch: ViewNumber(5), ballot: low, members: vec![2, 4] };
        match restarted.on_message(accept) {
            Some(MemberMsg::Reject { promised, .. }) => assert_eq!(promised, Some(high)),
            other => panic!("a restarted arbitrator forgot its promise: {other:?}"),
        }

        // A damaged file is refused, saying what to do.
        let bytes = std::fs::read(dir.join(VOTES_FILE)).unwrap();
        std::fs::write(dir.join(VOTES_FILE), &bytes[..bytes.len() - 1]).unwrap();
        let refused = load_votes(&dir).err().unwrap();
        assert!(refused.message.contains("damaged (truncated)"), "{}", refused.message);
        assert!(refused.message.contains("system restart"), "{}", refused.message);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
