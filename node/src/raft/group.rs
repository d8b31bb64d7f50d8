//! One Raft group as the rest of the node sees it: propose, read index, who leads, membership
//! changes and a status in RockRaft's own types. Nothing outside `raft/` names openraft; a
//! node that runs several groups holds one [`Group`] per group.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use openraft::Instant as _;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{ClientWriteError, LinearizableReadError, RaftError};
use openraft::impls::ProgressResponder;
use openraft::metrics::WaitError;
use openraft::{RaftMetrics, ReadPolicy, ServerState};

use crate::broker::Reply;
use crate::raft::{CommandBytes, NodeId, NodeInfo, Raft, TypeConfig};

/// Why the group did not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// This node does not lead the group (any more); the leader, where known.
    #[error("this node does not lead the group")]
    NotLeader(Option<NodeInfo>),
    /// A wait ran out before the group got there.
    #[error("not done within {0:?}")]
    Timeout(Duration),
    /// Raft refused or failed the request (shutting down, a storage error, a membership change
    /// already under way).
    #[error("{0}")]
    Raft(String),
}

/// The part a node plays in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    Learner,
    ShuttingDown,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Learner => "learner",
            Role::ShuttingDown => "shutdown",
        }
    }
}

/// A member of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: NodeId,
    pub info: NodeInfo,
    pub voter: bool,
}

/// What this node knows of its group at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupStatus {
    pub id: NodeId,
    pub role: Role,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: Option<u64>,
    pub committed: Option<u64>,
    /// The term of the last entry known committed.
    pub committed_term: Option<u64>,
    pub applied: Option<u64>,
    pub purged: Option<u64>,
    /// Every member, by id.
    pub members: Vec<Member>,
    /// The voters of the configuration the group is moving to during a membership change (the
    /// last of a joint configuration; a member being removed may never see the final one), else
    /// its voters.
    pub next_voters: BTreeSet<NodeId>,
    /// On the leader: the last index (and its term) each member is known to hold; `None` for a
    /// member that has not answered yet. Empty on other nodes.
    pub replication: BTreeMap<NodeId, Option<(u64, u64)>>,
    /// On the leader: how long ago each member last acknowledged a heartbeat or an append
    /// (`None`: not since this node leads). Empty on other nodes.
    pub acknowledged: BTreeMap<NodeId, Option<Duration>>,
    /// Why Raft stopped, if it did (a storage error).
    pub fatal: Option<String>,
}

impl GroupStatus {
    fn of(m: &RaftMetrics<TypeConfig>) -> GroupStatus {
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        GroupStatus {
            id: m.id,
            role: match m.state {
                ServerState::Leader => Role::Leader,
                ServerState::Follower => Role::Follower,
                ServerState::Candidate => Role::Candidate,
                ServerState::Learner => Role::Learner,
                ServerState::Shutdown => Role::ShuttingDown,
            },
            term: m.current_term,
            leader: m.current_leader,
            last_log_index: m.last_log_index,
            committed: m.local_committed.as_ref().map(|l| l.index),
            committed_term: m.local_committed.as_ref().map(|l| l.leader_id.term),
            applied: m.last_applied.as_ref().map(|l| l.index),
            purged: m.purged.as_ref().map(|l| l.index),
            next_voters: membership.get_joint_config().last().cloned().unwrap_or_default(),
            members: membership
                .nodes()
                .map(|(id, info)| Member { id: *id, info: info.clone(), voter: voters.contains(id) })
                .collect(),
            replication: m
                .replication
                .iter()
                .flatten()
                .map(|(id, matched)| (*id, matched.as_ref().map(|l| (l.index, l.leader_id.term))))
                .collect(),
            acknowledged: m
                .heartbeat
                .iter()
                .flatten()
                .map(|(id, acked)| (*id, acked.as_ref().map(|at| at.elapsed())))
                .collect(),
            fatal: m.running_state.as_ref().err().map(|e| e.to_string()),
        }
    }

    pub fn is_leader(&self) -> bool {
        self.leader == Some(self.id)
    }

    pub fn voters(&self) -> BTreeSet<NodeId> {
        self.members.iter().filter(|m| m.voter).map(|m| m.id).collect()
    }

