//! Messages as the Remoting clients see them: the property string (`NAME\u{1}VALUE\u{2}…`), the
//! stored-message layout pull answers carry (RocketMQ's `MessageDecoder`, version 1: IPv4 hosts,
//! a one-byte topic length), and the commit-log offsets and message ids that name a message.
//!
//! A message is stored once, as the gRPC path stores it (`StoredMessage`): RocketMQ's system
//! properties become its fields (tag, keys, id, delivery time), the rest its user properties, so
//! either protocol reads what the other wrote.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use bytes::{BufMut, BytesMut};
use rockraft_proto::rockraft::StoredMessage;

use crate::broker::position::PartitionId;

pub const TAGS: &str = "TAGS";
pub const KEYS: &str = "KEYS";
pub const UNIQ_KEY: &str = "UNIQ_KEY";
pub const DELAY: &str = "DELAY";
pub const WAIT: &str = "WAIT";
/// How often a message has been sent back by its consumers (a retry's copy carries it).
pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// RocketMQ 5's delays for 4.x producers: an absolute due time, or one relative to the send.
pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
/// A FIFO message's group, as the 5.x clients name it over Remoting too.
pub const SHARDING_KEY: &str = "__SHARDINGKEY";
pub const TRAN_MSG: &str = "TRAN_MSG";

/// Properties the broker reads rather than keeps as user properties: the tag, keys and id become
/// the message's fields (and are written back from them); the delay and transaction markers are
/// what its type and due time say; `WAIT` is the client's own.
const SYSTEM: [&str; 10] =
    [TAGS, KEYS, UNIQ_KEY, DELAY, WAIT, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS, SHARDING_KEY, TRAN_MSG];

/// RocketMQ's 18 delay levels, in seconds (`messageDelayLevel`'s default).
pub const DELAY_LEVELS_SECS: [u64; 18] =
    [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200];

/// The delay of `level` (1 to 18); levels above 18 are 18's, as RocketMQ has it.
pub fn delay_of_level(level: u32) -> Option<std::time::Duration> {
    let at = (level as usize).checked_sub(1)?;
    Some(std::time::Duration::from_secs(DELAY_LEVELS_SECS[at.min(DELAY_LEVELS_SECS.len() - 1)]))
}

/// Reads a property string. Empty names or values are dropped, as the clients drop them.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    text.split('\u{2}')
        .filter_map(|pair| pair.split_once('\u{1}'))
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Writes a property string (names in order, each pair ended by `\u{2}`).
pub fn properties_string(properties: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (k, v) in properties {
        out.push_str(k);
        out.push('\u{1}');
        out.push_str(v);
        out.push('\u{2}');
    }
    out
}

/// Whether `name` is one of the properties kept as a message's fields.
pub fn is_system(name: &str) -> bool {
    SYSTEM.contains(&name)
}

/// The properties a Remoting consumer is handed for `m`: its user properties, then its fields.
pub fn properties_of(m: &StoredMessage) -> BTreeMap<String, String> {
    let mut p: BTreeMap<String, String> = m.properties.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if !m.tag.is_empty() {
        p.insert(TAGS.into(), m.tag.clone());
    }
    if !m.keys.is_empty() {
        p.insert(KEYS.into(), m.keys.join(" "));
    }
    if !m.message_id.is_empty() {
        p.insert(UNIQ_KEY.into(), m.message_id.clone());
    }
    if !m.message_group.is_empty() {
        p.insert(SHARDING_KEY.into(), m.message_group.clone());
    }
    p
}

/// Where a message is, as one 63-bit number: RocketMQ's commit-log offset. Clients hand it back
/// to find the message again (CONSUMER_SEND_MSG_BACK): the partition in the top 7 bits, then
/// the message's position in it (log index, 40 bits; ordinal in the entry, 16).
pub fn physical_offset(partition: PartitionId, position: u64) -> Option<i64> {
    (partition.0 < 128 && position >> 56 == 0).then(|| (i64::from(partition.0) << 56) | position as i64)
}

