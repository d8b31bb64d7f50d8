//! POP consumption state: for each (group, topic, queue), how far the group has taken messages
//! and which of them are in flight, plus the consumer groups themselves.
//!
//! Every change comes from a [`ConsumeCommand`] in a committed entry, and applying one reads
//! nothing but the command, the entry's index and this state. The live state machine and the
//! snapshot builder (which replays commands onto an older snapshot) therefore agree exactly.
//!
//! Commands are optimistic: the proposer read the state it plans from (maybe on a follower, maybe
//! stale) and the command names what it expects — the queue position it continues from, the
//! generation of the delivery it acks. Apply refuses any part whose expectation no longer holds,
//! so two proposers never hand out one message twice and a stale receipt handle never acks a
//! newer delivery.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::broker::delivery::{self, Channel, Settle, Settled};
pub use crate::broker::delivery::{ChannelId, Delivery, Inflight, Receipt};
use crate::broker::group::{GroupConfig, dead_letter_topic};
use crate::broker::table::Table;

/// (group, topic, queue id).
pub type PopKey = (String, String, u32);

/// The queue a receipt names, if it names one (not a lite topic).
pub fn queue_key(r: &Receipt) -> Option<PopKey> {
    match r.channel {
        ChannelId::Queue(queue_id) => Some((r.group.clone(), r.topic.clone(), queue_id)),
        ChannelId::Lite(_) => None,
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PopQueue {
    /// Offsets below this were taken: acked, in flight, held, or filtered out for this group.
    pub position: u64,
    pub inflight: BTreeMap<u64, Inflight>,
    /// Orderly deliveries: messages passed over while an earlier message of their message group
    /// was in flight, with that group. They go out, in offset order, once the group is free.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub held: BTreeMap<u64, String>,
}

impl Channel for PopQueue {
    fn position(&self) -> u64 {
        self.position
    }
    fn inflight(&self) -> &BTreeMap<u64, Inflight> {
        &self.inflight
    }
    fn inflight_mut(&mut self) -> &mut BTreeMap<u64, Inflight> {
        &mut self.inflight
    }
    fn holds(&self, offset: u64) -> bool {
        self.held.contains_key(&offset)
    }
}

impl PopQueue {
    /// Message groups that may not get another delivery now.
    pub fn busy_groups(&self) -> BTreeSet<&str> {
        self.inflight.values().map(|f| f.message_group.as_str()).filter(|g| !g.is_empty()).collect()
    }
}

/// New messages taken from one queue: the proposer looked at `from..to`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueTake {
    pub queue_id: u32,
    /// The queue position the proposer saw; the take applies only if it is still the position.
    pub from: u64,
    pub to: u64,
    /// Offsets to deliver with their message group ("" outside orderly deliveries). An offset
    /// below `from` is a held message being released.
    pub deliver: Vec<(u64, String)>,
    /// Offsets in `from..to` to hold back (orderly deliveries), with their message group.
    pub hold: Vec<(u64, String)>,
}

/// An expired delivery to hand out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redelivery {
    pub queue_id: u32,
    pub offset: u64,
    /// The generation the proposer saw; stale if the message was acked or redelivered since.
    pub generation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pop {
    pub group: String,
    pub topic: String,
    /// The topic's [`Consumption::topics`] entry the proposer saw: a pop planned before the topic
    /// was deleted (and maybe created again) must not apply to it.
    pub topic_epoch: u64,
    /// The leader's clock when it proposed this.
    pub now_ms: i64,
    pub invisible_ms: i64,
    pub takes: Vec<QueueTake>,
    pub redeliveries: Vec<Redelivery>,
    /// The receives this pop serves, in order: each takes the next `count` of its deliveries
    /// (as the leader hands them out), and those that gave an `attempt_id` have it recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receives: Vec<(Option<String>, u32)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ConsumeCommand {
    Pop(Pop),
    Ack(Receipt),
    /// The receipts of one `AckMessage`: one entry for all of them, answered one by one. (A
    /// struct variant: the internally tagged encoding cannot hold a bare list.)
    Acks {
        receipts: Vec<Receipt>,
    },
    ChangeInvisible {
        receipt: Receipt,
        now_ms: i64,
        invisible_ms: i64,
    },
    /// Extends a delivery's invisible time without replacing its receipt (the client still holds
    /// the old one): the server renews deliveries of receives that asked for `auto_renew`.
    Renew {
        receipt: Receipt,
        now_ms: i64,
        invisible_ms: i64,
    },
    /// One round of renewals, as one entry: each receipt's invisible time extended, answered
    /// one by one.
    RenewMany {
        renewals: Vec<(Receipt, i64)>,
        now_ms: i64,
    },
    /// Moves every queue of the group on the topic to the given positions; nothing stays in flight.
    ResetOffset {
        group: String,
        topic: String,
        topic_epoch: u64,
        positions: Vec<(u32, u64)>,
    },
    /// A pull consumer's commit (the Remoting clients' model): one queue of the group moves to
    /// `offset`; like a reset, nothing of that queue stays in flight. Unlike a reset, members
    /// forward it: any client of the group may commit.
    CommitOffset {
        group: String,
        topic: String,
        topic_epoch: u64,
        queue_id: u32,
        offset: u64,
    },
}

impl ConsumeCommand {
    /// Commands that act on the leader's clock carry it; the leader sets it when it proposes.
    pub fn set_time(&mut self, now: i64) {
        match self {
            ConsumeCommand::Pop(p) => p.now_ms = now,
            ConsumeCommand::ChangeInvisible { now_ms, .. }
            | ConsumeCommand::Renew { now_ms, .. }
            | ConsumeCommand::RenewMany { now_ms, .. } => *now_ms = now,
            _ => {}
        }
    }

    /// Settles each delivery this command names by receipt (queues' and lite topics' alike)
    /// with `settle`, applied at `index`, and answers as the command does: one outcome, or one
    /// per receipt ([`ConsumeOutcome::Each`]). `None` for a command that names no receipt;
    /// `Some(None)` if `settle` gave up (a disk fault), leaving the rest unsettled.
    pub fn settle_each(
        &self,
        index: u64,
        mut settle: impl FnMut(&Receipt, Settle) -> Option<Settled>,
    ) -> Option<Option<ConsumeOutcome>> {
        let (steps, each) = self.settlements(index)?;
        let mut outcomes = Vec::with_capacity(steps.len());
        for (r, step) in steps {
            match settle(r, step) {
                Some(settled) => outcomes.push(settled.into()),
                None => return Some(None),
            }
        }
        Some(Some(match (each, outcomes.len()) {
            (false, 1) => outcomes.pop().unwrap_or(ConsumeOutcome::StaleReceipt),
            _ => ConsumeOutcome::Each(outcomes),
        }))
    }

    /// The deliveries this command settles by receipt, each with its step, and whether it is
    /// answered one outcome per receipt.
    fn settlements(&self, index: u64) -> Option<(Vec<(&Receipt, Settle)>, bool)> {
        let change = |now_ms: i64, invisible_ms: i64| Settle::ChangeInvisible {
            generation: index,
            until_ms: now_ms.saturating_add(invisible_ms),
        };
        let renew = |now_ms: i64, invisible_ms: i64| Settle::Renew { until_ms: now_ms.saturating_add(invisible_ms) };
        Some(match self {
            ConsumeCommand::Ack(r) => (vec![(r, Settle::Ack)], false),
            ConsumeCommand::Acks { receipts } => (receipts.iter().map(|r| (r, Settle::Ack)).collect(), true),
            ConsumeCommand::ChangeInvisible { receipt, now_ms, invisible_ms } => {
                (vec![(receipt, change(*now_ms, *invisible_ms))], false)
            }
            ConsumeCommand::Renew { receipt, now_ms, invisible_ms } => {
                (vec![(receipt, renew(*now_ms, *invisible_ms))], false)
            }
            ConsumeCommand::RenewMany { renewals, now_ms } => {
                (renewals.iter().map(|(r, invisible_ms)| (r, renew(*now_ms, *invisible_ms))).collect(), true)
            }
            ConsumeCommand::Pop(_) | ConsumeCommand::ResetOffset { .. } | ConsumeCommand::CommitOffset { .. } => {
                return None;
            }
        })
    }

    /// The topic whose waiting receivers may find something deliverable once this applies to
    /// `before`: a freed message group, a due time moved, a new position. Pops, renewals and
    /// unordered acks free nothing, and waking every receiver for them would be wasted work.
    pub fn wakes<'a>(&'a self, before: &Consumption) -> Option<&'a str> {
        match self {
            ConsumeCommand::Ack(r) => before.frees_message_group(r).then_some(r.topic.as_str()),
            ConsumeCommand::Acks { receipts: rs } => {
                rs.iter().find(|r| before.frees_message_group(r)).map(|r| r.topic.as_str())
            }
            ConsumeCommand::ChangeInvisible { receipt: r, .. } => queue_key(r).is_some().then_some(r.topic.as_str()),
            ConsumeCommand::ResetOffset { topic, .. } => Some(topic),
            // Every pull consumer commits every queue every 5 s: waking every receiver of the
            // topic for each would be a storm, and a commit delivers nothing by itself.
            ConsumeCommand::CommitOffset { .. } => None,
            ConsumeCommand::Pop(_) | ConsumeCommand::Renew { .. } | ConsumeCommand::RenewMany { .. } => None,
        }
    }
}

