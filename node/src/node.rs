//! One RockRaft node: storage, broker, Raft, and the two gRPC endpoints, wired together.
//!
//! - raft port: `RaftService` (replication) and `AdminService` (forwarded writes, admin);
//! - client port: the RocketMQ `MessagingService` (proxy) and `AdminService` (for the CLI).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{Config, RaftMetrics, ReadPolicy, SnapshotPolicy};
use rockraft_proto::rocketmq::messaging_service_server::MessagingServiceServer;
use rockraft_proto::rockraft::WriteRequest;
use rockraft_proto::rockraft::admin_service_client::AdminServiceClient;
use rockraft_proto::rockraft::admin_service_server::AdminServiceServer;
use rockraft_proto::rockraft::raft_service_server::RaftServiceServer;

use crate::admin::{AdminServer, NodeConfig};
use crate::broker::{Broker, BrokerOptions, Command, Reply};
use crate::proxy::Proxy;
use crate::raft::{
    CommandBytes, LogStore, Network, NodeId, NodeInfo, Raft, RaftServer, StateMachine, TypeConfig, channel,
};
use crate::store::LogReader;
use crate::store::retention::purge_point;

/// Why a write did not happen. Each maps to a client-visible status at the edge.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("no leader is known right now")]
    NoLeader,
    #[error("forwarding to the leader failed: {0}")]
    Forward(String),
    #[error("raft: {0}")]
    Raft(String),
}

/// What the services share: the Raft handle, the broker state and this node's config.
#[derive(Clone)]
pub struct Node {
    pub raft: Raft,
    pub broker: Broker,
    pub config: Arc<NodeConfig>,
    peers: Arc<Peers>,
    /// Serializes the pops this node plans as leader, per (group, topic).
    pub pop_locks: Arc<crate::proxy::pop::PopLocks>,
    /// Rotates the queue pops start from.
    round_robin: Arc<std::sync::atomic::AtomicU32>,
}

impl Node {
    pub fn id(&self) -> NodeId {
        self.config.node_id
    }

    /// What openraft reports about this node right now.
    pub fn metrics(&self) -> RaftMetrics<TypeConfig> {
        self.raft.metrics().borrow_watched().clone()
    }

    /// The leader's id and address, as this node currently knows them.
    pub fn leader(&self) -> Option<(NodeId, NodeInfo)> {
        let metrics = self.metrics();
        let id = metrics.current_leader?;
        let info = metrics.membership_config.membership().get_node(&id)?.clone();
        Some((id, info))
    }

    pub fn is_leader(&self) -> bool {
        self.leader().is_some_and(|(id, _)| id == self.id())
    }

    /// On the leader: the commit index, after confirming leadership with a quorum.
    pub async fn read_index(&self) -> Result<u64, String> {
        let read = self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await.map_err(|e| e.to_string())?;
        Ok(read.index())
    }

