//! The live members this node's routes lead clients to ([`route::live_members`]). The leader
//! knows whom it hears from; a follower asks the leader, so every node hands out the same members
//! (PushConsumers ask a different member for their assignments each time and rebuild their
//! process queues when the answer changes), and a dead follower is left out of every node's
//! routes, not only the leader's. A follower reuses the leader's answer for a second. When it
//! cannot get one (no leader known, the leader does not answer in time), it vouches for itself
//! only: a route to this node alone works, as it forwards what needs the leader, and it never
//! sends a client to a dead node; clients ask for routes again every 30 s.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::proxy::route::{self, RouteMember};
use crate::raft::NodeId;

/// How long a follower reuses the leader's answer.
const FRESH: Duration = Duration::from_secs(1);
/// How long a follower waits for it: a QueryRoute waits as long.
const ASK_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Default)]
pub struct LiveMembers {
    last: Mutex<Option<Asked>>,
}

struct Asked {
    at: Instant,
    leader: NodeId,
    heard: Option<BTreeSet<NodeId>>,
}

impl LiveMembers {
    /// The live members by id, this node always among them; `advertised` is this node's own
    /// client address, for when the membership does not list it yet.
    pub async fn get(&self, cluster: &Cluster, advertised: &str) -> Vec<RouteMember> {
        let heard = self.heard(cluster).await;
        let status = cluster.status();
        let voters = status.voters();
        let members: Vec<_> = status.members.into_iter().map(|m| (m.id, m.info)).collect();
        route::live_members(&members, &voters, heard.as_ref(), (cluster.id(), advertised))
    }

    async fn heard(&self, cluster: &Cluster) -> Option<BTreeSet<NodeId>> {
        if let Some(heard) = cluster.heard_from() {
            return Some(heard);
        }
        let (leader, _) = cluster.leader()?;
        {
            let last = self.last.lock().expect("live members lock");
            if let Some(a) = last.as_ref().filter(|a| a.leader == leader && a.at.elapsed() < FRESH) {
                return a.heard.clone();
            }
        }
        let heard = match tokio::time::timeout(ASK_TIMEOUT, cluster.leader_heard_from()).await {
            Ok(Ok(heard)) => Some(heard),
            Ok(Err(e)) => {
                tracing::debug!(leader, error = %e, "could not ask the leader which members are live");
                None
            }
            Err(_) => {
                tracing::debug!(leader, "the leader did not say in time which members are live");
                None
            }
        };
        *self.last.lock().expect("live members lock") =
            Some(Asked { at: Instant::now(), leader, heard: heard.clone() });
        heard
    }
}
