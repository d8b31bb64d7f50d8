//! Generated protobuf and gRPC code.
//!
//! - [`rocketmq`]: `apache.rocketmq.v2`, the API the official RocketMQ 5 clients speak.
//! - [`rockraft`]: `rockraft.v1`, Raft replication, peer calls to the leader and the admin API.

// Generated code: its shapes follow the .proto files, not our lint rules.
#[allow(clippy::all, clippy::pedantic)]
pub mod rocketmq {
    tonic::include_proto!("apache.rocketmq.v2");
}

#[allow(clippy::all, clippy::pedantic)]
pub mod rockraft {
    tonic::include_proto!("rockraft.v1");

    /// `rockraft.v1.log`: the commands of the Raft log, one message family per entry kind.
    pub mod log {
        tonic::include_proto!("rockraft.v1.log");
    }
}
