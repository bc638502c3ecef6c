//! Membership of the data nodes: failure detection, view changes, leases and
//! split-brain protection. One `Membership` runs per data node (on its first
//! shard); the management server runs the `Arbiter`.
//!
//! **Views.** The live data nodes form a view with an epoch number. Every
//! change installs the next epoch, chosen by single-decree Paxos among the
//! members of the current view plus the arbitrator. A quorum is more than
//! half of the current members, or exactly half plus the arbitrator, so two
//! sides of a network split can never both install the same epoch: two
//! majorities overlap, and two halves both need the arbitrator, which
//! promises one ballot at a time. A proposed view must also keep at least one
//! node of every node group; otherwise that side cannot serve all data and
//! does not continue.
//!
//! **Detection.** Members send each other heartbeats every interval. A node
//! silent for `missed` intervals, or whose link broke, is suspected. The
//! lowest member that is not suspected (the president) proposes the next
//! view: the members that answer its phase 1 in time.
//!
//! **Leases** (why a cut-off node cannot serve stale reads). Each heartbeat
//! echoes the send time of the newest heartbeat received from its
//! destination. A node serves clients only while, for every other member,
//! one of its own heartbeats sent less than `lease` ago has been echoed.
//! An acceptor stops echoing the nodes a view it accepts leaves out. A
//! removed node needs the echo of *every* member, so once the proposer
//! itself stops echoing it, it serves at most `lease` past the last time
//! the proposer heard it; the proposer installs the view only after that.
//! So by the time the new view commits anything, every node it removed has
//! stopped serving, and it never renews its lease again (nobody in the new
//! view echoes it). A node whose lease has been expired for `give_up` shuts
//! down.
//!
//! ```text
//! president                 members (and arbitrator)
//!   |--Prepare(e+1, b)-------->|   promise ballot b; report any accepted view
//!   |<--Promise----------------|
//!   |--Accept(e+1, b, view)--->|   stop echoing nodes outside `view`
//!   |<--Accepted---------------|
//!   |  wait until the removed nodes' leases expired
//!   |--Install(e+1, view)----->|   apply the new layout; removed nodes shut down
//! ```

use latsdb_types::proto::{Ballot, MemberMsg, NodeId, ViewNumber};
use std::collections::{BTreeMap, BTreeSet};

/// Microseconds on the local monotonic clock.
type Micros = u64;

#[derive(Clone, Debug)]
pub struct MembershipConfig {
    pub me: NodeId,
    pub interval_us: Micros,
    /// A node silent this long is suspected (`heartbeat_missed` intervals).
    pub detect_us: Micros,
    /// Every data node of the cluster and its node group.
    pub groups: BTreeMap<NodeId, u32>,
}

impl MembershipConfig {
    /// A node serves for this long after a heartbeat of its own was echoed.
    pub fn lease_us(&self) -> Micros {
        3 * self.interval_us
    }

    /// A node whose lease has been expired this long shuts down.
    pub fn give_up_us(&self) -> Micros {
        4 * self.detect_us + 10 * self.interval_us
    }
}

/// Who a membership message is from or to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Voter {
    Node(NodeId),
    Arbiter,
}

/// What a membership call wants done.
#[derive(Default, Debug)]
pub struct MemberOut {
    pub send: Vec<(Voter, MemberMsg)>,
    /// A new view was installed here: the live data nodes, by epoch.
    pub installed: Option<(ViewNumber, Vec<NodeId>)>,
    /// This node must stop serving and exit: the reason.
    pub shutdown: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct Peer {
    last_heard: Micros,
    /// `sent_at` of the newest heartbeat received from it (its clock).
    their_sent: Option<u64>,
    /// Newest own heartbeat send time it echoed.
    echoed: Micros,
    link_lost: bool,
}

#[derive(Debug)]
enum Phase {
    Promises(BTreeMap<Voter, Option<(Ballot, Vec<NodeId>)>>),
    /// `safe_at`: by then every node left out has stopped serving (this
    /// node stopped echoing them when it accepted its own proposal).
    Accepts {
        view: Vec<NodeId>,
        voters: Vec<Voter>,
        accepted: BTreeSet<Voter>,
        safe_at: Micros,
        chosen: bool,
    },
}

#[derive(Debug)]
struct Proposal {
    ballot: Ballot,
    phase: Phase,
    /// Nodes asked in phase 1 (the members not suspected).
    asked: BTreeSet<NodeId>,
    deadline: Micros,
}

pub struct Membership {
    cfg: MembershipConfig,
    active: bool,
    epoch: ViewNumber,
    members: BTreeSet<NodeId>,
    peers: BTreeMap<NodeId, Peer>,
    /// Acceptor state for epoch + 1.
    promised: Option<Ballot>,
    accepted: Option<(Ballot, Vec<NodeId>)>,
    max_round: u64,
    proposal: Option<Proposal>,
    retry_at: Micros,
    suspected_since: Option<Micros>,
    next_heartbeat: Micros,
    lease_lost_since: Option<Micros>,
    /// The arbitrator has not yet confirmed the installed view.
    report_pending: bool,
    shut_down: bool,
    /// Restarted nodes to add with the next view (see `admit`).
    joining: BTreeSet<NodeId>,
}

impl Membership {
    pub fn new(cfg: MembershipConfig) -> Membership {
        Membership {
            cfg,
            active: false,
            epoch: ViewNumber::NONE,
            members: BTreeSet::new(),
            peers: BTreeMap::new(),
            promised: None,
            accepted: None,
            max_round: 0,
            proposal: None,
            retry_at: 0,
            suspected_since: None,
            next_heartbeat: 0,
            lease_lost_since: None,
            report_pending: false,
            shut_down: false,
            joining: BTreeSet::new(),
        }
    }

