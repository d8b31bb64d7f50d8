//! SEND_MESSAGE (10, long field names), SEND_MESSAGE_V2 (310, fields `a`…`n`) and
//! SEND_BATCH_MESSAGE (320), and CONSUMER_SEND_MSG_BACK (36). A send becomes the gRPC path's
//! `SendMessageRequest` and is stored by it: the same checks, queue choice, dedupe window and
//! replication. What the topic's kind needs is read from the message: a delay level or timer
//! property on a delay topic, a sharding key (or the chosen queue) on a FIFO topic.

use std::collections::BTreeMap;
use std::io::Read as _;

use bytes::{Buf, Bytes};
use rockraft_proto::rocketmq::{Message, MessageType, Resource, SendMessageRequest, SystemProperties};

use crate::auth::Caller;
use crate::broker::access::{Action, ResourceKind};
use crate::broker::{TopicConfig, TopicKind};
use crate::remoting::codes::*;
use crate::remoting::frame::Frame;
use crate::remoting::message::{self, *};
use crate::remoting::{Remoting, flag, number};
use crate::sessions::timestamp;

/// Most bytes of shared properties a batch's messages hold together (each carries a copy).
const MAX_BATCH_PROPERTY_BYTES: usize = 16 << 20;
/// sysFlag bit 0: the body is zlib-compressed (for a batch, the whole batch body).
const COMPRESSED: i32 = 1;

/// The send header, whichever names it came with.
#[derive(Debug, Default, Clone)]
pub struct SendHeader {
    pub topic: String,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub properties: String,
    pub reconsume_times: i32,
    pub batch: bool,
}

impl SendHeader {
    pub fn of(request: &Frame) -> SendHeader {
        let v2 = request.code == SEND_MESSAGE_V2 || request.code == SEND_BATCH_MESSAGE;
        let name = |long: &'static str, short: &'static str| if v2 { short } else { long };
        SendHeader {
            topic: request.field(name("topic", "b")).unwrap_or_default().to_string(),
            queue_id: number(request, name("queueId", "e")).unwrap_or(-1),
            sys_flag: number(request, name("sysFlag", "f")).unwrap_or(0),
            born_timestamp_ms: number(request, name("bornTimestamp", "g")).unwrap_or(0),
            properties: request.field(name("properties", "i")).unwrap_or_default().to_string(),
            reconsume_times: number(request, name("reconsumeTimes", "j")).unwrap_or(0),
            batch: request.code == SEND_BATCH_MESSAGE || flag(request, name("batch", "m")),
        }
    }
}

/// Why a send's bytes cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadSend {
    #[error("compressed body does not inflate: {0}")]
    Inflate(String),
    #[error("body inflates beyond {0} bytes")]
    TooLarge(u64),
    #[error("batch entry {0} is cut short")]
    Truncated(usize),
    #[error("batch properties are not UTF-8")]
    NotUtf8,
    #[error("a batch holds at most {0} messages")]
    TooMany(usize),
}

/// One message of a send: its properties and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    pub properties: BTreeMap<String, String>,
    pub body: Bytes,
}

/// Inflates a zlib body, refusing one that grows past `limit`.
pub fn inflate(body: &[u8], limit: u64) -> Result<Bytes, BadSend> {
    let mut out = Vec::new();
    let mut reader = flate2::read::ZlibDecoder::new(body).take(limit + 1);
    reader.read_to_end(&mut out).map_err(|e| BadSend::Inflate(e.to_string()))?;
    if out.len() as u64 > limit {
        return Err(BadSend::TooLarge(limit));
    }
    Ok(Bytes::from(out))
}

