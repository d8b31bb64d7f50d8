//! What the services read from the broker: topics, queues, messages, groups and progress. Reads
//! see the state as this node has applied it; callers that need the leader's view catch up first.

use bytes::Bytes;
use prost::Message;
use std::sync::Arc;

use rockraft_proto::rockraft::{SendBatch, StoredMessage};
use serde::{Deserialize, Serialize};

use crate::broker::group::GroupConfig;
use crate::broker::message_view::MessageView;
use crate::broker::pop::{Receipt, queue_key};
use crate::broker::state::{LogPosition, MembershipRecord, QueueRange};
use crate::broker::topic::TopicConfig;
use crate::broker::{Broker, BrokerError, Command, split_position};
use crate::store::CqRecord;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStatus {
    pub topic: String,
    pub queue_id: u32,
    pub start: u64,
    pub next: u64,
}

/// The ConsumeQueue records of one queue up to a log index ([`Broker::queue_spans`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSpan {
    pub topic: String,
    pub queue_id: u32,
    pub start: u64,
    pub end: u64,
}

/// How far a group is on one topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupProgress {
    pub group: String,
    pub topic: String,
    /// Messages not acked yet: waiting, in flight or held back.
    pub lag: u64,
    pub inflight: u64,
}

/// What the operator's listings read of one data group's state: every queue's span, the messages
/// held per topic, and each consumer group's progress. A node that holds no replica of the group
/// asks one that does for them (`PeerService.Figures`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupFigures {
    pub queues: Vec<QueueStatus>,
    pub held: Vec<(String, crate::broker::held::HeldCounts)>,
    pub progress: Vec<GroupProgress>,
}

/// A message as stored, with where it sits.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEntry {
    pub topic: String,
    pub queue_id: u32,
    pub offset: u64,
    pub store_timestamp_ms: i64,
    /// Bytes of the encoded message (what the ConsumeQueue's size counts).
    pub size: u32,
    pub message: StoredMessage,
    /// The encoded message, as stored.
    pub raw: Bytes,
}

impl StoredEntry {
    /// The entry of a message `raw` (as stored) that another node read.
    pub fn decoded(
        topic: &str,
        queue_id: u32,
        offset: u64,
        store_timestamp_ms: i64,
        raw: Bytes,
    ) -> Result<Self, BrokerError> {
        let message = StoredMessage::decode(raw.clone()).map_err(|e| BrokerError::CorruptEntry(e.to_string()))?;
        Ok(Self::of(topic, queue_id, offset, store_timestamp_ms, message, raw))
    }

    /// An entry for a message that is not read from the log (a half being checked, a message
    /// to evaluate a plugin on): encoded here, so its view reads what `message` says.
    pub fn new(topic: &str, queue_id: u32, offset: u64, store_timestamp_ms: i64, message: StoredMessage) -> Self {
        let raw = Bytes::from(message.encode_to_vec());
        Self::of(topic, queue_id, offset, store_timestamp_ms, message, raw)
    }

    fn of(
        topic: &str,
        queue_id: u32,
        offset: u64,
        store_timestamp_ms: i64,
        message: StoredMessage,
        raw: Bytes,
    ) -> Self {
        let size = raw.len() as u32;
        StoredEntry { topic: topic.to_string(), queue_id, offset, store_timestamp_ms, size, message, raw }
    }

    /// The message read in place, as filters see it.
    pub fn view(&self) -> Result<StoredView<'_>, BrokerError> {
        Ok(StoredView {
            topic: &self.topic,
            queue_id: self.queue_id,
            offset: self.offset,
            store_timestamp_ms: self.store_timestamp_ms,
            message: MessageView::parse(&self.raw)?,
        })
    }
}

/// A stored message read in place, with where it sits: what filters look at.
#[derive(Debug, Clone, Copy)]
pub struct StoredView<'a> {
    pub topic: &'a str,
    pub queue_id: u32,
    pub offset: u64,
    pub store_timestamp_ms: i64,
    pub message: MessageView<'a>,
}

