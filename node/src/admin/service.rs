//! The admin operations a node serves, by family (`membership.rs`, `topics.rs`, `access.rs`,
//! `plugins.rs`, `messages.rs`), each a function the typed service (`typed.rs`) and the status
//! page call; and what they share: writing through the log, and serving on the leader.

use std::sync::Arc;

use rockraft_proto::rockraft::admin_service_client::AdminServiceClient;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::admin::NodeConfig;
use crate::admin::error::AdminError;
use crate::broker::pop::ConsumeOutcome;
use crate::broker::transaction::TransactionOutcome;
use crate::broker::{Broker, Command, Reply};
use crate::cluster::Cluster;
use crate::metrics::Meters;
use crate::plugin::PluginHost;

/// The leader's admin service, on its raft port, as a member calls it.
pub(super) type LeaderClient = AdminServiceClient<crate::raft::PeerChannel>;

/// Whom an admin service serves, which decides what it does with a request only the leader
/// answers when this node does not lead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plane {
    /// Operators, on the admin listener: passed on to the leader.
    Operators,
    /// Members passing an operator's request on, on the raft port: refused, never passed on
    /// again, so a request crosses the network at most once.
    Members,
}

#[derive(Clone)]
pub struct AdminServer {
    pub(super) cluster: Cluster,
    pub(super) parts: AdminParts,
    pub(super) config: Arc<NodeConfig>,
    plane: Plane,
}

/// What the admin service reads besides the cluster: this node's broker, plugin host and meters.
#[derive(Clone)]
pub struct AdminParts {
    pub broker: Broker,
    pub plugins: Arc<PluginHost>,
    pub meters: Meters,
    /// Every group this node runs a replica of, for the status.
    pub groups: crate::raft::GroupRegistry<Cluster>,
}

impl AdminServer {
    /// The admin service operators call (the admin listener, the status page).
    pub fn new(cluster: Cluster, parts: AdminParts, config: Arc<NodeConfig>) -> AdminServer {
        AdminServer { cluster, parts, config, plane: Plane::Operators }
    }

    /// The admin service on the raft port, where members pass operators' requests on.
    pub fn for_members(cluster: Cluster, parts: AdminParts, config: Arc<NodeConfig>) -> AdminServer {
        AdminServer { cluster, parts, config, plane: Plane::Members }
    }

    /// Writes `command` through the log of the metadata group, which this node leads (operator
    /// changes are served on the leader: [`Self::on_leader`]); what the broker answered, in
    /// words, or why not.
    pub(super) async fn write(&self, command: Command) -> Result<String, AdminError> {
        self.write_in(&self.cluster, command).await
    }

    /// [`AdminServer::write`] through the log of `group` (a data group's, for its queues' state).
    /// A node that lost the leadership since the request was routed here answers `NoLeader` (the
    /// operator tries again): it may not pass an operator's change on as command bytes.
    pub(super) async fn write_in(&self, group: &Cluster, command: Command) -> Result<String, AdminError> {
        if !group.is_leader() {
            return Err(crate::cluster::ClusterError::NoLeader.into());
        }
        applied(group.write(&command).await?)
    }

    /// The groups this node runs, as the data path finds them.
    pub(super) fn data(&self) -> crate::cluster::Groups {
        crate::cluster::Groups::new(self.parts.groups.clone(), self.cluster.group().id())
            .expect("the metadata group is opened first")
    }

    /// Data group `id`, as its handle on this node (which may hold no replica of it).
    pub(super) fn data_group(&self, id: u32) -> Result<Cluster, AdminError> {
        let runs = self.parts.broker.settings().data_groups;
        match id {
            0 => Err(AdminError::invalid("group 0 holds the metadata, not messages")),
            id if id > runs => Err(AdminError::NotFound(format!(
                "data group {id} does not exist: the cluster runs groups 1 to {runs}"
            ))),
            id => Ok(self.data().partition(crate::broker::position::PartitionId(id))?),
        }
    }

    /// Every data group's id, in order.
    pub(super) fn data_group_ids(&self) -> Vec<u32> {
        self.data().all().iter().map(|g| g.group().id().0).collect()
    }

    /// The data groups this node holds a replica of.
    pub(super) fn held_groups(&self) -> Vec<Cluster> {
        self.data().all().into_iter().filter(Cluster::holds_replica).collect()
    }

