//! Delayed messages in the partition: adding a timer, firing due ones, recalling one.

use crate::broker::effects::{Effects, HeldPlace};
use crate::broker::held::HeldMessage;
use crate::broker::partition::Partition;
use crate::broker::timer::*;
use crate::store::Place;

impl Partition {
    pub(crate) fn add_timer(&mut self, due_ms: i64, position: u64, message: HeldMessage, fx: &mut Effects) {
        self.hold(crate::broker::split_position(position).0, fx);
        self.count_held(&message.topic, |c| c.timers += 1);
        fx.held.push(HeldPlace { message_id: message.message_id.clone(), position, place: Place::Timer { due_ms } });
        fx.scheduled = true;
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

    /// When the earliest pending timer falls due, if any.
    pub(crate) fn first_timer_due_ms(&self) -> Option<i64> {
        self.timers.first_due_ms()
    }

    /// Up to `limit` timers due by `now_ms`, by due second.
    pub(crate) fn due_timers(&self, now_ms: i64, limit: usize) -> Vec<TimerKey> {
        self.timers.due_keys(now_ms, limit)
    }
}
