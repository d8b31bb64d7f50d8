//! RocketMQ status codes, and how RockRaft's errors map onto them. Only codes every official
//! client knows are sent (the Rust client 5.0.0 panics on others).

use rockraft_proto::rocketmq::{Code, Status};

use crate::node::WriteError;

pub fn ok() -> Status {
    Status { code: Code::Ok as i32, message: "OK".into() }
}

pub fn status(code: Code, message: impl Into<String>) -> Status {
    Status { code: code as i32, message: message.into() }
}

/// A send or admin write that did not reach commit.
pub fn write_failed(e: &WriteError) -> Status {
    match e {
        // Clients treat 5000x as retriable: the next attempt finds the new leader.
        WriteError::NoLeader | WriteError::Forward(_) => status(Code::HaNotAvailable, e.to_string()),
        WriteError::Raft(_) => status(Code::InternalServerError, e.to_string()),
    }
}

/// A rejected request, with the status it gets; it changed nothing.
#[derive(Debug)]
pub struct Rejection(pub Status);

impl Rejection {
    pub fn new(code: Code, message: impl Into<String>) -> Rejection {
        Rejection(status(code, message))
    }
}
