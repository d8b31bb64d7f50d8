//! Who may use the cluster: users and their access rules, RocketMQ ACL 2.0 style. Replicated
//! state, changed only through the log, so every node decides a request the same way once it
//! has applied the same index. `auth/` checks requests against these tables; it never changes
//! them.
//!
//! - A user is an access key with a secret (the HMAC key the official clients sign with) and an
//!   admin flag. An admin may do everything, on every plane.
//! - A rule gives one user an allow or a deny of some actions (`Pub`, `Sub`) on one resource: a
//!   topic or a consumer group, named literally or by a prefix (`Topic:orders*`). A user has at
//!   most one rule per resource; granting again replaces it.
//! - A request is allowed when some rule of its user allows the action on the resource and no
//!   rule denies it (deny wins; no rule, no access).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::broker::reply::Reply;
use crate::broker::table::Table;

/// Longest access key and secret accepted.
const MAX_KEY_LEN: usize = 128;
/// Shortest secret accepted: a secret is an HMAC key, and a short one can be guessed offline
/// from one signed request.
pub const MIN_SECRET_LEN: usize = 8;

/// A user's secret: never printed (its `Debug` is redacted) and never sent back by any listing.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub secret: Secret,
    pub admin: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceKind {
    Topic,
    Group,
}

/// A topic or consumer group a rule is about: one name, or every name with a prefix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Resource {
    pub kind: ResourceKind,
    pub name: String,
    /// `name` is a prefix (written `Topic:orders*`; `Topic:*` is every topic).
    pub prefix: bool,
}

impl Resource {
    /// The least resource: where one user's rules begin in key order.
    pub const FIRST: Resource = Resource { kind: ResourceKind::Topic, name: String::new(), prefix: false };

    fn covers(&self, kind: ResourceKind, name: &str) -> bool {
        self.kind == kind && if self.prefix { name.starts_with(&self.name) } else { name == self.name }
    }
}

/// Why a written resource is not one; each case holds what was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidResource {
    #[error("{0:?}: write Topic:<name> or Group:<name>")]
    NoKind(String),
    #[error("{0:?} is not a resource kind: Topic or Group")]
    UnknownKind(String),
    #[error("{0:?}: a name, or a prefix ending in one `*`")]
    BadName(String),
}

impl std::str::FromStr for Resource {
    type Err = InvalidResource;

    /// `Topic:<name>`, `Topic:<prefix>*`, `Group:<name>`, `Group:<prefix>*` (kind in any case).
    fn from_str(s: &str) -> Result<Resource, InvalidResource> {
        let (kind, name) = s.split_once(':').ok_or_else(|| InvalidResource::NoKind(s.to_string()))?;
        let kind = match kind.to_ascii_lowercase().as_str() {
            "topic" => ResourceKind::Topic,
            "group" => ResourceKind::Group,
            other => return Err(InvalidResource::UnknownKind(other.to_string())),
        };
        let (name, prefix) = match name.strip_suffix('*') {
            Some(p) => (p, true),
            None => (name, false),
        };
        if name.contains('*') || (!prefix && name.is_empty()) || name.len() > 255 {
            return Err(InvalidResource::BadName(s.to_string()));
        }
        Ok(Resource { kind, name: name.to_string(), prefix })
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}:{}{}", self.kind, self.name, if self.prefix { "*" } else { "" })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Action {
    Pub,
    Sub,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    Allow,
    Deny,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub actions: Vec<Action>,
    pub decision: Decision,
}

/// A key handles are sealed with (`auth::handles`): 32 random bytes, hex. Never printed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HandleKey(String);

impl HandleKey {
    pub fn new(hex: String) -> HandleKey {
        HandleKey(hex)
    }

    /// The key as it was given (hex), for the log entry that installs it.
    pub fn hex(&self) -> &str {
        &self.0
    }

    /// The key's bytes (its hex form was checked when it was applied).
    pub fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    fn valid(&self) -> bool {
        self.0.len() == 64 && self.0.bytes().all(|b| b.is_ascii_hexdigit())
    }
}

impl fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HandleKey(<redacted>)")
    }
}

/// The replicated access tables.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessTables {
    /// By access key.
    pub users: Table<String, User>,
    /// By (access key, resource).
    pub rules: Table<(String, Resource), Rule>,
    /// The newest two handle keys, by id (the newest seals).
    #[serde(default)]
    pub handle_keys: Table<u32, HandleKey>,
}

/// A change to users or rules (`rockraft user …`, `rockraft acl …`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AccessCommand {
    /// Creates a user (`create`), or changes an existing one's secret and admin flag.
    PutUser {
        access_key: String,
        secret: Secret,
        admin: bool,
        create: bool,
    },
    /// Removes a user and every rule of theirs.
    DeleteUser {
        access_key: String,
    },
    Grant {
        access_key: String,
        resource: Resource,
        rule: Rule,
    },
    Revoke {
        access_key: String,
        resource: Resource,
    },
    /// Makes `key` the one new handles are sealed with; the one before it still opens handles.
    RotateHandleKey {
        key: HandleKey,
    },
}

