//! The RocketMQ proxy endpoint: `apache.rocketmq.v2.MessagingService` as the official clients use
//! it. Every node serves it; what needs the leader goes through [`Cluster`], which forwards.
//!
//! - `route`: QueryRoute and QueryAssignment, spread over the live members (`members`);
//!   `send`: SendMessage checks and batching;
//!   `telemetry`: the settings handshake; `status`: error → RocketMQ status code;
//! - `receive`: the POP long poll; `ack`: ack, invisible time, dead letters; `receipt`: handles.

mod ack;
mod client_ids;
mod lite;
mod members;
mod poll_slots;
mod receipt;
mod receive;
pub mod renew;
mod route;
mod send;
pub use send::queue_for;
mod status;
mod telemetry;
mod transaction;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use rockraft_proto::rocketmq::messaging_service_server::MessagingService;
use rockraft_proto::rocketmq::*;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::handles::HandleKeys;
use crate::auth::{Caller, Denied};
use crate::broker::Broker;
use crate::broker::Held;
use crate::broker::access::{Action, ResourceKind};
use crate::broker::lite::{LiteCommand, LiteOutcome};
use crate::broker::timer::recall_handle;
use crate::broker::transaction::transaction_id;
use crate::cluster::{Cluster, Groups};
use crate::metrics::Meters;
use crate::plugin::PluginHost;
use crate::sessions::ProducerSessions;
use status::{Rejection, ok, write_failed};

/// What the proxy needs of the node's configuration.
pub struct ProxyOptions {
    /// The group's name: routes name each member's broker `<group>-<node id>`.
    pub group: String,
    pub max_body_bytes: u64,
    pub max_properties_bytes: u64,
    pub max_delay: std::time::Duration,
    pub transaction_recovery: std::time::Duration,
    /// Where clients reach this node (`advertised_client_addr`), for routes while the
    /// membership does not list it.
    pub advertised_client_addr: String,
    pub limits: crate::admin::LimitsConfig,
    /// Finds a stream's caller again while it lives (`telemetry`).
    pub authenticator: Arc<crate::auth::Authenticator>,
}

/// The node's parts the proxy serves clients with, besides the cluster.
pub struct ProxyParts {
    pub broker: Broker,
    pub plugins: Arc<PluginHost>,
    pub meters: Meters,
    pub sessions: Arc<ProducerSessions>,
}

pub struct Proxy {
    /// The groups this node runs: each queue's messages are in the group its topic names.
    groups: Groups,
    /// The group holding the metadata.
    cluster: Cluster,
    /// This node's replica of the metadata (that group's state), which requests are
    /// checked against.
    broker: Broker,
    plugins: Arc<PluginHost>,
    meters: Meters,
    /// The producers whose Telemetry streams this node holds.
    sessions: Arc<ProducerSessions>,
    options: ProxyOptions,
    round_robin: AtomicU32,
    renewals: Arc<renew::Renewals>,
    live: members::LiveMembers,
    polls: poll_slots::PollSlots,
    client_ids: client_ids::ClientIds,
}

pub(crate) use crate::sessions::timestamp;

impl Proxy {
    /// `renewals` is shared with the job that renews what it holds.
    pub fn new(groups: Groups, parts: ProxyParts, options: ProxyOptions, renewals: Arc<renew::Renewals>) -> Proxy {
        let l = &options.limits;
        let polls =
            poll_slots::PollSlots::new(l.max_long_polls, l.max_long_polls_per_client, l.max_long_polls_per_user);
        let client_ids = client_ids::ClientIds::new(l.max_client_ids, l.max_client_ids_per_user);
        let ProxyParts { broker, plugins, meters, sessions } = parts;
        Proxy {
            cluster: groups.metadata().clone(),
            groups,
            broker,
            plugins,
            meters,
            sessions,
            options,
            round_robin: AtomicU32::new(0),
            renewals,
            live: members::LiveMembers::default(),
            polls,
            client_ids,
        }
    }

    /// The data groups the queues are in.
    pub(crate) fn groups(&self) -> &Groups {
        &self.groups
    }

    /// This node's replica of the metadata.
    pub(crate) fn metadata(&self) -> &Broker {
        &self.broker
    }

    pub(crate) fn plugins(&self) -> &Arc<PluginHost> {
        &self.plugins
    }

    pub(crate) fn meters(&self) -> &Meters {
        &self.meters
    }

    /// The producers this node holds, which the leader asks about open transactions.
    pub(crate) fn sessions(&self) -> &Arc<ProducerSessions> {
        &self.sessions
    }

