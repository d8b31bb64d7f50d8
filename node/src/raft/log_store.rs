//! `RaftLogStorage` and `RaftLogReader` over the CommitLog.
//!
//! Entries go to the CommitLog as records; the vote and the last purged log id go to the
//! `MetaStore` (sled) and are durable before the call that saves them returns. The committed log
//! id is saved there too, lazily (see `save_committed`).

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::raft::entry_codec;
use crate::raft::{Entry, LogId, TypeConfig, Vote};
use crate::store::{CommitLog, LogConfig, LogReader, MetaStore, StoreError};

const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
const KEY_LAST_PURGED: &str = "last_purged";

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
        let reader = LogStoreReader { log: log.reader(), meta };
        Ok(LogStore { log, reader })
    }

    /// The underlying CommitLog reader, for the state machine and admin reads.
    pub fn commit_log(&self) -> LogReader {
        self.log.reader()
    }

    /// The CommitLog itself, to fill damage before the group starts (`repair.rs`).
    pub fn commit_log_mut(&mut self) -> &mut CommitLog {
        &mut self.log
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
        self.read(start, end, u64::MAX)
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        load(&self.meta, KEY_VOTE)
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        self.read(start, end, MAX_READ_BYTES)
    }
}

impl LogStoreReader {
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
