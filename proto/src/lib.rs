//! Generated protobuf and gRPC code.
//!
//! - [`rocketmq`]: `apache.rocketmq.v2`, the API the official RocketMQ 5 clients speak.
//! - [`rockraft`]: `rockraft.v1`, Raft replication and admin calls between nodes.

pub mod rocketmq {
    tonic::include_proto!("apache.rocketmq.v2");
}

pub mod rockraft {
    tonic::include_proto!("rockraft.v1");
}
