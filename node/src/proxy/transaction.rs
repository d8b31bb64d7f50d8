//! `EndTransaction` (commit or roll back a half) and `RecallMessage` (cancel a delayed message):
//! the two ways a producer settles a message it stored for later.

use rockraft_proto::rocketmq::{
    Code, EndTransactionRequest, RecallMessageRequest, RecallMessageResponse, Resource, Status, TransactionResolution,
    TransactionSource,
};

use crate::broker::timer::{TimerCommand, TimerOutcome, parse_recall_handle};
use crate::broker::transaction::{HalfState, Resolver, TransactionCommand, TransactionOutcome, parse_transaction_id};
use crate::proxy::Proxy;
use crate::proxy::send::topic_name;
use crate::proxy::status::{ok, refused, status, write_failed};

fn resolved_as(state: HalfState) -> &'static str {
    match state {
        HalfState::Open => "open",
        HalfState::Committed { .. } => "committed",
        HalfState::RolledBack { .. } => "rolled back",
    }
}

impl Proxy {
    /// The qualified name of a request's topic, if it names an existing one.
    async fn existing_topic(&self, topic: Option<&Resource>, ns: &str) -> Result<String, Status> {
        let name = topic.map(|r| topic_name(r, ns)).filter(|n| !n.is_empty());
        let name = name.ok_or_else(|| status(Code::BadRequest, "no topic"))?;
        match self.topic(&name).await {
            Some(_) => Ok(name),
            None => Err(status(Code::TopicNotFound, format!("topic {name} does not exist"))),
        }
    }

    pub(crate) async fn end_transaction(&self, req: &EndTransactionRequest, ns: &str) -> Status {
        let topic = match self.existing_topic(req.topic.as_ref(), ns).await {
            Ok(t) => t,
            Err(s) => return s,
        };
        let keys = match self.handle_keys(&[&req.transaction_id]).await {
            Ok(k) => k,
            Err(s) => return s,
        };
        let opened = keys.open(&req.transaction_id, &[&topic, &req.message_id]);
        // The id names the partition (the group) that holds the half.
        let Some((partition, position)) = opened.and_then(parse_transaction_id) else {
            return status(Code::InvalidTransactionId, format!("{:?} is not a transaction id", req.transaction_id));
        };
        let cluster = match self.groups.partition(partition) {
            Ok(cluster) => cluster,
            Err(e) => return write_failed(&e, 1),
        };
        let commit = match TransactionResolution::try_from(req.resolution) {
            Ok(TransactionResolution::Commit) => true,
            Ok(TransactionResolution::Rollback) => false,
            // A checker that does not know yet (the Rust client sends 0): checked again later.
            _ => return ok(),
        };
        let by = match TransactionSource::try_from(req.source) {
            Ok(TransactionSource::SourceServerCheck) => Resolver::ProducerCheck,
            _ => Resolver::Producer,
        };
        let command =
            TransactionCommand::Resolve { now_ms: 0, topic, position, message_id: req.message_id.clone(), commit, by };
        match cluster.request(command).await {
            Ok(Ok(TransactionOutcome::Done)) => ok(),
            Ok(Ok(TransactionOutcome::Unknown)) => status(
                Code::InvalidTransactionId,
                format!("no transaction {} for message {}", req.transaction_id, req.message_id),
            ),
            Ok(Ok(TransactionOutcome::Conflict(state))) => {
                status(Code::PreconditionFailed, format!("the transaction was already {}", resolved_as(state)))
            }
            Ok(Err(refusal)) => refused(&refusal),
            Err(e) => write_failed(&e, 1),
        }
    }

    pub(super) async fn recall(&self, req: &RecallMessageRequest, ns: &str) -> RecallMessageResponse {
        let answer = |s: Status, message_id: String| RecallMessageResponse { status: Some(s), message_id };
        let topic = match self.existing_topic(req.topic.as_ref(), ns).await {
            Ok(t) => t,
            Err(s) => return answer(s, String::new()),
        };
        let keys = match self.handle_keys(&[&req.recall_handle]).await {
            Ok(k) => k,
            Err(s) => return answer(s, String::new()),
        };
        let recall = keys.open(&req.recall_handle, &[&topic]).and_then(parse_recall_handle);
        let Some((partition, timer)) = recall else {
            return answer(status(Code::BadRequest, "not a recall handle"), String::new());
        };
        // The handle names the partition (the group) that holds the timer.
        let cluster = match self.groups.partition(partition) {
            Ok(cluster) => cluster,
            Err(e) => return answer(write_failed(&e, 1), String::new()),
        };
        let command = TimerCommand::Recall { now_ms: 0, topic, timer };
        match cluster.request(command).await {
            Ok(Ok(TimerOutcome::Recalled { message_id })) => answer(ok(), message_id),
            Ok(Ok(TimerOutcome::AlreadyDue)) => {
                answer(status(Code::MessageNotFound, "the message is due and being delivered"), String::new())
            }
            Ok(Ok(_)) => answer(
                status(Code::MessageNotFound, "no pending delayed message: delivered, recalled, or never sent"),
                String::new(),
            ),
            Ok(Err(refusal)) => answer(refused(&refusal), String::new()),
            Err(e) => answer(write_failed(&e, 1), String::new()),
        }
    }
}
