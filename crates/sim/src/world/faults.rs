//! The faults the simulator injects, each when the cluster can survive
//! it: crashes, node restarts (driving `NodeRestart`), whole-cluster
//! crashes and system restarts, failed syncs, splits, glitches and
//! connection resets.

use super::*;

#[derive(Clone, Copy, Debug)]
pub(super) enum Fault {
    Crash,
    Restart,
    Split,
    Glitch,
    Reset,
    ClusterCrash,
    DiskFailure,
    AddGroup,
}

pub(super) struct Split {
    pub(super) side_a: BTreeSet<usize>,
    pub(super) mgmd_in_a: bool,
}

impl World {
    pub(super) fn maybe_inject_fault(&mut self) {
        let Some(&(at, kind)) = self.plan.last() else { return };
        if self.report.events < at || !self.stable() || self.failing_disk.is_some() || self.now < self.quiet_until {
            return;
        }
        if self.stopped {
            // Too late: the workload is over.
            self.plan.clear();
            return;
        }
        let injected = match kind {
            Fault::Crash => self.inject_crash(),
            Fault::Restart => self.inject_restart(),
            Fault::Split => self.inject_split(false),
            Fault::Glitch => self.inject_split(true),
            Fault::Reset => self.inject_reset(),
            Fault::ClusterCrash => self.inject_cluster_crash(),
            Fault::DiskFailure => self.inject_disk_failure(),
            Fault::AddGroup => self.inject_add_group(),
        };
        if injected {
            self.plan.pop();
        } else if let Some(i) = self.plan.iter().position(|(_, k)| matches!(k, Fault::Restart)) {
            // The cluster cannot take this fault now (say, a split left too
            // few nodes): a pending restart may make it able to.
            if !matches!(kind, Fault::Restart) && self.inject_restart() {
                self.plan.remove(i);
            }
        }
    }

    /// Can these nodes continue by the view-change rule (every node group
    /// present; a majority of the current view, or half of it plus the
    /// arbitrator)?
    pub(super) fn viable(&self, side: &[usize], with_arbiter: bool) -> bool {
        let view = self.live().len();
        // Every node group with a member holds data (one being added has
        // none until its first node is admitted).
        let group = |n: &usize| self.base_layout.datanodes[*n].node_group;
        let members: Vec<usize> =
            self.arbiter.view().1.iter().map(|id| (*id - 2) as usize).filter(|n| !self.dead.contains(n)).collect();
        let needed: BTreeSet<u32> = members.iter().chain(side).map(group).collect();
        let present: BTreeSet<u32> = side.iter().map(group).collect();
        needed == present && (2 * side.len() > view || (2 * side.len() == view && with_arbiter))
    }

    /// Live nodes whose loss the cluster survives.
    pub(super) fn survivable_losses(&self) -> Vec<usize> {
        let live = self.live();
        live.iter()
            .copied()
            .filter(|c| {
                let rest: Vec<usize> = live.iter().copied().filter(|n| n != c).collect();
                self.viable(&rest, true)
            })
            .collect()
    }

    pub(super) fn inject_crash(&mut self) -> bool {
        let candidates = self.survivable_losses();
        if candidates.is_empty() {
            return false;
        }
        let victim = candidates[self.rng.below(candidates.len() as u64) as usize];
        self.report.crashes += 1;
        // The process dies (its writes are in the kernel's page cache), or
        // the machine loses power.
        let power = self.rng.chance(50);
        if power {
            self.lose_power(victim);
        }
        self.stop_node(victim, if power { "loses power".into() } else { "crashed".into() });
        true
    }

    /// Every disk of node `n` loses what a power loss loses.
    pub(super) fn lose_power(&mut self, n: usize) {
        for s in self.shards_of(n) {
            self.disks[s].lose_power(&mut self.rng);
        }
    }

    /// The next sync of a node whose loss the cluster survives fails (no
    /// other fault comes until it has).
    pub(super) fn inject_disk_failure(&mut self) -> bool {
        let candidates = self.survivable_losses();
        if candidates.is_empty() {
            return false;
        }
        let victim = candidates[self.rng.below(candidates.len() as u64) as usize];
        self.trace(format!("{:>9} node {}'s next sync will FAIL", self.now, node_id(victim)));
        self.failing_disk = Some(victim);
        true
    }

