//! The broker: the replicated state machine that turns committed entries into topics, queue
//! offsets, ConsumeQueue records and consumption state, and the reads the services serve.
//!
//! Structure:
//! - [`State`] (`state.rs`): every table of replicated state, declared once; `apply.rs`: the
//!   deterministic `apply(entry) -> Reply` over it, which reads nothing but the entry and the
//!   state (the leader stamps times into entries) and hands its disk work back as effects;
//! - [`Table`](table::Table): a persisted table (rows, changes since the last checkpoint, how it
//!   is stored), the one abstraction every piece of state uses;
//! - [`Broker`] (`handle.rs`): the live state on this node, with its files; `checkpoint.rs`
//!   makes it durable, `snapshot.rs` builds the state as of any index and installs one,
//!   `read.rs` serves reads (`entry_cache.rs` decodes each entry read once);
//! - [`DiskTable`](disk_table::DiskTable): a table whose rows stay in sled (halves, holds);
//!   pending timers are kept in a timing wheel of files (`timer_wheel.rs`), 16 bytes of memory
//!   each;
//! - commands (`command.rs`), topics, groups, POP consumption (`pop.rs`, `pop_plan.rs`), tag
//!   subscriptions, the send dedupe window (`dedupe.rs`, keyed by a 128-bit hash) and its
//!   journal; held messages (`held.rs`): delayed messages (`timer.rs`) and transactional halves
//!   (`transaction.rs`), each stored once.
//!
//! The broker knows nothing of Raft: `raft/` adapts it to openraft.

pub mod access;
mod apply;
mod checkpoint;
mod command;
pub mod dedupe;
mod dedupe_journal;
mod delivery;
mod disk_table;
mod entry_cache;
mod error;
pub mod failover;
pub mod group;
mod handle;
pub mod held;
#[cfg(test)]
mod held_test;
pub mod lite;
mod lite_read;
#[cfg(test)]
mod lite_test;
mod lookup;
pub mod message_view;
pub mod metadata;
pub mod partition;
#[cfg(test)]
mod partition_test;
pub mod plugins;
#[cfg(test)]
mod plugins_test;
pub mod pop;
mod pop_plan;
#[cfg(test)]
mod pop_state_test;
mod queues;
mod read;
mod record_cursor;
mod reply;
pub mod settings;
mod snapshot;
#[cfg(test)]
mod snapshot_test;
mod state;
#[cfg(test)]
pub(crate) mod state_test;
pub mod table;
pub mod timer;
mod timer_wheel;
pub mod topic;
pub mod transaction;

pub(crate) use command::SendBatchQueues;
pub use command::{AdminCommand, Command, DecodeError, Footprint};
pub(crate) use command::{actor_from_proto, actor_to_proto};
pub use error::BrokerError;
pub use handle::{Broker, BrokerOptions};
pub use pop_plan::{MatchAll, MessageFilter, PopPlan, PopRequest};
pub use read::{GroupProgress, QueueSpan, QueueStatus, StoredEntry, StoredView};
pub use reply::{Held, Refusal, Reply, Request, SendOutcome};
pub use state::{LogPosition, MembershipRecord, Metadata, Partition, QueueRange, State};
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
