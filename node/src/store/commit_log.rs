//! The CommitLog: a chain of segment files plus the log index, with one writer and any number
//! of concurrent readers.
//!
//! Segments are named by their global byte offset and say in their file header which Raft index
//! their first record must carry. Segment `k` holds the records `first_index(k) ..
//! first_index(k + 1)`; anything it stores past that was truncated away. Truncation therefore
//! never rewrites bytes a reader may hold: it starts a new segment whose `first_index` supersedes
//! the tail of the old one.
//!
//! Every segment but the tail is durable: `roll` syncs a segment before it starts the next one,
//! and `open` syncs what it recovers. So making records durable only ever needs the tail (and
//! whatever a concurrent roll has just sealed). See `durable.rs` for the durable index and the
//! fail-stop rule.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;

use crate::store::durable::{Covers, DurableState};
use crate::store::flush::{FlushCallback, FlushJob, Flusher};
use crate::store::index::{IndexSlot, LogIndex};
use crate::store::record::{self, HEADER_LEN, RecordMeta, Slot};
use crate::store::segment::{self, FILE_HEADER_LEN, Segment};
use crate::store::sync_mark::SyncMark;
use crate::store::{Durability, LogConfig, RecordFault, StoreError, create_dir_durable, io_err, sync_dir};

/// A record read back from the log. `payload` points into the segment mapping (no copy) and
/// stays valid for as long as it is held, even after the record is purged or truncated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub meta: RecordMeta,
    pub payload: Bytes,
}

/// The readable extent of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogBounds {
    /// The lowest index that can be read; everything below was purged.
    pub first_index: u64,
    /// The last record, or `None` when nothing past the purge point is stored.
    pub last: Option<RecordMeta>,
}

impl LogBounds {
    /// The index the next append must carry.
    pub fn next_index(&self) -> u64 {
        self.last.map_or(self.first_index, |l| l.index + 1)
    }
}

struct Shared {
    segments: RwLock<Vec<Arc<Segment>>>,
    index: LogIndex,
    /// Lock order: `bounds`, then `durable` (a truncation changes both at once).
    bounds: RwLock<LogBounds>,
    durable: Arc<DurableState>,
    /// Records that do not read back, in log order (see [`Damage`]).
    holes: RwLock<Vec<Hole>>,
    /// Told the new first index after a purge, so readers that keep records (which pin their
    /// segment's mapping, and with it a deleted file's space) let go of the purged ones.
    purge_listeners: Mutex<Vec<PurgeListener>>,
}

pub type PurgeListener = Box<dyn Fn(u64) + Send + Sync>;

/// Where the next record goes.
struct Tail {
    segment: Arc<Segment>,
    position: u64,
    next_index: u64,
}

pub struct CommitLog {
    config: LogConfig,
    segments_dir: PathBuf,
    shared: Arc<Shared>,
    tail: Option<Tail>,
    next_base_offset: u64,
    /// The durability epoch appends are made in (see `durable.rs`); only this writer changes it.
    epoch: u64,
    // Declared last so that it is dropped (and syncs) after everything else is released.
    flusher: Flusher,
}

/// A cheap, cloneable read handle. Readers see every append once `append` returns.
#[derive(Clone)]
pub struct LogReader {
    shared: Arc<Shared>,
}

/// Reads and checks the record at `position` of `segment`, which must carry `index`.
fn read_record(segment: &Segment, position: u64, index: u64) -> Result<StoredRecord, RecordFault> {
    let header_bytes = segment.slice(position, HEADER_LEN as u64).ok_or(RecordFault::HeaderPastEnd)?;
    let header = match record::decode_header(header_bytes) {
        Ok(Slot::Record(h)) => h,
        Ok(Slot::End) => return Err(RecordFault::NoRecord),
        Err(reason) => return Err(RecordFault::BadHeader(reason)),
    };
    if header.meta.index != index {
        return Err(RecordFault::OtherIndex(header.meta.index));
    }
    let payload =
        segment.slice(position + HEADER_LEN as u64, header.length as u64).ok_or(RecordFault::PayloadPastEnd)?;
    if !record::crc_matches(header_bytes, payload) {
        return Err(RecordFault::Checksum);
    }
    let payload =
        segment.bytes(position + HEADER_LEN as u64, header.length as u64).ok_or(RecordFault::PayloadPastEnd)?;
    Ok(StoredRecord { meta: header.meta, payload })
}

/// What sits at `position` of `segment`, read as the record `expect` that follows one of
/// `prev_term`.
enum At {
    Record(RecordMeta, IndexSlot),
    /// A pad marker or zeroes: the segment's records end here.
    End,
    /// Neither a whole record that fits here nor the end: torn or damaged bytes.
    Bad,
}

fn record_at(segment: &Segment, position: u64, expect: u64, prev_term: u64) -> At {
    let Some(header_bytes) = segment.slice(position, HEADER_LEN as u64) else { return At::End };
    let header = match record::decode_header(header_bytes) {
        Ok(Slot::Record(h)) => h,
        Ok(Slot::End) => return At::End,
        Err(_) => return At::Bad,
    };
    if header.meta.index != expect || header.meta.term < prev_term {
        return At::Bad;
    }
    let Some(payload) = segment.slice(position + HEADER_LEN as u64, header.length as u64) else { return At::Bad };
    if !record::crc_matches(header_bytes, payload) {
        return At::Bad;
    }
    let slot = IndexSlot {
        segment: segment.base_offset,
        position: position as u32,
        length: header.length,
        term: header.meta.term,
    };
    At::Record(header.meta, slot)
}

