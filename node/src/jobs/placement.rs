//! Leader only: finishes metadata changes whose placement in the data partition did not follow
//! (a leader that failed between the two steps), and places what an upgraded state lacks.

use std::time::Duration;

use crate::cluster::Cluster;

/// How often the leader looks; the look is a walk over the topics and groups, done under the
/// state's read lock and released before proposing.
const EVERY: Duration = Duration::from_secs(1);
/// Pause after a failed proposal, doubled up to [`MAX_BACK_OFF`].
const BACK_OFF: Duration = Duration::from_secs(1);
const MAX_BACK_OFF: Duration = Duration::from_secs(30);

pub async fn placement(cluster: Cluster) {
    let mut back_off = BACK_OFF;
    loop {
        match cluster.place().await {
            Ok(()) => {
                back_off = BACK_OFF;
                tokio::time::sleep(EVERY).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "placing metadata in the partition failed; trying again");
                tokio::time::sleep(back_off).await;
                back_off = (back_off * 2).min(MAX_BACK_OFF);
            }
        }
    }
}
