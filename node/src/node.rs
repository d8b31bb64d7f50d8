//! One RockRaft node: storage, broker, Raft, the cluster handle, background jobs, and its three
//! gRPC listeners, one per plane, wired together.
//!
//! - raft port (current members only: the cluster secret and, on mutual TLS, a certificate naming
//!   a member; `auth::member`): `RaftService` (replication), `PeerService` (what members ask of
//!   the leader) and `AdminService` (operator requests members pass on to the leader, each with
//!   its operator's signature);
//! - client port: the RocketMQ `MessagingService` (proxy) only; each request is marked with its
//!   caller, whom the proxy checks against the access rules;
//! - admin port: `AdminService` for the CLI, admins only when authentication is on.

use std::sync::Arc;
use std::time::Duration;

use rockraft_proto::rocketmq::messaging_service_server::MessagingServiceServer;
use rockraft_proto::rockraft::admin_service_server::AdminServiceServer;
use rockraft_proto::rockraft::peer_service_server::PeerServiceServer;
use rockraft_proto::rockraft::raft_service_server::RaftServiceServer;

use crate::admin::{AdminParts, AdminServer, NodeConfig};
use crate::auth::Authenticator;
use crate::auth::connections::ConnectionCap;
use crate::auth::gate::ClientGate;
use crate::auth::member::{Audience, MemberCredentials, MemberGate, MemberPolicy, Secrets};
use crate::auth::member_listener::MemberListener;
use crate::auth::operator::{Door, OperatorGate, Replays};
use crate::broker::Broker;
use crate::cluster::{Cluster, PeerServer};
use crate::jobs::Jobs;
use crate::plugin::PluginHost;
use crate::proxy::renew::Renewals;
use crate::proxy::{Proxy, ProxyOptions, ProxyParts};
use crate::raft::{Dialer, RaftServer};
use crate::replicas::{Context, Replica, Replicas};
use crate::store::layout::DataLayout;

