//! Receipt handles: opaque to clients, they name one delivery — queue, offset and the generation
//! of the entry that made it. The group and topic come with every request that carries a handle.
//! A handle that does not parse, or names a delivery that is no longer current (acked, redelivered,
//! or given a new invisible time since), gets INVALID_RECEIPT_HANDLE. Handles are sealed for their
//! group and topic (`auth::handles`): a guessed, altered or another group's handle gets the same.

use crate::auth::handles::HandleKeys;
use crate::broker::lite::LiteReceipt;
use crate::broker::pop::{Delivery, Receipt};
use crate::broker::position::PartitionId;

/// Handles name the delivery's data partition: `r2.<partition>.<queue>.<offset>.<generation>`.
/// Those of earlier releases (`r1`, no partition) name the first.
const VERSION: &str = "r2";
const VERSION_WITHOUT_PARTITION: &str = "r1";
/// Lite deliveries: the lite topic's id instead of a queue.
const LITE_VERSION: &str = "l2";
const LITE_VERSION_WITHOUT_PARTITION: &str = "l1";

/// The partition a handle's version says, reading it from `parts` if the version carries one.
fn partition<'a>(parts: &mut impl Iterator<Item = &'a str>, with: &str, without: &str) -> Option<PartitionId> {
    match parts.next()? {
        v if v == with => parts.next()?.parse().ok(),
        v if v == without => Some(PartitionId::FIRST),
        _ => None,
    }
}

pub fn encode_lite(keys: &HandleKeys, partition: PartitionId, d: &LiteReceipt, group: &str, topic: &str) -> String {
    keys.seal(&format!("{LITE_VERSION}.{partition}.{}.{}.{}", d.id, d.offset, d.generation), &[group, topic])
}

/// The lite delivery a handle names, if it is a lite handle sealed for `group` and `topic` of
/// the partition `here` (a cluster has one today; a handle of another names nothing here).
pub fn decode_lite(
    keys: &HandleKeys,
    here: PartitionId,
    handle: &str,
    group: &str,
    topic: &str,
) -> Option<LiteReceipt> {
    let handle = keys.open(handle, &[group, topic])?;
    let mut parts = handle.split('.');
    if partition(&mut parts, LITE_VERSION, LITE_VERSION_WITHOUT_PARTITION)? != here {
        return None;
    }
    let id = parts.next()?.parse().ok()?;
    let offset = parts.next()?.parse().ok()?;
    let generation = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some(LiteReceipt { group: group.to_string(), id, offset, generation })
}

pub fn encode(keys: &HandleKeys, partition: PartitionId, d: &Delivery, group: &str, topic: &str) -> String {
    keys.seal(&format!("{VERSION}.{partition}.{}.{}.{}", d.queue_id, d.offset, d.generation), &[group, topic])
}

/// The delivery a handle names, if it is one sealed for `group` and `topic` of the partition
/// `here`.
pub fn decode(keys: &HandleKeys, here: PartitionId, handle: &str, group: &str, topic: &str) -> Option<Receipt> {
    let handle = keys.open(handle, &[group, topic])?;
    let mut parts = handle.split('.');
    if partition(&mut parts, VERSION, VERSION_WITHOUT_PARTITION)? != here {
        return None;
    }
    let queue_id = parts.next()?.parse().ok()?;
    let offset = parts.next()?.parse().ok()?;
    let generation = parts.next()?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some(Receipt { group: group.to_string(), topic: topic.to_string(), queue_id, offset, generation })
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PartitionId = PartitionId::FIRST;

    #[test]
    fn handles_round_trip_and_garbage_does_not_parse() {
        let keys = crate::auth::handles::tests::test_keys();
        let d = Delivery { queue_id: 3, offset: 42, attempt: 1, generation: 1234, invisible_until_ms: 0 };
        let r = decode(&keys, P, &encode(&keys, P, &d, "g", "t"), "g", "t").unwrap();
        assert_eq!((r.queue_id, r.offset, r.generation, r.group.as_str()), (3, 42, 1234, "g"));
        // A handle of an earlier release (no partition) names the first partition.
        let old = keys.seal("r1.3.42.1234", &["g", "t"]);
        assert_eq!(decode(&keys, P, &old, "g", "t").map(|r| r.offset), Some(42));
        // One of another partition names nothing here.
        let other = encode(&keys, PartitionId(2), &d, "g", "t");
        assert!(decode(&keys, P, &other, "g", "t").is_none());
        for bad in [
            "",
            "r1",
            "r1.1.2",
            "r1.1.2.3.4",
            "r3.1.2.3",
            "r1.-1.2.3",
            "r1.a.2.3",
            "r1.1.2.99999999999999999999",
            "r2.1.2.3",
            "r2.z.1.2.3",
            "r2.1.1.2.3.4",
        ] {
            assert!(decode(&keys, P, bad, "g", "t").is_none(), "{bad:?}");
        }
    }

    #[test]
    fn lite_handles_round_trip_and_are_not_queue_handles() {
        let keys = crate::auth::handles::tests::test_keys();
        let d = LiteReceipt { group: "g".into(), id: 7 << 16, offset: 3, generation: 99 };
        let handle = encode_lite(&keys, P, &d, "g", "t");
        let r = decode_lite(&keys, P, &handle, "g", "t").unwrap();
        assert_eq!((r.id, r.offset, r.generation, r.group.as_str()), (7 << 16, 3, 99, "g"));
        assert!(decode(&keys, P, &handle, "g", "t").is_none(), "a lite handle names no queue");
        let queue = Delivery { queue_id: 3, offset: 42, attempt: 1, generation: 1234, invisible_until_ms: 0 };
        assert!(decode_lite(&keys, P, &encode(&keys, P, &queue, "g", "t"), "g", "t").is_none());
    }
}
