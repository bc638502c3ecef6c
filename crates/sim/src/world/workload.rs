//! The workload: clients moving money between accounts in transactions,
//! auditing under locks, reading committed values and writing registers
//! with independent writes, and checking every answer as it comes.

use super::*;

pub(super) const INITIAL_BALANCE: i64 = 1000;

/// Registers each client writes with independent writes (rows of the
/// accounts table after the accounts, outside the bank).
pub(super) const REGISTERS_PER_CLIENT: i64 = 2;

pub(super) fn registers(cfg: &SimConfig) -> i64 {
    cfg.clients as i64 * REGISTERS_PER_CLIENT
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Account {
    pub(super) balance: i64,
    pub(super) version: i64,
}

#[derive(Debug)]
pub(super) enum Doing {
    Idle,
    Locking {
        shard: usize,
        req: u64,
        a: i64,
        b: i64,
        amount: i64,
        abandon: bool,
    },
    Writing {
        shard: usize,
        req: u64,
        writes: [(i64, Account); 2],
        abandon: bool,
        tx: TxId,
    },
    Auditing {
        req: u64,
        shard: usize,
    },
    /// Waits until an acknowledged transfer's epoch is durable.
    Durable {
        req: u64,
        shard: usize,
        transfer: Transfer,
    },
    /// `floor`: the newest version of the account acknowledged before the
    /// read was sent; the read must not return an older one.
    Reading {
        req: u64,
        account: i64,
        shard: usize,
        floor: i64,
    },
    /// Independent writes of the client's registers in one batch (not a
    /// transaction: each write commits on its own), `(register, value)`.
    Registering {
        req: u64,
        shard: usize,
        writes: Vec<(i64, i64)>,
    },
}

impl Doing {
    pub(super) fn waiting_on(&self) -> Option<(usize, u64)> {
        match *self {
            Doing::Locking { shard, req, .. }
            | Doing::Writing { shard, req, .. }
            | Doing::Auditing { req, shard }
            | Doing::Durable { req, shard, .. }
            | Doing::Reading { req, shard, .. }
            | Doing::Registering { req, shard, .. } => Some((shard, req)),
            Doing::Idle => None,
        }
    }
}

pub(super) struct Client {
    pub(super) generation: u64,
    pub(super) next_req: u64,
    pub(super) doing: Doing,
    /// Per account, the newest version this client's commits wrote: its
    /// later reads, from any replica, must not see an older one.
    pub(super) own_versions: HashMap<i64, i64>,
}

/// An acknowledged transfer: the versions it wrote of its two accounts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Transfer {
    pub(super) a: i64,
    pub(super) version_a: i64,
    pub(super) b: i64,
    pub(super) version_b: i64,
}

/// The longest value of an account's `pad` column.
pub(super) const MAX_PAD: usize = 5_000;

/// An account's `pad` (a disk column): 2 to 5 KB, different for every
/// account, so a read that assembled a row from the wrong record shows.
/// A shard's rows span more pages than its cache of one page holds.
pub(super) fn pad_of(id: i64) -> Value {
    let len = 2_000 + (id.unsigned_abs() as usize * 997) % (MAX_PAD - 2_000);
    Value::Bytes((0..len).map(|i| (id as u8).wrapping_mul(31).wrapping_add(i as u8)).collect())
}

/// Answers a client accepts as "not done, try again": lock-wait timeouts,
/// and (around failures) a participant that left, a stale route, or a node
/// that cannot confirm its membership.
pub(super) fn retriable(e: &latsdb_types::DbError) -> bool {
    matches!(
        e.code,
        ErrorCode::LockWaitTimeout
            | ErrorCode::NodeUnavailable
            | ErrorCode::NotServing
            | ErrorCode::WrongShard
            | ErrorCode::UnknownTransaction
    )
}

impl World {
    pub(super) fn load_accounts(&mut self) -> Result<(), String> {
        for id in 0..self.cfg.accounts + registers(&self.cfg) {
            let op = self.op(
                id,
                OpKind::Insert { row: vec![Value::Int(id), Value::Int(INITIAL_BALANCE), Value::Int(0), pad_of(id)] },
            );
            let shard = self.owner(&op)?;
            match self.request_now(shard, ClientRequest::Batch(vec![op])).pop() {
                Some(ClientResponse::Batch(r)) if r == vec![OpResult::Done] => {}
                other => return Err(format!("loading account {id} failed: {other:?}")),
            }
        }
        Ok(())
    }

