//! `rockraft.v1.AdminService`: the operator's requests (the CLI). Served on both ports; one that
//! needs the leader is passed on to the leader's.

use std::collections::BTreeMap;
use std::sync::Arc;

use rockraft_proto::rockraft as pb;
use rockraft_proto::rockraft::admin_service_client::AdminServiceClient;
use tonic::service::interceptor::InterceptedService;

use crate::auth::signature::SignRequests;

use crate::admin::NodeConfig;
use std::sync::atomic::Ordering::Relaxed;

use crate::admin::api::{
    AclLine, AdminRequest, AdminResponse, BindTarget, GroupInfo, MAX_CHECKSUMMED_RECORDS, MAX_CHECKSUMS, MemberInfo,
    MessageLine, NodeDisk, NodeStatus, PluginInfo, Role, TopicInfo, UserInfo,
};
use crate::broker::access::{AccessCommand, Resource, Rule};
use crate::broker::plugins::{Binding, PluginCommand};
use crate::broker::pop::{ConsumeCommand, ConsumeOutcome};
use crate::broker::transaction::{Resolver, TransactionCommand, TransactionOutcome, parse_transaction_id};
use crate::broker::{AdminCommand, Command, Reply, StoredEntry};
use crate::cluster::Cluster;
use crate::plugin::{ModuleSource, PluginError, PluginKind, blocking, builtin, module_hash};
use crate::raft::NodeInfo;

#[derive(Clone)]
pub struct AdminServer {
    cluster: Cluster,
    config: Arc<NodeConfig>,
}

impl AdminServer {
    pub fn new(cluster: Cluster, config: Arc<NodeConfig>) -> AdminServer {
        AdminServer { cluster, config }
    }
}

fn role(role: crate::raft::Role) -> Role {
    match role {
        crate::raft::Role::Leader => Role::Leader,
        crate::raft::Role::Follower => Role::Follower,
        crate::raft::Role::Candidate => Role::Candidate,
        crate::raft::Role::Learner => Role::Learner,
        crate::raft::Role::ShuttingDown => Role::ShuttingDown,
    }
}

fn line(e: StoredEntry) -> MessageLine {
    MessageLine {
        topic: e.topic,
        queue: e.queue_id,
        offset: e.offset,
        message_id: e.message.message_id,
        tag: e.message.tag,
        keys: e.message.keys,
        body_len: e.message.body.len(),
        store_timestamp_ms: e.store_timestamp_ms,
    }
}

/// How long `cluster init` waits for the first handle key (an election and one entry).
const INIT_KEY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The most lite topics one listing returns (it is paged by name).
const MAX_LITE_LISTING: usize = 10_000;

fn reply_text(reply: Reply) -> AdminResponse {
    match reply {
        Reply::Applied => AdminResponse::Done("ok".into()),
        Reply::TopicNotFound(t) => AdminResponse::Error(format!("topic {t} does not exist")),
        Reply::TopicExists(t) => AdminResponse::Error(format!("topic {t} already exists with another configuration")),
        Reply::Rejected(why) => AdminResponse::Error(why),
        Reply::Sent(_) => AdminResponse::Done("sent".into()),
        Reply::Consume(ConsumeOutcome::GroupExists(g)) => {
            AdminResponse::Error(format!("group {g} already exists with another configuration"))
        }
        Reply::Consume(ConsumeOutcome::GroupNotFound(g)) => AdminResponse::Error(format!("group {g} does not exist")),
        Reply::Consume(ConsumeOutcome::TopicNotFound(t)) => AdminResponse::Error(format!("topic {t} does not exist")),
        Reply::Consume(ConsumeOutcome::Invalid(why)) => AdminResponse::Error(why),
        Reply::Consume(_) => AdminResponse::Done("ok".into()),
        Reply::Timer(outcome) => AdminResponse::Done(format!("{outcome:?}")),
        Reply::Transaction(TransactionOutcome::Done) => AdminResponse::Done("ok".into()),
        Reply::Lite(outcome) => AdminResponse::Done(format!("{outcome:?}")),
        Reply::Transaction(TransactionOutcome::Unknown) => AdminResponse::Error("no such transaction".into()),
        Reply::Transaction(TransactionOutcome::Conflict(state)) => {
            AdminResponse::Error(format!("the transaction was already resolved: {state:?}"))
        }
    }
}

