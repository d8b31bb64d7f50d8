//! Follows who leads: every change of leader is logged once, counted, and kept for the status
//! page (`cluster::leadership`); on the node that wins, the failover is measured
//! (`cluster::failover`) and its record proposed, so it becomes replicated history.

use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;

use crate::broker::{AdminCommand, Command, Reply};
use crate::cluster::failover::{FailoverWatch, Observed};
use crate::cluster::{Cluster, now_ms};

/// How often a failover being measured is looked at when the metrics do not change.
const MEASURE_TICK: Duration = Duration::from_millis(100);

pub async fn watch_leaders(cluster: Cluster) {
    let mut metrics = cluster.raft().metrics();
    let mut failover = FailoverWatch::default();
    loop {
        let now = now_ms();
        let observed = {
            let m = metrics.borrow_watched();
            Observed {
                now_ms: now,
                id: m.id,
                term: m.current_term,
                leader: m.current_leader,
                candidate: m.state == openraft::ServerState::Candidate,
                committed_term: m.local_committed.as_ref().map(|c| c.leader_id.term),
                // Only a leader's failover is measured; a follower skips this on every change.
                matched: match m.current_leader == Some(m.id) {
                    true => m
                        .replication
                        .as_ref()
                        .map(|r| {
                            r.iter().map(|(id, matched)| (*id, matched.as_ref().map(|l| l.leader_id.term))).collect()
                        })
                        .unwrap_or_default(),
                    false => Vec::new(),
                },
                last_heard_ms: cluster.leader_contact().silence().map(|s| now - s.as_millis() as i64),
            }
        };
        if let Some(change) = cluster.leader_changes().observe(observed.leader, observed.term, now) {
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
        if let Some(record) = failover.observe(&observed) {
            tokio::spawn(record_failover(cluster.clone(), record));
        }
        let changed = if failover.measuring() {
            match tokio::time::timeout(MEASURE_TICK, metrics.changed()).await {
                Ok(changed) => changed,
                Err(_) => Ok(()),
            }
        } else {
            metrics.changed().await
        };
        if changed.is_err() {
            return;
        }
    }
}

async fn record_failover(cluster: Cluster, record: crate::broker::failover::Failover) {
    let phases = record.phases();
    tracing::info!(
        node = cluster.id(),
        term = record.term,
        previous = ?record.previous,
        detection_ms = ?phases.detection_ms,
        election_ms = phases.election_ms,
        first_commit_ms = phases.first_commit_ms,
        routes_ms = phases.routes_ms,
        unavailable_ms = phases.unavailable_ms,
        not_following = ?record.not_following,
        "failover measured"
    );
    let term = record.term;
    match cluster.write(&Command::Admin(AdminCommand::RecordFailover(record))).await {
        Ok(Reply::Applied) => {}
        // Lost the leadership meanwhile: the record of a term only its leader can write is
        // refused, and the next leader records its own failover.
        Ok(other) => tracing::debug!(term, reply = ?other, "failover record not kept"),
        Err(e) => tracing::debug!(term, error = %e, "failover record not written"),
    }
}
