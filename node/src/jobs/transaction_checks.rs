//! The leader checks unresolved transactional halves when their check time comes: the
//! [`TransactionChecker`] decides per half; commits and rollbacks are proposed as resolutions,
//! the others are rescheduled in one entry (a producer being asked counts as a check) before a
//! live producer of the topic is asked on its Telemetry stream, wherever that stream is held.
//! Everything the schedule needs is replicated, so a new leader carries on where the old one
//! stopped: no half is checked early, twice for one check, or after it was resolved.
//!
//! Two rules hold whatever the checker answers, so a checker that never decides (a user plugin
//! that always waits, one that traps, a producer that never knows) costs a bounded number of
//! checks: the host rolls a half back once it reaches the maximum age, without asking the
//! checker; and the time between checks grows with the half's age (half its age, from one
//! interval up to [`MAX_BACKOFF_INTERVALS`] intervals), never past the maximum age.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::transaction::{Decision, Half, HalfView, Resolver, TransactionChecker, TransactionCommand};
use rockraft_proto::rockraft::StoredMessage;

use crate::broker::Broker;
use crate::broker::{Command, split_position};
use crate::cluster::{Cluster, now_ms};
use crate::jobs::failing::Failing;
use crate::metrics::Meters;

/// The pause after a failed round, and the shortest sleep between two looks.
const POLL: Duration = Duration::from_millis(200);
/// The longest sleep with nothing due: checks are found by reading the replicated schedule, and
/// a half stored meanwhile wakes the job (`Broker::watch_schedule`).
const IDLE_SLEEP: Duration = Duration::from_secs(1);
/// Halves looked at per round.
const BATCH: usize = 256;
/// The longest gap between two checks of one half, in check intervals.
const MAX_BACKOFF_INTERVALS: i64 = 8;

#[derive(Clone)]
pub struct CheckOptions {
    pub interval: Duration,
    /// A half is never left unresolved longer than this: the host rolls it back at this age,
    /// whatever its checker answers.
    pub max_age: Duration,
}

pub async fn check_transactions(
    cluster: Cluster,
    broker: Broker,
    meters: Meters,
    checker: Arc<dyn TransactionChecker>,
    options: CheckOptions,
) {
    let mut scheduled = broker.watch_schedule();
    let mut reading = Failing::new("reading due transaction checks", POLL);
    loop {
        // Marked seen before reading: a half stored after this read wakes the sleep below.
        scheduled.borrow_and_update();
        let now = now_ms();
        let due = match broker.due_checks(now, BATCH) {
            Ok(d) => {
                reading.worked();
                d
            }
            Err(e) => {
                reading.pause_after(&e).await;
                continue;
            }
        };
        if due.is_empty() {
            let first = broker.first_check_due_ms().ok().flatten();
            let sleep = until_due(first, now_ms());
            let _ = tokio::time::timeout(sleep, scheduled.changed()).await;
            continue;
        }
        if let Err(e) = check(&cluster, &broker, &meters, checker.as_ref(), &options, now, due).await {
            tracing::debug!(error = %e, "transaction check round failed; retrying");
            tokio::time::sleep(POLL).await;
        }
    }
}

/// How long to sleep with no check due at `now_ms`: until the earliest is due (`first_due_ms`),
/// at least [`POLL`] (an earlier one belongs to a half resolved since) and at most
/// [`IDLE_SLEEP`].
fn until_due(first_due_ms: Option<i64>, now_ms: i64) -> Duration {
    match first_due_ms {
        Some(due) => Duration::from_millis(u64::try_from(due - now_ms).unwrap_or(0)).clamp(POLL, IDLE_SLEEP),
        None => IDLE_SLEEP,
    }
}

fn view(broker: &Broker, position: u64, half: &Half) -> HalfView {
    let stored = broker.message_at(position).ok().flatten();
    let message = stored
        .map(|(m, _)| m)
        .unwrap_or_else(|| StoredMessage { message_id: half.message.message_id.clone(), ..Default::default() });
    HalfView { topic: half.message.topic.clone(), store_ms: half.message.stored_ms, message }
}