/// The partition and position a commit-log offset names.
pub fn split_physical_offset(offset: i64) -> Option<(PartitionId, u64)> {
    (offset >= 0).then_some((PartitionId((offset >> 56) as u32), offset as u64 & ((1 << 56) - 1)))
}

/// RocketMQ's offset message id: the store host's address and port, then the commit-log offset,
/// as 32 upper-case hex digits.
pub fn offset_message_id(store_host: SocketAddrV4, offset: i64) -> String {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&store_host.ip().octets());
    b[4..8].copy_from_slice(&u32::from(store_host.port()).to_be_bytes());
    b[8..].copy_from_slice(&offset.to_be_bytes());
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// A host as the stored-message layout holds it; anything not `a.b.c.d:port` is 0.0.0.0:0
/// (the C++ clients read only IPv4).
pub fn ipv4_host(host: &str) -> SocketAddrV4 {
    host.parse().unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
}

/// The magic number of the stored-message layout, version 1.
pub const MAGIC_V1: u32 = 0xDAA3_20A7;
/// The longest topic the layout's one-byte length holds (a signed byte in the C++ client).
pub const MAX_TOPIC_BYTES: usize = 127;

/// Where a message sits, for its encoding.
pub struct Placed<'a> {
    pub topic: &'a str,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub physical_offset: i64,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddrV4,
}

/// Appends `m`, stored at `at`, in the stored-message layout. `None` (nothing appended) if the
/// topic or properties are too long for the layout.
pub fn encode_stored(out: &mut BytesMut, m: &StoredMessage, at: &Placed) -> Option<()> {
    if at.topic.len() > MAX_TOPIC_BYTES {
        return None;
    }
    let properties = properties_of(m);
    let reconsumed = properties.get(RECONSUME_TIME).and_then(|r| r.parse::<i32>().ok()).unwrap_or(0);
    let properties = properties_string(&properties);
    let properties_len = i16::try_from(properties.len()).ok()?;
    let body = &m.body;
    let total = 4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + 8
        + 8
        + 8
        + 4
        + 8
        + 4
        + body.len()
        + 1
        + at.topic.len()
        + 2
        + properties.len();
    let born = ipv4_host(&m.born_host);
    out.reserve(total);
    out.put_i32(total as i32);
    out.put_u32(MAGIC_V1);
    out.put_u32(crc32fast::hash(body) & 0x7FFF_FFFF);
    out.put_u32(at.queue_id);
    out.put_i32(0);
    out.put_u64(at.queue_offset);
    out.put_i64(at.physical_offset);
    out.put_i32(0);
    out.put_i64(m.born_timestamp_ms);
    put_host(out, born);
    out.put_i64(at.store_timestamp_ms);
    put_host(out, at.store_host);
    out.put_i32(reconsumed);
    out.put_i64(0);
    out.put_i32(body.len() as i32);
    out.put_slice(body);
    out.put_u8(at.topic.len() as u8);
    out.put_slice(at.topic.as_bytes());
    out.put_i16(properties_len);
    out.put_slice(properties.as_bytes());
    Some(())
}

