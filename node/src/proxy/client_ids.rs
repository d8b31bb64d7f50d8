//! Which user a client id (`x-mq-client-id`) belongs to. The id is the client's own choice, so
//! with authentication on, the first authenticated user that uses an id on this node owns it;
//! calls keyed by the id that act on that client's state (heartbeats that keep its renewals
//! alive, receives, lite subscriptions, the client's termination) are refused FORBIDDEN to any
//! other user. An admin may name any id. With authentication off nothing is bound.
//!
//! This binding is per node; state keyed by a client id that is replicated (lite subscriptions)
//! records its owning user itself and is checked at apply (`broker/lite.rs`), so naming the id
//! on a node where it is unbound does not make it the caller's either.
//!
//! Node-local and bounded: an id is forgotten when its client terminates or after `IDLE` without
//! a call (the official clients heartbeat every few seconds), and the table holds at most
//! `max_ids` ids, `max_per_user` of any one user, so a flood of made-up ids neither grows it
//! without end nor pushes out the ids of other users; a user over its share (after its idle ids
//! are dropped) is answered TOO_MANY_REQUESTS for a new id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rockraft_proto::rocketmq::Code;
use tokio::time::Instant;

use crate::auth::Caller;
use crate::proxy::status::Rejection;

/// A bound id not used for this long is forgotten.
pub const IDLE: Duration = Duration::from_secs(600);

struct Owner {
    user: Arc<str>,
    seen: Instant,
}

#[derive(Default)]
struct Table {
    owners: HashMap<String, Owner>,
    per_user: HashMap<Arc<str>, usize>,
    /// When idle ids were last looked for: a full table is walked at most once a second.
    expired: Option<Instant>,
}

pub struct ClientIds {
    max_ids: usize,
    max_per_user: usize,
    table: Mutex<Table>,
}

impl Table {
    fn forget(&mut self, client: &str) {
        if let Some(owner) = self.owners.remove(client) {
            self.uncount(&owner.user);
        }
    }

    fn uncount(&mut self, user: &Arc<str>) {
        if let Some(n) = self.per_user.get_mut(user) {
            *n -= 1;
            if *n == 0 {
                self.per_user.remove(user);
            }
        }
    }

    /// Drops the ids idle since before `now - IDLE`.
    fn expire(&mut self, now: Instant) {
        if self.expired.is_some_and(|at| now.duration_since(at) < Duration::from_secs(1)) {
            return;
        }
        self.expired = Some(now);
        let mut gone = Vec::new();
        self.owners.retain(|_, o| {
            let keep = now.duration_since(o.seen) < IDLE;
            if !keep {
                gone.push(Arc::clone(&o.user));
            }
            keep
        });
        gone.iter().for_each(|user| self.uncount(user));
    }
}

impl ClientIds {
    pub fn new(max_ids: usize, max_per_user: usize) -> ClientIds {
        ClientIds { max_ids, max_per_user, table: Mutex::new(Table::default()) }
    }

    /// May `caller` act as client `client`? Binds an unbound id to an authenticated user.
    /// Nothing is bound for an empty id or with authentication off.
    pub fn claim(&self, caller: &Caller, client: &str) -> Result<(), Rejection> {
        let (user, admin) = match caller {
            Caller::User { access_key, admin } if !client.is_empty() => (access_key, *admin),
            _ => return Ok(()),
        };
        let now = Instant::now();
        let mut table = self.table.lock().expect("client ids lock");
        if let Some(owner) = table.owners.get_mut(client)
            && now.duration_since(owner.seen) < IDLE
        {
            if owner.user == *user {
                owner.seen = now;
                return Ok(());
            }
            if admin {
                return Ok(());
            }
            let why = format!("client id {client:?} belongs to another user on this node");
            return Err(Rejection::new(Code::Forbidden, why));
        }
        table.forget(client);
        let full = |t: &Table| {
            t.owners.len() >= self.max_ids || t.per_user.get(user).copied().unwrap_or(0) >= self.max_per_user
        };
        if full(&table) {
            table.expire(now);
        }
        if full(&table) {
            let why = format!(
                "too many client ids in use on this node (at most {} per user); retry later",
                self.max_per_user
            );
            return Err(Rejection::new(Code::TooManyRequests, why));
        }
        table.owners.insert(client.to_string(), Owner { user: Arc::clone(user), seen: now });
        *table.per_user.entry(Arc::clone(user)).or_default() += 1;
        Ok(())
    }

