//! The membership protocol: heartbeats and the consensus on views of the
//! live data nodes.

use super::*;

/// A proposal number of the membership consensus: higher rounds win, the
/// proposing node breaks ties.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ballot {
    pub round: u64,
    pub node: NodeId,
}

/// Messages of the membership protocol (`cluster/src/membership.rs`):
/// heartbeats between data nodes, and single-decree Paxos per epoch among
/// the data nodes of the current view plus the arbitrator (the management
/// server). Times are on the sender's own monotonic clock.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum MemberMsg {
    /// Sent every heartbeat interval to the other members of the view.
    /// `echo` returns the `sent_at` of the newest heartbeat received from
    /// the destination: it renews the destination's lease.
    Heartbeat {
        epoch: ViewNumber,
        sent_at: u64,
        echo: Option<u64>,
    },
    /// Phase 1 for the view `epoch` (the next one); `base` lists the members
    /// of view `epoch - 1`, so an acceptor that missed it can catch up.
    Prepare {
        epoch: ViewNumber,
        ballot: Ballot,
        base: Vec<NodeId>,
    },
    Promise {
        epoch: ViewNumber,
        ballot: Ballot,
        accepted: Option<(Ballot, Vec<NodeId>)>,
    },
    /// Phase 2: accept `members` as view `epoch`. An acceptor stops
    /// echoing the nodes the view leaves out.
    Accept {
        epoch: ViewNumber,
        ballot: Ballot,
        members: Vec<NodeId>,
    },
    Accepted {
        epoch: ViewNumber,
        ballot: Ballot,
    },
    /// The ballot is too low, or the epoch is already decided (`installed`
    /// then carries the newest view the acceptor knows).
    Reject {
        epoch: ViewNumber,
        promised: Option<Ballot>,
        installed: Option<(ViewNumber, Vec<NodeId>)>,
    },
    /// View `epoch` is chosen: these are the live data nodes.
    Install {
        epoch: ViewNumber,
        members: Vec<NodeId>,
    },
    /// The arbitrator recorded view `epoch`.
    InstallAck {
        epoch: ViewNumber,
    },
}
