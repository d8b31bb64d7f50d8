//! Receipt handles: opaque to clients, they name one delivery — queue or lite topic, offset and
//! the generation of the entry that made it. The group and topic come with every request that carries a handle.
//! A handle that does not parse, or names a delivery that is no longer current (acked, redelivered,
//! or given a new invisible time since), gets INVALID_RECEIPT_HANDLE. Handles are sealed for their
//! group and topic (`auth::handles`): a guessed, altered or another group's handle gets the same.

use crate::auth::handles::HandleKeys;
use crate::broker::pop::{ChannelId, Delivery, Receipt};
use crate::broker::position::PartitionId;

/// Handles name the delivery's data partition: `r2.<partition>.<queue>.<offset>.<generation>`
/// for a queue's delivery, `l2.<partition>.<lite id>.<offset>.<generation>` for a lite topic's.
/// Those of earlier releases (`r1`, `l1`: no partition) name the first.
const QUEUE: &str = "r2";
const QUEUE_WITHOUT_PARTITION: &str = "r1";
const LITE: &str = "l2";
const LITE_WITHOUT_PARTITION: &str = "l1";

pub fn encode(keys: &HandleKeys, partition: PartitionId, d: &Delivery, group: &str, topic: &str) -> String {
    let (version, channel) = match d.channel {
        ChannelId::Queue(queue_id) => (QUEUE, u64::from(queue_id)),
        ChannelId::Lite(id) => (LITE, id),
    };
    keys.seal(&format!("{version}.{partition}.{channel}.{}.{}", d.offset, d.generation), &[group, topic])
}

/// The delivery a handle names, and the partition that issued it, if it is one sealed for
/// `group` and `topic`.
pub fn decode(keys: &HandleKeys, handle: &str, group: &str, topic: &str) -> Option<(PartitionId, Receipt)> {
    let handle = keys.open(handle, &[group, topic])?;
    let mut parts = handle.split('.');
    let (lite, partition) = match parts.next()? {
        QUEUE => (false, parts.next()?.parse().ok()?),
        LITE => (true, parts.next()?.parse().ok()?),
        QUEUE_WITHOUT_PARTITION => (false, PartitionId::FIRST),
        LITE_WITHOUT_PARTITION => (true, PartitionId::FIRST),
        _ => return None,
    };
    let channel =
        if lite { ChannelId::Lite(parts.next()?.parse().ok()?) } else { ChannelId::Queue(parts.next()?.parse().ok()?) };
    let offset = parts.next()?.parse().ok()?;
    let generation = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((partition, Receipt { group: group.to_string(), topic: topic.to_string(), channel, offset, generation }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PartitionId = PartitionId::FIRST;

    fn delivery(channel: ChannelId, offset: u64, generation: u64) -> Delivery {
        Delivery { channel, offset, attempt: 1, generation, invisible_until_ms: 0 }
    }

    #[test]
    fn handles_round_trip_and_garbage_does_not_parse() {
        let keys = crate::auth::handles::tests::test_keys();
        let d = delivery(ChannelId::Queue(3), 42, 1234);
        let (p, r) = decode(&keys, &encode(&keys, P, &d, "g", "t"), "g", "t").unwrap();
        assert_eq!((r.channel, r.offset, r.generation, r.group.as_str()), (ChannelId::Queue(3), 42, 1234, "g"));
        assert_eq!(p, P);
        // A handle of an earlier release (no partition) names the first partition.
        let old = keys.seal("r1.3.42.1234", &["g", "t"]);
        assert_eq!(decode(&keys, &old, "g", "t").map(|(p, r)| (p, r.offset)), Some((P, 42)));
        // One of another partition names that partition.
        let other = encode(&keys, PartitionId(2), &d, "g", "t");
        assert_eq!(decode(&keys, &other, "g", "t").map(|(p, _)| p), Some(PartitionId(2)));
        for bad in [
            "",
            "r1",
            "r1.1.2",
            "r1.1.2.3.4",
            "r3.1.2.3",
            "r1.-1.2.3",
            "r1.a.2.3",
            "r1.1.2.99999999999999999999",
            "r1.4294967296.2.3",
            "r2.1.2.3",
            "r2.z.1.2.3",
            "r2.1.1.2.3.4",
            "l2.1.1.2",
        ] {
            assert!(decode(&keys, &keys.seal(bad, &["g", "t"]), "g", "t").is_none(), "{bad:?}");
            assert!(decode(&keys, bad, "g", "t").is_none(), "unsealed {bad:?}");
        }
    }

    #[test]
    fn a_lite_handle_names_its_lite_topic_by_id() {
        let keys = crate::auth::handles::tests::test_keys();
        let d = delivery(ChannelId::Lite(7 << 40), 3, 99);
        let (_, r) = decode(&keys, &encode(&keys, P, &d, "g", "t"), "g", "t").unwrap();
        assert_eq!((r.channel, r.offset, r.generation, r.topic.as_str()), (ChannelId::Lite(7 << 40), 3, 99, "t"));
        let old = keys.seal("l1.5.3.99", &["g", "t"]);
        assert_eq!(decode(&keys, &old, "g", "t").map(|(_, r)| r.channel), Some(ChannelId::Lite(5)));
        // Sealed for its group and topic only.
        assert!(decode(&keys, &encode(&keys, P, &d, "g", "t"), "h", "t").is_none());
    }
}
