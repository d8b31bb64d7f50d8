//! The Remoting clients this node serves: who is in which consumer group with which
//! subscriptions (from HEART_BEAT), and which queues orderly consumers have locked. Both live on
//! the node the clients talk to (the route leads each client to the node it asked), as a
//! RocketMQ broker keeps them in memory; they expire when a client stops sending heartbeats.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::plugin::subscription::FilterKind;

/// A client not heard from for this long is gone (RocketMQ's channel expiry).
pub const CLIENT_EXPIRY: Duration = Duration::from_secs(120);
/// A queue lock not renewed for this long is free (RocketMQ's `rebalance.lockMaxLiveTime`): the
/// C++ client leaves some locked at shutdown.
pub const LOCK_EXPIRY: Duration = Duration::from_secs(60);
/// Most subscriptions one client may register per group.
pub const MAX_SUBSCRIPTIONS: usize = 256;
/// Longest subscription expression taken.
pub const MAX_EXPRESSION_BYTES: usize = 4096;

/// A consumer's subscription to one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionData {
    pub kind: FilterKind,
    pub expression: String,
}

/// One consumer group member, as its heartbeats describe it.
#[derive(Debug, Clone)]
struct Member {
    connection: u64,
    seen: Instant,
    subscriptions: BTreeMap<String, SubscriptionData>,
}

/// A heartbeat's consumer groups, read leniently: the C++ clients send enums as numbers, Java
/// and Go as names; absent lists are empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Heartbeat {
    pub client_id: String,
    /// Each consumer group with its subscriptions (topic → subscription).
    pub consumers: Vec<(String, BTreeMap<String, SubscriptionData>)>,
    pub producers: Vec<String>,
}

/// Why a heartbeat is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadHeartbeat {
    #[error("heartbeat body is not JSON: {0}")]
    NotJson(String),
    #[error("heartbeat has no clientID")]
    NoClientId,
    #[error("heartbeat {0}")]
    TooLarge(String),
}

impl Heartbeat {
    pub fn parse(body: &[u8]) -> Result<Heartbeat, BadHeartbeat> {
        let v: Value = serde_json::from_slice(body).map_err(|e| BadHeartbeat::NotJson(e.to_string()))?;
        let client_id = v.get("clientID").and_then(Value::as_str).unwrap_or_default().to_string();
        if client_id.is_empty() {
            return Err(BadHeartbeat::NoClientId);
        }
        let list = |key: &str| v.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
        let producers = list("producerDataSet")
            .iter()
            .filter_map(|p| p.get("groupName").and_then(Value::as_str).map(str::to_string))
            .collect();
        let mut consumers = Vec::new();
        for c in list("consumerDataSet") {
            let Some(group) = c.get("groupName").and_then(Value::as_str) else { continue };
            let subs = c.get("subscriptionDataSet").and_then(Value::as_array).cloned().unwrap_or_default();
            if subs.len() > MAX_SUBSCRIPTIONS {
                return Err(BadHeartbeat::TooLarge(format!("has {} subscriptions for {group}", subs.len())));
            }
            let mut topics = BTreeMap::new();
            for s in subs {
                let Some(topic) = s.get("topic").and_then(Value::as_str) else { continue };
                let expression = s.get("subString").and_then(Value::as_str).unwrap_or("*").to_string();
                if expression.len() > MAX_EXPRESSION_BYTES {
                    return Err(BadHeartbeat::TooLarge(format!("expression of {} bytes", expression.len())));
                }
                let kind = match s.get("expressionType").and_then(Value::as_str) {
                    Some(t) if t.eq_ignore_ascii_case("SQL92") => FilterKind::Sql92,
                    _ => FilterKind::Tag,
                };
                topics.insert(topic.to_string(), SubscriptionData { kind, expression });
            }
            consumers.push((group.to_string(), topics));
        }
        Ok(Heartbeat { client_id, consumers, producers })
    }
}

/// Who holds a queue lock, until when.
#[derive(Debug, Clone)]
struct Lock {
    client: String,
    until: Instant,
}

/// The registry. Bounded: at most `max_clients` members over all groups.
pub struct Clients {
    max_clients: usize,
    /// group → client id → member.
    groups: Mutex<HashMap<String, HashMap<String, Member>>>,
    /// (group, topic, queue) → lock.
    locks: Mutex<HashMap<(String, String, u32), Lock>>,
}

/// What registering a heartbeat changed: the groups whose membership changed (their other
/// members are told to rebalance).
pub type Changed = Vec<String>;

