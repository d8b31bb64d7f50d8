//! The dedupe window on disk: an append-only journal of puts and removals, written at each
//! checkpoint and rewritten whole when it grows well past the live table. Much cheaper than a
//! sled row per message.
//!
//! Files are `dedupe-v2.<generation>.journal`. A checkpoint first appends (and syncs) its
//! records, then commits the sled batch that records which generation and how many of its bytes
//! the checkpointed state covers (a [`JournalMark`]). On open exactly that many bytes are read and
//! anything after them is cut off: it was written by a checkpoint that never committed, and the
//! log replay from `last_applied` re-derives it. A rewrite goes to the next generation's file,
//! which only becomes current when the batch naming it commits; older files are deleted after.
//!
//! Record: `crc32c u32 | len u32 | body`, body = `op u8 | key [u8; 16]` (the
//! [`DedupeKey`](crate::broker::dedupe::DedupeKey)) and, for a put, `queue u32 | offset u64 |
//! seen_ms i64 | index u64`: a record is 25 bytes (removal) or 53 (put).
//!
//! Releases before the hashed key wrote `dedupe.<generation>.journal`, keyed by the topic and id
//! strings. Such a file is refused, never read nor deleted (see [`DedupeJournal::open`]).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::broker::dedupe::{DedupeKey as Key, DedupeTable, Seen};
use crate::broker::record_cursor::Cursor;
use crate::store::{JournalFault, RecordFault, StoreError};

const OP_PUT: u8 = 1;
const OP_REMOVE: u8 = 2;
const PREFIX: &str = "dedupe-v2.";
const SUFFIX: &str = ".journal";
/// The name of the journals written before the hashed key (string keys).
const LEGACY_PREFIX: &str = "dedupe.";

/// The part of the journal a checkpoint covers: recorded in sled with `last_applied`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JournalMark {
    pub generation: u64,
    pub len: u64,
}

pub struct DedupeJournal {
    dir: PathBuf,
    /// The generation and length the last committed checkpoint covers.
    mark: JournalMark,
    file: File,
    records: u64,
    /// A write failed part way: its tail is unknown, so the next checkpoint rewrites.
    rewrite_next: bool,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

fn file_name(generation: u64) -> String {
    format!("{PREFIX}{generation}{SUFFIX}")
}

fn encode(key: &Key, seen: Option<&Seen>, out: &mut Vec<u8>) {
    let mut body = [0u8; 45];
    body[0] = if seen.is_some() { OP_PUT } else { OP_REMOVE };
    body[1..17].copy_from_slice(key.as_bytes());
    let len = match seen {
        None => 17,
        Some(s) => {
            body[17..21].copy_from_slice(&s.queue_id.to_le_bytes());
            body[21..29].copy_from_slice(&s.offset.to_le_bytes());
            body[29..37].copy_from_slice(&s.seen_ms.to_le_bytes());
            body[37..45].copy_from_slice(&s.index.to_le_bytes());
            45
        }
    };
    let body = &body[..len];
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
}

fn decode(body: &[u8]) -> Option<(Key, Option<Seen>)> {
    let mut c = Cursor(body);
    let op = c.take(1)?[0];
    let key = Key::from_bytes(c.take(16)?.try_into().ok()?);
    let seen = match op {
        OP_REMOVE => None,
        OP_PUT => Some(Seen { queue_id: c.u32()?, offset: c.u64()?, seen_ms: c.u64()? as i64, index: c.u64()? }),
        _ => return None,
    };
    c.0.is_empty().then_some((key, seen))
}

/// Replays journal bytes into a table. Every byte must belong to a whole, checked record: the
/// bytes come from a sync that completed before the mark naming them was committed.
pub fn replay(bytes: &[u8]) -> Result<(DedupeTable, u64), JournalFault> {
    let mut table = DedupeTable::default();
    let mut c = Cursor(bytes);
    let mut records = 0;
    while !c.0.is_empty() {
        let at = (bytes.len() - c.0.len()) as u64;
        let bad = |fault| JournalFault { at, fault };
        let (Some(crc), Some(len)) = (c.u32(), c.u32()) else { return Err(bad(RecordFault::TornHeader)) };
        let body = c.take(len as usize).ok_or(bad(RecordFault::TornBody))?;
        if crc32c::crc32c(body) != crc {
            return Err(bad(RecordFault::Checksum));
        }
        let (key, seen) = decode(body).ok_or(bad(RecordFault::Undecodable))?;
        match seen {
            Some(s) => table.insert(key, s),
            None => table.remove(&key),
        };
        records += 1;
    }
    Ok((table, records))
}

/// Journal bytes encoded while the state was locked, written after it is released.
pub struct Pending {
    bytes: Vec<u8>,
    records: u64,
    rewrite: bool,
    /// The keys these bytes persist: marked changed again if the checkpoint fails.
    pub keys: HashSet<Key>,
}

impl DedupeJournal {
    /// Opens the journal the last checkpoint named (`None`: nothing was ever checkpointed) and
    /// returns it with the dedupe table it describes. Files of other generations and bytes past
    /// the mark are what an unfinished checkpoint left; they are removed.
    ///
    /// A journal of the earlier, string-keyed format is refused with an error naming it. Ignoring
    /// it is not an option: it holds the dedupe rows of every entry up to the checkpoint, which
    /// the log replay (from the checkpoint on) does not re-derive, so a retry of a message stored
    /// before it would be stored again on this node alone, and its queue offsets would no longer
    /// be the other replicas'. Refusing loses nothing: the files stay as they are (the earlier
    /// release still opens them), and a node started on an empty data directory gets every
    /// acknowledged message back from the other replicas, by snapshot and log. (The sled schema
    /// check in `Broker::open` refuses such a directory before this; this catches a journal left
    /// beside metadata that was removed.)
    pub fn open(dir: &Path, mark: Option<JournalMark>) -> Result<(DedupeJournal, DedupeTable), StoreError> {
        let (table, records) = Self::read(dir, mark)?;
        let mark = mark.unwrap_or_default();
        let path = dir.join(file_name(mark.generation));
        let file =
            OpenOptions::new().create(true).read(true).write(true).truncate(false).open(&path).map_err(io(&path))?;
        file.set_len(mark.len).map_err(io(&path))?;
        remove_other_generations(dir, mark.generation)?;
        Ok((DedupeJournal { dir: dir.to_path_buf(), mark, file, records, rewrite_next: false }, table))
    }

