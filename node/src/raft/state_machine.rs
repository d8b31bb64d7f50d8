//! openraft's `RaftStateMachine` over the [`Broker`]: log ids and memberships translated to the
//! broker's own types, snapshots as serialized broker [`State`].
//!
//! Snapshots carry the broker state, not messages: they exist so that a follower that fell
//! behind the retention purge can start from the state and replicate the rest of the log. The
//! latest one is kept in `snapshot.json`. Installing one writes that file first and the broker
//! state second; a node that crashed between the two finds a snapshot newer than its state on
//! start and installs it again ([`StateMachine::open`]).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use crate::broker::{Broker, LogPosition, MembershipRecord, State};
use crate::raft::{CommandBytes, LogId, SnapshotMeta, StoredMembership, TypeConfig, log_id};
use crate::store::{LogReader, RecordMeta};

type Snapshot = openraft::alias::SnapshotOf<TypeConfig, Vec<u8>>;

#[derive(serde::Serialize, serde::Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

/// The snapshot file: `SNAPSHOT_MAGIC`, the file's format (u32), the CRC32C of the rest (u32),
/// then the JSON of a [`SnapshotFile`]. Files of earlier releases are the bare JSON, unchecked.
const SNAPSHOT_MAGIC: &[u8; 8] = b"RRSNAP\0\0";
const SNAPSHOT_FILE_FORMAT: u32 = 1;
const SNAPSHOT_HEADER_LEN: usize = 16;

fn encode_snapshot_file(meta: &SnapshotMeta, data: &[u8]) -> io::Result<Vec<u8>> {
    let body =
        serde_json::to_vec(&SnapshotFile { meta: meta.clone(), data: data.to_vec() }).map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN + body.len());
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&SNAPSHOT_FILE_FORMAT.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Reads a snapshot file's bytes back, checked: a damaged one is an error naming `path`, never a
/// state that differs from the one written.
fn decode_snapshot_file(bytes: &[u8], path: &std::path::Path) -> io::Result<Snapshot> {
    let damaged = |why: String| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {why}", path.display()));
    let body = match bytes.strip_prefix(SNAPSHOT_MAGIC) {
        Some(rest) if rest.len() >= 8 => {
            let format = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes"));
            if format > SNAPSHOT_FILE_FORMAT {
                return Err(damaged(format!(
                    "a snapshot file of format {format}; this release reads formats up to {SNAPSHOT_FILE_FORMAT}: upgrade this node"
                )));
            }
            let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
            if crc32c::crc32c(&rest[8..]) != crc {
                return Err(damaged("checksum mismatch: the file is damaged".into()));
            }
            &rest[8..]
        }
        Some(_) => return Err(damaged("cut short".into())),
        None => bytes,
    };
    let f: SnapshotFile = serde_json::from_slice(body).map_err(|e| damaged(format!("unreadable: {e}")))?;
    Ok(Snapshot { meta: f.meta, snapshot: f.data })
}

/// Writes a snapshot file atomically: temp file, fsync, rename, fsync of the directory.
fn write_snapshot_file(path: &std::path::Path, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
    let bytes = encode_snapshot_file(meta, data)?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, &bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    Ok(crate::store::sync_dir(dir)?)
}

/// Why the snapshot file at `path` cannot be trusted, if it cannot (a missing file is fine).
pub fn damaged_snapshot(path: &std::path::Path) -> Option<String> {
    match std::fs::read(path) {
        Ok(bytes) => decode_snapshot_file(&bytes, path).err().map(|e| e.to_string()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => Some(format!("{}: {e}", path.display())),
    }
}

/// Puts a snapshot another member holds in place of a damaged file, checked first: its data
/// must be a state of the index its metadata names.
pub fn replace_snapshot(path: &std::path::Path, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
    let state: State = serde_json::from_slice(data).map_err(invalid("snapshot"))?;
    if state.last_applied.as_ref().map(to_log_id) != meta.last_log_id {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot data and metadata disagree"));
    }
    write_snapshot_file(path, meta, data)
}

#[derive(Clone)]
pub struct StateMachine {
    broker: Broker,
    log: LogReader,
    snapshot_path: PathBuf,
    /// openraft builds snapshots in a task of their own, beside the state machine's (which
    /// installs them): one at a time, so a build that started before an install can never put
    /// an older snapshot back in place of the installed one, nor replay a log the install purged.
    snapshots: Arc<tokio::sync::Mutex<()>>,
    meters: crate::metrics::Meters,
}

fn position(id: &LogId) -> LogPosition {
    LogPosition { term: id.leader_id.term, leader: id.leader_id.node_id, index: id.index }
}

fn to_log_id(p: &LogPosition) -> LogId {
    log_id(&RecordMeta { term: p.term, index: p.index, leader: p.leader, kind: 0 })
}

fn membership(record: Option<MembershipRecord>) -> io::Result<StoredMembership> {
    let Some(r) = record else { return Ok(StoredMembership::default()) };
    let config = serde_json::from_str(&r.config)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("stored membership: {e}")))?;
    Ok(StoredMembership::new(Some(to_log_id(&r.at)), config))
}

