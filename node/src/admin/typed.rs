//! `rockraft.v1.AdminService` as served: `Call` (every request as JSON, what the CLI sends) and
//! the typed methods, each a thin translation into the same [`AdminRequest`] and back, so both
//! forms behave alike. An error answer becomes a gRPC error carrying its reason.

use rockraft_proto::rockraft as pb;
use rockraft_proto::rockraft::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

use crate::admin::AdminServer;
use crate::admin::api::{AdminRequest, AdminResponse};
use crate::broker::access::{Action, Decision, Secret};
use crate::broker::group::{DEFAULT_MAX_ATTEMPTS, GroupConfig};
use crate::broker::{TopicConfig, TopicKind};

/// Rows a page holds when the request names no limit, and at most.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

type Reply<T> = Result<Response<T>, Status>;

/// The rows after `after` (by name), at most `limit`; and the name to continue after, if more.
fn page<T>(rows: Vec<T>, name: impl Fn(&T) -> &str, req: &pb::ListRequest) -> (Vec<T>, String) {
    let limit = match req.limit as usize {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    };
    let mut rows: Vec<T> = rows.into_iter().filter(|r| req.after.is_empty() || name(r) > req.after.as_str()).collect();
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
        self.done(AdminRequest::CreateTopic(TopicConfig { name: r.name, queues: r.queues, kind })).await
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
        self.done(AdminRequest::CreateGroup(GroupConfig { name: r.name, fifo: r.fifo, max_attempts })).await
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