/// An admin's access key and secret, which the CLI signs its requests with as the official
/// clients sign theirs.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub access_key: String,
    pub secret: crate::broker::access::Secret,
}

/// How the CLI reaches an admin listener: signed or not, over TLS or not.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    pub credentials: Option<Credentials>,
    /// The CA certificate (PEM) a listener with TLS is verified against; `None`: plain HTTP/2.
    pub tls_ca: Option<std::path::PathBuf>,
}

/// Sends `req` to the admin service at `addr`, unsigned, without TLS.
pub async fn call(addr: &str, req: &AdminRequest) -> Result<AdminResponse, String> {
    call_with(addr, req, &CallOptions::default()).await
}

/// Sends `req` to the admin service at `addr`, signed with `credentials` if given.
pub async fn call_as(
    addr: &str,
    req: &AdminRequest,
    credentials: Option<&Credentials>,
) -> Result<AdminResponse, String> {
    call_with(addr, req, &CallOptions { credentials: credentials.cloned(), tls_ca: None }).await
}

pub async fn call_with(addr: &str, req: &AdminRequest, options: &CallOptions) -> Result<AdminResponse, String> {
    let channel = crate::auth::tls::channel(addr, options.tls_ca.as_deref())?;
    let sign = SignRequests(options.credentials.as_ref().map(|c| (c.access_key.clone(), c.secret.clone())));
    call_on(InterceptedService::new(channel, sign), req).await.map_err(|e| format!("{addr}: {e}"))
}

/// Sends `req` over an existing channel (a plain one, or a member's to another member).
pub async fn call_on<T>(channel: T, req: &AdminRequest) -> Result<AdminResponse, String>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let json = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    let reply = AdminServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .call(pb::Json { json: json.into() })
        .await
        .map_err(|s| match s.message() {
            "" => format!("{:?}", s.code()),
            m => m.to_string(),
        })?;
    serde_json::from_slice(&reply.into_inner().json).map_err(|e| e.to_string())
}

/// How long `AddNode` waits for the new learner to take the log before it gives up.
const LEARNER_CONTACT: std::time::Duration = std::time::Duration::from_secs(60);

