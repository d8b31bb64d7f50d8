//! A recorded history of client operations against a cluster under faults, and the checker that
//! judges it once the faults have healed (the approach of Jepsen's queue workloads).
//!
//! Every operation is recorded with its outcome as the client saw it: `Ok`, `Failed` (the node
//! said it did nothing) or `Unknown` (no answer, a timeout, a transport error: it may or may not
//! have taken effect). After the run the test reads what every replica stores ([`Stored`]) and
//! [`check`] returns every rule the history and the stores break, each with the operations that
//! break it.
//!
//! The rules:
//! - **replicas agree**: every node stores the same messages at the same offsets;
//! - **dense**: a queue's offsets have no holes;
//! - **acknowledged is stored**: every send answered OK is stored exactly once, at the offset it
//!   was answered with (a FIFO message in its message group's queue; a normal one in whichever
//!   queue the broker chose);
//! - **nothing invented**: every stored message was sent, and not by a send that failed;
//! - **at most once**: no message (an unknown send's, a retry's) is stored twice;
//! - **consumed**: every stored message was delivered at least once;
//! - **FIFO order**: a message group's messages are stored in the order one producer sent them,
//!   and each is first delivered only after the one before it was acknowledged;
//! - **attempts bounded**: no delivery beyond the group's maximum attempts;
//! - **timers**: no delayed message delivered before its time.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// What the client saw of one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The node answered that it did nothing.
    Failed,
    /// No answer (lost, timed out, a transport error): it may or may not have taken effect.
    Unknown,
}

/// One send of one message, as its producer saw it.
#[derive(Debug, Clone)]
pub struct Send {
    /// Which producer (they send concurrently).
    pub process: usize,
    pub message_id: String,
    pub topic: String,
    pub queue: u32,
    /// FIFO: the message group and the message's place in the producer's sequence of the group.
    pub fifo: Option<(String, u64)>,
    /// Delayed messages: when due, in ms since the epoch.
    pub due_ms: Option<i64>,
    pub outcome: Outcome,
    /// The offset a send answered OK returned.
    pub offset: Option<u64>,
    /// When the send started and ended (ms on the test's clock).
    pub start_ms: u64,
    pub end_ms: u64,
}

/// One message delivered to a consumer.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub process: usize,
    pub message_id: String,
    pub topic: String,
    pub queue: u32,
    pub offset: u64,
    /// RocketMQ's delivery attempt: 1 the first time.
    pub attempt: u32,
    /// When the receive that brought it returned (ms on the test's clock), and on the epoch
    /// clock (to compare with due times).
    pub at_ms: u64,
    pub at_epoch_ms: i64,
}

/// One acknowledgement of one delivered message.
#[derive(Debug, Clone)]
pub struct Ack {
    pub process: usize,
    pub message_id: String,
    pub outcome: Outcome,
    pub start_ms: u64,
    pub end_ms: u64,
}

/// Everything the clients did, in the order it was recorded.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub sends: Vec<Send>,
    pub deliveries: Vec<Delivery>,
    pub acks: Vec<Ack>,
}

/// What one node stores: per (topic, queue), offset → message id.
pub type Stored = BTreeMap<(String, u32), BTreeMap<u64, String>>;

/// A rule the history breaks, and the operations that break it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    pub rule: &'static str,
    pub detail: String,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.rule, self.detail)
    }
}

/// What the checker needs to know of the cluster.
#[derive(Debug, Clone)]
pub struct Rules {
    /// The consumer group's maximum delivery attempts.
    pub max_attempts: u32,
    /// Topics whose every stored message must have been delivered (the consumers drained them).
    pub drained: BTreeSet<String>,
}

/// Judges `history` against what each node stores (`stores`: node id → its store, of the queues
/// whose group it holds). Every broken rule is returned (at most a few examples each), so one run
/// shows all that went wrong.
pub fn check(history: &History, stores: &BTreeMap<u64, Stored>, rules: &Rules) -> Vec<Anomaly> {
    let mut out = Vec::new();
    if stores.is_empty() {
        return vec![Anomaly { rule: "replicas agree", detail: "no node's store was read".into() }];
    }
    // Each queue as the first node holding it stores it.
    let mut reference = Stored::new();
    let mut first = BTreeMap::new();
    for (&node, store) in stores {
        for (queue, messages) in store {
            if !reference.contains_key(queue) {
                reference.insert(queue.clone(), messages.clone());
                first.insert(queue.clone(), node);
            }
        }
    }
    let reference = &reference;
    replicas_agree(&first, reference, stores, &mut out);
    dense(reference, &mut out);
    let placed = placements(reference);
    acknowledged_stored(history, &placed, &mut out);
    nothing_invented(history, &placed, &mut out);
    at_most_once(&placed, &mut out);
    consumed(history, &placed, rules, &mut out);
    fifo_order(history, &placed, &mut out);
    attempts_bounded(history, rules, &mut out);
    timers_on_time(history, &mut out);
    out
}