    /// Starts the protocol on a node that restarts into a running cluster:
    /// it is no member yet and waits for the view that admits it.
    pub fn activate_joining(&mut self) {
        self.active = true;
        self.epoch = ViewNumber::NONE;
        self.members.clear();
    }

    /// How many data nodes the cluster has.
    pub fn data_nodes(&self) -> usize {
        self.cfg.groups.len()
    }

    /// The data nodes of the cluster changed (a node group was added).
    pub fn set_groups(&mut self, groups: BTreeMap<NodeId, u32>) {
        for (node, group) in &self.cfg.groups {
            assert_eq!(groups.get(node), Some(group), "data node {node} left node group {group}");
        }
        self.cfg.groups = groups;
    }

    /// Proposes the next view with `node` added (a restarted node that
    /// copied its data). Only the president proposes; the others step in
    /// if it fails.
    pub fn admit(&mut self, node: NodeId, now: Micros, out: &mut MemberOut) {
        if !self.active || self.shut_down || self.members.contains(&node) || !self.cfg.groups.contains_key(&node) {
            return;
        }
        self.joining.insert(node);
        self.drive_proposal(now, out);
    }

    /// Starts the protocol with view 1 = every data node of the cluster
    /// (called once all of them have started).
    pub fn activate(&mut self, now: Micros) {
        let all: Vec<NodeId> = self.cfg.groups.keys().copied().collect();
        self.activate_with(now, &all, ViewNumber(1));
    }

    /// Starts the protocol with view `epoch` = `members` (the nodes that
    /// formed the cluster: after a system restart, those of the last view,
    /// in an epoch above every earlier one; a node that had left before
    /// joins later, through `admit`).
    pub fn activate_with(&mut self, now: Micros, members: &[NodeId], epoch: ViewNumber) {
        if self.active {
            return;
        }
        self.active = true;
        self.epoch = epoch;
        self.members = members.iter().copied().filter(|n| self.cfg.groups.contains_key(n)).collect();
        self.reset_peers(now);
    }

    pub fn is_active(&self) -> bool {
        self.active
    }

    pub fn epoch(&self) -> ViewNumber {
        self.epoch
    }

    pub fn members(&self) -> Vec<NodeId> {
        self.members.iter().copied().collect()
    }

    pub fn has_shut_down(&self) -> bool {
        self.shut_down
    }

    fn reset_peers(&mut self, now: Micros) {
        let me = self.cfg.me;
        self.peers.retain(|n, _| self.members.contains(n));
        for &n in &self.members {
            if n != me {
                self.peers.entry(n).or_insert(Peer {
                    last_heard: now,
                    their_sent: None,
                    echoed: now,
                    link_lost: false,
                });
            }
        }
    }

    /// Runs one call (`f`: a tick, a message, an admission...) and keeps
    /// the node's lease, which its shards check before serving a client,
    /// current with it: the data node and the simulator both step a
    /// membership only through here. A view installed here always holds
    /// this node, and a node that shut down serves no longer.
    pub fn step(
        &mut self,
        lease: &crate::Lease,
        now: Micros,
        f: impl FnOnce(&mut Membership, Micros, &mut MemberOut),
    ) -> MemberOut {
        let mut out = MemberOut::default();
        f(self, now, &mut out);
        lease.set(self.serving_until());
        if let Some((view, members)) = &out.installed {
            assert!(members.contains(&self.cfg.me), "node {} installed view {view} without itself", self.cfg.me);
            debug_assert_eq!(*view, self.epoch, "the view installed is not the membership's");
        }
        if out.shutdown.is_some() || self.shut_down {
            assert!(!lease.valid_at(now), "node {} shut down but may still serve", self.cfg.me);
        }
        out
    }

