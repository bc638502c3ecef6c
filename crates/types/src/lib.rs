//! Shared vocabulary of latsdb: identifiers, errors, schema, values, the
//! order-preserving key codec, the compact row codec, pushed-down expressions,
//! the wire messages between clients, data nodes and the management server,
//! and the cluster configuration file.
//!
//! This crate does no I/O and depends on no async runtime, so the storage
//! engine, the sans-I/O state machines and the simulator build quickly.

pub mod collation;
mod collation_table;
pub mod config;
pub mod error;
pub mod expr;
pub mod keycodec;
pub mod location;
pub mod meta;
pub mod mysql_types;
pub mod proto;
pub mod rng;
pub mod row;
pub mod schema;
pub mod usage;
pub mod value;
pub mod work;

pub use collation::Collation;
pub use error::{DbError, ErrorCode, Result};
pub use meta::TableMeta;
pub use schema::{ColumnDef, ColumnType, IndexDef, IntWidth, Storage, TableDef, TableSpec};
pub use value::{Decimal, Value};
