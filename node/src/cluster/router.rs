//! Where a request that needs the group's leader is served: on this node when it leads, else
//! passed once to the leader over the peer service (or, for an operator's request, the leader's
//! admin service). Every such request goes through here, and the serving side refuses what it
//! cannot serve as leader instead of passing it on again, so a request crosses the network at
//! most once.

use crate::cluster::{Cluster, ClusterError, WRITE_HOLD, peer::Peers};
use crate::raft::PeerChannel;

/// Where a request for the group's leader goes.
pub(crate) enum Route {
    Here,
    /// The leader's raft address.
    Leader(String),
}

impl Cluster {
    /// Where the group's leader is. A moment with no leader known (an election, a leadership the
    /// balancer hands over) is waited out for up to [`WRITE_HOLD`], as writes wait it out, so a
    /// receive or an operator's request does not fail on what a client would only retry.
    pub(crate) async fn route(&self) -> Result<Route, ClusterError> {
        let deadline = tokio::time::Instant::now() + WRITE_HOLD;
        loop {
            match self.leader() {
                Some((id, _)) if id == self.id() => return Ok(Route::Here),
                Some((_, info)) => return Ok(Route::Leader(info.raft_addr)),
                None if tokio::time::Instant::now() < deadline => self.await_other_leader(None, deadline).await,
                None => return Err(ClusterError::NoLeader),
            }
        }
    }

    /// Runs a request on the group's leader: `here` on this node if it leads, `there` with the
    /// leader's raft address otherwise.
    pub(crate) async fn on_leader<T, E: From<ClusterError>>(
        &self,
        here: impl AsyncFnOnce(&Cluster) -> Result<T, E>,
        there: impl AsyncFnOnce(&Peers, &str) -> Result<T, E>,
    ) -> Result<T, E> {
        match self.route().await? {
            Route::Here => here(self).await,
            Route::Leader(addr) => there(self.peers(), &addr).await,
        }
    }

    /// [`Self::on_leader`] for a request passed on over a service of its own on the leader's raft
    /// port (the admin service) rather than the peer service: `here` with `request` on this node
    /// if it leads, `there` with a channel to the leader's raft port and `request` otherwise.
    pub(crate) async fn on_leader_channel<R, T, E: From<ClusterError>>(
        &self,
        request: R,
        here: impl AsyncFnOnce(&Cluster, R) -> Result<T, E>,
        there: impl AsyncFnOnce(PeerChannel, R) -> Result<T, E>,
    ) -> Result<T, E> {
        match self.route().await? {
            Route::Here => here(self, request).await,
            Route::Leader(addr) => there(self.peers().channel(&addr)?, request).await,
        }
    }

    /// The serving side of a request a member passed on: served here as leader, or refused
    /// (`NoLeader`: the member asks again once it knows the new leader), never passed on again.
    pub(crate) async fn as_leader<T, E: From<ClusterError>>(
        &self,
        here: impl AsyncFnOnce(&Cluster) -> Result<T, E>,
    ) -> Result<T, E> {
        match self.is_leader() {
            true => here(self).await,
            false => Err(ClusterError::NoLeader.into()),
        }
    }
}
