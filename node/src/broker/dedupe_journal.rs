//! Durable form of the dedupe window: an append-only journal of puts and removals, written at
//! each checkpoint and compacted when it grows well past the live entries. Much cheaper than a
//! metadata key per message.
//!
//! Record: `crc32c u32 | len u32 | body`, body = `op u8 | topic_len u16 | topic | id_len u16 | id`
//! and, for a put, `queue u32 | offset u64 | store_timestamp_ms i64 | index u64`. Reading stops at
//! the first torn or corrupt record: only an unfinished checkpoint can leave one, and what it
//! carried is re-derived by re-applying the log.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::store::StoreError;

const OP_PUT: u8 = 1;
const OP_REMOVE: u8 = 2;

/// Where a message id was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Seen {
    pub queue_id: u32,
    pub offset: u64,
    pub store_timestamp_ms: i64,
    pub index: u64,
}

pub type Key = (String, String);

pub struct DedupeJournal {
    path: PathBuf,
    file: BufWriter<File>,
    records: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

fn encode(key: &Key, seen: Option<&Seen>, out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(64);
    body.push(if seen.is_some() { OP_PUT } else { OP_REMOVE });
    for s in [&key.0, &key.1] {
        let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
        body.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        body.extend_from_slice(bytes);
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
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

fn decode(body: &[u8]) -> Option<(Key, Option<Seen>)> {
    let mut c = Cursor(body);
    let op = c.take(1)?[0];
    let key = (c.string()?, c.string()?);
    match op {
        OP_REMOVE => Some((key, None)),
        OP_PUT => {
            let seen =
                Seen { queue_id: c.u32()?, offset: c.u64()?, store_timestamp_ms: c.u64()? as i64, index: c.u64()? };
            Some((key, Some(seen)))
        }
        _ => None,
    }
}

impl DedupeJournal {
    /// Opens the journal and returns it with the table it describes.
    pub fn open(path: &Path) -> Result<(DedupeJournal, HashMap<Key, Seen>), StoreError> {
        let mut bytes = Vec::new();
        match File::open(path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes).map_err(io(path))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(path)(e)),
        }
        let mut table = HashMap::new();
        let mut c = Cursor(&bytes);
        let mut records = 0;
        let mut good = 0;
        while let (Some(crc), Some(len)) = (c.u32(), c.u32()) {
            let Some(body) = c.take(len as usize) else { break };
            if crc32c::crc32c(body) != crc {
                break;
            }
            let Some((key, seen)) = decode(body) else { break };
            match seen {
                Some(s) => table.insert(key, s),
                None => table.remove(&key),
            };
            records += 1;
            good = bytes.len() - c.0.len();
        }
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(io(path))?;
        // Drop a torn tail so new records follow the last whole one.
        file.set_len(good as u64).map_err(io(path))?;
        Ok((DedupeJournal { path: path.to_path_buf(), file: BufWriter::new(file), records }, table))
    }

    /// Encodes the current state of `keys` (cheap, done while the table is locked). When the
    /// journal has grown to several times the live table, encodes a full rewrite instead.
    pub fn prepare<'a>(&self, keys: impl Iterator<Item = &'a Key>, table: &HashMap<Key, Seen>) -> Pending {
        let mut buf = Vec::new();
        let mut n = 0;
        for key in keys {
            encode(key, table.get(key), &mut buf);
            n += 1;
        }
        if self.records + n <= 4 * table.len() as u64 + 10_000 {
            return Pending { bytes: buf, records: n, rewrite: false };
        }
        buf.clear();
        for (key, seen) in table {
            encode(key, Some(seen), &mut buf);
        }
        Pending { bytes: buf, records: table.len() as u64, rewrite: true }
    }

    /// Writes what [`DedupeJournal::prepare`] encoded and syncs it.
    pub fn commit(&mut self, pending: Pending) -> Result<(), StoreError> {
        if pending.rewrite {
            // Atomically: temp file, sync, rename.
            let tmp = self.path.with_extension("tmp");
            {
                let mut f = File::create(&tmp).map_err(io(&tmp))?;
                f.write_all(&pending.bytes).map_err(io(&tmp))?;
                f.sync_all().map_err(io(&tmp))?;
            }
            std::fs::rename(&tmp, &self.path).map_err(io(&self.path))?;
            let file = OpenOptions::new().append(true).open(&self.path).map_err(io(&self.path))?;
            self.file = BufWriter::new(file);
            self.records = pending.records;
            return Ok(());
        }
        if pending.records == 0 {
            return Ok(());
        }
        let path = self.path.clone();
        self.file.write_all(&pending.bytes).map_err(io(&path))?;
        self.file.flush().map_err(io(&path))?;
        self.file.get_ref().sync_data().map_err(io(&path))?;
        self.records += pending.records;
        Ok(())
    }
}

/// Journal bytes encoded under the table's lock, written after it is released.
pub struct Pending {
    bytes: Vec<u8>,
    records: u64,
    rewrite: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(offset: u64) -> Seen {
        Seen { queue_id: 1, offset, store_timestamp_ms: 1000 + offset as i64, index: 7 }
    }

    #[test]
    fn puts_and_removals_survive_a_reopen_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dedupe.journal");
        let key = |id: &str| ("T".to_string(), id.to_string());
        let mut table = HashMap::new();
        {
            let (mut j, loaded) = DedupeJournal::open(&path).unwrap();
            assert!(loaded.is_empty());
            table.insert(key("a"), seen(0));
            table.insert(key("b"), seen(1));
            j.commit(j.prepare([key("a"), key("b")].iter(), &table)).unwrap();
            table.remove(&key("a"));
            j.commit(j.prepare([key("a")].iter(), &table)).unwrap();
        }
        let len = std::fs::metadata(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[9, 9, 9, 9, 40, 0, 0, 0, 1]).unwrap();
        drop(f);
        let (mut j, loaded) = DedupeJournal::open(&path).unwrap();
        assert_eq!(loaded, table);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "torn tail cut off");
        table.insert(key("c"), seen(2));
        j.commit(j.prepare([key("c")].iter(), &table)).unwrap();
        drop(j);
        assert_eq!(DedupeJournal::open(&path).unwrap().1, table);
    }
}
