//! Table schema: column types, table and index
//! definitions as stored in cluster metadata.

use crate::error::{DbError, Result};
use serde::{Deserialize, Serialize};

pub type TableId = u32;
pub type IndexId = u16;
pub type ColumnId = u16;

/// Index id 0 of every table is the ordered index on the primary key (as in
/// NDB, a primary key gets a hash index for lookups and an ordered index for
/// ranges and full scans).
pub const PRIMARY_INDEX: IndexId = 0;

/// Largest number of columns a table may have.
pub const MAX_COLUMNS: usize = 512;
/// Largest declared length of a CHAR/VARCHAR/BINARY/VARBINARY column.
pub const MAX_DECLARED_LENGTH: u32 = 65_535;
/// Largest stored size of one TEXT/BLOB value held in memory.
pub const MAX_LOB_BYTES: usize = 4 << 20;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntWidth {
    Tiny,
    Small,
    Medium,
    Int,
    Big,
}

impl IntWidth {
    pub fn bits(self) -> u32 {
        match self {
            IntWidth::Tiny => 8,
            IntWidth::Small => 16,
            IntWidth::Medium => 24,
            IntWidth::Int => 32,
            IntWidth::Big => 64,
        }
    }
    /// Bytes used in the fixed part of a row.
    pub fn stored_bytes(self) -> usize {
        match self {
            IntWidth::Tiny => 1,
            IntWidth::Small => 2,
            IntWidth::Medium | IntWidth::Int => 4,
            IntWidth::Big => 8,
        }
    }
    pub fn signed_range(self) -> (i64, i64) {
        let bits = self.bits();
        if bits == 64 {
            (i64::MIN, i64::MAX)
        } else {
            (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
        }
    }
    pub fn unsigned_max(self) -> u64 {
        let bits = self.bits();
        if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColumnType {
    Integer {
        width: IntWidth,
        unsigned: bool,
    },
    Float,
    Double,
    /// DECIMAL(precision, scale); precision at most 38.
    Decimal {
        precision: u8,
        scale: u8,
    },
    /// CHAR(n): n characters of utf8mb4.
    Char(u32),
    VarChar(u32),
    Binary(u32),
    VarBinary(u32),
    Text,
    Blob,
    /// Days since 1970-01-01.
    Date,
    /// Microseconds since 1970-01-01 00:00:00, no time zone.
    DateTime,
    /// Microseconds since the Unix epoch, UTC.
    Timestamp,
    Boolean,
    /// MySQL's TIME: a signed span of microseconds, at most 838:59:59
    /// either way (a time of day, or an elapsed time).
    Time,
    /// YEAR: 1901-2155, or 0 (MySQL's '0000').
    Year,
    /// BIT(n), n from 1 to 64: n bits, read and written as an unsigned
    /// integer.
    Bit(u8),
    /// ENUM: one of the column's members ([`ColumnDef::members`]), kept as
    /// its text.
    Enum,
    /// SET: any of the column's members, kept as their text joined by
    /// commas in the order the column declares them.
    Set,
}

impl ColumnType {
    pub const fn int(width: IntWidth) -> Self {
        ColumnType::Integer { width, unsigned: false }
    }
    pub const fn uint(width: IntWidth) -> Self {
        ColumnType::Integer { width, unsigned: true }
    }

    /// Whether a column of this type may take type `to` without rewriting
    /// its stored values: both are stored as a length and bytes, of the
    /// same kind (text or binary), and `to` holds at least as much. An
    /// ENUM or SET stays one (its members are checked apart).
    pub fn widens_to(self, to: ColumnType) -> bool {
        use ColumnType::{Blob, Enum, Set, Text, VarBinary, VarChar};
        match (self, to) {
            (VarChar(a), VarChar(b)) | (VarBinary(a), VarBinary(b)) => b >= a,
            (VarChar(_) | Text, Text) | (VarBinary(_) | Blob, Blob) => true,
            (Enum, Enum) | (Set, Set) => true,
            _ => false,
        }
    }

    /// Size in the fixed part of a row, or None for variable-sized types.
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            ColumnType::Integer { width, .. } => Some(width.stored_bytes()),
            ColumnType::Float => Some(4),
            ColumnType::Double => Some(8),
            ColumnType::Decimal { .. } => Some(16),
            ColumnType::Date => Some(4),
            ColumnType::DateTime | ColumnType::Timestamp => Some(8),
            ColumnType::Boolean => Some(1),
            ColumnType::Time | ColumnType::Bit(_) => Some(8),
            ColumnType::Year => Some(2),
            ColumnType::Char(_)
            | ColumnType::VarChar(_)
            | ColumnType::Binary(_)
            | ColumnType::VarBinary(_)
            | ColumnType::Text
            | ColumnType::Blob
            | ColumnType::Enum
            | ColumnType::Set => None,
        }
    }

    /// Text kept as text (compared and keyed by the column's collation).
    pub fn is_string(self) -> bool {
        matches!(
            self,
            ColumnType::Char(_) | ColumnType::VarChar(_) | ColumnType::Text | ColumnType::Enum | ColumnType::Set
        )
    }

    /// CHAR, VARCHAR and TEXT: text stored as given (up to a length),
    /// which a key may encode straight from a request's text.
    pub fn is_free_text(self) -> bool {
        matches!(self, ColumnType::Char(_) | ColumnType::VarChar(_) | ColumnType::Text)
    }

    pub fn is_binary(self) -> bool {
        matches!(self, ColumnType::Binary(_) | ColumnType::VarBinary(_) | ColumnType::Blob)
    }

    /// TEXT and BLOB columns cannot be part of a key or index.
    pub fn is_indexable(self) -> bool {
        !matches!(self, ColumnType::Text | ColumnType::Blob)
    }

    pub fn validate(self) -> Result<()> {
        match self {
            ColumnType::Decimal { precision, scale } if precision == 0 || precision > 38 || scale > precision => {
                return Err(DbError::bad_request(format!(
                    "DECIMAL({precision},{scale}) is invalid: precision must be 1..=38 and scale at most the precision"
                )));
            }
            ColumnType::Char(n) | ColumnType::Binary(n) if n > 255 => {
                return Err(DbError::bad_request(format!(
                    "CHAR/BINARY length {n} is too large (at most 255); use VARCHAR/VARBINARY"
                )));
            }
            ColumnType::VarChar(n) | ColumnType::VarBinary(n) if n > MAX_DECLARED_LENGTH => {
                return Err(DbError::bad_request(format!(
                    "VARCHAR/VARBINARY length {n} is too large (at most {MAX_DECLARED_LENGTH}); use TEXT/BLOB"
                )));
            }
            ColumnType::Bit(n) if n == 0 || n > 64 => {
                return Err(DbError::bad_request(format!("BIT({n}) is invalid: a BIT column has 1 to 64 bits")));
            }
            _ => {}
        }
        Ok(())
    }

    /// SQL spelling, used in messages and by SHOW CREATE TABLE.
    pub fn sql_name(self) -> String {
        match self {
            ColumnType::Integer { width, unsigned } => {
                let base = match width {
                    IntWidth::Tiny => "TINYINT",
                    IntWidth::Small => "SMALLINT",
                    IntWidth::Medium => "MEDIUMINT",
                    IntWidth::Int => "INT",
                    IntWidth::Big => "BIGINT",
                };
                if unsigned {
                    format!("{base} UNSIGNED")
                } else {
                    base.to_string()
                }
            }
            ColumnType::Float => "FLOAT".into(),
            ColumnType::Double => "DOUBLE".into(),
            ColumnType::Decimal { precision, scale } => format!("DECIMAL({precision},{scale})"),
            ColumnType::Char(n) => format!("CHAR({n})"),
            ColumnType::VarChar(n) => format!("VARCHAR({n})"),
            ColumnType::Binary(n) => format!("BINARY({n})"),
            ColumnType::VarBinary(n) => format!("VARBINARY({n})"),
            ColumnType::Text => "TEXT".into(),
            ColumnType::Blob => "BLOB".into(),
            ColumnType::Date => "DATE".into(),
            ColumnType::DateTime => "DATETIME".into(),
            ColumnType::Timestamp => "TIMESTAMP".into(),
            ColumnType::Boolean => "BOOLEAN".into(),
            ColumnType::Time => "TIME".into(),
            ColumnType::Year => "YEAR".into(),
            ColumnType::Bit(n) => format!("BIT({n})"),
            ColumnType::Enum => "ENUM".into(),
            ColumnType::Set => "SET".into(),
        }
    }
}

/// A change to one column that leaves stored rows as they are.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum ColumnChange {
    Rename {
        from: String,
        to: String,
    },
    /// `None` drops the default.
    SetDefault {
        column: String,
        default: Option<crate::Value>,
    },
    /// A NOT NULL column starts to admit NULL (every row has a null bit
    /// for every column, so stored rows stay valid).
    AllowNull {
        column: String,
    },
    /// Whether the SQL node fills the column from its clock (see
    /// [`ClockFill`]); a temporal column only.
    SetClock {
        column: String,
        clock: ClockFill,
    },
    /// A variable-size column takes a type that holds every value the old
    /// one held, stored the same way (see [`ColumnType::widens_to`]), or an
    /// ENUM/SET gains members after its own: stored rows stay valid.
    Widen {
        column: String,
        ty: ColumnType,
        members: Vec<String>,
    },
    /// The column leaves the table's definition (MySQL 8's instant DROP
    /// COLUMN): it keeps its place in the row format, so stored rows stay
    /// valid, but it is renamed `$dropped$<id>`, admits NULL and has no
    /// default, and no name reaches it. Writes store NULL in it; a row
    /// stored before keeps the value's bytes until it is written again.
    /// A column of the primary key or of an index cannot be dropped (drop
    /// the index first).
    Drop {
        column: String,
    },
    /// A foreign key (see [`ForeignKeyDef`]): definition only, as the SQL
    /// node checks the rows (it checks the stored ones before asking).
    AddForeignKey(ForeignKeyDef),
    DropForeignKey {
        name: String,
    },
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ColumnDef {
    pub name: String,
    pub ty: ColumnType,
    pub nullable: bool,
    /// Value used when an insert does not name the column.
    pub default: Option<crate::Value>,
    /// How values of a text column compare (and are keyed); `Bin` for
    /// every other type.
    pub collation: crate::Collation,
    /// Where the data nodes keep the column's values.
    pub storage: Storage,
    /// Digits of a second a DATETIME, TIMESTAMP or TIME column keeps
    /// (MySQL's fractional seconds precision, 0-6; `DATETIME(3)` keeps 3);
    /// 0 for every other type. The SQL node rounds what it writes to them.
    pub fraction_digits: u8,
    /// When the SQL node writes the current time into the column.
    pub clock: ClockFill,
    /// The values an ENUM or SET column admits, in declared order (MySQL
    /// numbers them from 1 in this order); empty for every other type.
    /// Absent from backup manifests written before ENUM and SET existed.
    #[serde(default)]
    pub members: Vec<String>,
}

/// Most members an ENUM may declare (MySQL's limit).
pub const MAX_ENUM_MEMBERS: usize = 65_535;
/// Most members a SET may declare (one bit each in MySQL's 64-bit set).
pub const MAX_SET_MEMBERS: usize = 64;

/// When the SQL node writes the current time into a DATETIME or TIMESTAMP
/// column, as MySQL's `DEFAULT CURRENT_TIMESTAMP` and `ON UPDATE
/// CURRENT_TIMESTAMP` say: into a row an INSERT makes without naming the
/// column, and into a row an UPDATE changes without naming it. As in NDB,
/// where the MySQL server does this, the data nodes, the native client and
/// the REST node store the values they are given.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClockFill {
    pub on_insert: bool,
    pub on_update: bool,
}

