//! Finding a message by its id (`rockraft message get`, an operator's transaction resolve)
//! through the node's [`MessageIndex`](crate::store::MessageIndex): a few index reads and one log
//! read per candidate, never a scan. Every candidate is read back and compared by id, so the
//! index, a node-local cache, can miss but never answers wrongly.

use crate::broker::HeldEntry;
use crate::broker::dedupe::DedupeKey;
use crate::broker::partition::HELD_FLAG;
use crate::broker::position::PartitionId;
use crate::broker::read::StoredEntry;
use crate::broker::timer::{recall_handle, timer_key};
use crate::broker::transaction::transaction_id;
use crate::broker::{Broker, BrokerError, SendBatchQueues, SendOutcome, split_position};
use crate::store::{Located, Place, StoreError};

/// Held rows indexed per read of the state when the index is filled from it.
const INDEX_CHUNK: usize = 1024;

impl Broker {
    /// The stored (deliverable) message with this id, the newest if it was stored more than once.
    pub fn find(&self, message_id: &str) -> Result<Option<StoredEntry>, BrokerError> {
        for Located { position, place } in self.inner.message_index.candidates(message_id) {
            let Place::Queued { offset } = place else { continue };
            let Some((topic, queue_id)) = self.queue_of(position)? else { continue };
            // The record must still point here: the topic may have been deleted and created again.
            if self.queue_record(&topic, queue_id, offset)?.is_none_or(|r| r.position != position) {
                continue;
            }
            if let Some(e) = self.read(&topic, queue_id, offset)?
                && e.message.message_id == message_id
            {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// The deliverable message stored at `position` (a message a consumer was handed names it):
    /// `None` if none is queued there (a pending timer, a half, a message retention took, a
    /// position that names nothing).
    pub fn queued_at(&self, position: u64) -> Result<Option<StoredEntry>, BrokerError> {
        let (index, ordinal) = split_position(position);
        let Some(batch) = self.batch_at(index)? else { return Ok(None) };
        let Ok(raw) = crate::broker::message_in(&batch, index, ordinal) else { return Ok(None) };
        let Ok(id) = crate::broker::message_view::MessageView::parse(raw).map(|m| m.message_id.to_string()) else {
            return Ok(None);
        };
        for Located { position: at, place } in self.inner.message_index.candidates(&id) {
            let Place::Queued { offset } = place else { continue };
            if at != position {
                continue;
            }
            let Some((topic, queue_id)) = self.queue_of(position)? else { continue };
            if self.queue_record(&topic, queue_id, offset)?.is_some_and(|r| r.position == position) {
                return self.read(&topic, queue_id, offset);
            }
        }
        Ok(None)
    }

    /// A held message (pending timer, or half in any state) with this id.
    pub fn find_held(&self, message_id: &str) -> Result<Option<HeldEntry>, BrokerError> {
        for Located { position, place } in self.inner.message_index.candidates(message_id) {
            let found = match place {
                Place::Queued { .. } => None,
                Place::Timer { due_ms } => {
                    let key = timer_key(due_ms, position);
                    let timer = self.state().data.timers.get(&key).map_err(disk)?;
                    timer.map(|t| HeldEntry::timer(self.partition(), key, t))
                }
                Place::Half => {
                    let half = self.state().data.halves.get(&position).map_err(disk)?;
                    half.map(|h| HeldEntry::half(self.partition(), position, h))
                }
            };
            if let Some(e) = found.filter(|e| e.message.message_id == message_id) {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// When every message of `batch` is stored already (a retry within the dedupe window, none
    /// held), the outcomes apply would answer it with: its first results, as duplicates.
    pub fn stored_sends(&self, batch: &rockraft_proto::rockraft::SendBatch) -> Option<Vec<SendOutcome>> {
        use prost::Message;
        if batch.messages.is_empty() {
            return None;
        }
        // Decoded and hashed before the state is locked: apply waits for none of it.
        let mut keyed = Vec::with_capacity(batch.messages.len());
        for raw in &batch.messages {
            let m = rockraft_proto::rockraft::StoredMessage::decode(raw.clone()).ok()?;
            if m.message_id.is_empty() {
                return None;
            }
            keyed.push((DedupeKey::of_message(&batch.topic, &m.message_id, &m.sender), m.message_id));
        }
        let queues = self.topic(&batch.topic)?.queues;
        let state = self.state();
        if !batch.queues_match() || batch.queues().iter().any(|&q| q >= queues) {
            return None;
        }
        let mut outcomes = Vec::with_capacity(keyed.len());
        for (key, id) in keyed {
            let seen = state.data.dedupe.get(&key)?;
            if seen.queue_id & HELD_FLAG != 0 {
                return None;
            }
            outcomes.push(SendOutcome {
                message_id: id,
                queue_id: seen.queue_id,
                offset: seen.offset,
                duplicate: true,
                held: None,
            });
        }
        Some(outcomes)
    }

    /// The topic and queue of the message at `position`, from its log entry.
    fn queue_of(&self, position: u64) -> Result<Option<(String, u32)>, BrokerError> {
        let (index, ordinal) = split_position(position);
        match self.batch_at(index) {
            Ok(batch) => Ok(batch.map(|b| (b.topic.clone(), b.queue_of(ordinal)))),
            Err(BrokerError::CorruptEntry(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Puts what the state holds into the message index: every readable message and every held
    /// one. For an index just created (a data directory from before it), and after a snapshot
    /// install (its held messages were sent before this node's log starts). The state is read in
    /// chunks, never all under one lock: what applies meanwhile is indexed by its apply.
    pub(crate) fn index_stored_messages(&self, queued: bool) -> Result<u64, BrokerError> {
        let mut count = 0u64;
        if queued {
            let queues: Vec<((String, u32), u64, u64)> =
                self.state().data.queues.iter().map(|(k, r)| (k.clone(), r.start, r.next)).collect();
            for ((topic, queue_id), start, next) in queues {
                let mut batch: Vec<(String, u64, Place)> = Vec::new();
                for offset in start..next {
                    let found = self.read(&topic, queue_id, offset).and_then(|e| {
                        let r = self.queue_record(&topic, queue_id, offset)?;
                        Ok(e.zip(r))
                    });
                    match found {
                        Ok(Some((e, r))) => batch.push((e.message.message_id, r.position, Place::Queued { offset })),
                        Ok(None) => {}
                        // A queue record that rotted and is not rebuilt (it was to come from
                        // this index): unindexed, and its reads keep saying why.
                        Err(BrokerError::Store(StoreError::DamagedQueueRecord { .. })) => {}
                        Err(e) => return Err(e),
                    }
                    if batch.len() >= INDEX_CHUNK || offset + 1 == next {
                        count += batch.len() as u64;
                        self.inner.message_index.put(batch.iter().map(|(id, p, place)| (id.as_str(), *p, *place)))?;
                        batch.clear();
                    }
                }
            }
        }
        let mut from = (i64::MIN, 0);
        loop {
            let rows = self.state().data.timers.range_from(&from, INDEX_CHUNK).map_err(disk)?;
            let Some((last, _)) = rows.last() else { break };
            from = (last.0, last.1 + 1);
            count += rows.len() as u64;
            let placed = rows.iter().map(|((_, position), t)| {
                (t.message.message_id.as_str(), *position, Place::Timer { due_ms: t.due_ms })
            });
            self.inner.message_index.put(placed)?;
        }
        let mut from = 0;
        loop {
            let rows = self.state().data.halves.range_from(&from, INDEX_CHUNK).map_err(disk)?;
            let Some((last, _)) = rows.last() else { break };
            from = last + 1;
            count += rows.len() as u64;
            self.inner.message_index.put(rows.iter().map(|(p, h)| (h.message.message_id.as_str(), *p, Place::Half)))?;
        }
        Ok(count)
    }
}

impl HeldEntry {
    pub(crate) fn timer(
        partition: PartitionId,
        key: crate::broker::timer::TimerKey,
        t: crate::broker::timer::Timer,
    ) -> HeldEntry {
        HeldEntry {
            handle: recall_handle(partition, t.due_ms, key.1),
            at_ms: t.due_ms,
            message: t.message,
            kind: "timer".into(),
            state: None,
            checks: 0,
        }
    }

    pub(crate) fn half(partition: PartitionId, position: u64, h: crate::broker::transaction::Half) -> HeldEntry {
        HeldEntry {
            kind: "half".into(),
            at_ms: h.next_check_ms,
            handle: transaction_id(partition, position),
            state: Some(h.state),
            checks: h.checks,
            message: h.message,
        }
    }
}

fn disk(e: sled::Error) -> BrokerError {
    BrokerError::CorruptEntry(format!("reading broker state: {e}"))
}
