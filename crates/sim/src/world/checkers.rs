//! The checks at the end of a run and after every system restart: every
//! acknowledged commit is there, every transfer wholly or not at all, the
//! bank total intact, and the replicas identical.

use super::*;

impl World {
    /// After a system restart exactly a prefix of the commits must be
    /// back: each account holds a value some transfer wrote (or its
    /// initial one), every transfer is wholly there or wholly gone, every
    /// transfer acknowledged as durable is there, and the bank total holds.
    /// The history is then cut to what came back (new transfers write the
    /// lost versions again).
    pub(super) fn check_restored(&mut self, restored: CommitEpoch) -> Result<(), String> {
        let mut accounts = Vec::new();
        for id in 0..self.cfg.accounts + registers(&self.cfg) {
            let acc = self.read_account_now(id, "after the system restart")?;
            if !self.possibly_written(id, acc) {
                return Err(format!(
                    "after the system restart (epoch {restored}) account {id} holds version {} balance {}, which no (possibly) committed transfer wrote",
                    acc.version, acc.balance
                ));
            }
            accounts.push(acc);
        }
        let version = |id: i64| accounts[id as usize].version;
        let present = |t: &Transfer| (version(t.a) >= t.version_a, version(t.b) >= t.version_b);
        for t in &self.transfers {
            let (a, b) = present(t);
            if a != b {
                return Err(format!(
                    "after the system restart (epoch {restored}) transfer {t:?} is half there: the accounts hold versions {} and {}",
                    version(t.a),
                    version(t.b)
                ));
            }
        }
        for t in &self.durable_transfers {
            if present(t) != (true, true) {
                return Err(format!(
                    "after the system restart (epoch {restored}) transfer {t:?}, acknowledged as durable, is lost: the accounts hold versions {} and {}",
                    version(t.a),
                    version(t.b)
                ));
            }
        }
        let total: i64 = accounts[..self.cfg.accounts as usize].iter().map(|a| a.balance).sum();
        if total != INITIAL_BALANCE * self.cfg.accounts {
            return Err(format!("after the system restart (epoch {restored}) the bank total is {total}"));
        }
        for (id, acc) in accounts.iter().enumerate() {
            self.committed[id].retain(|v, _| *v <= acc.version);
            self.maybe[id].retain(|v, _| *v <= acc.version);
            self.acked_max[id] = acc.version;
        }
        self.written.retain(|(id, v, _)| *v <= accounts[*id as usize].version);
        for c in &mut self.clients {
            for (id, v) in c.own_versions.iter_mut() {
                *v = (*v).min(accounts[*id as usize].version);
            }
        }
        self.transfers.retain(|t| present(t).0);
        self.report.durable_acks += self.durable_transfers.len() as u64;
        self.durable_transfers.clear();
        Ok(())
    }

    /// Whether an account's value is its initial one, or one an
    /// acknowledged or possibly committed transfer wrote.
    pub(super) fn possibly_written(&self, id: i64, acc: Account) -> bool {
        (acc.version == 0 && acc.balance == INITIAL_BALANCE)
            || self.committed[id as usize].get(&acc.version) == Some(&acc.balance)
            || self.maybe[id as usize].get(&acc.version).is_some_and(|b| b.contains(&acc.balance))
    }

    pub(super) fn final_check(&mut self) -> Result<(), String> {
        if !self.stable() {
            return Err("the run ended without a settled membership".into());
        }
        // Final reads route by the view the live nodes agree on.
        let live = self.live();
        let m = &self.memberships[live[0]];
        self.report.final_view = m.epoch();
        self.router = Router::new(&self.base_layout.of_view(m.epoch(), &m.members()));
        let mut total = 0;
        for id in 0..self.cfg.accounts {
            let acc = self.read_account_now(id, "at the end")?;
            let versions = &self.committed[id as usize];
            let maybe = &self.maybe[id as usize];
            if !maybe.is_empty() {
                // Some transfers of this account have unknown outcomes: every
                // acknowledged commit must be there, and the final value must
                // be one that an acknowledged or possibly committed transfer wrote.
                let newest_acked = versions.keys().max().copied().unwrap_or(0);
                if acc.version < newest_acked {
                    return Err(format!(
                        "acknowledged commit lost: account {id} ends at version {} but version {newest_acked} was acknowledged",
                        acc.version
                    ));
                }
                if !self.possibly_written(id, acc) {
                    return Err(format!(
                        "account {id} ends at version {} with balance {}, which no (possibly) committed transfer wrote",
                        acc.version, acc.balance
                    ));
                }
                total += acc.balance;
                continue;
            }
            let expected_version = versions.len() as i64;
            if acc.version != expected_version || versions.keys().copied().ne(1..=expected_version) {
                return Err(format!(
                    "account {id} ends at version {} but {expected_version} committed transfers touched it (versions {:?})",
                    acc.version,
                    versions.keys().collect::<Vec<_>>()
                ));
            }
            let expected_balance = versions.get(&acc.version).copied().unwrap_or(INITIAL_BALANCE);
            if acc.balance != expected_balance {
                return Err(format!(
                    "account {id} ends with balance {} but version {} committed {expected_balance}",
                    acc.balance, acc.version
                ));
            }
            total += acc.balance;
        }
        if total != INITIAL_BALANCE * self.cfg.accounts {
            return Err(format!("the bank total ends at {total}"));
        }
        // Registers: every acknowledged write (or a newer one) is there, and
        // the value is one a write sent.
        for id in self.cfg.accounts..self.cfg.accounts + registers(&self.cfg) {
            let acc = self.read_account_now(id, "at the end")?;
            let newest_acked = self.acked_max[id as usize];
            if acc.version < newest_acked {
                return Err(format!(
                    "acknowledged write lost: register {id} ends at value {} but value {newest_acked} was acknowledged",
                    acc.version
                ));
            }
            if !self.possibly_written(id, acc) {
                return Err(format!("register {id} ends at value {}, which no write sent", acc.version));
            }
        }
        // Every replica of a partition holds exactly the same rows.
        for partition in 0..self.meta.def.partitions {
            let replicas = self.router.replicas_of(partition);
            let copies: Vec<_> = replicas
                .iter()
                .map(|r| {
                    let i = self.addrs.iter().position(|a| a == r).expect("replica is a simulated shard");
                    self.shards[i].partition_rows(1, partition)
                })
                .collect();
            if copies.iter().any(|c| c.is_none()) {
                return Err(format!("a replica of partition {partition} does not hold it ({replicas:?})"));
            }
            if copies.windows(2).any(|w| w[0] != w[1]) {
                return Err(format!(
                    "the replicas {replicas:?} of partition {partition} hold different rows: {copies:?}"
                ));
            }
        }
        for (i, shard) in self.shards.iter().enumerate() {
            if self.dead.contains(&((self.addrs[i].node - 2) as usize)) {
                continue;
            }
            if shard.activity() != (0, 0, 0) {
                return Err(format!(
                    "shard {} still has (transactions, participations, locked rows) = {:?} after quiescence; participating in {:?}",
                    self.addrs[i],
                    shard.activity(),
                    shard.participations()
                ));
            }
        }
        Ok(())
    }
}
