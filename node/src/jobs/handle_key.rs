//! The first handle key: a cluster has none until its first leader proposes one, so that every
//! receipt handle, recall handle and transaction id is sealed from then on (`auth::handles`).
//! Later keys come from the operator (`rockraft cluster rotate-handle-key`).

use std::time::Duration;

use crate::broker::Broker;
use crate::broker::access::{AccessCommand, HandleKey};
use crate::broker::{Command, Reply};
use crate::cluster::Cluster;

/// Pause before trying again after a failed proposal.
const RETRY: Duration = Duration::from_secs(1);

/// Proposes a handle key while the cluster has none; ends once it has one.
pub async fn first_handle_key(cluster: Cluster, broker: Broker) {
    // Tests hold the first key back to see a cluster without one.
    fail::fail_point!("no_first_handle_key", |_| ());
    while broker.access(|t| t.handle_keys.is_empty()) {
        let key = match crate::auth::random_key() {
            Ok(k) => k,
            Err(e) => {
                tracing::error!(error = %e, "cannot make a handle key; handles stay unsealed");
                return;
            }
        };
        let command = Command::Access(AccessCommand::RotateHandleKey { key: HandleKey::new(key) });
        match cluster.write(&command).await {
            Ok(Reply::Applied) => tracing::info!("the cluster's first handle key is in place"),
            Ok(other) => tracing::warn!(reply = ?other, "the first handle key was refused"),
            Err(e) => {
                tracing::debug!(error = %e, "proposing the first handle key failed; trying again");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}