/// The first whole record after `from` in `segment` that could follow record `expect - 1` (of
/// `prev_term`) in the log: a later index below `limit`, no earlier term. Found by its magic, so
/// that a damaged record whose length field is wrong does not hide the records after it.
fn next_whole(
    segment: &Segment,
    from: u64,
    expect: u64,
    limit: u64,
    prev_term: u64,
) -> Option<(u64, RecordMeta, IndexSlot)> {
    let rest = segment.slice(from, segment.size.checked_sub(from)?)?;
    let magic = record::RECORD_MAGIC.to_le_bytes();
    for at in memchr::memmem::find_iter(rest, &magic) {
        let position = from + at as u64;
        let Some(Ok(Slot::Record(h))) = segment.slice(position, HEADER_LEN as u64).map(record::decode_header) else {
            continue;
        };
        if h.meta.index <= expect || h.meta.index >= limit {
            continue;
        }
        if let At::Record(meta, slot) = record_at(segment, position, h.meta.index, prev_term) {
            return Some((position, meta, slot));
        }
    }
    None
}

/// A run of records in a segment that do not read back, with a whole record right after it.
#[derive(Debug, Clone, Copy)]
struct Gap {
    first_index: u64,
    end_index: u64,
    from: u64,
    to: u64,
}

/// What a walk over one segment's records found.
struct Walk {
    /// The whole records, in log order (not contiguous where there are gaps).
    records: Vec<(RecordMeta, IndexSlot)>,
    gaps: Vec<Gap>,
    /// Where the walk stopped: after the last whole record, or at bytes that did not read back
    /// (with no whole record after them).
    end: u64,
}

/// Walks the records of `segment` from its start: whole ones with consecutive indexes from
/// `first_index(segment)` below `limit` that never go back in term. After bytes that do not read
/// back it looks for the next whole record and, with `resync`, carries on from there.
fn walk(segment: &Segment, limit: u64, mut prev_term: u64, resync: bool) -> Walk {
    let mut w = Walk { records: Vec::new(), gaps: Vec::new(), end: FILE_HEADER_LEN };
    let mut position = FILE_HEADER_LEN;
    let mut expect = segment.first_index;
    while expect < limit {
        match record_at(segment, position, expect, prev_term) {
            At::Record(meta, slot) => {
                w.records.push((meta, slot));
                position += HEADER_LEN as u64 + slot.length as u64;
                prev_term = meta.term;
                expect += 1;
            }
            At::End => break,
            At::Bad => {
                let next = if resync { next_whole(segment, position + 1, expect, limit, prev_term) } else { None };
                let Some((to, meta, _)) = next else { break };
                w.gaps.push(Gap { first_index: expect, end_index: meta.index, from: position, to });
                position = to;
                expect = meta.index;
            }
        }
    }
    w.end = position;
    w
}

/// A run of records this log held whole that do not read back (a flipped bit, a cut file):
/// they are never served and are filled again from another member (`raft/repair.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The first index that does not read back, and the one after the last.
    pub first_index: u64,
    pub end_index: u64,
    /// The segment file and the byte where the damage starts.
    pub path: PathBuf,
    pub offset: u64,
    /// The whole record this log holds right after the damage, if any: a member whose log holds
    /// the same record there holds the same records before it (Raft's log matching).
    pub anchor: Option<RecordMeta>,
    /// At the log's tail: nothing whole follows, and the log takes no appends until it is filled.
    pub at_tail: bool,
}

/// Damage as the log keeps it: where in which segment the records go back.
#[derive(Debug, Clone)]
struct Hole {
    segment: Arc<Segment>,
    first_index: u64,
    end_index: u64,
    from: u64,
    /// Where the whole record after the damage starts, when one does in the same segment: the
    /// records filled in must end exactly there. `None`: they may run to the segment's end.
    to: Option<u64>,
    at_tail: bool,
}

/// The damage `w`, a walk over `seg`, found among records from `from` on: each gap, and when the
/// segment is sealed (`limit`: the next segment's first index) and its records end early, the
/// rest of it.
fn damage_in(seg: &Arc<Segment>, w: &Walk, limit: Option<u64>, from: u64) -> Vec<Hole> {
    let hole = |first_index, end_index, from, to| Hole {
        segment: Arc::clone(seg),
        first_index,
        end_index,
        from,
        to,
        at_tail: false,
    };
    let mut found: Vec<Hole> = w
        .gaps
        .iter()
        .filter(|g| g.end_index > from)
        .map(|g| hole(g.first_index, g.end_index, g.from, Some(g.to)))
        .collect();
    let reached = w.records.last().map_or(seg.first_index, |(m, _)| m.index + 1);
    if let Some(limit) = limit.filter(|&l| reached < l && l > from) {
        found.push(hole(reached, limit, w.end, None));
    }
    found
}

/// Where the whole records of the segment file at `path` end, as recovery reads them (the next
/// record would be written there): fault tests tear a log's tail just past it.
pub fn segment_written_end(path: &Path) -> Result<u64, StoreError> {
    let segment = Segment::open(path)?;
    Ok(walk(&segment, u64::MAX, 0, false).end)
}

