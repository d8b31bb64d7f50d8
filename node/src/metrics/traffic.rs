//! Each Raft group's traffic over the last minutes, as this node's replica of it shows: messages
//! stored, messages consumed (acked, summed over the consumer groups) and the lag left, sampled
//! every [`EVERY`] by `jobs::group_traffic` and kept for [`KEPT`] samples. The status page draws
//! them per group, so an operator sees at a glance a group taking more than its share.
//!
//! The counts come from the replicated state, so every node draws the same traffic for a group
//! (each from its own replica, a moment apart), whichever node the clients talk to.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// How often each group is sampled.
pub const EVERY: Duration = Duration::from_secs(5);
/// Samples kept per group: five minutes.
pub const KEPT: usize = 60;

/// One group's counts at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Wall milliseconds on this node.
    pub at_ms: i64,
    /// Messages ever stored in the group's queues (not lessened by retention).
    pub stored: u64,
    /// Of those, what the consumer groups acked, summed over them.
    pub consumed: u64,
    /// Not acked yet, summed over the consumer groups.
    pub lag: u64,
}

/// One interval between two samples: per second rates, and the lag at its end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub at_ms: i64,
    pub sends_per_sec: f64,
    pub consumed_per_sec: f64,
    pub lag: u64,
}

/// Every group's recent samples. Shared by the sampling job and the page.
#[derive(Default)]
pub struct GroupTraffic {
    samples: Mutex<BTreeMap<u32, VecDeque<Sample>>>,
}

impl GroupTraffic {
    pub fn record(&self, group: u32, sample: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let kept = samples.entry(group).or_default();
        if kept.len() == KEPT + 1 {
            kept.pop_front();
        }
        kept.push_back(sample);
    }

    /// Each group's latest sample.
    pub fn latest(&self) -> BTreeMap<u32, Sample> {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.iter().filter_map(|(group, kept)| Some((*group, *kept.back()?))).collect()
    }

    /// Each group's rates between consecutive samples, oldest first. A count that went down (a
    /// topic deleted, a replica replaced by a snapshot) counts as no traffic, not as negative.
    pub fn rates(&self) -> BTreeMap<u32, Vec<Rates>> {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples
            .iter()
            .map(|(group, kept)| {
                let rates = kept
                    .iter()
                    .zip(kept.iter().skip(1))
                    .map(|(a, b)| {
                        let secs = ((b.at_ms - a.at_ms).max(1)) as f64 / 1000.0;
                        Rates {
                            at_ms: b.at_ms,
                            sends_per_sec: b.stored.saturating_sub(a.stored) as f64 / secs,
                            consumed_per_sec: b.consumed.saturating_sub(a.consumed) as f64 / secs,
                            lag: b.lag,
                        }
                    })
                    .collect();
                (*group, rates)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_second_between_samples_and_never_negative() {
        let t = GroupTraffic::default();
        t.record(2, Sample { at_ms: 0, stored: 100, consumed: 50, lag: 50 });
        t.record(2, Sample { at_ms: 5_000, stored: 600, consumed: 300, lag: 300 });
        // A topic deleted: fewer stored than before.
        t.record(2, Sample { at_ms: 10_000, stored: 10, consumed: 10, lag: 0 });
        let rates = &t.rates()[&2];
        assert_eq!(rates.len(), 2);
        assert_eq!((rates[0].sends_per_sec, rates[0].consumed_per_sec, rates[0].lag), (100.0, 50.0, 300));
        assert_eq!((rates[1].sends_per_sec, rates[1].consumed_per_sec, rates[1].lag), (0.0, 0.0, 0));
    }

    #[test]
    fn only_the_last_minutes_are_kept() {
        let t = GroupTraffic::default();
        for i in 0..(KEPT as i64 * 3) {
            t.record(1, Sample { at_ms: i * 5_000, stored: i as u64, ..Default::default() });
        }
        let rates = &t.rates()[&1];
        assert_eq!(rates.len(), KEPT, "{KEPT} intervals from {} samples", KEPT + 1);
        assert_eq!(rates.last().map(|r| r.at_ms), Some((KEPT as i64 * 3 - 1) * 5_000));
    }
}
