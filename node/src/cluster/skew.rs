//! Finding a member whose clock is off, and keeping it from leading.
//!
//! The leader's clock is stamped into every command (`clock.rs`), so a leader whose clock is
//! minutes off delivers delayed messages, redelivers invisible ones and rolls back halves
//! minutes early or late. Every node reads each other voter's clock now and then
//! (`PeerService.Clock`, corrected by half the round trip) and keeps the offsets. A node whose
//! clock differs by more than `max_clock_skew_ms` from a majority of the members is *skewed*: it
//! says so in the log and in `cluster status`, stops calling elections, hands leadership to
//! another member if it has it, and proposes nothing meanwhile (writes wait for the next leader,
//! as through an election). Members that do not answer count for neither side, so a node is
//! never judged alone while the others are down. It leads again once its clock agrees.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, now_ms};
use crate::raft::NodeId;

/// How long one clock reading may take; a slower answer says little about the offset.
const READ_TIMEOUT: Duration = Duration::from_millis(500);

/// What this node knows of the members' clocks.
#[derive(Default)]
pub struct ClockSkew {
    /// Per member: how far its clock is ahead of this node's (ms), at the last reading.
    offsets: Mutex<BTreeMap<NodeId, i64>>,
    skewed: AtomicBool,
}

/// The clock readings as `cluster status` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockReport {
    /// Per member answering: how far its clock is ahead of this node's, in ms.
    pub offsets_ms: BTreeMap<NodeId, i64>,
    /// This node's clock differs from a majority of the members by more than the allowed skew.
    pub skewed: bool,
}

impl ClockSkew {
    pub fn is_skewed(&self) -> bool {
        self.skewed.load(Ordering::Acquire)
    }

    pub fn report(&self) -> ClockReport {
        ClockReport { offsets_ms: self.offsets.lock().expect("offsets lock").clone(), skewed: self.is_skewed() }
    }
}

/// Whether a node whose peers' clocks are `offsets` ahead of its own is skewed, in a group of
/// `members` voters (itself included): more than `max_skew_ms` off from a majority of them.
pub fn is_skewed(offsets: &BTreeMap<NodeId, i64>, members: usize, max_skew_ms: i64) -> bool {
    let disagree = offsets.values().filter(|o| o.abs() > max_skew_ms).count();
    disagree > members / 2
}

impl Cluster {
    /// Reads every other voter's clock, judges this node's, and acts on a change: stops or
    /// resumes elections, and hands leadership away when skewed. `max_skew_ms` 0: never judged.
    pub async fn check_clock(&self, max_skew_ms: i64) {
        // The voters decide who leads, so their clocks are the ones to agree with.
        let (voters, members) = self.voters_and_peers();
        let voters = voters.len();
        let mut offsets = BTreeMap::new();
        for (id, addr) in members {
            let sent = now_ms();
            if let Ok(Ok(theirs)) = tokio::time::timeout(READ_TIMEOUT, self.peers().clock(&addr)).await {
                let back = now_ms();
                offsets.insert(id, theirs - (sent + back) / 2);
            }
        }
        let skewed = max_skew_ms > 0 && is_skewed(&offsets, voters, max_skew_ms);
        let skew = &self.inner.skew;
        *skew.offsets.lock().expect("offsets lock") = offsets.clone();
        let was = skew.skewed.swap(skewed, Ordering::AcqRel);
        if skewed != was {
            self.group().set_electable(!skewed);
            if skewed {
                tracing::error!(
                    ?offsets,
                    max_skew_ms,
                    "this node's clock differs from most members': it will not lead until it agrees"
                );
            } else {
                tracing::warn!(?offsets, "this node's clock agrees with the members again: it may lead");
            }
        }
        if skewed
            && self.is_leader()
            && let Some(to) = in_step_with_most(&offsets)
            && let Err(e) = self.group().transfer_leader(to).await
        {
            tracing::warn!(error = %e, to, "handing leadership away from a skewed clock failed");
        }
    }
}

/// The member whose clock is nearest the others' (the median offset): the one to hand
/// leadership to, away from a skewed clock.
fn in_step_with_most(offsets: &BTreeMap<NodeId, i64>) -> Option<NodeId> {
    let mut sorted: Vec<i64> = offsets.values().copied().collect();
    sorted.sort_unstable();
    let median = *sorted.get(sorted.len() / 2)?;
    offsets.iter().min_by_key(|(_, o)| o.abs_diff(median)).map(|(id, _)| *id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_skewed_only_when_a_majority_disagrees() {
        let day = 86_400_000;
        // Three voters: the one a day ahead sees both others a day behind.
        assert!(is_skewed(&BTreeMap::from([(1, -day), (2, -day)]), 3, 1000));
        // The others each see one member off and one in step.
        assert!(!is_skewed(&BTreeMap::from([(2, 3), (3, day)]), 3, 1000));
        // Unanswered members count for neither side: alone, a node is never judged skewed.
        assert!(!is_skewed(&BTreeMap::from([(2, day)]), 3, 1000));
        assert!(!is_skewed(&BTreeMap::new(), 3, 1000));
        // Five voters: three of four peers must disagree.
        assert!(!is_skewed(&BTreeMap::from([(1, day), (2, day), (3, 0), (4, 0)]), 5, 1000));
        assert!(is_skewed(&BTreeMap::from([(1, day), (2, day), (3, day), (4, 0)]), 5, 1000));
        assert!(!is_skewed(&BTreeMap::from([(1, 999), (2, -999)]), 3, 1000), "within the bound");
    }

    #[test]
    fn leadership_goes_to_a_member_in_step_with_the_others() {
        let day = 86_400_000;
        // Five voters, this one a day ahead of three of them; member 4 is off too.
        let offsets = BTreeMap::from([(1, -day), (2, -day + 20), (3, -day - 10), (4, 5_000)]);
        assert!(matches!(in_step_with_most(&offsets), Some(1..=3)));
        assert_eq!(in_step_with_most(&BTreeMap::new()), None);
    }
}