    /// The time until which this node may serve clients (its lease).
    pub fn serving_until(&self) -> Micros {
        // A node that shut down never serves again, active or not.
        if self.shut_down {
            return 0;
        }
        if !self.active {
            return u64::MAX;
        }
        let lease = self.cfg.lease_us();
        self.peers.values().map(|p| p.echoed.saturating_add(lease)).min().unwrap_or(u64::MAX)
    }

    /// The transport to `node` broke: it is suspected at once.
    pub fn on_link_lost(&mut self, node: NodeId, now: Micros, out: &mut MemberOut) {
        if let Some(p) = self.peers.get_mut(&node) {
            p.link_lost = true;
        }
        self.on_tick(now, out);
    }

    fn suspects(&self, now: Micros) -> BTreeSet<NodeId> {
        self.peers
            .iter()
            .filter(|(_, p)| p.link_lost || now.saturating_sub(p.last_heard) >= self.cfg.detect_us)
            .map(|(n, _)| *n)
            .collect()
    }

    /// Nodes the accepted (not yet installed) view leaves out: they are not
    /// echoed any more.
    fn frozen(&self, node: NodeId) -> bool {
        self.accepted.as_ref().is_some_and(|(_, view)| !view.contains(&node))
    }

    pub fn on_tick(&mut self, now: Micros, out: &mut MemberOut) {
        if !self.active || self.shut_down {
            return;
        }
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.cfg.interval_us;
            let targets: Vec<(NodeId, Option<u64>)> =
                self.peers.iter().map(|(n, p)| (*n, if self.frozen(*n) { None } else { p.their_sent })).collect();
            for (n, echo) in targets {
                out.send.push((Voter::Node(n), MemberMsg::Heartbeat { epoch: self.epoch, sent_at: now, echo }));
            }
            if self.report_pending {
                out.send.push((Voter::Arbiter, MemberMsg::Install { epoch: self.epoch, members: self.members() }));
            }
            self.resend_proposal(out);
        }
        // A node that cannot confirm its membership for long shuts down.
        if self.serving_until() <= now {
            let since = *self.lease_lost_since.get_or_insert(now);
            if now - since >= self.cfg.give_up_us() {
                self.shutdown(
                    format!(
                        "data node {} could not confirm it is still a member of the cluster for {} ms (cut off from the other data nodes, and no view change it took part in succeeded); shutting down so that two parts of the cluster never serve at once",
                        self.cfg.me,
                        (now - since) / 1000
                    ),
                    out,
                );
                return;
            }
        } else {
            self.lease_lost_since = None;
        }
        self.drive_proposal(now, out);
    }

    fn drive_proposal(&mut self, now: Micros, out: &mut MemberOut) {
        if let Some(p) = &self.proposal {
            // A chosen view is installed, however long that takes.
            let chosen = matches!(p.phase, Phase::Accepts { chosen: true, .. });
            let promised_by_quorum = matches!(&p.phase, Phase::Promises(promises) if self.quorum(promises.keys()));
            if now >= p.deadline && promised_by_quorum {
                // Some asked node never answered: go on with those that did.
                self.promises_complete(now, out);
            } else if now >= p.deadline && !chosen {
                self.proposal = None;
                self.retry_at = now + self.cfg.interval_us * (1 + self.rank() as u64);
            } else if let Phase::Accepts { chosen: true, safe_at, view, .. } = &p.phase {
                if now >= *safe_at {
                    let (epoch, view) = (self.epoch.next(), view.clone());
                    self.proposal = None;
                    for &n in &view {
                        if n != self.cfg.me {
                            out.send.push((Voter::Node(n), MemberMsg::Install { epoch, members: view.clone() }));
                        }
                    }
                    self.install(epoch, view, now, out);
                }
                return;
            } else {
                return;
            }
        }
        let suspects = self.suspects(now);
        // A view this node accepted but never saw installed (its proposer
        // failed or was cut off) must be finished even when everybody is
        // heard again: the nodes it leaves out are no longer echoed.
        if suspects.is_empty() && self.accepted.is_none() && self.joining.is_empty() {
            self.suspected_since = None;
            return;
        }
        let since = *self.suspected_since.get_or_insert(now);
        // The president proposes; any other member steps in when nothing
        // has changed for a while (it may not hear the president).
        let president = self.members.iter().copied().find(|n| !suspects.contains(n));
        let stand_in = now - since >= 2 * self.cfg.detect_us;
        if (president != Some(self.cfg.me) && !stand_in) || now < self.retry_at {
            return;
        }
        self.start_proposal(suspects, now, out);
    }

