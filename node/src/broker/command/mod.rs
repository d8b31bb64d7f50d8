//! The commands a Raft entry carries, and their encoding.
//!
//! Every payload this release writes is a header — a marker byte, the format version
//! ([`envelope::FORMAT`]) and the command's kind — then the command as protobuf:
//! - `Send`: a `SendBatch` (messages kept as separately encoded `StoredMessage`s, so a
//!   ConsumeQueue record can point at one message and reading it copies nothing);
//! - `DeadLetter`: a `DeadLetter`, which carries a copy of the message;
//! - `Admin`, `Consume`, `Timer`, `Transaction`, `Plugin`, `Access`, `Lite`: the family's message
//!   of `rockraft.v1.log` (proto/rockraft/v1/log.proto), converted in this module's files.
//!
//! Entries of earlier releases (format 1: a tag byte, then JSON or protobuf) are read by
//! `legacy`, never written. An entry of a format or kind this release does not know is refused
//! ([`DecodeError::is_unknown`]): the node stops applying rather than skip what a newer release
//! wrote (see `State::apply`).

mod access;
mod admin;
mod consume;
pub mod envelope;
mod legacy;
mod lite;
pub(crate) use lite::{actor_from_proto, actor_to_proto};
mod placement;
mod plugin;
mod timer;
mod transaction;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use rockraft_proto::rockraft::{DeadLetter, SendBatch};

use crate::broker::access::AccessCommand;
use crate::broker::lite::LiteCommand;
use crate::broker::placement::Placement;
use crate::broker::plugins::PluginCommand;
use crate::broker::pop::ConsumeCommand;
use crate::broker::timer::TimerCommand;
use crate::broker::topic::TopicConfig;
use crate::broker::transaction::TransactionCommand;
use envelope::{FORMAT, Kind};

/// How an entry's command changes the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Steps {
    /// A metadata change, then (in entries of their own) its placement in the partitions.
    Separate,
    /// An entry of an earlier release: metadata and the partition changed at once.
    Combined,
}

