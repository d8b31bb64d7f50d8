//! `RaftLogStorage` and `RaftLogReader` over the CommitLog.
//!
//! Entries go to the CommitLog as records; the vote and the last purged log id go to the
//! `MetaStore` (sled) and are durable before the call that saves them returns. The committed log
//! id is saved there too, lazily (see `save_committed`).

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::broker::Broker;
use crate::metrics::Meters;
use crate::raft::entry_codec;
use crate::raft::repair::{Sources, fill_once};
use crate::raft::{Dialer, Entry, GroupId, LogId, NodeId, TypeConfig, Vote, other_members};
use crate::store::{CommitLog, LogConfig, LogReader, MetaStore, StoreError};

const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
const KEY_LAST_PURGED: &str = "last_purged";

/// How often a read that met damage fills it and reads again before it fails, and the first
/// pause between two rounds.
const READ_REPAIR_ROUNDS: usize = 3;
const READ_REPAIR_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Replication reads are capped by bytes, not entries: entries can be megabytes each.
const MAX_READ_BYTES: u64 = 8 << 20;

pub struct LogStore {
    log: CommitLog,
    reader: LogStoreReader,
}

#[derive(Clone)]
pub struct LogStoreReader {
    log: LogReader,
    meta: MetaStore,
    /// Who to fetch a record from when a read meets damage nobody found before (a running
    /// group: `set_read_repair`).
    repair: Option<Arc<ReadRepair>>,
}

/// How a running group's reads fill damage they meet: from the other members its last applied
/// membership names, as the repair at start does (`repair.rs`).
pub struct ReadRepair {
    pub group: GroupId,
    pub me: NodeId,
    pub broker: Broker,
    pub dialer: Dialer,
    pub meters: Meters,
}

fn load<T: DeserializeOwned>(meta: &MetaStore, key: &str) -> io::Result<Option<T>> {
    match meta.get(key)? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("stored {key}: {e}"))),
    }
}

fn save<T: Serialize>(meta: &MetaStore, key: &str, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(io::Error::other)?;
    Ok(meta.put_durable(key, &bytes)?)
}

impl LogStore {
    /// Opens the log in `config.dir` (CommitLog) and `config.dir/meta` (sled), recovering both.
    pub fn open(config: LogConfig) -> Result<LogStore, StoreError> {
        let meta = MetaStore::open(&config.dir.join("meta"))?;
        let last_purged: Option<LogId> =
            load(&meta, KEY_LAST_PURGED).map_err(|e| StoreError::Io { path: config.dir.join("meta"), source: e })?;
        let log = CommitLog::open(config, last_purged.map(|l| l.index))?;
        let reader = LogStoreReader { log: log.reader(), meta, repair: None };
        Ok(LogStore { log, reader })
    }

    /// From now on, a read that meets damage fills it from another member and reads again,
    /// instead of failing (which would stop Raft): a leader sending a sealed segment's records
    /// to a lagging follower before the scrubber reached them.
    pub fn set_read_repair(&mut self, repair: ReadRepair) {
        self.reader.repair = Some(Arc::new(repair));
    }

    /// The underlying CommitLog reader, for the state machine and admin reads.
    pub fn commit_log(&self) -> LogReader {
        self.log.reader()
    }

    /// The CommitLog itself, to fill damage before the group starts (`repair.rs`).
    pub fn commit_log_mut(&mut self) -> &mut CommitLog {
        &mut self.log
    }

    /// Reads what Raft reads of the log as it starts, so that damage among those records is
    /// found (and kept, for the repair) before it instead of stopping the start: every entry
    /// from `from` (the ones it applies again and looks for memberships in), and the first and
    /// last entry of each term (its list of key log ids, found by bisecting the terms). An error
    /// here is damage, now known to the log; the caller fills it and reads again.
    pub async fn read_as_raft_starts(&mut self, from: u64) -> io::Result<()> {
        self.log.reader().check_readable(from);
        let state = self.get_log_state().await?;
        let Some(last) = state.last_log_id else { return Ok(()) };
        // As openraft does: from the first entry after the purge point, unless all is purged.
        let next = state.last_purged_log_id.map_or(0, |p| p.index + 1);
        if next > last.index {
            return Ok(());
        }
        let Some(first) = self.reader.try_get_log_entries(next..next + 1).await?.first().map(|e| e.log_id) else {
            return Ok(());
        };
        self.reader.get_key_log_ids(first..=last).await.map(|_| ())
    }

