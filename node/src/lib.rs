// The admin service's futures nest deeply (a request passed on to the leader, inside the router).
#![recursion_limit = "256"]
//! RockRaft: a RocketMQ-5-style message broker whose CommitLog is a Raft log.
//!
//! - `store`: segment files, log index, ConsumeQueue, recovery.
//! - `raft`: openraft and nothing else names it: the `Group` handle (propose, read index, who
//!   leads, membership, status), log storage over `store`, network over tonic.
//! - `broker`: the state machine (topics, queue offsets, ConsumeQueue records).
//! - `cluster`: how a node reaches the leader: forwarded writes, read index, pop planning, the
//!   leader's clock, typed errors, and the internal `PeerService` (raft port only).
//! - `jobs`: the one owner of background work (checkpoints, retention, renewals, leader-only
//!   jobs that start and stop with leadership) and the node's fail-stop signal.
//! - `proxy`: the RocketMQ gRPC endpoint the official clients use.
//! - `sessions`: the producers whose Telemetry streams this node holds (transaction checks).
//! - `auth`: who is calling and may they: signatures, the planes' interceptors, the cluster
//!   secret, sealed handles, TLS (users and rules are replicated in `broker`).
//! - `admin`, `cli`: configuration, the admin API and the `rockraft` command line.
//! - `metrics`: what a node counts (requests, latencies, events), shared by the parts that count.
//! - `http`: the status page, `/metrics`, `/healthz` and `/readyz` on their own listener.
//! - `node`: one node wired together.
//! - `simulation`: the seams the deterministic simulator (`sim/`) swaps (network, wall clock,
//!   blocking work); below every other module.
//!
//! Layering, `a ← b` meaning "a is imported by b": metrics ← store ← broker ← auth ← raft ←
//! cluster ← {jobs, proxy, admin} ← http ← node ← cli, and jobs may use proxy's renewal table; `sessions` stands
//! alone and is used by cluster, jobs and proxy. No module imports
//! one that imports it back; `tests/layering.rs` checks.

pub mod admin;
pub mod auth;
pub mod broker;
pub mod cli;
pub mod cluster;
pub mod failpoint;
pub mod http;
pub mod jobs;
pub mod metrics;
pub mod node;
pub mod plugin;
pub mod proxy;
pub mod raft;
pub mod remoting;
pub mod replicas;
pub mod sessions;
pub mod simulation;
pub mod store;
