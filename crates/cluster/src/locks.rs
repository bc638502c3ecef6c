//! Row locks: shared/exclusive with upgrade, FIFO wait queues, lock-wait
//! deadlines. Knows nothing about operations; a waiter carries an opaque
//! payload that is handed back when the lock is granted or times out.

use crate::context::Micros;
use latsdb_types::proto::{LockMode, TxId};
use latsdb_types::schema::TableId;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A locked row: its table and primary key. Keys of up to 24 bytes (most
/// primary keys) are kept inline: every write locks its row on every
/// replica, and the key is held by the lock table and the transaction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    pub table: TableId,
    pub key: smallvec::SmallVec<[u8; 24]>,
}

impl LockKey {
    /// Copies the key with one `memcpy` (`From<&[u8]>` copies byte by
    /// byte, and a write builds its row's key several times on each replica).
    pub fn new(table: TableId, key: &[u8]) -> LockKey {
        LockKey { table, key: smallvec::SmallVec::from_slice(key) }
    }
}

struct Waiter<P> {
    seq: u64,
    owner: TxId,
    mode: LockMode,
    deadline: Micros,
    payload: P,
}

struct RowLock<P> {
    /// Exclusive, or shared by every holder.
    mode: LockMode,
    /// Inline: nearly every lock has one holder, and a write takes one on
    /// every replica.
    holders: smallvec::SmallVec<[TxId; 1]>,
    queue: VecDeque<Waiter<P>>,
}

pub enum Acquire {
    Granted,
    /// Queued until the lock is granted, cancelled or the deadline passes.
    Waiting,
}

pub struct LockTable<P> {
    rows: HashMap<LockKey, RowLock<P>, foldhash::fast::RandomState>,
    deadlines: BTreeMap<(Micros, u64), LockKey>,
    next_seq: u64,
    /// Requests that had to wait, and waits that timed out (for reports).
    pub(crate) waits: u64,
    pub(crate) timeouts: u64,
}

impl<P> Default for LockTable<P> {
    fn default() -> Self {
        LockTable { rows: HashMap::default(), deadlines: BTreeMap::new(), next_seq: 1, waits: 0, timeouts: 0 }
    }
}

fn compatible(held: LockMode, wanted: LockMode) -> bool {
    held == LockMode::Shared && wanted == LockMode::Shared
}

fn covers(held: LockMode, wanted: LockMode) -> bool {
    held == LockMode::Exclusive || wanted != LockMode::Exclusive
}

impl<P> LockTable<P> {
    pub fn is_locked(&self, key: &LockKey) -> bool {
        self.rows.contains_key(key)
    }

