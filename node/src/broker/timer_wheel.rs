//! Pending timers on disk: a timing wheel of append-only files, one per hour of due time.
//!
//! A timer's record (its key, due time and [`HeldMessage`]) is appended to the file of the hour
//! it falls due in; firing or recalling it appends a removal. In memory there are 16 bytes per
//! pending timer — its position, due millisecond and where its record is — grouped by due
//! second, so finding what is due reads no file, and the message is read from its record only
//! when it fires, is recalled or is listed. Nothing is ever rewritten: once every timer of an
//! hour is gone its whole file is deleted, so a file lives at most as long as its hour plus the
//! time its timers take to fire.
//!
//! Durability follows the dedupe journal's scheme. Records are appended in memory first (a
//! file's *tail*). A checkpoint copies the tails under the state lock, appends and syncs them
//! without it, then commits the sled batch that names, per file, its generation and how many of
//! its bytes the checkpointed state covers (a [`WheelMark`]). On open exactly those bytes are
//! replayed and anything after them is cut off, and files the mark does not name are deleted:
//! an unfinished checkpoint, an install or a deletion left them. A failed write changes nothing
//! in memory: the next checkpoint writes the same tail at the same place again.
//!
//! A wheel not attached to a directory (a snapshot being built or installed) keeps every record
//! in its tails; an install writes them as new files (see [`TimerWheel::prepare_install`]).
//!
//! Record: `crc32c u32 | len u32 | body`, body = `op u8 | due_ms i64 | position u64` and, for a
//! put, `queue_id u32 | size u32 | tag_hash u64 | stored_ms i64 | topic (u32 len + bytes) |
//! message id (u32 len + bytes)`.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::broker::disk_table::DiskResult;
use crate::broker::held::HeldMessage;
use crate::broker::record_cursor::Cursor;
use crate::broker::timer::{Timer, TimerKey};
use crate::store::{JournalFault, RecordFault, StoreError};

/// Seconds of due time one file holds.
pub const BUCKET_SECS: i64 = 3600;

const OP_PUT: u8 = 1;
const OP_REMOVE: u8 = 2;
const PREFIX: &str = "timers.";
const SUFFIX: &str = ".wheel";
const HEADER: usize = 8;

/// The files a checkpoint covers: recorded in sled with `last_applied`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WheelMark {
    /// The generation the next new file gets.
    pub next_generation: u64,
    /// (hour, generation, bytes) of every file holding a pending timer.
    pub files: Vec<(i64, u64, u64)>,
}

/// One pending timer in memory: its position, and its record's offset with the due millisecond
/// within the second in the top 10 bits.
#[derive(Clone, Copy)]
struct Entry {
    position: u64,
    packed: u64,
}

const OFFSET_BITS: u32 = 54;
const GONE: u64 = u64::MAX;

impl Entry {
    fn new(position: u64, offset: u64, ms: i64) -> Entry {
        Entry { position, packed: offset | ((ms.clamp(0, 999) as u64) << OFFSET_BITS) }
    }
    fn offset(self) -> u64 {
        self.packed & ((1 << OFFSET_BITS) - 1)
    }
    fn ms(self) -> i64 {
        (self.packed >> OFFSET_BITS) as i64
    }
    fn is_gone(self) -> bool {
        self.packed == GONE
    }
}

/// The timers due in one second, by position. Removed ones are marked gone and swept out once
/// they are half the slot, so firing a slot front to back never shifts the rest each time.
#[derive(Clone, Default)]
struct Slot {
    entries: Vec<Entry>,
    gone: usize,
}

impl Slot {
    fn find(&self, position: u64) -> Option<usize> {
        let i = self.entries.partition_point(|e| e.position < position);
        self.entries.get(i).filter(|e| e.position == position && !e.is_gone()).map(|_| i)
    }
}

/// One file: an hour of due time.
#[derive(Clone)]
struct Bucket {
    generation: u64,
    file: Option<Arc<File>>,
    /// Bytes in the file that a committed checkpoint covers (or an install wrote).
    durable: u64,
    /// Records after them, not yet written by a committed checkpoint.
    tail: Vec<u8>,
    /// Pending timers with a record here.
    live: u64,
}

