//! What the fuzz targets share: a table with a column of every type
//! latsdb stores, and one row of values for it.

use latsdb_types::schema::{ColumnDef, ColumnType as T, IntWidth};
use latsdb_types::{Collation, Decimal, Value};

/// A column of every type (and of the options that change conversions:
/// unsigned, a case-insensitive collation, fraction digits, members), each
/// with a value near an edge of its range.
pub fn columns_of_every_type() -> Vec<(ColumnDef, Value)> {
    let column = |n: &str, t: T| ColumnDef::new(n, t);
    vec![
        (column("i", T::int(IntWidth::Int)), Value::Int(-42)),
        (column("u", T::uint(IntWidth::Big)), Value::UInt(u64::MAX)),
        (column("f", T::Float), Value::Float(1.5)),
        (column("d", T::Double), Value::Float(-2.25e300)),
        (
            column("n", T::Decimal { precision: 20, scale: 4 }),
            Value::Decimal(Decimal::parse("-1234.5678").expect("a decimal")),
        ),
        (column("c", T::Char(4)).collated(Collation::GeneralCi), Value::Str("Ab".into())),
        (column("v", T::VarChar(16)), Value::Str("héllo wörld".into())),
        (column("bn", T::Binary(4)), Value::Bytes(vec![0, 255, 1, 0])),
        (column("vb", T::VarBinary(8)), Value::Bytes(vec![0x80, 0x7f])),
        (column("tx", T::Text), Value::Str("2024-02-29 23:59:59.5".into())),
        (column("bl", T::Blob), Value::Bytes(b"\xff\xfe".to_vec())),
        (column("dt", T::Date), Value::Date(19_782)),
        (column("dtm", T::DateTime).fraction_digits(6), Value::DateTime(1_700_000_000_999_999)),
        (column("ts", T::Timestamp), Value::Timestamp(1_000_000)),
        (column("b", T::Boolean), Value::Bool(true)),
        (column("tm", T::Time).fraction_digits(3), Value::Time(-3_020_399_000_000)),
        (column("y", T::Year), Value::Int(2155)),
        (column("bt", T::Bit(12)), Value::UInt(0xfff)),
        (column("e", T::Enum).members(["a", "b", "c"]), Value::Str("b".into())),
        (column("s", T::Set).members(["x", "y", "z"]), Value::Str("x,z".into())),
        (column("nl", T::int(IntWidth::Tiny)), Value::Null),
    ]
}

/// A target's input for the worker thread, and where its outcome goes.
type Job = (fn(&[u8]), Vec<u8>, std::sync::mpsc::Sender<std::thread::Result<()>>);

/// Runs `f(data)` on a thread with an API node worker's stack (64 MiB), as
/// the SQL node runs a statement: on libFuzzer's main thread (8 MiB) a
/// target would report stack overflows that the node cannot have. One
/// thread serves every input (a thread per input costs more than most
/// inputs); a panic there is raised again here.
pub fn on_worker_stack(f: fn(&[u8]), data: &[u8]) {
    use std::sync::{mpsc, Mutex, OnceLock};
    static WORKER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let worker = WORKER.get_or_init(|| {
        let (jobs, inbox) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("fuzz-worker".into())
            .stack_size(latsdb_net::serve::WORKER_STACK_BYTES)
            .spawn(move || {
                for (f, data, outcome) in inbox {
                    let _ = outcome.send(std::panic::catch_unwind(|| f(&data)));
                }
            })
            .expect("the worker thread");
        Mutex::new(jobs)
    });
    let (outcome, result) = mpsc::channel();
    let sent = worker.lock().unwrap_or_else(|p| p.into_inner()).send((f, data.to_vec(), outcome));
    sent.expect("the worker thread takes inputs");
    if let Err(panic) = result.recv().expect("the worker thread answers") {
        std::panic::resume_unwind(panic)
    }
}
