//! Measures a failover on the node that wins it: when it last heard the old leader, when it saw
//! the leader gone, when it won, when its term's first entry committed and when every member
//! followed it. The result ([`Failover`]) is then proposed and replicated (`jobs/leaders.rs`), so
//! `rockraft cluster history` reads the same history on every node.
//!
//! All the times are this node's wall clock: one clock for one record.

use std::collections::BTreeMap;

use crate::broker::failover::Failover;
use crate::raft::NodeId;

/// How long a new leader waits for every member to follow before it records the failover
/// anyway, naming those that do not (down, or cut off): a live follower takes the first append
/// within a heartbeat or two.
pub const CONVERGE_WAIT_MS: i64 = 3_000;

/// What the node's Raft metrics say at one moment, with the wall time.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub now_ms: i64,
    pub id: NodeId,
    pub term: u64,
    pub leader: Option<NodeId>,
    /// Whether this node stands for election.
    pub candidate: bool,
    /// The term of the last entry this node knows committed.
    pub committed_term: Option<u64>,
    /// On a leader: each member it replicates to, with the term of the last entry it matched.
    pub matched: Vec<(NodeId, Option<u64>)>,
    /// When a leader's append last reached this node (wall ms).
    pub last_heard_ms: Option<i64>,
}

/// The failover under way as this node sees it; fed every change of its metrics.
#[derive(Debug, Default)]
pub struct FailoverWatch {
    /// The leader this node followed (or was) last.
    followed: Option<NodeId>,
    /// Since the leader went away: when, and when it was last heard.
    lost: Option<Lost>,
    /// This node's own term as leader, being measured.
    leading: Option<Leading>,
}

#[derive(Debug, Clone, Copy)]
struct Lost {
    at_ms: i64,
    previous: Option<NodeId>,
    last_heard_ms: Option<i64>,
    /// When this node first stood for election since.
    candidate_ms: Option<i64>,
}

impl Lost {
    fn new(o: &Observed, followed: Option<NodeId>) -> Lost {
        Lost {
            at_ms: o.now_ms,
            previous: followed,
            // A node that led itself heard no other leader since.
            last_heard_ms: o.last_heard_ms.filter(|_| followed.is_some_and(|f| f != o.id)),
            candidate_ms: None,
        }
    }

    /// When the election began: when the leader was seen gone; for a node that has followed no
    /// leader since it started (a new or restarted cluster) there was none to lose, and the
    /// election began when it stood.
    fn election_started_ms(&self, elected_ms: i64) -> i64 {
        match self.previous {
            Some(_) => self.at_ms,
            None => self.candidate_ms.unwrap_or(elected_ms),
        }
    }
}

#[derive(Debug)]
struct Leading {
    term: u64,
    previous: Option<NodeId>,
    last_heard_ms: Option<i64>,
    election_started_ms: i64,
    elected_ms: i64,
    first_commit_ms: Option<i64>,
    /// When each member first matched an entry of this term.
    followed_at: BTreeMap<NodeId, i64>,
    /// Recorded already: nothing more to measure this term.
    done: bool,
}

impl FailoverWatch {
    /// Takes in one observation; returns the failover once it is measured (once per term won).
    pub fn observe(&mut self, o: &Observed) -> Option<Failover> {
        match o.leader {
            Some(leader) if leader != o.id => {
                self.followed = Some(leader);
                self.lost = None;
                self.leading = None;
                None
            }
            None => {
                self.leading = None;
                let followed = self.followed;
                let lost = self.lost.get_or_insert_with(|| Lost::new(o, followed));
                if o.candidate {
                    lost.candidate_ms.get_or_insert(o.now_ms);
                }
                None
            }
            Some(_) => self.observe_leading(o),
        }
    }

    fn observe_leading(&mut self, o: &Observed) -> Option<Failover> {
        if self.leading.as_ref().is_none_or(|l| l.term != o.term) {
            // Elected between two observations: the leader went away no earlier than now.
            let lost = self.lost.take().unwrap_or_else(|| Lost::new(o, self.followed));
            self.leading = Some(Leading {
                term: o.term,
                previous: lost.previous,
                last_heard_ms: lost.last_heard_ms.map(|heard| heard.min(o.now_ms)),
                election_started_ms: lost.election_started_ms(o.now_ms),
                elected_ms: o.now_ms,
                first_commit_ms: None,
                followed_at: BTreeMap::new(),
                done: false,
            });
            self.followed = Some(o.id);
        }
        let leading = self.leading.as_mut()?;
        if leading.done {
            return None;
        }
        if leading.first_commit_ms.is_none() && o.committed_term.is_some_and(|t| t >= leading.term) {
            leading.first_commit_ms = Some(o.now_ms);
        }
        for (member, matched) in &o.matched {
            if matched.is_some_and(|t| t >= leading.term) {
                leading.followed_at.entry(*member).or_insert(o.now_ms);
            }
        }
        let first_commit_ms = leading.first_commit_ms?;
        let not_following: Vec<NodeId> = o
            .matched
            .iter()
            .map(|(member, _)| *member)
            .filter(|m| *m != o.id && !leading.followed_at.contains_key(m))
            .collect();
        if !not_following.is_empty() && o.now_ms < leading.elected_ms + CONVERGE_WAIT_MS {
            return None;
        }
        leading.done = true;
        let routes_converged_ms =
            leading.followed_at.values().copied().max().unwrap_or(first_commit_ms).max(first_commit_ms);
        Some(Failover {
            term: leading.term,
            leader: o.id,
            previous: leading.previous,
            last_heard_ms: leading.last_heard_ms,
            election_started_ms: leading.election_started_ms.min(leading.elected_ms),
            elected_ms: leading.elected_ms,
            first_commit_ms,
            routes_converged_ms,
            not_following,
        })
    }