/// What applying a [`ConsumeCommand`] answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsumeOutcome {
    Done,
    TopicNotFound(String),
    GroupNotFound(String),
    /// The deliveries of a pop that still held; possibly none.
    Delivered(Vec<Delivery>),
    /// The receipt named no current delivery: acked already, redelivered since, or made up.
    StaleReceipt,
    Renewed(Delivery),
    /// One outcome per receipt of [`ConsumeCommand::Acks`], in order.
    Each(Vec<ConsumeOutcome>),
}

impl From<Settled> for ConsumeOutcome {
    fn from(s: Settled) -> ConsumeOutcome {
        match s {
            Settled::Done => ConsumeOutcome::Done,
            Settled::Renewed(d) => ConsumeOutcome::Renewed(d),
            Settled::Stale => ConsumeOutcome::StaleReceipt,
        }
    }
}

/// Consumer groups and their POP state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Consumption {
    pub groups: Table<String, GroupConfig>,
    pub queues: Table<PopKey, PopQueue>,
    /// Every existing topic, with the index of the entry that created it: pops and resets name
    /// the one they were planned for.
    pub topics: Table<String, u64>,
    /// Each group's epoch (the index of the metadata entry that created it), as placed.
    #[serde(default)]
    pub group_epochs: Table<String, u64>,
}

