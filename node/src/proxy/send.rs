//! `SendMessage`: checking a request and turning it into one `SendBatch` per target queue.
//! Every check happens before anything is proposed, so a rejected request changes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use prost::Message as _;
use rockraft_proto::rocketmq::{Code, Message, MessageType, Resource, SendMessageRequest};
use rockraft_proto::rockraft::{SendBatch, StoredMessage};

use crate::broker::{MAX_MESSAGES_PER_ENTRY, TopicConfig, TopicKind};
use crate::proxy::status::Rejection;

/// Longest message id accepted. The id is the client's (the official SDKs make 34-character ids);
/// its shape is not checked, only bounded, as it is stored with every message.
pub const MAX_MESSAGE_ID_BYTES: usize = 128;
/// Longest tag accepted.
pub const MAX_TAG_BYTES: usize = 128;
/// Longest key accepted.
pub const MAX_KEY_BYTES: usize = 128;
/// Most keys one message may carry.
pub const MAX_KEYS: usize = 32;
/// Longest user property key accepted (all properties together are bounded by
/// `max_properties_bytes`).
pub const MAX_PROPERTY_KEY_BYTES: usize = 64;
/// Longest born host accepted (an address or host name).
pub const MAX_BORN_HOST_BYTES: usize = 256;

pub struct Limits {
    pub max_body_bytes: u64,
    pub max_properties_bytes: u64,
    /// How far ahead a delayed message may be due.
    pub max_delay_ms: i64,
    /// The node's clock, for the delay limit.
    pub now_ms: i64,
    /// When an unresolved half is first checked, unless the message says.
    pub transaction_recovery_ms: i64,
}

/// The batches to propose: per queue, the request positions of its messages and the batch.
pub struct SendPlan {
    pub batches: Vec<(Vec<usize>, SendBatch)>,
    /// Each message's id, by request position, for answers that carry no outcome.
    pub message_ids: Vec<String>,
}

/// Time left before the client's deadline for the answer to reach it.
const REPLY_MARGIN: Duration = Duration::from_millis(250);
/// The longest a send is held through an election or a leader that does not answer, whatever
/// deadline the client sets: about two elections (a follower stands after 0.8-1.0 s of silence).
/// A send that cannot be stored by then (its node cut off from the leader one way or both, a
/// leader that can no longer reach a majority) is answered `HA_NOT_AVAILABLE` within 2 s, and
/// the official clients retry it on another queue, usually on another node, while they still have
/// time. A retry of a send the old leader stored after all is deduplicated.
const MAX_SEND_HOLD: Duration = Duration::from_secs(2).saturating_sub(REPLY_MARGIN);

/// How long a send may be held, given how long its client waits (`grpc-timeout`).
pub fn hold(deadline: Option<Duration>) -> Duration {
    deadline.map_or(MAX_SEND_HOLD, |d| d.saturating_sub(REPLY_MARGIN).min(MAX_SEND_HOLD))
}

/// RocketMQ names a topic inside a namespace `namespace%topic`.
pub fn qualified(namespace: &str, name: &str) -> String {
    if namespace.is_empty() { name.to_string() } else { format!("{namespace}%{name}") }
}

/// The qualified name of `topic`: its own namespace, else the request's (`x-mq-namespace`).
pub fn topic_name(topic: &Resource, namespace: &str) -> String {
    let space = if topic.resource_namespace.is_empty() { namespace } else { &topic.resource_namespace };
    qualified(space, &topic.name)
}

fn ms(ts: &Option<prost_types::Timestamp>) -> i64 {
    ts.as_ref().map_or(0, |t| t.seconds.saturating_mul(1000).saturating_add(i64::from(t.nanos) / 1_000_000))
}

/// What type a message claims to be: the declared type, else what its properties imply.
fn declared_type(m: &Message) -> MessageType {
    let sp = m.system_properties.as_ref();
    match sp.map(|p| MessageType::try_from(p.message_type).unwrap_or(MessageType::Unspecified)) {
        Some(t) if t != MessageType::Unspecified => t,
        _ if sp.is_some_and(|p| p.message_group.is_some()) => MessageType::Fifo,
        _ if sp.is_some_and(|p| p.lite_topic.is_some()) => MessageType::Lite,
        _ if sp.is_some_and(|p| p.delivery_timestamp.is_some()) => MessageType::Delay,
        _ => MessageType::Normal,
    }
}

