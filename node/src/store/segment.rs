//! One preallocated, fixed-size segment file of the CommitLog, mapped read-only.
//!
//! Writes go through `pwrite`; reads come from the shared mapping, which sees those writes
//! through the page cache. Bytes handed to readers are never written again: appends only touch
//! bytes past the write position, and truncation seals the segment rather than rewriting it.
//!
//! File layout: a 64-byte file header, then records (see `record.rs`).
//!
//! ```text
//!  0  magic        [u8; 8]  "RRSEG001"
//!  8  base_offset  u64      global CommitLog offset of byte 0 of this file (also its name)
//! 16  first_index  u64      Raft index the first record of this segment must carry
//! 24  size         u64      file size the segment was created with
//! 32  reserved     [u8; 28]
//! 60  crc          u32      CRC32C of bytes 0..60
//! ```

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use memmap2::Mmap;

use crate::store::{StoreError, io_err, sync_err};

pub const FILE_HEADER_LEN: u64 = 64;
const FILE_MAGIC: &[u8; 8] = b"RRSEG001";
const SUFFIX: &str = ".seg";

pub struct Segment {
    pub base_offset: u64,
    pub first_index: u64,
    pub size: u64,
    path: PathBuf,
    file: File,
    map: Arc<Mmap>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("base_offset", &self.base_offset)
            .field("first_index", &self.first_index)
            .finish()
    }
}

/// Keeps a mapping alive for as long as any `Bytes` cut from it exists.
struct MappedSlice {
    map: Arc<Mmap>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for MappedSlice {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.start..self.end]
    }
}

pub fn file_name(base_offset: u64) -> String {
    format!("{base_offset:020}{SUFFIX}")
}

/// The base offset a segment file name stands for, if it is one.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn encode_file_header(base_offset: u64, first_index: u64, size: u64) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[0..8].copy_from_slice(FILE_MAGIC);
    h[8..16].copy_from_slice(&base_offset.to_le_bytes());
    h[16..24].copy_from_slice(&first_index.to_le_bytes());
    h[24..32].copy_from_slice(&size.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Reserves the file's blocks up front so appends never wait on block allocation.
fn preallocate(file: &File, size: u64, path: &Path) -> Result<(), StoreError> {
    let len = libc::off_t::try_from(size).map_err(|_| StoreError::Config(format!("segment size {size} too large")))?;
    // SAFETY: plain syscall on a file descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 => Ok(()),
        // Filesystems without fallocate: a sparse file of the right length still works.
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(size).map_err(io_err(path)),
        errno => Err(StoreError::Io { path: path.to_path_buf(), source: std::io::Error::from_raw_os_error(errno) }),
    }
}

fn map(file: &File, path: &Path) -> Result<Arc<Mmap>, StoreError> {
    // SAFETY: the file belongs to this store and is never shrunk while mapped; bytes already
    // handed out are never rewritten (see the module docs), so shared slices stay stable.
    let map = unsafe { Mmap::map(file) }.map_err(io_err(path))?;
    Ok(Arc::new(map))
}

impl Segment {
    /// Creates, preallocates and syncs a new empty segment. Its directory entry is not durable
    /// until the caller syncs `dir` (see `CommitLog::roll`).
    pub fn create(dir: &Path, base_offset: u64, first_index: u64, size: u64) -> Result<Segment, StoreError> {
        let path = dir.join(file_name(base_offset));
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).map_err(io_err(&path))?;
        preallocate(&file, size, &path)?;
        file.write_all_at(&encode_file_header(base_offset, first_index, size), 0).map_err(io_err(&path))?;
        crate::crash_point!("segment::create");
        // sync_all, not sync_data: the preallocated size is metadata a reopen depends on.
        file.sync_all().map_err(sync_err(&path))?;
        let map = map(&file, &path)?;
        Ok(Segment { base_offset, first_index, size, path, file, map })
    }

    /// Opens an existing segment. A file shorter than its recorded size (cut by a crash or by
    /// hand) is extended with zeroes first, so the mapping never reaches past the end of file.
    pub fn open(path: &Path) -> Result<Segment, StoreError> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io_err(path))?;
        let corrupt =
            |reason: &str| StoreError::CorruptSegment { path: path.to_path_buf(), reason: reason.to_string() };
        let mut h = [0u8; 64];
        file.read_exact_at(&mut h, 0).map_err(|_| corrupt("file header missing"))?;
        if &h[0..8] != FILE_MAGIC {
            return Err(corrupt("bad file magic"));
        }
        if crc32c::crc32c(&h[0..60]).to_le_bytes() != h[60..64] {
            return Err(corrupt("file header checksum mismatch"));
        }
        let field = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        let (base_offset, first_index, size) = (field(8), field(16), field(24));
        let name = path.file_name().and_then(|n| n.to_str()).and_then(parse_file_name);
        if name != Some(base_offset) {
            return Err(corrupt("file name does not match the base offset in its header"));
        }
        if size <= FILE_HEADER_LEN || size > u32::MAX as u64 {
            return Err(corrupt("implausible segment size"));
        }
        let len = file.metadata().map_err(io_err(path))?.len();
        if len < size {
            file.set_len(size).map_err(io_err(path))?;
        }
        let map = map(&file, path)?;
        Ok(Segment { base_offset, first_index, size, path: path.to_path_buf(), file, map })
    }

    /// When the file was last written (now, if that cannot be read).
    pub fn modified(&self) -> std::time::SystemTime {
        self.file.metadata().and_then(|m| m.modified()).unwrap_or_else(|_| std::time::SystemTime::now())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `parts` back to back starting at `position`.
    pub fn write_at(&self, position: u64, parts: &[&[u8]]) -> Result<(), StoreError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        debug_assert!(position + total as u64 <= self.size);
        if parts.len() == 1 {
            return self.file.write_all_at(parts[0], position).map_err(io_err(&self.path));
        }
        let mut buf = Vec::with_capacity(total);
        for p in parts {
            buf.extend_from_slice(p);
        }
        self.file.write_all_at(&buf, position).map_err(io_err(&self.path))
    }

    /// Makes everything written so far durable (data only: the size never changes). Any failure
    /// is a [`StoreError::SyncFailed`].
    pub fn sync(&self) -> Result<(), StoreError> {
        let sync = || -> Result<(), StoreError> {
            crate::crash_point!("segment::sync");
            self.file.sync_data().map_err(io_err(&self.path))
        };
        sync().map_err(StoreError::into_sync_failure)
    }

    /// The mapped bytes `[position, position + len)`, or `None` if that is outside the file.
    pub fn slice(&self, position: u64, len: u64) -> Option<&[u8]> {
        let end = position.checked_add(len)?;
        if end > self.map.len() as u64 {
            return None;
        }
        Some(&self.map[position as usize..end as usize])
    }

    /// Like [`Segment::slice`] but zero-copy and independent of this handle's lifetime.
    pub fn bytes(&self, position: u64, len: u64) -> Option<Bytes> {
        self.slice(position, len)?;
        Some(Bytes::from_owner(MappedSlice {
            map: Arc::clone(&self.map),
            start: position as usize,
            end: (position + len) as usize,
        }))
    }
}
