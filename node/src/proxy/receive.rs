//! `ReceiveMessage`: a long poll that plans a POP from this node's state, proposes it, and streams
//! the deliveries that committed, of queues and of lite topics alike.
//!
//! Any node serves it: the plan names what it expects, so a follower's stale view only costs a
//! retry. The poll wakes when a message for the topic is applied, when an ack or a dead letter
//! frees an orderly message group, or when an invisible delivery falls due, never on a fixed tick.

use std::time::Duration;

use rockraft_proto::rocketmq::{
    Code, FilterExpression, FilterType, Message, ReceiveMessageRequest, ReceiveMessageResponse, Resource,
    receive_message_response::Content,
};
use tokio::time::Instant;

use crate::auth::Caller;
use crate::auth::handles::HandleKeys;
use crate::broker::StoredEntry;
use crate::broker::group::GroupConfig;
use crate::broker::lite::LiteActor;
use crate::broker::pop::Delivery;
use std::sync::atomic::Ordering;

use crate::broker::TopicConfig;
use crate::broker::position::PartitionId;
use crate::cluster::pop::{PopError, PopOrder, Popped};
use crate::cluster::{Cluster, now_ms};
use crate::plugin::subscription::{FilterKind, Subscription};
use crate::plugin::{PluginError, blocking};
use crate::proxy::receipt;
use crate::proxy::send::topic_name;
use crate::proxy::status::{Rejection, ok, pop_failed, status};
use crate::proxy::{Proxy, timestamp};

/// Invisible time of receives that name none (PushConsumers).
pub const DEFAULT_INVISIBLE: Duration = Duration::from_secs(60);
pub const MIN_INVISIBLE: Duration = Duration::from_secs(1);
pub const MAX_INVISIBLE: Duration = Duration::from_secs(12 * 3600);
const DEFAULT_LONG_POLLING: Duration = Duration::from_secs(20);
const MAX_BATCH: i32 = 1024;
/// Longest filter expression accepted. A filter is compiled and kept for as long as its group
/// receives, so its size is bounded up front.
pub const MAX_FILTER_EXPRESSION_BYTES: usize = 4 << 10;
/// How long a receive waits before asking again when no leader could take its pop.
const UNAVAILABLE_RETRY: Duration = Duration::from_millis(250);
/// The shortest wait between two pops of one receive that found nothing.
const MIN_WAIT: Duration = Duration::from_millis(20);
/// How often a waiting receive asks again a group this node holds no replica of, whose changes
/// it does not see: a message there waits this long at most.
const REMOTE_POLL: Duration = Duration::from_millis(300);

/// A checked receive request.
#[derive(Debug)]
pub struct ReceiveParams {
    pub group: String,
    pub topic: Resource,
    pub topic_name: String,
    /// The subscription's expression (its size and type checked; it is compiled by its plugin).
    pub filter_expression: String,
    pub filter_kind: FilterKind,
    pub batch: usize,
    pub invisible: Duration,
    pub long_polling: Duration,
    /// The client's id for this receive, the same on its retries.
    pub attempt_id: Option<String>,
    /// A lite group's receive: the client (`x-mq-client-id`) whose lite topics it serves.
    pub lite_client: Option<String>,
    /// Who receives as that client.
    pub lite_by: LiteActor,
}

/// The longest `attempt_id` kept (clients send a UUID).
const MAX_ATTEMPT_ID_BYTES: usize = 128;

fn duration(d: &Option<prost_types::Duration>) -> Option<Duration> {
    let d = d.as_ref()?;
    let nanos = i128::from(d.seconds) * 1_000_000_000 + i128::from(d.nanos);
    Some(Duration::from_nanos(nanos.clamp(0, i128::from(u64::MAX)) as u64))
}

/// The kind and text of a subscription's expression, bounded in size. (Whether it compiles is
/// for its plugin to say: [`Subscription::compile`].)
pub fn filter(expr: Option<&FilterExpression>) -> Result<(FilterKind, String), Rejection> {
    let Some(expr) = expr else { return Ok((FilterKind::Tag, String::new())) };
    if expr.expression.len() > MAX_FILTER_EXPRESSION_BYTES {
        return Err(Rejection::new(
            Code::IllegalFilterExpression,
            format!(
                "filter expression of {} bytes exceeds the limit of {MAX_FILTER_EXPRESSION_BYTES}",
                expr.expression.len()
            ),
        ));
    }
    let kind = match FilterType::try_from(expr.r#type).unwrap_or(FilterType::Unspecified) {
        FilterType::Tag | FilterType::Unspecified => FilterKind::Tag,
        FilterType::Sql => FilterKind::Sql92,
    };
    Ok((kind, expr.expression.clone()))
}

