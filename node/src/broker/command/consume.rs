//! [`ConsumeCommand`] ↔ `rockraft.v1.log.ConsumeCommand`.

use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::log::consume_command::Op;

use super::{AdminCommand, Command, DecodeError, Footprint, known, required};
use crate::broker::group::GroupConfig;
use crate::broker::lite::{LiteBinding, LiteModel};
use crate::broker::pop::{ChannelId, ConsumeCommand, Pop, QueueTake, Receipt, Redelivery};

pub(super) fn footprint(c: &ConsumeCommand) -> Footprint {
    match c {
        ConsumeCommand::Pop(_)
        | ConsumeCommand::Ack(_)
        | ConsumeCommand::Acks { .. }
        | ConsumeCommand::ChangeInvisible { .. }
        | ConsumeCommand::Renew { .. }
        | ConsumeCommand::RenewMany { .. }
        | ConsumeCommand::ResetOffset { .. }
        | ConsumeCommand::CommitOffset { .. } => Footprint::Records,
    }
}

pub(super) fn to_proto(c: &ConsumeCommand) -> pb::ConsumeCommand {
    let change = |receipt: &Receipt, now_ms: i64, invisible_ms: i64| pb::ChangeInvisible {
        receipt: Some(receipt_to_proto(receipt)),
        now_ms,
        invisible_ms,
    };
    let op = match c {
        ConsumeCommand::Pop(p) => Op::Pop(pop_to_proto(p)),
        ConsumeCommand::Ack(r) => Op::Ack(receipt_to_proto(r)),
        ConsumeCommand::Acks { receipts } => {
            Op::Acks(pb::Acks { receipts: receipts.iter().map(receipt_to_proto).collect() })
        }
        ConsumeCommand::ChangeInvisible { receipt, now_ms, invisible_ms } => {
            Op::ChangeInvisible(change(receipt, *now_ms, *invisible_ms))
        }
        ConsumeCommand::Renew { receipt, now_ms, invisible_ms } => Op::Renew(change(receipt, *now_ms, *invisible_ms)),
        ConsumeCommand::RenewMany { renewals, now_ms } => Op::RenewMany(pb::RenewMany {
            renewals: renewals
                .iter()
                .map(|(r, invisible_ms)| pb::Renewal {
                    receipt: Some(receipt_to_proto(r)),
                    invisible_ms: *invisible_ms,
                })
                .collect(),
            now_ms: *now_ms,
        }),
        ConsumeCommand::ResetOffset { group, topic, topic_epoch, positions } => Op::ResetOffset(pb::ResetOffset {
            group: group.clone(),
            topic: topic.clone(),
            topic_epoch: *topic_epoch,
            positions: positions.iter().map(|&(queue_id, offset)| pb::QueuePosition { queue_id, offset }).collect(),
        }),
        ConsumeCommand::CommitOffset { group, topic, topic_epoch, queue_id, offset } => {
            Op::CommitOffset(pb::CommitOffset {
                group: group.clone(),
                topic: topic.clone(),
                topic_epoch: *topic_epoch,
                queue_id: *queue_id,
                offset: *offset,
            })
        }
    };
    pb::ConsumeCommand { op: Some(op) }
}

/// The command of a consumption entry. A group change of format 2 or 3 is the admin command it
/// is now.
pub(super) fn from_proto(c: pb::ConsumeCommand) -> Result<Command, DecodeError> {
    Ok(Command::Consume(match c.op.ok_or(DecodeError::UnknownVariant("consume"))? {
        Op::CreateGroup(g) => return Ok(Command::Admin(AdminCommand::CreateGroup(group_from_proto(g)?))),
        Op::DeleteGroup(d) => return Ok(Command::Admin(AdminCommand::DeleteGroup { name: d.name })),
        Op::Pop(p) => ConsumeCommand::Pop(pop_from_proto(p)),
        Op::Ack(r) => ConsumeCommand::Ack(receipt_from_proto(r)),
        Op::Acks(a) => ConsumeCommand::Acks { receipts: a.receipts.into_iter().map(receipt_from_proto).collect() },
        Op::ChangeInvisible(c) => ConsumeCommand::ChangeInvisible {
            receipt: receipt_from_proto(required(c.receipt, "receipt")?),
            now_ms: c.now_ms,
            invisible_ms: c.invisible_ms,
        },
        Op::Renew(c) => ConsumeCommand::Renew {
            receipt: receipt_from_proto(required(c.receipt, "receipt")?),
            now_ms: c.now_ms,
            invisible_ms: c.invisible_ms,
        },
        Op::RenewMany(r) => ConsumeCommand::RenewMany {
            renewals: r
                .renewals
                .into_iter()
                .map(|r| Ok((receipt_from_proto(required(r.receipt, "receipt")?), r.invisible_ms)))
                .collect::<Result<_, DecodeError>>()?,
            now_ms: r.now_ms,
        },
        Op::ResetOffset(r) => ConsumeCommand::ResetOffset {
            group: r.group,
            topic: r.topic,
            topic_epoch: r.topic_epoch,
            positions: r.positions.into_iter().map(|p| (p.queue_id, p.offset)).collect(),
        },
        Op::CommitOffset(c) => ConsumeCommand::CommitOffset {
            group: c.group,
            topic: c.topic,
            topic_epoch: c.topic_epoch,
            queue_id: c.queue_id,
            offset: c.offset,
        },
    }))
}

