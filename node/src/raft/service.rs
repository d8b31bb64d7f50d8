//! The server side of replication: `rockraft.v1.RaftService` handing each request to the
//! replica of the group it names (the `rockraft-group` header). Every group's calls are served
//! concurrently: one group's slow snapshot or append never holds up another's heartbeats.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use openraft::async_runtime::watch::WatchReceiver;
use openraft::raft::{TransferLeaderRequest, VoteRequest};
use rockraft_proto::rockraft as pb;
use rockraft_proto::rockraft::raft_service_server::RaftService;
use tonic::{Request, Response, Status, Streaming};

use std::sync::Arc;

use openraft::raft::AppendEntriesResponse;

use crate::auth::member::MemberCaller;
use crate::raft::contact::LeaderContact;
use crate::raft::registry::GroupRegistry;
use crate::raft::wire::{FromPb, ToPb, append_from_pb};
use crate::raft::{GroupId, NodeId, Raft, SnapshotMeta, TypeConfig, Vote};
use crate::store::LogReader;

/// At most this many bytes of payload, and records, per `ReadLog` answer (a run of blank entries
/// carries no payload): a repair asks again for the rest.
const READ_LOG_BYTES: u64 = 4 << 20;
const READ_LOG_RECORDS: usize = 4096;

/// The replicas of groups this node runs, by group.
#[derive(Clone, Default)]
pub struct RaftGroups(GroupRegistry<Replica>);

/// One group's replica on this node, as replication calls reach it.
#[derive(Clone)]
struct Replica {
    raft: Raft,
    /// Learns of every append a leader sends here.
    contact: Arc<LeaderContact>,
    /// The group's log, read for members that repair theirs.
    log: LogReader,
}

impl RaftGroups {
    /// Serves `group`'s calls with `raft` and `log`; `contact` learns of every append its
    /// leader sends.
    pub fn insert(&self, group: GroupId, raft: Raft, contact: Arc<LeaderContact>, log: LogReader) {
        self.0.insert(group, Replica { raft, contact, log });
    }

    /// The Raft handle of `group`'s replica on this node.
    pub(crate) fn raft(&self, group: GroupId) -> Option<Raft> {
        self.0.get(group).map(|r| r.raft)
    }

    /// The replica a request's header names. No lock is held once it returns.
    fn replica<T>(&self, req: &Request<T>) -> Result<Replica, Status> {
        self.0.addressed(req)
    }
}

pub struct RaftServer {
    groups: RaftGroups,
}

impl RaftServer {
    pub fn new(groups: RaftGroups) -> RaftServer {
        RaftServer { groups }
    }
}