impl Clients {
    pub fn new(max_clients: usize) -> Clients {
        Clients { max_clients, groups: Mutex::default(), locks: Mutex::default() }
    }

    /// Records `beat` from a client on `connection`. `Err` if the registry is full.
    pub fn heartbeat(&self, connection: u64, beat: &Heartbeat, now: Instant) -> Result<Changed, String> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        expire(&mut groups, now);
        let count: usize = groups.values().map(HashMap::len).sum();
        let mut changed = Vec::new();
        for (group, subscriptions) in &beat.consumers {
            let members = groups.entry(group.clone()).or_default();
            match members.get_mut(&beat.client_id) {
                Some(m) => {
                    m.seen = now;
                    m.connection = connection;
                    m.subscriptions = subscriptions.clone();
                }
                None => {
                    if count + changed.len() >= self.max_clients {
                        return Err(format!("this node serves {} Remoting consumers, its most", self.max_clients));
                    }
                    let m = Member { connection, seen: now, subscriptions: subscriptions.clone() };
                    members.insert(beat.client_id.clone(), m);
                    changed.push(group.clone());
                }
            }
        }
        Ok(changed)
    }

    /// Removes `client` from `group` (every group if `group` is empty).
    pub fn unregister(&self, client: &str, group: &str) -> Changed {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let mut changed = Vec::new();
        for (name, members) in groups.iter_mut() {
            if (group.is_empty() || name == group) && members.remove(client).is_some() {
                changed.push(name.clone());
            }
        }
        groups.retain(|_, m| !m.is_empty());
        changed
    }

    /// Removes the members whose connection closed.
    pub fn connection_closed(&self, connection: u64) -> Changed {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let mut changed = Vec::new();
        for (name, members) in groups.iter_mut() {
            let before = members.len();
            members.retain(|_, m| m.connection != connection);
            if members.len() != before {
                changed.push(name.clone());
            }
        }
        groups.retain(|_, m| !m.is_empty());
        changed
    }

    /// The live members of `group`, sorted.
    pub fn members(&self, group: &str, now: Instant) -> Vec<String> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        expire(&mut groups, now);
        let mut ids: Vec<String> = groups.get(group).map(|m| m.keys().cloned().collect()).unwrap_or_default();
        ids.sort();
        ids
    }

    /// The connections of `group`'s members other than `except`'s.
    pub fn connections(&self, group: &str, except: u64) -> Vec<u64> {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<u64> = groups
            .get(group)
            .map(|m| m.values().map(|m| m.connection).filter(|c| *c != except).collect())
            .unwrap_or_default();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// What a member of `group` registered for `topic`: pulls that carry no subscription (the Go
    /// and Java clients' default) are filtered with it.
    pub fn subscription(&self, group: &str, topic: &str) -> Option<SubscriptionData> {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        groups.get(group)?.values().find_map(|m| m.subscriptions.get(topic).cloned())
    }

    /// Locks each of `queues` of `group` for `client` that is free, expired or already its own;
    /// returns those it holds now.
    pub fn lock(&self, group: &str, client: &str, queues: &[(String, u32)], now: Instant) -> Vec<(String, u32)> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.retain(|_, l| l.until > now);
        let mut held = Vec::new();
        for (topic, queue) in queues {
            let key = (group.to_string(), topic.clone(), *queue);
            let mine = locks.get(&key).is_none_or(|l| l.client == client);
            if mine && (locks.len() < self.max_clients.saturating_mul(64) || locks.contains_key(&key)) {
                locks.insert(key, Lock { client: client.to_string(), until: now + LOCK_EXPIRY });
                held.push((topic.clone(), *queue));
            }
        }
        held
    }

    pub fn unlock(&self, group: &str, client: &str, queues: &[(String, u32)]) {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        for (topic, queue) in queues {
            let key = (group.to_string(), topic.clone(), *queue);
            if locks.get(&key).is_some_and(|l| l.client == client) {
                locks.remove(&key);
            }
        }
    }
}

impl crate::sessions::ConsumerDirectory for Clients {
    fn members(&self, group: &str) -> Vec<String> {
        Clients::members(self, group, Instant::now())
    }
}

