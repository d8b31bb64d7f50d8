//! Purges whole segments past the retention time or over the disk budget: a snapshot is built at
//! the purge point (metadata and queue ranges as of then) and openraft purges the log up to it.
//!
//! Under disk pressure (this node's free space below its purge mark, above the soft mark) it
//! looks every second instead of every `check_every`, and a configured budget shrinks by what is
//! missing, so purging frees space before the free-space alarm refuses sends. Held messages
//! (pending timers, open transactional halves, deliveries within the retention time) are never
//! purged: when they are what keeps a needed purge back, the log says so.

use std::time::Duration;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::broker::{AdminCommand, Command};
use crate::cluster::{Cluster, now_ms};
use crate::jobs::failing::Failing;
use crate::metrics::Meters;
use crate::store::LogReader;
use crate::store::retention::{pressure_budget, purge_point};

/// How often retention looks while the disk is under pressure.
const UNDER_PRESSURE_EVERY: Duration = Duration::from_secs(1);
/// Pause before the same purge point is asked for again (the purge it asked for may be under
/// way: openraft waits for replication reading those entries), doubled up to
/// [`MAX_REPEAT_AFTER`].
const REPEAT_AFTER: Duration = Duration::from_secs(5);
const MAX_REPEAT_AFTER: Duration = Duration::from_secs(300);

pub struct RetentionOptions {
    /// Segments whose newest record is older than this are purged.
    pub max_age: Duration,
    pub check_every: Duration,
    /// Purge the oldest segments while the log is larger than this (0: no limit).
    pub disk_budget_bytes: u64,
}

pub async fn retention(cluster: Cluster, broker: Broker, meters: Meters, log: LogReader, options: RetentionOptions) {
    let mut tick = tokio::time::interval(options.check_every.min(UNDER_PRESSURE_EVERY));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_check: Option<Instant> = None;
    // The held entry last reported as keeping a pressure purge back (said once, not every second).
    let mut reported_hold = None;
    let mut reading_held = Failing::new("retention: reading held messages", Duration::ZERO);
    // The last purge asked for, when, and the pause before asking for the same one again.
    let mut asked: Option<(u64, Instant, Duration)> = None;
    loop {
        tick.tick().await;
        let free = cluster.disk_here().free_bytes;
        // Read each time: the marks grow with the voters sharing this node's filesystem.
        let purge_mark = cluster.disk_marks().purge();
        let pressure = free < purge_mark;
        if !pressure && last_check.is_some_and(|t| t.elapsed() < options.check_every) {
            continue;
        }
        last_check = Some(Instant::now());
        let segments = log.segment_stats();
        let log_bytes = segments.iter().map(|s| s.bytes).sum();
        let budget = pressure_budget(options.disk_budget_bytes, log_bytes, free, purge_mark);
        let applied = broker.last_applied().map(|l| l.index);
        let Some(wanted) = purge_point(&segments, crate::simulation::system_time(), options.max_age, budget) else {
            continue;
        };
        let point = applied.map_or(wanted, |a| wanted.min(a));
        // Held messages (pending timers, open halves, and those delivered within the retention
        // time) keep their entries.
        let max_age_ms = options.max_age.as_millis().min(i64::MAX as u128) as i64;
        let held = match broker.first_held_index(now_ms(), max_age_ms) {
            Ok(held) => {
                reading_held.worked();
                held
            }
            Err(e) => {
                reading_held.failed(&e);
                continue;
            }
        };
        // What the budget alone would purge: more than that is the disk pressure's doing.
        let forced = budget < options.disk_budget_bytes
            && purge_point(&segments, crate::simulation::system_time(), options.max_age, options.disk_budget_bytes)
                != Some(wanted);
        if forced && let Some(h) = held.filter(|h| *h <= point && reported_hold != Some(*h)) {
            reported_hold = Some(h);
            tracing::warn!(
                node = cluster.id(),
                held = h,
                wanted,
                "retention: the disk is short of space, but a held message (a pending timer, an open \
                 transactional half or a recent delivery) at this log index keeps the purge below it"
            );
        }
        let point = match held {
            Some(held) => match held.checked_sub(1) {
                Some(below) => point.min(below),
                None => continue,
            },
            None => point,
        };
        let first = log.bounds().first_index;
        if first > point {
            continue;
        }
        let (repeat, repeat_after) = match asked {
            Some((p, at, pause)) if p == point && at.elapsed() < pause => continue,
            Some((p, _, pause)) if p == point => (true, (pause * 2).min(MAX_REPEAT_AFTER)),
            _ => (false, REPEAT_AFTER),
        };
        asked = Some((point, Instant::now(), repeat_after));
        if !repeat {
            meters.purged(point + 1 - first);
        }
        if forced {
            tracing::warn!(
                node = cluster.id(),
                upto = point,
                free_mib = free >> 20,
                purge_mark_mib = purge_mark >> 20,
                "retention: the disk is short of space: purging the oldest segments beyond the disk budget, \
                 messages younger than the retention time included (consumers behind them lose them)"
            );
        } else {
            tracing::info!(node = cluster.id(), upto = point, "retention: purging the log");
        }
        broker.set_snapshot_target(point);
        if cluster.group().snapshot().await.is_err() {
            return; // Raft has stopped.
        }
        // Also when the snapshot at `point` was there already: openraft purges after a snapshot
        // it builds, not after one a node found at start.
        if cluster.group().purge_log(point).await.is_err() {
            return;
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
