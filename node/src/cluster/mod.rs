//! How a node reaches the leader: the one place that proposes writes (here, or forwarded to the
//! leader), asks for the read index, plans pops, and says why it could not ([`ClusterError`]).
//!
//! - [`Cluster`]: a cheap-clone handle over the group (`raft::Group`), the peer channels, the pop
//!   locks and the leader's clock; `request` proposes a command and hands back its family's
//!   outcome (`broker::Request`); `router`: every request that needs the leader goes there once.
//! - `clock`: the leader's clock stamped into commands; `pop`: pop planning on the leader;
//!   `members`: which members are live (the leader's view), for the routes clients get;
//! - `skew`: finding a member whose clock is off, which then does not lead;
//! - `peer`, `service`: `rockraft.v1.PeerService`, the internal calls to the leader, client and
//!   server (served on the raft port only).

pub mod clock;
mod coalesce;
pub mod disk;
mod error;
pub mod failover;
pub mod groups;
pub mod leadership;
pub mod lite;
mod members;
mod peer;
mod placement;
pub mod pop;
mod producers;
pub mod replica_set;
mod retries;
mod router;
mod service;
pub mod skew;
mod wire;
#[cfg(test)]
mod wire_test;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::broker::{Broker, Command, Refusal, Reply, Request, SendOutcome};
use crate::raft::contact::LeaderContact;
use crate::raft::{Group, GroupError, GroupStatus, NodeId, NodeInfo};
use crate::sessions::ProducerSessions;
use bytes::Bytes;
pub use clock::{LeaderClock, now_ms};
use coalesce::{Coalescer, Round};
pub use error::ClusterError;
pub use groups::Groups;
use peer::Peers;
use pop::PopLocks;
pub use producers::AskProducer;
use rockraft_proto::rockraft::SendBatch;
pub use service::PeerServer;

/// How long a read waits for this node to apply what the leader has committed.
const APPLY_WAIT: Duration = Duration::from_secs(2);
/// How long a new leader waits to apply its predecessors' entries before its first stamp; longer
/// than a read's wait, as a leader elected after a restart may have a long tail to apply.
const BACKLOG_WAIT: Duration = Duration::from_secs(10);
/// How long `catch_up` gives an election to produce a leader.
const ELECTION_WAIT: Duration = Duration::from_secs(3);
/// How long one forwarded send waits for the leader's answer before it is tried again.
const FORWARD_ATTEMPT: Duration = Duration::from_secs(1);
/// How long a held send waits for news of another leader before it tries again anyway.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long a write, or a request routed to the leader, waits out a moment with no leader (an
/// election, a leadership handed over by the balancer) before it answers `NoLeader`: about two
/// elections, within a client's timeout.
const WRITE_HOLD: Duration = Duration::from_secs(2);

/// Most client ids taken from one member's answer about a consumer group.
pub const MAX_REMOTE_CONSUMERS: usize = 65_536;

#[derive(Clone)]
pub struct ClusterOptions {
    pub node_id: NodeId,
    /// The largest command one log entry holds; a larger one is refused before it is proposed.
    pub max_entry_bytes: u64,
    /// Runs the filters and transaction checkers.
    pub plugins: std::sync::Arc<crate::plugin::PluginHost>,
    /// How calls to other members prove this node is one, and who refuses it.
    pub dialer: crate::raft::Dialer,
    /// Raft's `election_timeout_max` (also the leader's lease): how long an election may take.
    pub election_timeout_max: Duration,
    /// What this node counts (`/metrics`).
    pub meters: crate::metrics::Meters,
    /// This node's free space and the cluster's disk alarm: one for every group on the node,
    /// so each group's leader refuses what a low disk cannot take (`jobs::watch_disks` keeps it).
    pub disk: Arc<disk::DiskWatch>,
    /// The producers whose Telemetry streams this node holds (the proxy registers them).
    pub sessions: Arc<ProducerSessions>,
    /// This node's replica of the metadata (the metadata group's state) for a data group, whose
    /// own state holds only what placements copied of it (not plugins, keys or access); `None`
    /// for the group that holds it itself.
    pub metadata: Option<Broker>,
    /// The metadata group, whose voters say which nodes hold a data group's replicas
    /// ([`replica_set::replica_set`]): where a node that holds none asks who leads it. `None` for
    /// the group that holds the metadata.
    pub cluster_members: Option<Group>,
}

