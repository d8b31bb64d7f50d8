//! PULL_MESSAGE: messages of one queue from an offset, read from this node's replica of the
//! queue's data group (the reads POP planning does), filtered by the same tag and SQL92 plugins,
//! in the stored-message layout. A pull that finds nothing is held (long polling) while the client
//! asked for it (sysFlag bit 1), until a message arrives or its time is up; the C++ client pulls
//! again at once after every answer.

use std::time::Duration;

use bytes::BytesMut;

use crate::auth::Caller;
use crate::broker::access::{Action, ResourceKind};
use crate::broker::{Broker, BrokerError, MessageFilter, StoredEntry};
use crate::plugin::subscription::{FilterKind, Subscription};
use crate::remoting::codes::*;
use crate::remoting::frame::Frame;
use crate::remoting::message::{self, Placed};
use crate::remoting::{Remoting, number};

/// sysFlag bits of a pull.
const COMMIT_OFFSET: i32 = 1;
const SUSPEND: i32 = 2;
const SUBSCRIPTION: i32 = 4;

/// Most messages one pull answers (the clients ask 32).
pub const MAX_PULL_MESSAGES: usize = 256;
/// Most queue records one pull looks at: a sparse filter answers PULL_RETRY_IMMEDIATELY with the
/// offset it reached rather than scanning a long queue in one request.
const MAX_SCAN: u64 = 4096;
/// Most body bytes one pull answers (at least one message, whatever its size).
const MAX_PULL_BYTES: usize = 4 << 20;

/// What a pull asks.
#[derive(Debug, Clone)]
pub struct PullHeader {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    pub offset: u64,
    pub max: usize,
    pub sys_flag: i32,
    pub commit_offset: i64,
    pub suspend: Duration,
    pub subscription: Option<(FilterKind, String)>,
}

impl PullHeader {
    pub fn of(request: &Frame) -> Result<PullHeader, &'static str> {
        let text = |k: &str| request.field(k).unwrap_or_default().to_string();
        let sys_flag = number(request, "sysFlag").unwrap_or(0);
        let kind = match request.field("expressionType") {
            Some(t) if t.eq_ignore_ascii_case("SQL92") => FilterKind::Sql92,
            _ => FilterKind::Tag,
        };
        Ok(PullHeader {
            group: text("consumerGroup"),
            topic: text("topic"),
            queue_id: number(request, "queueId").ok_or("pull without a valid queueId")?,
            offset: number::<i64>(request, "queueOffset").ok_or("pull without a valid queueOffset")?.max(0) as u64,
            max: number::<usize>(request, "maxMsgNums").unwrap_or(32).clamp(1, MAX_PULL_MESSAGES),
            sys_flag,
            commit_offset: number(request, "commitOffset").unwrap_or(-1),
            suspend: Duration::from_millis(number(request, "suspendTimeoutMillis").unwrap_or(15_000)),
            subscription: (sys_flag & SUBSCRIPTION != 0).then(|| (kind, text("subscription"))),
        })
    }
}

/// What one look at the queue found.
enum Found {
    /// Messages, encoded, and the offset after the last record looked at.
    Messages { body: BytesMut, next: u64 },
    /// Records looked at, none passed the filter: the offset after them.
    NoneMatched { next: u64 },
    /// Nothing at or after the offset yet.
    Nothing,
    /// The offset is outside the queue: where to go.
    Moved { to: u64 },
}