impl Broker {
    /// What this node's partition lacks of the metadata: the placement a leader proposes.
    /// The placement that brings this replica's partition up to its own metadata.
    pub fn placement(&self) -> crate::broker::partition::Placement {
        let state = self.state();
        let mut changes = state.meta.placement_for(&state.data);
        self.name_holder(&state.data, &mut changes);
        crate::broker::partition::Placement { changes, through: state.last_applied.map(|p| p.index) }
    }

    /// The placement that brings this replica's partition (a data group's) up to `metadata`'s
    /// (the metadata's replica on this node; this replica's own if it holds the metadata).
    pub fn placement_from(&self, metadata: &Broker) -> crate::broker::partition::Placement {
        if std::sync::Arc::ptr_eq(&self.inner, &metadata.inner) {
            return self.placement();
        }
        let meta = metadata.state();
        let state = self.state();
        let mut changes = meta.meta.placement_for(&state.data);
        self.name_holder(&state.data, &mut changes);
        crate::broker::partition::Placement { changes, through: meta.last_applied.map(|p| p.index) }
    }

    /// Adds to a placement for this replica's partition which data group it is, until it knows.
    fn name_holder(
        &self,
        partition: &crate::broker::partition::Partition,
        changes: &mut Vec<crate::broker::placement::PlacementChange>,
    ) {
        let id = self.partition();
        if id != crate::broker::position::PartitionId::NONE && partition.holder != Some(id.0) {
            changes.push(crate::broker::placement::PlacementChange::Holder(id.0));
        }
    }

    pub fn last_applied(&self) -> Option<LogPosition> {
        self.state().last_applied
    }

    /// The last membership entry applied, for the Raft layer.
    pub fn membership(&self) -> Option<MembershipRecord> {
        self.state().membership.clone()
    }

    /// The cluster settings in force at the applied index.
    pub fn settings(&self) -> crate::broker::settings::ClusterSettings {
        self.state().meta.settings
    }

    /// The latest store time applied in `topic`'s `queue_id`: a leader stores nothing there
    /// earlier than this.
    pub fn store_floor_ms(&self, topic: &str, queue_id: u32) -> i64 {
        self.range(topic, queue_id).last_store_ms
    }

    /// A digest of the replicated state and the index it is at: replicas at the same index must
    /// report the same digest (`rockraft cluster verify`). The state is checkpointed, then read
    /// back from disk while checkpoints wait: the digest reads every row, and apply never waits
    /// for that. What is compared is therefore also what a crash would recover.
    pub fn digest(&self) -> Result<(Option<u64>, u64), BrokerError> {
        self.checkpoint()?;
        let _no_checkpoint = self.inner.journal.lock().expect("journal lock");
        let state = self.read_checkpoint()?;
        let digest =
            state.digest().map_err(|e| BrokerError::CorruptEntry(format!("reading the state for its digest: {e}")))?;
        Ok((state.last_applied.map(|l| l.index), digest))
    }

    /// The digest of the state in memory, under its lock (tests compare it across restarts).
    #[cfg(test)]
    pub fn live_digest(&self) -> Result<(Option<u64>, u64), BrokerError> {
        let state = self.state();
        let digest =
            state.digest().map_err(|e| BrokerError::CorruptEntry(format!("reading the state for its digest: {e}")))?;
        Ok((state.last_applied.map(|l| l.index), digest))
    }

    /// Whether this state holds the cluster's metadata (`BrokerOptions::holds_metadata`). A
    /// data group's holds only what placements copied into its partition: its reads of topics
    /// and consumer groups answer from those copies.
    pub fn holds_metadata(&self) -> bool {
        self.inner.options.holds_metadata
    }

    /// Whether this state holds queues: every data group's does, the metadata group's not.
    pub fn holds_queues(&self) -> bool {
        self.partition() != crate::broker::position::PartitionId::NONE
    }

