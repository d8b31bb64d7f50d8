//! Makes applied broker state durable in the background, off the apply path.

use crate::broker::Broker;
use crate::jobs::failing::Failing;

/// Checkpoints every `broker.checkpoint_interval()`; a failure is logged and the next tick tries
/// again (until then, applied state is re-derived from the log on restart).
pub async fn checkpoints(broker: Broker) {
    let mut tick = tokio::time::interval(broker.checkpoint_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    // The tick paces it; this only keeps a broken disk out of the log.
    let mut failing = Failing::new("checkpoint", broker.checkpoint_interval());
    loop {
        tick.tick().await;
        // Looked at here first: an idle group's tick costs no hand-off to the blocking pool.
        if !broker.needs_checkpoint() {
            continue;
        }
        let b = broker.clone();
        match crate::simulation::blocking(move || b.checkpoint()).await {
            Ok(Ok(())) => failing.worked(),
            // The tick is the pause: the one `failed` says is not needed.
            Ok(Err(e)) => {
                failing.failed(&e);
            }
            Err(e) => {
                failing.failed(&e);
            }
        }
    }
}