impl Consumption {
    /// Takes `step` on the queue delivery `r` names (a lite topic's receipt names none here).
    /// An ack of a delivery that already ended (acked, its retry answered lost, or
    /// dead-lettered) is answered as done: the message will not come again either way. A handle
    /// a redelivery replaced is stale.
    pub fn settle(&mut self, r: &Receipt, step: Settle) -> Settled {
        let Some(q) = queue_key(r).and_then(|key| self.queues.get_mut(&key)) else { return Settled::Stale };
        delivery::settle(q, r, step).0
    }

    /// Applies `command`, committed at `index`.
    pub fn apply(&mut self, index: u64, command: &ConsumeCommand) -> ConsumeOutcome {
        match command {
            ConsumeCommand::Pop(pop) => {
                if !self.groups.contains_key(&pop.group) {
                    return ConsumeOutcome::GroupNotFound(pop.group.clone());
                }
                if self.topics.get(&pop.topic) != Some(&pop.topic_epoch) {
                    return ConsumeOutcome::TopicNotFound(pop.topic.clone());
                }
                ConsumeOutcome::Delivered(self.pop(index, pop))
            }
            ConsumeCommand::Ack(_)
            | ConsumeCommand::Acks { .. }
            | ConsumeCommand::ChangeInvisible { .. }
            | ConsumeCommand::Renew { .. }
            | ConsumeCommand::RenewMany { .. } => {
                // A queue's deliveries only: `Partition::apply` settles lite topics' too.
                let settled = command.settle_each(index, |r, step| Some(self.settle(r, step)));
                settled.flatten().unwrap_or(ConsumeOutcome::StaleReceipt)
            }
            ConsumeCommand::ResetOffset { group, topic, topic_epoch, positions } => {
                if !self.groups.contains_key(group) {
                    return ConsumeOutcome::GroupNotFound(group.clone());
                }
                if self.topics.get(topic) != Some(topic_epoch) {
                    return ConsumeOutcome::TopicNotFound(topic.clone());
                }
                for (queue_id, position) in positions {
                    let key = (group.clone(), topic.clone(), *queue_id);
                    self.queues.insert(key.clone(), PopQueue { position: *position, ..Default::default() });
                }
                ConsumeOutcome::Done
            }
            ConsumeCommand::CommitOffset { group, topic, topic_epoch, queue_id, offset } => {
                if !self.groups.contains_key(group) {
                    return ConsumeOutcome::GroupNotFound(group.clone());
                }
                if self.topics.get(topic) != Some(topic_epoch) {
                    return ConsumeOutcome::TopicNotFound(topic.clone());
                }
                let key = (group.clone(), topic.clone(), *queue_id);
                self.queues.insert(key, PopQueue { position: *offset, ..Default::default() });
                ConsumeOutcome::Done
            }
        }
    }

