//! Topics: a name, a number of queues, and the one kind of message they accept.

use rockraft_proto::rocketmq::MessageType;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopicKind {
    Normal,
    Fifo,
    Delay,
    Transaction,
    /// A message of priority p goes to queue min(p, queues - 1); receives take from the highest
    /// queue with messages first (RocketMQ 5.4's priority messages).
    Priority,
    /// A parent of lite topics (RocketMQ 5.5): each message names its lite topic, an ordered
    /// channel of its own that lite consumer groups subscribe to (`lite.rs`).
    Lite,
}

impl TopicKind {
    pub fn message_type(self) -> MessageType {
        match self {
            TopicKind::Normal => MessageType::Normal,
            TopicKind::Fifo => MessageType::Fifo,
            TopicKind::Delay => MessageType::Delay,
            TopicKind::Transaction => MessageType::Transaction,
            TopicKind::Priority => MessageType::Priority,
            TopicKind::Lite => MessageType::Lite,
        }
    }

    /// The message types the topic's queues accept: its own, and on a priority topic also
    /// messages without a priority (they take the queues in turn).
    pub fn accepted_message_types(self) -> Vec<MessageType> {
        match self {
            TopicKind::Priority => vec![MessageType::Priority, MessageType::Normal],
            kind => vec![kind.message_type()],
        }
    }
}

/// A topic type no topic has; holds what was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown topic type {0:?} (normal, fifo, delay, transaction, priority, lite)")]
pub struct UnknownTopicKind(pub String);

impl std::str::FromStr for TopicKind {
    type Err = UnknownTopicKind;
    fn from_str(s: &str) -> Result<Self, UnknownTopicKind> {
        match s {
            "normal" => Ok(TopicKind::Normal),
            "fifo" => Ok(TopicKind::Fifo),
            "delay" => Ok(TopicKind::Delay),
            "transaction" => Ok(TopicKind::Transaction),
            "priority" => Ok(TopicKind::Priority),
            "lite" => Ok(TopicKind::Lite),
            other => Err(UnknownTopicKind(other.to_string())),
        }
    }
}

impl std::fmt::Display for TopicKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TopicKind::Normal => "normal",
            TopicKind::Fifo => "fifo",
            TopicKind::Delay => "delay",
            TopicKind::Transaction => "transaction",
            TopicKind::Priority => "priority",
            TopicKind::Lite => "lite",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicConfig {
    pub name: String,
    pub queues: u32,
    pub kind: TopicKind,
    /// Lite parents: minutes after its last write that a lite topic is deleted (0 elsewhere).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lite_ttl_minutes: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

pub const MAX_QUEUES: u32 = 1024;
/// How long a lite topic nobody writes to lives unless its parent says otherwise.
pub const DEFAULT_LITE_TTL_MINUTES: u32 = 24 * 60;

/// Why a topic or group configuration is refused. Its text goes into replicated replies: it must
/// not change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidConfig {
    #[error("illegal topic name {0:?}")]
    IllegalTopic(String),
    #[error("illegal consumer group name {0:?}")]
    IllegalGroup(String),
    #[error("bad request: {0}")]
    BadRequest(String),
}

/// RocketMQ's rule: 1–127 characters of `[A-Za-z0-9_%|-]`. Names also become directory names,
/// so nothing else may pass.
pub fn validate_name(name: &str) -> Result<(), InvalidConfig> {
    let ok = !name.is_empty()
        && name.len() <= 127
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'%' | b'|'));
    if ok { Ok(()) } else { Err(InvalidConfig::IllegalTopic(name.to_string())) }
}

impl TopicConfig {
    /// A topic of `kind` (a lite parent gets the default TTL).
    pub fn new(name: impl Into<String>, queues: u32, kind: TopicKind) -> TopicConfig {
        let lite_ttl_minutes = if kind == TopicKind::Lite { DEFAULT_LITE_TTL_MINUTES } else { 0 };
        TopicConfig { name: name.into(), queues, kind, lite_ttl_minutes }
    }

    pub fn validate(&self) -> Result<(), InvalidConfig> {
        validate_name(&self.name)?;
        if self.queues == 0 || self.queues > MAX_QUEUES {
            return Err(InvalidConfig::BadRequest(format!("a topic needs 1 to {MAX_QUEUES} queues")));
        }
        match (self.kind, self.lite_ttl_minutes) {
            (TopicKind::Lite, 0) => Err(InvalidConfig::BadRequest("a lite topic's TTL is at least one minute".into())),
            (TopicKind::Lite, _) | (_, 0) => Ok(()),
            _ => Err(InvalidConfig::BadRequest("only a lite topic has a lite TTL".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_escape_the_data_directory_are_refused() {
        for bad in ["", "../x", "a/b", "a b", ".", &"x".repeat(128)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        for good in ["T", "orders_2024", "%RETRY%g", "a-b|c"] {
            assert!(validate_name(good).is_ok(), "{good:?}");
        }
    }
}