    /// The rows the checkpoint `mark` covers, and how many records hold them; changes no file.
    pub fn read(dir: &Path, mark: Option<JournalMark>) -> Result<(DedupeTable, u64), StoreError> {
        if let Some(path) = legacy_journal(dir)? {
            return Err(StoreError::CorruptSegment {
                path,
                reason: "a dedupe journal of an earlier RockRaft release (keyed by topic and message id), which \
                         this release does not read: run the earlier release on this directory, or start this \
                         node on an empty data directory to catch up from the other replicas"
                    .to_string(),
            });
        }
        let mark = mark.unwrap_or_default();
        let path = dir.join(file_name(mark.generation));
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(f) => {
                f.take(mark.len).read_to_end(&mut bytes).map_err(io(&path))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path)(e)),
        }
        if (bytes.len() as u64) < mark.len {
            return Err(StoreError::CorruptSegment {
                path,
                reason: format!("holds {} bytes, the last checkpoint wrote {}", bytes.len(), mark.len),
            });
        }
        replay(&bytes).map_err(|e| StoreError::CorruptSegment { path, reason: e.to_string() })
    }

    /// Encodes the current rows of the changed `keys` (done while the state is locked). When the
    /// journal has grown to several times the live table, or a write failed, encodes a rewrite.
    pub fn prepare(&self, keys: HashSet<Key>, table: &DedupeTable) -> Pending {
        let mut bytes = Vec::new();
        let n = keys.len() as u64;
        if self.rewrite_next || self.records + n > 4 * table.len() as u64 + 10_000 {
            return Pending { keys, ..self.prepare_rewrite(table) };
        }
        for key in &keys {
            encode(key, table.get(key), &mut bytes);
        }
        Pending { bytes, records: n, rewrite: false, keys }
    }

    /// Encodes the whole table as the next generation (a snapshot install replaces the journal).
    pub fn prepare_rewrite(&self, table: &DedupeTable) -> Pending {
        let mut bytes = Vec::with_capacity(table.len() * 53);
        for (key, seen) in table.iter() {
            encode(key, Some(seen), &mut bytes);
        }
        Pending { bytes, records: table.len() as u64, rewrite: true, keys: HashSet::new() }
    }

    /// Writes and syncs what [`DedupeJournal::prepare`] encoded, and returns the mark the
    /// checkpoint's batch must record. Until that batch commits, the last mark stays in force.
    pub fn write(&mut self, pending: &Pending) -> Result<JournalMark, StoreError> {
        let result = self.try_write(pending);
        if result.is_err() {
            self.rewrite_next = true;
        }
        result
    }

    fn try_write(&mut self, pending: &Pending) -> Result<JournalMark, StoreError> {
        if pending.rewrite {
            let generation = self.mark.generation + 1;
            let path = self.dir.join(file_name(generation));
            let f = File::create(&path).map_err(io(&path))?;
            f.write_all_at(&pending.bytes, 0).map_err(io(&path))?;
            crate::crash_point!("journal::rewrite::after_write");
            f.sync_all().map_err(io(&path))?;
            crate::store::sync_dir(&self.dir)?;
            return Ok(JournalMark { generation, len: pending.bytes.len() as u64 });
        }
        let path = self.dir.join(file_name(self.mark.generation));
        if !pending.bytes.is_empty() {
            self.file.write_all_at(&pending.bytes, self.mark.len).map_err(io(&path))?;
            crate::crash_point!("journal::append::after_write");
            self.file.sync_data().map_err(io(&path))?;
        }
        Ok(JournalMark { generation: self.mark.generation, len: self.mark.len + pending.bytes.len() as u64 })
    }

    /// The checkpoint's batch naming `mark` committed: `mark` is the journal from now on.
    pub fn committed(&mut self, mark: JournalMark, pending: &Pending) -> Result<(), StoreError> {
        let old = self.mark.generation;
        if mark.generation == old {
            self.mark = mark;
            self.records += pending.records;
            return Ok(());
        }
        let path = self.dir.join(file_name(mark.generation));
        self.file = OpenOptions::new().read(true).write(true).open(&path).map_err(io(&path))?;
        self.mark = mark;
        self.records = pending.records;
        self.rewrite_next = false;
        crate::crash_point!("journal::rewrite::before_removing_old");
        remove_generation(&self.dir, old)
    }

    /// A checkpoint failed after [`DedupeJournal::write`]: its bytes are not covered by any mark,
    /// so the next checkpoint rewrites rather than appending after them.
    pub fn abandoned(&mut self) {
        self.rewrite_next = true;
    }
}