/// Where a column's values live on the data nodes (NDB's `STORAGE`).
///
/// A row's disk columns are kept together as one record on a page of the
/// data node's tablespace, behind its page cache; its memory columns, its
/// key and a 6-byte reference to that record stay in memory. Columns of
/// the primary key and of ordered indexes always stay in memory.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    #[default]
    Memory,
    Disk,
}

impl Storage {
    /// The SQL keyword (`STORAGE MEMORY` / `STORAGE DISK`).
    pub fn keyword(self) -> &'static str {
        match self {
            Storage::Memory => "MEMORY",
            Storage::Disk => "DISK",
        }
    }
}

impl ColumnDef {
    pub fn new(name: impl Into<String>, ty: ColumnType) -> Self {
        ColumnDef {
            name: name.into(),
            ty,
            nullable: true,
            default: None,
            collation: crate::Collation::Bin,
            storage: Storage::Memory,
            fraction_digits: 0,
            clock: ClockFill::default(),
            members: Vec::new(),
        }
    }
    /// ENUM and SET only: the values the column admits, in order.
    pub fn members<S: Into<String>>(mut self, members: impl IntoIterator<Item = S>) -> Self {
        self.members = members.into_iter().map(Into::into).collect();
        self
    }
    /// Keeps the column on disk or in memory (see [`Storage`]).
    pub fn storage(mut self, storage: Storage) -> Self {
        self.storage = storage;
        self
    }
    /// Text columns only: other types ignore collations.
    pub fn collated(mut self, collation: crate::Collation) -> Self {
        if self.ty.is_string() {
            self.collation = collation;
        }
        self
    }
    pub fn not_null(mut self) -> Self {
        self.nullable = false;
        self
    }
    pub fn default_value(mut self, value: crate::Value) -> Self {
        self.default = Some(value);
        self
    }
    /// DATETIME, TIMESTAMP and TIME only: the digits of a second it keeps (0-6).
    pub fn fraction_digits(mut self, digits: u8) -> Self {
        self.fraction_digits = digits;
        self
    }
    /// DATETIME and TIMESTAMP only: when the SQL node writes the current time.
    pub fn clock(mut self, clock: ClockFill) -> Self {
        self.clock = clock;
        self
    }

