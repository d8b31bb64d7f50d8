//! The consumption engine's delivery step, written once for every kind of channel: a queue of a
//! topic as one consumer group takes it (POP, FIFO message groups included) and a lite topic as
//! one lite group takes it.
//!
//! A channel is a sequence of offsets with a position (offsets below it were taken) and the
//! deliveries in flight. Each step here changes one delivery the way a committed entry says and
//! reads nothing else, so every replica makes the same change. Each step checks the expectation
//! the proposer put in the entry (the generation it saw, the receipt it holds) and does nothing
//! if it no longer holds: planning from a stale or a follower's view is safe.
//!
//! What differs per channel stays with its caller: which new offsets a take may deliver (FIFO
//! message groups and held messages for queues, one batch at a time for lite topics) and where
//! the channel's row lives (in memory, or on disk for lite topics).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Which channel of a (group, topic) a delivery is on: a queue of the topic, or one of its lite
/// topics, by id (a lite topic that expired and is written to again has a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ChannelId {
    Queue(u32),
    Lite(u64),
}

/// One delivery, as a pop made it or a change of invisible time renewed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub channel: ChannelId,
    pub offset: u64,
    pub attempt: u32,
    pub generation: u64,
    pub invisible_until_ms: i64,
}

/// Names one delivery, as a receipt handle does: acks, changes of invisible time, renewals and
/// dead letters name it this way whatever the channel. For a lite topic `topic` is its parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ReceiptForm", into = "ReceiptForm")]
pub struct Receipt {
    pub group: String,
    pub topic: String,
    pub channel: ChannelId,
    pub offset: u64,
    pub generation: u64,
}

/// A receipt's serde form, flat as the entries of earlier releases wrote a queue's (format 1).
#[derive(Serialize, Deserialize)]
struct ReceiptForm {
    group: String,
    topic: String,
    #[serde(default)]
    queue_id: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lite_id: Option<u64>,
    offset: u64,
    generation: u64,
}

impl From<ReceiptForm> for Receipt {
    fn from(r: ReceiptForm) -> Receipt {
        let channel = r.lite_id.map_or(ChannelId::Queue(r.queue_id), ChannelId::Lite);
        Receipt { group: r.group, topic: r.topic, channel, offset: r.offset, generation: r.generation }
    }
}

impl From<Receipt> for ReceiptForm {
    fn from(r: Receipt) -> ReceiptForm {
        let (queue_id, lite_id) = match r.channel {
            ChannelId::Queue(q) => (q, None),
            ChannelId::Lite(id) => (0, Some(id)),
        };
        ReceiptForm { group: r.group, topic: r.topic, queue_id, lite_id, offset: r.offset, generation: r.generation }
    }
}

impl Delivery {
    /// The delivery `f` at `offset` of `channel`.
    pub fn of(channel: ChannelId, offset: u64, f: &Inflight) -> Delivery {
        Delivery {
            channel,
            offset,
            attempt: f.attempt,
            generation: f.generation,
            invisible_until_ms: f.invisible_until_ms,
        }
    }

    /// The receipt naming this delivery of `group` on `topic`.
    pub fn receipt(&self, group: &str, topic: &str) -> Receipt {
        Receipt {
            group: group.to_string(),
            topic: topic.to_string(),
            channel: self.channel,
            offset: self.offset,
            generation: self.generation,
        }
    }
}

/// One delivery in flight. Stored in queue and lite progress rows (sled and snapshots, as JSON):
/// its serde form must not change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inflight {
    /// 1 for the first delivery.
    pub attempt: u32,
    /// The index of the entry that made this delivery (or last changed its invisible time). The
    /// receipt handle carries it, so a handle from an earlier delivery no longer matches.
    pub generation: u64,
    pub invisible_until_ms: i64,
    /// The message group, kept for orderly (FIFO) deliveries only.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message_group: String,
    /// The generation before the last change of invisible time: a client whose answer to that
    /// change was lost still holds its handle, and may retry the change or ack with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewed_from: Option<u64>,
    /// The `attempt_id` of the receive this delivery went to, if it gave one: the receive
    /// retried with that id (its answer was lost) gets the same deliveries back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_attempt: Option<String>,
}

impl Inflight {
    /// Whether a receipt of `generation` names this delivery: the current handle, or the one
    /// the last change of invisible time replaced.
    pub(crate) fn named_by(&self, generation: u64) -> bool {
        self.generation == generation || self.renewed_from == Some(generation)
    }
}

