//! Messages stored now and delivered later — delayed messages until their timer fires,
//! transactional halves until they are committed — and the log entries they hold back from
//! retention.
//!
//! A held message is written once, in its send entry. Nothing points at it from a ConsumeQueue
//! until it is delivered; delivering adds the ConsumeQueue record under the real topic pointing
//! at the same stored bytes, so there is never a second copy of the body. Its log entry must
//! outlive retention until then, and for a retention period after (consumers read it from
//! there): [`Hold`] rows say so, per log index.

use serde::{Deserialize, Serialize};

use prost::Message;
use rockraft_proto::rockraft::StoredMessage;

use crate::broker::apply::{Effects, QueueWrite};
use crate::broker::partition::Partition;
use crate::broker::timer::{TimerKey, parse_recall_handle};
use crate::broker::transaction::{Half, parse_transaction_id};
use crate::broker::{Broker, BrokerError, split_position};
use crate::store::CqRecord;

/// What is needed to deliver a held message without reading it: where it goes and its
/// ConsumeQueue record's fields. The message itself stays in its send entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldMessage {
    pub topic: String,
    pub queue_id: u32,
    pub message_id: String,
    pub size: u32,
    pub tag_hash: u64,
    /// When the send was stored (the leader's clock).
    pub stored_ms: i64,
}

/// Why a log entry must not be purged yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// Messages of the entry still waiting for a timer or a transaction's end.
    pub pending: u32,
    /// When the last of them was delivered or dropped: the entry is then kept for a retention
    /// period from this time, like a message stored then.
    pub released_ms: i64,
}

impl Hold {
    /// Whether the entry must still be kept, for a node whose retention time is `max_age_ms`.
    pub fn blocks(&self, now_ms: i64, max_age_ms: i64) -> bool {
        self.pending > 0 || self.released_ms.saturating_add(max_age_ms) > now_ms
    }
}

/// Per topic: how many messages are held (shown by `topic list`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldCounts {
    pub timers: u64,
    pub open_halves: u64,
}

impl Partition {
    /// A message of entry `index` is now held.
    pub(crate) fn hold(&mut self, index: u64, fx: &mut Effects) {
        match self.holds.get(&index) {
            Ok(h) => {
                let mut h = h.unwrap_or_default();
                h.pending += 1;
                self.holds.insert(index, h);
            }
            Err(e) => fx.fail(e),
        }
    }

    /// A held message of entry `index` was delivered or dropped at `now_ms`.
    pub(crate) fn release(&mut self, index: u64, now_ms: i64, fx: &mut Effects) {
        match self.holds.get(&index) {
            Ok(Some(mut h)) => {
                h.pending = h.pending.saturating_sub(1);
                h.released_ms = h.released_ms.max(now_ms);
                self.holds.insert(index, h);
            }
            Ok(None) => {}
            Err(e) => fx.fail(e),
        }
    }

    /// A held message of entry `index` was delivered at `now_ms` after it had been released (an
    /// operator resumed a half the checker rolled back): the entry is kept for a retention
    /// period from now, as for any delivery.
    pub(crate) fn hold_again(&mut self, index: u64, now_ms: i64, fx: &mut Effects) {
        match self.holds.get(&index) {
            Ok(h) => {
                let mut h = h.unwrap_or_default();
                h.released_ms = h.released_ms.max(now_ms);
                self.holds.insert(index, h);
            }
            Err(e) => fx.fail(e),
        }
    }

    /// Drops every timer and half of `topic` (it is being deleted): none is delivered later, to
    /// a topic created again under the name. Their entries are released for retention.
    pub(crate) fn drop_held_of_topic(&mut self, topic: &str, fx: &mut Effects) {
        if let Err(e) = self.drop_held_rows(topic) {
            fx.fail(e);
        }
        self.held_counts.remove(topic);
    }

    fn drop_held_rows(&mut self, topic: &str) -> Result<(), sled::Error> {
        for key in self.timers.keys_of_topic(topic)? {
            self.timers.remove(&key);
            self.release_quietly(split_position(key.1).0)?;
        }
        // In chunks, like `release_holds_below`: this table may be large.
        let mut from = 0;
        loop {
            let rows = self.halves.range_from(&from, 1024)?;
            let Some((last, _)) = rows.last() else { break };
            from = last + 1;
            for (position, half) in rows.iter().filter(|(_, h)| h.message.topic == topic) {
                if half.is_open() {
                    self.checks.remove(&(half.next_check_ms, *position))?;
                    self.release_quietly(split_position(*position).0)?;
                }
                self.halves.remove(position)?;
            }
        }
        Ok(())
    }

