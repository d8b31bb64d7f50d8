//! Operating a node: its configuration and the admin API (`rockraft.v1.AdminService`) that the
//! CLI calls, on either port; a node passes a request that needs the leader on to the leader's.

pub mod api;
mod config;
mod service;

pub use config::{BrokerConfig, Member, NodeConfig, RaftTimings, StorageConfig};
pub use service::{AdminServer, call, call_on};