/// This node's view of its Raft group, and the way to the leader. Clones share everything.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    options: ClusterOptions,
    group: Group,
    broker: Broker,
    peers: Peers,
    /// Serializes the pops this node plans as leader, per (group, topic).
    pop_locks: PopLocks,
    /// One placement worked out and proposed at a time.
    placing: placement::PlacementGate,
    /// Where the next lite receive of each (group, client) starts in its subscriptions, and how
    /// many it looked at since one delivered.
    lite_cursors: lite::LiteCursors,
    clock: LeaderClock,
    /// What this node knows of the members' clocks.
    skew: skew::ClockSkew,
    /// Every voter's free space, and the alarm it raises.
    disk: Arc<disk::DiskWatch>,
    /// Held from stamping a command to handing it to Raft, so stamps grow in log order.
    proposing: tokio::sync::Mutex<()>,
    /// Rotates the queue pops start from.
    round_robin: AtomicU32,
    /// Sends received on this node, batched per queue and proposed (as leader) or forwarded.
    outgoing: Coalescer,
    /// Sends other members forwarded to this node as leader, batched per queue and proposed.
    forwarded: Coalescer,
    /// The messages of forwarded rounds being proposed: a member's retry of them waits for the
    /// first answer instead of writing them to the log again.
    pending: retries::PendingSends,
    /// When a leader last replicated here.
    contact: Arc<LeaderContact>,
    /// The last forward that failed: to which leader, and when. Cleared by a forward that
    /// leader answers.
    forward_failed: std::sync::Mutex<Option<ForwardFailure>>,
    /// The leadership changes this node saw.
    leader_changes: leadership::LeaderChanges,
    /// On a node that holds no replica of this data group: its leader, as a member last said.
    told_leader: std::sync::Mutex<Option<(NodeId, NodeInfo)>>,
    /// [`Cluster::holds_replica`] as last worked out, for the memberships (this group's, the
    /// metadata group's) it was worked out from.
    holds: std::sync::Mutex<Option<(Memberships, bool)>>,
}

/// The log ids of this group's membership and of the metadata group's.
type Memberships = (Option<crate::raft::LogId>, Option<crate::raft::LogId>);

#[derive(Clone, Copy)]
struct ForwardFailure {
    leader: NodeId,
    failed: tokio::time::Instant,
}

/// Which sends a lane batches: this node's clients', or those members forwarded to it.
#[derive(Clone, Copy)]
enum Lanes {
    Outgoing,
    Forwarded,
}

/// What proposing on this node came to.
enum Proposed {
    Applied(Reply),
    /// This node does not lead (any more); openraft may know who does.
    NotLeader(Option<NodeInfo>),
}

