//! Format 1, the entries of earlier releases: a tag byte (the kind), then the body — protobuf
//! for sends and dead letters, JSON of the command types' serde form for the others. Read only:
//! a log of an existing data directory may still hold such entries, and a member not upgraded
//! yet may forward such a command; this release never writes one.

use std::sync::Once;

use bytes::Bytes;
use prost::Message;
use rockraft_proto::rockraft::{DeadLetter, SendBatch};

use super::envelope::Kind;
use super::{AdminCommand, Command, DecodeError};
use crate::broker::group::GroupConfig;
use rockraft_proto::rockraft::log as pb;

static FIRST_USE: Once = Once::new();

fn json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    serde_json::from_slice(body).map_err(|e| DecodeError::Json(e.to_string()))
}

/// The command of a format-1 payload of `kind`, whose body (after the tag) is `body`.
pub(super) fn decode(kind: Kind, body: Bytes) -> Result<Command, DecodeError> {
    FIRST_USE.call_once(|| {
        tracing::info!(
            "reading log entries written by an earlier release (log format 1); entries written from now on are of format {}",
            super::envelope::FORMAT
        );
    });
    Ok(match kind {
        Kind::Send => Command::Send(SendBatch::decode(body)?),
        Kind::DeadLetter => Command::DeadLetter(DeadLetter::decode(body)?),
        Kind::Admin => Command::Admin(json(&body)?),
        Kind::Consume => consume(&body)?,
        Kind::Timer => Command::Timer(json(&body)?),
        Kind::Transaction => Command::Transaction(json(&body)?),
        Kind::Plugin => Command::Plugin(json(&body)?),
        Kind::Access => Command::Access(json(&body)?),
        Kind::Lite => lite(&body)?,
        // No release of format 1 wrote one (`envelope::read` refuses the tag).
        Kind::Placement => return Err(DecodeError::NotACommand(Kind::Placement as u8)),
    })
}

/// A lite command of format 1. Those that settled a delivery by receipt (ack, change of
/// invisible time, drop) read as the format-2 command they were, and so as what does the same
/// now (`lite::from_proto`).
fn lite(body: &[u8]) -> Result<Command, DecodeError> {
    #[derive(serde::Deserialize)]
    struct Receipt {
        group: String,
        id: u64,
        offset: u64,
        generation: u64,
    }
    #[derive(serde::Deserialize)]
    #[serde(tag = "op", rename_all = "snake_case")]
    enum Settling {
        Ack { receipts: Vec<Receipt> },
        ChangeInvisible { receipt: Receipt, now_ms: i64, invisible_ms: i64 },
        Drop { receipt: Receipt },
    }
    use pb::lite_command::Op;
    let proto = |r: Receipt| pb::LiteReceipt { group: r.group, id: r.id, offset: r.offset, generation: r.generation };
    let op = match json::<Settling>(body) {
        Ok(Settling::Ack { receipts }) => Op::Ack(pb::LiteAcks { receipts: receipts.into_iter().map(proto).collect() }),
        Ok(Settling::ChangeInvisible { receipt, now_ms, invisible_ms }) => {
            Op::ChangeInvisible(pb::LiteChangeInvisible { receipt: Some(proto(receipt)), now_ms, invisible_ms })
        }
        Ok(Settling::Drop { receipt }) => Op::Drop(pb::LiteDrop { receipt: Some(proto(receipt)) }),
        Err(_) => return Ok(Command::Lite(json(body)?)),
    };
    super::lite::from_proto(pb::LiteCommand { op: Some(op) })
}

/// A consumption command of format 1. A group change is the admin command it is now.
fn consume(body: &[u8]) -> Result<Command, DecodeError> {
    #[derive(serde::Deserialize)]
    #[serde(tag = "op", rename_all = "snake_case")]
    enum GroupChange {
        CreateGroup(GroupConfig),
        DeleteGroup { name: String },
    }
    Ok(match json::<GroupChange>(body) {
        Ok(GroupChange::CreateGroup(g)) => Command::Admin(AdminCommand::CreateGroup(g)),
        Ok(GroupChange::DeleteGroup { name }) => Command::Admin(AdminCommand::DeleteGroup { name }),
        Err(_) => Command::Consume(json(body)?),
    })
}
