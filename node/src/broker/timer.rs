//! Delayed messages: a send to a DELAY topic whose delivery time is still ahead is held
//! ([`HeldMessage`]) under a timer keyed by (due second, position), kept in a timing wheel of
//! files (`timer_wheel.rs`): 16 bytes of memory per pending timer. The leader proposes a
//! [`TimerCommand::Fire`] entry for timers that are due, many per entry; applying it delivers
//! each. A timer is removed by the entry that fires or recalls it, so it fires exactly once
//! whichever leader proposes, and however often.

use serde::{Deserialize, Serialize};

use crate::broker::apply::{Effects, HeldPlace};
use crate::broker::held::HeldMessage;
use crate::broker::partition::Partition;
use crate::store::Place;

/// A timer: (due second, position of the message in the log).
pub type TimerKey = (i64, u64);

/// A pending delayed message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timer {
    pub due_ms: i64,
    pub message: HeldMessage,
}

/// The key of the timer of the message at `position`, due at `due_ms`.
pub fn timer_key(due_ms: i64, position: u64) -> TimerKey {
    (due_ms.div_euclid(1000), position)
}

/// Most timers one fire entry delivers.
pub const MAX_FIRES_PER_ENTRY: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TimerCommand {
    /// Delivers these timers; each must be due by `now_ms` (the proposing leader's clock).
    Fire { now_ms: i64, timers: Vec<TimerKey> },
    /// Cancels a timer of `topic` that is not due yet (RecallMessage).
    Recall { now_ms: i64, topic: String, timer: TimerKey },
}

impl TimerCommand {
    pub(crate) fn set_time(&mut self, now: i64) {
        match self {
            TimerCommand::Fire { now_ms, .. } | TimerCommand::Recall { now_ms, .. } => *now_ms = now,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimerOutcome {
    /// How many of the listed timers were delivered (the others had fired or been recalled).
    Fired(u32),
    Recalled {
        message_id: String,
    },
    /// No such timer: it fired, was recalled, or never existed.
    NotFound,
    /// Its time has come: it is being delivered and can no longer be recalled.
    AlreadyDue,
}

impl Partition {
    pub(crate) fn add_timer(&mut self, due_ms: i64, position: u64, message: HeldMessage, fx: &mut Effects) {
        self.hold(crate::broker::split_position(position).0, fx);
        self.count_held(&message.topic, |c| c.timers += 1);
        fx.held.push(HeldPlace { message_id: message.message_id.clone(), position, place: Place::Timer { due_ms } });
        self.timers.insert(timer_key(due_ms, position), Timer { due_ms, message });
    }

    /// Removes the timer if it is due by `now_ms`.
    fn take_due_timer(&mut self, key: &TimerKey, now_ms: i64, fx: &mut Effects) -> Option<HeldMessage> {
        if self.timers.due_ms(key)? > now_ms {
            return None;
        }
        let timer = match self.timers.get(key) {
            Ok(t) => t?,
            Err(e) => return fx.fail_with(e, None),
        };
        self.timers.remove(key);
        self.release(crate::broker::split_position(key.1).0, now_ms, fx);
        self.count_held(&timer.message.topic, |c| c.timers = c.timers.saturating_sub(1));
        Some(timer.message)
    }

    pub(crate) fn apply_timer(&mut self, command: TimerCommand, fx: &mut Effects) -> TimerOutcome {
        match command {
            TimerCommand::Fire { now_ms, timers } => {
                let mut fired = 0;
                // Never early, whatever the proposer's view was.
                for key in timers.iter().take(MAX_FIRES_PER_ENTRY) {
                    if let Some(m) = self.take_due_timer(key, now_ms, fx) {
                        // A topic deleted meanwhile takes its timers with it.
                        if self.deliver(&m, key.1, fx).is_some() {
                            fired += 1;
                        }
                    }
                }
                TimerOutcome::Fired(fired)
            }
            TimerCommand::Recall { now_ms, topic, timer } => match self.timers.get(&timer) {
                Ok(Some(t)) if t.message.topic == topic => {
                    if t.due_ms <= now_ms {
                        return TimerOutcome::AlreadyDue;
                    }
                    self.timers.remove(&timer);
                    self.release(crate::broker::split_position(timer.1).0, now_ms, fx);
                    self.count_held(&topic, |c| c.timers = c.timers.saturating_sub(1));
                    TimerOutcome::Recalled { message_id: t.message.message_id }
                }
                Ok(_) => TimerOutcome::NotFound,
                Err(e) => {
                    fx.fail(e);
                    TimerOutcome::NotFound
                }
            },
        }
    }

    /// Up to `limit` timers due by `now_ms`, by due second.
    pub(crate) fn due_timers(&self, now_ms: i64, limit: usize) -> Vec<TimerKey> {
        self.timers.due_keys(now_ms, limit)
    }
}

/// The recall handle a delayed send returns: the timer's key, opaque to clients.
pub fn recall_handle(due_ms: i64, position: u64) -> String {
    let key = timer_key(due_ms, position);
    format!("R{:x}.{:x}", key.0, key.1)
}

/// The timer a recall handle names; `None` if it is not one this broker made.
pub fn parse_recall_handle(handle: &str) -> Option<TimerKey> {
    let (due, position) = handle.strip_prefix('R')?.split_once('.')?;
    Some((i64::from_str_radix(due, 16).ok()?, u64::from_str_radix(position, 16).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_handles_round_trip_and_garbage_is_refused() {
        let position = crate::broker::queue_position(42, 3);
        assert_eq!(parse_recall_handle(&recall_handle(1_764_000_000_123, position)), Some((1_764_000_000, position)));
        for bad in ["", "R", "R1", "Rzz.1", "X1.2", "R1.2.3", "R-1.2x"] {
            assert_eq!(parse_recall_handle(bad), None, "{bad:?}");
        }
    }
}
