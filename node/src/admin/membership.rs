//! The cluster and its membership: status, initialisation, adding and removing nodes, handing
//! leadership over, settings, the failover history, and what `cluster verify` compares.

use std::collections::BTreeMap;

use crate::admin::AdminServer;
use crate::admin::api::{
    GroupRow, MAX_CHECKSUMMED_RECORDS, MAX_CHECKSUMS, MemberInfo, NodeDisk, NodeStatus, Role, StateDigest,
};
use crate::admin::error::AdminError;
use crate::broker::failover::Failover;
use crate::broker::settings::{ClusterSettings, SettingsChange};
use crate::broker::{AdminCommand, Command, QueueSpan};
use crate::raft::{NodeId, NodeInfo};

/// How long `cluster init` waits for the first handle key (an election and one entry), and then
/// for each data group's first leader.
const INIT_KEY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long `AddNode` waits for the new learner to take the log before it gives up.
const LEARNER_CONTACT: std::time::Duration = std::time::Duration::from_secs(60);

fn role(role: crate::raft::Role) -> Role {
    match role {
        crate::raft::Role::Leader => Role::Leader,
        crate::raft::Role::Follower => Role::Follower,
        crate::raft::Role::Candidate => Role::Candidate,
        crate::raft::Role::Learner => Role::Learner,
        crate::raft::Role::ShuttingDown => Role::ShuttingDown,
    }
}

impl AdminServer {
    /// This node's status, its top figures of the group holding the metadata.
    pub fn status(&self) -> NodeStatus {
        self.status_with(&self.cluster)
    }

    /// This node's status, its top figures of Raft group `group` (unset or 0: the group holding
    /// the metadata).
    pub fn status_of(&self, group: Option<u32>) -> Result<NodeStatus, AdminError> {
        Ok(self.status_with(&self.cluster_of(group)?))
    }

    /// This node's replica of Raft group `group` (unset or 0: the group holding the metadata).
    fn cluster_of(&self, group: Option<u32>) -> Result<crate::cluster::Cluster, AdminError> {
        match group {
            None | Some(0) => Ok(self.cluster.clone()),
            Some(n) => self
                .parts
                .groups
                .get(crate::raft::GroupId(n))
                .ok_or_else(|| AdminError::NotFound(format!("this node runs no group {n}"))),
        }
    }

    fn status_with(&self, cluster: &crate::cluster::Cluster) -> NodeStatus {
        let m = cluster.status();
        NodeStatus {
            id: m.id,
            role: role(m.role),
            term: m.term,
            leader: m.leader,
            last_log_index: m.last_log_index,
            committed: m.committed,
            applied: m.applied,
            purged: m.purged,
            members: m
                .members
                .iter()
                .map(|n| MemberInfo {
                    id: n.id,
                    raft_addr: n.info.raft_addr.clone(),
                    client_addr: n.info.client_addr.clone(),
                    admin_addr: n.info.admin_addr.clone(),
                    voter: n.voter,
                    rack: n.info.rack.clone(),
                })
                .collect(),
            clock: self.cluster.clock_report(),
            disk: Box::new(NodeDisk { here: self.cluster.disk_here(), cluster: self.cluster.disk_report() }),
            refused_by: m
                .members
                .iter()
                .filter_map(|n| Some((n.id, self.cluster.refusals().refusing(&n.info.raft_addr)?)))
                .collect(),
            groups: self
                .parts
                .groups
                .all()
                .into_iter()
                .map(|(id, cluster)| {
                    let g = cluster.status();
                    GroupRow {
                        id: id.0,
                        role: role(g.role),
                        leader: cluster.leader().map(|(id, _)| id),
                        term: g.term,
                        committed: g.committed,
                        applied: g.applied,
                        elsewhere: !cluster.holds_replica(),
                    }
                })
                .collect(),
        }
    }

