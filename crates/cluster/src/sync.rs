//! Node restart: a starting replica copies its partitions from their
//! primaries while it already takes part in their writes.
//!
//! A restarting node first restores what its own disk holds, then joins
//! the layout as *starting*: every primary lists it as the last backup of
//! its partitions, so each write from then on is staged and committed on
//! it too, but it serves no reads. Each of its shards asks the primary of
//! every partition it holds for a copy (`SyncRequest`). The primary walks
//! the partition in key order and sends, per range of about 64 KiB of
//! rows, a digest of its committed rows (`SyncDigest`); the starting shard
//! compares it with the digest of its own rows of that range and asks for
//! the rows only when they differ (`SyncFetch` -> `SyncRows`), then makes
//! its range equal to them (deleting rows the primary no longer has). After
//! a node restart most ranges are equal and only the changed ones travel;
//! after an initial node restart (empty disk) every range does.
//!
//! Why the copy is exact: everything the primary sends the starting shard
//! travels on one ordered link: replicated writes, their commits, digests
//! and rows. A digest or a row set reflects the commits the primary
//! applied before sending it, and the starting shard has applied exactly
//! those commits of the same link when it reads the message. A commit
//! applied at the primary later reaches the starting shard later, on the
//! same link, as a full row image. The one gap: a transaction that wrote a
//! row at the primary before the primary learned of the starting replica
//! did not stage that write there. So the primary starts a copy only once
//! every transaction that had staged a write there when a replica joined
//! has finished. (One that had only read, under locks, does not hold the
//! copy back: whatever it writes later is staged on the new replica too.)
//!
//! ```text
//! starting shard                primary
//!   |--SyncRequest(t, p)-------->|  waits for older transactions
//!   |<--SyncDigest(range, d)-----|  one per range, paced per tick
//!   |  own digest differs:       |
//!   |--SyncFetch(range)--------->|
//!   |<--SyncRows(range, rows)----|
//!   |<--SyncDigest(.., end)------|  last range: the partition is done
//! ```
//!
//! Once every partition is copied the node writes a local checkpoint (the
//! copied rows are not in its REDO log). Once that checkpoint replaced its
//! older one, the partitions it will be primary of are handed over (their
//! primaries stop taking locks there until it is admitted, so this stage
//! is kept short: it comes last), and the node is admitted to the
//! membership view: started, primary of its share of the partitions again.

use crate::context::{unknown_table, wrong_shard, Context};
use crate::ldm::Ldm;
use crate::shard::Outbox;
use latsdb_types::proto::{CommitEpoch, NodeId, NodeStatus, PeerMsg, ShardAddr, SyncRange, SyncRow, TxId};
use latsdb_types::schema::TableId;
use latsdb_types::DbError;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Rows (keys and values) per digest range: the unit that is compared,
/// and copied when it differs.
const RANGE_BYTES: usize = 64 << 10;
/// Row bytes a primary digests per tick (10 ms) over all its copies.
const TICK_BYTES: usize = 1 << 20;

/// The primary's side.
#[derive(Default)]
pub(crate) struct SyncSource {
    /// Requests not started yet.
    waiting: Vec<CopyOf>,
    /// Transactions that had staged writes here when a replica joined:
    /// copies wait for them to finish.
    barrier: BTreeSet<TxId>,
    jobs: VecDeque<Job>,
    /// Partitions handed to a restarted node once it is admitted (by
    /// partition and node: the nodes of an added node group each ask for
    /// every partition moving to it), and whether it was told: no new locks
    /// are taken on them here, and it hears when none is held.
    frozen: BTreeMap<(TableId, u32, ShardAddr), bool>,
}

/// One copy of a partition: (the other side, table, partition, the
/// requester's attempt number).
pub(crate) type CopyOf = (ShardAddr, TableId, u32, u64);

struct Job {
    copy: CopyOf,
    /// The last key digested so far.
    resume: Option<Box<[u8]>>,
}