    /// Whether a failover is being measured, so the caller looks again even if nothing changes.
    pub fn measuring(&self) -> bool {
        self.leading.as_ref().is_some_and(|l| !l.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(now_ms: i64, term: u64, leader: Option<NodeId>) -> Observed {
        Observed { now_ms, id: 2, term, leader, last_heard_ms: Some(900), ..Default::default() }
    }

    #[test]
    fn a_failover_is_measured_phase_by_phase_on_the_node_that_wins() {
        let mut w = FailoverWatch::default();
        assert_eq!(w.observe(&seen(500, 3, Some(1))), None, "following node 1");
        assert_eq!(w.observe(&seen(1_200, 4, None)), None, "the leader is gone: an election");
        let mut won = seen(1_260, 4, Some(2));
        won.matched = vec![(1, Some(3)), (3, Some(3))];
        assert_eq!(w.observe(&won), None, "elected, nothing committed yet");
        assert!(w.measuring());
        let mut committed = seen(1_280, 4, Some(2));
        committed.committed_term = Some(4);
        committed.matched = vec![(1, Some(3)), (3, Some(4))];
        assert_eq!(w.observe(&committed), None, "node 1 does not follow yet");
        let mut all = committed.clone();
        all.now_ms = 1_350;
        all.matched = vec![(1, Some(4)), (3, Some(4))];
        let record = w.observe(&all).expect("measured");
        assert_eq!(
            record,
            Failover {
                term: 4,
                leader: 2,
                previous: Some(1),
                last_heard_ms: Some(900),
                election_started_ms: 1_200,
                elected_ms: 1_260,
                first_commit_ms: 1_280,
                routes_converged_ms: 1_350,
                not_following: vec![],
            }
        );
        assert_eq!(w.observe(&all), None, "one record per term");
        assert!(!w.measuring());
    }

    #[test]
    fn a_first_election_counts_from_standing_not_from_the_start_of_the_process() {
        let mut w = FailoverWatch::default();
        assert_eq!(w.observe(&seen(0, 0, None)), None, "started: no leader yet");
        let mut standing = seen(60_000, 1, None);
        standing.candidate = true;
        w.observe(&standing);
        let mut o = seen(60_020, 1, Some(2));
        o.committed_term = Some(1);
        let record = w.observe(&o).expect("measured");
        assert_eq!((record.previous, record.last_heard_ms), (None, None));
        assert_eq!(record.election_started_ms, 60_000, "not when the process started");
    }

    #[test]
    fn a_member_that_never_follows_is_named_after_the_wait() {
        let mut w = FailoverWatch::default();
        w.observe(&seen(0, 1, Some(1)));
        w.observe(&seen(1_000, 2, None));
        let mut o = seen(1_100, 2, Some(2));
        o.committed_term = Some(2);
        o.matched = vec![(1, Some(1)), (3, Some(2))];
        assert_eq!(w.observe(&o), None, "node 1 may still follow");
        o.now_ms = 1_100 + CONVERGE_WAIT_MS;
        let record = w.observe(&o).expect("recorded after the wait");
        assert_eq!(record.not_following, vec![1]);
        assert_eq!(record.routes_converged_ms, 1_100, "when the members that follow did");
    }

    #[test]
    fn losing_before_it_is_measured_records_nothing_and_a_node_re_elected_heard_no_one() {
        let mut w = FailoverWatch::default();
        w.observe(&seen(0, 1, Some(1)));
        w.observe(&seen(10, 2, Some(2)));
        assert_eq!(w.observe(&seen(20, 3, Some(3))), None, "another node took over first");
        assert!(!w.measuring());
        // Node 2 leads term 4 (an election seen only once won), then wins term 5 after it.
        let mut o = seen(30, 4, Some(2));
        o.committed_term = Some(4);
        let term4 = w.observe(&o).expect("no members to wait for");
        assert_eq!((term4.previous, term4.last_heard_ms), (Some(3), Some(30)), "heard at most until elected");
        w.observe(&seen(40, 5, None));
        let mut o = seen(50, 5, Some(2));
        o.committed_term = Some(5);
        let term5 = w.observe(&o).expect("measured");
        assert_eq!((term5.previous, term5.last_heard_ms), (Some(2), None), "it led before: no one to hear");
        assert_eq!(term5.election_started_ms, 40);
    }
}
