//! The simulated network: endpoints, messages, and links that behave
//! like TCP (a random delay, first in first out per link, held while a
//! split cuts them).

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Endpoint {
    Shard(usize),
    Client(usize),
    /// The membership of data node `i` (node id 2 + i).
    Node(usize),
    Mgmd,
}

#[derive(Debug)]
pub(super) enum Payload {
    Peer {
        from: ShardAddr,
        /// The sending node's process (`DataNodeInfo::process`) when it sent.
        process: u64,
        msg: PeerMsg,
    },
    Request {
        conn: u64,
        req_id: u64,
        req: ClientRequest,
    },
    Disconnect {
        conn: u64,
    },
    Response {
        req_id: u64,
        resp: ClientResponse,
    },
    Tick,
    Wake,
    /// The client drops its connection if request `req` is still unanswered.
    DropIfWaiting {
        req: u64,
    },
    /// The client's connection to a failed node broke while request
    /// `req_id` was outstanding.
    ConnectionLost {
        req_id: u64,
    },
    /// A shard applies the layout of a view its node installed.
    Layout(Box<ClusterLayout>),
    Member {
        from: Voter,
        msg: MemberMsg,
    },
    MemberTick,
    Heal,
    /// A sync of the shard's disk completed.
    DiskDone(SyncDone),
    /// The host read a page the shard asked for (`Outbox::page_reads`).
    PageRead(latsdb_cluster::PageRead),
    /// The management server starts every data node again after a
    /// whole-cluster crash.
    SystemRestart,
}

impl Payload {
    /// Timers and membership chatter go on forever; the rest is work.
    pub(super) fn is_background(&self) -> bool {
        matches!(self, Payload::Tick | Payload::MemberTick | Payload::Member { .. })
    }
}

impl World {
    pub(super) fn schedule(&mut self, at: u64, from: Endpoint, to: Endpoint, payload: Payload) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, (from, to, payload, self.now));
    }

    /// Which side of a network split an endpoint is on: data nodes by
    /// index, the management server as None; clients reach every node.
    pub(super) fn site(&self, e: Endpoint) -> Option<Option<usize>> {
        match e {
            Endpoint::Shard(s) => Some(Some(self.node_of_shard(s))),
            Endpoint::Node(n) => Some(Some(n)),
            Endpoint::Mgmd => Some(None),
            Endpoint::Client(_) => None,
        }
    }

    pub(super) fn cut(&self, from: Endpoint, to: Endpoint) -> bool {
        let Some(split) = &self.split else { return false };
        let (Some(a), Some(b)) = (self.site(from), self.site(to)) else { return false };
        let side = |site: Option<usize>| match site {
            Some(n) => split.side_a.contains(&n),
            None => split.mgmd_in_a,
        };
        side(a) != side(b)
    }

    /// Sends over the simulated network. Data links behave like TCP: a
    /// random delay, never ahead of an earlier message on the same link,
    /// and held (not lost) while a split cuts them. Membership messages
    /// may be lost, duplicated and reordered, and are lost on cut links.
    pub(super) fn send(&mut self, from: Endpoint, to: Endpoint, payload: Payload) {
        let delay = 1 + self.rng.below(self.cfg.max_delay_us);
        if matches!(payload, Payload::Member { .. }) {
            if self.cut(from, to) || self.rng.below(100) < self.cfg.member_fault_pct {
                self.trace(super::bounded(format_args!("{:>9} {from:?} -> {to:?}: LOST {payload:?}", self.now)));
                return;
            }
            if self.rng.below(100) < self.cfg.member_fault_pct {
                if let Payload::Member { from: f, msg } = &payload {
                    let copy = Payload::Member { from: *f, msg: msg.clone() };
                    let later = self.now + delay + self.rng.below(self.cfg.max_delay_us * 4);
                    self.schedule(later, from, to, copy);
                }
            }
            self.schedule(self.now + delay, from, to, payload);
            return;
        }
        if self.cut(from, to) {
            self.held.push((from, to, payload));
            return;
        }
        let last = self.link_last.get(&(from, to)).copied().unwrap_or(0);
        let at = (self.now + delay).max(last);
        self.link_last.insert((from, to), at);
        self.schedule(at, from, to, payload);
    }
}
