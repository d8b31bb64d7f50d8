//! What applying an entry answers to the client that proposed it.

use rockraft_proto::rockraft::{DeadLetter, SendBatch};

use crate::broker::access::AccessCommand;
use crate::broker::command::{AdminCommand, Command};
use crate::broker::lite::{LiteCommand, LiteOutcome};
use crate::broker::plugins::PluginCommand;
use crate::broker::pop::{ConsumeCommand, ConsumeOutcome};
use crate::broker::timer::{TimerCommand, TimerOutcome};
use crate::broker::transaction::{TransactionCommand, TransactionOutcome};

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

/// Why apply refused a command: the same on every replica.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("topic {0} does not exist")]
    TopicNotFound(String),
    #[error("topic {0} exists with another configuration")]
    TopicExists(String),
    /// Not valid when applied; the text says why.
    #[error("{0}")]
    Rejected(String),
    /// The reply belongs to another family of commands: a fault of the node, never the client's.
    #[error("a reply of another kind of command: {0}")]
    OtherFamily(String),
}

impl Refusal {
    /// What a reply outside a family's own outcome says.
    fn of(reply: Reply) -> Refusal {
        match reply {
            Reply::TopicNotFound(t) => Refusal::TopicNotFound(t),
            Reply::TopicExists(t) => Refusal::TopicExists(t),
            Reply::Rejected(why) => Refusal::Rejected(why),
            other => Refusal::OtherFamily(format!("{other:?}")),
        }
    }
}

/// A family of commands whose reply is known from its type: what `Cluster::request` hands back,
/// so no caller matches a reply of a command it did not send. The one place a [`Reply`] (the
/// state machine's answer to any entry) is taken apart by family.
pub trait Request {
    type Outcome;
    fn command(self) -> Command;
    fn outcome(reply: Reply) -> Result<Self::Outcome, Refusal>;
}

macro_rules! family {
    ($command:ty, $outcome:ty, $wrap:expr, $variant:pat => $value:expr) => {
        impl Request for $command {
            type Outcome = $outcome;
            fn command(self) -> Command {
                $wrap(self)
            }
            fn outcome(reply: Reply) -> Result<$outcome, Refusal> {
                match reply {
                    $variant => Ok($value),
                    other => Err(Refusal::of(other)),
                }
            }
        }
    };
}

family!(ConsumeCommand, ConsumeOutcome, Command::Consume, Reply::Consume(o) => o);
family!(TimerCommand, TimerOutcome, Command::Timer, Reply::Timer(o) => o);
family!(TransactionCommand, TransactionOutcome, Command::Transaction, Reply::Transaction(o) => o);
family!(LiteCommand, LiteOutcome, Command::Lite, Reply::Lite(o) => o);
family!(DeadLetter, ConsumeOutcome, Command::DeadLetter, Reply::Consume(o) => o);
family!(SendBatch, Vec<SendOutcome>, Command::Send, Reply::Sent(o) => o);
family!(AdminCommand, (), Command::Admin, Reply::Applied => ());
family!(AccessCommand, (), Command::Access, Reply::Applied => ());
family!(PluginCommand, (), Command::Plugin, Reply::Applied => ());
