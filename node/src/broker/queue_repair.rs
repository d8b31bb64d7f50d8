//! ConsumeQueue records that rotted on disk are rebuilt from this node's own log.
//!
//! A queue record is written at apply, from the send (or timer, or dead letter) it records; the
//! message index holds the same message's position with its queue offset. A record whose
//! checksum fails is therefore rebuilt from the newest index entry at its offset whose message,
//! read back from the log, was stored in that topic and queue: its position, its length and its
//! tag. The record is written back in place and counted and noted as a repair. A record that
//! cannot be rebuilt (its index entry rotted too) stays an error naming the file and byte: it is
//! never followed to another message.

use std::sync::atomic::{AtomicI64, Ordering};

use prost::Message;
use rockraft_proto::rockraft::StoredMessage;

use crate::broker::read::message_in;
use crate::broker::{Broker, BrokerError, SendBatchQueues, split_position};
use crate::metrics::{RepairNote, Repaired};
use crate::store::{ConsumeQueue, CqRecord, StoreError, tag_hash};

/// Index entries looked at for one offset at most (every queue has a message at low offsets).
const MAX_CANDIDATES: usize = 4096;
/// At most one line per this many milliseconds for records that cannot be rebuilt.
const UNREBUILT_LOG_EVERY_MS: i64 = 10_000;
static LAST_UNREBUILT_LOG_MS: AtomicI64 = AtomicI64::new(i64::MIN);
/// Records remembered as not rebuildable, at most: their next reads fail at once instead of
/// scanning the whole message index again (and counting the same damage again).
pub(crate) const MAX_UNREBUILT: usize = 4096;

impl Broker {
    /// The record at `offset` of (`topic`, `queue_id`), rebuilt first if it rotted.
    pub(crate) fn queue_record_in(
        &self,
        queue: &ConsumeQueue,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<Option<CqRecord>, BrokerError> {
        match queue.get(offset) {
            Err(damaged @ StoreError::DamagedQueueRecord { .. }) => {
                let key = (topic.to_string(), queue_id, offset);
                if self.inner.unrebuilt.lock().expect("unrebuilt lock").contains(&key) {
                    return Err(damaged.into());
                }
                let rebuilt = self.rebuild_queue_record(queue, topic, queue_id, offset, damaged);
                if rebuilt.is_err() {
                    let mut unrebuilt = self.inner.unrebuilt.lock().expect("unrebuilt lock");
                    if unrebuilt.len() < MAX_UNREBUILT {
                        unrebuilt.insert(key);
                    }
                }
                rebuilt.map(Some)
            }
            read => Ok(read?),
        }
    }

    fn rebuild_queue_record(
        &self,
        queue: &ConsumeQueue,
        topic: &str,
        queue_id: u32,
        offset: u64,
        damaged: StoreError,
    ) -> Result<CqRecord, BrokerError> {
        let began_ms = crate::simulation::system_ms();
        if let Some(meters) = self.inner.meters.get() {
            meters.corruption_found(1);
        }
        let place = damaged.to_string();
        for position in self.inner.message_index.queued_at(offset, MAX_CANDIDATES) {
            let Some(record) = self.record_of(topic, queue_id, position) else { continue };
            queue.put(offset, &[record])?;
            tracing::warn!(topic, queue_id, offset, %place, "a damaged consume queue record was rebuilt from the log");
            if let Some(meters) = self.inner.meters.get() {
                meters.corruption_repaired(RepairNote {
                    group: self.partition().0,
                    repaired: Repaired::QueueRecord,
                    first: offset,
                    last: offset,
                    source: None,
                    place: queue.path_of(offset).display().to_string(),
                    began_ms,
                    done_ms: crate::simulation::system_ms(),
                });
            }
            return Ok(record);
        }
        let now = crate::simulation::system_ms();
        let last = LAST_UNREBUILT_LOG_MS.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= UNREBUILT_LOG_EVERY_MS
            && LAST_UNREBUILT_LOG_MS.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::error!(topic, queue_id, offset, %place, "a damaged consume queue record could not be rebuilt");
        }
        Err(damaged.into())
    }

    /// The record of the message at `position`, if the log holds it and it was stored in
    /// (`topic`, `queue_id`).
    fn record_of(&self, topic: &str, queue_id: u32, position: u64) -> Option<CqRecord> {
        let (index, ordinal) = split_position(position);
        let batch = self.batch_at(index).ok()??;
        if batch.topic != topic || batch.queue_of(ordinal) != queue_id {
            return None;
        }
        let raw = message_in(&batch, index, ordinal).ok()?;
        let message = StoredMessage::decode(raw.clone()).ok()?;
        Some(CqRecord { position, size: raw.len() as u32, tag_hash: tag_hash(&message.tag) })
    }
}
