//! Long polls waiting on this node: each holds a task, a watch and a client's connection for up to
//! its polling time, so their number is bounded in all and per client. A receive over either
//! bound is answered TOO_MANY_REQUESTS at once (the clients back off and poll again).

use std::collections::HashMap;
use std::sync::Mutex;

use rockraft_proto::rocketmq::Code;

use crate::proxy::status::Rejection;

pub struct PollSlots {
    max_total: usize,
    max_per_client: usize,
    /// Waiting polls: in all, and by client id.
    taken: Mutex<(usize, HashMap<String, usize>)>,
}

/// One waiting poll; its slot is given back when it is dropped, however the poll ends.
pub struct PollSlot<'a> {
    slots: &'a PollSlots,
    client: String,
}

impl PollSlots {
    pub fn new(max_total: usize, max_per_client: usize) -> PollSlots {
        PollSlots { max_total, max_per_client, taken: Mutex::new((0, HashMap::new())) }
    }

    pub fn take(&self, client: &str) -> Result<PollSlot<'_>, Rejection> {
        let mut taken = self.taken.lock().expect("poll slots lock");
        let (total, per_client) = &mut *taken;
        if *total >= self.max_total {
            let why = format!("this node has {} long polls waiting, its limit; poll again shortly", self.max_total);
            return Err(Rejection::new(Code::TooManyRequests, why));
        }
        let mine = per_client.entry(client.to_string()).or_default();
        if *mine >= self.max_per_client {
            let why = format!("client {client:?} has {} long polls waiting here, its limit", self.max_per_client);
            return Err(Rejection::new(Code::TooManyRequests, why));
        }
        *mine += 1;
        *total += 1;
        Ok(PollSlot { slots: self, client: client.to_string() })
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.taken.lock().expect("poll slots lock").0
    }
}

impl Drop for PollSlot<'_> {
    fn drop(&mut self) {
        let mut taken = self.slots.taken.lock().expect("poll slots lock");
        let (total, per_client) = &mut *taken;
        *total -= 1;
        if let Some(n) = per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                per_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_are_bounded_in_all_and_per_client_and_slots_come_back() {
        let slots = PollSlots::new(3, 2);
        let a1 = slots.take("a").unwrap();
        let _a2 = slots.take("a").unwrap();
        let refused = slots.take("a").err().expect("a third poll of one client");
        assert_eq!(refused.0.code, Code::TooManyRequests as i32);
        let _b1 = slots.take("b").unwrap();
        assert!(slots.take("c").is_err(), "the node's limit");
        drop(a1);
        assert_eq!(slots.waiting(), 2);
        let _c1 = slots.take("c").unwrap();
        assert!(slots.take("a").is_err());
    }
}
