//! [`LiteCommand`] ↔ `rockraft.v1.log.LiteCommand`.

use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::log::lite_actor::Actor;
use rockraft_proto::rockraft::log::lite_command::Op;

use super::{Command, DecodeError, Footprint, known, required};
use crate::broker::lite::{LiteActor, LiteCommand, LitePop, LiteRedelivery, LiteTake, SyncAction};
use crate::broker::pop::{ChannelId, ConsumeCommand, Receipt};
use rockraft_proto::rockraft::DeadLetter;

pub(super) fn footprint(c: &LiteCommand) -> Footprint {
    match c {
        LiteCommand::Expire { .. } | LiteCommand::Unsubscribe { .. } => Footprint::Relieves,
        LiteCommand::Sync { .. } | LiteCommand::Pop(_) => Footprint::Records,
    }
}

/// Who acts, in its one protobuf form (`None`: the cluster itself, or authentication off).
pub(crate) fn actor_to_proto(by: &LiteActor) -> Option<pb::LiteActor> {
    let actor = match by {
        LiteActor::Open => return None,
        LiteActor::User(key) => Actor::User(key.clone()),
        LiteActor::Admin(key) => Actor::Admin(key.clone()),
    };
    Some(pb::LiteActor { actor: Some(actor) })
}

pub(crate) fn actor_from_proto(by: Option<pb::LiteActor>) -> LiteActor {
    match by.and_then(|a| a.actor) {
        None => LiteActor::Open,
        Some(Actor::User(key)) => LiteActor::User(key),
        Some(Actor::Admin(key)) => LiteActor::Admin(key),
    }
}

/// The receipt of a lite delivery in an entry of format 2 or 3, which named no parent topic
/// (apply finds it by the group's binding).
fn receipt_from_proto(r: Option<pb::LiteReceipt>) -> Result<Receipt, DecodeError> {
    let r = required(r, "receipt")?;
    Ok(Receipt {
        group: r.group,
        topic: String::new(),
        channel: ChannelId::Lite(r.id),
        offset: r.offset,
        generation: r.generation,
    })
}

pub(super) fn to_proto(c: &LiteCommand) -> pb::LiteCommand {
    let op = match c {
        LiteCommand::Sync { group, parent, client, action, lites, now_ms, by } => Op::Sync(pb::LiteSync {
            group: group.clone(),
            parent: parent.clone(),
            client: client.clone(),
            action: match action {
                SyncAction::Add => pb::SyncAction::Add,
                SyncAction::Remove => pb::SyncAction::Remove,
                SyncAction::Replace => pb::SyncAction::Replace,
            } as i32,
            lites: lites.clone(),
            now_ms: *now_ms,
            by: actor_to_proto(by),
        }),
        LiteCommand::Pop(p) => Op::Pop(pb::LitePop {
            group: p.group.clone(),
            parent: p.parent.clone(),
            client: p.client.clone(),
            by: actor_to_proto(&p.by),
            now_ms: p.now_ms,
            invisible_ms: p.invisible_ms,
            takes: p
                .takes
                .iter()
                .map(|t| pb::LiteTake {
                    lite: t.lite.clone(),
                    id: t.id,
                    from: t.from,
                    to: t.to,
                    deliver: t.deliver.clone(),
                })
                .collect(),
            redeliveries: p
                .redeliveries
                .iter()
                .map(|r| pb::LiteRedelivery {
                    lite: r.lite.clone(),
                    receipt: Some(pb::LiteReceipt {
                        group: p.group.clone(),
                        id: r.id,
                        offset: r.offset,
                        generation: r.generation,
                    }),
                })
                .collect(),
        }),
        LiteCommand::Expire { parent, before_ms, lites } => Op::Expire(pb::LiteExpire {
            parent: parent.clone(),
            before_ms: *before_ms,
            lites: lites.iter().map(|(lite, id)| pb::LiteIdOf { lite: lite.clone(), id: *id }).collect(),
        }),
        LiteCommand::Unsubscribe { group, client, by } => Op::Unsubscribe(pb::LiteUnsubscribe {
            group: group.clone(),
            client: client.clone(),
            by: actor_to_proto(by),
        }),
    };
    pb::LiteCommand { op: Some(op) }
}

/// The command of a lite entry. Those of formats 2 and 3 that settle a delivery by receipt
/// become what a later release writes for them: a consumption command, or for a drop the dead
/// letter without a copy.
pub(super) fn from_proto(c: pb::LiteCommand) -> Result<Command, DecodeError> {
    Ok(Command::Lite(match c.op.ok_or(DecodeError::UnknownVariant("lite"))? {
        Op::Sync(s) => LiteCommand::Sync {
            group: s.group,
            parent: s.parent,
            client: s.client,
            action: known(s.action, "sync action", |v| match pb::SyncAction::try_from(v).ok()? {
                pb::SyncAction::Unspecified => None,
                pb::SyncAction::Add => Some(SyncAction::Add),
                pb::SyncAction::Remove => Some(SyncAction::Remove),
                pb::SyncAction::Replace => Some(SyncAction::Replace),
            })?,
            lites: s.lites,
            now_ms: s.now_ms,
            by: actor_from_proto(s.by),
        },
        Op::Pop(p) => LiteCommand::Pop(LitePop {
            group: p.group,
            parent: p.parent,
            client: p.client,
            by: actor_from_proto(p.by),
            now_ms: p.now_ms,
            invisible_ms: p.invisible_ms,
            takes: p
                .takes
                .into_iter()
                .map(|t| LiteTake { lite: t.lite, id: t.id, from: t.from, to: t.to, deliver: t.deliver })
                .collect(),
            redeliveries: p
                .redeliveries
                .into_iter()
                .map(|r| {
                    let receipt = required(r.receipt, "receipt")?;
                    Ok(LiteRedelivery {
                        lite: r.lite,
                        id: receipt.id,
                        offset: receipt.offset,
                        generation: receipt.generation,
                    })
                })
                .collect::<Result<_, DecodeError>>()?,
        }),
        Op::Ack(a) => {
            let receipts = a.receipts.into_iter().map(|r| receipt_from_proto(Some(r))).collect::<Result<_, _>>()?;
            return Ok(Command::Consume(ConsumeCommand::Acks { receipts }));
        }
        Op::ChangeInvisible(c) => {
            return Ok(Command::Consume(ConsumeCommand::ChangeInvisible {
                receipt: receipt_from_proto(c.receipt)?,
                now_ms: c.now_ms,
                invisible_ms: c.invisible_ms,
            }));
        }
        Op::Drop(d) => return Ok(Command::DeadLetter(dead_letter_without_copy(required(d.receipt, "receipt")?))),
        Op::Expire(e) => LiteCommand::Expire {
            parent: e.parent,
            before_ms: e.before_ms,
            lites: e.lites.into_iter().map(|l| (l.lite, l.id)).collect(),
        },
        Op::Unsubscribe(u) => LiteCommand::Unsubscribe { group: u.group, client: u.client, by: actor_from_proto(u.by) },
    }))
}

/// What a lite drop of format 2 or 3 did: the dead letter of a message that is gone (no copy).
fn dead_letter_without_copy(r: pb::LiteReceipt) -> DeadLetter {
    DeadLetter {
        group: r.group,
        topic: String::new(),
        queue_id: 0,
        offset: r.offset,
        generation: r.generation,
        batch: None,
        lite_id: Some(r.id),
    }
}
