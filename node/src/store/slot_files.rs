//! Fixed-size slots spread over files of `slots_per_file` slots each, every file named by the
//! first slot number it covers (20 digits + suffix). Slot `n` lives at byte
//! `(n mod slots_per_file) × N` of its file. Writes use `pwrite`; reads copy out of a read-only
//! mapping. The log index and the ConsumeQueue are both built on this.
//!
//! Creating or deleting a file syncs the directory, so that a file a caller has written to (and
//! synced) cannot vanish in a power cut because its directory entry never reached the disk.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use memmap2::Mmap;

use crate::store::{StoreError, create_dir_durable, io_err, sync_dir, sync_err};

struct SlotFile {
    file: File,
    map: Mmap,
    path: PathBuf,
}

/// What to do with a file whose first slot is not a multiple of `slots_per_file` (written with
/// another setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misaligned {
    /// The files are a cache: drop it.
    Discard,
    /// The files are the data: refuse to open.
    Refuse,
}

pub struct SlotFiles<const N: usize> {
    dir: PathBuf,
    suffix: &'static str,
    slots_per_file: u64,
    files: RwLock<BTreeMap<u64, Arc<SlotFile>>>,
}

impl<const N: usize> SlotFiles<N> {
    pub fn open(
        dir: &Path,
        suffix: &'static str,
        slots_per_file: u64,
        misaligned: Misaligned,
    ) -> Result<SlotFiles<N>, StoreError> {
        if slots_per_file == 0 {
            return Err(StoreError::Config(format!("{suffix} files need at least one slot each")));
        }
        create_dir_durable(dir)?;
        let slots = SlotFiles { dir: dir.to_path_buf(), suffix, slots_per_file, files: RwLock::new(BTreeMap::new()) };
        let mut files = BTreeMap::new();
        let mut discarded = false;
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let name = entry.file_name();
            let Some(first) = name.to_str().and_then(|n| n.strip_suffix(suffix)).and_then(|d| d.parse::<u64>().ok())
            else {
                continue;
            };
            if first % slots_per_file != 0 {
                match misaligned {
                    Misaligned::Discard => {
                        fs::remove_file(entry.path()).map_err(io_err(dir))?;
                        discarded = true;
                    }
                    Misaligned::Refuse => {
                        return Err(StoreError::CorruptSegment {
                            path: entry.path(),
                            reason: format!("not aligned to {slots_per_file} slots per file"),
                        });
                    }
                }
                continue;
            }
            files.insert(first, Arc::new(slots.open_file(first)?));
        }
        if discarded {
            sync_dir(dir)?;
        }
        *slots.files.write().expect("slot files lock") = files;
        Ok(slots)
    }

    fn open_file(&self, first: u64) -> Result<SlotFile, StoreError> {
        let path = self.dir.join(format!("{first:020}{}", self.suffix));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        let want = self.slots_per_file * N as u64;
        if file.metadata().map_err(io_err(&path))?.len() != want {
            file.set_len(want).map_err(io_err(&path))?;
        }
        // SAFETY: these files belong to this store and keep a fixed length while mapped; slots are
        // copied out of the mapping, never borrowed beyond a call.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err(&path))?;
        Ok(SlotFile { file, map, path })
    }

    fn file_for(&self, slot: u64, create: bool) -> Result<Option<Arc<SlotFile>>, StoreError> {
        let first = slot - slot % self.slots_per_file;
        if let Some(f) = self.files.read().expect("slot files lock").get(&first) {
            return Ok(Some(Arc::clone(f)));
        }
        if !create {
            return Ok(None);
        }
        let mut files = self.files.write().expect("slot files lock");
        if let Some(f) = files.get(&first) {
            return Ok(Some(Arc::clone(f)));
        }
        let f = Arc::new(self.open_file(first)?);
        // Not put in the map before its entry is durable: a failed sync is retried next time.
        sync_dir(&self.dir)?;
        files.insert(first, Arc::clone(&f));
        Ok(Some(f))
    }

    /// Writes `slots` to slot numbers `first, first + 1, …`, one write per file touched.
    pub fn put(&self, first: u64, slots: &[[u8; N]]) -> Result<(), StoreError> {
        let mut done = 0usize;
        while done < slots.len() {
            let slot = first + done as u64;
            let room = (self.slots_per_file - slot % self.slots_per_file) as usize;
            let n = room.min(slots.len() - done);
            let f = self.file_for(slot, true)?.expect("created");
            f.file
                .write_all_at(slots[done..done + n].as_flattened(), (slot % self.slots_per_file) * N as u64)
                .map_err(io_err(&f.path))?;
            done += n;
        }
        Ok(())
    }

    /// The file slot `slot` lives in (whether or not it exists).
    pub fn path_of(&self, slot: u64) -> PathBuf {
        self.dir.join(format!("{:020}{}", slot - slot % self.slots_per_file, self.suffix))
    }

    /// Where slot `slot` starts in its file.
    pub fn byte_of(&self, slot: u64) -> u64 {
        (slot % self.slots_per_file) * N as u64
    }

    /// The bytes of slot `slot`, or `None` if no file covers it.
    pub fn get(&self, slot: u64) -> Option<[u8; N]> {
        let f = self.file_for(slot, false).ok()??;
        let at = ((slot % self.slots_per_file) * N as u64) as usize;
        f.map.get(at..at + N)?.try_into().ok()
    }

    /// The first and one-past-the-last slot that `used` accepts, looking only in the first and
    /// last files.
    pub fn extent(&self, used: impl Fn(&[u8; N]) -> bool) -> Option<(u64, u64)> {
        let files = self.files.read().expect("slot files lock");
        let is_used = |f: &SlotFile, i: u64| {
            let at = (i * N as u64) as usize;
            f.map.get(at..at + N).and_then(|b| <&[u8; N]>::try_from(b).ok()).is_some_and(&used)
        };
        let (&first_file, f) = files.first_key_value()?;
        let (&last_file, l) = files.last_key_value()?;
        let start = (0..self.slots_per_file).find(|&i| is_used(f, i)).map_or(first_file, |i| first_file + i);
        let end = (0..self.slots_per_file).rev().find(|&i| is_used(l, i)).map_or(last_file, |i| last_file + i + 1);
        Some((start, end.max(start)))
    }

    /// Deletes files whose slots are all below `slot`.
    pub fn remove_below(&self, slot: u64) -> Result<(), StoreError> {
        let mut files = self.files.write().expect("slot files lock");
        let doomed: Vec<u64> = files.keys().copied().filter(|&s| s + self.slots_per_file <= slot).collect();
        for &first in &doomed {
            if let Some(f) = files.remove(&first) {
                fs::remove_file(&f.path).map_err(io_err(&f.path))?;
            }
        }
        if !doomed.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    pub fn sync(&self) -> Result<(), StoreError> {
        for f in self.files.read().expect("slot files lock").values() {
            f.file.sync_data().map_err(sync_err(&f.path))?;
        }
        Ok(())
    }
}