    fn is_temporal(&self) -> bool {
        matches!(self.ty, ColumnType::DateTime | ColumnType::Timestamp)
    }

    /// Fraction digits belong to DATETIME, TIMESTAMP and TIME columns,
    /// clock fills to the first two, and a second has at most 6 digits
    /// that latsdb keeps.
    /// The options a column's type gives meaning to, and only those.
    fn validate_options(&self) -> Result<()> {
        self.validate_time_options()?;
        self.validate_members()
    }

    fn validate_time_options(&self) -> Result<()> {
        let keeps_fractions = self.is_temporal() || self.ty == ColumnType::Time;
        if self.fraction_digits > 6 || (self.fraction_digits > 0 && !keeps_fractions) {
            return Err(DbError::bad_request(format!(
                "column '{}' ({}) cannot keep {} fraction digits: DATETIME, TIMESTAMP and TIME keep 0 to 6",
                self.name,
                self.ty.sql_name(),
                self.fraction_digits
            )));
        }
        if self.clock != ClockFill::default() && !self.is_temporal() {
            return Err(DbError::bad_request(format!(
                "column '{}' is {}: only DATETIME and TIMESTAMP columns take the current time",
                self.name,
                self.ty.sql_name()
            )));
        }
        Ok(())
    }
}

impl ColumnDef {
    /// Whether the column was dropped (see [`ColumnChange::Drop`]).
    pub fn is_dropped(&self) -> bool {
        self.name.starts_with(DROPPED_COLUMN_PREFIX)
    }

    /// An ENUM or SET declares at least one member, no two equal under the
    /// column's collation (MySQL: 1291), a SET's without commas and at
    /// most 64; no other type declares any.
    fn validate_members(&self) -> Result<()> {
        let (kind, limit) = match self.ty {
            ColumnType::Enum => ("ENUM", MAX_ENUM_MEMBERS),
            ColumnType::Set => ("SET", MAX_SET_MEMBERS),
            _ if self.members.is_empty() => return Ok(()),
            _ => {
                return Err(DbError::bad_request(format!(
                    "column '{}' is {}: only ENUM and SET columns list members",
                    self.name,
                    self.ty.sql_name()
                )))
            }
        };
        if self.members.is_empty() || self.members.len() > limit {
            return Err(DbError::bad_request(format!(
                "column '{}' ({kind}) lists {} members: it takes 1 to {limit}",
                self.name,
                self.members.len()
            )));
        }
        let mut seen = std::collections::HashSet::with_capacity(self.members.len());
        for member in &self.members {
            if self.ty == ColumnType::Set && member.contains(',') {
                return Err(DbError::bad_request(format!(
                    "member '{member}' of SET column '{}' holds a comma, which separates a SET's members",
                    self.name
                )));
            }
            if member.chars().count() > 255 {
                return Err(DbError::bad_request(format!(
                    "a member of column '{}' is longer than 255 characters",
                    self.name
                )));
            }
            if !seen.insert(self.collation.fold(member.trim_end_matches(' ')).into_owned()) {
                return Err(DbError::bad_request(format!(
                    "Column '{}' has duplicated value '{member}' in {kind}",
                    self.name
                )));
            }
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct IndexDef {
    pub id: IndexId,
    pub name: String,
    pub columns: Vec<ColumnId>,
    /// No two rows may hold the same non-NULL values in the columns. The
    /// data nodes keep the index as an ordered index like any other; the
    /// uniqueness is kept by the hidden table `unique_table_name(..)`, which
    /// writers maintain in their transactions (see `client/src/unique.rs`).
    pub unique: bool,
}

/// Prefix of the names of hidden tables; user tables may not start with it.
pub const HIDDEN_TABLE_PREFIX: &str = "$unique$";

/// Prefix of the name of the table an ALTER TABLE copies a table into
/// (`copy_table_name`); hidden like the tables of unique indexes, and user
/// tables may not start with it either.
pub const COPY_TABLE_PREFIX: &str = "$copy$";

/// The table ALTER TABLE copies table `table` into; it takes the table's
/// name when the copy is done.
pub fn copy_table_name(table: TableId) -> String {
    format!("{COPY_TABLE_PREFIX}{table}")
}

/// Whether a table name is one latsdb keeps for its hidden tables.
pub fn is_hidden_name(name: &str) -> bool {
    name.starts_with(HIDDEN_TABLE_PREFIX) || name.starts_with(COPY_TABLE_PREFIX)
}

/// An index of a table a copying ALTER TABLE makes (see
/// `MgmRequest::CopyTableBegin`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct IndexSpec {
    pub name: String,
    pub columns: Vec<String>,
    pub unique: bool,
}

/// The hidden table that keeps a unique index of a table unique: one row per
/// indexed row whose indexed values are all non-NULL, keyed by those values
/// (columns `u0..`), holding the row's primary key (columns `k0..`). It lives
/// in the table's database and is partitioned by the indexed values, so two
/// writers of the same values meet on the same row lock.
pub fn unique_table_name(table: TableId, index: IndexId) -> String {
    format!("{HIDDEN_TABLE_PREFIX}{table}${index}")
}

/// The primary key the SQL node gives a table created without one (the
/// design's hidden 8-byte key): a BIGINT UNSIGNED first column, numbered
/// like an AUTO_INCREMENT column. `SELECT *` and the catalog never show it;
/// a query may read it by its name (as MySQL's invisible columns), no
/// statement may write it.
pub const HIDDEN_KEY_COLUMN: &str = "$row_id";

/// Prefix of the names of dropped columns (see [`ColumnChange::Drop`]);
/// user columns may not start with it.
pub const DROPPED_COLUMN_PREFIX: &str = "$dropped$";

/// What a user asks for when creating a table.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TableSpec {
    pub database: String,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Names of the primary-key columns, in key order.
    pub primary_key: Vec<String>,
    /// Partition count; 0 lets the cluster choose from its size.
    pub partitions: u32,
}

impl TableSpec {
    pub fn new(database: impl Into<String>, name: impl Into<String>) -> Self {
        TableSpec {
            database: database.into(),
            name: name.into(),
            columns: Vec::new(),
            primary_key: Vec::new(),
            partitions: 0,
        }
    }
    pub fn column(mut self, column: ColumnDef) -> Self {
        self.columns.push(column);
        self
    }
    pub fn primary_key(mut self, columns: &[&str]) -> Self {
        self.primary_key = columns.iter().map(|c| c.to_string()).collect();
        self
    }
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions;
        self
    }
}