impl CommitLog {
    /// Opens (or creates) the log in `config.dir`, recovering from whatever a crash left:
    /// the log is cut at the first record that is torn, corrupt or out of sequence, and index
    /// slots are rebuilt from the segments where they disagree. `last_purged` is the highest
    /// index the owner has durably recorded as purged.
    pub fn open(config: LogConfig, last_purged: Option<u64>) -> Result<CommitLog, StoreError> {
        config.validate()?;
        let segments_dir = config.dir.join("segments");
        create_dir_durable(&segments_dir)?;
        let index = LogIndex::open(&config.dir.join("index"), config.index_slots_per_file)?;

        let mut found: Vec<(u64, PathBuf)> = Vec::new();
        for entry in fs::read_dir(&segments_dir).map_err(io_err(&segments_dir))? {
            let entry = entry.map_err(io_err(&segments_dir))?;
            if let Some(base) = entry.file_name().to_str().and_then(segment::parse_file_name) {
                found.push((base, entry.path()));
            }
        }
        found.sort();

        // The chain: a segment supersedes every earlier one whose first index is not below its own.
        let mut chain: Vec<Arc<Segment>> = Vec::new();
        let mut next_base_offset = 0;
        let mut dropped: Vec<PathBuf> = Vec::new();
        let count = found.len();
        for (i, (_, path)) in found.into_iter().enumerate() {
            let seg = match Segment::open(&path) {
                Ok(s) => s,
                Err(e @ StoreError::CorruptSegment { .. }) if i + 1 == count => {
                    // Creating the newest segment was cut short: it holds nothing yet.
                    tracing::warn!(error = %e, "discarding a half-created segment");
                    dropped.push(path);
                    continue;
                }
                Err(e) => return Err(e),
            };
            next_base_offset = seg.base_offset + seg.size;
            while chain.last().is_some_and(|prev| prev.first_index >= seg.first_index) {
                dropped.push(chain.pop().expect("non-empty").path().to_path_buf());
            }
            chain.push(Arc::new(seg));
        }

        let purged_below = last_purged.map_or(0, |p| p + 1);
        // Segments whose every index is purged go, except the last: its base offset carries on.
        while chain.len() > 1 && chain[1].first_index <= purged_below {
            dropped.push(chain.remove(0).path().to_path_buf());
        }

        // Damage among records the log had synced is kept as holes to fill from another member;
        // damage past them is a torn write, cut off as such (see `sync_mark.rs`).
        let (mark, marked) = SyncMark::open(&config.dir.join("synced"))?;
        let synced_end = marked.map_or(0, |m| m + 1);
        let mut holes: Vec<Hole> = Vec::new();

        // Check each sealed segment's range against the index; walk it where they disagree.
        let mut last: Option<RecordMeta> = None;
        let mut tail: Option<Tail> = None;
        let mut k = 0;
        while k < chain.len() {
            let seg = Arc::clone(&chain[k]);
            let sealed = k + 1 < chain.len();
            let limit = if sealed { chain[k + 1].first_index } else { u64::MAX };
            let prev_term = last.map_or(0, |l| l.term);
            let check_from = seg.first_index.max(purged_below);
            if sealed
                && check_from < limit
                && let Some(tail_meta) = checked_range_end(&index, &seg, check_from, limit - 1)
            {
                last = Some(tail_meta);
                k += 1;
                continue;
            }
            let Walk { mut records, mut gaps, mut end } = walk(&seg, limit, prev_term, true);
            if !sealed && let Some(cut) = gaps.iter().position(|g| g.first_index >= synced_end) {
                let torn = gaps[cut];
                records.retain(|(m, _)| m.index < torn.first_index);
                gaps.truncate(cut);
                end = torn.from;
            }
            put_runs(&index, &records)?;
            if let Some((meta, _)) = records.last() {
                last = Some(*meta);
            }
            let reached = records.last().map_or(seg.first_index, |(m, _)| m.index + 1);
            // Damage among records purged already is nobody's concern: no one reads them again.
            let walked = Walk { records, gaps, end };
            holes.extend(damage_in(&seg, &walked, sealed.then_some(limit), purged_below));
            if !sealed {
                if reached < synced_end && synced_end > purged_below {
                    holes.push(Hole {
                        segment: Arc::clone(&seg),
                        first_index: reached,
                        end_index: synced_end,
                        from: end,
                        to: None,
                        at_tail: true,
                    });
                } else if let Some(room) = seg.slice(end, HEADER_LEN as u64)
                    && room.iter().any(|&b| b != 0)
                {
                    // Clear whatever a torn write left right after the last good record, so that
                    // a later walk cannot mistake it for the start of a record.
                    seg_write_zero_header(&seg, end)?;
                }
                tail = Some(Tail { segment: Arc::clone(&seg), position: end, next_index: reached });
            }
            k += 1;
        }
        for h in &holes {
            tracing::error!(
                segment = %h.segment.path().display(), offset = h.from, first_index = h.first_index,
                last_index = h.end_index - 1, "log records this node had synced do not read back; they are never \
                 served, and are fetched again from another member"
            );
        }

        for path in &dropped {
            fs::remove_file(path).map_err(io_err(path))?;
        }
        if !dropped.is_empty() {
            sync_dir(&segments_dir)?;
        }
        // What a crashed process wrote may still be only in the page cache: the durable index
        // starts from what is synced here, not from what the files seem to hold.
        for seg in &chain {
            seg.sync()?;
        }

        let first_index = purged_below.max(chain.first().map_or(0, |s| s.first_index));
        if last.is_some_and(|l| l.index < first_index) {
            last = None;
        }
        let bounds = LogBounds { first_index, last };
        let through = last.map(|l| l.index).max(last_purged);
        // A tail still to be filled keeps its mark: the evidence must outlive a restart.
        mark.write(through.max(marked));
        let durable = Arc::new(DurableState::with_mark(through, mark));
        let flusher = Flusher::start(config.durability, config.flush_interval, Arc::clone(&durable))
            .map_err(|source| StoreError::Io { path: config.dir.clone(), source })?;
        Ok(CommitLog {
            config,
            segments_dir,
            shared: Arc::new(Shared {
                segments: RwLock::new(chain),
                index,
                bounds: RwLock::new(bounds),
                durable,
                holes: RwLock::new(holes),
                purge_listeners: Mutex::new(Vec::new()),
            }),
            tail,
            next_base_offset,
            epoch: 0,
            flusher,
        })
    }