/// One consumable sequence of offsets: a queue of a group, or a lite topic of a group.
pub trait Channel {
    /// Offsets below this were taken: ended, in flight, held, or passed over.
    fn position(&self) -> u64;
    fn inflight(&self) -> &BTreeMap<u64, Inflight>;
    fn inflight_mut(&mut self) -> &mut BTreeMap<u64, Inflight>;
    /// Whether `offset` was taken but held back, not delivered yet (orderly deliveries wait for
    /// their message group). Channels without holding hold nothing.
    fn holds(&self, _offset: u64) -> bool {
        false
    }
}

/// Puts `offset` in flight for the first time, made by the entry at `generation`. The caller
/// decided the take applies.
pub fn deliver<C: Channel>(
    ch: &mut C,
    offset: u64,
    message_group: String,
    generation: u64,
    invisible_until_ms: i64,
) -> &Inflight {
    let f = Inflight {
        attempt: 1,
        generation,
        invisible_until_ms,
        message_group,
        renewed_from: None,
        receive_attempt: None,
    };
    ch.inflight_mut().insert(offset, f);
    &ch.inflight()[&offset]
}

/// Hands the delivery at `offset` out again, as the entry at `generation` (its next attempt,
/// with a new receipt), if it is still the one the proposer saw (`seen`, exactly: a handle a
/// change of invisible time replaced is not what a plan sees) and its invisible time passed by
/// `now_ms`. None if not: acked, redelivered or changed since, or still invisible.
pub fn redeliver<C: Channel>(
    ch: &mut C,
    offset: u64,
    seen: u64,
    generation: u64,
    now_ms: i64,
    invisible_until_ms: i64,
) -> Option<&Inflight> {
    let f = ch.inflight_mut().get_mut(&offset)?;
    if f.generation != seen || f.invisible_until_ms > now_ms {
        return None;
    }
    f.attempt += 1;
    f.generation = generation;
    f.invisible_until_ms = invisible_until_ms;
    // Both old handles stop working, and the new delivery belongs to no earlier receive.
    f.renewed_from = None;
    f.receive_attempt = None;
    Some(f)
}

/// The delivery a receipt of `generation` names at `offset`, if it is still in flight.
pub fn current<C: Channel>(ch: &C, offset: u64, generation: u64) -> Option<&Inflight> {
    ch.inflight().get(&offset).filter(|f| f.named_by(generation))
}

/// What ending a delivery (an ack, or a drop after its last attempt) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The receipt named the current delivery: it is over now.
    Ended,
    /// The message was taken and is neither in flight nor held: its delivery is over already
    /// (acked, its retry's answer lost, or dead-lettered). Nothing changed.
    AlreadyOver,
    /// The receipt names no delivery: a redelivery replaced it, the message was not taken yet,
    /// or it is made up. Nothing changed.
    Stale,
}

/// Ends the delivery a receipt of `generation` names at `offset`, if it is the current one.
pub fn end<C: Channel>(ch: &mut C, offset: u64, generation: u64) -> Ending {
    if current(ch, offset, generation).is_some() {
        ch.inflight_mut().remove(&offset);
        return Ending::Ended;
    }
    let over = offset < ch.position() && !ch.inflight().contains_key(&offset) && !ch.holds(offset);
    if over { Ending::AlreadyOver } else { Ending::Stale }
}

/// Gives the delivery a receipt of `generation` names at `offset` a new invisible time and a
/// new generation (`new_generation`, the entry's index): its handle changes, while the one it
/// replaced still names it. A retry with the handle the last change replaced (the client lost
/// its answer) is the same change: it is answered with the delivery as it stands, applied once.
/// None if the receipt names no current delivery.
pub fn change_invisible<C: Channel>(
    ch: &mut C,
    offset: u64,
    generation: u64,
    new_generation: u64,
    invisible_until_ms: i64,
) -> Option<&Inflight> {
    let f = ch.inflight_mut().get_mut(&offset).filter(|f| f.named_by(generation))?;
    if f.generation != generation {
        return Some(f);
    }
    f.renewed_from = Some(f.generation);
    f.generation = new_generation;
    f.invisible_until_ms = invisible_until_ms;
    Some(f)
}

/// Extends the invisible time of the delivery a receipt of `generation` names at `offset` to at
/// least `invisible_until_ms`, keeping its handle (a renewal never shortens it). None if the
/// receipt names no current delivery.
pub fn renew<C: Channel>(ch: &mut C, offset: u64, generation: u64, invisible_until_ms: i64) -> Option<&Inflight> {
    let f = ch.inflight_mut().get_mut(&offset).filter(|f| f.named_by(generation))?;
    f.invisible_until_ms = f.invisible_until_ms.max(invisible_until_ms);
    Some(f)
}

