//! What consumers do with a delivery: `AckMessage`, `ChangeInvisibleDuration`,
//! `ForwardMessageToDeadLetterQueue`. Each is a Raft entry that names the deliveries by their
//! receipt handles (all of an `AckMessage`'s in one entry); a handle that is not current changes
//! nothing and gets INVALID_RECEIPT_HANDLE.

use std::collections::BTreeMap;
use std::time::Duration;

use rockraft_proto::rocketmq::{
    AckMessageRequest, AckMessageResponse, AckMessageResultEntry, ChangeInvisibleDurationRequest,
    ChangeInvisibleDurationResponse, Code, ForwardMessageToDeadLetterQueueRequest, Resource, Status,
};

use crate::broker::Refusal;
use crate::broker::pop::{ChannelId, ConsumeCommand, ConsumeOutcome, Receipt};
use crate::broker::position::PartitionId;
use crate::cluster::now_ms;
use crate::proxy::receive::{MAX_INVISIBLE, MIN_INVISIBLE};
use crate::proxy::send::topic_name;
use crate::proxy::status::{Rejection, ok, pop_failed, refused, status, write_failed};
use crate::proxy::{Proxy, receipt};

/// The most receipts one ack entry carries (a receipt is about 100 bytes of the entry).
const MAX_ACKS_PER_ENTRY: usize = 1024;

fn stale() -> Status {
    status(Code::InvalidReceiptHandle, "the receipt handle is not current: acked, redelivered or renewed since")
}

/// What an entry's reply means to the client.
fn outcome_status(outcome: Result<ConsumeOutcome, Refusal>) -> Status {
    match outcome {
        Ok(ConsumeOutcome::Done | ConsumeOutcome::Renewed(_)) => ok(),
        Ok(ConsumeOutcome::StaleReceipt) => stale(),
        Ok(ConsumeOutcome::GroupNotFound(g)) => {
            status(Code::ConsumerGroupNotFound, format!("consumer group {g} does not exist"))
        }
        Ok(ConsumeOutcome::TopicNotFound(t)) => status(Code::TopicNotFound, format!("topic {t} does not exist")),
        Ok(other) => status(Code::InternalServerError, format!("an ack answered {other:?}")),
        Err(refusal) => refused(&refusal),
    }
}

/// The answer to `req`: per entry, its status if its handle was current, else stale.
fn answer(req: &AckMessageRequest, statuses: Vec<Option<Status>>) -> AckMessageResponse {
    let entries: Vec<AckMessageResultEntry> = req
        .entries
        .iter()
        .zip(statuses)
        .map(|(e, status)| AckMessageResultEntry {
            message_id: e.message_id.clone(),
            receipt_handle: e.receipt_handle.clone(),
            status: Some(status.unwrap_or_else(stale)),
        })
        .collect();
    // The overall status is the first failure: clients that send one entry read only this.
    let first_failure = entries.iter().filter_map(|e| e.status.clone()).find(|s| s.code != Code::Ok as i32);
    AckMessageResponse { status: Some(first_failure.unwrap_or_else(ok)), entries }
}

impl Proxy {
    /// The (group, topic) a request names, both qualified and known.
    async fn names(
        &self,
        group: &Option<Resource>,
        topic: &Option<Resource>,
        ns: &str,
    ) -> Result<(String, String), Rejection> {
        let group = group.as_ref().filter(|g| !g.name.is_empty());
        let group = group.ok_or_else(|| Rejection::new(Code::IllegalConsumerGroup, "a consumer group is required"))?;
        let topic = topic.as_ref().filter(|t| !t.name.is_empty());
        let topic = topic.ok_or_else(|| Rejection::new(Code::IllegalTopic, "a topic is required"))?;
        let (group, topic) = (topic_name(group, ns), topic_name(topic, ns));
        self.consumer_group(&group).await?;
        if self.topic(&topic).await.is_none() {
            return Err(Rejection::new(Code::TopicNotFound, format!("topic {topic} does not exist")));
        }
        Ok((group, topic))
    }

    pub(super) async fn ack(&self, req: &AckMessageRequest, ns: &str) -> AckMessageResponse {
        let (group, topic) = match self.names(&req.group, &req.topic, ns).await {
            Ok(names) => names,
            Err(Rejection(s)) => return AckMessageResponse { status: Some(s), entries: vec![] },
        };
        let most = self.options.limits.max_ack_entries;
        if req.entries.len() > most {
            let why = format!("an AckMessage carries at most {most} entries, not {}", req.entries.len());
            return AckMessageResponse { status: Some(status(Code::BadRequest, why)), entries: vec![] };
        }
        // Every current receipt of the request goes in one entry (a chunk of them, for a huge
        // request): acking 32 messages costs one round of the log, not 32.
        let handles: Vec<&str> = req.entries.iter().map(|e| e.receipt_handle.as_str()).collect();
        let keys = match self.handle_keys(&handles).await {
            Ok(k) => k,
            Err(s) => return AckMessageResponse { status: Some(s), entries: vec![] },
        };
        let receipts: Vec<Option<(PartitionId, Receipt)>> =
            req.entries.iter().map(|e| receipt::decode(&keys, &e.receipt_handle, &group, &topic)).collect();
        // Per partition (the group that made the deliveries), in the request's order.
        let mut by_partition: BTreeMap<PartitionId, Vec<usize>> = BTreeMap::new();
        for (i, r) in receipts.iter().enumerate() {
            if let Some((partition, _)) = r {
                by_partition.entry(*partition).or_default().push(i);
            }
        }
        let mut statuses: Vec<Option<Status>> = vec![None; receipts.len()];
        for (partition, positions) in by_partition {
            let current: Vec<&Receipt> =
                positions.iter().filter_map(|&i| receipts[i].as_ref().map(|(_, r)| r)).collect();
            let answers = self.ack_in(partition, &current).await;
            for (&i, status) in positions.iter().zip(answers) {
                statuses[i] = Some(status);
            }
        }
        answer(req, statuses)
    }