/// Why a node did not start, or stopped on its own; each names the setting, file or part at fault.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Replica(#[from] crate::replicas::OpenError),
    #[error(transparent)]
    Layout(#[from] crate::store::layout::LayoutError),
    #[error(transparent)]
    Broker(#[from] crate::broker::BrokerError),
    #[error(transparent)]
    Tls(#[from] crate::auth::tls::TlsError),
    #[error(transparent)]
    MemberTls(#[from] crate::auth::member_tls::MemberTlsError),
    /// The TLS settings a listener was given were refused (`what`: the setting).
    #[error("{what}: {source}")]
    Listener { what: &'static str, source: tonic::transport::Error },
    #[error(transparent)]
    Plugins(#[from] crate::plugin::PluginError),
    /// An address setting that is not an address.
    #[error("{setting}: {source}")]
    Address { setting: &'static str, source: std::net::AddrParseError },
    /// A listener's port could not be bound (in use, or not this host's address).
    #[error("{setting} {addr}: {source}")]
    Bind { setting: &'static str, addr: std::net::SocketAddr, source: std::io::Error },
    /// A part of the node asked it to stop (`Jobs::fail_stop`).
    #[error("stopped: {0}")]
    Stopped(String),
}

/// How long a stopping node lets in-flight calls finish.
const SERVER_DRAIN: Duration = Duration::from_secs(2);

/// A node, opened: Raft runs for each group it holds a replica of, and the jobs are started;
/// [`run`] serves it.
pub struct Node {
    /// The metadata group's replica: the way to its leader, what the proxy and the operator API use.
    pub cluster: Cluster,
    /// Every group this node runs a replica of; the Raft and peer services serve each.
    pub replicas: Replicas,
    /// This node's own parts, handed to each layer that uses them.
    pub parts: Parts,
    pub config: Arc<NodeConfig>,
    pub jobs: Jobs,
    /// Deliveries to renew: filled by the proxy, worked through by the renewal job.
    renewals: Arc<Renewals>,
    /// The metadata group's log, read by the status page and metrics.
    log: crate::store::LogReader,
    /// The cluster secrets this node attaches and accepts (replaced on SIGHUP).
    secrets: Secrets,
    /// Mutual TLS between members, when on.
    member_tls: Option<crate::auth::member_tls::MemberTls>,
}

/// A node's parts besides the cluster: its replica of the broker state, the plugin host, what it
/// counts, and the producers connected to it.
#[derive(Clone)]
pub struct Parts {
    pub broker: Broker,
    pub plugins: Arc<PluginHost>,
    pub meters: crate::metrics::Meters,
    pub sessions: Arc<crate::sessions::ProducerSessions>,
}

/// Opens the node's storage, starts Raft and the jobs of each group, and the node's own jobs;
/// does not serve yet.
pub async fn open(config: NodeConfig) -> Result<Node, NodeError> {
    let layout = DataLayout::open(&config.data_dir)?;
    // Not in a simulation: it reads a file through tokio's blocking pool, on real time.
    #[cfg(feature = "failpoints")]
    if !crate::simulation::active() {
        crate::cluster::clock::watch_test_offset(config.data_dir.join("test-clock-offset-ms"));
    }
    // One dialer for Raft and every other call to a member, so they share each member's
    // refusal gate.
    let secrets = Secrets::new(config.cluster_secret.as_ref(), config.cluster_secret_next.as_ref());
    let dialer = Dialer {
        credentials: MemberCredentials::new(
            secrets.clone(),
            crate::auth::member_tls::MemberTls::from_config(&config.tls, &config.group, config.node_id)?,
        ),
        refusals: Default::default(),
    };
    if config.cluster_secret.is_none() && config.tls.peer_ca_file.is_none() {
        tracing::warn!(
            raft = %config.raft_addr,
            "no cluster_secret configured: the raft port accepts calls from anyone who can reach it"
        );
    }
    let plugins = Arc::new(PluginHost::new(config.plugins)?);
    let sessions = Arc::new(crate::sessions::ProducerSessions::default());
    let meters = crate::metrics::Meters::new();
    let jobs = Jobs::new();
    let config = Arc::new(config);
    let member_tls = dialer.credentials.tls.clone();
    let context = Context {
        config: Arc::clone(&config),
        layout,
        dialer,
        plugins: Arc::clone(&plugins),
        meters: meters.clone(),
        sessions: Arc::clone(&sessions),
        jobs: jobs.clone(),
    };
    let replicas = Replicas::open(context).await?;
    jobs.spawn("replicas", replicas.clone().follow_metadata());

    // The node's own jobs, whatever groups it runs.
    let Replica { cluster, broker, log, .. } = replicas.metadata();
    let renewals = Arc::new(Renewals::default());
    jobs.spawn("renewals", crate::jobs::renewals(replicas.groups(), Arc::clone(&renewals)));
    jobs.spawn("group traffic", crate::jobs::group_traffic(replicas.groups(), meters.clone()));
    jobs.spawn("plugin warmup", crate::jobs::plugin_warmup(cluster.clone(), broker.clone(), Arc::clone(&plugins)));
    let max_skew = Duration::from_millis(config.raft.max_clock_skew_ms);
    jobs.spawn("clock skew", crate::jobs::watch_clocks(replicas.groups(), max_skew));
    jobs.spawn("disk space", crate::jobs::watch_disks(cluster.clone()));
    let parts = Parts { broker, plugins, meters, sessions };
    Ok(Node { cluster, replicas, parts, config, jobs, renewals, log, secrets, member_tls })
}

/// The largest admin request: a plugin registration, whose module travels as raw protobuf bytes
/// (no base64 any more), plus 64 KiB for the rest of it (name, kind and framing take a few dozen
/// bytes) so that a module at the largest size any cluster accepts still arrives whole.
const MAX_ADMIN_REQUEST_BYTES: usize = crate::broker::plugins::MAX_MODULE_BYTES + (64 << 10);

/// Operator requests one connection may have in flight: the CLI sends one at a time.
const MAX_ADMIN_STREAMS_PER_CONNECTION: u32 = 64;

/// HTTP/2 settings for every listener. Windows are wide, so thousands of 1 KiB sends in flight
/// need few WINDOW_UPDATEs; a peer reconnecting after a partition may reset many streams at once
/// without the connection being torn down for it (h2's default allows 20 pending).
fn server_builder() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .initial_connection_window_size(16 << 20)
        .initial_stream_window_size(1 << 20)
        .http2_max_pending_accept_reset_streams(Some(4096))
}

fn request_span(req: &tonic::codegen::http::Request<()>) -> tracing::Span {
    tracing::debug_span!(target: "rockraft::request", "request", method = %req.uri().path())
}

/// Serves the three listeners until SIGTERM or Ctrl-C, then shuts down gracefully; or until a part of
/// the node reports a fatal condition (`Jobs::fail_stop`), then stops at once with that error.
pub async fn run(config: NodeConfig) -> Result<(), NodeError> {
    // Read before anything is opened, so a bad certificate stops the node at once.
    let tls = config.tls.server()?;
    let node = open(config).await?;
    let config = Arc::clone(&node.config);
    let address = |setting: &'static str, addr: &str| {
        addr.parse::<std::net::SocketAddr>().map_err(|source| NodeError::Address { setting, source })
    };
    let raft_addr = address("raft_addr", &config.raft_addr)?;
    let client_addr = address("client_addr", &config.client_addr)?;
    let admin_addr = address("admin_addr", &config.admin_addr)?;
    let http_addr = address("http_addr", &config.http_addr)?;
    let bound = |setting: &'static str, addr| move |source| NodeError::Bind { setting, addr, source };
    let simulated = crate::simulation::active();
    // Bound before anything is served, so a port in use stops the node with its name. A simulated
    // node has no status page.
    let http_listener = match simulated {
        true => None,
        false => Some(tokio::net::TcpListener::bind(http_addr).await.map_err(bound("http_addr", http_addr))?),
    };
    let max = usize::MAX;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let cluster = &node.cluster;
    let admin_parts = AdminParts {
        broker: node.parts.broker.clone(),
        plugins: Arc::clone(&node.parts.plugins),
        meters: node.parts.meters.clone(),
        groups: node.replicas.clusters(),
    };
    let admin = |server: fn(Cluster, AdminParts, Arc<NodeConfig>) -> AdminServer| {
        AdminServiceServer::new(server(cluster.clone(), admin_parts.clone(), Arc::clone(&config)))
            .max_decoding_message_size(MAX_ADMIN_REQUEST_BYTES)
    };
    let authenticator = Authenticator::new(config.auth.clone(), node.parts.broker.clone());
    // Current members only: the secret and (mutual TLS) the certificate are checked before a
    // request is decoded; operator requests passed on need their operator's signature too.
    let member_tls = node.member_tls.clone();
    let roster: Arc<dyn crate::auth::member::Roster> = match member_tls {
        Some(_) => {
            let initial = config.members.iter().map(|m| m.id).collect();
            Arc::new(crate::raft::GroupRoster::new(node.replicas.raft_groups(), initial))
        }
        None => Arc::new(crate::auth::member::Everyone),
    };
    let refusals = Arc::new(crate::auth::member::RefusalLog::default());
    let policy = MemberPolicy {
        secrets: node.secrets.clone(),
        mutual_tls: member_tls.is_some(),
        roster: Arc::clone(&roster),
        refusals: Arc::clone(&refusals),
    };
    // One record of the operator signatures this node took, for both doors: a request passed on
    // reaches the node that serves it, which took it first on its admin port if it came there.
    let replays = Arc::new(Replays::default());
    let operators = |door, server: fn(Cluster, AdminParts, Arc<NodeConfig>) -> AdminServer| {
        OperatorGate::new(admin(server), door, Arc::clone(&authenticator), Arc::clone(&replays))
    };
    let raft_service =
        RaftServiceServer::new(RaftServer::new(node.replicas.raft_groups())).max_decoding_message_size(max);
    let peer_service = PeerServiceServer::new(PeerServer::new(node.replicas.clusters())).max_decoding_message_size(max);
    let raft_router = server_builder()
        // A member that stopped answering (gone behind a partition without a reset) is noticed,
        // and no connection lives for ever: a renewed certificate and a rotated secret are
        // taken up by the connections after.
        .http2_keepalive_interval(Some(MEMBER_KEEPALIVE))
        .http2_keepalive_timeout(Some(MEMBER_KEEPALIVE))
        .max_connection_age(MAX_MEMBER_CONNECTION_AGE)
        .max_connection_age_grace(MEMBER_CONNECTION_GRACE)
        .add_service(MemberGate::new(raft_service, Audience::Replication, policy.clone()))
        .add_service(MemberGate::new(peer_service, Audience::Members, policy.clone()))
        .add_service(MemberGate::new(operators(Door::RaftPort, AdminServer::for_members), Audience::Members, policy));
    let listener = MemberListener {
        cap: ConnectionCap::new("raft", config.limits.max_member_connections_per_address),
        roster,
        refusals,
    };
    if !config.auth.enabled {
        tracing::warn!(
            client = %config.client_addr,
            admin = %config.admin_addr,
            "authentication is off: any caller that reaches the client or admin port may do everything"
        );
    }
    // Client and operator requests each run in a `request` span (debug): with
    // `RUST_LOG=rockraft=debug` every request logs one line when it ends, with its method and time.
    let secured = || match &tls {
        Some(t) => server_builder()
            .trace_fn(request_span)
            .tls_config(t.clone())
            .map_err(|source| NodeError::Listener { what: "[tls]", source }),
        None => Ok(server_builder().trace_fn(request_span)),
    };
    for open in config.insecure_listeners() {
        // Only reachable with `allow_insecure = true`: said at every start, and on the status page.
        tracing::error!("INSECURE (allow_insecure = true): {open}");
    }
    let admin_router = secured()?
        .max_concurrent_streams(Some(MAX_ADMIN_STREAMS_PER_CONNECTION))
        .add_service(operators(Door::AdminPort, AdminServer::new));
    let proxy_options = ProxyOptions {
        group: config.group.clone(),
        max_body_bytes: config.broker.max_body_bytes,
        max_properties_bytes: config.broker.max_properties_bytes,
        max_delay: Duration::from_secs(config.broker.max_delay_secs),
        transaction_recovery: Duration::from_secs(config.broker.transaction_recovery_secs),
        advertised_client_addr: config.advertised_client_addr().to_string(),
        limits: config.limits.clone(),
        authenticator: Arc::clone(&authenticator),
    };
    let p = &node.parts;
    let parts = ProxyParts {
        broker: p.broker.clone(),
        plugins: Arc::clone(&p.plugins),
        meters: p.meters.clone(),
        sessions: Arc::clone(&p.sessions),
    };
    let proxy = Arc::new(Proxy::new(node.replicas.groups(), parts, proxy_options, Arc::clone(&node.renewals)));
    // Validated with the configuration: set, it is an IPv4 address and port.
    let advertised_remoting = config.advertised_remoting_addr().and_then(|a| a.parse::<std::net::SocketAddrV4>().ok());
    // Stops with the other listeners (`stop_rx`).
    let _remoting_task = match (&config.remoting_addr, advertised_remoting) {
        (Some(listen), Some(advertised)) if !simulated => {
            let listen = address("remoting_addr", listen)?;
            let listener = tokio::net::TcpListener::bind(listen).await.map_err(bound("remoting_addr", listen))?;
            let tls_acceptor = config.tls.acceptor()?;
            let options = crate::remoting::RemotingOptions {
                advertised,
                broker_name: config.group.clone(),
                limits: crate::remoting::frame::FrameLimits {
                    max_frame: (config.broker.max_body_bytes as usize).saturating_mul(4) + (1 << 20),
                    max_header: config.broker.max_properties_bytes as usize + (64 << 10),
                },
                max_clients: config.limits.max_client_ids,
                max_long_poll: Duration::from_secs(config.limits.max_long_poll_secs),
                max_requests_per_connection: config.limits.max_streams_per_connection as usize,
            };
            let server = crate::remoting::Remoting::new(Arc::clone(&proxy), Arc::clone(&authenticator), options);
            let cap = ConnectionCap::new("remoting", config.limits.max_connections_per_address);
            Some(tokio::spawn(crate::remoting::serve(server, listener, tls_acceptor, cap, stop_rx.clone())))
        }
        _ => None,
    };
    let messaging = MessagingServiceServer::from_arc(Arc::clone(&proxy))
        .max_decoding_message_size(config.broker.max_body_bytes as usize * 2 + (1 << 20));
    let client_router = secured()?
        .max_concurrent_streams(Some(config.limits.max_streams_per_connection))
        .add_service(ClientGate::new(messaging, authenticator));
    let (raft_task, client_task, admin_task) = match simulated {
        true => {
            serve_simulated(
                [(raft_router, raft_addr), (client_router, client_addr), (admin_router, admin_addr)],
                &stop_rx,
            )
            .await?
        }
        false => {
            // Bound before anything is served, so a port in use stops the node with its name.
            let raft_tcp = bind(raft_addr).map_err(bound("raft_addr", raft_addr))?;
            let per_address = config.limits.max_connections_per_address;
            let admin_incoming = ConnectionCap::new("admin", per_address)
                .limit(bind(admin_addr).map_err(bound("admin_addr", admin_addr))?);
            let client_incoming = ConnectionCap::new("client", per_address)
                .limit(bind(client_addr).map_err(bound("client_addr", client_addr))?);
            let raft_task = match member_tls.clone() {
                Some(t) => tokio::spawn(
                    raft_router
                        .serve_with_incoming_shutdown(listener.mutual_tls(raft_tcp, t), stopped(stop_rx.clone())),
                ),
                None => tokio::spawn(
                    raft_router.serve_with_incoming_shutdown(listener.plain(raft_tcp), stopped(stop_rx.clone())),
                ),
            };
            let client_task =
                tokio::spawn(client_router.serve_with_incoming_shutdown(client_incoming, stopped(stop_rx.clone())));
            let admin_task =
                tokio::spawn(admin_router.serve_with_incoming_shutdown(admin_incoming, stopped(stop_rx.clone())));
            (raft_task, client_task, admin_task)
        }
    };
    let http_task = http_listener.map(|listener| {
        let http_state =
            crate::http::HttpState::new(cluster.clone(), admin_parts.clone(), Arc::clone(&config), node.log.clone());
        tokio::spawn(crate::http::serve(listener, http_state, stopped(stop_rx.clone())))
    });
    tracing::info!(
        node = cluster.id(),
        raft = %config.raft_addr,
        client = %config.client_addr,
        admin = %config.admin_addr,
        http = %config.http_addr,
        remoting = config.remoting_addr.as_deref().unwrap_or("off"),
        advertised = %config.advertised_client_addr(),
        auth = config.auth.enabled,
        tls = tls.is_some(),
        member_tls = member_tls.is_some(),
        "node started"
    );

    if let Some(path) = config.path.clone()
        && !simulated
    {
        node.jobs.spawn("secret reload", reload_secrets_on_hangup(path, node.secrets.clone()));
    }
    let fatal = tokio::select! {
        _ = shutdown_signal(), if !simulated => None,
        reason = node.jobs.failed() => Some(reason),
    };
    tracing::info!(node = cluster.id(), "shutting down");
    if fatal.is_none() {
        // Every group this node leads, at once: each has its own followers to hand over to.
        let replicas = node.replicas.all();
        futures_util::future::join_all(replicas.values().map(|r| hand_over_leadership(&r.cluster))).await;
    }
    let _ = stop_tx.send(true);
    // Streams never end by themselves (a leader's replication stream, clients' Telemetry streams
    // and long polls): in-flight calls get a moment to finish, then the servers stop. One moment
    // for all of them, not one each: every server has such a stream, so waiting on them in turn
    // kept a stopping node, and a rolling restart, that many moments longer.
    let until = tokio::time::Instant::now() + SERVER_DRAIN;
    futures_util::future::join4(drain(raft_task, until), drain(client_task, until), drain(admin_task, until), async {
        if let Some(task) = http_task {
            drain(task, until).await
        }
    })
    .await;
    node.jobs.shutdown().await;
    let replicas = node.replicas.all();
    for replica in replicas.values() {
        replica.cluster.group().shutdown().await;
    }
    if let Some(reason) = fatal {
        // No last checkpoint: after a fatal error the state is re-derived from the log on restart.
        return Err(NodeError::Stopped(reason));
    }
    for replica in replicas.values() {
        replica.broker.checkpoint()?;
    }
    Ok(())
}

/// How often the raft port pings a connection, and how long it waits for the answer.
const MEMBER_KEEPALIVE: Duration = Duration::from_secs(10);
/// The longest a member connection is kept (then the member dials again), and how long its calls
/// then have to finish.
const MAX_MEMBER_CONNECTION_AGE: Duration = Duration::from_secs(3600);
const MEMBER_CONNECTION_GRACE: Duration = Duration::from_secs(30);

/// On SIGHUP, reads the cluster secrets again from the configuration (and their files): how a
/// secret is rotated without a restart (`docs/security.md`). A configuration that does not load
/// changes nothing, and says why.
async fn reload_secrets_on_hangup(path: std::path::PathBuf, secrets: Secrets) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else { return };
    while hangups.recv().await.is_some() {
        let read = tokio::task::spawn_blocking({
            let path = path.clone();
            move || NodeConfig::reread_secrets(&path)
        })
        .await;
        match read {
            Ok(Ok((current, next))) => {
                secrets.replace(current.as_ref(), next.as_ref());
                tracing::info!(next = next.is_some(), "SIGHUP: cluster secrets read again");
            }
            Ok(Err(e)) => tracing::error!(error = %e, "SIGHUP: the configuration does not load; the secrets stay"),
            Err(e) => tracing::error!(error = %e, "SIGHUP: reading the configuration failed"),
        }
    }
}

/// Waits for a server's task to finish until `until`, then aborts it.
async fn drain<T>(task: tokio::task::JoinHandle<T>, until: tokio::time::Instant) {
    let abort = task.abort_handle();
    if tokio::time::timeout_at(until, task).await.is_err() {
        abort.abort();
    }
}

type ServerTask = tokio::task::JoinHandle<Result<(), tonic::transport::Error>>;

/// Inside a simulation: the raft, client and admin routers, each served on its simulated
/// listener until `stop` turns true.
async fn serve_simulated(
    routers: [(tonic::transport::server::Router, std::net::SocketAddr); 3],
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<(ServerTask, ServerTask, ServerTask), NodeError> {
    #[cfg(feature = "sim")]
    {
        let mut tasks = Vec::with_capacity(3);
        for (router, addr) in routers {
            let listener = crate::simulation::listen(addr).await.map_err(|source| NodeError::Bind {
                setting: "simulated listener",
                addr,
                source,
            })?;
            let mut stop = stop.clone();
            let stopped = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            tasks.push(tokio::spawn(
                router.serve_with_incoming_shutdown(crate::simulation::incoming(listener), stopped),
            ));
        }
        let [raft, client, admin]: [ServerTask; 3] = tasks.try_into().expect("three listeners");
        Ok((raft, client, admin))
    }
    #[cfg(not(feature = "sim"))]
    {
        let _ = (routers, stop);
        unreachable!("a simulation runs only in builds with the `sim` feature")
    }
}

/// A listener's socket at `addr`.
fn bind(addr: std::net::SocketAddr) -> std::io::Result<tonic::transport::server::TcpIncoming> {
    tonic::transport::server::TcpIncoming::bind(addr).map(|incoming| incoming.with_nodelay(Some(true)))
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
async fn hand_over_leadership(cluster: &Cluster) {
    let group = cluster.group();
    let status = group.status();
    if !status.is_leader() {
        return;
    }
    let me = status.id;
    let target = status.replication.iter().filter(|(id, _)| **id != me).max_by_key(|(_, m)| m.map(|(index, _)| index));
    let Some((&target, _)) = target else { return };
    if group.transfer_leader(target).await.is_err() {
        return;
    }
    // Until the new leader is known here, not merely until this node stepped down: clients
    // redirected right after the exit must find it.
    let _ = group.wait_leader(Duration::from_secs(3), move |l| l.is_some_and(|l| l != me)).await;
}
