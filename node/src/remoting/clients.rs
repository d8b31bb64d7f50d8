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
/// Longest group, topic or client name taken (RocketMQ's topics have at most 127 bytes, groups
/// 255).
pub const MAX_NAME_BYTES: usize = 255;
/// Most bytes one member's registration may hold (names and expressions).
pub const MAX_MEMBER_BYTES: usize = 64 << 10;
/// Most bytes all members together may hold.
pub const MAX_REGISTRY_BYTES: usize = 64 << 20;
/// Most queue locks one client may hold.
pub const MAX_LOCKS_PER_CLIENT: usize = 4096;

/// A consumer's subscription to one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionData {
    pub kind: FilterKind,
    pub expression: String,
}

/// One consumer group member, as its heartbeats on one connection describe it.
#[derive(Debug, Clone)]
struct Member {
    seen: Instant,
    subscriptions: BTreeMap<String, SubscriptionData>,
    /// What it holds, for the registry's byte budget.
    bytes: usize,
}

/// A member is its client id on one connection: a client speaks only for itself, so another
/// connection naming the same id (a guess, or the same client reconnected) is another entry,
/// and nothing one connection sends changes, removes or filters for another's.
type MemberKey = (String, u64);

/// A heartbeat's consumer groups, read leniently: the C++ clients send enums as numbers, Java
/// and Go as names; absent lists are empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Heartbeat {
    pub client_id: String,
    /// Each consumer group with its subscriptions (topic → subscription).
    pub consumers: Vec<(String, BTreeMap<String, SubscriptionData>)>,
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

/// Why a heartbeat's registration is not taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryFull {
    #[error("a registration of {0} bytes exceeds {MAX_MEMBER_BYTES}")]
    MemberTooLarge(usize),
    #[error("this node serves {0} Remoting consumers, its most")]
    Full(usize),
}

fn name_ok(name: &str) -> Result<(), BadHeartbeat> {
    match name.len() {
        0 => Err(BadHeartbeat::TooLarge("names an empty group or topic".into())),
        n if n > MAX_NAME_BYTES => Err(BadHeartbeat::TooLarge(format!("names one of {n} bytes"))),
        _ => Ok(()),
    }
}