    pub fn reader(&self) -> LogReader {
        LogReader { shared: Arc::clone(&self.shared) }
    }

    pub fn bounds(&self) -> LogBounds {
        *self.shared.bounds.read().expect("bounds lock")
    }

    /// Seals the current tail segment (durably) and starts a new one whose first record will
    /// carry `first_index`.
    fn roll(&mut self, first_index: u64) -> Result<(), StoreError> {
        if let Some(tail) = self.tail.take() {
            if tail.position + HEADER_LEN as u64 <= tail.segment.size {
                tail.segment.write_at(tail.position, &[&record::pad_header()])?;
            }
            crate::crash_point!("log::roll::after_pad");
            tail.segment.sync()?;
            self.shared.index.sync()?;
            // Every earlier segment was synced when it was sealed, so the whole log up to the old
            // tail's last record is on disk now.
            self.shared.durable.advance(Covers { epoch: self.epoch, next_index: tail.next_index });
            crate::crash_point!("log::roll::after_sync");
        }
        let seg = Arc::new(Segment::create(
            &self.segments_dir,
            self.next_base_offset,
            first_index,
            self.config.segment_size,
        )?);
        crate::crash_point!("log::roll::before_dir_sync");
        sync_dir(&self.segments_dir)?;
        self.next_base_offset += self.config.segment_size;
        self.shared.segments.write().expect("segments lock").push(Arc::clone(&seg));
        self.tail = Some(Tail { segment: seg, position: FILE_HEADER_LEN, next_index: first_index });
        crate::crash_point!("log::roll::after");
        Ok(())
    }

    /// Appends records, which must continue the log without a gap. They are readable when this
    /// returns; `done` is called once they are durable (`sync`) or at once (`async`). After a
    /// failed fsync every append fails with [`StoreError::FailStopped`] (and so does `done`).
    pub fn append<I>(&mut self, records: I, done: FlushCallback) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = (RecordMeta, Bytes)>,
    {
        if let Err(e) = self.shared.durable.check().and_then(|()| self.refuse_at_damaged_tail()) {
            done(Err(std::io::Error::other(e.to_string())));
            return Err(e);
        }
        self.append_records(records, done).map_err(|e| self.shared.durable.note(e))
    }

    /// Appending after records that do not read back would build on a log this node no longer
    /// knows: the tail is filled first (see [`CommitLog::fill`]).
    fn refuse_at_damaged_tail(&self) -> Result<(), StoreError> {
        let holes = self.shared.holes.read().expect("holes lock");
        match holes.iter().find(|h| h.at_tail) {
            Some(h) => {
                Err(StoreError::Damaged { index: h.first_index, path: h.segment.path().to_path_buf(), offset: h.from })
            }
            None => Ok(()),
        }
    }

    /// The damage this log holds now (see [`Damage`]).
    pub fn damage(&self) -> Vec<Damage> {
        self.reader().damage()
    }

    /// Fills the damage that starts at `first_index` with `records`, which another member holds
    /// at those indexes: the caller has checked they are the records this log held (see
    /// `raft/repair.rs`). Damage at the tail takes them as appends; elsewhere they must fit the
    /// bytes the damaged records took, exactly.
    pub fn fill(&mut self, first_index: u64, records: Vec<(RecordMeta, Bytes)>) -> Result<(), StoreError> {
        let tail_hole = {
            let holes = self.shared.holes.read().expect("holes lock");
            holes.iter().find(|h| h.first_index == first_index).map(|h| (h.at_tail, h.end_index))
        };
        match tail_hole {
            Some((true, end_index)) => {
                check_run(first_index, end_index, &records, self.bounds().last, None)?;
                self.shared.holes.write().expect("holes lock").retain(|h| !h.at_tail);
                self.append_records(records, Box::new(|_| {})).map_err(|e| self.shared.durable.note(e))?;
                self.flush()
            }
            _ => self.reader().fill(first_index, records),
        }
    }

