//! Makes applied broker state durable in the background, off the apply path.

use crate::broker::Broker;

/// Checkpoints every `broker.checkpoint_interval()`; a failure is logged and the next tick tries
/// again (until then, applied state is re-derived from the log on restart).
pub async fn checkpoints(broker: Broker) {
    let mut tick = tokio::time::interval(broker.checkpoint_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        // Looked at here first: an idle group's tick costs no hand-off to the blocking pool.
        if !broker.needs_checkpoint() {
            continue;
        }
        let b = broker.clone();
        match tokio::task::spawn_blocking(move || b.checkpoint()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "checkpoint failed; trying again next tick"),
            Err(e) => tracing::error!(error = %e, "checkpoint task failed; trying again next tick"),
        }
    }
}
