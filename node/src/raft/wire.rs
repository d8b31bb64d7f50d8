//! openraft's RPC messages ↔ the `rockraft.v1` protobuf types (`raft.proto`). Entries travel as
//! raw records (the same bytes the CommitLog stores, `entry_codec`); the values the messages carry
//! have their protobuf forms in `convert`.

use std::io;

use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendError, StreamAppendResult,
    TransferLeaderError, TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use rockraft_proto::rockraft as pb;

pub use crate::raft::convert::{FromPb, ToPb};
use crate::raft::convert::{invalid, optional, required};
use crate::raft::{Entry, LogId, SnapshotMeta, TypeConfig, Vote, entry_codec};
use crate::store::{RecordMeta, StoredRecord};

impl ToPb for VoteRequest<TypeConfig> {
    type Pb = pb::VoteRequest;
    fn to_pb(&self) -> pb::VoteRequest {
        pb::VoteRequest {
            vote: Some(self.vote.to_pb()),
            last_log_id: self.last_log_id.as_ref().map(ToPb::to_pb),
            leadership_transfer: self.leadership_transfer,
        }
    }
}

impl FromPb for VoteRequest<TypeConfig> {
    type Pb = pb::VoteRequest;
    fn from_pb(pb: pb::VoteRequest) -> io::Result<Self> {
        let mut req = VoteRequest::new(required(pb.vote, "vote request's vote")?, optional(pb.last_log_id)?);
        req.leadership_transfer = pb.leadership_transfer;
        Ok(req)
    }
}

impl ToPb for VoteResponse<TypeConfig> {
    type Pb = pb::VoteResponse;
    fn to_pb(&self) -> pb::VoteResponse {
        pb::VoteResponse {
            vote: Some(self.vote.to_pb()),
            vote_granted: self.vote_granted,
            last_log_id: self.last_log_id.as_ref().map(ToPb::to_pb),
        }
    }
}

impl FromPb for VoteResponse<TypeConfig> {
    type Pb = pb::VoteResponse;
    fn from_pb(pb: pb::VoteResponse) -> io::Result<Self> {
        let vote: Vote = required(pb.vote, "vote response's vote")?;
        Ok(VoteResponse::new(vote, optional(pb.last_log_id)?, pb.vote_granted))
    }
}

impl ToPb for AppendEntriesResponse<TypeConfig> {
    type Pb = pb::AppendEntriesResponse;
    fn to_pb(&self) -> pb::AppendEntriesResponse {
        use pb::append_entries_response::Result as R;
        let result = match self {
            AppendEntriesResponse::Success => R::Success(pb::Empty {}),
            AppendEntriesResponse::PartialSuccess(matching) => {
                R::PartialSuccess(pb::Matching { matching: matching.as_ref().map(ToPb::to_pb) })
            }
            AppendEntriesResponse::Conflict => R::Conflict(pb::Empty {}),
            AppendEntriesResponse::HigherVote(v) => R::HigherVote(v.to_pb()),
        };
        pb::AppendEntriesResponse { result: Some(result) }
    }
}

impl FromPb for AppendEntriesResponse<TypeConfig> {
    type Pb = pb::AppendEntriesResponse;
    fn from_pb(pb: pb::AppendEntriesResponse) -> io::Result<Self> {
        use pb::append_entries_response::Result as R;
        Ok(match pb.result.ok_or_else(|| invalid("append response without a result"))? {
            R::Success(_) => AppendEntriesResponse::Success,
            R::PartialSuccess(m) => AppendEntriesResponse::PartialSuccess(optional(m.matching)?),
            R::Conflict(_) => AppendEntriesResponse::Conflict,
            R::HigherVote(v) => AppendEntriesResponse::HigherVote(Vote::from_pb(v)?),
        })
    }
}

impl ToPb for StreamAppendResult<TypeConfig> {
    type Pb = pb::StreamAppendResponse;
    fn to_pb(&self) -> pb::StreamAppendResponse {
        use pb::stream_append_response::Result as R;
        let result = match self {
            Ok(matching) => R::Success(pb::Matching { matching: matching.as_ref().map(ToPb::to_pb) }),
            Err(StreamAppendError::Conflict(id)) => R::Conflict(id.to_pb()),
            Err(StreamAppendError::HigherVote(v)) => R::HigherVote(v.to_pb()),
        };
        pb::StreamAppendResponse { result: Some(result) }
    }
}

impl FromPb for StreamAppendResult<TypeConfig> {
    type Pb = pb::StreamAppendResponse;
    fn from_pb(pb: pb::StreamAppendResponse) -> io::Result<Self> {
        use pb::stream_append_response::Result as R;
        Ok(match pb.result.ok_or_else(|| invalid("stream append response without a result"))? {
            R::Success(m) => Ok(optional(m.matching)?),
            R::Conflict(id) => Err(StreamAppendError::Conflict(LogId::from_pb(id)?)),
            R::HigherVote(v) => Err(StreamAppendError::HigherVote(Vote::from_pb(v)?)),
        })
    }
}

