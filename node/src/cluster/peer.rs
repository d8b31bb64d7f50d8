//! The client side of `rockraft.v1.PeerService`: one cached channel per peer, and the calls a
//! member makes to the leader. Replies carry typed results (see `reply.proto`); a gRPC error means
//! the leader gave no answer at all.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use rockraft_proto::rockraft::peer as pb;
use rockraft_proto::rockraft::peer_service_client::PeerServiceClient;
use rockraft_proto::rockraft::{
    ClockRequest, DiskSpaceRequest, FiguresRequest, LeaderRequest, LiteDeadLetterRequest, LiveMembersRequest,
    ReadIndexRequest, RemotingConsumersRequest, WriteRequest,
};

use crate::broker::Reply;
use crate::broker::pop::{ConsumeOutcome, Receipt};
use crate::cluster::pop::{PopError, PopOrder, Popped};
use crate::cluster::wire::ResultMessage;
use crate::cluster::{AskProducer, ClusterError};
use crate::raft::{Dialer, GroupId, NodeId, PeerChannel, member_channel};

/// No peer call waits longer than this for its answer. A member that took the connection but
/// answers nothing (paused, or half-open behind a partition) must not stall the caller: the
/// transaction checks, the renewals and the pop planning all go on with the members that answer.
pub const PEER_CALL_DEADLINE: Duration = Duration::from_secs(5);