    /// Syncs everything appended so far, whatever the durability mode (shutdown, benchmarks).
    pub fn commit_log_flush(&self) -> Result<(), StoreError> {
        self.log.flush()
    }
}

impl RaftLogReader<TypeConfig> for LogStoreReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> io::Result<Vec<Entry>> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e + 1,
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        };
        self.read_repairing(start, end, u64::MAX).await
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        load(&self.meta, KEY_VOTE)
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        self.read_repairing(start, end, MAX_READ_BYTES).await
    }
}

impl LogStoreReader {
    /// [`Self::read`]; a read that failed on damage (now known to the log) is tried again after
    /// filling it from the other members, in up to three rounds 100, 200 and 400 ms apart (a
    /// member may be catching up, or the scrubber filling the same records).
    async fn read_repairing(&self, start: u64, end: u64, max_bytes: u64) -> io::Result<Vec<Entry>> {
        let mut read = self.read(start, end, max_bytes);
        let Some(repair) = &self.repair else { return read };
        if read.is_err() {
            // Found by this read: counted as the scrubber and the start count theirs.
            let overlapping = self.log.damage().into_iter().filter(|d| d.first_index < end && start < d.end_index);
            repair.meters.corruption_found(overlapping.map(|d| d.end_index - d.first_index).sum());
        }
        let mut pause = READ_REPAIR_PAUSE;
        for _ in 0..READ_REPAIR_ROUNDS {
            if read.is_ok() || self.log.damage().is_empty() {
                return read;
            }
            let members = other_members(&repair.broker, repair.me)?;
            let sources = Sources { group: repair.group, members, dialer: &repair.dialer };
            if let Err(why) = fill_once(&mut self.log.clone(), (start, end), &sources, &repair.meters).await {
                tracing::warn!(group = repair.group.0, start, end, %why, "a log read met damage not filled yet");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            read = self.read(start, end, max_bytes);
        }
        if let Err(e) = &read {
            tracing::error!(group = repair.group.0, error = %e, "a log read met damage no other member could fill");
        }
        read
    }

    fn read(&self, start: u64, end: u64, max_bytes: u64) -> io::Result<Vec<Entry>> {
        if start >= end {
            return Ok(Vec::new());
        }
        self.log.read_range(start, end, max_bytes)?.into_iter().map(entry_codec::decode).collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStoreReader;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let last_purged: Option<LogId> = load(&self.reader.meta, KEY_LAST_PURGED)?;
        let last = self.log.bounds().last.map(|m| entry_codec::log_id(&m));
        Ok(LogState { last_log_id: last.or(last_purged), last_purged_log_id: last_purged })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.reader.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        save(&self.reader.meta, KEY_VOTE, vote)
    }

    /// Not synced per call: openraft calls this on every commit advance, inside its core loop,
    /// and an fsync there cost 40 % of produce throughput. It reaches the disk with the next vote
    /// or purge, or sled's own flush (every 500 ms). A committed id lost in a crash only means the
    /// node re-learns the commit index from the leader; safety does not depend on it.
    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        match committed {
            Some(c) => Ok(self.reader.meta.put(KEY_COMMITTED, &serde_json::to_vec(&c).map_err(io::Error::other)?)?),
            None => Ok(self.reader.meta.remove_durable(KEY_COMMITTED)?),
        }
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        load(&self.reader.meta, KEY_COMMITTED)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let records = entries.into_iter().map(|e| entry_codec::encode(&e)).collect::<io::Result<Vec<_>>>()?;
        self.log.append(records, Box::new(move |result| callback.io_completed(result)))?;
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        Ok(self.log.truncate_after(last_log_id.map(|l| l.index))?)
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        // Recorded first: if the files go but this did not, the log would look like it had a hole.
        save(&self.reader.meta, KEY_LAST_PURGED, &log_id)?;
        crate::crash_point!("log::purge::after_save");
        Ok(self.log.purge(log_id.index)?)
    }
}
