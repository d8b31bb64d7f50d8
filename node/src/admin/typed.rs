//! `rockraft.v1.AdminService` as served: each method reads its request, calls its operation
//! (`service.rs` and the family files) and writes its reply. A method only the leader answers
//! is passed on to the leader's raft port by a member that does not lead (`AdminServer::on_leader`). Errors become gRPC
//! statuses in one place (`error::status`).

use rockraft_proto::rockraft as pb;
use rockraft_proto::rockraft::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

use crate::admin::AdminServer;
use crate::admin::api::{BindTarget, MessageLine};
use crate::admin::error::AdminError;
use crate::admin::messages::Found;
use crate::admin::service::{LeaderClient, data_group_of, narrowed, passed_on};
use crate::broker::HeldEntry;
use crate::broker::access::{Action, Decision, Secret};
use crate::broker::group::{DEFAULT_MAX_ATTEMPTS, FULL_PRIORITY, GroupConfig};
use crate::broker::lite::{DEFAULT_LITE_QUOTA, LiteBinding, LiteModel};
use crate::broker::plugins::PluginKind;
use crate::broker::settings::SettingsChange;
use crate::broker::transaction::{HalfState, Resolver};
use crate::broker::{TopicConfig, TopicKind};
use crate::cluster::Cluster;
use crate::raft::NodeInfo;

/// Rows a page holds when the request names no limit, and at most.
const DEFAULT_PAGE: usize = 100;
pub(crate) const MAX_PAGE: usize = 1000;

type Reply<T> = Result<Response<T>, Status>;

/// The rows after `after` by name ("" from the first), at most `limit`, in name order; and the
/// name to continue after ("" when none follow).
pub(crate) fn page_after<T>(rows: Vec<T>, name: impl Fn(&T) -> &str, after: &str, limit: usize) -> (Vec<T>, String) {
    let mut rows: Vec<T> = rows.into_iter().filter(|r| after.is_empty() || name(r) > after).collect();
    rows.sort_by(|a, b| name(a).cmp(name(b)));
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = if more { rows.last().map(|r| name(r).to_string()).unwrap_or_default() } else { String::new() };
    (rows, next)
}

fn page_limit(asked: u32) -> usize {
    match asked as usize {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    }
}

fn done(result: Result<String, AdminError>) -> Reply<pb::AdminDone> {
    Ok(Response::new(pb::AdminDone { message: result? }))
}

fn kind_name(kind: TopicKind) -> String {
    kind.to_string().to_uppercase()
}

fn invalid(e: impl std::fmt::Display) -> Status {
    crate::admin::error::status(AdminError::Invalid(e.to_string()))
}

#[tonic::async_trait]
impl AdminService for AdminServer {
    async fn get_status(&self, req: Request<pb::GetStatusRequest>) -> Reply<pb::NodeStatusReply> {
        Ok(Response::new(self.status_of(req.into_inner().group)?.into()))
    }

    async fn init(&self, _: Request<pb::InitRequest>) -> Reply<pb::AdminDone> {
        done(AdminServer::init(self).await)
    }

    async fn create_topic(&self, req: Request<pb::CreateTopicRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::CreateTopicRequest| {
            let kind: TopicKind = r.kind.to_lowercase().parse().map_err(invalid)?;
            let mut config = TopicConfig::new(r.name, r.queues, kind);
            if let Some(ttl) = r.lite_ttl_minutes {
                config.lite_ttl_minutes = ttl;
            }
            done(AdminServer::create_topic(self, config).await)
        };
        self.on_leader(req, async |mut l, r| l.create_topic(r).await, here).await
    }

    async fn delete_topic(&self, req: Request<pb::DeleteTopicRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::DeleteTopicRequest| done(AdminServer::delete_topic(self, r.name).await);
        self.on_leader(req, async |mut l, r| l.delete_topic(r).await, here).await
    }