    pub(crate) fn max_body_bytes(&self) -> u64 {
        self.options.max_body_bytes
    }

    /// The members routes lead clients to, by id (see `members`, `route`).
    async fn live_members(&self) -> Vec<route::RouteMember> {
        self.live.get(&self.cluster, &self.options.advertised_client_addr).await
    }

    /// The topic's configuration. A topic unknown here may have been created a moment ago, and
    /// this node may not have applied that yet: it catches up to the leader before saying no.
    pub(crate) async fn topic(&self, name: &str) -> Option<crate::broker::TopicConfig> {
        if let Some(t) = self.broker.topic(name) {
            return Some(t);
        }
        if let Err(e) = self.cluster.catch_up().await {
            tracing::debug!(error = %e, "could not catch up before answering topic-not-found");
        }
        self.broker.topic(name)
    }

    /// Waits a moment, if need be, until this node's replica of `group` holds `topic` and the
    /// consumer group `consumers` (both in the metadata already): a data group's leader places
    /// each metadata change as its replica of the metadata applies it, so one created a moment
    /// ago may not be there yet. Bounded; a request that still finds nothing is answered so. A
    /// group this node holds no replica of is not waited for: its leader answers.
    async fn placed(&self, group: &Cluster, topic: &str, consumers: &str) {
        if !group.holds_replica() {
            return;
        }
        let deadline = tokio::time::Instant::now() + MAX_PLACEMENT_WAIT;
        let mut pause = PLACEMENT_RETRY;
        let broker = group.broker();
        while (broker.topic(topic).is_none() || broker.group(consumers).is_none())
            && tokio::time::Instant::now() + pause < deadline
        {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PLACEMENT_RETRY);
        }
    }

    /// How a route lays `topic`'s queues over the members: at the leader of the group holding
    /// each, for a topic spread over data groups (sends then go straight to it); else spread
    /// from `start`, as any member forwards to the one group's leader.
    fn layout(&self, topic: Option<&crate::broker::TopicConfig>, start: usize) -> route::Layout {
        let Some(t) = topic.filter(|t| !t.groups.is_empty()) else {
            return route::Layout::Spread { start };
        };
        // Where the groups are placed on some members only, which hold each queue.
        let voters = self.groups.metadata().group().next_voters();
        let holders = match voters.len() >= crate::cluster::replica_set::SPREAD_FROM {
            true => (0..t.queues)
                .map(|q| crate::cluster::replica_set::replica_set(crate::raft::GroupId(t.group_of(q)), &voters))
                .collect(),
            false => Vec::new(),
        };
        route::Layout::Leaders {
            start,
            leaders: (0..t.queues)
                .map(|q| self.groups.of_queue(t, q).ok().and_then(|g| g.leader()).map(|(id, _)| id))
                .collect(),
            holders,
        }
    }

    /// `topic` if it exists, else the empty name: metrics label only what the cluster holds.
    fn known_topic<'a>(&self, topic: &'a str) -> &'a str {
        if self.broker.topic(topic).is_some() { topic } else { "" }
    }

    /// `deadline`: how long the client waits (`grpc-timeout`); a send held through an election
    /// is answered before then, and within 2 s of its arrival at most. `sender`: the caller's
    /// access key, "" with authentication off.
    pub(crate) async fn send(
        &self,
        req: SendMessageRequest,
        namespace: &str,
        sender: &str,
        deadline: Option<Duration>,
    ) -> SendMessageResponse {
        self.send_placed(req, namespace, sender, deadline).await.0
    }

    /// [`Self::send`], with the queue each message was stored in (by request position; `None`
    /// for one not stored): the Remoting answer names it, and the queue may not be the one the
    /// client named (`send::queue_for`).
    pub(crate) async fn send_placed(
        &self,
        req: SendMessageRequest,
        namespace: &str,
        sender: &str,
        deadline: Option<Duration>,
    ) -> (SendMessageResponse, Vec<Option<u32>>) {
        let arrived = tokio::time::Instant::now();
        let hold = send::hold(deadline);
        let limits = send::Limits {
            max_body_bytes: self.options.max_body_bytes,
            max_properties_bytes: self.options.max_properties_bytes,
            max_delay_ms: self.options.max_delay.as_millis() as i64,
            now_ms: crate::cluster::now_ms(),
            transaction_recovery_ms: self.options.transaction_recovery.as_millis() as i64,
        };
        // A send carries one topic; resolve it first (catching up if needed) so `plan` stays plain.
        let known = match req.messages.first().and_then(|m| m.topic.as_ref()) {
            Some(r) => self.topic(&send::topic_name(r, namespace)).await,
            None => None,
        };
        let messages = req.messages.len();
        let plan = match send::plan(
            req,
            namespace,
            sender,
            |t| known.clone().filter(|k| k.name == t),
            &limits,
            |n| self.round_robin.fetch_add(1, Ordering::Relaxed) % n,
        ) {
            Ok(p) => p,
            Err(Rejection(s)) => return (SendMessageResponse { status: Some(s), entries: vec![] }, vec![]),
        };
        // A send that is handed a transaction id or recall handle needs a key before anything is
        // stored, so a refused one stores nothing.
        let keys = match known.as_ref().map(|k| k.kind) {
            Some(crate::broker::TopicKind::Transaction | crate::broker::TopicKind::Delay) => {
                match self.handle_keys(&[]).await {
                    Ok(k) => Some(k),
                    Err(s) => return (SendMessageResponse { status: Some(s), entries: vec![] }, vec![]),
                }
            }
            _ => None,
        };
        let mut batches = plan.batches;
        let topic_config = known.as_ref();
        // The hold counts from the send's arrival: the topic's lookup may have waited to catch up.
        let hold = hold.saturating_sub(arrived.elapsed());
        let results = if batches.len() == 1 {
            // The common case (one queue): no join over one future.
            let (positions, batch) = batches.pop().expect("one batch");
            vec![(positions, self.send_batch(topic_config, batch, hold).await)]
        } else {
            let writes = batches
                .into_iter()
                .map(|(positions, batch)| async move { (positions, self.send_batch(topic_config, batch, hold).await) });
            futures_util::future::join_all(writes).await
        };
        let mut entries = vec![SendResultEntry::default(); messages];
        let mut queues = vec![None; messages];
        let topic = known.as_ref().map(|k| k.name.as_str()).unwrap_or_default();
        let mut first_error: Option<rockraft_proto::rocketmq::Status> = None;
        // `here`: the partition that stored them, which transaction ids and recall handles name.
        for (positions, (here, result)) in results {
            let outcome = match result {
                Ok(Ok(outcomes)) if outcomes.len() == positions.len() => Ok(outcomes),
                Ok(Ok(outcomes)) => Err(status::status(
                    Code::InternalServerError,
                    format!("{} outcomes for a send of {} messages", outcomes.len(), positions.len()),
                )),
                Ok(Err(refusal)) => Err(status::refused(&refusal)),
                Err(e) => Err(write_failed(&e, positions.len())),
            };
            match outcome {
                Ok(outcomes) => {
                    for (pos, o) in positions.into_iter().zip(outcomes) {
                        // Only topics that hold messages hold them, and those have `keys`.
                        let (transaction_id, recall_handle) = match (o.held, &keys) {
                            (Some(Held::Half { position }), Some(keys)) => {
                                (keys.seal(&transaction_id(here, position), &[topic, &o.message_id]), String::new())
                            }
                            (Some(Held::Timer { due_ms, position }), Some(keys)) => {
                                (String::new(), keys.seal(&recall_handle(here, due_ms, position), &[topic]))
                            }
                            _ => (String::new(), String::new()),
                        };
                        queues[pos] = Some(o.queue_id);
                        entries[pos] = SendResultEntry {
                            status: Some(ok()),
                            message_id: o.message_id,
                            transaction_id,
                            offset: o.offset as i64,
                            recall_handle,
                        };
                    }
                }
                Err(s) => {
                    for pos in positions {
                        let id = plan.message_ids.get(pos).cloned().unwrap_or_default();
                        entries[pos] =
                            SendResultEntry { status: Some(s.clone()), message_id: id, ..Default::default() };
                    }
                    first_error.get_or_insert(s);
                }
            }
        }
        (SendMessageResponse { status: Some(first_error.unwrap_or_else(ok)), entries }, queues)
    }

    /// Stores `batch` in the group holding its queue, and names that group's partition. A group
    /// that has not placed a topic created a moment ago yet (its leader places each metadata
    /// change as its replica of the metadata applies it) answers topic-not-found and stores
    /// nothing: the send is tried again, with back-off, within its hold.
    async fn send_batch(
        &self,
        topic: Option<&crate::broker::TopicConfig>,
        batch: rockraft_proto::rockraft::SendBatch,
        hold: Duration,
    ) -> (crate::broker::position::PartitionId, SendResult) {
        let mut cluster = match topic.map(|t| self.groups.of_queue(t, batch.queue_id)) {
            Some(Ok(cluster)) => cluster,
            Some(Err(e)) => return (self.broker.partition(), Err(e)),
            // Unknown also once this node caught up with the metadata: no group holds it.
            None => {
                let refusal = crate::broker::Refusal::TopicNotFound(batch.topic.clone());
                return (self.broker.partition(), Ok(Err(refusal)));
            }
        };
        let deadline = tokio::time::Instant::now() + hold;
        let mut pause = PLACEMENT_RETRY;
        loop {
            let here = cluster.broker().partition();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let result = cluster.send(batch.clone(), left).await;
            let unplaced = matches!(&result, Ok(Err(crate::broker::Refusal::TopicNotFound(_))))
                && !cluster.broker().holds_metadata()
                && self.broker.topic(&batch.topic).is_some();
            if !unplaced || tokio::time::Instant::now() + pause >= deadline {
                return (here, result);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PLACEMENT_RETRY);
            // The group may also have refused a queue the metadata has placed elsewhere since
            // (a topic created again): routed again by the metadata as this node has it now.
            if let Some(Ok(now)) = self.broker.topic(&batch.topic).map(|t| self.groups.of_queue(&t, batch.queue_id)) {
                cluster = now;
            }
        }
    }
}