/// Compiles a subscription's expression with its plugin, as a client would be answered.
pub fn compile(
    host: &std::sync::Arc<crate::plugin::PluginHost>,
    kind: FilterKind,
    expression: &str,
) -> Result<Subscription, Rejection> {
    blocking(|| Subscription::compile(host, kind, expression)).map_err(|e| match e {
        PluginError::Rejected(reason) => Rejection::new(Code::IllegalFilterExpression, reason),
        other => Rejection::new(Code::InternalServerError, other.to_string()),
    })
}

impl ReceiveParams {
    pub fn check(req: &ReceiveMessageRequest, namespace: &str) -> Result<ReceiveParams, Rejection> {
        let group = req.group.as_ref().filter(|g| !g.name.is_empty());
        let group = group.ok_or_else(|| Rejection::new(Code::IllegalConsumerGroup, "a consumer group is required"))?;
        let topic = req.message_queue.as_ref().and_then(|q| q.topic.clone()).filter(|t| !t.name.is_empty());
        let topic = topic.ok_or_else(|| Rejection::new(Code::IllegalTopic, "a topic is required"))?;
        if req.batch_size <= 0 || req.batch_size > MAX_BATCH {
            return Err(Rejection::new(Code::BadRequest, format!("batch size must be 1 to {MAX_BATCH}")));
        }
        let invisible = duration(&req.invisible_duration).unwrap_or(DEFAULT_INVISIBLE);
        if !(MIN_INVISIBLE..=MAX_INVISIBLE).contains(&invisible) {
            return Err(Rejection::new(
                Code::IllegalInvisibleTime,
                format!("invisible duration must be {MIN_INVISIBLE:?} to {MAX_INVISIBLE:?}"),
            ));
        }
        let (filter_kind, filter_expression) = filter(req.filter_expression.as_ref())?;
        let attempt_id = req.attempt_id.clone().filter(|a| !a.is_empty());
        if attempt_id.as_ref().is_some_and(|a| a.len() > MAX_ATTEMPT_ID_BYTES) {
            return Err(Rejection::new(
                Code::BadRequest,
                format!("an attempt_id has at most {MAX_ATTEMPT_ID_BYTES} bytes"),
            ));
        }
        Ok(ReceiveParams {
            group: topic_name(group, namespace),
            topic_name: topic_name(&topic, namespace),
            topic,
            filter_expression,
            filter_kind,
            batch: req.batch_size as usize,
            invisible,
            long_polling: duration(&req.long_polling_timeout).unwrap_or(DEFAULT_LONG_POLLING),
            attempt_id,
            lite_client: None,
            lite_by: LiteActor::Open,
        })
    }
}

/// How long a poll may wait: it must answer before the client gives up, and the Rust client's
/// deadline is exactly the polling timeout it asked for.
pub fn poll_budget(long_polling: Duration, grpc_timeout: Option<Duration>) -> Duration {
    let limit = grpc_timeout.map_or(long_polling, |t| t.min(long_polling));
    let margin = (limit / 10).clamp(Duration::from_millis(200), Duration::from_secs(2));
    limit.saturating_sub(margin)
}

/// The message as a client receives it in a delivery.
fn message(topic: &Resource, e: StoredEntry, d: &Delivery, handle: String, invisible: Duration) -> Message {
    let mut message = crate::sessions::client_message(topic, e.message, e.store_timestamp_ms);
    let sp = message.system_properties.as_mut().expect("client_message sets system properties");
    sp.receipt_handle = Some(handle);
    sp.queue_id = e.queue_id as i32;
    sp.queue_offset = Some(e.offset as i64);
    sp.invisible_duration =
        Some(prost_types::Duration { seconds: invisible.as_secs() as i64, nanos: invisible.subsec_nanos() as i32 });
    sp.delivery_attempt = Some(d.attempt as i32);
    message
}

pub(super) fn status_only(s: rockraft_proto::rocketmq::Status) -> Vec<ReceiveMessageResponse> {
    vec![ReceiveMessageResponse { content: Some(Content::Status(s)) }]
}

