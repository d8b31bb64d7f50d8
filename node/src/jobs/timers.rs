//! The leader fires due timers: it reads the timers due by its clock from the replicated state
//! and proposes them in [`TimerCommand::Fire`] entries, many per entry, several entries in
//! flight, so a burst of timers due in the same second is delivered in a few Raft rounds. Applying
//! a fire removes the timer, so a new leader that proposes the same timers again delivers nothing
//! twice.
//!
//! Between bursts the job sleeps until the earliest pending timer is due, or until a timer is
//! added (which may be earlier): an idle group wakes it once in a while, not every few
//! milliseconds.

use std::time::Duration;

use crate::broker::Broker;
use crate::broker::timer::{MAX_FIRES_PER_ENTRY, TimerCommand, TimerOutcome};
use crate::cluster::{Cluster, now_ms};
use crate::jobs::failing::Failing;
use crate::metrics::Meters;

/// How long the job sleeps at most with nothing due: a wall clock set forward is noticed within
/// this (sleeps run on the monotonic clock).
const IDLE_SLEEP: Duration = Duration::from_secs(1);
/// The pause after a failed round before the next try.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Fire entries proposed at once.
const IN_FLIGHT: usize = 4;

pub async fn fire_timers(cluster: Cluster, broker: Broker, meters: Meters) {
    let mut added = broker.watch_schedule();
    let mut reading = Failing::new("reading due timers", RETRY_PAUSE);
    let mut refused = Failing::new("firing timers (refused)", RETRY_PAUSE);
    loop {
        // Marked seen before reading: a timer added after this read wakes the sleep below.
        added.borrow_and_update();
        let now = now_ms();
        let due = match broker.due_timers(now, MAX_FIRES_PER_ENTRY * IN_FLIGHT) {
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
            let sleep = until_due(broker.first_timer_due_ms(), now_ms());
            // A closed channel (the broker is gone) ends in the sleep: the job is being stopped.
            let _ = tokio::time::timeout(sleep, added.changed()).await;
            continue;
        }
        let fires = due.chunks(MAX_FIRES_PER_ENTRY).map(|keys| {
            // The leader stamps its own (never earlier) time when it proposes.
            let command = TimerCommand::Fire { now_ms: now, timers: keys.to_vec() };
            let cluster = cluster.clone();
            async move { cluster.request(command).await }
        });
        for result in futures_util::future::join_all(fires).await {
            match result {
                Ok(Ok(TimerOutcome::Fired(n))) => {
                    refused.worked();
                    meters.timers_fired(n as u64)
                }
                Ok(Ok(_)) => refused.worked(),
                Ok(Err(refusal)) => refused.pause_after(&refusal).await,
                Err(e) => {
                    tracing::debug!(error = %e, "firing timers failed; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }
}

/// How long to sleep with nothing due at `now_ms`: until the earliest timer (`first_due_ms`) is
/// due, at most [`IDLE_SLEEP`].
fn until_due(first_due_ms: Option<i64>, now_ms: i64) -> Duration {
    match first_due_ms {
        Some(due) => Duration::from_millis(u64::try_from(due - now_ms).unwrap_or(0)).min(IDLE_SLEEP),
        None => IDLE_SLEEP,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_sleeps_until_the_earliest_timer_and_never_past_a_second() {
        assert_eq!(until_due(Some(10_250), 10_000), Duration::from_millis(250));
        assert_eq!(until_due(Some(9_000), 10_000), Duration::ZERO, "overdue: no sleep");
        assert_eq!(until_due(Some(60_000), 10_000), IDLE_SLEEP);
        assert_eq!(until_due(None, 10_000), IDLE_SLEEP);
    }
}
