//! Which part of the log retention lets go of: whole sealed segments, oldest first, once their
//! newest record is older than the retention time or while the log is over its disk budget.
//! The active (last) segment is never purged.

use std::time::{Duration, SystemTime};

/// What retention needs to know about one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStat {
    pub first_index: u64,
    /// One past the last index the segment holds.
    pub end_index: u64,
    /// When the segment was last written: the time of its newest record.
    pub modified: SystemTime,
    pub bytes: u64,
}

/// The highest index that may be purged, if any. `segments` is in log order.
pub fn purge_point(segments: &[SegmentStat], now: SystemTime, max_age: Duration, budget_bytes: u64) -> Option<u64> {
    let sealed = segments.len().saturating_sub(1);
    let mut total: u64 = segments.iter().map(|s| s.bytes).sum();
    let mut point = None;
    for s in &segments[..sealed] {
        let expired = now.duration_since(s.modified).is_ok_and(|age| age > max_age);
        let over_budget = budget_bytes > 0 && total > budget_bytes;
        if !(expired || over_budget) {
            break;
        }
        total -= s.bytes;
        if s.end_index > s.first_index {
            point = Some(s.end_index - 1);
        }
    }
    point
}

/// The disk budget to purge by when the filesystem has `free` bytes and retention should keep
/// at least `purge_mark` free: the configured one, or less under disk pressure, so the purge
/// brings free space back above the mark. No configured budget (0): none under pressure either
/// (then only age purges, and the free-space alarm refuses sends instead).
pub fn pressure_budget(configured: u64, log_bytes: u64, free: u64, purge_mark: u64) -> u64 {
    if configured == 0 || free >= purge_mark {
        return configured;
    }
    let shortfall = purge_mark - free;
    configured.min(log_bytes.saturating_sub(shortfall).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(first: u64, end: u64, age_secs: u64, now: SystemTime) -> SegmentStat {
        SegmentStat { first_index: first, end_index: end, modified: now - Duration::from_secs(age_secs), bytes: 100 }
    }

    #[test]
    fn expired_sealed_segments_go_oldest_first_and_the_active_one_stays() {
        let now = SystemTime::now();
        let segs = [seg(0, 10, 500, now), seg(10, 20, 400, now), seg(20, 30, 10, now), seg(30, 35, 600, now)];
        assert_eq!(purge_point(&segs, now, Duration::from_secs(300), 0), Some(19));
        assert_eq!(purge_point(&segs, now, Duration::from_secs(1000), 0), None);
        // The last segment is never purged, however old.
        assert_eq!(purge_point(&segs[3..], now, Duration::from_secs(1), 0), None);
    }

    #[test]
    fn disk_pressure_shrinks_a_configured_budget_by_the_shortfall() {
        // Plenty of room: the budget as configured.
        assert_eq!(pressure_budget(1000, 800, 500, 100), 1000);
        // 60 bytes short of the purge mark: the log must shrink by 60.
        assert_eq!(pressure_budget(1000, 800, 40, 100), 740);
        // A budget smaller than that stays.
        assert_eq!(pressure_budget(500, 800, 40, 100), 500);
        // Short by more than the whole log: purge all that may go (never "no limit").
        assert_eq!(pressure_budget(1000, 50, 0, 100), 1);
        // No budget configured: pressure purges nothing by size.
        assert_eq!(pressure_budget(0, 800, 0, 100), 0);
    }

    #[test]
    fn over_the_disk_budget_the_oldest_segments_go_until_it_fits() {
        let now = SystemTime::now();
        let segs = [seg(0, 10, 1, now), seg(10, 20, 1, now), seg(20, 30, 1, now), seg(30, 40, 1, now)];
        assert_eq!(purge_point(&segs, now, Duration::from_secs(3600), 250), Some(19));
        assert_eq!(purge_point(&segs, now, Duration::from_secs(3600), 0), None);
    }
}
