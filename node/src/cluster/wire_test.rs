//! The peer calls' values cross the wire as themselves, and a message this release cannot read is
//! a typed error, never a panic.

use proptest::prelude::*;
use prost::Message;
use rockraft_proto::rockraft::peer as pb;

use crate::broker::lite::{LiteActor, LiteOutcome};
use crate::broker::pop::{ChannelId, ConsumeOutcome, Delivery, Receipt};
use crate::broker::timer::TimerOutcome;
use crate::broker::transaction::{HalfState, Resolver, TransactionOutcome};
use crate::broker::{Held, Reply, SendOutcome};
use crate::cluster::disk::DiskReading;
use crate::cluster::pop::{CarriedMessage, PopError, PopOrder, Popped};
use crate::cluster::wire::{DecodeError, ResultMessage};
use crate::cluster::{AskProducer, ClusterError};
use crate::plugin::subscription::FilterKind;
use crate::store::free_space::{DiskLevel, Watermarks};

/// Encodes to bytes and decodes them, as a call does.
fn round_trip<T, P>(value: T) -> Result<T, DecodeError>
where
    P: From<T> + Message + Default,
    T: TryFrom<P, Error = DecodeError>,
{
    let bytes = P::from(value).encode_to_vec();
    T::try_from(P::decode(bytes.as_slice()).expect("what was encoded decodes"))
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 %_-]{0,12}"
}

fn channel() -> impl Strategy<Value = ChannelId> {
    prop_oneof![any::<u32>().prop_map(ChannelId::Queue), any::<u64>().prop_map(ChannelId::Lite)]
}

fn delivery() -> impl Strategy<Value = Delivery> {
    (channel(), any::<u64>(), any::<u32>(), any::<u64>(), any::<i64>()).prop_map(
        |(channel, offset, attempt, generation, invisible_until_ms)| Delivery {
            channel,
            offset,
            attempt,
            generation,
            invisible_until_ms,
        },
    )
}

fn held() -> impl Strategy<Value = Held> {
    prop_oneof![
        (any::<i64>(), any::<u64>()).prop_map(|(due_ms, position)| Held::Timer { due_ms, position }),
        any::<u64>().prop_map(|position| Held::Half { position }),
    ]
}

fn send_outcome() -> impl Strategy<Value = SendOutcome> {
    (text(), any::<u32>(), any::<u64>(), any::<bool>(), proptest::option::of(held())).prop_map(
        |(message_id, queue_id, offset, duplicate, held)| SendOutcome { message_id, queue_id, offset, duplicate, held },
    )
}

fn consume_outcome() -> impl Strategy<Value = ConsumeOutcome> {
    let leaf = prop_oneof![
        Just(ConsumeOutcome::Done),
        text().prop_map(ConsumeOutcome::TopicNotFound),
        text().prop_map(ConsumeOutcome::GroupNotFound),
        proptest::collection::vec(delivery(), 0..3).prop_map(ConsumeOutcome::Delivered),
        Just(ConsumeOutcome::StaleReceipt),
        delivery().prop_map(ConsumeOutcome::Renewed),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| proptest::collection::vec(inner, 0..3).prop_map(ConsumeOutcome::Each))
}

fn resolver() -> impl Strategy<Value = Resolver> {
    prop_oneof![
        Just(Resolver::Producer),
        Just(Resolver::ProducerCheck),
        Just(Resolver::Checker),
        Just(Resolver::Operator)
    ]
}

fn half_state() -> impl Strategy<Value = HalfState> {
    prop_oneof![
        Just(HalfState::Open),
        (resolver(), any::<i64>()).prop_map(|(by, at_ms)| HalfState::Committed { by, at_ms }),
        (resolver(), any::<i64>()).prop_map(|(by, at_ms)| HalfState::RolledBack { by, at_ms }),
    ]
}

