//! `rockraft.v1.AdminService` as served: `Call` (every request as JSON, what the CLI sends) and
//! the typed methods, each a thin translation into the same [`AdminRequest`] and back, so both
//! forms behave alike. An error answer becomes a gRPC error carrying its reason.

use rockraft_proto::rockraft as pb;
use rockraft_proto::rockraft::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

use crate::admin::AdminServer;
use crate::admin::api::{AdminRequest, AdminResponse, BindTarget, MessageLine};
use crate::broker::access::{Action, Decision, Secret};
use crate::broker::group::{DEFAULT_MAX_ATTEMPTS, FULL_PRIORITY, GroupConfig};
use crate::broker::held::HeldEntry;
use crate::broker::lite::{DEFAULT_LITE_QUOTA, LiteBinding, LiteModel};
use crate::broker::plugins::PluginKind;
use crate::broker::settings::SettingsChange;
use crate::broker::transaction::HalfState;
use crate::broker::{TopicConfig, TopicKind};

/// Rows a page holds when the request names no limit, and at most.
const DEFAULT_PAGE: usize = 100;
pub(crate) const MAX_PAGE: usize = 1000;

type Reply<T> = Result<Response<T>, Status>;

/// The rows after `after` (by name), at most `limit`; and the name to continue after, if more.
fn page<T>(rows: Vec<T>, name: impl Fn(&T) -> &str, req: &pb::ListRequest) -> (Vec<T>, String) {
    page_after(rows, name, &req.after, page_limit(req.limit))
}

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

fn kind_name(kind: TopicKind) -> String {
    kind.to_string().to_uppercase()
}

impl AdminServer {
    async fn answer(&self, req: AdminRequest) -> Result<AdminResponse, Status> {
        match self.handle(req).await {
            AdminResponse::Error(why) => Err(Status::failed_precondition(why)),
            ok => Ok(ok),
        }
    }

    async fn done(&self, req: AdminRequest) -> Reply<pb::AdminDone> {
        match self.answer(req).await? {
            AdminResponse::Done(message) => Ok(Response::new(pb::AdminDone { message })),
            other => Err(Status::internal(format!("unexpected answer {other:?}"))),
        }
    }
}

fn unexpected(other: AdminResponse) -> Status {
    Status::internal(format!("unexpected answer {other:?}"))
}