    fn append_records<I>(&mut self, records: I, done: FlushCallback) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = (RecordMeta, Bytes)>,
    {
        let bounds = self.bounds();
        let mut expect = bounds.next_index();
        let mut last = None;
        let mut buf: Vec<u8> = Vec::new();
        let mut buf_start = 0u64;
        let mut slots: Vec<IndexSlot> = Vec::new();
        let mut first_slot_index = expect;
        let mut batch_first = None;
        let max_record = self.config.segment_size - FILE_HEADER_LEN;
        for (meta, payload) in records {
            // An empty log may start anywhere past the purge point; after that, no gaps.
            if last.is_none() && bounds.last.is_none() && meta.index > expect {
                expect = meta.index;
            }
            if meta.index != expect {
                return Err(StoreError::OutOfOrder { expected: expect, got: meta.index });
            }
            let len = HEADER_LEN as u64 + payload.len() as u64;
            if len > max_record {
                return Err(StoreError::RecordTooLarge { len, max: max_record });
            }
            let header = record::encode_header(&meta, &payload)?;
            let needs_roll = match &self.tail {
                None => true,
                Some(t) => t.next_index != meta.index || t.position + len > t.segment.size,
            };
            if needs_roll {
                self.write_buffered(&mut buf, buf_start, &mut slots, first_slot_index)?;
                self.roll(meta.index)?;
            }
            let tail = self.tail.as_mut().expect("rolled");
            if buf.is_empty() {
                buf_start = tail.position;
                first_slot_index = meta.index;
            }
            slots.push(IndexSlot {
                segment: tail.segment.base_offset,
                position: tail.position as u32,
                length: payload.len() as u32,
                term: meta.term,
            });
            buf.extend_from_slice(&header);
            buf.extend_from_slice(&payload);
            tail.position += len;
            tail.next_index += 1;
            expect += 1;
            batch_first.get_or_insert(meta.index);
            last = Some(meta);
        }
        self.write_buffered(&mut buf, buf_start, &mut slots, first_slot_index)?;
        if let Some(last) = last {
            let mut b = self.shared.bounds.write().expect("bounds lock");
            if b.last.is_none() {
                b.first_index = b.first_index.max(batch_first.unwrap_or(last.index));
            }
            b.last = Some(last);
        }
        match (self.config.durability, &self.tail) {
            (Durability::Sync, Some(t)) => {
                let covers = Covers { epoch: self.epoch, next_index: t.next_index };
                self.flusher.submit(FlushJob::Sync { segment: Arc::clone(&t.segment), covers, done });
            }
            (Durability::Async, Some(t)) => {
                let covers = Covers { epoch: self.epoch, next_index: t.next_index };
                self.flusher.submit(FlushJob::Dirty { segment: Arc::clone(&t.segment), covers });
                done(Ok(()));
            }
            (_, None) => done(Ok(())),
        }
        Ok(())
    }

    fn write_buffered(
        &self,
        buf: &mut Vec<u8>,
        start: u64,
        slots: &mut Vec<IndexSlot>,
        first_index: u64,
    ) -> Result<(), StoreError> {
        if buf.is_empty() {
            return Ok(());
        }
        let tail = self.tail.as_ref().expect("buffered records have a segment");
        tail.segment.write_at(start, &[buf])?;
        self.shared.index.put(first_index, slots)?;
        buf.clear();
        slots.clear();
        Ok(())
    }

    /// Removes every record after `keep` (all of them for `None`). Durable when it returns.
    pub fn truncate_after(&mut self, keep: Option<u64>) -> Result<(), StoreError> {
        self.shared.durable.check()?;
        self.truncate(keep).map_err(|e| self.shared.durable.note(e))
    }

    fn truncate(&mut self, keep: Option<u64>) -> Result<(), StoreError> {
        let bounds = self.bounds();
        let Some(last) = bounds.last else { return Ok(()) };
        if keep.is_some_and(|k| k >= last.index) {
            return Ok(());
        }
        let new_first = keep.map_or(bounds.first_index, |k| (k + 1).max(bounds.first_index));
        let kept_last = match keep {
            Some(k) if k >= bounds.first_index => Some(self.reader().read(k)?.ok_or(StoreError::Missing(k))?.meta),
            _ => None,
        };
        {
            // Readers stop seeing the doomed records before any file changes, and a sync begun
            // for them (flusher, `sync_through`) no longer counts: both change under one lock.
            let mut b = self.shared.bounds.write().expect("bounds lock");
            b.last = kept_last;
            self.epoch = self.shared.durable.truncated(keep);
        }
        // The new segment supersedes the old tail on disk before anything is deleted, so a crash
        // in between still recovers a log without the truncated records.
        self.tail.take().map(|t| t.segment.sync()).transpose()?;
        self.roll(new_first)?;
        crate::crash_point!("log::truncate::after_new_segment");
        let mut doomed = Vec::new();
        {
            let mut segments = self.shared.segments.write().expect("segments lock");
            let n = segments.len();
            let mut kept = Vec::with_capacity(n);
            for (i, s) in segments.drain(..).enumerate() {
                if i + 1 < n && s.first_index >= new_first {
                    doomed.push(s);
                } else {
                    kept.push(s);
                }
            }
            *segments = kept;
        }
        for s in doomed.iter().rev() {
            fs::remove_file(s.path()).map_err(io_err(s.path()))?;
            crate::crash_point!("log::truncate::after_delete");
        }
        crate::crash_point!("log::truncate::before_dir_sync");
        sync_dir(&self.segments_dir)?;
        // Everything kept is on disk: the old tail was synced above, every segment before it when
        // it was sealed.
        self.shared.durable.advance(Covers { epoch: self.epoch, next_index: new_first });
        Ok(())
    }

    /// Forgets every record up to and including `upto`; whole segments below it are deleted.
    /// The caller records `upto` durably first (see `open`).
    pub fn purge(&mut self, upto: u64) -> Result<(), StoreError> {
        self.shared.durable.check()?;
        self.purge_segments(upto).map_err(|e| self.shared.durable.note(e))
    }