    /// Membership messages may be lost: the running phase is asked again
    /// of every voter that has not answered yet (answers are idempotent).
    fn resend_proposal(&self, out: &mut MemberOut) {
        let Some(p) = &self.proposal else { return };
        let epoch = self.epoch.next();
        let me = Voter::Node(self.cfg.me);
        match &p.phase {
            Phase::Promises(promises) => {
                let base = self.members();
                let voters = p.asked.iter().map(|n| Voter::Node(*n)).chain([Voter::Arbiter]);
                for v in voters.filter(|v| *v != me && !promises.contains_key(v)) {
                    out.send.push((v, MemberMsg::Prepare { epoch, ballot: p.ballot, base: base.clone() }));
                }
            }
            Phase::Accepts { view, voters, accepted, .. } => {
                for v in voters.iter().filter(|v| **v != me && !accepted.contains(v)) {
                    out.send.push((*v, MemberMsg::Accept { epoch, ballot: p.ballot, members: view.clone() }));
                }
            }
        }
    }

    /// Position of this node among the members: spaces out retries.
    fn rank(&self) -> usize {
        self.members.iter().position(|n| *n == self.cfg.me).unwrap_or(0)
    }

    fn start_proposal(&mut self, suspects: BTreeSet<NodeId>, now: Micros, out: &mut MemberOut) {
        self.max_round += 1;
        let ballot = Ballot { round: self.max_round, node: self.cfg.me };
        let epoch = self.epoch.next();
        let asked: BTreeSet<NodeId> = self.members.iter().copied().filter(|n| !suspects.contains(n)).collect();
        let base = self.members();
        for &n in &asked {
            if n != self.cfg.me {
                out.send.push((Voter::Node(n), MemberMsg::Prepare { epoch, ballot, base: base.clone() }));
            }
        }
        out.send.push((Voter::Arbiter, MemberMsg::Prepare { epoch, ballot, base }));
        self.proposal = Some(Proposal {
            ballot,
            phase: Phase::Promises(BTreeMap::new()),
            asked,
            deadline: now + 3 * self.cfg.interval_us,
        });
        // The proposer is an acceptor too.
        if let Some(reply) = self.accept_prepare(epoch, ballot) {
            self.on_proposal_reply(Voter::Node(self.cfg.me), reply, now, out);
        }
    }

