//! The node's storage engine.
//!
//! - [`CommitLog`]: one append-only log of fixed-size, preallocated segment files, mapped with
//!   memmap2. It is the Raft log (see `raft/`) and the message store at once: every Raft entry is
//!   one record, and messages are read back zero-copy from the mapping.
//! - [`LogIndex`](index::LogIndex): `index → (segment, position, length, term)` in 32-byte slots.
//! - [`ConsumeQueue`]: per (topic, queue) files of 20-byte records pointing into the CommitLog.
//! - [`MessageIndex`]: message id → where the message is, in hashed files (for lookups by id).
//! - [`MetaStore`]: small durable values (vote, committed, last purged) in sled.
//! - [`layout`]: where each Raft group's files live under the data directory.
//!
//! Durability is chosen by [`Durability`]; see `docs/durability.md` for what each mode can lose.

mod commit_log;
#[cfg(test)]
mod commit_log_test;
mod consume_queue;
mod durable;
mod flush;
pub mod free_space;
pub mod index;
pub mod layout;
mod message_index;
mod meta;
pub mod record;
pub mod retention;
mod segment;
mod slot_files;
mod sync_mark;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use commit_log::{CommitLog, Damage, LogBounds, LogReader, StoredRecord, segment_written_end};
pub use consume_queue::{CQ_FORMAT, CQ_RECORD_LEN, ConsumeQueue, CqRecord, Slot, tag_hash, upgrade_format_1};
pub use flush::FlushCallback;
pub use message_index::{
    DEFAULT_ENTRIES_PER_FILE as DEFAULT_MESSAGE_INDEX_ENTRIES_PER_FILE, Located, MessageIndex, Place,
};
pub use meta::MetaStore;
pub use record::RecordMeta;

/// When an append counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Done once fsync'd; one fsync covers every append pending at that moment (group commit).
    Sync,
    /// Done once in the page cache; a background thread fsyncs every `flush_interval`.
    Async,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Directory holding `segments/` and `index/`.
    pub dir: PathBuf,
    /// Bytes per segment file (1 GiB default; tests use 1 MiB).
    pub segment_size: u64,
    /// Log index slots per index file (32 bytes each).
    pub index_slots_per_file: u64,
    pub durability: Durability,
    /// How often `async` mode syncs.
    pub flush_interval: Duration,
}

pub const DEFAULT_SEGMENT_SIZE: u64 = 1 << 30;
pub const MIN_SEGMENT_SIZE: u64 = 1 << 20;

impl LogConfig {
    pub fn new(dir: impl AsRef<Path>) -> LogConfig {
        LogConfig {
            dir: dir.as_ref().to_path_buf(),
            segment_size: DEFAULT_SEGMENT_SIZE,
            index_slots_per_file: 1 << 20,
            durability: Durability::Sync,
            flush_interval: Duration::from_millis(10),
        }
    }

    pub fn validate(&self) -> Result<(), StoreError> {
        // Positions inside a segment are stored as u32.
        if !(MIN_SEGMENT_SIZE..=u32::MAX as u64).contains(&self.segment_size) {
            return Err(StoreError::Config(format!(
                "segment_size must be between {MIN_SEGMENT_SIZE} and {} bytes, got {}",
                u32::MAX,
                self.segment_size
            )));
        }
        if self.index_slots_per_file == 0 {
            return Err(StoreError::Config("index_slots_per_file must be positive".into()));
        }
        Ok(())
    }

