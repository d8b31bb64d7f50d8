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

use crate::broker::apply::{Effects, HeldPlace};
use crate::broker::held::HeldMessage;
use crate::broker::partition::Partition;
use crate::broker::split_position;
use crate::store::Place;

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

impl Partition {
    pub(crate) fn add_half(&mut self, position: u64, m: HeldMessage, first_check_ms: i64, fx: &mut Effects) {
        self.hold(split_position(position).0, fx);
        self.count_held(&m.topic, |c| c.open_halves += 1);
        fx.held.push(HeldPlace { message_id: m.message_id.clone(), position, place: Place::Half });
        self.checks.insert((first_check_ms, position), ());
        self.halves
            .insert(position, Half { message: m, next_check_ms: first_check_ms, checks: 0, state: HalfState::Open });
    }

    pub(crate) fn apply_transaction(&mut self, command: TransactionCommand, fx: &mut Effects) -> TransactionOutcome {
        match command {
            TransactionCommand::Resolve { now_ms, topic, position, message_id, commit, by } => {
                let mut half = match self.halves.get(&position) {
                    Ok(Some(h)) if h.message.topic == topic && h.message.message_id == message_id => h,
                    Ok(_) => return TransactionOutcome::Unknown,
                    Err(e) => {
                        fx.fail(e);
                        return TransactionOutcome::Unknown;
                    }
                };
                match half.state {
                    HalfState::Open => {
                        if let Err(e) = self.checks.remove(&(half.next_check_ms, position)) {
                            fx.fail(e);
                        }
                        self.release(split_position(position).0, now_ms, fx);
                        self.count_held(&topic, |c| c.open_halves = c.open_halves.saturating_sub(1));
                    }
                    HalfState::Committed { .. } if commit => return TransactionOutcome::Done,
                    HalfState::RolledBack { .. } if !commit => return TransactionOutcome::Done,
                    // An operator may resume a half the checker gave up on.
                    HalfState::RolledBack { by: Resolver::Checker, .. } if by == Resolver::Operator => {}
                    other => return TransactionOutcome::Conflict(other),
                }
                let resumed = !half.is_open();
                half.state = if commit {
                    if resumed {
                        self.hold_again(split_position(position).0, now_ms, fx);
                    }
                    self.deliver(&half.message, position, fx);
                    HalfState::Committed { by, at_ms: now_ms }
                } else {
                    HalfState::RolledBack { by, at_ms: now_ms }
                };
                self.halves.insert(position, half);
                TransactionOutcome::Done
            }
            TransactionCommand::Checked { now_ms: _, halves, asked } => {
                for (position, checks_seen, next_check_ms) in halves {
                    let mut half = match self.halves.get(&position) {
                        Ok(Some(h)) => h,
                        Ok(None) => continue,
                        Err(e) => return fx.fail_with(e, TransactionOutcome::Done),
                    };
                    // Resolved meanwhile, or already counted by an earlier proposal of this check.
                    if !half.is_open() || half.checks != checks_seen {
                        continue;
                    }
                    if let Err(e) = self.checks.remove(&(half.next_check_ms, position)) {
                        return fx.fail_with(e, TransactionOutcome::Done);
                    }
                    half.next_check_ms = next_check_ms;
                    if asked {
                        half.checks += 1;
                    }
                    self.checks.insert((next_check_ms, position), ());
                    self.halves.insert(position, half);
                }
                TransactionOutcome::Done
            }
        }
    }

    /// Up to `limit` open halves due for a check by `now_ms`, earliest first.
    pub(crate) fn due_checks(&self, now_ms: i64, limit: usize) -> Result<Vec<(u64, Half)>, sled::Error> {
        let mut out = Vec::new();
        for ((_, position), ()) in self.checks.range_while(&(i64::MIN, 0), limit, |k| k.0 <= now_ms)? {
            if let Some(h) = self.halves.get(&position)?.filter(Half::is_open) {
                out.push((position, h));
            }
        }
        Ok(out)
    }
}

/// The transaction id a transactional send returns: where its half is stored, opaque to clients.
pub fn transaction_id(position: u64) -> String {
    format!("T{position:x}")
}

/// The half a transaction id names; `None` if it is not one this broker made.
pub fn parse_transaction_id(id: &str) -> Option<u64> {
    u64::from_str_radix(id.strip_prefix('T')?, 16).ok()
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
        assert_eq!(parse_transaction_id(&transaction_id(p)), Some(p));
        for bad in ["", "T", "Tzz", "7", "R12"] {
            assert_eq!(parse_transaction_id(bad), None, "{bad:?}");
        }
    }
}
