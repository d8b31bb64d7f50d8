//! Reads the members' clocks every few seconds, so a node whose clock is off stops leading, in
//! every group it runs (`cluster/skew.rs` has the rule).

use std::time::Duration;

use crate::cluster::Groups;

const EVERY: Duration = Duration::from_secs(2);

pub async fn watch_clocks(groups: Groups, max_skew: Duration) {
    let max_skew_ms = i64::try_from(max_skew.as_millis()).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let metadata = groups.metadata();
        let clock = metadata.check_clock(max_skew_ms).await;
        metadata.follow_clock(&clock).await;
        for group in groups.all().iter().filter(|g| g.group().id() != metadata.group().id()) {
            group.follow_clock(&clock).await;
        }
    }
}