    pub(super) fn conn(&self, c: usize) -> u64 {
        ((c as u64) << 16) | (self.clients[c].generation & 0xFFFF)
    }

    pub(super) fn request(&mut self, c: usize, shard: usize, req: ClientRequest) -> u64 {
        let req_id = self.clients[c].next_req;
        self.clients[c].next_req += 1;
        let conn = self.conn(c);
        self.send(Endpoint::Client(c), Endpoint::Shard(shard), Payload::Request { conn, req_id, req });
        req_id
    }

    pub(super) fn wake_later(&mut self, c: usize) {
        self.clients[c].doing = Doing::Idle;
        let at = self.now + 1 + self.rng.below(3_000);
        self.schedule(at, Endpoint::Client(c), Endpoint::Client(c), Payload::Wake);
    }

    /// The client drops its connection (its open transaction is aborted by
    /// the coordinator) and tries something else later.
    pub(super) fn drop_connection(&mut self, c: usize, shard: usize) {
        let conn = self.conn(c);
        self.clients[c].generation += 1;
        self.send(Endpoint::Client(c), Endpoint::Shard(shard), Payload::Disconnect { conn });
        self.wake_later(c);
    }

    pub(super) fn at_client(&mut self, c: usize, payload: Payload) -> Result<(), String> {
        match payload {
            Payload::Wake => {
                if !self.stopped && matches!(self.clients[c].doing, Doing::Idle) {
                    self.start_action(c);
                }
                Ok(())
            }
            Payload::Response { req_id, resp } => self.on_response(c, req_id, resp),
            Payload::ConnectionLost { req_id } => {
                self.on_connection_lost(c, req_id);
                Ok(())
            }
            Payload::DropIfWaiting { req } => {
                let (waiting, shard) = match self.clients[c].doing {
                    Doing::Locking { req: r, shard, .. } if r == req => (true, shard),
                    Doing::Auditing { req: r, shard } if r == req => (true, shard),
                    _ => (false, 0),
                };
                if waiting {
                    self.report.dropped_while_waiting += 1;
                    self.drop_connection(c, shard);
                }
                Ok(())
            }
            other => Err(format!("client {c} got a shard's event {other:?}")),
        }
    }

    pub(super) fn on_connection_lost(&mut self, c: usize, req_id: u64) {
        let doing = std::mem::replace(&mut self.clients[c].doing, Doing::Idle);
        match doing {
            Doing::Writing { req, writes, abandon: false, .. } if req == req_id => {
                // The commit may or may not have happened.
                for (id, acc) in writes {
                    self.maybe[id as usize].entry(acc.version).or_default().push(acc.balance);
                }
                self.report.unknown_outcomes += 1;
            }
            // A register write's outcome stays unknown (its values were
            // recorded as possibly written when it was sent).
            Doing::Locking { req, .. }
            | Doing::Writing { req, .. }
            | Doing::Auditing { req, .. }
            | Doing::Durable { req, .. }
            | Doing::Reading { req, .. }
            | Doing::Registering { req, .. }
                if req == req_id => {}
            other => {
                self.clients[c].doing = other;
                return;
            }
        }
        self.clients[c].generation += 1;
        self.wake_later(c);
    }

