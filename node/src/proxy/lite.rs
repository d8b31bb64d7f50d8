//! Lite topics at the client edge: `SyncLiteSubscription`, which receives are lite receives (served
//! from the client's subscribed lite topics, whatever queue the request names; `receive.rs` streams
//! them), and acks and invisible-time changes of lite deliveries (their receipt handles name the
//! lite topic, see `receipt.rs`).

use rockraft_proto::rocketmq::{Code, LiteSubscriptionAction, Status, SyncLiteSubscriptionRequest};

use crate::auth::Caller;
use crate::broker::Refusal;
use crate::broker::group::GroupConfig;
use crate::broker::lite::{LiteActor, LiteCommand, LiteOutcome, SyncAction, validate_lite_name};
use crate::broker::{TopicConfig, TopicKind};
use crate::cluster::now_ms;
use crate::proxy::Proxy;
use crate::proxy::send::topic_name;
use crate::proxy::status::{Rejection, ok, refused, status, write_failed};

/// The Python client 5.1.2 sends `subscribe_lite(t)` as a PARTIAL_ADD whose set holds the
/// characters of `t` (it extends the repeated field with the string), and nothing else as a
/// PARTIAL_ADD. Taken literally, it would subscribe to one-letter lite topics and get `t` only
/// with its next whole-set sync, 30 s later; so from a Python client, a PARTIAL_ADD of single
/// characters is read as the one name they spell.
pub fn join_python_subscribe(req: &mut SyncLiteSubscriptionRequest) {
    let spelled = req.action == LiteSubscriptionAction::PartialAdd as i32
        && req.lite_topic_set.len() > 1
        && req.lite_topic_set.iter().all(|c| c.chars().count() == 1);
    if spelled {
        req.lite_topic_set = vec![req.lite_topic_set.concat()];
    }
}

/// Whether a receive of `topic` by `group` is a lite receive (then the client it serves), or
/// refused: a lite group receives only from its parent topic, and only lite groups receive from
/// a lite parent.
pub fn lite_receive(group: &GroupConfig, topic: &TopicConfig, client: &str) -> Result<Option<String>, Rejection> {
    match (&group.lite, topic.kind) {
        (Some(b), TopicKind::Lite) if b.topic == topic.name => {
            if client.is_empty() {
                return Err(Rejection::new(Code::BadRequest, "a lite receive needs the client's id (x-mq-client-id)"));
            }
            Ok(Some(client.to_string()))
        }
        (Some(b), _) => Err(Rejection::new(
            Code::IllegalConsumerGroup,
            format!("group {} is a lite group of topic {}, not of {}", group.name, b.topic, topic.name),
        )),
        (None, TopicKind::Lite) => Err(Rejection::new(
            Code::IllegalConsumerGroup,
            format!("topic {} is a lite topic: only a lite group (--lite-bind-topic) consumes it", topic.name),
        )),
        (None, _) => Ok(None),
    }
}

/// Who a caller acts as on a client's lite subscriptions: apply lets a user act only on its own.
pub fn actor(caller: &Caller) -> LiteActor {
    match caller {
        Caller::User { access_key, admin: true } => LiteActor::Admin(access_key.to_string()),
        Caller::User { access_key, admin: false } => LiteActor::User(access_key.to_string()),
        Caller::Open | Caller::Refused(_) => LiteActor::Open,
    }
}

/// What a lite command's outcome means to the client.
pub fn outcome_status(outcome: Result<LiteOutcome, Refusal>) -> Status {
    match outcome {
        Ok(LiteOutcome::Done | LiteOutcome::Synced { .. }) => ok(),
        Ok(LiteOutcome::GroupNotFound(g)) => {
            status(Code::ConsumerGroupNotFound, format!("consumer group {g} does not exist"))
        }
        Ok(LiteOutcome::TopicNotFound(t)) => status(Code::TopicNotFound, format!("topic {t} does not exist")),
        Ok(LiteOutcome::IllegalGroup(why)) => status(Code::IllegalConsumerGroup, why),
        Ok(LiteOutcome::IllegalLiteTopic(why)) => status(Code::IllegalLiteTopic, why),
        Ok(LiteOutcome::QuotaExceeded(why)) => status(Code::LiteSubscriptionQuotaExceeded, why),
        Ok(LiteOutcome::NotOwner(why)) => status(Code::Forbidden, why),
        Ok(other) => status(Code::InternalServerError, format!("a lite command answered {other:?}")),
        Err(refusal) => refused(&refusal),
    }
}