#[derive(Default)]
pub struct TimerWheel {
    /// `None` while detached: every record is in memory.
    dir: Option<PathBuf>,
    slots: BTreeMap<i64, Slot>,
    buckets: BTreeMap<i64, Bucket>,
    next_generation: u64,
    len: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

fn file_name(bucket: i64, generation: u64) -> String {
    format!("{PREFIX}{bucket}.{generation}{SUFFIX}")
}

/// The (hour, generation) a file name names, if it is a wheel file.
fn parse_file_name(name: &str) -> Option<(i64, u64)> {
    let (bucket, generation) = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.split_once('.')?;
    Some((bucket.parse().ok()?, generation.parse().ok()?))
}

fn bucket_of(second: i64) -> i64 {
    second.div_euclid(BUCKET_SECS)
}

fn key_of(due_ms: i64, position: u64) -> TimerKey {
    crate::broker::timer::timer_key(due_ms, position)
}

fn encode(op: u8, due_ms: i64, position: u64, message: Option<&HeldMessage>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    out.push(op);
    out.extend_from_slice(&due_ms.to_le_bytes());
    out.extend_from_slice(&position.to_le_bytes());
    if let Some(m) = message {
        out.extend_from_slice(&m.queue_id.to_le_bytes());
        out.extend_from_slice(&m.size.to_le_bytes());
        out.extend_from_slice(&m.tag_hash.to_le_bytes());
        out.extend_from_slice(&m.stored_ms.to_le_bytes());
        for text in [&m.topic, &m.message_id] {
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
            out.extend_from_slice(text.as_bytes());
        }
    }
    let body_len = (out.len() - start - HEADER) as u32;
    let crc = crc32c::crc32c(&out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    out[start + 4..start + HEADER].copy_from_slice(&body_len.to_le_bytes());
}

/// A record's body: (op, due_ms, position, message of a put).
type Decoded = (u8, i64, u64, Option<HeldMessage>);

fn decode(body: &[u8]) -> Option<Decoded> {
    let mut c = Cursor(body);
    let op = c.take(1)?[0];
    let due_ms = c.u64()? as i64;
    let position = c.u64()?;
    let message = match op {
        OP_REMOVE => None,
        OP_PUT => {
            let (queue_id, size, tag_hash, stored_ms) = (c.u32()?, c.u32()?, c.u64()?, c.u64()? as i64);
            let topic = c.text()?;
            let message_id = c.text()?;
            Some(HeldMessage { topic, queue_id, message_id, size, tag_hash, stored_ms })
        }
        _ => return None,
    };
    c.0.is_empty().then_some((op, due_ms, position, message))
}

/// Checks a record's header against its body; `Err` says what is wrong.
fn check(header: &[u8; HEADER], body: &[u8]) -> Result<Decoded, RecordFault> {
    let crc = u32::from_le_bytes(header[..4].try_into().unwrap_or_default());
    if crc32c::crc32c(body) != crc {
        return Err(RecordFault::Checksum);
    }
    decode(body).ok_or(RecordFault::Undecodable)
}

fn corrupt(what: String) -> sled::Error {
    sled::Error::Unsupported(format!("timer record: {what}"))
}

/// Reads a file from `at` on by positional reads: the file's own cursor is shared by every reader.
struct ReadAt<'a> {
    file: &'a File,
    at: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Reads the `len` bytes of records from `bytes`, handing each to `visit` with its offset. Every
/// byte must belong to a whole, checked record.
fn scan(
    mut bytes: impl Read,
    len: u64,
    mut visit: impl FnMut(u64, Decoded) -> Result<(), RecordFault>,
) -> Result<(), JournalFault> {
    let mut at = 0u64;
    let mut body = Vec::new();
    while at < len {
        let bad = |fault| JournalFault { at, fault };
        let mut header = [0u8; HEADER];
        bytes.read_exact(&mut header).map_err(|_| bad(RecordFault::TornHeader))?;
        let body_len = u32::from_le_bytes(header[4..].try_into().unwrap_or_default()) as u64;
        if at + HEADER as u64 + body_len > len {
            return Err(bad(RecordFault::TornBody));
        }
        body.resize(body_len as usize, 0);
        bytes.read_exact(&mut body).map_err(|_| bad(RecordFault::TornBody))?;
        let record = check(&header, &body).map_err(bad)?;
        visit(at, record).map_err(bad)?;
        at += HEADER as u64 + body_len;
    }
    Ok(())
}

/// What a checkpoint or an install writes: the tails copied under the state lock.
pub struct WheelWrites {
    dir: Option<PathBuf>,
    writes: Vec<TailWrite>,
    /// Hours with no pending timer when copied: left out of the mark, deleted once it commits.
    emptied: Vec<(i64, u64)>,
    pub mark: WheelMark,
}

struct TailWrite {
    bucket: i64,
    generation: u64,
    at: u64,
    bytes: Vec<u8>,
    file: Option<Arc<File>>,
}

impl WheelWrites {
    /// Appends and syncs the tails (without the state lock). Nothing in memory changes, so a
    /// failure leaves them for the next checkpoint to write again at the same place.
    pub fn write(&mut self) -> Result<(), StoreError> {
        let Some(dir) = self.dir.clone() else { return Ok(()) };
        let mut created = false;
        for w in &mut self.writes {
            let path = dir.join(file_name(w.bucket, w.generation));
            let file = match &w.file {
                Some(f) => f.clone(),
                None => {
                    created = true;
                    let f = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path);
                    Arc::new(f.map_err(io(&path))?)
                }
            };
            file.write_all_at(&w.bytes, w.at).map_err(io(&path))?;
            crate::crash_point!("timer_wheel::after_write");
            file.sync_data().map_err(io(&path))?;
            w.file = Some(file);
        }
        if created {
            crate::store::sync_dir(&dir)?;
        }
        Ok(())
    }

    /// Files to delete once the batch naming [`WheelWrites::mark`] committed: those of hours
    /// left empty (still empty when [`TimerWheel::committed`] checks).
    fn paths(&self, buckets: &[(i64, u64)]) -> Vec<PathBuf> {
        let Some(dir) = &self.dir else { return Vec::new() };
        buckets.iter().map(|(b, g)| dir.join(file_name(*b, *g))).collect()
    }
}

impl TimerWheel {
    /// Opens the wheel the last checkpoint named (`None`: nothing was ever checkpointed): replays
    /// exactly the bytes the mark covers and removes every other wheel file.
    pub fn open(dir: &Path, mark: Option<WheelMark>) -> Result<TimerWheel, StoreError> {
        let wheel = Self::load(dir, mark.clone(), true)?;
        let keep: Vec<(i64, u64)> = mark.unwrap_or_default().files.iter().map(|&(b, g, _)| (b, g)).collect();
        remove_files_except(dir, &keep)?;
        Ok(wheel)
    }