/// The starting shard's side.
#[derive(Default)]
pub(crate) struct SyncTarget {
    begun: bool,
    /// Partitions still being copied: their primary, whether its last
    /// range arrived, and fetches outstanding.
    parts: BTreeMap<(TableId, u32), Part>,
    progress: SyncProgress,
    /// Copied partitions this shard becomes primary of once admitted, and
    /// the primary asked to hand each over (see `sync_hand_over`).
    handovers: BTreeMap<(TableId, u32), ShardAddr>,
    /// Once admitted: partitions this shard became primary of, and the
    /// other replicas that have not yet said they hold no lock there. No
    /// lock is taken on them until all have (see `sync_confirm_primaries`).
    confirming: BTreeMap<(TableId, u32), BTreeSet<ShardAddr>>,
    /// Numbers this shard's copy requests (`PeerMsg::SyncRequest`).
    attempts: u64,
    /// Partitions that were moving to this node's group when the copy
    /// began, with their old place: once admitted, their old group's
    /// replicas must confirm they hold no lock either (whatever the layout
    /// says of the move by then: the management server may have settled it).
    moving_in: BTreeMap<u32, latsdb_types::proto::PartitionPlace>,
}

struct Part {
    source: ShardAddr,
    attempt: u64,
    ended: bool,
    fetching: u32,
}

/// How a starting shard's copy goes, for its host to report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncProgress {
    /// The copy has begun (the shard saw itself starting in the layout).
    pub begun: bool,
    pub partitions: usize,
    pub partitions_left: usize,
    /// Ranges with rows whose digests matched (so they were not copied).
    pub ranges_equal: u64,
    pub ranges_copied: u64,
    pub rows_copied: u64,
    /// Partitions whose copy started over from a new primary (the one it
    /// was copied from failed or handed its role back).
    pub sources_switched: u64,
    /// The handover has begun (`Shard::sync_hand_over`); partitions whose
    /// primary has not yet said it holds no lock there.
    pub handover_begun: bool,
    pub handovers_left: usize,
    /// The copy cannot finish (a primary failed or refused): the node must
    /// be restarted again.
    pub failed: Option<String>,
}

impl SyncTarget {
    /// The partition copy these messages belong to, if it is still under way.
    fn part(&mut self, (from, table, partition, attempt): CopyOf) -> Option<&mut Part> {
        self.parts.get_mut(&(table, partition)).filter(|p| p.source == from && p.attempt == attempt)
    }

    /// The copy is under way (not done, not failed).
    pub(crate) fn copying(&self) -> bool {
        self.begun && !self.parts.is_empty()
    }
}

impl SyncProgress {
    /// The progress of a node's shards added up (`begun` and `done()` as
    /// of all of them; `failed` the first failure).
    pub fn total(all: &[SyncProgress]) -> SyncProgress {
        let mut total = SyncProgress { begun: all.iter().all(|p| p.begun), ..SyncProgress::default() };
        for p in all {
            total.partitions += p.partitions;
            total.partitions_left += p.partitions_left;
            total.ranges_equal += p.ranges_equal;
            total.ranges_copied += p.ranges_copied;
            total.rows_copied += p.rows_copied;
            total.sources_switched += p.sources_switched;
            total.failed = total.failed.or_else(|| p.failed.clone());
        }
        total
    }

    /// Every partition is copied.
    pub fn done(&self) -> bool {
        self.begun && self.partitions_left == 0 && self.failed.is_none()
    }

    /// Copied, and the partitions this node will be primary of are handed
    /// over: it can be admitted.
    pub fn handed_over(&self) -> bool {
        self.done() && self.handover_begun && self.handovers_left == 0
    }
}

/// The node-restart block: this shard's copies of partitions, as the
/// primary copied from and as the starting replica copying.
#[derive(Default)]
pub(crate) struct PartitionSync {
    src: SyncSource,
    dst: SyncTarget,
}

/// What a new layout asks of the other blocks once the copy state caught up.
pub(crate) struct SyncLayoutChange {
    /// Copies switched to a new primary: the writes held back for the old
    /// one's commit are applied now (`Ldm::apply_held`).
    pub(crate) sources_switched: bool,
}

impl PartitionSync {
    /// The copy is under way (not done, not failed).
    pub(crate) fn copying(&self) -> bool {
        self.dst.copying()
    }

    /// How the copy of a starting shard goes.
    pub(crate) fn progress(&self) -> SyncProgress {
        self.dst.progress.clone()
    }

    /// The primary this shard still copies the partition from, if any.
    pub(crate) fn source_of(&self, table: TableId, partition: u32) -> Option<ShardAddr> {
        self.dst.parts.get(&(table, partition)).map(|p| p.source)
    }