    /// The data groups holding `topic`'s queues, by id.
    pub(super) fn holders_of(&self, topic: &str) -> Result<Vec<u32>, AdminError> {
        let config = self
            .parts
            .broker
            .topic(topic)
            .ok_or_else(|| AdminError::NotFound(format!("topic {topic} does not exist")))?;
        let mut ids: Vec<u32> = match crate::broker::group::is_dead_letter_topic(topic) {
            true => self.data_group_ids(),
            false => (0..config.queues).map(|q| config.group_of(q)).collect(),
        };
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// Serves a request only the leader answers, through the cluster's router: `here` when this
    /// node leads. Otherwise an operator's request is passed on once, by `there`, to the leader's
    /// admin service with the operator's own signature ([`passed_on`]), checked there as on the
    /// admin port (being a member grants nothing), and its answer passed back as it is. A
    /// request a member passed on is refused (`NoLeader`: the operator tries again) rather than
    /// passed on again.
    pub(super) async fn on_leader<R, T>(
        &self,
        request: Request<R>,
        there: impl AsyncFnOnce(LeaderClient, Request<R>) -> Result<Response<T>, Status>,
        here: impl AsyncFnOnce(R) -> Result<Response<T>, Status>,
    ) -> Result<Response<T>, Status> {
        self.on_leader_of(&self.cluster.clone(), request, there, here).await
    }

    /// [`Self::on_leader`] for the leader of `group` (a data group's, for what only its members
    /// hold). A node that holds no replica of the group finds its leader first.
    pub(super) async fn on_leader_of<R, T>(
        &self,
        group: &Cluster,
        request: Request<R>,
        there: impl AsyncFnOnce(LeaderClient, Request<R>) -> Result<Response<T>, Status>,
        here: impl AsyncFnOnce(R) -> Result<Response<T>, Status>,
    ) -> Result<Response<T>, Status> {
        let (metadata, _, request) = request.into_parts();
        if self.plane == Plane::Operators && group.leader().is_none() {
            group.find_leader().await;
        }
        let answered = match self.plane {
            Plane::Members => group.as_leader(async |_| here(request).await.map_err(AdminError::Answered)).await,
            Plane::Operators => {
                let asked = group.leader().map(|(id, _)| id);
                let here = async |_: &Cluster, r| here(r).await.map_err(AdminError::Answered);
                let there = async |channel, r| {
                    let leader = AdminServiceClient::new(channel)
                        .max_decoding_message_size(usize::MAX)
                        .max_encoding_message_size(usize::MAX);
                    let answered = there(leader, passed_on(&metadata, r)).await.map_err(AdminError::Answered);
                    // The operator's next request here sees what the leader did.
                    if answered.is_ok()
                        && group.holds_replica()
                        && let Err(e) = group.catch_up().await
                    {
                        tracing::debug!(error = %e, "an admin request is done on the leader but not applied here yet");
                    }
                    answered
                };
                let answered = group.on_leader_channel(request, here, there).await;
                // A node holding no replica learns of a new leader only by asking: after the one
                // it knew could not serve, it asks the holders, so the operator's next try goes
                // to the leader of now.
                if let Err(AdminError::Answered(status)) = &answered
                    && status.code() == tonic::Code::Unavailable
                    && !group.holds_replica()
                {
                    group.forget_leader(asked).await;
                }
                answered
            }
        };
        Ok(answered?)
    }
}

/// `message` as a request to the leader's admin service on behalf of the operator whose request
/// carried `metadata`: with that operator's signature (and the data group a part of it is
/// narrowed to), which the leader checks again.
pub(super) fn passed_on<T>(metadata: &MetadataMap, message: T) -> Request<T> {
    use crate::auth::operator::{CONTENT_SHA256, DATA_GROUP, NONCE};
    use crate::auth::signature::{AUTHORIZATION, DATE_TIME};
    let mut request = Request::new(message);
    for header in [AUTHORIZATION, DATE_TIME, NONCE, CONTENT_SHA256, DATA_GROUP] {
        if let Some(value) = metadata.get(header) {
            request.metadata_mut().insert(header, value.clone());
        }
    }
    request
}

/// [`passed_on`], narrowed to data group `group`: the part for one group of an operator's
/// request for every group, whose body stays the one its operator signed.
pub(super) fn narrowed<T>(metadata: &MetadataMap, message: T, group: u32) -> Request<T> {
    let mut request = passed_on(metadata, message);
    request.metadata_mut().insert(crate::auth::operator::DATA_GROUP, group.into());
    request
}

/// The data group a request names: in its body, or narrowed to by [`narrowed`].
pub(super) fn data_group_of(metadata: &MetadataMap, in_body: Option<u32>) -> Option<u32> {
    let header = || metadata.get(crate::auth::operator::DATA_GROUP)?.to_str().ok()?.parse().ok();
    in_body.or_else(header)
}

/// What an admin command's reply means: done (in words), or why not.
fn applied(reply: Reply) -> Result<String, AdminError> {
    match reply {
        Reply::Applied => Ok("ok".into()),
        Reply::TopicNotFound(t) => Err(AdminError::NotFound(format!("topic {t} does not exist"))),
        Reply::TopicExists(t) => {
            Err(AdminError::Exists(format!("topic {t} already exists with another configuration")))
        }
        Reply::Rejected(why) => Err(AdminError::Refused(why)),
        Reply::Sent(_) => Ok("sent".into()),
        Reply::GroupExists(g) => {
            Err(AdminError::Exists(format!("group {g} already exists with another configuration")))
        }
        Reply::GroupNotFound(g) | Reply::Consume(ConsumeOutcome::GroupNotFound(g)) => {
            Err(AdminError::NotFound(format!("group {g} does not exist")))
        }
        Reply::Consume(ConsumeOutcome::TopicNotFound(t)) => {
            Err(AdminError::NotFound(format!("topic {t} does not exist")))
        }
        Reply::Consume(_) => Ok("ok".into()),
        Reply::Timer(outcome) => Ok(format!("{outcome:?}")),
        Reply::Transaction(TransactionOutcome::Done) => Ok("ok".into()),
        Reply::Lite(outcome) => Ok(format!("{outcome:?}")),
        Reply::Transaction(TransactionOutcome::Unknown) => Err(AdminError::NotFound("no such transaction".into())),
        Reply::Transaction(TransactionOutcome::Conflict(state)) => {
            Err(AdminError::Refused(format!("the transaction was already resolved: {state:?}")))
        }
    }
}
