//! Samples each Raft group's traffic every few seconds for the status page
//! (`metrics::traffic`): what its queues stored, what the consumer groups acked, and their lag,
//! as this node's replica of the group shows it, or its leader's where this node holds none
//! (from five nodes, two of every five groups): every node's page charts every group.

use crate::broker::GroupFigures;
use crate::cluster::Groups;
use crate::metrics::Meters;
use crate::metrics::traffic::{EVERY, Sample};

pub async fn group_traffic(groups: Groups, meters: Meters) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for group in groups.all() {
            // A group that cannot say now (no leader to ask) is sampled at the next tick.
            let Ok(figures) = group.figures().await else { continue };
            meters.traffic().record(group.group().id().0, sample(&figures));
        }
    }
}

fn sample(figures: &GroupFigures) -> Sample {
    let mut stored: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for q in &figures.queues {
        *stored.entry(q.topic.as_str()).or_default() += q.next;
    }
    let (mut consumed, mut lag) = (0, 0);
    for p in &figures.progress {
        consumed += stored.get(p.topic.as_str()).copied().unwrap_or(0).saturating_sub(p.lag);
        lag += p.lag;
    }
    Sample { at_ms: crate::cluster::now_ms(), stored: stored.values().sum(), consumed, lag }
}
