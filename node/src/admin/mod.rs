//! Operating a node: its configuration and the admin API (`rockraft.v1.AdminService`) that the
//! CLI calls on the node's own admin listener (`admin_addr`); a node passes a request that needs
//! the leader on to the leader's raft port, as a member.

pub mod api;
mod config;
mod service;
mod typed;

pub use config::{BrokerConfig, LimitsConfig, Member, NodeConfig, RaftTimings, StorageConfig};
pub use service::{AdminServer, CallOptions, Credentials, call, call_as, call_on, call_with};
pub(crate) use typed::page_after;
