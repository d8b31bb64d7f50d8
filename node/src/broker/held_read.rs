//! Reads of held messages: listing delayed messages and open halves a page at a time, and what
//! is due.

use prost::Message;
use rockraft_proto::rockraft::StoredMessage;

use serde::{Deserialize, Serialize};

use crate::broker::held::{HeldCounts, HeldMessage};
use crate::broker::timer::{TimerKey, parse_recall_handle};
use crate::broker::transaction::{Half, parse_transaction_id};
use crate::broker::{Broker, BrokerError, split_position};

/// A held message as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldEntry {
    pub message: HeldMessage,
    /// `timer` or `half`.
    pub kind: String,
    /// Delayed messages: when due. Halves: the next check while open.
    pub at_ms: i64,
    /// The recall handle or transaction id.
    pub handle: String,
    /// Halves: open, or how it was resolved; checks so far.
    pub state: Option<crate::broker::transaction::HalfState>,
    pub checks: u32,
}

/// Held rows read per hold of the state lock when listing.
const HELD_CHUNK: usize = 256;

fn bad_cursor(handle: &str) -> BrokerError {
    BrokerError::BadRequest(format!("{handle} is not a recall handle or transaction id to list after"))
}

fn disk(e: sled::Error) -> BrokerError {
    BrokerError::CorruptEntry(format!("reading broker state: {e}"))
}

impl Broker {
    /// When the earliest pending timer falls due (ms), if any.
    pub fn first_timer_due_ms(&self) -> Option<i64> {
        self.state().data.first_timer_due_ms()
    }

    /// Up to `limit` timers due by `now_ms`, earliest first.
    pub fn due_timers(&self, now_ms: i64, limit: usize) -> Result<Vec<TimerKey>, BrokerError> {
        Ok(self.state().data.due_timers(now_ms, limit))
    }

    /// Up to `limit` open halves due for a check by `now_ms`.
    pub fn due_checks(&self, now_ms: i64, limit: usize) -> Result<Vec<(u64, Half)>, BrokerError> {
        self.state().data.due_checks(now_ms, limit).map_err(disk)
    }

    /// When the earliest scheduled transaction check is due (ms), if any.
    pub fn first_check_due_ms(&self) -> Result<Option<i64>, BrokerError> {
        self.state().data.first_check_due_ms().map_err(disk)
    }

    pub fn half(&self, position: u64) -> Result<Option<Half>, BrokerError> {
        self.state().data.halves.get(&position).map_err(disk)
    }

    /// The lowest log index retention must keep for held messages (`max_age_ms`: this node's
    /// retention time), if any.
    pub fn first_held_index(&self, now_ms: i64, max_age_ms: i64) -> Result<Option<u64>, BrokerError> {
        let mut from = 0;
        loop {
            // A chunk per hold of the lock: apply never waits for the whole table.
            let rows = self.state().data.holds.range_from(&from, HELD_CHUNK).map_err(disk)?;
            let Some((last, _)) = rows.last() else { return Ok(None) };
            from = last + 1;
            if let Some((index, _)) = rows.iter().find(|(_, h)| h.blocks(now_ms, max_age_ms)) {
                return Ok(Some(*index));
            }
        }
    }

    /// Held messages per topic.
    pub fn held_counts(&self) -> Vec<(String, HeldCounts)> {
        self.state().data.held_counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// The stored message at `position` (a held message's), straight from the log.
    pub fn message_at(&self, position: u64) -> Result<Option<(StoredMessage, i64)>, BrokerError> {
        let (index, ordinal) = split_position(position);
        let batch = match self.batch_at(index) {
            Ok(Some(batch)) => batch,
            Ok(None) | Err(BrokerError::CorruptEntry(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(raw) = batch.messages.get(ordinal) else { return Ok(None) };
        let m = StoredMessage::decode(raw.clone()).map_err(|e| BrokerError::CorruptEntry(e.to_string()))?;
        Ok(Some((m, batch.store_timestamp_ms)))
    }

    /// Pending timers (`timers`) or halves (`!timers`; open ones only unless `all`) of `topic`
    /// (any if `None`), up to `limit`, from just after the one whose handle is `after`. The state
    /// is read a chunk at a time, so apply never waits for a whole listing.
    pub fn held(
        &self,
        timers: bool,
        topic: Option<&str>,
        all: bool,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<HeldEntry>, BrokerError> {
        let wanted = |m: &HeldMessage| topic.is_none_or(|t| m.topic == t);
        let mut out = Vec::new();
        if timers {
            let mut from = match after {
                Some(h) => {
                    let (_, (second, position)) = parse_recall_handle(h).ok_or_else(|| bad_cursor(h))?;
                    (second, position.saturating_add(1))
                }
                None => (i64::MIN, 0),
            };
            while out.len() < limit {
                let rows = self.state().data.timers.range_from(&from, HELD_CHUNK).map_err(disk)?;
                let Some((last, _)) = rows.last() else { break };
                from = (last.0, last.1 + 1);
                let shown = rows.into_iter().filter(|(_, t)| wanted(&t.message));
                out.extend(shown.take(limit - out.len()).map(|(key, t)| HeldEntry::timer(self.partition(), key, t)));
            }
        } else {
            let mut from = match after {
                Some(h) => parse_transaction_id(h).ok_or_else(|| bad_cursor(h))?.1.saturating_add(1),
                None => 0,
            };
            while out.len() < limit {
                let rows = self.state().data.halves.range_from(&from, HELD_CHUNK).map_err(disk)?;
                let Some((last, _)) = rows.last() else { break };
                from = last + 1;
                let shown = rows.into_iter().filter(|(_, h)| wanted(&h.message) && (all || h.is_open()));
                out.extend(
                    shown.take(limit - out.len()).map(|(position, h)| HeldEntry::half(self.partition(), position, h)),
                );
            }
        }
        Ok(out)
    }
}
