//! openraft messages ↔ the `rockraft.v1` protobuf types. Entries travel as raw records (the same
//! bytes the CommitLog stores); the small control messages travel as JSON.

use std::io;

use bytes::Bytes;
use openraft::raft::AppendEntriesRequest;
use rockraft_proto::rockraft as pb;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::raft::{Entry, LogId, TypeConfig, Vote, entry_codec};
use crate::store::{RecordMeta, StoredRecord};

#[derive(Serialize, Deserialize)]
struct AppendHeader {
    vote: Vote,
    prev_log_id: Option<LogId>,
    leader_commit: Option<LogId>,
}

pub fn to_json<T: Serialize>(value: &T) -> pb::Json {
    pb::Json { json: Bytes::from(serde_json::to_vec(value).expect("raft messages serialize")) }
}

pub fn from_json<T: DeserializeOwned>(msg: &pb::Json) -> io::Result<T> {
    serde_json::from_slice(&msg.json).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub fn append_to_pb(req: AppendEntriesRequest<TypeConfig>) -> io::Result<pb::AppendEntriesRequest> {
    let header = AppendHeader { vote: req.vote, prev_log_id: req.prev_log_id, leader_commit: req.leader_commit };
    let entries = req
        .entries
        .iter()
        .map(|e| {
            let (meta, payload) = entry_codec::encode(e)?;
            Ok(pb::RaftEntry {
                term: meta.term,
                leader: meta.leader,
                index: meta.index,
                kind: meta.kind as u32,
                payload,
            })
        })
        .collect::<io::Result<Vec<_>>>()?;
    Ok(pb::AppendEntriesRequest { header: to_json(&header).json, entries })
}

pub fn append_from_pb(req: pb::AppendEntriesRequest) -> io::Result<AppendEntriesRequest<TypeConfig>> {
    let header: AppendHeader =
        serde_json::from_slice(&req.header).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let entries = req
        .entries
        .into_iter()
        .map(|e| {
            let kind = u8::try_from(e.kind).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "entry kind"))?;
            let meta = RecordMeta { term: e.term, index: e.index, leader: e.leader, kind };
            entry_codec::decode(StoredRecord { meta, payload: e.payload })
        })
        .collect::<io::Result<Vec<Entry>>>()?;
    Ok(AppendEntriesRequest {
        vote: header.vote,
        prev_log_id: header.prev_log_id,
        entries,
        leader_commit: header.leader_commit,
    })
}
