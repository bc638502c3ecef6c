//! The registers workload and what every workload shares: the gate that
//! holds clients still around a crash of the whole cluster, and the
//! history of register operations for the checker.
//!
//! Registers are rows `(id, val)` of `chaos.registers`. Workers run, at
//! random: committed reads (no lock, any replica), reads under an
//! exclusive lock (the primary), blind writes of a value no one wrote
//! before (a transaction of one update), and compare-and-sets (a transaction:
//! locking read, then the write when the value read is the one expected).

use latsdb_client::{Client, LockMode, Op, Outcome, Table};
use latsdb_types::rng::Rng;
use latsdb_types::{ColumnDef, ColumnType, IntWidth, TableSpec, Value};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const REGISTERS: i64 = 8;

/// One register operation as the checker reads it (see checker/main.go).
#[derive(Clone, Debug, Serialize)]
pub struct RegisterOp {
    pub worker: u32,
    pub key: i64,
    pub era: u32,
    pub kind: &'static str,
    pub from: i64,
    pub value: i64,
    /// What a compare-and-set read (under its lock).
    pub read: i64,
    pub ok: bool,
    pub unknown: bool,
    /// Nanoseconds since the workload started.
    pub call: u64,
    pub ret: u64,
}

/// What the workers share with the campaign.
pub struct Shared {
    pub start: Instant,
    /// Raised by the campaign to hold every worker before its next
    /// operation (around a crash of the whole cluster).
    pub paused: AtomicBool,
    /// Operations under way; the campaign waits for 0 after pausing.
    pub in_flight: AtomicUsize,
    pub stop: AtomicBool,
    /// Advanced after each restart of the whole cluster.
    pub era: AtomicU32,
    pub history: Mutex<Vec<RegisterOp>>,
    /// Return times (ns) of successful operations, per worker, for the
    /// time clients took to get going again after a fault.
    pub successes: Mutex<Vec<(u32, u64)>>,
}

impl Shared {
    pub fn new() -> Arc<Shared> {
        Arc::new(Shared {
            start: Instant::now(),
            paused: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            era: AtomicU32::new(0),
            history: Mutex::new(Vec::new()),
            successes: Mutex::new(Vec::new()),
        })
    }

    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Waits until the worker may start an operation and counts it in
    /// flight; false once the run stops. The count goes up before the
    /// pause flag is read, so a campaign that raised the flag and then saw
    /// no operation in flight knows none will start.
    pub async fn enter(&self) -> bool {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            if !self.paused.load(Ordering::SeqCst) {
                return true;
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn leave(&self) {
        let before = self.in_flight.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "leave without enter");
    }

    pub fn succeeded(&self, worker: u32) {
        let at = self.now_ns();
        if let Ok(mut s) = self.successes.lock() {
            s.push((worker, at));
        }
    }

    fn record(&self, op: RegisterOp) {
        // What the checker relies on, asserted where the history is made.
        assert!(op.ret >= op.call, "an operation returned before it was called: {op:?}");
        assert!(!op.unknown || matches!(op.kind, "write" | "cas"), "only a write can end unknown: {op:?}");
        assert!(op.kind != "cas" || !op.ok || op.read == op.from, "a compare-and-set applied on another value: {op:?}");
        if !op.unknown {
            self.succeeded(op.worker);
        }
        if let Ok(mut h) = self.history.lock() {
            h.push(op);
        }
    }
}

/// A table `chaos.<name>` of two big integers: the key `id` and `value`.
pub fn int_table(name: &str, value: &str) -> TableSpec {
    TableSpec::new("chaos", name)
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new(value, ColumnType::int(IntWidth::Big)))
        .primary_key(&["id"])
}

/// Creates `chaos.<name>` with rows 1..=rows holding `first`.
pub async fn create_filled(
    client: &Client,
    name: &str,
    value: &str,
    rows: i64,
    first: i64,
) -> Result<Arc<Table>, String> {
    let table =
        client.create_table(int_table(name, value)).await.map_err(|e| format!("cannot create chaos.{name}: {e}"))?;
    let inserts = (1..=rows).map(|k| Op::insert(&table, vec![Value::Int(k), Value::Int(first)]));
    let ops = inserts.collect::<latsdb_types::Result<Vec<Op>>>().map_err(|e| e.to_string())?;
    for result in client.batch(ops).await.map_err(|e| format!("cannot fill chaos.{name}: {e}"))? {
        result.map_err(|e| format!("cannot fill chaos.{name}: {e}"))?;
    }
    Ok(table)
}

pub async fn create_registers(client: &Client) -> Result<Arc<Table>, String> {
    create_filled(client, "registers", "val", REGISTERS, 0).await
}

