//! Transactional messages: a send to a TRANSACTION topic stores a half ([`Half`]) that no
//! consumer sees. Committing it delivers the stored bytes under the real topic; rolling back
//! drops it. The first resolution wins; repeating it is harmless, a different one is refused.
//!
//! Unresolved halves are checked on a schedule kept in the replicated state (`checks`, keyed by
//! the next check time): the leader's check job asks a [`TransactionChecker`] what to do with
//! each half that is due and proposes the result, so the check count and the times survive
//! failover exactly. Resolved halves leave the schedule and are never checked again; they are
//! kept (for `transaction list --all` and an operator's resume) until their log entry is purged.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::broker::held::HeldMessage;
use crate::broker::position::PartitionId;

/// Who resolved a half.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolver {
    /// The producer, with EndTransaction.
    Producer,
    /// The producer, answering a check.
    ProducerCheck,
    /// The transaction checker (e.g. the half reached its maximum age).
    Checker,
    /// An operator, with `rockraft transaction commit|rollback`.
    Operator,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum HalfState {
    Open,
    Committed { by: Resolver, at_ms: i64 },
    RolledBack { by: Resolver, at_ms: i64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Half {
    pub message: HeldMessage,
    /// When it is checked next (while open).
    pub next_check_ms: i64,
    /// How many times a producer was asked about it.
    pub checks: u32,
    pub state: HalfState,
}

impl Half {
    pub fn is_open(&self) -> bool {
        self.state == HalfState::Open
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TransactionCommand {
    /// Ends the half stored at `position`, which must be `message_id` of `topic`.
    Resolve { now_ms: i64, topic: String, position: u64, message_id: String, commit: bool, by: Resolver },
    /// The check job looked at these halves (position, checks so far when it looked, when to
    /// check next); `asked`: a producer is being asked, which counts as a check.
    Checked { now_ms: i64, halves: Vec<(u64, u32, i64)>, asked: bool },
}

impl TransactionCommand {
    pub(crate) fn set_time(&mut self, now: i64) {
        match self {
            TransactionCommand::Resolve { now_ms, .. } | TransactionCommand::Checked { now_ms, .. } => *now_ms = now,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TransactionOutcome {
    /// Resolved now, or already resolved the same way.
    Done,
    /// No half with this transaction id and message id.
    Unknown,
    /// Already resolved the other way.
    Conflict(HalfState),
}

/// The transaction id a transactional send returns: where its half is stored, opaque to clients.
pub fn transaction_id(partition: PartitionId, position: u64) -> String {
    format!("T{partition}:{position:x}")
}

/// The half a transaction id names; `None` if it is not one this broker made.
/// Ids of earlier releases (no partition) name the first.
pub fn parse_transaction_id(id: &str) -> Option<(PartitionId, u64)> {
    let rest = id.strip_prefix('T')?;
    let (partition, position) = match rest.split_once(':') {
        Some((p, position)) => (p.parse().ok()?, position),
        None => (PartitionId::FIRST, rest),
    };
    Some((partition, u64::from_str_radix(position, 16).ok()?))
}

/// What a transaction checker sees of a half.
#[derive(Debug, Clone, PartialEq)]
pub struct HalfView {
    pub topic: String,
    pub store_ms: i64,
    pub message: rockraft_proto::rockraft::StoredMessage,
}

/// A checker's answer for an unresolved half.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Decision {
    Commit,
    Rollback,
    /// Send `RecoverOrphanedTransactionCommand` to a live producer of the topic.
    AskProducer,
    /// Look again at the next check.
    Wait,
}

/// The policy for unresolved halves, in one place: the plugin host implements it with a WASM
/// transaction checker per topic.
pub trait TransactionChecker: Send + Sync {
    /// `age`: since the half was stored; `checks`: how many times a producer was asked so far.
    fn decide(&self, half: &HalfView, age: Duration, checks: u32) -> Decision;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_ids_round_trip_and_garbage_is_refused() {
        let p = crate::broker::queue_position(7, 2);
        assert_eq!(parse_transaction_id(&transaction_id(PartitionId(3), p)), Some((PartitionId(3), p)));
        assert_eq!(parse_transaction_id("T2a"), Some((PartitionId::FIRST, 0x2a)));
        for bad in ["", "T", "Tzz", "7", "R12", "T:1", "T1:", "Tz:1", "T1:2:3"] {
            assert_eq!(parse_transaction_id(bad), None, "{bad:?}");
        }
    }
}