    pub(super) fn start_action(&mut self, c: usize) {
        let roll = self.rng.below(100);
        let n = self.cfg.accounts as u64;
        if roll < 50 {
            let a = self.rng.below(n) as i64;
            let b = (a + 1 + self.rng.below(n - 1) as i64) % n as i64;
            let amount = 1 + self.rng.below(100) as i64;
            let abandon = self.rng.chance(8);
            // Lock in random order, so transfers deadlock now and then.
            let ops = vec![
                self.op(a, OpKind::Read { lock: LockMode::Exclusive }),
                self.op(b, OpKind::Read { lock: LockMode::Exclusive }),
            ];
            let Ok(shard) = self.owner(&ops[0]) else { return self.wake_later(c) };
            let req = self.request(c, shard, ClientRequest::TxExec { tx: None, ops, commit: false });
            self.clients[c].doing = Doing::Locking { shard, req, a, b, amount, abandon };
            self.maybe_drop_early(c, req);
        } else if roll < 65 {
            let ops: Vec<KeyOp> =
                (0..self.cfg.accounts).map(|id| self.op(id, OpKind::Read { lock: LockMode::Shared })).collect();
            let Ok(shard) = self.owner(&ops[0]) else { return self.wake_later(c) };
            let req = self.request(c, shard, ClientRequest::TxExec { tx: None, ops, commit: true });
            self.clients[c].doing = Doing::Auditing { req, shard };
            self.maybe_drop_early(c, req);
        } else if roll < 80 {
            self.write_registers(c);
        } else {
            // An account or a register.
            let account = self.rng.below(n + registers(&self.cfg) as u64) as i64;
            let op = self.op(account, OpKind::Read { lock: LockMode::Committed });
            // Committed reads may be served by any replica.
            let replicas = self.router.replicas_of(op.partition);
            if replicas.is_empty() {
                return self.wake_later(c);
            }
            let pick = replicas[self.rng.below(replicas.len() as u64) as usize];
            let shard = self.addrs.iter().position(|a| *a == pick).expect("replica is a simulated shard");
            let floor = self.acked_max[account as usize];
            let req = self.request(c, shard, ClientRequest::Batch(vec![op]));
            self.clients[c].doing = Doing::Reading { req, account, shard, floor };
        }
    }

    /// One batch of independent writes to the client's own registers
    /// (only this client writes them, one request at a time, so a newer
    /// value is always written after an older one was answered): both
    /// registers when one primary holds them, now and then one register
    /// twice. Every value is unique and larger than all before it.
    pub(super) fn write_registers(&mut self, c: usize) {
        let first = self.cfg.accounts + (c as i64) * REGISTERS_PER_CLIENT;
        let mut ids = vec![first + self.rng.below(REGISTERS_PER_CLIENT as u64) as i64];
        if self.rng.chance(4) {
            ids.push(ids[0]);
        } else if self.rng.chance(2) {
            ids.push(if ids[0] == first { first + 1 } else { first });
        }
        let mut ops = Vec::new();
        let mut writes = Vec::new();
        let mut shard = None;
        for id in ids {
            let value = self.next_register_value;
            let op = self
                .op(id, OpKind::Upsert { row: vec![Value::Int(id), Value::Int(value), Value::Int(value), pad_of(id)] });
            let Ok(owner) = self.owner(&op) else { return self.wake_later(c) };
            if shard.is_some_and(|s| s != owner) {
                continue;
            }
            shard = Some(owner);
            self.next_register_value += 1;
            ops.push(op);
            writes.push((id, value));
            self.written.insert((id, value, value));
            self.maybe[id as usize].entry(value).or_default().push(value);
        }
        let Some(shard) = shard else { return self.wake_later(c) };
        let req = self.request(c, shard, ClientRequest::Batch(ops));
        self.clients[c].doing = Doing::Registering { req, shard, writes };
    }

    /// Now and then the client gives up on a request that has not been
    /// answered yet: its connection drops while the transaction executes
    /// (possibly queued for a lock). An audit may already be committing then;
    /// it only reads, so its outcome does not matter to the checkers.
    pub(super) fn maybe_drop_early(&mut self, c: usize, req: u64) {
        if self.rng.chance(5) {
            let at = self.now + self.rng.below(4_000);
            self.schedule(at, Endpoint::Client(c), Endpoint::Client(c), Payload::DropIfWaiting { req });
        }
    }

    pub(super) fn account_of(&self, result: &OpResult) -> Result<Account, String> {
        match result {
            OpResult::Row(row) => {
                // The disk column, put together from its page, is the row's own.
                let id = self.meta.layout.get(row, 0).as_i64().ok_or("id is not an integer")?;
                if self.meta.layout.get(row, 3) != pad_of(id) {
                    return Err(format!("account {id} was read with another row's disk part: {row:?}"));
                }
                let balance = self.meta.layout.get(row, 1).as_i64().ok_or("balance is not an integer")?;
                let version = self.meta.layout.get(row, 2).as_i64().ok_or("version is not an integer")?;
                Ok(Account { balance, version })
            }
            other => Err(format!("expected an account row, got {other:?}")),
        }
    }