impl Remoting {
    pub(super) async fn pull(&self, request: &Frame, caller: &Caller, connection: u64) -> Frame {
        let header = match PullHeader::of(request) {
            Ok(h) => h,
            Err(why) => return Frame::answer(request, SYSTEM_ERROR).with_remark(why),
        };
        let (topic_name, group) = (header.topic.as_str(), header.group.as_str());
        let needs = [(Action::Sub, ResourceKind::Topic, topic_name), (Action::Sub, ResourceKind::Group, group)];
        if let Some(refused) = self.refused(request, caller, &needs) {
            return refused;
        }
        let Some(topic) = self.proxy.topic(topic_name).await else {
            return Frame::answer(request, TOPIC_NOT_EXIST).with_remark(format!("topic {topic_name} does not exist"));
        };
        if self.proxy.metadata().group(group).is_none() {
            return Frame::answer(request, SUBSCRIPTION_GROUP_NOT_EXIST)
                .with_remark(format!("consumer group {group} does not exist"));
        }
        if header.queue_id >= topic.queues {
            return Frame::answer(request, SYSTEM_ERROR).with_remark(format!(
                "queueId {} is illegal: topic {topic_name} has {} queues",
                header.queue_id, topic.queues
            ));
        }
        let cluster = match self.proxy.groups().of_queue(&topic, header.queue_id) {
            Ok(c) if c.holds_replica() => c,
            Ok(_) => {
                return Frame::answer(request, SERVICE_NOT_AVAILABLE)
                    .with_remark("this node holds no replica of that queue: pull through one that does");
            }
            Err(e) => return Frame::answer(request, SERVICE_NOT_AVAILABLE).with_remark(e.to_string()),
        };
        if header.sys_flag & COMMIT_OFFSET != 0 && header.commit_offset >= 0 {
            // A failed commit is the client's to repeat: it commits every queue every 5 s.
            let _ = self.commit(&cluster, group, topic_name, header.queue_id, header.commit_offset as u64).await;
        }
        let (kind, expression) = match &header.subscription {
            Some(s) => s.clone(),
            None => self
                .clients
                .subscription(connection, group, topic_name)
                .map_or((FilterKind::Tag, "*".to_string()), |s| (s.kind, s.expression)),
        };
        let plugins = self.proxy.plugins();
        let metadata = self.proxy.metadata();
        let filter = crate::plugin::blocking(|| {
            Subscription::compile(plugins, kind, &expression)
                .and_then(|s| s.with_group_filter(plugins, metadata, group))
        });
        let filter = match filter {
            Ok(f) => f,
            Err(e) => return Frame::answer(request, SUBSCRIPTION_PARSE_FAILED).with_remark(e.to_string()),
        };
        let broker = cluster.broker();
        let hold = match header.sys_flag & SUSPEND != 0 {
            true => header.suspend.min(self.options.max_long_poll),
            false => Duration::ZERO,
        };
        let deadline = tokio::time::Instant::now() + hold;
        loop {
            // Watched before looking, so a message stored in between wakes the wait.
            let mut changes = broker.watch(topic_name);
            let found = self.look(broker, &header, &filter);
            let (start, end) = broker.queue_range(topic_name, header.queue_id);
            let answer = |code: i32, next: u64| {
                Frame::answer(request, code)
                    .with("nextBeginOffset", next)
                    .with("minOffset", start)
                    .with("maxOffset", end)
                    .with("suggestWhichBrokerId", 0)
            };
            match found {
                Ok(Found::Messages { body, next }) => return answer(SUCCESS, next).with_body(body.freeze()),
                Ok(Found::NoneMatched { next }) => return answer(PULL_RETRY_IMMEDIATELY, next),
                Ok(Found::Moved { to }) => return answer(PULL_OFFSET_MOVED, to),
                Ok(Found::Nothing) => {}
                Err(e) => {
                    if self.log_limit.allow() {
                        tracing::warn!(topic = topic_name, queue = header.queue_id, error = %e, "Remoting pull could not read");
                    }
                    return Frame::answer(request, SYSTEM_ERROR).with_remark(e.to_string());
                }
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() || tokio::time::timeout(left, changes.changed()).await.is_err() {
                return answer(PULL_NOT_FOUND, header.offset);
            }
        }
    }

    /// Reads what the pull may take now: matching messages up to its count and byte bounds.
    fn look(&self, broker: &Broker, header: &PullHeader, filter: &Subscription) -> Result<Found, BrokerError> {
        let (topic, queue) = (header.topic.as_str(), header.queue_id);
        let (start, end) = broker.queue_range(topic, queue);
        if header.offset < start || header.offset > end {
            return Ok(Found::Moved { to: if header.offset < start { start } else { end } });
        }
        if header.offset == end {
            return Ok(Found::Nothing);
        }
        let stop = end.min(header.offset + MAX_SCAN);
        let mut candidates: Vec<(StoredEntry, u64)> = Vec::new();
        let mut bytes = 0usize;
        let mut next = header.offset;
        while next < stop && candidates.len() < header.max && bytes < MAX_PULL_BYTES {
            let at = next;
            next += 1;
            let Some(record) = broker.queue_record(topic, queue, at)? else { continue };
            if !filter.may_match(record.tag_hash) {
                continue;
            }
            let Some(entry) = broker.entry_of(topic, queue, at, &record)? else { continue };
            bytes += entry.size as usize;
            candidates.push((entry, record.position));
        }
        let passed = match filter.reads_messages() {
            false => vec![true; candidates.len()],
            true => {
                let views = candidates.iter().map(|(e, _)| e.view()).collect::<Result<Vec<_>, _>>()?;
                crate::plugin::blocking(|| filter.passes(&views, crate::cluster::now_ms()))
            }
        };
        let partition = broker.partition();
        let mut body = BytesMut::new();
        let mut taken = 0;
        for ((entry, position), pass) in candidates.iter().zip(passed) {
            let Some(physical) = message::physical_offset(partition, *position) else { continue };
            let at = Placed {
                topic,
                queue_id: queue,
                queue_offset: entry.offset,
                physical_offset: physical,
                store_timestamp_ms: entry.store_timestamp_ms,
                store_host: self.options.advertised,
            };
            if pass && message::encode_stored(&mut body, &entry.message, &at).is_some() {
                taken += 1;
            }
        }
        Ok(match taken {
            0 => Found::NoneMatched { next },
            _ => Found::Messages { body, next },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_cpp_push_and_python_pull_headers_are_read() {
        let push = Frame::request(PULL_MESSAGE, 1, BTreeMap::new())
            .with("consumerGroup", "CID")
            .with("topic", "T")
            .with("queueId", 1)
            .with("queueOffset", "5")
            .with("maxMsgNums", 32)
            .with("sysFlag", 7)
            .with("commitOffset", "4")
            .with("suspendTimeoutMillis", "15000")
            .with("subscription", "TagA || TagB");
        let h = PullHeader::of(&push).unwrap();
        assert_eq!((h.queue_id, h.offset, h.max, h.commit_offset), (1, 5, 32, 4));
        assert_eq!(h.suspend, Duration::from_secs(15));
        assert_eq!(h.subscription, Some((FilterKind::Tag, "TagA || TagB".to_string())));
        let go = push.clone().with("sysFlag", 3).with("maxMsgNums", 100_000);
        let h = PullHeader::of(&go).unwrap();
        assert_eq!(h.subscription, None, "no subscription bit: the heartbeat's is used");
        assert_eq!(h.max, MAX_PULL_MESSAGES);
        let sql = push.clone().with("expressionType", "SQL92").with("subscription", "a > 1");
        assert_eq!(PullHeader::of(&sql).unwrap().subscription, Some((FilterKind::Sql92, "a > 1".into())));
        let mut broken = push;
        broken.ext.insert("queueId".into(), "x".into());
        assert!(PullHeader::of(&broken).is_err());
    }
}