    /// Whether locks on this partition are held back for a handover (as
    /// the primary handing it over, or as the new primary waiting for the
    /// other replicas to drain their locks).
    pub(crate) fn frozen(&self, table: TableId, partition: u32) -> bool {
        let asked = |table, partition| {
            let lowest = ShardAddr { node: 0, shard: 0 };
            let highest = ShardAddr { node: NodeId::MAX, shard: u16::MAX };
            self.src.frozen.range((table, partition, lowest)..=(table, partition, highest)).next().is_some()
        };
        (!self.src.frozen.is_empty() && asked(table, partition))
            || self.dst.confirming.contains_key(&(table, partition))
    }

    /// Checks the block's invariants (run by the simulator after every step).
    pub(crate) fn check(&self, cx: &Context) {
        let me = cx.me();
        let mut copies = BTreeSet::new();
        for copy in self.src.waiting.iter().chain(self.src.jobs.iter().map(|j| &j.copy)) {
            assert!(copies.insert((copy.0, copy.1, copy.2)), "shard {me}: the copy {copy:?} is queued twice");
        }
        let dst = &self.dst;
        assert!(dst.begun || dst.parts.is_empty(), "shard {me}: partitions copied before the copy began");
        assert_eq!(dst.begun, dst.progress.begun, "shard {me}: copy progress disagrees on its start");
        if dst.progress.failed.is_none() {
            assert_eq!(dst.progress.partitions_left, dst.parts.len(), "shard {me}: partitions left miscounted");
        } else {
            assert!(dst.parts.is_empty(), "shard {me}: a failed copy still copies");
        }
        for ((table, partition), part) in &dst.parts {
            assert!(part.attempt <= dst.attempts, "shard {me}: copy attempt beyond the last one numbered");
            assert!(part.source != me, "shard {me}: copies partition {partition} of table {table} from itself");
        }
        // (A dropped table's entries go at the next layout change or tick.)
        for (&(table, partition, to), &told) in self.src.frozen.iter().filter(|((t, ..), _)| cx.tables.contains_key(t))
        {
            assert!(
                !handover_over(cx, table, partition, to, told),
                "shard {me}: partition {partition} of table {table} stays frozen for {to} after its handover ended"
            );
        }
    }

    /// A new layout: a primary holds copies back until the transactions
    /// open before a new replica joined are done; a starting shard begins
    /// its copy, or gives up when a primary it copies from left.
    pub(crate) fn on_layout_changed(
        &mut self,
        cx: &mut Context,
        ldm: &Ldm,
        out: &mut Outbox,
        replica_joined: bool,
        was_starting: bool,
    ) -> SyncLayoutChange {
        let mut change = SyncLayoutChange { sources_switched: false };
        if replica_joined {
            self.src.barrier.extend(ldm.primary_writers());
        }
        self.admit(cx, ldm, out);
        self.check_frozen(cx, ldm, out);
        let me = cx.me();
        let status = cx.layout.datanode(me.node).map(|d| d.status);
        if was_starting && status == Some(NodeStatus::Started) {
            self.confirm_primaries(cx, out);
        }
        if status == Some(NodeStatus::Starting) {
            self.handover_layout_changed(cx, out);
        } else {
            self.dst.handovers.clear();
        }
        let layout = &cx.layout;
        self.dst.confirming.retain(|_, waiting| {
            waiting.retain(|s| layout.takes_writes(s.node));
            !waiting.is_empty()
        });
        let target = &self.dst;
        if target.begun && target.progress.failed.is_none() && !target.parts.is_empty() {
            if status != Some(NodeStatus::Starting) && status != Some(NodeStatus::Started) {
                self.fail(format!("data node {} was dropped from the cluster during its restart", me.node));
                return change;
            }
            change.sources_switched = self.switch_sources(cx, out);
            return change;
        }
        if status == Some(NodeStatus::Starting) && !target.begun {
            self.begin(cx, out);
        }
        change
    }

