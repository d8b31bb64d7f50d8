//! Proposal batching on the leader: concurrent sends to one topic share one Raft entry, whichever
//! of its queues they go to.
//!
//! Each topic is a lane. A send joins its lane; while the lane has fewer than
//! [`LANE_DEPTH`] entries proposed and not yet applied, the joined sends are taken as one round
//! and proposed as one `SendBatch`; otherwise they wait for a round in flight to finish and go
//! with the next. A lone send is proposed at once, so an idle queue adds no latency; a busy one
//! pays one log record, one replication, one apply and one reply path per round instead of per
//! request. The round's reply (one outcome per message, in order) is split back per send.
//!
//! One lane per topic rather than per queue: clients spread a topic's sends over its queues, and
//! per-queue entries would be that many times smaller, each paying its own log record,
//! replication, fsync group and apply. A round of several queues names each message's queue
//! (`SendBatch.queue_ids`); a round of one queue keeps the single-queue form.
//!
//! A send is never split over two entries, and a lane's sends are taken in arrival order, so
//! each caller's messages stay contiguous and in order within their queue, and a FIFO producer
//! that waits for each acknowledgement keeps its order.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use prost::encoding::encoded_len_varint;
use rockraft_proto::rockraft::SendBatch;
use tokio::sync::oneshot;

use crate::broker::{MAX_MESSAGES_PER_ENTRY, Reply, SendBatchQueues};
use crate::cluster::ClusterError;

/// Entries a lane may have proposed and not yet applied: one committing while the next fills.
const LANE_DEPTH: usize = 2;

/// Message bytes that may wait in all lanes of one coalescer for a round: past it a send is
/// answered [`ClusterError::Busy`] at once (back-pressure) instead of queueing without end while
/// the log is slow.
pub const MAX_WAITING_BYTES: usize = 256 << 20;

/// Bytes a `SendBatch` spends besides its messages' own (topic, queue, times, field tags, the
/// queue ids' tag and length).
fn batch_overhead(topic: &str) -> usize {
    40 + topic.len()
}

/// Bytes one message adds to an encoded `SendBatch`: its field tag, length and bytes, and its
/// queue id should the round span queues.
fn message_cost(m: &Bytes, queue: u32) -> usize {
    1 + encoded_len_varint(m.len() as u64) + m.len() + encoded_len_varint(u64::from(queue))
}

pub type Answer = Result<Reply, ClusterError>;

struct Waiter {
    messages: usize,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct Lane {
    messages: Vec<Bytes>,
    /// The queue of each waiting message.
    queues: Vec<u32>,
    waiters: Vec<Waiter>,
    in_flight: usize,
}

/// A lane's topic.
type LaneKey = String;

/// The lanes of every topic with sends waiting or in flight, and the bytes waiting in them.
#[derive(Default)]
pub struct Coalescer {
    lanes: Mutex<(HashMap<LaneKey, Lane>, usize)>,
}

/// Sends taken from a lane to be proposed as one entry.
pub struct Round {
    key: LaneKey,
    pub batch: SendBatch,
    waiters: Vec<Waiter>,
}

impl Coalescer {
    /// Adds `batch` to its lane. Returns where its answer arrives and, when the lane has room, a
    /// round to propose now: the caller proposes it, answers it, and asks [`Coalescer::next`].
    pub fn join(&self, batch: SendBatch, max_entry_bytes: usize) -> (oneshot::Receiver<Answer>, Option<Round>) {
        let (tx, rx) = oneshot::channel();
        let queues: Vec<u32> = (0..batch.messages.len()).map(|i| batch.queue_of(i)).collect();
        let key = batch.topic;
        let bytes: usize = batch.messages.iter().map(Bytes::len).sum();
        let mut guard = self.lanes.lock().expect("coalescer lock");
        let (lanes, waiting) = &mut *guard;
        if *waiting + bytes > MAX_WAITING_BYTES {
            let _ = tx.send(Err(ClusterError::Busy { waiting_bytes: *waiting as u64 }));
            return (rx, None);
        }
        *waiting += bytes;
        let lane = lanes.entry(key.clone()).or_default();
        lane.waiters.push(Waiter { messages: batch.messages.len(), answer: tx });
        lane.messages.extend(batch.messages);
        lane.queues.extend(queues);
        let round = (lane.in_flight < LANE_DEPTH).then(|| take(key, lane, max_entry_bytes, waiting));
        (rx, round)
    }

