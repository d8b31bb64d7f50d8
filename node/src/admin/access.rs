//! Users, their access rules, and the key handles are sealed with.

use crate::admin::AdminServer;
use crate::admin::api::{AclLine, UserInfo};
use crate::admin::error::AdminError;
use crate::broker::Command;
use crate::broker::access::{AccessCommand, Action, Decision, HandleKey, Resource, Rule, Secret};

impl AdminServer {
    pub(super) async fn create_user(
        &self,
        access_key: String,
        secret: Secret,
        admin: bool,
    ) -> Result<String, AdminError> {
        self.write(Command::Access(AccessCommand::PutUser { access_key, secret, admin, create: true })).await
    }

    /// On the leader: what is left unchanged (`None`) is read from the state it writes over.
    pub(super) async fn update_user(
        &self,
        access_key: String,
        secret: Option<Secret>,
        admin: Option<bool>,
    ) -> Result<String, AdminError> {
        let user = self.parts.broker.access(|t| t.user(&access_key).cloned());
        let user = user.ok_or_else(|| AdminError::NotFound(format!("no user {access_key}")))?;
        let secret = secret.unwrap_or(user.secret);
        let admin = admin.unwrap_or(user.admin);
        self.write(Command::Access(AccessCommand::PutUser { access_key, secret, admin, create: false })).await
    }

    /// Removes a user and every rule of theirs.
    pub(super) async fn delete_user(&self, access_key: String) -> Result<String, AdminError> {
        self.write(Command::Access(AccessCommand::DeleteUser { access_key })).await
    }

    /// Users by access key, whether they are admins and how many rules they have; no secrets.
    pub(super) fn list_users(&self) -> Vec<UserInfo> {
        self.parts.broker.access(|t| {
            t.users
                .iter()
                .map(|(key, user)| UserInfo {
                    access_key: key.clone(),
                    admin: user.admin,
                    rules: t.rules.range((key.clone(), Resource::FIRST)..).take_while(|((k, _), _)| k == key).count(),
                })
                .collect()
        })
    }

    /// Gives a user an allow or a deny of `actions` on a resource, replacing their rule on it.
    pub(super) async fn grant(
        &self,
        access_key: String,
        resource: &str,
        actions: Vec<Action>,
        decision: Decision,
    ) -> Result<String, AdminError> {
        let resource = resource.parse::<Resource>().map_err(AdminError::invalid)?;
        let rule = Rule { actions, decision };
        self.write(Command::Access(AccessCommand::Grant { access_key, resource, rule })).await
    }

    pub(super) async fn revoke(&self, access_key: String, resource: &str) -> Result<String, AdminError> {
        let resource = resource.parse::<Resource>().map_err(AdminError::invalid)?;
        self.write(Command::Access(AccessCommand::Revoke { access_key, resource })).await
    }

    /// Every rule, or one user's, in (access key, resource) order: at most `limit` after the
    /// rule `after` names (`<access key> <resource>`, as the next cursor is written); and the
    /// cursor of the last one shown when more follow.
    pub(super) fn list_acl(
        &self,
        access_key: Option<&str>,
        after: &str,
        limit: usize,
    ) -> Result<(Vec<AclLine>, Option<String>), AdminError> {
        let start = match after {
            "" => None,
            cursor => {
                // A resource holds no space (names are RocketMQ names); an access key may.
                let (key, resource) = cursor
                    .rsplit_once(' ')
                    .ok_or_else(|| AdminError::Invalid(format!("{cursor:?} is not `<access key> <resource>`")))?;
                let resource = resource.parse::<Resource>().map_err(AdminError::invalid)?;
                Some((key.to_string(), resource))
            }
        };
        let mut lines: Vec<AclLine> = self.parts.broker.access(|t| {
            let rows: Box<dyn Iterator<Item = _>> = match &start {
                None => Box::new(t.rules.iter()),
                Some(cursor) => Box::new(t.rules.range(cursor.clone()..).filter(move |(k, _)| *k != cursor)),
            };
            rows.filter(|((key, _), _)| access_key.is_none_or(|k| k == key))
                .take(limit + 1)
                .map(|((key, resource), rule)| AclLine {
                    access_key: key.clone(),
                    resource: resource.to_string(),
                    actions: rule.actions.clone(),
                    decision: rule.decision,
                })
                .collect()
        });
        let more = lines.len() > limit;
        lines.truncate(limit);
        let next = more.then(|| lines.last().map(|l| format!("{} {}", l.access_key, l.resource))).flatten();
        Ok((lines, next))
    }

    /// A new key for sealing handles, made here (the leader).
    pub(super) async fn rotate_handle_key(&self) -> Result<String, AdminError> {
        let key = HandleKey::new(crate::auth::random_key().map_err(AdminError::fault)?);
        self.write(Command::Access(AccessCommand::RotateHandleKey { key })).await
    }
}