    /// The largest record payload (one Raft entry) a segment can hold: a record never spans two
    /// segments, so anything larger can never be appended.
    pub fn max_record_payload(&self) -> u64 {
        self.segment_size.saturating_sub(segment::FILE_HEADER_LEN + record::HEADER_LEN as u64)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("segment {path} is unusable: {reason}")]
    CorruptSegment { path: PathBuf, reason: String },
    #[error("log record {index} is corrupt: {reason}")]
    CorruptRecord { index: u64, reason: RecordFault },
    /// A record the log once held whole that does not read back: never served, and filled again
    /// from another member.
    #[error("log record {index} does not read back ({path}, damaged from byte {offset})")]
    Damaged { index: u64, path: PathBuf, offset: u64 },
    /// A file of a newer format than this release knows: refused rather than half read.
    #[error("{path} is of format {found}; this release knows formats up to {known}: upgrade this node")]
    Format { path: PathBuf, found: u32, known: u32 },
    /// Records offered to fill damage that cannot be the ones it held.
    #[error("cannot fill the damage at {first_index}: {reason}")]
    Unfit { first_index: u64, reason: String },
    /// A ConsumeQueue record that no longer reads back: never followed, rebuilt from the log
    /// and the message index (`broker::queue_repair`).
    #[error("consume queue record {offset} does not read back ({path}, byte {byte})")]
    DamagedQueueRecord { path: PathBuf, byte: u64, offset: u64 },
    #[error("log record {0} is missing")]
    Missing(u64),
    #[error("append out of order: expected index {expected}, got {got}")]
    OutOfOrder { expected: u64, got: u64 },
    #[error("record of {len} bytes exceeds the {max} bytes a segment can hold")]
    RecordTooLarge { len: u64, max: u64 },
    #[error("invalid store configuration: {0}")]
    Config(String),
    #[error("metadata store: {0}")]
    Meta(#[from] sled::Error),
    /// An fsync failed. The kernel may have dropped the pages it could not write, so the log
    /// that sees this stops for good (see [`StoreError::FailStopped`]).
    #[error("fsync of {path} failed: {source}")]
    SyncFailed { path: PathBuf, source: std::io::Error },
    /// An earlier fsync of the log failed; nothing more is appended or reported durable until the
    /// node restarts and recovers from what is really on disk.
    #[error("the log stopped after a failed fsync: {0}")]
    FailStopped(String),
}

/// What is wrong with a record read back from a file the node wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordFault {
    #[error("header past end of segment")]
    HeaderPastEnd,
    #[error("{0}")]
    BadHeader(&'static str),
    #[error("no record at this position")]
    NoRecord,
    #[error("record carries index {0}")]
    OtherIndex(u64),
    #[error("payload past end of segment")]
    PayloadPastEnd,
    #[error("checksum mismatch")]
    Checksum,
    #[error("missing or damaged in its segment")]
    Damaged,
    #[error("torn header")]
    TornHeader,
    #[error("torn body")]
    TornBody,
    #[error("undecodable")]
    Undecodable,
    /// A record that checks out but belongs elsewhere (a timer in another hour's file).
    #[error("not where it belongs")]
    Misplaced,
}

/// A record of a journal the node wrote that does not read back whole, and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("record at byte {at}: {fault}")]
pub struct JournalFault {
    pub at: u64,
    pub fault: RecordFault,
}

impl StoreError {
    /// An I/O error raised on the way to an fsync (injected ones included) counts as that fsync
    /// failing.
    fn into_sync_failure(self) -> StoreError {
        match self {
            StoreError::Io { path, source } => StoreError::SyncFailed { path, source },
            e => e,
        }
    }
}

/// Attaches the path to a failed fsync, for `map_err`.
fn sync_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::SyncFailed { path: path.to_path_buf(), source }
}

/// Attaches the path to an I/O error, for `map_err`.
fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

impl From<StoreError> for std::io::Error {
    fn from(e: StoreError) -> std::io::Error {
        use std::io::ErrorKind;
        let kind = match &e {
            StoreError::Io { source, .. } => source.kind(),
            StoreError::CorruptSegment { .. }
            | StoreError::CorruptRecord { .. }
            | StoreError::Damaged { .. }
            | StoreError::DamagedQueueRecord { .. }
            | StoreError::Format { .. }
            | StoreError::Missing(_) => ErrorKind::InvalidData,
            StoreError::Unfit { .. } => ErrorKind::InvalidInput,
            StoreError::OutOfOrder { .. } | StoreError::RecordTooLarge { .. } | StoreError::Config(_) => {
                ErrorKind::InvalidInput
            }
            StoreError::SyncFailed { source, .. } => source.kind(),
            StoreError::Meta(_) | StoreError::FailStopped(_) => ErrorKind::Other,
        };
        std::io::Error::new(kind, e)
    }
}

/// Makes the entries of `dir` (files created, renamed or deleted in it) durable. Creating or
/// deleting a file is not durable until its directory is synced, whatever was done to the file.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    let d = File::open(dir).map_err(io_err(dir))?;
    let sync = || -> Result<(), StoreError> {
        crate::crash_point!("store::sync_dir");
        d.sync_all().map_err(io_err(dir))
    };
    sync().map_err(StoreError::into_sync_failure)
}

/// `create_dir_all`, made durable: each directory it creates is recorded in its parent by a sync
/// of that parent.
pub fn create_dir_durable(dir: &Path) -> Result<(), StoreError> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.is_dir() {
        missing.push(at);
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => break,
        }
    }
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {}
            // Someone else is creating it: its entry must still be durable before we rely on it.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StoreError::Io { path: d.to_path_buf(), source: e }),
        }
        let parent = d.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        sync_dir(parent)?;
    }
    Ok(())
}
