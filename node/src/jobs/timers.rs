//! The leader fires due timers: it reads the timers due by its clock from the replicated state
//! and proposes them in [`TimerCommand::Fire`] entries, many per entry, several entries in
//! flight, so a burst of timers due in the same second is delivered in a few Raft rounds. Applying
//! a fire removes the timer, so a new leader that proposes the same timers again delivers nothing
//! twice.

use std::time::Duration;

use crate::broker::Broker;
use crate::broker::timer::{MAX_FIRES_PER_ENTRY, TimerCommand, TimerOutcome};
use crate::cluster::{Cluster, now_ms};
use crate::metrics::Meters;

/// How often the leader looks for due timers when none was due: delivery is at most this late
/// (plus one commit) on an idle cluster.
const POLL: Duration = Duration::from_millis(50);
/// Fire entries proposed at once.
const IN_FLIGHT: usize = 4;

pub async fn fire_timers(cluster: Cluster, broker: Broker, meters: Meters) {
    loop {
        let now = now_ms();
        let due = match broker.due_timers(now, MAX_FIRES_PER_ENTRY * IN_FLIGHT) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "reading due timers failed");
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        if due.is_empty() {
            tokio::time::sleep(POLL).await;
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
                Ok(Ok(TimerOutcome::Fired(n))) => meters.timers_fired(n as u64),
                Ok(Ok(_)) => {}
                Ok(Err(refusal)) => tracing::warn!(%refusal, "a timer fire was refused"),
                Err(e) => {
                    tracing::debug!(error = %e, "firing timers failed; retrying");
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }
}
