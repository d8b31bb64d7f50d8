//! The producers this node holds a Telemetry stream for, by the topics they publish: the leader
//! asks one of them (here or through a peer) to resolve an orphaned transaction. And the
//! consumers connected to it over Remoting, which the other nodes ask for when a client of the
//! same group asks them who its group's members are ([`ConsumerDirectory`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use md5::{Digest as _, Md5};
use rockraft_proto::rocketmq::{
    Digest, DigestType, Encoding, Message, MessageType, RecoverOrphanedTransactionCommand, Resource, SystemProperties,
    TelemetryCommand, telemetry_command,
};
use rockraft_proto::rockraft::StoredMessage;
use tokio::sync::{Notify, mpsc};

use crate::auth::{Caller, Pin};
use crate::broker::Broker;
use crate::broker::access::{Action, ResourceKind};

struct Session {
    /// Qualified topic name → the resource as the client named it.
    topics: BTreeMap<String, Resource>,
    commands: mpsc::Sender<TelemetryCommand>,
    /// Who opened the stream: resolved again before each question, since the user may have been
    /// deleted, given a new secret or lost its `pub` right since.
    pin: Pin,
    /// Told when the stream's user is found no longer authenticated: the stream then ends.
    revoked: Arc<Notify>,
}

/// A session that registered the topic being asked about, as copied out of the table.
struct Candidate {
    id: u64,
    /// The topic as the client named it.
    resource: Resource,
    pin: Pin,
    commands: mpsc::Sender<TelemetryCommand>,
    revoked: Arc<Notify>,
}

/// The consumer groups' members connected to this node by a front end that keeps them per node
/// (Remoting: each client heartbeats to the node it was routed to).
pub trait ConsumerDirectory: Send + Sync {
    /// The client ids of `group`'s live members here.
    fn members(&self, group: &str) -> Vec<String>;
}

#[derive(Default)]
pub struct ProducerSessions {
    sessions: Mutex<HashMap<u64, Session>>,
    /// Set once, when the Remoting listener starts.
    consumers: std::sync::OnceLock<Arc<dyn ConsumerDirectory>>,
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

/// A registration that owns its table (a Remoting connection's, kept in the connection's state):
/// dropping it removes it.
pub struct OwnedRegistration {
    sessions: Arc<ProducerSessions>,
    id: u64,
}

impl Drop for OwnedRegistration {
    fn drop(&mut self) {
        self.sessions.sessions.lock().expect("sessions lock").remove(&self.id);
    }
}

impl ProducerSessions {
    /// Where [`Self::consumers`] finds this node's Remoting consumers.
    pub fn set_consumer_directory(&self, directory: Arc<dyn ConsumerDirectory>) {
        let _ = self.consumers.set(directory);
    }

    /// `group`'s members connected to this node over Remoting (none without a listener).
    pub fn consumers(&self, group: &str) -> Vec<String> {
        self.consumers.get().map(|d| d.members(group)).unwrap_or_default()
    }

    /// [`Self::register`], for a holder that cannot borrow the table.
    pub fn register_owned(
        self: &Arc<Self>,
        pin: Pin,
        topics: BTreeMap<String, Resource>,
        commands: mpsc::Sender<TelemetryCommand>,
        revoked: Arc<Notify>,
    ) -> OwnedRegistration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.sessions.lock().expect("sessions lock").insert(id, Session { topics, commands, pin, revoked });
        OwnedRegistration { sessions: Arc::clone(self), id }
    }

