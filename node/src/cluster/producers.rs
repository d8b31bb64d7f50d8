//! Reaching a producer to resolve an orphaned transaction: the leader's check job asks one
//! connected to this node, else each other node of the cluster in turn
//! (`PeerService.AskProducer`), since a producer's Telemetry stream may be held by any node.

use rockraft_proto::rockraft::StoredMessage;

use crate::broker::transaction::transaction_id;
use crate::cluster::Cluster;
use crate::raft::GroupId;

/// A half to check with a producer of `topic`: its message and transaction id as the half's data
/// group read and sealed them, so any node can ask a producer connected to it, whether it holds
/// a replica of that group or not.
#[derive(Debug, Clone, PartialEq)]
pub struct AskProducer {
    pub topic: String,
    pub transaction_id: String,
    pub message: StoredMessage,
    pub store_timestamp_ms: i64,
}

/// How long a consumer list waits for the other members: the clients wait 3 s for it.
const CONSUMER_LIST_WAIT: std::time::Duration = std::time::Duration::from_millis(1000);

impl Cluster {
    /// Asks one live producer of `topic`, wherever it is connected, about the half stored at
    /// `position` in this group; whether one was asked.
    pub async fn ask_producer(&self, topic: &str, position: u64) -> bool {
        let Some(ask) = self.producer_question(topic, position) else { return false };
        if self.ask_producer_here(&ask) {
            return true;
        }
        // Every node of the cluster: a producer may be connected to one holding no replica of
        // this group. The call names the metadata group, which each of them runs.
        let via = self.metadata_group_id();
        for (id, node) in self.cluster_members() {
            if id == self.id() {
                continue;
            }
            match self.peers().ask_producer(&node.raft_addr, via, &ask).await {
                Ok(true) => return true,
                Ok(false) => {}
                Err(e) => tracing::debug!(node = id, error = %e, "could not ask a member for its producers"),
            }
        }
        false
    }

    /// The half at `position` of this group, read from its log, with its transaction id. `None`
    /// while it cannot be asked about: retention took it, or there is no key to seal an id with
    /// yet (it is checked again later).
    fn producer_question(&self, topic: &str, position: u64) -> Option<AskProducer> {
        let (message, store_ms) = match self.broker().message_at(position) {
            Ok(found) => found?,
            Err(e) => {
                tracing::debug!(error = %e, "reading a half to check with its producer failed");
                return None;
            }
        };
        // Sealed for the topic and message, as the id the producer got from its send was.
        let keys = self.metadata().access(crate::auth::handles::HandleKeys::of)?;
        let id = keys.seal(&transaction_id(self.broker().partition(), position), &[topic, &message.message_id]);
        Some(AskProducer { topic: topic.to_string(), transaction_id: id, message, store_timestamp_ms: store_ms })
    }

    /// Sends `RecoverOrphanedTransactionCommand` to a producer of the topic connected here.
    pub fn ask_producer_here(&self, ask: &AskProducer) -> bool {
        // Whether a producer may still publish is the metadata's to say (users and rules).
        self.sessions().ask(&ask.topic, self.metadata(), |resource| {
            crate::sessions::recover_command(resource, ask.message.clone(), ask.store_timestamp_ms, &ask.transaction_id)
        })
    }

    /// `group`'s Remoting consumers connected to this node.
    pub fn remoting_consumers_here(&self, group: &str) -> Vec<String> {
        self.sessions().consumers(group)
    }

    /// `group`'s Remoting consumers over the cluster, sorted: this node's, and each other
    /// member's that answers (one that does not is left out, as its clients are cut off too).
    pub async fn remoting_consumers(&self, group: &str) -> Vec<String> {
        let mut all = self.remoting_consumers_here(group);
        let others: Vec<_> = self.cluster_members().into_iter().filter(|(id, _)| *id != self.id()).collect();
        let asks = others.iter().map(|(id, node)| async move {
            match tokio::time::timeout(CONSUMER_LIST_WAIT, self.peers().remoting_consumers(&node.raft_addr, group))
                .await
            {
                Ok(Ok(ids)) => ids,
                Ok(Err(e)) => {
                    tracing::debug!(node = id, error = %e, "could not ask a member for its Remoting consumers");
                    Vec::new()
                }
                Err(_) => Vec::new(),
            }
        });
        for ids in futures_util::future::join_all(asks).await {
            all.extend(ids.into_iter().take(crate::cluster::MAX_REMOTE_CONSUMERS));
        }
        all.sort();
        all.dedup();
        all
    }

    /// The Raft group holding the metadata, which every node runs.
    fn metadata_group_id(&self) -> GroupId {
        self.inner.options.cluster_members.as_ref().map_or(self.group().id(), |metadata| metadata.id())
    }
}