/// A table as stored in cluster metadata. `version` changes with every
/// schema change of the table; operations carry the version they were built
/// against and a data node rejects a stale one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TableDef {
    pub id: TableId,
    pub version: u32,
    pub database: String,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub primary_key: Vec<ColumnId>,
    pub partitions: u32,
    /// Ordered indexes; index 0 is always the primary key's.
    pub indexes: Vec<IndexDef>,
    /// Columns added after the table was created, one entry per
    /// `ADD COLUMN` change, in order (see the row format in `row.rs`).
    pub added_parts: Vec<RowPart>,
    /// This table's references to parent tables. The SQL node keeps them
    /// (the data nodes do not look at them).
    #[serde(default)]
    pub foreign_keys: Vec<ForeignKeyDef>,
    /// The foreign keys of other tables (or this one) that reference this
    /// table, kept by the management server from every table's
    /// `foreign_keys`: a parent's version changes when a child's does, so a
    /// writer of the parent planned before a new reference is told to plan
    /// again.
    #[serde(default)]
    pub referenced_by: Vec<ForeignKeyRef>,
}

/// What a foreign key does to the child rows of a parent row that is
/// deleted, or whose referenced columns change.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReferenceAction {
    /// The parent's change fails while child rows reference it (MySQL's
    /// default; NO ACTION is the same in MySQL, and is kept to be shown).
    Restrict,
    NoAction,
    /// The child rows are deleted, or take the parent's new values.
    Cascade,
    /// The child rows' referencing columns become NULL.
    SetNull,
}

impl ReferenceAction {
    /// How SQL spells it.
    pub fn sql(self) -> &'static str {
        match self {
            ReferenceAction::Restrict => "RESTRICT",
            ReferenceAction::NoAction => "NO ACTION",
            ReferenceAction::Cascade => "CASCADE",
            ReferenceAction::SetNull => "SET NULL",
        }
    }
}

/// A reference from columns of this (child) table to the primary key or a
/// unique index of a parent table, named by database and table: as in
/// MySQL, the parent may be created after the child (with
/// `foreign_key_checks` off) or dropped and created again.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ForeignKeyDef {
    pub name: String,
    pub columns: Vec<ColumnId>,
    pub parent_database: String,
    pub parent_table: String,
    /// The parent's columns by name, in the order of `columns`.
    pub parent_columns: Vec<String>,
    pub on_delete: ReferenceAction,
    pub on_update: ReferenceAction,
}

impl ForeignKeyDef {
    /// Whether the key references table `database`.`table`: names compare
    /// exactly, as table names do (`lower_case_table_names = 0`).
    pub fn references(&self, database: &str, table: &str) -> bool {
        self.parent_database == database && self.parent_table == table
    }
}

/// A foreign key that references a table: its child table and name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ForeignKeyRef {
    pub database: String,
    pub table: String,
    pub name: String,
}

/// Most columns a foreign key may have (MySQL's limit for an index).
pub const MAX_FOREIGN_KEY_COLUMNS: usize = 16;

/// Columns appended to a table by one schema change: `first_column` and the
/// ones after it (up to the next part), with the values they read as in rows
/// stored before the change.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RowPart {
    pub first_column: ColumnId,
    pub fill: Vec<crate::Value>,
}

/// A name a column may take by ADD COLUMN or a rename: a valid name that
/// is not a dropped column's.
fn validate_column_name(name: &str) -> Result<()> {
    validate_name("column", name)?;
    if name.get(..DROPPED_COLUMN_PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(DROPPED_COLUMN_PREFIX)) {
        return Err(DbError::bad_request(format!(
            "column name '{name}' starts with '{DROPPED_COLUMN_PREFIX}', which latsdb keeps for dropped columns; choose another name"
        )));
    }
    Ok(())
}

pub fn validate_name(kind: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 64 {
        return Err(DbError::bad_request(format!("{kind} name '{name}' must be 1 to 64 bytes long")));
    }
    // MySQL's identifiers hold characters of the Basic Multilingual Plane
    // only (U+0001 to U+FFFF), and RonDB's REST server checks the same.
    if name.chars().any(|c| c.is_control() || c == '/' || c == '.' || c == '`' || c > '\u{FFFF}') {
        return Err(DbError::bad_request(format!(
            "{kind} name '{name}' contains a character that is not allowed (control characters, '/', '.', '`', characters past U+FFFF)"
        )));
    }
    Ok(())
}

