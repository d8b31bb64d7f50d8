//! The ConsumeQueue of one (topic, queue): fixed 20-byte records indexed by queue offset.
//!
//! ```text
//!  0 position  u64  where the message is in the log; the broker stores (Raft index << 16 | ordinal
//!                   within the entry), the same on every replica (see `broker::queue_position`)
//!  8 size      u32  message length (never 0: an all-zero record is an empty slot)
//! 12 tag hash  u64  see `tag_hash`
//! ```
//!
//! The record of queue offset `o` lives at byte `(o mod records_per_file) × 20` of the file named
//! by the first offset it covers, so writing the same record twice (a replayed apply) changes
//! nothing. Records are only ever built from committed entries, so they are never truncated.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::StoreError;
use crate::store::slot_files::{Misaligned, SlotFiles};

pub const CQ_RECORD_LEN: usize = 20;
const SUFFIX: &str = ".cq";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqRecord {
    pub position: u64,
    pub size: u32,
    pub tag_hash: u64,
}

impl CqRecord {
    pub fn encode(&self) -> [u8; CQ_RECORD_LEN] {
        let mut b = [0u8; CQ_RECORD_LEN];
        b[0..8].copy_from_slice(&self.position.to_le_bytes());
        b[8..12].copy_from_slice(&self.size.to_le_bytes());
        b[12..20].copy_from_slice(&self.tag_hash.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<CqRecord> {
        let size = u32::from_le_bytes(b.get(8..12)?.try_into().ok()?);
        if size == 0 {
            return None;
        }
        Some(CqRecord {
            position: u64::from_le_bytes(b.get(0..8)?.try_into().ok()?),
            size,
            tag_hash: u64::from_le_bytes(b.get(12..20)?.try_into().ok()?),
        })
    }
}

/// The tag code stored in ConsumeQueue records: Java's `String.hashCode` of the tag, as RocketMQ
/// stores it, so a tag filter can skip messages without reading them. No tag hashes to 0.
pub fn tag_hash(tag: &str) -> u64 {
    tag.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32)) as i64 as u64
}

pub struct ConsumeQueue {
    records: SlotFiles<CQ_RECORD_LEN>,
    /// One past the highest offset written.
    end: AtomicU64,
    /// The lowest offset that may still be read.
    start: AtomicU64,
}

impl ConsumeQueue {
    /// Opens the queue in `dir`, finding its extent from the files present.
    pub fn open(dir: &Path, records_per_file: u64) -> Result<ConsumeQueue, StoreError> {
        let records = SlotFiles::open(dir, SUFFIX, records_per_file, Misaligned::Refuse)?;
        let (start, end) = records.extent(|r| CqRecord::decode(r).is_some()).unwrap_or((0, 0));
        Ok(ConsumeQueue { records, end: AtomicU64::new(end), start: AtomicU64::new(start) })
    }

    /// Writes `records` at queue offsets `first, first + 1, …`: one write per file, not one per
    /// record (an entry's messages to one queue are consecutive). Idempotent. A record of size 0
    /// refuses the whole run and writes nothing.
    pub fn put(&self, first: u64, records: &[CqRecord]) -> Result<(), StoreError> {
        if records.iter().any(|r| r.size == 0) {
            return Err(StoreError::Config("a consume queue record needs a non-zero size".into()));
        }
        let encoded: Vec<[u8; CQ_RECORD_LEN]> = records.iter().map(CqRecord::encode).collect();
        self.records.put(first, &encoded)?;
        self.end.fetch_max(first + records.len() as u64, Ordering::AcqRel);
        Ok(())
    }

    pub fn get(&self, offset: u64) -> Option<CqRecord> {
        if offset < self.start() || offset >= self.end() {
            return None;
        }
        CqRecord::decode(&self.records.get(offset)?)
    }

    /// The lowest readable offset.
    pub fn start(&self) -> u64 {
        self.start.load(Ordering::Acquire)
    }

    /// One past the highest offset written: the next offset to assign.
    pub fn end(&self) -> u64 {
        self.end.load(Ordering::Acquire)
    }

    /// Forgets offsets below `offset`, deleting files that hold nothing else.
    pub fn purge_below(&self, offset: u64) -> Result<(), StoreError> {
        self.start.fetch_max(offset, Ordering::AcqRel);
        self.records.remove_below(offset)
    }

    pub fn sync(&self) -> Result<(), StoreError> {
        self.records.sync()
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn rec(i: u64) -> CqRecord {
        CqRecord { position: 1000 + i * 64, size: 64, tag_hash: tag_hash("TagA") }
    }

    #[test]
    fn records_are_found_by_offset_across_files_and_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let cq = ConsumeQueue::open(dir.path(), 4).unwrap();
            // Runs that cross files of 4, then single records.
            cq.put(0, &(0..7).map(rec).collect::<Vec<_>>()).unwrap();
            for i in 7..10 {
                cq.put(i, &[rec(i)]).unwrap();
            }
            assert_eq!(cq.end(), 10);
        }
        let cq = ConsumeQueue::open(dir.path(), 4).unwrap();
        assert_eq!((cq.start(), cq.end()), (0, 10));
        assert_eq!(cq.get(7), Some(rec(7)));
        assert_eq!(cq.get(10), None);
        assert!((0..10).all(|o| cq.get(o) == Some(rec(o))));
    }

    #[test]
    fn rewriting_a_record_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let cq = ConsumeQueue::open(dir.path(), 8).unwrap();
        cq.put(0, &[rec(0), rec(1)]).unwrap();
        let before = fs::read(dir.path().join(format!("{:020}{SUFFIX}", 0))).unwrap();
        cq.put(0, &[rec(0)]).unwrap();
        cq.put(1, &[rec(1)]).unwrap();
        let after = fs::read(dir.path().join(format!("{:020}{SUFFIX}", 0))).unwrap();
        assert_eq!(before, after);
        assert_eq!(cq.end(), 2);
        assert_eq!(&before[20..40], &rec(1).encode());
        // A run with a record of size 0 is refused whole.
        let bad = CqRecord { size: 0, ..rec(3) };
        assert!(cq.put(2, &[rec(2), bad]).is_err());
        assert_eq!(fs::read(dir.path().join(format!("{:020}{SUFFIX}", 0))).unwrap(), after);
        assert_eq!(cq.end(), 2);
    }

    #[test]
    fn purge_drops_whole_files_and_hides_older_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let cq = ConsumeQueue::open(dir.path(), 4).unwrap();
        cq.put(0, &(0..10).map(rec).collect::<Vec<_>>()).unwrap();
        cq.purge_below(5).unwrap();
        assert_eq!(cq.get(4), None);
        assert_eq!(cq.get(5), Some(rec(5)));
        assert!(!dir.path().join(format!("{:020}{SUFFIX}", 0)).exists());
        let cq = ConsumeQueue::open(dir.path(), 4).unwrap();
        assert_eq!((cq.start(), cq.end()), (4, 10), "the partly purged file starts the queue again");
    }

    #[test]
    fn tag_hash_is_javas_string_hash_code() {
        // Values of "TagA".hashCode() and "".hashCode() in Java.
        assert_eq!(tag_hash("TagA") as i64, 2_598_919);
        assert_eq!(tag_hash(""), 0);
    }
}
