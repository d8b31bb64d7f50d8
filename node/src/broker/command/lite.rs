//! [`LiteCommand`] ↔ `rockraft.v1.log.LiteCommand`.

use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::log::lite_actor::Actor;
use rockraft_proto::rockraft::log::lite_command::Op;

use super::{DecodeError, Footprint, known, required};
use crate::broker::lite::{LiteActor, LiteCommand, LitePop, LiteReceipt, LiteTake, SyncAction};

pub(super) fn footprint(c: &LiteCommand) -> Footprint {
    match c {
        LiteCommand::Expire { .. } | LiteCommand::Unsubscribe { .. } => Footprint::Relieves,
        LiteCommand::Sync { .. }
        | LiteCommand::Pop(_)
        | LiteCommand::Ack { .. }
        | LiteCommand::ChangeInvisible { .. }
        | LiteCommand::Drop { .. } => Footprint::Records,
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

fn receipt_to_proto(r: &LiteReceipt) -> pb::LiteReceipt {
    pb::LiteReceipt::from(r)
}

fn receipt_from_proto(r: Option<pb::LiteReceipt>) -> Result<LiteReceipt, DecodeError> {
    Ok(LiteReceipt::from(required(r, "receipt")?))
}

/// A lite receipt's one protobuf form, in log entries and in the peer calls alike.
impl From<&LiteReceipt> for pb::LiteReceipt {
    fn from(r: &LiteReceipt) -> pb::LiteReceipt {
        pb::LiteReceipt { group: r.group.clone(), id: r.id, offset: r.offset, generation: r.generation }
    }
}

impl From<pb::LiteReceipt> for LiteReceipt {
    fn from(r: pb::LiteReceipt) -> LiteReceipt {
        LiteReceipt { group: r.group, id: r.id, offset: r.offset, generation: r.generation }
    }
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
                .map(|(lite, r)| pb::LiteRedelivery { lite: lite.clone(), receipt: Some(receipt_to_proto(r)) })
                .collect(),
        }),
        LiteCommand::Ack { receipts } => {
            Op::Ack(pb::LiteAcks { receipts: receipts.iter().map(receipt_to_proto).collect() })
        }
        LiteCommand::ChangeInvisible { receipt, now_ms, invisible_ms } => {
            Op::ChangeInvisible(pb::LiteChangeInvisible {
                receipt: Some(receipt_to_proto(receipt)),
                now_ms: *now_ms,
                invisible_ms: *invisible_ms,
            })
        }
        LiteCommand::Drop { receipt } => Op::Drop(pb::LiteDrop { receipt: Some(receipt_to_proto(receipt)) }),
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

pub(super) fn from_proto(c: pb::LiteCommand) -> Result<LiteCommand, DecodeError> {
    Ok(match c.op.ok_or(DecodeError::UnknownVariant("lite"))? {
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
                .map(|r| Ok((r.lite, receipt_from_proto(r.receipt)?)))
                .collect::<Result<_, DecodeError>>()?,
        }),
        Op::Ack(a) => LiteCommand::Ack {
            receipts: a.receipts.into_iter().map(|r| receipt_from_proto(Some(r))).collect::<Result<_, _>>()?,
        },
        Op::ChangeInvisible(c) => LiteCommand::ChangeInvisible {
            receipt: receipt_from_proto(c.receipt)?,
            now_ms: c.now_ms,
            invisible_ms: c.invisible_ms,
        },
        Op::Drop(d) => LiteCommand::Drop { receipt: receipt_from_proto(d.receipt)? },
        Op::Expire(e) => LiteCommand::Expire {
            parent: e.parent,
            before_ms: e.before_ms,
            lites: e.lites.into_iter().map(|l| (l.lite, l.id)).collect(),
        },
        Op::Unsubscribe(u) => LiteCommand::Unsubscribe { group: u.group, client: u.client, by: actor_from_proto(u.by) },
    })
}