fn put_host(out: &mut BytesMut, host: SocketAddrV4) {
    out.put_slice(&host.ip().octets());
    out.put_u32(u32::from(host.port()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;

    #[test]
    fn property_strings_read_back_what_was_written_and_drop_empty_pairs() {
        let text =
            "KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}0100007F\u{2}WAIT\u{1}true\u{2}\u{1}x\u{2}e\u{1}\u{2}";
        let p = parse_properties(text);
        assert_eq!(p.len(), 4);
        assert_eq!(p["TAGS"], "TagA");
        assert_eq!(parse_properties(&properties_string(&p)), p);
    }

    #[test]
    fn commit_log_offsets_name_the_partition_and_position_and_refuse_what_does_not_fit() {
        let position = (123_456u64 << 16) | 7;
        let offset = physical_offset(PartitionId(3), position).unwrap();
        assert!(offset > 0);
        assert_eq!(split_physical_offset(offset), Some((PartitionId(3), position)));
        assert_eq!(physical_offset(PartitionId(128), 1), None);
        assert_eq!(physical_offset(PartitionId(1), 1 << 56), None);
        assert_eq!(split_physical_offset(-1), None);
    }

    #[test]
    fn offset_message_ids_are_javas_layout() {
        let id = offset_message_id("127.0.0.1:10911".parse().unwrap(), 1001);
        assert_eq!(id, "7F00000100002A9F00000000000003E9");
    }

    #[test]
    fn delay_levels_are_rocketmqs_and_cap_at_the_last() {
        assert_eq!(delay_of_level(0), None);
        assert_eq!(delay_of_level(1).unwrap().as_secs(), 1);
        assert_eq!(delay_of_level(3).unwrap().as_secs(), 10);
        assert_eq!(delay_of_level(18).unwrap().as_secs(), 7200);
        assert_eq!(delay_of_level(40).unwrap().as_secs(), 7200);
    }

    /// Decodes as the C++ client's `MQDecoder` does: field by field, in order.
    #[test]
    fn a_stored_message_decodes_field_by_field_as_the_clients_read_it() {
        let m = StoredMessage {
            message_id: "AC1100010000".into(),
            tag: "TagA".into(),
            keys: vec!["k1".into(), "k2".into()],
            properties: [("color".to_string(), "red".to_string())].into(),
            body: bytes::Bytes::from_static(b"hello"),
            born_timestamp_ms: 1_700_000_000_000,
            born_host: "10.0.0.2:5555".into(),
            ..Default::default()
        };
        let at = Placed {
            topic: "TopicTest",
            queue_id: 2,
            queue_offset: 41,
            physical_offset: 99,
            store_timestamp_ms: 1_700_000_000_123,
            store_host: "127.0.0.1:9876".parse().unwrap(),
        };
        let mut out = BytesMut::new();
        encode_stored(&mut out, &m, &at).unwrap();
        encode_stored(&mut out, &m, &at).unwrap();
        let mut b = out.freeze();
        for _ in 0..2 {
            let total = b.get_i32() as usize;
            let start = b.remaining();
            assert_eq!(b.get_u32(), MAGIC_V1);
            assert_eq!(b.get_u32(), crc32fast::hash(b"hello") & 0x7FFF_FFFF);
            assert_eq!(b.get_u32(), 2);
            assert_eq!(b.get_i32(), 0);
            assert_eq!(b.get_u64(), 41);
            assert_eq!(b.get_i64(), 99);
            assert_eq!(b.get_i32(), 0);
            assert_eq!(b.get_i64(), 1_700_000_000_000);
            assert_eq!((b.get_u32(), b.get_u32()), (u32::from(Ipv4Addr::new(10, 0, 0, 2)), 5555));
            assert_eq!(b.get_i64(), 1_700_000_000_123);
            assert_eq!((b.get_u32(), b.get_u32()), (u32::from(Ipv4Addr::LOCALHOST), 9876));
            assert_eq!(b.get_i32(), 0);
            assert_eq!(b.get_i64(), 0);
            let body_len = b.get_i32() as usize;
            assert_eq!(&b.copy_to_bytes(body_len)[..], b"hello");
            let topic_len = b.get_u8() as usize;
            assert_eq!(&b.copy_to_bytes(topic_len)[..], b"TopicTest");
            let props_len = b.get_i16() as usize;
            let props = String::from_utf8(b.copy_to_bytes(props_len).to_vec()).unwrap();
            let p = parse_properties(&props);
            assert_eq!(
                (p["TAGS"].as_str(), p["KEYS"].as_str(), p["UNIQ_KEY"].as_str()),
                ("TagA", "k1 k2", "AC1100010000")
            );
            assert_eq!(p["color"], "red");
            assert_eq!(start - b.remaining(), total - 4, "the total size counts the whole message");
        }
        let long = "t".repeat(MAX_TOPIC_BYTES + 1);
        assert!(encode_stored(&mut BytesMut::new(), &m, &Placed { topic: &long, ..at }).is_none());
    }
}