fn check(m: &Message, topic: &TopicConfig, limits: &Limits) -> Result<(), Rejection> {
    let sp = m
        .system_properties
        .as_ref()
        .ok_or_else(|| Rejection::new(Code::BadRequest, "message without system properties"))?;
    if sp.message_id.is_empty() || sp.message_id.len() > MAX_MESSAGE_ID_BYTES {
        return Err(Rejection::new(
            Code::IllegalMessageId,
            format!("a message id must have 1 to {MAX_MESSAGE_ID_BYTES} bytes, got {}", sp.message_id.len()),
        ));
    }
    if m.body.is_empty() {
        return Err(Rejection::new(Code::BadRequest, "message body is empty"));
    }
    if m.body.len() as u64 > limits.max_body_bytes {
        return Err(Rejection::new(
            Code::MessageBodyTooLarge,
            format!("body of {} bytes exceeds the limit of {}", m.body.len(), limits.max_body_bytes),
        ));
    }
    let props: usize = m.user_properties.iter().map(|(k, v)| k.len() + v.len()).sum();
    if props as u64 > limits.max_properties_bytes {
        return Err(Rejection::new(
            Code::MessagePropertiesTooLarge,
            format!("properties of {props} bytes exceed the limit of {}", limits.max_properties_bytes),
        ));
    }
    if m.user_properties.keys().any(|k| k.trim().is_empty()) {
        return Err(Rejection::new(Code::IllegalMessagePropertyKey, "blank property key"));
    }
    if let Some(k) = m.user_properties.keys().find(|k| k.len() > MAX_PROPERTY_KEY_BYTES) {
        return Err(Rejection::new(
            Code::IllegalMessagePropertyKey,
            format!("property key of {} bytes exceeds the limit of {MAX_PROPERTY_KEY_BYTES}", k.len()),
        ));
    }
    if let Some(tag) = &sp.tag {
        if tag.len() > MAX_TAG_BYTES {
            return Err(Rejection::new(
                Code::IllegalMessageTag,
                format!("tag of {} bytes exceeds the limit of {MAX_TAG_BYTES}", tag.len()),
            ));
        }
        if tag.trim().is_empty() || tag.contains('|') {
            return Err(Rejection::new(Code::IllegalMessageTag, format!("illegal tag {tag:?}")));
        }
    }
    if sp.keys.len() > MAX_KEYS {
        return Err(Rejection::new(
            Code::IllegalMessageKey,
            format!("{} keys exceed the limit of {MAX_KEYS} per message", sp.keys.len()),
        ));
    }
    if let Some(k) = sp.keys.iter().find(|k| k.len() > MAX_KEY_BYTES) {
        return Err(Rejection::new(
            Code::IllegalMessageKey,
            format!("key of {} bytes exceeds the limit of {MAX_KEY_BYTES}", k.len()),
        ));
    }
    if sp.keys.iter().any(|k| k.trim().is_empty()) {
        return Err(Rejection::new(Code::IllegalMessageKey, "blank message key"));
    }
    if sp.born_host.len() > MAX_BORN_HOST_BYTES {
        return Err(Rejection::new(
            Code::BadRequest,
            format!("born host of {} bytes exceeds the limit of {MAX_BORN_HOST_BYTES}", sp.born_host.len()),
        ));
    }
    if let Some(g) = &sp.message_group
        && (g.trim().is_empty() || g.len() > 64)
    {
        return Err(Rejection::new(Code::IllegalMessageGroup, format!("illegal message group {g:?}")));
    }
    let kind = declared_type(m);
    if !topic.kind.accepted_message_types().contains(&kind) {
        return Err(Rejection::new(
            Code::MessagePropertyConflictWithType,
            format!("a {} message cannot go to {} topic {}", kind.as_str_name(), topic.kind, topic.name),
        ));
    }
    if topic.kind == TopicKind::Delay {
        let due =
            sp.delivery_timestamp.as_ref().map(|t| ms(&Some(*t))).ok_or_else(|| {
                Rejection::new(Code::IllegalDeliveryTime, "a delay message needs a delivery timestamp")
            })?;
        let latest = limits.now_ms.saturating_add(limits.max_delay_ms);
        if due > latest {
            return Err(Rejection::new(
                Code::IllegalDeliveryTime,
                format!(
                    "delivery time {due} is more than {} s ahead (the limit is max_delay_secs)",
                    limits.max_delay_ms / 1000
                ),
            ));
        }
    } else if sp.delivery_timestamp.is_some() {
        return Err(Rejection::new(
            Code::MessagePropertyConflictWithType,
            format!("a delivery timestamp needs a delay topic, {} is {}", topic.name, topic.kind),
        ));
    }
    if let Some(d) = &sp.orphaned_transaction_recovery_duration
        && (d.seconds < 0 || d.nanos < 0)
    {
        return Err(Rejection::new(Code::BadRequest, "negative transaction recovery duration"));
    }
    check_priority(sp, topic)?;
    check_lite(sp, topic)
}

