//! The dedupe window on disk: an append-only journal of puts and removals, written at each
//! checkpoint and rewritten whole when it grows well past the live table. Much cheaper than a
//! sled row per message.
//!
//! Files are `dedupe.<generation>.journal`. A checkpoint first appends (and syncs) its records,
//! then commits the sled batch that records which generation and how many of its bytes the
//! checkpointed state covers (a [`JournalMark`]). On open exactly that many bytes are read and
//! anything after them is cut off: it was written by a checkpoint that never committed, and the
//! log replay from `last_applied` re-derives it. A rewrite goes to the next generation's file,
//! which only becomes current when the batch naming it commits; older files are deleted after.
//!
//! Record: `crc32c u32 | len u32 | body`, body = `op u8 | topic_len u32 | topic | id_len u32 | id`
//! and, for a put, `queue u32 | offset u64 | store_timestamp_ms i64 | index u64`.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::broker::table::Table;
use crate::store::StoreError;

const OP_PUT: u8 = 1;
const OP_REMOVE: u8 = 2;
const PREFIX: &str = "dedupe.";
const SUFFIX: &str = ".journal";

/// Where a message id was stored, and by which entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Seen {
    pub queue_id: u32,
    pub offset: u64,
    pub store_timestamp_ms: i64,
    /// The entry that stored it: replaying that entry is not a retry of itself.
    pub index: u64,
}

/// (topic, message id).
pub type Key = (String, String);

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
    let mut body = Vec::with_capacity(64 + key.0.len() + key.1.len());
    body.push(if seen.is_some() { OP_PUT } else { OP_REMOVE });
    for s in [&key.0, &key.1] {
        // Lengths are u32: identifiers are limited at the edge far below that, and a record is
        // never cut (a cut could split a UTF-8 character and make the rest unreadable).
        body.extend_from_slice(&(s.len() as u32).to_le_bytes());
        body.extend_from_slice(s.as_bytes());
    }
    if let Some(s) = seen {
        body.extend_from_slice(&s.queue_id.to_le_bytes());
        body.extend_from_slice(&s.offset.to_le_bytes());
        body.extend_from_slice(&s.store_timestamp_ms.to_le_bytes());
        body.extend_from_slice(&s.index.to_le_bytes());
    }
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

fn decode(body: &[u8]) -> Option<(Key, Option<Seen>)> {
    let mut c = Cursor(body);
    let op = c.take(1)?[0];
    let key = (c.string()?, c.string()?);
    let seen = match op {
        OP_REMOVE => None,
        OP_PUT => {
            Some(Seen { queue_id: c.u32()?, offset: c.u64()?, store_timestamp_ms: c.u64()? as i64, index: c.u64()? })
        }
        _ => return None,
    };
    c.0.is_empty().then_some((key, seen))
}

/// Replays journal bytes into a table. Every byte must belong to a whole, checked record: the
/// bytes come from a sync that completed before the mark naming them was committed.
pub fn replay(bytes: &[u8]) -> Result<(Table<Key, Seen>, u64), String> {
    let mut table = Table::default();
    let mut c = Cursor(bytes);
    let mut records = 0;
    while !c.0.is_empty() {
        let at = bytes.len() - c.0.len();
        let bad = |what: &str| format!("record at byte {at}: {what}");
        let (Some(crc), Some(len)) = (c.u32(), c.u32()) else { return Err(bad("torn header")) };
        let body = c.take(len as usize).ok_or_else(|| bad("torn body"))?;
        if crc32c::crc32c(body) != crc {
            return Err(bad("checksum mismatch"));
        }
        let (key, seen) = decode(body).ok_or_else(|| bad("undecodable"))?;
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
    pub keys: BTreeSet<Key>,
}

impl DedupeJournal {
    /// Opens the journal the last checkpoint named (`None`: nothing was ever checkpointed) and
    /// returns it with the dedupe table it describes. Files of other generations and bytes past
    /// the mark are what an unfinished checkpoint left; they are removed.
    pub fn open(dir: &Path, mark: Option<JournalMark>) -> Result<(DedupeJournal, Table<Key, Seen>), StoreError> {
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
        let (table, records) =
            replay(&bytes).map_err(|reason| StoreError::CorruptSegment { path: path.clone(), reason })?;
        let file =
            OpenOptions::new().create(true).read(true).write(true).truncate(false).open(&path).map_err(io(&path))?;
        file.set_len(mark.len).map_err(io(&path))?;
        remove_other_generations(dir, mark.generation)?;
        Ok((DedupeJournal { dir: dir.to_path_buf(), mark, file, records, rewrite_next: false }, table))
    }

    /// Encodes the current rows of the changed `keys` (done while the state is locked). When the
    /// journal has grown to several times the live table, or a write failed, encodes a rewrite.
    pub fn prepare(&self, keys: BTreeSet<Key>, table: &Table<Key, Seen>) -> Pending {
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
    pub fn prepare_rewrite(&self, table: &Table<Key, Seen>) -> Pending {
        let mut bytes = Vec::new();
        for (key, seen) in table.iter() {
            encode(key, Some(seen), &mut bytes);
        }
        Pending { bytes, records: table.len() as u64, rewrite: true, keys: BTreeSet::new() }
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
        Seen { queue_id: 1, offset, store_timestamp_ms: 1000 + offset as i64, index: 7 }
    }

    fn key(id: &str) -> Key {
        ("T".to_string(), id.to_string())
    }

    /// Writes the changed keys as a checkpoint would, committing the mark.
    fn checkpoint(j: &mut DedupeJournal, table: &mut Table<Key, Seen>) -> JournalMark {
        let pending = j.prepare(table.take_changed(), table);
        let mark = j.write(&pending).unwrap();
        j.committed(mark, &pending).unwrap();
        mark
    }

    #[test]
    fn only_what_a_committed_checkpoint_names_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = Table::default();
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
        let mut expected = Table::default();
        expected.insert(key("b"), seen(1));
        assert_eq!(loaded, expected, "the uncommitted put of c is not read back");
    }

    #[test]
    fn a_rewrite_takes_effect_only_once_its_mark_is_committed() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = Table::default();
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
    fn ids_of_any_length_and_characters_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = Table::default();
        let (mut j, _) = DedupeJournal::open(dir.path(), None).unwrap();
        // Past the old 64 KiB cut, which fell inside a multi-byte character.
        let long = "é".repeat(40_000);
        table.insert(("T".into(), long), seen(0));
        table.insert(key("after"), seen(1));
        let mark = checkpoint(&mut j, &mut table);
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
            let mut table = Table::default();
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
