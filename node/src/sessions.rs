//! The producers this node holds a Telemetry stream for, by the topics they publish: the leader
//! asks one of them (here or through a peer) to resolve an orphaned transaction.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use md5::{Digest as _, Md5};
use rockraft_proto::rocketmq::{
    Digest, DigestType, Encoding, Message, MessageType, RecoverOrphanedTransactionCommand, Resource, SystemProperties,
    TelemetryCommand, telemetry_command,
};
use rockraft_proto::rockraft::StoredMessage;
use tokio::sync::mpsc;

struct Session {
    /// Qualified topic name → the resource as the client named it.
    topics: BTreeMap<String, Resource>,
    commands: mpsc::Sender<TelemetryCommand>,
}

#[derive(Default)]
pub struct ProducerSessions {
    sessions: Mutex<HashMap<u64, Session>>,
    next_id: AtomicU64,
    /// Spreads questions over the producers of a topic.
    turn: AtomicU64,
}

/// Keeps a session registered; dropping it (the stream ended) removes it.
pub struct Registration<'a> {
    sessions: &'a ProducerSessions,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.sessions.sessions.lock().expect("sessions lock").remove(&self.id);
    }
}

impl ProducerSessions {
    /// Registers (or updates, when the client sends new settings) a producer publishing
    /// `topics` (qualified names) whose stream takes `commands`.
    pub fn register(
        &self,
        topics: BTreeMap<String, Resource>,
        commands: mpsc::Sender<TelemetryCommand>,
    ) -> Registration<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.sessions.lock().expect("sessions lock").insert(id, Session { topics, commands });
        Registration { sessions: self, id }
    }

    /// Sends the command `build` makes (given the topic as the client names it) to one live
    /// producer of `topic`; whether one took it.
    pub fn ask(&self, topic: &str, build: impl Fn(&Resource) -> TelemetryCommand) -> bool {
        let sessions = self.sessions.lock().expect("sessions lock");
        let mut candidates: Vec<(&Session, &Resource)> = sessions
            .values()
            .filter(|s| !s.commands.is_closed())
            .filter_map(|s| s.topics.get(topic).map(|r| (s, r)))
            .collect();
        if candidates.is_empty() {
            return false;
        }
        let start = self.turn.fetch_add(1, Ordering::Relaxed) as usize % candidates.len();
        candidates.rotate_left(start);
        // A full stream is a slow client: try the next one.
        candidates.into_iter().any(|(s, r)| s.commands.try_send(build(r)).is_ok())
    }

    pub fn count(&self) -> usize {
        self.sessions.lock().expect("sessions lock").len()
    }
}

/// Upper-case hex MD5 of a body, as the clients check it.
pub fn body_md5(body: &[u8]) -> String {
    hex::encode_upper(Md5::digest(body))
}

pub fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: ms.div_euclid(1000), nanos: (ms.rem_euclid(1000) * 1_000_000) as i32 }
}

/// A stored message as clients see it: every system property it was stored with. Deliveries add
/// their receipt handle, queue position and attempt.
pub fn client_message(topic: &Resource, m: StoredMessage, store_ms: i64) -> Message {
    let kind = MessageType::try_from(m.message_type).unwrap_or(MessageType::Normal);
    let system_properties = SystemProperties {
        tag: (!m.tag.is_empty()).then_some(m.tag),
        keys: m.keys,
        message_id: m.message_id,
        body_digest: Some(Digest { r#type: DigestType::Md5 as i32, checksum: body_md5(&m.body) }),
        body_encoding: Encoding::Identity as i32,
        message_type: kind as i32,
        born_timestamp: Some(timestamp(m.born_timestamp_ms)),
        born_host: m.born_host,
        store_timestamp: Some(timestamp(store_ms)),
        delivery_timestamp: (m.delivery_timestamp_ms > 0).then(|| timestamp(m.delivery_timestamp_ms)),
        message_group: (!m.message_group.is_empty()).then_some(m.message_group),
        priority: m.priority_plus_one.checked_sub(1).and_then(|p| i32::try_from(p).ok()),
        lite_topic: (!m.lite_topic.is_empty()).then_some(m.lite_topic),
        ..Default::default()
    };
    Message {
        topic: Some(topic.clone()),
        user_properties: m.properties,
        system_properties: Some(system_properties),
        body: m.body,
    }
}

/// `RecoverOrphanedTransactionCommand` for a half: the whole message and its transaction id.
pub fn recover_command(topic: &Resource, m: StoredMessage, store_ms: i64, transaction_id: &str) -> TelemetryCommand {
    TelemetryCommand {
        status: None,
        command: Some(telemetry_command::Command::RecoverOrphanedTransactionCommand(
            RecoverOrphanedTransactionCommand {
                message: Some(client_message(topic, m, store_ms)),
                transaction_id: transaction_id.to_string(),
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_upper_case_md5() {
        assert_eq!(body_md5(b"hello"), "5D41402ABC4B2A76B9719D911017C592");
    }

    #[test]
    fn only_live_producers_of_the_topic_are_asked_and_ended_streams_are_forgotten() {
        let sessions = ProducerSessions::default();
        let (tx_a, mut rx_a) = mpsc::channel(4);
        let (tx_b, rx_b) = mpsc::channel(4);
        let topic = |n: &str| [(n.to_string(), Resource { name: n.into(), resource_namespace: String::new() })].into();
        let _a = sessions.register(topic("T"), tx_a);
        let b = sessions.register(topic("U"), tx_b);
        let any = |_: &Resource| TelemetryCommand::default();
        assert!(sessions.ask("T", any));
        assert!(rx_a.try_recv().is_ok());
        assert!(!sessions.ask("V", any));
        drop(rx_b);
        assert!(!sessions.ask("U", any), "a closed stream takes nothing");
        drop(b);
        assert_eq!(sessions.count(), 1);
    }
}
