//! What consumers do with a delivery: `AckMessage`, `ChangeInvisibleDuration`,
//! `ForwardMessageToDeadLetterQueue`. Each is a Raft entry that names the delivery by its receipt
//! handle; a handle that is not current changes nothing and gets INVALID_RECEIPT_HANDLE.

use std::time::Duration;

use rockraft_proto::rocketmq::{
    AckMessageRequest, AckMessageResponse, AckMessageResultEntry, ChangeInvisibleDurationRequest,
    ChangeInvisibleDurationResponse, Code, ForwardMessageToDeadLetterQueueRequest, Resource, Status,
};

use crate::broker::pop::{ConsumeCommand, ConsumeOutcome, Receipt};
use crate::broker::{Command, Reply};
use crate::cluster::now_ms;
use crate::proxy::receive::{MAX_INVISIBLE, MIN_INVISIBLE};
use crate::proxy::send::topic_name;
use crate::proxy::status::{Rejection, ok, pop_failed, status, write_failed};
use crate::proxy::{Proxy, receipt};

fn stale() -> Status {
    status(Code::InvalidReceiptHandle, "the receipt handle is not current: acked, redelivered or renewed since")
}

/// What an entry's reply means to the client.
fn outcome_status(reply: Reply) -> Status {
    match reply {
        Reply::Consume(ConsumeOutcome::Done | ConsumeOutcome::Renewed(_)) => ok(),
        Reply::Consume(ConsumeOutcome::StaleReceipt) => stale(),
        Reply::Consume(ConsumeOutcome::GroupNotFound(g)) => {
            status(Code::ConsumerGroupNotFound, format!("consumer group {g} does not exist"))
        }
        Reply::Consume(ConsumeOutcome::TopicNotFound(t)) => {
            status(Code::TopicNotFound, format!("topic {t} does not exist"))
        }
        other => status(Code::InternalServerError, format!("unexpected reply {other:?}")),
    }
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
        let acks = req.entries.iter().map(|e| {
            let (group, topic) = (&group, &topic);
            async move {
                let status = match receipt::decode(&e.receipt_handle, group, topic) {
                    None => stale(),
                    Some(r) => match self.cluster.write(&Command::Consume(ConsumeCommand::Ack(r.clone()))).await {
                        Ok(reply) => {
                            self.renewals.settled(&r);
                            outcome_status(reply)
                        }
                        Err(e) => write_failed(&e, 0),
                    },
                };
                AckMessageResultEntry {
                    message_id: e.message_id.clone(),
                    receipt_handle: e.receipt_handle.clone(),
                    status: Some(status),
                }
            }
        });
        let entries = futures_util::future::join_all(acks).await;
        // The overall status is the first failure: clients that send one entry read only this.
        let first_failure = entries.iter().filter_map(|e| e.status.clone()).find(|s| s.code != Code::Ok as i32);
        AckMessageResponse { status: Some(first_failure.unwrap_or_else(ok)), entries }
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
        let Some(receipt) = receipt::decode(&req.receipt_handle, &group, &topic) else { return refuse(stale()) };
        let command = ConsumeCommand::ChangeInvisible {
            receipt: receipt.clone(),
            // The leader stamps its own time when it proposes the change.
            now_ms: now_ms(),
            invisible_ms: invisible.as_millis() as i64,
        };
        let reply = self.cluster.write(&Command::Consume(command)).await;
        if reply.is_ok() {
            // The client now decides this delivery's invisible time.
            self.renewals.settled(&receipt);
        }
        match reply {
            Ok(Reply::Consume(ConsumeOutcome::Renewed(d))) => {
                ChangeInvisibleDurationResponse { status: Some(ok()), receipt_handle: receipt::encode(&d) }
            }
            Ok(reply) => refuse(outcome_status(reply)),
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
        let Some(receipt): Option<Receipt> = receipt::decode(&req.receipt_handle, &group, &topic) else {
            return stale();
        };
        // The leader builds the dead letter: it holds the message.
        match self.cluster.dead_letter(&receipt).await {
            Ok(outcome) => {
                self.renewals.settled(&receipt);
                outcome_status(Reply::Consume(outcome))
            }
            Err(e) => pop_failed(&e),
        }
    }
}