/// A lite parent's messages each name a lite topic (RocketMQ's name rule), and only theirs do.
fn check_lite(sp: &rockraft_proto::rocketmq::SystemProperties, topic: &TopicConfig) -> Result<(), Rejection> {
    match (&sp.lite_topic, topic.kind) {
        (Some(lite), TopicKind::Lite) => {
            crate::broker::lite::validate_lite_name(lite)
                .map_err(|e| Rejection::new(Code::IllegalLiteTopic, e.to_string()))?;
            if sp.message_group.is_some() {
                return Err(Rejection::new(
                    Code::MessagePropertyConflictWithType,
                    "a lite message cannot have a message group",
                ));
            }
            Ok(())
        }
        (None, TopicKind::Lite) => Err(Rejection::new(
            Code::IllegalLiteTopic,
            format!("a message to lite topic {} needs a lite topic", topic.name),
        )),
        (Some(_), kind) => Err(Rejection::new(
            Code::MessagePropertyConflictWithType,
            format!("a lite topic needs a lite parent topic, {} is {kind}", topic.name),
        )),
        (None, _) => Ok(()),
    }
}

/// A priority is 0 or more, and only a priority topic's messages have one. The clients treat
/// priority 0 as unset in their own checks, so 0 passes on any topic and means none elsewhere.
fn check_priority(sp: &rockraft_proto::rocketmq::SystemProperties, topic: &TopicConfig) -> Result<(), Rejection> {
    match sp.priority {
        Some(p) if p < 0 => Err(Rejection::new(Code::BadRequest, format!("priority {p} is below 0"))),
        Some(p) if p > 0 && topic.kind != TopicKind::Priority => Err(Rejection::new(
            Code::MessagePropertyConflictWithType,
            format!("a message with priority {p} needs a priority topic, {} is {}", topic.name, topic.kind),
        )),
        _ if topic.kind == TopicKind::Priority && sp.message_group.is_some() => {
            Err(Rejection::new(Code::MessagePropertyConflictWithType, "a priority message cannot have a message group"))
        }
        _ if sp.lite_topic.is_some() && topic.kind == TopicKind::Priority => {
            Err(Rejection::new(Code::MessagePropertyConflictWithType, "a priority message cannot go to a lite topic"))
        }
        _ => Ok(()),
    }
}

/// The queue a priority message goes to: its priority, or the topic's highest queue.
fn priority_queue(priority: i32, queues: u32) -> u32 {
    u32::try_from(priority).unwrap_or(0).min(queues.saturating_sub(1))
}

/// The message as the log stores it; takes the request's fields rather than copying them.
fn stored(m: Message, limits: &Limits, sender: &str) -> StoredMessage {
    let message_type = declared_type(&m);
    let sp = m.system_properties.unwrap_or_default();
    let recovery = sp
        .orphaned_transaction_recovery_duration
        .filter(|d| d.seconds > 0 || d.nanos > 0)
        .map(|d| d.seconds.saturating_mul(1000).saturating_add(i64::from(d.nanos) / 1_000_000));
    StoredMessage {
        transaction_recovery_ms: if message_type == MessageType::Transaction {
            recovery.unwrap_or(limits.transaction_recovery_ms)
        } else {
            0
        },
        born_timestamp_ms: ms(&sp.born_timestamp),
        delivery_timestamp_ms: ms(&sp.delivery_timestamp),
        message_id: sp.message_id,
        tag: sp.tag.unwrap_or_default(),
        keys: sp.keys,
        properties: m.user_properties,
        body: m.body,
        born_host: sp.born_host,
        message_group: sp.message_group.unwrap_or_default(),
        message_type: message_type as i32,
        priority_plus_one: match sp.priority {
            Some(p) if message_type == MessageType::Priority && p >= 0 => p.unsigned_abs() + 1,
            _ => 0,
        },
        lite_topic: sp.lite_topic.unwrap_or_default(),
        sender: sender.to_string(),
    }
}