/// Why a payload does not decode into a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Written by a newer release.
    #[error("is of format {0}; this release reads formats {lo} to {hi}", lo = envelope::LEGACY_FORMAT, hi = FORMAT)]
    UnknownFormat(u8),
    /// A kind a newer release added.
    #[error("is of kind {kind} (format {format}), which this release does not know")]
    UnknownKind { format: u8, kind: u8 },
    /// A command a newer release added to a known kind (its message decodes to no variant).
    #[error("is of a variant of {0} commands this release does not know")]
    UnknownVariant(&'static str),
    /// A value a newer release added to one of the command's enumerations.
    #[error("has {field} {value}, which this release does not know")]
    UnknownValue { field: &'static str, value: i32 },
    #[error("is empty")]
    Empty,
    #[error("is no broker command (first byte {0:#04x})")]
    NotACommand(u8),
    #[error("has a header cut short")]
    Truncated,
    #[error("does not decode: {0}")]
    Protobuf(#[from] prost::DecodeError),
    #[error("does not decode: {0}")]
    Json(String),
    #[error("lacks its {0}")]
    Missing(&'static str),
    #[error("has {field} {value}, out of its range")]
    OutOfRange { field: &'static str, value: u64 },
}

impl DecodeError {
    /// Whether the entry may be one a newer release wrote: this release must not apply past it.
    pub fn is_unknown(&self) -> bool {
        match self {
            DecodeError::UnknownFormat(_)
            | DecodeError::UnknownKind { .. }
            | DecodeError::UnknownVariant(_)
            | DecodeError::UnknownValue { .. } => true,
            DecodeError::Empty
            | DecodeError::NotACommand(_)
            | DecodeError::Truncated
            | DecodeError::Protobuf(_)
            | DecodeError::Json(_)
            | DecodeError::Missing(_)
            | DecodeError::OutOfRange { .. } => false,
        }
    }
}

/// A message field every encoder sets.
fn required<T>(value: Option<T>, field: &'static str) -> Result<T, DecodeError> {
    value.ok_or(DecodeError::Missing(field))
}

/// An enumeration's value: 0 is unset (no encoder writes it), others unknown to this release.
fn known<T>(value: i32, field: &'static str, of: impl FnOnce(i32) -> Option<T>) -> Result<T, DecodeError> {
    match of(value) {
        Some(v) => Ok(v),
        None if value == 0 => Err(DecodeError::Missing(field)),
        None => Err(DecodeError::UnknownValue { field, value }),
    }
}

/// What appending a command does to the disk (see `Command::footprint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Footprint {
    /// Stores new messages (or a plugin module): refused below the soft free-space mark.
    Stores,
    /// Small bookkeeping that consumption and upkeep need: refused below the hard mark only.
    Records,
    /// Frees space, or the cluster cannot go on without it (a new leader's failover record).
    Relieves,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Send(SendBatch),
    Admin(AdminCommand),
    Consume(ConsumeCommand),
    DeadLetter(DeadLetter),
    Timer(TimerCommand),
    Transaction(TransactionCommand),
    Plugin(PluginCommand),
    Access(AccessCommand),
    Lite(LiteCommand),
    /// A data partition's copy of metadata brought up to date (see `Metadata::placement_for`).
    Place(Placement),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AdminCommand {
    CreateTopic(TopicConfig),
    DeleteTopic {
        name: String,
    },
    /// Forgets what holds back log entries below `below` from retention, where nothing is
    /// pending any more (the leader's log is purged to there).
    ReleaseHolds {
        below: u64,
    },
    /// Changes cluster settings that apply reads (`rockraft cluster configure`).
    Configure(crate::broker::settings::SettingsChange),
    /// A new leader's account of its failover (proposed by the leader itself, never by a client).
    RecordFailover(crate::broker::failover::Failover),
    /// A node's account of a repair of its disk (proposed by that node, never by a client).
    RecordRepair(crate::broker::repair::Repair),
    /// A consumer group comes with its dead-letter topic.
    CreateGroup(crate::broker::group::GroupConfig),
    DeleteGroup {
        name: String,
    },
}

impl Command {
    /// The payload of an entry carrying this command, in the format this release writes.
    pub fn encode(&self) -> Bytes {
        match self {
            Command::Send(batch) => framed(Kind::Send, batch),
            Command::DeadLetter(d) => framed(Kind::DeadLetter, d),
            Command::Admin(a) => framed(Kind::Admin, &admin::to_proto(a)),
            Command::Consume(c) => framed(Kind::Consume, &consume::to_proto(c)),
            Command::Timer(t) => framed(Kind::Timer, &timer::to_proto(t)),
            Command::Transaction(t) => framed(Kind::Transaction, &transaction::to_proto(t)),
            Command::Plugin(p) => framed(Kind::Plugin, &plugin::to_proto(p)),
            Command::Access(a) => framed(Kind::Access, &access::to_proto(a)),
            Command::Lite(l) => framed(Kind::Lite, &lite::to_proto(l)),
            Command::Place(p) => framed(Kind::Placement, &placement::to_proto(p)),
        }
    }

    /// The length of [`Command::encode`] of a send of `batch`, without encoding it.
    pub fn send_len(batch: &SendBatch) -> usize {
        envelope::HEADER_LEN + batch.encoded_len()
    }

    /// Whether this is applied to the metadata (the rest to a data partition).
    pub fn is_metadata(&self) -> bool {
        match self {
            Command::Admin(a) => !matches!(a, AdminCommand::ReleaseHolds { .. }),
            Command::Plugin(_) | Command::Access(_) => true,
            Command::Send(_)
            | Command::Consume(_)
            | Command::DeadLetter(_)
            | Command::Timer(_)
            | Command::Transaction(_)
            | Command::Lite(_)
            | Command::Place(_) => false,
        }
    }

    /// Whether this changes metadata that data partitions keep a copy of: a placement entry
    /// follows it (see `Metadata::placement_for`).
    pub fn needs_placement(&self) -> bool {
        matches!(
            self,
            Command::Admin(
                AdminCommand::CreateTopic(_)
                    | AdminCommand::DeleteTopic { .. }
                    | AdminCommand::Configure(_)
                    | AdminCommand::CreateGroup(_)
                    | AdminCommand::DeleteGroup { .. }
            )
        )
    }

    /// The messages an entry stores, which ConsumeQueue records point at.
    pub fn stored_batch(self) -> Option<SendBatch> {
        match self {
            Command::Send(b) => Some(b),
            Command::DeadLetter(d) => d.batch,
            Command::Admin(_)
            | Command::Consume(_)
            | Command::Timer(_)
            | Command::Transaction(_)
            | Command::Plugin(_)
            | Command::Access(_)
            | Command::Lite(_)
            | Command::Place(_) => None,
        }
    }

    /// Whether a payload carries the proposer's clock (a look at its header). The leader stamps
    /// its time into these just before it proposes them, so apply never reads a clock and the
    /// store time of a send is the leader's, whichever node received it.
    pub fn carries_time(payload: &[u8]) -> bool {
        envelope::read(payload).is_ok_and(|h| h.kind.carries_time())
    }

    /// Sets the time a command acts on or is stored at: the proposing leader's clock.
    pub fn set_time(&mut self, now_ms: i64) {
        match self {
            Command::Send(batch) => stamp_batch(batch, now_ms),
            Command::DeadLetter(d) => {
                if let Some(batch) = d.batch.as_mut() {
                    stamp_batch(batch, now_ms);
                }
            }
            Command::Consume(c) => c.set_time(now_ms),
            Command::Lite(l) => l.set_time(now_ms),
            Command::Timer(t) => t.set_time(now_ms),
            Command::Transaction(t) => t.set_time(now_ms),
            Command::Plugin(PluginCommand::Register { now_ms: at, .. }) => *at = now_ms,
            Command::Admin(_) | Command::Plugin(_) | Command::Access(_) | Command::Place(_) => {}
        }
    }

    /// Holds the store time of the messages this command stores at `floor_ms(topic, queue)`
    /// when the clock stamped is below it: store times never go back along a queue, whichever
    /// leader's clock stamped the earlier ones. Time-outs still go by the clock (`clock_ms`).
    pub fn hold_store_time(&mut self, floor_ms: impl Fn(&str, u32) -> i64) {
        let batch = match self {
            Command::Send(batch) => batch,
            Command::DeadLetter(d) => match d.batch.as_mut() {
                Some(batch) => batch,
                None => return,
            },
            _ => return,
        };
        let floor = batch.queues().into_iter().map(|q| floor_ms(&batch.topic, q)).max().unwrap_or(i64::MIN);
        batch.store_timestamp_ms = batch.store_timestamp_ms.max(floor);
    }

    /// `stamp` applied to the command of encoded bytes (a forwarded command) that carries a
    /// time, written in this release's format. Other payloads of this format come back
    /// unchanged; one of an earlier release's format (forwarded by a member not upgraded yet) is
    /// written anew, so the log only ever gains entries of this format.
    pub fn restamp(payload: Bytes, stamp: impl FnOnce(&mut Command)) -> Bytes {
        let Ok(header) = envelope::read(&payload) else { return payload };
        if header.format == FORMAT && !header.kind.carries_time() {
            return payload;
        }
        match Command::decode(payload.clone()) {
            Ok(mut c) => {
                if header.kind.carries_time() {
                    stamp(&mut c);
                }
                c.encode()
            }
            Err(_) => payload,
        }
    }

    /// The batch of an encoded send; `None` for any other command (told by its header, without
    /// decoding it) or an undecodable one.
    pub fn decode_send(payload: &Bytes) -> Option<SendBatch> {
        match envelope::read(payload) {
            Ok(h) if h.kind == Kind::Send => SendBatch::decode(payload.slice(h.body_at..)).ok(),
            _ => None,
        }
    }

    /// What appending `payload` does to the disk, judged by its kind where that says enough; an
    /// undecodable payload counts as small bookkeeping.
    pub fn footprint_of(payload: &Bytes) -> Footprint {
        let Ok(header) = envelope::read(payload) else { return Footprint::Records };
        match header.kind {
            Kind::Send => Footprint::Stores,
            Kind::DeadLetter | Kind::Timer | Kind::Transaction => Footprint::Records,
            Kind::Placement => Footprint::Relieves,
            Kind::Admin | Kind::Consume | Kind::Plugin | Kind::Access | Kind::Lite => {
                Command::decode(payload.clone()).map_or(Footprint::Records, |c| c.footprint())
            }
        }
    }

    /// What appending this command does to the disk: the free-space alarm refuses `Stores`
    /// below the soft mark and `Records` below the hard one, never `Relieves`.
    pub fn footprint(&self) -> Footprint {
        match self {
            Command::Send(_) => Footprint::Stores,
            // Consumption's end: the message is copied, but the original goes.
            Command::DeadLetter(_) => Footprint::Records,
            Command::Admin(a) => admin::footprint(a),
            Command::Consume(c) => consume::footprint(c),
            Command::Timer(t) => timer::footprint(t),
            Command::Transaction(t) => transaction::footprint(t),
            Command::Plugin(p) => plugin::footprint(p),
            Command::Access(a) => access::footprint(a),
            Command::Lite(l) => lite::footprint(l),
            // Small, and a deleted topic's data goes only through it.
            Command::Place(_) => Footprint::Relieves,
        }
    }

    /// Decodes an entry payload of this release's format or an earlier one. `Bytes` fields of
    /// the result share `bytes`' buffer.
    pub fn decode(bytes: Bytes) -> Result<Command, DecodeError> {
        Ok(Command::decode_entry(bytes)?.0)
    }

    /// [`Command::decode`], with how the entry's format says it changes the state.
    pub(crate) fn decode_entry(bytes: Bytes) -> Result<(Command, Steps), DecodeError> {
        let header = envelope::read(&bytes)?;
        let steps = if header.format < envelope::SEPARATE_FORMAT { Steps::Combined } else { Steps::Separate };
        Ok((Command::decode_body(header, bytes)?, steps))
    }

    fn decode_body(header: envelope::Header, bytes: Bytes) -> Result<Command, DecodeError> {
        let body = bytes.slice(header.body_at..);
        if header.format == envelope::LEGACY_FORMAT {
            return legacy::decode(header.kind, body);
        }
        Ok(match header.kind {
            Kind::Send => Command::Send(SendBatch::decode(body)?),
            Kind::DeadLetter => Command::DeadLetter(DeadLetter::decode(body)?),
            Kind::Admin => Command::Admin(admin::from_proto(Message::decode(body)?)?),
            Kind::Consume => consume::from_proto(Message::decode(body)?)?,
            Kind::Timer => Command::Timer(timer::from_proto(Message::decode(body)?)?),
            Kind::Transaction => Command::Transaction(transaction::from_proto(Message::decode(body)?)?),
            Kind::Plugin => Command::Plugin(plugin::from_proto(Message::decode(body)?)?),
            Kind::Access => Command::Access(access::from_proto(Message::decode(body)?)?),
            Kind::Lite => lite::from_proto(Message::decode(body)?)?,
            Kind::Placement => Command::Place(placement::from_proto(Message::decode(body)?)?),
        })
    }
}

/// `body` behind the header of `kind`, in one buffer.
fn framed(kind: Kind, body: &impl Message) -> Bytes {
    let mut buf = BytesMut::with_capacity(envelope::HEADER_LEN + body.encoded_len());
    buf.put_slice(&envelope::header(kind));
    body.encode(&mut buf).expect("BytesMut grows");
    buf.freeze()
}

fn stamp_batch(batch: &mut SendBatch, now_ms: i64) {
    batch.store_timestamp_ms = now_ms;
    batch.clock_ms = now_ms;
}

impl SendBatchClock for SendBatch {
    fn clock(&self) -> i64 {
        if self.clock_ms != 0 { self.clock_ms } else { self.store_timestamp_ms }
    }
}

impl SendBatchQueues for SendBatch {
    fn queue_of(&self, ordinal: usize) -> u32 {
        if self.queue_ids.is_empty() { self.queue_id } else { self.queue_ids.get(ordinal).copied().unwrap_or(u32::MAX) }
    }

    fn queues_match(&self) -> bool {
        self.queue_ids.is_empty() || self.queue_ids.len() == self.messages.len()
    }

    fn queues(&self) -> Vec<u32> {
        if self.queue_ids.is_empty() {
            return vec![self.queue_id];
        }
        let mut queues = self.queue_ids.clone();
        queues.sort_unstable();
        queues.dedup();
        queues
    }
}

/// Which queue each message of a batch goes to: one queue for the whole batch, or one per
/// message when the leader put sends to several queues of the topic into one entry.
pub(crate) trait SendBatchQueues {
    /// The queue of the message at `ordinal` (`u32::MAX`, a queue no topic has, past the end).
    fn queue_of(&self, ordinal: usize) -> u32;
    /// Whether the batch names a queue for every message and nothing more.
    fn queues_match(&self) -> bool;
    /// The queues the batch's messages go to, each once, in order.
    fn queues(&self) -> Vec<u32>;
}

/// The leader's clock an encoded batch was stamped with.
pub(crate) trait SendBatchClock {
    /// What time-outs go by: the proposer's clock, or for entries of releases before the store
    /// time was held per queue, the store time.
    fn clock(&self) -> i64;
}

#[cfg(test)]
mod tests;