    /// The wheel the checkpoint `mark` covers, for reading only: changes no file.
    pub fn read_only(dir: &Path, mark: Option<WheelMark>) -> Result<TimerWheel, StoreError> {
        Self::load(dir, mark, false)
    }

    fn load(dir: &Path, mark: Option<WheelMark>, writable: bool) -> Result<TimerWheel, StoreError> {
        let mark = mark.unwrap_or_default();
        let mut wheel =
            TimerWheel { dir: Some(dir.to_path_buf()), next_generation: mark.next_generation, ..Default::default() };
        for &(bucket, generation, len) in &mark.files {
            let path = dir.join(file_name(bucket, generation));
            let file = OpenOptions::new().read(true).write(writable).open(&path).map_err(io(&path))?;
            let found = file.metadata().map_err(io(&path))?.len();
            if found < len {
                return Err(StoreError::CorruptSegment {
                    path,
                    reason: format!("holds {found} bytes, the last checkpoint wrote {len}"),
                });
            }
            if writable {
                file.set_len(len).map_err(io(&path))?;
            }
            wheel.buckets.insert(bucket, Bucket { generation, file: None, durable: len, tail: Vec::new(), live: 0 });
            wheel
                .replay(bucket, BufReader::new(&file).take(len), len)
                .map_err(|e| StoreError::CorruptSegment { path: path.clone(), reason: e.to_string() })?;
            if let Some(b) = wheel.buckets.get_mut(&bucket) {
                b.file = Some(Arc::new(file));
            }
        }
        for slot in wheel.slots.values_mut() {
            slot.entries.shrink_to_fit();
        }
        Ok(wheel)
    }

    /// Indexes the `len` bytes of `bucket`'s file read from `bytes`.
    fn replay(&mut self, bucket: i64, bytes: impl Read, len: u64) -> Result<(), JournalFault> {
        scan(bytes, len, |at, (op, due_ms, position, _)| {
            let key = key_of(due_ms, position);
            if bucket_of(key.0) != bucket {
                return Err(RecordFault::Misplaced);
            }
            if op == OP_PUT {
                self.index_put(key, due_ms, at);
            } else {
                self.index_remove(&key);
            }
            Ok(())
        })
    }

