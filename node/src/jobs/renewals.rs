//! Renews the deliveries that auto-renewing receives (PushConsumers) still hold; the table of what
//! to renew is the proxy's (`proxy::renew::Renewals`).

use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use crate::broker::pop::{ConsumeCommand, ConsumeOutcome, Receipt};
use crate::broker::position::PartitionId;
use crate::cluster::{Cluster, Groups, now_ms};
use crate::proxy::renew::Renewals;

const TICK: Duration = Duration::from_secs(1);

/// Renewals one entry carries: each is a receipt of under 200 bytes.
pub const MAX_RENEWALS_PER_ENTRY: usize = 1024;

/// Renews what is due, every second: one entry per group per round (per 1024 deliveries), not
/// per delivery.
pub async fn renewals(groups: Groups, renewals: Arc<Renewals>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut by_partition: BTreeMap<PartitionId, Vec<(Receipt, Duration)>> = BTreeMap::new();
        for (partition, receipt, invisible) in renewals.due() {
            by_partition.entry(partition).or_default().push((receipt, invisible));
        }
        for (partition, due) in by_partition {
            let cluster = match groups.partition(partition) {
                Ok(cluster) => cluster,
                Err(e) => {
                    tracing::debug!(error = %e, "renewing deliveries failed");
                    continue;
                }
            };
            renew(&cluster, partition, &renewals, &due).await;
        }
    }
}

async fn renew(cluster: &Cluster, partition: PartitionId, renewals: &Renewals, due: &[(Receipt, Duration)]) {
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
                        renewals.settled(partition, receipt);
                    }
                }
            }
            Ok(other) => tracing::warn!(outcome = ?other, "renewals answered as something else"),
            // No leader right now: try again next tick.
            Err(e) => tracing::debug!(error = %e, "renewing deliveries failed"),
        }
    }
}
