//! Compiles plugin modules in the background soon after their registration is applied, so no
//! receive or check waits for a compilation (a 1 MiB module takes seconds in a debug build); and
//! quarantines a registered plugin whose calls fail too often here.
//!
//! It polls the plugin table every 500 ms rather than being told by apply: apply is broker code,
//! which knows nothing of the plugin host, and a poll costs one short read of the table (at most
//! 32 modules) under the state's read lock; nothing is compiled under it. A compilation that failed
//! for a reason that may pass is tried again here once its backoff is over.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::broker::Command;
use crate::cluster::Cluster;
use crate::cluster::clock::now_ms;
use crate::plugin::PluginHost;

const POLL: Duration = Duration::from_millis(500);

pub async fn plugin_warmup(cluster: Cluster, broker: Broker, host: Arc<PluginHost>) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (uncompiled, quarantines) = {
            let state = broker.state();
            (host.uncompiled(&state.meta.plugins), host.quarantines(&state.meta.plugins, now_ms()))
        };
        for source in uncompiled {
            let host = Arc::clone(&host);
            let name = source.name.clone();
            // One at a time, on the blocking pool: a compilation keeps a core busy.
            match crate::simulation::blocking(move || host.compiled(&source).map(|_| ())).await {
                Ok(Ok(())) => tracing::debug!(plugin = %name, "plugin compiled"),
                Ok(Err(e)) => tracing::warn!(plugin = %name, error = %e, "plugin does not compile here"),
                Err(e) => tracing::error!(plugin = %name, error = %e, "compiling a plugin panicked"),
            }
        }
        // Plugins run where pops are planned and halves checked: on each data group's leader,
        // which need not lead the metadata group. So whichever node counted the failures
        // proposes; the write reaches the metadata group's leader, and a second proposal of the
        // same quarantine applies as nothing.
        for command in quarantines {
            tracing::warn!(?command, "quarantining a plugin that fails too often");
            if let Err(e) = cluster.write(&Command::Plugin(command)).await {
                tracing::warn!(error = %e, "proposing a plugin's quarantine failed; trying again");
            }
        }
    }
}
