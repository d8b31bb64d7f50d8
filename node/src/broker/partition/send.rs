//! A send in the partition: checked whole, then each message in turn is a retry answered with
//! its first result, a held message (delayed, or a transactional half), or stored in its queue.

use std::collections::HashSet;

use prost::Message;
use rockraft_proto::rockraft::{SendBatch, StoredMessage};

use crate::broker::command::{SendBatchClock, SendBatchQueues};
use crate::broker::dedupe::{DedupeKey, Seen};
use crate::broker::effects::{Effects, QueueWrite};
use crate::broker::held::HeldMessage;
use crate::broker::partition::{Partition, QueueRange};
use crate::broker::position::LogPosition;
use crate::broker::reply::{Held, Reply, SendOutcome};
use crate::broker::topic::TopicKind;
use crate::broker::{MAX_MESSAGES_PER_ENTRY, queue_position};
use crate::store::{CqRecord, tag_hash};

/// A dedupe row of a held message has this bit in its queue id, the message's ordinal in its
/// entry in the others, and its due time (delayed messages) as its offset: a retry of it answers
/// with the recall handle or transaction id of the first attempt, whatever the retry says.
pub(crate) const HELD_FLAG: u32 = 1 << 31;
/// Rows of held messages written by earlier releases: this queue id and the position as offset.
const LEGACY_HELD_QUEUE: u32 = u32::MAX;

/// The held message a dedupe row stands for, if it is one; `retry_due_ms` for rows of earlier
/// releases, which did not keep the due time.
fn held_of(seen: &Seen, kind: TopicKind, retry_due_ms: i64) -> Option<Held> {
    let (position, due_ms) = match seen.queue_id {
        LEGACY_HELD_QUEUE => (seen.offset, retry_due_ms),
        q if q & HELD_FLAG != 0 => (queue_position(seen.index, (q & !HELD_FLAG) as usize), seen.offset as i64),
        _ => return None,
    };
    Some(match kind {
        TopicKind::Delay => Held::Timer { due_ms, position },
        _ => Held::Half { position },
    })
}

/// About how many dedupe rows one entry expires (see `State::expire_dedupe`).
pub(crate) const MAX_EXPIRED_PER_ENTRY: usize = 4096;

/// A send that passed its checks: the topic's kind, the queues it writes (sorted, each once),
/// each message's place in them, and the messages decoded.
struct CheckedSend {
    kind: TopicKind,
    queues: Vec<u32>,
    slots: Vec<usize>,
    messages: Vec<StoredMessage>,
}

/// One message of the send, as the steps below need it.
struct Sending<'a> {
    ordinal: usize,
    queue_id: u32,
    message: &'a StoredMessage,
    size: u32,
    dedupe_key: Option<DedupeKey>,
}

/// What every message of one entry shares.
struct Entry<'a> {
    topic: &'a str,
    index: u64,
    kind: TopicKind,
    /// The leader's clock: due times and first checks go by it.
    now: i64,
    /// The dedupe window's clock.
    seen_ms: i64,
    store_ms: i64,
}

impl Partition {
    pub(crate) fn apply_send(&mut self, at: LogPosition, batch: SendBatch, dedupe: bool, fx: &mut Effects) -> Reply {
        let checked = match self.check_send(&batch) {
            Ok(c) => c,
            Err(refused) => return refused,
        };
        // Time-outs (due times, first checks) go by the leader's clock; the dedupe window by its
        // own clock, which a change of leader does not move (see `DedupeClock`).
        let now = batch.clock();
        let seen_ms = self.dedupe_clock.advance(at.term, now);
        self.expire_dedupe(seen_ms, batch.messages.len());
        let entry = Entry {
            topic: &batch.topic,
            index: at.index,
            kind: checked.kind,
            now,
            seen_ms,
            store_ms: batch.store_timestamp_ms,
        };
        let mut written = self.queue_writes(&entry, &checked.queues);
        let mut outcomes = Vec::with_capacity(checked.messages.len());
        // Ids stored by this entry so far: the leader batches concurrent sends into one entry, so
        // a client's retry may share the entry with its first attempt.
        let mut stored_here = HashSet::new();
        for (ordinal, (message, raw)) in checked.messages.iter().zip(&batch.messages).enumerate() {
            let sending = Sending {
                ordinal,
                queue_id: batch.queue_of(ordinal),
                message,
                size: raw.len() as u32,
                dedupe_key: (dedupe && !message.message_id.is_empty())
                    .then(|| DedupeKey::of_message(&batch.topic, &message.message_id, &message.sender)),
            };
            let outcome = match self.retried(&entry, &sending, &stored_here) {
                Some(first) => first,
                None => {
                    if let Some(key) = sending.dedupe_key {
                        stored_here.insert(key);
                    }
                    match held_now(&entry, &sending) {
                        Some(held) => self.hold_sent(&entry, &sending, held, fx),
                        None => self.store_sent(&entry, &sending, &mut written[checked.slots[ordinal]], fx),
                    }
                }
            };
            outcomes.push(outcome);
        }
        for (range, write) in written {
            self.queues.insert((batch.topic.clone(), write.queue_id), range);
            if !write.records.is_empty() {
                fx.writes.push(write);
            }
        }
        Reply::Sent(outcomes)
    }