    fn purge_segments(&mut self, upto: u64) -> Result<(), StoreError> {
        {
            let mut b = self.shared.bounds.write().expect("bounds lock");
            b.first_index = b.first_index.max(upto + 1);
            if b.last.is_some_and(|l| l.index <= upto) {
                b.last = None;
            }
            self.shared.durable.purged(upto);
        }
        // Before the files go, so a failed deletion cannot leave a reader holding them.
        let first = self.bounds().first_index;
        self.shared.holes.write().expect("holes lock").retain(|h| h.end_index > first);
        for listener in self.shared.purge_listeners.lock().expect("purge listeners").iter() {
            listener(first);
        }
        let mut doomed = Vec::new();
        {
            let mut segments = self.shared.segments.write().expect("segments lock");
            while segments.len() > 1 && segments[1].first_index <= upto + 1 {
                doomed.push(segments.remove(0));
            }
        }
        for s in &doomed {
            fs::remove_file(s.path()).map_err(io_err(s.path()))?;
            crate::crash_point!("log::purge::after_delete");
        }
        self.shared.index.remove_below(first)?;
        crate::crash_point!("log::purge::after_index_remove");
        if !doomed.is_empty() {
            sync_dir(&self.segments_dir)?;
        }
        Ok(())
    }

    /// Syncs everything written so far, whatever the durability mode.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.reader().sync_through(u64::MAX)
    }
}

/// Writes the index slots of `records`, one run of consecutive indexes at a time.
fn put_runs(index: &LogIndex, records: &[(RecordMeta, IndexSlot)]) -> Result<(), StoreError> {
    let mut start = 0;
    for i in 1..=records.len() {
        if i == records.len() || records[i].0.index != records[i - 1].0.index + 1 {
            let slots: Vec<IndexSlot> = records[start..i].iter().map(|(_, s)| *s).collect();
            index.put(records[start].0.index, &slots)?;
            start = i;
        }
    }
    Ok(())
}

fn seg_write_zero_header(seg: &Segment, position: u64) -> Result<(), StoreError> {
    seg.write_at(position, &[&[0u8; HEADER_LEN]])?;
    seg.sync()
}

/// Checks that `records` are the run `first_index..` (at least up to `end_index`), never go back
/// in term, and fit between the records before and after it.
fn check_run(
    first_index: u64,
    end_index: u64,
    records: &[(RecordMeta, Bytes)],
    before: Option<RecordMeta>,
    after: Option<RecordMeta>,
) -> Result<(), StoreError> {
    let unfit = |reason: String| Err(StoreError::Unfit { first_index, reason });
    if (records.len() as u64) < end_index - first_index {
        return unfit(format!("{} records for {} indexes", records.len(), end_index - first_index));
    }
    let mut term = before.map_or(0, |b| b.term);
    for (i, (meta, _)) in records.iter().enumerate() {
        if meta.index != first_index + i as u64 {
            return unfit(format!("record {} where {} belongs", meta.index, first_index + i as u64));
        }
        if meta.term < term {
            return unfit(format!("record {} goes back to term {}", meta.index, meta.term));
        }
        term = meta.term;
    }
    if after.is_some_and(|a| a.term < term) {
        return unfit("the record after them is of an earlier term".into());
    }
    Ok(())
}

/// When the index slots for `first` and `last` point into `seg` at records that check out, the
/// record at `last`.
fn checked_range_end(index: &LogIndex, seg: &Segment, first: u64, last: u64) -> Option<RecordMeta> {
    let check = |i: u64| {
        let slot = index.get(i).filter(|s| s.segment == seg.base_offset)?;
        read_record(seg, slot.position as u64, i).ok().filter(|r| r.meta.term == slot.term)
    };
    check(first)?;
    check(last).map(|r| r.meta)
}

impl LogReader {
    /// Calls `listener` with the new first index after every purge.
    pub fn on_purge(&self, listener: PurgeListener) {
        self.shared.purge_listeners.lock().expect("purge listeners").push(listener);
    }

    pub fn bounds(&self) -> LogBounds {
        *self.shared.bounds.read().expect("bounds lock")
    }

    /// The highest index that is on disk together with every record before it (or purged after
    /// being durably recorded as such), if any. Whatever is persisted as applied must not go
    /// beyond it, or a power cut could leave the log behind its own state machine.
    pub fn durable_index(&self) -> Option<u64> {
        self.shared.durable.through()
    }

    /// Why the log stopped, once an fsync of its data has failed; the node must then stop
    /// acknowledging and restart (see `durable.rs`).
    pub fn failure(&self) -> Option<String> {
        self.shared.durable.failure()
    }

    /// Makes every record up to `index` durable now, whatever the durability mode, and advances
    /// the durable index. Records not yet appended are not waited for. Safe to call from any
    /// thread while the log is being appended to; returns at once if they already are durable.
    pub fn sync_through(&self, index: u64) -> Result<(), StoreError> {
        let durable = &self.shared.durable;
        // Read under the bounds lock, so that a truncation is either wholly before or wholly
        // after: the records and the epoch the sync will count for then belong together.
        let (bounds, (epoch, through)) = {
            let b = self.shared.bounds.read().expect("bounds lock");
            (*b, durable.position())
        };
        durable.check()?;
        let Some(last) = bounds.last else { return Ok(()) };
        let upto = index.min(last.index);
        let from = through.map_or(0, |t| t + 1).max(bounds.first_index);
        if from > upto {
            return Ok(());
        }
        // The segments that may hold records `from..=upto`. A concurrent roll or truncation can
        // leave the list briefly out of order; this then syncs a segment too many, never too few.
        let segments: Vec<Arc<Segment>> = {
            let all = self.shared.segments.read().expect("segments lock");
            all.iter()
                .enumerate()
                .filter(|(i, s)| s.first_index <= upto && all.get(i + 1).is_none_or(|n| n.first_index > from))
                .map(|(_, s)| Arc::clone(s))
                .collect()
        };
        for seg in segments {
            seg.sync().map_err(|e| durable.note(e))?;
        }
        // See `flush.rs`: another thread's failed fsync may have dropped these pages.
        durable.check()?;
        durable.advance(Covers { epoch, next_index: upto + 1 });
        Ok(())
    }

