//! Consumer offsets and queue bounds: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
//! GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), SEARCH_OFFSET_BY_TIMESTAMP (29),
//! GET_EARLIEST_MSG_STORETIME (32).
//!
//! A pull consumer's committed offset is its group's position on the queue, replicated in the
//! queue's data group (`ConsumeCommand::CommitOffset`): the one a POP consumer of the group
//! advances too, so `rockraft group list` and the lag metrics show both. A commit that does not
//! move the position proposes nothing (the clients commit every queue every 5 s).

use crate::auth::Caller;
use crate::broker::access::{Action, ResourceKind};
use crate::broker::pop::{ConsumeCommand, ConsumeOutcome};
use crate::cluster::Cluster;
use crate::remoting::codes::*;
use crate::remoting::frame::Frame;
use crate::remoting::{Remoting, number};

impl Remoting {
    /// The data group holding (`topic`, `queue`) if the caller may read it, else the answer.
    async fn queue_of(
        &self,
        request: &Frame,
        caller: &Caller,
        group: Option<&str>,
    ) -> Result<(Cluster, String, u32), Frame> {
        let topic = request.field("topic").unwrap_or_default().to_string();
        let mut needs = vec![(Action::Sub, ResourceKind::Topic, topic.as_str())];
        if let Some(g) = group {
            needs.push((Action::Sub, ResourceKind::Group, g));
        }
        if let Some(refused) = self.refused(request, caller, &needs) {
            return Err(refused);
        }
        let Some(config) = self.proxy.topic(&topic).await else {
            return Err(Frame::answer(request, TOPIC_NOT_EXIST).with_remark(format!("topic {topic} does not exist")));
        };
        let queue = number::<u32>(request, "queueId").filter(|q| *q < config.queues).ok_or_else(|| {
            Frame::answer(request, SYSTEM_ERROR).with_remark(format!("no such queue of topic {topic}"))
        })?;
        match self.proxy.groups().of_queue(&config, queue) {
            Ok(c) if c.holds_replica() => Ok((c, topic, queue)),
            Ok(_) => {
                Err(Frame::answer(request, SERVICE_NOT_AVAILABLE)
                    .with_remark("this node holds no replica of that queue"))
            }
            Err(e) => Err(Frame::answer(request, SERVICE_NOT_AVAILABLE).with_remark(e.to_string())),
        }
    }

    pub(super) async fn query_offset(&self, request: &Frame, caller: &Caller) -> Frame {
        let group = request.field("consumerGroup").unwrap_or_default().to_string();
        let (cluster, topic, queue) = match self.queue_of(request, caller, Some(&group)).await {
            Ok(q) => q,
            Err(answer) => return answer,
        };
        let broker = cluster.broker();
        match broker.consumer_offset(&group, &topic, queue) {
            Some(offset) => Frame::answer(request, SUCCESS).with("offset", offset),
            // RocketMQ's rule: a new group starts at 0 while the queue still begins there (so a
            // consumer started after its producer misses nothing); else where its client says.
            None if broker.queue_range(&topic, queue).0 == 0 => Frame::answer(request, SUCCESS).with("offset", 0),
            None => Frame::answer(request, QUERY_NOT_FOUND).with_remark("no offset stored for this group and queue"),
        }
    }

    pub(super) async fn update_offset(&self, request: &Frame, caller: &Caller) -> Frame {
        let group = request.field("consumerGroup").unwrap_or_default().to_string();
        let (cluster, topic, queue) = match self.queue_of(request, caller, Some(&group)).await {
            Ok(q) => q,
            Err(answer) => return answer,
        };
        let Some(offset) = number::<i64>(request, "commitOffset").filter(|o| *o >= 0) else {
            return Frame::answer(request, SYSTEM_ERROR).with_remark("commitOffset must be a non-negative number");
        };
        match self.commit(&cluster, &group, &topic, queue, offset as u64).await {
            Ok(()) => Frame::answer(request, SUCCESS),
            Err((code, why)) => Frame::answer(request, code).with_remark(why),
        }
    }

    /// Moves `group`'s position on the queue to `offset`, unless it is there already.
    pub(super) async fn commit(
        &self,
        cluster: &Cluster,
        group: &str,
        topic: &str,
        queue: u32,
        offset: u64,
    ) -> Result<(), (i32, String)> {
        let broker = cluster.broker();
        if broker.consumer_offset(group, topic, queue) == Some(offset) {
            return Ok(());
        }
        let Some(topic_epoch) = broker.topic_epoch(topic) else {
            return Err((TOPIC_NOT_EXIST, format!("topic {topic} is not placed here yet")));
        };
        let command = ConsumeCommand::CommitOffset {
            group: group.to_string(),
            topic: topic.to_string(),
            topic_epoch,
            queue_id: queue,
            offset,
        };
        match cluster.request(command).await {
            Ok(Ok(ConsumeOutcome::Done)) => Ok(()),
            Ok(Ok(ConsumeOutcome::GroupNotFound(g))) => {
                Err((SUBSCRIPTION_GROUP_NOT_EXIST, format!("consumer group {g} does not exist")))
            }
            Ok(Ok(ConsumeOutcome::TopicNotFound(t))) => Err((TOPIC_NOT_EXIST, format!("topic {t} does not exist"))),
            Ok(Ok(other)) => Err((SYSTEM_ERROR, format!("unexpected outcome {other:?}"))),
            Ok(Err(refusal)) => Err((SYSTEM_ERROR, format!("{refusal:?}"))),
            Err(e) => Err((SERVICE_NOT_AVAILABLE, e.to_string())),
        }
    }

    pub(super) async fn queue_bound(&self, request: &Frame, caller: &Caller) -> Frame {
        let (cluster, topic, queue) = match self.queue_of(request, caller, None).await {
            Ok(q) => q,
            Err(answer) => return answer,
        };
        let broker = cluster.broker();
        let (start, end) = broker.queue_range(&topic, queue);
        match request.code {
            GET_MAX_OFFSET => Frame::answer(request, SUCCESS).with("offset", end),
            GET_MIN_OFFSET => Frame::answer(request, SUCCESS).with("offset", start),
            SEARCH_OFFSET_BY_TIMESTAMP => {
                let at = number::<i64>(request, "timestamp").unwrap_or(0);
                match broker.offset_at_time(&topic, queue, at) {
                    Ok(offset) => Frame::answer(request, SUCCESS).with("offset", offset),
                    Err(e) => Frame::answer(request, SYSTEM_ERROR).with_remark(e.to_string()),
                }
            }
            _ => match broker.read(&topic, queue, start) {
                Ok(Some(e)) => Frame::answer(request, SUCCESS).with("timestamp", e.store_timestamp_ms),
                Ok(None) => Frame::answer(request, SYSTEM_ERROR).with_remark("the queue is empty"),
                Err(e) => Frame::answer(request, SYSTEM_ERROR).with_remark(e.to_string()),
            },
        }
    }
}
