//! Reads the voters' free space every second, so the leader stops filling a disk before it is
//! full (`cluster/disk.rs` has the rule). Often enough that between two readings the log grows
//! by far less than the space between the marks.

use std::time::Duration;

use crate::cluster::Cluster;

const EVERY: Duration = Duration::from_secs(1);

pub async fn watch_disks(cluster: Cluster) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        cluster.check_disks().await;
    }
}
