//! [`AccessCommand`] ↔ `rockraft.v1.log.AccessCommand`.

use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::log::access_command::Op;

use super::{DecodeError, Footprint, known, required};
use crate::broker::access::{AccessCommand, Action, Decision, HandleKey, Resource, ResourceKind, Rule, Secret};

pub(super) fn footprint(c: &AccessCommand) -> Footprint {
    match c {
        AccessCommand::DeleteUser { .. } => Footprint::Relieves,
        AccessCommand::PutUser { .. }
        | AccessCommand::Grant { .. }
        | AccessCommand::Revoke { .. }
        | AccessCommand::RotateHandleKey { .. } => Footprint::Records,
    }
}

fn resource_to_proto(r: &Resource) -> pb::Resource {
    let kind = match r.kind {
        ResourceKind::Topic => pb::ResourceKind::Topic,
        ResourceKind::Group => pb::ResourceKind::Group,
    };
    pb::Resource { kind: kind as i32, name: r.name.clone(), prefix: r.prefix }
}

fn resource_from_proto(r: Option<pb::Resource>) -> Result<Resource, DecodeError> {
    let r = required(r, "resource")?;
    let kind = known(r.kind, "resource kind", |v| match pb::ResourceKind::try_from(v).ok()? {
        pb::ResourceKind::Unspecified => None,
        pb::ResourceKind::Topic => Some(ResourceKind::Topic),
        pb::ResourceKind::Group => Some(ResourceKind::Group),
    })?;
    Ok(Resource { kind, name: r.name, prefix: r.prefix })
}

pub(super) fn to_proto(c: &AccessCommand) -> pb::AccessCommand {
    let op = match c {
        AccessCommand::PutUser { access_key, secret, admin, create } => Op::PutUser(pb::PutUser {
            access_key: access_key.clone(),
            secret: secret.expose().to_string(),
            admin: *admin,
            create: *create,
        }),
        AccessCommand::DeleteUser { access_key } => Op::DeleteUser(pb::DeleteUser { access_key: access_key.clone() }),
        AccessCommand::Grant { access_key, resource, rule } => Op::Grant(pb::Grant {
            access_key: access_key.clone(),
            resource: Some(resource_to_proto(resource)),
            rule: Some(pb::Rule {
                actions: rule
                    .actions
                    .iter()
                    .map(|a| match a {
                        Action::Pub => pb::Action::Pub as i32,
                        Action::Sub => pb::Action::Sub as i32,
                    })
                    .collect(),
                decision: match rule.decision {
                    Decision::Allow => pb::Decision::Allow,
                    Decision::Deny => pb::Decision::Deny,
                } as i32,
            }),
        }),
        AccessCommand::Revoke { access_key, resource } => {
            Op::Revoke(pb::Revoke { access_key: access_key.clone(), resource: Some(resource_to_proto(resource)) })
        }
        AccessCommand::RotateHandleKey { key } => {
            Op::RotateHandleKey(pb::RotateHandleKey { key: key.hex().to_string() })
        }
    };
    pb::AccessCommand { op: Some(op) }
}

pub(super) fn from_proto(c: pb::AccessCommand) -> Result<AccessCommand, DecodeError> {
    Ok(match c.op.ok_or(DecodeError::UnknownVariant("access"))? {
        Op::PutUser(p) => AccessCommand::PutUser {
            access_key: p.access_key,
            secret: Secret::new(p.secret),
            admin: p.admin,
            create: p.create,
        },
        Op::DeleteUser(d) => AccessCommand::DeleteUser { access_key: d.access_key },
        Op::Grant(g) => {
            let rule = required(g.rule, "rule")?;
            let actions = rule
                .actions
                .into_iter()
                .map(|a| {
                    known(a, "action", |v| match pb::Action::try_from(v).ok()? {
                        pb::Action::Unspecified => None,
                        pb::Action::Pub => Some(Action::Pub),
                        pb::Action::Sub => Some(Action::Sub),
                    })
                })
                .collect::<Result<_, _>>()?;
            let decision = known(rule.decision, "decision", |v| match pb::Decision::try_from(v).ok()? {
                pb::Decision::Unspecified => None,
                pb::Decision::Allow => Some(Decision::Allow),
                pb::Decision::Deny => Some(Decision::Deny),
            })?;
            AccessCommand::Grant {
                access_key: g.access_key,
                resource: resource_from_proto(g.resource)?,
                rule: Rule { actions, decision },
            }
        }
        Op::Revoke(r) => AccessCommand::Revoke { access_key: r.access_key, resource: resource_from_proto(r.resource)? },
        Op::RotateHandleKey(k) => AccessCommand::RotateHandleKey { key: HandleKey::new(k.key) },
    })
}
