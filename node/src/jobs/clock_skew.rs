//! Reads the members' clocks every few seconds, so a node whose clock is off stops leading
//! (`cluster/skew.rs` has the rule).

use std::time::Duration;

use crate::cluster::Cluster;

const EVERY: Duration = Duration::from_secs(2);

pub async fn watch_clocks(cluster: Cluster, max_skew: Duration) {
    let max_skew_ms = i64::try_from(max_skew.as_millis()).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        cluster.check_clock(max_skew_ms).await;
    }
}