#[tonic::async_trait]
impl AdminService for AdminServer {
    async fn call(&self, req: Request<pb::Json>) -> Reply<pb::Json> {
        let request: AdminRequest =
            serde_json::from_slice(&req.get_ref().json).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let response = self.handle(request).await;
        let json = serde_json::to_vec(&response).map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(pb::Json { json: json.into() }))
    }

    async fn get_status(&self, _: Request<pb::GetStatusRequest>) -> Reply<pb::NodeStatusReply> {
        let AdminResponse::Status(s) = self.answer(AdminRequest::Status).await? else {
            return Err(Status::internal("unexpected answer"));
        };
        Ok(Response::new(pb::NodeStatusReply {
            id: s.id,
            role: s.role.as_str().to_string(),
            term: s.term,
            leader: s.leader,
            last_log_index: s.last_log_index,
            committed: s.committed,
            applied: s.applied,
            members: s
                .members
                .into_iter()
                .map(|m| pb::Member {
                    id: m.id,
                    raft_addr: m.raft_addr,
                    client_addr: m.client_addr,
                    admin_addr: m.admin_addr,
                    voter: m.voter,
                })
                .collect(),
        }))
    }

    async fn create_topic(&self, req: Request<pb::CreateTopicRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        let kind: TopicKind = r.kind.to_lowercase().parse().map_err(Status::invalid_argument)?;
        let mut config = TopicConfig::new(r.name, r.queues, kind);
        if let Some(ttl) = r.lite_ttl_minutes {
            config.lite_ttl_minutes = ttl;
        }
        self.done(AdminRequest::CreateTopic(config)).await
    }

    async fn delete_topic(&self, req: Request<pb::DeleteTopicRequest>) -> Reply<pb::AdminDone> {
        self.done(AdminRequest::DeleteTopic { name: req.into_inner().name }).await
    }

    async fn list_topics(&self, req: Request<pb::ListRequest>) -> Reply<pb::ListTopicsReply> {
        let AdminResponse::Topics(topics) = self.answer(AdminRequest::ListTopics).await? else {
            return Err(Status::internal("unexpected answer"));
        };
        let rows = topics
            .into_iter()
            .map(|t| pb::Topic {
                messages: t.queues.iter().map(|(_, start, next)| next.saturating_sub(*start)).sum(),
                name: t.config.name,
                queues: t.config.queues,
                kind: kind_name(t.config.kind),
            })
            .collect();
        let (topics, next_after) = page(rows, |t: &pb::Topic| &t.name, req.get_ref());
        Ok(Response::new(pb::ListTopicsReply { topics, next_after }))
    }

    async fn create_group(&self, req: Request<pb::CreateGroupRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        let max_attempts = if r.max_attempts == 0 { DEFAULT_MAX_ATTEMPTS } else { r.max_attempts };
        let priority_factor = match r.priority_factor {
            None => FULL_PRIORITY,
            Some(f) => u8::try_from(f).map_err(|_| Status::invalid_argument("priority factor must be 0 to 100"))?,
        };
        let lite = match r.lite_bind_topic.is_empty() {
            true => None,
            false => Some(LiteBinding {
                topic: r.lite_bind_topic,
                model: match r.lite_model.as_str() {
                    "" => LiteModel::Shared,
                    m => m.to_lowercase().parse().map_err(Status::invalid_argument)?,
                },
                quota: r.lite_quota.unwrap_or(DEFAULT_LITE_QUOTA),
            }),
        };
        let config = GroupConfig { name: r.name, fifo: r.fifo, max_attempts, priority_factor, lite };
        self.done(AdminRequest::CreateGroup(config)).await
    }

    async fn delete_group(&self, req: Request<pb::DeleteGroupRequest>) -> Reply<pb::AdminDone> {
        self.done(AdminRequest::DeleteGroup { name: req.into_inner().name }).await
    }

    async fn list_groups(&self, req: Request<pb::ListRequest>) -> Reply<pb::ListGroupsReply> {
        let groups = match self.answer(AdminRequest::ListGroups).await? {
            AdminResponse::Groups(g) => g,
            other => return Err(unexpected(other)),
        };
        let rows = groups
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
        let (groups, next_after) = page(rows, |g: &pb::Group| &g.name, req.get_ref());
        Ok(Response::new(pb::ListGroupsReply { groups, next_after }))
    }

    async fn create_user(&self, req: Request<pb::CreateUserRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        let secret = Secret::new(r.secret_key);
        self.done(AdminRequest::CreateUser { access_key: r.access_key, secret, admin: r.admin }).await
    }

    async fn update_user(&self, req: Request<pb::UpdateUserRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        let secret = r.secret_key.map(Secret::new);
        self.done(AdminRequest::UpdateUser { access_key: r.access_key, secret, admin: r.admin }).await
    }

    async fn delete_user(&self, req: Request<pb::DeleteUserRequest>) -> Reply<pb::AdminDone> {
        self.done(AdminRequest::DeleteUser { access_key: req.into_inner().access_key }).await
    }

    async fn list_users(&self, req: Request<pb::ListRequest>) -> Reply<pb::ListUsersReply> {
        let users = match self.answer(AdminRequest::ListUsers).await? {
            AdminResponse::Users(u) => u,
            other => return Err(unexpected(other)),
        };
        let rows = users
            .into_iter()
            .map(|u| pb::User { access_key: u.access_key, admin: u.admin, rules: u.rules as u32 })
            .collect();
        let (users, next_after) = page(rows, |u: &pb::User| &u.access_key, req.get_ref());
        Ok(Response::new(pb::ListUsersReply { users, next_after }))
    }

    async fn grant(&self, req: Request<pb::GrantRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        let actions = r
            .actions
            .iter()
            .map(|a| match a.to_ascii_uppercase().as_str() {
                "PUB" => Ok(Action::Pub),
                "SUB" => Ok(Action::Sub),
                other => Err(Status::invalid_argument(format!("{other:?} is not an action: PUB or SUB"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let decision = if r.deny { Decision::Deny } else { Decision::Allow };
        self.done(AdminRequest::Grant { access_key: r.access_key, resource: r.resource, actions, decision }).await
    }

    async fn revoke(&self, req: Request<pb::RevokeRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        self.done(AdminRequest::Revoke { access_key: r.access_key, resource: r.resource }).await
    }

    async fn list_acl(&self, req: Request<pb::ListAclRequest>) -> Reply<pb::ListAclReply> {
        let key = Some(req.into_inner().access_key).filter(|k| !k.is_empty());
        let lines = match self.answer(AdminRequest::ListAcl { access_key: key }).await? {
            AdminResponse::Acl(l) => l,
            other => return Err(unexpected(other)),
        };
        let rules = lines
            .into_iter()
            .map(|l| pb::AclRule {
                access_key: l.access_key,
                resource: l.resource,
                actions: l.actions.iter().map(|a| format!("{a:?}").to_uppercase()).collect(),
                decision: format!("{:?}", l.decision).to_uppercase(),
            })
            .collect();
        Ok(Response::new(pb::ListAclReply { rules }))
    }

    async fn rotate_handle_key(&self, _: Request<pb::RotateHandleKeyRequest>) -> Reply<pb::AdminDone> {
        self.done(AdminRequest::RotateHandleKey).await
    }

    async fn add_node(&self, req: Request<pb::AddNodeRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        let (id, raft_addr, client_addr, admin_addr) = (r.id, r.raft_addr, r.client_addr, r.admin_addr);
        self.done(AdminRequest::AddNode { id, raft_addr, client_addr, admin_addr }).await
    }

    async fn remove_node(&self, req: Request<pb::RemoveNodeRequest>) -> Reply<pb::AdminDone> {
        self.done(AdminRequest::RemoveNode { id: req.into_inner().id }).await
    }

    async fn transfer_leader(&self, req: Request<pb::TransferLeaderRequest>) -> Reply<pb::AdminDone> {
        self.done(AdminRequest::TransferLeader { to: req.into_inner().to }).await
    }

    async fn get_digest(&self, _: Request<pb::GetDigestRequest>) -> Reply<pb::DigestReply> {
        match self.answer(AdminRequest::Digest).await? {
            AdminResponse::Digest(d) => Ok(Response::new(pb::DigestReply { applied: d.applied, digest: d.digest })),
            other => Err(unexpected(other)),
        }
    }

    async fn get_failover_history(&self, _: Request<pb::GetFailoverHistoryRequest>) -> Reply<pb::FailoverHistoryReply> {
        match self.answer(AdminRequest::History).await? {
            AdminResponse::History(h) => Ok(Response::new(pb::FailoverHistoryReply {
                failovers: h
                    .into_iter()
                    .map(|f| pb::Failover {
                        term: f.term,
                        leader: f.leader,
                        previous: f.previous,
                        last_heard_ms: f.last_heard_ms,
                        election_started_ms: f.election_started_ms,
                        elected_ms: f.elected_ms,
                        first_commit_ms: f.first_commit_ms,
                        routes_converged_ms: f.routes_converged_ms,
                        not_following: f.not_following,
                    })
                    .collect(),
            })),
            other => Err(unexpected(other)),
        }
    }

    async fn get_queue_spans(&self, req: Request<pb::GetQueueSpansRequest>) -> Reply<pb::QueueSpansReply> {
        match self.answer(AdminRequest::QueueSpans { upto: req.into_inner().upto }).await? {
            AdminResponse::QueueSpans(spans) => Ok(Response::new(pb::QueueSpansReply {
                spans: spans
                    .into_iter()
                    .map(|s| pb::QueueSpan { topic: s.topic, queue: s.queue_id, start: s.start, end: s.end })
                    .collect(),
            })),
            other => Err(unexpected(other)),
        }
    }

    async fn get_queue_checksums(&self, req: Request<pb::GetQueueChecksumsRequest>) -> Reply<pb::QueueChecksumsReply> {
        let r = req.into_inner();
        let asked =
            AdminRequest::QueueChecksums { topic: r.topic, queue: r.queue, from: r.from, to: r.to, chunk: r.chunk };
        match self.answer(asked).await? {
            AdminResponse::Checksums(checksums) => Ok(Response::new(pb::QueueChecksumsReply { checksums })),
            other => Err(unexpected(other)),
        }
    }

    async fn get_settings(&self, _: Request<pb::GetSettingsRequest>) -> Reply<pb::SettingsReply> {
        match self.answer(AdminRequest::Settings).await? {
            AdminResponse::Settings(s) => Ok(Response::new(pb::SettingsReply {
                dedupe_window_secs: s.dedupe_window_secs,
                max_module_bytes: s.max_module_bytes,
            })),
            other => Err(unexpected(other)),
        }
    }

    async fn configure(&self, req: Request<pb::ConfigureRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        let change = SettingsChange { dedupe_window_secs: r.dedupe_window_secs, max_module_bytes: r.max_module_bytes };
        self.done(AdminRequest::Configure(change)).await
    }

    async fn list_messages(&self, req: Request<pb::ListMessagesRequest>) -> Reply<pb::ListMessagesReply> {
        let r = req.into_inner();
        let limit = page_limit(r.limit) as u64;
        let req = AdminRequest::ListMessages { topic: r.topic, queue: r.queue, from: r.from, limit, local: r.local };
        let lines = match self.answer(req).await? {
            AdminResponse::Messages(m) => m,
            other => return Err(unexpected(other)),
        };
        let next_from = match lines.last() {
            Some(last) if lines.len() as u64 == limit => last.offset + 1,
            _ => 0,
        };
        Ok(Response::new(pb::ListMessagesReply { messages: lines.into_iter().map(message_line).collect(), next_from }))
    }

    async fn get_message(&self, req: Request<pb::GetMessageRequest>) -> Reply<pb::GetMessageReply> {
        let r = req.into_inner();
        match self.answer(AdminRequest::GetMessage { id: r.message_id.clone(), local: r.local }).await? {
            AdminResponse::Messages(m) if !m.is_empty() => {
                Ok(Response::new(pb::GetMessageReply { message: m.into_iter().next().map(message_line), held: None }))
            }
            AdminResponse::Held(h) if !h.is_empty() => {
                Ok(Response::new(pb::GetMessageReply { message: None, held: h.into_iter().next().map(held_message) }))
            }
            AdminResponse::Messages(_) | AdminResponse::Held(_) => {
                Err(Status::not_found(format!("no message with id {}", r.message_id)))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn reset_offset(&self, req: Request<pb::ResetOffsetRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        self.done(AdminRequest::ResetOffset { group: r.group, topic: r.topic, time_ms: r.time_ms }).await
    }

    async fn list_held(&self, req: Request<pb::ListHeldRequest>) -> Reply<pb::ListHeldReply> {
        let r = req.into_inner();
        let timers = match r.kind.to_ascii_uppercase().as_str() {
            "TIMER" => true,
            "HALF" => false,
            other => return Err(Status::invalid_argument(format!("{other:?} is not a kind: TIMER or HALF"))),
        };
        let limit = page_limit(r.limit);
        let topic = Some(r.topic).filter(|t| !t.is_empty());
        let after = Some(r.after).filter(|a| !a.is_empty());
        let held = match self.answer(AdminRequest::ListHeld { timers, topic, all: r.all, after, limit }).await? {
            AdminResponse::Held(h) => h,
            other => return Err(unexpected(other)),
        };
        let next_after = match held.last() {
            Some(last) if held.len() == limit => last.handle.clone(),
            _ => String::new(),
        };
        Ok(Response::new(pb::ListHeldReply { held: held.into_iter().map(held_message).collect(), next_after }))
    }

    async fn resolve_transaction(&self, req: Request<pb::ResolveTransactionRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        self.done(AdminRequest::ResolveTransaction { message_id: r.message_id, commit: r.commit }).await
    }

    async fn register_plugin(&self, req: Request<pb::RegisterPluginRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        let kind: PluginKind =
            r.kind.to_ascii_lowercase().replace('_', "-").parse().map_err(Status::invalid_argument)?;
        self.done(AdminRequest::RegisterPlugin { name: r.name, kind, module: r.module.to_vec() }).await
    }

    async fn remove_plugin(&self, req: Request<pb::PluginName>) -> Reply<pb::AdminDone> {
        self.done(AdminRequest::RemovePlugin { name: req.into_inner().name }).await
    }

    async fn enable_plugin(&self, req: Request<pb::PluginName>) -> Reply<pb::AdminDone> {
        self.done(AdminRequest::EnablePlugin { name: req.into_inner().name }).await
    }

    async fn list_plugins(&self, req: Request<pb::ListRequest>) -> Reply<pb::ListPluginsReply> {
        let plugins = match self.answer(AdminRequest::ListPlugins).await? {
            AdminResponse::Plugins(p) => p,
            other => return Err(unexpected(other)),
        };
        let rows = plugins
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
            })
            .collect();
        let (plugins, next_after) = page(rows, |p: &pb::Plugin| &p.name, req.get_ref());
        Ok(Response::new(pb::ListPluginsReply { plugins, next_after }))
    }

    async fn bind_plugin(&self, req: Request<pb::BindPluginRequest>) -> Reply<pb::AdminDone> {
        let r = req.into_inner();
        let target = match r.target {
            Some(pb::bind_plugin_request::Target::Group(g)) => BindTarget::Group(g),
            Some(pb::bind_plugin_request::Target::Topic(t)) => BindTarget::Topic(t),
            None => return Err(Status::invalid_argument("name a group or a topic to bind")),
        };
        let plugin = Some(r.plugin).filter(|p| !p.is_empty());
        self.done(AdminRequest::BindPlugin { target, plugin, config: r.config }).await
    }
}

fn page_limit(asked: u32) -> usize {
    match asked as usize {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
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

fn held_message(h: HeldEntry) -> pb::HeldMessage {
    let state = match h.state {
        None => "",
        Some(HalfState::Open) => "OPEN",
        Some(HalfState::Committed { .. }) => "COMMITTED",
        Some(HalfState::RolledBack { .. }) => "ROLLED_BACK",
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
            let (page_rows, next) = page(rows.clone(), |s: &String| s, &pb::ListRequest { after, limit: 10 });
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
        let (all, next) = page(rows, |s: &String| s, &pb::ListRequest { after: String::new(), limit: 0 });
        assert_eq!((all.len(), next.as_str()), (25, ""), "the default page holds 100");
    }
}
