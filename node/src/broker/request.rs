//! Typed requests: each command family names the outcome its commands answer with.

use rockraft_proto::rockraft::{DeadLetter, SendBatch};

use crate::broker::access::AccessCommand;
use crate::broker::command::{AdminCommand, Command};
use crate::broker::lite::{LiteCommand, LiteOutcome};
use crate::broker::plugins::PluginCommand;
use crate::broker::pop::{ConsumeCommand, ConsumeOutcome};
use crate::broker::reply::{Reply, SendOutcome};
use crate::broker::timer::{TimerCommand, TimerOutcome};
use crate::broker::transaction::{TransactionCommand, TransactionOutcome};

/// Why apply refused a command: the same on every replica.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("topic {0} does not exist")]
    TopicNotFound(String),
    #[error("topic {0} exists with another configuration")]
    TopicExists(String),
    #[error("consumer group {0} does not exist")]
    GroupNotFound(String),
    #[error("consumer group {0} exists with another configuration")]
    GroupExists(String),
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
            Reply::GroupNotFound(g) => Refusal::GroupNotFound(g),
            Reply::GroupExists(g) => Refusal::GroupExists(g),
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