    /// Registers (or updates, when the client sends new settings) a producer publishing
    /// `topics` (qualified names) whose stream takes `commands`.
    /// `pin` is who opened the stream; `revoked` is told if that user is later found deleted or
    /// given a new secret.
    pub fn register(
        &self,
        pin: Pin,
        topics: BTreeMap<String, Resource>,
        commands: mpsc::Sender<TelemetryCommand>,
        revoked: Arc<Notify>,
    ) -> Registration<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.sessions.lock().expect("sessions lock").insert(id, Session { topics, commands, pin, revoked });
        Registration { sessions: self, id }
    }

    /// Sends the command `build` makes (given the topic as the client names it) to one live
    /// producer of `topic` whose user may publish to it *now*, by the rules `broker` has applied;
    /// whether one took it. A producer whose user was deleted or given a new secret is dropped
    /// and its stream ended; one that lost `pub` on the topic is skipped (and asked again if the
    /// right comes back).
    pub fn ask(&self, topic: &str, broker: &Broker, build: impl Fn(&Resource) -> TelemetryCommand) -> bool {
        // Taken under the sessions lock, checked after it is released: the rights are read under
        // the replicated tables' lock, and the two are never held together.
        let mut candidates: Vec<Candidate> = {
            let sessions = self.sessions.lock().expect("sessions lock");
            sessions
                .iter()
                .filter(|(_, s)| !s.commands.is_closed())
                .filter_map(|(id, s)| {
                    Some(Candidate {
                        id: *id,
                        resource: s.topics.get(topic)?.clone(),
                        pin: s.pin.clone(),
                        commands: s.commands.clone(),
                        revoked: Arc::clone(&s.revoked),
                    })
                })
                .collect()
        };
        if candidates.is_empty() {
            return false;
        }
        let start = self.turn.fetch_add(1, Ordering::Relaxed) as usize % candidates.len();
        candidates.rotate_left(start);
        for c in candidates {
            match c.pin.caller(broker) {
                Caller::Refused(_) => {
                    self.sessions.lock().expect("sessions lock").remove(&c.id);
                    c.revoked.notify_one();
                    continue;
                }
                caller if caller.may(broker, Action::Pub, ResourceKind::Topic, topic).is_err() => continue,
                _ => {}
            }
            // A full stream is a slow client: try the next one.
            if c.commands.try_send(build(&c.resource)).is_ok() {
                return true;
            }
        }
        false
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

    fn nobody() -> Arc<Notify> {
        Arc::new(Notify::new())
    }

    fn topic(n: &str) -> BTreeMap<String, Resource> {
        [(n.to_string(), Resource { name: n.into(), resource_namespace: String::new() })].into()
    }

    #[test]
    fn only_live_producers_of_the_topic_are_asked_and_ended_streams_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::broker::state_test::node(dir.path()).broker;
        let sessions = ProducerSessions::default();
        let (tx_a, mut rx_a) = mpsc::channel(4);
        let (tx_b, rx_b) = mpsc::channel(4);
        let _a = sessions.register(Pin::Open, topic("T"), tx_a, nobody());
        let b = sessions.register(Pin::Open, topic("U"), tx_b, nobody());
        let any = |_: &Resource| TelemetryCommand::default();
        assert!(sessions.ask("T", &broker, any));
        assert!(rx_a.try_recv().is_ok());
        assert!(!sessions.ask("V", &broker, any));
        drop(rx_b);
        assert!(!sessions.ask("U", &broker, any), "a closed stream takes nothing");
        drop(b);
        assert_eq!(sessions.count(), 1);
    }

    #[test]
    fn a_producer_is_asked_only_while_its_user_may_publish_and_a_deleted_or_rotated_user_s_stream_is_dropped() {
        use crate::auth::{AuthConfig, Authenticator};
        use crate::broker::Command;
        use crate::broker::access::{AccessCommand, Decision, Rule, Secret};
        let dir = tempfile::tempdir().unwrap();
        let mut n = crate::broker::state_test::node(dir.path());
        let put = |key: &str, secret: &str| {
            let secret = Secret::new(secret);
            Command::Access(AccessCommand::PutUser { access_key: key.into(), secret, admin: false, create: true })
        };
        let pub_on_t = |key: &str| AccessCommand::Grant {
            access_key: key.into(),
            resource: "Topic:T".parse().unwrap(),
            rule: Rule { actions: vec![Action::Pub], decision: Decision::Allow },
        };
        for key in ["kept", "revoked", "deleted", "rotated"] {
            n.commit(&put(key, &format!("{key}-secret")));
            n.commit(&Command::Access(pub_on_t(key)));
        }
        let auth = Authenticator::new(AuthConfig { enabled: true, ..Default::default() }, n.broker.clone());
        let sessions = ProducerSessions::default();
        let mut streams = Vec::new();
        let mut registrations = Vec::new();
        for key in ["kept", "revoked", "deleted", "rotated"] {
            let (date_time, header) =
                crate::auth::signature::sign(key, &format!("{key}-secret"), time::OffsetDateTime::now_utc());
            let mut m = tonic::metadata::MetadataMap::new();
            m.insert("x-mq-date-time", date_time.parse().unwrap());
            m.insert("authorization", header.parse().unwrap());
            let (tx, rx) = mpsc::channel(64);
            let revoked = nobody();
            registrations.push(sessions.register(auth.pin(&m), topic("T"), tx, Arc::clone(&revoked)));
            streams.push((key, rx, revoked));
        }
        let any = |_: &Resource| TelemetryCommand::default();
        let asked = |streams: &mut Vec<(&'static str, mpsc::Receiver<TelemetryCommand>, Arc<Notify>)>| {
            let mut who: Vec<&'static str> = Vec::new();
            for (key, rx, _) in streams.iter_mut() {
                while rx.try_recv().is_ok() {
                    who.push(*key);
                }
            }
            who.sort();
            who.dedup();
            who
        };
        for _ in 0..8 {
            assert!(sessions.ask("T", &n.broker, any));
        }
        assert_eq!(asked(&mut streams), ["deleted", "kept", "revoked", "rotated"]);

        n.commit(&Command::Access(AccessCommand::Revoke {
            access_key: "revoked".into(),
            resource: "Topic:T".parse().unwrap(),
        }));
        n.commit(&Command::Access(AccessCommand::DeleteUser { access_key: "deleted".into() }));
        let rotate = Secret::new("rotated-secret-2");
        n.commit(&Command::Access(AccessCommand::PutUser {
            access_key: "rotated".into(),
            secret: rotate,
            admin: false,
            create: false,
        }));
        for _ in 0..16 {
            assert!(sessions.ask("T", &n.broker, any));
        }
        assert_eq!(asked(&mut streams), ["kept"], "only the producer still allowed is asked");
        assert_eq!(sessions.count(), 2, "the deleted and the rotated user's registrations are dropped");
        for (key, _, revoked) in &streams {
            let told = futures_util::FutureExt::now_or_never(revoked.notified()).is_some();
            assert_eq!(told, ["deleted", "rotated"].contains(key), "{key}'s stream told to end");
        }
        // The right given back: asked again without registering anew.
        n.commit(&Command::Access(pub_on_t("revoked")));
        for _ in 0..8 {
            assert!(sessions.ask("T", &n.broker, any));
        }
        assert_eq!(asked(&mut streams), ["kept", "revoked"]);
    }
}
