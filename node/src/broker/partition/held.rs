//! Holding messages in the partition: the log entries delayed messages and transactional halves
//! keep from retention, their per-topic counts, their delivery into their queue, and dropping a
//! deleted topic's.

use crate::broker::effects::{Effects, QueueWrite};
use crate::broker::held::{HeldCounts, HeldMessage};
use crate::broker::partition::Partition;
use crate::broker::split_position;
use crate::store::CqRecord;

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