/// Waits until the learner `id` has taken part of the log, so it is known to be reachable and to
/// accept this node (with mutual TLS: its certificate names `raft_addr`). openraft's own wait
/// counts a learner that is within 5000 entries as caught up, even one that never answered.
async fn learner_reached(cluster: &Cluster, id: crate::raft::NodeId, raft_addr: &str) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + LEARNER_CONTACT;
    loop {
        let matched = cluster.status().replication.get(&id).copied().flatten();
        if matched.is_some() {
            return Ok(());
        }
        let stays = "it stays a learner: fix it and run add-node again, or remove-node it";
        if !cluster.is_leader() {
            return Err(format!("leadership moved while node {id} was being added; {stays}"));
        }
        if let Some(why) = cluster.refusals().refusing(raft_addr) {
            return Err(format!("node {id} at {raft_addr} refuses this node ({why}); {stays}"));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "node {id} at {raft_addr} has taken no entry within {LEARNER_CONTACT:?} (is it running, reachable, and \
                 does its certificate name that address?); {stays}"
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

impl AdminServer {
    pub async fn handle(&self, req: AdminRequest) -> AdminResponse {
        let cluster = &self.cluster;
        let group = cluster.group();
        let broker = cluster.broker();
        if req.needs_leader() && !cluster.is_leader() {
            return match cluster.leader_channel() {
                Ok(leader) => call_on(leader, &req).await.unwrap_or_else(AdminResponse::Error),
                Err(e) => AdminResponse::Error(format!("{e}; try again")),
            };
        }
        let result: Result<AdminResponse, String> = match req {
            AdminRequest::Status => Ok(AdminResponse::Status(self.status())),
            AdminRequest::Init => self.init().await,
            AdminRequest::AddNode { id, raft_addr, client_addr, admin_addr } => {
                // Routes hand this address to clients: it must be one they can dial.
                if let Err(e) = super::config::check_dialable(&client_addr) {
                    return AdminResponse::Error(format!("client_addr: {e}"));
                }
                let info = NodeInfo { raft_addr: raft_addr.clone(), client_addr, admin_addr };
                let added = match group.add_learner(id, info).await {
                    Err(e) => Err(e.to_string()),
                    Ok(_) => learner_reached(cluster, id, &raft_addr).await,
                };
                match added {
                    Err(e) => Err(e),
                    Ok(()) => {
                        let mut voters = cluster.status().voters();
                        voters.insert(id);
                        group
                            .change_voters(voters)
                            .await
                            .map(|_| AdminResponse::Done(format!("node {id} added")))
                            .map_err(|e| e.to_string())
                    }
                }
            }
            AdminRequest::RemoveNode { id } => {
                let mut voters = cluster.status().voters();
                if !voters.remove(&id) {
                    Err(format!("node {id} is not a voter"))
                } else {
                    group
                        .change_voters(voters)
                        .await
                        .map(|_| AdminResponse::Done(format!("node {id} removed")))
                        .map_err(|e| e.to_string())
                }
            }
            AdminRequest::TransferLeader { to } => group
                .transfer_leader(to)
                .await
                .map(|_| AdminResponse::Done(format!("leadership handed to node {to}")))
                .map_err(|e| e.to_string()),
            AdminRequest::CreateTopic(t) => self.write(Command::Admin(AdminCommand::CreateTopic(t))).await,
            AdminRequest::DeleteTopic { name } => self.write(Command::Admin(AdminCommand::DeleteTopic { name })).await,
            AdminRequest::Configure(change) => self.write(Command::Admin(AdminCommand::Configure(change))).await,
            AdminRequest::Settings => Ok(AdminResponse::Settings(broker.settings())),
            AdminRequest::History => Ok(AdminResponse::History(broker.failovers())),
            AdminRequest::QueueSpans { upto } => {
                let broker = broker.clone();
                match tokio::task::spawn_blocking(move || broker.queue_spans(upto)).await {
                    Ok(spans) => spans.map(AdminResponse::QueueSpans).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
            AdminRequest::QueueChecksums { topic, queue, from, to, chunk } => {
                if to.saturating_sub(from) > MAX_CHECKSUMMED_RECORDS
                    || to.saturating_sub(from).div_ceil(chunk.max(1)) > MAX_CHECKSUMS
                {
                    return AdminResponse::Error(format!(
                        "at most {MAX_CHECKSUMMED_RECORDS} records and {MAX_CHECKSUMS} checksums a request"
                    ));
                }
                let broker = broker.clone();
                let sums = tokio::task::spawn_blocking(move || broker.queue_checksums(&topic, queue, from, to, chunk));
                match sums.await {
                    Ok(sums) => sums.map(AdminResponse::Checksums).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
            AdminRequest::ListLiteTopics { parent, group, from, limit } => {
                let limit = limit.clamp(1, MAX_LITE_LISTING);
                broker
                    .lite_topics(&parent, group.as_deref(), &from, limit)
                    .map(AdminResponse::LiteTopics)
                    .map_err(|e| e.to_string())
            }
            AdminRequest::ListTopics => Ok(AdminResponse::Topics({
                let held = broker.held_counts();
                broker
                    .topics()
                    .into_iter()
                    .map(|config| {
                        let queues = broker
                            .queue_status(&config.name)
                            .into_iter()
                            .map(|q| (q.queue_id, q.start, q.next))
                            .collect();
                        let held = held.iter().find(|(t, _)| *t == config.name).map(|(_, c)| *c).unwrap_or_default();
                        TopicInfo { config, queues, held }
                    })
                    .collect()
            })),
            AdminRequest::CreateUser { access_key, secret, admin } => {
                let put = AccessCommand::PutUser { access_key, secret, admin, create: true };
                self.write(Command::Access(put)).await
            }
            AdminRequest::UpdateUser { access_key, secret, admin } => {
                // On the leader: what is left unchanged is read from the state it writes over.
                match broker.access(|t| t.user(&access_key).cloned()) {
                    None => Err(format!("no user {access_key}")),
                    Some(user) => {
                        let secret = secret.unwrap_or(user.secret);
                        let admin = admin.unwrap_or(user.admin);
                        let put = AccessCommand::PutUser { access_key, secret, admin, create: false };
                        self.write(Command::Access(put)).await
                    }
                }
            }
            AdminRequest::DeleteUser { access_key } => {
                self.write(Command::Access(AccessCommand::DeleteUser { access_key })).await
            }
            AdminRequest::ListUsers => Ok(AdminResponse::Users(broker.access(|t| {
                t.users
                    .iter()
                    .map(|(key, user)| UserInfo {
                        access_key: key.clone(),
                        admin: user.admin,
                        rules: t
                            .rules
                            .range((key.clone(), Resource::FIRST)..)
                            .take_while(|((k, _), _)| k == key)
                            .count(),
                    })
                    .collect()
            }))),
            AdminRequest::Grant { access_key, resource, actions, decision } => match resource.parse::<Resource>() {
                Ok(resource) => {
                    let rule = Rule { actions, decision };
                    self.write(Command::Access(AccessCommand::Grant { access_key, resource, rule })).await
                }
                Err(e) => Err(e),
            },
            AdminRequest::Revoke { access_key, resource } => match resource.parse::<Resource>() {
                Ok(resource) => self.write(Command::Access(AccessCommand::Revoke { access_key, resource })).await,
                Err(e) => Err(e),
            },
            AdminRequest::ListAcl { access_key } => Ok(AdminResponse::Acl(broker.access(|t| {
                t.rules
                    .iter()
                    .filter(|((key, _), _)| access_key.as_ref().is_none_or(|k| k == key))
                    .map(|((key, resource), rule)| AclLine {
                        access_key: key.clone(),
                        resource: resource.to_string(),
                        actions: rule.actions.clone(),
                        decision: rule.decision,
                    })
                    .collect()
            }))),
            AdminRequest::RotateHandleKey => match crate::auth::random_key() {
                Ok(key) => {
                    let key = crate::broker::access::HandleKey::new(key);
                    self.write(Command::Access(AccessCommand::RotateHandleKey { key })).await
                }
                Err(e) => Err(e),
            },
            AdminRequest::CreateGroup(g) => self.write(Command::Consume(ConsumeCommand::CreateGroup(g))).await,
            AdminRequest::DeleteGroup { name } => {
                self.write(Command::Consume(ConsumeCommand::DeleteGroup { name })).await
            }
            AdminRequest::ListGroups => {
                let progress = broker.group_progress();
                Ok(AdminResponse::Groups(
                    broker
                        .groups()
                        .into_iter()
                        .map(|config| GroupInfo {
                            progress: progress.iter().filter(|p| p.group == config.name).cloned().collect(),
                            config,
                        })
                        .collect(),
                ))
            }
            AdminRequest::ResetOffset { group, topic, time_ms } => self.reset_offset(group, topic, time_ms).await,
            AdminRequest::ListMessages { topic, queue, from, limit, .. } => {
                let mut out = Vec::new();
                let (start, end) =
                    broker.queue_status(&topic).get(queue as usize).map_or((0, 0), |q| (q.start, q.next));
                // Purged offsets are skipped, not walked.
                let mut offset = from.max(start);
                let limit = limit.min(crate::admin::typed::MAX_PAGE as u64);
                while offset < end && (out.len() as u64) < limit {
                    match broker.read(&topic, queue, offset) {
                        Ok(Some(e)) => out.push(line(e)),
                        Ok(None) => {}
                        Err(e) => return AdminResponse::Error(e.to_string()),
                    }
                    offset += 1;
                }
                Ok(AdminResponse::Messages(out))
            }
            AdminRequest::Digest => broker
                .digest()
                .map(|(applied, digest)| AdminResponse::Digest(crate::admin::api::StateDigest { applied, digest }))
                .map_err(|e| e.to_string()),
            AdminRequest::GetMessage { id, .. } => match broker.find(&id) {
                Ok(Some(found)) => Ok(AdminResponse::Messages(vec![line(found)])),
                // Not delivered (yet): a pending timer or a half.
                Ok(None) => broker
                    .find_held(&id)
                    .map(|h| AdminResponse::Held(h.into_iter().collect()))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
            AdminRequest::ListHeld { timers, topic, all, after, limit } => broker
                .held(timers, topic.as_deref(), all, after.as_deref(), limit.min(crate::admin::typed::MAX_PAGE))
                .map(AdminResponse::Held)
                .map_err(|e| e.to_string()),
            AdminRequest::ResolveTransaction { message_id, commit } => match broker.find_held(&message_id) {
                Ok(Some(h)) if h.kind == "half" => {
                    let Some(position) = parse_transaction_id(&h.handle) else {
                        return AdminResponse::Error(format!("bad transaction id {}", h.handle));
                    };
                    let command = TransactionCommand::Resolve {
                        now_ms: 0,
                        topic: h.message.topic,
                        position,
                        message_id,
                        commit,
                        by: Resolver::Operator,
                    };
                    self.write(Command::Transaction(command)).await
                }
                Ok(_) => Err(format!("no transactional half with message id {message_id}")),
                Err(e) => Err(e.to_string()),
            },
            AdminRequest::RegisterPlugin { name, kind, module } => self.register_plugin(name, kind, module).await,
            AdminRequest::RemovePlugin { name } => self.write(Command::Plugin(PluginCommand::Remove { name })).await,
            AdminRequest::EnablePlugin { name } => self.write(Command::Plugin(PluginCommand::Enable { name })).await,
            AdminRequest::ListPlugins => Ok(AdminResponse::Plugins(self.list_plugins())),
            AdminRequest::BindPlugin { target, plugin, config } => self.bind_plugin(target, plugin, config).await,
        };
        result.unwrap_or_else(AdminResponse::Error)
    }

    /// Compiles and checks the module here (the leader) before it is replicated: every node then
    /// runs bytes that are known to load.
    async fn register_plugin(&self, name: String, kind: PluginKind, module: Vec<u8>) -> Result<AdminResponse, String> {
        let host = self.cluster.plugins();
        if builtin::module(&name).is_some() {
            return Err(format!("{name} is the name of a built-in plugin"));
        }
        // Checked again when applied; refused here before anything is compiled.
        let max = self.cluster.broker().settings().max_module_bytes;
        if module.len() as u64 > max {
            return Err(format!(
                "a module of {} bytes is over the cluster's max_module_bytes ({max}; `rockraft cluster configure \
                 --max-module-bytes`)",
                module.len()
            ));
        }
        let loaded = blocking(|| host.load(&module, kind)).map_err(|e| e.to_string())?;
        let version = loaded.manifest.version.clone();
        self.write(Command::Plugin(PluginCommand::Register { name, kind, version, now_ms: 0, module })).await
    }

    async fn bind_plugin(
        &self,
        target: BindTarget,
        plugin: Option<String>,
        config: String,
    ) -> Result<AdminResponse, String> {
        let kind = match target {
            BindTarget::Group(_) => PluginKind::Filter,
            BindTarget::Topic(_) => PluginKind::TxChecker,
        };
        let binding = match plugin {
            None => None,
            Some(plugin) => {
                // Read under the broker's lock; compiled (if it is not yet) after it is released.
                let source = {
                    let state = self.cluster.broker().state();
                    ModuleSource::find(&state.plugins, &plugin, kind)
                };
                let source = source.map_err(|e| e.to_string())?;
                let host = self.cluster.plugins();
                let module = blocking(|| host.compiled(&source)).map_err(|e| e.to_string())?;
                blocking(|| module.check_expression(&config))
                    .map_err(|e| format!("plugin {plugin} refuses the configuration {config:?}: {e}"))?;
                Some(Binding { plugin, config })
            }
        };
        let command = match target {
            BindTarget::Group(group) => PluginCommand::BindGroup { group, binding },
            BindTarget::Topic(topic) => PluginCommand::BindTopic { topic, binding },
        };
        self.write(Command::Plugin(command)).await
    }

    pub fn list_plugins(&self) -> Vec<PluginInfo> {
        #[derive(Default)]
        struct Counts {
            calls: u64,
            messages: u64,
            failures: u64,
            fuel: u64,
            busy_ms: u64,
        }
        let host = self.cluster.plugins();
        let state = self.cluster.broker().state();
        let tables = &state.plugins;
        let bound_to = |name: &str| -> Vec<String> {
            let groups =
                tables.group_filters.iter().filter(|(_, b)| b.plugin == name).map(|(g, _)| format!("group {g}"));
            let topics =
                tables.topic_checkers.iter().filter(|(_, b)| b.plugin == name).map(|(t, _)| format!("topic {t}"));
            groups.chain(topics).collect()
        };
        let loaded = host.loaded();
        let counts = |hash: &str, builtin: bool| {
            let m = loaded.iter().find(|m| if builtin { m.hash == format!("builtin:{hash}") } else { m.hash == hash });
            m.map_or(Counts::default(), |m| {
                let c = &m.counters;
                Counts {
                    calls: c.calls.load(Relaxed),
                    messages: c.messages.load(Relaxed),
                    failures: c.failures.load(Relaxed),
                    fuel: c.fuel.load(Relaxed),
                    busy_ms: c.busy_nanos.load(Relaxed) / 1_000_000,
                }
            })
        };
        let mut out = Vec::new();
        for name in builtin::NAMES {
            let (bytes, kind) = builtin::module(name).expect("built-in names resolve");
            let c = counts(name, true);
            out.push(PluginInfo {
                name: name.to_string(),
                kind,
                version: env!("CARGO_PKG_VERSION").to_string(),
                builtin: true,
                size: bytes.len(),
                hash: module_hash(bytes),
                registered_ms: 0,
                bound_to: bound_to(name),
                calls: c.calls,
                messages: c.messages,
                failures: c.failures,
                fuel: c.fuel,
                busy_ms: c.busy_ms,
                quarantined: None,
            });
        }
        for (name, r) in tables.modules.iter() {
            let c = counts(&r.hash, false);
            out.push(PluginInfo {
                name: name.clone(),
                kind: r.kind,
                version: r.version.clone(),
                builtin: false,
                size: r.module.len(),
                hash: r.hash.clone(),
                registered_ms: r.registered_ms,
                bound_to: bound_to(name),
                calls: c.calls,
                messages: c.messages,
                failures: c.failures,
                fuel: c.fuel,
                busy_ms: c.busy_ms,
                quarantined: r.quarantine.as_ref().map(|q| {
                    let why = PluginError::Quarantined {
                        name: name.clone(),
                        failures: q.failures,
                        window_secs: q.window_secs,
                    };
                    why.to_string()
                }),
            });
        }
        out
    }

    /// On the leader, whose state is current: each queue's first offset at or after the time.
    async fn reset_offset(&self, group: String, topic: String, time_ms: i64) -> Result<AdminResponse, String> {
        let broker = self.cluster.broker();
        let config = broker.topic(&topic).ok_or_else(|| format!("topic {topic} does not exist"))?;
        if broker.group(&group).is_none() {
            return Err(format!("group {group} does not exist"));
        }
        let mut positions = Vec::new();
        for q in 0..config.queues {
            positions.push((q, broker.offset_at_time(&topic, q, time_ms).map_err(|e| e.to_string())?));
        }
        let summary = positions.iter().map(|(q, o)| format!("queue {q} → {o}")).collect::<Vec<_>>().join(", ");
        let topic_epoch = broker.topic_epoch(&topic).ok_or_else(|| format!("topic {topic} does not exist"))?;
        let command = Command::Consume(ConsumeCommand::ResetOffset { group, topic, topic_epoch, positions });
        match self.write(command).await? {
            AdminResponse::Done(_) => Ok(AdminResponse::Done(summary)),
            other => Ok(other),
        }
    }

    async fn write(&self, command: Command) -> Result<AdminResponse, String> {
        self.cluster.write(&command).await.map(reply_text).map_err(|e| e.to_string())
    }

    async fn init(&self) -> Result<AdminResponse, String> {
        let config = &self.config;
        if self.cluster.group().is_initialized().await.map_err(|e| e.to_string())? {
            return Ok(AdminResponse::Done("already initialized".into()));
        }
        let members: BTreeMap<u64, NodeInfo> = if config.members.is_empty() {
            BTreeMap::from([(config.node_id, config.node_info())])
        } else {
            config
                .members
                .iter()
                .map(|m| {
                    let info = NodeInfo {
                        raft_addr: m.raft_addr.clone(),
                        client_addr: m.client_addr.clone(),
                        admin_addr: m.admin_addr.clone(),
                    };
                    (m.id, info)
                })
                .collect()
        };
        let n = members.len();
        self.cluster.group().initialize(members).await.map_err(|e| e.to_string())?;
        // The first leader proposes the first handle key; until it is in place no receive or
        // send that is handed a handle is served, so init answers once it is (or says it is not).
        match self.wait_for_handle_key().await {
            true => Ok(AdminResponse::Done(format!("initialized a group of {n}"))),
            false => Ok(AdminResponse::Done(format!(
                "initialized a group of {n}; its first handle key is not in place yet (sends and receives that need one are refused until it is)"
            ))),
        }
    }

    /// Whether this node has applied a handle key, waiting up to [`INIT_KEY_WAIT`] for one.
    async fn wait_for_handle_key(&self) -> bool {
        let deadline = tokio::time::Instant::now() + INIT_KEY_WAIT;
        let mut pause = std::time::Duration::from_millis(10);
        loop {
            if self.cluster.broker().access(|t| !t.handle_keys.is_empty()) {
                return true;
            }
            if tokio::time::Instant::now() + pause > deadline {
                return false;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(500));
        }
    }

    pub fn status(&self) -> NodeStatus {
        let m = self.cluster.status();
        NodeStatus {
            id: m.id,
            role: role(m.role),
            term: m.term,
            leader: m.leader,
            last_log_index: m.last_log_index,
            committed: m.committed,
            applied: m.applied,
            purged: m.purged,
            members: m
                .members
                .iter()
                .map(|n| MemberInfo {
                    id: n.id,
                    raft_addr: n.info.raft_addr.clone(),
                    client_addr: n.info.client_addr.clone(),
                    admin_addr: n.info.admin_addr.clone(),
                    voter: n.voter,
                })
                .collect(),
            clock: self.cluster.clock_report(),
            disk: Box::new(NodeDisk { here: self.cluster.disk_here(), cluster: self.cluster.disk_report() }),
            refused_by: m
                .members
                .iter()
                .filter_map(|n| Some((n.id, self.cluster.refusals().refusing(&n.info.raft_addr)?)))
                .collect(),
        }
    }
}