    fn begin(&mut self, cx: &mut Context, out: &mut Outbox) {
        debug_assert!(!self.dst.begun, "a copy began twice");
        let me = cx.me();
        let mut wanted = Vec::new();
        let mut ids: Vec<TableId> = cx.tables.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let table = &cx.tables[&id];
            for (p, slot) in table.partitions.iter().enumerate() {
                if slot.is_some() {
                    wanted.push((id, p as u32, cx.router.primary_of(p as u32)));
                }
            }
        }
        let my_group = cx.layout.datanode(me.node).map(|d| d.node_group);
        for (_, p, _) in &wanted {
            if cx.router.moving_to(*p).is_some_and(|to| Some(to.group) == my_group) {
                self.dst.moving_in.insert(*p, cx.router.place_of(*p));
            }
        }
        self.dst.begun = true;
        self.dst.progress.begun = true;
        self.dst.progress.partitions = wanted.len();
        self.dst.progress.partitions_left = wanted.len();
        for (table, partition, source) in wanted {
            let Some(source) = source.filter(|s| *s != me) else {
                self.fail(format!(
                    "partition {partition} of table id {table} has no started replica to copy from; start the other data nodes of its node group first"
                ));
                return;
            };
            self.copy_from(cx, out, source, table, partition);
        }
    }

    /// Asks `source` for a copy of the partition; what an earlier copy of
    /// it still sends is ignored from now on.
    fn copy_from(&mut self, cx: &mut Context, out: &mut Outbox, source: ShardAddr, table: TableId, partition: u32) {
        let target = &mut self.dst;
        target.attempts += 1;
        let attempt = target.attempts;
        target.parts.insert((table, partition), Part { source, attempt, ended: false, fetching: 0 });
        cx.send_peer(source, PeerMsg::SyncRequest { table, partition, attempt }, out);
    }

    /// Partitions whose primary changed while this shard copied them (the
    /// primary failed, or a restarted replica took its role back) are
    /// copied again from the new primary; says whether any was. Their
    /// writes held back for the old one's commit are then applied by the
    /// caller: the decision is known, and the new primary sends nothing
    /// before every transaction it was part of when asked has finished
    /// there, so what it sends already holds them (`on_request`).
    fn switch_sources(&mut self, cx: &mut Context, out: &mut Outbox) -> bool {
        let me = cx.me();
        let moved: Vec<((TableId, u32), Option<ShardAddr>)> = self
            .dst
            .parts
            .iter()
            .filter_map(|(&(table, partition), part)| {
                let primary = cx.router.primary_of(partition).filter(|s| *s != me);
                (primary != Some(part.source)).then_some(((table, partition), primary))
            })
            .collect();
        if moved.is_empty() {
            return false;
        }
        for ((table, partition), primary) in moved {
            let Some(primary) = primary else {
                let old = self.dst.parts[&(table, partition)].source;
                self.fail(format!(
                    "data node {} left while shard {me} copied partition {partition} of table id {table} from it, and no other replica of it is started; restart this node again once one is",
                    old.node
                ));
                return false;
            };
            self.dst.progress.sources_switched += 1;
            self.copy_from(cx, out, primary, table, partition);
        }
        true
    }

    /// Admitted, this shard is primary of its share of the partitions
    /// again. The handover before admission made the primary of that time
    /// stop locking, but the primary may have changed since (it failed and
    /// another replica took over), and a primary that is not this shard
    /// may still hold locks there. Two primaries must never lock the same
    /// rows, so each other replica is asked to say when it holds no lock on
    /// the partition (it takes no new primary locks there any more), and
    /// this shard takes none until all have.
    fn confirm_primaries(&mut self, cx: &mut Context, out: &mut Outbox) {
        let me = cx.me();
        let mut asks = Vec::new();
        for (id, table) in &cx.tables {
            for (p, replicas) in table.replicas.iter().enumerate() {
                if table.partitions.get(p).is_none_or(Option::is_none) || !table.is_primary(p as u32, me) {
                    continue;
                }
                let mut others: BTreeSet<ShardAddr> =
                    replicas.iter().copied().filter(|s| *s != me && cx.layout.takes_writes(s.node)).collect();
                // A partition that moved to this node's group: its old
                // group's primary may have changed since it handed it over.
                if let Some(old) = self.dst.moving_in.get(&(p as u32)) {
                    others.extend(cx.router.replicas_in(*old).into_iter().filter(|s| *s != me));
                }
                if !others.is_empty() {
                    asks.extend(others.iter().map(|s| (*s, *id, p as u32)));
                    self.dst.confirming.insert((*id, p as u32), others);
                }
            }
        }
        // Table ids come from a hash map: ask in a replayable order.
        asks.sort_unstable();
        for (to, table, partition) in asks {
            cx.send_peer(to, PeerMsg::SyncHandover { table, partition }, out);
        }
    }

    fn fail(&mut self, why: String) {
        let target = &mut self.dst;
        if target.progress.failed.is_none() {
            target.progress.failed = Some(why);
        }
        target.parts.clear();
    }

    /// Whether copies asked of this shard wait to start.
    pub(crate) fn copies_wait(&self) -> bool {
        !self.src.waiting.is_empty()
    }

    /// The transactions copies asked of this shard wait for.
    pub(crate) fn copy_barrier<'a>(&'a self, ldm: &'a Ldm) -> impl Iterator<Item = &'a TxId> + 'a {
        self.src.barrier.iter().filter(move |tx| ldm.is_open(tx))
    }

    /// Why the copies asked of this shard have not started, for its host
    /// to log while a node restart waits on them: each waiting request,
    /// and the transactions open here since it came (None when no copy
    /// waits).
    pub(crate) fn copy_waits(&self, cx: &Context, ldm: &Ldm) -> Option<String> {
        if self.src.waiting.is_empty() {
            return None;
        }
        let me = cx.me();
        let requests: Vec<String> = self
            .src
            .waiting
            .iter()
            .map(|&(to, table, partition, _)| {
                let listed = cx.tables.get(&table).is_some_and(|t| copy_may_start(t, partition, to, me));
                let why = if listed { "" } else { " (the layout here does not yet list it, or this shard as primary)" };
                format!("partition {partition} of table {table} for {to}{why}")
            })
            .collect();
        let open: Vec<String> = self
            .copy_barrier(ldm)
            .take(8)
            .map(|tx| {
                let role = if ldm.txs.contains_key(tx) { "primary" } else { "backup" };
                let coordinator = if cx.layout.takes_writes(tx.tc.node) { "live" } else { "gone" };
                format!("{}.{}#{} (here as {role}; coordinator's node {coordinator})", tx.tc.node, tx.tc.shard, tx.seq)
            })
            .collect();
        let barrier = self.copy_barrier(ldm).count();
        Some(format!(
            "{} copy request(s) wait: {}; {barrier} transaction(s) open since must finish first{}{}",
            requests.len(),
            requests.join(", "),
            if open.is_empty() { "" } else { ": " },
            open.join(", ")
        ))
    }

    // ---- primary ----

    /// A starting replica asks for a copy of a partition (`SyncRequest`).
    pub(crate) fn on_request(&mut self, cx: &mut Context, ldm: &Ldm, out: &mut Outbox, copy: CopyOf) {
        // A node restarted again, or copying again, asks again: its
        // earlier copy is void.
        let (from, table, partition, _) = copy;
        let same = |c: &CopyOf| (c.0, c.1, c.2) == (from, table, partition);
        let src = &mut self.src;
        src.waiting.retain(|c| !same(c));
        src.jobs.retain(|j| !same(&j.copy));
        src.waiting.push(copy);
        // The requester may have staged writes of transactions this shard
        // took part in under another primary (whose copy it gave up):
        // nothing is sent before those are finished here.
        self.src.barrier.extend(ldm.writers());
        self.admit(cx, ldm, out);
    }

    /// Starts the copies whose requester this shard lists as a replica and
    /// that make it the primary, once no transaction from before the
    /// requester joined (or asked) is open.
    fn admit(&mut self, cx: &mut Context, ldm: &Ldm, out: &mut Outbox) {
        if self.src.waiting.is_empty() {
            return;
        }
        self.src.barrier.retain(|tx| ldm.is_open(tx));
        if !self.src.barrier.is_empty() {
            return;
        }
        let me = cx.me();
        let waiting = std::mem::take(&mut self.src.waiting);
        for copy in waiting {
            let (to, table, partition, attempt) = copy;
            let Some(state) = cx.tables.get(&table) else {
                let error = unknown_table(table);
                cx.send_peer(to, PeerMsg::SyncRefused { table, partition, attempt, error }, out);
                continue;
            };
            if !copy_may_start(state, partition, to, me) {
                // This shard's layout does not list the requester yet, or
                // does not make this shard the primary yet (the requester
                // saw a newer layout): wait for it. A request that is void
                // by then (its node failed again, or copies from another
                // primary) is replaced when it asks again, and what it
                // would send is ignored.
                self.src.waiting.push(copy);
                continue;
            }
            self.src.jobs.push_back(Job { copy, resume: None });
        }
    }

    /// Periodic work: digest the next ranges of the running copies.
    pub(crate) fn tick(&mut self, cx: &mut Context, ldm: &Ldm, out: &mut Outbox) {
        self.admit(cx, ldm, out);
        self.check_frozen(cx, ldm, out);
        let me = cx.me();
        let mut budget = TICK_BYTES;
        while budget > 0 {
            let Some(mut job) = self.src.jobs.pop_front() else { return };
            let (to, table, partition, attempt) = job.copy;
            let primary = cx.tables.get(&table).is_some_and(|t| t.is_primary(partition, me));
            if !cx.layout.takes_writes(to.node) || !primary {
                // The layout does not list the requester (any more, or not
                // yet: its request may have overtaken the view that removed
                // its previous process), or this shard is no longer the
                // primary. The copy starts over (after the transactions
                // open now) if both hold again.
                self.src.waiting.push(job.copy);
                self.src.barrier.extend(ldm.writers());
                continue;
            }
            let Some(p) = cx.tables.get(&table).and_then(|t| t.partitions.get(partition as usize)) else {
                let error = unknown_table(table);
                cx.send_peer(to, PeerMsg::SyncRefused { table, partition, attempt, error }, out);
                continue;
            };
            let Some(p) = p.as_ref() else {
                let error = wrong_shard(partition, me);
                cx.send_peer(to, PeerMsg::SyncRefused { table, partition, attempt, error }, out);
                continue;
            };
            let chunk = RANGE_BYTES.min(budget);
            let (digest, _rows, upto) = p.digest_after(job.resume.as_deref(), chunk);
            budget = budget.saturating_sub(chunk);
            let range = SyncRange {
                after: job.resume.as_deref().map(<[u8]>::to_vec),
                upto: upto.as_deref().map(<[u8]>::to_vec),
            };
            cx.send_peer(to, PeerMsg::SyncDigest { table, partition, attempt, range, digest }, out);
            if let Some(next) = upto {
                job.resume = Some(next);
                self.src.jobs.push_front(job);
            }
        }
    }

    /// The starting replica asks for the rows of a range (`SyncFetch`).
    pub(crate) fn on_fetch(&mut self, cx: &mut Context, out: &mut Outbox, copy: CopyOf, range: SyncRange) {
        let (from, table, partition, attempt) = copy;
        let Some(p) = cx.partition(table, partition) else {
            let error = wrong_shard(partition, cx.me());
            cx.send_peer(from, PeerMsg::SyncRefused { table, partition, attempt, error }, out);
            return;
        };
        let mut rows = Vec::new();
        p.rows_between(range.after.as_deref(), range.upto.as_deref(), |key, row| {
            rows.push(SyncRow { key: key.to_vec(), row: row.to_vec() })
        });
        let epoch = cx.commit_epoch;
        cx.send_peer(from, PeerMsg::SyncRows { table, partition, attempt, range, rows, epoch }, out);
    }

    // ---- starting shard ----

    /// The primary's digest of a range (`SyncDigest`): the rows are fetched
    /// when this shard's differ.
    pub(crate) fn on_digest(
        &mut self,
        cx: &mut Context,
        out: &mut Outbox,
        copy: CopyOf,
        range: SyncRange,
        digest: u64,
    ) {
        let (from, table, partition, attempt) = copy;
        let Some(part) = self.dst.part(copy) else { return };
        let mine =
            cx.partition(table, partition).map(|p| p.digest_between(range.after.as_deref(), range.upto.as_deref()));
        part.ended = range.upto.is_none();
        if mine == Some(digest) {
            // Only ranges with rows count as compared and skipped.
            if digest != latsdb_storage::empty_digest() {
                self.dst.progress.ranges_equal += 1;
            }
        } else {
            part.fetching += 1;
            cx.send_peer(from, PeerMsg::SyncFetch { table, partition, attempt, range }, out);
        }
        self.part_check(table, partition);
    }

    /// The primary's rows of a range this shard fetched (`SyncRows`).
    pub(crate) fn on_rows(
        &mut self,
        cx: &mut Context,
        copy: CopyOf,
        range: SyncRange,
        rows: Vec<SyncRow>,
        epoch: CommitEpoch,
    ) {
        let (_, table, partition, _) = copy;
        if self.dst.part(copy).is_none_or(|p| p.fetching == 0) {
            // Not asked for by this copy: the answer to a fetch of one
            // given up, or of the node's previous process.
            return;
        }
        // Copied rows carry no epochs: a checkpoint holding them must end
        // no earlier than the epoch the primary had when it sent them.
        cx.observe_epoch(epoch);
        if let Err(e) = apply_rows(cx, table, partition, &range, &rows) {
            self.fail(format!("copying partition {partition} of table id {table} failed: {}", e.message));
            return;
        }
        let progress = &mut self.dst.progress;
        progress.ranges_copied += 1;
        progress.rows_copied += rows.len() as u64;
        if let Some(part) = self.dst.part(copy) {
            part.fetching -= 1;
        }
        self.part_check(table, partition);
    }

    /// The primary refused the copy (`SyncRefused`): the restart fails.
    pub(crate) fn on_refused(&mut self, copy: CopyOf, error: DbError) {
        let (from, table, partition, _) = copy;
        if error.code == latsdb_types::ErrorCode::WrongShard {
            // The source no longer holds the partition: it moved to an
            // added node group in a view this shard has not seen yet. The
            // layout that shows it names the new primary, and the copy
            // starts over from there (`switch_sources`).
            return;
        }
        if self.dst.part(copy).is_some() {
            self.fail(format!(
                "shard {from} refused to copy partition {partition} of table id {table}: {}",
                error.message
            ));
        }
    }

    /// A partition whose copy is complete is done.
    fn part_check(&mut self, table: TableId, partition: u32) {
        let Some(part) = self.dst.parts.get(&(table, partition)) else { return };
        if part.ended && part.fetching == 0 {
            let target = &mut self.dst;
            target.parts.remove(&(table, partition));
            target.progress.partitions_left = target.parts.len();
        }
    }

    /// The last stage before admission (after the copy and its
    /// checkpoint): each partition this shard will be primary of once
    /// admitted is handed over. Its primary stops taking new locks there
    /// (`NotServing`, retriable) and answers `SyncHandedOver` once no
    /// transaction holds one: two primaries must never lock the same rows.
    /// Clients meet the refusals only between now and the admission.
    pub(crate) fn hand_over(&mut self, cx: &mut Context, out: &mut Outbox) {
        let me = cx.me();
        if !self.dst.progress.done() || self.dst.progress.handover_begun {
            return;
        }
        // The layout once the starting nodes are admitted.
        let mut admitted = cx.layout.clone();
        admitted.restrict_to_view(&cx.layout.writer_nodes());
        let future = latsdb_types::proto::Router::new(&admitted);
        let my_group = cx.layout.datanode(me.node).map(|d| d.node_group);
        let mut asks = Vec::new();
        for (id, table) in &cx.tables {
            for (p, slot) in table.partitions.iter().enumerate() {
                let p = p as u32;
                // A node of an added group asks for every partition still
                // moving to its group: the view that admits the group's
                // first node makes that node primary of all of them. (Not
                // once the move is done: the primary it would ask keeps the
                // role, and would stay frozen.)
                let moving_here = cx.router.moving_to(p).is_some_and(|to| Some(to.group) == my_group);
                if slot.is_none() || (future.primary_of(p) != Some(me) && !moving_here) {
                    continue;
                }
                match cx.router.primary_of(p).filter(|s| *s != me) {
                    Some(primary) => asks.push((*id, p, primary)),
                    None => {
                        return self.fail(format!(
                            "partition {p} of table id {id} has no started primary to hand it over; restart this node again"
                        ))
                    }
                }
            }
        }
        // Table ids come from a hash map: ask in a replayable order.
        asks.sort_unstable();
        for (table, partition, primary) in asks {
            self.dst.handovers.insert((table, partition), primary);
            cx.send_peer(primary, PeerMsg::SyncHandover { table, partition }, out);
        }
        let progress = &mut self.dst.progress;
        progress.handover_begun = true;
        progress.handovers_left = self.dst.handovers.len();
    }

    /// A new layout during the handover: a partition whose primary changed
    /// is asked of the new one (the old one may have failed).
    fn handover_layout_changed(&mut self, cx: &mut Context, out: &mut Outbox) {
        let mut asks = Vec::new();
        for ((table, partition), asked) in self.dst.handovers.iter_mut() {
            match cx.router.primary_of(*partition) {
                Some(primary) if primary != *asked && primary != cx.me() => {
                    *asked = primary;
                    asks.push((*table, *partition, primary));
                }
                _ => {}
            }
        }
        for (table, partition, primary) in asks {
            cx.send_peer(primary, PeerMsg::SyncHandover { table, partition }, out);
        }
    }

    /// A replica holds no lock on a partition handed over (`SyncHandedOver`).
    pub(crate) fn on_handed_over(&mut self, from: ShardAddr, table: TableId, partition: u32) {
        if let Some(waiting) = self.dst.confirming.get_mut(&(table, partition)) {
            waiting.remove(&from);
            if waiting.is_empty() {
                self.dst.confirming.remove(&(table, partition));
            }
            return;
        }
        if self.dst.handovers.get(&(table, partition)) == Some(&from) {
            self.dst.handovers.remove(&(table, partition));
            self.dst.progress.handovers_left = self.dst.handovers.len();
        }
    }

    /// A restarted replica asks for a partition (`SyncHandover`).
    pub(crate) fn on_handover(
        &mut self,
        cx: &mut Context,
        ldm: &Ldm,
        out: &mut Outbox,
        from: ShardAddr,
        table: TableId,
        partition: u32,
    ) {
        self.src.frozen.insert((table, partition, from), false);
        self.check_frozen(cx, ldm, out);
    }

    /// Tells each restarted replica once no transaction holds a lock on a
    /// partition handed to it; then drops the handovers that are over or
    /// void (`handover_over`).
    fn check_frozen(&mut self, cx: &mut Context, ldm: &Ldm, out: &mut Outbox) {
        if self.src.frozen.is_empty() {
            return;
        }
        let mut frozen = std::mem::take(&mut self.src.frozen);
        for ((table, partition, to), told) in frozen.iter_mut() {
            if *told || !cx.layout.takes_writes(to.node) {
                continue;
            }
            let Some(meta) = cx.tables.get(table).map(|t| t.meta.clone()) else { continue };
            if !ldm.holds_in_partition(&meta, *table, *partition) {
                *told = true;
                cx.send_peer(*to, PeerMsg::SyncHandedOver { table: *table, partition: *partition }, out);
            }
        }
        frozen.retain(|&(table, partition, to), told| !handover_over(cx, table, partition, to, *told));
        self.src.frozen = frozen;
    }
}