    /// Acks `current` (deliveries the group of `partition` made) in as few entries as it takes.
    async fn ack_in(&self, partition: PartitionId, current: &[&Receipt]) -> Vec<Status> {
        let cluster = match self.groups.partition(partition) {
            Ok(cluster) => cluster,
            Err(e) => return vec![write_failed(&e, 0); current.len()],
        };
        let mut statuses = Vec::with_capacity(current.len());
        for chunk in current.chunks(MAX_ACKS_PER_ENTRY) {
            let command = match chunk {
                [one] => ConsumeCommand::Ack((*one).clone()),
                many => ConsumeCommand::Acks { receipts: many.iter().map(|r| (*r).clone()).collect() },
            };
            let answers = match cluster.request(command).await {
                Ok(Ok(ConsumeOutcome::Each(outcomes))) if outcomes.len() == chunk.len() => {
                    outcomes.into_iter().map(|o| outcome_status(Ok(o))).collect()
                }
                Ok(outcome) => vec![outcome_status(outcome); chunk.len()],
                Err(e) => vec![write_failed(&e, 0); chunk.len()],
            };
            for (r, status) in chunk.iter().zip(&answers) {
                if status.code == Code::Ok as i32 {
                    self.renewals.settled(partition, r);
                }
            }
            statuses.extend(answers);
        }
        statuses
    }

    pub(super) async fn change_invisible(
        &self,
        req: &ChangeInvisibleDurationRequest,
        ns: &str,
    ) -> ChangeInvisibleDurationResponse {
        let refuse = |s: Status| ChangeInvisibleDurationResponse { status: Some(s), receipt_handle: String::new() };
        let (group, topic) = match self.names(&req.group, &req.topic, ns).await {
            Ok(names) => names,
            Err(Rejection(s)) => return refuse(s),
        };
        let invisible = req
            .invisible_duration
            .as_ref()
            .map(|d| Duration::from_secs(d.seconds.max(0) as u64) + Duration::from_nanos(d.nanos.max(0) as u64));
        let Some(invisible) = invisible.filter(|d| (MIN_INVISIBLE..=MAX_INVISIBLE).contains(d)) else {
            let why = format!("invisible duration must be {MIN_INVISIBLE:?} to {MAX_INVISIBLE:?}");
            return refuse(status(Code::IllegalInvisibleTime, why));
        };
        let keys = match self.handle_keys(&[&req.receipt_handle]).await {
            Ok(k) => k,
            Err(s) => return refuse(s),
        };
        let Some((partition, receipt)) = receipt::decode(&keys, &req.receipt_handle, &group, &topic) else {
            return refuse(stale());
        };
        let cluster = match self.groups.partition(partition) {
            Ok(cluster) => cluster,
            Err(e) => return refuse(write_failed(&e, 0)),
        };
        let command = ConsumeCommand::ChangeInvisible {
            receipt: receipt.clone(),
            // The leader stamps its own time when it proposes the change.
            now_ms: now_ms(),
            invisible_ms: invisible.as_millis() as i64,
        };
        let reply = cluster.request(command).await;
        if reply.is_ok() {
            // The client now decides this delivery's invisible time.
            self.renewals.settled(partition, &receipt);
        }
        match reply {
            Ok(Ok(ConsumeOutcome::Renewed(d))) => {
                let receipt_handle = receipt::encode(&keys, partition, &d, &group, &topic);
                ChangeInvisibleDurationResponse { status: Some(ok()), receipt_handle }
            }
            Ok(outcome) => refuse(outcome_status(outcome)),
            Err(e) => refuse(write_failed(&e, 0)),
        }
    }

    /// A client gave up on a message (its own attempt count reached the maximum).
    pub(super) async fn forward_to_dead_letters(
        &self,
        req: &ForwardMessageToDeadLetterQueueRequest,
        ns: &str,
    ) -> Status {
        let (group, topic) = match self.names(&req.group, &req.topic, ns).await {
            Ok(names) => names,
            Err(Rejection(s)) => return s,
        };
        let keys = match self.handle_keys(&[&req.receipt_handle]).await {
            Ok(k) => k,
            Err(s) => return s,
        };
        let Some((partition, receipt)) = receipt::decode(&keys, &req.receipt_handle, &group, &topic) else {
            return stale();
        };
        let cluster = match self.groups.partition(partition) {
            Ok(cluster) => cluster,
            Err(e) => return write_failed(&e, 0),
        };
        // Into the dead-letter queue of the group that made the delivery (`cluster::groups`). The
        // group's leader builds the dead letter: it holds the message, which this node may not.
        let ended = match receipt.channel {
            ChannelId::Queue(_) => cluster.dead_letter(&receipt).await,
            // A lite topic's message is found by the lite topic's name, which the request carries.
            ChannelId::Lite(_) => {
                let Some(lite) = req.lite_topic.as_deref().filter(|l| !l.is_empty()) else {
                    return status(Code::BadRequest, "a lite delivery is dead-lettered with its lite_topic");
                };
                cluster.lite_dead_letter(lite, &receipt).await
            }
        };
        match ended {
            Ok(outcome) => {
                self.renewals.settled(partition, &receipt);
                outcome_status(Ok(outcome))
            }
            Err(e) => pop_failed(&e),
        }
    }
}
