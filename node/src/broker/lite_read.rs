//! Reads of lite topics on this node: planning a lite receive, reading a delivered message,
//! listings, and what the expiry job proposes.

use prost::Message as _;
use rockraft_proto::rockraft::{DeadLetter, StoredMessage};

use crate::broker::delivery::{ChannelId, Receipt};
use crate::broker::lite::{LiteActor, LiteName, LitePlan, LiteRequest, LiteTopicInfo};
use crate::broker::pop_plan::{dead_letter, dead_letter_copy};
use crate::broker::read::message_in;
use crate::broker::{Broker, BrokerError, SendBatchQueues, StoredEntry, split_position};

/// A lite topic's name and id.
pub type NamedLite = (String, u64);

fn disk(e: sled::Error) -> BrokerError {
    BrokerError::Meta(e)
}

impl Broker {
    /// Plans a lite receive from this node's state (the leader's).
    pub fn plan_lite_pop(&self, r: &LiteRequest) -> Result<LitePlan, BrokerError> {
        let first_index = self.inner.log.bounds().first_index;
        let gone = |position: u64| split_position(position).0 < first_index;
        self.state().data.lite.plan_pop(r, &gone).map_err(disk)
    }

    /// The message at `offset` of lite topic `lite` (id `id`) of `parent`, if this node holds it.
    pub fn read_lite(
        &self,
        parent: &str,
        lite: &str,
        id: u64,
        offset: u64,
    ) -> Result<Option<StoredEntry>, BrokerError> {
        let position = {
            let state = self.state();
            // Gone, or expired and created again since: not the lite topic the delivery was of.
            let Some(row) = state.data.lite.topic(parent, lite).map_err(disk)?.filter(|r| r.id == id) else {
                return Ok(None);
            };
            state.data.lite.record(&row, offset).map_err(disk)?
        };
        let Some(position) = position else { return Ok(None) };
        let (index, ordinal) = split_position(position);
        let Some(batch) = self.batch_at(index)? else { return Ok(None) };
        let raw = message_in(&batch, index, ordinal)?;
        let message = StoredMessage::decode(raw.clone()).map_err(|e| BrokerError::CorruptEntry(e.to_string()))?;
        Ok(Some(StoredEntry {
            topic: parent.to_string(),
            queue_id: batch.queue_of(ordinal),
            offset,
            store_timestamp_ms: batch.store_timestamp_ms,
            size: raw.len() as u32,
            message,
            raw: raw.clone(),
        }))
    }

    /// The lite topics of `parent` from `from` on, with `group`'s backlog.
    pub fn lite_topics(
        &self,
        parent: &str,
        group: Option<&str>,
        from: &str,
        limit: usize,
    ) -> Result<Vec<LiteTopicInfo>, BrokerError> {
        let rows = self.state().data.lite.listing(parent, group, from, limit).map_err(disk)?;
        Ok(rows
            .into_iter()
            .map(|(lite, row, backlog, inflight)| LiteTopicInfo {
                lite,
                messages: row.next,
                last_write_ms: row.last_write_ms,
                backlog,
                inflight,
            })
            .collect())
    }

    /// The id of lite topic `lite` of `parent`, if it exists.
    pub fn lite_id(&self, parent: &str, lite: &str) -> Option<u64> {
        self.state().data.lite.topic(parent, lite).ok().flatten().map(|t| t.id)
    }

    /// Why `by` may not act as `client` of `group` (its subscriptions are another user's), if so.
    pub fn lite_not_owner(&self, group: &str, client: &str, by: &LiteActor) -> Option<String> {
        self.state().data.lite.not_owner(group, client, by)
    }

    /// The user that owns the lite subscriptions of `client` of `group`, if anyone does.
    pub fn lite_owner(&self, group: &str, client: &str) -> Option<String> {
        let key = (group.to_string(), client.to_string());
        self.state().data.lite.subscriptions.get(&key).and_then(|s| s.owner.clone())
    }

    /// The lite topics `client` of `group` subscribes to.
    pub fn lite_subscription(&self, group: &str, client: &str) -> Vec<String> {
        let state = self.state();
        let key = (group.to_string(), client.to_string());
        state.data.lite.subscriptions.get(&key).map(|s| s.lites.iter().cloned().collect()).unwrap_or_default()
    }

    /// (group, client) of every lite subscription not synced since `before_ms`.
    pub fn silent_lite_clients(&self, before_ms: i64) -> Vec<(String, String)> {
        let state = self.state();
        state.data.lite.subscriptions.iter().filter(|(_, s)| s.synced_ms < before_ms).map(|(k, _)| k.clone()).collect()
    }

    /// Lite topics of `parent` last written before `before_ms`, from `after` on: (name, id), at
    /// most `limit` looked at. Also where the next look starts (`None`: the end was reached).
    pub fn expired_lite_topics(
        &self,
        parent: &str,
        after: &str,
        before_ms: i64,
        limit: usize,
    ) -> Result<(Vec<NamedLite>, Option<String>), BrokerError> {
        let from = LiteName { parent: parent.to_string(), lite: after.to_string() };
        let rows = self.state().data.lite.topics.range_while(&from, limit, |k| k.parent == parent).map_err(disk)?;
        let next = (rows.len() == limit).then(|| rows.last().map(|(k, _)| format!("{}\u{1}", k.lite))).flatten();
        let expired = rows
            .into_iter()
            .filter(|(_, row)| row.last_write_ms < before_ms)
            .map(|(k, row)| (k.lite, row.id))
            .collect();
        Ok((expired, next))
    }

    /// The dead letter for a lite delivery (of lite topic `lite`) that used its last attempt:
    /// it ends the delivery and copies the message to the group's dead-letter topic (no copy if
    /// the log no longer has it).
    pub fn lite_dead_letter_of(&self, lite: &str, r: &Receipt, now_ms: i64) -> Result<DeadLetter, BrokerError> {
        let ChannelId::Lite(id) = r.channel else {
            return Err(BrokerError::BadRequest("the receipt names a queue, not a lite topic".into()));
        };
        let entry = self.read_lite(&r.topic, lite, id, r.offset)?;
        Ok(dead_letter(r, entry.map(|e| dead_letter_copy(&r.group, e.raw, now_ms))))
    }
}