/// A command no member may forward (named by its family): an operator's request.
#[derive(Debug, thiserror::Error)]
#[error("a member may not forward {0}: it is an operator's request")]
pub(crate) struct NotForwardable(&'static str);

/// A write a member forwarded, as the leader reads it once: a send (batched with the others), or
/// another command, with its bytes as they go into the log.
pub(crate) enum Forwarded {
    Send(SendBatch),
    Other { bytes: Bytes, command: Command },
}

impl Forwarded {
    /// Bytes that are no command would only be skipped at apply: they never reach the log.
    pub(crate) fn read(bytes: Bytes) -> Result<Forwarded, crate::broker::DecodeError> {
        if let Some(batch) = Command::decode_send(&bytes) {
            return Ok(Forwarded::Send(batch));
        }
        let command = Command::decode(bytes.clone())?;
        Ok(Forwarded::Other { bytes, command })
    }

    /// Whether a member may forward this: what a member proposes on a client's behalf (sends,
    /// pops, acks, timers, transactions, lite topics) or for its own jobs (placements, failover
    /// and repair records, retention, plugin quarantines, the cluster's first handle key). Operator changes
    /// (users, rules, topics, groups, plugins, settings, offsets, an operator's resolution of a
    /// transaction) come with the operator's signature through the admin service instead, so
    /// being a member grants none of them.
    pub(crate) fn check(&self, broker: &Broker) -> Result<(), NotForwardable> {
        use crate::broker::AdminCommand;
        use crate::broker::access::AccessCommand;
        use crate::broker::plugins::PluginCommand;
        use crate::broker::pop::ConsumeCommand;
        use crate::broker::transaction::{Resolver, TransactionCommand};
        let Forwarded::Other { command, .. } = self else { return Ok(()) };
        let (allowed, family) = match command {
            Command::Send(_) | Command::DeadLetter(_) | Command::Timer(_) | Command::Lite(_) | Command::Place(_) => {
                (true, "")
            }
            Command::Consume(c) => (!matches!(c, ConsumeCommand::ResetOffset { .. }), "an offset reset"),
            Command::Transaction(t) => {
                (!matches!(t, TransactionCommand::Resolve { by: Resolver::Operator, .. }), "an operator's resolution")
            }
            Command::Admin(a) => {
                let own = matches!(
                    a,
                    AdminCommand::ReleaseHolds { .. } | AdminCommand::RecordFailover(_) | AdminCommand::RecordRepair(_)
                );
                (own, "a metadata change")
            }
            Command::Plugin(p) => (matches!(p, PluginCommand::Quarantine { .. }), "a plugin change"),
            // The first key only: rotating one is an operator's request.
            Command::Access(AccessCommand::RotateHandleKey { .. }) => {
                (broker.access(|t| t.handle_keys.is_empty()), "a handle key rotation")
            }
            Command::Access(_) => (false, "a change of users or rules"),
        };
        if allowed { Ok(()) } else { Err(NotForwardable(family)) }
    }
}

impl Cluster {
    pub fn new(group: Group, broker: Broker, options: ClusterOptions) -> Cluster {
        let peers = Peers::new(options.dialer.clone(), group.id());
        let disk = Arc::clone(&options.disk);
        Cluster {
            inner: Arc::new(Inner {
                options,
                group,
                broker,
                peers,
                pop_locks: PopLocks::default(),
                placing: Default::default(),
                lite_cursors: Default::default(),
                clock: LeaderClock::new(now_ms),
                skew: skew::ClockSkew::default(),
                disk,
                proposing: tokio::sync::Mutex::new(()),
                round_robin: AtomicU32::new(0),
                outgoing: Coalescer::default(),
                forwarded: Coalescer::default(),
                pending: retries::PendingSends::default(),
                contact: Arc::default(),
                forward_failed: std::sync::Mutex::new(None),
                leader_changes: Default::default(),
                told_leader: Default::default(),
                holds: Default::default(),
            }),
        }
    }

    /// What the Raft service tells of the appends leaders send here.
    pub fn leader_contact(&self) -> Arc<LeaderContact> {
        Arc::clone(&self.inner.contact)
    }

    /// Whether this node, a follower, can tell it is cut off from a majority, so a send is
    /// answered at once with a retriable status instead of held until the client's deadline:
    /// its last forward to the current leader failed less than an election timeout ago, and it
    /// has heard no leader for two election timeouts (longer than an election takes). A leader
    /// that just died is not that yet (the sends it fails are held through the election), nor
    /// is a slow one that still sends heartbeats; a node that hears the leader but cannot reach
    /// it answers before the client's deadline.
    ///
    /// Forwarding is tried again once the last failure is older than an election timeout, so
    /// a healed node serves again within about that.
    ///
    /// A node holding no replica of the group hears no leader of it whatever the network does,
    /// and may know an old leader only: it is never judged cut off, and its sends are held and
    /// passed on like through an election.
    pub fn cut_off(&self) -> bool {
        if !self.holds_replica() {
            return false;
        }
        let long = self.inner.options.election_timeout_max * 2;
        let last = *self.inner.forward_failed.lock().expect("forward failures");
        let Some(f) = last else { return false };
        // A leader is not judged here: the metrics' quorum-ack time is only as fresh as the last
        // metrics report, which an idle leader does not send. A leader past its lease refuses
        // proposals itself, and the send is answered before the client's deadline.
        let leader = self.group().leader_id();
        if leader == Some(self.id())
            || leader != Some(f.leader)
            || f.failed.elapsed() > self.inner.options.election_timeout_max
        {
            return false;
        }
        self.inner.contact.silence().is_none_or(|s| s > long)
    }

    /// The members' clocks as this node last read them.
    pub fn clock_report(&self) -> skew::ClockReport {
        self.inner.skew.report()
    }

    pub fn id(&self) -> NodeId {
        self.inner.options.node_id
    }

    /// The Raft group this node serves.
    pub fn group(&self) -> &Group {
        &self.inner.group
    }

    pub(in crate::cluster) fn plugins(&self) -> &std::sync::Arc<crate::plugin::PluginHost> {
        &self.inner.options.plugins
    }

    /// This node's replica of the metadata: plugin bindings, handle keys, access.
    pub fn metadata(&self) -> &Broker {
        self.inner.options.metadata.as_ref().unwrap_or(&self.inner.broker)
    }

    pub fn broker(&self) -> &Broker {
        &self.inner.broker
    }

    pub fn options(&self) -> &ClusterOptions {
        &self.inner.options
    }

    /// The producers connected to this node (the proxy registers them).
    fn sessions(&self) -> &Arc<ProducerSessions> {
        &self.inner.options.sessions
    }

    /// The leadership changes this node saw (fed by the `leaders` job).
    pub fn leader_changes(&self) -> &leadership::LeaderChanges {
        &self.inner.leader_changes
    }

    /// The members that refuse this node (another cluster secret, a certificate they do not take).
    pub fn refusals(&self) -> &crate::raft::refusals::Refusals {
        &self.peers().dialer().refusals
    }

    /// A channel to a member's raft port (calls carry this node's member credentials).
    pub fn member_channel(&self, raft_addr: &str) -> Result<crate::raft::PeerChannel, ClusterError> {
        self.peers().channel(raft_addr)
    }

    fn peers(&self) -> &Peers {
        &self.inner.peers
    }

    fn pop_locks(&self) -> &PopLocks {
        &self.inner.pop_locks
    }

    fn lite_cursors(&self) -> &lite::LiteCursors {
        &self.inner.lite_cursors
    }

    /// What this node knows of its group now, for status pages.
    pub fn status(&self) -> GroupStatus {
        self.group().status()
    }

    /// The leader's id and address, as this node currently knows them: as a member of the group,
    /// from its replica; else as a member last told it ([`Self::ask_leader`]).
    pub fn leader(&self) -> Option<(NodeId, NodeInfo)> {
        match self.holds_replica() {
            true => self.group().leader(),
            // Not its replica's: a node removed from the group may still name the old leader.
            false => self.inner.told_leader.lock().expect("told leader").clone(),
        }
    }

    /// Whether this node is one of the group's voters: it holds the group's messages and state.
    /// A node that is not (a group placed on other nodes, or one whose replica is still joining)
    /// passes what it is asked to the group's leader and reads nothing from its own replica.
    ///
    /// Also the metadata must place the group here ([`replica_set::replica_set`]): a node removed
    /// from a group may never hear of it (the leader stops replicating to it), and would go on
    /// taking itself for a voter.
    pub fn holds_replica(&self) -> bool {
        let Some(members) = &self.inner.options.cluster_members else { return true };
        let key = (self.group().membership_id(), members.membership_id());
        let mut holds = self.inner.holds.lock().expect("holds");
        match &*holds {
            Some((at, answer)) if *at == key => *answer,
            _ => {
                let answer = self.group().is_voter()
                    && replica_set::places(self.group().id(), &members.next_voters(), self.id());
                *holds = Some((key, answer));
                answer
            }
        }
    }

    /// Finds the group's leader if this node does not know it: a node holding no replica asks
    /// the group's members; a member waits briefly for an election.
    pub async fn find_leader(&self) -> Option<(NodeId, NodeInfo)> {
        if let Some(known) = self.leader() {
            return Some(known);
        }
        match self.holds_replica() {
            true => {
                let _ = self.group().wait_leader(ELECTION_WAIT, |l| l.is_some()).await;
                self.leader()
            }
            false => self.ask_leader(None).await,
        }
    }

    /// This group's figures for the operator's listings: this node's replica's, or, where it
    /// holds none, its leader's.
    pub async fn figures(&self) -> Result<crate::broker::GroupFigures, ClusterError> {
        if self.holds_replica() {
            // A walk over the group's queues and progress: off the async workers.
            let broker = self.broker().clone();
            return crate::simulation::blocking(move || broker.figures())
                .await
                .map_err(|e| ClusterError::Internal(format!("reading the group's figures: {e}")));
        }
        let (_, leader) = self.find_leader().await.ok_or(ClusterError::NoLeader)?;
        self.peers().figures(&leader.raft_addr).await
    }

    /// On a node that holds no replica, after `failed` (the leader it knew, if any) did not
    /// serve a request: asks the group's holders who leads now.
    pub(crate) async fn forget_leader(&self, failed: Option<NodeId>) {
        if self.ask_leader(failed).await.is_none() {
            *self.inner.told_leader.lock().expect("told leader") = None;
        }
    }

    /// On a node that holds no replica: asks the nodes the metadata places the group on who leads
    /// it, and keeps the first answer naming a leader other than `failed`.
    async fn ask_leader(&self, failed: Option<NodeId>) -> Option<(NodeId, NodeInfo)> {
        let voters = self.inner.options.cluster_members.as_ref()?.next_voters();
        for id in replica_set::replica_set(self.group().id(), &voters) {
            let Some(info) = voters.get(&id).filter(|_| id != self.id()) else { continue };
            match self.peers().leader(&info.raft_addr).await {
                Ok((leader, info)) if Some(leader) != failed => {
                    *self.inner.told_leader.lock().expect("told leader") = Some((leader, info.clone()));
                    return Some((leader, info));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(group = self.group().id().0, node = id, error = %e, "asking who leads failed")
                }
            }
        }
        None
    }

    pub fn is_leader(&self) -> bool {
        self.group().is_leader()
    }

    /// Every member's id and addresses.
    pub fn members(&self) -> Vec<(NodeId, NodeInfo)> {
        self.status().members.into_iter().map(|m| (m.id, m.info)).collect()
    }

    /// Every member of the cluster (of the metadata group), with its addresses: from five nodes
    /// a data group's own members are only the three holding its replicas.
    pub fn cluster_members(&self) -> Vec<(NodeId, NodeInfo)> {
        match &self.inner.options.cluster_members {
            Some(metadata) => metadata.status().members.into_iter().map(|m| (m.id, m.info)).collect(),
            None => self.members(),
        }
    }

    fn leader_addr(&self) -> Result<String, ClusterError> {
        self.leader().map(|(_, l)| l.raft_addr).ok_or(ClusterError::NoLeader)
    }

    /// A value that moves on with every call, for spreading work over queues.
    pub fn next_queue(&self) -> u32 {
        self.inner.round_robin.fetch_add(1, Ordering::Relaxed)
    }

    /// Proposes `command` and returns its reply once it is committed and applied. The leader
    /// stamps its time into it; a follower forwards it to the leader.
    ///
    /// A moment without a leader is waited out for up to [`WRITE_HOLD`]: `NoLeader`, from this
    /// node or from the one it forwarded to, means the command was not proposed (openraft refuses
    /// a write before appending it), so trying again cannot apply it twice.
    pub async fn write(&self, command: &Command) -> Result<Reply, ClusterError> {
        let deadline = tokio::time::Instant::now() + WRITE_HOLD;
        loop {
            let asked = self.leader().map(|(id, _)| id);
            match self.write_once(command).await {
                Err(ClusterError::NoLeader) if tokio::time::Instant::now() < deadline => {
                    self.await_other_leader(asked, deadline).await;
                }
                done => return done,
            }
        }
    }

    async fn write_once(&self, command: &Command) -> Result<Reply, ClusterError> {
        let mut leader = None;
        if self.is_leader() {
            let stamped = |now| {
                let mut c = command.clone();
                self.stamp(&mut c, now);
                c.encode()
            };
            match self.propose(stamped).await? {
                Proposed::Applied(reply) => {
                    self.place_after(command).await;
                    return Ok(reply);
                }
                Proposed::NotLeader(who) => leader = who,
            }
        }
        let command = command.encode();
        // Checked here too, so a command that cannot be stored does not cross the network.
        self.check_size(command.len())?;
        let addr = match leader {
            Some(l) => l.raft_addr,
            None => self.leader_addr()?,
        };
        self.peers().write(&addr, command).await
    }

    /// Proposes a command of a family whose reply type is known, and returns its outcome (or
    /// why apply refused it) once it is committed and applied.
    pub async fn request<R: Request>(&self, request: R) -> Result<Result<R::Outcome, Refusal>, ClusterError> {
        Ok(R::outcome(self.write(&request.command()).await?))
    }

    /// Stores `batch` and returns its reply once it is committed and applied. Concurrent sends
    /// to one queue go together: the leader proposes them as one entry, a follower forwards them
    /// to the leader as one request. Through an election or a leader that cannot be reached, the
    /// send is held and tried again, on whichever node leads next, for up to `hold`: a retry is
    /// safe, as the leader drops a message id it stored within the dedupe window and answers with
    /// the first result.
    pub async fn send(
        &self,
        batch: SendBatch,
        hold: Duration,
    ) -> Result<Result<Vec<SendOutcome>, Refusal>, ClusterError> {
        Ok(SendBatch::outcome(self.send_held(batch, hold).await?))
    }

    async fn send_held(&self, batch: SendBatch, hold: Duration) -> Result<Reply, ClusterError> {
        let deadline = tokio::time::Instant::now() + hold;
        self.check_size(Command::send_len(&batch))?;
        let cut_off = || ClusterError::Unreachable {
            addr: "a majority of the members".into(),
            reason: "this node is cut off from them".into(),
        };
        if self.cut_off() {
            return Err(cut_off());
        }
        loop {
            let leader = self.leader();
            // Never past the hold, however long the attempt would take (a leader cut off from
            // this node, or a node cut off from every other): the client gets a retriable answer
            // before its deadline. The round goes on; a retry of the send is deduplicated.
            let attempt = tokio::time::timeout_at(deadline, self.join(Lanes::Outgoing, batch.clone()));
            let answer = attempt.await.unwrap_or_else(|_| {
                Err(ClusterError::Unreachable {
                    addr: leader.as_ref().map_or_else(|| "no known leader".into(), |(_, l)| l.raft_addr.clone()),
                    reason: format!("no answer within {} ms", hold.as_millis()),
                })
            });
            match answer {
                Err(e) if e.is_transient() && self.cut_off() => return Err(cut_off()),
                Err(e) if e.is_transient() && tokio::time::Instant::now() < deadline => {
                    self.await_other_leader(leader.map(|(id, _)| id), deadline).await;
                }
                done => return done,
            }
        }
    }

    /// Waits until a leader other than `failed` is known, the deadline passes, or a short pause
    /// is over (the same leader may answer the next try: it was busy, not gone).
    async fn await_other_leader(&self, failed: Option<NodeId>, deadline: tokio::time::Instant) {
        let pause = (tokio::time::Instant::now() + RETRY_PAUSE).min(deadline);
        if !self.holds_replica() {
            // Asking holders that do not answer must not outlast the caller's deadline.
            if !matches!(tokio::time::timeout_at(deadline, self.ask_leader(failed)).await, Ok(Some(_))) {
                tokio::time::sleep_until(pause).await;
            }
            return;
        }
        let within = pause.saturating_duration_since(tokio::time::Instant::now());
        let changed = self.group().wait_leader(within, move |l| l.is_some() && l != failed).await;
        if changed.is_err() {
            tokio::time::sleep_until(pause).await;
        }
    }

    fn coalescer(&self, lanes: Lanes) -> &Coalescer {
        match lanes {
            Lanes::Outgoing => &self.inner.outgoing,
            Lanes::Forwarded => &self.inner.forwarded,
        }
    }

    /// Adds `batch` to its queue's lane and waits for the answer of the round it goes in.
    async fn join(&self, lanes: Lanes, batch: SendBatch) -> Result<Reply, ClusterError> {
        let (answer, round) = self.coalescer(lanes).join(batch, self.max_entry_bytes());
        if let Some(round) = round {
            let this = self.clone();
            // Its own task: the round answers every send in it, whichever client goes away.
            tokio::spawn(async move { this.deliver_rounds(lanes, round).await });
        }
        answer.await.map_err(|_| ClusterError::Raft("the send was dropped before it was proposed".into()))?
    }

    /// Delivers `round` and goes on with its lane's next round while sends wait.
    async fn deliver_rounds(&self, lanes: Lanes, mut round: Round) {
        loop {
            let answer = match (lanes, self.leader()) {
                (_, Some((id, _))) if id == self.id() => {
                    let pending = matches!(lanes, Lanes::Forwarded).then(|| self.inner.pending.register(&round.batch));
                    let answer = self.propose_round(&round.batch).await;
                    if let Some(pending) = pending {
                        self.inner.pending.answered(pending, &answer);
                    }
                    answer
                }
                // Forwarded here, so never forwarded again: the sender tries the next leader.
                (Lanes::Forwarded, _) | (Lanes::Outgoing, None) => Err(ClusterError::NoLeader),
                (Lanes::Outgoing, Some((id, leader))) => self.forward_round(id, &leader, &round.batch).await,
            };
            round.answer(answer);
            match self.coalescer(lanes).next(&round, self.max_entry_bytes()) {
                Some(next) => round = next,
                None => return,
            }
        }
    }

    async fn propose_round(&self, batch: &SendBatch) -> Result<Reply, ClusterError> {
        // A slow leader, for the tests of retried forwards: `cluster::propose_round=return(MS)`
        // holds each round MS ms before it is proposed (without blocking the runtime's threads).
        #[cfg(feature = "failpoints")]
        if let Some(Some(ms)) = fail::eval("cluster::propose_round", |ms| ms.and_then(|m| m.parse::<u64>().ok())) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let proposed = self
            .propose(|now| {
                let mut stamped = Command::Send(batch.clone());
                self.stamp(&mut stamped, now);
                stamped.encode()
            })
            .await?;
        match proposed {
            Proposed::Applied(reply) => Ok(reply),
            Proposed::NotLeader(_) => Err(ClusterError::NoLeader),
        }
    }

    async fn forward_round(&self, id: NodeId, leader: &NodeInfo, batch: &SendBatch) -> Result<Reply, ClusterError> {
        let forward = self.peers().write(&leader.raft_addr, Command::Send(batch.clone()).encode());
        // A leader cut off from this node (paused, partitioned) answers nothing: give up on it
        // once this node stops following it (an election began or another leader is known), or
        // after one attempt's time, so the send is tried on the next leader well before the
        // client's deadline. Whatever the old leader did with it, a retry is deduplicated.
        let deposed = async {
            match self.holds_replica() {
                true => self.group().wait_leader(FORWARD_ATTEMPT, move |l| l != Some(id)).await,
                // Nothing to follow here: give the leader the attempt's time.
                false => {
                    tokio::time::sleep(FORWARD_ATTEMPT).await;
                    Err(GroupError::Timeout(FORWARD_ATTEMPT))
                }
            }
        };
        let unanswered = |why: &str| ClusterError::Unreachable { addr: leader.raft_addr.clone(), reason: why.into() };
        let reply = tokio::select! {
            reply = forward => reply,
            deposed = deposed => Err(unanswered(match deposed {
                Ok(_) => "no longer the leader",
                Err(_) => "no answer within the forwarding attempt's time",
            })),
        };
        // What `cut_off` judges by.
        let mut failed = self.inner.forward_failed.lock().expect("forward failures");
        match &reply {
            Err(ClusterError::Unreachable { .. }) => {
                *failed = Some(ForwardFailure { leader: id, failed: tokio::time::Instant::now() })
            }
            _ if failed.is_some_and(|f| f.leader == id) => *failed = None,
            _ => {}
        }
        drop(failed);
        reply
    }

    pub(crate) fn max_entry_bytes(&self) -> usize {
        usize::try_from(self.inner.options.max_entry_bytes).unwrap_or(usize::MAX)
    }

    /// The leader's side of a write a member forwarded: stamped here, never forwarded again.
    /// Forwarded sends are batched per queue like the leader's own.
    async fn propose_forwarded(&self, forwarded: Forwarded) -> Result<Reply, ClusterError> {
        let (command, decoded) = match forwarded {
            Forwarded::Send(batch) => {
                if !self.is_leader() {
                    return Err(ClusterError::NoLeader);
                }
                // A retry of messages still being proposed here, or stored already, is answered
                // without a second copy of their bodies in the log.
                if let Some(answer) = self.inner.pending.retry_answer(&batch).await {
                    return answer;
                }
                if let Some(outcomes) = self.broker().stored_sends(&batch) {
                    return Ok(Reply::Sent(outcomes));
                }
                return self.join(Lanes::Forwarded, batch).await;
            }
            Forwarded::Other { bytes, command } => (bytes, command),
        };
        match self.propose(|now| Command::restamp(command, |c| self.stamp(c, now))).await? {
            Proposed::Applied(reply) => {
                self.place_after(&decoded).await;
                Ok(reply)
            }
            Proposed::NotLeader(_) => Err(ClusterError::NoLeader),
        }
    }

    /// Stamps the leader's time `now` into `command`, holding the store time of what it stores
    /// at its queue's latest (store times never go back along a queue; time-outs go by `now`).
    fn stamp(&self, command: &mut Command, now: i64) {
        command.set_time(now);
        command.hold_store_time(|topic, queue| self.broker().store_floor_ms(topic, queue));
    }

    /// On the leader: waits until everything committed before its term is applied here (so its
    /// state holds what earlier leaders decided) and returns the time it would stamp now.
    pub(crate) async fn leader_now(&self) -> Result<i64, ClusterError> {
        let term = match self.group().lead() {
            Ok(lead) => lead.term(),
            Err(_) => return Err(ClusterError::NoLeader),
        };
        self.inner.clock.ready(term, || self.apply_backlog()).await?;
        Ok(self.inner.clock.stamp())
    }

    /// Proposes the command `encode` builds for the time given, on this node as leader.
    async fn propose(&self, encode: impl FnOnce(i64) -> Bytes) -> Result<Proposed, ClusterError> {
        let lead = match self.group().lead() {
            Ok(l) => l,
            Err(leader) => return Ok(Proposed::NotLeader(leader)),
        };
        // A leader whose clock is off stamps nothing: writes wait for the leader it hands over to.
        if self.inner.skew.is_skewed() {
            return Ok(Proposed::NotLeader(None));
        }
        // Before the first stamp of a term: apply what earlier leaders stamped, so the clock's
        // floor covers their times.
        self.inner.clock.ready(lead.term(), || self.apply_backlog()).await?;
        let started = tokio::time::Instant::now();
        let applied = {
            let _in_order = self.inner.proposing.lock().await;
            let command = encode(self.inner.clock.stamp());
            self.check_size(command.len())?;
            self.check_disk(|| Command::footprint_of(&command))?;
            // Refused if leadership moved since the catch-up above: the stamp may be too low.
            self.group().submit(&lead, command).await?
        };
        match applied.await {
            Ok(reply) => {
                self.inner.options.meters.committed(started.elapsed());
                Ok(Proposed::Applied(reply))
            }
            Err(GroupError::NotLeader(leader)) => Ok(Proposed::NotLeader(leader)),
            Err(e) => Err(e.into()),
        }
    }

    /// Refuses what the log cannot store as one entry: a client must never meet a storage error.
    fn check_size(&self, len: usize) -> Result<(), ClusterError> {
        let max = self.inner.options.max_entry_bytes;
        match len as u64 {
            len if len > max => Err(ClusterError::TooLarge { len, max }),
            _ => Ok(()),
        }
    }

    /// On the leader: applies everything committed before its term.
    async fn apply_backlog(&self) -> Result<(), ClusterError> {
        let index = self.read_index_here().await?;
        self.wait_applied_within(index, BACKLOG_WAIT).await
    }

    /// The leader's commit index, confirmed by a quorum: what this node must apply to answer a
    /// read as the leader would. A follower asks the leader.
    pub async fn read_index(&self) -> Result<u64, ClusterError> {
        self.on_leader(async |c| c.read_index_here().await, async |peers, addr| peers.read_index(addr).await).await
    }

    /// [`Cluster::read_index`] on this node, which must lead.
    async fn read_index_here(&self) -> Result<u64, ClusterError> {
        Ok(self.group().read_index().await?)
    }

    /// Waits until this node has applied everything committed when it was called, so a read of
    /// its local state sees every write acknowledged before. For reads that found nothing locally,
    /// e.g. a topic created a moment ago.
    pub async fn catch_up(&self) -> Result<(), ClusterError> {
        if self.leader().is_none() {
            // Just started, or an election is running: give it a moment.
            let _ = self.group().wait_leader(ELECTION_WAIT, |l| l.is_some()).await;
        }
        let index = self.read_index().await?;
        self.wait_applied(index).await
    }

    /// Waits (briefly) until this node has applied `index`, e.g. an entry the leader applied for
    /// a write this node forwarded.
    pub async fn wait_applied(&self, index: u64) -> Result<(), ClusterError> {
        self.wait_applied_within(index, APPLY_WAIT).await
    }

    async fn wait_applied_within(&self, index: u64, within: Duration) -> Result<(), ClusterError> {
        match self.group().wait_applied(index, within).await {
            Err(GroupError::Timeout(_)) => Err(ClusterError::Lagging { index }),
            done => Ok(done?),
        }
    }
}
