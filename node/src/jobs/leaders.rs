//! Follows who leads: every change of leader is logged once, counted, and kept for the status
//! page (`cluster::leadership`).

use openraft::async_runtime::watch::WatchReceiver;

use crate::cluster::{Cluster, now_ms};

pub async fn watch_leaders(cluster: Cluster) {
    let mut metrics = cluster.raft().metrics();
    loop {
        let (leader, term) = {
            let m = metrics.borrow_watched();
            (m.current_leader, m.current_term)
        };
        if let Some(change) = cluster.leader_changes().observe(leader, term, now_ms()) {
            cluster.meters().leader_changed();
            tracing::info!(
                node = cluster.id(),
                term = change.term,
                leader = change.leader,
                previous = ?change.previous,
                without_leader_ms = change.without_leader_ms,
                "leader changed"
            );
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}
