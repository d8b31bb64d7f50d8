//! openraft's `RaftStateMachine` over the [`Broker`].
//!
//! Snapshots carry the broker's metadata (topics, queue offset ranges, the dedupe window), not
//! messages: they exist so that a follower that fell behind the retention purge can restart from
//! the metadata and replicate the rest of the log. The latest one is kept in `snapshot.json`.

use std::io;
use std::path::PathBuf;

use futures_util::StreamExt;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use crate::broker::Broker;
use crate::broker::state::SnapshotData;
use crate::raft::{CommandBytes, LogId, SnapshotMeta, StoredMembership, TypeConfig, log_id};
use crate::store::LogReader;

type Snapshot = openraft::alias::SnapshotOf<TypeConfig, Vec<u8>>;

#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

#[derive(Clone)]
pub struct StateMachine {
    broker: Broker,
    log: LogReader,
    snapshot_path: PathBuf,
}

impl StateMachine {
    pub fn new(broker: Broker, log: LogReader, snapshot_path: PathBuf) -> StateMachine {
        StateMachine { broker, log, snapshot_path }
    }

    fn load_snapshot(&self) -> io::Result<Option<Snapshot>> {
        match std::fs::read(&self.snapshot_path) {
            Ok(bytes) => {
                let f: SnapshotFile = serde_json::from_slice(&bytes)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot file: {e}")))?;
                Ok(Some(Snapshot { meta: f.meta, snapshot: f.data }))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes the snapshot file atomically (temp file, fsync, rename).
    fn save_snapshot(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        let bytes =
            serde_json::to_vec(&SnapshotFile { meta: meta.clone(), data: data.to_vec() }).map_err(io::Error::other)?;
        let tmp = self.snapshot_path.with_extension("tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut f, &bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.snapshot_path)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;

    /// Builds the snapshot at the retention purge point, never later: openraft purges the log up
    /// to whatever snapshot it gets, and messages after the purge point must stay.
    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let current = self.load_snapshot()?;
        let current_index = current.as_ref().and_then(|s| s.meta.last_log_id).map(|l| l.index);
        let applied = self.broker.last_applied();
        let target = self.broker.snapshot_target().min(applied.map(|l| l.index));
        let at = match target {
            Some(t) if current_index.is_none_or(|c| t > c) => self.log.read(t)?.map(|r| log_id(&r.meta)),
            _ => None,
        };
        let Some(at) = at else {
            // Nothing new to snapshot: the current one stands (or an empty one before any).
            return Ok(current.unwrap_or_else(|| Snapshot {
                meta: SnapshotMeta::default(),
                snapshot: serde_json::to_vec(&SnapshotData::empty()).unwrap_or_default(),
            }));
        };
        let previous = match &current {
            Some(s) => Some(serde_json::from_slice::<SnapshotData>(&s.snapshot).map_err(io::Error::other)?),
            None => None,
        };
        let data = self.broker.snapshot_data_at(at, previous)?;
        let meta = SnapshotMeta { last_log_id: data.last_applied, last_membership: data.membership.clone() };
        let bytes = serde_json::to_vec(&data).map_err(io::Error::other)?;
        self.save_snapshot(&meta, &bytes)?;
        self.broker.forget_before(&data)?;
        Ok(Snapshot { meta, snapshot: bytes })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        Ok((self.broker.last_applied(), self.broker.membership()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> io::Result<()>
    where
        S: futures_util::Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let log_id = entry.log_id;
            let reply = match entry.payload {
                EntryPayload::Blank => {
                    self.broker.set_applied(log_id, None);
                    Default::default()
                }
                EntryPayload::Membership(m) => {
                    self.broker.set_applied(log_id, Some(StoredMembership::new(Some(log_id), m)));
                    Default::default()
                }
                EntryPayload::Normal(CommandBytes(bytes)) => self.broker.apply(log_id, bytes)?,
            };
            if let Some(r) = responder {
                r.send(reply);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Vec<u8>) -> io::Result<()> {
        let data: SnapshotData = serde_json::from_slice(&snapshot)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot: {e}")))?;
        if data.last_applied != meta.last_log_id {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot data and metadata disagree"));
        }
        self.broker.install(data)?;
        self.save_snapshot(meta, &snapshot)
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        self.load_snapshot()
    }
}