impl TableDef {
    /// Builds and validates a definition from a user's spec.
    pub fn from_spec(spec: &TableSpec, id: TableId, partitions: u32) -> Result<TableDef> {
        validate_name("database", &spec.database)?;
        validate_name("table", &spec.name)?;
        if spec.columns.is_empty() {
            return Err(DbError::bad_request("a table needs at least one column"));
        }
        if spec.columns.len() > MAX_COLUMNS {
            return Err(DbError::bad_request(format!(
                "a table may have at most {MAX_COLUMNS} columns, got {}",
                spec.columns.len()
            )));
        }
        let mut columns = spec.columns.clone();
        for (i, column) in columns.iter().enumerate() {
            validate_name("column", &column.name)?;
            column.ty.validate()?;
            column.validate_options()?;
            if columns[..i].iter().any(|c| c.name.eq_ignore_ascii_case(&column.name)) {
                return Err(DbError::bad_request(format!("duplicate column name '{}'", column.name)));
            }
            // Only a restore recreates dropped columns, as they were left.
            if column.is_dropped() && (!column.nullable || column.default.is_some()) {
                return Err(DbError::bad_request(format!(
                    "column name '{}' starts with '{DROPPED_COLUMN_PREFIX}', which latsdb keeps for dropped columns (nullable, without a default); choose another name",
                    column.name
                )));
            }
        }
        if spec.primary_key.is_empty() {
            return Err(DbError::bad_request(format!(
                "table '{}' needs a primary key (list its columns in primary_key)",
                spec.name
            )));
        }
        let mut primary_key = Vec::new();
        for name in &spec.primary_key {
            let named = |c: &ColumnDef| c.name.eq_ignore_ascii_case(name) && !c.is_dropped();
            let pos = columns.iter().position(named).ok_or_else(|| {
                DbError::bad_request(format!("primary key column '{name}' is not a column of the table"))
            })?;
            if primary_key.contains(&(pos as ColumnId)) {
                return Err(DbError::bad_request(format!("primary key names column '{name}' twice")));
            }
            if !columns[pos].ty.is_indexable() {
                return Err(DbError::bad_request(format!(
                    "TEXT/BLOB column '{name}' cannot be part of the primary key"
                )));
            }
            if columns[pos].storage == Storage::Disk {
                return Err(DbError::bad_request(format!(
                    "primary key column '{name}' is declared STORAGE DISK, but key columns always stay in memory; declare it STORAGE MEMORY"
                )));
            }
            // Key columns are never NULL.
            columns[pos].nullable = false;
            primary_key.push(pos as ColumnId);
        }
        for column in &columns {
            if let Some(default) = &column.default {
                crate::value::coerce(default.clone(), column).map_err(|e| {
                    DbError::bad_request(format!("default of column '{}' is invalid: {}", column.name, e.message))
                })?;
            }
        }
        if partitions == 0 || partitions > 65_536 {
            return Err(DbError::bad_request(format!("partition count {partitions} must be 1..=65536")));
        }
        let indexes = vec![IndexDef { id: 0, name: "PRIMARY".into(), columns: primary_key.clone(), unique: true }];
        Ok(TableDef {
            id,
            version: 1,
            database: spec.database.clone(),
            name: spec.name.clone(),
            columns,
            primary_key,
            partitions,
            indexes,
            added_parts: Vec::new(),
            foreign_keys: Vec::new(),
            referenced_by: Vec::new(),
        })
    }

    /// Appends columns (and bumps the version). Rows already stored keep
    /// their bytes; their new columns read as `fill` (one value per column,
    /// e.g. each column's default).
    pub fn with_columns(&self, added: &[ColumnDef], fill: &[crate::Value]) -> Result<TableDef> {
        if added.is_empty() {
            return Err(DbError::bad_request("ADD COLUMN needs at least one column"));
        }
        if added.len() != fill.len() {
            return Err(DbError::bad_request("ADD COLUMN needs one fill value per added column"));
        }
        if self.columns.len() + added.len() > MAX_COLUMNS {
            return Err(DbError::bad_request(format!(
                "a table may have at most {MAX_COLUMNS} columns; {} has {} and {} would be added",
                self.qualified_name(),
                self.columns.len(),
                added.len()
            )));
        }
        if self.has_disk_columns() || added.iter().any(|c| c.storage == Storage::Disk) {
            return Err(DbError::bad_request(format!(
                "ADD COLUMN is not supported on a table with STORAGE DISK columns ({}); copy the table into a new one with the added columns",
                self.qualified_name()
            )));
        }
        let mut def = self.clone();
        let first_column = def.columns.len() as ColumnId;
        let mut coerced = Vec::with_capacity(fill.len());
        for (column, value) in added.iter().zip(fill) {
            validate_column_name(&column.name)?;
            column.ty.validate()?;
            column.validate_options()?;
            if def.columns.iter().any(|c| c.name.eq_ignore_ascii_case(&column.name)) {
                return Err(DbError::new(
                    crate::ErrorCode::ColumnExists,
                    format!("table {} already has a column named '{}'", self.qualified_name(), column.name),
                ));
            }
            if let Some(default) = &column.default {
                crate::value::coerce(default.clone(), column).map_err(|e| {
                    DbError::bad_request(format!("default of column '{}' is invalid: {}", column.name, e.message))
                })?;
            }
            let value = crate::value::coerce(value.clone(), column).map_err(|e| {
                DbError::bad_request(format!(
                    "the value existing rows get in column '{}' is invalid: {}",
                    column.name, e.message
                ))
            })?;
            if value.is_null() && !column.nullable {
                return Err(DbError::bad_request(format!(
                    "column '{}' is NOT NULL, so existing rows need a value for it (give it a DEFAULT)",
                    column.name
                )));
            }
            coerced.push(value);
            def.columns.push(column.clone());
        }
        def.added_parts.push(RowPart { first_column, fill: coerced });
        def.version += 1;
        Ok(def)
    }

