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

use std::path::Path;

use crate::store::StoreError;
use crate::store::slot_files::{Misaligned, SlotFiles};

pub const SLOT_LEN: usize = 32;
const SUFFIX: &str = ".idx";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSlot {
    pub segment: u64,
    pub position: u32,
    pub length: u32,
    pub term: u64,
}

impl IndexSlot {
    fn encode(&self) -> [u8; SLOT_LEN] {
        let mut s = [0u8; SLOT_LEN];
        s[0..8].copy_from_slice(&self.segment.to_le_bytes());
        s[8..12].copy_from_slice(&self.position.to_le_bytes());
        s[12..16].copy_from_slice(&self.length.to_le_bytes());
        s[16..24].copy_from_slice(&self.term.to_le_bytes());
        let crc = crc32c::crc32c(&s[0..24]);
        s[24..28].copy_from_slice(&crc.to_le_bytes());
        s
    }

    fn decode(s: &[u8; SLOT_LEN]) -> Option<IndexSlot> {
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

pub struct LogIndex {
    slots: SlotFiles<SLOT_LEN>,
}

impl LogIndex {
    pub fn open(dir: &Path, slots_per_file: u64) -> Result<LogIndex, StoreError> {
        // The index is a cache of the segments: files from another layout are simply dropped.
        Ok(LogIndex { slots: SlotFiles::open(dir, SUFFIX, slots_per_file, Misaligned::Discard)? })
    }

    /// Writes the slots of `first, first + 1, …`.
    pub fn put(&self, first: u64, slots: &[IndexSlot]) -> Result<(), StoreError> {
        let encoded: Vec<[u8; SLOT_LEN]> = slots.iter().map(IndexSlot::encode).collect();
        self.slots.put(first, &encoded)
    }

    /// The slot of `index`, if one was written and is intact.
    pub fn get(&self, index: u64) -> Option<IndexSlot> {
        IndexSlot::decode(&self.slots.get(index)?)
    }

    /// Drops index files that only cover indexes below `index`.
    pub fn remove_below(&self, index: u64) -> Result<(), StoreError> {
        self.slots.remove_below(index)
    }

    pub fn sync(&self) -> Result<(), StoreError> {
        self.slots.sync()
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::os::unix::fs::FileExt;

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
