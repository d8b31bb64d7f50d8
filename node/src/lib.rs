//! RockRaft: a RocketMQ-5-style message broker whose CommitLog is a Raft log.
//!
//! - `store`: segment files, log index, ConsumeQueue, recovery.
//! - `raft`: the openraft type configuration and the log storage over `store`.

pub mod broker;
pub mod raft;
pub mod store;