    /// After a round of the lane `key` was answered: the next round to propose, if sends are
    /// waiting; otherwise the lane has one entry fewer in flight.
    pub fn next(&self, done: &Round, max_entry_bytes: usize) -> Option<Round> {
        let mut guard = self.lanes.lock().expect("coalescer lock");
        let (lanes, waiting) = &mut *guard;
        let lane = lanes.get_mut(&done.key)?;
        if lane.waiters.is_empty() {
            lane.in_flight -= 1;
            if lane.in_flight == 0 {
                lanes.remove(&done.key);
            }
            return None;
        }
        // The finished round's place in flight passes to this one.
        lane.in_flight -= 1;
        Some(take(done.key.clone(), lane, max_entry_bytes, waiting))
    }
}

/// Takes the longest prefix of the lane's waiting sends that fits one entry (at least one send:
/// a single send was checked against the entry size before it joined).
fn take(key: LaneKey, lane: &mut Lane, max_entry_bytes: usize, waiting: &mut usize) -> Round {
    let mut bytes = batch_overhead(&key);
    let mut messages = 0;
    let mut waiters = 0;
    for w in &lane.waiters {
        let range = messages..messages + w.messages;
        let cost: usize =
            lane.messages[range.clone()].iter().zip(&lane.queues[range]).map(|(m, &q)| message_cost(m, q)).sum();
        let fits = bytes + cost <= max_entry_bytes && messages + w.messages <= MAX_MESSAGES_PER_ENTRY;
        if waiters > 0 && !fits {
            break;
        }
        bytes += cost;
        messages += w.messages;
        waiters += 1;
    }
    lane.in_flight += 1;
    let taken: Vec<Bytes> = lane.messages.drain(..messages).collect();
    let mut queue_ids: Vec<u32> = lane.queues.drain(..messages).collect();
    *waiting -= taken.iter().map(Bytes::len).sum::<usize>();
    let waiters = lane.waiters.drain(..waiters).collect();
    let queue_id = queue_ids.first().copied().unwrap_or(0);
    if queue_ids.iter().all(|&q| q == queue_id) {
        queue_ids.clear();
    }
    let batch =
        SendBatch { topic: key.clone(), queue_id, store_timestamp_ms: 0, clock_ms: 0, messages: taken, queue_ids };
    Round { key, batch, waiters }
}

impl Round {
    /// Hands each send its part of the round's reply: its own outcomes, in order, or the whole
    /// answer when it is not per message (an error, a missing topic, a rejection).
    pub fn answer(&mut self, answer: Answer) {
        match answer {
            Ok(Reply::Sent(outcomes)) if outcomes.len() == self.batch.messages.len() => {
                let mut outcomes = outcomes.into_iter();
                for w in self.waiters.drain(..) {
                    let own = outcomes.by_ref().take(w.messages).collect();
                    let _ = w.answer.send(Ok(Reply::Sent(own)));
                }
            }
            other => {
                for w in self.waiters.drain(..) {
                    let _ = w.answer.send(other.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::SendOutcome;

    #[test]
    fn sends_past_the_waiting_bound_are_answered_busy_and_room_comes_back() {
        let c = Coalescer::default();
        let big = |topic: &str| SendBatch {
            topic: topic.into(),
            queue_id: 0,
            store_timestamp_ms: 0,
            clock_ms: 0,
            messages: vec![Bytes::from(vec![0u8; MAX_WAITING_BYTES / 2])],
            queue_ids: vec![],
        };
        // Each lane's first send is taken into a round at once; the next two wait.
        let (_, first) = c.join(big("T"), usize::MAX);
        let (_, second) = c.join(big("T"), usize::MAX);
        let (_, third) = c.join(big("T"), usize::MAX);
        assert!(first.is_some() && second.is_some() && third.is_none());
        let (_, fourth) = c.join(big("T"), usize::MAX);
        assert!(fourth.is_none());
        let (mut refused, none) = c.join(big("U"), usize::MAX);
        assert!(none.is_none());
        assert!(matches!(refused.try_recv(), Ok(Err(ClusterError::Busy { .. }))), "over the bound: busy at once");
        // A round finishes: the waiting sends are taken, and there is room again.
        let next = c.next(&first.unwrap(), usize::MAX).expect("the waiting sends go next");
        assert_eq!(next.batch.messages.len(), 2);
        let (_, again) = c.join(big("U"), usize::MAX);
        assert!(again.is_some(), "room came back once the waiting sends were taken");
    }
    use prost::Message as _;

    fn batch(queue: u32, bodies: &[&'static str]) -> SendBatch {
        on("T", queue, bodies)
    }

    fn on(topic: &str, queue: u32, bodies: &[&'static str]) -> SendBatch {
        SendBatch {
            topic: topic.into(),
            queue_id: queue,
            store_timestamp_ms: 0,
            clock_ms: 0,
            messages: bodies.iter().map(|b| Bytes::from_static(b.as_bytes())).collect(),
            queue_ids: vec![],
        }
    }

    fn outcomes(batch: &SendBatch) -> Reply {
        Reply::Sent(
            batch
                .messages
                .iter()
                .enumerate()
                .map(|(i, m)| SendOutcome {
                    message_id: String::from_utf8(m.to_vec()).unwrap(),
                    queue_id: batch.queue_id,
                    offset: i as u64,
                    duplicate: false,
                    held: None,
                })
                .collect(),
        )
    }

    fn ids(reply: Answer) -> Vec<String> {
        match reply {
            Ok(Reply::Sent(o)) => o.into_iter().map(|o| o.message_id).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sends_that_wait_go_together_and_each_gets_its_own_outcomes() {
        let c = Coalescer::default();
        let (a, first) = c.join(batch(0, &["a"]), 1 << 20);
        let (b, second) = c.join(batch(0, &["b1", "b2"]), 1 << 20);
        let mut first = first.expect("an idle lane proposes at once");
        assert!(second.is_some(), "a second round may be in flight while the first commits");
        let (d, none) = c.join(batch(0, &["d"]), 1 << 20);
        let (e, _) = c.join(batch(0, &["e"]), 1 << 20);
        assert!(none.is_none(), "the lane is full: later sends wait");
        let reply = outcomes(&first.batch);
        first.answer(Ok(reply));
        assert_eq!(ids(a.blocking_recv().unwrap()), ["a"]);
        let mut third = c.next(&first, 1 << 20).expect("waiting sends form the next round");
        assert_eq!(third.batch.messages.len(), 2, "both waiting sends share one entry");
        let reply = outcomes(&third.batch);
        third.answer(Ok(reply));
        assert_eq!(ids(d.blocking_recv().unwrap()), ["d"]);
        assert_eq!(ids(e.blocking_recv().unwrap()), ["e"]);
        let mut second = second.unwrap();
        assert!(c.next(&third, 1 << 20).is_none());
        second.answer(Err(ClusterError::NoLeader));
        assert_eq!(b.blocking_recv().unwrap(), Err(ClusterError::NoLeader));
        assert!(c.next(&second, 1 << 20).is_none());
        assert!(c.lanes.lock().unwrap().0.is_empty(), "an idle lane is forgotten");
    }

    #[test]
    fn topics_do_not_wait_for_each_other() {
        let c = Coalescer::default();
        for topic in ["A", "B", "C", "D"] {
            assert!(c.join(on(topic, 0, &["x"]), 1 << 20).1.is_some());
        }
    }

    #[test]
    fn sends_to_several_queues_share_one_entry_and_each_message_keeps_its_queue() {
        let c = Coalescer::default();
        let (_, first) = c.join(batch(0, &["a"]), 1 << 20);
        let (_, second) = c.join(batch(5, &["b"]), 1 << 20);
        let (first, second) = (first.expect("proposed at once"), second.expect("in flight beside it"));
        assert!(first.batch.queue_ids.is_empty() && first.batch.queue_id == 0, "one queue: the single-queue form");
        assert_eq!(second.batch.queue_id, 5);
        let (c1, none) = c.join(batch(1, &["c"]), 1 << 20);
        assert!(none.is_none(), "the topic's lane is full, whatever the queue");
        let (d, _) = c.join(batch(2, &["d1", "d2"]), 1 << 20);
        // A forwarded round that spans queues joins message by message.
        let mut forwarded = batch(0, &["f1", "f2"]);
        forwarded.queue_ids = vec![3, 1];
        let (f, _) = c.join(forwarded, 1 << 20);
        let mut next = c.next(&first, 1 << 20).expect("the waiting sends go next");
        assert_eq!(next.batch.messages, ["c", "d1", "d2", "f1", "f2"].map(|b| Bytes::from_static(b.as_bytes())));
        assert_eq!(next.batch.queue_ids, [1, 2, 2, 3, 1], "each message names its queue, in arrival order");
        let reply = Reply::Sent(
            next.batch
                .messages
                .iter()
                .enumerate()
                .map(|(i, m)| SendOutcome {
                    message_id: String::from_utf8(m.to_vec()).unwrap(),
                    queue_id: next.batch.queue_ids[i],
                    offset: i as u64,
                    duplicate: false,
                    held: None,
                })
                .collect(),
        );
        next.answer(Ok(reply));
        assert_eq!(ids(c1.blocking_recv().unwrap()), ["c"]);
        assert_eq!(ids(d.blocking_recv().unwrap()), ["d1", "d2"]);
        assert_eq!(ids(f.blocking_recv().unwrap()), ["f1", "f2"]);
    }

    #[test]
    fn a_round_stays_within_one_entry() {
        let c = Coalescer::default();
        let busy = (c.join(batch(0, &["x"]), 100).1, c.join(batch(0, &["x"]), 100).1);
        // Over several queues, some of them with long queue ids: the ids count too.
        for i in 0..10 {
            c.join(batch(if i % 2 == 0 { 1 } else { 70_000 }, &["0123456789"]), 100);
        }
        let mut total = 0;
        let mut round = busy.0.unwrap();
        round.answer(Err(ClusterError::NoLeader));
        while let Some(mut next) = c.next(&round, 100) {
            let len = SendBatch {
                store_timestamp_ms: i64::MAX,
                clock_ms: i64::MAX,
                queue_id: u32::MAX,
                ..next.batch.clone()
            }
            .encoded_len();
            assert!(len <= 100, "{len} bytes");
            assert!(!next.batch.messages.is_empty());
            total += next.batch.messages.len();
            next.answer(Err(ClusterError::NoLeader));
            round = next;
        }
        assert_eq!(total, 10);
    }
}
