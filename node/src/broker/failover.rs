//! The failover history: one record per leadership change, written by the new leader once it
//! has measured its failover, replicated like any other state so every node (and every snapshot)
//! can tell why a failover took as long as it did.
//!
//! The times in a record are the new leader's wall clock, measured on that one node, so the
//! phases' durations do not depend on how well the members' clocks agree. Apply only stores the
//! record (it reads no clock); the newest [`KEPT`] are kept.

use serde::{Deserialize, Serialize};

/// How many failovers are kept: enough for a page of history, bounded whatever the churn.
pub const KEPT: usize = 64;

/// Most members a record names as not following; a membership is small.
const MAX_NAMED: usize = 16;

/// One leadership change as its new leader saw it. Times are wall milliseconds on that leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failover {
    pub term: u64,
    pub leader: u64,
    /// The leader this node followed before it was elected, if it followed one since it started.
    pub previous: Option<u64>,
    /// When the previous leader's last heartbeat or append reached this node.
    pub last_heard_ms: Option<i64>,
    /// When this node saw the leader gone: it stood for election or heard of a newer term.
    pub election_started_ms: i64,
    /// When it won the election.
    pub elected_ms: i64,
    /// When the first entry of its term was committed: writes are accepted again from here.
    pub first_commit_ms: i64,
    /// When the last member that follows it took its first append: from here every live
    /// member forwards to it.
    pub routes_converged_ms: i64,
    /// Members that had not followed it when the record was made (down or cut off).
    #[serde(default)]
    pub not_following: Vec<u64>,
}

/// A failover's phases, in milliseconds, each from the end of the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phases {
    /// From the old leader's last heartbeat to the start of the election: the failure detection.
    pub detection_ms: Option<u64>,
    pub election_ms: u64,
    /// From the election won to the first commit of the new term.
    pub first_commit_ms: u64,
    /// From the first commit to every live member following the new leader.
    pub routes_ms: u64,
    /// From the last heartbeat (or the election's start) to the first commit: how long writes
    /// could not be committed.
    pub unavailable_ms: u64,
}

fn span(from: i64, to: i64) -> u64 {
    to.saturating_sub(from).max(0) as u64
}

/// Why a failover record is not one a leader could have made. Its text goes into the replicated
/// reply: it must not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidFailover {
    #[error("failover record of term {term} has its times out of order")]
    OutOfOrder { term: u64 },
    #[error("failover record of term {term} names too many members")]
    TooManyMembers { term: u64 },
}

impl Failover {
    pub fn phases(&self) -> Phases {
        let start = self.last_heard_ms.unwrap_or(self.election_started_ms);
        Phases {
            detection_ms: self.last_heard_ms.map(|heard| span(heard, self.election_started_ms)),
            election_ms: span(self.election_started_ms, self.elected_ms),
            first_commit_ms: span(self.elected_ms, self.first_commit_ms),
            routes_ms: span(self.first_commit_ms, self.routes_converged_ms),
            unavailable_ms: span(start, self.first_commit_ms),
        }
    }

    /// Whether a record is one a leader could have made: its times in order, a short list of
    /// members. Apply refuses others, so a corrupt entry cannot fill the history with noise.
    pub fn validate(&self) -> Result<(), InvalidFailover> {
        let ordered = self.last_heard_ms.is_none_or(|heard| heard <= self.elected_ms)
            && self.election_started_ms <= self.elected_ms
            && self.elected_ms <= self.first_commit_ms;
        if !ordered {
            return Err(InvalidFailover::OutOfOrder { term: self.term });
        }
        if self.not_following.len() > MAX_NAMED {
            return Err(InvalidFailover::TooManyMembers { term: self.term });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Failover {
        Failover {
            term: 4,
            leader: 2,
            previous: Some(1),
            last_heard_ms: Some(10_000),
            election_started_ms: 10_400,
            elected_ms: 10_450,
            first_commit_ms: 10_470,
            routes_converged_ms: 10_560,
            not_following: vec![1],
        }
    }

    #[test]
    fn phases_follow_each_other() {
        let p = record().phases();
        assert_eq!(
            p,
            Phases {
                detection_ms: Some(400),
                election_ms: 50,
                first_commit_ms: 20,
                routes_ms: 90,
                unavailable_ms: 470
            }
        );
    }

    #[test]
    fn a_first_election_has_no_detection_and_counts_from_its_start() {
        let first = Failover { previous: None, last_heard_ms: None, ..record() };
        let p = first.phases();
        assert_eq!((p.detection_ms, p.unavailable_ms), (None, 70));
    }

    #[test]
    fn records_out_of_order_are_refused() {
        assert!(record().validate().is_ok());
        assert_eq!(
            Failover { first_commit_ms: 10_000, ..record() }.validate(),
            Err(InvalidFailover::OutOfOrder { term: 4 })
        );
        assert_eq!(
            Failover { last_heard_ms: Some(20_000), ..record() }.validate(),
            Err(InvalidFailover::OutOfOrder { term: 4 })
        );
        let crowded = Failover { not_following: (0..100).collect(), ..record() }.validate().unwrap_err();
        assert_eq!(crowded, InvalidFailover::TooManyMembers { term: 4 });
        // The text is what the refusal's replicated reply holds: replicas compare their digests.
        assert_eq!(crowded.to_string(), "failover record of term 4 names too many members");
    }
}
