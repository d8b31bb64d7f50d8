//! The server side of `rockraft.v1.PeerService`, on the raft port only: the leader answers what
//! a member asks on behalf of a client. A node that is no longer the leader says `NoLeader`
//! instead of passing the call on, so a call takes at most one hop; the member retries.

use rockraft_proto::rockraft::peer_service_server::PeerService;
use rockraft_proto::rockraft::{
    ClockRequest, DiskSpaceRequest, FiguresRequest, LeaderRequest, LiteDeadLetterRequest, LiveMembersRequest,
    ReadIndexRequest, RemotingConsumersRequest, WriteRequest,
};
use rockraft_proto::rockraft::{log, peer as pb};
use tonic::{Request, Response, Status};

use crate::broker::pop::Receipt;
use crate::cluster::pop::PopOrder;
use crate::cluster::wire::{KnownLeader, LiveMembers, ResultMessage};
use crate::cluster::{AskProducer, Cluster, ClusterError, Forwarded};
use crate::raft::GroupRegistry;

/// Serves each call with the cluster handle of the group it names (the `rockraft-group` header).
pub struct PeerServer {
    groups: GroupRegistry<Cluster>,
}

impl PeerServer {
    pub fn new(groups: GroupRegistry<Cluster>) -> PeerServer {
        PeerServer { groups }
    }
}

/// A request this node cannot read: the caller's bug, or a release that speaks otherwise.
fn request<P, T: TryFrom<P, Error = crate::cluster::wire::DecodeError>>(req: Request<P>) -> Result<T, Status> {
    T::try_from(req.into_inner()).map_err(|e| Status::invalid_argument(e.to_string()))
}

fn reply<M: ResultMessage>(result: Result<M::Ok, M::Err>) -> Result<Response<M>, Status> {
    Ok(Response::new(M::from_result(result)))
}

#[tonic::async_trait]
impl PeerService for PeerServer {
    async fn write(&self, req: Request<WriteRequest>) -> Result<Response<pb::WriteResult>, Status> {
        let cluster = self.groups.addressed(&req)?;
        let command = req.into_inner().command;
        if let Err(e) = cluster.check_size(command.len()) {
            return reply(Err(e));
        }
        let forwarded = Forwarded::read(command)
            .map_err(|e| Status::invalid_argument(format!("a forwarded write is not a command: {e}")))?;
        forwarded.check(cluster.broker()).map_err(|e| Status::permission_denied(e.to_string()))?;
        reply(cluster.propose_forwarded(forwarded).await)
    }

    async fn pop(&self, req: Request<pb::PopOrder>) -> Result<Response<pb::PopResult>, Status> {
        let cluster = self.groups.addressed(&req)?;
        let order: PopOrder = request(req)?;
        let popped = cluster.as_leader(async |c| c.pop_here(&order).await).await;
        let popped = popped.map(|mut p| {
            if order.with_messages {
                p.carry_messages(cluster.broker(), &order.topic);
            }
            p
        });
        reply(popped)
    }

    async fn dead_letter(&self, req: Request<log::Receipt>) -> Result<Response<pb::DeadLetterResult>, Status> {
        let cluster = self.groups.addressed(&req)?;
        let receipt = Receipt::from(req.into_inner());
        reply(cluster.as_leader(async |c| c.dead_letter_here(&receipt).await).await)
    }

    async fn lite_dead_letter(
        &self,
        req: Request<LiteDeadLetterRequest>,
    ) -> Result<Response<pb::DeadLetterResult>, Status> {
        let cluster = self.groups.addressed(&req)?;
        let r = req.into_inner();
        let receipt = Receipt::from(r.receipt.ok_or_else(|| Status::invalid_argument("no receipt"))?);
        reply(cluster.as_leader(async |c| c.lite_dead_letter_here(&r.lite_topic, &receipt).await).await)
    }

    async fn read_index(&self, req: Request<ReadIndexRequest>) -> Result<Response<pb::ReadIndexResult>, Status> {
        reply(self.groups.addressed(&req)?.read_index_here().await)
    }

    async fn ask_producer(&self, req: Request<pb::AskProducer>) -> Result<Response<pb::AskProducerReply>, Status> {
        let cluster = self.groups.addressed(&req)?;
        let ask: AskProducer = request(req)?;
        Ok(Response::new(pb::AskProducerReply { asked: cluster.ask_producer_here(&ask) }))
    }

    async fn remoting_consumers(
        &self,
        req: Request<RemotingConsumersRequest>,
    ) -> Result<Response<pb::RemotingConsumersReply>, Status> {
        let cluster = self.groups.addressed(&req)?;
        let group = req.into_inner().group;
        Ok(Response::new(pb::RemotingConsumersReply { client_ids: cluster.remoting_consumers_here(&group) }))
    }

    async fn clock(&self, _: Request<ClockRequest>) -> Result<Response<pb::ClockReply>, Status> {
        Ok(Response::new(pb::ClockReply { now_ms: crate::cluster::now_ms() }))
    }

    async fn disk_space(&self, req: Request<DiskSpaceRequest>) -> Result<Response<pb::DiskSpaceResult>, Status> {
        reply(Ok(self.groups.addressed(&req)?.disk_here()))
    }

    async fn leader(&self, req: Request<LeaderRequest>) -> Result<Response<pb::LeaderResult>, Status> {
        // This node's own view as a member, never a leader it was told of.
        let leader = self.groups.addressed(&req)?.group().leader().map(|(id, info)| KnownLeader(id, info));
        reply(leader.ok_or(ClusterError::NoLeader))
    }

    async fn figures(&self, req: Request<FiguresRequest>) -> Result<Response<pb::FiguresResult>, Status> {
        let cluster = self.groups.addressed(&req)?;
        // Only a member's figures: a node holding no replica has none to give.
        reply(if cluster.holds_replica() { Ok(cluster.broker().figures()) } else { Err(ClusterError::NoLeader) })
    }

    async fn live_members(&self, req: Request<LiveMembersRequest>) -> Result<Response<pb::LiveMembersResult>, Status> {
        let live = self
            .groups
            .addressed(&req)?
            .heard_from()
            .map(|ids| LiveMembers(ids.into_iter().collect()))
            .ok_or(ClusterError::NoLeader);
        reply(live)
    }
}