/// Runs one call to the peer at `addr`, or gives up at the deadline (as an unanswered call).
async fn within<T>(
    addr: &str,
    call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<tonic::Response<T>, tonic::Status> {
    tokio::time::timeout(PEER_CALL_DEADLINE, call).await.unwrap_or_else(|_| {
        Err(tonic::Status::deadline_exceeded(format!("no answer from {addr} within {PEER_CALL_DEADLINE:?}")))
    })
}

/// One channel per peer address, reused by every call; each call carries this node's member
/// credentials, waits out the peer's back-off while it refuses them, and names the group it is
/// about (the peer serves it with its replica of that group).
pub struct Peers {
    dialer: Dialer,
    group: GroupId,
    channels: Mutex<HashMap<String, PeerChannel>>,
}

impl Peers {
    pub fn new(dialer: Dialer, group: GroupId) -> Peers {
        Peers { dialer, group, channels: Mutex::default() }
    }

    /// How this node dials members, and who refuses it.
    pub fn dialer(&self) -> &Dialer {
        &self.dialer
    }

    pub fn channel(&self, addr: &str) -> Result<PeerChannel, ClusterError> {
        let mut channels = self.channels.lock().expect("peer channels lock");
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let c = member_channel(addr, &self.dialer)
            .map_err(|e| ClusterError::Unreachable { addr: addr.to_string(), reason: e.to_string() })?;
        channels.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    fn client(&self, addr: &str) -> Result<PeerServiceClient<PeerChannel>, ClusterError> {
        // Forwarded writes are as large as the log allows; the proposer checked the size.
        Ok(PeerServiceClient::new(self.channel(addr)?)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX))
    }

    /// Proposes an encoded command through the leader at `addr`.
    pub async fn write(&self, addr: &str, command: Bytes) -> Result<Reply, ClusterError> {
        let reply = within(addr, self.client(addr)?.write(self.group.address(WriteRequest { command }))).await;
        answer(addr, reply)
    }

    /// The leader's read index.
    pub async fn read_index(&self, addr: &str) -> Result<u64, ClusterError> {
        let reply = within(addr, self.client(addr)?.read_index(self.group.address(ReadIndexRequest {}))).await;
        answer(addr, reply)
    }

    /// A pop planned and proposed by the leader.
    pub async fn pop(&self, addr: &str, order: &PopOrder) -> Result<Popped, PopError> {
        let reply = within(addr, self.client(addr)?.pop(self.group.address(pb::PopOrder::from(order.clone())))).await;
        answer(addr, reply)
    }

    /// The voters the leader at `addr` heard from lately, itself included.
    pub async fn live_members(&self, addr: &str) -> Result<std::collections::BTreeSet<NodeId>, ClusterError> {
        let reply = within(addr, self.client(addr)?.live_members(self.group.address(LiveMembersRequest {}))).await;
        answer(addr, reply).map(|live| live.0.into_iter().collect())
    }

    /// The group's leader as the member at `addr` knows it.
    pub async fn leader(&self, addr: &str) -> Result<(NodeId, crate::raft::NodeInfo), ClusterError> {
        let reply = within(addr, self.client(addr)?.leader(self.group.address(LeaderRequest {}))).await;
        answer(addr, reply).map(|crate::cluster::wire::KnownLeader(id, info)| (id, info))
    }

    /// Whether the node at `addr` runs a replica of this group: `false` when it says it runs
    /// none (its data directory keeps the metadata in another group, or the group was never
    /// opened there), an error when it gave no answer.
    pub async fn runs_group(&self, addr: &str) -> Result<bool, ClusterError> {
        match within(addr, self.client(addr)?.leader(self.group.address(LeaderRequest {}))).await {
            Err(status) if status.code() == tonic::Code::NotFound => Ok(false),
            Err(status) => Err(no_answer(addr, &status)),
            // Whatever it knows of the leader (a fresh node knows none), it runs the group.
            Ok(_) => Ok(true),
        }
    }

    /// The group's figures as the member at `addr` has applied them.
    pub async fn figures(&self, addr: &str) -> Result<crate::broker::GroupFigures, ClusterError> {
        let reply = within(addr, self.client(addr)?.figures(self.group.address(FiguresRequest {}))).await;
        answer(addr, reply)
    }

    /// The clock of the member at `addr`.
    pub async fn clock(&self, addr: &str) -> Result<i64, ClusterError> {
        let reply = within(addr, self.client(addr)?.clock(self.group.address(ClockRequest {}))).await;
        Ok(reply.map_err(|status| no_answer(addr, &status))?.into_inner().now_ms)
    }

    /// The Remoting consumers of `group` connected to the member at `addr`.
    pub async fn remoting_consumers(&self, addr: &str, group: &str) -> Result<Vec<String>, ClusterError> {
        let req = self.group.address(RemotingConsumersRequest { group: group.to_string() });
        let reply = within(addr, self.client(addr)?.remoting_consumers(req)).await;
        Ok(reply.map_err(|status| no_answer(addr, &status))?.into_inner().client_ids)
    }

    /// The free space of the member at `addr`, judged against its marks.
    pub async fn disk_space(&self, addr: &str) -> Result<crate::cluster::disk::DiskReading, ClusterError> {
        let reply = within(addr, self.client(addr)?.disk_space(self.group.address(DiskSpaceRequest {}))).await;
        answer(addr, reply)
    }

    /// A dead letter built and proposed by the leader.
    pub async fn dead_letter(&self, addr: &str, receipt: &Receipt) -> Result<ConsumeOutcome, PopError> {
        let reply = within(
            addr,
            self.client(addr)?.dead_letter(self.group.address(rockraft_proto::rockraft::log::Receipt::from(receipt))),
        )
        .await;
        answer(addr, reply)
    }

    /// Asks the leader at `addr` to end a lite delivery into the dead-letter queue.
    pub async fn lite_dead_letter(
        &self,
        addr: &str,
        lite: &str,
        receipt: &Receipt,
    ) -> Result<ConsumeOutcome, PopError> {
        let req = LiteDeadLetterRequest {
            receipt: Some(rockraft_proto::rockraft::log::Receipt::from(receipt)),
            lite_topic: lite.to_string(),
        };
        let reply = within(addr, self.client(addr)?.lite_dead_letter(self.group.address(req))).await;
        answer(addr, reply)
    }

    /// Asks the node at `addr` to pass `ask` to a producer of the topic connected to it; whether
    /// it did. The call names group `via` (the metadata group: every node runs it, whichever data
    /// groups it holds).
    pub async fn ask_producer(&self, addr: &str, via: GroupId, ask: &AskProducer) -> Result<bool, ClusterError> {
        let mut client = PeerServiceClient::new(self.channel(addr)?);
        let reply = within(addr, client.ask_producer(via.address(pb::AskProducer::from(ask.clone()))))
            .await
            .map_err(|e| ClusterError::Unreachable { addr: addr.to_string(), reason: e.to_string() })?;
        Ok(reply.into_inner().asked)
    }
}

/// The typed result a peer answered, or why there was none.
fn answer<M>(addr: &str, reply: Result<tonic::Response<M>, tonic::Status>) -> Result<M::Ok, M::Err>
where
    M: ResultMessage,
    M::Err: From<ClusterError>,
{
    let reply = reply.map_err(|status| no_answer(addr, &status))?.into_inner();
    reply.into_result().map_err(|e| ClusterError::Internal(format!("answer from {addr}: {e}")))?
}

/// A gRPC error from a peer: our request was malformed (a bug), or the call got no answer.
fn no_answer(addr: &str, status: &tonic::Status) -> ClusterError {
    match status.code() {
        tonic::Code::InvalidArgument | tonic::Code::Internal | tonic::Code::DataLoss => {
            ClusterError::Internal(format!("{addr}: {}", status.message()))
        }
        _ => ClusterError::Unreachable { addr: addr.to_string(), reason: status.message().to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply<M>(message: M) -> Result<tonic::Response<M>, tonic::Status> {
        Ok(tonic::Response::new(message))
    }

    /// A listener that accepts connections and holds them, reading and writing nothing: a member
    /// that is paused, or cut off without a reset.
    fn silent_member() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in listener.incoming() {
                held.push(s);
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_peer_that_accepts_and_never_answers_fails_each_call_at_its_deadline() {
        let addr = silent_member();
        let peers = Peers::new(Dialer::default(), GroupId::FIRST);
        // The outer bound only turns a hang into a failure.
        let answered = tokio::time::timeout(PEER_CALL_DEADLINE * 4, peers.read_index(&addr)).await;
        assert!(matches!(answered, Ok(Err(ClusterError::Unreachable { .. }))), "{answered:?}");
        let asked = tokio::time::timeout(PEER_CALL_DEADLINE * 4, peers.clock(&addr)).await;
        assert!(matches!(asked, Ok(Err(ClusterError::Unreachable { .. }))), "{asked:?}");
    }

    /// Keepalive: even a call with no deadline of its own ends once the member stops answering
    /// pings, and the channel dials afresh for the next call.
    #[tokio::test]
    async fn a_member_channel_drops_a_connection_whose_pings_go_unanswered() {
        let addr = silent_member();
        let mut client = PeerServiceClient::new(member_channel(&addr, &Dialer::default()).unwrap());
        let answered = tokio::time::timeout(Duration::from_secs(60), client.read_index(ReadIndexRequest {})).await;
        assert!(matches!(answered, Ok(Err(_))), "the call ended with an error instead of hanging: {answered:?}");
    }

    #[test]
    fn errors_cross_the_wire_as_themselves() {
        let errors = [
            ClusterError::NoLeader,
            ClusterError::Unreachable { addr: "a:1".into(), reason: "refused".into() },
            ClusterError::TooLarge { len: 2_000_000, max: 1_048_472 },
            ClusterError::Lagging { index: 7 },
            ClusterError::Raft("stopped".into()),
        ];
        for e in errors {
            let back = answer("a:1", reply(pb::ReadIndexResult::from_result(Err(e.clone()))));
            assert_eq!(back, Err(e.clone()));
            let popped = answer("a:1", reply(pb::PopResult::from_result(Err(PopError::Cluster(e.clone())))));
            assert!(matches!(popped, Err(PopError::Cluster(got)) if got == e));
        }
        let ok = answer("a:1", reply(pb::ReadIndexResult::from_result(Ok(42))));
        assert_eq!(ok, Ok(42));
    }

    #[test]
    fn no_answer_is_unreachable_and_a_garbled_one_is_internal() {
        let down = answer::<pb::ReadIndexResult>("a:1", Err(tonic::Status::unavailable("connection refused")));
        assert!(matches!(down, Err(ClusterError::Unreachable { .. })));
        let wrong_port = answer::<pb::ReadIndexResult>("a:1", Err(tonic::Status::unimplemented("")));
        assert!(matches!(wrong_port, Err(ClusterError::Unreachable { .. })));
        let garbled = answer("a:1", reply(pb::ReadIndexResult { result: None }));
        assert!(matches!(garbled, Err(ClusterError::Internal(_))));
        let unknown_error = answer(
            "a:1",
            reply(pb::PopResult { result: Some(pb::pop_result::Result::Error(pb::PopError { error: None })) }),
        );
        assert!(matches!(unknown_error, Err(PopError::Cluster(ClusterError::Internal(_)))));
    }
}