    /// Does this set of voters form a quorum of the current view?
    fn quorum<'a>(&self, voters: impl Iterator<Item = &'a Voter>) -> bool {
        let mut nodes = 0;
        let mut arbiter = false;
        for v in voters {
            match v {
                Voter::Node(n) if self.members.contains(n) => nodes += 1,
                Voter::Node(_) => {}
                Voter::Arbiter => arbiter = true,
            }
        }
        2 * nodes > self.members.len() || (2 * nodes == self.members.len() && arbiter)
    }

    /// Whether `view` keeps a node of every node group that holds data:
    /// those with a member in the current view (a node group being added
    /// holds none until the view that admits its first node).
    fn covers_every_group(&self, view: &[NodeId]) -> bool {
        let groups: BTreeSet<u32> = self.members.iter().filter_map(|n| self.cfg.groups.get(n).copied()).collect();
        let present: BTreeSet<u32> = view.iter().filter_map(|n| self.cfg.groups.get(n).copied()).collect();
        groups.is_subset(&present)
    }

    fn on_proposal_reply(&mut self, from: Voter, msg: MemberMsg, now: Micros, out: &mut MemberOut) {
        let epoch = self.epoch.next();
        let Some(p) = &mut self.proposal else { return };
        match msg {
            MemberMsg::Promise { epoch: e, ballot, accepted } if e == epoch && ballot == p.ballot => {
                let Phase::Promises(promises) = &mut p.phase else { return };
                promises.insert(from, accepted);
                let all_nodes = p.asked.iter().all(|n| promises.contains_key(&Voter::Node(*n)));
                let with_arbiter = promises.contains_key(&Voter::Arbiter);
                let voters: Vec<Voter> = promises.keys().copied().collect();
                if !all_nodes || !(with_arbiter || self.quorum(voters.iter().filter(|v| **v != Voter::Arbiter))) {
                    // Wait for the others (the deadline decides otherwise).
                    return;
                }
                self.promises_complete(now, out);
            }
            MemberMsg::Accepted { epoch: e, ballot } if e == epoch && ballot == p.ballot => {
                let Phase::Accepts { accepted, .. } = &mut p.phase else { return };
                accepted.insert(from);
                let voters: Vec<Voter> = accepted.iter().copied().collect();
                if self.quorum(voters.iter()) {
                    if let Some(Proposal { phase: Phase::Accepts { chosen, .. }, .. }) = &mut self.proposal {
                        *chosen = true;
                    }
                }
                self.drive_proposal(now, out);
            }
            MemberMsg::Reject { epoch: e, promised, installed } => {
                if let Some(b) = promised {
                    self.max_round = self.max_round.max(b.round);
                }
                if let Some((e2, view)) = installed {
                    if e2 > self.epoch {
                        self.learn_install(e2, view, now, out);
                        return;
                    }
                }
                if e == epoch && promised.is_some_and(|b| b > p.ballot) {
                    self.proposal = None;
                    self.retry_at = now + self.cfg.interval_us * (1 + self.rank() as u64);
                }
            }
            _ => {}
        }
    }

    /// Phase 1 is over: choose the view and ask for acceptance.
    fn promises_complete(&mut self, now: Micros, out: &mut MemberOut) {
        let Some(p) = &self.proposal else { return };
        let Phase::Promises(promises) = &p.phase else { return };
        if !self.quorum(promises.keys()) {
            return;
        }
        // A view some earlier ballot may have chosen must be kept.
        let adopted = promises.values().flatten().max_by_key(|(b, _)| *b).map(|(_, v)| v.clone());
        let view = match adopted {
            Some(v) => v,
            None => {
                let answered = promises.keys().filter_map(|v| match v {
                    Voter::Node(n) => Some(*n),
                    Voter::Arbiter => None,
                });
                let view: Vec<NodeId> =
                    answered.chain(self.joining.iter().copied()).collect::<BTreeSet<NodeId>>().into_iter().collect();
                if !self.covers_every_group(&view) {
                    // This side lacks a whole node group: it must not go on.
                    // Its lease has run out; give_up ends it.
                    self.proposal = None;
                    self.retry_at = now + self.cfg.detect_us;
                    return;
                }
                view
            }
        };
        let ballot = p.ballot;
        let epoch = self.epoch.next();
        let voters: Vec<Voter> = promises.keys().copied().collect();
        for v in &voters {
            if *v != Voter::Node(self.cfg.me) {
                out.send.push((*v, MemberMsg::Accept { epoch, ballot, members: view.clone() }));
            }
        }
        // A removed node serves only while every member echoes it, so once
        // this node stops echoing it (accepting below) it is done serving
        // a lease after it was last heard here.
        let safe_at = self
            .peers
            .iter()
            .filter(|(n, _)| !view.contains(n))
            .map(|(_, p)| p.last_heard + self.cfg.lease_us())
            .max()
            .unwrap_or(now);
        let p = self.proposal.as_mut().expect("checked above");
        p.phase = Phase::Accepts {
            view: view.clone(),
            voters: voters.clone(),
            accepted: BTreeSet::new(),
            safe_at,
            chosen: false,
        };
        p.deadline = now + 3 * self.cfg.interval_us;
        if let Some(reply) = self.accept_accept(epoch, ballot, view) {
            self.on_proposal_reply(Voter::Node(self.cfg.me), reply, now, out);
        }
    }

    // ---- acceptor ----

    fn accept_prepare(&mut self, epoch: ViewNumber, ballot: Ballot) -> Option<MemberMsg> {
        debug_assert_eq!(epoch, self.epoch.next());
        self.max_round = self.max_round.max(ballot.round);
        if self.promised.is_some_and(|b| b > ballot) {
            return Some(MemberMsg::Reject { epoch, promised: self.promised, installed: None });
        }
        self.promised = Some(ballot);
        Some(MemberMsg::Promise { epoch, ballot, accepted: self.accepted.clone() })
    }

    fn accept_accept(&mut self, epoch: ViewNumber, ballot: Ballot, view: Vec<NodeId>) -> Option<MemberMsg> {
        debug_assert_eq!(epoch, self.epoch.next());
        self.max_round = self.max_round.max(ballot.round);
        if self.promised.is_some_and(|b| b > ballot) {
            return Some(MemberMsg::Reject { epoch, promised: self.promised, installed: None });
        }
        self.promised = Some(ballot);
        self.accepted = Some((ballot, view));
        Some(MemberMsg::Accepted { epoch, ballot })
    }

    pub fn on_message(&mut self, from: Voter, msg: MemberMsg, now: Micros, out: &mut MemberOut) {
        if !self.active || self.shut_down {
            return;
        }
        if let Voter::Node(n) = from {
            if let Some(p) = self.peers.get_mut(&n) {
                p.last_heard = now;
            }
        }
        match msg {
            MemberMsg::Heartbeat { epoch, sent_at, echo } => {
                let Voter::Node(n) = from else { return };
                if self.members.is_empty() && epoch > self.epoch {
                    // A joining node hears a member that already counts it:
                    // the view admitting it was lost on the way. Answering
                    // with its own (older) epoch makes the member resend it.
                    out.send.push((from, MemberMsg::Heartbeat { epoch: self.epoch, sent_at: now, echo: None }));
                    return;
                }
                if !self.members.contains(&n) {
                    return;
                }
                if epoch < self.epoch {
                    // It missed a view change it belongs to.
                    out.send.push((from, MemberMsg::Install { epoch: self.epoch, members: self.members() }));
                }
                let frozen = self.frozen(n);
                if let Some(p) = self.peers.get_mut(&n) {
                    // Heard again: the link is back (the transport reconnects).
                    p.link_lost = false;
                    p.their_sent = Some(sent_at);
                    if let Some(t) = echo {
                        if !frozen {
                            p.echoed = p.echoed.max(t);
                        }
                    }
                }
            }
            MemberMsg::Prepare { epoch, ballot, base } => {
                if !self.catch_up(from, epoch, &base, now, out) {
                    return;
                }
                if let Some(reply) = self.accept_prepare(epoch, ballot) {
                    out.send.push((from, reply));
                }
            }
            MemberMsg::Accept { epoch, ballot, members } => {
                if epoch != self.epoch.next() {
                    if epoch <= self.epoch {
                        out.send.push((
                            from,
                            MemberMsg::Reject { epoch, promised: None, installed: Some((self.epoch, self.members())) },
                        ));
                    }
                    return;
                }
                if let Some(reply) = self.accept_accept(epoch, ballot, members) {
                    out.send.push((from, reply));
                }
            }
            MemberMsg::Install { epoch, members } => self.learn_install(epoch, members, now, out),
            MemberMsg::InstallAck { epoch } => {
                if from == Voter::Arbiter && epoch == self.epoch {
                    self.report_pending = false;
                }
            }
            reply @ (MemberMsg::Promise { .. } | MemberMsg::Accepted { .. } | MemberMsg::Reject { .. }) => {
                self.on_proposal_reply(from, reply, now, out)
            }
        }
    }

    /// Brings this node to epoch `epoch - 1` before it votes on `epoch`.
    /// False when it cannot vote (a stale proposal, or it was removed).
    fn catch_up(&mut self, from: Voter, epoch: ViewNumber, base: &[NodeId], now: Micros, out: &mut MemberOut) -> bool {
        if epoch <= self.epoch {
            out.send.push((
                from,
                MemberMsg::Reject { epoch, promised: None, installed: Some((self.epoch, self.members())) },
            ));
            return false;
        }
        if epoch > self.epoch.next() {
            self.learn_install(epoch.prev(), base.to_vec(), now, out);
        }
        !self.shut_down && epoch == self.epoch.next()
    }

    fn learn_install(&mut self, epoch: ViewNumber, members: Vec<NodeId>, now: Micros, out: &mut MemberOut) {
        if epoch > self.epoch {
            self.install(epoch, members, now, out);
        }
    }

    fn install(&mut self, epoch: ViewNumber, members: Vec<NodeId>, now: Micros, out: &mut MemberOut) {
        assert!(epoch > self.epoch, "views only move forward ({} -> {epoch})", self.epoch);
        if !members.contains(&self.cfg.me) {
            self.shutdown(
                format!(
                    "data node {} was removed from the cluster (view {epoch} has data nodes {members:?}); shutting down. It needs a node restart to rejoin.",
                    self.cfg.me
                ),
                out,
            );
            return;
        }
        let president = members.first() == Some(&self.cfg.me);
        self.epoch = epoch;
        self.members = members.iter().copied().collect();
        self.promised = None;
        self.accepted = None;
        self.proposal = None;
        self.suspected_since = None;
        self.joining.retain(|n| !members.contains(n));
        self.reset_peers(now);
        self.report_pending = president;
        if president {
            out.send.push((Voter::Arbiter, MemberMsg::Install { epoch, members: members.clone() }));
        }
        out.installed = Some((epoch, members));
    }

    fn shutdown(&mut self, reason: String, out: &mut MemberOut) {
        self.shut_down = true;
        self.proposal = None;
        out.shutdown = Some(reason);
    }
}