fn remove_generation(dir: &Path, generation: u64) -> Result<(), StoreError> {
    let path = dir.join(file_name(generation));
    match std::fs::remove_file(&path) {
        Ok(()) => crate::store::sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(&path)(e)),
    }
}

/// A journal file of the string-keyed format, if `dir` holds one.
fn legacy_journal(dir: &Path) -> Result<Option<PathBuf>, StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name();
        let legacy = name
            .to_str()
            .and_then(|n| n.strip_prefix(LEGACY_PREFIX))
            .and_then(|n| n.strip_suffix(SUFFIX))
            .is_some_and(|g| g.parse::<u64>().is_ok());
        if legacy {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

fn remove_other_generations(dir: &Path, keep: u64) -> Result<(), StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name();
        let generation = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|n| n.strip_suffix(SUFFIX))
            .and_then(|g| g.parse::<u64>().ok());
        if let Some(g) = generation.filter(|g| *g != keep) {
            remove_generation(dir, g)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn seen(offset: u64) -> Seen {
        Seen { queue_id: 1, offset, seen_ms: 1000 + offset as i64, index: 7 }
    }

    fn key(id: &str) -> Key {
        Key::new("T", id)
    }

    /// Writes the changed keys as a checkpoint would, committing the mark.
    fn checkpoint(j: &mut DedupeJournal, table: &mut DedupeTable) -> JournalMark {
        let pending = j.prepare(table.take_changed(), table);
        let mark = j.write(&pending).unwrap();
        j.committed(mark, &pending).unwrap();
        mark
    }

    #[test]
    fn only_what_a_committed_checkpoint_names_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = DedupeTable::default();
        let (mut j, loaded) = DedupeJournal::open(dir.path(), None).unwrap();
        assert!(loaded.is_empty());
        table.insert(key("a"), seen(0));
        table.insert(key("b"), seen(1));
        checkpoint(&mut j, &mut table);
        table.remove(&key("a"));
        let mark = checkpoint(&mut j, &mut table);
        // A checkpoint that wrote its records but crashed before its batch committed.
        table.insert(key("c"), seen(2));
        let pending = j.prepare(table.take_changed(), &table);
        j.write(&pending).unwrap();
        drop(j);
        let (_, loaded) = DedupeJournal::open(dir.path(), Some(mark)).unwrap();
        let mut expected = DedupeTable::default();
        expected.insert(key("b"), seen(1));
        assert_eq!(loaded, expected, "the uncommitted put of c is not read back");
    }

    #[test]
    fn a_rewrite_takes_effect_only_once_its_mark_is_committed() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = DedupeTable::default();
        let (mut j, _) = DedupeJournal::open(dir.path(), None).unwrap();
        table.insert(key("a"), seen(0));
        let first = checkpoint(&mut j, &mut table);
        j.abandoned(); // forces the next checkpoint to rewrite
        table.insert(key("b"), seen(1));
        let pending = j.prepare(table.take_changed(), &table);
        let second = j.write(&pending).unwrap();
        assert_eq!(second.generation, first.generation + 1);
        // Crash before the batch: the old generation is still the journal.
        let (mut j, loaded) = DedupeJournal::open(dir.path(), Some(first)).unwrap();
        assert_eq!(loaded.len(), 1);
        assert!(!dir.path().join(file_name(second.generation)).exists(), "the orphan is removed");
        table.mark_changed([key("a"), key("b")].into());
        j.abandoned();
        let third = checkpoint(&mut j, &mut table);
        assert!(!dir.path().join(file_name(first.generation)).exists(), "the old generation is removed");
        assert_eq!(DedupeJournal::open(dir.path(), Some(third)).unwrap().1, table);
    }

    #[test]
    fn ids_of_any_length_take_one_fixed_size_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = DedupeTable::default();
        let (mut j, _) = DedupeJournal::open(dir.path(), None).unwrap();
        table.insert(Key::new("T", &"é".repeat(40_000)), seen(0));
        table.insert(key("after"), seen(1));
        let mark = checkpoint(&mut j, &mut table);
        assert_eq!(mark.len, 2 * 53, "two puts of 53 bytes, whatever the ids");
        table.remove(&key("after"));
        let mark = checkpoint(&mut j, &mut table);
        assert_eq!(mark.len, 2 * 53 + 25, "and a removal of 25");
        assert_eq!(DedupeJournal::open(dir.path(), Some(mark)).unwrap().1, table);
    }

    /// A data directory holding a journal of the string-keyed format is refused with an error
    /// naming the file, which is left as it was.
    #[test]
    fn a_journal_of_the_earlier_format_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let legacy = dir.path().join("dedupe.3.journal");
        std::fs::write(&legacy, b"string-keyed records").unwrap();
        let err = DedupeJournal::open(dir.path(), Some(JournalMark { generation: 3, len: 20 })).err().unwrap();
        let message = err.to_string();
        assert!(message.contains("dedupe.3.journal") && message.contains("earlier RockRaft release"), "{message}");
        assert_eq!(std::fs::read(&legacy).unwrap(), b"string-keyed records");
        // Not mistaken for one: this format's own files.
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = DedupeJournal::open(dir.path(), None).unwrap();
        let mut table = DedupeTable::default();
        table.insert(key("a"), seen(0));
        let mark = checkpoint(&mut j, &mut table);
        assert!(dir.path().join("dedupe-v2.0.journal").exists());
        assert_eq!(DedupeJournal::open(dir.path(), Some(mark)).unwrap().1, table);
    }

    proptest! {
        /// Whatever bytes a journal holds, reading it never panics: it yields a table or an error.
        #[test]
        fn reading_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = replay(&bytes);
        }

        /// Any flipped byte inside the checkpointed part is reported, never read as data.
        #[test]
        fn a_flipped_byte_is_an_error(at in 0usize..200, bit in 0u8..8) {
            let mut table = DedupeTable::default();
            for i in 0..4u64 {
                table.insert(key(&format!("id-{i}")), seen(i));
            }
            let mut bytes = Vec::new();
            for (k, s) in table.iter() {
                encode(k, Some(s), &mut bytes);
            }
            let at = at % bytes.len();
            bytes[at] ^= 1 << bit;
            prop_assert!(replay(&bytes).is_err());
        }
    }
}
