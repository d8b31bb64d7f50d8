//! The admin API's requests and answers (JSON over `AdminService.Call`): the operator's API only;
//! what members ask of the leader is `cluster`'s `PeerService`.

use serde::{Deserialize, Serialize};

use crate::broker::access::{Action, Decision, Secret};
use crate::broker::failover::Failover;
use crate::broker::group::GroupConfig;
use crate::broker::held::{HeldCounts, HeldEntry};
use crate::broker::settings::{ClusterSettings, SettingsChange};
use crate::broker::{GroupProgress, QueueSpan, TopicConfig};
use crate::plugin::PluginKind;
use crate::raft::NodeId;

pub use crate::broker::lite::LiteTopicInfo;

/// Most records one `QueueChecksums` request reads (each a record and its message), and most
/// checksums it returns: `cluster verify` splits its questions to fit.
pub const MAX_CHECKSUMMED_RECORDS: u64 = 4_000_000;
pub const MAX_CHECKSUMS: u64 = 4_096;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AdminRequest {
    Status,
    Init,
    AddNode {
        id: NodeId,
        raft_addr: String,
        client_addr: String,
        #[serde(default)]
        admin_addr: String,
    },
    RemoveNode {
        id: NodeId,
    },
    TransferLeader {
        to: NodeId,
    },
    CreateTopic(TopicConfig),
    DeleteTopic {
        name: String,
    },
    ListTopics,
    /// The lite topics of `parent` from `from` on, at most `limit`, with `group`'s backlog.
    ListLiteTopics {
        parent: String,
        group: Option<String>,
        from: String,
        limit: usize,
    },
    CreateGroup(GroupConfig),
    DeleteGroup {
        name: String,
    },
    ListGroups,
    /// Moves the group's position on every queue of the topic to the first message stored at or
    /// after `time_ms`; what was in flight is forgotten.
    ResetOffset {
        group: String,
        topic: String,
        time_ms: i64,
    },
    ListMessages {
        topic: String,
        queue: u32,
        from: u64,
        limit: u64,
        local: bool,
    },
    GetMessage {
        id: String,
        local: bool,
    },
    /// This node's applied index and a digest of its replicated state: replicas at the same
    /// index must agree (`rockraft cluster verify`).
    Digest,
    /// Each queue's ConsumeQueue span up to log index `upto` on this node (`cluster verify`).
    QueueSpans {
        upto: u64,
    },
    /// Checksums of the ConsumeQueue records of `from..to` of a queue and of their messages, one
    /// per `chunk` offsets (`cluster verify` narrows a difference down to its first offset).
    QueueChecksums {
        topic: String,
        queue: u32,
        from: u64,
        to: u64,
        chunk: u64,
    },
    /// Changes cluster settings through the log (`rockraft cluster configure`).
    Configure(SettingsChange),
    /// The cluster settings as this node has applied them.
    Settings,
    /// The failover history as this node has applied it, newest first (`rockraft cluster
    /// history`).
    History,
    /// Pending delayed messages (`timers`), or transactional halves: open ones, or all kept
    /// (`all`: also committed and rolled back ones, e.g. rolled back for age).
    ListHeld {
        timers: bool,
        topic: Option<String>,
        all: bool,
        /// The page after the entry with this handle (the last one of the previous page).
        #[serde(default)]
        after: Option<String>,
        limit: usize,
    },
    /// Commits or rolls back a transactional half by message id, as an operator (a half the
    /// checker rolled back can still be committed while its message is kept).
    ResolveTransaction {
        message_id: String,
        commit: bool,
    },
    /// Checks the module on the leader (it compiles, speaks this ABI, is a `kind`), then
    /// replicates it.
    RegisterPlugin {
        name: String,
        kind: PluginKind,
        #[serde(with = "crate::broker::plugins::base64_bytes")]
        module: Vec<u8>,
    },
    RemovePlugin {
        name: String,
    },
    /// Calls a quarantined plugin again.
    EnablePlugin {
        name: String,
    },
    ListPlugins,
    /// Binds a group to a filter or a transaction topic to a checker (`plugin: None` unbinds);
    /// the leader first opens the plugin with `config`, so a configuration it refuses is not bound.
    BindPlugin {
        target: BindTarget,
        plugin: Option<String>,
        #[serde(default)]
        config: String,
    },
    /// Creates a user (`rockraft user create`).
    CreateUser {
        access_key: String,
        secret: Secret,
        admin: bool,
    },
    /// Changes a user's secret or admin flag (`None`: unchanged).
    UpdateUser {
        access_key: String,
        secret: Option<Secret>,
        admin: Option<bool>,
    },
    /// Removes a user and every rule of theirs.
    DeleteUser {
        access_key: String,
    },
    /// Users by access key and whether they are admins; never their secrets.
    ListUsers,
    /// Gives a user an allow or a deny of `actions` on a resource (`Topic:orders`,
    /// `Topic:orders*`, `Group:g`), replacing their rule on it.
    Grant {
        access_key: String,
        resource: String,
        actions: Vec<Action>,
        decision: Decision,
    },
    Revoke {
        access_key: String,
        resource: String,
    },
    /// Every rule, or one user's.
    ListAcl {
        access_key: Option<String>,
    },
    /// A new key for sealing handles, made on the leader; handles sealed under the one before
    /// still open, older ones no longer do.
    RotateHandleKey,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserInfo {
    pub access_key: String,
    pub admin: bool,
    pub rules: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AclLine {
    pub access_key: String,
    pub resource: String,
    pub actions: Vec<Action>,
    pub decision: Decision,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BindTarget {
    Group(String),
    Topic(String),
}

/// A plugin as `plugin list` shows it: built in or registered, what uses it, and this node's
/// counts of its calls.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PluginInfo {
    pub name: String,
    pub kind: PluginKind,
    pub version: String,
    pub builtin: bool,
    pub size: usize,
    pub hash: String,
    pub registered_ms: i64,
    /// `group G` / `topic T`.
    pub bound_to: Vec<String>,
    pub calls: u64,
    pub messages: u64,
    pub failures: u64,
    /// Fuel its batch calls burned on this node, and the time they took.
    #[serde(default)]
    pub fuel: u64,
    #[serde(default)]
    pub busy_ms: u64,
    /// Why the plugin is quarantined (not called), if it is.
    #[serde(default)]
    pub quarantined: Option<String>,
}

impl AdminRequest {
    /// Whether only the leader can answer it (a follower forwards).
    pub fn needs_leader(&self) -> bool {
        match self {
            AdminRequest::AddNode { .. }
            | AdminRequest::RemoveNode { .. }
            | AdminRequest::TransferLeader { .. }
            | AdminRequest::ResetOffset { .. }
            | AdminRequest::ListHeld { .. }
            | AdminRequest::ResolveTransaction { .. }
            | AdminRequest::RegisterPlugin { .. }
            | AdminRequest::BindPlugin { .. }
            | AdminRequest::UpdateUser { .. }
            | AdminRequest::RotateHandleKey
            | AdminRequest::Settings => true,
            AdminRequest::ListMessages { local, .. } | AdminRequest::GetMessage { local, .. } => !local,
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminResponse {
    Status(NodeStatus),
    Done(String),
    Topics(Vec<TopicInfo>),
    LiteTopics(Vec<LiteTopicInfo>),
    Groups(Vec<GroupInfo>),
    Messages(Vec<MessageLine>),
    Digest(StateDigest),
    Held(Vec<HeldEntry>),
    Plugins(Vec<PluginInfo>),
    Settings(ClusterSettings),
    History(Vec<Failover>),
    QueueSpans(Vec<QueueSpan>),
    Checksums(Vec<u32>),
    Users(Vec<UserInfo>),
    Acl(Vec<AclLine>),
    Error(String),
}

/// What part a node plays in its group right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    /// Replicates but does not vote (a node being added).
    Learner,
    ShuttingDown,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "Leader",
            Role::Follower => "Follower",
            Role::Candidate => "Candidate",
            Role::Learner => "Learner",
            Role::ShuttingDown => "ShuttingDown",
        }
    }
}

/// The word scripts match on (`Leader`); `pad` so column widths apply.
impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeStatus {
    pub id: NodeId,
    pub role: Role,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: Option<u64>,
    pub committed: Option<u64>,
    pub applied: Option<u64>,
    pub purged: Option<u64>,
    pub members: Vec<MemberInfo>,
    /// The other members' clocks as this node reads them, and whether its own is off.
    #[serde(default)]
    pub clock: crate::cluster::skew::ClockReport,
    /// This node's free space now, and the voters' as it read them last, with the alarm.
    #[serde(default)]
    pub disk: Box<NodeDisk>,
    /// The members that refuse this node's calls (another cluster secret, a certificate they do
    /// not take), and why.
    #[serde(default)]
    pub refused_by: std::collections::BTreeMap<NodeId, String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeDisk {
    pub here: crate::cluster::disk::DiskReading,
    pub cluster: crate::cluster::disk::DiskReport,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDigest {
    pub applied: Option<u64>,
    pub digest: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemberInfo {
    pub id: NodeId,
    pub raft_addr: String,
    pub client_addr: String,
    #[serde(default)]
    pub admin_addr: String,
    pub voter: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopicInfo {
    pub config: TopicConfig,
    /// `(queue, start, next)` per queue.
    pub queues: Vec<(u32, u64, u64)>,
    /// Messages stored but not delivered yet: pending timers, open halves.
    #[serde(default)]
    pub held: HeldCounts,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupInfo {
    pub config: GroupConfig,
    /// One line per topic the group has consumed.
    pub progress: Vec<GroupProgress>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MessageLine {
    pub topic: String,
    pub queue: u32,
    pub offset: u64,
    pub message_id: String,
    pub tag: String,
    pub keys: Vec<String>,
    pub body_len: usize,
    pub store_timestamp_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_print_as_the_words_scripts_match_and_cross_the_wire_as_themselves() {
        assert_eq!(format!("{:<8}|", Role::Leader), "Leader  |");
        assert_eq!(Role::Follower.to_string(), "Follower");
        for role in [Role::Leader, Role::Follower, Role::Candidate, Role::Learner, Role::ShuttingDown] {
            let json = serde_json::to_string(&role).unwrap();
            assert_eq!(serde_json::from_str::<Role>(&json).unwrap(), role);
        }
    }
}
