//! The ConsumeQueue of one (topic, queue): fixed 20-byte records indexed by queue offset.
//!
//! ```text
//!  0 position  u64  global CommitLog offset of the message bytes
//!  8 size      u32  message length (never 0: an all-zero record is an empty slot)
//! 12 tag hash  u64  see `tag_hash`
//! ```
//!
//! The record of queue offset `o` lives at byte `(o mod records_per_file) × 20` of the file named
//! by the first offset it covers, so writing the same record twice (a replayed apply) changes
//! nothing. Records are only ever built from committed entries, so they are never truncated.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use memmap2::Mmap;

use crate::store::StoreError;

pub const CQ_RECORD_LEN: u64 = 20;
const SUFFIX: &str = ".cq";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqRecord {
    pub position: u64,
    pub size: u32,
    pub tag_hash: u64,
}

impl CqRecord {
    pub fn encode(&self) -> [u8; CQ_RECORD_LEN as usize] {
        let mut b = [0u8; CQ_RECORD_LEN as usize];
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

struct CqFile {
    file: File,
    map: Mmap,
    path: PathBuf,
}

pub struct ConsumeQueue {
    dir: PathBuf,
    records_per_file: u64,
    files: RwLock<BTreeMap<u64, Arc<CqFile>>>,
    /// One past the highest offset written.
    end: AtomicU64,
    /// The lowest offset that may still be read.
    start: AtomicU64,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

impl ConsumeQueue {
    /// Opens the queue in `dir`, finding its extent from the files present.
    pub fn open(dir: &Path, records_per_file: u64) -> Result<ConsumeQueue, StoreError> {
        if records_per_file == 0 {
            return Err(StoreError::Config("consume queue records_per_file must be positive".into()));
        }
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let cq = ConsumeQueue {
            dir: dir.to_path_buf(),
            records_per_file,
            files: RwLock::new(BTreeMap::new()),
            end: AtomicU64::new(0),
            start: AtomicU64::new(0),
        };
        let mut files = BTreeMap::new();
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let name = entry.file_name();
            let Some(first) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)).and_then(|d| d.parse::<u64>().ok())
            else {
                continue;
            };
            if first % records_per_file != 0 {
                return Err(StoreError::CorruptSegment {
                    path: entry.path(),
                    reason: format!("not aligned to {records_per_file} records per file"),
                });
            }
            files.insert(first, Arc::new(cq.open_file(first)?));
        }
        if let Some((&first, f)) = files.last_key_value() {
            let used = (0..records_per_file).rev().find(|&i| {
                CqRecord::decode(&f.map[(i * CQ_RECORD_LEN) as usize..][..CQ_RECORD_LEN as usize]).is_some()
            });
            cq.end.store(used.map_or(first, |i| first + i + 1), Ordering::Release);
        }
        if let Some((&first, f)) = files.first_key_value() {
            let used = (0..records_per_file).find(|&i| {
                CqRecord::decode(&f.map[(i * CQ_RECORD_LEN) as usize..][..CQ_RECORD_LEN as usize]).is_some()
            });
            cq.start.store(used.map_or(first, |i| first + i), Ordering::Release);
        }
        *cq.files.write().expect("cq lock") = files;
        Ok(cq)
    }

