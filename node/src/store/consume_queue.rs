//! The ConsumeQueue of one (topic, queue): fixed 20-byte records indexed by queue offset.
//!
//! ```text
//!  0 position  u64  where the message is in the log; the broker stores (Raft index << 16 | ordinal
//!                   within the entry), the same on every replica (see `broker::queue_position`)
//!  8 size      u32  message length (never 0: an all-zero record is an empty slot)
//! 12 tag code  i32  see `tag_hash`
//! 16 crc32c    u32  of bytes 0..16
//! ```
//!
//! The record of queue offset `o` lives at byte `(o mod records_per_file) × 20` of the file named
//! by the first offset it covers, so writing the same record twice (a replayed apply) changes
//! nothing. Records are only ever built from committed entries, so they are never truncated.
//!
//! RocketMQ keeps the tag code in 8 bytes, but it is Java's 32-bit `String.hashCode`: format 1
//! (earlier releases) stored it sign-extended, format 2 keeps its 4 bytes and a checksum in the
//! other 4, so a record that rotted on disk is found (`Slot::Damaged`) instead of followed to
//! another message. The format is named once for all queues (`QUEUES_FORMAT`, see `Queues`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::StoreError;
use crate::store::slot_files::{Misaligned, SlotFiles};

pub const CQ_RECORD_LEN: usize = 20;
const SUFFIX: &str = ".cq";
/// The record layout this release writes (see the module).
pub const CQ_FORMAT: u32 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqRecord {
    pub position: u64,
    pub size: u32,
    pub tag_hash: u64,
}

/// What one slot of a queue file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Empty,
    Record(CqRecord),
    /// Written once, but its checksum no longer matches.
    Damaged,
}

impl CqRecord {
    pub fn encode(&self) -> [u8; CQ_RECORD_LEN] {
        let mut b = [0u8; CQ_RECORD_LEN];
        b[0..8].copy_from_slice(&self.position.to_le_bytes());
        b[8..12].copy_from_slice(&self.size.to_le_bytes());
        // The low half is the whole of Java's hash code (see `tag_hash`).
        b[12..16].copy_from_slice(&(self.tag_hash as u32).to_le_bytes());
        let crc = crc32c::crc32c(&b[0..16]);
        b[16..20].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The record in a slot, if its checksum holds.
    pub fn decode(b: &[u8; CQ_RECORD_LEN]) -> Option<CqRecord> {
        match Slot::read(b) {
            Slot::Record(r) => Some(r),
            Slot::Empty | Slot::Damaged => None,
        }
    }

    /// A record of format 1: the tag code sign-extended over bytes 12..20, no checksum.
    fn decode_format_1(b: &[u8; CQ_RECORD_LEN]) -> Option<CqRecord> {
        let word = |r| le(b, r);
        let size = word(8..12) as u32;
        (size != 0).then(|| CqRecord { position: word(0..8), size, tag_hash: word(12..20) as u32 as i32 as i64 as u64 })
    }
}

impl Slot {
    pub fn read(b: &[u8; CQ_RECORD_LEN]) -> Slot {
        if b.iter().all(|&x| x == 0) {
            return Slot::Empty;
        }
        let word = |r| le(b, r);
        let size = word(8..12) as u32;
        if crc32c::crc32c(&b[0..16]) != word(16..20) as u32 || size == 0 {
            return Slot::Damaged;
        }
        Slot::Record(CqRecord { position: word(0..8), size, tag_hash: word(12..16) as u32 as i32 as i64 as u64 })
    }
}

/// The little-endian number in bytes `r` of `b` (at most 8).
fn le(b: &[u8; CQ_RECORD_LEN], r: std::ops::Range<usize>) -> u64 {
    b[r].iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x))
}

/// The tag code stored in ConsumeQueue records: Java's `String.hashCode` of the tag, as RocketMQ
/// stores it, so a tag filter can skip messages without reading them. No tag hashes to 0.
pub fn tag_hash(tag: &str) -> u64 {
    tag.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32)) as i64 as u64
}

