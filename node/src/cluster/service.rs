//! The server side of `rockraft.v1.PeerService`, on the raft port only: the leader answers what
//! a member asks on behalf of a client. A node that is no longer the leader says `NoLeader`
//! instead of passing the call on, so a call takes at most one hop; the member retries.

use rockraft_proto::rockraft::peer_service_server::PeerService;
use rockraft_proto::rockraft::{
    ClockRequest, DiskSpaceRequest, Json, LiveMembersRequest, ReadIndexRequest, WriteRequest,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::{Request, Response, Status};

use crate::broker::pop::Receipt;
use crate::cluster::pop::PopOrder;
use crate::cluster::{AskProducer, Cluster, ClusterError};

pub struct PeerServer {
    cluster: Cluster,
}

impl PeerServer {
    pub fn new(cluster: Cluster) -> PeerServer {
        PeerServer { cluster }
    }
}

fn request<T: DeserializeOwned>(req: &Json) -> Result<T, Status> {
    serde_json::from_slice(&req.json).map_err(|e| Status::invalid_argument(e.to_string()))
}

fn reply<T: Serialize>(result: &T) -> Result<Response<Json>, Status> {
    let json = serde_json::to_vec(result).map_err(|e| Status::internal(e.to_string()))?;
    Ok(Response::new(Json { json: json.into() }))
}

#[tonic::async_trait]
impl PeerService for PeerServer {
    async fn write(&self, req: Request<WriteRequest>) -> Result<Response<Json>, Status> {
        reply(&self.cluster.propose_forwarded(req.into_inner().command).await)
    }

    async fn pop(&self, req: Request<Json>) -> Result<Response<Json>, Status> {
        let order: PopOrder = request(req.get_ref())?;
        let result = self.cluster.as_leader(async |c| c.pop_here(&order).await).await;
        reply(&result)
    }

    async fn dead_letter(&self, req: Request<Json>) -> Result<Response<Json>, Status> {
        let receipt: Receipt = request(req.get_ref())?;
        let result = self.cluster.as_leader(async |c| c.dead_letter_here(&receipt).await).await;
        reply(&result)
    }

    async fn read_index(&self, _: Request<ReadIndexRequest>) -> Result<Response<Json>, Status> {
        reply(&self.cluster.read_index_here().await)
    }

    async fn ask_producer(&self, req: Request<Json>) -> Result<Response<Json>, Status> {
        let ask: AskProducer = request(req.get_ref())?;
        reply(&self.cluster.ask_producer_here(&ask))
    }

    async fn clock(&self, _: Request<ClockRequest>) -> Result<Response<Json>, Status> {
        reply(&Ok::<i64, ClusterError>(crate::cluster::now_ms()))
    }

    async fn disk_space(&self, _: Request<DiskSpaceRequest>) -> Result<Response<Json>, Status> {
        reply(&Ok::<_, ClusterError>(self.cluster.disk_here()))
    }

    async fn live_members(&self, _: Request<LiveMembersRequest>) -> Result<Response<Json>, Status> {
        let live: Result<Vec<u64>, ClusterError> =
            self.cluster.heard_from().map(|ids| ids.into_iter().collect()).ok_or(ClusterError::NoLeader);
        reply(&live)
    }
}
