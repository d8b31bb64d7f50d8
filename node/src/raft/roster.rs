//! Who the raft port admits on mutual TLS (`auth::member::Roster`): a member of the group a Raft
//! message addresses, or of the cluster (the metadata group) for the other calls, as this node's
//! replicas know their memberships now.
//!
//! A replica that knows no membership yet (a data group being placed here, a node being added)
//! goes by the metadata group's; a node that knows neither (never initialised, not yet added)
//! goes by the `[[members]]` table of its configuration, or admits any member of this cluster
//! when that names no other node: it holds nothing yet, and the leader adding it must reach it.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;

use openraft::async_runtime::watch::WatchReceiver;
use tonic::codegen::http::HeaderMap;

use crate::auth::member::Roster;
use crate::raft::{GROUP_HEADER, GroupId, NodeId, RaftGroups};

pub struct GroupRoster {
    groups: RaftGroups,
    /// The `[[members]]` of the configuration.
    initial: BTreeSet<NodeId>,
}

impl GroupRoster {
    pub fn new(groups: RaftGroups, initial: BTreeSet<NodeId>) -> GroupRoster {
        GroupRoster { groups, initial }
    }

    /// The members of `group` as this node's replica knows them; `None` when it runs none, or it
    /// knows no membership yet.
    fn members_of(&self, group: GroupId) -> Option<BTreeSet<NodeId>> {
        let raft = self.groups.raft(group)?;
        let metrics = raft.metrics();
        let members: BTreeSet<NodeId> =
            metrics.borrow_watched().membership_config.membership().nodes().map(|(id, _)| *id).collect();
        (!members.is_empty()).then_some(members)
    }

    fn admits_to(&self, id: NodeId, group: Option<GroupId>) -> bool {
        let known = group.and_then(|g| self.members_of(g)).or_else(|| self.members_of(GroupId::METADATA));
        match known {
            Some(members) => members.contains(&id),
            // A table of this node alone names no one who may call it.
            None => self.initial.len() <= 1 || self.initial.contains(&id),
        }
    }
}

impl Roster for GroupRoster {
    fn admits(&self, id: u64, headers: &HeaderMap, replication: bool) -> bool {
        let group = headers.get(GROUP_HEADER).and_then(|v| v.to_str().ok()?.parse().ok()).map(GroupId);
        self.admits_to(id, if replication { group } else { None })
    }

    fn gone(&self, id: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let roster = GroupRoster { groups: self.groups.clone(), initial: self.initial.clone() };
        Box::pin(async move {
            // The server metrics change with the leader, the vote and the membership only, not
            // with every append: an idle connection wakes when a membership may have changed.
            let mut changes = match roster.groups.raft(GroupId::METADATA) {
                Some(raft) => raft.server_metrics(),
                None => return std::future::pending().await,
            };
            while roster.admits_to(id, None) {
                if changes.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        })
    }
}