/// One register worker: runs until the campaign stops it.
pub async fn register_worker(worker: u32, seed: u64, client: Client, table: Arc<Table>, shared: Arc<Shared>) {
    let mut rng = Rng::new(seed ^ (u64::from(worker) << 48));
    // The last value this worker saw per key: what its compare-and-sets expect.
    let mut seen = vec![0i64; REGISTERS as usize + 1];
    let mut writes = 0i64;
    while shared.enter().await {
        let key = 1 + rng.below(REGISTERS as u64) as i64;
        let era = shared.era.load(Ordering::SeqCst);
        let call = shared.now_ns();
        let roll = rng.below(100);
        let op = if roll < 40 {
            read(&client, &table, key).await.map(|v| ("read", 0, v, v, true, false))
        } else if roll < 50 {
            locked_read(&client, &table, key).await.map(|v| ("lread", 0, v, v, true, false))
        } else {
            writes += 1;
            let value = (i64::from(worker) << 40) | writes;
            if roll < 75 {
                write(&client, &table, key, value).await.map(|unknown| ("write", 0, value, 0, !unknown, unknown))
            } else {
                let from = seen[key as usize];
                cas(&client, &table, key, from, value).await.map(|(ok, unknown, current)| {
                    seen[key as usize] = if ok { value } else { current };
                    ("cas", from, value, current, ok, unknown)
                })
            }
        };
        let ret = shared.now_ns();
        // After a failure, wait a little: an outage then adds a few
        // operations of unknown outcome to the history, not thousands.
        let pause = if matches!(op, Some((_, _, _, _, _, false))) { 3_000 } else { 50_000 };
        if let Some((kind, from, value, read, ok, unknown)) = op {
            if !unknown && kind != "cas" {
                seen[key as usize] = value;
            }
            shared.record(RegisterOp { worker, key, era, kind, from, value, read, ok, unknown, call, ret });
        }
        shared.leave();
        tokio::time::sleep(Duration::from_micros(pause + rng.below(4_000))).await;
    }
}

fn value_of(outcome: Option<Outcome>) -> Option<i64> {
    match outcome {
        Some(Outcome::Row(row)) => row.get(1).as_i64(),
        _ => None,
    }
}

/// A committed read; None when it failed (a failed read has no effect).
async fn read(client: &Client, table: &Arc<Table>, key: i64) -> Option<i64> {
    let row = client.get(table, &[Value::Int(key)]).await.ok()??;
    row.get(1).as_i64()
}

async fn locked_read(client: &Client, table: &Arc<Table>, key: i64) -> Option<i64> {
    let mut tx = client.transaction();
    let op = Op::read_locked(table, &[Value::Int(key)], LockMode::Exclusive).ok()?;
    let value = value_of(tx.execute(vec![op]).await.ok()?.pop());
    // The read is valid once its lock was held; the commit only releases it.
    let _ = tx.commit().await;
    value
}

/// A blind write (a transaction of one update): `Some(false)` when it
/// committed, `Some(true)` when its outcome is unknown (the commit was
/// sent and never answered), None when it aborted without effect.
async fn write(client: &Client, table: &Arc<Table>, key: i64, value: i64) -> Option<bool> {
    let op = Op::update(table, &[Value::Int(key)], &[("val", Value::Int(value))]).ok()?;
    let mut tx = client.transaction();
    // Committed is what the coordinator said, even when the call then
    // failed (e.g. waiting for durability).
    let _ = tx.execute_and_commit(vec![op]).await;
    if tx.is_committed() {
        Some(false)
    } else if tx.outcome_unknown() {
        Some(true)
    } else {
        None
    }
}

/// A compare-and-set: `(applied, outcome unknown, the value it read under
/// its lock)`, or None when it failed without effect (the transaction
/// aborted).
async fn cas(client: &Client, table: &Arc<Table>, key: i64, from: i64, to: i64) -> Option<(bool, bool, i64)> {
    let mut tx = client.transaction();
    let op = Op::read_locked(table, &[Value::Int(key)], LockMode::Exclusive).ok()?;
    let current = value_of(tx.execute(vec![op]).await.ok()?.pop())?;
    if current != from {
        let _ = tx.rollback().await;
        return Some((false, false, current));
    }
    let update = Op::update(table, &[Value::Int(key)], &[("val", Value::Int(to))]).ok()?;
    let _ = tx.execute_and_commit(vec![update]).await;
    if tx.is_committed() {
        Some((true, false, current))
    } else if tx.outcome_unknown() {
        Some((true, true, current))
    } else {
        None
    }
}
