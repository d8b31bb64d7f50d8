//! Which members are live, for the routes clients are given (`proxy/route.rs`). Only the leader
//! hears from everyone: openraft records, per follower, when the last heartbeat or append it
//! acknowledged was sent. A follower asks the leader (`PeerService.LiveMembers`) instead of
//! guessing, so every node hands out the same members.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::cluster::router::Route;
use crate::cluster::{Cluster, ClusterError};
use crate::raft::NodeId;

/// A voter the leader has not heard from for this many (longest) election timeouts is taken for
/// gone. A live follower answers every heartbeat (`heartbeat_ms`, 200 ms by default), so this
/// only drops members that stopped answering, and it is long enough not to flap under load.
const SILENT_ELECTION_TIMEOUTS: u32 = 2;

impl Cluster {
    /// On the leader: the voters it heard from within two election timeouts, itself included.
    /// `None` on any other node.
    pub fn heard_from(&self) -> Option<BTreeSet<NodeId>> {
        let silence = self.group().election_timeout_max() * SILENT_ELECTION_TIMEOUTS;
        let status = self.status();
        if !status.is_leader() {
            return None;
        }
        let ages = status.acknowledged.iter().map(|(id, age)| (*id, *age));
        Some(heard_within(status.id, &status.voters(), ages, silence))
    }

    /// The voters by id, and the other voters' raft addresses: whom a node asks about the group
    /// (clocks, free space).
    pub(crate) fn voters_and_peers(&self) -> (Vec<NodeId>, Vec<(NodeId, String)>) {
        let status = self.status();
        let voters: Vec<NodeId> = status.voters().into_iter().collect();
        let peers = status
            .members
            .into_iter()
            .filter(|m| m.id != self.id() && m.voter)
            .map(|m| (m.id, m.info.raft_addr))
            .collect();
        (voters, peers)
    }

    /// Whether the node at `raft_addr` runs a replica of Raft group `group` (which need not be
    /// one this node runs): `false` when it answers that it runs none, an error when it gives no
    /// answer.
    pub async fn runs_group_at(&self, group: crate::raft::GroupId, raft_addr: &str) -> Result<bool, ClusterError> {
        crate::cluster::peer::Peers::new(self.peers().dialer().clone(), group).runs_group(raft_addr).await
    }

    /// With mutual TLS between members: whether the node at `raft_addr` presents a certificate
    /// naming member `id` (and that address), found by a TLS handshake alone, before any call
    /// carries the cluster secret there. `Ok` without mutual TLS (nothing to look at). A node
    /// that does not listen yet (just started) is tried again, for at most `within`.
    pub async fn presents_member(&self, raft_addr: &str, id: NodeId, within: Duration) -> std::io::Result<()> {
        use std::io::{Error, ErrorKind};
        use tonic::codegen::Service as _;
        let Some(tls) = self.peers().dialer().credentials.tls.clone() else { return Ok(()) };
        let uri: tonic::codegen::http::Uri = format!("http://{raft_addr}")
            .parse()
            .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("{raft_addr}: {e}")))?;
        let deadline = tokio::time::Instant::now() + within;
        let mut pause = Duration::from_millis(100);
        loop {
            let probe = tls.connector(Some(id)).call(uri.clone());
            let failed = match tokio::time::timeout(Duration::from_secs(5), probe).await {
                Ok(Ok(_)) => return Ok(()),
                // The certificate, or the handshake: no use trying again.
                Ok(Err(e)) if matches!(e.kind(), ErrorKind::PermissionDenied | ErrorKind::InvalidData) => {
                    return Err(e);
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    Error::new(ErrorKind::TimedOut, format!("{raft_addr} did not finish a TLS handshake within 5 s"))
                }
            };
            if tokio::time::Instant::now() + pause > deadline {
                return Err(failed);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// The leader's [`heard_from`](Self::heard_from), asked over `PeerService.LiveMembers`.
    pub async fn leader_heard_from(&self) -> Result<BTreeSet<NodeId>, ClusterError> {
        match self.route().await? {
            Route::Here => self.heard_from().ok_or(ClusterError::NoLeader),
            Route::Leader(addr) => self.peers().live_members(&addr).await,
        }
    }
}

/// The voters whose last acknowledgement is at most `silence` old (`None`: none since this node
/// became leader), and the leader itself.
fn heard_within(
    leader: NodeId,
    voters: &BTreeSet<NodeId>,
    ages: impl Iterator<Item = (NodeId, Option<Duration>)>,
    silence: Duration,
) -> BTreeSet<NodeId> {
    let ages: BTreeMap<NodeId, Option<Duration>> = ages.collect();
    let mut live: BTreeSet<NodeId> =
        voters.iter().filter(|id| ages.get(id).copied().flatten().is_some_and(|age| age <= silence)).copied().collect();
    live.insert(leader);
    live
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_vouches_for_the_voters_it_heard_from_lately_and_itself() {
        let voters = BTreeSet::from([1, 2, 3, 4]);
        let secs = |s| Some(Duration::from_secs(s));
        // 2 answered a moment ago, 3 went silent, 4 never answered this leader, 5 is a learner.
        let ages = [(1, None), (2, secs(0)), (3, secs(30)), (4, None), (5, secs(0))];
        let live = heard_within(1, &voters, ages.into_iter(), Duration::from_secs(4));
        assert_eq!(live, BTreeSet::from([1, 2]));
        // Exactly at the limit still counts.
        let live = heard_within(1, &voters, [(3, secs(4))].into_iter(), Duration::from_secs(4));
        assert_eq!(live, BTreeSet::from([1, 3]));
    }
}