/// The messages of a send: one, or a batch's entries (`int32 total | int32 magic | int32 CRC |
/// int32 flag | int32 body length | body | int16 properties length | properties`).
pub fn messages_of(header: &SendHeader, body: Bytes, max_body: u64) -> Result<Vec<Sent>, BadSend> {
    let body = if header.sys_flag & COMPRESSED != 0 {
        // A batch is bounded by its messages' count too: each may reach the body limit.
        let limit = if header.batch { max_body.saturating_mul(4) } else { max_body };
        inflate(&body, limit)?
    } else {
        body
    };
    let shared = parse_properties(&header.properties);
    if !header.batch {
        return Ok(vec![Sent { properties: shared, body }]);
    }
    let mut rest = body;
    let mut out = Vec::new();
    while rest.has_remaining() {
        let at = out.len();
        if at >= crate::broker::MAX_MESSAGES_PER_ENTRY {
            return Err(BadSend::TooMany(crate::broker::MAX_MESSAGES_PER_ENTRY));
        }
        if rest.remaining() < 20 {
            return Err(BadSend::Truncated(at));
        }
        let _total = rest.get_i32();
        let _magic = rest.get_i32();
        let _crc = rest.get_i32();
        let _flag = rest.get_i32();
        let body_len = usize::try_from(rest.get_i32()).map_err(|_| BadSend::Truncated(at))?;
        if rest.remaining() < body_len + 2 {
            return Err(BadSend::Truncated(at));
        }
        let body = rest.split_to(body_len);
        let props_len = usize::try_from(rest.get_i16()).map_err(|_| BadSend::Truncated(at))?;
        if rest.remaining() < props_len {
            return Err(BadSend::Truncated(at));
        }
        let props = std::str::from_utf8(&rest.split_to(props_len)).map_err(|_| BadSend::NotUtf8)?.to_string();
        // The shared properties are copied into each message: bounded together.
        if header.properties.len().saturating_mul(at + 1) > MAX_BATCH_PROPERTY_BYTES {
            return Err(BadSend::TooMany(at));
        }
        let mut properties = shared.clone();
        properties.extend(parse_properties(&props));
        out.push(Sent { properties, body });
    }
    Ok(out)
}

/// A message id for a message its producer gave none (a batch's shared properties carry none).
fn fresh_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{:016X}{:08X}{:08X}", crate::cluster::now_ms(), std::process::id(), n as u32)
}