fn lite_outcome() -> impl Strategy<Value = LiteOutcome> {
    prop_oneof![
        Just(LiteOutcome::Done),
        proptest::collection::vec((text(), text()), 0..3).prop_map(|taken_from| LiteOutcome::Synced { taken_from }),
        text().prop_map(LiteOutcome::GroupNotFound),
        text().prop_map(LiteOutcome::TopicNotFound),
        text().prop_map(LiteOutcome::IllegalGroup),
        text().prop_map(LiteOutcome::IllegalLiteTopic),
        text().prop_map(LiteOutcome::QuotaExceeded),
        (proptest::collection::vec(delivery(), 0..3), proptest::collection::btree_map(any::<u64>(), text(), 0..3))
            .prop_map(|(deliveries, names)| LiteOutcome::Delivered { deliveries, names }),
        text().prop_map(LiteOutcome::NotOwner),
    ]
}

/// Every variant of the broker's reply, with every outcome inside it.
fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        Just(Reply::Applied),
        proptest::collection::vec(send_outcome(), 0..3).prop_map(Reply::Sent),
        text().prop_map(Reply::TopicNotFound),
        text().prop_map(Reply::TopicExists),
        text().prop_map(Reply::GroupNotFound),
        text().prop_map(Reply::GroupExists),
        consume_outcome().prop_map(Reply::Consume),
        text().prop_map(Reply::Rejected),
        prop_oneof![
            any::<u32>().prop_map(TimerOutcome::Fired),
            text().prop_map(|message_id| TimerOutcome::Recalled { message_id }),
            Just(TimerOutcome::NotFound),
            Just(TimerOutcome::AlreadyDue),
        ]
        .prop_map(Reply::Timer),
        prop_oneof![
            Just(TransactionOutcome::Done),
            Just(TransactionOutcome::Unknown),
            half_state().prop_map(TransactionOutcome::Conflict),
        ]
        .prop_map(Reply::Transaction),
        lite_outcome().prop_map(Reply::Lite),
    ]
}

fn cluster_error() -> impl Strategy<Value = ClusterError> {
    prop_oneof![
        Just(ClusterError::NoLeader),
        (text(), text()).prop_map(|(addr, reason)| ClusterError::Unreachable { addr, reason }),
        (any::<u64>(), any::<u64>()).prop_map(|(len, max)| ClusterError::TooLarge { len, max }),
        any::<u64>().prop_map(|waiting_bytes| ClusterError::Busy { waiting_bytes }),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
            |(node, free_bytes, mark_bytes, critical)| {
                ClusterError::DiskLow { node, free_bytes, mark_bytes, critical }
            }
        ),
        any::<u64>().prop_map(|index| ClusterError::Lagging { index }),
        text().prop_map(ClusterError::Raft),
        text().prop_map(ClusterError::Internal),
    ]
}

fn pop_error() -> impl Strategy<Value = PopError> {
    prop_oneof![
        text().prop_map(PopError::GroupNotFound),
        text().prop_map(PopError::TopicNotFound),
        text().prop_map(PopError::IllegalFilter),
        text().prop_map(PopError::Forbidden),
        text().prop_map(PopError::Quarantined),
        text().prop_map(PopError::FilterUnavailable),
        cluster_error().prop_map(PopError::Cluster),
        text().prop_map(PopError::Internal),
    ]
}

fn popped() -> impl Strategy<Value = Popped> {
    (
        proptest::collection::vec(delivery(), 0..3),
        proptest::option::of(any::<u64>()),
        any::<bool>(),
        proptest::collection::btree_map(any::<u64>(), text(), 0..3),
        proptest::collection::vec(proptest::option::of(carried_message()), 0..3),
    )
        .prop_map(|(deliveries, next_due_in_ms, passed_over, lite_topics, messages)| Popped {
            deliveries,
            next_due_in_ms,
            passed_over,
            lite_topics,
            messages,
        })
}