    /// A value that moves on with every call, for spreading work over queues.
    pub fn next_queue(&self) -> u32 {
        self.round_robin.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Sends an admin request to the leader.
    pub async fn call_leader(
        &self,
        req: &crate::admin::api::AdminRequest,
    ) -> Result<crate::admin::api::AdminResponse, String> {
        let (_, leader) = self.leader().ok_or("no leader is known right now")?;
        let channel = self.peers.channel(&leader.raft_addr)?;
        crate::admin::call_on(channel, req).await
    }

    /// Waits until this node has applied everything committed when it was called, so a read of
    /// its local state sees every write acknowledged before (a follower asks the leader for that
    /// index). For reads that found nothing locally, e.g. a topic created a moment ago.
    pub async fn catch_up(&self) -> Result<(), String> {
        if self.leader().is_none() {
            // Just started, or an election is running: give it a moment.
            let _ =
                self.raft.wait(Some(Duration::from_secs(3))).metrics(|m| m.current_leader.is_some(), "a leader").await;
        }
        let index = if self.is_leader() {
            self.read_index().await?
        } else {
            match self.call_leader(&crate::admin::api::AdminRequest::ReadIndex).await? {
                crate::admin::api::AdminResponse::ReadIndex(i) => i,
                other => return Err(format!("unexpected answer {other:?}")),
            }
        };
        self.raft
            .wait(Some(Duration::from_secs(2)))
            .applied_index_at_least(Some(index), "catching up for a read")
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// Waits (briefly) until this node has applied `index`, e.g. an entry the leader applied for
    /// a write this node forwarded.
    pub async fn wait_applied(&self, index: u64) {
        let _ = self.raft.wait(Some(Duration::from_secs(2))).applied_index_at_least(Some(index), "own write").await;
    }

    /// Proposes `command` and returns its reply once it is committed and applied. A follower
    /// forwards it to the leader.
    pub async fn write(&self, command: &Command) -> Result<Reply, WriteError> {
        self.write_bytes(command.encode(), true).await
    }

    pub async fn write_bytes(&self, command: Bytes, may_forward: bool) -> Result<Reply, WriteError> {
        // Commands that act on time carry the clock of the leader that proposes them.
        let command = if Command::carries_time(&command) && self.is_leader() {
            Command::stamp_time(command, crate::proxy::now_ms())
        } else {
            command
        };
        match self.raft.client_write(CommandBytes(command.clone())).await {
            Ok(resp) => Ok(resp.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(fwd))) => {
                let Some(leader) = fwd.leader_node.filter(|_| may_forward) else { return Err(WriteError::NoLeader) };
                forward(&self.peers, &leader.raft_addr, command).await
            }
            Err(e) => Err(WriteError::Raft(e.to_string())),
        }
    }
}

/// One channel per peer address, reused by every forwarded write.
#[derive(Default)]
pub struct Peers {
    channels: std::sync::Mutex<std::collections::HashMap<String, tonic::transport::Channel>>,
}

impl Peers {
    fn channel(&self, addr: &str) -> Result<tonic::transport::Channel, String> {
        let mut channels = self.channels.lock().expect("peer channels lock");
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let c = channel(addr)?;
        channels.insert(addr.to_string(), c.clone());
        Ok(c)
    }
}

async fn forward(peers: &Peers, raft_addr: &str, command: Bytes) -> Result<Reply, WriteError> {
    let channel = peers.channel(raft_addr).map_err(WriteError::Forward)?;
    let mut client =
        AdminServiceClient::new(channel).max_decoding_message_size(usize::MAX).max_encoding_message_size(usize::MAX);
    let reply = match client.write(WriteRequest { command }).await {
        Ok(r) => r.into_inner(),
        Err(s) if s.code() == tonic::Code::Unavailable && s.message().contains("no leader") => {
            return Err(WriteError::NoLeader);
        }
        Err(s) => return Err(WriteError::Forward(s.message().to_string())),
    };
    serde_json::from_slice(&reply.reply).map_err(|e| WriteError::Forward(e.to_string()))
}

fn raft_config(config: &NodeConfig) -> Result<Config, String> {
    Config {
        cluster_name: config.group.clone(),
        heartbeat_interval: config.raft.heartbeat_ms,
        election_timeout_min: config.raft.election_timeout_min_ms,
        election_timeout_max: config.raft.election_timeout_max_ms,
        // openraft's own policy would purge the message log; retention builds snapshots instead.
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: 0,
        enable_pre_vote: Some(true),
        ..Default::default()
    }
    .validate()
    .map_err(|e| e.to_string())
}

/// Opens the node's storage and starts Raft; does not serve yet.
pub async fn open(config: NodeConfig) -> Result<Node, String> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| format!("{}: {e}", config.data_dir.display()))?;
    let log_store = LogStore::open(config.log_config()).map_err(|e| e.to_string())?;
    let broker = Broker::open(
        BrokerOptions {
            dir: config.data_dir.join("broker"),
            cq_records_per_file: config.storage.consume_queue_records_per_file,
            dedupe_window: Duration::from_secs(config.broker.dedupe_window_secs),
            checkpoint_interval: Duration::from_millis(config.broker.checkpoint_interval_ms),
        },
        log_store.commit_log(),
    )
    .map_err(|e| e.to_string())?;
    let log = log_store.commit_log();
    let state_machine = StateMachine::open(broker.clone(), log.clone(), config.data_dir.join("snapshot.json"))
        .map_err(|e| e.to_string())?;
    let raft_config = Arc::new(raft_config(&config)?);
    let raft =
        Raft::new(config.node_id, raft_config, Network, log_store, state_machine).await.map_err(|e| e.to_string())?;
    let node = Node {
        raft,
        broker,
        config: Arc::new(config),
        peers: Arc::default(),
        pop_locks: Arc::default(),
        round_robin: Arc::default(),
    };
    tokio::spawn(retention(node.clone(), log));
    spawn_checkpoints(node.broker.clone());
    Ok(node)
}