    /// Renames columns and changes defaults (and bumps the version). Stored
    /// rows are positional, so nothing else changes: indexes, the primary
    /// key and the fill values of added columns refer to columns by
    /// position, and a changed DEFAULT applies to later inserts only.
    pub fn with_changed_columns(&self, changes: &[ColumnChange]) -> Result<TableDef> {
        if changes.is_empty() {
            return Err(DbError::bad_request("a column change needs at least one change"));
        }
        let mut def = self.clone();
        for change in changes {
            match change {
                ColumnChange::Rename { from, to } => {
                    validate_column_name(to)?;
                    let id = def.column_id(from)?;
                    let taken = def
                        .columns
                        .iter()
                        .enumerate()
                        .any(|(i, c)| i != id as usize && c.name.eq_ignore_ascii_case(to));
                    if taken {
                        return Err(DbError::new(
                            crate::ErrorCode::ColumnExists,
                            format!("table {} already has a column named '{to}'", self.qualified_name()),
                        ));
                    }
                    def.columns[id as usize].name = to.clone();
                }
                ColumnChange::SetDefault { column, default } => {
                    let id = def.column_id(column)?;
                    let c = &def.columns[id as usize];
                    let default = match default {
                        Some(v) => Some(crate::value::coerce(v.clone(), c).map_err(|e| {
                            DbError::bad_request(format!("default of column '{}' is invalid: {}", c.name, e.message))
                        })?),
                        None => None,
                    };
                    if default.as_ref().is_some_and(|v| v.is_null()) && !c.nullable {
                        return Err(DbError::bad_request(format!(
                            "column '{}' is NOT NULL, so its default cannot be NULL",
                            c.name
                        )));
                    }
                    def.columns[id as usize].default = default;
                }
                ColumnChange::SetClock { column, clock } => {
                    let id = def.column_id(column)?;
                    let c = &mut def.columns[id as usize];
                    c.clock = *clock;
                    c.validate_options()?;
                }
                ColumnChange::Widen { column, ty, members } => {
                    let id = def.column_id(column)?;
                    let indexed = def.is_indexed(id);
                    let c = &mut def.columns[id as usize];
                    let kept = members.len() >= c.members.len() && members[..c.members.len()] == c.members[..];
                    if !c.ty.widens_to(*ty) || !kept || indexed || c.storage != Storage::Memory {
                        return Err(DbError::bad_request(format!(
                            "column '{column}' cannot become {} in place: only a non-indexed, in-memory text or binary column can grow (or an ENUM/SET gain members at its end)",
                            ty.sql_name()
                        )));
                    }
                    c.ty = *ty;
                    c.members = members.clone();
                    c.validate_options()?;
                }
                ColumnChange::AllowNull { column } => {
                    let id = def.column_id(column)?;
                    if def.primary_key.contains(&id) {
                        return Err(DbError::bad_request(format!(
                            "column '{column}' is part of the primary key, which cannot hold NULL"
                        )));
                    }
                    def.columns[id as usize].nullable = true;
                }
                ColumnChange::Drop { column } => def.drop_column(column)?,
                ColumnChange::AddForeignKey(key) => def.add_foreign_key(key)?,
                ColumnChange::DropForeignKey { name } => {
                    let before = def.foreign_keys.len();
                    def.foreign_keys.retain(|k| !k.name.eq_ignore_ascii_case(name));
                    if def.foreign_keys.len() == before {
                        return Err(DbError::bad_request(format!(
                            "table {} has no foreign key named '{name}'",
                            self.qualified_name()
                        )));
                    }
                }
            }
        }
        def.version += 1;
        Ok(def)
    }

    /// Adds a foreign key after checking its shape against this table.
    /// The parent is not looked at: it may not exist yet.
    fn add_foreign_key(&mut self, key: &ForeignKeyDef) -> Result<()> {
        validate_name("foreign key", &key.name)?;
        validate_name("database", &key.parent_database)?;
        validate_name("table", &key.parent_table)?;
        if self.foreign_keys.iter().any(|k| k.name.eq_ignore_ascii_case(&key.name)) {
            return Err(DbError::bad_request(format!(
                "table {} has a foreign key named '{}' already",
                self.qualified_name(),
                key.name
            )));
        }
        if key.columns.is_empty()
            || key.columns.len() > MAX_FOREIGN_KEY_COLUMNS
            || key.columns.len() != key.parent_columns.len()
        {
            return Err(DbError::bad_request(format!(
                "foreign key '{}' needs 1 to {MAX_FOREIGN_KEY_COLUMNS} columns, as many as the parent columns it names",
                key.name
            )));
        }
        for (i, &c) in key.columns.iter().enumerate() {
            let column = self.columns.get(c as usize).filter(|_| self.is_visible(c)).ok_or_else(|| {
                DbError::bad_request(format!("foreign key '{}' names column {c}, which table has none", key.name))
            })?;
            if key.columns[..i].contains(&c) {
                return Err(DbError::bad_request(format!(
                    "foreign key '{}' names column '{}' twice",
                    key.name, column.name
                )));
            }
            let sets_null = key.on_delete == ReferenceAction::SetNull || key.on_update == ReferenceAction::SetNull;
            if sets_null && !column.nullable {
                return Err(DbError::bad_request(format!(
                    "column '{}' cannot be NOT NULL: foreign key '{}' sets it to NULL",
                    column.name, key.name
                )));
            }
        }
        for name in &key.parent_columns {
            validate_name("column", name)?;
        }
        self.foreign_keys.push(key.clone());
        debug_assert!(
            self.foreign_keys.iter().all(|k| k.columns.iter().all(|&c| (c as usize) < self.columns.len())),
            "a foreign key names a column the table has not"
        );
        debug_assert_eq!(
            self.foreign_keys.iter().filter(|k| k.name.eq_ignore_ascii_case(&key.name)).count(),
            1,
            "two foreign keys share a name"
        );
        Ok(())
    }

    /// The foreign keys that read column `id`.
    pub fn foreign_keys_of(&self, id: ColumnId) -> impl Iterator<Item = &ForeignKeyDef> {
        self.foreign_keys.iter().filter(move |k| k.columns.contains(&id))
    }