    /// The pending timers of `topic`, found by reading each hour's records front to back once
    /// (deleting a topic with millions pending reads its files in order, not record by record).
    pub fn keys_of_topic(&self, topic: &str) -> DiskResult<Vec<TimerKey>> {
        let mut keys = Vec::new();
        for (&bucket, b) in self.buckets.iter().filter(|(_, b)| b.live > 0) {
            let mut visit = |at: u64, (op, due_ms, position, message): Decoded| {
                let key = key_of(due_ms, position);
                let pending = self.slots.get(&key.0).and_then(|s| s.find(position).map(|i| s.entries[i]));
                // Still pending under this very record (not one since removed, nor replaced).
                if op == OP_PUT
                    && message.is_some_and(|m| m.topic == topic)
                    && pending.is_some_and(|e| e.offset() == at)
                {
                    keys.push(key);
                }
                Ok(())
            };
            let corrupt_in = |e: JournalFault| corrupt(format!("hour {bucket}: {e}"));
            if b.durable > 0 {
                let file = b.file.as_ref().ok_or_else(|| corrupt(format!("hour {bucket} has no file")))?;
                let reader = std::io::BufReader::with_capacity(1 << 20, ReadAt { file, at: 0 }.take(b.durable));
                scan(reader, b.durable, &mut visit).map_err(corrupt_in)?;
            }
            scan(&b.tail[..], b.tail.len() as u64, |at, record| visit(b.durable + at, record)).map_err(corrupt_in)?;
        }
        keys.sort_unstable();
        Ok(keys)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn bucket_mut(&mut self, bucket: i64) -> &mut Bucket {
        let next = &mut self.next_generation;
        self.buckets.entry(bucket).or_insert_with(|| {
            *next += 1;
            Bucket { generation: *next - 1, file: None, durable: 0, tail: Vec::new(), live: 0 }
        })
    }

    fn index_put(&mut self, key: TimerKey, due_ms: i64, offset: u64) {
        let entry = Entry::new(key.1, offset, due_ms.rem_euclid(1000));
        let slot = self.slots.entry(key.0).or_default();
        match slot.entries.last() {
            // Timers arrive in log order, so almost always at the end.
            Some(last) if last.position >= key.1 => {
                let i = slot.entries.partition_point(|e| e.position < key.1);
                if slot.entries.get(i).is_some_and(|e| e.position == key.1) {
                    if slot.entries[i].is_gone() {
                        slot.gone -= 1;
                    } else {
                        // Replaced: the older record no longer counts.
                        self.len -= 1;
                        if let Some(b) = self.buckets.get_mut(&bucket_of(key.0)) {
                            b.live = b.live.saturating_sub(1);
                        }
                    }
                    slot.entries[i] = entry;
                } else {
                    slot.entries.insert(i, entry);
                }
            }
            _ => slot.entries.push(entry),
        }
        self.len += 1;
        if let Some(b) = self.buckets.get_mut(&bucket_of(key.0)) {
            b.live += 1;
        }
    }

    fn index_remove(&mut self, key: &TimerKey) -> bool {
        let Some(slot) = self.slots.get_mut(&key.0) else { return false };
        let Some(i) = slot.find(key.1) else { return false };
        slot.entries[i].packed = GONE;
        slot.gone += 1;
        if slot.gone == slot.entries.len() {
            self.slots.remove(&key.0);
        } else if slot.gone * 2 > slot.entries.len() {
            slot.entries.retain(|e| !e.is_gone());
            slot.gone = 0;
        }
        self.len -= 1;
        if let Some(b) = self.buckets.get_mut(&bucket_of(key.0)) {
            b.live = b.live.saturating_sub(1);
        }
        true
    }

    /// Adds a pending timer (`key` is [`timer_key`](crate::broker::timer::timer_key) of its due
    /// time and position).
    pub fn insert(&mut self, key: TimerKey, timer: Timer) {
        let bucket = self.bucket_mut(bucket_of(key.0));
        let offset = bucket.durable + bucket.tail.len() as u64;
        encode(OP_PUT, timer.due_ms, key.1, Some(&timer.message), &mut bucket.tail);
        self.index_put(key, timer.due_ms, offset);
    }

    /// Removes a pending timer; `false` if there is none under `key`. Reads nothing.
    pub fn remove(&mut self, key: &TimerKey) -> bool {
        let Some(due_ms) = self.due_ms(key) else { return false };
        self.index_remove(key);
        let detached = self.dir.is_none();
        let b = bucket_of(key.0);
        if let Some(bucket) = self.buckets.get_mut(&b) {
            if detached && bucket.live == 0 {
                // Nothing to persist: its records go with it.
                self.buckets.remove(&b);
            } else {
                encode(OP_REMOVE, due_ms, key.1, None, &mut bucket.tail);
            }
        }
        true
    }

    /// The due time of the pending timer under `key`, from memory.
    pub fn due_ms(&self, key: &TimerKey) -> Option<i64> {
        let slot = self.slots.get(&key.0)?;
        let e = slot.entries[slot.find(key.1)?];
        Some(key.0 * 1000 + e.ms())
    }

    pub fn get(&self, key: &TimerKey) -> DiskResult<Option<Timer>> {
        let Some(slot) = self.slots.get(&key.0) else { return Ok(None) };
        let Some(i) = slot.find(key.1) else { return Ok(None) };
        self.read(key, slot.entries[i]).map(Some)
    }

    /// The record of the pending timer `key`, at `entry`.
    fn read(&self, key: &TimerKey, entry: Entry) -> DiskResult<Timer> {
        let bucket = self.buckets.get(&bucket_of(key.0)).ok_or_else(|| corrupt(format!("no file for {key:?}")))?;
        let offset = entry.offset();
        let mut header = [0u8; HEADER];
        let body = if offset >= bucket.durable {
            let at = (offset - bucket.durable) as usize;
            let bytes = bucket.tail.get(at..).ok_or_else(|| corrupt(format!("offset {offset} past the tail")))?;
            let head = bytes.get(..HEADER).ok_or_else(|| corrupt("torn header in memory".into()))?;
            header.copy_from_slice(head);
            let len = u32::from_le_bytes(header[4..].try_into().unwrap_or_default()) as usize;
            bytes.get(HEADER..HEADER + len).ok_or_else(|| corrupt("torn body in memory".into()))?.to_vec()
        } else {
            let file = bucket.file.as_ref().ok_or_else(|| corrupt(format!("hour {} has no file", bucket_of(key.0))))?;
            file.read_exact_at(&mut header, offset)?;
            let len = u32::from_le_bytes(header[4..].try_into().unwrap_or_default()) as usize;
            let mut body = vec![0; len];
            file.read_exact_at(&mut body, offset + HEADER as u64)?;
            body
        };
        match check(&header, &body).map_err(|e| corrupt(e.to_string()))? {
            (OP_PUT, due_ms, position, Some(message)) if key_of(due_ms, position) == *key => {
                Ok(Timer { due_ms, message })
            }
            _ => Err(corrupt(format!("the record at {offset} is not the timer {key:?}"))),
        }
    }

    /// Keys of up to `limit` timers due by `now_ms`, by due second then position. Reads no file.
    pub fn due_keys(&self, now_ms: i64, limit: usize) -> Vec<TimerKey> {
        let mut out = Vec::new();
        for (&second, slot) in self.slots.range(..=now_ms.div_euclid(1000)) {
            for e in slot.entries.iter().filter(|e| !e.is_gone()) {
                if out.len() >= limit {
                    return out;
                }
                if second * 1000 + e.ms() <= now_ms {
                    out.push((second, e.position));
                }
            }
        }
        out
    }

    /// When the earliest pending timer falls due, if any. Reads no file.
    pub fn first_due_ms(&self) -> Option<i64> {
        // A slot is dropped once all its timers are gone, so the first slot holds a live one.
        let (&second, slot) = self.slots.iter().next()?;
        slot.entries.iter().filter(|e| !e.is_gone()).map(|e| second * 1000 + e.ms()).min()
    }

    /// Up to `limit` timers with keys in `from..`, in key order.
    pub fn range_from(&self, from: &TimerKey, limit: usize) -> DiskResult<Vec<(TimerKey, Timer)>> {
        let mut out = Vec::new();
        for (&second, slot) in self.slots.range(from.0..) {
            let start = if second == from.0 { slot.entries.partition_point(|e| e.position < from.1) } else { 0 };
            for e in slot.entries[start..].iter().filter(|e| !e.is_gone()) {
                if out.len() >= limit {
                    return Ok(out);
                }
                let key = (second, e.position);
                out.push((key, self.read(&key, *e)?));
            }
        }
        Ok(out)
    }

    /// Every pending timer, in key order (snapshots, digests, comparisons).
    pub fn all(&self) -> DiskResult<Vec<(TimerKey, Timer)>> {
        self.range_from(&(i64::MIN, 0), usize::MAX)
    }

    /// Copies what a checkpoint writes (under the state lock; only the tails are copied).
    pub fn prepare(&self) -> WheelWrites {
        let mut writes = Vec::new();
        let mut emptied = Vec::new();
        let mut files = Vec::new();
        for (&bucket, b) in &self.buckets {
            if b.live == 0 {
                emptied.push((bucket, b.generation));
                continue;
            }
            files.push((bucket, b.generation, b.durable + b.tail.len() as u64));
            if !b.tail.is_empty() {
                writes.push(TailWrite {
                    bucket,
                    generation: b.generation,
                    at: b.durable,
                    bytes: b.tail.clone(),
                    file: b.file.clone(),
                });
            }
        }
        WheelWrites {
            dir: self.dir.clone(),
            writes,
            emptied,
            mark: WheelMark { next_generation: self.next_generation, files },
        }
    }

    /// Attaches a detached wheel (a snapshot's) to `dir` as new files, with generations from
    /// `first_generation` on (past every file of the wheel it replaces), and returns what to
    /// write.
    pub fn prepare_install(&mut self, dir: &Path, first_generation: u64) -> WheelWrites {
        self.dir = Some(dir.to_path_buf());
        self.next_generation = first_generation;
        let empty: Vec<i64> = self.buckets.iter().filter(|(_, b)| b.live == 0).map(|(k, _)| *k).collect();
        for bucket in empty {
            self.buckets.remove(&bucket);
        }
        for b in self.buckets.values_mut() {
            b.generation = self.next_generation;
            self.next_generation += 1;
            b.file = None;
            b.durable = 0;
        }
        self.prepare()
    }

    /// The generation a wheel replacing this one starts from.
    pub fn next_generation(&self) -> u64 {
        self.next_generation
    }

    /// The batch naming `writes.mark` committed: the written tails are on disk from now on.
    /// Returns the files to delete (hours that stayed empty), best deleted without the lock.
    pub fn committed(&mut self, writes: WheelWrites) -> Vec<PathBuf> {
        for w in &writes.writes {
            let Some(b) = self.buckets.get_mut(&w.bucket).filter(|b| b.generation == w.generation) else { continue };
            b.file = b.file.take().or(w.file.clone());
            b.durable += w.bytes.len() as u64;
            b.tail.drain(..w.bytes.len().min(b.tail.len()));
        }
        let mut gone = Vec::new();
        for &(bucket, generation) in &writes.emptied {
            if self.buckets.get(&bucket).is_some_and(|b| b.generation == generation && b.live == 0) {
                self.buckets.remove(&bucket);
                gone.push((bucket, generation));
            }
        }
        writes.paths(&gone)
    }
}

/// Removes the files of emptied hours (after the lock is released; a crash before leaves them
/// to the next open, which removes every file its mark does not name).
pub fn remove_files(dir: &Path, paths: &[PathBuf]) -> Result<(), StoreError> {
    for path in paths {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(path)(e)),
        }
    }
    if !paths.is_empty() {
        crate::store::sync_dir(dir)?;
    }
    Ok(())
}

