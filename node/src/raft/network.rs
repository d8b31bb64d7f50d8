//! The client side of replication: openraft's network traits over tonic.
//!
//! Append entries use a bidirectional stream, so the leader keeps sending while earlier batches
//! are still being written and acknowledged by the follower.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use openraft::base::{BoxFuture, BoxStream};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{AnyError, OptionalSend};
use rockraft_proto::rockraft as pb;
use rockraft_proto::rockraft::raft_service_client::RaftServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::auth::member::{Attach, MemberCredentials};
use crate::auth::member_tls::MemberTls;
use crate::raft::refusals::{Gate, Gated, Refusals};

use crate::raft::wire::{FromPb, ToPb, append_to_pb};
use crate::raft::{GroupId, NodeId, NodeInfo, TypeConfig, Vote};

type Snapshot = openraft::alias::SnapshotOf<TypeConfig, Vec<u8>>;

const SNAPSHOT_CHUNK: usize = 1 << 20;

/// How this node dials the other members: its credentials (the cluster secret, and with mutual
/// TLS its certificate and the cluster's CA), and the gates of the members that refuse it.
#[derive(Clone, Default, Debug)]
pub struct Dialer {
    pub credentials: MemberCredentials,
    pub refusals: Refusals,
}

/// Creates a [`Peer`] per follower.
#[derive(Clone)]
pub struct Network {
    pub dialer: Dialer,
    /// The group whose calls this network carries (each group has its own).
    pub group: GroupId,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &NodeInfo) -> Peer {
        self.dialer.refusals.name(&node.raft_addr, target);
        Peer {
            target,
            group: self.group,
            channel: member_channel_to(&node.raft_addr, Some(target), &self.dialer),
            gate: self.dialer.refusals.gate(&node.raft_addr),
            retry_at: None,
        }
    }
}

/// A channel to another member's raft port: every call carries this node's credentials and goes
/// through the member's refusal gate.
pub type PeerChannel = InterceptedService<Gated<Channel>, Attach>;

/// A channel to a member that cannot be made: `addr` is not an address (nothing was dialled).
#[derive(Debug, thiserror::Error)]
#[error("bad address {addr:?}: {source}")]
pub struct ChannelError {
    pub addr: String,
    pub source: tonic::transport::Error,
}

/// A lazily connected channel to the member at `addr`, as `dialer` dials.
pub fn member_channel(addr: &str, dialer: &Dialer) -> Result<PeerChannel, ChannelError> {
    member_channel_to(addr, None, dialer)
}

/// [`member_channel`] to member `id`, when known: on mutual TLS its certificate must name it.
pub(crate) fn member_channel_to(addr: &str, id: Option<NodeId>, dialer: &Dialer) -> Result<PeerChannel, ChannelError> {
    let channel = channel_to(addr, id, dialer.credentials.tls.as_ref())?;
    Ok(InterceptedService::new(Gated::new(channel, dialer.refusals.gate(addr)), dialer.credentials.attach.clone()))
}

/// How often an idle or busy connection to a member is pinged (HTTP/2 PING), and how long a ping
/// may go unanswered before the connection is dropped: a member that stopped answering (paused,
/// or gone behind a partition without a reset) is noticed within seconds, and the next call
/// dials afresh instead of queueing on a dead connection.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// A lazily connected channel to `addr` (host:port), over mutual TLS when `tls` is given (the
/// member's certificate must name `addr`'s host and a member of this cluster); errors surface on
/// the first call.
pub fn channel(addr: &str, tls: Option<&MemberTls>) -> Result<Channel, ChannelError> {
    channel_to(addr, None, tls)
}

fn channel_to(addr: &str, id: Option<NodeId>, tls: Option<&MemberTls>) -> Result<Channel, ChannelError> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|source| ChannelError { addr: addr.to_string(), source })?
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .tcp_keepalive(Some(KEEPALIVE_INTERVAL))
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    if crate::simulation::active() {
        #[cfg(feature = "sim")]
        return Ok(endpoint.connect_with_connector_lazy(crate::simulation::connector()));
    }
    Ok(match tls {
        None => endpoint.connect_lazy(),
        // TLS by this node's connector: it takes up renewed certificate files, and checks that
        // the certificate names the member dialled.
        Some(tls) => endpoint.connect_with_connector_lazy(tls.connector(id)),
    })
}

/// A client of a member's `RaftService` over `channel`. Replies are as large as the member's log
/// records and snapshots are, which no fixed cap fits.
pub(crate) fn raft_client(channel: PeerChannel) -> RaftServiceClient<PeerChannel> {
    RaftServiceClient::new(channel).max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX)
}

pub struct Peer {
    target: NodeId,
    group: GroupId,
    channel: Result<PeerChannel, ChannelError>,
    /// The target's refusal gate: while it refuses this node, calls wait out its back-off.
    gate: Arc<Gate>,
    /// Set after a failed connection: no new attempt before then. openraft's own backoff only
    /// applies once a stream is open, so without this a dead peer is redialled in a tight loop.
    retry_at: Option<tokio::time::Instant>,
}

