//! The commands a Raft entry carries, and their encoding.
//!
//! Layout of a normal entry's payload: one tag byte, then the body.
//! - `TAG_SEND`: a protobuf `SendBatch` (messages kept as separately encoded `StoredMessage`s,
//!   so a ConsumeQueue record can point at one message and reading it copies nothing);
//! - `TAG_ADMIN`: JSON of [`AdminCommand`] (rare, small).

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use rockraft_proto::rockraft::SendBatch;

use crate::broker::BrokerError;
use crate::broker::topic::TopicConfig;

const TAG_SEND: u8 = 1;
const TAG_ADMIN: u8 = 2;

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Send(SendBatch),
    Admin(AdminCommand),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AdminCommand {
    CreateTopic(TopicConfig),
    DeleteTopic { name: String },
}

impl Command {
    pub fn encode(&self) -> Bytes {
        match self {
            Command::Send(batch) => {
                let mut buf = BytesMut::with_capacity(1 + batch.encoded_len());
                buf.put_u8(TAG_SEND);
                batch.encode(&mut buf).expect("BytesMut grows");
                buf.freeze()
            }
            Command::Admin(admin) => {
                let mut buf = vec![TAG_ADMIN];
                serde_json::to_writer(&mut buf, admin).expect("admin commands serialize");
                Bytes::from(buf)
            }
        }
    }

    /// Decodes an entry payload. `Bytes` fields of the result share `bytes`' buffer.
    pub fn decode(bytes: Bytes) -> Result<Command, BrokerError> {
        let corrupt = |e: &dyn std::fmt::Display| BrokerError::CorruptEntry(e.to_string());
        match bytes.first() {
            Some(&TAG_SEND) => SendBatch::decode(bytes.slice(1..)).map(Command::Send).map_err(|e| corrupt(&e)),
            Some(&TAG_ADMIN) => serde_json::from_slice(&bytes[1..]).map(Command::Admin).map_err(|e| corrupt(&e)),
            Some(tag) => Err(BrokerError::CorruptEntry(format!("unknown command tag {tag}"))),
            None => Err(BrokerError::CorruptEntry("empty command".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::topic::TopicKind;

    #[test]
    fn commands_round_trip() {
        let send = Command::Send(SendBatch {
            topic: "T".into(),
            queue_id: 3,
            store_timestamp_ms: 1_700_000_000_000,
            messages: vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")],
        });
        assert_eq!(Command::decode(send.encode()).unwrap(), send);
        let admin = Command::Admin(AdminCommand::CreateTopic(TopicConfig {
            name: "T".into(),
            queues: 4,
            kind: TopicKind::Fifo,
        }));
        assert_eq!(Command::decode(admin.encode()).unwrap(), admin);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [&b""[..], b"\x09", b"\x01\xff\xff\xff", b"\x02{"] {
            assert!(Command::decode(Bytes::copy_from_slice(bad)).is_err());
        }
    }
}
