//! openraft's storage conformance suite against the real CommitLog-backed `LogStore`.
//!
//! The suite also exercises a state machine; the one here is a minimal in-memory fixture that
//! tracks what openraft needs (last applied, membership, snapshots), so that every case measures
//! the log store.

use std::io;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageError};

use crate::raft::{LogId, LogStore, TypeConfig};
use crate::store::{Durability, LogConfig};

type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
type Snapshot = openraft::alias::SnapshotOf<TypeConfig, Vec<u8>>;
type StoredSnapshot = (SnapshotMeta, Vec<u8>);

#[derive(Default, Clone)]
struct FixtureStateMachine {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    /// Shared with the snapshot builders this machine hands out, which record what they build.
    snapshot: Arc<Mutex<Option<StoredSnapshot>>>,
}

impl RaftSnapshotBuilder<TypeConfig> for FixtureStateMachine {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let meta = SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone() };
        let data = serde_json::to_vec(&(&self.last_applied, &self.membership)).map_err(io::Error::other)?;
        *self.snapshot.lock().unwrap() = Some((meta.clone(), data.clone()));
        Ok(Snapshot { meta, snapshot: data })
    }
}

impl RaftStateMachine<TypeConfig> for FixtureStateMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> io::Result<()>
    where
        S: futures_util::Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + openraft::OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            if let EntryPayload::Membership(m) = &entry.payload {
                self.membership = StoredMembership::new(Some(entry.log_id), m.clone());
            }
            self.last_applied = Some(entry.log_id);
            if let Some(r) = responder {
                r.send(Default::default());
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Vec<u8>) -> io::Result<()> {
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        *self.snapshot.lock().unwrap() = Some((meta.clone(), snapshot));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        Ok(self.snapshot.lock().unwrap().clone().map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }
}

struct Builder {
    durability: Durability,
}

impl StoreBuilder<TypeConfig, LogStore, FixtureStateMachine, tempfile::TempDir> for Builder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, FixtureStateMachine), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        let mut config = LogConfig::new(dir.path());
        config.segment_size = 1 << 20;
        config.index_slots_per_file = 8;
        config.durability = self.durability;
        let store = LogStore::open(config).map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        Ok((dir, store, FixtureStateMachine::default()))
    }
}

#[tokio::test]
async fn openraft_storage_suite_passes_in_sync_mode() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(Builder { durability: Durability::Sync }).await
}

#[tokio::test]
async fn openraft_storage_suite_passes_in_async_mode() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(Builder { durability: Durability::Async }).await
}