/// The arbitrator's side (run by the management server): an acceptor with
/// no heartbeats. It breaks ties between two halves of the cluster. Its
/// state is what it has promised and accepted: the management server keeps
/// it on disk before it answers (a voter that forgot its promises could let
/// two halves both win).
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Arbiter {
    epoch: ViewNumber,
    members: Vec<NodeId>,
    promised: Option<Ballot>,
    accepted: Option<(Ballot, Vec<NodeId>)>,
}

impl Arbiter {
    /// View 1: every data node of the cluster.
    pub fn new(all_nodes: Vec<NodeId>) -> Arbiter {
        Arbiter::new_at(ViewNumber(1), all_nodes)
    }

    /// The first view of a run of the cluster: `members` in `epoch`.
    pub fn new_at(epoch: ViewNumber, members: Vec<NodeId>) -> Arbiter {
        Arbiter { epoch, members, promised: None, accepted: None }
    }

    /// The newest view the arbitrator knows of.
    pub fn view(&self) -> (ViewNumber, &[NodeId]) {
        (self.epoch, &self.members)
    }

    pub fn on_message(&mut self, msg: MemberMsg) -> Option<MemberMsg> {
        let stale = |a: &Arbiter, epoch: ViewNumber| MemberMsg::Reject {
            epoch,
            promised: None,
            installed: Some((a.epoch, a.members.clone())),
        };
        match msg {
            MemberMsg::Prepare { epoch, ballot, base } => {
                if epoch <= self.epoch {
                    return Some(stale(self, epoch));
                }
                if epoch > self.epoch.next() {
                    // It missed view `epoch - 1`; its own vote on that one no
                    // longer matters.
                    self.learn(epoch.prev(), base);
                }
                if self.promised.is_some_and(|b| b > ballot) {
                    return Some(MemberMsg::Reject { epoch, promised: self.promised, installed: None });
                }
                self.promised = Some(ballot);
                Some(MemberMsg::Promise { epoch, ballot, accepted: self.accepted.clone() })
            }
            MemberMsg::Accept { epoch, ballot, members } => {
                if epoch <= self.epoch {
                    return Some(stale(self, epoch));
                }
                if epoch > self.epoch.next() || self.promised.is_some_and(|b| b > ballot) {
                    return Some(MemberMsg::Reject { epoch, promised: self.promised, installed: None });
                }
                self.promised = Some(ballot);
                self.accepted = Some((ballot, members));
                Some(MemberMsg::Accepted { epoch, ballot })
            }
            MemberMsg::Install { epoch, members } => {
                self.learn(epoch, members);
                Some(MemberMsg::InstallAck { epoch })
            }
            MemberMsg::Heartbeat { .. }
            | MemberMsg::Promise { .. }
            | MemberMsg::Accepted { .. }
            | MemberMsg::Reject { .. }
            | MemberMsg::InstallAck { .. } => None,
        }
    }