    /// The client ended (after a successful `claim`): its id is free again.
    pub fn release(&self, client: &str) {
        self.table.lock().expect("client ids lock").forget(client);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.lock().expect("client ids lock").owners.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(key: &str, admin: bool) -> Caller {
        Caller::User { access_key: key.into(), admin }
    }

    fn code(r: Result<(), Rejection>) -> i32 {
        r.err().map_or(Code::Ok as i32, |Rejection(s)| s.code)
    }

    #[tokio::test(start_paused = true)]
    async fn an_id_belongs_to_its_first_user_until_released_or_idle() {
        let ids = ClientIds::new(100, 10);
        let (alice, bob) = (user("alice", false), user("bob", false));
        assert_eq!(code(ids.claim(&alice, "c1")), Code::Ok as i32);
        assert_eq!(code(ids.claim(&alice, "c1")), Code::Ok as i32, "its owner again");
        assert_eq!(code(ids.claim(&bob, "c1")), Code::Forbidden as i32, "another user naming it");
        assert_eq!(code(ids.claim(&user("root", true), "c1")), Code::Ok as i32, "an admin may name any id");
        assert_eq!(code(ids.claim(&bob, "c1")), Code::Forbidden as i32, "an admin's call does not take it");
        ids.release("c1");
        assert_eq!(code(ids.claim(&bob, "c1")), Code::Ok as i32, "free once its client ended");
        tokio::time::advance(IDLE - Duration::from_secs(1)).await;
        assert_eq!(code(ids.claim(&alice, "c1")), Code::Forbidden as i32);
        assert_eq!(code(ids.claim(&bob, "c1")), Code::Ok as i32, "a call keeps it");
        tokio::time::advance(IDLE).await;
        assert_eq!(code(ids.claim(&alice, "c1")), Code::Ok as i32, "free once idle");
    }

    #[test]
    fn nothing_is_bound_with_auth_off_or_for_an_empty_id() {
        let ids = ClientIds::new(1, 1);
        assert!(ids.claim(&Caller::Open, "c1").is_ok());
        assert!(ids.claim(&user("alice", false), "").is_ok());
        assert!(ids.claim(&user("bob", false), "").is_ok());
        assert_eq!(ids.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_ids_is_bounded_per_user_and_in_all_and_leaves_other_users_ids_alone() {
        let ids = ClientIds::new(5, 3);
        let (alice, mallory) = (user("alice", false), user("mallory", false));
        ids.claim(&alice, "alice-1").unwrap();
        for n in 0..3 {
            ids.claim(&mallory, &format!("m-{n}")).unwrap();
        }
        assert_eq!(code(ids.claim(&mallory, "m-3")), Code::TooManyRequests as i32, "its share");
        assert_eq!(code(ids.claim(&mallory, "alice-1")), Code::Forbidden as i32, "still alice's");
        ids.claim(&alice, "alice-2").unwrap();
        assert_eq!(
            code(ids.claim(&user("carol", false), "carol-1")),
            Code::TooManyRequests as i32,
            "the table is full"
        );
        assert_eq!(ids.len(), 5);
        // Idle ids make room; the ones in use stay.
        tokio::time::advance(IDLE / 2).await;
        ids.claim(&alice, "alice-1").unwrap();
        tokio::time::advance(IDLE / 2 + Duration::from_secs(1)).await;
        ids.claim(&user("carol", false), "carol-1").unwrap();
        assert_eq!(code(ids.claim(&mallory, "alice-1")), Code::Forbidden as i32);
        assert_eq!(ids.len(), 2);
    }
}
