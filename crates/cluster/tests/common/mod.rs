//! What the shard-level tests share: the messages in flight between shards
//! (delivered by each test in the order it wants) and the answers clients
//! got.

use latsdb_cluster::{Outbox, Shard};
use latsdb_types::proto::{ClientRequest, ClientResponse, PeerMsg, ShardAddr};
use std::collections::VecDeque;

#[derive(Default)]
pub struct Wire {
    /// (from, to, message), in the order they were sent.
    pub queue: VecDeque<(ShardAddr, ShardAddr, PeerMsg)>,
    /// (request id, answer).
    pub responses: Vec<(u64, ClientResponse)>,
}

impl Wire {
    /// Takes what a shard's turn produced.
    pub fn collect(&mut self, from: ShardAddr, out: &mut Outbox) {
        self.responses.extend(out.client.drain(..).map(|(_, req, r)| (req, r)));
        for (to, msg) in out.peer.drain(..) {
            self.queue.push_back((from, to, msg));
        }
    }

    /// A client's request to `shard` (at address `at`).
    pub fn request(&mut self, shard: &mut Shard, at: ShardAddr, req_id: u64, req: ClientRequest, now: u64) {
        let mut out = Outbox::default();
        shard.on_client(1, req_id, req, now, &mut out);
        self.collect(at, &mut out);
    }

    /// The answer to request `req_id`, if it came.
    pub fn take(&mut self, req_id: u64) -> Option<ClientResponse> {
        let pos = self.responses.iter().position(|(r, _)| *r == req_id)?;
        Some(self.responses.remove(pos).1)
    }
}