/// The group's members other than `me`, as the last membership `broker` applied names them (who
/// to ask for what this node's disk lost: `repair.rs`).
pub fn other_members(
    broker: &Broker,
    me: crate::raft::NodeId,
) -> io::Result<Vec<(crate::raft::NodeId, crate::raft::NodeInfo)>> {
    let stored = membership(broker.membership())?;
    Ok(stored.membership().nodes().filter(|(id, _)| **id != me).map(|(id, info)| (*id, info.clone())).collect())
}

fn invalid(what: &str) -> impl FnOnce(serde_json::Error) -> io::Error + '_ {
    move |e| io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"))
}

impl StateMachine {
    /// The group's members other than `me`, as the last membership this replica applied names
    /// them (who to ask for records this node's log lost: `repair.rs`).
    pub fn other_members(
        &self,
        me: crate::raft::NodeId,
    ) -> io::Result<Vec<(crate::raft::NodeId, crate::raft::NodeInfo)>> {
        let stored = membership(self.broker.membership())?;
        Ok(stored.membership().nodes().filter(|(id, _)| **id != me).map(|(id, info)| (*id, info.clone())).collect())
    }

    /// Counts applies and snapshots in `meters`.
    pub fn with_meters(mut self, meters: crate::metrics::Meters) -> StateMachine {
        self.meters = meters;
        self
    }

    /// The state machine over `broker`, finishing what a crash may have interrupted: a snapshot
    /// saved but not yet installed is installed, and queue records below the current snapshot
    /// are forgotten again.
    pub fn open(broker: Broker, log: LogReader, snapshot_path: PathBuf) -> io::Result<StateMachine> {
        let sm = StateMachine { broker, log, snapshot_path, snapshots: Arc::default(), meters: Default::default() };
        if let Some(snapshot) = sm.load_snapshot()? {
            let state: State = serde_json::from_slice(&snapshot.snapshot).map_err(invalid("snapshot"))?;
            let applied = sm.broker.last_applied().map(|l| l.index);
            if state.last_applied.map(|l| l.index) > applied {
                tracing::info!(at = ?state.last_applied, "finishing the install of a snapshot");
                sm.broker.install(state.clone())?;
            }
            sm.broker.forget_before(&state)?;
        }
        Ok(sm)
    }