impl Heartbeat {
    pub fn parse(body: &[u8]) -> Result<Heartbeat, BadHeartbeat> {
        let v: Value = serde_json::from_slice(body).map_err(|e| BadHeartbeat::NotJson(e.to_string()))?;
        let client_id = v.get("clientID").and_then(Value::as_str).unwrap_or_default().to_string();
        if client_id.is_empty() {
            return Err(BadHeartbeat::NoClientId);
        }
        name_ok(&client_id)?;
        let list = |key: &str| v.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
        let mut consumers = Vec::new();
        for c in list("consumerDataSet") {
            let Some(group) = c.get("groupName").and_then(Value::as_str) else { continue };
            name_ok(group)?;
            let subs = c.get("subscriptionDataSet").and_then(Value::as_array).cloned().unwrap_or_default();
            if subs.len() > MAX_SUBSCRIPTIONS {
                return Err(BadHeartbeat::TooLarge(format!("has {} subscriptions for {group}", subs.len())));
            }
            let mut topics = BTreeMap::new();
            for s in subs {
                let Some(topic) = s.get("topic").and_then(Value::as_str) else { continue };
                name_ok(topic)?;
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
        Ok(Heartbeat { client_id, consumers })
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
    /// group → (client id, connection) → member.
    groups: Mutex<HashMap<String, HashMap<MemberKey, Member>>>,
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
    pub fn heartbeat(&self, connection: u64, beat: &Heartbeat, now: Instant) -> Result<Changed, RegistryFull> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        expire(&mut groups, now);
        let (mut count, mut total) = (0, 0);
        for m in groups.values().flat_map(HashMap::values) {
            count += 1;
            total += m.bytes;
        }
        let mut changed = Vec::new();
        for (group, subscriptions) in &beat.consumers {
            let bytes = group.len()
                + beat.client_id.len()
                + subscriptions.iter().map(|(t, s)| t.len() + s.expression.len()).sum::<usize>();
            if bytes > MAX_MEMBER_BYTES {
                return Err(RegistryFull::MemberTooLarge(bytes));
            }
            let key = (beat.client_id.clone(), connection);
            let members = groups.entry(group.clone()).or_default();
            match members.get_mut(&key) {
                Some(m) => {
                    total = total - m.bytes + bytes;
                    *m = Member { seen: now, subscriptions: subscriptions.clone(), bytes };
                }
                None => {
                    if count >= self.max_clients || total + bytes > MAX_REGISTRY_BYTES {
                        return Err(RegistryFull::Full(count));
                    }
                    members.insert(key, Member { seen: now, subscriptions: subscriptions.clone(), bytes });
                    (count, total) = (count + 1, total + bytes);
                    changed.push(group.clone());
                }
            }
        }
        groups.retain(|_, m| !m.is_empty());
        Ok(changed)
    }

    /// Removes `client` of this `connection` from `group` (every group if `group` is empty).
    pub fn unregister(&self, connection: u64, client: &str, group: &str) -> Changed {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let key = (client.to_string(), connection);
        let mut changed = Vec::new();
        for (name, members) in groups.iter_mut() {
            if (group.is_empty() || name == group) && members.remove(&key).is_some() {
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
            members.retain(|(_, c), _| *c != connection);
            if members.len() != before {
                changed.push(name.clone());
            }
        }
        groups.retain(|_, m| !m.is_empty());
        changed
    }

    /// The live members of `group`, sorted, each id once.
    pub fn members(&self, group: &str, now: Instant) -> Vec<String> {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        expire(&mut groups, now);
        let mut ids: Vec<String> =
            groups.get(group).map(|m| m.keys().map(|(id, _)| id.clone()).collect()).unwrap_or_default();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Whether `client` is registered on `connection` (in any group).
    pub fn registered(&self, connection: u64, client: &str) -> bool {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        groups.values().any(|m| m.keys().any(|(id, c)| *c == connection && id == client))
    }

    /// The connections of `group`'s members other than `except`.
    pub fn connections(&self, group: &str, except: u64) -> Vec<u64> {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<u64> =
            groups.get(group).map(|m| m.keys().map(|(_, c)| *c).filter(|c| *c != except).collect()).unwrap_or_default();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// What the client on `connection` registered in `group` for `topic`: its own pulls that
    /// carry no subscription (the Go and Java clients' default) are filtered with it.
    pub fn subscription(&self, connection: u64, group: &str, topic: &str) -> Option<SubscriptionData> {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        groups
            .get(group)?
            .iter()
            .filter(|((_, c), _)| *c == connection)
            .find_map(|(_, m)| m.subscriptions.get(topic).cloned())
    }

    /// Locks each of `queues` of `group` for `client` that is free, expired or already its own;
    /// returns those it holds now.
    pub fn lock(&self, group: &str, client: &str, queues: &[(String, u32)], now: Instant) -> Vec<(String, u32)> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.retain(|_, l| l.until > now);
        let mut held = Vec::new();
        let mut holds = locks.values().filter(|l| l.client == client).count();
        for (topic, queue) in queues {
            let key = (group.to_string(), topic.clone(), *queue);
            let mine = locks.get(&key).is_none_or(|l| l.client == client);
            let renewal = locks.contains_key(&key);
            let room = holds < MAX_LOCKS_PER_CLIENT && locks.len() < self.max_clients.saturating_mul(64);
            if mine && (renewal || room) {
                holds += usize::from(!renewal);
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

fn expire(groups: &mut HashMap<String, HashMap<MemberKey, Member>>, now: Instant) {
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
        assert!(Heartbeat::parse(producer.as_bytes()).unwrap().consumers.is_empty(), "a producer joins no group");
        assert!(matches!(Heartbeat::parse(b"{}"), Err(BadHeartbeat::NoClientId)));
        assert!(matches!(Heartbeat::parse(b"not json"), Err(BadHeartbeat::NotJson(_))));
    }

    fn beat(id: &str) -> Heartbeat {
        Heartbeat { client_id: id.into(), consumers: vec![("g".into(), BTreeMap::new())] }
    }

    #[test]
    fn members_are_listed_exactly_until_they_leave_their_connection_closes_or_they_expire() {
        let clients = Clients::new(10);
        let now = Instant::now();
        assert_eq!(clients.heartbeat(1, &beat("b@1"), now).unwrap(), vec!["g".to_string()]);
        assert_eq!(clients.heartbeat(2, &beat("a@2"), now).unwrap(), vec!["g".to_string()]);
        assert!(clients.heartbeat(2, &beat("a@2"), now).unwrap().is_empty(), "a renewal changes nothing");
        assert_eq!(clients.members("g", now), vec!["a@2".to_string(), "b@1".to_string()]);
        assert_eq!(clients.connections("g", 1), vec![2]);
        assert!(clients.registered(1, "b@1") && !clients.registered(2, "b@1"));
        assert!(clients.unregister(2, "b@1", "").is_empty(), "only its own connection unregisters a client");
        assert_eq!(clients.unregister(1, "b@1", ""), vec!["g".to_string()]);
        assert_eq!(clients.members("g", now), vec!["a@2".to_string()]);
        assert_eq!(clients.connection_closed(2), vec!["g".to_string()]);
        assert!(clients.members("g", now).is_empty());
        clients.heartbeat(3, &beat("c@3"), now).unwrap();
        assert!(clients.members("g", now + CLIENT_EXPIRY).is_empty(), "expired");
    }

    #[test]
    fn a_connection_cannot_take_over_another_ones_client_or_its_filter() {
        let clients = Clients::new(10);
        let now = Instant::now();
        let with = |expression: &str| {
            let sub = SubscriptionData { kind: FilterKind::Tag, expression: expression.into() };
            let consumers = vec![("g".into(), BTreeMap::from([("t".into(), sub)]))];
            Heartbeat { client_id: "victim".into(), consumers }
        };
        clients.heartbeat(1, &with("*"), now).unwrap();
        clients.heartbeat(2, &with("nothing-matches"), now).unwrap();
        assert_eq!(clients.subscription(1, "g", "t").unwrap().expression, "*", "each pulls with its own");
        assert_eq!(clients.members("g", now), vec!["victim".to_string()], "one id, listed once");
        clients.connection_closed(2);
        assert_eq!(clients.members("g", now), vec!["victim".to_string()], "the first stays");
    }

    #[test]
    fn the_registry_is_bounded_in_members_and_bytes() {
        let clients = Clients::new(2);
        let now = Instant::now();
        for id in ["a", "b"] {
            clients.heartbeat(1, &beat(id), now).unwrap();
        }
        assert!(clients.heartbeat(1, &beat("c"), now).is_err());
        assert_eq!(clients.members("g", now).len(), 2);
        let big: BTreeMap<String, SubscriptionData> = (0..40)
            .map(|i| (format!("t{i}"), SubscriptionData { kind: FilterKind::Tag, expression: "x".repeat(4000) }))
            .collect();
        let huge = Heartbeat { client_id: "a".into(), consumers: vec![("g".into(), big)] };
        assert!(clients.heartbeat(1, &huge, now).is_err(), "over a member's byte budget");
        let long = format!(r#"{{"clientID":"x","consumerDataSet":[{{"groupName":"{}"}}]}}"#, "g".repeat(300));
        assert!(matches!(Heartbeat::parse(long.as_bytes()), Err(BadHeartbeat::TooLarge(_))));
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
