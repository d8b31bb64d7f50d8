//! Why a request that needs the leader did not get its answer.

/// Typed so that every caller (the proxy, the admin API, a peer across the wire) decides by the
/// variant, never by the text. It crosses the wire as its protobuf form (`cluster/wire.rs`),
/// inside the peer reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// An election is running, or this node is cut off from the leader.
    #[error("no leader is known right now")]
    NoLeader,
    /// The leader is known but the call to it got no answer.
    #[error("the leader at {addr} could not be reached: {reason}")]
    Unreachable { addr: String, reason: String },
    /// The command is larger than one log entry can be.
    #[error("{len} bytes exceed the largest log entry, {max} bytes")]
    TooLarge { len: u64, max: u64 },
    /// Too many sends are waiting for the log already: back off and try again.
    #[error("{waiting_bytes} bytes of sends are waiting for the log; try again shortly")]
    Busy { waiting_bytes: u64 },
    /// A voter's disk is below a free-space mark (`cluster/disk.rs`): nothing that would fill
    /// it further is appended until space is freed. Sends are refused below the soft mark,
    /// everything but what frees space below the hard one (`critical`).
    #[error(
        "disk low on node {node}: {} MiB free, below its {} free-space mark of {} MiB; {} resume once space is freed",
        free_bytes >> 20,
        if *critical { "hard" } else { "soft" },
        mark_bytes >> 20,
        if *critical { "writes" } else { "sends" }
    )]
    DiskLow { node: crate::raft::NodeId, free_bytes: u64, mark_bytes: u64, critical: bool },
    /// This node did not apply up to `index` in time (it is behind, or very busy).
    #[error("not applied up to index {index} in time")]
    Lagging { index: u64 },
    /// Raft failed the request otherwise (shutting down, an entry discarded by a leader change).
    #[error("raft: {0}")]
    Raft(String),
    /// A peer's answer made no sense.
    #[error("internal: {0}")]
    Internal(String),
}

impl ClusterError {
    /// Whether trying again shortly may succeed, once a leader is elected, reachable or caught up.
    pub fn is_transient(&self) -> bool {
        matches!(self, ClusterError::NoLeader | ClusterError::Unreachable { .. } | ClusterError::Lagging { .. })
    }
}

impl From<crate::raft::GroupError> for ClusterError {
    fn from(e: crate::raft::GroupError) -> ClusterError {
        use crate::raft::GroupError;
        match e {
            GroupError::NotLeader(_) => ClusterError::NoLeader,
            GroupError::Timeout(within) => ClusterError::Raft(format!("not done within {within:?}")),
            GroupError::Raft(why) => ClusterError::Raft(why),
        }
    }
}
