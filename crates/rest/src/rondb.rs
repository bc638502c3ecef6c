//! RonDB's REST error classes. RonDB's server starts every validation
//! error with one fixed sentence per class ("Wrong data type.", "Column
//! does not exist.") and its clients and tests look for that sentence, so
//! an error of one of these classes leads its message with RonDB's sentence
//! and follows it with latsdb's own detail (which column, which value, what
//! to do).

/// A class of error RonDB's REST server words with a fixed sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// A value that cannot be stored in its column at all (bad base64,
    /// text too long).
    InvalidColumnData,
    /// The database or table does not exist.
    TableNotExist,
    /// A filter, read column or data column names no column of the table.
    ColumnNotExist,
    /// The filters do not give exactly the primary-key columns.
    WrongKeyCount,
    /// A filter names a column outside the primary key.
    WrongKeyColumn,
    /// A value of the wrong JSON type, or out of its column's range.
    WrongDataType,
    /// A key column of a type RonDB cannot look rows up by (FLOAT, DOUBLE).
    UnsupportedKeyType,
    /// A date, time or datetime that is not one.
    InvalidDateTime,
    /// A batch without operations.
    NoOperations,
    /// A pk-insert of a key that has a row already.
    TupleExists,
}

impl ErrorClass {
    /// RonDB's sentence for the class.
    pub fn text(self) -> &'static str {
        match self {
            ErrorClass::InvalidColumnData => "Invalid column data.",
            ErrorClass::TableNotExist => "Database/Table does not exist.",
            ErrorClass::ColumnNotExist => "Column does not exist.",
            ErrorClass::WrongKeyCount => "Wrong number of primary-key columns.",
            ErrorClass::WrongKeyColumn => "Wrong primary-key column.",
            ErrorClass::WrongDataType => "Wrong data type.",
            ErrorClass::UnsupportedKeyType => {
                "Hash indexes on float and double; and indexes on Blob types are not supported."
            }
            ErrorClass::InvalidDateTime => "Invalid Date/Time.",
            ErrorClass::NoOperations => "No operations defined",
            ErrorClass::TupleExists => "Tuple already existed when attempting to insert.",
        }
    }
}