impl fmt::Debug for AccessCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessCommand::PutUser { access_key, admin, create, .. } => {
                write!(f, "PutUser {{ access_key: {access_key:?}, admin: {admin}, create: {create} }}")
            }
            AccessCommand::DeleteUser { access_key } => write!(f, "DeleteUser {{ access_key: {access_key:?} }}"),
            AccessCommand::Grant { access_key, resource, rule } => {
                write!(f, "Grant {{ access_key: {access_key:?}, resource: {resource}, rule: {rule:?} }}")
            }
            AccessCommand::Revoke { access_key, resource } => {
                write!(f, "Revoke {{ access_key: {access_key:?}, resource: {resource} }}")
            }
            AccessCommand::RotateHandleKey { .. } => f.write_str("RotateHandleKey"),
        }
    }
}

/// Why an access key or secret is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("an access key is 1-{MAX_KEY_LEN} printable ASCII characters without `,`, `=` or `/`")]
    AccessKey,
    #[error("a secret is {MIN_SECRET_LEN}-{MAX_KEY_LEN} printable ASCII characters")]
    Secret,
}

/// An access key must fit the signed header (`Credential=<access key>, …`), so no spaces, commas
/// or `=`.
pub fn check_access_key(key: &str) -> Result<(), CredentialError> {
    let fits = |c: char| c.is_ascii_graphic() && !matches!(c, ',' | '=' | '/');
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.chars().all(fits) {
        return Err(CredentialError::AccessKey);
    }
    Ok(())
}

pub fn check_secret(secret: &str) -> Result<(), CredentialError> {
    if !(MIN_SECRET_LEN..=MAX_KEY_LEN).contains(&secret.len()) || !secret.chars().all(|c| c.is_ascii_graphic()) {
        return Err(CredentialError::Secret);
    }
    Ok(())
}

impl AccessTables {
    pub fn user(&self, access_key: &str) -> Option<&User> {
        self.users.get(access_key)
    }

    /// Whether the user may do `action` on the named topic or group. Admins may do everything.
    pub fn permits(&self, access_key: &str, action: Action, kind: ResourceKind, name: &str) -> bool {
        let Some(user) = self.users.get(access_key) else { return false };
        if user.admin {
            return true;
        }
        let mut allowed = false;
        // Rules are keyed by (user, resource): the user's rules are one contiguous range.
        for ((owner, resource), rule) in self.rules.range((access_key.to_string(), Resource::FIRST)..) {
            if owner != access_key {
                break;
            }
            if !resource.covers(kind, name) || !rule.actions.contains(&action) {
                continue;
            }
            match rule.decision {
                Decision::Deny => return false,
                Decision::Allow => allowed = true,
            }
        }
        allowed
    }

