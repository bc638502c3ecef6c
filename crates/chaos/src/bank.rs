//! The bank and the ledger: workloads whose anomalies show in a sum and
//! in a set, checked here.
//!
//! Bank: `chaos.accounts` holds `ACCOUNTS` accounts of `OPENING` each,
//! spread over the partitions of both node groups. Transfers lock two
//! accounts exclusively (in key order), move an amount and commit;
//! audits read every account under shared locks in one transaction and
//! must see the opening total. A committed-read audit could see half a
//! transfer (committed reads are per row, not a snapshot), so only
//! locking audits are judged.
//!
//! Ledger: each ledger worker inserts rows with ids no one used before,
//! through a client that waits until each commit is durable. Every insert
//! acknowledged must be there at the end (even across a crash of the whole
//! cluster), and every row there must be one that was acknowledged or
//! whose outcome was unknown.

use crate::workload::Shared;
use latsdb_client::{Client, LockMode, Op, Outcome, Scan, Table};
use latsdb_types::rng::Rng;
use latsdb_types::Value;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const ACCOUNTS: i64 = 8;
pub const OPENING: i64 = 1_000;

#[derive(Default)]
pub struct BankLog {
    pub transfers: u64,
    pub audits: u64,
    /// Audits that saw another total: (ns since start, total).
    pub wrong_totals: Vec<(u64, i64)>,
}

#[derive(Default)]
pub struct LedgerLog {
    pub acknowledged: BTreeSet<i64>,
    pub unknown: BTreeSet<i64>,
}

pub async fn create_bank(client: &Client) -> Result<Arc<Table>, String> {
    crate::workload::create_filled(client, "accounts", "balance", ACCOUNTS, OPENING).await
}

pub async fn create_ledger(client: &Client) -> Result<Arc<Table>, String> {
    client
        .create_table(crate::workload::int_table("ledger", "worker"))
        .await
        .map_err(|e| format!("cannot create chaos.ledger: {e}"))
}

fn balance(outcome: Outcome) -> Option<i64> {
    outcome.into_row()?.get(1).as_i64()
}

pub async fn transfer_worker(
    worker: u32,
    seed: u64,
    client: Client,
    table: Arc<Table>,
    shared: Arc<Shared>,
    log: Arc<Mutex<BankLog>>,
) {
    let mut rng = Rng::new(seed ^ (u64::from(worker) << 48) ^ 0xBA4C);
    while shared.enter().await {
        let a = 1 + rng.below(ACCOUNTS as u64) as i64;
        let b = 1 + (a + rng.below(ACCOUNTS as u64 - 1) as i64) % ACCOUNTS;
        let amount = 1 + rng.below(50) as i64;
        let done = transfer(&client, &table, a.min(b), a.max(b), amount).await.is_some();
        if done {
            shared.succeeded(worker);
            if let Ok(mut l) = log.lock() {
                l.transfers += 1;
            }
        }
        shared.leave();
        let pause = if done { 3_000 } else { 50_000 };
        tokio::time::sleep(Duration::from_micros(pause + rng.below(5_000))).await;
    }
}

/// Moves `amount` from account `a` to `b` (a < b, locked in that order);
/// None when the transaction did not commit.
async fn transfer(client: &Client, table: &Arc<Table>, a: i64, b: i64, amount: i64) -> Option<()> {
    let mut tx = client.transaction();
    let lock = |k: i64| Op::read_locked(table, &[Value::Int(k)], LockMode::Exclusive).ok();
    let mut found = tx.execute(vec![lock(a)?, lock(b)?]).await.ok()?.into_iter();
    let (from, to) = (balance(found.next()?)?, balance(found.next()?)?);
    let set = |k: i64, v: i64| Op::update(table, &[Value::Int(k)], &[("balance", Value::Int(v))]).ok();
    let _ = tx.execute_and_commit(vec![set(a, from - amount)?, set(b, to + amount)?]).await;
    tx.is_committed().then_some(())
}

pub async fn audit_worker(
    worker: u32,
    client: Client,
    table: Arc<Table>,
    shared: Arc<Shared>,
    log: Arc<Mutex<BankLog>>,
) {
    while shared.enter().await {
        if let Some(total) = audit(&client, &table).await {
            shared.succeeded(worker);
            if let Ok(mut l) = log.lock() {
                l.audits += 1;
                if total != ACCOUNTS * OPENING {
                    l.wrong_totals.push((shared.now_ns(), total));
                }
            }
        }
        shared.leave();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The total of every account, read under shared locks in one
/// transaction; None when the transaction failed.
pub async fn audit(client: &Client, table: &Arc<Table>) -> Option<i64> {
    let mut tx = client.transaction();
    let ops = (1..=ACCOUNTS).map(|k| Op::read_locked(table, &[Value::Int(k)], LockMode::Shared).ok());
    let found = tx.execute(ops.collect::<Option<Vec<Op>>>()?).await.ok()?;
    let total = found.into_iter().map(balance).sum::<Option<i64>>();
    let _ = tx.commit().await;
    total
}

pub async fn ledger_worker(
    worker: u32,
    client: Client,
    table: Arc<Table>,
    shared: Arc<Shared>,
    log: Arc<Mutex<LedgerLog>>,
) {
    let mut seq = 0i64;
    while shared.enter().await {
        seq += 1;
        let id = i64::from(worker) * 1_000_000_000 + seq;
        let acknowledged = match Op::insert(&table, vec![Value::Int(id), Value::Int(i64::from(worker))]) {
            Ok(op) => matches!(client.batch(vec![op]).await.map(|mut r| r.pop()), Ok(Some(Ok(Outcome::Done)))),
            Err(_) => false,
        };
        if acknowledged {
            shared.succeeded(worker);
        }
        if let Ok(mut l) = log.lock() {
            if acknowledged {
                l.acknowledged.insert(id);
            } else {
                l.unknown.insert(id);
            }
        }
        shared.leave();
        tokio::time::sleep(Duration::from_millis(if acknowledged { 5 } else { 50 })).await;
    }
}

/// What the ledger lost or invented, as readable findings (empty when it
/// holds exactly what it should).
pub async fn check_ledger(client: &Client, table: &Arc<Table>, log: &LedgerLog) -> Result<Vec<String>, String> {
    let rows = client.scan(table, Scan::all()).await.map_err(|e| format!("cannot scan the ledger: {e}"))?;
    let present: BTreeSet<i64> = rows.iter().filter_map(|r| r.get(0).as_i64()).collect();
    let mut findings = Vec::new();
    let lost: Vec<&i64> = log.acknowledged.difference(&present).collect();
    if !lost.is_empty() {
        findings.push(format!(
            "ledger: {} acknowledged durable insert(s) are missing, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        ));
    }
    let invented: Vec<&i64> =
        present.iter().filter(|id| !log.acknowledged.contains(id) && !log.unknown.contains(id)).collect();
    if !invented.is_empty() {
        findings.push(format!(
            "ledger: {} row(s) no one inserted, e.g. {:?}",
            invented.len(),
            &invented[..invented.len().min(5)]
        ));
    }
    Ok(findings)
}
