//! The scrubber: re-reads the sealed segments of a group's log at a bounded rate, so that a
//! record damaged on disk (a flipped bit, a bad sector) is found while the other members still
//! hold it, not when a consumer or a lagging member needs it. Damage found is never served and
//! is filled from another member (`raft/repair.rs`).

use std::time::Duration;

use crate::cluster::Cluster;
use crate::metrics::Meters;
use crate::raft::Dialer;
use crate::raft::repair::{Sources, fill_all};
use crate::store::LogReader;

#[derive(Debug, Clone, Copy)]
pub struct ScrubOptions {
    /// Bytes read per second, on average over each segment.
    pub bytes_per_sec: f64,
    /// The pause between two passes over the whole log.
    pub pause: Duration,
}

pub async fn scrub(cluster: Cluster, log: LogReader, meters: Meters, dialer: Dialer, options: ScrubOptions) {
    if options.bytes_per_sec <= 0.0 {
        return;
    }
    loop {
        let mut after = None;
        loop {
            let reader = log.clone();
            // A whole segment is read at once: off the runtime's threads.
            let scanned = crate::simulation::blocking(move || reader.scrub_next(after)).await;
            let Ok(Some((base, bytes, damage))) = scanned else { break };
            after = Some(base);
            meters.corruption_found(damage.iter().map(|d| d.end_index - d.first_index).sum());
            // What this pass found, and what reads found since the last one.
            if !log.damage().is_empty() {
                let me = cluster.group().status();
                let members = me.members.into_iter().filter(|m| m.id != me.id).map(|m| (m.id, m.info)).collect();
                let sources = Sources { group: cluster.group().id(), members, dialer: &dialer };
                fill_all(&mut log.clone(), &sources, &meters).await;
            }
            tokio::time::sleep(Duration::from_secs_f64(bytes as f64 / options.bytes_per_sec)).await;
        }
        tokio::time::sleep(options.pause).await;
    }
}
