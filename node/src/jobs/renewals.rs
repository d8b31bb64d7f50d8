//! Renews the deliveries that auto-renewing receives (PushConsumers) still hold; the table of what
//! to renew is the proxy's (`proxy::renew::Renewals`).

use std::sync::Arc;
use std::time::Duration;

use crate::broker::pop::{ConsumeCommand, ConsumeOutcome};
use crate::cluster::{Cluster, now_ms};
use crate::proxy::renew::Renewals;

const TICK: Duration = Duration::from_secs(1);

/// Renewals one entry carries: each is a receipt of under 200 bytes.
pub const MAX_RENEWALS_PER_ENTRY: usize = 1024;

/// Renews what is due, every second: one entry per round (per 1024 deliveries), not per delivery.
pub async fn renewals(cluster: Cluster, renewals: Arc<Renewals>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let due = renewals.due();
        for chunk in due.chunks(MAX_RENEWALS_PER_ENTRY) {
            let command = ConsumeCommand::RenewMany {
                renewals: chunk.iter().map(|(r, invisible)| (r.clone(), invisible.as_millis() as i64)).collect(),
                // The leader stamps its own time when it proposes the renewals.
                now_ms: now_ms(),
            };
            match cluster.request(command).await {
                Ok(Ok(ConsumeOutcome::Each(outcomes))) => {
                    for ((receipt, _), outcome) in chunk.iter().zip(outcomes) {
                        // Settled elsewhere, or redelivered already: nothing left to renew.
                        if !matches!(outcome, ConsumeOutcome::Renewed(_)) {
                            renewals.settled(receipt);
                        }
                    }
                }
                Ok(other) => tracing::warn!(outcome = ?other, "renewals answered as something else"),
                // No leader right now: try again next tick.
                Err(e) => tracing::debug!(error = %e, "renewing deliveries failed"),
            }
        }
    }
}