    /// Takes column `name` out of the definition in place (see
    /// [`ColumnChange::Drop`]).
    fn drop_column(&mut self, name: &str) -> Result<()> {
        let id = self.column_id(name)?;
        if let Some(key) = self.foreign_keys_of(id).next() {
            return Err(DbError::bad_request(format!(
                "column '{name}' is needed by foreign key '{}'; drop the foreign key first",
                key.name
            )));
        }
        if !self.is_visible(id) {
            return Err(DbError::bad_request(format!(
                "column '{name}' is the key latsdb added to a table created without a primary key; it cannot be dropped"
            )));
        }
        if self.primary_key.contains(&id) {
            return Err(DbError::bad_request(format!(
                "column '{name}' is part of the primary key of {}; a table's primary key cannot change (copy the table into a new one)",
                self.qualified_name()
            )));
        }
        if let Some(index) = self.indexes.iter().find(|i| i.columns.contains(&id)) {
            return Err(DbError::bad_request(format!(
                "column '{name}' is in index '{}' of {}; drop the index first",
                index.name,
                self.qualified_name()
            )));
        }
        if self.visible_columns().count() == 1 {
            return Err(DbError::bad_request(format!(
                "column '{name}' is the last column of {}; drop the table instead",
                self.qualified_name()
            )));
        }
        let column = &mut self.columns[id as usize];
        column.name = format!("{DROPPED_COLUMN_PREFIX}{id}");
        column.nullable = true;
        column.default = None;
        column.clock = ClockFill::default();
        assert!(!self.is_visible(id), "a dropped column is hidden");
        debug_assert!(self.column_id(name).is_err(), "no name reaches a dropped column");
        Ok(())
    }

    /// Whether column `id` is in the primary key or an index (index 0 is
    /// the primary key's).
    pub fn is_indexed(&self, id: ColumnId) -> bool {
        self.primary_key.contains(&id) || self.indexes.iter().any(|i| i.columns.contains(&id))
    }

    /// The same table under another name (and bumps the version).
    pub fn renamed(&self, database: &str, name: &str) -> Result<TableDef> {
        validate_name("database", database)?;
        validate_name("table", name)?;
        let mut def = self.clone();
        def.database = database.to_string();
        def.name = name.to_string();
        def.version += 1;
        Ok(def)
    }

    /// Whether any column is kept on disk.
    pub fn has_disk_columns(&self) -> bool {
        self.columns.iter().any(|c| c.storage == Storage::Disk)
    }

    /// The hidden key column, when the table was created without a
    /// primary key.
    pub fn hidden_key(&self) -> Option<ColumnId> {
        match self.primary_key.as_slice() {
            [c] if self.columns[*c as usize].name == HIDDEN_KEY_COLUMN => Some(*c),
            _ => None,
        }
    }

    /// Whether column `c` is one SQL shows (every column but the hidden key
    /// and dropped columns).
    pub fn is_visible(&self, c: ColumnId) -> bool {
        self.hidden_key() != Some(c) && !self.columns[c as usize].is_dropped()
    }

    /// The columns SQL shows, with their ids.
    pub fn visible_columns(&self) -> impl Iterator<Item = (ColumnId, &ColumnDef)> {
        let hidden = self.hidden_key();
        self.columns
            .iter()
            .enumerate()
            .map(|(c, d)| (c as ColumnId, d))
            .filter(move |(c, d)| hidden != Some(*c) && !d.is_dropped())
    }

    /// Whether a column was dropped: rows still have a place for it.
    pub fn has_dropped_columns(&self) -> bool {
        self.columns.iter().any(ColumnDef::is_dropped)
    }

    /// The indexes SQL shows: all but the PRIMARY of a hidden key.
    pub fn visible_indexes(&self) -> impl Iterator<Item = &IndexDef> {
        let hidden = self.hidden_key().is_some();
        self.indexes.iter().filter(move |ix| !(hidden && ix.id == 0))
    }

    /// The column `name` names; a dropped column has no name.
    pub fn column_id(&self, name: &str) -> Result<ColumnId> {
        let named = |c: &ColumnDef| c.name.eq_ignore_ascii_case(name) && !c.is_dropped();
        self.columns.iter().position(named).map(|p| p as ColumnId).ok_or_else(|| {
            DbError::new(
                crate::ErrorCode::UnknownColumn,
                format!("table {}.{} has no column '{name}'", self.database, self.name),
            )
        })
    }

    pub fn index(&self, name: &str) -> Result<&IndexDef> {
        self.indexes.iter().find(|i| i.name.eq_ignore_ascii_case(name)).ok_or_else(|| {
            DbError::new(
                crate::ErrorCode::UnknownIndex,
                format!("table {}.{} has no ordered index '{name}'", self.database, self.name),
            )
        })
    }

