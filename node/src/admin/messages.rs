//! Messages by queue offset and by id; delayed messages and transactional halves.

use crate::admin::AdminServer;
use crate::admin::api::MessageLine;
use crate::admin::error::AdminError;
use crate::broker::HeldEntry;
use crate::broker::timer::parse_recall_handle;
use crate::broker::transaction::{Resolver, TransactionCommand, parse_transaction_id};
use crate::broker::{Command, StoredEntry};
use crate::cluster::Cluster;

/// A message found by id: stored in a queue, or held (a pending timer or a half).
pub(super) enum Found {
    Stored(MessageLine),
    Held(HeldEntry),
}

fn line(e: StoredEntry) -> MessageLine {
    MessageLine {
        topic: e.topic,
        queue: e.queue_id,
        offset: e.offset,
        message_id: e.message.message_id,
        tag: e.message.tag,
        keys: e.message.keys,
        body_len: e.message.body.len(),
        store_timestamp_ms: e.store_timestamp_ms,
    }
}

impl AdminServer {
    /// The data group whose copy of `topic`'s queue `queue` a listing reads: the group holding
    /// the queue, or, for a dead-letter topic (a copy in every data group), `data_group` (unset:
    /// group 1). `None` for a topic that does not exist.
    pub(super) fn listed_group(
        &self,
        topic: &str,
        queue: u32,
        data_group: Option<u32>,
    ) -> Result<Option<Cluster>, AdminError> {
        let Some(config) = self.parts.broker.topic(topic) else { return Ok(None) };
        if crate::broker::group::is_dead_letter_topic(topic) {
            return self.data_group(data_group.unwrap_or(1)).map(Some);
        }
        let holder = config.group_of(queue);
        match data_group {
            Some(asked) if asked != holder => Err(AdminError::invalid(format!(
                "queue {queue} of topic {topic} is in data group {holder}, not {asked}"
            ))),
            _ => Ok(Some(self.data().of_queue(&config, queue)?)),
        }
    }

    /// At most `limit` messages of a queue from offset `from` (purged offsets are skipped, not
    /// walked), as this node stores them in `group` (see [`Self::listed_group`]); and the offset
    /// to go on from, if the queue holds more.
    pub(super) fn list_messages(
        &self,
        group: &Cluster,
        topic: &str,
        queue: u32,
        from: u64,
        limit: usize,
    ) -> Result<(Vec<MessageLine>, Option<u64>), AdminError> {
        let broker = group.broker();
        let (start, end) = broker.queue_status(topic).get(queue as usize).map_or((0, 0), |q| (q.start, q.next));
        let mut out = Vec::new();
        let mut offset = from.max(start);
        while offset < end && out.len() < limit {
            if let Some(e) = broker.read(topic, queue, offset)? {
                out.push(line(e));
            }
            offset += 1;
        }
        Ok((out, (offset < end).then_some(offset)))
    }

    /// The message `id`, stored or held, in whichever of `groups` holds it.
    pub(super) fn get_message(&self, id: &str, groups: &[Cluster]) -> Result<Option<Found>, AdminError> {
        for group in groups {
            let broker = group.broker();
            if let Some(found) = broker.find(id)? {
                return Ok(Some(Found::Stored(line(found))));
            }
            // Not delivered (yet): a pending timer or a half.
            if let Some(held) = broker.find_held(id)? {
                return Ok(Some(Found::Held(held)));
            }
        }
        Ok(None)
    }

    /// Pending timers (`timers`) or halves (open ones unless `all`), after the one whose handle
    /// is `after`, at most `limit`: group by group, each in its own order (a handle names its
    /// group, so a page goes on in the group where the last one ended).
    pub(super) fn list_held(
        &self,
        timers: bool,
        topic: Option<&str>,
        all: bool,
        after: Option<&str>,
        limit: usize,
        groups: &[Cluster],
    ) -> Result<Vec<HeldEntry>, AdminError> {
        let after_in = match after {
            None => None,
            Some(h) => {
                let partition = match timers {
                    true => parse_recall_handle(h).map(|(p, _)| p),
                    false => parse_transaction_id(h).map(|(p, _)| p),
                };
                Some((partition.ok_or_else(|| AdminError::invalid(format!("{h:?} is not a handle")))?, h))
            }
        };
        let mut out = Vec::new();
        for group in groups {
            let broker = group.broker();
            let after = match after_in {
                Some((p, _)) if broker.partition() < p => continue,
                Some((p, h)) if broker.partition() == p => Some(h),
                _ => None,
            };
            out.extend(broker.held(timers, topic, all, after, limit - out.len())?);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Commits or rolls back a transactional half by message id, as an operator (a half the
    /// checker rolled back can still be committed while its message is kept).
    /// Looks in `groups` only.
    pub(super) async fn resolve_transaction(
        &self,
        message_id: String,
        commit: bool,
        groups: &[Cluster],
    ) -> Result<String, AdminError> {
        let mut found = None;
        for group in groups {
            if let Some(half) = group.broker().find_held(&message_id)?.filter(|h| h.kind == "half") {
                found = Some((group.clone(), half));
                break;
            }
        }
        let (group, half) =
            found.ok_or_else(|| AdminError::NotFound(format!("no transactional half with message id {message_id}")))?;
        let (_, position) = parse_transaction_id(&half.handle)
            .ok_or_else(|| AdminError::Fault(format!("bad transaction id {}", half.handle)))?;
        let command = TransactionCommand::Resolve {
            now_ms: 0,
            topic: half.message.topic,
            position,
            message_id,
            commit,
            by: Resolver::Operator,
        };
        self.write_in(&group, Command::Transaction(command)).await
    }
}