fn nothing() -> Vec<ReceiveMessageResponse> {
    vec![
        ReceiveMessageResponse { content: Some(Content::Status(status(Code::MessageNotFound, "no new message"))) },
        ReceiveMessageResponse { content: Some(Content::DeliveryTimestamp(timestamp(now_ms()))) },
    ]
}

impl Proxy {
    pub(super) async fn consumer_group(&self, name: &str) -> Result<GroupConfig, Rejection> {
        if let Some(g) = self.broker.group(name) {
            return Ok(g);
        }
        if let Err(e) = self.cluster.catch_up().await {
            tracing::debug!(error = %e, "could not catch up before answering group-not-found");
        }
        self.broker
            .group(name)
            .ok_or_else(|| Rejection::new(Code::ConsumerGroupNotFound, format!("consumer group {name} does not exist")))
    }

    /// The whole answer to a receive: status, messages, delivery timestamp.
    pub(super) async fn receive(
        &self,
        req: &ReceiveMessageRequest,
        namespace: &str,
        grpc_timeout: Option<Duration>,
        caller: &Caller,
        client: &str,
    ) -> Vec<ReceiveMessageResponse> {
        self.renewals.seen(client);
        let user = match caller {
            Caller::User { access_key, .. } => Some(access_key),
            _ => None,
        };
        let mut params = match ReceiveParams::check(req, namespace) {
            Ok(p) => p,
            Err(Rejection(s)) => return status_only(s),
        };
        let longest = Duration::from_secs(self.options.limits.max_long_poll_secs);
        if params.long_polling > longest {
            let why =
                format!("long polling timeout {:?} is over this node's limit of {longest:?}", params.long_polling);
            return status_only(status(Code::IllegalPollingTime, why));
        }
        // Held until the answer is built, however the poll ends.
        let _slot = match self.polls.take(user, client) {
            Ok(slot) => slot,
            Err(Rejection(s)) => return status_only(s),
        };
        // From the start: catching up below counts against the client's deadline too.
        let deadline = Instant::now() + poll_budget(params.long_polling, grpc_timeout);
        let group = match self.consumer_group(&params.group).await {
            Ok(g) => g,
            Err(Rejection(s)) => return status_only(s),
        };
        let Some(topic) = self.topic(&params.topic_name).await else {
            return status_only(status(Code::TopicNotFound, format!("topic {} does not exist", params.topic_name)));
        };
        match crate::proxy::lite::lite_receive(&group, &topic, client) {
            Err(Rejection(s)) => return status_only(s),
            Ok(Some(client)) => {
                params.lite_client = Some(client);
                params.lite_by = crate::proxy::lite::actor(caller);
            }
            Ok(None) => {
                if let Err(Rejection(s)) = compile(&self.plugins, params.filter_kind, &params.filter_expression) {
                    return status_only(s);
                }
            }
        }
        // Before anything is popped: a delivery is handed out sealed or not at all.
        let keys = match self.handle_keys(&[]).await {
            Ok(k) => k,
            Err(s) => return status_only(s),
        };
        match self.poll(&params, &topic, deadline).await {
            Ok(pops) if pops.is_empty() => nothing(),
            Ok(pops) => {
                let (responses, streamed) = self.stream(&keys, &params, pops);
                if req.auto_renew {
                    let receipts =
                        streamed.iter().map(|(p, d)| (*p, d.receipt(&params.group, &params.topic_name))).collect();
                    self.renewals.track(client, receipts, params.invisible);
                }
                responses
            }
            Err(e) => status_only(pop_failed(&e)),
        }
    }