/// What a receipt asks of the delivery it names, on any channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The consumer is done with it: a delivery that already ended is answered as done.
    Ack,
    /// It goes to the dead-letter topic: only the current delivery ends, so a dead letter
    /// applied again stores no second copy.
    DeadLetter,
    /// A new invisible time and a new handle (of `generation`, the entry's index).
    ChangeInvisible { generation: u64, until_ms: i64 },
    /// A longer invisible time, keeping the handle.
    Renew { until_ms: i64 },
}

/// What settling a delivery answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Done,
    /// The delivery as it stands after a change of invisible time or a renewal.
    Renewed(Delivery),
    /// The receipt named no current delivery: acked already, redelivered since, or made up.
    Stale,
}

/// Takes `step` on the delivery `r` names in `ch` (the channel `r.channel` names). Also whether
/// the channel changed.
pub fn settle<C: Channel>(ch: &mut C, r: &Receipt, step: Settle) -> (Settled, bool) {
    let (offset, generation) = (r.offset, r.generation);
    match step {
        Settle::Ack | Settle::DeadLetter => match (end(ch, offset, generation), step) {
            (Ending::Ended, _) => (Settled::Done, true),
            (Ending::AlreadyOver, Settle::Ack) => (Settled::Done, false),
            _ => (Settled::Stale, false),
        },
        Settle::ChangeInvisible { generation: new, until_ms } => {
            match change_invisible(ch, offset, generation, new, until_ms) {
                Some(f) => (Settled::Renewed(Delivery::of(r.channel, offset, f)), true),
                None => (Settled::Stale, false),
            }
        }
        Settle::Renew { until_ms } => match renew(ch, offset, generation, until_ms) {
            Some(f) => (Settled::Renewed(Delivery::of(r.channel, offset, f)), true),
            None => (Settled::Stale, false),
        },
    }
}

/// What a plan does with a channel's deliveries in flight at some time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Due {
    /// (offset, generation) of deliveries whose invisible time passed, to hand out again.
    pub redeliver: Vec<(u64, u64)>,
    /// (offset, generation) of deliveries whose invisible time passed after their last attempt:
    /// they go to the group's dead-letter topic.
    pub dead: Vec<(u64, u64)>,
}

