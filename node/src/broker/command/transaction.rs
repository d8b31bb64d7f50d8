//! [`TransactionCommand`] ↔ `rockraft.v1.log.TransactionCommand`.

use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::log::transaction_command::Op;

use super::{DecodeError, Footprint, known};
use crate::broker::transaction::{Resolver, TransactionCommand};

pub(super) fn footprint(c: &TransactionCommand) -> Footprint {
    match c {
        // A resolution moves a half to its queue or drops it; a check reschedules halves.
        TransactionCommand::Resolve { .. } | TransactionCommand::Checked { .. } => Footprint::Records,
    }
}

pub(super) fn to_proto(c: &TransactionCommand) -> pb::TransactionCommand {
    let op = match c {
        TransactionCommand::Resolve { now_ms, topic, position, message_id, commit, by } => Op::Resolve(pb::Resolve {
            now_ms: *now_ms,
            topic: topic.clone(),
            position: *position,
            message_id: message_id.clone(),
            commit: *commit,
            by: match by {
                Resolver::Producer => pb::Resolver::Producer,
                Resolver::ProducerCheck => pb::Resolver::ProducerCheck,
                Resolver::Checker => pb::Resolver::Checker,
                Resolver::Operator => pb::Resolver::Operator,
            } as i32,
        }),
        TransactionCommand::Checked { now_ms, halves, asked } => Op::Checked(pb::Checked {
            now_ms: *now_ms,
            halves: halves
                .iter()
                .map(|&(position, checks, next_check_ms)| pb::CheckedHalf { position, checks, next_check_ms })
                .collect(),
            asked: *asked,
        }),
    };
    pb::TransactionCommand { op: Some(op) }
}

pub(super) fn from_proto(c: pb::TransactionCommand) -> Result<TransactionCommand, DecodeError> {
    Ok(match c.op.ok_or(DecodeError::UnknownVariant("transaction"))? {
        Op::Resolve(r) => TransactionCommand::Resolve {
            now_ms: r.now_ms,
            topic: r.topic,
            position: r.position,
            message_id: r.message_id,
            commit: r.commit,
            by: known(r.by, "resolver", |v| match pb::Resolver::try_from(v).ok()? {
                pb::Resolver::Unspecified => None,
                pb::Resolver::Producer => Some(Resolver::Producer),
                pb::Resolver::ProducerCheck => Some(Resolver::ProducerCheck),
                pb::Resolver::Checker => Some(Resolver::Checker),
                pb::Resolver::Operator => Some(Resolver::Operator),
            })?,
        },
        Op::Checked(c) => TransactionCommand::Checked {
            now_ms: c.now_ms,
            halves: c.halves.into_iter().map(|h| (h.position, h.checks, h.next_check_ms)).collect(),
            asked: c.asked,
        },
    })
}