    fn open_file(&self, first: u64) -> Result<CqFile, StoreError> {
        let path = self.dir.join(format!("{first:020}{SUFFIX}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        let want = self.records_per_file * CQ_RECORD_LEN;
        if file.metadata().map_err(io_err(&path))?.len() != want {
            file.set_len(want).map_err(io_err(&path))?;
        }
        // SAFETY: consume queue files belong to this store and keep a fixed length while mapped;
        // records are copied out, never borrowed beyond a call.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err(&path))?;
        Ok(CqFile { file, map, path })
    }

    fn file_for(&self, offset: u64, create: bool) -> Result<Option<Arc<CqFile>>, StoreError> {
        let first = offset - offset % self.records_per_file;
        if let Some(f) = self.files.read().expect("cq lock").get(&first) {
            return Ok(Some(Arc::clone(f)));
        }
        if !create {
            return Ok(None);
        }
        let mut files = self.files.write().expect("cq lock");
        if let Some(f) = files.get(&first) {
            return Ok(Some(Arc::clone(f)));
        }
        let f = Arc::new(self.open_file(first)?);
        files.insert(first, Arc::clone(&f));
        Ok(Some(f))
    }

    /// Writes the record of queue offset `offset`. Idempotent.
    pub fn put(&self, offset: u64, record: &CqRecord) -> Result<(), StoreError> {
        if record.size == 0 {
            return Err(StoreError::Config("a consume queue record needs a non-zero size".into()));
        }
        let f = self.file_for(offset, true)?.expect("created");
        f.file
            .write_all_at(&record.encode(), (offset % self.records_per_file) * CQ_RECORD_LEN)
            .map_err(io_err(&f.path))?;
        self.end.fetch_max(offset + 1, Ordering::AcqRel);
        Ok(())
    }

    pub fn get(&self, offset: u64) -> Option<CqRecord> {
        if offset < self.start() || offset >= self.end() {
            return None;
        }
        let f = self.file_for(offset, false).ok()??;
        let at = ((offset % self.records_per_file) * CQ_RECORD_LEN) as usize;
        CqRecord::decode(&f.map[at..at + CQ_RECORD_LEN as usize])
    }

    /// Up to `max` records from `from` on, with their offsets.
    pub fn range(&self, from: u64, max: usize) -> Vec<(u64, CqRecord)> {
        (from.max(self.start())..self.end()).filter_map(|o| self.get(o).map(|r| (o, r))).take(max).collect()
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
        let mut files = self.files.write().expect("cq lock");
        let doomed: Vec<u64> = files.keys().copied().filter(|&f| f + self.records_per_file <= offset).collect();
        for first in doomed {
            if let Some(f) = files.remove(&first) {
                fs::remove_file(&f.path).map_err(io_err(&f.path))?;
            }
        }
        Ok(())
    }

    pub fn sync(&self) -> Result<(), StoreError> {
        for f in self.files.read().expect("cq lock").values() {
            f.file.sync_data().map_err(io_err(&f.path))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u64) -> CqRecord {
        CqRecord { position: 1000 + i * 64, size: 64, tag_hash: tag_hash("TagA") }
    }

    #[test]
    fn records_are_found_by_offset_across_files_and_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let cq = ConsumeQueue::open(dir.path(), 4).unwrap();
            for i in 0..10 {
                cq.put(i, &rec(i)).unwrap();
            }
            assert_eq!(cq.end(), 10);
        }
        let cq = ConsumeQueue::open(dir.path(), 4).unwrap();
        assert_eq!((cq.start(), cq.end()), (0, 10));
        assert_eq!(cq.get(7), Some(rec(7)));
        assert_eq!(cq.get(10), None);
        let got: Vec<u64> = cq.range(3, 4).into_iter().map(|(o, _)| o).collect();
        assert_eq!(got, vec![3, 4, 5, 6]);
    }

    #[test]
    fn rewriting_a_record_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let cq = ConsumeQueue::open(dir.path(), 8).unwrap();
        cq.put(0, &rec(0)).unwrap();
        cq.put(1, &rec(1)).unwrap();
        let before = fs::read(dir.path().join(format!("{:020}{SUFFIX}", 0))).unwrap();
        cq.put(0, &rec(0)).unwrap();
        cq.put(1, &rec(1)).unwrap();
        let after = fs::read(dir.path().join(format!("{:020}{SUFFIX}", 0))).unwrap();
        assert_eq!(before, after);
        assert_eq!(cq.end(), 2);
        assert_eq!(&before[20..40], &rec(1).encode());
    }

    #[test]
    fn purge_drops_whole_files_and_hides_older_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let cq = ConsumeQueue::open(dir.path(), 4).unwrap();
        for i in 0..10 {
            cq.put(i, &rec(i)).unwrap();
        }
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
