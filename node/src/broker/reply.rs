//! What applying an entry answers to the client that proposed it.

use crate::broker::pop::ConsumeOutcome;

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reply {
    /// Blank and membership entries, and admin commands that succeeded.
    #[default]
    Applied,
    /// One outcome per message of a send, in order.
    Sent(Vec<SendOutcome>),
    TopicNotFound(String),
    TopicExists(String),
    /// What a consumption command did.
    Consume(ConsumeOutcome),
    /// The command was not valid when applied (the same on every replica).
    Rejected(String),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendOutcome {
    pub message_id: String,
    pub queue_id: u32,
    pub offset: u64,
    /// A retry of a message already stored within the dedupe window: this is the original result.
    pub duplicate: bool,
}
