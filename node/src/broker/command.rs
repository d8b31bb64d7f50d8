//! The commands a Raft entry carries, and their encoding.
//!
//! Layout of a normal entry's payload: one tag byte, then the body.
//! - `TAG_SEND`: a protobuf `SendBatch` (messages kept as separately encoded `StoredMessage`s,
//!   so a ConsumeQueue record can point at one message and reading it copies nothing);
//! - `TAG_ADMIN`: JSON of [`AdminCommand`] (rare, small);
//! - `TAG_CONSUME`: JSON of [`ConsumeCommand`] (POP state: small, no message bytes);
//! - `TAG_DEAD_LETTER`: a protobuf `DeadLetter`, which carries a copy of the message;
//! - `TAG_TIMER`, `TAG_TRANSACTION`: JSON of [`TimerCommand`] / [`TransactionCommand`] (firing,
//!   recalling, resolving and checking held messages: keys only, never message bytes);
//! - `TAG_PLUGIN`: JSON of [`PluginCommand`] (registering a module carries its bytes, base64);
//! - `TAG_ACCESS`: JSON of [`AccessCommand`] (users and access rules);
//! - `TAG_LITE`: JSON of [`LiteCommand`] (lite topic subscriptions and consumption).

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use rockraft_proto::rockraft::{DeadLetter, SendBatch};

use crate::broker::BrokerError;
use crate::broker::access::AccessCommand;
use crate::broker::lite::LiteCommand;
use crate::broker::plugins::PluginCommand;
use crate::broker::pop::ConsumeCommand;
use crate::broker::timer::TimerCommand;
use crate::broker::topic::TopicConfig;
use crate::broker::transaction::TransactionCommand;

const TAG_SEND: u8 = 1;
const TAG_ADMIN: u8 = 2;
const TAG_CONSUME: u8 = 3;
const TAG_DEAD_LETTER: u8 = 4;
const TAG_TIMER: u8 = 5;
const TAG_TRANSACTION: u8 = 6;
const TAG_PLUGIN: u8 = 7;
const TAG_ACCESS: u8 = 8;
const TAG_LITE: u8 = 9;

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
}

impl Command {
    pub fn encode(&self) -> Bytes {
        match self {
            Command::Send(batch) => {
                let mut buf = BytesMut::with_capacity(1 + batch.encoded_len());
                buf.put_u8(TAG_SEND);
                batch.encode(&mut buf).expect("BytesMut grows");
                buf.freeze()
            }
            Command::Admin(admin) => json(TAG_ADMIN, admin),
            Command::Consume(consume) => json(TAG_CONSUME, consume),
            Command::Timer(t) => json(TAG_TIMER, t),
            Command::Transaction(t) => json(TAG_TRANSACTION, t),
            Command::Plugin(p) => json(TAG_PLUGIN, p),
            Command::Access(a) => json(TAG_ACCESS, a),
            Command::Lite(l) => json(TAG_LITE, l),
            Command::DeadLetter(d) => {
                let mut buf = BytesMut::with_capacity(1 + d.encoded_len());
                buf.put_u8(TAG_DEAD_LETTER);
                d.encode(&mut buf).expect("BytesMut grows");
                buf.freeze()
            }
        }
    }

    /// The messages an entry stores, which ConsumeQueue records point at.
    pub fn stored_batch(self) -> Option<SendBatch> {
        match self {
            Command::Send(b) => Some(b),
            Command::DeadLetter(d) => d.batch,
            _ => None,
        }
    }