    async fn list_topics(&self, req: Request<pb::ListTopicsRequest>) -> Reply<pb::ListTopicsReply> {
        let r = req.into_inner();
        let rows = AdminServer::list_topics(self)
            .await
            .into_iter()
            .map(|t| pb::Topic {
                messages: t.queues.iter().map(|(_, start, next)| next.saturating_sub(*start)).sum(),
                name: t.config.name,
                queues: t.config.queues,
                kind: kind_name(t.config.kind),
                timers: t.held.timers,
                open_halves: t.held.open_halves,
                lite_ttl_minutes: t.config.lite_ttl_minutes,
                groups: t.config.groups.clone(),
                queue_ranges: t
                    .queues
                    .iter()
                    .map(|&(queue, start, next)| pb::QueueRange { queue, start, next })
                    .collect(),
            })
            .collect();
        let (topics, next_after) = page_after(rows, |t: &pb::Topic| &t.name, &r.after, page_limit(r.limit));
        Ok(Response::new(pb::ListTopicsReply { topics, next_after }))
    }

    async fn list_lite_topics(&self, req: Request<pb::ListLiteTopicsRequest>) -> Reply<pb::ListLiteTopicsReply> {
        let here = async |r: pb::ListLiteTopicsRequest| {
            let group = Some(r.group.as_str()).filter(|g| !g.is_empty());
            let (rows, next) = self.lite_topics(&r.parent, group, &r.from, page_limit(r.limit))?;
            let topics = rows
                .into_iter()
                .map(|t| pb::LiteTopic {
                    name: t.lite,
                    messages: t.messages,
                    last_write_ms: t.last_write_ms,
                    backlog: t.backlog,
                    inflight: t.inflight as u64,
                })
                .collect();
            Ok(Response::new(pb::ListLiteTopicsReply { topics, next_from: next.unwrap_or_default() }))
        };
        // Kept by the one data group holding the parent's queues: read where a replica of it is.
        let holder = self.parts.broker.topic(&req.get_ref().parent).and_then(|t| self.data().of_queue(&t, 0).ok());
        match holder.filter(|h| !h.holds_replica()) {
            Some(holder) => self.on_leader_of(&holder, req, async |mut l, r| l.list_lite_topics(r).await, here).await,
            None => here(req.into_inner()).await,
        }
    }

    async fn create_group(&self, req: Request<pb::CreateGroupRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::CreateGroupRequest| {
            let max_attempts = if r.max_attempts == 0 { DEFAULT_MAX_ATTEMPTS } else { r.max_attempts };
            let priority_factor = match r.priority_factor {
                None => FULL_PRIORITY,
                Some(f) => u8::try_from(f)
                    .ok()
                    .filter(|f| *f <= 100)
                    .ok_or_else(|| invalid("priority factor must be 0 to 100"))?,
            };
            let lite = match r.lite_bind_topic.is_empty() {
                true => None,
                false => Some(LiteBinding {
                    topic: r.lite_bind_topic,
                    model: match r.lite_model.as_str() {
                        "" => LiteModel::Shared,
                        m => m.to_lowercase().parse().map_err(invalid)?,
                    },
                    quota: r.lite_quota.unwrap_or(DEFAULT_LITE_QUOTA),
                }),
            };
            let config = GroupConfig { name: r.name, fifo: r.fifo, max_attempts, priority_factor, lite };
            done(AdminServer::create_group(self, config).await)
        };
        self.on_leader(req, async |mut l, r| l.create_group(r).await, here).await
    }

    async fn delete_group(&self, req: Request<pb::DeleteGroupRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::DeleteGroupRequest| done(AdminServer::delete_group(self, r.name).await);
        self.on_leader(req, async |mut l, r| l.delete_group(r).await, here).await
    }

    async fn list_groups(&self, req: Request<pb::ListGroupsRequest>) -> Reply<pb::ListGroupsReply> {
        let r = req.into_inner();
        let rows = AdminServer::list_groups(self)
            .await
            .into_iter()
            .map(|g| pb::Group {
                name: g.config.name,
                fifo: g.config.fifo,
                max_attempts: g.config.max_attempts,
                priority_factor: u32::from(g.config.priority_factor),
                lite_bind_topic: g.config.lite.as_ref().map(|b| b.topic.clone()).unwrap_or_default(),
                lite_model: g.config.lite.as_ref().map(|b| b.model.to_string()).unwrap_or_default(),
                lite_quota: g.config.lite.as_ref().map_or(0, |b| b.quota),
                progress: g
                    .progress
                    .into_iter()
                    .map(|p| pb::GroupLag { topic: p.topic, lag: p.lag, inflight: p.inflight })
                    .collect(),
            })
            .collect();
        let (groups, next_after) = page_after(rows, |g: &pb::Group| &g.name, &r.after, page_limit(r.limit));
        Ok(Response::new(pb::ListGroupsReply { groups, next_after }))
    }