    pub fn topic(&self, name: &str) -> Option<TopicConfig> {
        let state = self.state();
        let topics = if self.holds_metadata() { &state.meta.topics } else { &state.data.topics };
        topics.get(&name.to_string()).cloned()
    }

    /// Reads the users and access rules as this node has applied them (a short read lock: the
    /// caller only looks up a user or a rule).
    pub fn access<R>(&self, read: impl FnOnce(&crate::broker::access::AccessTables) -> R) -> R {
        read(&self.state().meta.access)
    }

    pub fn topics(&self) -> Vec<TopicConfig> {
        let state = self.state();
        let topics = if self.holds_metadata() { &state.meta.topics } else { &state.data.topics };
        topics.values().cloned().collect()
    }

    /// The offsets (`topic`, `queue_id`) holds on this replica: the first and the next.
    pub fn queue_range(&self, topic: &str, queue_id: u32) -> (u64, u64) {
        let r = self.range(topic, queue_id);
        (r.start, r.next)
    }

    fn range(&self, topic: &str, queue_id: u32) -> QueueRange {
        self.state().data.queues.get(&(topic.to_string(), queue_id)).copied().unwrap_or_default()
    }

    pub fn queue_status(&self, topic: &str) -> Vec<QueueStatus> {
        let Some(t) = self.topic(topic) else { return Vec::new() };
        let state = self.state();
        (0..t.queues)
            .map(|q| {
                let r = state.data.queues.get(&(topic.to_string(), q)).copied().unwrap_or_default();
                QueueStatus { topic: topic.to_string(), queue_id: q, start: r.start, next: r.next }
            })
            .collect()
    }

    /// The message at `offset` of (`topic`, `queue_id`), read from the log without copying the body.
    pub fn read(&self, topic: &str, queue_id: u32, offset: u64) -> Result<Option<StoredEntry>, BrokerError> {
        let range = self.range(topic, queue_id);
        if offset < range.start || offset >= range.next {
            return Ok(None);
        }
        let queue = self.inner.queues.get(topic, queue_id)?;
        let Some(record) = self.queue_record_in(&queue, topic, queue_id, offset)? else { return Ok(None) };
        self.entry_of(topic, queue_id, offset, &record)
    }

    /// The message `record` (the ConsumeQueue record at `offset`) points at.
    pub(crate) fn entry_of(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
        record: &CqRecord,
    ) -> Result<Option<StoredEntry>, BrokerError> {
        let (index, ordinal) = split_position(record.position);
        let Some(batch) = self.batch_at(index)? else { return Ok(None) };
        let raw = message_in(&batch, index, ordinal)?;
        StoredEntry::decoded(topic, queue_id, offset, batch.store_timestamp_ms, raw.clone()).map(Some)
    }

    /// The messages stored by the entry at `index` (a send or a dead letter), or `None` if the log
    /// no longer holds it; an entry that stores no messages is corrupt for the caller, which
    /// followed a record to it. Decoded once per entry (see `entry_cache.rs`).
    pub(crate) fn batch_at(&self, index: u64) -> Result<Option<Arc<SendBatch>>, BrokerError> {
        if let Some(batch) = self.inner.entries.get(index) {
            return Ok(Some(batch));
        }
        let Some(entry) = self.inner.log.read(index)? else { return Ok(None) };
        let batch = self
            .inner
            .entries
            .insert(index, &entry.payload, |payload| Command::decode(payload).ok().and_then(Command::stored_batch));
        // A purge between the read and the insert has already released what it purged.
        let first_index = self.inner.log.bounds().first_index;
        if index < first_index {
            self.inner.entries.release_below(first_index);
        }
        match batch {
            Some(batch) => Ok(Some(batch)),
            None => Err(BrokerError::CorruptEntry(format!("entry {index} stores no messages"))),
        }
    }