fn carried_message() -> impl Strategy<Value = CarriedMessage> {
    (any::<u32>(), any::<u64>(), any::<i64>(), proptest::collection::vec(any::<u8>(), 0..16)).prop_map(
        |(queue_id, offset, store_timestamp_ms, raw)| CarriedMessage {
            queue_id,
            offset,
            store_timestamp_ms,
            raw: raw.into(),
        },
    )
}

fn pop_order() -> impl Strategy<Value = PopOrder> {
    let actor = prop_oneof![Just(LiteActor::Open), text().prop_map(LiteActor::User), text().prop_map(LiteActor::Admin)];
    (
        (text(), text(), text(), prop_oneof![Just(FilterKind::Tag), Just(FilterKind::Sql92)]),
        (any::<u32>(), any::<i64>(), proptest::option::of(text()), proptest::option::of(text()), actor),
        any::<bool>(),
    )
        .prop_map(
            |(
                (group, topic, filter, filter_kind),
                (max, invisible_ms, attempt_id, lite_client, lite_by),
                with_messages,
            )| PopOrder {
                group,
                topic,
                filter,
                filter_kind,
                max_messages: max as usize,
                invisible_ms,
                attempt_id,
                lite_client,
                lite_by,
                with_messages,
            },
        )
}

fn disk_reading() -> impl Strategy<Value = DiskReading> {
    let level = prop_oneof![Just(DiskLevel::Ok), Just(DiskLevel::Low), Just(DiskLevel::Critical)];
    (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), level, any::<u64>(), any::<u32>()).prop_map(
        |(free_bytes, total_bytes, soft, hard, level, filesystem, sharing)| DiskReading {
            free_bytes,
            total_bytes,
            marks: Watermarks { soft, hard },
            level,
            filesystem,
            sharing,
        },
    )
}

/// A result message encoded to bytes and decoded, as a call's answer is.
fn answer_round_trip<M: ResultMessage + Message + Default>(result: Result<M::Ok, M::Err>) -> Result<M::Ok, M::Err> {
    let bytes = M::from_result(result).encode_to_vec();
    M::decode(bytes.as_slice()).unwrap().into_result().unwrap()
}

proptest! {
    #[test]
    fn replies_round_trip(r in reply()) {
        prop_assert_eq!(round_trip::<_, pb::Reply>(r.clone()), Ok(r));
    }

    #[test]
    fn errors_round_trip(c in cluster_error(), p in pop_error()) {
        prop_assert_eq!(round_trip::<_, pb::ClusterError>(c.clone()), Ok(c));
        prop_assert_eq!(round_trip::<_, pb::PopError>(p.clone()), Ok(p));
    }

    #[test]
    fn pops_round_trip(order in pop_order(), p in popped(), e in pop_error()) {
        prop_assert_eq!(round_trip::<_, pb::PopOrder>(order.clone()), Ok(order));
        prop_assert_eq!(answer_round_trip::<pb::PopResult>(Ok(p.clone())), Ok(p));
        prop_assert_eq!(answer_round_trip::<pb::PopResult>(Err(e.clone())), Err(e));
    }

    #[test]
    fn results_round_trip(r in reply(), c in cluster_error(), index: u64, reading in disk_reading(), outcome in consume_outcome()) {
        prop_assert_eq!(answer_round_trip::<pb::WriteResult>(Ok(r.clone())), Ok(r));
        prop_assert_eq!(answer_round_trip::<pb::WriteResult>(Err(c.clone())), Err(c.clone()));
        prop_assert_eq!(answer_round_trip::<pb::ReadIndexResult>(Ok(index)), Ok(index));
        prop_assert_eq!(answer_round_trip::<pb::DiskSpaceResult>(Ok(reading)), Ok(reading));
        prop_assert_eq!(answer_round_trip::<pb::DeadLetterResult>(Ok(outcome.clone())), Ok(outcome));
    }

    #[test]
    fn requests_round_trip(
        group in text(),
        topic in text(),
        channel in channel(),
        offset: u64,
        generation: u64,
        id in text(),
        body in proptest::collection::vec(any::<u8>(), 0..64),
        store_ms: i64,
    ) {
        let receipt = Receipt { group, topic: topic.clone(), channel, offset, generation };
        let encoded = rockraft_proto::rockraft::log::Receipt::from(&receipt).encode_to_vec();
        let decoded = rockraft_proto::rockraft::log::Receipt::decode(encoded.as_slice()).expect("what was encoded decodes");
        prop_assert_eq!(Receipt::from(decoded), receipt);
        let message = rockraft_proto::rockraft::StoredMessage {
            message_id: id.clone(),
            body: body.into(),
            ..Default::default()
        };
        let ask = AskProducer { topic, transaction_id: id, message, store_timestamp_ms: store_ms };
        prop_assert_eq!(round_trip::<_, pb::AskProducer>(ask.clone()), Ok(ask));
        // A question without the half's message (an earlier release's) is refused, not guessed at.
        let bare = pb::AskProducer { topic: "t".into(), ..Default::default() };
        prop_assert_eq!(AskProducer::try_from(bare), Err(DecodeError::Missing("the half's message")));
    }

    /// Whatever bytes arrive, decoding answers (a value or an error) and never panics.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(m) = pb::WriteResult::decode(bytes.as_slice()) {
            let _ = m.into_result();
        }
        if let Ok(m) = pb::PopResult::decode(bytes.as_slice()) {
            let _ = m.into_result();
        }
        if let Ok(m) = pb::PopOrder::decode(bytes.as_slice()) {
            let _ = PopOrder::try_from(m);
        }
        if let Ok(m) = pb::DiskSpaceResult::decode(bytes.as_slice()) {
            let _ = m.into_result();
        }
    }
}