    /// Ends the delivery `receipt` names, if it is current: the message goes to the group's
    /// dead-letter topic (created if `with_copy` and it is missing). False if the receipt is stale.
    pub fn dead_letter(&mut self, index: u64, receipt: &Receipt, with_copy: bool) -> bool {
        // Only the current delivery: one already over has had its dead letter, or its ack.
        if self.settle(receipt, Settle::DeadLetter) != Settled::Done {
            return false;
        }
        if with_copy {
            self.topic_created(&dead_letter_topic(&receipt.group), index);
        }
        true
    }

    /// Whether ending the delivery `r` names lets its message group's next message go out.
    pub fn frees_message_group(&self, r: &Receipt) -> bool {
        let q = queue_key(r).and_then(|key| self.queues.get(&key));
        q.and_then(|q| delivery::current(q, r.offset, r.generation)).is_some_and(|f| !f.message_group.is_empty())
    }

    /// Records a topic created at `index`, unless it exists.
    pub fn topic_created(&mut self, topic: &str, index: u64) {
        if !self.topics.contains_key(topic) {
            self.topics.insert(topic.to_string(), index);
        }
    }

    /// Forgets a deleted topic and every group's POP state on it.
    pub fn topic_deleted(&mut self, topic: &str) {
        self.topics.remove(topic);
        self.queues.remove_where(|(_, t, _)| t == topic);
    }

    fn pop(&mut self, index: u64, pop: &Pop) -> Vec<Delivery> {
        let invisible_until_ms = pop.now_ms.saturating_add(pop.invisible_ms);
        let mut out = Vec::new();
        for r in &pop.redeliveries {
            let key = (pop.group.clone(), pop.topic.clone(), r.queue_id);
            let Some(q) = self.queues.get_mut(&key) else { continue };
            let again = delivery::redeliver(q, r.offset, r.generation, index, pop.now_ms, invisible_until_ms);
            let Some(f) = again else { continue };
            out.push(Delivery::of(ChannelId::Queue(r.queue_id), r.offset, f));
        }
        for take in &pop.takes {
            let key = (pop.group.clone(), pop.topic.clone(), take.queue_id);
            // A queue the group never took from starts wherever the proposer saw it start.
            let fresh = || PopQueue { position: take.from, ..Default::default() };
            let fits = match self.queues.get(&key) {
                Some(q) => take_applies(q, take),
                None => take_applies(&fresh(), take),
            };
            if !fits {
                continue;
            }
            let q = self.queues.get_or_insert_with(key.clone(), fresh);
            for (offset, group) in &take.deliver {
                q.held.remove(offset);
                let f = delivery::deliver(q, *offset, group.clone(), index, invisible_until_ms);
                out.push(Delivery::of(ChannelId::Queue(take.queue_id), *offset, f));
            }
            for (offset, group) in &take.hold {
                q.held.insert(*offset, group.clone());
            }
            q.position = take.to;
        }
        self.record_receive_attempts(pop, &out);
        out
    }