    /// Takes a lock for `owner` or queues the request. `payload` is returned
    /// by `release`/`expire` when the queued request is granted or times out.
    pub fn acquire(
        &mut self,
        key: &LockKey,
        owner: TxId,
        mode: LockMode,
        deadline: Micros,
        payload: P,
    ) -> (Acquire, Option<P>) {
        debug_assert!(mode != LockMode::Committed, "committed reads take no lock");
        // One hash and probe for the common case of a row nobody locked
        // (every write takes a lock on every replica).
        let lock = match self.rows.entry(key.clone()) {
            Entry::Vacant(free) => {
                free.insert(RowLock { mode, holders: smallvec::smallvec![owner], queue: VecDeque::new() });
                return (Acquire::Granted, Some(payload));
            }
            Entry::Occupied(held) => held.into_mut(),
        };
        // A later request of an owner that already waits here queues behind
        // its earlier one, so one transaction's operations on a row run in order.
        let owner_waits = lock.queue.iter().any(|w| w.owner == owner);
        let holder = lock.holders.contains(&owner);
        if holder && !owner_waits {
            if covers(lock.mode, mode) {
                return (Acquire::Granted, Some(payload));
            }
            if lock.holders.len() == 1 {
                lock.mode = LockMode::Exclusive;
                return (Acquire::Granted, Some(payload));
            }
        } else if !holder && lock.queue.is_empty() && compatible(lock.mode, mode) {
            lock.holders.push(owner);
            return (Acquire::Granted, Some(payload));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let waiter = Waiter { seq, owner, mode, deadline, payload };
        if holder && !owner_waits {
            // An upgrade waits only for the other holders: it goes ahead of
            // requests from non-holders, which would otherwise wait for it
            // while it waits for them.
            let pos = lock.queue.iter().position(|w| !lock.holders.contains(&w.owner)).unwrap_or(lock.queue.len());
            lock.queue.insert(pos, waiter);
        } else {
            lock.queue.push_back(waiter);
        }
        self.deadlines.insert((deadline, seq), key.clone());
        self.waits += 1;
        (Acquire::Waiting, None)
    }

    /// Releases `owner`'s lock on `key`; returns the queued requests that
    /// are granted as a result (their owners now hold the lock).
    pub fn release(&mut self, key: &LockKey, owner: TxId) -> Vec<(TxId, P)> {
        let Entry::Occupied(mut held) = self.rows.entry(key.clone()) else {
            return Vec::new();
        };
        let lock = held.get_mut();
        lock.holders.retain(|h| *h != owner);
        if lock.queue.is_empty() {
            // Nobody waits (the common case): one lookup in all.
            if lock.holders.is_empty() {
                held.remove();
            }
            return Vec::new();
        }
        self.grant_waiters(key)
    }

    /// Removes every queued request of `owner` on `key` (its transaction was
    /// aborted); returns their payloads and any requests granted because they
    /// stood in the way.
    pub fn cancel_owner(&mut self, key: &LockKey, owner: TxId) -> (Vec<P>, Vec<(TxId, P)>) {
        let Some(lock) = self.rows.get_mut(key) else {
            return (Vec::new(), Vec::new());
        };
        let mut cancelled = Vec::new();
        let mut kept = VecDeque::with_capacity(lock.queue.len());
        for waiter in lock.queue.drain(..) {
            if waiter.owner == owner {
                self.deadlines.remove(&(waiter.deadline, waiter.seq));
                cancelled.push(waiter.payload);
            } else {
                kept.push_back(waiter);
            }
        }
        lock.queue = kept;
        (cancelled, self.grant_waiters(key))
    }

    /// Removes every queued request whose deadline is at or before `now`.
    /// Returns (owner, payload) of each, plus requests granted because
    /// an expired one stood in their way.
    #[allow(clippy::type_complexity)]
    pub fn expire(&mut self, now: Micros) -> (Vec<(TxId, P)>, Vec<(TxId, P)>) {
        let mut expired = Vec::new();
        let mut granted = Vec::new();
        while let Some((&(deadline, seq), _)) = self.deadlines.iter().next() {
            if deadline > now {
                break;
            }
            let key = self.deadlines.remove(&(deadline, seq)).expect("entry exists");
            let Some(lock) = self.rows.get_mut(&key) else {
                continue;
            };
            if let Some(pos) = lock.queue.iter().position(|w| w.seq == seq) {
                let waiter = lock.queue.remove(pos).expect("position is in range");
                expired.push((waiter.owner, waiter.payload));
                self.timeouts += 1;
                granted.extend(self.grant_waiters(&key));
            }
        }
        (expired, granted)
    }

    fn grant_waiters(&mut self, key: &LockKey) -> Vec<(TxId, P)> {
        let mut granted = Vec::new();
        let Some(lock) = self.rows.get_mut(key) else {
            return granted;
        };
        while let Some(front) = lock.queue.front() {
            let grantable = if lock.holders.is_empty() {
                true
            } else if lock.holders.contains(&front.owner) {
                covers(lock.mode, front.mode) || lock.holders.len() == 1
            } else {
                compatible(lock.mode, front.mode)
            };
            if !grantable {
                break;
            }
            let waiter = lock.queue.pop_front().expect("front exists");
            self.deadlines.remove(&(waiter.deadline, waiter.seq));
            if lock.holders.is_empty() {
                lock.mode = waiter.mode;
            } else if waiter.mode == LockMode::Exclusive {
                lock.mode = LockMode::Exclusive;
            }
            if !lock.holders.contains(&waiter.owner) {
                lock.holders.push(waiter.owner);
            }
            granted.push((waiter.owner, waiter.payload));
        }
        if lock.holders.is_empty() && lock.queue.is_empty() {
            self.rows.remove(key);
        }
        granted
    }

    pub fn locked_rows(&self) -> usize {
        self.rows.len()
    }

    /// Whether `owner` holds the lock on `key`.
    pub fn holds(&self, key: &LockKey, owner: TxId) -> bool {
        self.rows.get(key).is_some_and(|lock| lock.holders.contains(&owner))
    }

    /// Checks the table's invariants: every locked row has a holder, an
    /// exclusive lock exactly one, and every queued request its deadline
    /// (and no deadline outlives its request).
    pub fn check(&self) {
        let mut waiters = 0;
        for (key, lock) in &self.rows {
            assert!(!lock.holders.is_empty(), "row {key:?} is locked by nobody");
            assert!(
                lock.mode != LockMode::Exclusive || lock.holders.len() == 1,
                "row {key:?} is locked exclusively by {} holders",
                lock.holders.len()
            );
            assert!(lock.mode != LockMode::Committed, "row {key:?} is locked for a committed read");
            for w in &lock.queue {
                assert_eq!(self.deadlines.get(&(w.deadline, w.seq)), Some(key), "a waiter on {key:?} has no deadline");
                assert!(w.seq < self.next_seq, "a waiter numbered beyond the last number given");
            }
            waiters += lock.queue.len();
        }
        assert_eq!(waiters, self.deadlines.len(), "lock deadlines outlived their requests");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latsdb_types::proto::ShardAddr;

    fn tx(n: u64) -> TxId {
        TxId { tc: ShardAddr { node: 1, shard: 0 }, seq: n }
    }

    fn key() -> LockKey {
        LockKey { table: 1, key: vec![1].into() }
    }

    #[test]
    fn exclusive_blocks_until_release_then_grants_in_order() {
        let mut t = LockTable::default();
        assert!(matches!(t.acquire(&key(), tx(1), LockMode::Exclusive, 100, 'a').0, Acquire::Granted));
        assert!(matches!(t.acquire(&key(), tx(2), LockMode::Shared, 100, 'b').0, Acquire::Waiting));
        assert!(matches!(t.acquire(&key(), tx(3), LockMode::Shared, 100, 'c').0, Acquire::Waiting));
        let granted = t.release(&key(), tx(1));
        assert_eq!(granted.iter().map(|g| g.1).collect::<String>(), "bc");
        t.release(&key(), tx(2));
        t.release(&key(), tx(3));
        assert_eq!(t.locked_rows(), 0);
    }

    #[test]
    fn waits_expire_at_their_deadline() {
        let mut t = LockTable::default();
        t.acquire(&key(), tx(1), LockMode::Exclusive, 100, 'a');
        t.acquire(&key(), tx(2), LockMode::Exclusive, 50, 'b');
        assert!(t.expire(49).0.is_empty());
        let (expired, granted) = t.expire(50);
        assert_eq!(expired.len(), 1);
        assert!(granted.is_empty());
        assert_eq!(t.locked_rows(), 1);
    }

    #[test]
    fn upgrade_goes_ahead_of_outside_waiters() {
        let mut t = LockTable::default();
        t.acquire(&key(), tx(1), LockMode::Shared, 100, 'a');
        t.acquire(&key(), tx(2), LockMode::Shared, 100, 'b');
        assert!(matches!(t.acquire(&key(), tx(3), LockMode::Exclusive, 100, 'c').0, Acquire::Waiting));
        assert!(matches!(t.acquire(&key(), tx(1), LockMode::Exclusive, 100, 'd').0, Acquire::Waiting));
        // When tx 2 leaves, tx 1's upgrade is granted before tx 3.
        let granted = t.release(&key(), tx(2));
        assert_eq!(granted.iter().map(|g| g.1).collect::<String>(), "d");
        let granted = t.release(&key(), tx(1));
        assert_eq!(granted.iter().map(|g| g.1).collect::<String>(), "c");
    }

    #[test]
    fn an_owners_requests_on_a_row_stay_in_order() {
        let mut t = LockTable::default();
        t.acquire(&key(), tx(1), LockMode::Shared, 100, 'a');
        t.acquire(&key(), tx(2), LockMode::Shared, 100, 'b');
        assert!(matches!(t.acquire(&key(), tx(1), LockMode::Exclusive, 100, 'c').0, Acquire::Waiting));
        // A shared read by tx 1 after its queued upgrade waits behind it.
        assert!(matches!(t.acquire(&key(), tx(1), LockMode::Shared, 100, 'd').0, Acquire::Waiting));
        let granted = t.release(&key(), tx(2));
        assert_eq!(granted.iter().map(|g| g.1).collect::<String>(), "cd");
    }

    #[test]
    fn sole_shared_holder_upgrades() {
        let mut t = LockTable::default();
        t.acquire(&key(), tx(1), LockMode::Shared, 100, 'a');
        assert!(matches!(t.acquire(&key(), tx(1), LockMode::Exclusive, 100, 'b').0, Acquire::Granted));
        assert!(matches!(t.acquire(&key(), tx(2), LockMode::Shared, 100, 'c').0, Acquire::Waiting));
    }
}
