//! Renews the deliveries that auto-renewing receives (PushConsumers) still hold; the table of what
//! to renew is the proxy's (`proxy::renew::Renewals`).

use std::sync::Arc;
use std::time::Duration;

use crate::broker::pop::{ConsumeCommand, ConsumeOutcome};
use crate::broker::{Command, Reply};
use crate::cluster::{Cluster, now_ms};
use crate::proxy::renew::Renewals;

const TICK: Duration = Duration::from_secs(1);

/// Renews what is due, every second.
pub async fn renewals(cluster: Cluster, renewals: Arc<Renewals>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (receipt, invisible) in renewals.due() {
            let command = ConsumeCommand::Renew {
                receipt: receipt.clone(),
                // The leader stamps its own time when it proposes the renewal.
                now_ms: now_ms(),
                invisible_ms: invisible.as_millis() as i64,
            };
            match cluster.write(&Command::Consume(command)).await {
                Ok(Reply::Consume(ConsumeOutcome::Renewed(_))) => {}
                // Settled elsewhere, or redelivered already: nothing left to renew.
                Ok(_) => renewals.settled(&receipt),
                // No leader right now: try again next tick.
                Err(e) => tracing::debug!(error = %e, "renewing a delivery failed"),
            }
        }
    }
}
