//! The peer calls' values ↔ their protobuf forms (`rockraft.v1.peer`, reply.proto): the broker's
//! [`Reply`] and the outcomes inside it, pop orders and their results, receipts, disk readings,
//! and the typed errors a result carries instead of its value.
//!
//! Encoding cannot fail. Decoding refuses, with a [`DecodeError`], a message whose `oneof` is
//! unset, that lacks a field it cannot do without, or that holds an enum value this release does
//! not know: a node never guesses what a peer meant.

use std::convert::Infallible;

use rockraft_proto::rockraft::peer as pb;

use crate::broker::held::HeldCounts;
use crate::broker::lite::LiteOutcome;
use crate::broker::pop::{ChannelId, ConsumeOutcome, Delivery};
use crate::broker::timer::TimerOutcome;
use crate::broker::transaction::{HalfState, Resolver, TransactionOutcome};
use crate::broker::{GroupFigures, GroupProgress, QueueStatus};
use crate::broker::{Held, Reply, SendOutcome};
use crate::broker::{actor_from_proto, actor_to_proto};
use crate::cluster::disk::DiskReading;
use crate::cluster::pop::{CarriedMessage, PopError, PopOrder, Popped};
use crate::cluster::{AskProducer, ClusterError};
use crate::plugin::subscription::FilterKind;
use crate::raft::{NodeId, NodeInfo};
use crate::store::free_space::{DiskLevel, Watermarks};