    pub fn member(&self, id: NodeId) -> Option<&NodeInfo> {
        self.members.iter().find(|m| m.id == id).map(|m| &m.info)
    }
}

/// This node's leadership of a term, as taken when a write began: a write made with it is refused
/// once another leader took over, so a time stamped under it is never written by a later term.
pub struct Lead {
    term: u64,
    committed: openraft::alias::CommittedLeaderIdOf<TypeConfig>,
}

impl Lead {
    pub fn term(&self) -> u64 {
        self.term
    }
}

/// One Raft group. Clones share the group.
#[derive(Clone)]
pub struct Group {
    id: crate::raft::GroupId,
    raft: Raft,
    metrics: openraft::alias::WatchReceiverOf<TypeConfig, RaftMetrics<TypeConfig>>,
}

/// How a group's Raft runs (the node's `[raft]` settings).
#[derive(Debug, Clone)]
pub struct GroupOptions {
    pub node_id: NodeId,
    /// The cluster's name: members of another cluster are refused.
    pub name: String,
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
}

impl GroupOptions {
    fn config(&self) -> Result<openraft::Config, GroupError> {
        openraft::Config {
            cluster_name: self.name.clone(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            // openraft's own policy would purge the message log; retention builds snapshots instead.
            snapshot_policy: openraft::SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: 0,
            enable_pre_vote: Some(true),
            // A leader that stops hearing a quorum (it can send but not receive) goes quiet once
            // its lease (election_timeout_max) is over, so the members that can talk elect another
            // within an election timeout instead of hearing its heartbeats for as long as it lasts.
            // The shortest interval openraft allows: the lease plus one election timeout.
            quorum_loss_probe_interval: Some(self.election_timeout_max_ms * 2),
            ..Default::default()
        }
        .validate()
        .map_err(|e| GroupError::Raft(e.to_string()))
    }
}

impl Group {
    /// Starts this node's replica of a group over its log and state machine.
    pub async fn start(
        options: &GroupOptions,
        network: crate::raft::Network,
        log: crate::raft::LogStore,
        state_machine: crate::raft::StateMachine,
    ) -> Result<Group, GroupError> {
        let config = std::sync::Arc::new(options.config()?);
        let id = network.group;
        let raft = Raft::new(options.node_id, config, network, log, state_machine)
            .await
            .map_err(|e| GroupError::Raft(e.to_string()))?;
        let metrics = raft.metrics();
        Ok(Group { id, raft, metrics })
    }

    /// Which group of the cluster this is.
    pub fn id(&self) -> crate::raft::GroupId {
        self.id
    }

    /// The Raft service's handle (served on the raft port).
    pub(crate) fn raft(&self) -> &Raft {
        &self.raft
    }

    pub fn status(&self) -> GroupStatus {
        GroupStatus::of(&self.metrics.borrow_watched())
    }

    /// Who leads, as this node knows it, without copying the whole status.
    pub fn leader_id(&self) -> Option<NodeId> {
        self.metrics.borrow_watched().current_leader
    }

    /// The leader's id and address, where known.
    pub fn leader(&self) -> Option<(NodeId, NodeInfo)> {
        let m = self.metrics.borrow_watched();
        let id = m.current_leader?;
        let info = m.membership_config.membership().get_node(&id)?.clone();
        Some((id, info))
    }

    pub fn is_leader(&self) -> bool {
        let m = self.metrics.borrow_watched();
        m.current_leader == Some(m.id)
    }

    /// The voters the group is going to (the last configuration of a joint one), with where each
    /// is reached.
    pub fn next_voters(&self) -> BTreeMap<NodeId, NodeInfo> {
        let m = self.metrics.borrow_watched();
        let membership = m.membership_config.membership();
        let next = membership.get_joint_config().last().cloned().unwrap_or_default();
        membership.nodes().filter(|(id, _)| next.contains(id)).map(|(id, info)| (*id, info.clone())).collect()
    }

    /// The log id of the membership in force here: it changes with every membership change.
    pub fn membership_id(&self) -> Option<crate::raft::LogId> {
        *self.metrics.borrow_watched().membership_config.log_id()
    }

    /// Whether this node is one of the group's voters (in any configuration of a joint one).
    pub fn is_voter(&self) -> bool {
        let m = self.metrics.borrow_watched();
        m.membership_config.membership().voter_ids().any(|id| id == m.id)
    }