    async fn create_user(&self, req: Request<pb::CreateUserRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::CreateUserRequest| {
            done(AdminServer::create_user(self, r.access_key, Secret::new(r.secret_key), r.admin).await)
        };
        self.on_leader(req, async |mut l, r| l.create_user(r).await, here).await
    }

    async fn update_user(&self, req: Request<pb::UpdateUserRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::UpdateUserRequest| {
            done(AdminServer::update_user(self, r.access_key, r.secret_key.map(Secret::new), r.admin).await)
        };
        self.on_leader(req, async |mut l, r| l.update_user(r).await, here).await
    }

    async fn delete_user(&self, req: Request<pb::DeleteUserRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::DeleteUserRequest| done(AdminServer::delete_user(self, r.access_key).await);
        self.on_leader(req, async |mut l, r| l.delete_user(r).await, here).await
    }

    async fn list_users(&self, req: Request<pb::ListUsersRequest>) -> Reply<pb::ListUsersReply> {
        let r = req.into_inner();
        let rows = AdminServer::list_users(self)
            .into_iter()
            .map(|u| pb::User { access_key: u.access_key, admin: u.admin, rules: u.rules as u32 })
            .collect();
        let (users, next_after) = page_after(rows, |u: &pb::User| &u.access_key, &r.after, page_limit(r.limit));
        Ok(Response::new(pb::ListUsersReply { users, next_after }))
    }