    /// Every data node loses power at once; the management server starts
    /// those of the last view again a little later (a system restart).
    /// Nodes that had left before stay down until a node restart.
    pub(super) fn inject_cluster_crash(&mut self) -> bool {
        // The accounts were loaded in epoch 1: the checkers need them to
        // survive (a crash before it is durable would rightly lose them).
        if !self.joining.is_empty() || self.report.durable_epoch == CommitEpoch::NONE {
            return false;
        }
        self.trace(format!("{:>9} WHOLE-CLUSTER CRASH", self.now));
        self.last_view = self.live();
        for n in self.live() {
            self.lose_power(n);
            self.stop_node(n, "loses power with the whole cluster".into());
        }
        let at = self.now + 1_000 + self.rng.below(50_000);
        self.schedule(at, Endpoint::Mgmd, Endpoint::Mgmd, Payload::SystemRestart);
        true
    }

    /// Reads the disks of node `n`'s shards (an initial start empties them
    /// first), as a starting data node does: what each holds, and what it
    /// reports to the management server (the epoch every shard synced
    /// through and the highest epoch any record carries; None: no data).
    pub(super) fn scan_node(&mut self, n: usize, initial: bool) -> (Vec<(usize, DiskImage)>, Option<NodeRecovery>) {
        let mut images = Vec::new();
        for s in self.shards_of(n) {
            if initial {
                self.disks[s].wipe();
            }
            images.push((s, self.disks[s].scan()));
        }
        let has_data = images.iter().any(|(_, i)| i.summary.valid_len > 0 || !i.checkpoints.is_empty());
        let recovery = has_data.then(|| node_recovery(images.iter().map(|(_, i)| &i.summary)));
        (images, recovery)
    }

    /// Starts a new process of shard `s` and restores it from its disk to
    /// `restore_epoch` (None: empty), as the real host does.
    pub(super) fn restore_shard(
        &mut self,
        s: usize,
        image: &DiskImage,
        layout: &ClusterLayout,
        lease: &Lease,
        restore_epoch: Option<CommitEpoch>,
        first_epoch: CommitEpoch,
    ) {
        // Transaction ids of the new process differ from the old one's.
        let shard = new_shard(&self.cfg, self.addrs[s], layout, &self.def, self.now << 8, lease);
        let mut shard = match shard {
            Ok(shard) => shard,
            Err(e) => {
                self.violation.get_or_insert(e);
                return;
            }
        };
        let disk = &mut self.disks[s];
        let (restored, keep) = match restore_epoch {
            Some(epoch) => {
                let (redo, base) = disk.redo();
                let checkpoint = checkpoint_for(&image.checkpoints, base, epoch);
                let bytes = checkpoint.and_then(|c| disk.checkpoint(c.id));
                (shard.restore(bytes, redo, base, epoch, first_epoch), checkpoint.map(|c| c.id))
            }
            None => {
                disk.wipe();
                (shard.restore(None, &[], 0, CommitEpoch::NONE, first_epoch), None)
            }
        };
        if let Err(e) = restored {
            self.violation
                .get_or_insert(format!("shard {} cannot restore from its disk: {}", self.addrs[s], e.message));
        }
        let marker = shard.take_redo();
        self.disks[s].restored(keep, &marker);
        self.shards[s] = shard;
        let at = self.now + self.rng.below(TICK_US);
        self.schedule(at, Endpoint::Shard(s), Endpoint::Shard(s), Payload::Tick);
    }

    /// Starts a crashed node again, empty: it joins as starting, copies its
    /// partitions from the primaries while the workload runs, and is
    /// admitted to the view once done.
    pub(super) fn inject_restart(&mut self) -> bool {
        // The management server lets a node start again only once the view
        // that removed it reached it (until then it counts it as a member).
        let members = self.arbiter.view().1.to_vec();
        let Some(&n) = self.dead.iter().find(|n| !members.contains(&node_id(**n)) && !self.spares.contains(n)) else {
            return false;
        };
        self.report.restarts += 1;
        self.trace(format!("{:>9} node {} RESTARTS", self.now, node_id(n)));
        // A node restart is an initial one a third of the time.
        let initial = self.rng.chance(33);
        if initial {
            self.report.initial_restarts += 1;
        }
        self.start_joining(n, initial);
        true
    }

