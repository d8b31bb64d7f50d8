//! Follows who leads: every change of leader is logged once, counted, and kept for the status
//! page (`cluster::leadership`); on the node that wins, the failover is measured
//! (`cluster::failover`) and its record proposed, so it becomes replicated history.

use std::time::Duration;

use crate::broker::{AdminCommand, Command, Reply};
use crate::cluster::failover::{FailoverWatch, Observed};
use crate::cluster::{Cluster, now_ms};
use crate::metrics::Meters;
use crate::raft::Role;

/// How often a failover being measured is looked at when the metrics do not change.
const MEASURE_TICK: Duration = Duration::from_millis(100);

pub async fn watch_leaders(cluster: Cluster, meters: Meters) {
    let mut watch = cluster.group().watch();
    let mut failover = FailoverWatch::default();
    loop {
        let now = now_ms();
        let observed = {
            let m = watch.status();
            Observed {
                now_ms: now,
                id: m.id,
                term: m.term,
                leader: m.leader,
                candidate: m.role == Role::Candidate,
                committed_term: m.committed_term,
                // Only a leader's failover is measured; a follower skips this on every change.
                matched: match m.is_leader() {
                    true => m.replication.iter().map(|(id, matched)| (*id, matched.map(|(_, term)| term))).collect(),
                    false => Vec::new(),
                },
                last_heard_ms: cluster.leader_contact().silence().map(|s| now - s.as_millis() as i64),
            }
        };
        if let Some(change) = cluster.leader_changes().observe(observed.leader, observed.term, now) {
            meters.leader_changed();
            tracing::info!(
                node = cluster.id(),
                group = cluster.group().id().0,
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
            match tokio::time::timeout(MEASURE_TICK, watch.changed_any()).await {
                Ok(changed) => changed,
                Err(_) => Ok(()),
            }
        } else {
            watch.changed().await
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
        group = cluster.group().id().0,
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