/// The gRPC message a Remoting message is stored as, for `topic`. `now_ms` dates delays.
pub fn grpc_message(sent: Sent, topic: &TopicConfig, queue_id: i32, born: (i64, &str), now_ms: i64) -> Message {
    let Sent { properties, body } = sent;
    let text = |k: &str| properties.get(k).cloned();
    let delivery_ms = text(TIMER_DELIVER_MS)
        .and_then(|v| v.parse::<i64>().ok())
        .or_else(|| text(TIMER_DELAY_MS).and_then(|v| v.parse::<i64>().ok()).map(|d| now_ms.saturating_add(d)))
        .or_else(|| {
            text(TIMER_DELAY_SEC)
                .and_then(|v| v.parse::<i64>().ok())
                .map(|s| now_ms.saturating_add(s.saturating_mul(1000)))
        })
        .or_else(|| {
            let level = text(DELAY).and_then(|v| v.parse::<u32>().ok())?;
            message::delay_of_level(level).map(|d| now_ms.saturating_add(d.as_millis() as i64))
        });
    let (message_type, delivery, group) = match topic.kind {
        // A delay topic takes delayed messages only: one without a delay is due now.
        TopicKind::Delay => (MessageType::Delay, Some(delivery_ms.unwrap_or(now_ms)), None),
        // 4.x orderly producers pick the queue; a FIFO topic orders by message group, so the
        // sharding key (5.x clients) or else the chosen queue is the group.
        TopicKind::Fifo => {
            let group = text(SHARDING_KEY).unwrap_or_else(|| format!("queue-{}", queue_id.max(0)));
            (MessageType::Fifo, delivery_ms, Some(group))
        }
        TopicKind::Transaction => (MessageType::Transaction, delivery_ms, None),
        _ => (MessageType::Normal, delivery_ms, None),
    };
    let user_properties: std::collections::HashMap<String, String> =
        properties.iter().filter(|(k, _)| !message::is_system(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    let keys =
        text(KEYS).map(|k| k.split(' ').filter(|k| !k.is_empty()).map(str::to_string).collect()).unwrap_or_default();
    Message {
        topic: Some(Resource { name: topic.name.clone(), ..Default::default() }),
        user_properties,
        system_properties: Some(SystemProperties {
            tag: text(TAGS),
            keys,
            message_id: text(UNIQ_KEY).unwrap_or_else(fresh_id),
            message_type: message_type as i32,
            born_timestamp: Some(timestamp(born.0)),
            born_host: born.1.to_string(),
            delivery_timestamp: delivery.map(timestamp),
            queue_id,
            message_group: group,
            ..Default::default()
        }),
        body,
    }
}

impl Remoting {
    pub(super) async fn send(
        &self,
        request: &Frame,
        caller: &Caller,
        peer: std::net::SocketAddr,
        link: &crate::remoting::transaction::ProducerLink,
    ) -> Frame {
        let header = SendHeader::of(request);
        if let Some(refused) = self.refused(request, caller, &[(Action::Pub, ResourceKind::Topic, &header.topic)]) {
            return refused;
        }
        let Some(topic) = self.proxy.topic(&header.topic).await else {
            return Frame::answer(request, TOPIC_NOT_EXIST)
                .with_remark(format!("topic {} does not exist", header.topic));
        };
        let mut sent = match messages_of(&header, request.body.clone(), self.proxy.max_body_bytes()) {
            Ok(m) => m,
            Err(e) => return Frame::answer(request, MESSAGE_ILLEGAL).with_remark(e.to_string()),
        };
        // A Java client that could not send a message back sends it to the retry topic itself,
        // saying in the header how often it was consumed.
        if header.reconsume_times > 0 {
            for s in &mut sent {
                s.properties.entry(RECONSUME_TIME.into()).or_insert_with(|| header.reconsume_times.to_string());
            }
        }
        let sender = match caller {
            Caller::User { access_key, .. } => access_key.to_string(),
            _ => String::new(),
        };
        let now = crate::cluster::now_ms();
        let born_host = peer.to_string();
        let messages: Vec<Message> = sent
            .into_iter()
            .map(|s| grpc_message(s, &topic, header.queue_id, (header.born_timestamp_ms, &born_host), now))
            .collect();
        let ids: Vec<String> = messages
            .iter()
            .map(|m| m.system_properties.as_ref().map(|p| p.message_id.clone()).unwrap_or_default())
            .collect();
        let (reply, queues) = self.proxy.send_placed(SendMessageRequest { messages }, "", &sender, None).await;
        let status = reply.status.unwrap_or_default();
        let code = of_status(&status);
        // The queue it was stored in, which the offset belongs to.
        let queue = queues.first().copied().flatten().map_or(header.queue_id.max(0), |q| q as i32);
        self.proxy.meters().sent(&topic.name, status.code, ids.len() as u64);
        if code != SUCCESS {
            return Frame::answer(request, code).with_remark(status.message);
        }
        let first = reply.entries.first().map_or(0, |e| e.offset);
        let sealed = reply.entries.first().map(|e| e.transaction_id.as_str()).filter(|t| !t.is_empty());
        if let Some(sealed) = sealed {
            // This connection's producer is asked about the half if it stays open.
            link.publishes(&topic.name, self.authenticator.pin_of(caller));
            return Frame::answer(request, SUCCESS)
                .with("msgId", ids.join(","))
                .with("queueId", queue)
                .with("queueOffset", first)
                .with("transactionId", crate::remoting::transaction::transaction_id(&topic.name, sealed))
                .with("MSG_REGION", "DefaultRegion")
                .with("TRACE_ON", "true");
        }
        Frame::answer(request, SUCCESS)
            .with("msgId", ids.join(","))
            .with("queueId", queue)
            .with("queueOffset", first)
            .with("MSG_REGION", "DefaultRegion")
            .with("TRACE_ON", "true")
    }
}

/// Where a message a consumer sent back goes, and as what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendBack {
    pub topic: String,
    pub properties: BTreeMap<String, String>,
    pub dead_letter: bool,
}

/// RocketMQ's send-back rule: the message goes to the group's retry topic with one more
/// reconsume time, delayed by `delay_level` (0: level 3 plus the times it was reconsumed), or to
/// its dead-letter topic once it has been reconsumed `max_reconsume` times (or the consumer asks,
/// with a negative level). Without a retry topic it goes to the dead-letter topic, where it is
/// kept, rather than nowhere. Each retry copy gets its own id (`<origin>#<n>`): the send dedupe
/// window would otherwise take the second retry of a message for a repeat of the first.
pub fn send_back(
    group: &str,
    original_topic: &str,
    original: BTreeMap<String, String>,
    delay_level: i32,
    max_reconsume: u32,
    retry_topic: Option<&TopicConfig>,
) -> SendBack {
    let mut p = original;
    let reconsumed: u32 = p.get(RECONSUME_TIME).and_then(|r| r.parse().ok()).unwrap_or(0);
    let origin_id = p.get(ORIGIN_MESSAGE_ID).or_else(|| p.get(UNIQ_KEY)).cloned().unwrap_or_default();
    if !original_topic.starts_with("%RETRY%") {
        p.insert(RETRY_TOPIC.into(), original_topic.to_string());
    }
    p.insert(ORIGIN_MESSAGE_ID.into(), origin_id.clone());
    p.remove(DELAY);
    let dead = delay_level < 0 || reconsumed >= max_reconsume || retry_topic.is_none();
    match (dead, retry_topic) {
        (false, Some(retry)) => {
            let times = reconsumed.saturating_add(1);
            p.insert(RECONSUME_TIME.into(), times.to_string());
            p.insert(UNIQ_KEY.into(), format!("{origin_id}#{times}"));
            if retry.kind == TopicKind::Delay {
                let level = if delay_level > 0 { delay_level as u32 } else { reconsumed.saturating_add(3) };
                p.insert(DELAY.into(), level.to_string());
            }
            SendBack { topic: retry.name.clone(), properties: p, dead_letter: false }
        }
        _ => SendBack { topic: crate::broker::group::dead_letter_topic(group), properties: p, dead_letter: true },
    }
}

/// The retry topic of a consumer group.
pub fn retry_topic(group: &str) -> String {
    format!("%RETRY%{group}")
}

impl Remoting {
    pub(super) async fn send_back(&self, request: &Frame, caller: &Caller) -> Frame {
        let group = request.field("group").unwrap_or_default().to_string();
        if let Some(refused) = self.refused(request, caller, &[(Action::Sub, ResourceKind::Group, &group)]) {
            return refused;
        }
        let Some(config) = self.proxy.metadata().group(&group) else {
            return Frame::answer(request, SUBSCRIPTION_GROUP_NOT_EXIST)
                .with_remark(format!("consumer group {group} does not exist"));
        };
        let found = number::<i64>(request, "offset")
            .and_then(message::split_physical_offset)
            .and_then(|(partition, position)| Some((self.proxy.groups().partition(partition).ok()?, position)));
        let Some((holder, position)) = found.filter(|(h, _)| h.holds_replica()) else {
            return Frame::answer(request, SYSTEM_ERROR).with_remark("no message at that commit-log offset here");
        };
        // Only a message that was delivered (queued: not a pending timer, not a half), of a topic
        // the caller consumes, or its group's retries.
        let original = match holder.broker().queued_at(position) {
            Ok(Some(entry)) => entry,
            _ => return Frame::answer(request, SYSTEM_ERROR).with_remark("no message at that commit-log offset here"),
        };
        if original.topic != retry_topic(&group)
            && let Some(refused) = self.refused(request, caller, &[(Action::Sub, ResourceKind::Topic, &original.topic)])
        {
            return refused;
        }
        let (original_topic, stored) = (original.topic, original.message);
        let max_reconsume =
            number::<u32>(request, "maxReconsumeTimes").unwrap_or_else(|| config.max_attempts.saturating_sub(1));
        let retry = self.proxy.topic(&retry_topic(&group)).await;
        let back = send_back(
            &group,
            &original_topic,
            message::properties_of(&stored),
            number(request, "delayLevel").unwrap_or(0),
            max_reconsume,
            retry.as_ref(),
        );
        if back.dead_letter && retry.is_none() && self.log_limit.allow() {
            tracing::warn!(%group, "a message sent back went to the dead-letter topic: the group has no retry topic");
        }
        let Some(target) = self.proxy.topic(&back.topic).await else {
            return Frame::answer(request, TOPIC_NOT_EXIST).with_remark(format!("topic {} does not exist", back.topic));
        };
        let now = crate::cluster::now_ms();
        let sent = Sent { properties: back.properties, body: stored.body.clone() };
        let m = grpc_message(sent, &target, -1, (stored.born_timestamp_ms, &stored.born_host), now);
        let sender = match caller {
            Caller::User { access_key, .. } => access_key.to_string(),
            _ => String::new(),
        };
        let reply = self.proxy.send(SendMessageRequest { messages: vec![m] }, "", &sender, None).await;
        let status = reply.status.unwrap_or_default();
        match of_status(&status) {
            SUCCESS => Frame::answer(request, SUCCESS),
            code => Frame::answer(request, code).with_remark(status.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use std::io::Write as _;

    fn entry(out: &mut BytesMut, body: &[u8], props: &str) {
        out.put_i32((20 + body.len() + 2 + props.len()) as i32);
        out.put_i32(0);
        out.put_i32(0);
        out.put_i32(0);
        out.put_i32(body.len() as i32);
        out.put_slice(body);
        out.put_i16(props.len() as i16);
        out.put_slice(props.as_bytes());
    }

    fn zlib(bytes: &[u8]) -> Bytes {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(5));
        e.write_all(bytes).unwrap();
        Bytes::from(e.finish().unwrap())
    }

    #[test]
    fn both_header_forms_name_the_same_fields() {
        let long = Frame::request(SEND_MESSAGE, 1, BTreeMap::new())
            .with("topic", "T")
            .with("queueId", 3)
            .with("sysFlag", 0)
            .with("properties", "TAGS\u{1}a\u{2}")
            .with("batch", "1");
        let short = Frame::request(SEND_MESSAGE_V2, 1, BTreeMap::new())
            .with("b", "T")
            .with("e", 3)
            .with("f", 0)
            .with("i", "TAGS\u{1}a\u{2}")
            .with("m", "true");
        for f in [long, short] {
            let h = SendHeader::of(&f);
            assert_eq!((h.topic.as_str(), h.queue_id, h.batch), ("T", 3, true));
            assert_eq!(h.properties, "TAGS\u{1}a\u{2}");
        }
    }

    #[test]
    fn a_batch_splits_into_its_messages_also_when_the_python_client_compressed_it_whole() {
        let mut body = BytesMut::new();
        entry(&mut body, b"one", "UNIQ_KEY\u{1}id1\u{2}TAGS\u{1}a\u{2}");
        entry(&mut body, b"two", "UNIQ_KEY\u{1}id2\u{2}");
        let header = SendHeader { batch: true, properties: "WAIT\u{1}true\u{2}".into(), ..Default::default() };
        let plain = messages_of(&header, body.clone().freeze(), 1 << 20).unwrap();
        assert_eq!(plain.len(), 2);
        assert_eq!(plain[0].properties["UNIQ_KEY"], "id1");
        assert_eq!(plain[0].properties["WAIT"], "true");
        assert_eq!(&plain[1].body[..], b"two");
        let compressed = SendHeader { sys_flag: 1, ..header.clone() };
        assert_eq!(messages_of(&compressed, zlib(&body), 1 << 20).unwrap(), plain);
        let cut = body.freeze().slice(..50);
        assert_eq!(messages_of(&header, cut, 1 << 20), Err(BadSend::Truncated(1)));
    }

    #[test]
    fn a_compressed_body_is_stored_inflated_and_a_bomb_is_refused() {
        let header = SendHeader { sys_flag: 1, ..Default::default() };
        let body = vec![b'x'; 10_000];
        assert_eq!(&messages_of(&header, zlib(&body), 1 << 20).unwrap()[0].body[..], &body[..]);
        assert_eq!(messages_of(&header, zlib(&body), 1000), Err(BadSend::TooLarge(1000)));
        assert!(matches!(messages_of(&header, Bytes::from_static(b"not zlib"), 1000), Err(BadSend::Inflate(_))));
    }

    #[test]
    fn properties_become_the_messages_fields_and_delays_become_due_times() {
        let props = parse_properties(
            "TAGS\u{1}TagA\u{2}KEYS\u{1}k1 k2\u{2}UNIQ_KEY\u{1}ID1\u{2}WAIT\u{1}true\u{2}DELAY\u{1}3\u{2}color\u{1}red\u{2}",
        );
        let sent = Sent { properties: props, body: Bytes::from_static(b"b") };
        let delay = TopicConfig::new("D", 4, TopicKind::Delay);
        let m = grpc_message(sent.clone(), &delay, 1, (5, "1.2.3.4:5"), 1_000_000);
        let sp = m.system_properties.as_ref().unwrap();
        assert_eq!(sp.tag.as_deref(), Some("TagA"));
        assert_eq!(sp.keys, vec!["k1".to_string(), "k2".to_string()]);
        assert_eq!(sp.message_id, "ID1");
        assert_eq!(sp.delivery_timestamp, Some(timestamp(1_010_000)), "level 3 is 10 s");
        assert_eq!(sp.message_type, MessageType::Delay as i32);
        assert_eq!(m.user_properties.len(), 1, "only the user's own: {:?}", m.user_properties);
        assert_eq!(m.user_properties["color"], "red");
        let fifo = TopicConfig::new("F", 4, TopicKind::Fifo);
        let m = grpc_message(sent.clone(), &fifo, 2, (5, ""), 0);
        assert_eq!(m.system_properties.unwrap().message_group.as_deref(), Some("queue-2"));
        let normal = TopicConfig::new("N", 4, TopicKind::Normal);
        let mut undelayed = sent;
        undelayed.properties.remove(DELAY);
        let m = grpc_message(undelayed, &normal, 0, (5, ""), 0);
        assert_eq!(m.system_properties.unwrap().delivery_timestamp, None);
    }

    #[test]
    fn a_message_sent_back_is_retried_later_with_its_own_id_then_dead_lettered() {
        let retry = TopicConfig::new("%RETRY%g", 1, TopicKind::Delay);
        let original = parse_properties("UNIQ_KEY\u{1}ID\u{2}TAGS\u{1}a\u{2}");
        let first = send_back("g", "T", original, 0, 2, Some(&retry));
        assert_eq!((first.topic.as_str(), first.dead_letter), ("%RETRY%g", false));
        assert_eq!(first.properties[RETRY_TOPIC], "T");
        assert_eq!(first.properties[RECONSUME_TIME], "1");
        assert_eq!(first.properties[DELAY], "3", "level 3 first, as RocketMQ");
        assert_eq!(first.properties[UNIQ_KEY], "ID#1");
        assert_eq!(first.properties[ORIGIN_MESSAGE_ID], "ID");
        let second = send_back("g", "%RETRY%g", first.properties, 0, 2, Some(&retry));
        assert_eq!((second.properties[RECONSUME_TIME].as_str(), second.properties[DELAY].as_str()), ("2", "4"));
        assert_eq!(second.properties[RETRY_TOPIC], "T", "the first topic is kept");
        assert_eq!(second.properties[UNIQ_KEY], "ID#2");
        let third = send_back("g", "%RETRY%g", second.properties, 0, 2, Some(&retry));
        assert_eq!((third.topic.as_str(), third.dead_letter), ("%DLQ%g", true));
        assert!(!third.properties.contains_key(DELAY));
        let asked = send_back("g", "T", parse_properties("UNIQ_KEY\u{1}X\u{2}"), -1, 16, Some(&retry));
        assert!(asked.dead_letter, "a negative level asks for the dead-letter topic");
        let no_retry_topic = send_back("g", "T", parse_properties("UNIQ_KEY\u{1}X\u{2}"), 0, 16, None);
        assert_eq!(no_retry_topic.topic, "%DLQ%g");
    }
}
