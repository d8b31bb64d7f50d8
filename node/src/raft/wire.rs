//! openraft messages ↔ the `rockraft.v1` protobuf types (`raft.proto`). Entries travel as raw
//! records (the same bytes the CommitLog stores); every other message has a protobuf form.
//!
//! Both sides of each conversion are foreign types, so they go through this module's own traits:
//! [`ToPb`] encodes, [`FromPb`] decodes. A message that lacks a field it cannot do without, or
//! carries a value out of range, decodes to an `InvalidData` error, never a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use openraft::impls::leader_id_adv::LeaderId;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendError, StreamAppendResult,
    TransferLeaderError, TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use rockraft_proto::rockraft as pb;

use crate::raft::{
    Entry, LogId, Membership, NodeId, NodeInfo, SnapshotMeta, StoredMembership, TypeConfig, Vote, entry_codec,
};
use crate::store::{RecordMeta, StoredRecord};

/// Encodes an openraft value as its protobuf message.
pub trait ToPb {
    type Pb;
    fn to_pb(&self) -> Self::Pb;
}

/// Decodes an openraft value from its protobuf message.
pub trait FromPb: Sized {
    type Pb;
    fn from_pb(pb: Self::Pb) -> io::Result<Self>;
}

pub fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// A field the message cannot do without.
fn required<T: FromPb>(field: Option<T::Pb>, what: &str) -> io::Result<T> {
    T::from_pb(field.ok_or_else(|| invalid(format!("{what} is missing")))?)
}

fn optional<T: FromPb>(field: Option<T::Pb>) -> io::Result<Option<T>> {
    field.map(T::from_pb).transpose()
}

impl ToPb for LeaderId<u64, NodeId> {
    type Pb = pb::LeaderId;
    fn to_pb(&self) -> pb::LeaderId {
        pb::LeaderId { term: self.term, node_id: self.node_id }
    }
}

impl FromPb for LeaderId<u64, NodeId> {
    type Pb = pb::LeaderId;
    fn from_pb(pb: pb::LeaderId) -> io::Result<Self> {
        Ok(LeaderId { term: pb.term, node_id: pb.node_id })
    }
}

impl ToPb for Vote {
    type Pb = pb::Vote;
    fn to_pb(&self) -> pb::Vote {
        pb::Vote { leader_id: Some(self.leader_id.to_pb()), committed: self.committed }
    }
}

impl FromPb for Vote {
    type Pb = pb::Vote;
    fn from_pb(pb: pb::Vote) -> io::Result<Self> {
        Ok(Vote { leader_id: required(pb.leader_id, "vote's leader id")?, committed: pb.committed })
    }
}

impl ToPb for LogId {
    type Pb = pb::LogId;
    fn to_pb(&self) -> pb::LogId {
        pb::LogId { leader_id: Some(self.leader_id.to_pb()), index: self.index }
    }
}

impl FromPb for LogId {
    type Pb = pb::LogId;
    fn from_pb(pb: pb::LogId) -> io::Result<Self> {
        Ok(LogId::new(required(pb.leader_id, "log id's leader id")?, pb.index))
    }
}

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

impl ToPb for Membership {
    type Pb = pb::Membership;
    fn to_pb(&self) -> pb::Membership {
        pb::Membership {
            configs: self.get_joint_config().iter().map(|c| pb::Voters { ids: c.iter().copied().collect() }).collect(),
            nodes: self
                .nodes()
                .map(|(id, n)| pb::MemberNode {
                    id: *id,
                    raft_addr: n.raft_addr.clone(),
                    client_addr: n.client_addr.clone(),
                    admin_addr: n.admin_addr.clone(),
                })
                .collect(),
        }
    }
}

impl FromPb for Membership {
    type Pb = pb::Membership;
    /// Refuses a membership whose voters are not all among its nodes, or that names a node twice.
    fn from_pb(pb: pb::Membership) -> io::Result<Self> {
        let configs: Vec<BTreeSet<NodeId>> = pb.configs.into_iter().map(|c| c.ids.into_iter().collect()).collect();
        let mut nodes = BTreeMap::new();
        for n in pb.nodes {
            let node = NodeInfo { raft_addr: n.raft_addr, client_addr: n.client_addr, admin_addr: n.admin_addr };
            if nodes.insert(n.id, node).is_some() {
                return Err(invalid(format!("membership names node {} twice", n.id)));
            }
        }
        Membership::new(configs, nodes).map_err(invalid)
    }
}

impl ToPb for StoredMembership {
    type Pb = pb::StoredMembership;
    fn to_pb(&self) -> pb::StoredMembership {
        pb::StoredMembership {
            log_id: self.log_id().as_ref().map(ToPb::to_pb),
            membership: Some(self.membership().to_pb()),
        }
    }
}

impl FromPb for StoredMembership {
    type Pb = pb::StoredMembership;
    fn from_pb(pb: pb::StoredMembership) -> io::Result<Self> {
        Ok(StoredMembership::new(optional(pb.log_id)?, required(pb.membership, "stored membership's membership")?))
    }
}

impl ToPb for SnapshotMeta {
    type Pb = pb::SnapshotMeta;
    fn to_pb(&self) -> pb::SnapshotMeta {
        pb::SnapshotMeta {
            last_log_id: self.last_log_id.as_ref().map(ToPb::to_pb),
            last_membership: Some(self.last_membership.to_pb()),
        }
    }
}

impl FromPb for SnapshotMeta {
    type Pb = pb::SnapshotMeta;
    fn from_pb(pb: pb::SnapshotMeta) -> io::Result<Self> {
        Ok(SnapshotMeta {
            last_log_id: optional(pb.last_log_id)?,
            last_membership: required(pb.last_membership, "snapshot's membership")?,
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
