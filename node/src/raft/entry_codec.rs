//! Raft entries ↔ CommitLog records. The record header carries the log id (term, leader, index);
//! the record kind says which payload follows.

use std::io;

use bytes::Bytes;
use openraft::EntryPayload;
use openraft::entry::RaftEntry;

use crate::raft::{CommandBytes, Entry, LogId};
use crate::store::record::{KIND_BLANK, KIND_COMMAND as KIND_NORMAL, KIND_MEMBERSHIP};
use crate::store::{RecordMeta, StoredRecord};

/// The Raft log id a CommitLog record carries.
pub fn log_id(meta: &RecordMeta) -> LogId {
    LogId::new(openraft::impls::leader_id_adv::LeaderId { term: meta.term, node_id: meta.leader }, meta.index)
}

pub fn encode(entry: &Entry) -> io::Result<(RecordMeta, Bytes)> {
    let (kind, payload) = match &entry.payload {
        EntryPayload::Blank => (KIND_BLANK, Bytes::new()),
        EntryPayload::Normal(CommandBytes(bytes)) => (KIND_NORMAL, bytes.clone()),
        EntryPayload::Membership(m) => (KIND_MEMBERSHIP, Bytes::from(serde_json::to_vec(m).map_err(io::Error::other)?)),
    };
    let id = entry.log_id();
    let meta = RecordMeta { term: id.leader_id.term, index: id.index, leader: id.leader_id.node_id, kind };
    Ok((meta, payload))
}

pub fn decode(record: StoredRecord) -> io::Result<Entry> {
    let payload = match record.meta.kind {
        KIND_BLANK => EntryPayload::Blank,
        KIND_NORMAL => EntryPayload::Normal(CommandBytes(record.payload)),
        KIND_MEMBERSHIP => EntryPayload::Membership(
            serde_json::from_slice(&record.payload).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
        ),
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("log record {} has unknown kind {other}", record.meta.index),
            ));
        }
    };
    Ok(Entry::new(log_id(&record.meta), payload))
}
