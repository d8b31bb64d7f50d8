//! Write RockRaft plugins in Rust: message filters and transaction checkers, compiled to
//! `wasm32-unknown-unknown` and run by the broker in a sandbox.
//!
//! A filter in a few lines:
//!
//! ```
//! use rockraft_plugin_sdk::{filter, Message};
//!
//! /// Delivers messages whose `region` property equals the subscription's expression.
//! #[filter]
//! fn region(message: &Message, expression: &str) -> bool {
//!     message.property("region") == Some(expression)
//! }
//! ```
//!
//! `cargo build --target wasm32-unknown-unknown --release`, then `rockraft plugin register`.
//! A filter that compiles its expression once per subscription implements [`Filter`] on a type
//! and puts `#[filter]` on that type; a transaction checker does the same with
//! [`TransactionChecker`] and `#[transaction_checker]`. The ABI the attributes export is
//! described in `ABI.md` beside this crate. Everything here also builds natively, so a plugin's
//! logic is unit-tested with `cargo test` (see [`testing`]).

pub mod view;

#[doc(hidden)]
pub mod export;
pub mod testing;

pub use rockraft_plugin_sdk_macros::{filter, transaction_checker};
pub use view::{Batch, BatchWriter, Message, MessageData, ViewError};

/// The ABI major version the attributes export (`rockraft_abi_v1`).
pub const ABI_VERSION: u32 = 1;

/// `kind` argument of `rockraft_open`.
pub const KIND_FILTER: i32 = 0;
pub const KIND_TX_CHECKER: i32 = 1;

/// A filter: compiled once per subscription from its expression, then asked per message.
pub trait Filter: Sized + 'static {
    /// Compiles the subscription's expression (or the configuration a group is bound with). The
    /// error is shown to the client as the reason its subscription is refused.
    fn open(expression: &str) -> Result<Self, String>;

    /// Whether the message is delivered. An error means "not delivered" and is counted by the
    /// broker as an evaluation error.
    fn matches(&self, message: &Message<'_>) -> Result<bool, String>;
}

/// What a transaction checker decides about an unresolved transactional message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Decision {
    /// Nothing now; check again at the next interval.
    Wait = 0,
    Commit = 1,
    Rollback = 2,
    /// Ask a producer of the topic (its transaction checker answers).
    AskProducer = 3,
}

impl Decision {
    pub fn from_code(code: u8) -> Option<Decision> {
        Some(match code {
            0 => Decision::Wait,
            1 => Decision::Commit,
            2 => Decision::Rollback,
            3 => Decision::AskProducer,
            _ => return None,
        })
    }
}

/// A transaction checker: configured once per topic binding, then asked per unresolved message.
/// [`Message::age_ms`] is the time since the half was stored, [`Message::attempts`] the checks
/// made so far.
pub trait TransactionChecker: Sized + 'static {
    fn open(config: &str) -> Result<Self, String>;

    fn check(&self, message: &Message<'_>) -> Decision;
}

/// What a function-form filter may return.
pub trait IntoMatch {
    fn into_match(self) -> Result<bool, String>;
}

impl IntoMatch for bool {
    fn into_match(self) -> Result<bool, String> {
        Ok(self)
    }
}

impl<E: core::fmt::Display> IntoMatch for Result<bool, E> {
    fn into_match(self) -> Result<bool, String> {
        self.map_err(|e| e.to_string())
    }
}