    fn learn(&mut self, epoch: ViewNumber, members: Vec<NodeId>) {
        if epoch > self.epoch {
            self.epoch = epoch;
            self.members = members;
            self.promised = None;
            self.accepted = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: Micros = 10_000;

    fn node(me: NodeId, nodes: &[NodeId], replicas: usize) -> Membership {
        let groups = nodes.iter().enumerate().map(|(i, n)| (*n, (i / replicas) as u32)).collect();
        let mut m = Membership::new(MembershipConfig { me, interval_us: I, detect_us: 5 * I, groups });
        m.activate(0);
        m
    }

    /// Delivers messages between nodes (and the arbiter) at once, except to
    /// and from the nodes in `cut`, until nothing is left; time advances by
    /// ticks of 1 ms for `until` microseconds.
    fn run(ms: &mut BTreeMap<NodeId, Membership>, arbiter: &mut Arbiter, cut: &[NodeId], from: Micros, until: Micros) {
        let mut now = from;
        while now < until {
            let mut queue: Vec<(Voter, Voter, MemberMsg)> = Vec::new();
            for (id, m) in ms.iter_mut() {
                let mut out = MemberOut::default();
                m.on_tick(now, &mut out);
                queue.extend(out.send.into_iter().map(|(to, msg)| (Voter::Node(*id), to, msg)));
            }
            deliver_cut(ms, arbiter, queue, cut, now);
            now += 1000;
        }
    }

    fn deliver(
        ms: &mut BTreeMap<NodeId, Membership>,
        arbiter: &mut Arbiter,
        queue: Vec<(Voter, Voter, MemberMsg)>,
        now: Micros,
    ) {
        deliver_cut(ms, arbiter, queue, &[], now)
    }

    /// Delivers until nothing is left, except across the cut.
    fn deliver_cut(
        ms: &mut BTreeMap<NodeId, Membership>,
        arbiter: &mut Arbiter,
        mut queue: Vec<(Voter, Voter, MemberMsg)>,
        cut: &[NodeId],
        now: Micros,
    ) {
        while let Some((from, to, msg)) = queue.pop() {
            let blocked = |v: Voter| matches!(v, Voter::Node(n) if cut.contains(&n));
            if blocked(from) != blocked(to) {
                continue;
            }
            match to {
                Voter::Arbiter => {
                    if let Some(answer) = arbiter.on_message(msg) {
                        queue.push((Voter::Arbiter, from, answer));
                    }
                }
                Voter::Node(n) => {
                    let Some(m) = ms.get_mut(&n) else { continue };
                    let mut out = MemberOut::default();
                    m.on_message(from, msg, now, &mut out);
                    queue.extend(out.send.into_iter().map(|(to, msg)| (Voter::Node(n), to, msg)));
                }
            }
        }
    }

    #[test]
    fn a_silent_node_is_removed_and_its_lease_ends_first() {
        let nodes = [2, 3, 4, 5];
        let mut ms: BTreeMap<NodeId, Membership> = nodes.iter().map(|n| (*n, node(*n, &nodes, 2))).collect();
        let mut arbiter = Arbiter::new(nodes.to_vec());
        run(&mut ms, &mut arbiter, &[], 0, 100_000);
        assert!(ms.values().all(|m| m.serving_until() > 100_000));
        run(&mut ms, &mut arbiter, &[2], 100_000, 400_000);
        for id in [3, 4, 5] {
            assert_eq!(ms[&id].epoch(), ViewNumber(2), "node {id}");
            assert_eq!(ms[&id].members(), vec![3, 4, 5]);
        }
        assert_eq!(arbiter.view().0, ViewNumber(2));
        assert!(ms[&2].serving_until() < 200_000, "the cut-off node stopped serving");
    }

    #[test]
    fn a_restarted_node_is_admitted_by_a_new_view() {
        let nodes = [2, 3];
        let mut ms: BTreeMap<NodeId, Membership> = nodes.iter().map(|n| (*n, node(*n, &nodes, 2))).collect();
        let mut arbiter = Arbiter::new(nodes.to_vec());
        run(&mut ms, &mut arbiter, &[2], 0, 300_000);
        assert_eq!(ms[&3].members(), vec![3]);
        // Node 2 comes back as a new process, joining.
        let mut fresh = node(2, &nodes, 2);
        fresh.activate_joining();
        ms.insert(2, fresh);
        run(&mut ms, &mut arbiter, &[], 300_000, 400_000);
        assert_eq!(ms[&2].epoch(), ViewNumber::NONE, "not a member before it is admitted");
        let mut out = MemberOut::default();
        ms.get_mut(&3).unwrap().admit(2, 400_000, &mut out);
        let queued: Vec<(Voter, Voter, MemberMsg)> =
            out.send.into_iter().map(|(to, m)| (Voter::Node(3), to, m)).collect();
        deliver(&mut ms, &mut arbiter, queued, 400_000);
        run(&mut ms, &mut arbiter, &[], 400_000, 600_000);
        for id in nodes {
            assert_eq!(ms[&id].members(), vec![2, 3], "node {id}");
            assert_eq!(ms[&id].epoch(), ViewNumber(3), "node {id}");
            assert!(ms[&id].serving_until() > 600_000, "node {id} serves");
        }
        assert_eq!(arbiter.view(), (ViewNumber(3), &[2, 3][..]));
    }

    #[test]
    fn nodes_of_an_added_node_group_are_admitted_one_by_one() {
        let nodes = [2, 3];
        let mut ms: BTreeMap<NodeId, Membership> = nodes.iter().map(|n| (*n, node(*n, &nodes, 2))).collect();
        let mut arbiter = Arbiter::new(nodes.to_vec());
        run(&mut ms, &mut arbiter, &[], 0, 100_000);
        let grown = [2, 3, 4, 5];
        let groups: BTreeMap<NodeId, u32> = grown.iter().enumerate().map(|(i, n)| (*n, i as u32 / 2)).collect();
        for m in ms.values_mut() {
            m.set_groups(groups.clone());
        }
        for new in [4, 5] {
            let cfg = MembershipConfig { me: new, interval_us: I, detect_us: 5 * I, groups: groups.clone() };
            let mut fresh = Membership::new(cfg);
            fresh.activate_joining();
            ms.insert(new, fresh);
        }
        let mut now = 100_000;
        for (admitted, new) in [(vec![2, 3, 4], 4), (vec![2, 3, 4, 5], 5)] {
            let mut out = MemberOut::default();
            ms.get_mut(&2).unwrap().admit(new, now, &mut out);
            let queued: Vec<(Voter, Voter, MemberMsg)> =
                out.send.into_iter().map(|(to, m)| (Voter::Node(2), to, m)).collect();
            assert!(!queued.is_empty(), "the president proposes no view that admits node {new}");
            deliver(&mut ms, &mut arbiter, queued, now);
            run(&mut ms, &mut arbiter, &[], now, now + 200_000);
            now += 200_000;
            for id in &admitted {
                assert_eq!(ms[id].members(), admitted, "node {id}");
            }
        }
        // The new group holds data now: a view without it is refused.
        assert!(!ms[&2].covers_every_group(&[2, 3]));
        assert!(ms[&2].covers_every_group(&[2, 4]));
    }
}