/// Sorts a channel's deliveries in flight at `now_ms`, in offset order: those still invisible
/// move `next_due_ms` (the earliest time one falls due) earlier if they fall due sooner; those
/// due are dead if they used `max_attempts`, else redelivered while `budget` (the messages the
/// receive may still take) lasts.
pub fn due<C: Channel>(
    ch: &C,
    now_ms: i64,
    max_attempts: u32,
    budget: &mut usize,
    next_due_ms: &mut Option<i64>,
) -> Due {
    let mut out = Due::default();
    for (&offset, f) in ch.inflight() {
        if f.invisible_until_ms > now_ms {
            *next_due_ms = Some(next_due_ms.map_or(f.invisible_until_ms, |d| d.min(f.invisible_until_ms)));
        } else if f.attempt >= max_attempts {
            out.dead.push((offset, f.generation));
        } else if *budget > 0 {
            out.redeliver.push((offset, f.generation));
            *budget -= 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// A channel as a test drives it: offsets below `position` taken, some held back.
    #[derive(Default)]
    struct Lane {
        position: u64,
        inflight: BTreeMap<u64, Inflight>,
        held: BTreeSet<u64>,
    }

    impl Channel for Lane {
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
            self.held.contains(&offset)
        }
    }

    /// Offsets 0 and 1 delivered by the entry at index 2, invisible until 1 000.
    fn two_in_flight() -> Lane {
        let mut lane = Lane { position: 3, held: [2].into(), ..Default::default() };
        deliver(&mut lane, 0, String::new(), 2, 1_000);
        deliver(&mut lane, 1, String::new(), 2, 1_000);
        lane
    }

    fn attempt_and_generation(f: Option<&Inflight>) -> Option<(u32, u64)> {
        f.map(|f| (f.attempt, f.generation))
    }

    #[test]
    fn a_redelivery_planned_from_a_stale_generation_or_before_the_invisible_time_does_nothing() {
        let mut lane = two_in_flight();
        assert_eq!(redeliver(&mut lane, 0, 2, 5, 999, 2_000), None, "still invisible");
        assert_eq!(redeliver(&mut lane, 0, 1, 5, 1_000, 2_000), None, "planned from another delivery");
        assert_eq!(redeliver(&mut lane, 7, 2, 5, 1_000, 2_000), None, "nothing in flight there");
        assert_eq!(lane.inflight[&0].attempt, 1, "nothing changed");
        assert_eq!(attempt_and_generation(redeliver(&mut lane, 0, 2, 5, 1_000, 2_000)), Some((2, 5)));
        // A second proposer that saw the same delivery finds it handed out already.
        assert_eq!(redeliver(&mut lane, 0, 2, 6, 3_000, 4_000), None);
        assert_eq!(end(&mut lane, 0, 2), Ending::Stale, "the first delivery's handle is dead");
    }

    #[test]
    fn an_ended_delivery_acks_as_done_and_a_replaced_or_untaken_one_is_stale() {
        let mut lane = two_in_flight();
        assert_eq!(end(&mut lane, 0, 2), Ending::Ended);
        assert_eq!(end(&mut lane, 0, 2), Ending::AlreadyOver, "the ack retried after its answer was lost");
        assert_eq!(end(&mut lane, 1, 9), Ending::Stale, "another delivery's handle");
        assert!(lane.inflight.contains_key(&1));
        assert_eq!(end(&mut lane, 2, 2), Ending::Stale, "held back, never delivered");
        assert_eq!(end(&mut lane, 3, 2), Ending::Stale, "not taken yet");
        redeliver(&mut lane, 1, 2, 4, 1_000, 2_000);
        assert_eq!(end(&mut lane, 1, 2), Ending::Stale, "a redelivery replaced it");
        assert_eq!(end(&mut lane, 1, 4), Ending::Ended);
    }

    #[test]
    fn after_a_change_of_invisible_time_the_old_handle_still_acks() {
        let mut lane = two_in_flight();
        let changed = change_invisible(&mut lane, 0, 2, 5, 3_000).cloned();
        assert_eq!(changed.map(|f| (f.generation, f.invisible_until_ms, f.renewed_from)), Some((5, 3_000, Some(2))));
        assert_eq!(end(&mut lane, 0, 2), Ending::Ended, "the answer with the new handle was lost");

        // Retried with the old handle: the same change, answered as it stands.
        let mut lane = two_in_flight();
        change_invisible(&mut lane, 0, 2, 5, 3_000);
        let again = change_invisible(&mut lane, 0, 2, 6, 9_000).cloned();
        assert_eq!(again.map(|f| (f.generation, f.invisible_until_ms)), Some((5, 3_000)));
        // A redelivery ends both handles.
        redeliver(&mut lane, 0, 5, 7, 9_000, 10_000);
        assert_eq!(change_invisible(&mut lane, 0, 5, 8, 1), None);
        assert_eq!(end(&mut lane, 0, 2), Ending::Stale);
    }

    #[test]
    fn a_renewal_only_extends_and_keeps_the_handle() {
        let mut lane = two_in_flight();
        assert_eq!(renew(&mut lane, 0, 2, 500).map(|f| (f.generation, f.invisible_until_ms)), Some((2, 1_000)));
        assert_eq!(renew(&mut lane, 0, 2, 1_500).map(|f| (f.generation, f.invisible_until_ms)), Some((2, 1_500)));
        assert_eq!(renew(&mut lane, 0, 3, 9_000), None, "not its handle");
        assert_eq!(end(&mut lane, 0, 2), Ending::Ended);
    }

    #[test]
    fn a_plan_redelivers_what_is_due_within_its_budget_and_dead_letters_the_last_attempts() {
        let mut lane = two_in_flight();
        deliver(&mut lane, 5, String::new(), 3, 4_000);
        redeliver(&mut lane, 1, 2, 4, 1_000, 2_000);
        let (mut budget, mut next_due) = (1, None);
        let due_at = due(&lane, 2_000, 2, &mut budget, &mut next_due);
        assert_eq!(due_at, Due { redeliver: vec![(0, 2)], dead: vec![(1, 4)] });
        assert_eq!((budget, next_due), (0, Some(4_000)));
        let (mut budget, mut next_due) = (0, Some(3_000));
        let due_at = due(&lane, 2_000, 2, &mut budget, &mut next_due);
        assert!(due_at.redeliver.is_empty(), "no budget left");
        assert_eq!((due_at.dead, next_due), (vec![(1, 4)], Some(3_000)));
    }
}
