//! What the workload saw, and the check of it: every acknowledged message consumed with the
//! bytes sent, nothing consumed that was not sent, nothing stored twice, no acknowledged
//! consumption undone, and every send answered in time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The longest a send may wait for its answer, whatever the faults: a member cut off from its
/// leader answers with a status the client retries on instead of holding the send.
pub const SEND_ANSWER_BOUND: Duration = Duration::from_secs(2);

/// One message delivered to the consumer.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: u64,
    pub queue: i32,
    pub offset: i64,
    /// Simulated time, ms.
    pub at_ms: u64,
    pub intact: bool,
}

#[derive(Debug, Default)]
pub struct History {
    /// Every message the producer tried, and whether a send of it was acknowledged.
    pub sent: BTreeMap<u64, bool>,
    pub deliveries: Vec<Delivery>,
    /// Acknowledgements answered OK: (queue, offset) → simulated time, ms.
    pub acked: BTreeMap<(i32, i64), u64>,
    /// Sends that waited longer than [`SEND_ANSWER_BOUND`] for an answer: (message, node, wait).
    pub slow_sends: Vec<(u64, usize, Duration)>,
    pub slowest_send: Duration,
    /// Deliveries of ids the producer never sent, or not parseable as one.
    pub strangers: Vec<String>,
    /// What the clients found wrong besides the messages: replicas that did not come to agree,
    /// a repaired node that could not lead.
    pub failures: Vec<String>,
    /// Every event, with its simulated time: two runs of one seed give the same lines.
    pub trace: Vec<String>,
}

impl History {
    pub fn note(&mut self, at_ms: u64, line: String) {
        self.trace.push(format!("{at_ms:>8} {line}"));
    }

    /// A fingerprint of the whole trace (FNV-1a), to compare runs of one seed.
    pub fn fingerprint(&self) -> u64 {
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        for byte in self.trace.iter().flat_map(|l| l.bytes().chain([b'\n'])) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        hash
    }

    pub fn acknowledged(&self) -> usize {
        self.sent.values().filter(|a| **a).count()
    }

    /// Acknowledged messages not yet consumed: never delivered with their bytes. (A delivery
    /// whose ack went unanswered is consumed too: the ack may have taken effect, and then the
    /// message is rightly not delivered again.)
    pub fn unconsumed(&self) -> BTreeSet<u64> {
        let consumed: BTreeSet<u64> = self.deliveries.iter().filter(|d| d.intact).map(|d| d.id).collect();
        self.sent.iter().filter(|(id, acked)| **acked && !consumed.contains(id)).map(|(id, _)| *id).collect()
    }

    /// Everything the history shows to be wrong.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let unconsumed = self.unconsumed();
        if !unconsumed.is_empty() {
            problems.push(format!(
                "{} acknowledged message(s) never consumed: {:?}",
                unconsumed.len(),
                unconsumed.iter().take(10).collect::<Vec<_>>()
            ));
        }
        for d in self.deliveries.iter().filter(|d| !d.intact) {
            problems.push(format!(
                "message {} delivered with other bytes than sent (queue {} offset {})",
                d.id, d.queue, d.offset
            ));
        }
        for s in &self.strangers {
            problems.push(format!("delivered but never sent: {s}"));
        }
        let mut stored: BTreeMap<u64, BTreeSet<(i32, i64)>> = BTreeMap::new();
        for d in &self.deliveries {
            stored.entry(d.id).or_default().insert((d.queue, d.offset));
        }
        for (id, places) in stored.iter().filter(|(_, p)| p.len() > 1) {
            problems.push(format!("message {id} stored more than once: at {places:?}"));
        }
        for d in &self.deliveries {
            if let Some(acked_at) = self.acked.get(&(d.queue, d.offset))
                && *acked_at < d.at_ms
            {
                problems.push(format!(
                    "message {} (queue {} offset {}) delivered at {} ms after its ack was answered OK at {} ms",
                    d.id, d.queue, d.offset, d.at_ms, acked_at
                ));
            }
        }
        problems.extend(self.failures.iter().cloned());
        // Per message group, messages are first delivered in the order they were sent (the
        // producer sends one after another, so that is the order of their ids).
        let mut last_first: BTreeMap<String, u64> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for d in &self.deliveries {
            let Some(group) = crate::workload::message_group(d.id) else { continue };
            if !seen.insert(d.id) {
                continue;
            }
            if let Some(before) = last_first.insert(group.clone(), d.id)
                && before > d.id
            {
                problems
                    .push(format!("message group {group}: message {} first delivered after message {before}", d.id));
            }
        }
        for (id, node, waited) in &self.slow_sends {
            problems.push(format!("a send of message {id} through node {node} was answered after {waited:?}"));
        }
        problems
    }
}