/// At most this many examples of one rule are listed.
const EXAMPLES: usize = 5;

fn report(out: &mut Vec<Anomaly>, rule: &'static str, examples: Vec<String>) {
    for detail in examples.into_iter().take(EXAMPLES) {
        out.push(Anomaly { rule, detail });
    }
}

/// Every node holding a queue stores what its first holder (`first`) does.
fn replicas_agree(
    first: &BTreeMap<(String, u32), u64>,
    reference: &Stored,
    stores: &BTreeMap<u64, Stored>,
    out: &mut Vec<Anomaly>,
) {
    let mut examples = Vec::new();
    for (&node, store) in stores {
        for (q, b) in store.iter().filter(|(q, _)| first.get(*q) != Some(&node)) {
            let a = &reference[q];
            let offsets: BTreeSet<u64> = a.keys().chain(b.keys()).copied().collect();
            for o in offsets {
                let (x, y) = (a.get(&o), b.get(&o));
                if x != y {
                    examples.push(format!(
                        "{} queue {} offset {o}: node {} stores {x:?}, node {node} {y:?}",
                        q.0, q.1, first[q]
                    ));
                    break;
                }
            }
        }
    }
    report(out, "replicas agree", examples);
}

fn dense(reference: &Stored, out: &mut Vec<Anomaly>) {
    let mut examples = Vec::new();
    for ((topic, queue), messages) in reference {
        let (Some(&first), Some(&last)) = (messages.keys().next(), messages.keys().next_back()) else { continue };
        if (last - first + 1) as usize != messages.len() {
            let missing: Vec<u64> = (first..=last).filter(|o| !messages.contains_key(o)).take(5).collect();
            examples.push(format!("{topic} queue {queue}: offsets {first}..={last} miss {missing:?}"));
        }
    }
    report(out, "dense", examples);
}

/// Where each message id is stored (on the reference node): every place.
fn placements(reference: &Stored) -> BTreeMap<&str, Vec<(&str, u32, u64)>> {
    let mut placed: BTreeMap<&str, Vec<(&str, u32, u64)>> = BTreeMap::new();
    for ((topic, queue), messages) in reference {
        for (&offset, id) in messages {
            placed.entry(id.as_str()).or_default().push((topic.as_str(), *queue, offset));
        }
    }
    placed
}

fn acknowledged_stored(history: &History, placed: &BTreeMap<&str, Vec<(&str, u32, u64)>>, out: &mut Vec<Anomaly>) {
    let mut examples = Vec::new();
    for s in history.sends.iter().filter(|s| s.outcome == Outcome::Ok && s.due_ms.is_none()) {
        let at = placed.get(s.message_id.as_str()).cloned().unwrap_or_default();
        let offset = s.offset.unwrap_or(u64::MAX);
        // A FIFO message's queue follows its message group. A normal one's is the broker's
        // choice within its id's data group, which a retry naming another queue does not
        // change (it is answered with the first copy's offset): only its offset is the client's.
        let stored_as_answered = match (s.fifo.is_some(), at.as_slice()) {
            (true, [one]) => *one == (s.topic.as_str(), s.queue, offset),
            (false, [(topic, _, at_offset)]) => *topic == s.topic && *at_offset == offset,
            _ => false,
        };
        if !stored_as_answered {
            examples.push(format!(
                "send {} (producer {}, {}..{} ms) was answered OK at {} queue {} offset {:?}, but is stored at {at:?}",
                s.message_id, s.process, s.start_ms, s.end_ms, s.topic, s.queue, s.offset
            ));
        }
    }
    // A delayed message is stored where its timer delivers it, at an offset the send never saw.
    for s in history.sends.iter().filter(|s| s.outcome == Outcome::Ok && s.due_ms.is_some()) {
        if placed.get(s.message_id.as_str()).is_none_or(|at| at.len() != 1) {
            let at = placed.get(s.message_id.as_str());
            examples.push(format!("delayed send {} was answered OK, but is stored at {at:?}", s.message_id));
        }
    }
    report(out, "acknowledged is stored", examples);
}

