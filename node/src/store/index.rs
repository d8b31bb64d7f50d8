//! The log index: `index → (segment, position, length, term)` in fixed 32-byte slots.
//!
//! Slots live in files of `slots_per_file` slots, named by the first index they cover, so the
//! slot of index `i` is at byte `(i - file_start) × 32`. The index is a cache of what the segments
//! say: it is not synced on the append path, every slot carries its own CRC, and every read checks
//! the record it points at, so a stale or torn slot is detected and rebuilt from the segments.
//!
//! ```text
//!  0 segment   u64  base offset of the segment holding the record
//!  8 position  u32  byte position of the record header within that segment
//! 12 length    u32  payload length
//! 16 term      u64
//! 24 crc       u32  CRC32C of bytes 0..24; an all-zero slot is empty
//! 28 reserved  u32
//! ```

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use memmap2::Mmap;

use crate::store::StoreError;

pub const SLOT_LEN: u64 = 32;
const SUFFIX: &str = ".idx";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSlot {
    pub segment: u64,
    pub position: u32,
    pub length: u32,
    pub term: u64,
}

impl IndexSlot {
    fn encode(&self) -> [u8; SLOT_LEN as usize] {
        let mut s = [0u8; SLOT_LEN as usize];
        s[0..8].copy_from_slice(&self.segment.to_le_bytes());
        s[8..12].copy_from_slice(&self.position.to_le_bytes());
        s[12..16].copy_from_slice(&self.length.to_le_bytes());
        s[16..24].copy_from_slice(&self.term.to_le_bytes());
        let crc = crc32c::crc32c(&s[0..24]);
        s[24..28].copy_from_slice(&crc.to_le_bytes());
        s
    }

    fn decode(s: &[u8]) -> Option<IndexSlot> {
        let crc = u32::from_le_bytes(s[24..28].try_into().ok()?);
        if crc32c::crc32c(&s[0..24]) != crc || s.iter().all(|&b| b == 0) {
            return None;
        }
        Some(IndexSlot {
            segment: u64::from_le_bytes(s[0..8].try_into().ok()?),
            position: u32::from_le_bytes(s[8..12].try_into().ok()?),
            length: u32::from_le_bytes(s[12..16].try_into().ok()?),
            term: u64::from_le_bytes(s[16..24].try_into().ok()?),
        })
    }
}

struct IndexFile {
    file: File,
    map: Mmap,
    path: PathBuf,
}

