//! The data groups' lifecycle: the metadata group's leader starts each data group the metadata
//! adds (with the metadata group's voters), and each group's leader hands its leadership to the node
//! whose turn it is, so every node leads its share of the groups, also after failures heal and
//! after nodes join.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::broker::Broker;
use crate::cluster::Cluster;
use crate::cluster::replica_set::{SPREAD_FROM, replica_set};
use crate::raft::{GroupId, GroupRegistry, NodeId, NodeInfo};

/// How often the metadata group's leader looks for data groups to start.
const START_EVERY: Duration = Duration::from_secs(1);
/// How often a group's leader looks whether the leadership is some other node's turn; also how
/// long a new leader keeps it before it looks (a leader just elected after a failure stays while
/// the cluster settles).
const BALANCE_EVERY: Duration = Duration::from_secs(2);
/// Pause after a hand-over that did not happen (the node whose turn it is could not take it),
/// doubled up to [`MAX_BALANCE_BACK_OFF`].
const BALANCE_BACK_OFF: Duration = Duration::from_secs(5);
const MAX_BALANCE_BACK_OFF: Duration = Duration::from_secs(60);
/// A member that has not acknowledged the leader for this long is not handed the leadership.
const RECENTLY: Duration = Duration::from_secs(1);

/// On the metadata group's leader (`metadata` its state): starts every data group the metadata
/// lists whose replica here has not been started, with the metadata group's voters. Starting a
/// group on more than one node with the same voters is harmless (each writes the same first
/// membership entry).
/// Groups found started are remembered and not asked again; the job looks again when the
/// metadata changes (a group added), or every [`START_EVERY`] while one is not started yet.
pub async fn start_data_groups(holding: Cluster, metadata: Broker, clusters: GroupRegistry<Cluster>) {
    // In a data directory of layout 2 the metadata group is the first data group: started.
    let mut started = std::collections::BTreeSet::from([holding.group().id()]);
    let mut changes = metadata.watch_metadata();
    loop {
        changes.borrow_and_update();
        let listed = metadata.settings().data_groups;
        let voters: BTreeMap<NodeId, NodeInfo> =
            holding.group().status().members.into_iter().filter(|m| m.voter).map(|m| (m.id, m.info)).collect();
        let waiting: Vec<GroupId> =
            (GroupId::FIRST.0..=listed).map(GroupId).filter(|id| !started.contains(id)).collect();
        for id in waiting {
            // Opened by every node as it applies the change (`Replicas::follow_metadata`).
            let Some(cluster) = clusters.get(id) else { continue };
            let group = cluster.group();
            match group.is_initialized().await {
                Ok(true) => {
                    started.insert(id);
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(group = id.0, error = %e, "data group: state unknown");
                    continue;
                }
            }
            match group.initialize(voters.clone()).await {
                Ok(()) => {
                    tracing::info!(group = id.0, voters = ?voters.keys().collect::<Vec<_>>(), "started a data group")
                }
                Err(e) => tracing::debug!(group = id.0, error = %e, "starting a data group failed; trying again"),
            }
        }
        if (GroupId::FIRST.0..=listed).all(|id| started.contains(&GroupId(id))) {
            // All started: nothing to do until the metadata adds a group.
            let _ = changes.changed().await;
        } else {
            tokio::time::sleep(START_EVERY).await;
        }
    }
}

/// How often a data group's leader compares its members with the metadata group's.
const MEMBERS_EVERY: Duration = Duration::from_secs(1);

