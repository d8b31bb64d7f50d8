//! The admin operations a node serves, by family (`membership.rs`, `topics.rs`, `access.rs`,
//! `plugins.rs`, `messages.rs`), each a function the typed service (`typed.rs`) and the status
//! page call; and what they share: writing through the log and the leader's client.

use std::sync::Arc;

use rockraft_proto::rockraft::admin_service_client::AdminServiceClient;

use crate::admin::NodeConfig;
use crate::admin::error::AdminError;
use crate::broker::pop::ConsumeOutcome;
use crate::broker::transaction::TransactionOutcome;
use crate::broker::{Command, Reply};
use crate::cluster::Cluster;

#[derive(Clone)]
pub struct AdminServer {
    pub(super) cluster: Cluster,
    pub(super) config: Arc<NodeConfig>,
}

impl AdminServer {
    pub fn new(cluster: Cluster, config: Arc<NodeConfig>) -> AdminServer {
        AdminServer { cluster, config }
    }

    /// Writes `command` through the log; what the broker answered, in words, or why not.
    pub(super) async fn write(&self, command: Command) -> Result<String, AdminError> {
        applied(self.cluster.write(&command).await?)
    }

    /// The admin service on the leader's raft port when this node does not lead (a request that
    /// only the leader can answer is passed on there), `None` when it leads.
    pub(super) fn leader(&self) -> Result<Option<AdminServiceClient<crate::raft::PeerChannel>>, AdminError> {
        if self.cluster.is_leader() {
            return Ok(None);
        }
        let channel = self.cluster.leader_channel().map_err(|e| AdminError::Unavailable(format!("{e}; try again")))?;
        Ok(Some(AdminServiceClient::new(channel).max_decoding_message_size(usize::MAX)))
    }
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
        Reply::Consume(ConsumeOutcome::GroupExists(g)) => {
            Err(AdminError::Exists(format!("group {g} already exists with another configuration")))
        }
        Reply::Consume(ConsumeOutcome::GroupNotFound(g)) => {
            Err(AdminError::NotFound(format!("group {g} does not exist")))
        }
        Reply::Consume(ConsumeOutcome::TopicNotFound(t)) => {
            Err(AdminError::NotFound(format!("topic {t} does not exist")))
        }
        Reply::Consume(ConsumeOutcome::Invalid(why)) => Err(AdminError::Invalid(why)),
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