    pub fn index_by_id(&self, id: IndexId) -> Option<&IndexDef> {
        self.indexes.iter().find(|i| i.id == id)
    }

    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.database, self.name)
    }

    /// Whether this is a hidden table: of a unique index, or the copy an
    /// ALTER TABLE is making.
    pub fn is_hidden(&self) -> bool {
        is_hidden_name(&self.name)
    }

    /// The unique indexes other than the primary key.
    pub fn unique_indexes(&self) -> impl Iterator<Item = &IndexDef> {
        self.indexes.iter().filter(|i| i.unique && i.id != PRIMARY_INDEX)
    }

    pub fn has_unique_indexes(&self) -> bool {
        self.unique_indexes().next().is_some()
    }

    /// The definition of the hidden table of a unique index.
    pub fn unique_table_spec(&self, index: &IndexDef) -> TableSpec {
        let mut spec = TableSpec::new(self.database.clone(), unique_table_name(self.id, index.id));
        // A copy of a column keeps what its values are checked against: the
        // collation, an ENUM's or SET's members, a time's digits.
        let copy = |name: String, column: &ColumnDef| {
            ColumnDef::new(name, column.ty)
                .collated(column.collation)
                .members(column.members.iter().cloned())
                .fraction_digits(column.fraction_digits)
                .not_null()
        };
        for (i, &c) in index.columns.iter().enumerate() {
            spec = spec.column(copy(format!("u{i}"), &self.columns[c as usize]));
        }
        for (i, &c) in self.primary_key.iter().enumerate() {
            spec = spec.column(copy(format!("k{i}"), &self.columns[c as usize]));
        }
        spec.primary_key = (0..index.columns.len()).map(|i| format!("u{i}")).collect();
        spec
    }

    /// Adds an ordered index (unique or not) and bumps the version.
    pub fn with_index(&self, name: &str, columns: &[String], unique: bool) -> Result<TableDef> {
        validate_name("index", name)?;
        if self.indexes.iter().any(|i| i.name.eq_ignore_ascii_case(name)) {
            return Err(DbError::new(
                crate::ErrorCode::IndexExists,
                format!("table {} already has an index named '{name}'", self.qualified_name()),
            ));
        }
        if columns.is_empty() {
            return Err(DbError::bad_request("an index needs at least one column"));
        }
        let mut ids = Vec::new();
        for c in columns {
            let id = self.column_id(c)?;
            if !self.columns[id as usize].ty.is_indexable() {
                return Err(DbError::bad_request(format!("TEXT/BLOB column '{c}' cannot be indexed")));
            }
            if self.columns[id as usize].storage == Storage::Disk {
                return Err(DbError::bad_request(format!(
                    "column '{c}' of {} is STORAGE DISK and cannot be indexed: indexed columns stay in memory (move it with ALTER TABLE ... MODIFY ... STORAGE MEMORY first)",
                    self.qualified_name()
                )));
            }
            ids.push(id);
        }
        let mut def = self.clone();
        let id = def.indexes.iter().map(|i| i.id).max().unwrap_or(0) + 1;
        def.indexes.push(IndexDef { id, name: name.to_string(), columns: ids, unique });
        def.version += 1;
        Ok(def)
    }

    pub fn without_index(&self, name: &str) -> Result<TableDef> {
        let index = self.index(name)?;
        if index.id == PRIMARY_INDEX {
            return Err(DbError::bad_request("the PRIMARY index cannot be dropped"));
        }
        let id = index.id;
        let mut def = self.clone();
        def.indexes.retain(|i| i.id != id);
        def.version += 1;
        Ok(def)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_table_keyed_by_the_hidden_column_has_a_hidden_key() {
        let big = ColumnType::Integer { width: IntWidth::Big, unsigned: true };
        let keyless = TableSpec::new("d", "keyless")
            .column(ColumnDef::new(HIDDEN_KEY_COLUMN, big))
            .column(ColumnDef::new("a", ColumnType::int(IntWidth::Int)))
            .primary_key(&[HIDDEN_KEY_COLUMN]);
        let def = TableDef::from_spec(&keyless, 1, 4).unwrap();
        assert_eq!(def.hidden_key(), Some(0));
        assert!(!def.is_visible(0) && def.is_visible(1));
        assert_eq!(def.visible_columns().map(|(c, d)| (c, d.name.as_str())).collect::<Vec<_>>(), [(1, "a")]);
        assert_eq!(def.visible_indexes().count(), 0);

        let keyed = TableSpec::new("d", "keyed")
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)))
            .column(ColumnDef::new("a", ColumnType::int(IntWidth::Int)))
            .primary_key(&["id"]);
        let def = TableDef::from_spec(&keyed, 2, 4).unwrap();
        assert_eq!(def.hidden_key(), None);
        assert_eq!(def.visible_columns().count(), 2);
        assert_eq!(def.visible_indexes().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["PRIMARY"]);
    }

    #[test]
    fn a_dropped_column_keeps_its_place_and_loses_its_name() {
        let int = || ColumnType::int(IntWidth::Int);
        let mut not_null = ColumnDef::new("a", int());
        not_null.nullable = false;
        not_null.default = Some(crate::Value::Int(3));
        let spec = TableSpec::new("d", "t")
            .column(ColumnDef::new("id", int()))
            .column(not_null)
            .column(ColumnDef::new("b", int()))
            .column(ColumnDef::new("c", int()))
            .primary_key(&["id"]);
        let def = TableDef::from_spec(&spec, 1, 4).unwrap().with_index("kc", &["c".into()], false).unwrap();
        let drop =
            |def: &TableDef, column: &str| def.with_changed_columns(&[ColumnChange::Drop { column: column.into() }]);

        let dropped = drop(&def, "a").unwrap();
        assert_eq!(dropped.columns.len(), 4, "the column keeps its place in rows");
        assert_eq!(dropped.version, def.version + 1);
        let a = &dropped.columns[1];
        assert!(a.is_dropped() && a.nullable && a.default.is_none(), "{a:?}");
        assert!(!dropped.is_visible(1) && dropped.has_dropped_columns());
        assert_eq!(dropped.visible_columns().map(|(c, _)| c).collect::<Vec<_>>(), [0, 2, 3]);
        assert_eq!(dropped.column_id("a").unwrap_err().code, crate::ErrorCode::UnknownColumn);
        assert_eq!(dropped.column_id(&a.name).unwrap_err().code, crate::ErrorCode::UnknownColumn, "no name reaches it");
        let row = crate::meta::TableMeta::new(dropped.clone()).coerce_row([1, 2, 3, 4].map(crate::Value::Int).to_vec());
        assert_eq!(row.unwrap()[1], crate::Value::Null, "a value given for a dropped column is not stored");
        // A column of the same name may come back, as a new column.
        let again = dropped.with_columns(&[ColumnDef::new("A", int())], &[crate::Value::Null]).unwrap();
        assert_eq!(again.column_id("a").unwrap(), 4);

        for (column, why) in [("id", "primary key"), ("c", "index 'kc'"), ("a", "no column"), ("nope", "no column")] {
            let message = drop(&dropped, column).unwrap_err().message;
            assert!(message.contains(why), "{column}: {message}");
        }
        let keyless = TableSpec::new("d", "keyless")
            .column(ColumnDef::new(HIDDEN_KEY_COLUMN, ColumnType::Integer { width: IntWidth::Big, unsigned: true }))
            .column(ColumnDef::new("x", int()))
            .primary_key(&[HIDDEN_KEY_COLUMN]);
        let keyless = TableDef::from_spec(&keyless, 2, 4).unwrap();
        assert!(drop(&keyless, "x").unwrap_err().message.contains("last column"));
        assert!(drop(&keyless, HIDDEN_KEY_COLUMN).unwrap_err().message.contains("cannot be dropped"));
        let renamed = def.with_changed_columns(&[ColumnChange::Rename { from: "b".into(), to: "$DROPPED$1".into() }]);
        assert!(renamed.unwrap_err().message.contains("dropped columns"));
        let added = def.with_columns(&[ColumnDef::new("$dropped$9", int())], &[crate::Value::Null]);
        assert!(added.unwrap_err().message.contains("dropped columns"));
    }
}