    /// Every queue's ConsumeQueue records that entries up to log index `upto` wrote: the first
    /// offset this node still holds and the first offset written after `upto`. Replicas that
    /// applied past `upto` agree on `end`; `start` is each node's own retention.
    pub fn queue_spans(&self, upto: u64) -> Result<Vec<QueueSpan>, BrokerError> {
        let queues: Vec<((String, u32), QueueRange)> =
            self.state().data.queues.iter().map(|(k, r)| (k.clone(), *r)).collect();
        let mut spans = Vec::with_capacity(queues.len());
        for ((topic, queue_id), range) in queues {
            // Records are in log order: the first one past `upto`, by bisection.
            let (mut low, mut high) = (range.start, range.next.max(range.start));
            while low < high {
                let mid = low + (high - low) / 2;
                let queue = self.inner.queues.get(&topic, queue_id)?;
                let record = self.queue_record_in(&queue, &topic, queue_id, mid)?.ok_or_else(|| {
                    BrokerError::CorruptEntry(format!("{topic}/{queue_id} has no record at offset {mid}"))
                })?;
                if split_position(record.position).0 <= upto { low = mid + 1 } else { high = mid }
            }
            spans.push(QueueSpan { topic, queue_id, start: range.start, end: low });
        }
        Ok(spans)
    }

    /// A checksum of the ConsumeQueue record at each offset of `from..to` and of the message it
    /// points at, folded `chunk` offsets at a time (the last chunk may be shorter).
    pub fn queue_checksums(
        &self,
        topic: &str,
        queue_id: u32,
        from: u64,
        to: u64,
        chunk: u64,
    ) -> Result<Vec<u32>, BrokerError> {
        let chunk = chunk.max(1);
        let mut sums = Vec::with_capacity(to.saturating_sub(from).div_ceil(chunk) as usize);
        let mut offset = from;
        while offset < to {
            let mut sum = 0u32;
            for o in offset..to.min(offset.saturating_add(chunk)) {
                let unreadable = || BrokerError::CorruptEntry(format!("{topic}/{queue_id} offset {o} is not readable"));
                let record = self.queue_record(topic, queue_id, o)?.ok_or_else(unreadable)?;
                let entry = self.read(topic, queue_id, o)?.ok_or_else(unreadable)?;
                // The record without its own checksum: a CRC over data followed by that data's
                // CRC is the same for all data, and would hide a record that differs.
                sum = crc32c::crc32c_append(sum, &record.encode()[..crate::store::CQ_RECORD_LEN - 4]);
                sum = crc32c::crc32c_append(sum, &entry.raw);
            }
            sums.push(sum);
            offset = offset.saturating_add(chunk);
        }
        Ok(sums)
    }

    /// The failover history, newest first.
    pub fn failovers(&self) -> Vec<crate::broker::failover::Failover> {
        let mut history: Vec<_> = self.state().meta.failovers.values().cloned().collect();
        history.reverse();
        history
    }

    /// The repair history, newest first.
    pub fn repairs(&self) -> Vec<crate::broker::repair::Repair> {
        let mut history: Vec<_> = self.state().meta.repairs.values().cloned().collect();
        history.sort_by_key(|r| std::cmp::Reverse(r.done_ms));
        history
    }

    /// The ConsumeQueue record at `offset`, if it is readable.
    pub fn queue_record(&self, topic: &str, queue_id: u32, offset: u64) -> Result<Option<CqRecord>, BrokerError> {
        let range = self.range(topic, queue_id);
        if offset < range.start || offset >= range.next {
            return Ok(None);
        }
        let queue = self.inner.queues.get(topic, queue_id)?;
        self.queue_record_in(&queue, topic, queue_id, offset)
    }

    /// Whether `r` names a delivery that is in flight now.
    pub fn is_current(&self, r: &Receipt) -> bool {
        let state = self.state();
        let q = queue_key(r).and_then(|key| state.data.consumption.queues.get(&key));
        q.and_then(|q| q.inflight.get(&r.offset)).is_some_and(|f| f.named_by(r.generation))
    }

