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
//! never judged alone while the others are down. It leads again once its clock agrees. A clock is
//! the node's, not a group's: the metadata group's members judge it, and the judgement holds in
//! every group the node runs; no group's leader hands its leadership to a member whose clock it
//! reads as off.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
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
    /// The bound the last judgement used (0: none).
    max_skew_ms: AtomicI64,
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

    /// Whether member `id`'s clock agrees with this node's, as last read (a member not read yet,
    /// or no bound set, agrees), and this node's own is not off.
    pub fn in_step(&self, id: NodeId) -> bool {
        let max = self.max_skew_ms.load(Ordering::Acquire);
        let offset = self.offsets.lock().expect("offsets lock").get(&id).copied();
        !self.is_skewed() && (max == 0 || offset.is_none_or(|o| o.abs() <= max))
    }
}

/// Whether a node whose peers' clocks are `offsets` ahead of its own is skewed, in a group of
/// `members` voters (itself included): more than `max_skew_ms` off from a majority of them.
pub fn is_skewed(offsets: &BTreeMap<NodeId, i64>, members: usize, max_skew_ms: i64) -> bool {
    let disagree = offsets.values().filter(|o| o.abs() > max_skew_ms).count();
    disagree > members / 2
}

impl Cluster {
    /// Reads every other voter's clock and judges this node's (`max_skew_ms` 0: never judged),
    /// logging a change; [`Self::follow_clock`] acts on the judgement in each group.
    pub async fn check_clock(&self, max_skew_ms: i64) -> ClockReport {
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
        skew.max_skew_ms.store(max_skew_ms, Ordering::Release);
        let was = skew.skewed.swap(skewed, Ordering::AcqRel);
        if skewed != was {
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
        ClockReport { offsets_ms: offsets, skewed }
    }

    /// Acts on this node's clock as `clock` judged it, in this group: no elections while it is
    /// off, and a leadership handed to the voter of the group whose clock is nearest the others'.
    pub async fn follow_clock(&self, clock: &ClockReport) {
        self.group().set_electable(!clock.skewed);
        if !clock.skewed || !self.is_leader() {
            return;
        }
        let voters = self.group().status().voters();
        let candidates: BTreeMap<NodeId, i64> =
            clock.offsets_ms.iter().filter(|(id, _)| voters.contains(id)).map(|(&id, &o)| (id, o)).collect();
        if let Some(to) = in_step_with_most(&clock.offsets_ms, &candidates)
            && let Err(e) = self.group().transfer_leader(to).await
        {
            tracing::warn!(group = self.group().id().0, error = %e, to, "handing leadership away from a skewed clock failed");
        }
    }

    /// Whether member `id`'s clock agrees with this node's (read in the group holding the
    /// metadata): the members a leadership may go to.
    pub fn clock_in_step(&self, id: NodeId) -> bool {
        self.inner.skew.in_step(id)
    }
}

/// Of `candidates`, the member whose clock is nearest the others' (the median of `offsets`):
/// the one to hand leadership to, away from a skewed clock.
fn in_step_with_most(offsets: &BTreeMap<NodeId, i64>, candidates: &BTreeMap<NodeId, i64>) -> Option<NodeId> {
    let mut sorted: Vec<i64> = offsets.values().copied().collect();
    sorted.sort_unstable();
    let median = *sorted.get(sorted.len() / 2)?;
    candidates.iter().min_by_key(|(_, o)| o.abs_diff(median)).map(|(id, _)| *id)
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
        assert!(matches!(in_step_with_most(&offsets, &offsets), Some(1..=3)));
        assert_eq!(in_step_with_most(&BTreeMap::new(), &BTreeMap::new()), None);
        // A group held by members 3, 4 and this one: of its voters, member 3.
        let group = BTreeMap::from([(3, -day - 10), (4, 5_000)]);
        assert_eq!(in_step_with_most(&offsets, &group), Some(3));
    }

    #[test]
    fn a_member_whose_clock_is_off_is_not_in_step() {
        let skew = ClockSkew::default();
        // Nothing read yet: every member agrees.
        assert!(skew.in_step(2));
        *skew.offsets.lock().unwrap() = BTreeMap::from([(2, 30), (3, 86_400_000)]);
        skew.max_skew_ms.store(1000, Ordering::Release);
        assert!(skew.in_step(2) && !skew.in_step(3) && skew.in_step(4), "4 is not read yet");
        // This node's own clock off: no member is in step with it.
        skew.skewed.store(true, Ordering::Release);
        assert!(!skew.in_step(2));
    }
}
