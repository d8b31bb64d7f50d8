//! Where a message is, as named outside its partition.

use serde::{Deserialize, Serialize};

use crate::store::RecordMeta;

/// A data partition's number: the number of the data group (Raft group) that carries it.
/// Whatever names a message or a delivery outside its partition — a transaction id, a recall
/// handle, a receipt handle — names the partition too, so that each finds its group; a position
/// inside a partition is its log's (index, ordinal). [`PartitionId::NONE`] is the metadata
/// group's: it holds no queues, and nothing names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionId(pub u32);

impl PartitionId {
    /// The metadata group's state: no queues.
    pub const NONE: PartitionId = PartitionId(0);
    /// The first data group's partition, and the one handles of earlier releases name.
    pub const FIRST: PartitionId = PartitionId(1);
}

impl std::fmt::Display for PartitionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

impl std::str::FromStr for PartitionId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<PartitionId, Self::Err> {
        u32::from_str_radix(s, 16).map(PartitionId)
    }
}

/// Where an entry sits in the replicated log: the broker's own name for a Raft log id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LogPosition {
    pub term: u64,
    /// The node that proposed the entry.
    pub leader: u64,
    pub index: u64,
}

impl From<&RecordMeta> for LogPosition {
    fn from(m: &RecordMeta) -> LogPosition {
        LogPosition { term: m.term, leader: m.leader, index: m.index }
    }
}
