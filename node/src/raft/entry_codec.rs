//! Raft entries ↔ CommitLog records. The record header carries the log id (term, leader, index);
//! the record kind says which payload follows.

use std::io;

use bytes::Bytes;
use openraft::EntryPayload;
use openraft::entry::RaftEntry;
use prost::Message;
use rockraft_proto::rockraft as pb;

use crate::raft::convert::{FromPb, ToPb, invalid};
use crate::raft::{CommandBytes, Entry, LogId, Membership};
use crate::store::record::{KIND_BLANK, KIND_COMMAND as KIND_NORMAL, KIND_MEMBERSHIP, KIND_MEMBERSHIP_PB};
use crate::store::{RecordMeta, StoredRecord};

/// The Raft log id a CommitLog record carries.
pub fn log_id(meta: &RecordMeta) -> LogId {
    LogId::new(openraft::impls::leader_id_adv::LeaderId { term: meta.term, node_id: meta.leader }, meta.index)
}

pub fn encode(entry: &Entry) -> io::Result<(RecordMeta, Bytes)> {
    let (kind, payload) = match &entry.payload {
        EntryPayload::Blank => (KIND_BLANK, Bytes::new()),
        EntryPayload::Normal(CommandBytes(bytes)) => (KIND_NORMAL, bytes.clone()),
        EntryPayload::Membership(m) => (KIND_MEMBERSHIP_PB, Bytes::from(m.to_pb().encode_to_vec())),
    };
    let id = entry.log_id();
    let meta = RecordMeta { term: id.leader_id.term, index: id.index, leader: id.leader_id.node_id, kind };
    Ok((meta, payload))
}

pub fn decode(record: StoredRecord) -> io::Result<Entry> {
    let index = record.meta.index;
    let payload = match record.meta.kind {
        KIND_BLANK => EntryPayload::Blank,
        KIND_NORMAL => EntryPayload::Normal(CommandBytes(record.payload)),
        kind => EntryPayload::Membership(membership(kind, record.payload).map_err(|e| at(index, e))?),
    };
    Ok(Entry::new(log_id(&record.meta), payload))
}

/// The membership a record of `kind` carries.
fn membership(kind: u8, payload: Bytes) -> io::Result<Membership> {
    match kind {
        KIND_MEMBERSHIP_PB => Membership::from_pb(pb::Membership::decode(payload).map_err(invalid)?),
        // Written by releases before this one (JSON); never written now.
        KIND_MEMBERSHIP => serde_json::from_slice(&payload).map_err(invalid),
        other => Err(invalid(format!("unknown kind {other}"))),
    }
}

fn at(index: u64, e: io::Error) -> io::Error {
    invalid(format!("log record {index}: {e}"))
}

/// A membership record (of `kind`) as the JSON the broker state keeps of the last membership
/// applied: what the state machine records when it applies the entry, so a snapshot's replay of
/// the log records it identically. A record of a kind that is no membership is refused.
pub fn membership_json(kind: u8, payload: Bytes) -> io::Result<String> {
    serde_json::to_string(&membership(kind, payload)?).map_err(io::Error::other)
}