    /// Marks each delivery of `pop` with the `attempt_id` of the receive it goes to.
    fn record_receive_attempts(&mut self, pop: &Pop, out: &[Delivery]) {
        let mut deliveries = out.iter();
        for (attempt_id, count) in &pop.receives {
            for d in deliveries.by_ref().take(*count as usize) {
                let (Some(attempt_id), ChannelId::Queue(queue_id)) = (attempt_id, d.channel) else { continue };
                let key = (pop.group.clone(), pop.topic.clone(), queue_id);
                if let Some(f) = self.queues.get_mut(&key).and_then(|q| q.inflight.get_mut(&d.offset)) {
                    f.receive_attempt = Some(attempt_id.clone());
                }
            }
        }
    }

    /// The deliveries still in flight, invisible at `now_ms`, that went to the receive of
    /// `group` on `topic` with `attempt_id`, as they stand (same handles).
    pub fn deliveries_of_attempt(&self, group: &str, topic: &str, attempt_id: &str, now_ms: i64) -> Vec<Delivery> {
        let from = (group.to_string(), topic.to_string(), 0);
        self.queues
            .range(from..)
            .take_while(|((g, t, _), _)| g == group && t == topic)
            .flat_map(|((_, _, queue_id), q)| {
                q.inflight
                    .iter()
                    .filter(move |(_, f)| {
                        f.receive_attempt.as_deref() == Some(attempt_id) && f.invisible_until_ms > now_ms
                    })
                    .map(move |(&offset, f)| Delivery::of(ChannelId::Queue(*queue_id), offset, f))
            })
            .collect()
    }
}