    /// Why Raft stopped, if it did (a storage error).
    pub fn fatal(&self) -> Option<String> {
        self.metrics.borrow_watched().running_state.as_ref().err().map(|e| e.to_string())
    }

    /// This node's leadership now, or the leader to ask instead (where known).
    pub fn lead(&self) -> Result<Lead, Option<NodeInfo>> {
        match self.raft.as_leader() {
            Ok(l) => Ok(Lead { term: l.leader_id().term, committed: l.to_committed_leader_id() }),
            Err(f) => Err(f.leader_node),
        }
    }

    /// Hands `payload` to Raft as one entry under `lead`; the returned future answers with its
    /// reply once it is committed and applied here. Submitting returns as soon as Raft took the
    /// entry, so entries submitted in turn are written in that order.
    pub async fn submit(
        &self,
        lead: &Lead,
        payload: Bytes,
    ) -> Result<impl Future<Output = Result<Reply, GroupError>> + use<>, GroupError> {
        let (responder, applied) = ProgressResponder::complete_only();
        self.raft
            .write(CommandBytes(payload))
            .with_leader(lead.committed)
            .responder(responder)
            .await
            .map_err(|e| GroupError::Raft(e.to_string()))?;
        Ok(async move {
            match applied.await {
                Ok(Ok(written)) => Ok(written.data),
                Ok(Err(ClientWriteError::ForwardToLeader(f))) => Err(GroupError::NotLeader(f.leader_node)),
                Ok(Err(e)) => Err(GroupError::Raft(e.to_string())),
                Err(_) => Err(GroupError::Raft("raft stopped before the write was answered".into())),
            }
        })
    }

    /// The commit index, confirmed by a quorum, on this node as leader.
    pub async fn read_index(&self) -> Result<u64, GroupError> {
        match self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(read) => Ok(read.index()),
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                Err(GroupError::NotLeader(f.leader_node))
            }
            Err(e) => Err(GroupError::Raft(e.to_string())),
        }
    }

    /// Waits until this node has applied `index`.
    pub async fn wait_applied(&self, index: u64, within: Duration) -> Result<(), GroupError> {
        let waited = self.raft.wait(Some(within)).applied_index_at_least(Some(index), "applying").await;
        waited.map(drop).map_err(|e| wait_error(e, within))
    }

    /// Waits until `leads` holds of who leads (`None`: nobody known), or `within` passes.
    pub async fn wait_leader(
        &self,
        within: Duration,
        leads: impl Fn(Option<NodeId>) -> bool + Send + 'static,
    ) -> Result<(), GroupError> {
        let waited = self.raft.wait(Some(within)).metrics(move |m| leads(m.current_leader), "a leader").await;
        waited.map(drop).map_err(|e| wait_error(e, within))
    }

    /// Follows the group's status as it changes.
    pub fn watch(&self) -> GroupWatch {
        GroupWatch { metrics: self.raft.metrics(), server: self.raft.server_metrics() }
    }

    /// Raft's longest election timeout (also the leader's lease).
    pub fn election_timeout_max(&self) -> Duration {
        Duration::from_millis(self.raft.config().election_timeout_max)
    }

    /// Whether this node may be elected (a node whose clock is off may not).
    pub fn set_electable(&self, electable: bool) {
        self.raft.runtime_config().elect(electable);
    }

    /// Asks the leader to hand its leadership to `to`.
    pub async fn transfer_leader(&self, to: NodeId) -> Result<(), GroupError> {
        self.raft.trigger().transfer_leader(to).await.map_err(|e| GroupError::Raft(e.to_string()))
    }

    /// Asks for a snapshot to be built now.
    pub async fn snapshot(&self) -> Result<(), GroupError> {
        self.raft.trigger().snapshot().await.map_err(|e| GroupError::Raft(e.to_string()))
    }

    /// Purges the log up to `upto`, as far as the current snapshot covers it (at once, or once
    /// the replication still reading those entries is done). A snapshot found at start, built
    /// by a node that stopped before openraft took it, purges nothing by itself.
    pub async fn purge_log(&self, upto: u64) -> Result<(), GroupError> {
        self.raft.trigger().purge_log(upto).await.map_err(|e| GroupError::Raft(e.to_string()))
    }

    pub async fn is_initialized(&self) -> Result<bool, GroupError> {
        self.raft.is_initialized().await.map_err(|e| GroupError::Raft(e.to_string()))
    }

    /// Starts the group with these members (once, on one node).
    pub async fn initialize(&self, members: BTreeMap<NodeId, NodeInfo>) -> Result<(), GroupError> {
        self.raft.initialize(members).await.map_err(|e| GroupError::Raft(e.to_string()))
    }

    /// Adds `id` as a learner and waits until Raft counts it as caught up (openraft counts one
    /// within 5,000 entries, even one that never answered: callers check replication too).
    pub async fn add_learner(&self, id: NodeId, info: NodeInfo) -> Result<(), GroupError> {
        self.raft.add_learner(id, info, true).await.map(drop).map_err(|e| GroupError::Raft(e.to_string()))
    }

    /// Makes `voters` the group's voters; other members stay learners.
    pub async fn change_voters(&self, voters: BTreeSet<NodeId>) -> Result<(), GroupError> {
        self.raft.change_membership(voters, false).await.map(drop).map_err(|e| GroupError::Raft(e.to_string()))
    }

    /// Removes the learners `ids` from the group.
    pub async fn remove_learners(&self, ids: BTreeSet<NodeId>) -> Result<(), GroupError> {
        let change = openraft::ChangeMembers::RemoveNodes(ids);
        self.raft.change_membership(change, false).await.map(drop).map_err(|e| GroupError::Raft(e.to_string()))
    }

    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}

