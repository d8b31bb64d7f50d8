//! Operating a node: its configuration and the admin API (`rockraft.v1.AdminService`) that the
//! CLI calls on the node's own admin listener (`admin_addr`); a node passes a request that needs
//! the leader on to the leader's raft port, as a member. The operations are grouped by family
//! (`membership`, `topics`, `access`, `plugins`, `messages`); `typed` serves them.

mod access;
pub mod api;
mod client;
mod config;
pub mod error;
mod membership;
mod messages;
mod plugins;
mod service;
mod topics;
mod typed;

pub use client::{AdminCall, AdminClient, CallError, CallOptions, Credentials, SignedChannel, call};
pub use config::{BrokerConfig, ConfigError, LimitsConfig, Member, NodeConfig, RaftTimings, StorageConfig};
pub use error::AdminError;
pub use service::{AdminParts, AdminServer};
pub(crate) use typed::{MAX_PAGE, page_after};
