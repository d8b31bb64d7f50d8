//! Why an admin request was not served, as a caller can tell the cases apart; and the one mapping
//! of those reasons to gRPC statuses.

use crate::broker::BrokerError;
use crate::cluster::ClusterError;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The request itself is wrong (a bad name, kind or range): asking again will not help.
    #[error("{0}")]
    Invalid(String),
    /// The request is well formed but the cluster's state refuses it (a plugin in use, a
    /// resolved transaction, a learner that cannot be reached).
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    NotFound(String),
    /// It exists already, configured otherwise.
    #[error("{0}")]
    Exists(String),
    /// Not now: no leader is known, or it did not answer; try again.
    #[error("{0}")]
    Unavailable(String),
    /// Something failed on the node (a disk read, a task that died).
    #[error("{0}")]
    Fault(String),
    /// Writing through the log failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// A status already decided: the leader's answer to a request passed on to it, or this
    /// node's own, passed back as it is.
    #[error("{}", .0.message())]
    Answered(tonic::Status),
}

impl AdminError {
    pub(crate) fn invalid(e: impl std::fmt::Display) -> AdminError {
        AdminError::Invalid(e.to_string())
    }

    pub(crate) fn fault(e: impl std::fmt::Display) -> AdminError {
        AdminError::Fault(e.to_string())
    }
}

impl From<AdminError> for tonic::Status {
    fn from(e: AdminError) -> tonic::Status {
        status(e)
    }
}

/// The gRPC status an admin error is answered with; its message is the error's text.
pub fn status(e: AdminError) -> tonic::Status {
    match e {
        AdminError::Answered(answer) => answer,
        e => tonic::Status::new(code(&e), e.to_string()),
    }
}

fn code(e: &AdminError) -> tonic::Code {
    use tonic::Code;
    match e {
        AdminError::Answered(answer) => answer.code(),
        AdminError::Invalid(_) => Code::InvalidArgument,
        AdminError::Refused(_) => Code::FailedPrecondition,
        AdminError::NotFound(_) => Code::NotFound,
        AdminError::Exists(_) => Code::AlreadyExists,
        AdminError::Unavailable(_) => Code::Unavailable,
        AdminError::Fault(_) => Code::Internal,
        AdminError::Cluster(c) if c.is_transient() => Code::Unavailable,
        AdminError::Cluster(ClusterError::DiskLow { .. } | ClusterError::Busy { .. }) => Code::ResourceExhausted,
        AdminError::Cluster(ClusterError::TooLarge { .. }) => Code::InvalidArgument,
        AdminError::Cluster(_) => Code::Internal,
        AdminError::Broker(BrokerError::TopicNotFound(_)) => Code::NotFound,
        AdminError::Broker(BrokerError::TopicExists(_)) => Code::AlreadyExists,
        AdminError::Broker(
            BrokerError::IllegalTopic(_) | BrokerError::IllegalGroup(_) | BrokerError::BadRequest(_),
        ) => Code::InvalidArgument,
        AdminError::Broker(_) => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_tell_a_refusal_from_a_fault_and_a_retry_by_the_status_code() {
        let code = |e: AdminError| status(e).code();
        assert_eq!(code(AdminError::Refused("in use".into())), tonic::Code::FailedPrecondition);
        assert_eq!(code(AdminError::Fault("disk".into())), tonic::Code::Internal);
        assert_eq!(code(ClusterError::NoLeader.into()), tonic::Code::Unavailable);
        assert_eq!(code(BrokerError::TopicNotFound("t".into()).into()), tonic::Code::NotFound);
        let disk = ClusterError::DiskLow { node: 2, free_bytes: 1 << 20, mark_bytes: 8 << 20, critical: false };
        let s = status(disk.into());
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert!(s.message().contains("disk low on node 2"), "{}", s.message());
    }

    #[test]
    fn the_leader_s_answer_to_a_request_passed_on_reaches_the_operator_as_it_was() {
        let answer = tonic::Status::already_exists("topic t already exists with another configuration");
        let s = status(AdminError::Answered(answer.clone()));
        assert_eq!((s.code(), s.message()), (answer.code(), answer.message()));
    }
}
