//! The broker: the replicated state machine that turns committed entries into topics, queue
//! offsets, ConsumeQueue records and consumption state, and the reads the services serve.
//!
//! Structure, from the bottom up (no module imports one that imports it back: the layering
//! test checks it):
//! - [`Table`](table::Table) and [`DiskTable`](disk_table::DiskTable): persisted tables (rows,
//!   changes since the last checkpoint, how they are stored); pending timers are kept in a timing
//!   wheel of files (`timer_wheel.rs`), 16 bytes of memory each;
//! - each concern's types and table logic: topics, groups, POP consumption (`pop.rs`), lite
//!   topics (`lite.rs`), plugins, access, settings, failovers and repairs, the send dedupe window
//!   (`dedupe.rs`, keyed by a 128-bit hash) and its journal, held messages (`held.rs`): delayed
//!   messages (`timer.rs`) and transactional halves (`transaction.rs`), each stored once;
//! - commands and their log encoding (`command/`), what apply answers (`reply.rs`) and each
//!   family's typed outcome (`request.rs`), what apply leaves to do (`effects.rs`);
//! - the state: [`Metadata`] (`metadata.rs`) and a data [`Partition`] (`partition/`), each a
//!   declared list of tables applying its own commands and reading only itself; [`State`]
//!   (`state.rs`) holds both, and `apply.rs` routes each entry to its half, deterministically
//!   (it reads nothing but the entry and the state; the leader stamps times into entries);
//! - [`Broker`] (`handle.rs`): the live state on this node, with its files; `checkpoint.rs`
//!   makes it durable, `snapshot.rs` builds the state as of any index and installs one,
//!   `read.rs`, `lookup.rs`, `held_read.rs`, `lite_read.rs` and `pop_plan.rs` serve reads
//!   (`entry_cache.rs` decodes each entry read once).
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
mod effects;
mod entry_cache;
mod error;
pub mod failover;
pub mod group;
mod handle;
pub mod held;
mod held_read;
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
pub mod placement;
pub mod plugins;
#[cfg(test)]
mod plugins_test;
pub mod pop;
mod pop_plan;
#[cfg(test)]
mod pop_state_test;
pub mod position;
mod queue_repair;
mod queues;
mod read;
mod record_cursor;
pub mod repair;
mod reply;
mod request;
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
pub use held_read::HeldEntry;
pub use pop_plan::{MatchAll, MessageFilter, PopPlan, PopRequest};
pub(crate) use read::message_in;
pub use read::{GroupFigures, GroupProgress, QueueSpan, QueueStatus, StoredEntry, StoredView};
pub use reply::{Held, Reply, SendOutcome};
pub use request::{Refusal, Request};
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