fn wait_error(e: WaitError, within: Duration) -> GroupError {
    match e {
        WaitError::Timeout(..) => GroupError::Timeout(within),
        e => GroupError::Raft(e.to_string()),
    }
}

/// How long [`GroupWatch::changed`] waits for the whole metrics to show a change the server
/// metrics announced: far longer than the few instructions between the two sends.
const METRICS_CATCH_UP: Duration = Duration::from_millis(100);

/// A view of the group that wakes when its status changes.
pub struct GroupWatch {
    metrics: openraft::alias::WatchReceiverOf<TypeConfig, RaftMetrics<TypeConfig>>,
    /// Who leads, the vote, this node's role and the membership only: unlike the whole metrics,
    /// these do not change with every heartbeat a leader sends, so an idle group wakes no one.
    server: openraft::alias::WatchReceiverOf<TypeConfig, openraft::metrics::RaftServerMetrics<TypeConfig>>,
}

/// The group stopped: no status changes will come.
#[derive(Debug)]
pub struct Stopped;

impl GroupWatch {
    pub fn status(&self) -> GroupStatus {
        GroupStatus::of(&self.metrics.borrow_watched())
    }

    /// The term this node leads in, if it does.
    pub fn leading(&self) -> Option<u64> {
        let m = self.metrics.borrow_watched();
        (m.current_leader == Some(m.id)).then_some(m.current_term)
    }

    /// Waits for a change of leader, vote, role or membership, and until [`Self::status`] shows it.
    pub async fn changed(&mut self) -> Result<(), Stopped> {
        self.server.changed().await.map_err(|_| Stopped)?;
        // openraft sends the whole metrics just after the server metrics, in the same report: a
        // status read in between would miss the change, and no other change may come to show it.
        let shown = |m: &RaftMetrics<TypeConfig>, s: &openraft::metrics::RaftServerMetrics<TypeConfig>| {
            m.current_leader == s.current_leader
                && m.state == s.state
                && m.vote == s.vote
                && m.membership_config.log_id() == s.membership_config.log_id()
        };
        // The report on its way shows it; openraft reports after every pass of its loop.
        let deadline = tokio::time::Instant::now() + METRICS_CATCH_UP;
        loop {
            if shown(&self.metrics.borrow_and_update(), &self.server.borrow_and_update()) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, self.metrics.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Stopped),
                Err(_) => return Ok(()),
            }
        }
    }

    /// Waits for any change of the status, replication progress and heartbeats included (a
    /// leader's status changes with every heartbeat answered: for short measurements only).
    pub async fn changed_any(&mut self) -> Result<(), Stopped> {
        self.metrics.changed().await.map_err(|_| Stopped)
    }
}