    /// The send as a whole: its topic placed here, every message with a queue the topic has,
    /// not too many, each decodable. Refused whole otherwise, changing nothing.
    fn check_send(&self, batch: &SendBatch) -> Result<CheckedSend, Reply> {
        let Some(topic) = self.topics.get(&batch.topic) else { return Err(Reply::TopicNotFound(batch.topic.clone())) };
        if !batch.queues_match() {
            return Err(Reply::Rejected(format!(
                "{} queue ids for {} messages",
                batch.queue_ids.len(),
                batch.messages.len()
            )));
        }
        let queues = batch.queues();
        if let Some(q) = queues.iter().find(|&&q| q >= topic.queues) {
            return Err(Reply::Rejected(format!("topic {} has no queue {q}", batch.topic)));
        }
        // A router whose metadata lags (a topic deleted and created again, placed elsewhere) may
        // send here a queue this group does not hold: stored, no consumer would read it. The
        // router takes the answer as a topic not placed yet, and routes again.
        if self.misplaced(topic, &queues) {
            return Err(Reply::TopicNotFound(batch.topic.clone()));
        }
        // Each message's place in `queues`: all found, as `queues` holds every message's queue.
        let slots: Vec<usize> =
            (0..batch.messages.len()).filter_map(|i| queues.binary_search(&batch.queue_of(i)).ok()).collect();
        if slots.len() != batch.messages.len() {
            return Err(Reply::Rejected("a message without a queue".into()));
        }
        if batch.messages.len() > MAX_MESSAGES_PER_ENTRY {
            return Err(Reply::Rejected(format!("more than {MAX_MESSAGES_PER_ENTRY} messages in one send")));
        }
        let mut messages = Vec::with_capacity(batch.messages.len());
        for raw in &batch.messages {
            match StoredMessage::decode(raw.clone()) {
                Ok(m) => messages.push(m),
                Err(e) => return Err(Reply::Rejected(format!("undecodable message: {e}"))),
            }
        }
        Ok(CheckedSend { kind: topic.kind, queues, slots, messages })
    }

    /// Each queue the entry writes to: its range and its new records, in `queues`' order.
    fn queue_writes(&self, entry: &Entry, queues: &[u32]) -> Vec<(QueueRange, QueueWrite)> {
        queues
            .iter()
            .map(|&queue_id| {
                let mut range = self.queues.get(&(entry.topic.to_string(), queue_id)).copied().unwrap_or_default();
                range.last_store_ms = range.last_store_ms.max(entry.store_ms);
                let write = QueueWrite {
                    topic: entry.topic.to_string(),
                    queue_id,
                    first_offset: range.next,
                    records: Vec::new(),
                    message_ids: Vec::new(),
                };
                (range, write)
            })
            .collect()
    }

    /// The first attempt's result, if this message is a retry of one stored within the dedupe
    /// window. An entry is never a retry of itself: replaying it after a crash finds its own id.
    fn retried(&self, entry: &Entry, s: &Sending, stored_here: &HashSet<DedupeKey>) -> Option<SendOutcome> {
        let key = s.dedupe_key?;
        let seen = self.dedupe.get(&key).filter(|seen| seen.index < entry.index || stored_here.contains(&key))?;
        let held = held_of(seen, entry.kind, s.message.delivery_timestamp_ms);
        Some(SendOutcome {
            message_id: s.message.message_id.clone(),
            queue_id: if held.is_some() { s.queue_id } else { seen.queue_id },
            offset: if held.is_some() { 0 } else { seen.offset },
            duplicate: true,
            held,
        })
    }