    /// Adds the next spare nodes as a node group, as `latsdb mgm nodegroup
    /// add` does once every data node is started: the layout plans the
    /// moves (`ClusterLayout::add_node_groups`), the members learn the new
    /// nodes, and each new node starts empty and joins as a restarting one.
    pub(super) fn inject_add_group(&mut self) -> bool {
        // As the management server sees it: started in the view it knows.
        let every_started = self.mgmd_layout().all_started();
        if !every_started || !self.joining.is_empty() || self.spares.len() < self.cfg.replicas as usize {
            return false;
        }
        let new: Vec<usize> = self.spares.iter().copied().take(self.cfg.replicas as usize).collect();
        let group = self.base_layout.node_groups;
        let nodes = new
            .iter()
            .map(|n| DataNodeInfo {
                node_id: node_id(*n),
                node_group: group,
                host: "sim".into(),
                status: NodeStatus::NotStarted,
                shards: (0..self.cfg.shards_per_node).map(|s| format!("sim:{n}.{s}")).collect(),
                pid: 0,
                process: 0,
                location_domain: None,
            })
            .collect();
        assert_eq!(self.base_layout.datanodes.len(), new[0], "spare nodes are added in order");
        let moves = self.base_layout.add_node_groups(nodes, group + 1, self.def.partitions);
        self.report.groups_added += 1;
        let moved: Vec<u32> = moves.iter().map(|m| m.partition).collect();
        self.trace(format!(
            "{:>9} NODE GROUP {group} ADDED: nodes {:?}; partitions {moved:?} move to it",
            self.now,
            new.iter().map(|n| node_id(*n)).collect::<Vec<_>>()
        ));
        let groups: BTreeMap<NodeId, u32> =
            self.base_layout.datanodes.iter().map(|d| (d.node_id, d.node_group)).collect();
        for n in self.live() {
            self.memberships[n].set_groups(groups.clone());
        }
        for n in new {
            self.spares.remove(&n);
            self.start_joining(n, true);
        }
        true
    }

    /// Starts a new process of node `n` (from an empty disk if `initial`),
    /// joining the running cluster as a restarting node.
    fn start_joining(&mut self, n: usize, initial: bool) {
        self.dead.remove(&n);
        self.restarted_at[n] = self.now;
        self.new_process(n);
        let groups: BTreeMap<NodeId, u32> =
            self.base_layout.datanodes.iter().map(|d| (d.node_id, d.node_group)).collect();
        let mut m = Membership::new(MembershipConfig {
            me: node_id(n),
            interval_us: self.cfg.heartbeat_interval_us,
            detect_us: self.cfg.heartbeat_interval_us * self.cfg.heartbeat_missed as u64,
            groups,
        });
        m.activate_joining();
        let lease = Lease::unlimited();
        lease.set(m.serving_until());
        self.memberships[n] = m;
        self.leases[n] = lease.clone();
        self.set_base_status(n, NodeStatus::Starting);
        let layout = self.mgmd_layout();
        // A node restart restores what the node's disk holds up to the
        // epoch it synced through, then copies what changed.
        let (images, recovery) = self.scan_node(n, initial);
        let first_epoch =
            recovery.as_ref().map_or(CommitEpoch::NONE, |r| r.max_epoch).max(self.report.durable_epoch).next();
        for (s, image) in images {
            self.restore_shard(s, &image, &layout, &lease, recovery.as_ref().map(|r| r.saved_epoch), first_epoch);
        }
        let at = self.now + self.rng.below(TICK_US);
        self.schedule(at, Endpoint::Node(n), Endpoint::Node(n), Payload::MemberTick);
        self.joining.insert(n);
        // A joining node asks again to be admitted every 20 heartbeats, for
        // as long as it takes (the simulator's views always come).
        self.restarts.insert(n, NodeRestart::new(20 * self.cfg.heartbeat_interval_us, u32::MAX));
        self.broadcast_layouts();
    }