/// The queue of a send that is neither FIFO nor prioritized. A client retries a send it got no
/// answer to with the same ids, and the Java and Rust clients name the next queue when they do,
/// the Python client none. Each data group's dedupe window covers the topic's queues it holds, so
/// what must not change between attempts is the group: it is derived from the send's first id
/// (`group_of_id`), every attempt meets the first in that group's window and is answered with
/// the first copy's result instead of being stored again (`docs/durability.md`). Within the
/// group the client's queue is kept when it is there, else the group's next queue after it (or,
/// naming none, `next_queue`'s pick among them). On one data group: the client's queue, as ever.
pub fn queue_for(topic: &TopicConfig, named: i32, message_id: &str, next_queue: impl FnOnce(u32) -> u32) -> u32 {
    let named = u32::try_from(named).ok().filter(|q| *q < topic.queues);
    // One data group (the common case): nothing to compute.
    if (1..topic.queues).all(|q| topic.group_of(q) == topic.group_of(0)) {
        return named.unwrap_or_else(|| next_queue(topic.queues));
    }
    let groups: std::collections::BTreeSet<u32> = (0..topic.queues).map(|q| topic.group_of(q)).collect();
    let owner = groups.iter().copied().nth(group_of_id(message_id, groups.len())).expect("within the groups");
    let theirs: Vec<u32> = (0..topic.queues).filter(|q| topic.group_of(*q) == owner).collect();
    match named {
        Some(q) if topic.group_of(q) == owner => q,
        Some(q) => theirs.iter().copied().find(|t| *t > q).unwrap_or(theirs[0]),
        None => theirs[next_queue(theirs.len() as u32) as usize % theirs.len()],
    }
}

/// Which of `groups` groups a message id belongs to (by position in the ordered groups).
pub fn group_of_id(message_id: &str, groups: usize) -> usize {
    // Another seed than message groups', so a message group's name and an id equal to it do not
    // share a queue for that reason.
    (crc32c::crc32c_append(0x5157_4944, message_id.as_bytes()) as usize) % groups.max(1)
}

/// The Python client (5.1.2) never sets a message's queue id: its 0 is the protobuf default, not
/// a choice, and taken as one it would put every message in queue 0. Its messages are marked as
/// naming no queue, so the broker spreads them as Apache's proxy does.
pub fn forget_python_queue_ids(req: &mut SendMessageRequest) {
    for sp in req.messages.iter_mut().filter_map(|m| m.system_properties.as_mut()) {
        sp.queue_id = -1;
    }
}

