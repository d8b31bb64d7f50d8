//! The server side of replication: `rockraft.v1.RaftService` handing requests to openraft.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use openraft::raft::{TransferLeaderRequest, VoteRequest};
use rockraft_proto::rockraft as pb;
use rockraft_proto::rockraft::raft_service_server::RaftService;
use tonic::{Request, Response, Status, Streaming};

use std::sync::Arc;

use openraft::raft::AppendEntriesResponse;

use crate::raft::contact::LeaderContact;
use crate::raft::wire::{FromPb, ToPb, append_from_pb};
use crate::raft::{Raft, SnapshotMeta, TypeConfig, Vote};

pub struct RaftServer {
    raft: Raft,
    contact: Arc<LeaderContact>,
}

impl RaftServer {
    /// `contact` learns of every append a leader sends here.
    pub fn new(raft: Raft, contact: Arc<LeaderContact>) -> RaftServer {
        RaftServer { raft, contact }
    }
}

fn bad(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

fn internal(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

#[tonic::async_trait]
impl RaftService for RaftServer {
    async fn vote(&self, req: Request<pb::VoteRequest>) -> Result<Response<pb::VoteResponse>, Status> {
        let rpc = VoteRequest::from_pb(req.into_inner()).map_err(bad)?;
        let reply = self.raft.vote(rpc).await.map_err(internal)?;
        Ok(Response::new(reply.to_pb()))
    }

    async fn pre_vote(&self, req: Request<pb::VoteRequest>) -> Result<Response<pb::VoteResponse>, Status> {
        let rpc = VoteRequest::from_pb(req.into_inner()).map_err(bad)?;
        let reply = self.raft.pre_vote(rpc).await.map_err(internal)?;
        Ok(Response::new(reply.to_pb()))
    }

    async fn append_entries(
        &self,
        req: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        let rpc = append_from_pb(req.into_inner()).map_err(bad)?;
        let reply = self.raft.append_entries(rpc).await.map_err(internal)?;
        if !matches!(reply, AppendEntriesResponse::HigherVote(_)) {
            self.contact.heard();
        }
        Ok(Response::new(reply.to_pb()))
    }

    type StreamAppendStream = Pin<Box<dyn Stream<Item = Result<pb::StreamAppendResponse, Status>> + Send>>;

    async fn stream_append(
        &self,
        req: Request<Streaming<pb::AppendEntriesRequest>>,
    ) -> Result<Response<Self::StreamAppendStream>, Status> {
        // A request that fails to decode ends the stream: the leader sees it closed and retries.
        let input = req.into_inner().take_while(|r| std::future::ready(r.is_ok())).filter_map(|r| async move {
            match r.ok().map(append_from_pb) {
                Some(Ok(rpc)) => Some(rpc),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "undecodable append request");
                    None
                }
                None => None,
            }
        });
        let contact = Arc::clone(&self.contact);
        let output = self.raft.stream_append(input).map(move |r| match r {
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
        let mut chunks = req.into_inner();
        let first = chunks.next().await.ok_or_else(|| bad("empty snapshot stream"))??;
        let Some(pb::snapshot_chunk::Part::Header(header)) = first.part else {
            return Err(bad("a snapshot stream starts with its header"));
        };
        let (vote, meta) = <(Vote, SnapshotMeta)>::from_pb(header).map_err(bad)?;
        let mut data = Vec::new();
        while let Some(chunk) = chunks.next().await {
            match chunk?.part {
                Some(pb::snapshot_chunk::Part::Data(d)) => data.extend_from_slice(&d),
                _ => return Err(bad("a snapshot header may only come first")),
            }
        }
        let snapshot = openraft::alias::SnapshotOf::<TypeConfig, Vec<u8>> { meta, snapshot: data };
        let reply = self.raft.install_full_snapshot(vote, snapshot).await.map_err(internal)?;
        Ok(Response::new(reply.to_pb()))
    }

    async fn transfer_leader(
        &self,
        req: Request<pb::RaftTransferLeaderRequest>,
    ) -> Result<Response<pb::RaftTransferLeaderResponse>, Status> {
        let rpc = TransferLeaderRequest::<TypeConfig>::from_pb(req.into_inner()).map_err(bad)?;
        let reply = self.raft.handle_transfer_leader(rpc).await.map_err(internal)?;
        Ok(Response::new(reply.to_pb()))
    }
}
