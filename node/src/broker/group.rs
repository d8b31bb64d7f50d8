//! Consumer groups: a name, whether the group consumes FIFO topics in message-group order, and how
//! many deliveries a message gets before it goes to the group's dead-letter topic.

use crate::broker::topic::{InvalidConfig, TopicConfig, TopicKind, validate_name};
use serde::{Deserialize, Serialize};

pub const DEFAULT_MAX_ATTEMPTS: u32 = 16;
pub const MAX_MAX_ATTEMPTS: u32 = 1000;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupConfig {
    pub name: String,
    /// On FIFO topics: messages of one message group are delivered one at a time, in queue order.
    pub fifo: bool,
    /// Deliveries of one message before it is moved to [`dead_letter_topic`].
    pub max_attempts: u32,
    /// On priority topics: the percentage of receives that take the highest-priority messages
    /// first (RocketMQ's `priority.factor`); the others take from every queue in turn, so low
    /// priorities are not starved. 100 (the default): every receive.
    #[serde(default = "full_priority")]
    pub priority_factor: u8,
    /// A lite consumer group: the parent topic it is bound to, its model and quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lite: Option<LiteBinding>,
}

pub const FULL_PRIORITY: u8 = 100;

fn full_priority() -> u8 {
    FULL_PRIORITY
}

impl GroupConfig {
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        validate_name(&self.name).map_err(|_| InvalidConfig::IllegalGroup(self.name.clone()))?;
        // The dead-letter topic's name must be legal too.
        validate_name(&dead_letter_topic(&self.name)).map_err(|_| InvalidConfig::IllegalGroup(self.name.clone()))?;
        if self.max_attempts == 0 || self.max_attempts > MAX_MAX_ATTEMPTS {
            return Err(InvalidConfig::BadRequest(format!("max attempts must be 1 to {MAX_MAX_ATTEMPTS}")));
        }
        if self.priority_factor > FULL_PRIORITY {
            return Err(InvalidConfig::BadRequest(format!("priority factor must be 0 to {FULL_PRIORITY}")));
        }
        if let Some(b) = &self.lite {
            validate_name(&b.topic)?;
            if b.quota == 0 || b.quota > MAX_LITE_QUOTA {
                return Err(InvalidConfig::BadRequest(format!("a lite quota must be 1 to {MAX_LITE_QUOTA}")));
            }
            if self.fifo {
                return Err(InvalidConfig::BadRequest("a lite group is not a FIFO group".into()));
            }
        }
        Ok(())
    }

    /// Whether a receive of `topic` whose draw (0-99, random per receive) is `draw` takes the
    /// highest-priority messages first. FIFO groups never do: they keep their queues' order.
    pub fn by_priority_on(&self, topic: &TopicConfig, draw: u8) -> bool {
        topic.kind == TopicKind::Priority && !self.fifo && draw < self.priority_factor
    }

    /// Whether deliveries of `topic` to this group follow message-group order.
    pub fn orderly_on(&self, topic: &TopicConfig) -> bool {
        self.fifo && topic.kind == TopicKind::Fifo
    }
}

/// Where a group's messages go after `max_attempts` failed deliveries; an ordinary topic users
/// can consume, created with the group.
pub fn dead_letter_topic(group: &str) -> String {
    format!("%DLQ%{group}")
}

/// Whether `topic` is named as a dead-letter topic is: each data group keeps its own copy of
/// its queue (see `cluster::groups`).
pub fn is_dead_letter_topic(topic: &str) -> bool {
    topic.starts_with("%DLQ%")
}

/// The dead-letter topic's configuration: one queue, normal messages.
pub fn dead_letter_topic_config(group: &str) -> TopicConfig {
    TopicConfig::new(dead_letter_topic(group), 1, TopicKind::Normal)
}

/// The most a lite group may allow one client.
pub const MAX_LITE_QUOTA: u32 = 10_000;

/// How a lite group shares its lite topics among its clients.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LiteModel {
    /// Every subscriber of a lite topic may get its messages; each message goes to one of them.
    #[default]
    Shared,
    /// The newest subscriber of a lite topic takes it over from the previous one.
    Exclusive,
}

/// A lite model no group has; holds what was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown lite model {0:?} (shared, exclusive)")]
pub struct UnknownLiteModel(pub String);

impl std::str::FromStr for LiteModel {
    type Err = UnknownLiteModel;
    fn from_str(s: &str) -> Result<Self, UnknownLiteModel> {
        match s {
            "shared" => Ok(LiteModel::Shared),
            "exclusive" => Ok(LiteModel::Exclusive),
            other => Err(UnknownLiteModel(other.to_string())),
        }
    }
}

impl std::fmt::Display for LiteModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LiteModel::Shared => "shared",
            LiteModel::Exclusive => "exclusive",
        })
    }
}

/// A lite consumer group's binding: the one parent topic it consumes, how, and how many lite
/// topics each client may subscribe to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiteBinding {
    pub topic: String,
    #[serde(default)]
    pub model: LiteModel,
    pub quota: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_topic_rules_and_leave_room_for_the_dead_letter_prefix() {
        let group = |name: &str, max_attempts| GroupConfig {
            name: name.into(),
            fifo: false,
            max_attempts,
            priority_factor: FULL_PRIORITY,
            lite: None,
        };
        assert!(group("orders-consumers", 16).validate().is_ok());
        assert!(group("a/b", 16).validate().is_err());
        assert!(group("", 16).validate().is_err());
        assert!(group(&"g".repeat(123), 16).validate().is_err(), "%DLQ% + 123 characters is too long");
        assert!(group("g", 0).validate().is_err());
        assert!(GroupConfig { priority_factor: 101, ..group("g", 16) }.validate().is_err());
    }

    #[test]
    fn the_priority_factor_is_the_share_of_receives_by_priority_and_fifo_groups_never_do() {
        let topic = |kind| TopicConfig::new("P", 8, kind);
        let group = |fifo, priority_factor| GroupConfig {
            name: "g".into(),
            fifo,
            max_attempts: 16,
            priority_factor,
            lite: None,
        };
        let share = |g: &GroupConfig, kind| (0..100).filter(|&d| g.by_priority_on(&topic(kind), d)).count();
        assert_eq!(share(&group(false, 100), TopicKind::Priority), 100);
        assert_eq!(share(&group(false, 30), TopicKind::Priority), 30);
        assert_eq!(share(&group(false, 0), TopicKind::Priority), 0);
        assert_eq!(share(&group(true, 100), TopicKind::Priority), 0, "FIFO groups keep queue order");
        assert_eq!(share(&group(false, 100), TopicKind::Normal), 0, "only priority topics");
    }
}