fn expire(groups: &mut HashMap<String, HashMap<String, Member>>, now: Instant) {
    for members in groups.values_mut() {
        members.retain(|_, m| now.duration_since(m.seen) < CLIENT_EXPIRY);
    }
    groups.retain(|_, m| !m.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPP_PUSH: &str = r#"{"clientID":"32374-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,"groupName":"CID_TEST","messageModel":1,"subscriptionDataSet":[{"subString":"*","subVersion":"1796626629790","topic":"%RETRY%CID_TEST"},{"subString":"TagA || TagB","subVersion":"1796626629790","topic":"TopicTest"}]}]}
"#;

    #[test]
    fn heartbeats_of_the_cpp_java_and_go_clients_are_read() {
        let beat = Heartbeat::parse(CPP_PUSH.as_bytes()).unwrap();
        assert_eq!(beat.client_id, "32374-127.0.0.1@DEFAULT");
        let (group, subs) = &beat.consumers[0];
        assert_eq!(group, "CID_TEST");
        assert_eq!(subs["TopicTest"].expression, "TagA || TagB");
        let pull = r#"{"clientID":"5279-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":0,"groupName":"CID_PULL","messageModel":1}]}"#;
        assert!(Heartbeat::parse(pull.as_bytes()).unwrap().consumers[0].1.is_empty());
        let go = r#"{"clientID":"10.0.0.1@9#1","consumerDataSet":[{"groupName":"g","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","subscriptionDataSet":[{"topic":"t","subString":"a > 1","expressionType":"SQL92","subVersion":1796626629790000000,"codeSet":["0"]}]}]}"#;
        let beat = Heartbeat::parse(go.as_bytes()).unwrap();
        assert_eq!(beat.consumers[0].1["t"].kind, FilterKind::Sql92);
        let producer = r#"{"clientID":"30599-127.0.0.1@DEFAULT","producerDataSet":[{"groupName":"PID_TEST"}]}"#;
        assert_eq!(Heartbeat::parse(producer.as_bytes()).unwrap().producers, vec!["PID_TEST".to_string()]);
        assert!(matches!(Heartbeat::parse(b"{}"), Err(BadHeartbeat::NoClientId)));
        assert!(matches!(Heartbeat::parse(b"not json"), Err(BadHeartbeat::NotJson(_))));
    }

    #[test]
    fn members_are_listed_exactly_until_they_leave_their_connection_closes_or_they_expire() {
        let clients = Clients::new(10);
        let now = Instant::now();
        let beat = |id: &str| Heartbeat {
            client_id: id.into(),
            consumers: vec![("g".into(), BTreeMap::new())],
            producers: vec![],
        };
        assert_eq!(clients.heartbeat(1, &beat("b@1"), now).unwrap(), vec!["g".to_string()]);
        assert_eq!(clients.heartbeat(2, &beat("a@2"), now).unwrap(), vec!["g".to_string()]);
        assert!(clients.heartbeat(2, &beat("a@2"), now).unwrap().is_empty(), "a renewal changes nothing");
        assert_eq!(clients.members("g", now), vec!["a@2".to_string(), "b@1".to_string()]);
        assert_eq!(clients.connections("g", 1), vec![2]);
        assert_eq!(clients.unregister("b@1", ""), vec!["g".to_string()]);
        assert_eq!(clients.members("g", now), vec!["a@2".to_string()]);
        assert_eq!(clients.connection_closed(2), vec!["g".to_string()]);
        assert!(clients.members("g", now).is_empty());
        clients.heartbeat(3, &beat("c@3"), now).unwrap();
        assert!(clients.members("g", now + CLIENT_EXPIRY).is_empty(), "expired");
    }

    #[test]
    fn the_registry_is_bounded() {
        let clients = Clients::new(2);
        let now = Instant::now();
        for id in ["a", "b"] {
            let beat =
                Heartbeat { client_id: id.into(), consumers: vec![("g".into(), BTreeMap::new())], producers: vec![] };
            clients.heartbeat(1, &beat, now).unwrap();
        }
        let third =
            Heartbeat { client_id: "c".into(), consumers: vec![("g".into(), BTreeMap::new())], producers: vec![] };
        assert!(clients.heartbeat(1, &third, now).is_err());
        assert_eq!(clients.members("g", now).len(), 2);
    }

    #[test]
    fn a_queue_lock_is_one_clients_until_released_or_expired() {
        let clients = Clients::new(10);
        let now = Instant::now();
        let q = vec![("t".to_string(), 0)];
        assert_eq!(clients.lock("g", "a", &q, now), q);
        assert!(clients.lock("g", "b", &q, now).is_empty());
        assert_eq!(clients.lock("g", "a", &q, now), q, "renewed by its holder");
        clients.unlock("g", "b", &q);
        assert!(clients.lock("g", "b", &q, now).is_empty(), "only the holder unlocks");
        assert_eq!(clients.lock("g", "b", &q, now + LOCK_EXPIRY), q, "expired");
        clients.unlock("g", "b", &q);
        assert_eq!(clients.lock("g", "a", &q, now), q);
    }
}
