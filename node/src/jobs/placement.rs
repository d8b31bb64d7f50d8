//! Leader only: finishes metadata changes whose placement in the data partition did not follow
//! (a leader that failed between the two steps), and places what an upgraded state lacks.

use std::time::Duration;

use crate::cluster::Cluster;

/// How often the leader looks when no metadata change wakes it; the look is a walk over the
/// topics and groups, done under the state's read lock and released before proposing.
const EVERY: Duration = Duration::from_secs(1);
/// Pause after a failed proposal, doubled up to [`MAX_BACK_OFF`].
const BACK_OFF: Duration = Duration::from_secs(1);
const MAX_BACK_OFF: Duration = Duration::from_secs(30);

/// `metadata`: this node's replica of the metadata (the group's own where it holds the metadata).
/// A data group's leader places each metadata change as soon as this node's replica of the
/// metadata applies it, so a topic's queues in that group take sends within moments of its
/// creation.
pub async fn placement(cluster: Cluster, metadata: crate::broker::Broker) {
    let mut back_off = BACK_OFF;
    let mut changes = metadata.watch_metadata();
    loop {
        changes.borrow_and_update();
        match cluster.place_from(&metadata).await {
            Ok(()) => {
                back_off = BACK_OFF;
                let _ = tokio::time::timeout(EVERY, changes.changed()).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "placing metadata in the partition failed; trying again");
                tokio::time::sleep(back_off).await;
                back_off = (back_off * 2).min(MAX_BACK_OFF);
            }
        }
    }
}