impl ToPb for (Vote, SnapshotMeta) {
    type Pb = pb::SnapshotHeader;
    fn to_pb(&self) -> pb::SnapshotHeader {
        pb::SnapshotHeader { vote: Some(self.0.to_pb()), meta: Some(self.1.to_pb()) }
    }
}

impl FromPb for (Vote, SnapshotMeta) {
    type Pb = pb::SnapshotHeader;
    fn from_pb(pb: pb::SnapshotHeader) -> io::Result<Self> {
        Ok((required(pb.vote, "snapshot's vote")?, required(pb.meta, "snapshot's meta")?))
    }
}

impl ToPb for SnapshotResponse<TypeConfig> {
    type Pb = pb::SnapshotResponse;
    fn to_pb(&self) -> pb::SnapshotResponse {
        pb::SnapshotResponse { vote: Some(self.vote.to_pb()) }
    }
}

impl FromPb for SnapshotResponse<TypeConfig> {
    type Pb = pb::SnapshotResponse;
    fn from_pb(pb: pb::SnapshotResponse) -> io::Result<Self> {
        Ok(SnapshotResponse::new(required(pb.vote, "snapshot response's vote")?))
    }
}

impl ToPb for TransferLeaderRequest<TypeConfig> {
    type Pb = pb::RaftTransferLeaderRequest;
    fn to_pb(&self) -> pb::RaftTransferLeaderRequest {
        pb::RaftTransferLeaderRequest {
            from_leader: Some(self.from_leader().to_pb()),
            to_node_id: *self.to_node_id(),
            last_log_id: self.last_log_id().map(ToPb::to_pb),
        }
    }
}

impl FromPb for TransferLeaderRequest<TypeConfig> {
    type Pb = pb::RaftTransferLeaderRequest;
    fn from_pb(pb: pb::RaftTransferLeaderRequest) -> io::Result<Self> {
        let from: Vote = required(pb.from_leader, "transfer's leader")?;
        Ok(TransferLeaderRequest::new(from, pb.to_node_id, optional(pb.last_log_id)?))
    }
}

impl ToPb for TransferLeaderResponse<TypeConfig> {
    type Pb = pb::RaftTransferLeaderResponse;
    fn to_pb(&self) -> pb::RaftTransferLeaderResponse {
        use pb::raft_transfer_leader_response::Result as R;
        let result = match self {
            Ok(()) => R::Ok(pb::Empty {}),
            Err(TransferLeaderError::VoteChanged { expected, actual }) => {
                R::VoteChanged(pb::VoteChanged { expected: Some(expected.to_pb()), actual: Some(actual.to_pb()) })
            }
            Err(TransferLeaderError::LogNotFlushed { expected, actual }) => R::LogNotFlushed(pb::LogNotFlushed {
                expected: expected.as_ref().map(ToPb::to_pb),
                actual: actual.as_ref().map(ToPb::to_pb),
            }),
        };
        pb::RaftTransferLeaderResponse { result: Some(result) }
    }
}

impl FromPb for TransferLeaderResponse<TypeConfig> {
    type Pb = pb::RaftTransferLeaderResponse;
    fn from_pb(pb: pb::RaftTransferLeaderResponse) -> io::Result<Self> {
        use pb::raft_transfer_leader_response::Result as R;
        Ok(match pb.result.ok_or_else(|| invalid("transfer response without a result"))? {
            R::Ok(_) => Ok(()),
            R::VoteChanged(v) => Err(TransferLeaderError::VoteChanged {
                expected: required(v.expected, "expected vote")?,
                actual: required(v.actual, "actual vote")?,
            }),
            R::LogNotFlushed(l) => {
                Err(TransferLeaderError::LogNotFlushed { expected: optional(l.expected)?, actual: optional(l.actual)? })
            }
        })
    }
}

pub fn append_to_pb(req: AppendEntriesRequest<TypeConfig>) -> io::Result<pb::AppendEntriesRequest> {
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
    Ok(pb::AppendEntriesRequest {
        entries,
        vote: Some(req.vote.to_pb()),
        prev_log_id: req.prev_log_id.as_ref().map(ToPb::to_pb),
        leader_commit: req.leader_commit.as_ref().map(ToPb::to_pb),
    })
}

pub fn append_from_pb(req: pb::AppendEntriesRequest) -> io::Result<AppendEntriesRequest<TypeConfig>> {
    let entries = req
        .entries
        .into_iter()
        .map(|e| {
            let kind = u8::try_from(e.kind).map_err(|_| invalid(format!("entry kind {}", e.kind)))?;
            let meta = RecordMeta { term: e.term, index: e.index, leader: e.leader, kind };
            entry_codec::decode(StoredRecord { meta, payload: e.payload })
        })
        .collect::<io::Result<Vec<Entry>>>()?;
    Ok(AppendEntriesRequest {
        vote: required(req.vote, "append request's vote")?,
        prev_log_id: optional(req.prev_log_id)?,
        entries,
        leader_commit: optional(req.leader_commit)?,
    })
}