fn nothing_invented(history: &History, placed: &BTreeMap<&str, Vec<(&str, u32, u64)>>, out: &mut Vec<Anomaly>) {
    let mut sent: BTreeMap<&str, Vec<&Send>> = BTreeMap::new();
    for s in &history.sends {
        sent.entry(s.message_id.as_str()).or_default().push(s);
    }
    let mut examples = Vec::new();
    for (id, at) in placed {
        match sent.get(id) {
            None => examples.push(format!("{id} is stored at {at:?} but was never sent")),
            Some(sends) if sends.iter().all(|s| s.outcome == Outcome::Failed) => examples.push(format!(
                "{id} is stored at {at:?} but every send of it failed: {:?}",
                sends.iter().map(|s| (s.process, s.start_ms, s.end_ms)).collect::<Vec<_>>()
            )),
            Some(_) => {}
        }
    }
    report(out, "nothing invented", examples);
}

fn at_most_once(placed: &BTreeMap<&str, Vec<(&str, u32, u64)>>, out: &mut Vec<Anomaly>) {
    let examples = placed
        .iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(id, at)| format!("{id} is stored {} times: {at:?}", at.len()));
    report(out, "at most once", examples.collect());
}

fn consumed(history: &History, placed: &BTreeMap<&str, Vec<(&str, u32, u64)>>, rules: &Rules, out: &mut Vec<Anomaly>) {
    let delivered: BTreeSet<&str> = history.deliveries.iter().map(|d| d.message_id.as_str()).collect();
    let examples = placed
        .iter()
        .filter(|(id, at)| !delivered.contains(*id) && at.iter().any(|(t, _, _)| rules.drained.contains(*t)))
        .map(|(id, at)| format!("{id} is stored at {at:?} but was never delivered"));
    report(out, "consumed", examples.collect());
}

fn fifo_order(history: &History, placed: &BTreeMap<&str, Vec<(&str, u32, u64)>>, out: &mut Vec<Anomaly>) {
    let mut examples = Vec::new();
    // Per group, the messages stored, in the producer's order (a message sent again after an
    // unknown outcome is one message).
    let mut by_group: BTreeMap<(&str, &str), BTreeMap<u64, &Send>> = BTreeMap::new();
    for s in &history.sends {
        if let Some((group, seq)) = &s.fifo
            && placed.get(s.message_id.as_str()).is_some_and(|at| at.len() == 1)
        {
            by_group.entry((s.topic.as_str(), group.as_str())).or_default().entry(*seq).or_insert(s);
        }
    }
    let groups = by_group.into_iter().map(|(g, sends)| (g, sends.into_iter().collect::<Vec<(u64, &Send)>>()));
    let first_delivery = |id: &str| history.deliveries.iter().find(|d| d.message_id == id);
    let acked_by = |id: &str| history.acks.iter().filter(|a| a.message_id == id).map(|a| a.start_ms).min();
    for ((topic, group), sends) in groups {
        let offsets: Vec<u64> = sends.iter().map(|(_, s)| placed[s.message_id.as_str()][0].2).collect();
        if let Some(w) = offsets.windows(2).position(|w| w[0] >= w[1]) {
            let (a, b) = (&sends[w].1.message_id, &sends[w + 1].1.message_id);
            examples.push(format!(
                "{topic} group {group}: {a} was sent before {b} but is stored at offset {} >= {}",
                offsets[w],
                offsets[w + 1]
            ));
        }
        for pair in sends.windows(2) {
            let (before, after) = (&pair[0].1.message_id, &pair[1].1.message_id);
            let Some(next) = first_delivery(after) else { continue };
            match acked_by(before) {
                Some(acked) if acked <= next.at_ms => {}
                acked => examples.push(format!(
                    "{topic} group {group}: {after} was delivered at {} ms, before {before} was acknowledged ({acked:?})",
                    next.at_ms
                )),
            }
        }
    }
    report(out, "FIFO order", examples);
}

fn attempts_bounded(history: &History, rules: &Rules, out: &mut Vec<Anomaly>) {
    let examples =
        history.deliveries.iter().filter(|d| d.attempt > rules.max_attempts).map(|d| {
            format!("{} was delivered for attempt {} (at most {})", d.message_id, d.attempt, rules.max_attempts)
        });
    report(out, "attempts bounded", examples.collect());
}