    /// The deliveries of the receive of `group` on `topic` with `attempt_id` that are still in
    /// flight and invisible at `now_ms`.
    pub fn deliveries_of_attempt(
        &self,
        group: &str,
        topic: &str,
        attempt_id: &str,
        now_ms: i64,
    ) -> Vec<crate::broker::pop::Delivery> {
        self.state().data.consumption.deliveries_of_attempt(group, topic, attempt_id, now_ms)
    }

    /// Which incarnation of a topic exists: the index of the entry that created it.
    pub fn topic_epoch(&self, name: &str) -> Option<u64> {
        self.state().data.consumption.topics.get(&name.to_string()).copied()
    }

    pub fn group(&self, name: &str) -> Option<GroupConfig> {
        let state = self.state();
        let groups = if self.holds_metadata() { &state.meta.groups } else { &state.data.consumption.groups };
        groups.get(&name.to_string()).cloned()
    }

    pub fn groups(&self) -> Vec<GroupConfig> {
        let state = self.state();
        let groups = if self.holds_metadata() { &state.meta.groups } else { &state.data.consumption.groups };
        groups.values().cloned().collect()
    }

    /// This group's figures for the operator's listings.
    pub fn figures(&self) -> GroupFigures {
        GroupFigures {
            queues: self.topics().iter().flat_map(|t| self.queue_status(&t.name)).collect(),
            held: self.held_counts(),
            progress: self.group_progress(),
        }
    }

    /// Each group's progress on each topic it has consumed.
    pub fn group_progress(&self) -> Vec<GroupProgress> {
        let state = self.state();
        let mut out: Vec<GroupProgress> = Vec::new();
        for ((group, topic, q), pop) in state.data.consumption.queues.iter() {
            let range = state.data.queues.get(&(topic.clone(), *q)).copied().unwrap_or_default();
            let waiting = range.next.saturating_sub(pop.position.max(range.start));
            let inflight = pop.inflight.len() as u64;
            let held = pop.held.len() as u64;
            match out.last_mut() {
                Some(p) if p.group == *group && p.topic == *topic => {
                    p.lag += waiting + inflight + held;
                    p.inflight += inflight;
                }
                _ => out.push(GroupProgress {
                    group: group.clone(),
                    topic: topic.clone(),
                    lag: waiting + inflight + held,
                    inflight,
                }),
            }
        }
        out
    }

    /// Where `group` stands on (`topic`, `queue_id`): the next offset it takes (a pull consumer's
    /// commit, a POP consumer's position). `None` if it has never consumed there.
    pub fn consumer_offset(&self, group: &str, topic: &str, queue_id: u32) -> Option<u64> {
        let state = self.state();
        state.data.consumption.queues.get(&(group.to_string(), topic.to_string(), queue_id)).map(|q| q.position)
    }

    /// The first offset of (`topic`, `queue_id`) stored at or after `time_ms` (the queue's end
    /// if none): store times never go back along a queue (the leader holds them at
    /// the queue's latest, see `QueueRange::last_store_ms`), so a binary search finds it.
    pub fn offset_at_time(&self, topic: &str, queue_id: u32, time_ms: i64) -> Result<u64, BrokerError> {
        let range = self.range(topic, queue_id);
        let (mut lo, mut hi) = (range.start, range.next);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.read(topic, queue_id, mid)? {
                Some(e) if e.store_timestamp_ms < time_ms => lo = mid + 1,
                _ => hi = mid,
            }
        }
        Ok(lo)
    }
}

/// The encoded message at `ordinal` of the batch stored by the entry at `index`, which a record
/// points at: missing, the entry is corrupt.
pub(crate) fn message_in(batch: &SendBatch, index: u64, ordinal: usize) -> Result<&Bytes, BrokerError> {
    batch
        .messages
        .get(ordinal)
        .ok_or_else(|| BrokerError::CorruptEntry(format!("entry {index} has no message {ordinal}")))
}