    /// The segment that holds `index`: the last one whose first index is not above it.
    fn segment_of(&self, index: u64) -> Option<Arc<Segment>> {
        let segments = self.shared.segments.read().expect("segments lock");
        let at = segments.partition_point(|s| s.first_index <= index);
        at.checked_sub(1).map(|i| Arc::clone(&segments[i]))
    }

    /// Reads `index`, checked, with the segment and position it was found at. The index slot is
    /// tried first; a missing or stale slot is repaired by walking the segment.
    fn read_checked(&self, index: u64) -> Result<(Arc<Segment>, u64, StoredRecord), StoreError> {
        if let Some(damaged) = self.damaged(index) {
            return Err(damaged);
        }
        let seg = self.segment_of(index).ok_or(StoreError::Missing(index))?;
        if let Some(slot) = self.shared.index.get(index).filter(|s| s.segment == seg.base_offset)
            && let Ok(record) = read_record(&seg, slot.position as u64, index)
            && record.meta.term == slot.term
        {
            return Ok((seg, slot.position as u64, record));
        }
        let walked = walk(&seg, index + 1, 0, true);
        match walked.records.last() {
            Some((meta, slot)) if meta.index == index => {
                self.shared.index.put(index, &[*slot])?;
                let record = read_record(&seg, slot.position as u64, index)
                    .map_err(|reason| StoreError::CorruptRecord { index, reason })?;
                Ok((seg, slot.position as u64, record))
            }
            _ => {
                let offset = self.keep_damage(&seg, index).unwrap_or(walked.end);
                Err(StoreError::Damaged { index, path: seg.path().to_path_buf(), offset })
            }
        }
    }

    /// Keeps the damage a read found around `index` in `seg`, as the scrubber would (so the next
    /// read of it fails at once, and the scrubber fills it); answers where it starts. Only damage
    /// with a whole record after it in the segment, or at the end of a sealed one.
    fn keep_damage(&self, seg: &Arc<Segment>, index: u64) -> Option<u64> {
        let limit = {
            let segments = self.shared.segments.read().expect("segments lock");
            let at = segments.iter().position(|s| Arc::ptr_eq(s, seg))?;
            segments.get(at + 1).map(|next| next.first_index)
        };
        let w = walk(seg, limit.unwrap_or(u64::MAX), 0, true);
        let hole = damage_in(seg, &w, limit, 0).into_iter().find(|h| (h.first_index..h.end_index).contains(&index))?;
        let from = hole.from;
        self.keep(vec![hole]);
        Some(from)
    }

    /// Keeps each of `found` that overlaps no damage known already; logs and answers those.
    fn keep(&self, found: Vec<Hole>) -> Vec<Hole> {
        let mut new = Vec::new();
        {
            let mut holes = self.shared.holes.write().expect("holes lock");
            for h in found {
                if !holes.iter().any(|k| k.first_index < h.end_index && h.first_index < k.end_index) {
                    holes.push(h.clone());
                    new.push(h);
                }
            }
            holes.sort_by_key(|h| h.first_index);
        }
        for h in &new {
            tracing::error!(
                segment = %h.segment.path().display(), offset = h.from, first_index = h.first_index,
                last_index = h.end_index - 1, "log records do not read back; they are never served, and are fetched \
                 again from another member"
            );
        }
        new
    }

    /// Reads every record from `from` to the end once, so that damage among them is kept (see
    /// [`LogReader::damage`]) before anything needs them.
    pub fn check_readable(&self, from: u64) {
        let bounds = self.bounds();
        for index in from.max(bounds.first_index)..bounds.next_index() {
            let _ = self.read(index);
        }
    }

    /// The error for `index` if it lies in known damage.
    fn damaged(&self, index: u64) -> Option<StoreError> {
        let holes = self.shared.holes.read().expect("holes lock");
        let h = holes.iter().find(|h| (h.first_index..h.end_index).contains(&index))?;
        Some(StoreError::Damaged { index, path: h.segment.path().to_path_buf(), offset: h.from })
    }

    /// The damage this log holds now, in log order (see [`Damage`]).
    pub fn damage(&self) -> Vec<Damage> {
        let holes: Vec<Hole> = self.shared.holes.read().expect("holes lock").clone();
        holes
            .into_iter()
            .map(|h| Damage {
                first_index: h.first_index,
                end_index: h.end_index,
                path: h.segment.path().to_path_buf(),
                offset: h.from,
                anchor: if h.at_tail { None } else { self.read(h.end_index).ok().flatten().map(|r| r.meta) },
                at_tail: h.at_tail,
            })
            .collect()
    }

    /// Fills damage away from the tail (see [`CommitLog::fill`]): `records` must be the whole
    /// run, continue the record before it and lead to the one after it, and take exactly the
    /// bytes the damaged records took. They are synced before the damage is forgotten.
    pub fn fill(&self, first_index: u64, records: Vec<(RecordMeta, Bytes)>) -> Result<(), StoreError> {
        let hole = {
            let mut holes = self.shared.holes.write().expect("holes lock");
            let at = holes
                .iter()
                .position(|h| h.first_index == first_index && !h.at_tail)
                .ok_or_else(|| StoreError::Unfit { first_index, reason: "no such damage".into() })?;
            // Taken out while it is written, so that no lock is held across the I/O; readers
            // meanwhile find the record whole or get the walk's error, never wrong bytes.
            holes.remove(at)
        };
        let filled = self.fill_hole(&hole, records);
        if filled.is_err() {
            let mut holes = self.shared.holes.write().expect("holes lock");
            holes.push(hole);
            holes.sort_by_key(|h| h.first_index);
        }
        filled
    }