    pub(super) async fn init(&self) -> Result<String, AdminError> {
        let config = &self.config;
        let group = self.cluster.group();
        if group.is_initialized().await.map_err(AdminError::fault)? {
            return Ok("already initialized".into());
        }
        let members: BTreeMap<u64, NodeInfo> = if config.members.is_empty() {
            BTreeMap::from([(config.node_id, config.node_info())])
        } else {
            config
                .members
                .iter()
                .map(|m| {
                    let info = NodeInfo {
                        raft_addr: m.raft_addr.clone(),
                        client_addr: m.client_addr.clone(),
                        admin_addr: m.admin_addr.clone(),
                        rack: m.rack.clone(),
                    };
                    (m.id, info)
                })
                .collect()
        };
        let n = members.len();
        group.initialize(members).await.map_err(|e| AdminError::Refused(e.to_string()))?;
        // The first leader proposes the first handle key; until it is in place no receive or
        // send that is handed a handle is served, so init answers once it is (or says it is not).
        let keyed = self.wait_for_handle_key().await;
        // The metadata group's leader starts the data groups: sends wait for their leaders.
        let led = self.wait_for_data_groups().await;
        Ok(match (keyed, led) {
            (true, true) => format!("initialized a group of {n}"),
            (false, _) => format!(
                "initialized a group of {n}; its first handle key is not in place yet (sends and receives that need \
                 one are refused until it is)"
            ),
            (true, false) => format!(
                "initialized a group of {n}; a data group has no leader yet (sends to its queues wait until it has)"
            ),
        })
    }

