use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("topic {0} does not exist")]
    TopicNotFound(String),
    #[error("illegal topic name {0:?}")]
    IllegalTopic(String),
    #[error("illegal consumer group name {0:?}")]
    IllegalGroup(String),
    #[error("topic {0} already exists with another configuration")]
    TopicExists(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("log entry is not a broker command: {0}")]
    CorruptEntry(String),
    /// An entry this release cannot read, as a newer release wrote it: the node stops applying
    /// the log rather than skip it (replicas of the newer release apply it).
    #[error("log entry {index} {source}: upgrade this node before it applies the log")]
    Unreadable { index: u64, source: crate::broker::command::DecodeError },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing state to disk failed in a way that leaves the disk unknown: the node stops.
    #[error("stopped after a failed write: {0}")]
    FailStopped(String),
    #[error("metadata: {0}")]
    Meta(#[from] sled::Error),
}

impl From<crate::broker::topic::InvalidConfig> for BrokerError {
    fn from(e: crate::broker::topic::InvalidConfig) -> BrokerError {
        use crate::broker::topic::InvalidConfig;
        match e {
            InvalidConfig::IllegalTopic(name) => BrokerError::IllegalTopic(name),
            InvalidConfig::IllegalGroup(name) => BrokerError::IllegalGroup(name),
            InvalidConfig::BadRequest(why) => BrokerError::BadRequest(why),
        }
    }
}

impl From<BrokerError> for std::io::Error {
    fn from(e: BrokerError) -> std::io::Error {
        match e {
            BrokerError::Store(s) => s.into(),
            other => std::io::Error::other(other),
        }
    }
}