fn timers_on_time(history: &History, out: &mut Vec<Anomaly>) {
    let due: BTreeMap<&str, i64> =
        history.sends.iter().filter_map(|s| Some((s.message_id.as_str(), s.due_ms?))).collect();
    let examples = history
        .deliveries
        .iter()
        .filter(|d| due.get(d.message_id.as_str()).is_some_and(|&due| d.at_epoch_ms < due))
        .map(|d| {
            format!(
                "{} was delivered at {} ms, before its time {}",
                d.message_id,
                d.at_epoch_ms,
                due[d.message_id.as_str()]
            )
        });
    report(out, "timers", examples.collect());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(id: &str, queue: u32, outcome: Outcome, offset: Option<u64>) -> Send {
        Send {
            process: 0,
            message_id: id.into(),
            topic: "T".into(),
            queue,
            fifo: None,
            due_ms: None,
            outcome,
            offset,
            start_ms: 0,
            end_ms: 1,
        }
    }

    fn delivery(id: &str, offset: u64, attempt: u32, at_ms: u64) -> Delivery {
        Delivery {
            process: 0,
            message_id: id.into(),
            topic: "T".into(),
            queue: 0,
            offset,
            attempt,
            at_ms,
            at_epoch_ms: at_ms as i64,
        }
    }

    fn ack(id: &str, at_ms: u64) -> Ack {
        Ack { process: 0, message_id: id.into(), outcome: Outcome::Ok, start_ms: at_ms, end_ms: at_ms + 1 }
    }

    fn store(messages: &[(u32, u64, &str)]) -> Stored {
        let mut s = Stored::new();
        for &(q, o, id) in messages {
            s.entry(("T".into(), q)).or_default().insert(o, id.into());
        }
        s
    }

    fn rules() -> Rules {
        Rules { max_attempts: 3, drained: ["T".to_string()].into() }
    }

    fn three(s: &Stored) -> BTreeMap<u64, Stored> {
        (1..=3).map(|n| (n, s.clone())).collect()
    }

    fn broken(history: &History, stores: &BTreeMap<u64, Stored>) -> BTreeSet<&'static str> {
        check(history, stores, &rules()).iter().map(|a| a.rule).collect()
    }

    /// A clean run: acked, unknown-but-stored and failed sends, all delivered once.
    fn clean() -> (History, Stored) {
        let history = History {
            sends: vec![
                send("a", 0, Outcome::Ok, Some(0)),
                send("b", 0, Outcome::Unknown, None),
                send("c", 0, Outcome::Ok, Some(2)),
                send("d", 0, Outcome::Failed, None),
                send("e", 0, Outcome::Unknown, None),
            ],
            deliveries: vec![delivery("a", 0, 1, 10), delivery("b", 1, 1, 10), delivery("c", 2, 1, 10)],
            acks: vec![ack("a", 11), ack("b", 11), ack("c", 11)],
        };
        (history, store(&[(0, 0, "a"), (0, 1, "b"), (0, 2, "c")]))
    }

    #[test]
    fn a_clean_history_breaks_no_rule() {
        let (h, s) = clean();
        assert_eq!(check(&h, &three(&s), &rules()), vec![]);
    }

    /// Groups of three from five nodes: each node stores only the queues whose group it holds,
    /// and the queues' holders are compared with each other.
    #[test]
    fn each_queue_is_compared_among_the_nodes_that_hold_it() {
        let (h, _) = clean();
        let queue0 = store(&[(0, 0, "a"), (0, 1, "b")]);
        let queue1 = store(&[(1, 0, "c")]);
        let both: Stored = queue0.clone().into_iter().chain(queue1.clone()).collect();
        let mut history = h.clone();
        history.sends[2].queue = 1;
        history.sends[2].offset = Some(0);
        history.deliveries[2].queue = 1;
        history.deliveries[2].offset = 0;
        let stores: BTreeMap<u64, Stored> = [(1, queue0), (2, both), (3, queue1.clone())].into();
        assert_eq!(check(&history, &stores, &rules()), vec![]);
        // Node 3 disagrees with node 2, the first holding queue 1.
        let mut bad = stores.clone();
        bad.get_mut(&3).unwrap().get_mut(&("T".into(), 1)).unwrap().insert(0, "z".into());
        let found = check(&history, &bad, &rules());
        assert_eq!(found.iter().map(|a| a.rule).collect::<Vec<_>>(), vec!["replicas agree"]);
        assert!(found[0].detail.contains("node 2") && found[0].detail.contains("node 3"), "{}", found[0]);
    }

    #[test]
    fn each_broken_rule_is_named_with_the_operations_that_break_it() {
        let (h, s) = clean();
        // One replica stores another message at an offset.
        let mut stores = three(&s);
        stores.get_mut(&3).unwrap().get_mut(&("T".into(), 0)).unwrap().insert(1, "z".into());
        let found = check(&h, &stores, &rules());
        assert_eq!(found.iter().map(|a| a.rule).collect::<Vec<_>>(), vec!["replicas agree"]);
        assert!(found[0].detail.contains("offset 1") && found[0].detail.contains("node 3"), "{}", found[0]);

        // A hole.
        let holed = store(&[(0, 0, "a"), (0, 2, "c")]);
        assert!(broken(&h, &three(&holed)).contains("dense"));

        // An acknowledged send lost, or stored elsewhere than answered.
        let lost = store(&[(0, 0, "x"), (0, 1, "b"), (0, 2, "c")]);
        assert!(broken(&h, &three(&lost)).contains("acknowledged is stored"));

        // A message nobody sent, and one whose only send failed.
        let invented = store(&[(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (0, 3, "d"), (0, 4, "ghost")]);
        let mut h2 = h.clone();
        h2.deliveries.extend([delivery("d", 3, 1, 12), delivery("ghost", 4, 1, 12)]);
        let found = check(&h2, &three(&invented), &rules());
        assert_eq!(found.iter().filter(|a| a.rule == "nothing invented").count(), 2, "{found:?}");

        // An unknown send stored twice.
        let twice = store(&[(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (0, 3, "b")]);
        assert!(broken(&h, &three(&twice)).contains("at most once"));

        // A stored message never delivered.
        let mut h3 = h.clone();
        h3.deliveries.retain(|d| d.message_id != "b");
        assert_eq!(broken(&h3, &three(&s)), ["consumed"].into());

        // A delivery beyond the maximum attempts.
        let mut h4 = h.clone();
        h4.deliveries.push(delivery("a", 0, 4, 20));
        assert_eq!(broken(&h4, &three(&s)), ["attempts bounded"].into());
    }

    #[test]
    fn fifo_groups_are_stored_in_send_order_and_each_delivered_after_the_one_before_is_acked() {
        let fifo = |id: &str, seq: u64, offset: u64| Send {
            fifo: Some(("g".into(), seq)),
            ..send(id, 0, Outcome::Ok, Some(offset))
        };
        let h = History {
            sends: vec![fifo("f1", 1, 0), fifo("f2", 2, 1), fifo("f3", 3, 2)],
            deliveries: vec![delivery("f1", 0, 1, 10), delivery("f2", 1, 1, 20), delivery("f3", 2, 1, 30)],
            acks: vec![ack("f1", 15), ack("f2", 25), ack("f3", 35)],
        };
        let s = store(&[(0, 0, "f1"), (0, 1, "f2"), (0, 2, "f3")]);
        assert_eq!(check(&h, &three(&s), &rules()), vec![]);

        // f3 handed out before f2 was acknowledged.
        let mut early = h.clone();
        early.deliveries[2].at_ms = 22;
        let found = check(&early, &three(&s), &rules());
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].rule == "FIFO order" && found[0].detail.contains("f3"), "{}", found[0]);

        // f2 stored after f3 although sent before it.
        let swapped_store = store(&[(0, 0, "f1"), (0, 2, "f2"), (0, 1, "f3")]);
        let mut swapped = h.clone();
        swapped.sends[1].offset = Some(2);
        swapped.sends[2].offset = Some(1);
        assert_eq!(broken(&swapped, &three(&swapped_store)), ["FIFO order"].into());
    }

    #[test]
    fn a_delayed_message_delivered_early_is_named() {
        let mut delayed = send("t", 0, Outcome::Ok, Some(0));
        delayed.due_ms = Some(1_000);
        let h =
            History { sends: vec![delayed], deliveries: vec![delivery("t", 0, 1, 999)], acks: vec![ack("t", 1_000)] };
        let s = store(&[(0, 0, "t")]);
        let found = check(&h, &three(&s), &rules());
        assert_eq!(found.iter().map(|a| a.rule).collect::<Vec<_>>(), vec!["timers"]);
        let mut on_time = h.clone();
        on_time.deliveries[0].at_epoch_ms = 1_000;
        assert_eq!(check(&on_time, &three(&s), &rules()), vec![]);
    }
}