    /// One message of entry `index` is no longer pending, without keeping the entry longer.
    fn release_quietly(&mut self, index: u64) -> Result<(), sled::Error> {
        if let Some(mut h) = self.holds.get(&index)? {
            h.pending = h.pending.saturating_sub(1);
            self.holds.insert(index, h);
        }
        Ok(())
    }

    pub(crate) fn count_held(&mut self, topic: &str, change: impl FnOnce(&mut HeldCounts)) {
        let counts = self.held_counts.get_or_insert_with(topic.to_string(), HeldCounts::default);
        change(counts);
        if *counts == HeldCounts::default() {
            self.held_counts.remove(topic);
        }
    }

    /// Delivers a held message stored at `position`: a ConsumeQueue record under its topic
    /// pointing at the stored bytes. `None` if its topic or queue no longer exists.
    pub(crate) fn deliver(&mut self, m: &HeldMessage, position: u64, fx: &mut Effects) -> Option<u64> {
        let topic = self.topics.get(&m.topic)?;
        if m.queue_id >= topic.queues {
            return None;
        }
        let key = (m.topic.clone(), m.queue_id);
        let mut range = self.queues.get(&key).copied().unwrap_or_default();
        let offset = range.next;
        range.next += 1;
        self.queues.insert(key, range);
        fx.writes.push(QueueWrite {
            topic: m.topic.clone(),
            queue_id: m.queue_id,
            first_offset: offset,
            records: vec![CqRecord { position, size: m.size, tag_hash: m.tag_hash }],
            message_ids: vec![m.message_id.clone()],
        });
        fx.wakes.push(m.topic.clone());
        Some(offset)
    }

    /// Forgets holds of entries below `below` that block nothing any more, and resolved halves
    /// stored there (the leader asks once its log is purged to there).
    pub(crate) fn release_holds(&mut self, below: u64, fx: &mut Effects) {
        if let Err(e) = self.release_holds_below(below) {
            fx.fail(e);
        }
    }
}

impl Partition {
    fn release_holds_below(&mut self, below: u64) -> Result<(), sled::Error> {
        // In chunks: these tables may be far larger than memory should hold at once.
        let mut from = 0;
        loop {
            let rows = self.holds.range_from(&from, 1024)?;
            let Some((last, _)) = rows.last() else { break };
            from = last + 1;
            for (index, h) in &rows {
                if *index < below && h.pending == 0 {
                    self.holds.remove(index)?;
                }
            }
            if from >= below {
                break;
            }
        }
        let below_position = crate::broker::queue_position(below, 0);
        let mut from = 0;
        loop {
            let rows = self.halves.range_from(&from, 1024)?;
            let Some((last, _)) = rows.last() else { break };
            from = last + 1;
            for (position, half) in &rows {
                if *position < below_position && !half.is_open() {
                    self.halves.remove(position)?;
                }
            }
            if from >= below_position {
                break;
            }
        }
        Ok(())
    }
}

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
    /// Up to `limit` timers due by `now_ms`, earliest first.
    pub fn due_timers(&self, now_ms: i64, limit: usize) -> Result<Vec<TimerKey>, BrokerError> {
        Ok(self.state().data.due_timers(now_ms, limit))
    }

    /// Up to `limit` open halves due for a check by `now_ms`.
    pub fn due_checks(&self, now_ms: i64, limit: usize) -> Result<Vec<(u64, Half)>, BrokerError> {
        self.state().data.due_checks(now_ms, limit).map_err(disk)
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
                    let (second, position) = parse_recall_handle(h).ok_or_else(|| bad_cursor(h))?;
                    (second, position.saturating_add(1))
                }
                None => (i64::MIN, 0),
            };
            while out.len() < limit {
                let rows = self.state().data.timers.range_from(&from, HELD_CHUNK).map_err(disk)?;
                let Some((last, _)) = rows.last() else { break };
                from = (last.0, last.1 + 1);
                let shown = rows.into_iter().filter(|(_, t)| wanted(&t.message));
                out.extend(shown.take(limit - out.len()).map(|(key, t)| HeldEntry::timer(key, t)));
            }
        } else {
            let mut from = match after {
                Some(h) => parse_transaction_id(h).ok_or_else(|| bad_cursor(h))?.saturating_add(1),
                None => 0,
            };
            while out.len() < limit {
                let rows = self.state().data.halves.range_from(&from, HELD_CHUNK).map_err(disk)?;
                let Some((last, _)) = rows.last() else { break };
                from = last + 1;
                let shown = rows.into_iter().filter(|(_, h)| wanted(&h.message) && (all || h.is_open()));
                out.extend(shown.take(limit - out.len()).map(|(position, h)| HeldEntry::half(position, h)));
            }
        }
        Ok(out)
    }
}