fn bad(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

/// A Raft message must come from the member it says it comes from (the candidate of a vote, the
/// leader of an append, a snapshot or a hand-over), as the certificate of its connection names
/// it (`caller`, put there by the raft port's gate). Without mutual TLS the raft port knows no
/// member ids: nothing to compare.
fn check_sender(caller: Option<MemberCaller>, sender: NodeId) -> Result<(), Status> {
    match caller {
        Some(MemberCaller(Some(id))) if id != sender => {
            Err(Status::permission_denied(format!("member {id} sent a Raft message as member {sender}")))
        }
        _ => Ok(()),
    }
}

#[tonic::async_trait]
impl RaftService for RaftServer {
    async fn vote(&self, req: Request<pb::VoteRequest>) -> Result<Response<pb::VoteResponse>, Status> {
        let replica = self.groups.replica(&req)?;
        let caller = req.extensions().get::<MemberCaller>().copied();
        let rpc = VoteRequest::from_pb(req.into_inner()).map_err(bad)?;
        check_sender(caller, rpc.vote.leader_id().node_id)?;
        let reply = replica.raft.vote(rpc).await.map_err(internal)?;
        Ok(Response::new(reply.to_pb()))
    }

    async fn pre_vote(&self, req: Request<pb::VoteRequest>) -> Result<Response<pb::VoteResponse>, Status> {
        let replica = self.groups.replica(&req)?;
        let caller = req.extensions().get::<MemberCaller>().copied();
        let rpc = VoteRequest::from_pb(req.into_inner()).map_err(bad)?;
        check_sender(caller, rpc.vote.leader_id().node_id)?;
        let reply = replica.raft.pre_vote(rpc).await.map_err(internal)?;
        Ok(Response::new(reply.to_pb()))
    }

    async fn append_entries(
        &self,
        req: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        let replica = self.groups.replica(&req)?;
        let caller = req.extensions().get::<MemberCaller>().copied();
        let rpc = append_from_pb(req.into_inner()).map_err(bad)?;
        check_sender(caller, rpc.vote.leader_id().node_id)?;
        let reply = replica.raft.append_entries(rpc).await.map_err(internal)?;
        if !matches!(reply, AppendEntriesResponse::HigherVote(_)) {
            replica.contact.heard();
        }
        Ok(Response::new(reply.to_pb()))
    }

    type StreamAppendStream = Pin<Box<dyn Stream<Item = Result<pb::StreamAppendResponse, Status>> + Send>>;

    async fn stream_append(
        &self,
        req: Request<Streaming<pb::AppendEntriesRequest>>,
    ) -> Result<Response<Self::StreamAppendStream>, Status> {
        let replica = self.groups.replica(&req)?;
        let caller = req.extensions().get::<MemberCaller>().copied();
        // A request that fails to decode, or comes from another member than the one named by the
        // connection's certificate, ends the stream: the leader sees it closed and retries.
        let input = req.into_inner().take_while(|r| std::future::ready(r.is_ok())).filter_map(move |r| async move {
            match r.ok().map(append_from_pb) {
                Some(Ok(rpc)) if check_sender(caller, rpc.vote.leader_id().node_id).is_err() => {
                    tracing::warn!(?caller, sender = rpc.vote.leader_id().node_id, "an append sent as another member");
                    None
                }
                Some(Ok(rpc)) => Some(rpc),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "undecodable append request");
                    None
                }
                None => None,
            }
        });
        let contact = Arc::clone(&replica.contact);
        let output = replica.raft.stream_append(input).map(move |r| match r {
            Ok(result) => {
                if result.is_ok() {
                    contact.heard();
                }
                Ok(result.to_pb())
            }
            Err(fatal) => Err(internal(fatal)),
        });
        Ok(Response::new(Box::pin(output)))
    }

    async fn install_snapshot(
        &self,
        req: Request<Streaming<pb::SnapshotChunk>>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        let replica = self.groups.replica(&req)?;
        let caller = req.extensions().get::<MemberCaller>().copied();
        let mut chunks = req.into_inner();
        let first = chunks.next().await.ok_or_else(|| bad("empty snapshot stream"))??;
        let Some(pb::snapshot_chunk::Part::Header(header)) = first.part else {
            return Err(bad("a snapshot stream starts with its header"));
        };
        let (vote, meta) = <(Vote, SnapshotMeta)>::from_pb(header).map_err(bad)?;
        check_sender(caller, vote.leader_id().node_id)?;
        let mut data = Vec::new();
        while let Some(chunk) = chunks.next().await {
            match chunk?.part {
                Some(pb::snapshot_chunk::Part::Data(d)) => data.extend_from_slice(&d),
                _ => return Err(bad("a snapshot header may only come first")),
            }
        }
        let snapshot = openraft::alias::SnapshotOf::<TypeConfig, Vec<u8>> { meta, snapshot: data };
        let reply = replica.raft.install_full_snapshot(vote, snapshot).await.map_err(internal)?;
        Ok(Response::new(reply.to_pb()))
    }

    async fn transfer_leader(
        &self,
        req: Request<pb::RaftTransferLeaderRequest>,
    ) -> Result<Response<pb::RaftTransferLeaderResponse>, Status> {
        let replica = self.groups.replica(&req)?;
        let caller = req.extensions().get::<MemberCaller>().copied();
        let rpc = TransferLeaderRequest::<TypeConfig>::from_pb(req.into_inner()).map_err(bad)?;
        check_sender(caller, rpc.from_leader().leader_id().node_id)?;
        let reply = replica.raft.handle_transfer_leader(rpc).await.map_err(internal)?;
        Ok(Response::new(reply.to_pb()))
    }

    async fn read_log(&self, req: Request<pb::ReadLogRequest>) -> Result<Response<pb::ReadLogReply>, Status> {
        let replica = self.groups.replica(&req)?;
        let pb::ReadLogRequest { from, end } = req.into_inner();
        // Committed before the records are read: every record answered at or below it is final.
        let committed = replica.raft.metrics().borrow_watched().local_committed.map(|c| c.index);
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        for index in from..end.min(replica.log.bounds().next_index()) {
            if bytes >= READ_LOG_BYTES || entries.len() >= READ_LOG_RECORDS {
                break;
            }
            // This member's own damage ends the answer; the asker tries another member for the rest.
            let Ok(Some(record)) = replica.log.read(index) else { break };
            bytes += record.payload.len() as u64;
            entries.push(pb::RaftEntry {
                term: record.meta.term,
                leader: record.meta.leader,
                index,
                kind: record.meta.kind as u32,
                payload: record.payload,
            });
        }
        Ok(Response::new(pb::ReadLogReply { entries, committed }))
    }

    async fn read_snapshot(&self, req: Request<pb::Empty>) -> Result<Response<pb::ReadSnapshotReply>, Status> {
        let replica = self.groups.replica(&req)?;
        let reply = match replica.raft.get_snapshot().await.map_err(internal)? {
            Some(snapshot) => {
                pb::ReadSnapshotReply { meta: Some(snapshot.meta.to_pb()), data: snapshot.snapshot.into() }
            }
            None => pb::ReadSnapshotReply { meta: None, data: Default::default() },
        };
        Ok(Response::new(reply))
    }
}