    /// Pops until something is delivered or the deadline passes, waking when the topic changes
    /// in a group holding its queues or the earliest invisible delivery falls due. Each round
    /// asks the groups holding the topic's queues in turn, from a different one each time, for
    /// what the batch still lacks; a group without a leader right now does not hold up the
    /// others.
    async fn poll(&self, p: &ReceiveParams, topic: &TopicConfig, deadline: Instant) -> Result<Pops, PopError> {
        let order = PopOrder {
            group: p.group.clone(),
            topic: p.topic_name.clone(),
            filter: p.filter_expression.clone(),
            filter_kind: p.filter_kind,
            max_messages: p.batch,
            invisible_ms: p.invisible.as_millis() as i64,
            attempt_id: p.attempt_id.clone(),
            lite_client: p.lite_client.clone(),
            lite_by: p.lite_by.clone(),
            with_messages: false,
        };
        loop {
            // What groups this node holds a replica of deliver is streamed from its own store; a
            // group held elsewhere sends its messages with the deliveries. Routes lead each
            // queue's receives to its group's leader, but some clients receive through the one
            // node they were given whatever the routes say.
            let groups: Vec<Cluster> = self.groups.holding(topic);
            let elsewhere = groups.iter().any(|g| !g.holds_replica());
            let mut changes: Vec<_> = groups
                .iter()
                .filter(|g| g.holds_replica())
                .map(|g| {
                    let mut w = g.broker().watch(&p.topic_name);
                    w.borrow_and_update();
                    w
                })
                .collect();
            let start = self.round_robin.fetch_add(1, Ordering::Relaxed) as usize % groups.len().max(1);
            let mut round = Round::default();
            for group in groups.iter().cycle().skip(start).take(groups.len()) {
                let order = PopOrder { max_messages: p.batch.saturating_sub(round.delivered()), ..order.clone() };
                // Bounded: a pop that is still under way at the deadline is abandoned (its
                // deliveries, if it commits, go to a retry with the same attempt_id, or come back
                // after their invisible time).
                let Ok(popped) = tokio::time::timeout_at(deadline, group.pop(&order)).await else {
                    return Ok(round.pops);
                };
                if !round.take(group, popped)? || round.delivered() >= p.batch {
                    break;
                }
            }
            if round.delivered() > 0 {
                return Ok(round.pops);
            }
            if let Some(why) = round.retry {
                if Instant::now() + UNAVAILABLE_RETRY >= deadline {
                    return Err(why);
                }
                tracing::debug!(%why, "a group could not take a pop yet; retrying");
                tokio::time::sleep(UNAVAILABLE_RETRY).await;
                continue;
            }
            if round.passed_over {
                // A sparse filter: the plan's scan limit ended before anything matched.
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Pops::new());
            }
            let mut wake = round
                .next_due_in_ms
                .map(|due| now + Duration::from_millis(due).max(MIN_WAIT))
                .map_or(deadline, |w| w.min(deadline));
            if elsewhere {
                // No change of a group held elsewhere is seen here: ask it again soon.
                wake = wake.min(now + REMOTE_POLL);
            }
            if changes.is_empty() {
                tokio::time::sleep_until(wake).await;
                continue;
            }
            let changed = futures_util::future::select_all(changes.iter_mut().map(|w| Box::pin(w.changed())));
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// The responses, and the deliveries they carry, each read from this node's store: of a
    /// queue, or of a lite topic (its message names the lite topic: the clients need it to ack).
    /// One this node cannot read (it has not applied it yet, or retention took it) is left to
    /// come back after its invisible time.
    fn stream(&self, keys: &HandleKeys, p: &ReceiveParams, pops: Pops) -> (Vec<ReceiveMessageResponse>, Vec<Streamed>) {
        let mut out = vec![ReceiveMessageResponse { content: Some(Content::Status(ok())) }];
        let mut streamed = Vec::new();
        for (group, popped) in pops {
            let (broker, partition) = (group.broker(), group.broker().partition());
            for (i, d) in popped.deliveries.iter().cloned().enumerate() {
                match popped.read(broker, &p.topic_name, i) {
                    Ok(Some(e)) => {
                        let handle = receipt::encode(keys, partition, &d, &p.group, &p.topic_name);
                        out.push(ReceiveMessageResponse {
                            content: Some(Content::Message(message(&p.topic, e, &d, handle, p.invisible))),
                        });
                        streamed.push((partition, d));
                    }
                    // Retention took it between plan and delivery: nothing to hand out.
                    Ok(None) => {}
                    Err(e) => tracing::error!(error = %e, offset = d.offset, "reading a delivered message failed"),
                }
            }
        }
        if streamed.is_empty() {
            return (nothing(), streamed);
        }
        out.push(ReceiveMessageResponse { content: Some(Content::DeliveryTimestamp(timestamp(now_ms()))) });
        (out, streamed)
    }
}

/// What a receive popped: each group's pop, with the group (whose store its messages are read
/// from, whose partition its handles name).
type Pops = Vec<(Cluster, Popped)>;

/// A delivery streamed, with the partition that made it.
type Streamed = (PartitionId, Delivery);

/// One round of pops over the groups holding a topic's queues.
#[derive(Default)]
struct Round {
    pops: Pops,
    next_due_in_ms: Option<u64>,
    passed_over: bool,
    /// Why a group could not take its pop now (no leader yet, a filter that could not run): the
    /// receive asks again while the client waits, if nothing else was delivered.
    retry: Option<PopError>,
}

impl Round {
    fn delivered(&self) -> usize {
        self.pops.iter().map(|(_, p)| p.deliveries.len()).sum()
    }