impl Proxy {
    /// `SyncLiteSubscription` from `client`: checked here, applied through the log.
    pub(super) async fn sync_lite(
        &self,
        req: &SyncLiteSubscriptionRequest,
        ns: &str,
        client: &str,
        by: LiteActor,
    ) -> Status {
        let (command, parent) = match self.check_sync(req, ns, client, by).await {
            Ok(checked) => checked,
            Err(Rejection(s)) => return s,
        };
        // A lite topic's subscriptions live with its messages, in the group holding its queues.
        let group = match self.groups.of_queue(&parent, 0) {
            Ok(group) => group,
            Err(e) => return write_failed(&e, 0),
        };
        if let LiteCommand::Sync { group: consumers, parent, .. } = &command {
            self.placed(&group, parent, consumers).await;
        }
        match group.request(command).await {
            Ok(outcome) => outcome_status(outcome),
            Err(e) => write_failed(&e, 0),
        }
    }

    async fn check_sync(
        &self,
        req: &SyncLiteSubscriptionRequest,
        ns: &str,
        client: &str,
        by: LiteActor,
    ) -> Result<(LiteCommand, TopicConfig), Rejection> {
        if client.is_empty() {
            return Err(Rejection::new(Code::BadRequest, "a lite subscription needs the client's id (x-mq-client-id)"));
        }
        let group = req.group.as_ref().filter(|g| !g.name.is_empty());
        let group = group.ok_or_else(|| Rejection::new(Code::IllegalConsumerGroup, "a consumer group is required"))?;
        let topic = req.topic.as_ref().filter(|t| !t.name.is_empty());
        let topic = topic.ok_or_else(|| Rejection::new(Code::IllegalTopic, "a topic is required"))?;
        let (group, topic) = (topic_name(group, ns), topic_name(topic, ns));
        let config = self.consumer_group(&group).await?;
        let parent = self
            .topic(&topic)
            .await
            .ok_or_else(|| Rejection::new(Code::TopicNotFound, format!("topic {topic} does not exist")))?;
        let binding = match lite_receive(&config, &parent, client)? {
            Some(_) => {
                config.lite.clone().ok_or_else(|| Rejection::new(Code::IllegalConsumerGroup, "not a lite group"))?
            }
            None => {
                return Err(Rejection::new(
                    Code::IllegalConsumerGroup,
                    format!("group {group} is not a lite group (create it with --lite-bind-topic {topic})"),
                ));
            }
        };
        if req.lite_topic_set.len() as u64 > u64::from(binding.quota) {
            return Err(Rejection::new(
                Code::LiteSubscriptionQuotaExceeded,
                format!("{} lite topics in one sync; the group's quota is {}", req.lite_topic_set.len(), binding.quota),
            ));
        }
        if let Some(why) = req.lite_topic_set.iter().find_map(|l| validate_lite_name(l).err()) {
            return Err(Rejection::new(Code::IllegalLiteTopic, why.to_string()));
        }
        if let Some(option) = &req.offset_option {
            use rockraft_proto::rocketmq::offset_option::{OffsetType, Policy};
            let from_oldest = match option.offset_type {
                None => true,
                Some(OffsetType::Policy(p)) => p == Policy::Min as i32,
                Some(_) => false,
            };
            if !from_oldest {
                return Err(Rejection::new(
                    Code::NotImplemented,
                    "a lite subscription starts at the oldest message of each lite topic; other offset options are not supported",
                ));
            }
        }
        let lites = req.lite_topic_set.clone();
        let (action, lites) = match LiteSubscriptionAction::try_from(req.action) {
            Ok(LiteSubscriptionAction::PartialAdd) => (SyncAction::Add, lites),
            Ok(LiteSubscriptionAction::PartialRemove) => (SyncAction::Remove, lites),
            Ok(LiteSubscriptionAction::CompleteAdd) => (SyncAction::Replace, lites),
            // The client drops every subscription it has.
            Ok(LiteSubscriptionAction::CompleteRemove) => (SyncAction::Replace, Vec::new()),
            Err(_) => {
                return Err(Rejection::new(
                    Code::BadRequest,
                    format!("unknown lite subscription action {}", req.action),
                ));
            }
        };
        let command =
            LiteCommand::Sync { group, parent: topic, client: client.to_string(), action, lites, now_ms: now_ms(), by };
        Ok((command, parent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_subscribe_spelled_out_is_one_lite_topic() {
        let req = |action: LiteSubscriptionAction, set: &[&str]| SyncLiteSubscriptionRequest {
            action: action as i32,
            lite_topic_set: set.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let mut spelled = req(LiteSubscriptionAction::PartialAdd, &["c", "h", "a", "t", "-", "1"]);
        join_python_subscribe(&mut spelled);
        assert_eq!(spelled.lite_topic_set, vec!["chat-1"]);
        for unchanged in [
            req(LiteSubscriptionAction::PartialAdd, &["chat-1"]),
            req(LiteSubscriptionAction::PartialAdd, &["x"]),
            req(LiteSubscriptionAction::PartialAdd, &["ab", "c"]),
            req(LiteSubscriptionAction::CompleteAdd, &["a", "b"]),
            req(LiteSubscriptionAction::PartialRemove, &["a", "b"]),
        ] {
            let mut r = unchanged.clone();
            join_python_subscribe(&mut r);
            assert_eq!(r.lite_topic_set, unchanged.lite_topic_set);
        }
    }
}