/// How long a peer that refused a connection is left alone.
const RECONNECT_PAUSE: Duration = Duration::from_millis(250);

fn unreachable(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(&AnyError::error(e.to_string())))
}

fn network(e: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(&AnyError::error(e.to_string())))
}

/// Maps a tonic failure: connection problems and refusals (another secret, a certificate the
/// member does not take: `refusals`) are "unreachable", so openraft backs off; the rest are network
/// errors.
fn status(e: tonic::Status) -> RPCError<TypeConfig> {
    match e.code() {
        tonic::Code::Unavailable
        | tonic::Code::Cancelled
        | tonic::Code::Unauthenticated
        | tonic::Code::PermissionDenied => unreachable(e),
        _ => network(e),
    }
}

impl Peer {
    /// Waits out the pause after a failed connection, and the back-off of a member that refuses
    /// this node.
    async fn pace(&mut self) {
        if let Some(at) = self.retry_at {
            tokio::time::sleep_until(at).await;
        }
        while let Some(at) = self.gate.next_try() {
            tokio::time::sleep_until(at).await;
        }
    }

    /// Maps a failed call and, when the peer is unreachable, starts a pause.
    fn failed(&mut self, e: tonic::Status) -> RPCError<TypeConfig> {
        let err = status(e);
        if matches!(err, RPCError::Unreachable(_)) {
            self.retry_at = Some(tokio::time::Instant::now() + RECONNECT_PAUSE);
        } else {
            self.retry_at = None;
        }
        err
    }

    /// A unary call of an openraft request and answer, in their protobuf forms.
    async fn unary<Req, Resp, F, Fut>(
        &mut self,
        req: &Req,
        option: RPCOption,
        call: F,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: ToPb,
        Resp: FromPb,
        F: FnOnce(RaftServiceClient<PeerChannel>, tonic::Request<Req::Pb>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp::Pb>, tonic::Status>>,
    {
        self.pace().await;
        let mut request = self.group.address(req.to_pb());
        request.set_timeout(option.hard_ttl());
        let reply = call(self.client()?, request).await.map_err(|e| self.failed(e))?;
        self.retry_at = None;
        Resp::from_pb(reply.into_inner()).map_err(network)
    }

    fn client(&self) -> Result<RaftServiceClient<PeerChannel>, RPCError<TypeConfig>> {
        Ok(raft_client(self.channel.as_ref().map_err(unreachable)?.clone()))
    }
}

impl RaftNetworkV2<TypeConfig> for Peer {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.pace().await;
        let mut req = self.group.address(append_to_pb(rpc).map_err(network)?);
        req.set_timeout(option.hard_ttl());
        let reply = self.client()?.append_entries(req).await.map_err(|e| self.failed(e))?;
        self.retry_at = None;
        AppendEntriesResponse::from_pb(reply.into_inner()).map_err(network)
    }

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        _option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>, RPCError<TypeConfig>>,
    >
    where
        S: futures_util::Stream<Item = AppendEntriesRequest<TypeConfig>> + OptionalSend + Unpin + 'static,
    {
        Box::pin(async move {
            self.pace().await;
            let mut client = self.client()?;
            // An entry that cannot be encoded ends the stream; openraft then retries from its state.
            let requests = input
                .map(append_to_pb)
                .take_while(|r| std::future::ready(r.is_ok()))
                .filter_map(|r| std::future::ready(r.ok()));
            let requests = self.group.address(requests);
            let responses = client.stream_append(requests).await.map_err(|e| self.failed(e))?.into_inner();
            self.retry_at = None;
            let results = responses.map(|item| {
                let msg = item.map_err(status)?;
                StreamAppendResult::<TypeConfig>::from_pb(msg).map_err(network)
            });
            Ok(Box::pin(results) as BoxStream<'s, _>)
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(&rpc, option, |mut c, r| async move { c.vote(r).await }).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(&rpc, option, |mut c, r| async move { c.pre_vote(r).await }).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let header = (vote, snapshot.meta.clone()).to_pb();
        let mut chunks = vec![pb::SnapshotChunk { part: Some(pb::snapshot_chunk::Part::Header(header)) }];
        chunks.extend(snapshot.snapshot.chunks(SNAPSHOT_CHUNK).map(|c| pb::SnapshotChunk {
            part: Some(pb::snapshot_chunk::Part::Data(bytes::Bytes::copy_from_slice(c))),
        }));
        self.pace().await;
        let chunks = self.group.address(futures_util::stream::iter(chunks));
        let reply = self.client()?.install_snapshot(chunks).await.map_err(|e| self.failed(e))?;
        Ok(SnapshotResponse::from_pb(reply.into_inner()).map_err(network)?)
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.unary(&req, option, |mut c, r| async move { c.transfer_leader(r).await }).await
    }

    fn backoff(&self) -> Option<Backoff> {
        tracing::trace!(target = self.target, "backing off");
        Some(Backoff::new(std::iter::repeat(Duration::from_millis(200))))
    }
}