pub struct LogIndex {
    dir: PathBuf,
    slots_per_file: u64,
    files: RwLock<BTreeMap<u64, Arc<IndexFile>>>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

impl LogIndex {
    pub fn open(dir: &Path, slots_per_file: u64) -> Result<LogIndex, StoreError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let index = LogIndex { dir: dir.to_path_buf(), slots_per_file, files: RwLock::new(BTreeMap::new()) };
        let mut files = BTreeMap::new();
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let name = entry.file_name();
            let Some(start) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)).and_then(|d| d.parse::<u64>().ok())
            else {
                continue;
            };
            if start % slots_per_file != 0 {
                // Written with another slots-per-file setting: useless now, rebuilt on demand.
                fs::remove_file(entry.path()).map_err(io_err(dir))?;
                continue;
            }
            files.insert(start, Arc::new(index.open_file(start)?));
        }
        *index.files.write().expect("index lock") = files;
        Ok(index)
    }

    fn open_file(&self, start: u64) -> Result<IndexFile, StoreError> {
        let path = self.dir.join(format!("{start:020}{SUFFIX}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        let want = self.slots_per_file * SLOT_LEN;
        if file.metadata().map_err(io_err(&path))?.len() != want {
            file.set_len(want).map_err(io_err(&path))?;
        }
        // SAFETY: index files belong to this store and keep a fixed length while mapped; slots
        // are copied out of the mapping, never borrowed beyond a call.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err(&path))?;
        Ok(IndexFile { file, map, path })
    }

    fn file_for(&self, index: u64, create: bool) -> Result<Option<Arc<IndexFile>>, StoreError> {
        let start = index - index % self.slots_per_file;
        if let Some(f) = self.files.read().expect("index lock").get(&start) {
            return Ok(Some(Arc::clone(f)));
        }
        if !create {
            return Ok(None);
        }
        let mut files = self.files.write().expect("index lock");
        if let Some(f) = files.get(&start) {
            return Ok(Some(Arc::clone(f)));
        }
        let f = Arc::new(self.open_file(start)?);
        files.insert(start, Arc::clone(&f));
        Ok(Some(f))
    }

    /// Writes the slots of `first, first + 1, …` in as few writes as the file boundaries allow.
    pub fn put(&self, first: u64, slots: &[IndexSlot]) -> Result<(), StoreError> {
        let mut done = 0usize;
        while done < slots.len() {
            let index = first + done as u64;
            let in_file = (self.slots_per_file - index % self.slots_per_file) as usize;
            let n = in_file.min(slots.len() - done);
            let mut buf = Vec::with_capacity(n * SLOT_LEN as usize);
            for s in &slots[done..done + n] {
                buf.extend_from_slice(&s.encode());
            }
            let f = self.file_for(index, true)?.expect("created");
            f.file.write_all_at(&buf, (index % self.slots_per_file) * SLOT_LEN).map_err(io_err(&f.path))?;
            done += n;
        }
        Ok(())
    }

    /// The slot of `index`, if one was written and is intact.
    pub fn get(&self, index: u64) -> Option<IndexSlot> {
        let f = self.file_for(index, false).ok()??;
        let at = ((index % self.slots_per_file) * SLOT_LEN) as usize;
        IndexSlot::decode(&f.map[at..at + SLOT_LEN as usize])
    }

    /// Drops index files that only cover indexes below `index`.
    pub fn remove_below(&self, index: u64) -> Result<(), StoreError> {
        let mut files = self.files.write().expect("index lock");
        let doomed: Vec<u64> = files.keys().copied().filter(|&s| s + self.slots_per_file <= index).collect();
        for start in doomed {
            if let Some(f) = files.remove(&start) {
                fs::remove_file(&f.path).map_err(io_err(&f.path))?;
            }
        }
        Ok(())
    }

    pub fn sync(&self) -> Result<(), StoreError> {
        for f in self.files.read().expect("index lock").values() {
            f.file.sync_data().map_err(io_err(&f.path))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_across_files_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let slots: Vec<IndexSlot> =
            (0..10).map(|i| IndexSlot { segment: 4096 * i, position: 64 + i as u32, length: 7, term: i / 3 }).collect();
        {
            let index = LogIndex::open(dir.path(), 4).unwrap();
            index.put(3, &slots).unwrap();
            assert_eq!(index.get(2), None);
            assert_eq!(index.get(3), Some(slots[0]));
            assert_eq!(index.get(12), Some(slots[9]));
        }
        let index = LogIndex::open(dir.path(), 4).unwrap();
        for (i, s) in slots.iter().enumerate() {
            assert_eq!(index.get(3 + i as u64), Some(*s));
        }
        index.remove_below(8).unwrap();
        assert_eq!(index.get(7), None, "file 4..8 removed");
        assert_eq!(index.get(8), Some(slots[5]));
    }

    #[test]
    fn a_damaged_slot_reads_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        let index = LogIndex::open(dir.path(), 8).unwrap();
        index.put(0, &[IndexSlot { segment: 0, position: 64, length: 1, term: 1 }]).unwrap();
        let path = dir.path().join(format!("{:020}{SUFFIX}", 0));
        let f = OpenOptions::new().write(true).open(path).unwrap();
        f.write_all_at(&[0xFF], 9).unwrap();
        assert_eq!(index.get(0), None);
    }
}
