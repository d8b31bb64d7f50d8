//! Purges whole segments past the retention time or over the disk budget: a snapshot is built at
//! the purge point (metadata and queue ranges as of then) and openraft purges the log up to it.

use std::time::{Duration, SystemTime};

use crate::broker::{AdminCommand, Command};
use crate::cluster::{Cluster, now_ms};
use crate::store::LogReader;
use crate::store::retention::purge_point;

pub struct RetentionOptions {
    /// Segments whose newest record is older than this are purged.
    pub max_age: Duration,
    pub check_every: Duration,
    /// Purge the oldest segments while the log is larger than this (0: no limit).
    pub disk_budget_bytes: u64,
}

pub async fn retention(cluster: Cluster, log: LogReader, options: RetentionOptions) {
    let mut tick = tokio::time::interval(options.check_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let applied = cluster.broker().last_applied().map(|l| l.index);
        let Some(point) =
            purge_point(&log.segment_stats(), SystemTime::now(), options.max_age, options.disk_budget_bytes)
        else {
            continue;
        };
        let point = applied.map_or(point, |a| point.min(a));
        // Held messages (pending timers, open halves, and those delivered within the retention
        // time) keep their entries.
        let max_age_ms = options.max_age.as_millis().min(i64::MAX as u128) as i64;
        let point = match cluster.broker().first_held_index(now_ms(), max_age_ms) {
            Ok(Some(held)) => match held.checked_sub(1) {
                Some(below) => point.min(below),
                None => continue,
            },
            Ok(None) => point,
            Err(e) => {
                tracing::error!(error = %e, "retention: reading held messages failed");
                continue;
            }
        };
        let first = log.bounds().first_index;
        if first > point {
            continue;
        }
        cluster.meters().purged(point + 1 - first);
        tracing::info!(node = cluster.id(), upto = point, "retention: purging the log");
        cluster.broker().set_snapshot_target(point);
        if cluster.raft().trigger().snapshot().await.is_err() {
            return; // Raft has stopped.
        }
        if cluster.is_leader() {
            // What held the purged entries back is done with: forget it, on every replica.
            let release = Command::Admin(AdminCommand::ReleaseHolds { below: point + 1 });
            if let Err(e) = cluster.write(&release).await {
                tracing::debug!(error = %e, "retention: releasing holds failed; retried at the next purge");
            }
        }
    }
}
