//! What applying an entry answers to the client that proposed it.

use crate::broker::lite::LiteOutcome;
use crate::broker::pop::ConsumeOutcome;
use crate::broker::timer::TimerOutcome;
use crate::broker::transaction::TransactionOutcome;

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reply {
    /// Blank and membership entries, and admin commands that succeeded.
    #[default]
    Applied,
    /// One outcome per message of a send, in order.
    Sent(Vec<SendOutcome>),
    TopicNotFound(String),
    TopicExists(String),
    GroupNotFound(String),
    /// A group of this name exists with another configuration.
    GroupExists(String),
    /// What a consumption command did.
    Consume(ConsumeOutcome),
    /// The command was not valid when applied (the same on every replica).
    Rejected(String),
    Timer(TimerOutcome),
    Transaction(TransactionOutcome),
    Lite(LiteOutcome),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendOutcome {
    pub message_id: String,
    pub queue_id: u32,
    pub offset: u64,
    /// A retry of a message already stored within the dedupe window: this is the original result.
    pub duplicate: bool,
    /// Stored but not delivered yet: a delayed message's timer, or a transaction's half. Its
    /// queue offset is assigned on delivery (`offset` is then 0).
    #[serde(default)]
    pub held: Option<Held>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Held {
    Timer { due_ms: i64, position: u64 },
    Half { position: u64 },
}