    /// Keeps a delayed message or a half for later; it takes no queue offset until delivered.
    fn hold_sent(&mut self, entry: &Entry, s: &Sending, held: Held, fx: &mut Effects) -> SendOutcome {
        let m = HeldMessage {
            topic: entry.topic.to_string(),
            queue_id: s.queue_id,
            message_id: s.message.message_id.clone(),
            size: s.size,
            tag_hash: tag_hash(&s.message.tag),
            stored_ms: entry.now,
        };
        let due_ms = match held {
            Held::Timer { due_ms, position } => {
                self.add_timer(due_ms, position, m, fx);
                due_ms
            }
            // The receiving node filled in its default if the producer set none.
            Held::Half { position } => {
                let first_check_ms = entry.now.saturating_add(s.message.transaction_recovery_ms.max(0));
                self.add_half(position, m, first_check_ms, fx);
                0
            }
        };
        if let Some(key) = s.dedupe_key {
            let row = Seen {
                queue_id: HELD_FLAG | s.ordinal as u32,
                offset: due_ms as u64,
                seen_ms: entry.seen_ms,
                index: entry.index,
            };
            self.remember(key, row);
        }
        SendOutcome {
            message_id: s.message.message_id.clone(),
            queue_id: s.queue_id,
            offset: 0,
            duplicate: false,
            held: Some(held),
        }
    }

    /// Stores the message at its queue's next offset (and in its lite topic, if it names one).
    fn store_sent(
        &mut self,
        entry: &Entry,
        s: &Sending,
        (range, write): &mut (QueueRange, QueueWrite),
        fx: &mut Effects,
    ) -> SendOutcome {
        let position = queue_position(entry.index, s.ordinal);
        if entry.kind == TopicKind::Lite
            && !s.message.lite_topic.is_empty()
            && let Err(e) = self.lite.append(entry.topic, &s.message.lite_topic, position, entry.store_ms)
        {
            fx.fail(e);
        }
        let offset = range.next;
        write.records.push(CqRecord { position, size: s.size, tag_hash: tag_hash(&s.message.tag) });
        write.message_ids.push(s.message.message_id.clone());
        range.next += 1;
        if let Some(key) = s.dedupe_key {
            self.remember(key, Seen { queue_id: s.queue_id, offset, seen_ms: entry.seen_ms, index: entry.index });
        }
        SendOutcome {
            message_id: s.message.message_id.clone(),
            queue_id: s.queue_id,
            offset,
            duplicate: false,
            held: None,
        }
    }

    /// Remembers a stored message id for the dedupe window.
    fn remember(&mut self, key: DedupeKey, seen: Seen) {
        self.dedupe.insert(key, seen);
        self.local.dedupe_order.push_back((seen.seen_ms, key));
    }

    /// Forgets ids that left the window, at most about [`MAX_EXPIRED_PER_ENTRY`] per entry, or
    /// twice what the entry adds (`adding`) if more, so the window never outgrows its span: a
    /// window that ended for millions of ids at once (a burst, then quiet) is worked off over the
    /// next entries instead of holding apply for seconds. The bound is applied at whole store
    /// times — every row of a time goes, or none — so the rows expired depend only on the table,
    /// never on the order this node happens to keep them in (rebuilt sorted after a restart).
    fn expire_dedupe(&mut self, now_ms: i64, adding: usize) {
        let Some(before_ms) = now_ms.checked_sub(self.settings().dedupe_window_ms()) else { return };
        let limit = MAX_EXPIRED_PER_ENTRY.max(2 * adding);
        let mut expired = 0;
        let mut last_ms = None;
        while let Some(&(ts, key)) = self.local.dedupe_order.front() {
            if ts >= before_ms || (expired >= limit && last_ms != Some(ts)) {
                break;
            }
            self.local.dedupe_order.pop_front();
            // A row stored again since (a replayed entry) expires with its own element.
            if self.dedupe.get(&key).is_some_and(|s| s.seen_ms == ts) {
                self.dedupe.remove(&key);
                expired += 1;
                last_ms = Some(ts);
            }
        }
    }
}

/// Whether the message is held rather than stored in its queue now: a delayed message not due
/// yet, or any message of a transactional topic.
fn held_now(entry: &Entry, s: &Sending) -> Option<Held> {
    let position = queue_position(entry.index, s.ordinal);
    match entry.kind {
        TopicKind::Delay if s.message.delivery_timestamp_ms > entry.now => {
            Some(Held::Timer { due_ms: s.message.delivery_timestamp_ms, position })
        }
        TopicKind::Transaction => Some(Held::Half { position }),
        _ => None,
    }
}