    /// A joining node's progress, checked on its membership timer: the
    /// stages of a real node restart (`NodeRestart`, the state machine the
    /// data node runs), carried out on the simulated shards; admission is
    /// the president's (a live member's) `admit`.
    pub(super) fn check_joining(&mut self, n: usize) {
        let shards = self.shards_of(n);
        let Some(restart) = self.restarts.get(&n) else { return };
        let progress: Vec<SyncProgress> = shards.iter().map(|s| self.shards[*s].sync_progress()).collect();
        let settled: Vec<bool> = match restart.checkpoint_targets() {
            Some(targets) => shards.iter().zip(targets).map(|(s, t)| self.shards[*s].checkpoint_settled(*t)).collect(),
            None => Vec::new(),
        };
        let step = self.restarts.get_mut(&n).expect("looked up above").step(self.now, &progress, &settled);
        match step {
            RestartStep::Wait => {}
            RestartStep::Checkpoint { summary } => {
                self.trace(format!("{:>9} node {} copied its partitions; it checkpoints", self.now, node_id(n)));
                self.report.copy_switches += summary.sources_switched;
                let targets = shards.iter().map(|s| self.shards[*s].checkpoint_now()).collect();
                self.restarts.get_mut(&n).expect("looked up above").checkpoints_begun(targets);
            }
            RestartStep::HandOver => {
                self.trace(format!("{:>9} node {} checkpointed; its primaries hand over", self.now, node_id(n)));
                for s in shards {
                    self.shard_step(s, |shard, _, out| shard.sync_hand_over(out));
                }
            }
            RestartStep::AskAdmit { .. } => {
                let president = self.live().into_iter().find(|k| !self.joining.contains(k));
                let Some(president) = president else { return };
                self.trace(format!(
                    "{:>9} node {} is ready; node {} admits it",
                    self.now,
                    node_id(n),
                    node_id(president)
                ));
                self.member_step(president, |m, now, out| m.admit(node_id(n), now, out));
            }
            RestartStep::Fail(why) => {
                self.report.failed_restarts += 1;
                self.report.copy_switches += progress.iter().map(|p| p.sources_switched).sum::<u64>();
                self.stop_node(n, format!("node restart failed: {why}"));
            }
        }
    }

    pub(super) fn inject_reset(&mut self) -> bool {
        let live = self.live();
        let victims = self.survivable_losses();
        if victims.is_empty() {
            return false;
        }
        let victim = victims[self.rng.below(victims.len() as u64) as usize];
        let others: Vec<usize> = live.iter().copied().filter(|n| *n != victim).collect();
        let observer = others[self.rng.below(others.len() as u64) as usize];
        self.trace(format!(
            "{:>9} RESET: node {} sees its link to node {} break",
            self.now,
            node_id(observer),
            node_id(victim)
        ));
        self.report.resets += 1;
        self.member_step(observer, |m, now, out| m.on_link_lost(node_id(victim), now, out));
        // The view change that may follow is not visible yet: the next
        // fault waits for it (together they could take more nodes than
        // the cluster survives).
        self.quiet_until = self.now + self.cfg.heartbeat_interval_us * self.cfg.heartbeat_missed as u64;
        true
    }

    pub(super) fn inject_split(&mut self, glitch: bool) -> bool {
        let live = self.live();
        for _ in 0..20 {
            let side_a: BTreeSet<usize> = live.iter().copied().filter(|_| self.rng.chance(50)).collect();
            if side_a.is_empty() || side_a.len() == live.len() {
                continue;
            }
            let mgmd_in_a = self.rng.chance(50);
            let a: Vec<usize> = side_a.iter().copied().collect();
            let b: Vec<usize> = live.iter().copied().filter(|n| !side_a.contains(n)).collect();
            if !glitch && !self.viable(&a, mgmd_in_a) && !self.viable(&b, !mgmd_in_a) {
                continue;
            }
            let interval = self.cfg.heartbeat_interval_us;
            let detect = interval * self.cfg.heartbeat_missed as u64;
            let lasts = if glitch {
                // Long enough for leases to run out, too short to suspect
                // anyone (unless heartbeats around it are lost too).
                2 * interval + self.rng.below(interval)
            } else {
                3 * detect + self.rng.below(3 * detect)
            };
            self.trace(format!(
                "{:>9} {} {:?} | {:?}, management server with the {} side, for {} us",
                self.now,
                if glitch { "GLITCH" } else { "SPLIT" },
                a.iter().map(|n| node_id(*n)).collect::<Vec<_>>(),
                b.iter().map(|n| node_id(*n)).collect::<Vec<_>>(),
                if mgmd_in_a { "first" } else { "second" },
                lasts
            ));
            if glitch {
                self.report.glitches += 1;
            } else {
                self.report.splits += 1;
            }
            self.split = Some(Split { side_a, mgmd_in_a });
            self.schedule(self.now + lasts, Endpoint::Mgmd, Endpoint::Mgmd, Payload::Heal);
            return true;
        }
        false
    }