/// Whether this shard's handover of `partition` to `to` is over: `to`
/// left, the table was dropped, or `to` was told and either this shard is
/// no longer the partition's primary or `to` is started. (A started node
/// asked for a partition it did not become primary of when its layout
/// lagged a move that was already done; the primary of this layout keeps
/// its role, and must not stay frozen.)
/// Whether a copy of `partition` for `to` may start at shard `me`: the
/// layout here lists `to` as a replica and `me` as the primary.
fn copy_may_start(table: &crate::context::TableState, partition: u32, to: ShardAddr, me: ShardAddr) -> bool {
    table.replicas.get(partition as usize).is_some_and(|r| r.contains(&to)) && table.is_primary(partition, me)
}

fn handover_over(cx: &Context, table: TableId, partition: u32, to: ShardAddr, told: bool) -> bool {
    let Some(t) = cx.tables.get(&table) else { return true };
    let started = cx.layout.datanode(to.node).is_some_and(|d| d.status == NodeStatus::Started);
    !cx.layout.takes_writes(to.node) || (told && (!t.is_primary(partition, cx.me()) || started))
}

/// Makes this shard's rows of `range` exactly `rows`.
fn apply_rows(
    cx: &mut Context,
    table: TableId,
    partition: u32,
    range: &SyncRange,
    rows: &[SyncRow],
) -> latsdb_types::Result<()> {
    let me = cx.me();
    let state = cx.tables.get_mut(&table).ok_or_else(|| unknown_table(table))?;
    let meta = state.meta.clone();
    let p = state
        .partitions
        .get_mut(partition as usize)
        .and_then(|p| p.as_mut())
        .ok_or_else(|| wrong_shard(partition, me))?;
    for r in rows {
        meta.layout.validate(&r.row)?;
        if meta.key_of_row(&r.row) != r.key {
            return Err(DbError::internal("a copied row does not match its key"));
        }
    }
    let before = p.memory();
    let incoming: BTreeSet<&[u8]> = rows.iter().map(|r| r.key.as_slice()).collect();
    let mut stale: Vec<Vec<u8>> = Vec::new();
    p.rows_between(range.after.as_deref(), range.upto.as_deref(), |key, _| {
        if !incoming.contains(key) {
            stale.push(key.to_vec());
        }
    });
    for key in stale {
        p.remove(&meta, &key);
    }
    for r in rows {
        if p.get(&r.key).as_deref() != Some(r.row.as_slice()) {
            p.put(&meta, &r.key, &r.row);
        }
    }
    let after = p.memory();
    cx.account(before, after);
    Ok(())
}