    pub fn apply(&mut self, command: AccessCommand) -> Reply {
        match command {
            AccessCommand::PutUser { access_key, secret, admin, create } => {
                if let Err(e) = check_access_key(&access_key).and_then(|()| check_secret(secret.expose())) {
                    return Reply::Rejected(e.to_string());
                }
                match (self.users.contains_key(&access_key), create) {
                    (true, true) => return Reply::Rejected(format!("user {access_key} exists")),
                    (false, false) => return Reply::Rejected(format!("no user {access_key}")),
                    _ => {}
                }
                self.users.insert(access_key, User { secret, admin });
                Reply::Applied
            }
            AccessCommand::DeleteUser { access_key } => {
                if self.users.remove(&access_key).is_none() {
                    return Reply::Rejected(format!("no user {access_key}"));
                }
                self.rules.remove_where(|(owner, _)| *owner == access_key);
                Reply::Applied
            }
            AccessCommand::Grant { access_key, resource, rule } => {
                if !self.users.contains_key(&access_key) {
                    return Reply::Rejected(format!("no user {access_key}"));
                }
                if rule.actions.is_empty() {
                    return Reply::Rejected("a rule names at least one action".into());
                }
                if resource.kind == ResourceKind::Group && rule.actions.contains(&Action::Pub) {
                    return Reply::Rejected("a consumer group takes Sub only".into());
                }
                let mut rule = rule;
                rule.actions.sort_unstable();
                rule.actions.dedup();
                self.rules.insert((access_key, resource), rule);
                Reply::Applied
            }
            AccessCommand::Revoke { access_key, resource } => {
                if self.rules.remove(&(access_key.clone(), resource.clone())).is_none() {
                    return Reply::Rejected(format!("user {access_key} has no rule on {resource}"));
                }
                Reply::Applied
            }
            AccessCommand::RotateHandleKey { key } => {
                if !key.valid() {
                    return Reply::Rejected("a handle key is 64 hex digits".into());
                }
                let id = self.handle_keys.keys().max().map_or(1, |last| last.wrapping_add(1));
                self.handle_keys.insert(id, key);
                // The one before stays, so handles sealed under it still open.
                self.handle_keys.remove_where(|k| *k < id.saturating_sub(1));
                Reply::Applied
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(t: &mut AccessTables, key: &str, admin: bool) {
        let cmd =
            AccessCommand::PutUser { access_key: key.into(), secret: Secret::new("s3cret-key"), admin, create: true };
        assert_eq!(t.apply(cmd), Reply::Applied);
    }

    fn grant(t: &mut AccessTables, key: &str, resource: &str, actions: &[Action], decision: Decision) -> Reply {
        let rule = Rule { actions: actions.to_vec(), decision };
        t.apply(AccessCommand::Grant { access_key: key.into(), resource: resource.parse().unwrap(), rule })
    }

    #[test]
    fn deny_wins_prefixes_match_and_no_rule_means_no_access() {
        let mut t = AccessTables::default();
        put(&mut t, "alice", false);
        put(&mut t, "root", true);
        use Action::*;
        use ResourceKind::*;
        assert!(!t.permits("alice", Pub, Topic, "orders"), "no rule, no access");
        assert_eq!(grant(&mut t, "alice", "Topic:ord*", &[Pub, Sub], Decision::Allow), Reply::Applied);
        assert!(t.permits("alice", Pub, Topic, "orders"));
        assert!(t.permits("alice", Sub, Topic, "ord"));
        assert!(!t.permits("alice", Pub, Topic, "or"), "a prefix covers only names that start with it");
        assert!(!t.permits("alice", Sub, Group, "orders"), "a topic rule does not cover a group");
        assert_eq!(grant(&mut t, "alice", "Topic:orders-secret", &[Sub], Decision::Deny), Reply::Applied);
        assert!(!t.permits("alice", Sub, Topic, "orders-secret"), "deny wins over a wider allow");
        assert!(t.permits("alice", Pub, Topic, "orders-secret"), "a deny covers only its actions");
        assert!(t.permits("root", Sub, Group, "anything"), "an admin may do everything");
        assert!(!t.permits("mallory", Pub, Topic, "orders"), "an unknown user may do nothing");
        // Another user's rules never leak into alice's.
        put(&mut t, "bob", false);
        assert_eq!(grant(&mut t, "bob", "Group:*", &[Sub], Decision::Allow), Reply::Applied);
        assert!(!t.permits("alice", Sub, Group, "g"));
        assert!(t.permits("bob", Sub, Group, "g"));
    }

    #[test]
    fn bad_changes_are_refused_and_change_nothing() {
        let mut t = AccessTables::default();
        put(&mut t, "alice", false);
        let before = t.clone();
        let short =
            AccessCommand::PutUser { access_key: "x".into(), secret: Secret::new("short"), admin: false, create: true };
        let comma = AccessCommand::PutUser {
            access_key: "a,b".into(),
            secret: Secret::new("s3cret-key"),
            admin: false,
            create: true,
        };
        let again = AccessCommand::PutUser {
            access_key: "alice".into(),
            secret: Secret::new("s3cret-key"),
            admin: true,
            create: true,
        };
        let missing = AccessCommand::PutUser {
            access_key: "bob".into(),
            secret: Secret::new("s3cret-key"),
            admin: true,
            create: false,
        };
        for bad in [short, comma, again, missing] {
            assert!(matches!(t.apply(bad.clone()), Reply::Rejected(_)), "{bad:?}");
        }
        assert!(matches!(grant(&mut t, "bob", "Topic:t", &[Action::Pub], Decision::Allow), Reply::Rejected(_)));
        assert!(matches!(grant(&mut t, "alice", "Group:g", &[Action::Pub], Decision::Allow), Reply::Rejected(_)));
        assert!(matches!(grant(&mut t, "alice", "Topic:t", &[], Decision::Allow), Reply::Rejected(_)));
        let revoke = AccessCommand::Revoke { access_key: "alice".into(), resource: "Topic:t".parse().unwrap() };
        assert!(matches!(t.apply(revoke), Reply::Rejected(_)));
        assert_eq!(t, before);
    }

    #[test]
    fn deleting_a_user_takes_their_rules_and_the_secret_is_never_printed() {
        let mut t = AccessTables::default();
        put(&mut t, "alice", false);
        grant(&mut t, "alice", "Topic:t", &[Action::Pub], Decision::Allow);
        assert_eq!(t.apply(AccessCommand::DeleteUser { access_key: "alice".into() }), Reply::Applied);
        assert_eq!(t.rules.len(), 0);
        put(&mut t, "alice", false);
        assert!(!t.permits("alice", Action::Pub, ResourceKind::Topic, "t"), "a new user of the same name starts bare");
        let cmd = AccessCommand::PutUser {
            access_key: "a".into(),
            secret: Secret::new("s3cret-key"),
            admin: false,
            create: true,
        };
        let shown = format!("{cmd:?} {:?}", t.user("alice"));
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn resources_parse_as_rocketmq_writes_them() {
        let r: Resource = "Topic:orders*".parse().unwrap();
        assert_eq!((r.kind, r.name.as_str(), r.prefix), (ResourceKind::Topic, "orders", true));
        assert_eq!(r.to_string(), "Topic:orders*");
        let all: Resource = "group:*".parse().unwrap();
        assert!(all.covers(ResourceKind::Group, "any"));
        for bad in ["orders", "Queue:x", "Topic:", "Topic:a*b*", "Topic:*x"] {
            assert!(bad.parse::<Resource>().is_err(), "{bad}");
        }
    }
}