/// What storing one batch came to.
type SendResult = Result<Result<Vec<crate::broker::SendOutcome>, crate::broker::Refusal>, crate::cluster::ClusterError>;

/// Pause before sending again to a group that has not placed the topic yet, doubled up to
/// [`MAX_PLACEMENT_RETRY`].
const PLACEMENT_RETRY: Duration = Duration::from_millis(10);
const MAX_PLACEMENT_RETRY: Duration = Duration::from_millis(200);
/// The longest a request waits for a data group to place a topic created a moment ago.
const MAX_PLACEMENT_WAIT: Duration = Duration::from_secs(3);

/// What a request needs to be allowed: the caller may do each action on each named resource.
pub(crate) type Needs<'a> = &'a [(Action, ResourceKind, &'a str)];

impl Proxy {
    /// The handle keys to seal new handles with (`sealed` empty) or to open `sealed` with. A node
    /// that has applied no key yet, or not the key a handle names, catches up with the leader
    /// first (a cluster initialised a moment ago, a key rotated a moment ago); with still no key,
    /// the request is refused with a status the clients retry, and nothing is handed out
    /// unsealed or accepted unsealed.
    async fn handle_keys(&self, sealed: &[&str]) -> Result<HandleKeys, rockraft_proto::rocketmq::Status> {
        let named = sealed.iter().filter_map(|h| HandleKeys::key_id(h)).max();
        let current =
            |keys: &Option<HandleKeys>| keys.as_ref().is_some_and(|k| named.is_none_or(|id| id <= k.newest()));
        let keys = self.broker.access(HandleKeys::of);
        if current(&keys) {
            return keys.ok_or_else(status::no_handle_key);
        }
        if let Err(e) = self.cluster.catch_up().await {
            tracing::debug!(error = %e, "could not catch up before judging a handle");
        }
        self.broker.access(HandleKeys::of).ok_or_else(status::no_handle_key)
    }

    /// `None` if the request's caller may do everything `needs` names; else the refusal
    /// (UNAUTHORIZED: not authenticated; FORBIDDEN: not allowed), and the request changes nothing.
    fn refused<T>(&self, req: &Request<T>, needs: Needs<'_>) -> Option<rockraft_proto::rocketmq::Status> {
        self.refused_caller(&Caller::of(req), needs)
    }

    /// [`Self::refused`] for a caller another front end identified (Remoting).
    pub(crate) fn refused_caller(&self, caller: &Caller, needs: Needs<'_>) -> Option<rockraft_proto::rocketmq::Status> {
        let check = || -> Result<(), Denied> {
            caller.authenticated()?;
            for (action, kind, name) in needs {
                caller.may(&self.broker, *action, *kind, name)?;
            }
            Ok(())
        };
        match check() {
            Ok(()) => None,
            Err(Denied::Unauthenticated(why)) => Some(status::status(Code::Unauthorized, why)),
            Err(Denied::Forbidden(why)) => Some(status::status(Code::Forbidden, why)),
        }
    }
}

impl Proxy {
    /// The request's client id (`x-mq-client-id`), for a call that acts on that client's state:
    /// refused BAD_REQUEST unless it is a plausible id (it is kept in tables, and replicated with
    /// lite subscriptions), FORBIDDEN if it belongs to another user (see `client_ids`).
    fn own_client<T>(&self, req: &Request<T>) -> Result<String, rockraft_proto::rocketmq::Status> {
        let client = client_id(req);
        check_client_id(&client).map_err(|why| status::status(Code::BadRequest, why.to_string()))?;
        self.client_ids.claim(&Caller::of(req), &client).map_err(|Rejection(s)| s)?;
        Ok(client)
    }
}

/// What consuming needs: Sub on the topic and on the group.
fn subscribe<'a>(topic: &'a str, group: &'a str) -> [(Action, ResourceKind, &'a str); 2] {
    [(Action::Sub, ResourceKind::Topic, topic), (Action::Sub, ResourceKind::Group, group)]
}