    /// Takes one group's answer; `Ok(false)` to end the round (what was delivered so far is
    /// streamed), `Err` if the receive fails with nothing delivered.
    fn take(&mut self, group: &Cluster, popped: Result<Popped, PopError>) -> Result<bool, PopError> {
        match popped {
            Ok(popped) => {
                self.passed_over |= popped.passed_over;
                self.next_due_in_ms = match (self.next_due_in_ms, popped.next_due_in_ms) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                if !popped.deliveries.is_empty() {
                    self.pops.push((group.clone(), popped));
                }
                Ok(true)
            }
            Err(PopError::Cluster(why)) if why.is_transient() => {
                self.retry.get_or_insert(PopError::Cluster(why));
                Ok(true)
            }
            Err(PopError::FilterUnavailable(why)) => {
                self.retry.get_or_insert(PopError::FilterUnavailable(why));
                Ok(true)
            }
            // A data group whose leader has not placed a topic or group created a moment ago:
            // it holds nothing of them yet (the metadata, checked first, has them).
            Err(PopError::TopicNotFound(_) | PopError::GroupNotFound(_)) if !group.broker().holds_metadata() => {
                Ok(true)
            }
            Err(e) if self.pops.is_empty() => Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "a group's pop failed; streaming what others delivered");
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_answers_before_the_client_gives_up() {
        assert_eq!(poll_budget(Duration::from_secs(20), None), Duration::from_secs(18));
        assert_eq!(poll_budget(Duration::from_secs(30), Some(Duration::from_secs(5))), Duration::from_millis(4500));
        assert!(poll_budget(Duration::from_millis(100), None) < Duration::from_millis(100));
    }

    #[test]
    fn requests_are_checked_before_anything_happens() {
        let good = ReceiveMessageRequest {
            group: Some(Resource { name: "g".into(), resource_namespace: String::new() }),
            message_queue: Some(rockraft_proto::rocketmq::MessageQueue {
                topic: Some(Resource { name: "t".into(), resource_namespace: String::new() }),
                ..Default::default()
            }),
            batch_size: 16,
            ..Default::default()
        };
        let p = ReceiveParams::check(&good, "").unwrap();
        assert_eq!((p.invisible, p.batch), (DEFAULT_INVISIBLE, 16));
        let code = |r: ReceiveMessageRequest| ReceiveParams::check(&r, "").map(drop).unwrap_err().0.code;
        assert_eq!(code(ReceiveMessageRequest { group: None, ..good.clone() }), Code::IllegalConsumerGroup as i32);
        assert_eq!(code(ReceiveMessageRequest { batch_size: 0, ..good.clone() }), Code::BadRequest as i32);
        let short = Some(prost_types::Duration { seconds: 0, nanos: 10_000_000 });
        assert_eq!(
            code(ReceiveMessageRequest { invisible_duration: short, ..good.clone() }),
            Code::IllegalInvisibleTime as i32
        );
        let sql = Some(FilterExpression { r#type: FilterType::Sql as i32, expression: "a > 1".into() });
        let p = ReceiveParams::check(&ReceiveMessageRequest { filter_expression: sql, ..good.clone() }, "").unwrap();
        assert_eq!((p.filter_kind, p.filter_expression.as_str()), (FilterKind::Sql92, "a > 1"));
    }

    #[test]
    fn filter_expressions_are_bounded() {
        let tags = |expression: String| Some(FilterExpression { r#type: FilterType::Tag as i32, expression });
        // "TagA || TagA || …" of exactly the limit, then one byte more.
        let at_limit = (0..).map(|_| "TagA").take(410).collect::<Vec<_>>().join(" || ");
        let at_limit = format!("{at_limit}{}", "x".repeat(MAX_FILTER_EXPRESSION_BYTES - at_limit.len()));
        assert_eq!(at_limit.len(), MAX_FILTER_EXPRESSION_BYTES);
        assert!(filter(tags(at_limit.clone()).as_ref()).is_ok());
        let too_long = filter(tags(format!("{at_limit}x")).as_ref()).map(drop).unwrap_err();
        assert_eq!(too_long.0.code, Code::IllegalFilterExpression as i32);
    }
}
