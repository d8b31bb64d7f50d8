//! Long polls waiting on this node: each holds a task, a watch and a client's connection for up to
//! its polling time, so their number is bounded in all, per client, and with authentication on
//! per user. A receive over any bound is answered TOO_MANY_REQUESTS at once (the clients back off
//! and poll again).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rockraft_proto::rocketmq::Code;

use crate::proxy::status::Rejection;

/// Whose polls are counted together: the client id, and with authentication on the user it is
/// bound to (`client_ids`). The id alone is the client's own say: counted by it, one client could
/// use many ids to wait past its limit.
type ClientKey = (Option<Arc<str>>, String);

pub struct PollSlots {
    max_total: usize,
    max_per_client: usize,
    max_per_user: usize,
    taken: Mutex<Taken>,
}

#[derive(Default)]
struct Taken {
    total: usize,
    per_client: HashMap<ClientKey, usize>,
    per_user: HashMap<Arc<str>, usize>,
}

/// One waiting poll; its slot is given back when it is dropped, however the poll ends.
pub struct PollSlot<'a> {
    slots: &'a PollSlots,
    key: ClientKey,
}

fn give_back<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

impl PollSlots {
    pub fn new(max_total: usize, max_per_client: usize, max_per_user: usize) -> PollSlots {
        PollSlots { max_total, max_per_client, max_per_user, taken: Mutex::new(Taken::default()) }
    }

    /// A slot for a poll of `client`, sent by `user` (None: authentication is off). A user's
    /// polls are bounded in all, whatever ids its clients use, as well as per client.
    pub fn take(&self, user: Option<&Arc<str>>, client: &str) -> Result<PollSlot<'_>, Rejection> {
        let mut taken = self.taken.lock().expect("poll slots lock");
        if taken.total >= self.max_total {
            let why = format!("this node has {} long polls waiting, its limit; poll again shortly", self.max_total);
            return Err(Rejection::new(Code::TooManyRequests, why));
        }
        let key = (user.cloned(), client.to_string());
        if taken.per_client.get(&key).copied().unwrap_or(0) >= self.max_per_client {
            let why = format!("client {client:?} has {} long polls waiting here, its limit", self.max_per_client);
            return Err(Rejection::new(Code::TooManyRequests, why));
        }
        if let Some(user) = user {
            let mine = taken.per_user.entry(Arc::clone(user)).or_default();
            if *mine >= self.max_per_user {
                let why = format!("user {user} has {} long polls waiting here, its limit", self.max_per_user);
                return Err(Rejection::new(Code::TooManyRequests, why));
            }
            *mine += 1;
        }
        *taken.per_client.entry(key.clone()).or_default() += 1;
        taken.total += 1;
        Ok(PollSlot { slots: self, key })
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.taken.lock().expect("poll slots lock").total
    }
}

impl Drop for PollSlot<'_> {
    fn drop(&mut self) {
        let mut taken = self.slots.taken.lock().expect("poll slots lock");
        taken.total -= 1;
        give_back(&mut taken.per_client, &self.key);
        if let Some(user) = &self.key.0 {
            give_back(&mut taken.per_user, user);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_are_bounded_in_all_and_per_client_and_slots_come_back() {
        let slots = PollSlots::new(3, 2, 100);
        let a1 = slots.take(None, "a").unwrap();
        let _a2 = slots.take(None, "a").unwrap();
        let refused = slots.take(None, "a").err().expect("a third poll of one client");
        assert_eq!(refused.0.code, Code::TooManyRequests as i32);
        let _b1 = slots.take(None, "b").unwrap();
        assert!(slots.take(None, "c").is_err(), "the node's limit");
        drop(a1);
        assert_eq!(slots.waiting(), 2);
        let _c1 = slots.take(None, "c").unwrap();
        assert!(slots.take(None, "a").is_err());
    }

    #[test]
    fn with_auth_a_user_s_polls_are_bounded_whatever_ids_it_uses_and_another_user_s_id_is_its_own() {
        let slots = PollSlots::new(100, 2, 3);
        let (alice, bob): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        let a1 = slots.take(Some(&alice), "a").unwrap();
        let _a2 = slots.take(Some(&alice), "a").unwrap();
        assert!(slots.take(Some(&alice), "a").is_err(), "per client");
        let _b = slots.take(Some(&alice), "b").unwrap();
        let refused = slots.take(Some(&alice), "c").err().expect("a fourth poll of one user under a new id");
        assert_eq!(refused.0.code, Code::TooManyRequests as i32);
        // Bob counts apart, even under an id alice also uses.
        let _bob1 = slots.take(Some(&bob), "a").unwrap();
        let _bob2 = slots.take(Some(&bob), "a").unwrap();
        drop(a1);
        let _c = slots.take(Some(&alice), "c").unwrap();
        assert_eq!(slots.waiting(), 5);
    }
}