/// On a data group's leader: makes the group's members those [`replica_set`] picks from the
/// metadata group's voters, as this node's replica of it knows them. Below [`SPREAD_FROM`] voters
/// that is every member (a node joining the cluster joins each group as a learner first, then as
/// a voter); from that many, the group's three, each joining as a learner, then the
/// voters replaced, then any other learner removed. A node joins or leaves the cluster through the
/// metadata group (`cluster add-node`, `remove-node`); each data group follows within about a
/// second.
pub async fn follow_membership(cluster: Cluster, metadata: Cluster) {
    let id = cluster.group().id();
    let mut back_off = START_EVERY;
    loop {
        tokio::time::sleep(back_off).await;
        let target = metadata.group().status();
        let here = cluster.group().status();
        let result = async {
            // Where the metadata group is going: a member being removed may never see it arrive.
            let voters = metadata.group().next_voters();
            let set: BTreeSet<NodeId> = replica_set(id, &voters).into_iter().collect();
            let every_member = voters.len() < SPREAD_FROM;
            let joining: BTreeMap<NodeId, NodeInfo> = target
                .members
                .iter()
                .filter(|m| every_member || set.contains(&m.id))
                .map(|m| (m.id, m.info.clone()))
                .collect();
            let members: BTreeSet<NodeId> = here.members.iter().map(|m| m.id).collect();
            for (node, info) in joining.iter().filter(|(node, _)| !members.contains(node)) {
                tracing::info!(group = id.0, node, "a member of the cluster joins the data group");
                cluster.group().add_learner(*node, info.clone()).await?;
            }
            if set != here.voters() && !set.is_empty() {
                tracing::info!(group = id.0, voters = ?set, "the data group takes its voters");
                cluster.group().change_voters(set.clone()).await?;
            }
            let leaving: BTreeSet<NodeId> = cluster
                .group()
                .status()
                .members
                .iter()
                .filter(|m| !m.voter && !joining.contains_key(&m.id))
                .map(|m| m.id)
                .collect();
            if !leaving.is_empty() {
                tracing::info!(group = id.0, nodes = ?leaving, "learners the data group no longer places leave it");
                cluster.group().remove_learners(leaving).await?;
            }
            Ok::<(), crate::raft::GroupError>(())
        }
        .await;
        back_off = match result {
            Ok(()) => MEMBERS_EVERY,
            Err(e) => {
                tracing::debug!(group = id.0, error = %e, "following the cluster's members failed; trying again");
                (back_off * 2).min(MAX_BALANCE_BACK_OFF)
            }
        };
    }
}

/// On a group's leader, while the cluster runs more than one data group and balances leaders
/// (`balance_leaders`): hands the leadership to the voter whose turn it is ([`replica_set`]'s
/// first, from the metadata group's voters `members` knows) once that voter is one of the
/// group's, caught up, answering and with a clock in step. Backs off while the hand-over does not
/// happen.
pub async fn balance_leaders(cluster: Cluster, metadata: Broker, members: Cluster) {
    let id = cluster.group().id();
    let mut back_off = BALANCE_BACK_OFF;
    loop {
        tokio::time::sleep(BALANCE_EVERY).await;
        let settings = metadata.settings();
        if settings.data_groups <= 1 || !settings.balance_leaders {
            continue;
        }
        let status = cluster.group().status();
        let cluster_voters = members.group().next_voters();
        let voters = status.voters();
        let whose_turn = replica_set(id, &cluster_voters).first().copied().filter(|to| voters.contains(to));
        let Some(to) = whose_turn.filter(|&to| to != status.id) else {
            back_off = BALANCE_BACK_OFF;
            continue;
        };
        // Never to a node whose clock is off: it would stamp its time into the group's commands.
        if !members.clock_in_step(to) {
            continue;
        }
        let caught_up = status.replication.get(&to).copied().flatten().map(|(index, _)| index) >= status.committed;
        let answering = status.acknowledged.get(&to).copied().flatten().is_some_and(|ago| ago < RECENTLY);
        if !caught_up || !answering {
            continue;
        }
        tracing::info!(group = id.0, to, "handing the leadership to the node whose turn it is");
        if let Err(e) = cluster.group().transfer_leader(to).await {
            tracing::debug!(group = id.0, to, error = %e, "hand-over failed");
        }
        // Still leading after this pause: the hand-over did not happen.
        tokio::time::sleep(back_off).await;
        back_off = (back_off * 2).min(MAX_BALANCE_BACK_OFF);
    }
}