    pub(super) fn heal(&mut self) {
        self.split = None;
        self.trace(format!("{:>9} HEAL", self.now));
        for (from, to, payload) in std::mem::take(&mut self.held) {
            self.send(from, to, payload);
        }
    }

    /// The management server starts every data node again after a
    /// whole-cluster crash, as it plans a system restart: each node reports
    /// what its disk holds; all restore epoch D, the latest epoch every
    /// node synced through, and new commits begin above any epoch a log
    /// holds. Then the restored data is checked.
    pub(super) fn system_restart(&mut self) {
        let nodes = std::mem::take(&mut self.last_view);
        let mut scanned = Vec::new();
        let mut restore = CommitEpoch::MAX;
        let mut logged = CommitEpoch::NONE;
        let mut reports = Vec::new();
        for &n in &nodes {
            let (images, recovery) = self.scan_node(n, false);
            let Some(NodeRecovery { saved_epoch: saved, max_epoch: max }) = recovery else {
                self.violation.get_or_insert(format!(
                    "system restart: data node {} was in the last view but its disk holds nothing",
                    node_id(n)
                ));
                return;
            };
            restore = restore.min(saved);
            logged = logged.max(max);
            reports.push((node_id(n), saved, max));
            scanned.push((n, images));
        }
        if restore < self.report.durable_epoch {
            self.violation.get_or_insert(format!(
                "system restart: the disks hold every epoch up to {restore} only, but epoch {} was declared durable (per node: synced through, highest logged: {reports:?})",
                self.report.durable_epoch
            ));
            return;
        }
        let first_epoch = logged.max(self.report.durable_epoch).next();
        self.report.system_restarts += 1;
        self.trace(format!(
            "{:>9} SYSTEM RESTART: restore epoch {restore}, new commits from epoch {first_epoch}",
            self.now
        ));
        let ids: Vec<NodeId> = nodes.iter().map(|n| node_id(*n)).collect();
        // The first view of the new run comes after every earlier one (a
        // late message of a dead process is then stale).
        let first = self.views.keys().max().copied().unwrap_or(ViewNumber(1)).max(self.arbiter.view().0).next();
        self.arbiter = Arbiter::new_at(first, ids.clone());
        self.views.insert(first, ids.clone());
        for n in 0..self.base_layout.datanodes.len() {
            let status = if nodes.contains(&n) { NodeStatus::Started } else { NodeStatus::NotStarted };
            self.set_base_status(n, status);
            if nodes.contains(&n) {
                self.new_process(n);
            }
        }
        self.base_layout.version += 1;
        let layout = self.base_layout.of_view(first, &ids);
        let groups: BTreeMap<NodeId, u32> =
            self.base_layout.datanodes.iter().map(|d| (d.node_id, d.node_group)).collect();
        for (n, images) in scanned {
            self.dead.remove(&n);
            self.restarted_at[n] = self.now;
            let mut m = Membership::new(MembershipConfig {
                me: node_id(n),
                interval_us: self.cfg.heartbeat_interval_us,
                detect_us: self.cfg.heartbeat_interval_us * self.cfg.heartbeat_missed as u64,
                groups: groups.clone(),
            });
            m.activate_with(self.now, &ids, first);
            let lease = Lease::unlimited();
            lease.set(m.serving_until());
            self.memberships[n] = m;
            self.leases[n] = lease.clone();
            for (s, image) in images {
                self.restore_shard(s, &image, &layout, &lease, Some(restore), first_epoch);
            }
            let at = self.now + self.rng.below(TICK_US);
            self.schedule(at, Endpoint::Node(n), Endpoint::Node(n), Payload::MemberTick);
        }
        self.router = Router::new(&layout);
        if let Err(e) = self.check_restored(restore) {
            self.violation.get_or_insert(e);
        }
    }
}