fn resource_name(r: &Option<Resource>, ns: &str) -> String {
    r.as_ref().map(|r| send::topic_name(r, ns)).unwrap_or_default()
}

/// The namespace of a request: the `x-mq-namespace` header, if any.
fn client_id<T>(req: &Request<T>) -> String {
    req.metadata().get("x-mq-client-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

/// The longest client id taken: the official clients' (host, process, counters, a time) are well
/// under 100 bytes.
pub const MAX_CLIENT_ID_BYTES: usize = 256;

/// Why a client id is not taken.
#[derive(Debug, thiserror::Error)]
enum InvalidClientId {
    #[error("x-mq-client-id has {0} bytes; at most {MAX_CLIENT_ID_BYTES} are taken")]
    TooLong(usize),
    #[error("x-mq-client-id must be printable ASCII without spaces")]
    NotPrintable,
}

/// A client id is printable ASCII without spaces, of at most [`MAX_CLIENT_ID_BYTES`] (an absent
/// one is each call's own business).
fn check_client_id(id: &str) -> Result<(), InvalidClientId> {
    if id.len() > MAX_CLIENT_ID_BYTES {
        return Err(InvalidClientId::TooLong(id.len()));
    }
    if !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(InvalidClientId::NotPrintable);
    }
    Ok(())
}

/// Whether the caller is the official client of `language` (its `x-mq-language` header).
fn language_is<T>(req: &Request<T>, language: &str) -> bool {
    let header = req.metadata().get("x-mq-language").and_then(|v| v.to_str().ok());
    header.is_some_and(|l| l.eq_ignore_ascii_case(language))
}

/// Whether the caller is the official Rust client, which is given back the endpoints it asked
/// with (see `route`).
fn rust_client<T>(req: &Request<T>) -> bool {
    language_is(req, "RUST")
}

fn namespace<T>(req: &Request<T>) -> String {
    req.metadata().get("x-mq-namespace").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

/// The client's deadline for this call, from the `grpc-timeout` header (`<digits><unit>`).
fn grpc_timeout<T>(req: &Request<T>) -> Option<Duration> {
    let v = req.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn not_yet<T>(what: &str) -> Result<T, Status> {
    Err(Status::unimplemented(format!("{what} is not supported yet")))
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl MessagingService for Proxy {
    async fn query_route(&self, req: Request<QueryRouteRequest>) -> Result<Response<QueryRouteResponse>, Status> {
        let ns = namespace(&req);
        let rust = rust_client(&req);
        // Producers and consumers both ask for routes: either right will do.
        let topic = resource_name(&req.get_ref().topic, &ns);
        if let Some(s) = self.refused(&req, &[(Action::Pub, ResourceKind::Topic, &topic)])
            && let Some(s) = self.refused(&req, &[(Action::Sub, ResourceKind::Topic, &topic)]).map(|_| s)
        {
            return Ok(Response::new(QueryRouteResponse { status: Some(s), message_queues: vec![] }));
        }
        let req = req.into_inner();
        let config = match &req.topic {
            Some(r) => self.topic(&send::topic_name(r, &ns)).await,
            None => None,
        };
        // No need to ask the leader about members for a route that is refused anyway.
        let members = if config.is_some() { self.live_members().await } else { Vec::new() };
        let layout = match rust {
            true => route::Layout::Echo,
            false => self.layout(config.as_ref(), route::start_at(&members, self.cluster.id())),
        };
        let reply = route::route(&req, config, &self.options.group, &members, layout).unwrap_or_else(|Rejection(s)| {
            tracing::debug!(code = s.code, message = %s.message, "QueryRoute refused");
            QueryRouteResponse { status: Some(s), message_queues: vec![] }
        });
        Ok(Response::new(reply))
    }

    async fn heartbeat(&self, req: Request<HeartbeatRequest>) -> Result<Response<HeartbeatResponse>, Status> {
        if let Some(s) = self.refused(&req, &[]) {
            return Ok(Response::new(HeartbeatResponse { status: Some(s) }));
        }
        let client = match self.own_client(&req) {
            Ok(client) => client,
            Err(s) => return Ok(Response::new(HeartbeatResponse { status: Some(s) })),
        };
        self.renewals.seen(&client);
        Ok(Response::new(HeartbeatResponse { status: Some(ok()) }))
    }

    async fn send_message(&self, req: Request<SendMessageRequest>) -> Result<Response<SendMessageResponse>, Status> {
        let (ns, deadline) = (namespace(&req), grpc_timeout(&req));
        let topics: std::collections::BTreeSet<String> =
            req.get_ref().messages.iter().map(|m| resource_name(&m.topic, &ns)).collect();
        let needs: Vec<_> = topics.iter().map(|t| (Action::Pub, ResourceKind::Topic, t.as_str())).collect();
        let messages = req.get_ref().messages.len() as u64;
        let reply = match self.refused(&req, &needs) {
            Some(s) => SendMessageResponse { status: Some(s), entries: vec![] },
            None => {
                let python = language_is(&req, "PYTHON");
                let sender = match Caller::of(&req) {
                    Caller::User { access_key, .. } => access_key,
                    _ => "".into(),
                };
                let mut req = req.into_inner();
                if python {
                    send::forget_python_queue_ids(&mut req);
                }
                self.send(req, &ns, &sender, deadline).await
            }
        };
        let topic = self.known_topic(topics.first().map_or("", String::as_str));
        let codes = match reply.entries.is_empty() {
            true => vec![(code_of(&reply.status), messages)],
            false => tally(reply.entries.iter().map(|e| code_of(&e.status))),
        };
        codes.into_iter().for_each(|(code, n)| self.meters.sent(topic, code, n));
        Ok(Response::new(reply))
    }

    async fn query_assignment(
        &self,
        req: Request<QueryAssignmentRequest>,
    ) -> Result<Response<QueryAssignmentResponse>, Status> {
        let ns = namespace(&req);
        let (topic, group) = (resource_name(&req.get_ref().topic, &ns), resource_name(&req.get_ref().group, &ns));
        if let Some(s) = self.refused(&req, &subscribe(&topic, &group)) {
            return Ok(Response::new(QueryAssignmentResponse { status: Some(s), assignments: vec![] }));
        }
        let req = req.into_inner();
        let config = match &req.topic {
            Some(r) => self.topic(&send::topic_name(r, &ns)).await,
            None => None,
        };
        // The same order on every node, whichever member a PushConsumer asks.
        let members = if config.is_some() { self.live_members().await } else { Vec::new() };
        let layout = self.layout(config.as_ref(), 0);
        let reply = route::assignment(&req, config, &self.options.group, &members, layout)
            .unwrap_or_else(|Rejection(s)| QueryAssignmentResponse { status: Some(s), assignments: vec![] });
        Ok(Response::new(reply))
    }

    type ReceiveMessageStream = BoxStream<ReceiveMessageResponse>;

    async fn receive_message(
        &self,
        req: Request<ReceiveMessageRequest>,
    ) -> Result<Response<Self::ReceiveMessageStream>, Status> {
        let ns = namespace(&req);
        let timeout = grpc_timeout(&req);
        let r = req.get_ref();
        let topic = resource_name(&r.message_queue.as_ref().and_then(|q| q.topic.clone()), &ns);
        let group = resource_name(&r.group, &ns);
        let refused = self.refused(&req, &subscribe(&topic, &group));
        let client = match refused {
            Some(s) => Err(s),
            None => self.own_client(&req),
        };
        let responses = match client {
            Err(s) => vec![ReceiveMessageResponse { content: Some(receive_message_response::Content::Status(s)) }],
            Ok(client) => self.receive(req.get_ref(), &ns, timeout, &Caller::of(&req), &client).await,
        };
        let (mut delivered, mut code) = (0, 0);
        for r in &responses {
            match &r.content {
                Some(receive_message_response::Content::Message(_)) => delivered += 1,
                Some(receive_message_response::Content::Status(s)) => code = s.code,
                _ => {}
            }
        }
        let group = if self.broker.group(&group).is_some() { group.as_str() } else { "" };
        self.meters.received(self.known_topic(&topic), group, code, delivered);
        Ok(Response::new(Box::pin(futures_util::stream::iter(responses.into_iter().map(Ok)))))
    }

    async fn ack_message(&self, req: Request<AckMessageRequest>) -> Result<Response<AckMessageResponse>, Status> {
        let ns = namespace(&req);
        let (topic, group) = (resource_name(&req.get_ref().topic, &ns), resource_name(&req.get_ref().group, &ns));
        let reply = match self.refused(&req, &subscribe(&topic, &group)) {
            Some(s) => AckMessageResponse { status: Some(s), entries: vec![] },
            None => self.ack(req.get_ref(), &ns).await,
        };
        let topic = self.known_topic(&topic);
        let codes = match reply.entries.is_empty() {
            true => vec![(code_of(&reply.status), 1)],
            false => tally(reply.entries.iter().map(|e| code_of(&e.status))),
        };
        codes.into_iter().for_each(|(code, n)| self.meters.acked(topic, code, n));
        Ok(Response::new(reply))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        req: Request<ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<ForwardMessageToDeadLetterQueueResponse>, Status> {
        let ns = namespace(&req);
        let (topic, group) = (resource_name(&req.get_ref().topic, &ns), resource_name(&req.get_ref().group, &ns));
        if let Some(s) = self.refused(&req, &subscribe(&topic, &group)) {
            return Ok(Response::new(ForwardMessageToDeadLetterQueueResponse { status: Some(s) }));
        }
        let status = self.forward_to_dead_letters(req.get_ref(), &ns).await;
        Ok(Response::new(ForwardMessageToDeadLetterQueueResponse { status: Some(status) }))
    }

    type PullMessageStream = BoxStream<PullMessageResponse>;

    async fn pull_message(&self, _: Request<PullMessageRequest>) -> Result<Response<Self::PullMessageStream>, Status> {
        not_yet("PullMessage")
    }

    async fn update_offset(&self, _: Request<UpdateOffsetRequest>) -> Result<Response<UpdateOffsetResponse>, Status> {
        not_yet("UpdateOffset")
    }

    async fn get_offset(&self, _: Request<GetOffsetRequest>) -> Result<Response<GetOffsetResponse>, Status> {
        not_yet("GetOffset")
    }

    async fn query_offset(&self, _: Request<QueryOffsetRequest>) -> Result<Response<QueryOffsetResponse>, Status> {
        not_yet("QueryOffset")
    }

    async fn end_transaction(
        &self,
        req: Request<EndTransactionRequest>,
    ) -> Result<Response<EndTransactionResponse>, Status> {
        let ns = namespace(&req);
        let topic = resource_name(&req.get_ref().topic, &ns);
        if let Some(s) = self.refused(&req, &[(Action::Pub, ResourceKind::Topic, &topic)]) {
            return Ok(Response::new(EndTransactionResponse { status: Some(s) }));
        }
        let status = self.end_transaction(req.get_ref(), &ns).await;
        Ok(Response::new(EndTransactionResponse { status: Some(status) }))
    }

    type TelemetryStream = BoxStream<TelemetryCommand>;

    async fn telemetry(
        &self,
        req: Request<Streaming<TelemetryCommand>>,
    ) -> Result<Response<Self::TelemetryStream>, Status> {
        let ns = namespace(&req);
        // Kept for the stream's life: its caller is found again for each command and each ask.
        let pin = self.options.authenticator.pin(req.metadata());
        let commands = telemetry::serve(
            req.into_inner(),
            self.broker.clone(),
            Arc::clone(&self.sessions),
            self.options.max_body_bytes,
            ns,
            pin,
        );
        Ok(Response::new(Box::pin(commands.map(Ok))))
    }

    async fn notify_client_termination(
        &self,
        req: Request<NotifyClientTerminationRequest>,
    ) -> Result<Response<NotifyClientTerminationResponse>, Status> {
        if let Some(s) = self.refused(&req, &[]) {
            return Ok(Response::new(NotifyClientTerminationResponse { status: Some(s) }));
        }
        let client = match self.own_client(&req) {
            Ok(client) => client,
            Err(s) => return Ok(Response::new(NotifyClientTerminationResponse { status: Some(s) })),
        };
        // A lite consumer's subscriptions end with it (else they would wait for the expiry job).
        // They are replicated, so whose they are is checked at apply: the id being free on this
        // node does not make another user's client this caller's.
        let group = resource_name(&req.get_ref().group, &namespace(&req));
        let bound = self.broker.group(&group).and_then(|g| g.lite).and_then(|l| self.broker.topic(&l.topic));
        if let Some(parent) = bound.filter(|_| !client.is_empty()) {
            let by = lite::actor(&Caller::of(&req));
            // In the group holding the bound topic's lite topics.
            for holder in self.groups.holding(&parent) {
                let command = LiteCommand::Unsubscribe { group: group.clone(), client: client.clone(), by: by.clone() };
                match holder.request(command).await {
                    Ok(Ok(LiteOutcome::NotOwner(why))) => {
                        let s = status::status(Code::Forbidden, why);
                        return Ok(Response::new(NotifyClientTerminationResponse { status: Some(s) }));
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "dropping a terminated client's lite subscriptions failed"),
                }
            }
        }
        self.renewals.client_gone(&client);
        self.client_ids.release(&client);
        Ok(Response::new(NotifyClientTerminationResponse { status: Some(ok()) }))
    }

    async fn change_invisible_duration(
        &self,
        req: Request<ChangeInvisibleDurationRequest>,
    ) -> Result<Response<ChangeInvisibleDurationResponse>, Status> {
        let ns = namespace(&req);
        let (topic, group) = (resource_name(&req.get_ref().topic, &ns), resource_name(&req.get_ref().group, &ns));
        let reply = match self.refused(&req, &subscribe(&topic, &group)) {
            Some(s) => ChangeInvisibleDurationResponse { status: Some(s), receipt_handle: String::new() },
            None => self.change_invisible(req.get_ref(), &ns).await,
        };
        self.meters.invisible_changed(self.known_topic(&topic), code_of(&reply.status));
        Ok(Response::new(reply))
    }

    async fn recall_message(
        &self,
        req: Request<RecallMessageRequest>,
    ) -> Result<Response<RecallMessageResponse>, Status> {
        let ns = namespace(&req);
        let topic = resource_name(&req.get_ref().topic, &ns);
        if let Some(s) = self.refused(&req, &[(Action::Pub, ResourceKind::Topic, &topic)]) {
            return Ok(Response::new(RecallMessageResponse { status: Some(s), message_id: String::new() }));
        }
        Ok(Response::new(self.recall(req.get_ref(), &ns).await))
    }

    async fn sync_lite_subscription(
        &self,
        req: Request<SyncLiteSubscriptionRequest>,
    ) -> Result<Response<SyncLiteSubscriptionResponse>, Status> {
        let ns = namespace(&req);
        let (topic, group) = (resource_name(&req.get_ref().topic, &ns), resource_name(&req.get_ref().group, &ns));
        if let Some(s) = self.refused(&req, &subscribe(&topic, &group)) {
            return Ok(Response::new(SyncLiteSubscriptionResponse { status: Some(s) }));
        }
        let client = match self.own_client(&req) {
            Ok(client) => client,
            Err(s) => return Ok(Response::new(SyncLiteSubscriptionResponse { status: Some(s) })),
        };
        let python = language_is(&req, "PYTHON");
        let by = lite::actor(&Caller::of(&req));
        let mut sync = req.into_inner();
        if python {
            lite::join_python_subscribe(&mut sync);
        }
        let status = self.sync_lite(&sync, &ns, &client, by).await;
        Ok(Response::new(SyncLiteSubscriptionResponse { status: Some(status) }))
    }
}

/// The status code of an answer (0 when it has none).
fn code_of(status: &Option<rockraft_proto::rocketmq::Status>) -> i32 {
    status.as_ref().map_or(0, |s| s.code)
}

/// How many times each code occurs: metrics are counted once per code, not once per message.
fn tally(codes: impl Iterator<Item = i32>) -> Vec<(i32, u64)> {
    let mut out: Vec<(i32, u64)> = Vec::new();
    for code in codes {
        match out.iter_mut().find(|(c, _)| *c == code) {
            Some((_, n)) => *n += 1,
            None => out.push((code, 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_the_official_clients_make_are_taken_and_oversized_or_unprintable_ones_are_not() {
        for taken in ["vm@29774#0", "MacBook-Pro.local@12345@0@1n2k3j4", "", &"a".repeat(MAX_CLIENT_ID_BYTES)] {
            assert!(check_client_id(taken).is_ok(), "{taken}");
        }
        assert!(matches!(check_client_id(&"a".repeat(MAX_CLIENT_ID_BYTES + 1)), Err(InvalidClientId::TooLong(257))));
        for unprintable in ["a b", "tab\there", "nul\0"] {
            assert!(matches!(check_client_id(unprintable), Err(InvalidClientId::NotPrintable)), "{unprintable:?}");
        }
    }
}
