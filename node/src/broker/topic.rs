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
    /// The data group holding each queue, by queue: given when the topic is created, from the
    /// number of data groups then (see [`TopicConfig::spread`]). Empty: every queue is in the
    /// first group (a topic created with one data group, or before topics were spread).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

pub const MAX_QUEUES: u32 = 1024;
/// The group every queue of a cluster of one data group is in.
const FIRST_DATA_GROUP: u32 = 1;
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
        TopicConfig { name: name.into(), queues, kind, lite_ttl_minutes, groups: Vec::new() }
    }

    /// The data group holding `queue`.
    pub fn group_of(&self, queue: u32) -> u32 {
        self.groups.get(queue as usize).copied().unwrap_or(FIRST_DATA_GROUP)
    }

    /// The topic with its queues spread over `data_groups` groups, round robin from the one
    /// `index` (the creating entry's) points at, so the first queues of successive topics land
    /// in different groups. Deterministic: every replica gives the same groups at the same entry.
    ///
    /// A lite topic's queues all go to one group (its lite topics, their subscriptions and
    /// their progress are kept together, in the group a receive and a subscription go to), and
    /// so do a priority topic's (a receive takes the highest priority across all its queues,
    /// which one group's pop plan sees at once).
    pub fn spread(mut self, index: u64, data_groups: u32) -> TopicConfig {
        let together = matches!(self.kind, TopicKind::Lite | TopicKind::Priority);
        self.groups = match data_groups {
            0 | 1 => Vec::new(),
            n => (0..self.queues)
                .map(|q| if together { 0 } else { u64::from(q) })
                .map(|q| FIRST_DATA_GROUP + ((index + q) % u64::from(n)) as u32)
                .collect(),
        };
        self
    }

    /// Whether `other` asks for this topic: the same name, queues, kind and TTL, wherever its
    /// queues were placed.
    pub fn same_request(&self, other: &TopicConfig) -> bool {
        (&self.name, self.queues, self.kind, self.lite_ttl_minutes)
            == (&other.name, other.queues, other.kind, other.lite_ttl_minutes)
    }

    pub fn validate(&self) -> Result<(), InvalidConfig> {
        validate_name(&self.name)?;
        if self.queues == 0 || self.queues > MAX_QUEUES {
            return Err(InvalidConfig::BadRequest(format!("a topic needs 1 to {MAX_QUEUES} queues")));
        }
        // Placed by apply, never asked for: a request naming groups is refused.
        if !self.groups.is_empty() {
            return Err(InvalidConfig::BadRequest(
                "a topic's queues are placed by the cluster, not by a request".into(),
            ));
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
    fn queues_are_spread_round_robin_from_the_creating_entry() {
        let t = TopicConfig::new("T", 4, TopicKind::Normal);
        assert!(t.clone().spread(7, 1).groups.is_empty(), "one data group: nothing to say");
        let spread = t.clone().spread(7, 3);
        assert_eq!(spread.groups, [2, 3, 1, 2]);
        assert_eq!((0..5).map(|q| spread.group_of(q)).collect::<Vec<_>>(), [2, 3, 1, 2, 1]);
        assert_eq!(t.clone().spread(8, 3).groups[0], 3, "the next topic starts elsewhere");
        assert!(spread.same_request(&t));
        assert!(spread.validate().is_err(), "a request does not place queues");
        let lite = TopicConfig::new("L", 4, TopicKind::Lite).spread(7, 3);
        assert_eq!(lite.groups, [2, 2, 2, 2], "a lite topic is kept in one group");
        let priority = TopicConfig::new("P", 3, TopicKind::Priority).spread(8, 3);
        assert_eq!(priority.groups, [3, 3, 3], "so is a priority topic");
    }

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
