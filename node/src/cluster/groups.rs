//! The data path's way to the group that holds what a request names. The metadata group holds
//! the metadata (topics, consumer groups, access, settings); each of a topic's queues lives in the
//! data group its configuration names (`TopicConfig::group_of`); receipts, transaction ids and
//! recall handles name the partition (the group) that issued them.
//!
//! A dead-letter topic is the exception, as in RocketMQ, where each broker group keeps its own
//! dead-letter queue: a delivery given up in a group is stored in that group's copy of its
//! consumer group's dead-letter queue, in the same entry that ends the delivery, so giving up
//! never spans two groups. Reading a dead-letter topic reads every data group.

use crate::broker::TopicConfig;
use crate::broker::group::is_dead_letter_topic;
use crate::broker::position::PartitionId;
use crate::cluster::{Cluster, ClusterError};
use crate::raft::{GroupId, GroupRegistry};

/// The groups this node runs, as the data path finds them. Clones share them.
#[derive(Clone)]
pub struct Groups {
    registry: GroupRegistry<Cluster>,
    metadata: Cluster,
}

impl Groups {
    /// `registry` holds the handle of `metadata`, the group holding the metadata, already (it
    /// is opened first).
    pub fn new(registry: GroupRegistry<Cluster>, metadata: GroupId) -> Option<Groups> {
        let metadata = registry.get(metadata)?;
        Some(Groups { registry, metadata })
    }

    /// The group holding the metadata.
    pub fn metadata(&self) -> &Cluster {
        &self.metadata
    }

    /// The group that issued a handle naming `partition`: a data group (the metadata group
    /// issues none).
    pub fn partition(&self, partition: PartitionId) -> Result<Cluster, ClusterError> {
        if partition == PartitionId::NONE {
            return Err(ClusterError::Unreachable {
                addr: "group 0".into(),
                reason: "the metadata group holds no messages or deliveries".into(),
            });
        }
        self.group(partition.0)
    }

    /// The group holding `topic`'s queue `queue`.
    pub fn of_queue(&self, topic: &TopicConfig, queue: u32) -> Result<Cluster, ClusterError> {
        self.group(topic.group_of(queue))
    }

    /// Every group holding some of `topic`'s queues, in group order, each once: those this node
    /// runs (a group opened a moment ago may not be open here yet; its messages are read once
    /// it is).
    pub fn holding(&self, topic: &TopicConfig) -> Vec<Cluster> {
        let mut ids: Vec<u32> = match is_dead_letter_topic(&topic.name) {
            true => (1..=self.metadata.broker().settings().data_groups.max(1)).collect(),
            false => (0..topic.queues).map(|q| topic.group_of(q)).collect(),
        };
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().filter_map(|id| self.registry.get(GroupId(id))).collect()
    }

    /// Every data group this node runs, in group order (the metadata group holds no queues).
    pub fn all(&self) -> Vec<Cluster> {
        self.registry.all().into_iter().map(|(_, c)| c).filter(|c| c.broker().holds_queues()).collect()
    }

    fn group(&self, id: u32) -> Result<Cluster, ClusterError> {
        self.registry.get(GroupId(id)).ok_or_else(|| ClusterError::Unreachable {
            addr: format!("data group {id}"),
            reason: "this node runs no replica of it (yet)".into(),
        })
    }
}