/// Removes every wheel file in `dir` but those of `keep` ((hour, generation) pairs).
pub fn remove_files_except(dir: &Path, keep: &[(i64, u64)]) -> Result<(), StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    };
    let mut stale = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let named = entry.file_name().to_str().and_then(parse_file_name);
        if named.is_some_and(|n| !keep.contains(&n)) {
            stale.push(entry.path());
        }
    }
    remove_files(dir, &stale)
}

/// A detached copy holding every pending timer (for comparisons in tests and snapshot clones).
impl Clone for TimerWheel {
    fn clone(&self) -> Self {
        if self.dir.is_none() {
            let buckets = self.buckets.iter().map(|(k, b)| (*k, Bucket { file: None, ..b.clone() })).collect();
            return TimerWheel { dir: None, slots: self.slots.clone(), buckets, ..*self };
        }
        let mut copy = TimerWheel::default();
        for (key, timer) in self.all().expect("pending timers are readable") {
            copy.insert(key, timer);
        }
        copy
    }
}

impl PartialEq for TimerWheel {
    fn eq(&self, other: &Self) -> bool {
        match (self.all(), other.all()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Debug for TimerWheel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.all() {
            Ok(rows) => f.debug_map().entries(rows.iter().map(|(k, v)| (k, v))).finish(),
            Err(e) => write!(f, "<unreadable: {e}>"),
        }
    }
}

/// As a list of (key, timer), the form snapshots have always had.
impl Serialize for TimerWheel {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let rows = self.all().map_err(serde::ser::Error::custom)?;
        s.collect_seq(rows.iter())
    }
}

