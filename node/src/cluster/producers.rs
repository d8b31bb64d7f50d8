//! Reaching a producer to resolve an orphaned transaction: the leader's check job asks one
//! connected to this node, else each other node of the cluster in turn
//! (`PeerService.AskProducer`), since a producer's Telemetry stream may be held by any node.

use crate::broker::transaction::transaction_id;
use crate::cluster::Cluster;

/// Which half to ask about, and the topic whose producers can answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskProducer {
    pub topic: String,
    pub position: u64,
}

impl Cluster {
    /// Asks one live producer of the topic, wherever it is connected; whether one was asked.
    pub async fn ask_producer(&self, ask: &AskProducer) -> bool {
        if self.ask_producer_here(ask) {
            return true;
        }
        // Every node of the cluster: a producer may be connected to one holding no replica of
        // this group.
        for (id, node) in self.cluster_members() {
            if id == self.id() {
                continue;
            }
            match self.peers().ask_producer(&node.raft_addr, ask).await {
                Ok(true) => return true,
                Ok(false) => {}
                Err(e) => tracing::debug!(node = id, error = %e, "could not ask a member for its producers"),
            }
        }
        false
    }

    /// Sends `RecoverOrphanedTransactionCommand` to a producer of the topic connected here.
    pub fn ask_producer_here(&self, ask: &AskProducer) -> bool {
        let Ok(Some((message, store_ms))) = self.broker().message_at(ask.position) else { return false };
        // Sealed for the topic and message, as the id the producer got from its send was.
        // Without a key yet there is no id to give it: the half is checked again later.
        let Some(keys) = self.metadata().access(crate::auth::handles::HandleKeys::of) else { return false };
        let id =
            keys.seal(&transaction_id(self.broker().partition(), ask.position), &[&ask.topic, &message.message_id]);
        // Whether a producer may still publish is the metadata's to say (users and rules).
        self.sessions().ask(&ask.topic, self.metadata(), |resource| {
            crate::sessions::recover_command(resource, message.clone(), store_ms, &id)
        })
    }
}