    /// Whether every data group this node runs has a leader, waiting up to [`INIT_KEY_WAIT`].
    async fn wait_for_data_groups(&self) -> bool {
        let deadline = tokio::time::Instant::now() + INIT_KEY_WAIT;
        let metadata = self.cluster.group().id();
        loop {
            let groups = self.parts.groups.all();
            if groups.iter().filter(|(id, _)| *id != metadata).all(|(_, c)| c.status().leader.is_some()) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Whether this node has applied a handle key, waiting up to [`INIT_KEY_WAIT`] for one.
    async fn wait_for_handle_key(&self) -> bool {
        let deadline = tokio::time::Instant::now() + INIT_KEY_WAIT;
        let mut pause = std::time::Duration::from_millis(10);
        loop {
            if self.parts.broker.access(|t| !t.handle_keys.is_empty()) {
                return true;
            }
            if tokio::time::Instant::now() + pause > deadline {
                return false;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(500));
        }
    }

    /// On the leader: `id` joins as a learner, takes the log, then becomes a voter.
    pub(super) async fn add_node(&self, id: NodeId, info: NodeInfo) -> Result<String, AdminError> {
        // Routes hand this address to clients: it must be one they can dial.
        super::config::check_dialable(&info.client_addr)
            .map_err(|e| AdminError::Invalid(format!("client_addr: {e}")))?;
        let group = self.cluster.group();
        // A voter already: the same addresses are an add-node retried after it took effect; other
        // ones would re-point a member (a typo, or an id reused), which is refused.
        if let Some(member) = group.status().members.into_iter().find(|m| m.id == id && m.voter) {
            return match member.info == info {
                true => Ok(format!("node {id} is a member already")),
                false => Err(AdminError::Refused(format!(
                    "node {id} is a member already, at {}: remove-node it first to add a node at {} (under a new id, \
                     if its data directory is new)",
                    member.info.raft_addr, info.raft_addr
                ))),
            };
        }
        // Checked before this node dials it with the cluster's credentials.
        self.check_new_member(id, &info)?;
        let raft_addr = info.raft_addr.clone();
        if let Err(why) = self.cluster.presents_member(&raft_addr, id, LEARNER_CONTACT).await {
            return Err(AdminError::Refused(format!(
                "node {id} at {raft_addr} is not member {id} by its certificate ({why}); nothing was changed"
            )));
        }
        self.same_layout(id, &raft_addr).await?;
        group.add_learner(id, info).await.map_err(|e| AdminError::Refused(e.to_string()))?;
        self.learner_reached(id, &raft_addr).await?;
        let mut voters = group.status().voters();
        voters.insert(id);
        group.change_voters(voters).await.map_err(|e| AdminError::Refused(e.to_string()))?;
        Ok(format!("node {id} added"))
    }

    /// Refuses, before anything is dialled, an address no member could dial, another member's
    /// address, and a learner's id at another address than the one it was added at.
    fn check_new_member(&self, id: NodeId, info: &NodeInfo) -> Result<(), AdminError> {
        super::config::check_dialable(&info.raft_addr).map_err(|e| AdminError::Invalid(format!("raft_addr: {e}")))?;
        for member in self.cluster.group().status().members {
            if member.id != id && member.info.raft_addr == info.raft_addr {
                return Err(AdminError::Refused(format!(
                    "{} is the raft address of member {}: a new node needs its own; nothing was changed",
                    info.raft_addr, member.id
                )));
            }
            if member.id == id && member.info.raft_addr != info.raft_addr {
                return Err(AdminError::Refused(format!(
                    "node {id} is a learner already, at {}: remove-node it first to add it at {}; nothing was changed",
                    member.info.raft_addr, info.raft_addr
                )));
            }
        }
        Ok(())
    }

    /// Refuses a node whose data directory keeps the metadata in another group than this
    /// cluster does (layout 2, group 1, against 3, group 0): it would apply this cluster's
    /// metadata entries as a data group's, or never take them. Every node of layout 3 runs group
    /// 0 from its first start, and none of layout 2 does. A node that does not answer yet is left
    /// to [`Self::learner_reached`], which gives it time to start.
    async fn same_layout(&self, id: NodeId, raft_addr: &str) -> Result<(), AdminError> {
        let metadata = self.cluster.group().id().0;
        match self.cluster.runs_group_at(crate::raft::GroupId(0), raft_addr).await {
            Ok(runs_group_0) if runs_group_0 != (metadata == 0) => {}
            _ => return Ok(()),
        }
        let what_to_do = match metadata {
            0 => "start it on an empty data directory (no `layout` file) and run add-node again".to_string(),
            g => format!(
                "this cluster was upgraded from a one-group release and keeps its metadata in group {g} \
                 (data directory layout 2): stop node {id}, empty its data directory, write 2 into a file \
                 named `layout` there, start it and run add-node again"
            ),
        };
        Err(AdminError::Refused(format!(
            "node {id} at {raft_addr} keeps the metadata in another group than group {metadata}, where this \
             cluster keeps it: {what_to_do}; nothing was changed"
        )))
    }

    /// Waits until the learner `id` has taken part of the log, so it is known to be reachable
    /// and to accept this node (with mutual TLS: its certificate names `raft_addr`). openraft's
    /// own wait counts a learner that is within 5000 entries as caught up, even one that never
    /// answered.
    async fn learner_reached(&self, id: NodeId, raft_addr: &str) -> Result<(), AdminError> {
        let cluster = &self.cluster;
        let deadline = tokio::time::Instant::now() + LEARNER_CONTACT;
        loop {
            let matched = cluster.status().replication.get(&id).copied().flatten();
            if matched.is_some() {
                return Ok(());
            }
            let stays = "it stays a learner: fix it and run add-node again, or remove-node it";
            if !cluster.is_leader() {
                return Err(AdminError::Unavailable(format!(
                    "leadership moved while node {id} was being added; {stays}"
                )));
            }
            if let Some(why) = cluster.refusals().refusing(raft_addr) {
                return Err(AdminError::Refused(format!(
                    "node {id} at {raft_addr} refuses this node ({why}); {stays}"
                )));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AdminError::Refused(format!(
                    "node {id} at {raft_addr} has taken no entry within {LEARNER_CONTACT:?} (is it running, reachable, \
                     and does its certificate name that address?); {stays}"
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    pub(super) async fn remove_node(&self, id: NodeId) -> Result<String, AdminError> {
        let group = self.cluster.group();
        let mut voters = group.status().voters();
        if !voters.remove(&id) {
            return Err(AdminError::NotFound(format!("node {id} is not a voter")));
        }
        group.change_voters(voters).await.map_err(|e| AdminError::Refused(e.to_string()))?;
        Ok(format!("node {id} removed"))
    }

    /// Hands group `group`'s leadership (unset: the metadata's) to node `to`; on the node
    /// leading that group.
    pub(super) async fn transfer_leader(&self, to: NodeId, group: Option<u32>) -> Result<String, AdminError> {
        let cluster = self.cluster_of(group)?;
        let status = cluster.status();
        if status.role != crate::raft::Role::Leader {
            let led_by = status.leader.map_or("no node known here".to_string(), |l| format!("node {l}"));
            return Err(AdminError::Refused(format!(
                "this node does not lead group {}: ask its leader ({led_by})",
                cluster.group().id()
            )));
        }
        cluster.group().transfer_leader(to).await.map_err(|e| AdminError::Refused(e.to_string()))?;
        Ok(format!("leadership of group {} handed to node {to}", cluster.group().id()))
    }

    /// This node's replica of Raft group `group` (0: the group holding the metadata, also in a
    /// data directory of layout 2), for the checks that compare replicas group by group.
    fn replica(&self, group: u32) -> Result<crate::broker::Broker, AdminError> {
        let cluster = self.cluster_of(Some(group))?;
        // A node the group is not placed on keeps no current state of it: what it has would be
        // compared as if it were a replica's.
        if !cluster.holds_replica() {
            return Err(AdminError::NotFound(format!("this node holds no replica of group {group}")));
        }
        Ok(cluster.broker().clone())
    }

    /// This node's applied index and a digest of its replicated state, of group `group`.
    pub(super) fn digest(&self, group: u32) -> Result<StateDigest, AdminError> {
        let (applied, digest) = self.replica(group)?.digest()?;
        Ok(StateDigest { applied, digest })
    }

    /// Each queue's ConsumeQueue span up to log index `upto` of group `group` on this node.
    pub(super) async fn queue_spans(&self, group: u32, upto: u64) -> Result<Vec<QueueSpan>, AdminError> {
        let broker = self.replica(group)?;
        Ok(tokio::task::spawn_blocking(move || broker.queue_spans(upto)).await.map_err(AdminError::fault)??)
    }

    /// Checksums of the records of `from..to` of a queue and their messages, one per `chunk`.
    pub(super) async fn queue_checksums(
        &self,
        group: u32,
        topic: String,
        queue: u32,
        from: u64,
        to: u64,
        chunk: u64,
    ) -> Result<Vec<u32>, AdminError> {
        if to.saturating_sub(from) > MAX_CHECKSUMMED_RECORDS
            || to.saturating_sub(from).div_ceil(chunk.max(1)) > MAX_CHECKSUMS
        {
            return Err(AdminError::Invalid(format!(
                "at most {MAX_CHECKSUMMED_RECORDS} records and {MAX_CHECKSUMS} checksums a request"
            )));
        }
        let broker = self.replica(group)?;
        let sums = tokio::task::spawn_blocking(move || broker.queue_checksums(&topic, queue, from, to, chunk));
        Ok(sums.await.map_err(AdminError::fault)??)
    }

    pub(super) fn settings(&self) -> ClusterSettings {
        self.parts.broker.settings()
    }

    pub(super) async fn configure(&self, change: SettingsChange) -> Result<String, AdminError> {
        self.write(Command::Admin(AdminCommand::Configure(change))).await
    }

    /// The metadata group's failover history as this node has applied it, newest first.
    pub fn history(&self) -> Vec<Failover> {
        self.parts.broker.failovers()
    }

    /// The repairs nodes made of group `group`'s replicas (unset: of every group), newest first.
    pub fn repairs_of(&self, group: Option<u32>) -> Vec<crate::broker::repair::Repair> {
        let mut repairs = self.parts.broker.repairs();
        repairs.retain(|r| group.is_none_or(|g| g == r.group));
        repairs
    }

    /// Group `group`'s failover history (unset or 0: the metadata group's), newest first.
    pub fn history_of(&self, group: Option<u32>) -> Result<Vec<Failover>, AdminError> {
        Ok(self.cluster_of(group)?.broker().failovers())
    }
}