/// Rewrites the records of format 1 in the queue files under `dir` (one queue's directory) in
/// format 2. Idempotent: a record already rewritten reads back the same under format 1's layout
/// (its tag code is in the same low bytes), so a crash halfway is finished by the next open.
pub fn upgrade_format_1(dir: &Path) -> Result<u64, StoreError> {
    let io = |e| StoreError::Io { path: dir.to_path_buf(), source: e };
    let mut rewritten = 0;
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.extension().is_none_or(|e| e != &SUFFIX[1..]) {
            continue;
        }
        let io = |e| StoreError::Io { path: path.clone(), source: e };
        let mut bytes = std::fs::read(&path).map_err(io)?;
        for chunk in bytes.chunks_exact_mut(CQ_RECORD_LEN) {
            let slot: &mut [u8; CQ_RECORD_LEN] = chunk.try_into().expect("exact chunks");
            if let Some(r) = CqRecord::decode_format_1(slot) {
                *slot = r.encode();
                rewritten += 1;
            }
        }
        let file = std::fs::OpenOptions::new().write(true).open(&path).map_err(io)?;
        std::os::unix::fs::FileExt::write_all_at(&file, &bytes, 0).map_err(io)?;
        file.sync_data().map_err(io)?;
    }
    Ok(rewritten)
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
        // A damaged record was written: it counts, and reads of it say so.
        let (start, end) = records.extent(|r| Slot::read(r) != Slot::Empty).unwrap_or((0, 0));
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

    /// The record at `offset`: `None` outside the queue or in a slot never written; an error
    /// naming the file and byte when the record no longer reads back.
    pub fn get(&self, offset: u64) -> Result<Option<CqRecord>, StoreError> {
        if offset < self.start() || offset >= self.end() {
            return Ok(None);
        }
        let Some(slot) = self.records.get(offset) else { return Ok(None) };
        match Slot::read(&slot) {
            Slot::Empty => Ok(None),
            Slot::Record(r) => Ok(Some(r)),
            Slot::Damaged => Err(StoreError::DamagedQueueRecord {
                path: self.records.path_of(offset),
                byte: self.records.byte_of(offset),
                offset,
            }),
        }
    }

    /// The file that holds `offset`'s record.
    pub fn path_of(&self, offset: u64) -> PathBuf {
        self.records.path_of(offset)
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
        assert_eq!(cq.get(7).unwrap(), Some(rec(7)));
        assert_eq!(cq.get(10).unwrap(), None);
        assert!((0..10).all(|o| cq.get(o).unwrap() == Some(rec(o))));
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
        assert_eq!(cq.get(4).unwrap(), None);
        assert_eq!(cq.get(5).unwrap(), Some(rec(5)));
        assert!(!dir.path().join(format!("{:020}{SUFFIX}", 0)).exists());
        let cq = ConsumeQueue::open(dir.path(), 4).unwrap();
        assert_eq!((cq.start(), cq.end()), (4, 10), "the partly purged file starts the queue again");
    }

    #[test]
    fn a_record_that_rots_is_an_error_naming_its_file_and_byte_never_another_record() {
        let dir = tempfile::tempdir().unwrap();
        let cq = ConsumeQueue::open(dir.path(), 8).unwrap();
        cq.put(0, &(0..3).map(rec).collect::<Vec<_>>()).unwrap();
        let file = dir.path().join(format!("{:020}{SUFFIX}", 0));
        // Every single bit of a record, flipped in turn, is caught.
        for bit in 0..CQ_RECORD_LEN * 8 {
            let mut bytes = fs::read(&file).unwrap();
            bytes[CQ_RECORD_LEN + bit / 8] ^= 1 << (bit % 8);
            fs::write(&file, &bytes).unwrap();
            let cq = ConsumeQueue::open(dir.path(), 8).unwrap();
            assert_eq!((cq.start(), cq.end()), (0, 3), "bit {bit}");
            match cq.get(1) {
                Err(StoreError::DamagedQueueRecord { path, byte, offset }) => {
                    assert_eq!((path, byte, offset), (file.clone(), CQ_RECORD_LEN as u64, 1), "bit {bit}")
                }
                other => panic!("bit {bit}: {other:?}"),
            }
            assert_eq!((cq.get(0).unwrap(), cq.get(2).unwrap()), (Some(rec(0)), Some(rec(2))));
            // Written back whole, it reads again.
            cq.put(1, &[rec(1)]).unwrap();
            assert_eq!(cq.get(1).unwrap(), Some(rec(1)));
        }
    }

    #[test]
    fn records_of_format_1_are_rewritten_with_their_checksum_and_the_same_meaning() {
        let dir = tempfile::tempdir().unwrap();
        let negative = CqRecord { tag_hash: tag_hash("Tag\u{4e2d}zz"), ..rec(1) };
        assert!((negative.tag_hash as i64) < 0, "a tag whose Java hash code is negative");
        let format_1 = |r: &CqRecord| {
            let mut b = [0u8; CQ_RECORD_LEN];
            b[0..8].copy_from_slice(&r.position.to_le_bytes());
            b[8..12].copy_from_slice(&r.size.to_le_bytes());
            b[12..20].copy_from_slice(&r.tag_hash.to_le_bytes());
            b
        };
        let mut file = Vec::new();
        for r in [rec(0), negative] {
            file.extend_from_slice(&format_1(&r));
        }
        file.resize(4 * CQ_RECORD_LEN, 0);
        fs::write(dir.path().join(format!("{:020}{SUFFIX}", 0)), &file).unwrap();
        // Read as format 2, the old records do not check out.
        let before = ConsumeQueue::open(dir.path(), 4).unwrap();
        assert!(before.get(0).is_err());
        drop(before);
        assert_eq!(upgrade_format_1(dir.path()).unwrap(), 2);
        // Twice (a crash before the format was named): nothing changes.
        assert_eq!(upgrade_format_1(dir.path()).unwrap(), 2);
        let cq = ConsumeQueue::open(dir.path(), 4).unwrap();
        assert_eq!((cq.start(), cq.end()), (0, 2));
        assert_eq!(cq.get(0).unwrap(), Some(rec(0)));
        assert_eq!(cq.get(1).unwrap(), Some(negative));
    }

    #[test]
    fn tag_hash_is_javas_string_hash_code() {
        // Values of "TagA".hashCode() and "".hashCode() in Java.
        assert_eq!(tag_hash("TagA") as i64, 2_598_919);
        assert_eq!(tag_hash(""), 0);
    }
}