    async fn grant(&self, req: Request<pb::GrantRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::GrantRequest| {
            let actions = r
                .actions
                .iter()
                .map(|a| match a.to_ascii_uppercase().as_str() {
                    "PUB" => Ok(Action::Pub),
                    "SUB" => Ok(Action::Sub),
                    other => Err(invalid(format!("{other:?} is not an action: PUB or SUB"))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let decision = if r.deny { Decision::Deny } else { Decision::Allow };
            done(AdminServer::grant(self, r.access_key, &r.resource, actions, decision).await)
        };
        self.on_leader(req, async |mut l, r| l.grant(r).await, here).await
    }

    async fn revoke(&self, req: Request<pb::RevokeRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::RevokeRequest| done(AdminServer::revoke(self, r.access_key, &r.resource).await);
        self.on_leader(req, async |mut l, r| l.revoke(r).await, here).await
    }

    async fn list_acl(&self, req: Request<pb::ListAclRequest>) -> Reply<pb::ListAclReply> {
        let r = req.into_inner();
        let key = Some(r.access_key.as_str()).filter(|k| !k.is_empty());
        let (lines, next) = AdminServer::list_acl(self, key, &r.after, page_limit(r.limit))?;
        let rules = lines
            .into_iter()
            .map(|l| pb::AclRule {
                access_key: l.access_key,
                resource: l.resource,
                actions: l.actions.iter().map(|a| format!("{a:?}").to_uppercase()).collect(),
                decision: format!("{:?}", l.decision).to_uppercase(),
            })
            .collect();
        Ok(Response::new(pb::ListAclReply { rules, next_after: next.unwrap_or_default() }))
    }

    async fn rotate_handle_key(&self, req: Request<pb::RotateHandleKeyRequest>) -> Reply<pb::AdminDone> {
        let here = async |_| done(AdminServer::rotate_handle_key(self).await);
        self.on_leader(req, async |mut l, r| l.rotate_handle_key(r).await, here).await
    }

    async fn add_node(&self, req: Request<pb::AddNodeRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::AddNodeRequest| {
            let info =
                NodeInfo { raft_addr: r.raft_addr, client_addr: r.client_addr, admin_addr: r.admin_addr, rack: r.rack };
            done(AdminServer::add_node(self, r.id, info).await)
        };
        self.on_leader(req, async |mut l, r| l.add_node(r).await, here).await
    }

    async fn remove_node(&self, req: Request<pb::RemoveNodeRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::RemoveNodeRequest| done(AdminServer::remove_node(self, r.id).await);
        self.on_leader(req, async |mut l, r| l.remove_node(r).await, here).await
    }

    async fn transfer_leader(&self, req: Request<pb::TransferLeaderRequest>) -> Reply<pb::AdminDone> {
        let group = req.get_ref().group.filter(|&g| g != 0);
        if group.is_some() {
            // A data group's leader is not the metadata's: this node answers for itself.
            let r = req.into_inner();
            return done(AdminServer::transfer_leader(self, r.to, group).await);
        }
        let here = async |r: pb::TransferLeaderRequest| done(AdminServer::transfer_leader(self, r.to, None).await);
        self.on_leader(req, async |mut l, r| l.transfer_leader(r).await, here).await
    }

    async fn get_digest(&self, req: Request<pb::GetDigestRequest>) -> Reply<pb::DigestReply> {
        let d = self.digest(req.into_inner().group)?;
        Ok(Response::new(pb::DigestReply { applied: d.applied, digest: d.digest }))
    }

    async fn get_failover_history(
        &self,
        req: Request<pb::GetFailoverHistoryRequest>,
    ) -> Reply<pb::FailoverHistoryReply> {
        use rockraft_proto::rockraft::log as log_pb;
        let group = req.into_inner().group;
        let failovers = self.history_of(group)?.iter().map(log_pb::Failover::from).collect();
        let repairs = self.repairs_of(group).iter().map(log_pb::Repair::from).collect();
        Ok(Response::new(pb::FailoverHistoryReply { failovers, repairs }))
    }

    async fn get_queue_spans(&self, req: Request<pb::GetQueueSpansRequest>) -> Reply<pb::QueueSpansReply> {
        let r = req.into_inner();
        let spans = self
            .queue_spans(r.group, r.upto)
            .await?
            .into_iter()
            .map(|s| pb::QueueSpan { topic: s.topic, queue: s.queue_id, start: s.start, end: s.end })
            .collect();
        Ok(Response::new(pb::QueueSpansReply { spans }))
    }

    async fn get_queue_checksums(&self, req: Request<pb::GetQueueChecksumsRequest>) -> Reply<pb::QueueChecksumsReply> {
        let r = req.into_inner();
        let checksums = self.queue_checksums(r.group, r.topic, r.queue, r.from, r.to, r.chunk).await?;
        Ok(Response::new(pb::QueueChecksumsReply { checksums }))
    }

    async fn get_settings(&self, req: Request<pb::GetSettingsRequest>) -> Reply<pb::SettingsReply> {
        let here = async |_| {
            let s = self.settings();
            Ok(Response::new(pb::SettingsReply {
                dedupe_window_secs: s.dedupe_window_secs,
                max_module_bytes: s.max_module_bytes,
                data_groups: s.data_groups,
                balance_leaders: s.balance_leaders,
            }))
        };
        self.on_leader(req, async |mut l, r| l.get_settings(r).await, here).await
    }

    async fn configure(&self, req: Request<pb::ConfigureRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::ConfigureRequest| {
            let change = SettingsChange {
                dedupe_window_secs: r.dedupe_window_secs,
                max_module_bytes: r.max_module_bytes,
                data_groups: r.data_groups,
                balance_leaders: r.balance_leaders,
            };
            done(AdminServer::configure(self, change).await)
        };
        self.on_leader(req, async |mut l, r| l.configure(r).await, here).await
    }

    async fn list_messages(&self, req: Request<pb::ListMessagesRequest>) -> Reply<pb::ListMessagesReply> {
        let r = req.get_ref();
        // As the leader of the data group holding the queue (the asked group's copy, for a
        // dead-letter topic) has it.
        let Some(holder) = self.listed_group(&r.topic, r.queue, r.data_group)? else {
            return Ok(Response::new(pb::ListMessagesReply { messages: Vec::new(), next_from: 0 }));
        };
        let here = async |r: pb::ListMessagesRequest| {
            let limit = page_limit(r.limit);
            let (lines, next) = AdminServer::list_messages(self, &holder, &r.topic, r.queue, r.from, limit)?;
            let messages = lines.into_iter().map(message_line).collect();
            Ok(Response::new(pb::ListMessagesReply { messages, next_from: next.unwrap_or(0) }))
        };
        match r.local {
            false => self.on_leader_of(&holder, req, async |mut l, r| l.list_messages(r).await, here).await,
            true => here(req.into_inner()).await,
        }
    }

    async fn get_message(&self, req: Request<pb::GetMessageRequest>) -> Reply<pb::GetMessageReply> {
        let here = async |r: pb::GetMessageRequest, groups: Vec<Cluster>| {
            let id = r.message_id;
            match AdminServer::get_message(self, &id, &groups)? {
                Some(Found::Stored(m)) => {
                    Ok(Response::new(pb::GetMessageReply { message: Some(message_line(m)), held: None }))
                }
                Some(Found::Held(h)) => {
                    Ok(Response::new(pb::GetMessageReply { message: None, held: Some(held_message(h)) }))
                }
                None => Err(AdminError::NotFound(format!("message {id} not found")).into()),
            }
        };
        let (metadata, _, r) = req.into_parts();
        if r.local {
            let held = self.held_groups();
            return here(r, held).await;
        }
        match r.data_group {
            Some(id) => {
                let holder = self.data_group(id)?;
                let groups = vec![holder.clone()];
                let there = async |mut l: LeaderClient, r| l.get_message(r).await;
                self.on_leader_of(&holder, passed_on(&metadata, r), there, async |r| here(r, groups).await).await
            }
            // Each data group at its leader, until one has it.
            None => {
                let mut failed = None;
                for id in self.data_group_ids() {
                    let ask = pb::GetMessageRequest { data_group: Some(id), ..r.clone() };
                    match AdminService::get_message(self, passed_on(&metadata, ask)).await {
                        Ok(found) => return Ok(found),
                        Err(s) if s.code() == tonic::Code::NotFound => {}
                        Err(s) => failed = Some(s),
                    }
                }
                let not_found = || AdminError::NotFound(format!("message {} not found", r.message_id)).into();
                Err(failed.unwrap_or_else(not_found))
            }
        }
    }

    async fn reset_offset(&self, req: Request<pb::ResetOffsetRequest>) -> Reply<pb::AdminDone> {
        let (metadata, _, r) = req.into_parts();
        match data_group_of(&metadata, r.data_group) {
            Some(id) => {
                let holder = self.data_group(id)?;
                let here = async |r: pb::ResetOffsetRequest| {
                    done(AdminServer::reset_offset(self, r.group, r.topic, r.time_ms, Some(id)).await)
                };
                let there = async |mut l: LeaderClient, r| l.reset_offset(r).await;
                self.on_leader_of(&holder, passed_on(&metadata, r), there, here).await
            }
            // Each data group holding the topic's queues, at its leader.
            None => {
                let holders = self.holders_of(&r.topic)?;
                let mut said = Vec::new();
                // Each part is the operator's request as signed, narrowed to one group.
                for id in holders {
                    let part = narrowed(&metadata, r.clone(), id);
                    said.push(AdminService::reset_offset(self, part).await?.into_inner().message);
                }
                Ok(Response::new(pb::AdminDone { message: said.join("; ") }))
            }
        }
    }

    async fn list_held(&self, req: Request<pb::ListHeldRequest>) -> Reply<pb::ListHeldReply> {
        let here = async |r: pb::ListHeldRequest, groups: Vec<Cluster>| {
            let timers = match r.kind.to_ascii_uppercase().as_str() {
                "TIMER" => true,
                "HALF" => false,
                other => return Err(invalid(format!("{other:?} is not a kind: TIMER or HALF"))),
            };
            let limit = page_limit(r.limit);
            let topic = Some(r.topic.as_str()).filter(|t| !t.is_empty());
            let after = Some(r.after.as_str()).filter(|a| !a.is_empty());
            let held = AdminServer::list_held(self, timers, topic, r.all, after, limit, &groups)?;
            let next_after = match held.last() {
                Some(last) if held.len() == limit => last.handle.clone(),
                _ => String::new(),
            };
            Ok(Response::new(pb::ListHeldReply { held: held.into_iter().map(held_message).collect(), next_after }))
        };
        let (metadata, _, r) = req.into_parts();
        match r.data_group {
            Some(id) => {
                let holder = self.data_group(id)?;
                let groups = vec![holder.clone()];
                let there = async |mut l: LeaderClient, r| l.list_held(r).await;
                self.on_leader_of(&holder, passed_on(&metadata, r), there, async |r| here(r, groups).await).await
            }
            // Group by group, each at its leader, until the page is full: a handle names its
            // group, so a page goes on in the group where the last one ended.
            None => {
                let page = page_limit(r.limit);
                let from = match r.after.as_str() {
                    "" => 0,
                    after => held_handle_group(&r.kind, after)
                        .ok_or_else(|| invalid(format!("{after:?} is not a handle")))?,
                };
                let mut held = Vec::new();
                for id in self.data_group_ids().into_iter().filter(|id| *id >= from) {
                    let after = if id == from { r.after.clone() } else { String::new() };
                    let limit = (page - held.len()) as u32;
                    let ask = pb::ListHeldRequest { data_group: Some(id), after, limit, ..r.clone() };
                    held.extend(AdminService::list_held(self, passed_on(&metadata, ask)).await?.into_inner().held);
                    if held.len() >= page {
                        break;
                    }
                }
                let next_after = match held.last() {
                    Some(last) if held.len() == page => last.handle.clone(),
                    _ => String::new(),
                };
                Ok(Response::new(pb::ListHeldReply { held, next_after }))
            }
        }
    }

    async fn resolve_transaction(&self, req: Request<pb::ResolveTransactionRequest>) -> Reply<pb::AdminDone> {
        let (metadata, _, r) = req.into_parts();
        match data_group_of(&metadata, r.data_group) {
            Some(id) => {
                let holder = self.data_group(id)?;
                let groups = vec![holder.clone()];
                let here = async |r: pb::ResolveTransactionRequest| {
                    done(AdminServer::resolve_transaction(self, r.message_id, r.commit, &groups).await)
                };
                let there = async |mut l: LeaderClient, r| l.resolve_transaction(r).await;
                self.on_leader_of(&holder, passed_on(&metadata, r), there, here).await
            }
            // Each data group at its leader, until one holds the half.
            None => {
                let mut failed = None;
                for id in self.data_group_ids() {
                    match AdminService::resolve_transaction(self, narrowed(&metadata, r.clone(), id)).await {
                        Ok(done) => return Ok(done),
                        Err(s) if s.code() == tonic::Code::NotFound => {}
                        Err(s) => failed = Some(s),
                    }
                }
                let none = || AdminError::NotFound(format!("no transactional half with message id {}", r.message_id));
                Err(failed.unwrap_or_else(|| none().into()))
            }
        }
    }

    async fn register_plugin(&self, req: Request<pb::RegisterPluginRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::RegisterPluginRequest| {
            let kind: PluginKind = r.kind.to_ascii_lowercase().replace('_', "-").parse().map_err(invalid)?;
            done(AdminServer::register_plugin(self, r.name, kind, r.module.to_vec()).await)
        };
        self.on_leader(req, async |mut l, r| l.register_plugin(r).await, here).await
    }

    async fn remove_plugin(&self, req: Request<pb::RemovePluginRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::RemovePluginRequest| done(AdminServer::remove_plugin(self, r.name).await);
        self.on_leader(req, async |mut l, r| l.remove_plugin(r).await, here).await
    }

    async fn enable_plugin(&self, req: Request<pb::EnablePluginRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::EnablePluginRequest| done(AdminServer::enable_plugin(self, r.name).await);
        self.on_leader(req, async |mut l, r| l.enable_plugin(r).await, here).await
    }

    async fn list_plugins(&self, req: Request<pb::ListPluginsRequest>) -> Reply<pb::ListPluginsReply> {
        let r = req.into_inner();
        let rows = AdminServer::list_plugins(self)
            .into_iter()
            .map(|p| pb::Plugin {
                name: p.name,
                kind: p.kind.as_str().to_ascii_uppercase().replace('-', "_"),
                version: p.version,
                builtin: p.builtin,
                size: p.size as u64,
                hash: p.hash,
                registered_ms: p.registered_ms,
                bound_to: p.bound_to,
                calls: p.calls,
                messages: p.messages,
                failures: p.failures,
                quarantined: p.quarantined.unwrap_or_default(),
                fuel: p.fuel,
                busy_ms: p.busy_ms,
            })
            .collect();
        let (plugins, next_after) = page_after(rows, |p: &pb::Plugin| &p.name, &r.after, page_limit(r.limit));
        Ok(Response::new(pb::ListPluginsReply { plugins, next_after }))
    }

    async fn bind_plugin(&self, req: Request<pb::BindPluginRequest>) -> Reply<pb::AdminDone> {
        let here = async |r: pb::BindPluginRequest| {
            let target = match r.target {
                Some(pb::bind_plugin_request::Target::Group(g)) => BindTarget::Group(g),
                Some(pb::bind_plugin_request::Target::Topic(t)) => BindTarget::Topic(t),
                None => return Err(invalid("name a group or a topic to bind")),
            };
            let plugin = Some(r.plugin).filter(|p| !p.is_empty());
            done(AdminServer::bind_plugin(self, target, plugin, r.config).await)
        };
        self.on_leader(req, async |mut l, r| l.bind_plugin(r).await, here).await
    }
}

fn message_line(m: MessageLine) -> pb::MessageLine {
    pb::MessageLine {
        topic: m.topic,
        queue: m.queue,
        offset: m.offset,
        message_id: m.message_id,
        tag: m.tag,
        keys: m.keys,
        body_len: m.body_len as u64,
        store_timestamp_ms: m.store_timestamp_ms,
    }
}

/// The data group a page handle of `kind` (TIMER: a recall handle; HALF: a transaction id)
/// names.
fn held_handle_group(kind: &str, handle: &str) -> Option<u32> {
    let partition = match kind.to_ascii_uppercase().as_str() {
        "TIMER" => crate::broker::timer::parse_recall_handle(handle).map(|(p, _)| p),
        _ => crate::broker::transaction::parse_transaction_id(handle).map(|(p, _)| p),
    };
    partition.map(|p| p.0)
}

fn held_message(h: HeldEntry) -> pb::HeldMessage {
    let (state, resolved) = match h.state {
        None => ("", None),
        Some(HalfState::Open) => ("OPEN", None),
        Some(HalfState::Committed { by, at_ms }) => ("COMMITTED", Some((by, at_ms))),
        Some(HalfState::RolledBack { by, at_ms }) => ("ROLLED_BACK", Some((by, at_ms))),
    };
    let resolved_by = match resolved.map(|(by, _)| by) {
        None => "",
        Some(Resolver::Producer) => "PRODUCER",
        Some(Resolver::ProducerCheck) => "PRODUCER_CHECK",
        Some(Resolver::Checker) => "CHECKER",
        Some(Resolver::Operator) => "OPERATOR",
    };
    pb::HeldMessage {
        topic: h.message.topic,
        queue: h.message.queue_id,
        message_id: h.message.message_id,
        kind: h.kind.to_ascii_uppercase(),
        at_ms: h.at_ms,
        handle: h.handle,
        state: state.to_string(),
        checks: h.checks,
        body_bytes: h.message.size,
        resolved_by: resolved_by.to_string(),
        resolved_ms: resolved.map_or(0, |(_, at)| at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_walk_every_row_once_in_name_order() {
        let rows: Vec<String> = (0..25).rev().map(|i| format!("t{i:02}")).collect();
        let mut seen = Vec::new();
        let mut after = String::new();
        loop {
            let (page_rows, next) = page_after(rows.clone(), |s: &String| s, &after, 10);
            assert!(page_rows.len() <= 10);
            seen.extend(page_rows);
            if next.is_empty() {
                break;
            }
            after = next;
        }
        let mut expected = rows.clone();
        expected.sort();
        assert_eq!(seen, expected);
        let (all, next) = page_after(rows, |s: &String| s, "", page_limit(0));
        assert_eq!((all.len(), next.as_str()), (25, ""), "the default page holds 100");
    }
}