/// Makes applied state durable in the background, off the apply path.
fn spawn_checkpoints(broker: Broker) {
    let interval = broker.checkpoint_interval();
    std::thread::Builder::new()
        .name("rockraft-checkpoint".into())
        .spawn(move || {
            loop {
                std::thread::sleep(interval);
                if let Err(e) = broker.checkpoint() {
                    tracing::error!(error = %e, "checkpoint failed; applied state is re-derived from the log on restart");
                }
            }
        })
        .map(drop)
        .unwrap_or_else(|e| tracing::error!(error = %e, "cannot start the checkpoint thread"));
}

/// Purges whole segments past the retention time or over the disk budget: a snapshot is built
/// at the purge point (metadata and queue ranges as of then) and openraft purges the log up to it.
async fn retention(node: Node, log: LogReader) {
    let storage = &node.config.storage;
    let max_age = Duration::from_secs_f64(storage.retention_hours.max(0.0) * 3600.0);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(storage.retention_check_secs.max(0.1)));
    loop {
        tick.tick().await;
        let applied = node.broker.last_applied().map(|l| l.index);
        let Some(point) = purge_point(&log.segment_stats(), SystemTime::now(), max_age, storage.disk_budget_bytes)
        else {
            continue;
        };
        let point = applied.map_or(point, |a| point.min(a));
        if log.bounds().first_index > point {
            continue;
        }
        tracing::info!(node = node.id(), upto = point, "retention: purging the log");
        node.broker.set_snapshot_target(point);
        if node.raft.trigger().snapshot().await.is_err() {
            return; // Raft has stopped.
        }
    }
}

/// Serves both endpoints until SIGTERM or Ctrl-C, then shuts down gracefully.
pub async fn run(config: NodeConfig) -> Result<(), String> {
    let node = open(config).await?;
    let raft_addr = node.config.raft_addr.parse().map_err(|e| format!("raft_addr: {e}"))?;
    let client_addr = node.config.client_addr.parse().map_err(|e| format!("client_addr: {e}"))?;
    let max = usize::MAX;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let raft_server = tonic::transport::Server::builder()
        .add_service(RaftServiceServer::new(RaftServer::new(node.raft.clone())).max_decoding_message_size(max))
        .add_service(AdminServiceServer::new(AdminServer::new(node.clone())).max_decoding_message_size(max))
        .serve_with_shutdown(raft_addr, stopped(stop_rx.clone()));
    let proxy = Proxy::new(node.clone());
    let renewal_task = tokio::spawn(crate::proxy::renew::run(node.clone(), proxy.renewals()));
    let client_server = tonic::transport::Server::builder()
        .add_service(
            MessagingServiceServer::new(proxy)
                .max_decoding_message_size(node.config.broker.max_body_bytes as usize * 2 + (1 << 20)),
        )
        .add_service(AdminServiceServer::new(AdminServer::new(node.clone())).max_decoding_message_size(max))
        .serve_with_shutdown(client_addr, stopped(stop_rx.clone()));
    let raft_task = tokio::spawn(raft_server);
    let client_task = tokio::spawn(client_server);
    tracing::info!(node = node.id(), raft = %node.config.raft_addr, client = %node.config.client_addr, "node started");

    shutdown_signal().await;
    tracing::info!(node = node.id(), "shutting down");
    hand_over_leadership(&node).await;
    let _ = stop_tx.send(true);
    let _ = raft_task.await;
    let _ = client_task.await;
    renewal_task.abort();
    let _ = node.raft.shutdown().await;
    node.broker.checkpoint().map_err(|e| e.to_string())?;
    Ok(())
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// A leader that is asked to stop first hands leadership to the most caught-up voter, so
/// clients see a short pause instead of an election timeout.
async fn hand_over_leadership(node: &Node) {
    if !node.is_leader() {
        return;
    }
    let metrics = node.metrics();
    let target = metrics
        .replication
        .as_ref()
        .and_then(|r| r.iter().filter(|(id, _)| **id != node.id()).max_by_key(|(_, m)| m.as_ref().map(|l| l.index)))
        .map(|(id, _)| *id);
    let Some(target) = target else { return };
    if node.raft.trigger().transfer_leader(target).await.is_err() {
        return;
    }
    let me = node.id();
    let _ = node
        .raft
        .wait(Some(Duration::from_secs(3)))
        .metrics(|m| m.current_leader != Some(me), "leadership handed over")
        .await;
}