/// Why a peer's message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0} is missing")]
    Missing(&'static str),
    #[error("{what} has a value this release does not know: {value}")]
    Unknown { what: &'static str, value: i32 },
    #[error("{what} is out of range: {value}")]
    OutOfRange { what: &'static str, value: u64 },
}

impl From<Infallible> for DecodeError {
    fn from(never: Infallible) -> DecodeError {
        match never {}
    }
}

fn set<T>(field: Option<T>, what: &'static str) -> Result<T, DecodeError> {
    field.ok_or(DecodeError::Missing(what))
}

fn each<P, T>(items: Vec<P>) -> Result<Vec<T>, DecodeError>
where
    T: TryFrom<P, Error = DecodeError>,
{
    items.into_iter().map(T::try_from).collect()
}

fn all<T, P: From<T>>(items: Vec<T>) -> Vec<P> {
    items.into_iter().map(P::from).collect()
}

const EMPTY: pb::Empty = pb::Empty {};

// The broker's reply.

impl From<Reply> for pb::Reply {
    fn from(r: Reply) -> pb::Reply {
        use pb::reply::Reply as R;
        let reply = match r {
            Reply::Applied => R::Applied(EMPTY),
            Reply::Sent(outcomes) => R::Sent(pb::SendOutcomes { outcomes: all(outcomes) }),
            Reply::TopicNotFound(t) => R::TopicNotFound(t),
            Reply::TopicExists(t) => R::TopicExists(t),
            Reply::GroupNotFound(g) => R::GroupNotFound(g),
            Reply::GroupExists(g) => R::GroupExists(g),
            Reply::Consume(c) => R::Consume(c.into()),
            Reply::Rejected(why) => R::Rejected(why),
            Reply::Timer(t) => R::Timer(t.into()),
            Reply::Transaction(t) => R::Transaction(t.into()),
            Reply::Lite(l) => R::Lite(l.into()),
        };
        pb::Reply { reply: Some(reply) }
    }
}

impl TryFrom<pb::Reply> for Reply {
    type Error = DecodeError;
    fn try_from(r: pb::Reply) -> Result<Reply, DecodeError> {
        use pb::reply::Reply as R;
        Ok(match set(r.reply, "reply")? {
            R::Applied(_) => Reply::Applied,
            R::Sent(s) => Reply::Sent(each(s.outcomes)?),
            R::TopicNotFound(t) => Reply::TopicNotFound(t),
            R::TopicExists(t) => Reply::TopicExists(t),
            R::GroupNotFound(g) => Reply::GroupNotFound(g),
            R::GroupExists(g) => Reply::GroupExists(g),
            R::Consume(c) => Reply::Consume(c.try_into()?),
            R::Rejected(why) => Reply::Rejected(why),
            R::Timer(t) => Reply::Timer(t.try_into()?),
            R::Transaction(t) => Reply::Transaction(t.try_into()?),
            R::Lite(l) => Reply::Lite(l.try_into()?),
        })
    }
}

impl From<SendOutcome> for pb::SendOutcome {
    fn from(s: SendOutcome) -> pb::SendOutcome {
        pb::SendOutcome {
            message_id: s.message_id,
            queue_id: s.queue_id,
            offset: s.offset,
            duplicate: s.duplicate,
            held: s.held.map(Into::into),
        }
    }
}

impl TryFrom<pb::SendOutcome> for SendOutcome {
    type Error = DecodeError;
    fn try_from(s: pb::SendOutcome) -> Result<SendOutcome, DecodeError> {
        Ok(SendOutcome {
            message_id: s.message_id,
            queue_id: s.queue_id,
            offset: s.offset,
            duplicate: s.duplicate,
            held: s.held.map(Held::try_from).transpose()?,
        })
    }
}

impl From<Held> for pb::Held {
    fn from(h: Held) -> pb::Held {
        use pb::held::Held as H;
        let held = match h {
            Held::Timer { due_ms, position } => H::Timer(pb::HeldTimer { due_ms, position }),
            Held::Half { position } => H::Half(pb::HeldHalf { position }),
        };
        pb::Held { held: Some(held) }
    }
}

impl TryFrom<pb::Held> for Held {
    type Error = DecodeError;
    fn try_from(h: pb::Held) -> Result<Held, DecodeError> {
        use pb::held::Held as H;
        Ok(match set(h.held, "held")? {
            H::Timer(t) => Held::Timer { due_ms: t.due_ms, position: t.position },
            H::Half(h) => Held::Half { position: h.position },
        })
    }
}

// Consumption.

impl From<ConsumeOutcome> for pb::ConsumeOutcome {
    fn from(c: ConsumeOutcome) -> pb::ConsumeOutcome {
        use pb::consume_outcome::Outcome as O;
        let outcome = match c {
            ConsumeOutcome::Done => O::Done(EMPTY),
            ConsumeOutcome::TopicNotFound(t) => O::TopicNotFound(t),
            ConsumeOutcome::GroupNotFound(g) => O::GroupNotFound(g),
            ConsumeOutcome::Delivered(d) => O::Delivered(pb::Deliveries { deliveries: all(d) }),
            ConsumeOutcome::StaleReceipt => O::StaleReceipt(EMPTY),
            ConsumeOutcome::Renewed(d) => O::Renewed(d.into()),
            ConsumeOutcome::Each(each) => O::Each(pb::ConsumeOutcomes { outcomes: all(each) }),
        };
        pb::ConsumeOutcome { outcome: Some(outcome) }
    }
}

impl TryFrom<pb::ConsumeOutcome> for ConsumeOutcome {
    type Error = DecodeError;
    fn try_from(c: pb::ConsumeOutcome) -> Result<ConsumeOutcome, DecodeError> {
        use pb::consume_outcome::Outcome as O;
        Ok(match set(c.outcome, "consume outcome")? {
            O::Done(_) => ConsumeOutcome::Done,
            O::TopicNotFound(t) => ConsumeOutcome::TopicNotFound(t),
            O::GroupNotFound(g) => ConsumeOutcome::GroupNotFound(g),
            O::Delivered(d) => ConsumeOutcome::Delivered(each(d.deliveries)?),
            O::StaleReceipt(_) => ConsumeOutcome::StaleReceipt,
            O::Renewed(d) => ConsumeOutcome::Renewed(d.try_into()?),
            O::Each(e) => ConsumeOutcome::Each(each(e.outcomes)?),
        })
    }
}

impl From<Delivery> for pb::Delivery {
    fn from(d: Delivery) -> pb::Delivery {
        let (queue_id, lite_id) = match d.channel {
            ChannelId::Queue(queue_id) => (queue_id, None),
            ChannelId::Lite(id) => (0, Some(id)),
        };
        pb::Delivery {
            queue_id,
            offset: d.offset,
            attempt: d.attempt,
            generation: d.generation,
            invisible_until_ms: d.invisible_until_ms,
            lite_id,
        }
    }
}

impl TryFrom<pb::Delivery> for Delivery {
    type Error = DecodeError;
    fn try_from(d: pb::Delivery) -> Result<Delivery, DecodeError> {
        Ok(Delivery {
            channel: d.lite_id.map_or(ChannelId::Queue(d.queue_id), ChannelId::Lite),
            offset: d.offset,
            attempt: d.attempt,
            generation: d.generation,
            invisible_until_ms: d.invisible_until_ms,
        })
    }
}

// Timers and transactions.

impl From<TimerOutcome> for pb::TimerOutcome {
    fn from(t: TimerOutcome) -> pb::TimerOutcome {
        use pb::timer_outcome::Outcome as O;
        let outcome = match t {
            TimerOutcome::Fired(n) => O::Fired(n),
            TimerOutcome::Recalled { message_id } => O::Recalled(message_id),
            TimerOutcome::NotFound => O::NotFound(EMPTY),
            TimerOutcome::AlreadyDue => O::AlreadyDue(EMPTY),
        };
        pb::TimerOutcome { outcome: Some(outcome) }
    }
}

impl TryFrom<pb::TimerOutcome> for TimerOutcome {
    type Error = DecodeError;
    fn try_from(t: pb::TimerOutcome) -> Result<TimerOutcome, DecodeError> {
        use pb::timer_outcome::Outcome as O;
        Ok(match set(t.outcome, "timer outcome")? {
            O::Fired(n) => TimerOutcome::Fired(n),
            O::Recalled(message_id) => TimerOutcome::Recalled { message_id },
            O::NotFound(_) => TimerOutcome::NotFound,
            O::AlreadyDue(_) => TimerOutcome::AlreadyDue,
        })
    }
}

impl From<TransactionOutcome> for pb::TransactionOutcome {
    fn from(t: TransactionOutcome) -> pb::TransactionOutcome {
        use pb::transaction_outcome::Outcome as O;
        let outcome = match t {
            TransactionOutcome::Done => O::Done(EMPTY),
            TransactionOutcome::Unknown => O::Unknown(EMPTY),
            TransactionOutcome::Conflict(state) => O::Conflict(state.into()),
        };
        pb::TransactionOutcome { outcome: Some(outcome) }
    }
}

impl TryFrom<pb::TransactionOutcome> for TransactionOutcome {
    type Error = DecodeError;
    fn try_from(t: pb::TransactionOutcome) -> Result<TransactionOutcome, DecodeError> {
        use pb::transaction_outcome::Outcome as O;
        Ok(match set(t.outcome, "transaction outcome")? {
            O::Done(_) => TransactionOutcome::Done,
            O::Unknown(_) => TransactionOutcome::Unknown,
            O::Conflict(state) => TransactionOutcome::Conflict(state.try_into()?),
        })
    }
}

impl From<HalfState> for pb::HalfState {
    fn from(h: HalfState) -> pb::HalfState {
        use pb::half_state::State as S;
        let resolution = |by: Resolver, at_ms| pb::Resolution { by: pb::Resolver::from(by).into(), at_ms };
        let state = match h {
            HalfState::Open => S::Open(EMPTY),
            HalfState::Committed { by, at_ms } => S::Committed(resolution(by, at_ms)),
            HalfState::RolledBack { by, at_ms } => S::RolledBack(resolution(by, at_ms)),
        };
        pb::HalfState { state: Some(state) }
    }
}

impl TryFrom<pb::HalfState> for HalfState {
    type Error = DecodeError;
    fn try_from(h: pb::HalfState) -> Result<HalfState, DecodeError> {
        use pb::half_state::State as S;
        Ok(match set(h.state, "half state")? {
            S::Open(_) => HalfState::Open,
            S::Committed(r) => HalfState::Committed { by: resolver(r.by)?, at_ms: r.at_ms },
            S::RolledBack(r) => HalfState::RolledBack { by: resolver(r.by)?, at_ms: r.at_ms },
        })
    }
}

impl From<Resolver> for pb::Resolver {
    fn from(r: Resolver) -> pb::Resolver {
        match r {
            Resolver::Producer => pb::Resolver::Producer,
            Resolver::ProducerCheck => pb::Resolver::ProducerCheck,
            Resolver::Checker => pb::Resolver::Checker,
            Resolver::Operator => pb::Resolver::Operator,
        }
    }
}

fn resolver(value: i32) -> Result<Resolver, DecodeError> {
    let unknown = DecodeError::Unknown { what: "resolver", value };
    Ok(match pb::Resolver::try_from(value).map_err(|_| unknown.clone())? {
        pb::Resolver::Producer => Resolver::Producer,
        pb::Resolver::ProducerCheck => Resolver::ProducerCheck,
        pb::Resolver::Checker => Resolver::Checker,
        pb::Resolver::Operator => Resolver::Operator,
        pb::Resolver::Unspecified => return Err(unknown),
    })
}

// Lite topics.

impl From<LiteOutcome> for pb::LiteOutcome {
    fn from(l: LiteOutcome) -> pb::LiteOutcome {
        use pb::lite_outcome::Outcome as O;
        let outcome = match l {
            LiteOutcome::Done => O::Done(EMPTY),
            LiteOutcome::Synced { taken_from } => O::Synced(pb::LiteSynced {
                taken_from: taken_from.into_iter().map(|(lite, client)| pb::TakenFrom { lite, client }).collect(),
            }),
            LiteOutcome::GroupNotFound(g) => O::GroupNotFound(g),
            LiteOutcome::TopicNotFound(t) => O::TopicNotFound(t),
            LiteOutcome::IllegalGroup(g) => O::IllegalGroup(g),
            LiteOutcome::IllegalLiteTopic(t) => O::IllegalLiteTopic(t),
            LiteOutcome::QuotaExceeded(why) => O::QuotaExceeded(why),
            LiteOutcome::Delivered { deliveries, names } => {
                O::Delivered(pb::LiteDeliveries { deliveries: all(deliveries), names: names.into_iter().collect() })
            }
            LiteOutcome::NotOwner(who) => O::NotOwner(who),
        };
        pb::LiteOutcome { outcome: Some(outcome) }
    }
}

impl TryFrom<pb::LiteOutcome> for LiteOutcome {
    type Error = DecodeError;
    fn try_from(l: pb::LiteOutcome) -> Result<LiteOutcome, DecodeError> {
        use pb::lite_outcome::Outcome as O;
        Ok(match set(l.outcome, "lite outcome")? {
            O::Done(_) => LiteOutcome::Done,
            O::Synced(s) => {
                LiteOutcome::Synced { taken_from: s.taken_from.into_iter().map(|t| (t.lite, t.client)).collect() }
            }
            O::GroupNotFound(g) => LiteOutcome::GroupNotFound(g),
            O::TopicNotFound(t) => LiteOutcome::TopicNotFound(t),
            O::IllegalGroup(g) => LiteOutcome::IllegalGroup(g),
            O::IllegalLiteTopic(t) => LiteOutcome::IllegalLiteTopic(t),
            O::QuotaExceeded(why) => LiteOutcome::QuotaExceeded(why),
            O::Delivered(d) => {
                LiteOutcome::Delivered { deliveries: each(d.deliveries)?, names: d.names.into_iter().collect() }
            }
            O::NotOwner(who) => LiteOutcome::NotOwner(who),
        })
    }
}

// Pops.

impl From<PopOrder> for pb::PopOrder {
    fn from(o: PopOrder) -> pb::PopOrder {
        let filter_kind = match o.filter_kind {
            FilterKind::Tag => pb::FilterKind::Tag,
            FilterKind::Sql92 => pb::FilterKind::Sql92,
        };
        pb::PopOrder {
            group: o.group,
            topic: o.topic,
            filter: o.filter,
            filter_kind: filter_kind.into(),
            max_messages: o.max_messages as u64,
            invisible_ms: o.invisible_ms,
            attempt_id: o.attempt_id,
            lite_client: o.lite_client,
            lite_by: actor_to_proto(&o.lite_by),
            with_messages: o.with_messages,
        }
    }
}

impl TryFrom<pb::PopOrder> for PopOrder {
    type Error = DecodeError;
    fn try_from(o: pb::PopOrder) -> Result<PopOrder, DecodeError> {
        let unknown = DecodeError::Unknown { what: "filter kind", value: o.filter_kind };
        let filter_kind = match pb::FilterKind::try_from(o.filter_kind).map_err(|_| unknown.clone())? {
            pb::FilterKind::Tag => FilterKind::Tag,
            pb::FilterKind::Sql92 => FilterKind::Sql92,
            pb::FilterKind::Unspecified => return Err(unknown),
        };
        let max_messages = usize::try_from(o.max_messages)
            .map_err(|_| DecodeError::OutOfRange { what: "max messages", value: o.max_messages })?;
        Ok(PopOrder {
            group: o.group,
            topic: o.topic,
            filter: o.filter,
            filter_kind,
            max_messages,
            invisible_ms: o.invisible_ms,
            attempt_id: o.attempt_id,
            lite_client: o.lite_client,
            lite_by: actor_from_proto(o.lite_by),
            with_messages: o.with_messages,
        })
    }
}

impl From<Popped> for pb::Popped {
    fn from(p: Popped) -> pb::Popped {
        pb::Popped {
            deliveries: all(p.deliveries),
            next_due_in_ms: p.next_due_in_ms,
            passed_over: p.passed_over,
            lite_topics: p.lite_topics.into_iter().collect(),
            messages: p
                .messages
                .into_iter()
                .map(|m| match m {
                    Some(m) => pb::CarriedMessage {
                        found: true,
                        queue_id: m.queue_id,
                        offset: m.offset,
                        store_timestamp_ms: m.store_timestamp_ms,
                        raw: m.raw,
                    },
                    None => pb::CarriedMessage::default(),
                })
                .collect(),
        }
    }
}

impl TryFrom<pb::Popped> for Popped {
    type Error = DecodeError;
    fn try_from(p: pb::Popped) -> Result<Popped, DecodeError> {
        Ok(Popped {
            deliveries: each(p.deliveries)?,
            next_due_in_ms: p.next_due_in_ms,
            passed_over: p.passed_over,
            lite_topics: p.lite_topics.into_iter().collect(),
            messages: p
                .messages
                .into_iter()
                .map(|m| {
                    m.found.then_some(CarriedMessage {
                        queue_id: m.queue_id,
                        offset: m.offset,
                        store_timestamp_ms: m.store_timestamp_ms,
                        raw: m.raw,
                    })
                })
                .collect(),
        })
    }
}

impl From<PopError> for pb::PopError {
    fn from(e: PopError) -> pb::PopError {
        use pb::pop_error::Error as E;
        let error = match e {
            PopError::GroupNotFound(g) => E::GroupNotFound(g),
            PopError::TopicNotFound(t) => E::TopicNotFound(t),
            PopError::IllegalFilter(why) => E::IllegalFilter(why),
            PopError::Forbidden(why) => E::Forbidden(why),
            PopError::Quarantined(why) => E::Quarantined(why),
            PopError::FilterUnavailable(why) => E::FilterUnavailable(why),
            PopError::Cluster(c) => E::Cluster(c.into()),
            PopError::Internal(why) => E::Internal(why),
        };
        pb::PopError { error: Some(error) }
    }
}

impl TryFrom<pb::PopError> for PopError {
    type Error = DecodeError;
    fn try_from(e: pb::PopError) -> Result<PopError, DecodeError> {
        use pb::pop_error::Error as E;
        Ok(match set(e.error, "pop error")? {
            E::GroupNotFound(g) => PopError::GroupNotFound(g),
            E::TopicNotFound(t) => PopError::TopicNotFound(t),
            E::IllegalFilter(why) => PopError::IllegalFilter(why),
            E::Forbidden(why) => PopError::Forbidden(why),
            E::Quarantined(why) => PopError::Quarantined(why),
            E::FilterUnavailable(why) => PopError::FilterUnavailable(why),
            E::Cluster(c) => PopError::Cluster(c.try_into()?),
            E::Internal(why) => PopError::Internal(why),
        })
    }
}

// The cluster's errors and readings.

impl From<ClusterError> for pb::ClusterError {
    fn from(e: ClusterError) -> pb::ClusterError {
        use pb::cluster_error::Error as E;
        let error = match e {
            ClusterError::NoLeader => E::NoLeader(EMPTY),
            ClusterError::Unreachable { addr, reason } => E::Unreachable(pb::Unreachable { addr, reason }),
            ClusterError::TooLarge { len, max } => E::TooLarge(pb::TooLarge { len, max }),
            ClusterError::Busy { waiting_bytes } => E::Busy(pb::Busy { waiting_bytes }),
            ClusterError::DiskLow { node, free_bytes, mark_bytes, critical } => {
                E::DiskLow(pb::DiskLow { node, free_bytes, mark_bytes, critical })
            }
            ClusterError::Lagging { index } => E::Lagging(pb::Lagging { index }),
            ClusterError::Raft(why) => E::Raft(why),
            ClusterError::Internal(why) => E::Internal(why),
        };
        pb::ClusterError { error: Some(error) }
    }
}

impl TryFrom<pb::ClusterError> for ClusterError {
    type Error = DecodeError;
    fn try_from(e: pb::ClusterError) -> Result<ClusterError, DecodeError> {
        use pb::cluster_error::Error as E;
        Ok(match set(e.error, "cluster error")? {
            E::NoLeader(_) => ClusterError::NoLeader,
            E::Unreachable(u) => ClusterError::Unreachable { addr: u.addr, reason: u.reason },
            E::TooLarge(t) => ClusterError::TooLarge { len: t.len, max: t.max },
            E::Busy(b) => ClusterError::Busy { waiting_bytes: b.waiting_bytes },
            E::DiskLow(d) => ClusterError::DiskLow {
                node: d.node,
                free_bytes: d.free_bytes,
                mark_bytes: d.mark_bytes,
                critical: d.critical,
            },
            E::Lagging(l) => ClusterError::Lagging { index: l.index },
            E::Raft(why) => ClusterError::Raft(why),
            E::Internal(why) => ClusterError::Internal(why),
        })
    }
}

impl From<DiskReading> for pb::DiskReading {
    fn from(d: DiskReading) -> pb::DiskReading {
        let level = match d.level {
            DiskLevel::Ok => pb::DiskLevel::Ok,
            DiskLevel::Low => pb::DiskLevel::Low,
            DiskLevel::Critical => pb::DiskLevel::Critical,
        };
        pb::DiskReading {
            free_bytes: d.free_bytes,
            total_bytes: d.total_bytes,
            marks: Some(pb::Watermarks { soft: d.marks.soft, hard: d.marks.hard }),
            level: level.into(),
            filesystem: d.filesystem,
            sharing: d.sharing,
        }
    }
}

impl TryFrom<pb::DiskReading> for DiskReading {
    type Error = DecodeError;
    fn try_from(d: pb::DiskReading) -> Result<DiskReading, DecodeError> {
        let unknown = DecodeError::Unknown { what: "disk level", value: d.level };
        let level = match pb::DiskLevel::try_from(d.level).map_err(|_| unknown.clone())? {
            pb::DiskLevel::Ok => DiskLevel::Ok,
            pb::DiskLevel::Low => DiskLevel::Low,
            pb::DiskLevel::Critical => DiskLevel::Critical,
            pb::DiskLevel::Unspecified => return Err(unknown),
        };
        let marks = set(d.marks, "disk reading's marks")?;
        Ok(DiskReading {
            free_bytes: d.free_bytes,
            total_bytes: d.total_bytes,
            marks: Watermarks { soft: marks.soft, hard: marks.hard },
            level,
            filesystem: d.filesystem,
            sharing: d.sharing,
        })
    }
}

impl From<AskProducer> for pb::AskProducer {
    fn from(a: AskProducer) -> pb::AskProducer {
        pb::AskProducer {
            topic: a.topic,
            transaction_id: a.transaction_id,
            message: Some(a.message),
            store_timestamp_ms: a.store_timestamp_ms,
        }
    }
}

impl TryFrom<pb::AskProducer> for AskProducer {
    type Error = DecodeError;
    fn try_from(a: pb::AskProducer) -> Result<AskProducer, DecodeError> {
        Ok(AskProducer {
            topic: a.topic,
            transaction_id: a.transaction_id,
            message: a.message.ok_or(DecodeError::Missing("the half's message"))?,
            store_timestamp_ms: a.store_timestamp_ms,
        })
    }
}

/// The live members the leader heard from, by id.
pub struct LiveMembers(pub Vec<u64>);

impl From<LiveMembers> for pb::LiveMembers {
    fn from(l: LiveMembers) -> pb::LiveMembers {
        pb::LiveMembers { ids: l.0 }
    }
}

impl TryFrom<pb::LiveMembers> for LiveMembers {
    type Error = DecodeError;
    fn try_from(l: pb::LiveMembers) -> Result<LiveMembers, DecodeError> {
        Ok(LiveMembers(l.ids))
    }
}

/// A group's leader as a member knows it.
pub struct KnownLeader(pub NodeId, pub NodeInfo);

impl From<KnownLeader> for pb::KnownLeader {
    fn from(KnownLeader(id, info): KnownLeader) -> pb::KnownLeader {
        pb::KnownLeader { id, raft_addr: info.raft_addr, client_addr: info.client_addr, admin_addr: info.admin_addr }
    }
}

impl TryFrom<pb::KnownLeader> for KnownLeader {
    type Error = DecodeError;
    fn try_from(l: pb::KnownLeader) -> Result<KnownLeader, DecodeError> {
        let info = NodeInfo {
            raft_addr: l.raft_addr,
            client_addr: l.client_addr,
            admin_addr: l.admin_addr,
            ..Default::default()
        };
        Ok(KnownLeader(l.id, info))
    }
}

impl From<GroupFigures> for pb::GroupFigures {
    fn from(f: GroupFigures) -> pb::GroupFigures {
        use pb::group_figures::{Held, Progress, Queue};
        pb::GroupFigures {
            queues: f
                .queues
                .into_iter()
                .map(|q| Queue { topic: q.topic, queue: q.queue_id, start: q.start, next: q.next })
                .collect(),
            held: f
                .held
                .into_iter()
                .map(|(topic, c)| Held { topic, timers: c.timers, open_halves: c.open_halves })
                .collect(),
            progress: f
                .progress
                .into_iter()
                .map(|p| Progress { group: p.group, topic: p.topic, lag: p.lag, inflight: p.inflight })
                .collect(),
        }
    }
}

impl TryFrom<pb::GroupFigures> for GroupFigures {
    type Error = DecodeError;
    fn try_from(f: pb::GroupFigures) -> Result<GroupFigures, DecodeError> {
        Ok(GroupFigures {
            queues: f
                .queues
                .into_iter()
                .map(|q| QueueStatus { topic: q.topic, queue_id: q.queue, start: q.start, next: q.next })
                .collect(),
            held: f
                .held
                .into_iter()
                .map(|h| (h.topic, HeldCounts { timers: h.timers, open_halves: h.open_halves }))
                .collect(),
            progress: f
                .progress
                .into_iter()
                .map(|p| GroupProgress { group: p.group, topic: p.topic, lag: p.lag, inflight: p.inflight })
                .collect(),
        })
    }
}

/// A peer call's answer: its value, or the typed error the call ended with.
pub trait ResultMessage: Sized {
    type Ok;
    type Err;
    fn from_result(result: Result<Self::Ok, Self::Err>) -> Self;
    fn into_result(self) -> Result<Result<Self::Ok, Self::Err>, DecodeError>;
}

macro_rules! result_message {
    ($message:ident, $module:ident, $ok:ty, $err:ty) => {
        impl ResultMessage for pb::$message {
            type Ok = $ok;
            type Err = $err;

            fn from_result(result: Result<$ok, $err>) -> Self {
                use pb::$module::Result as R;
                let result = match result {
                    Ok(value) => R::Ok(value.into()),
                    Err(e) => R::Error(e.into()),
                };
                pb::$message { result: Some(result) }
            }

            fn into_result(self) -> Result<Result<$ok, $err>, DecodeError> {
                use pb::$module::Result as R;
                Ok(match set(self.result, stringify!($message))? {
                    R::Ok(value) => Ok(value.try_into()?),
                    R::Error(e) => Err(e.try_into()?),
                })
            }
        }
    };
}

result_message!(WriteResult, write_result, Reply, ClusterError);
result_message!(PopResult, pop_result, Popped, PopError);
result_message!(DeadLetterResult, dead_letter_result, ConsumeOutcome, PopError);
result_message!(ReadIndexResult, read_index_result, u64, ClusterError);
result_message!(LiveMembersResult, live_members_result, LiveMembers, ClusterError);
result_message!(LeaderResult, leader_result, KnownLeader, ClusterError);
result_message!(FiguresResult, figures_result, GroupFigures, ClusterError);
result_message!(DiskSpaceResult, disk_space_result, DiskReading, ClusterError);
