//! The repair history: one record per repair a node made of what rotted on its disk (log records
//! or a snapshot filled from another member, a ConsumeQueue record rebuilt from its own log),
//! proposed by that node once it runs and replicated in the metadata, so every node (and every
//! snapshot) can say what was damaged where and where it came back from.
//!
//! The times are the repairing node's wall clock; apply only stores the record (it reads no
//! clock) and keeps the newest [`KEPT`] by when they were done. A record proposed twice (its
//! first answer lost) is stored once: its key is the node, the group, what and where.

use serde::{Deserialize, Serialize};

/// How many repairs are kept: a page of history, bounded whatever rots.
pub const KEPT: usize = 64;

/// The longest file name a record keeps.
pub const MAX_PLACE: usize = 512;

/// What was repaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RepairedPart {
    LogRecords,
    Snapshot,
    QueueRecord,
}

impl RepairedPart {
    pub fn name(self) -> &'static str {
        match self {
            RepairedPart::LogRecords => "log records",
            RepairedPart::Snapshot => "snapshot",
            RepairedPart::QueueRecord => "queue record",
        }
    }
}

/// One repair as the node that made it saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    pub node: u64,
    pub group: u32,
    pub part: RepairedPart,
    /// The first and last log index repaired (a snapshot: the index it is at; a queue record:
    /// its queue offset, both).
    pub first: u64,
    pub last: u64,
    /// The member the records came from; `None`: rebuilt from the node's own log.
    pub source: Option<u64>,
    /// The file the damage was in (a queue record: the queue file), and where in it.
    pub place: String,
    /// Wall milliseconds on the repairing node when the repair began and when it was done.
    pub began_ms: i64,
    pub done_ms: i64,
}

/// Why a repair record is not one a node could have made. Its text goes into the replicated
/// reply: it must not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRepair {
    #[error("repair record of node {node} has its span or times out of order")]
    OutOfOrder { node: u64 },
    #[error("repair record of node {node} names too long a file")]
    PlaceTooLong { node: u64 },
}

impl Repair {
    /// Where the record is kept: a record proposed again lands on itself.
    pub fn key(&self) -> String {
        format!("{}/{}/{}/{}/{}", self.node, self.group, self.part.name(), self.first, self.began_ms)
    }

    pub fn validate(&self) -> Result<(), InvalidRepair> {
        if self.first > self.last || self.began_ms > self.done_ms {
            return Err(InvalidRepair::OutOfOrder { node: self.node });
        }
        if self.place.len() > MAX_PLACE {
            return Err(InvalidRepair::PlaceTooLong { node: self.node });
        }
        Ok(())
    }

    /// How many records it repaired (a snapshot file: one).
    pub fn records(&self) -> u64 {
        match self.part {
            RepairedPart::LogRecords => self.last - self.first + 1,
            RepairedPart::Snapshot | RepairedPart::QueueRecord => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Repair {
        Repair {
            node: 3,
            group: 1,
            part: RepairedPart::LogRecords,
            first: 100,
            last: 140,
            source: Some(1),
            place: "/data/3/group-1/log/00000000000000000000.log byte 4096".into(),
            began_ms: 10_000,
            done_ms: 10_020,
        }
    }

    #[test]
    fn a_record_counts_what_it_repaired_and_is_keyed_by_what_and_where() {
        assert_eq!(record().records(), 41);
        assert_eq!(Repair { part: RepairedPart::Snapshot, ..record() }.records(), 1);
        assert_eq!(record().key(), "3/1/log records/100/10000");
        // A record proposed again (the same repair) keeps its key; another repair does not.
        assert_eq!(record().key(), record().clone().key());
        assert_ne!(record().key(), Repair { began_ms: 20_000, ..record() }.key());
    }

    #[test]
    fn records_out_of_order_or_too_long_are_refused() {
        assert!(record().validate().is_ok());
        let backwards = Repair { first: 141, ..record() }.validate().unwrap_err();
        assert_eq!(backwards, InvalidRepair::OutOfOrder { node: 3 });
        assert_eq!(Repair { done_ms: 1, ..record() }.validate(), Err(InvalidRepair::OutOfOrder { node: 3 }));
        let long = Repair { place: "x".repeat(MAX_PLACE + 1), ..record() }.validate().unwrap_err();
        // The text is what the refusal's replicated reply holds: replicas compare their digests.
        assert_eq!(long.to_string(), "repair record of node 3 names too long a file");
        assert_eq!(backwards.to_string(), "repair record of node 3 has its span or times out of order");
    }
}