/// Checks `req` and groups its messages by target queue. `topic_of` resolves a qualified topic
/// name; `next_queue` picks among `n` queues for a send that names none that exists; `sender` is
/// the caller's access key ("" with authentication off), stored with each message. The batches
/// carry no store time yet: the leader stamps its own when it proposes them.
pub fn plan(
    req: SendMessageRequest,
    namespace: &str,
    sender: &str,
    topic_of: impl Fn(&str) -> Option<TopicConfig>,
    limits: &Limits,
    next_queue: impl FnOnce(u32) -> u32,
) -> Result<SendPlan, Rejection> {
    let first = req.messages.first().ok_or_else(|| Rejection::new(Code::BadRequest, "no messages to send"))?;
    if req.messages.len() > MAX_MESSAGES_PER_ENTRY {
        return Err(Rejection::new(Code::BadRequest, format!("at most {MAX_MESSAGES_PER_ENTRY} messages per send")));
    }
    let name_of = |m: &Message| m.topic.as_ref().map(|r| topic_name(r, namespace));
    let name = name_of(first)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Rejection::new(Code::BadRequest, "message without a topic"))?;
    if req.messages.iter().any(|m| name_of(m).as_deref() != Some(&name)) {
        return Err(Rejection::new(Code::BadRequest, "all messages of one send must share a topic"));
    }
    crate::broker::topic::validate_name(&name).map_err(|e| Rejection::new(Code::IllegalTopic, e.to_string()))?;
    let topic =
        topic_of(&name).ok_or_else(|| Rejection::new(Code::TopicNotFound, format!("topic {name} does not exist")))?;
    for m in &req.messages {
        check(m, &topic, limits)?;
    }
    let mut by_queue: BTreeMap<u32, (Vec<usize>, Vec<bytes::Bytes>)> = BTreeMap::new();
    let mut message_ids = Vec::with_capacity(req.messages.len());
    // One queue for the whole send: its messages stay in one entry, and a retry (the same
    // messages) meets them in the same group.
    let by_id =
        first.system_properties.as_ref().map_or(0, |sp| queue_for(&topic, sp.queue_id, &sp.message_id, next_queue));
    for (i, m) in req.messages.into_iter().enumerate() {
        let sp = m.system_properties.as_ref().expect("checked");
        let queue = match (&sp.message_group, sp.priority) {
            // One message group always lands in one queue, whichever client sent it.
            (Some(g), _) => crc32c::crc32c(g.as_bytes()) % topic.queues,
            // The clients pick a queue round robin whatever the priority: the broker places it.
            (None, Some(p)) if topic.kind == TopicKind::Priority => priority_queue(p, topic.queues),
            (None, _) => by_id,
        };
        message_ids.push(sp.message_id.clone());
        let entry = by_queue.entry(queue).or_default();
        entry.0.push(i);
        entry.1.push(stored(m, limits, sender).encode_to_vec().into());
    }
    let batches = by_queue
        .into_iter()
        .map(|(queue_id, (positions, messages))| {
            (
                positions,
                SendBatch {
                    topic: name.clone(),
                    queue_id,
                    store_timestamp_ms: 0,
                    clock_ms: 0,
                    messages,
                    queue_ids: vec![],
                },
            )
        })
        .collect();
    Ok(SendPlan { batches, message_ids })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rockraft_proto::rocketmq::SystemProperties;

    #[test]
    fn a_send_is_answered_within_two_seconds_and_before_its_clients_deadline() {
        let ms = |ms: u64| Duration::from_millis(ms);
        // The official clients' 3 s, a patient client's 10 s, and no deadline at all.
        for deadline in [Some(ms(3_000)), Some(ms(10_000)), None] {
            assert_eq!(hold(deadline), ms(1_750), "{deadline:?}");
        }
        // A short deadline leaves the answer time to reach the client.
        assert_eq!(hold(Some(ms(1_000))), ms(750));
        assert_eq!(hold(Some(ms(100))), Duration::ZERO);
    }

    const LIMITS: Limits = Limits {
        max_body_bytes: 16,
        max_properties_bytes: 32,
        max_delay_ms: 1000,
        now_ms: 10_000,
        transaction_recovery_ms: 6000,
    };

    fn msg(topic: &str, body: &str, group: Option<&str>) -> Message {
        Message {
            topic: Some(Resource { resource_namespace: String::new(), name: topic.into() }),
            user_properties: Default::default(),
            system_properties: Some(SystemProperties {
                message_id: format!("id-{body}"),
                message_group: group.map(String::from),
                message_type: if group.is_some() { MessageType::Fifo as i32 } else { MessageType::Normal as i32 },
                queue_id: 1,
                ..Default::default()
            }),
            body: bytes::Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    fn topics(name: &str) -> Option<TopicConfig> {
        match name {
            "N" => Some(TopicConfig::new("N", 4, TopicKind::Normal)),
            "F" => Some(TopicConfig::new("F", 4, TopicKind::Fifo)),
            "D" => Some(TopicConfig::new("D", 4, TopicKind::Delay)),
            "P" => Some(TopicConfig::new("P", 4, TopicKind::Priority)),
            "L" => Some(TopicConfig::new("L", 4, TopicKind::Lite)),
            _ => None,
        }
    }

    fn code(req: &SendMessageRequest) -> i32 {
        plan(req.clone(), "", "", topics, &LIMITS, |_| 0).err().map_or(Code::Ok as i32, |r| r.0.code)
    }

    #[test]
    fn bad_sends_get_the_rocketmq_status_for_what_is_wrong() {
        let one = |m: Message| SendMessageRequest { messages: vec![m] };
        assert_eq!(code(&one(msg("missing", "x", None))), Code::TopicNotFound as i32);
        assert_eq!(code(&one(msg("N", &"x".repeat(17), None))), Code::MessageBodyTooLarge as i32);
        assert_eq!(code(&one(msg("N", "x", Some("g")))), Code::MessagePropertyConflictWithType as i32);
        assert_eq!(code(&one(msg("F", "x", None))), Code::MessagePropertyConflictWithType as i32);
        assert_eq!(code(&one(msg("N", "", None))), Code::BadRequest as i32);
        assert_eq!(code(&one(msg("../N", "x", None))), Code::IllegalTopic as i32);
        assert_eq!(code(&SendMessageRequest { messages: vec![] }), Code::BadRequest as i32);
        let mut big = msg("N", "x", None);
        big.user_properties.insert("k".into(), "v".repeat(40));
        assert_eq!(code(&one(big)), Code::MessagePropertiesTooLarge as i32);
        let mut no_props = msg("N", "x", None);
        no_props.system_properties = None;
        assert_eq!(code(&one(no_props)), Code::BadRequest as i32);
        assert_eq!(
            code(&SendMessageRequest { messages: vec![msg("N", "a", None), msg("F", "b", Some("g"))] }),
            Code::BadRequest as i32
        );
    }

    /// The status a single message to topic `N` gets after `edit`.
    fn code_after(edit: impl FnOnce(&mut Message, &mut SystemProperties)) -> i32 {
        let mut m = msg("N", "x", None);
        let mut sp = m.system_properties.take().unwrap();
        edit(&mut m, &mut sp);
        m.system_properties = Some(sp);
        code(&SendMessageRequest { messages: vec![m] })
    }

    #[test]
    fn message_ids_must_be_present_and_bounded() {
        assert_eq!(code_after(|_, sp| sp.message_id = String::new()), Code::IllegalMessageId as i32);
        assert_eq!(code_after(|_, sp| sp.message_id = "i".repeat(129)), Code::IllegalMessageId as i32);
        assert_eq!(code_after(|_, sp| sp.message_id = "not-a-uuid but fine".repeat(6)), Code::Ok as i32);
    }

    #[test]
    fn tags_keys_and_property_keys_are_bounded() {
        assert_eq!(code_after(|_, sp| sp.tag = Some("t".repeat(128))), Code::Ok as i32);
        assert_eq!(code_after(|_, sp| sp.tag = Some("t".repeat(129))), Code::IllegalMessageTag as i32);
        assert_eq!(code_after(|_, sp| sp.keys = vec!["k".repeat(128)]), Code::Ok as i32);
        assert_eq!(code_after(|_, sp| sp.keys = vec!["k".repeat(129)]), Code::IllegalMessageKey as i32);
        assert_eq!(code_after(|_, sp| sp.keys = (0..32).map(|i| i.to_string()).collect()), Code::Ok as i32);
        assert_eq!(
            code_after(|_, sp| sp.keys = (0..33).map(|i| i.to_string()).collect()),
            Code::IllegalMessageKey as i32
        );
        let limits = Limits { max_properties_bytes: 1 << 10, ..LIMITS };
        let with_key = |len: usize| {
            let mut m = msg("N", "x", None);
            m.user_properties.insert("p".repeat(len), "v".into());
            plan(SendMessageRequest { messages: vec![m] }, "", "", topics, &limits, |_| 0)
                .err()
                .map_or(Code::Ok as i32, |r| r.0.code)
        };
        assert_eq!(with_key(64), Code::Ok as i32);
        assert_eq!(with_key(65), Code::IllegalMessagePropertyKey as i32);
        assert_eq!(code_after(|_, sp| sp.born_host = "h".repeat(257)), Code::BadRequest as i32);
    }

    #[test]
    fn delivery_times_are_bounded_once_at_the_edge() {
        let delayed = |due: Option<i64>| {
            let mut m = msg("D", "x", None);
            let sp = m.system_properties.as_mut().unwrap();
            sp.message_type = MessageType::Delay as i32;
            sp.delivery_timestamp = due.map(crate::proxy::timestamp);
            code(&SendMessageRequest { messages: vec![m] })
        };
        // LIMITS: now 10 s, at most 1 s ahead.
        assert_eq!(delayed(Some(11_000)), Code::Ok as i32);
        assert_eq!(delayed(Some(1)), Code::Ok as i32, "a time in the past delivers at once");
        assert_eq!(delayed(Some(11_001)), Code::IllegalDeliveryTime as i32);
        assert_eq!(delayed(None), Code::IllegalDeliveryTime as i32);
        let mut normal = msg("N", "x", None);
        normal.system_properties.as_mut().unwrap().delivery_timestamp = Some(crate::proxy::timestamp(11_000));
        assert_eq!(code(&SendMessageRequest { messages: vec![normal] }), Code::MessagePropertyConflictWithType as i32);
    }

    #[test]
    fn one_message_group_always_maps_to_one_queue() {
        let req = SendMessageRequest {
            messages: vec![msg("F", "a", Some("g1")), msg("F", "b", Some("g1")), msg("F", "c", Some("g2"))],
        };
        let p = plan(req.clone(), "", "", topics, &LIMITS, |_| 0).unwrap();
        let queue_of = |pos: usize| p.batches.iter().find(|(ps, _)| ps.contains(&pos)).unwrap().1.queue_id;
        assert_eq!(queue_of(0), queue_of(1));
        assert!(p.batches.iter().all(|(_, b)| b.topic == "F"));
        let again = plan(req, "", "", topics, &LIMITS, |_| 0).unwrap();
        assert_eq!(
            again.batches.iter().map(|(_, b)| b.queue_id).collect::<Vec<_>>(),
            p.batches.iter().map(|(_, b)| b.queue_id).collect::<Vec<_>>()
        );
    }

    #[test]
    fn on_one_data_group_a_named_queue_is_used_and_a_missing_one_is_picked() {
        let req = SendMessageRequest { messages: vec![msg("N", "a", None)] };
        assert_eq!(plan(req, "", "", topics, &LIMITS, |_| 2).unwrap().batches[0].1.queue_id, 1);
        let mut m = msg("N", "a", None);
        m.system_properties.as_mut().unwrap().queue_id = 9;
        let req = SendMessageRequest { messages: vec![m] };
        assert_eq!(plan(req, "", "", topics, &LIMITS, |_| 2).unwrap().batches[0].1.queue_id, 2);
        let mut req = SendMessageRequest { messages: vec![msg("N", "a", None)] };
        req.messages[0].system_properties.as_mut().unwrap().queue_id = 0;
        assert_eq!(plan(req.clone(), "", "", topics, &LIMITS, |_| 3).unwrap().batches[0].1.queue_id, 0);
        forget_python_queue_ids(&mut req);
        assert_eq!(
            plan(req, "", "", topics, &LIMITS, |_| 3).unwrap().batches[0].1.queue_id,
            3,
            "the Python client's queue 0 names no queue: the broker picks"
        );
    }

    #[test]
    fn on_several_data_groups_every_attempt_of_a_send_lands_in_its_ids_group() {
        // Six queues over groups 1, 2, 3, 1, 2, 3.
        let spread = TopicConfig { groups: vec![1, 2, 3, 1, 2, 3], ..TopicConfig::new("S", 6, TopicKind::Normal) };
        let topic_of = |name: &str| (name == "S").then(|| spread.clone());
        let to = |named: i32, id: &str, pick: u32| {
            let mut m = msg("S", "x", None);
            let sp = m.system_properties.as_mut().unwrap();
            (sp.queue_id, sp.message_id) = (named, id.to_string());
            plan(SendMessageRequest { messages: vec![m] }, "", "", topic_of, &LIMITS, |_| pick).unwrap().batches[0]
                .1
                .queue_id
        };
        let mut owners = std::collections::BTreeSet::new();
        for i in 0..40 {
            let id = format!("m-{i}");
            let owner = spread.group_of(to(0, &id, 0));
            owners.insert(owner);
            // Whatever queue an attempt names (the Java and Rust clients name the next one on a
            // retry), or none (Python), it lands in the same group.
            for named in [-1, 0, 1, 2, 3, 4, 5, 9] {
                for pick in 0..3 {
                    let q = to(named, &id, pick);
                    assert_eq!(spread.group_of(q), owner, "{id} naming {named}");
                    // The client's queue is kept when it is in that group.
                    if (0..6).contains(&named) && spread.group_of(named as u32) == owner {
                        assert_eq!(q, named as u32);
                    }
                }
            }
        }
        assert_eq!(owners.len(), 3, "ids spread over the groups");
    }

    fn lite(topic: &str, body: &str, lite_topic: Option<&str>) -> Message {
        let mut m = msg(topic, body, None);
        let sp = m.system_properties.as_mut().unwrap();
        sp.lite_topic = lite_topic.map(String::from);
        sp.message_type = MessageType::Lite as i32;
        m
    }

    #[test]
    fn a_lite_message_names_a_legal_lite_topic_of_a_lite_parent_and_keeps_it() {
        let one = |m: Message| SendMessageRequest { messages: vec![m] };
        let p = plan(one(lite("L", "a", Some("session-42_x"))), "", "", topics, &LIMITS, |_| 0).unwrap();
        let stored = StoredMessage::decode(p.batches[0].1.messages[0].clone()).unwrap();
        assert_eq!((stored.lite_topic.as_str(), stored.message_type), ("session-42_x", MessageType::Lite as i32));
        for bad in ["", "a b", "a/b", "ü", &"x".repeat(65)] {
            assert_eq!(code(&one(lite("L", "a", Some(bad)))), Code::IllegalLiteTopic as i32, "{bad:?}");
        }
        assert_eq!(code(&one(lite("L", "a", None))), Code::IllegalLiteTopic as i32, "a lite topic is required");
        assert_eq!(
            code(&one(msg("L", "a", None))),
            Code::MessagePropertyConflictWithType as i32,
            "NORMAL to a lite parent"
        );
        assert_eq!(code(&one(lite("N", "a", Some("x")))), Code::MessagePropertyConflictWithType as i32);
        let mut untyped = lite("N", "a", Some("x"));
        untyped.system_properties.as_mut().unwrap().message_type = 0;
        assert_eq!(code(&one(untyped)), Code::MessagePropertyConflictWithType as i32, "lite implied by its property");
    }

    fn prioritized(topic: &str, body: &str, priority: Option<i32>) -> Message {
        let mut m = msg(topic, body, None);
        let sp = m.system_properties.as_mut().unwrap();
        sp.priority = priority;
        if priority.is_some() {
            sp.message_type = MessageType::Priority as i32;
        }
        m
    }

    #[test]
    fn a_priority_message_goes_to_its_priority_queue_and_keeps_its_priority() {
        let one = |m: Message| SendMessageRequest { messages: vec![m] };
        for (priority, queue) in [(0, 0), (2, 2), (3, 3), (4, 3), (i32::MAX, 3)] {
            let p = plan(one(prioritized("P", "a", Some(priority))), "", "", topics, &LIMITS, |_| 0).unwrap();
            let batch = &p.batches[0].1;
            assert_eq!(batch.queue_id, queue, "priority {priority}: the client's queue 1 is not used");
            let stored = StoredMessage::decode(batch.messages[0].clone()).unwrap();
            assert_eq!(
                (stored.priority_plus_one, stored.message_type),
                (priority as u32 + 1, MessageType::Priority as i32)
            );
        }
        // Without a priority, a priority topic's message takes the queue it names, like any.
        let p = plan(one(prioritized("P", "a", None)), "", "", topics, &LIMITS, |_| 2).unwrap();
        assert_eq!(p.batches[0].1.queue_id, 1);
    }

    #[test]
    fn priorities_are_refused_where_they_do_not_belong() {
        let one = |m: Message| SendMessageRequest { messages: vec![m] };
        assert_eq!(code(&one(prioritized("P", "a", Some(-1)))), Code::BadRequest as i32);
        assert_eq!(code(&one(prioritized("N", "a", Some(3)))), Code::MessagePropertyConflictWithType as i32);
        let mut grouped = prioritized("P", "a", Some(3));
        grouped.system_properties.as_mut().unwrap().message_group = Some("g".into());
        assert_eq!(code(&one(grouped)), Code::MessagePropertyConflictWithType as i32);
        // Priority 0 on another kind of message is how the clients say "unset".
        let mut fifo = msg("F", "a", Some("g"));
        fifo.system_properties.as_mut().unwrap().priority = Some(0);
        assert_eq!(code(&one(fifo)), Code::Ok as i32);
    }
}