async fn check(
    cluster: &Cluster,
    broker: &Broker,
    meters: &Meters,
    checker: &dyn TransactionChecker,
    options: &CheckOptions,
    now: i64,
    due: Vec<(u64, Half)>,
) -> Result<(), crate::cluster::ClusterError> {
    let interval = options.interval.as_millis() as i64;
    let max_age = options.max_age.as_millis() as i64;
    let (mut asked, mut waiting) = (Vec::new(), Vec::new());
    for (position, half) in due {
        let age_ms = now.saturating_sub(half.message.stored_ms).max(0);
        let decision = if age_ms >= max_age {
            tracing::info!(topic = %half.message.topic, message_id = %half.message.message_id, age_ms, "rolling back a half at its maximum age");
            Decision::Rollback
        } else {
            checker.decide(&view(broker, position, &half), Duration::from_millis(age_ms as u64), half.checks)
        };
        let decided = match decision {
            Decision::Commit => "commit",
            Decision::Rollback => "rollback",
            Decision::AskProducer => "ask_producer",
            Decision::Wait => "wait",
        };
        meters.transaction_checked(&half.message.topic, decided);
        let next = next_check(now, half.message.stored_ms, interval, max_age);
        match decision {
            Decision::Commit | Decision::Rollback => {
                let command = TransactionCommand::Resolve {
                    now_ms: now,
                    topic: half.message.topic.clone(),
                    position,
                    message_id: half.message.message_id.clone(),
                    commit: decision == Decision::Commit,
                    by: Resolver::Checker,
                };
                tracing::info!(topic = %half.message.topic, message_id = %half.message.message_id, ?decision, checks = half.checks, "transaction checker resolved a half");
                cluster.write(&Command::Transaction(command)).await?;
            }
            Decision::AskProducer => asked.push((position, half, next)),
            Decision::Wait => waiting.push((position, half.checks, next)),
        }
    }
    if !waiting.is_empty() {
        let command = TransactionCommand::Checked { now_ms: now, halves: waiting, asked: false };
        cluster.write(&Command::Transaction(command)).await?;
    }
    if asked.is_empty() {
        return Ok(());
    }
    let halves = asked.iter().map(|(p, h, next)| (*p, h.checks, *next)).collect();
    cluster.write(&Command::Transaction(TransactionCommand::Checked { now_ms: now, halves, asked: true })).await?;
    for (position, half, _) in asked {
        let topic = &half.message.topic;
        if !cluster.ask_producer(topic, position).await {
            tracing::info!(topic = %topic, index = split_position(position).0, "no live producer of the topic to ask about a transaction");
        }
    }
    Ok(())
}

/// When a half stored at `stored_ms` and looked at `now` is looked at next: after half its age,
/// at least one interval and at most [`MAX_BACKOFF_INTERVALS`], and never past its maximum age
/// (when the host rolls it back). Always after `now`.
fn next_check(now: i64, stored_ms: i64, interval: i64, max_age: i64) -> i64 {
    let age = now.saturating_sub(stored_ms).max(0);
    let gap = (age / 2).clamp(interval.max(1), interval.max(1).saturating_mul(MAX_BACKOFF_INTERVALS));
    now.saturating_add(gap).min(stored_ms.saturating_add(max_age)).max(now.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_back_off_with_age_and_stop_at_the_maximum_age() {
        let (interval, max_age) = (60_000, 4 * 3_600_000);
        let mut now = 6_000;
        let mut checks = 0;
        while now < max_age {
            now = next_check(now, 0, interval, max_age);
            checks += 1;
        }
        assert_eq!(now, max_age, "the last check falls on the maximum age");
        // Every 60 s for four hours would be 240 checks.
        assert!(checks <= 40, "{checks} checks in four hours");
        assert_eq!(next_check(1_000, 0, 60_000, 120_000), 61_000, "a young half waits one interval");
        assert_eq!(next_check(119_999, 0, 60_000, 120_000), 120_000, "never past the maximum age");
    }

    #[test]
    fn the_job_sleeps_until_the_earliest_check_within_its_bounds() {
        assert_eq!(until_due(Some(10_500), 10_000), Duration::from_millis(500));
        assert_eq!(until_due(Some(9_000), 10_000), POLL, "a stale entry in the past: no busy loop");
        assert_eq!(until_due(Some(70_000), 10_000), IDLE_SLEEP);
        assert_eq!(until_due(None, 10_000), IDLE_SLEEP);
    }
}
