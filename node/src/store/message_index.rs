//! The message index: message id → where the message is, so `rockraft message get <id>` (and an
//! operator's transaction resolve) finds a message in a few reads instead of a scan of the store.
//! RocketMQ's IndexFile idea: files of hash buckets, each heading a chain of fixed-size entries.
//!
//! ```text
//! file <seq:020>.mi:  header (32 bytes) | buckets (u32 each) | entries (32 bytes each)
//! header:  0 magic u32 | 4 buckets u32 | 8 capacity u32 | 12 sealed u32 (1 once full)
//!         16 newest log index u64 (set when sealed) | 24 reserved u32 | 28 crc32c of 0..28
//! bucket:  1 + the number of the newest entry of the bucket, 0 if none
//! entry:   0 id hash u64 | 8 position u64 | 16 place u64 | 24 prev u32 (as a bucket) | 28 crc32c
//! ```
//!
//! Like the ConsumeQueue, the index is written when an entry applies and is node-local: the hash
//! is keyed with a seed drawn when the directory is made, so nobody can aim ids at one chain.
//! It is a cache that every answer is checked against: a hit is only a candidate, which the caller
//! reads back from the log and compares by message id. So a torn or stale entry can cost a miss,
//! never a wrong answer, and entries written twice (an entry replayed after a crash) are harmless.
//! The current file's buckets live only in memory: opening the file rebuilds them from its
//! entries, which each carry their hash, so a checkpoint (`sync`) only makes the entries written
//! since the last one durable, before the checkpoint counts the entries applied. What a crash
//! loses was applied after the last checkpoint, and the replay writes it again. The buckets reach
//! the file once, when it is full and sealed. (Writing them at each checkpoint instead rewrote
//! nearly all of a file's 1 MiB of buckets five times a second under load: ids hash at random.)
//!
//! A file is deleted once every message it points at is below the retention purge point.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use memmap2::Mmap;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::store::{StoreError, create_dir_durable, io_err, sync_dir, sync_err};

const SUFFIX: &str = ".mi";
const MAGIC: u32 = 0x494d_5252; // "RRMI"
const HEADER_LEN: u64 = 32;
const ENTRY_LEN: usize = 32;
/// Entries per bucket on average in a full file: walks stay short, buckets take 1/32 of a file.
const ENTRIES_PER_BUCKET: u32 = 4;
/// Matches returned for one id at most (one id can be stored many times, in many topics).
pub const MAX_MATCHES: usize = 32;
/// The default entries per file: 32 MiB of entries and 1 MiB of buckets, written sparsely.
pub const DEFAULT_ENTRIES_PER_FILE: u32 = 1 << 20;

const PLACE_KIND_SHIFT: u32 = 62;
const PLACE_VALUE_MASK: u64 = (1 << PLACE_KIND_SHIFT) - 1;

/// What a message is, where the index found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Place {
    /// In a ConsumeQueue, at this queue offset (the topic and queue are in its log entry).
    Queued { offset: u64 },
    /// A delayed message whose timer fires at `due_ms`.
    Timer { due_ms: i64 },
    /// A transactional half.
    Half,
}

impl Place {
    fn encode(self) -> u64 {
        match self {
            Place::Queued { offset } => offset & PLACE_VALUE_MASK,
            Place::Timer { due_ms } => (1 << PLACE_KIND_SHIFT) | (due_ms.max(0) as u64 & PLACE_VALUE_MASK),
            Place::Half => 2 << PLACE_KIND_SHIFT,
        }
    }

    fn decode(v: u64) -> Option<Place> {
        match v >> PLACE_KIND_SHIFT {
            0 => Some(Place::Queued { offset: v & PLACE_VALUE_MASK }),
            1 => Some(Place::Timer { due_ms: (v & PLACE_VALUE_MASK) as i64 }),
            2 => Some(Place::Half),
            _ => None,
        }
    }
}

/// A candidate for an id: the message's position in the log (see `broker::queue_position`) and
/// its place. The caller checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Located {
    pub position: u64,
    pub place: Place,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    hash: u64,
    position: u64,
    place: u64,
    prev: u32,
}

