//! Transactional halves in the partition: adding one, resolving it, counting its checks.

use crate::broker::effects::{Effects, HeldPlace};
use crate::broker::held::HeldMessage;
use crate::broker::partition::Partition;
use crate::broker::split_position;
use crate::broker::transaction::*;
use crate::store::Place;

impl Partition {
    pub(crate) fn add_half(&mut self, position: u64, m: HeldMessage, first_check_ms: i64, fx: &mut Effects) {
        self.hold(split_position(position).0, fx);
        self.count_held(&m.topic, |c| c.open_halves += 1);
        fx.held.push(HeldPlace { message_id: m.message_id.clone(), position, place: Place::Half });
        self.checks.insert((first_check_ms, position), ());
        fx.scheduled = true;
        self.halves
            .insert(position, Half { message: m, next_check_ms: first_check_ms, checks: 0, state: HalfState::Open });
    }

    pub(crate) fn apply_transaction(&mut self, command: TransactionCommand, fx: &mut Effects) -> TransactionOutcome {
        match command {
            TransactionCommand::Resolve { now_ms, topic, position, message_id, commit, by } => {
                let mut half = match self.halves.get(&position) {
                    Ok(Some(h)) if h.message.topic == topic && h.message.message_id == message_id => h,
                    Ok(_) => return TransactionOutcome::Unknown,
                    Err(e) => {
                        fx.fail(e);
                        return TransactionOutcome::Unknown;
                    }
                };
                match half.state {
                    HalfState::Open => {
                        if let Err(e) = self.checks.remove(&(half.next_check_ms, position)) {
                            fx.fail(e);
                        }
                        self.release(split_position(position).0, now_ms, fx);
                        self.count_held(&topic, |c| c.open_halves = c.open_halves.saturating_sub(1));
                    }
                    HalfState::Committed { .. } if commit => return TransactionOutcome::Done,
                    HalfState::RolledBack { .. } if !commit => return TransactionOutcome::Done,
                    // An operator may resume a half the checker gave up on.
                    HalfState::RolledBack { by: Resolver::Checker, .. } if by == Resolver::Operator => {}
                    other => return TransactionOutcome::Conflict(other),
                }
                let resumed = !half.is_open();
                half.state = if commit {
                    if resumed {
                        self.hold_again(split_position(position).0, now_ms, fx);
                    }
                    self.deliver(&half.message, position, fx);
                    HalfState::Committed { by, at_ms: now_ms }
                } else {
                    HalfState::RolledBack { by, at_ms: now_ms }
                };
                self.halves.insert(position, half);
                TransactionOutcome::Done
            }
            TransactionCommand::Checked { now_ms: _, halves, asked } => {
                for (position, checks_seen, next_check_ms) in halves {
                    let mut half = match self.halves.get(&position) {
                        Ok(Some(h)) => h,
                        Ok(None) => continue,
                        Err(e) => return fx.fail_with(e, TransactionOutcome::Done),
                    };
                    // Resolved meanwhile, or already counted by an earlier proposal of this check.
                    if !half.is_open() || half.checks != checks_seen {
                        continue;
                    }
                    if let Err(e) = self.checks.remove(&(half.next_check_ms, position)) {
                        return fx.fail_with(e, TransactionOutcome::Done);
                    }
                    half.next_check_ms = next_check_ms;
                    if asked {
                        half.checks += 1;
                    }
                    self.checks.insert((next_check_ms, position), ());
                    self.halves.insert(position, half);
                }
                TransactionOutcome::Done
            }
        }
    }

    /// When the earliest scheduled check is due, if any (its half may have been resolved since).
    pub(crate) fn first_check_due_ms(&self) -> Result<Option<i64>, sled::Error> {
        Ok(self.checks.range_from(&(i64::MIN, 0), 1)?.first().map(|((due, _), ())| *due))
    }

    /// Up to `limit` open halves due for a check by `now_ms`, earliest first.
    pub(crate) fn due_checks(&self, now_ms: i64, limit: usize) -> Result<Vec<(u64, Half)>, sled::Error> {
        let mut out = Vec::new();
        for ((_, position), ()) in self.checks.range_while(&(i64::MIN, 0), limit, |k| k.0 <= now_ms)? {
            if let Some(h) = self.halves.get(&position)?.filter(Half::is_open) {
                out.push((position, h));
            }
        }
        Ok(out)
    }
}