    pub(super) fn on_response(&mut self, c: usize, req_id: u64, resp: ClientResponse) -> Result<(), String> {
        if let ClientResponse::Error(e) = &resp {
            // Refused before anything ran (the node's lease ran out, or it
            // left the view): a transaction the client holds open there is
            // ended by dropping the connection.
            if let Some((shard, req)) = self.clients[c].doing.waiting_on() {
                if req == req_id && retriable(e) {
                    self.report.refused += 1;
                    if let Doing::Locking { .. } | Doing::Writing { .. } = self.clients[c].doing {
                        self.report.aborted_transfers += 1;
                    }
                    self.drop_connection(c, shard);
                    return Ok(());
                }
            }
        }
        let doing = std::mem::replace(&mut self.clients[c].doing, Doing::Idle);
        match doing {
            Doing::Locking { shard, req, a, b, amount, abandon } if req == req_id => match resp {
                ClientResponse::TxExec { tx, results, committed: false, .. } => {
                    let old = [self.account_of(&results[0])?, self.account_of(&results[1])?];
                    let new_a = Account { balance: old[0].balance - amount, version: old[0].version + 1 };
                    let new_b = Account { balance: old[1].balance + amount, version: old[1].version + 1 };
                    let writes = [(a, new_a), (b, new_b)];
                    let set = |acc: Account| {
                        vec![(1, Expr::Const(Value::Int(acc.balance))), (2, Expr::Const(Value::Int(acc.version)))]
                    };
                    let ops = vec![
                        self.op(a, OpKind::Update { set: set(new_a) }),
                        self.op(b, OpKind::Update { set: set(new_b) }),
                    ];
                    if !abandon {
                        for (id, acc) in writes {
                            self.written.insert((id, acc.version, acc.balance));
                        }
                    }
                    let req = self.request(c, shard, ClientRequest::TxExec { tx: Some(tx), ops, commit: !abandon });
                    self.clients[c].doing = Doing::Writing { shard, req, writes, abandon, tx };
                    Ok(())
                }
                ClientResponse::TxAborted { error: Some(e), .. } if retriable(&e) => {
                    self.report.aborted_transfers += 1;
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: transfer lock step answered {other:?}")),
            },
            Doing::Writing { shard, req, writes, abandon, tx } if req == req_id => match resp {
                ClientResponse::TxExec { committed: true, .. } if !abandon => {
                    self.on_transfer_committed(c, shard, writes, tx)
                }
                ClientResponse::TxExec { committed: false, .. } if abandon => {
                    // Walk away with staged writes and locks: the connection drops.
                    self.report.abandoned += 1;
                    self.drop_connection(c, shard);
                    Ok(())
                }
                // The transaction was aborted (a participant's node left, or
                // the coordinator already aborted it): nothing committed.
                ClientResponse::TxAborted { error: Some(e), .. } | ClientResponse::Error(e) if retriable(&e) => {
                    self.report.aborted_transfers += 1;
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: transfer write step answered {other:?}")),
            },
            Doing::Durable { req, transfer, .. } if req == req_id => match resp {
                ClientResponse::Durable(_) => {
                    self.durable_transfers.push(transfer);
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: the wait for durability answered {other:?}")),
            },
            Doing::Auditing { req, .. } if req == req_id => match resp {
                ClientResponse::TxExec { results, committed: true, .. } => self.on_audit(c, &results),
                ClientResponse::TxAborted { error: Some(e), .. } if retriable(&e) => {
                    self.wake_later(c);
                    Ok(())
                }
                other => Err(format!("client {c}: audit answered {other:?}")),
            },
            Doing::Reading { req, account, floor, .. } if req == req_id => match resp {
                // A retriable refusal first: a stale route (the partition
                // moved to an added node group) is not a row.
                ClientResponse::Batch(results) if matches!(&results[..], [OpResult::Error(e)] if retriable(e)) => {
                    self.wake_later(c);
                    Ok(())
                }
                ClientResponse::Batch(results) if results.len() == 1 => {
                    self.on_committed_read(c, account, floor, &results[0])
                }
                other => Err(format!("client {c}: read answered {other:?}")),
            },
            Doing::Registering { req, writes, .. } if req == req_id => match resp {
                ClientResponse::Batch(results) if results.len() == writes.len() => {
                    self.on_registers_written(c, writes, results)
                }
                other => Err(format!("client {c}: register writes answered {other:?}")),
            },
            other => {
                // An answer to an older request (its connection was dropped) is ignored.
                self.clients[c].doing = other;
                Ok(())
            }
        }
    }

    /// A transfer's commit was acknowledged: its versions are checked and
    /// recorded (a version committed twice is a lost update); the client
    /// may wait for it to be durable.
    fn on_transfer_committed(
        &mut self,
        c: usize,
        shard: usize,
        writes: [(i64, Account); 2],
        tx: TxId,
    ) -> Result<(), String> {
        for (id, acc) in writes {
            let own = self.clients[c].own_versions.entry(id).or_insert(0);
            *own = (*own).max(acc.version);
            let acked = &mut self.acked_max[id as usize];
            *acked = (*acked).max(acc.version);
            let versions = &mut self.committed[id as usize];
            if let Some(previous) = versions.insert(acc.version, acc.balance) {
                return Err(format!(
                    "lost update: version {} of account {id} was committed twice (balances {previous} and {}) by transaction {tx:?}",
                    acc.version, acc.balance
                ));
            }
        }
        self.report.committed_transfers += 1;
        let transfer =
            Transfer { a: writes[0].0, version_a: writes[0].1.version, b: writes[1].0, version_b: writes[1].1.version };
        self.transfers.push(transfer);
        if self.rng.chance(33) {
            // The client waits for its commit to be durable.
            let req = self.request(c, shard, ClientRequest::WaitDurable);
            self.clients[c].doing = Doing::Durable { req, shard, transfer };
        } else {
            self.wake_later(c);
        }
        Ok(())
    }

    /// An audit under shared locks saw every account: the bank total holds.
    fn on_audit(&mut self, c: usize, results: &[OpResult]) -> Result<(), String> {
        let mut total = 0;
        for r in results {
            total += self.account_of(r)?.balance;
        }
        let expected = INITIAL_BALANCE * self.cfg.accounts;
        if total != expected {
            return Err(format!("audit under shared locks saw a total of {total}, expected {expected}"));
        }
        self.report.audits += 1;
        self.wake_later(c);
        Ok(())
    }

    /// A committed read saw a value some committing transaction wrote, no
    /// older than what was acknowledged before it was sent or what this
    /// client committed itself.
    fn on_committed_read(&mut self, c: usize, account: i64, floor: i64, result: &OpResult) -> Result<(), String> {
        let acc = self.account_of(result)?;
        let known = (acc.version == 0 && acc.balance == INITIAL_BALANCE)
            || self.written.contains(&(account, acc.version, acc.balance));
        if !known {
            return Err(format!(
                "committed read of account {account} saw version {} balance {}, which no committing transaction wrote",
                acc.version, acc.balance
            ));
        }
        if acc.version < floor {
            return Err(format!(
                "stale read: committed read of account {account} saw version {} although version {floor} was acknowledged before the read was sent",
                acc.version
            ));
        }
        let own = self.clients[c].own_versions.get(&account).copied().unwrap_or(0);
        if acc.version < own {
            return Err(format!(
                "client {c} committed version {own} of account {account} but then read version {} (its own committed write is missing on a replica)",
                acc.version
            ));
        }
        self.report.reads += 1;
        self.wake_later(c);
        Ok(())
    }

    /// A batch of independent register writes was answered: each one done
    /// is acknowledged (values only grow, so a value is its version).
    fn on_registers_written(
        &mut self,
        c: usize,
        writes: Vec<(i64, i64)>,
        results: Vec<OpResult>,
    ) -> Result<(), String> {
        for ((id, value), result) in writes.into_iter().zip(results) {
            match result {
                OpResult::Done => {
                    self.committed[id as usize].insert(value, value);
                    let acked = &mut self.acked_max[id as usize];
                    *acked = (*acked).max(value);
                    let own = self.clients[c].own_versions.entry(id).or_insert(0);
                    *own = (*own).max(value);
                    self.report.register_writes += 1;
                }
                // Not applied, or (a replica failed) maybe applied.
                OpResult::Error(e) if retriable(&e) => {}
                other => return Err(format!("client {c}: write of register {id} answered {other:?}")),
            }
        }
        self.wake_later(c);
        Ok(())
    }

    /// A committed read of an account outside simulated time, from the
    /// primary the clients' layout names.
    pub(super) fn read_account_now(&mut self, id: i64, when: &str) -> Result<Account, String> {
        let op = self.op(id, OpKind::Read { lock: LockMode::Committed });
        let shard = self.owner(&op)?;
        match self.request_now(shard, ClientRequest::Batch(vec![op])).pop() {
            Some(ClientResponse::Batch(r)) if r.len() == 1 => self.account_of(&r[0]),
            other => Err(format!("reading account {id} {when} failed: {other:?}")),
        }
    }
}