impl Entry {
    fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        b[0..8].copy_from_slice(&self.hash.to_le_bytes());
        b[8..16].copy_from_slice(&self.position.to_le_bytes());
        b[16..24].copy_from_slice(&self.place.to_le_bytes());
        b[24..28].copy_from_slice(&self.prev.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` for an empty or torn entry.
    fn decode(b: &[u8]) -> Option<Entry> {
        let b: &[u8; ENTRY_LEN] = b.try_into().ok()?;
        if crc32c::crc32c(&b[0..28]) != u32::from_le_bytes(b[28..32].try_into().ok()?) {
            return None;
        }
        Some(Entry {
            hash: u64::from_le_bytes(b[0..8].try_into().ok()?),
            position: u64::from_le_bytes(b[8..16].try_into().ok()?),
            place: u64::from_le_bytes(b[16..24].try_into().ok()?),
            prev: u32::from_le_bytes(b[24..28].try_into().ok()?),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    buckets: u32,
    capacity: u32,
    sealed: bool,
    newest_index: u64,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.buckets.to_le_bytes());
        b[8..12].copy_from_slice(&self.capacity.to_le_bytes());
        b[12..16].copy_from_slice(&u32::from(self.sealed).to_le_bytes());
        b[16..24].copy_from_slice(&self.newest_index.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN as usize] = b.get(..HEADER_LEN as usize)?.try_into().ok()?;
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if word(0) != MAGIC || crc32c::crc32c(&b[0..28]) != word(28) {
            return None;
        }
        let h = Header {
            buckets: word(4),
            capacity: word(8),
            sealed: word(12) == 1,
            newest_index: u64::from_le_bytes(b[16..24].try_into().ok()?),
        };
        (h.buckets > 0 && h.capacity > 0).then_some(h)
    }

    fn file_len(&self) -> u64 {
        HEADER_LEN + 4 * u64::from(self.buckets) + ENTRY_LEN as u64 * u64::from(self.capacity)
    }

    fn entry_at(&self, n: u32) -> u64 {
        HEADER_LEN + 4 * u64::from(self.buckets) + ENTRY_LEN as u64 * u64::from(n)
    }
}

struct IndexFile {
    path: PathBuf,
    file: File,
    map: Mmap,
    header: Header,
    /// Held while the buckets are written: the last write of a sealed file's buckets is final.
    buckets_written: Mutex<bool>,
    /// The newest log index a message of the file is at (known once the file is sealed).
    newest_index: AtomicU64,
}

impl IndexFile {
    fn entry(&self, n: u32) -> Option<Entry> {
        if n >= self.header.capacity {
            return None;
        }
        let at = self.header.entry_at(n) as usize;
        Entry::decode(self.map.get(at..at + ENTRY_LEN)?)
    }

    /// The bucket's head as the file has it (sealed files; the current one keeps it in memory).
    fn head(&self, bucket: u32) -> u32 {
        let at = (HEADER_LEN + 4 * u64::from(bucket)) as usize;
        self.map.get(at..at + 4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn write_buckets(&self, heads: &[u32], seal: Option<u64>) -> Result<(), StoreError> {
        let mut sealed = self.buckets_written.lock().expect("index buckets lock");
        if *sealed {
            return Ok(());
        }
        self.file.write_all_at(&encode_heads(heads), HEADER_LEN).map_err(io_err(&self.path))?;
        if let Some(newest_index) = seal {
            let header = Header { sealed: true, newest_index, ..self.header };
            self.file.write_all_at(&header.encode(), 0).map_err(io_err(&self.path))?;
            *sealed = true;
            self.newest_index.store(newest_index, Ordering::Release);
        }
        self.file.sync_data().map_err(sync_err(&self.path))
    }

    /// Walks the chain from `head`, adding entries of `hash` to `out`.
    fn walk(&self, mut head: u32, hash: u64, out: &mut Vec<Located>) {
        let mut steps = 0;
        while head != 0 && steps < self.header.capacity && out.len() < MAX_MATCHES {
            let n = head - 1;
            let Some(e) = self.entry(n) else { return };
            if e.hash == hash
                && let Some(place) = Place::decode(e.place)
            {
                let found = Located { position: e.position, place };
                if !out.contains(&found) {
                    out.push(found);
                }
            }
            // Chains only run to older entries: a torn one cannot make a loop.
            if e.prev >= head {
                return;
            }
            head = e.prev;
            steps += 1;
        }
    }
}

/// The file written to now.
struct Current {
    seq: u64,
    file: Arc<IndexFile>,
    heads: Vec<u32>,
    /// Entries were put since the last sync.
    unsynced: bool,
    used: u32,
    newest_index: u64,
}

struct Files {
    sealed: BTreeMap<u64, Arc<IndexFile>>,
    current: Current,
}

pub struct MessageIndex {
    dir: PathBuf,
    seed: u64,
    capacity: u32,
    files: RwLock<Files>,
}

impl MessageIndex {
    /// Opens the index in `dir` (created if missing); a new file holds `entries_per_file`. The
    /// second value says whether the index was just created (so older messages are not in it).
    pub fn open(dir: &Path, entries_per_file: u32) -> Result<(MessageIndex, bool), StoreError> {
        if entries_per_file < ENTRIES_PER_BUCKET {
            return Err(StoreError::Config(format!(
                "a message index file needs at least {ENTRIES_PER_BUCKET} entries"
            )));
        }
        let created = !dir.join("seed").exists();
        create_dir_durable(dir)?;
        let seed = read_or_make_seed(dir)?;
        let mut found = BTreeMap::new();
        for e in fs::read_dir(dir).map_err(io_err(dir))? {
            let e = e.map_err(io_err(dir))?;
            let name = e.file_name();
            let Some(seq) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)).and_then(|d| d.parse::<u64>().ok())
            else {
                continue;
            };
            match open_file(&e.path())? {
                Some(f) => {
                    found.insert(seq, Arc::new(f));
                }
                None => {
                    // A cache: a file without a valid header is dropped, not trusted.
                    tracing::warn!(path = %e.path().display(), "dropping a message index file with a bad header");
                    fs::remove_file(e.path()).map_err(io_err(dir))?;
                }
            }
        }
        let current = match found.pop_last() {
            Some((seq, file)) if !file.header.sealed => {
                let used = used_entries(&file);
                let (heads, newest_index) = rebuild(&file, used);
                Current { seq, file, heads, unsynced: false, used, newest_index }
            }
            last => {
                let seq = last.as_ref().map_or(0, |(s, _)| s + 1);
                if let Some((s, f)) = last {
                    found.insert(s, f);
                }
                new_current(dir, seq, entries_per_file)?
            }
        };
        // A file filled up, but a crash came before it was sealed: seal it with the buckets its
        // entries give (what it misses was written after the last checkpoint, and is written again).
        for f in found.values().filter(|f| !f.header.sealed) {
            let (heads, newest) = rebuild(f, used_entries(f));
            f.write_buckets(&heads, Some(newest))?;
        }
        let index = MessageIndex {
            dir: dir.to_path_buf(),
            seed,
            capacity: entries_per_file,
            files: RwLock::new(Files { sealed: found, current }),
        };
        Ok((index, created))
    }

    fn hash(&self, message_id: &str) -> u64 {
        xxh3_64_with_seed(message_id.as_bytes(), self.seed)
    }

    /// Adds messages: (id, position, place) each. Messages without an id are left out.
    pub fn put<'a>(&self, messages: impl IntoIterator<Item = (&'a str, u64, Place)>) -> Result<(), StoreError> {
        let mut files = self.files.write().expect("message index lock");
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = files.current.used;
        for (id, position, place) in messages {
            if id.is_empty() {
                continue;
            }
            if files.current.used == files.current.file.header.capacity {
                flush_run(&files.current.file, run_start, &mut run)?;
                self.roll(&mut files)?;
                run_start = 0;
            }
            let hash = self.hash(id);
            let c = &mut files.current;
            let bucket = (hash % u64::from(c.file.header.buckets)) as usize;
            let n = c.used;
            run.extend_from_slice(&Entry { hash, position, place: place.encode(), prev: c.heads[bucket] }.encode());
            c.heads[bucket] = n + 1;
            c.unsynced = true;
            c.used += 1;
            c.newest_index = c.newest_index.max(position >> 16);
        }
        // Readers follow the in-memory heads only once the lock is released, after this write.
        flush_run(&files.current.file, run_start, &mut run)
    }

    fn roll(&self, files: &mut Files) -> Result<(), StoreError> {
        let next = new_current(&self.dir, files.current.seq + 1, self.capacity)?;
        let done = std::mem::replace(&mut files.current, next);
        done.file.write_buckets(&done.heads, Some(done.newest_index))?;
        files.sealed.insert(done.seq, done.file);
        Ok(())
    }

    /// Where messages with this id may be, newest first (at most [`MAX_MATCHES`]).
    pub fn candidates(&self, message_id: &str) -> Vec<Located> {
        let hash = self.hash(message_id);
        let (current, head, sealed) = {
            let files = self.files.read().expect("message index lock");
            let c = &files.current;
            let head = c.heads[(hash % u64::from(c.file.header.buckets)) as usize];
            (Arc::clone(&c.file), head, files.sealed.values().rev().cloned().collect::<Vec<_>>())
        };
        let mut out = Vec::new();
        current.walk(head, hash, &mut out);
        for f in sealed {
            f.walk(f.head((hash % u64::from(f.header.buckets)) as u32), hash, &mut out);
        }
        out
    }

    /// The log positions of messages some queue holds at queue offset `offset`, newest first (at
    /// most `limit`): what a ConsumeQueue record that rotted is rebuilt from. Reads every entry
    /// of every file, so it is for repairs, not for serving.
    pub fn queued_at(&self, offset: u64, limit: usize) -> Vec<u64> {
        let (current, used, sealed) = {
            let files = self.files.read().expect("message index lock");
            let c = &files.current;
            (Arc::clone(&c.file), c.used, files.sealed.values().rev().cloned().collect::<Vec<_>>())
        };
        let wanted = Place::Queued { offset }.encode();
        let mut found = Vec::new();
        for (file, used) in std::iter::once((current, used)).chain(sealed.into_iter().map(|f| {
            let capacity = f.header.capacity;
            (f, capacity)
        })) {
            let mut in_file: Vec<u64> =
                (0..used).filter_map(|n| file.entry(n)).filter(|e| e.place == wanted).map(|e| e.position).collect();
            in_file.sort_unstable_by(|a, b| b.cmp(a));
            found.extend(in_file);
            if found.len() >= limit {
                break;
            }
        }
        found.truncate(limit);
        found
    }

    /// Syncs the current file's entries put since the last sync: they survive a crash, and the
    /// next open finds them. Nothing to do when nothing was put.
    pub fn sync(&self) -> Result<(), StoreError> {
        let file = {
            let mut files = self.files.write().expect("message index lock");
            let c = &mut files.current;
            if !std::mem::take(&mut c.unsynced) {
                return Ok(());
            }
            Arc::clone(&c.file)
        };
        file.file.sync_data().map_err(sync_err(&file.path)).inspect_err(|_| {
            // Synced again by the next call, if this file is still the current one (a rolled file
            // was synced when it was sealed).
            let mut files = self.files.write().expect("message index lock");
            if Arc::ptr_eq(&files.current.file, &file) {
                files.current.unsynced = true;
            }
        })
    }

    /// Deletes the full files whose messages are all below log index `index` (purged).
    pub fn purge_below(&self, index: u64) -> Result<(), StoreError> {
        let doomed: Vec<Arc<IndexFile>> = {
            let mut files = self.files.write().expect("message index lock");
            let seqs: Vec<u64> = files
                .sealed
                .iter()
                .filter(|(_, f)| f.newest_index.load(Ordering::Acquire) < index)
                .map(|(s, _)| *s)
                .collect();
            seqs.iter().filter_map(|s| files.sealed.remove(s)).collect()
        };
        for f in &doomed {
            match fs::remove_file(&f.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&f.path)(e)),
            }
        }
        if !doomed.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Index files on disk (for tests and status).
    pub fn file_count(&self) -> usize {
        let files = self.files.read().expect("message index lock");
        files.sealed.len() + 1
    }
}

fn encode_heads(heads: &[u32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 * heads.len());
    for h in heads {
        bytes.extend_from_slice(&h.to_le_bytes());
    }
    bytes
}

fn flush_run(file: &IndexFile, first: u32, run: &mut Vec<u8>) -> Result<(), StoreError> {
    if run.is_empty() {
        return Ok(());
    }
    file.file.write_all_at(run, file.header.entry_at(first)).map_err(io_err(&file.path))?;
    run.clear();
    Ok(())
}

fn read_or_make_seed(dir: &Path) -> Result<u64, StoreError> {
    let path = dir.join("seed");
    match fs::read(&path) {
        Ok(b) if b.len() == 8 => return Ok(u64::from_le_bytes(b.try_into().expect("8 bytes"))),
        Ok(_) => tracing::warn!(path = %path.display(), "a message index seed of the wrong length: drawing a new one"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&path)(e)),
    }
    let mut seed = [0u8; 8];
    File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut seed)).map_err(io_err(Path::new("/dev/urandom")))?;
    // A new seed makes every existing entry unreachable: they go with it.
    for e in fs::read_dir(dir).map_err(io_err(dir))?.flatten() {
        if e.file_name().to_str().is_some_and(|n| n.ends_with(SUFFIX)) {
            fs::remove_file(e.path()).map_err(io_err(dir))?;
        }
    }
    fs::write(&path, seed).map_err(io_err(&path))?;
    File::open(&path).and_then(|f| f.sync_all()).map_err(sync_err(&path))?;
    sync_dir(dir)?;
    Ok(u64::from_le_bytes(seed))
}

fn open_file(path: &Path) -> Result<Option<IndexFile>, StoreError> {
    let file = OpenOptions::new().read(true).write(true).open(path).map_err(io_err(path))?;
    let mut head = [0u8; HEADER_LEN as usize];
    if file.read_exact_at(&mut head, 0).is_err() {
        return Ok(None);
    }
    let Some(header) = Header::decode(&head) else { return Ok(None) };
    if file.metadata().map_err(io_err(path))?.len() != header.file_len() {
        return Ok(None);
    }
    // SAFETY: index files keep their length while mapped; bytes are copied out, never borrowed
    // beyond a call, and a torn entry fails its CRC.
    let map = unsafe { Mmap::map(&file) }.map_err(io_err(path))?;
    Ok(Some(IndexFile {
        path: path.to_path_buf(),
        file,
        map,
        header,
        buckets_written: Mutex::new(header.sealed),
        newest_index: AtomicU64::new(header.newest_index),
    }))
}

fn new_current(dir: &Path, seq: u64, capacity: u32) -> Result<Current, StoreError> {
    let path = dir.join(format!("{seq:020}{SUFFIX}"));
    let header = Header { buckets: capacity / ENTRIES_PER_BUCKET, capacity, sealed: false, newest_index: 0 };
    let file =
        OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).map_err(io_err(&path))?;
    file.set_len(header.file_len()).map_err(io_err(&path))?;
    file.write_all_at(&header.encode(), 0).map_err(io_err(&path))?;
    file.sync_all().map_err(sync_err(&path))?;
    sync_dir(dir)?;
    let file = open_file(&path)?.ok_or_else(|| StoreError::CorruptSegment {
        path: path.clone(),
        reason: "a message index file just written does not read back".into(),
    })?;
    let heads = vec![0; header.buckets as usize];
    Ok(Current { seq, file: Arc::new(file), heads, unsynced: false, used: 0, newest_index: 0 })
}

/// The heads of `file`'s buckets and the newest log index of its messages, from its first `used`
/// entries: each bucket's head is its newest entry. A torn entry is left out, as a walk would.
fn rebuild(file: &IndexFile, used: u32) -> (Vec<u32>, u64) {
    let mut heads = vec![0; file.header.buckets as usize];
    let mut newest_index = 0;
    for n in 0..used {
        if let Some(e) = file.entry(n) {
            heads[(e.hash % u64::from(file.header.buckets)) as usize] = n + 1;
            newest_index = newest_index.max(e.position >> 16);
        }
    }
    (heads, newest_index)
}

/// Entries are written in order from 0: the used ones are the valid prefix. A torn tail (after
/// a power cut) may leave holes past what the last sync covered; the search lands at or after it.
fn used_entries(file: &IndexFile) -> u32 {
    let (mut lo, mut hi) = (0u32, file.header.capacity);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if file.entry(mid).is_some() { lo = mid + 1 } else { hi = mid }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(offset: u64) -> Place {
        Place::Queued { offset }
    }

    fn position(index: u64, ordinal: u64) -> u64 {
        (index << 16) | ordinal
    }

    #[test]
    fn every_place_round_trips_through_an_entry() {
        for place in [queued(0), queued(PLACE_VALUE_MASK), Place::Timer { due_ms: 1_700_000_000_000 }, Place::Half] {
            assert_eq!(Place::decode(place.encode()), Some(place));
        }
        let e = Entry { hash: 7, position: position(9, 1), place: Place::Half.encode(), prev: 3 };
        assert_eq!(Entry::decode(&e.encode()), Some(e));
        let mut torn = e.encode();
        torn[9] ^= 1;
        assert_eq!(Entry::decode(&torn), None, "a torn entry is no entry");
        assert_eq!(Entry::decode(&[0u8; ENTRY_LEN]), None, "an empty entry is no entry");
    }

    #[test]
    fn ids_are_found_across_files_and_after_reopen_and_unknown_ids_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let (index, created) = MessageIndex::open(dir.path(), 8).unwrap();
        assert!(created);
        let ids: Vec<String> = (0..50).map(|i| format!("ID{i:04}")).collect();
        for (i, id) in ids.iter().enumerate() {
            index.put([(id.as_str(), position(i as u64 + 1, 0), queued(i as u64))]).unwrap();
        }
        assert!(index.file_count() > 5, "50 entries roll over files of 8");
        let check = |index: &MessageIndex| {
            for (i, id) in ids.iter().enumerate() {
                assert_eq!(
                    index.candidates(id),
                    vec![Located { position: position(i as u64 + 1, 0), place: queued(i as u64) }],
                    "{id}"
                );
            }
            assert!(index.candidates("not-stored").is_empty());
        };
        check(&index);
        index.sync().unwrap();
        drop(index);
        let (index, created) = MessageIndex::open(dir.path(), 8).unwrap();
        assert!(!created);
        check(&index);
        // Writing goes on where it stopped.
        index.put([("later", position(99, 2), Place::Timer { due_ms: 5 })]).unwrap();
        assert_eq!(
            index.candidates("later"),
            vec![Located { position: position(99, 2), place: Place::Timer { due_ms: 5 } }]
        );
        check(&index);
    }

    #[test]
    fn one_id_stored_many_times_yields_its_newest_places_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = MessageIndex::open(dir.path(), 16).unwrap();
        let puts: Vec<(&str, u64, Place)> = (0..100).map(|i| ("same", position(i + 1, 0), queued(i))).collect();
        index.put(puts).unwrap();
        // Written twice (a replayed entry): still one candidate per place.
        index.put([("same", position(100, 0), queued(99))]).unwrap();
        let found = index.candidates("same");
        assert_eq!(found.len(), MAX_MATCHES);
        assert_eq!(found[0], Located { position: position(100, 0), place: queued(99) }, "newest first");
        assert_eq!(found[1], Located { position: position(99, 0), place: queued(98) });
        // Messages without an id are not indexed.
        index.put([("", position(200, 0), queued(0))]).unwrap();
        assert!(index.candidates("").is_empty());
    }

    #[test]
    fn a_sync_writes_no_buckets_and_a_reopened_index_rebuilds_them_from_its_entries() {
        let dir = tempfile::tempdir().unwrap();
        // 4,096 buckets, far more than ids: chains of one entry and chains of several both occur.
        let (index, _) = MessageIndex::open(dir.path(), 1 << 14).unwrap();
        let first: Vec<String> = (0..300).map(|i| format!("first-{i}")).collect();
        let second: Vec<String> = (0..300).map(|i| format!("second-{i}")).collect();
        for (round, ids) in [&first, &second].into_iter().enumerate() {
            let puts = ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), position(round as u64 * 1000 + i as u64 + 1, 0), queued(i as u64)));
            index.put(puts).unwrap();
            index.sync().unwrap();
        }
        let (path, buckets) = {
            let files = index.files.read().unwrap();
            let c = &files.current;
            assert!(!c.unsynced, "a sync leaves nothing to sync");
            (c.file.path.clone(), c.file.header.buckets as usize)
        };
        let written = fs::read(&path).unwrap();
        let bucket_bytes = &written[HEADER_LEN as usize..HEADER_LEN as usize + 4 * buckets];
        assert!(bucket_bytes.iter().all(|&b| b == 0), "the current file's buckets stay in memory");
        index.sync().unwrap();
        assert_eq!(fs::read(&path).unwrap(), written, "a sync with nothing put changes nothing");
        drop(index);
        let (index, _) = MessageIndex::open(dir.path(), 1 << 14).unwrap();
        let check = |index: &MessageIndex| {
            for (round, ids) in [&first, &second].into_iter().enumerate() {
                for (i, id) in ids.iter().enumerate() {
                    let at = position(round as u64 * 1000 + i as u64 + 1, 0);
                    assert_eq!(index.candidates(id), vec![Located { position: at, place: queued(i as u64) }], "{id}");
                }
            }
        };
        check(&index);
        // Chains go on from the rebuilt heads: an id stored again after the reopen finds both.
        index.put([("first-7", position(5000, 0), queued(7))]).unwrap();
        assert_eq!(
            index.candidates("first-7"),
            vec![
                Located { position: position(5000, 0), place: queued(7) },
                Located { position: position(8, 0), place: queued(7) }
            ]
        );
    }

    #[test]
    fn puts_since_the_last_sync_may_be_lost_in_a_crash_but_never_answer_wrongly() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = MessageIndex::open(dir.path(), 64).unwrap();
        index.put([("kept", position(1, 0), queued(0))]).unwrap();
        index.sync().unwrap();
        index.put([("unsynced", position(2, 0), queued(1))]).unwrap();
        // A crash: the in-memory buckets are gone, the entry itself was written.
        drop(index);
        let (index, _) = MessageIndex::open(dir.path(), 64).unwrap();
        assert_eq!(index.candidates("kept").len(), 1);
        // The replay after the crash writes it again, and it is found.
        index.put([("unsynced", position(2, 0), queued(1))]).unwrap();
        assert_eq!(index.candidates("unsynced"), vec![Located { position: position(2, 0), place: queued(1) }]);
        assert_eq!(index.candidates("kept").len(), 1);
    }

    #[test]
    fn a_full_file_a_crash_left_unsealed_is_sealed_with_buckets_rebuilt_from_its_entries() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = MessageIndex::open(dir.path(), 4).unwrap();
        for i in 0..4u64 {
            index.put([(format!("m{i}").as_str(), position(i + 1, 0), queued(i))]).unwrap();
        }
        index.sync().unwrap();
        drop(index);
        // The crash came between making the next file and sealing this one.
        new_current(dir.path(), 1, 4).unwrap();
        let (index, _) = MessageIndex::open(dir.path(), 4).unwrap();
        for i in 0..4u64 {
            assert_eq!(
                index.candidates(&format!("m{i}")),
                vec![Located { position: position(i + 1, 0), place: queued(i) }],
                "m{i}"
            );
        }
        let sealed = open_file(&dir.path().join(format!("{:020}{SUFFIX}", 0))).unwrap().unwrap();
        assert!(sealed.header.sealed);
        assert_eq!(sealed.header.newest_index, 4);
    }

    #[test]
    fn full_files_go_once_their_messages_are_purged_and_bad_files_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = MessageIndex::open(dir.path(), 4).unwrap();
        for i in 0..13u64 {
            index.put([(format!("m{i}").as_str(), position(i + 1, 0), queued(i))]).unwrap();
        }
        assert_eq!(index.file_count(), 4, "three full files and the current one");
        index.purge_below(5).unwrap();
        assert_eq!(index.file_count(), 3, "the file of entries 1-4 went");
        assert!(index.candidates("m0").is_empty());
        assert_eq!(index.candidates("m4").len(), 1);
        index.sync().unwrap();
        drop(index);
        // A file whose header is damaged is dropped on open; the others are still read.
        let damaged = dir.path().join(format!("{:020}{SUFFIX}", 1));
        let f = OpenOptions::new().write(true).open(&damaged).unwrap();
        f.write_all_at(&[0xff; 4], 0).unwrap();
        let (index, _) = MessageIndex::open(dir.path(), 4).unwrap();
        assert!(!damaged.exists());
        assert!(index.candidates("m5").is_empty());
        assert_eq!(index.candidates("m9").len(), 1);
    }

    #[test]
    fn a_new_seed_starts_an_empty_index() {
        let dir = tempfile::tempdir().unwrap();
        let (index, _) = MessageIndex::open(dir.path(), 8).unwrap();
        index.put([("a", position(1, 0), queued(0))]).unwrap();
        index.sync().unwrap();
        drop(index);
        fs::remove_file(dir.path().join("seed")).unwrap();
        let (index, created) = MessageIndex::open(dir.path(), 8).unwrap();
        assert!(created, "the caller is told to index what is stored again");
        assert!(index.candidates("a").is_empty());
    }
}
