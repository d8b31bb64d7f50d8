//! The second step of a metadata change: each data partition's copy of the metadata brought up
//! to date by a placement entry (see `broker::Metadata::placement_for`).
//!
//! The leader proposes it right after the metadata entry applies, so a topic or group is usable
//! when its creation is answered. A leader that fails between the two steps leaves the partition
//! behind; [`Cluster::place`] computes what is missing from the state itself, so the next leader's
//! placement job (`jobs::placement`) finishes the step, and proposing it twice changes nothing.
//!
//! A placement is a difference between the metadata and the partition's copy, so only one is
//! worked out and proposed at a time on a node ([`PlacementGate`]): one worked out while another
//! is on its way to the log would be computed against a copy about to change, and could undo
//! the other (place a topic again that the other dropped). A caller that finds one under way
//! waits for it to end and works out its own afresh.

use crate::broker::Command;
use crate::cluster::{Cluster, ClusterError, Proposed};

/// Lets one placement at a time be worked out and proposed; the others wait for it to end. Not
/// a lock held over the proposal: a placement that is cancelled (its leadership ended) lets the
/// next one in as it is dropped.
#[derive(Default)]
pub(super) struct PlacementGate {
    busy: std::sync::Mutex<bool>,
    ended: tokio::sync::Notify,
}

/// The one placement under way; dropping it lets the next in.
pub(super) struct Placing<'a>(&'a PlacementGate);

impl PlacementGate {
    /// Enters once no other placement is under way.
    pub(super) async fn enter(&self) -> Placing<'_> {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before looking, so an end between the look and the wait is not missed.
            ended.as_mut().enable();
            {
                let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
                if !*busy {
                    *busy = true;
                    return Placing(self);
                }
            }
            ended.await;
        }
    }
}

impl Drop for Placing<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.0.ended.notify_waiters();
    }
}

impl Cluster {
    /// On the leader: proposes the placement changes the partition lacks, if any, and waits
    /// until they apply. Worked out once no other placement is under way on this node. The
    /// metadata group holds no partition: nothing to place.
    pub async fn place(&self) -> Result<(), ClusterError> {
        if !self.broker().holds_queues() {
            return Ok(());
        }
        let own = self.broker().clone();
        self.place_from(&own).await
    }

    /// On the leader of a data group: proposes what the partition lacks of `metadata` (this
    /// node's replica of the metadata), worked out against the index that replica applied, so
    /// a later leader reading an older replica cannot undo it.
    pub async fn place_from(&self, metadata: &crate::broker::Broker) -> Result<(), ClusterError> {
        let _placing = self.inner.placing.enter().await;
        let placement = self.broker().placement_from(metadata);
        if placement.changes.is_empty() {
            return Ok(());
        }
        if !self.broker().holds_metadata() {
            // Between the two steps of a metadata change, for a group other than the one that
            // holds the metadata: the crash the data groups' tests make.
            fail::fail_point!("placement::data_group::before_propose", |arg: Option<String>| {
                let name = "placement::data_group::before_propose";
                Err(ClusterError::Raft(crate::failpoint::injected(name, arg.as_deref()).to_string()))
            });
        }
        let command = Command::Place(placement);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_placement_at_a_time_and_a_cancelled_one_lets_the_next_in() {
        let gate = std::sync::Arc::new(PlacementGate::default());
        let first = gate.enter().await;
        let waiting = {
            let gate = std::sync::Arc::clone(&gate);
            tokio::spawn(async move {
                let _second = gate.enter().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a second placement waits while one is under way");
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("let in").expect("joined");

        // A placement cancelled while under way (its task dropped) lets the next one in.
        let held = {
            let gate = std::sync::Arc::clone(&gate);
            tokio::spawn(async move {
                let _placing = gate.enter().await;
                std::future::pending::<()>().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.abort();
        let _ = held.await;
        tokio::time::timeout(Duration::from_secs(5), gate.enter()).await.expect("let in after the cancel");
    }
}
