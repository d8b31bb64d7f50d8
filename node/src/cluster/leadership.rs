//! The leadership changes this node saw, newest last, for the status page and the log: when the
//! leader it followed went away (an election began or it heard of a newer term), and which node
//! led next, in which term, after how long without a leader.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::raft::NodeId;

/// How many changes are kept: a page's worth.
const KEPT: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderChange {
    /// When this node learned of the new leader (wall clock, ms since the epoch).
    pub at_ms: i64,
    pub term: u64,
    pub leader: NodeId,
    /// The leader this node followed before, if it knew one.
    pub previous: Option<NodeId>,
    /// How long this node knew no leader before it learned of this one.
    pub without_leader_ms: u64,
}

/// What this node saw; fed from openraft's metrics by [`LeaderChanges::observe`].
#[derive(Debug, Default)]
pub struct LeaderChanges {
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    changes: VecDeque<LeaderChange>,
    /// The leader last known and its term.
    current: Option<(NodeId, u64)>,
    /// Since when no leader has been known (wall ms), if none is.
    lost_at_ms: Option<i64>,
}

impl LeaderChanges {
    /// Takes in what the metrics say now: `leader` of `term` at wall time `now_ms`. Returns the
    /// change when this is one.
    pub fn observe(&self, leader: Option<NodeId>, term: u64, now_ms: i64) -> Option<LeaderChange> {
        let mut seen = self.seen.lock().expect("leader changes");
        let Some(leader) = leader else {
            seen.lost_at_ms.get_or_insert(now_ms);
            return None;
        };
        if seen.current == Some((leader, term)) {
            seen.lost_at_ms = None;
            return None;
        }
        let change = LeaderChange {
            at_ms: now_ms,
            term,
            leader,
            previous: seen.current.map(|(id, _)| id),
            without_leader_ms: seen.lost_at_ms.map_or(0, |lost| now_ms.saturating_sub(lost).max(0) as u64),
        };
        seen.current = Some((leader, term));
        seen.lost_at_ms = None;
        if seen.changes.len() == KEPT {
            seen.changes.pop_front();
        }
        seen.changes.push_back(change.clone());
        Some(change)
    }

    /// The changes kept, oldest first.
    pub fn recent(&self) -> Vec<LeaderChange> {
        self.seen.lock().expect("leader changes").changes.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failover_is_one_change_with_the_time_without_a_leader() {
        let changes = LeaderChanges::default();
        let first = changes.observe(Some(1), 1, 1_000).expect("the first leader");
        assert_eq!((first.leader, first.previous, first.without_leader_ms), (1, None, 0));
        assert_eq!(changes.observe(Some(1), 1, 1_500), None, "the same leader is no change");
        assert_eq!(changes.observe(None, 2, 2_000), None);
        assert_eq!(changes.observe(None, 2, 2_300), None, "the time without a leader counts from the first");
        let next = changes.observe(Some(3), 2, 2_900).expect("a new leader");
        assert_eq!((next.term, next.leader, next.previous, next.without_leader_ms), (2, 3, Some(1), 900));
        assert_eq!(changes.recent().len(), 2);
    }

    #[test]
    fn only_the_newest_changes_are_kept() {
        let changes = LeaderChanges::default();
        for term in 1..=100 {
            changes.observe(Some(term % 3 + 1), term, term as i64);
        }
        let recent = changes.recent();
        assert_eq!(recent.len(), KEPT);
        assert_eq!(recent.last().map(|c| c.term), Some(100));
    }
}
