//! RocketMQ status codes, and how RockRaft's errors map onto them. Only codes every official
//! client knows are sent (the Rust client 5.0.0 panics on others).

use rockraft_proto::rocketmq::{Code, Status};

use crate::broker::Refusal;
use crate::cluster::ClusterError;
use crate::cluster::pop::PopError;

pub fn ok() -> Status {
    Status { code: Code::Ok as i32, message: "OK".into() }
}

pub fn status(code: Code, message: impl Into<String>) -> Status {
    Status { code: code as i32, message: message.into() }
}

/// A write that did not reach commit; `messages` is how many messages it carried (0 for writes
/// that carry none), which decides what "too large" is called.
pub fn write_failed(e: &ClusterError, messages: usize) -> Status {
    let code = match e {
        // Clients treat 5000x as retriable: the next attempt finds the new leader.
        ClusterError::NoLeader | ClusterError::Unreachable { .. } | ClusterError::Lagging { .. } => {
            Code::HaNotAvailable
        }
        // The clients back off and retry on this.
        // Retriable: the clients back off and send again; the alarm clears by itself.
        ClusterError::Busy { .. } | ClusterError::DiskLow { .. } => Code::TooManyRequests,
        ClusterError::TooLarge { .. } if messages == 1 => Code::MessageBodyTooLarge,
        ClusterError::TooLarge { .. } => Code::PayloadTooLarge,
        ClusterError::Raft(_) | ClusterError::Internal(_) => Code::InternalServerError,
    };
    status(code, e.to_string())
}

/// A command apply refused (the same on every replica); it changed nothing.
pub fn refused(r: &Refusal) -> Status {
    let code = match r {
        Refusal::TopicNotFound(_) => Code::TopicNotFound,
        Refusal::GroupNotFound(_) => Code::ConsumerGroupNotFound,
        Refusal::TopicExists(_) | Refusal::GroupExists(_) | Refusal::Rejected(_) => Code::BadRequest,
        Refusal::OtherFamily(_) => Code::InternalServerError,
    };
    status(code, r.to_string())
}

/// This node has no handle key yet (the cluster was initialised a moment ago): clients treat
/// 5000x as retriable, and by their next attempt the first key is in place.
pub fn no_handle_key() -> Status {
    status(Code::HaNotAvailable, "no handle key yet (the cluster was initialised a moment ago); try again")
}

/// A pop or dead letter that failed.
pub fn pop_failed(e: &PopError) -> Status {
    let code = match e {
        PopError::GroupNotFound(_) => Code::ConsumerGroupNotFound,
        PopError::TopicNotFound(_) => Code::TopicNotFound,
        PopError::IllegalFilter(_) => Code::IllegalFilterExpression,
        PopError::Forbidden(_) => Code::Forbidden,
        PopError::Cluster(e) => return write_failed(e, 0),
        // Clients retry a receive that failed so: a quarantined or unavailable filter delivers
        // (and passes over) nothing until it runs again.
        PopError::Internal(_) | PopError::Quarantined(_) | PopError::FilterUnavailable(_) => Code::InternalServerError,
    };
    status(code, e.to_string())
}

/// A rejected request, with the status it gets; it changed nothing.
#[derive(Debug)]
pub struct Rejection(pub Status);

impl Rejection {
    pub fn new(code: Code, message: impl Into<String>) -> Rejection {
        Rejection(status(code, message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_errors_get_the_status_clients_act_on() {
        let code = |e: ClusterError, messages| write_failed(&e, messages).code;
        assert_eq!(code(ClusterError::NoLeader, 1), Code::HaNotAvailable as i32);
        let gone = ClusterError::Unreachable { addr: "x:1".into(), reason: "refused".into() };
        assert_eq!(code(gone.clone(), 3), Code::HaNotAvailable as i32);
        assert_eq!(code(ClusterError::TooLarge { len: 2, max: 1 }, 1), Code::MessageBodyTooLarge as i32);
        assert_eq!(code(ClusterError::TooLarge { len: 2, max: 1 }, 3), Code::PayloadTooLarge as i32);
        assert_eq!(code(ClusterError::Raft("stopped".into()), 1), Code::InternalServerError as i32);
        assert_eq!(code(ClusterError::Busy { waiting_bytes: 1 }, 1), Code::TooManyRequests as i32);
        let low = ClusterError::DiskLow { node: 2, free_bytes: 5 << 20, mark_bytes: 32 << 20, critical: false };
        assert_eq!(code(low.clone(), 1), Code::TooManyRequests as i32);
        assert_eq!(
            low.to_string(),
            "disk low on node 2: 5 MiB free, below its soft free-space mark of 32 MiB; sends resume once space is freed"
        );
        assert_eq!(pop_failed(&PopError::Cluster(gone)).code, Code::HaNotAvailable as i32);
        assert_eq!(pop_failed(&PopError::GroupNotFound("g".into())).code, Code::ConsumerGroupNotFound as i32);
        // A quarantined filter: a status every client knows, and the plugin's own explanation.
        let why = "plugin json is quarantined: 100 failures in 60 s; re-enable with `rockraft plugin enable json`";
        let quarantined = pop_failed(&PopError::Quarantined(why.into()));
        assert_eq!((quarantined.code, quarantined.message.as_str()), (Code::InternalServerError as i32, why));
    }
}
