//! Raft, as openraft 0.10 runs it over RockRaft's storage.
//!
//! - [`TypeConfig`]: the openraft type configuration of a RockRaft group.
//! - [`StateMachine`]: `RaftStateMachine` over the broker (`broker/`), which knows nothing of Raft.
//! - [`LogStore`]: `RaftLogStorage` over the CommitLog (`store/`): every Raft entry is one
//!   CommitLog record, so the Raft log *is* the message log.
//!
//! openraft is alpha software; its types stay behind this module so API changes land here only.

pub mod contact;
mod convert;
mod entry_codec;
mod group;
mod log_store;
#[cfg(test)]
mod log_store_suite_test;
mod network;
pub mod refusals;
mod registry;
pub mod repair;
mod roster;
pub mod runtime;
mod service;
mod state_machine;
mod wire;
#[cfg(test)]
mod wire_test;

use std::fmt;

use bytes::Bytes;

/// A node's log levels unless `RUST_LOG` says otherwise. openraft warns of every failed
/// replication call, its progress and every failed heartbeat (ten a second to a member that is
/// down, thousands to one that refuses us); the member's gate (`refusals`) says so instead, once
/// per change and at most once a minute.
pub const DEFAULT_LOG_FILTER: &str = "info,openraft=warn,openraft::replication=error,openraft::core::heartbeat=error,\
     openraft::engine::handler::replication_handler=error";

pub use entry_codec::log_id;
pub use group::{Group, GroupError, GroupOptions, GroupStatus, GroupWatch, Lead, Member, Role};
pub use log_store::{LogStore, LogStoreReader, ReadRepair};
pub use network::{ChannelError, Dialer, Network, PeerChannel, channel, member_channel};
pub use registry::GroupRegistry;
pub use roster::GroupRoster;
pub use service::{RaftGroups, RaftServer};
pub use state_machine::{StateMachine, damaged_snapshot, other_members, replace_snapshot};

/// The payload of a normal entry: a broker command, encoded by `broker/`. The log stores these
/// bytes as they are and hands them back zero-copy.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommandBytes(pub Bytes);

impl fmt::Display for CommandBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "command({} bytes)", self.0.len())
    }
}

/// One Raft group of the cluster, as its replication calls name it (the `rockraft-group`
/// request header): the metadata group, or a data group (a data partition's number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(pub u32);

impl GroupId {
    /// The metadata group: topics, consumer groups, access, plugins, settings; no queues.
    pub const METADATA: GroupId = GroupId(0);
    /// The first data group. In a data directory of layout 2 (written before the metadata had a
    /// group of its own) it holds the metadata too.
    pub const FIRST: GroupId = GroupId(1);
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The request header a replication call names its group in.
pub const GROUP_HEADER: &str = "rockraft-group";

/// Where a member of the group can be reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeInfo {
    /// Node-to-node gRPC (Raft replication, admin, forwarded writes).
    pub raft_addr: String,
    /// Where clients reach the node's RocketMQ proxy endpoint (its `advertised_client_addr`):
    /// what every member hands out in routes.
    pub client_addr: String,
    /// Where operators reach the node's admin API (empty: not recorded, as in memberships made
    /// by earlier releases).
    #[serde(default)]
    pub admin_addr: String,
    /// The rack (or zone) the node runs in (empty: none named): from five nodes each data group
    /// has three replicas, spread over the racks named.
    #[serde(default)]
    pub rack: String,
}

impl fmt::Display for NodeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raft={} client={}", self.raft_addr, self.client_addr)
    }
}

openraft::declare_raft_types!(
    /// The openraft type configuration of a RockRaft group.
    pub TypeConfig:
        D = CommandBytes,
        R = crate::broker::Reply,
        Node = NodeInfo,
        AsyncRuntime = runtime::NodeRuntime,
);

pub type NodeId = u64;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;
pub type Membership = openraft::Membership<NodeId, NodeInfo>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
