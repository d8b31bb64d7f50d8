//! The second step of a metadata change: each data partition's copy of the metadata brought up
//! to date by a placement entry (see `broker::Metadata::placement_for`).
//!
//! The leader proposes it right after the metadata entry applies, so a topic or group is usable
//! when its creation is answered. A leader that fails between the two steps leaves the partition
//! behind; [`Cluster::place`] computes what is missing from the state itself, so the next leader's
//! placement job (`jobs::placement`) finishes the step, and proposing it twice changes nothing.

use crate::broker::Command;
use crate::broker::partition::Placement;
use crate::cluster::{Cluster, ClusterError, Proposed};

impl Cluster {
    /// On the leader: proposes the placement changes the partition lacks, if any, and waits
    /// until they apply.
    pub async fn place(&self) -> Result<(), ClusterError> {
        let changes = self.broker().placement();
        if changes.is_empty() {
            return Ok(());
        }
        let command = Command::Place(Placement { changes });
        match self.propose(|_| command.encode()).await? {
            Proposed::Applied(_) => Ok(()),
            Proposed::NotLeader(_) => Err(ClusterError::NoLeader),
        }
    }

    /// Runs the placement a metadata command calls for once it applied; a failure is left to the
    /// placement job (the metadata change stands).
    pub(super) async fn place_after(&self, command: &Command) {
        if !command.needs_placement() {
            return;
        }
        if let Err(e) = self.place().await {
            tracing::warn!(error = %e, "placing a metadata change failed; the placement job tries again");
        }
    }
}
