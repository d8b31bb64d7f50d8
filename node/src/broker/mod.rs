//! The broker: the Raft state machine that turns committed entries into topics, queue offsets and
//! ConsumeQueue records, and the read side that the proxy serves from.
//!
//! Apply is deterministic: it reads nothing but the entry (the leader stamps times into it) and
//! the state built from earlier entries, so every replica ends with the same ConsumeQueues and
//! metadata. Metadata lives in sled and is written atomically with `last_applied`.

mod command;
mod dedupe_journal;
mod error;
pub mod group;
pub mod pop;
mod pop_plan;
#[cfg(test)]
mod pop_state_test;
mod queues;
mod reply;
mod state;
mod state_machine;
#[cfg(test)]
mod state_test;
pub mod subscription;
pub mod topic;

pub use command::{AdminCommand, Command};
pub use error::BrokerError;
pub use pop_plan::{PopPlan, PopRequest};
pub use reply::{Reply, SendOutcome};
pub use state::{Broker, BrokerOptions, GroupProgress, QueueStatus, StoredEntry};
pub use state_machine::StateMachine;
pub use topic::{TopicConfig, TopicKind};

/// How many messages one entry may carry: the low 16 bits of a ConsumeQueue position.
pub const MAX_MESSAGES_PER_ENTRY: usize = 1 << 16;

/// A ConsumeQueue position: which entry holds the message, and which message of the entry it is.
/// Unlike a byte offset, this is the same on every replica, so their ConsumeQueues are identical.
pub fn queue_position(index: u64, ordinal: usize) -> u64 {
    (index << 16) | ordinal as u64
}

/// The inverse of [`queue_position`].
pub fn split_position(position: u64) -> (u64, usize) {
    (position >> 16, (position & 0xFFFF) as usize)
}
