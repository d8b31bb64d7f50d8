//! The leader's upkeep of lite topics: it deletes lite topics nobody wrote to for their parent's
//! TTL (with their records, offsets and subscriptions), and forgets the subscriptions of clients
//! that stopped syncing them (the clients sync their whole set every 30 s).
//!
//! The leader proposes what it saw; apply deletes a lite topic only if it still is the one seen
//! (same id) and still unwritten since the cut-off the entry names, so a write racing the job
//! keeps its lite topic.

use std::time::Duration;

use crate::broker::Broker;
use crate::broker::lite::{LiteActor, LiteCommand};
use crate::broker::{Command, TopicKind};
use crate::cluster::{Cluster, now_ms};
use crate::jobs::failing::Failing;

/// How often the leader looks.
const EVERY: Duration = Duration::from_secs(10);
/// Registry rows read per look at one parent (a parent with more is covered over several looks).
const SCAN: usize = 20_000;
/// Lite topics one expiry entry names.
const PER_ENTRY: usize = 1_000;
/// A client whose subscriptions were not synced for this long is gone.
pub const LITE_CLIENT_TIMEOUT_MS: i64 = 120_000;

pub async fn lite_upkeep(cluster: Cluster, broker: Broker) {
    // Where the next look at each parent starts.
    let mut cursors: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    // The job's own period paces it; this only keeps a broken read out of the log.
    let mut reading = Failing::new("reading lite topics", EVERY);
    loop {
        tokio::time::sleep(EVERY).await;
        let now = now_ms();
        for parent in broker.topics().into_iter().filter(|t| t.kind == TopicKind::Lite) {
            let before_ms = now.saturating_sub(i64::from(parent.lite_ttl_minutes).saturating_mul(60_000));
            let after = cursors.remove(&parent.name).unwrap_or_default();
            let (expired, next) = match broker.expired_lite_topics(&parent.name, &after, before_ms, SCAN) {
                Ok(found) => {
                    reading.worked();
                    found
                }
                Err(e) => {
                    reading.failed(&format!("{}: {e}", parent.name));
                    continue;
                }
            };
            if let Some(next) = next {
                cursors.insert(parent.name.clone(), next);
            }
            for lites in expired.chunks(PER_ENTRY) {
                let command = Command::Lite(LiteCommand::Expire {
                    parent: parent.name.clone(),
                    before_ms,
                    lites: lites.to_vec(),
                });
                match cluster.write(&command).await {
                    Ok(_) => tracing::info!(topic = %parent.name, count = lites.len(), "lite topics expired"),
                    Err(e) => tracing::debug!(error = %e, "expiring lite topics failed; the next look retries"),
                }
            }
        }
        for (group, client) in broker.silent_lite_clients(now.saturating_sub(LITE_CLIENT_TIMEOUT_MS)) {
            // The cluster acts here, not a user: whoever owns them, they go.
            let by = LiteActor::Open;
            let command = Command::Lite(LiteCommand::Unsubscribe { group, client: client.clone(), by });
            match cluster.write(&command).await {
                Ok(_) => tracing::info!(%client, "dropped the lite subscriptions of a client that went away"),
                Err(e) => tracing::debug!(error = %e, "dropping lite subscriptions failed; the next look retries"),
            }
        }
    }
}
