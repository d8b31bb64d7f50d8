//! The sync mark: the highest index the log has made durable, kept in a small file of its own.
//!
//! Recovery needs it to tell two faults apart that look the same in a segment: a torn tail (the
//! last write, never synced, cut by a power loss: it was never acknowledged and is dropped) and
//! damage to records the log had synced, and so may have acknowledged (a flipped bit, a cut file:
//! those must come back from another member, never be silently dropped).
//!
//! The mark is rewritten after every sync that moves the durable index, by `pwrite` only: it is
//! never ahead of what is on disk (it is written after the sync returned), and a power loss that
//! loses it only loses evidence, so recovery then treats damage at the tail as a torn write, as
//! it did before the mark existed. A truncation lowers it with the log.
//!
//! ```text
//!  0  magic    [u8; 4]  "RRSM"
//!  4  format   u16      FORMAT; a newer one is refused
//!  6  reserved u16
//!  8  through  u64      highest durable index; u64::MAX for none
//! 16  crc      u32      CRC32C of bytes 0..16
//! 20  reserved u32
//! ```

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::store::{StoreError, io_err};

const MAGIC: &[u8; 4] = b"RRSM";
const FORMAT: u16 = 1;
const LEN: usize = 24;
const NONE: u64 = u64::MAX;

pub(crate) struct SyncMark {
    path: PathBuf,
    file: File,
    /// A failed write is logged once: the mark is evidence, not data, and the log carries on.
    warned: AtomicBool,
}

fn encode(through: Option<u64>) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[0..4].copy_from_slice(MAGIC);
    b[4..6].copy_from_slice(&FORMAT.to_le_bytes());
    b[8..16].copy_from_slice(&through.unwrap_or(NONE).to_le_bytes());
    let crc = crc32c::crc32c(&b[0..16]);
    b[16..20].copy_from_slice(&crc.to_le_bytes());
    b
}

impl SyncMark {
    /// Opens (or creates) the mark at `path` and reads what it says. A missing, short or damaged
    /// mark says nothing (`None`); one of a newer format is refused.
    pub fn open(path: &Path) -> Result<(SyncMark, Option<u64>), StoreError> {
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io_err(path))?;
        let mut b = [0u8; LEN];
        let through = match file.read_exact_at(&mut b, 0) {
            Err(_) => None,
            Ok(()) if &b[0..4] != MAGIC => None,
            Ok(()) if crc32c::crc32c(&b[0..16]).to_le_bytes() != b[16..20] => {
                tracing::warn!(path = %path.display(), "the log's sync mark is damaged; damage at the log's tail counts as a torn write");
                None
            }
            Ok(()) => {
                let format = u16::from_le_bytes([b[4], b[5]]);
                if format > FORMAT {
                    return Err(StoreError::Format {
                        path: path.to_path_buf(),
                        found: format as u32,
                        known: FORMAT as u32,
                    });
                }
                let at = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
                (at != NONE).then_some(at)
            }
        };
        Ok((SyncMark { path: path.to_path_buf(), file, warned: AtomicBool::new(false) }, through))
    }

    /// Records that the log is durable through `through` (written, not synced: see the module).
    pub fn write(&self, through: Option<u64>) {
        if let Err(e) = self.file.write_all_at(&encode(through), 0)
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "writing the log's sync mark failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_reads_back_and_a_damaged_or_newer_one_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("synced");
        let (mark, through) = SyncMark::open(&path).unwrap();
        assert_eq!(through, None);
        mark.write(Some(41));
        assert_eq!(SyncMark::open(&path).unwrap().1, Some(41));
        mark.write(None);
        assert_eq!(SyncMark::open(&path).unwrap().1, None);

        mark.write(Some(7));
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0xFF], 9).unwrap();
        assert_eq!(SyncMark::open(&path).unwrap().1, None, "a damaged mark vouches for nothing");

        let mut newer = encode(Some(7));
        newer[4..6].copy_from_slice(&(FORMAT + 1).to_le_bytes());
        let crc = crc32c::crc32c(&newer[0..16]);
        newer[16..20].copy_from_slice(&crc.to_le_bytes());
        f.write_all_at(&newer, 0).unwrap();
        assert!(matches!(SyncMark::open(&path), Err(StoreError::Format { found: 2, known: 1, .. })));
    }
}