#[test]
fn a_message_this_release_cannot_read_is_a_typed_error() {
    assert_eq!(Reply::try_from(pb::Reply { reply: None }), Err(DecodeError::Missing("reply")));
    assert_eq!(ClusterError::try_from(pb::ClusterError { error: None }), Err(DecodeError::Missing("cluster error")));
    let unknown_resolver =
        pb::HalfState { state: Some(pb::half_state::State::Committed(pb::Resolution { by: 99, at_ms: 1 })) };
    assert_eq!(HalfState::try_from(unknown_resolver), Err(DecodeError::Unknown { what: "resolver", value: 99 }));
    let unspecified = pb::HalfState { state: Some(pb::half_state::State::RolledBack(pb::Resolution::default())) };
    assert!(matches!(HalfState::try_from(unspecified), Err(DecodeError::Unknown { .. })));
    let order = pb::PopOrder::from(PopOrder {
        group: "g".into(),
        topic: "t".into(),
        filter: "*".into(),
        filter_kind: FilterKind::Tag,
        max_messages: 1,
        invisible_ms: 1,
        attempt_id: None,
        lite_client: None,
        lite_by: LiteActor::Open,
        with_messages: false,
    });
    let unknown_kind = pb::PopOrder { filter_kind: 7, ..order.clone() };
    assert!(matches!(PopOrder::try_from(unknown_kind), Err(DecodeError::Unknown { what: "filter kind", value: 7 })));
    // No actor is the cluster itself (or authentication off), as in the log's commands.
    let no_actor = pb::PopOrder { lite_by: None, ..order };
    assert_eq!(PopOrder::try_from(no_actor).map(|o| o.lite_by), Ok(LiteActor::Open));
    let no_level = pb::DiskReading { marks: Some(pb::Watermarks::default()), ..Default::default() };
    assert!(matches!(DiskReading::try_from(no_level), Err(DecodeError::Unknown { what: "disk level", .. })));
    assert!(pb::WriteResult { result: None }.into_result().is_err());
    // Bytes that are no protobuf message at all.
    assert!(pb::WriteResult::decode(&b"\xff\xff\xff\xff"[..]).is_err());
}