    fn fill_hole(&self, hole: &Hole, records: Vec<(RecordMeta, Bytes)>) -> Result<(), StoreError> {
        let first_index = hole.first_index;
        let before = first_index.checked_sub(1).and_then(|i| self.read(i).ok().flatten()).map(|r| r.meta);
        let after = self.read(hole.end_index).ok().flatten().map(|r| r.meta);
        check_run(first_index, hole.end_index, &records, before, after)?;
        if records.len() as u64 != hole.end_index - first_index {
            return Err(StoreError::Unfit { first_index, reason: "not the whole run".into() });
        }
        let mut buf = Vec::new();
        let mut slots = Vec::with_capacity(records.len());
        for (meta, payload) in &records {
            let position = hole.from + buf.len() as u64;
            slots.push(IndexSlot {
                segment: hole.segment.base_offset,
                position: position as u32,
                length: payload.len() as u32,
                term: meta.term,
            });
            buf.extend_from_slice(&record::encode_header(meta, payload)?);
            buf.extend_from_slice(payload);
        }
        let end = hole.from + buf.len() as u64;
        let fits = match hole.to {
            Some(to) => end == to,
            None => end <= hole.segment.size,
        };
        if !fits {
            return Err(StoreError::Unfit {
                first_index,
                reason: format!(
                    "{} bytes do not fit the {} the damaged records took",
                    buf.len(),
                    hole.to.map_or(hole.segment.size, |t| t) - hole.from
                ),
            });
        }
        if hole.to.is_none() && end + HEADER_LEN as u64 <= hole.segment.size {
            buf.extend_from_slice(&record::pad_header());
        }
        hole.segment.write_at(hole.from, &[&buf])?;
        hole.segment.sync()?;
        self.shared.index.put(first_index, &slots)?;
        Ok(())
    }

    /// Reads the sealed segment after the one based at `after` (the first with `None`) again,
    /// whole, and keeps any damage it finds (see [`LogReader::damage`]). Answers that segment's
    /// base and the bytes read, or `None` past the last sealed segment.
    pub fn scrub_next(&self, after: Option<u64>) -> Option<(u64, u64, Vec<Damage>)> {
        let (seg, limit) = {
            let segments = self.shared.segments.read().expect("segments lock");
            let at = segments.iter().position(|s| after.is_none_or(|a| s.base_offset > a))?;
            let next = segments.get(at + 1)?;
            (Arc::clone(&segments[at]), next.first_index)
        };
        let first = self.bounds().first_index;
        let w = walk(&seg, limit, 0, true);
        let new: Vec<u64> = self.keep(damage_in(&seg, &w, Some(limit), first)).iter().map(|h| h.first_index).collect();
        let damage = self.damage().into_iter().filter(|d| new.contains(&d.first_index)).collect();
        Some((seg.base_offset, w.end, damage))
    }

    fn in_bounds(&self, index: u64) -> bool {
        let bounds = self.bounds();
        index >= bounds.first_index && bounds.last.is_some_and(|l| index <= l.index)
    }

    /// The record at `index`, or `None` when it is purged or not yet written. A record that fails
    /// its checks is an error, never returned.
    pub fn read(&self, index: u64) -> Result<Option<StoredRecord>, StoreError> {
        if !self.in_bounds(index) {
            return Ok(None);
        }
        self.read_checked(index).map(|(_, _, record)| Some(record))
    }

    /// Records `start..end` that are present, stopping once `max_bytes` of payload are gathered
    /// (at least one record is returned if any is present).
    pub fn read_range(&self, start: u64, end: u64, max_bytes: u64) -> Result<Vec<StoredRecord>, StoreError> {
        let bounds = self.bounds();
        let start = start.max(bounds.first_index);
        let end = end.min(bounds.next_index());
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for i in start..end {
            if bytes >= max_bytes && !out.is_empty() {
                break;
            }
            match self.read(i)? {
                Some(r) => {
                    bytes += r.payload.len() as u64;
                    out.push(r);
                }
                None => break,
            }
        }
        Ok(out)
    }

    /// The global CommitLog offset of the payload of `index` (tests cut and damage files there).
    #[cfg(test)]
    pub fn payload_offset(&self, index: u64) -> Result<Option<u64>, StoreError> {
        if !self.in_bounds(index) {
            return Ok(None);
        }
        let (seg, position, _) = self.read_checked(index)?;
        Ok(Some(seg.base_offset + position + HEADER_LEN as u64))
    }

    /// Each live segment's index range, last write time and size, in log order (for retention).
    pub fn segment_stats(&self) -> Vec<crate::store::retention::SegmentStat> {
        let segments: Vec<Arc<Segment>> = self.shared.segments.read().expect("segments lock").clone();
        let next = self.bounds().next_index();
        segments
            .iter()
            .enumerate()
            .map(|(i, s)| crate::store::retention::SegmentStat {
                first_index: s.first_index,
                end_index: segments.get(i + 1).map_or(next, |n| n.first_index),
                modified: s.modified(),
                bytes: s.size,
            })
            .collect()
    }
}
