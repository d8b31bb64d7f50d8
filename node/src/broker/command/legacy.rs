//! Format 1, the entries of earlier releases: a tag byte (the kind), then the body — protobuf
//! for sends and dead letters, JSON of the command types' serde form for the others. Read only:
//! a log of an existing data directory may still hold such entries, and a member not upgraded
//! yet may forward such a command; this release never writes one.

use std::sync::Once;

use bytes::Bytes;
use prost::Message;
use rockraft_proto::rockraft::{DeadLetter, SendBatch};

use super::envelope::Kind;
use super::{Command, DecodeError};

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
        Kind::Consume => Command::Consume(json(&body)?),
        Kind::Timer => Command::Timer(json(&body)?),
        Kind::Transaction => Command::Transaction(json(&body)?),
        Kind::Plugin => Command::Plugin(json(&body)?),
        Kind::Access => Command::Access(json(&body)?),
        Kind::Lite => Command::Lite(json(&body)?),
        // No release of format 1 wrote one (`envelope::read` refuses the tag).
        Kind::Placement => return Err(DecodeError::NotACommand(Kind::Placement as u8)),
    })
}