/// Whether a take still fits the queue: it continues from the current position, stays inside what
/// it looked at, releases only held messages, and never puts a second message of a message group
/// in flight.
fn take_applies(q: &PopQueue, take: &QueueTake) -> bool {
    if q.position != take.from || take.to < take.from {
        return false;
    }
    let fresh = |o: &u64| (take.from..take.to).contains(o);
    let mut busy: BTreeSet<&str> = q.busy_groups();
    for (offset, group) in &take.deliver {
        let known = fresh(offset) || q.held.get(offset) == Some(group);
        if !known || (!group.is_empty() && !busy.insert(group)) {
            return false;
        }
    }
    take.hold.iter().all(|(o, _)| fresh(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Group `g` and topic `t` (created at index 1).
    fn consumption() -> Consumption {
        let mut c = Consumption::default();
        let g = GroupConfig { name: "g".into(), fifo: true, max_attempts: 3, priority_factor: 100, lite: None };
        c.groups.insert(g.name.clone(), g);
        c.topic_created("t", 1);
        c
    }

    fn pop(now_ms: i64, takes: Vec<QueueTake>, redeliveries: Vec<Redelivery>) -> ConsumeCommand {
        ConsumeCommand::Pop(Pop {
            group: "g".into(),
            topic: "t".into(),
            topic_epoch: 1,
            now_ms,
            invisible_ms: 1000,
            takes,
            redeliveries,
            receives: Vec::new(),
        })
    }

    fn take(from: u64, to: u64, deliver: &[(u64, &str)], hold: &[(u64, &str)]) -> QueueTake {
        QueueTake {
            queue_id: 0,
            from,
            to,
            deliver: deliver.iter().map(|(o, g)| (*o, g.to_string())).collect(),
            hold: hold.iter().map(|(o, g)| (*o, g.to_string())).collect(),
        }
    }

    fn delivered(outcome: ConsumeOutcome) -> Vec<(u64, u32, u64)> {
        match outcome {
            ConsumeOutcome::Delivered(d) => d.iter().map(|d| (d.offset, d.attempt, d.generation)).collect(),
            other => panic!("not a delivery: {other:?}"),
        }
    }

    fn receipt(offset: u64, generation: u64) -> Receipt {
        Receipt { group: "g".into(), topic: "t".into(), channel: ChannelId::Queue(0), offset, generation }
    }

    #[test]
    fn two_proposers_from_one_position_never_deliver_a_message_twice() {
        let mut c = consumption();
        assert_eq!(delivered(c.apply(2, &pop(0, vec![take(0, 2, &[(0, ""), (1, "")], &[])], vec![]))).len(), 2);
        // A second proposer planned from the same, now stale, position.
        assert!(delivered(c.apply(3, &pop(0, vec![take(0, 1, &[(0, "")], &[])], vec![]))).is_empty());
        assert_eq!(c.queues.get(&("g".into(), "t".into(), 0)).unwrap().position, 2);
    }

    #[test]
    fn an_ack_needs_the_current_generation_and_works_once() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 1, &[(0, "")], &[])], vec![]));
        assert_eq!(c.apply(3, &ConsumeCommand::Ack(receipt(0, 99))), ConsumeOutcome::StaleReceipt);
        assert_eq!(c.apply(4, &ConsumeCommand::Ack(receipt(0, 2))), ConsumeOutcome::Done);
        // The same ack again (its answer was lost): done already, and nothing changes.
        let before = c.clone();
        assert_eq!(c.apply(5, &ConsumeCommand::Ack(receipt(0, 2))), ConsumeOutcome::Done);
        assert_eq!(c, before);
        // A message not taken yet is no delivery to end.
        assert_eq!(c.apply(6, &ConsumeCommand::Ack(receipt(7, 2))), ConsumeOutcome::StaleReceipt);
    }

    #[test]
    fn a_handle_a_redelivery_replaced_is_stale_but_one_a_change_replaced_still_names_the_delivery() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 1, &[(0, "")], &[])], vec![]));
        let change = |generation, now_ms| ConsumeCommand::ChangeInvisible {
            receipt: receipt(0, generation),
            now_ms,
            invisible_ms: 1_000,
        };
        let renewed = match c.apply(3, &change(2, 5)) {
            ConsumeOutcome::Renewed(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!((renewed.generation, renewed.invisible_until_ms), (3, 1_005));
        // The change retried with the old handle (its answer was lost): the same delivery back.
        assert_eq!(c.apply(4, &change(2, 9)), ConsumeOutcome::Renewed(renewed));
        // The old handle acks it too.
        let mut acked = c.clone();
        assert_eq!(acked.apply(5, &ConsumeCommand::Ack(receipt(0, 2))), ConsumeOutcome::Done);
        assert!(acked.queues.get(&("g".into(), "t".into(), 0)).unwrap().inflight.is_empty());
        // Once the invisible time lapses and the message goes out again, both handles are stale.
        let again = Redelivery { queue_id: 0, offset: 0, generation: 3 };
        assert_eq!(delivered(c.apply(6, &pop(2_000, vec![], vec![again]))), vec![(0, 2, 6)]);
        for generation in [2, 3] {
            assert_eq!(c.apply(7, &ConsumeCommand::Ack(receipt(0, generation))), ConsumeOutcome::StaleReceipt);
        }
        assert_eq!(c.apply(8, &ConsumeCommand::Ack(receipt(0, 6))), ConsumeOutcome::Done);
    }

    #[test]
    fn a_receive_attempt_finds_its_own_deliveries_while_they_are_in_flight() {
        let mut c = consumption();
        let two = take(0, 3, &[(0, ""), (1, ""), (2, "")], &[]);
        let mut command = pop(0, vec![two], vec![]);
        if let ConsumeCommand::Pop(p) = &mut command {
            p.receives = vec![(Some("a".into()), 2), (None, 1)];
        }
        assert_eq!(delivered(c.apply(2, &command)), vec![(0, 1, 2), (1, 1, 2), (2, 1, 2)]);
        let of = |c: &Consumption, attempt: &str, now_ms: i64| -> Vec<u64> {
            c.deliveries_of_attempt("g", "t", attempt, now_ms).iter().map(|d| d.offset).collect()
        };
        assert_eq!(of(&c, "a", 10), vec![0, 1], "the first receive's two, not the third");
        assert!(of(&c, "b", 10).is_empty());
        c.apply(3, &ConsumeCommand::Ack(receipt(0, 2)));
        assert_eq!(of(&c, "a", 10), vec![1], "an acked delivery is over");
        assert!(of(&c, "a", 1_000).is_empty(), "nor one whose invisible time has lapsed");
        let again = Redelivery { queue_id: 0, offset: 1, generation: 2 };
        assert_eq!(delivered(c.apply(4, &pop(1_000, vec![], vec![again]))), vec![(1, 2, 4)]);
        assert!(of(&c, "a", 1_001).is_empty(), "a redelivery goes to another receive");
    }

    #[test]
    fn acks_in_one_entry_are_answered_one_by_one_like_separate_acks() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 2, &[(0, ""), (1, "")], &[])], vec![]));
        let acks = ConsumeCommand::Acks { receipts: vec![receipt(0, 2), receipt(1, 99), receipt(1, 2), receipt(0, 2)] };
        use ConsumeOutcome::{Done, StaleReceipt};
        // The repeated receipt finds its delivery over already: done, like a retried ack.
        assert_eq!(c.apply(3, &acks), ConsumeOutcome::Each(vec![Done, StaleReceipt, Done, Done]));
        assert!(c.queues.get(&("g".into(), "t".into(), 0)).unwrap().inflight.is_empty());
    }

    #[test]
    fn a_new_invisible_time_comes_with_a_new_receipt() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 1, &[(0, "")], &[])], vec![]));
        let change = ConsumeCommand::ChangeInvisible { receipt: receipt(0, 2), now_ms: 500, invisible_ms: 100 };
        let ConsumeOutcome::Renewed(d) = c.apply(3, &change) else { panic!("renewed") };
        assert_eq!((d.generation, d.invisible_until_ms, d.attempt), (3, 600, 1));
        assert_eq!(c.apply(4, &ConsumeCommand::Ack(receipt(0, 3))), ConsumeOutcome::Done);
    }

    #[test]
    fn a_renewal_extends_the_invisible_time_and_keeps_the_receipt() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 1, &[(0, "")], &[])], vec![]));
        let renew = ConsumeCommand::Renew { receipt: receipt(0, 2), now_ms: 900, invisible_ms: 1000 };
        let ConsumeOutcome::Renewed(d) = c.apply(3, &renew) else { panic!("renewed") };
        assert_eq!((d.generation, d.invisible_until_ms), (2, 1900));
        let again = Redelivery { queue_id: 0, offset: 0, generation: 2 };
        assert!(delivered(c.apply(4, &pop(1500, vec![], vec![again]))).is_empty(), "still invisible");
        assert_eq!(c.apply(5, &ConsumeCommand::Ack(receipt(0, 2))), ConsumeOutcome::Done);
    }

    #[test]
    fn one_round_of_renewals_is_one_entry_answered_per_receipt() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 1, &[(0, "")], &[])], vec![]));
        let round =
            ConsumeCommand::RenewMany { renewals: vec![(receipt(0, 2), 1000), (receipt(1, 2), 1000)], now_ms: 900 };
        let ConsumeOutcome::Each(outcomes) = c.apply(3, &round) else { panic!("one outcome each") };
        assert!(matches!(outcomes[0], ConsumeOutcome::Renewed(d) if d.invisible_until_ms == 1900 && d.generation == 2));
        assert_eq!(outcomes[1], ConsumeOutcome::StaleReceipt, "nothing in flight at offset 1");
        assert_eq!(c.apply(4, &ConsumeCommand::Ack(receipt(0, 2))), ConsumeOutcome::Done, "the receipt is kept");
    }

    #[test]
    fn redelivery_waits_for_the_invisible_time_and_counts_attempts() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 1, &[(0, "")], &[])], vec![]));
        let again = Redelivery { queue_id: 0, offset: 0, generation: 2 };
        assert!(delivered(c.apply(3, &pop(999, vec![], vec![again]))).is_empty(), "still invisible");
        assert_eq!(delivered(c.apply(4, &pop(1000, vec![], vec![again]))), vec![(0, 2, 4)]);
        // The first delivery's receipt is dead now.
        assert_eq!(c.apply(5, &ConsumeCommand::Ack(receipt(0, 2))), ConsumeOutcome::StaleReceipt);
    }

    #[test]
    fn one_message_group_never_has_two_messages_in_flight() {
        let mut c = consumption();
        // Offsets 0 and 1 are group A, 2 is group B: 1 is held, B flows.
        let first = take(0, 3, &[(0, "A"), (2, "B")], &[(1, "A")]);
        assert_eq!(delivered(c.apply(2, &pop(0, vec![first], vec![]))).len(), 2);
        // Releasing 1 while 0 is in flight is refused.
        assert!(delivered(c.apply(3, &pop(0, vec![take(3, 3, &[(1, "A")], &[])], vec![]))).is_empty());
        // A take may not put two messages of one group in flight at once either.
        let mut fresh = consumption();
        assert!(delivered(fresh.apply(2, &pop(0, vec![take(0, 2, &[(0, "A"), (1, "A")], &[])], vec![]))).is_empty());
        c.apply(4, &ConsumeCommand::Ack(receipt(0, 2)));
        assert_eq!(delivered(c.apply(5, &pop(0, vec![take(3, 3, &[(1, "A")], &[])], vec![]))), vec![(1, 1, 5)]);
        assert!(c.queues.get(&("g".into(), "t".into(), 0)).unwrap().held.is_empty());
    }

    #[test]
    fn reset_moves_the_position_and_drops_what_was_in_flight() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 5, &[(4, "")], &[])], vec![]));
        let reset = ConsumeCommand::ResetOffset {
            group: "g".into(),
            topic: "t".into(),
            topic_epoch: 1,
            positions: vec![(0, 1)],
        };
        assert_eq!(c.apply(3, &reset), ConsumeOutcome::Done);
        let q = &c.queues.get(&("g".into(), "t".into(), 0)).unwrap();
        assert_eq!((q.position, q.inflight.len()), (1, 0));
        assert_eq!(c.apply(4, &ConsumeCommand::Ack(receipt(4, 2))), ConsumeOutcome::StaleReceipt);
    }

    #[test]
    fn a_pull_consumers_commit_moves_one_queue_and_only_for_a_group_and_topic_that_exist() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 5, &[(4, "")], &[])], vec![]));
        let commit = |group: &str, epoch: u64, queue_id: u32, offset: u64| ConsumeCommand::CommitOffset {
            group: group.into(),
            topic: "t".into(),
            topic_epoch: epoch,
            queue_id,
            offset,
        };
        assert_eq!(c.apply(3, &commit("g", 1, 1, 7)), ConsumeOutcome::Done);
        assert_eq!(c.queues.get(&("g".into(), "t".into(), 1)).map(|q| q.position), Some(7));
        let q0 = c.queues.get(&("g".into(), "t".into(), 0)).unwrap();
        assert_eq!(q0.inflight.len(), 1, "another queue's deliveries stay");
        assert_eq!(c.apply(4, &commit("g", 1, 0, 2)), ConsumeOutcome::Done);
        let q0 = c.queues.get(&("g".into(), "t".into(), 0)).unwrap();
        assert_eq!((q0.position, q0.inflight.len()), (2, 0), "its own queue's are forgotten");
        let before = c.clone();
        assert_eq!(c.apply(5, &commit("nobody", 1, 0, 9)), ConsumeOutcome::GroupNotFound("nobody".into()));
        assert_eq!(c.apply(6, &commit("g", 99, 0, 9)), ConsumeOutcome::TopicNotFound("t".into()));
        assert_eq!(c, before, "a refused commit changes nothing");
    }

    #[test]
    fn a_pop_planned_before_its_topic_was_deleted_or_recreated_changes_nothing() {
        let mut c = consumption();
        c.apply(2, &pop(0, vec![take(0, 3, &[(2, "")], &[])], vec![]));
        c.topic_deleted("t");
        assert!(c.queues.is_empty());
        let late = pop(0, vec![take(3, 5, &[(4, "")], &[])], vec![]);
        assert_eq!(c.apply(4, &late), ConsumeOutcome::TopicNotFound("t".into()));
        c.topic_created("t", 5);
        assert_eq!(c.apply(6, &late), ConsumeOutcome::TopicNotFound("t".into()), "planned for the old topic");
        assert!(c.queues.is_empty(), "the new topic starts with no POP state");
    }

    #[test]
    fn a_refused_take_leaves_no_trace() {
        let mut c = consumption();
        // A take whose hold lies outside what it looked at.
        let bad = QueueTake { queue_id: 7, from: 0, to: 1, deliver: vec![], hold: vec![(5, "A".into())] };
        assert!(delivered(c.apply(2, &pop(0, vec![bad], vec![]))).is_empty());
        assert!(c.queues.is_empty());
    }

    #[test]
    fn pops_for_an_unknown_group_change_nothing() {
        let mut c = Consumption::default();
        let outcome = c.apply(2, &pop(0, vec![take(0, 1, &[(0, "")], &[])], vec![]));
        assert_eq!(outcome, ConsumeOutcome::GroupNotFound("g".into()));
        assert!(c.queues.is_empty());
    }
}
