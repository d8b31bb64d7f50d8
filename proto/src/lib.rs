//! Generated protobuf and gRPC code.
//!
//! - [`rocketmq`]: `apache.rocketmq.v2`, the API the official RocketMQ 5 clients speak.
//! - [`rockraft`]: `rockraft.v1`, Raft replication, peer calls to the leader and the admin API;
//!   [`rockraft::log`]: `rockraft.v1.log`, the commands of the Raft log;
//!   [`rockraft::peer`]: `rockraft.v1.peer`, what the peer calls carry.

// Generated code: its shapes follow the .proto files, not our lint rules.
#[allow(clippy::all, clippy::pedantic)]
pub mod rocketmq {
    tonic::include_proto!("apache.rocketmq.v2");
}

#[allow(clippy::all, clippy::pedantic)]
pub mod rockraft {
    tonic::include_proto!("rockraft.v1");

    #[allow(clippy::all, clippy::pedantic)]
    pub mod peer {
        tonic::include_proto!("rockraft.v1.peer");
    }

    /// `rockraft.v1.log`: the commands of the Raft log, one message family per entry kind.
    #[allow(clippy::all, clippy::pedantic)]
    pub mod log {
        tonic::include_proto!("rockraft.v1.log");
    }
}