impl<'de> Deserialize<'de> for TimerWheel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<(TimerKey, Timer)> = Vec::deserialize(d)?;
        let mut wheel = TimerWheel::default();
        for ((_, position), timer) in pairs {
            // The second is derived from the due time, never trusted.
            wheel.insert(key_of(timer.due_ms, position), timer);
        }
        Ok(wheel)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const HOUR_MS: i64 = BUCKET_SECS * 1000;
    /// A due time on an hour's boundary.
    const T0: i64 = 1_764_000_000_000;

    /// A wheel on a fresh directory, as a node opens it the first time.
    fn opened() -> (tempfile::TempDir, TimerWheel) {
        let dir = tempfile::tempdir().unwrap();
        let wheel = TimerWheel::open(dir.path(), None).unwrap();
        (dir, wheel)
    }

    fn timer(due_ms: i64, id: u64) -> Timer {
        let message = HeldMessage {
            topic: "D".into(),
            queue_id: (id % 4) as u32,
            message_id: format!("id-{id}"),
            size: 100 + id as u32,
            tag_hash: id * 7,
            stored_ms: due_ms - 5_000,
        };
        Timer { due_ms, message }
    }

    fn put(w: &mut TimerWheel, due_ms: i64, position: u64) {
        w.insert(key_of(due_ms, position), timer(due_ms, position));
    }

    /// A checkpoint: the tails written and the mark committed.
    fn checkpoint(w: &mut TimerWheel) -> WheelMark {
        let mut writes = w.prepare();
        writes.write().unwrap();
        let mark = writes.mark.clone();
        let dir = w.dir.clone().unwrap();
        let emptied = w.committed(writes);
        remove_files(&dir, &emptied).unwrap();
        mark
    }

    fn wheel_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| parse_file_name(n).is_some())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_first_due_time_is_the_earliest_live_timer_to_the_millisecond() {
        let (_dir, mut w) = opened();
        assert_eq!(w.first_due_ms(), None);
        // Within one second, a later position due earlier in the second.
        put(&mut w, T0 + 900, 10);
        put(&mut w, T0 + 120, 20);
        put(&mut w, T0 + 5_000, 30);
        assert_eq!(w.first_due_ms(), Some(T0 + 120));
        assert!(w.remove(&key_of(T0 + 120, 20)));
        assert_eq!(w.first_due_ms(), Some(T0 + 900), "a removed timer is not waited for");
        assert!(w.remove(&key_of(T0 + 900, 10)));
        assert_eq!(w.first_due_ms(), Some(T0 + 5_000));
        assert!(w.remove(&key_of(T0 + 5_000, 30)));
        assert_eq!(w.first_due_ms(), None);
    }

    #[test]
    fn pending_timers_survive_a_checkpoint_and_reopen_and_only_due_ones_are_listed_due() {
        let (dir, mut w) = opened();
        for i in 0..100u64 {
            // Two hours, several timers per second, due milliseconds all over the second.
            put(&mut w, T0 + (i as i64 % 50) * 80_000 + (i as i64 * 37) % 1000, 1_000 + i);
        }
        assert!(w.remove(&key_of(T0, 1_000)));
        assert!(!w.remove(&key_of(T0, 1_000)), "a timer is removed once");
        let mark = checkpoint(&mut w);
        assert_eq!(mark.files.len(), 2, "one file per hour of due time");
        // Changes after the checkpoint are read from memory, then written by the next.
        put(&mut w, T0 + 5, 5_000);
        assert!(w.remove(&key_of(T0 + 80_037, 1_001)));
        let expected = w.all().unwrap();
        assert_eq!(expected.len(), 99);
        let mark = checkpoint(&mut w);
        drop(w);
        let w = TimerWheel::open(dir.path(), Some(mark)).unwrap();
        assert_eq!(w.all().unwrap(), expected);
        assert_eq!(w.len(), 99);
        let now = T0 + 80_500;
        let due = w.due_keys(now, usize::MAX);
        let truly_due: Vec<TimerKey> = expected.iter().filter(|(_, t)| t.due_ms <= now).map(|(k, _)| *k).collect();
        assert_eq!(due, truly_due, "due keys come from memory and match the records");
        assert_eq!(w.get(&key_of(T0 + 5, 5_000)).unwrap(), Some(timer(T0 + 5, 5_000)));
    }

    #[test]
    fn what_an_uncommitted_checkpoint_wrote_is_cut_off_on_open() {
        let (dir, mut w) = opened();
        put(&mut w, T0, 1);
        let mark = checkpoint(&mut w);
        // Written, but the batch naming it never committed: a crash in between.
        put(&mut w, T0 + 1, 2);
        put(&mut w, T0 + 2 * HOUR_MS, 3);
        w.remove(&key_of(T0, 1));
        w.prepare().write().unwrap();
        drop(w);
        let w = TimerWheel::open(dir.path(), Some(mark.clone())).unwrap();
        assert_eq!(w.all().unwrap(), vec![(key_of(T0, 1), timer(T0, 1))]);
        let (bucket, generation, len) = mark.files[0];
        assert_eq!(std::fs::metadata(dir.path().join(file_name(bucket, generation))).unwrap().len(), len);
        assert_eq!(wheel_files(dir.path()).len(), 1, "the new hour's file went too");
    }

    #[test]
    fn a_checkpoint_that_never_committed_is_written_again_by_the_next() {
        let (dir, mut w) = opened();
        put(&mut w, T0, 1);
        checkpoint(&mut w);
        put(&mut w, T0, 2);
        // Its batch failed: the written tail is not covered and stays in memory.
        w.prepare().write().unwrap();
        put(&mut w, T0, 3);
        let mark = checkpoint(&mut w);
        let expected = w.all().unwrap();
        assert_eq!(expected.len(), 3);
        drop(w);
        assert_eq!(TimerWheel::open(dir.path(), Some(mark)).unwrap().all().unwrap(), expected);
    }

    #[test]
    fn an_hour_whose_timers_are_all_gone_loses_its_file() {
        let (dir, mut w) = opened();
        put(&mut w, T0, 1);
        put(&mut w, T0 + HOUR_MS, 2);
        checkpoint(&mut w);
        assert_eq!(wheel_files(dir.path()).len(), 2);
        w.remove(&key_of(T0, 1));
        let mark = checkpoint(&mut w);
        assert_eq!(mark.files.len(), 1);
        assert_eq!(wheel_files(dir.path()).len(), 1, "the emptied hour's file is deleted");
        // A timer set in that hour again gets a file of a new generation.
        put(&mut w, T0 + 10, 3);
        let mark = checkpoint(&mut w);
        drop(w);
        let w = TimerWheel::open(dir.path(), Some(mark)).unwrap();
        let keys: Vec<TimerKey> = w.all().unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![key_of(T0 + 10, 3), key_of(T0 + HOUR_MS, 2)]);
    }

    /// Firing a whole second front to back, as the leader does, then a late timer inserted
    /// before others of its second (a committed half of a delay message keeps its position).
    #[test]
    fn removing_in_order_and_inserting_out_of_order_keep_the_index_right() {
        let mut w = TimerWheel::default();
        for p in (10..10_000u64).step_by(2) {
            put(&mut w, T0 + (p % 1000) as i64, p);
        }
        put(&mut w, T0 + 1, 11);
        for p in (10..5_000u64).step_by(2) {
            assert!(w.remove(&key_of(T0, p)), "{p}");
        }
        let rest: Vec<u64> = w.all().unwrap().into_iter().map(|(k, _)| k.1).collect();
        let expected: Vec<u64> = std::iter::once(11).chain((5_000..10_000).step_by(2)).collect();
        assert_eq!(rest, expected);
        assert_eq!(w.range_from(&(T0 / 1000, 5_001), 2).unwrap().len(), 2);
        assert_eq!(w.range_from(&(T0 / 1000, 5_001), 2).unwrap()[0].0, (T0 / 1000, 5_002));
    }

    #[test]
    fn a_snapshot_keeps_its_form_and_installs_as_new_files() {
        let (dir, mut live) = opened();
        put(&mut live, T0, 1);
        checkpoint(&mut live);
        let mut snapshot = TimerWheel::default();
        put(&mut snapshot, T0 + 500, 7);
        put(&mut snapshot, T0 + HOUR_MS, 8);
        let json = serde_json::to_string(&snapshot).unwrap();
        assert!(json.starts_with(r#"[[[1764000000,7],{"due_ms":1764000000500,"message":{"topic":"D""#), "{json}");
        let mut installed: TimerWheel = serde_json::from_str(&json).unwrap();
        assert_eq!(installed, snapshot);
        let mut writes = installed.prepare_install(dir.path(), live.next_generation());
        writes.write().unwrap();
        let mark = writes.mark.clone();
        let keep: Vec<(i64, u64)> = mark.files.iter().map(|&(b, g, _)| (b, g)).collect();
        installed.committed(writes);
        remove_files_except(dir.path(), &keep).unwrap();
        assert_eq!(wheel_files(dir.path()).len(), 2, "the live wheel's file is gone, the snapshot's two are there");
        drop(installed);
        assert_eq!(TimerWheel::open(dir.path(), Some(mark)).unwrap(), snapshot);
    }

    #[test]
    fn a_damaged_file_is_an_error_naming_it() {
        let (dir, mut w) = opened();
        put(&mut w, T0, 1);
        let mark = checkpoint(&mut w);
        drop(w);
        let (bucket, generation, len) = mark.files[0];
        let path = dir.path().join(file_name(bucket, generation));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let err = TimerWheel::open(dir.path(), Some(mark.clone())).err().unwrap().to_string();
        assert!(err.contains(&file_name(bucket, generation)) && err.contains("checksum"), "{err}");
        std::fs::write(&path, &bytes[..len as usize - 3]).unwrap();
        let err = TimerWheel::open(dir.path(), Some(mark)).err().unwrap().to_string();
        assert!(err.contains("the last checkpoint wrote"), "{err}");
    }

    /// Deleting a topic finds its pending timers by reading the files in order: those on disk
    /// and those still in memory, not ones removed or of another topic.
    #[test]
    fn the_timers_of_a_topic_are_found_by_one_pass_over_the_records() {
        let (_dir, mut w) = opened();
        let mut other = timer(T0, 0);
        other.message.topic = "E".into();
        for p in 1..=6u64 {
            put(&mut w, T0 + p as i64 * 1000, p);
            w.insert(key_of(T0 + p as i64 * 1000, 100 + p), Timer { due_ms: T0 + p as i64 * 1000, ..other.clone() });
        }
        w.remove(&key_of(T0 + 2000, 2));
        checkpoint(&mut w);
        put(&mut w, T0 + HOUR_MS, 7);
        w.remove(&key_of(T0 + 3000, 3));
        let keys = w.keys_of_topic("D").unwrap();
        let expected: Vec<TimerKey> =
            [1, 4, 5, 6].iter().map(|&p| key_of(T0 + p as i64 * 1000, p)).chain([key_of(T0 + HOUR_MS, 7)]).collect();
        assert_eq!(keys, expected);
        assert_eq!(w.keys_of_topic("E").unwrap().len(), 6);
    }

    #[test]
    fn a_pending_timer_takes_sixteen_bytes_of_memory() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
    }

    proptest! {
        /// Whatever bytes a wheel file holds, reading it never panics: it indexes or errs.
        #[test]
        fn reading_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut w = TimerWheel::default();
            let _ = w.replay(0, &bytes[..], bytes.len() as u64);
        }
    }
}