    fn load_snapshot(&self) -> io::Result<Option<Snapshot>> {
        match std::fs::read(&self.snapshot_path) {
            Ok(bytes) => decode_snapshot_file(&bytes, &self.snapshot_path).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn save_snapshot(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        write_snapshot_file(&self.snapshot_path, meta, data)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;

    /// Builds the snapshot at the retention purge point, never later: openraft purges the log up
    /// to whatever snapshot it gets, and messages after the purge point must stay.
    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let _one_at_a_time = self.snapshots.lock().await;
        let current = self.load_snapshot()?;
        let current_index = current.as_ref().and_then(|s| s.meta.last_log_id).map(|l| l.index);
        let applied = self.broker.last_applied().map(|l| l.index);
        let target = self.broker.snapshot_target().min(applied);
        let at = match target {
            Some(t) if current_index.is_none_or(|c| t > c) => self.log.read(t)?.map(|r| r.meta.index),
            _ => None,
        };
        let Some(at) = at else {
            // Nothing new to snapshot: the current one stands (or an empty one before any).
            return Ok(current.unwrap_or_else(|| Snapshot {
                meta: SnapshotMeta::default(),
                snapshot: serde_json::to_vec(&State::default()).unwrap_or_default(),
            }));
        };
        let previous = match &current {
            Some(s) => Some(serde_json::from_slice::<State>(&s.snapshot).map_err(invalid("snapshot"))?),
            None => None,
        };
        let state = self.broker.state_at(at, previous, &crate::raft::entry_codec::membership_json)?;
        crate::crash_point!("snapshot::build::after_replay");
        let meta = SnapshotMeta {
            last_log_id: state.last_applied.as_ref().map(to_log_id),
            last_membership: membership(state.membership.clone())?,
        };
        let bytes = serde_json::to_vec(&state).map_err(io::Error::other)?;
        self.save_snapshot(&meta, &bytes)?;
        crate::crash_point!("snapshot::build::after_save");
        self.broker.forget_before(&state)?;
        self.meters.snapshot_built();
        tracing::info!(index = at, bytes = bytes.len(), "snapshot built");
        Ok(Snapshot { meta, snapshot: bytes })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        Ok((self.broker.last_applied().as_ref().map(to_log_id), membership(self.broker.membership())?))
    }

    async fn apply<S>(&mut self, mut entries: S) -> io::Result<()>
    where
        S: futures_util::Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let at = position(&entry.log_id);
            let reply = match entry.payload {
                EntryPayload::Blank => {
                    self.broker.apply_other(at, None);
                    Default::default()
                }
                EntryPayload::Membership(m) => {
                    // The same JSON the log record carries, so a snapshot replay records it identically.
                    self.broker.apply_other(at, Some(serde_json::to_string(&m).map_err(io::Error::other)?));
                    Default::default()
                }
                EntryPayload::Normal(CommandBytes(bytes)) => {
                    let started = tokio::time::Instant::now();
                    let reply = self.broker.apply(at, bytes)?;
                    self.meters.applied(started.elapsed());
                    reply
                }
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
        let state: State = serde_json::from_slice(&snapshot).map_err(invalid("snapshot"))?;
        if state.last_applied.as_ref().map(to_log_id) != meta.last_log_id {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "snapshot data and metadata disagree"));
        }
        let _one_at_a_time = self.snapshots.lock().await;
        // The file first: a crash after it finishes the install on the next start.
        self.save_snapshot(meta, &snapshot)?;
        crate::crash_point!("snapshot::install::after_save");
        self.broker.install(state)?;
        self.meters.snapshot_installed();
        tracing::info!(index = ?meta.last_log_id.map(|l| l.index), "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        self.load_snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> SnapshotMeta {
        SnapshotMeta { last_log_id: None, last_membership: StoredMembership::default() }
    }

    #[test]
    fn a_snapshot_file_reads_back_only_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.json");
        write_snapshot_file(&path, &meta(), b"{\"format\":1}").unwrap();
        assert_eq!(damaged_snapshot(&path), None);
        let mut bytes = std::fs::read(&path).unwrap();
        let read = decode_snapshot_file(&bytes, &path).unwrap();
        assert_eq!(read.snapshot, b"{\"format\":1}");

        // Any flipped bit after the header is caught, and the error names the file.
        for at in [SNAPSHOT_HEADER_LEN, bytes.len() / 2, bytes.len() - 1] {
            bytes[at] ^= 0x01;
            let why = damaged_snapshot_bytes(&bytes, &path).expect("damage is caught");
            assert!(why.contains("snapshot.json") && why.contains("checksum"), "{why}");
            bytes[at] ^= 0x01;
        }
        // A newer file format is refused, saying so; an earlier release's bare JSON is still read.
        bytes[8] = 2;
        assert!(damaged_snapshot_bytes(&bytes, &path).unwrap().contains("format 2"));
        let legacy = serde_json::to_vec(&SnapshotFile { meta: meta(), data: b"{}".to_vec() }).unwrap();
        assert_eq!(decode_snapshot_file(&legacy, &path).unwrap().snapshot, b"{}");
    }

    fn damaged_snapshot_bytes(bytes: &[u8], path: &std::path::Path) -> Option<String> {
        decode_snapshot_file(bytes, path).err().map(|e| e.to_string())
    }
}