    /// Whether a payload carries the proposer's clock (a look at its tag). The leader stamps its
    /// time into these just before it proposes them, so apply never reads a clock and the store
    /// time of a send is the leader's, whichever node received it.
    pub fn carries_time(payload: &[u8]) -> bool {
        matches!(
            payload.first(),
            Some(&(TAG_SEND | TAG_CONSUME | TAG_DEAD_LETTER | TAG_TIMER | TAG_TRANSACTION | TAG_PLUGIN | TAG_LITE))
        )
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
            Command::Admin(_) | Command::Plugin(_) | Command::Access(_) => {}
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
    /// time; other payloads come back unchanged.
    pub fn restamp(payload: Bytes, stamp: impl FnOnce(&mut Command)) -> Bytes {
        if !Command::carries_time(&payload) {
            return payload;
        }
        match Command::decode(payload.clone()) {
            Ok(mut c) => {
                stamp(&mut c);
                c.encode()
            }
            Err(_) => payload,
        }
    }

    /// The batch of an encoded send; `None` for any other command (told by its tag, without
    /// decoding it) or an undecodable one.
    pub fn decode_send(payload: &Bytes) -> Option<SendBatch> {
        match payload.first() {
            Some(&TAG_SEND) => SendBatch::decode(payload.slice(1..)).ok(),
            _ => None,
        }
    }

    /// What appending `payload` does to the disk, judged by a look at its tag where that says
    /// enough (sends store messages); an undecodable payload counts as small bookkeeping.
    pub fn footprint_of(payload: &Bytes) -> Footprint {
        match payload.first() {
            Some(&TAG_SEND) => Footprint::Stores,
            _ => Command::decode(payload.clone()).map_or(Footprint::Records, |c| c.footprint()),
        }
    }

    /// What appending this command does to the disk: the free-space alarm refuses `Stores`
    /// below the soft mark and `Records` below the hard one, never `Relieves`.
    pub fn footprint(&self) -> Footprint {
        match self {
            Command::Send(_) | Command::Plugin(PluginCommand::Register { .. }) => Footprint::Stores,
            Command::Admin(
                AdminCommand::DeleteTopic { .. } | AdminCommand::ReleaseHolds { .. } | AdminCommand::RecordFailover(_),
            )
            | Command::Consume(ConsumeCommand::DeleteGroup { .. })
            | Command::Plugin(PluginCommand::Remove { .. })
            | Command::Access(AccessCommand::DeleteUser { .. })
            | Command::Lite(LiteCommand::Expire { .. } | LiteCommand::Unsubscribe { .. }) => Footprint::Relieves,
            // Consumption (pops, acks, dead letters), timers due, transaction resolutions, and
            // small admin changes.
            _ => Footprint::Records,
        }
    }

    /// Decodes an entry payload. `Bytes` fields of the result share `bytes`' buffer.
    pub fn decode(bytes: Bytes) -> Result<Command, BrokerError> {
        let corrupt = |e: &dyn std::fmt::Display| BrokerError::CorruptEntry(e.to_string());
        match bytes.first() {
            Some(&TAG_SEND) => SendBatch::decode(bytes.slice(1..)).map(Command::Send).map_err(|e| corrupt(&e)),
            Some(&TAG_ADMIN) => serde_json::from_slice(&bytes[1..]).map(Command::Admin).map_err(|e| corrupt(&e)),
            Some(&TAG_CONSUME) => serde_json::from_slice(&bytes[1..]).map(Command::Consume).map_err(|e| corrupt(&e)),
            Some(&TAG_TIMER) => serde_json::from_slice(&bytes[1..]).map(Command::Timer).map_err(|e| corrupt(&e)),
            Some(&TAG_TRANSACTION) => {
                serde_json::from_slice(&bytes[1..]).map(Command::Transaction).map_err(|e| corrupt(&e))
            }
            Some(&TAG_PLUGIN) => serde_json::from_slice(&bytes[1..]).map(Command::Plugin).map_err(|e| corrupt(&e)),
            Some(&TAG_ACCESS) => serde_json::from_slice(&bytes[1..]).map(Command::Access).map_err(|e| corrupt(&e)),
            Some(&TAG_LITE) => serde_json::from_slice(&bytes[1..]).map(Command::Lite).map_err(|e| corrupt(&e)),
            Some(&TAG_DEAD_LETTER) => {
                DeadLetter::decode(bytes.slice(1..)).map(Command::DeadLetter).map_err(|e| corrupt(&e))
            }
            Some(tag) => Err(BrokerError::CorruptEntry(format!("unknown command tag {tag}"))),
            None => Err(BrokerError::CorruptEntry("empty command".into())),
        }
    }
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

fn json<T: serde::Serialize>(tag: u8, value: &T) -> Bytes {
    let mut buf = vec![tag];
    serde_json::to_writer(&mut buf, value).expect("commands serialize");
    Bytes::from(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::topic::TopicKind;

    #[test]
    fn commands_round_trip() {
        let send = Command::Send(SendBatch {
            topic: "T".into(),
            queue_id: 3,
            store_timestamp_ms: 1_700_000_000_000,
            clock_ms: 1_700_000_000_000,
            messages: vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")],
            queue_ids: vec![],
        });
        assert_eq!(Command::decode(send.encode()).unwrap(), send);
        let admin = Command::Admin(AdminCommand::CreateTopic(TopicConfig::new("T", 4, TopicKind::Fifo)));
        assert_eq!(Command::decode(admin.encode()).unwrap(), admin);
    }

    /// The free-space alarm's classes: messages are refused first, consumption next, and what
    /// frees space never.
    #[test]
    fn footprints_sort_commands_by_what_they_do_to_the_disk() {
        let send = Command::Send(SendBatch { topic: "T".into(), ..Default::default() });
        let ack = Command::Consume(ConsumeCommand::Acks { receipts: vec![] });
        let create = Command::Admin(AdminCommand::CreateTopic(TopicConfig::new("T", 4, TopicKind::Normal)));
        let delete = Command::Admin(AdminCommand::DeleteTopic { name: "T".into() });
        let drop_group = Command::Consume(ConsumeCommand::DeleteGroup { name: "G".into() });
        let fire = Command::Timer(TimerCommand::Fire { now_ms: 1, timers: vec![] });
        for (command, footprint) in [
            (&send, Footprint::Stores),
            (&ack, Footprint::Records),
            (&create, Footprint::Records),
            (&fire, Footprint::Records),
            (&delete, Footprint::Relieves),
            (&drop_group, Footprint::Relieves),
        ] {
            assert_eq!(command.footprint(), footprint, "{command:?}");
            assert_eq!(Command::footprint_of(&command.encode()), footprint, "{command:?} encoded");
        }
        assert_eq!(Command::footprint_of(&Bytes::from_static(b"\x02{")), Footprint::Records);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [&b""[..], b"\x09", b"\x01\xff\xff\xff", b"\x02{"] {
            assert!(Command::decode(Bytes::copy_from_slice(bad)).is_err());
        }
    }
}
