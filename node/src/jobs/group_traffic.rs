//! Samples each Raft group's traffic every few seconds for the status page
//! (`metrics::traffic`): what its queues stored, what the consumer groups acked, and their lag,
//! as this node's replica of the group shows it.

use crate::broker::Broker;
use crate::cluster::Groups;
use crate::metrics::Meters;
use crate::metrics::traffic::{EVERY, Sample};

pub async fn group_traffic(groups: Groups, meters: Meters) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for group in groups.all() {
            let broker = group.broker().clone();
            // A walk over the group's queues and progress: off the async workers.
            let Ok(sample) = tokio::task::spawn_blocking(move || sample(&broker)).await else { continue };
            meters.traffic().record(group.group().id().0, sample);
        }
    }
}

fn sample(broker: &Broker) -> Sample {
    let stored: std::collections::BTreeMap<String, u64> = broker
        .topics()
        .into_iter()
        .map(|t| (t.name.clone(), broker.queue_status(&t.name).iter().map(|q| q.next).sum()))
        .collect();
    let (mut consumed, mut lag) = (0, 0);
    for p in broker.group_progress() {
        consumed += stored.get(&p.topic).copied().unwrap_or(0).saturating_sub(p.lag);
        lag += p.lag;
    }
    Sample { at_ms: crate::cluster::now_ms(), stored: stored.values().sum(), consumed, lag }
}