pub(super) fn group_to_proto(g: &GroupConfig) -> pb::GroupConfig {
    pb::GroupConfig {
        name: g.name.clone(),
        fifo: g.fifo,
        max_attempts: g.max_attempts,
        priority_factor: u32::from(g.priority_factor),
        lite: g.lite.as_ref().map(|b| pb::LiteBinding {
            topic: b.topic.clone(),
            model: match b.model {
                LiteModel::Shared => pb::LiteModel::Shared,
                LiteModel::Exclusive => pb::LiteModel::Exclusive,
            } as i32,
            quota: b.quota,
        }),
    }
}

pub(super) fn group_from_proto(g: pb::GroupConfig) -> Result<GroupConfig, DecodeError> {
    let priority_factor = u8::try_from(g.priority_factor)
        .map_err(|_| DecodeError::OutOfRange { field: "priority factor", value: u64::from(g.priority_factor) })?;
    let lite = match g.lite {
        Some(b) => Some(LiteBinding {
            topic: b.topic,
            model: known(b.model, "lite model", |v| match pb::LiteModel::try_from(v).ok()? {
                pb::LiteModel::Unspecified => None,
                pb::LiteModel::Shared => Some(LiteModel::Shared),
                pb::LiteModel::Exclusive => Some(LiteModel::Exclusive),
            })?,
            quota: b.quota,
        }),
        None => None,
    };
    Ok(GroupConfig { name: g.name, fifo: g.fifo, max_attempts: g.max_attempts, priority_factor, lite })
}

fn grouped(offsets: &[(u64, String)]) -> Vec<pb::GroupedOffset> {
    offsets.iter().map(|(offset, g)| pb::GroupedOffset { offset: *offset, message_group: g.clone() }).collect()
}

fn ungrouped(offsets: Vec<pb::GroupedOffset>) -> Vec<(u64, String)> {
    offsets.into_iter().map(|o| (o.offset, o.message_group)).collect()
}

fn pop_to_proto(p: &Pop) -> pb::Pop {
    pb::Pop {
        group: p.group.clone(),
        topic: p.topic.clone(),
        topic_epoch: p.topic_epoch,
        now_ms: p.now_ms,
        invisible_ms: p.invisible_ms,
        takes: p
            .takes
            .iter()
            .map(|t| pb::QueueTake {
                queue_id: t.queue_id,
                from: t.from,
                to: t.to,
                deliver: grouped(&t.deliver),
                hold: grouped(&t.hold),
            })
            .collect(),
        redeliveries: p
            .redeliveries
            .iter()
            .map(|r| pb::Redelivery { queue_id: r.queue_id, offset: r.offset, generation: r.generation })
            .collect(),
        receives: p
            .receives
            .iter()
            .map(|(attempt_id, count)| pb::ReceiveShare { attempt_id: attempt_id.clone(), count: *count })
            .collect(),
    }
}

fn pop_from_proto(p: pb::Pop) -> Pop {
    Pop {
        group: p.group,
        topic: p.topic,
        topic_epoch: p.topic_epoch,
        now_ms: p.now_ms,
        invisible_ms: p.invisible_ms,
        takes: p
            .takes
            .into_iter()
            .map(|t| QueueTake {
                queue_id: t.queue_id,
                from: t.from,
                to: t.to,
                deliver: ungrouped(t.deliver),
                hold: ungrouped(t.hold),
            })
            .collect(),
        redeliveries: p
            .redeliveries
            .into_iter()
            .map(|r| Redelivery { queue_id: r.queue_id, offset: r.offset, generation: r.generation })
            .collect(),
        receives: p.receives.into_iter().map(|r| (r.attempt_id, r.count)).collect(),
    }
}

fn receipt_to_proto(r: &Receipt) -> pb::Receipt {
    pb::Receipt::from(r)
}

fn receipt_from_proto(r: pb::Receipt) -> Receipt {
    Receipt::from(r)
}

/// A receipt's one protobuf form, in log entries and in the peer calls alike.
impl From<&Receipt> for pb::Receipt {
    fn from(r: &Receipt) -> pb::Receipt {
        let (queue_id, lite_id) = match r.channel {
            ChannelId::Queue(queue_id) => (queue_id, None),
            ChannelId::Lite(id) => (0, Some(id)),
        };
        pb::Receipt {
            group: r.group.clone(),
            topic: r.topic.clone(),
            queue_id,
            offset: r.offset,
            generation: r.generation,
            lite_id,
        }
    }
}

impl From<pb::Receipt> for Receipt {
    fn from(r: pb::Receipt) -> Receipt {
        let channel = r.lite_id.map_or(ChannelId::Queue(r.queue_id), ChannelId::Lite);
        Receipt { group: r.group, topic: r.topic, channel, offset: r.offset, generation: r.generation }
    }
}
