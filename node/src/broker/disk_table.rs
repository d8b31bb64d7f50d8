//! A table of replicated state too large for memory (pending timers, transaction halves): its
//! rows live in sled, and only the changes since the last checkpoint are held in memory.
//!
//! The sled rows are exactly what the last checkpoint wrote, so they stay consistent with
//! `last_applied` the same way every other table's rows do (one atomic batch). Reads look at
//! the recent changes first, then at sled. A checkpoint writes the recent changes into its batch
//! and, once the batch is durable, forgets those that did not change again meanwhile; a failed
//! checkpoint forgets nothing. Keys are encoded order-preserving ([`DiskKey`]), so a range scan
//! (timers due by now) is a sled range merged with the recent changes.
//!
//! A table not attached to sled (a snapshot being built or installed) holds all its rows in
//! memory; it is attached once its rows are written (`Persisted::attach`).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::broker::table::{Persisted, RowError, Taken};

/// A key whose byte encoding sorts like the key.
pub trait DiskKey: Ord + Clone + Send + Sync + 'static {
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(bytes: &[u8]) -> Option<Self>;
}

impl DiskKey for u64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Option<u64> {
        Some(u64::from_be_bytes(b.try_into().ok()?))
    }
}

/// (time in ms, position): signed times sort correctly with the sign bit flipped.
impl DiskKey for (i64, u64) {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&((self.0 as u64) ^ (1 << 63)).to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Option<(i64, u64)> {
        if b.len() != 16 {
            return None;
        }
        let t = u64::from_be_bytes(b[..8].try_into().ok()?) ^ (1 << 63);
        Some((t as i64, u64::from_be_bytes(b[8..].try_into().ok()?)))
    }
}

#[derive(Clone)]
struct Change<V> {
    /// `None`: removed.
    value: Option<V>,
    /// Which change this is, so a checkpoint forgets only what it wrote.
    seq: u64,
}

#[derive(Clone)]
pub struct DiskTable<K, V> {
    /// The sled tree and this table's key prefix; `None` while detached.
    tree: Option<(sled::Tree, &'static str)>,
    recent: BTreeMap<K, Change<V>>,
    seq: u64,
}

impl<K, V> Default for DiskTable<K, V> {
    fn default() -> Self {
        DiskTable { tree: None, recent: BTreeMap::new(), seq: 0 }
    }
}

pub type DiskResult<T> = Result<T, sled::Error>;

impl<K, V> DiskTable<K, V>
where
    K: DiskKey,
    V: Clone + Serialize + DeserializeOwned,
{
    fn sled_key(prefix: &str, key: &K) -> Vec<u8> {
        let mut k = prefix.as_bytes().to_vec();
        key.encode(&mut k);
        k
    }

    fn decode_row(prefix: &str, k: &[u8], v: &[u8]) -> DiskResult<(K, V)> {
        let corrupt = |what: String| sled::Error::Unsupported(format!("{prefix} row: {what}"));
        let key = K::decode(&k[prefix.len()..]).ok_or_else(|| corrupt("bad key".into()))?;
        let value = serde_json::from_slice(v).map_err(|e| corrupt(e.to_string()))?;
        Ok((key, value))
    }

    pub fn get(&self, key: &K) -> DiskResult<Option<V>> {
        if let Some(c) = self.recent.get(key) {
            return Ok(c.value.clone());
        }
        let Some((tree, prefix)) = &self.tree else { return Ok(None) };
        match tree.get(Self::sled_key(prefix, key))? {
            Some(v) => Ok(Some(Self::decode_row(prefix, &Self::sled_key(prefix, key), &v)?.1)),
            None => Ok(None),
        }
    }

    pub fn insert(&mut self, key: K, value: V) {
        self.seq += 1;
        self.recent.insert(key, Change { value: Some(value), seq: self.seq });
    }

    pub fn remove(&mut self, key: &K) -> DiskResult<Option<V>> {
        let old = self.get(key)?;
        if old.is_some() {
            self.seq += 1;
            self.recent.insert(key.clone(), Change { value: None, seq: self.seq });
        }
        Ok(old)
    }

    /// Up to `limit` rows with keys in `from..`, in key order.
    pub fn range_from(&self, from: &K, limit: usize) -> DiskResult<Vec<(K, V)>> {
        self.range_while(from, limit, |_| true)
    }

    /// Up to `limit` rows with keys in `from..`, in key order, stopping at the first key `keep`
    /// refuses (no row past it is read).
    pub fn range_while(&self, from: &K, limit: usize, keep: impl Fn(&K) -> bool) -> DiskResult<Vec<(K, V)>> {
        let mut out = Vec::new();
        let mut recent = self
            .recent
            .range((Bound::Included(from.clone()), Bound::Unbounded))
            .take_while(|(k, _)| keep(k))
            .peekable();
        let mut stored: Box<dyn Iterator<Item = DiskResult<(K, V)>>> = match &self.tree {
            Some((tree, prefix)) => {
                let start = Self::sled_key(prefix, from);
                let prefix = *prefix;
                Box::new(
                    tree.range(start..)
                        .take_while(move |r| r.as_ref().map_or(true, |(k, _)| k.starts_with(prefix.as_bytes())))
                        .map(move |r| r.and_then(|(k, v)| Self::decode_row(prefix, &k, &v)))
                        .take_while(|r| r.as_ref().map_or(true, |(k, _)| keep(k))),
                )
            }
            None => Box::new(std::iter::empty()),
        };
        let mut next_stored = stored.next().transpose()?;
        while out.len() < limit {
            let take_recent = match (recent.peek(), &next_stored) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((rk, _)), Some((sk, _))) => *rk <= sk,
            };
            if take_recent {
                let (k, c) = recent.next().expect("peeked");
                if next_stored.as_ref().is_some_and(|(sk, _)| sk == k) {
                    next_stored = stored.next().transpose()?;
                }
                if let Some(v) = &c.value {
                    out.push((k.clone(), v.clone()));
                }
            } else {
                out.push(next_stored.take().expect("checked"));
                next_stored = stored.next().transpose()?;
            }
        }
        Ok(out)
    }

    /// Every row, in key order (snapshots, digests, comparisons).
    pub fn all(&self) -> DiskResult<Vec<(K, V)>> {
        match self.recent.keys().next().cloned().into_iter().chain(self.first_stored_key()?).min() {
            Some(first) => self.range_from(&first, usize::MAX),
            None => Ok(Vec::new()),
        }
    }

    fn first_stored_key(&self) -> DiskResult<Option<K>> {
        let Some((tree, prefix)) = &self.tree else { return Ok(None) };
        match tree.scan_prefix(prefix.as_bytes()).next().transpose()? {
            Some((k, v)) => Ok(Some(Self::decode_row(prefix, &k, &v)?.0)),
            None => Ok(None),
        }
    }
}

impl<K, V> Persisted for DiskTable<K, V>
where
    K: DiskKey + Serialize,
    V: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn load(&mut self, _: &[u8], _: &[u8]) -> Result<(), RowError> {
        Err(RowError::KeptOnDisk)
    }

    fn write_changes(&mut self, prefix: &str, batch: &mut sled::Batch) -> Taken {
        let mut written = Vec::with_capacity(self.recent.len());
        for (k, c) in &self.recent {
            let key = Self::sled_key(prefix, k);
            match &c.value {
                Some(v) => batch.insert(key, serde_json::to_vec(v).expect("rows serialize")),
                None => batch.remove(key),
            }
            written.push((k.clone(), c.seq));
        }
        Box::new(written)
    }

    fn give_back(&mut self, _: Taken) {
        // Nothing was forgotten: the changes are still held until a checkpoint settles them.
    }

    fn settle(&mut self, taken: Taken) {
        if self.tree.is_none() {
            return;
        }
        if let Ok(written) = taken.downcast::<Vec<(K, u64)>>() {
            for (k, seq) in *written {
                if self.recent.get(&k).is_some_and(|c| c.seq == seq) {
                    self.recent.remove(&k);
                }
            }
        }
    }

    fn write_all(&mut self, prefix: &str, batch: &mut sled::Batch) {
        for (k, v) in self.all().expect("a detached table reads only memory") {
            batch.insert(Self::sled_key(prefix, &k), serde_json::to_vec(&v).expect("rows serialize"));
        }
    }

    fn digest(&self, out: &mut dyn std::io::Write) -> Result<(), serde_json::Error> {
        serde_json::to_writer(out, self)
    }

    fn attach(&mut self, tree: &sled::Tree, prefix: &'static str) {
        if self.tree.is_some() {
            return;
        }
        // Attached after its rows were written (install) or on open (rows already there).
        self.recent.clear();
        self.tree = Some((tree.clone(), prefix));
    }
}

impl<K: DiskKey, V: Clone + Serialize + DeserializeOwned + PartialEq> PartialEq for DiskTable<K, V> {
    fn eq(&self, other: &Self) -> bool {
        match (self.all(), other.all()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

impl<K: DiskKey + fmt::Debug, V: Clone + Serialize + DeserializeOwned + fmt::Debug> fmt::Debug for DiskTable<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.all() {
            Ok(rows) => f.debug_map().entries(rows.iter().map(|(k, v)| (k, v))).finish(),
            Err(e) => write!(f, "<unreadable: {e}>"),
        }
    }
}

impl<K: DiskKey + Serialize, V: Clone + Serialize + DeserializeOwned> Serialize for DiskTable<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let rows = self.all().map_err(serde::ser::Error::custom)?;
        s.collect_seq(rows.iter())
    }
}

impl<'de, K, V> Deserialize<'de> for DiskTable<K, V>
where
    K: DiskKey + Deserialize<'de>,
    V: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<(K, V)> = Vec::deserialize(d)?;
        let recent = pairs.into_iter().map(|(k, v)| (k, Change { value: Some(v), seq: 0 })).collect();
        Ok(DiskTable { tree: None, recent, seq: 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attached(dir: &std::path::Path) -> (sled::Tree, DiskTable<(i64, u64), String>) {
        let db = sled::open(dir).unwrap();
        let tree = db.open_tree("t").unwrap();
        let mut t = DiskTable::default();
        t.attach(&tree, "~x/");
        (tree, t)
    }

    #[test]
    fn keys_sort_like_their_encoding_including_negative_times() {
        let keys = [(-5i64, 9u64), (-1, 0), (0, 3), (0, 4), (7, 0), (i64::MAX, u64::MAX)];
        let encoded: Vec<Vec<u8>> = keys
            .iter()
            .map(|k| {
                let mut b = vec![];
                k.encode(&mut b);
                b
            })
            .collect();
        assert!(encoded.windows(2).all(|w| w[0] < w[1]));
        for (k, b) in keys.iter().zip(&encoded) {
            assert_eq!(<(i64, u64)>::decode(b), Some(*k));
        }
    }

    #[test]
    fn reads_merge_the_checkpointed_rows_with_the_changes_since() {
        let dir = tempfile::tempdir().unwrap();
        let (tree, mut t) = attached(dir.path());
        for i in 0..10u64 {
            t.insert((i as i64, i), format!("v{i}"));
        }
        let mut batch = sled::Batch::default();
        let taken = t.write_changes("~x/", &mut batch);
        tree.apply_batch(batch).unwrap();
        t.settle(taken);
        assert!(t.recent.is_empty(), "settled changes leave memory");
        t.remove(&(3, 3)).unwrap();
        t.insert((4, 4), "new".into());
        t.insert((5, 100), "added".into());
        let rows = t.range_from(&(2, 0), 4).unwrap();
        let keys: Vec<_> = rows.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, vec![(2, 2), (4, 4), (5, 5), (5, 100)]);
        assert_eq!(rows[1].1, "new");
        assert_eq!(t.get(&(3, 3)).unwrap(), None);
        assert_eq!(t.get(&(9, 9)).unwrap().as_deref(), Some("v9"));
        assert_eq!(t.all().unwrap().len(), 10);
    }

    #[test]
    fn a_failed_checkpoint_forgets_nothing_and_a_change_after_capture_survives_settling() {
        let dir = tempfile::tempdir().unwrap();
        let (tree, mut t) = attached(dir.path());
        t.insert((1, 1), "a".into());
        let mut batch = sled::Batch::default();
        let taken = t.write_changes("~x/", &mut batch);
        t.give_back(taken);
        assert_eq!(t.get(&(1, 1)).unwrap().as_deref(), Some("a"));
        let mut batch = sled::Batch::default();
        let taken = t.write_changes("~x/", &mut batch);
        // Changed again while the checkpoint runs: the newer value must stay in memory.
        t.insert((1, 1), "b".into());
        tree.apply_batch(batch).unwrap();
        t.settle(taken);
        assert_eq!(t.get(&(1, 1)).unwrap().as_deref(), Some("b"));
    }

    #[test]
    fn snapshots_carry_every_row_and_a_detached_copy_equals_the_attached_table() {
        let dir = tempfile::tempdir().unwrap();
        let (tree, mut t) = attached(dir.path());
        t.insert((1, 1), "a".into());
        let mut batch = sled::Batch::default();
        let taken = t.write_changes("~x/", &mut batch);
        tree.apply_batch(batch).unwrap();
        t.settle(taken);
        t.insert((2, 2), "b".into());
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#"[[[1,1],"a"],[[2,2],"b"]]"#);
        let copy: DiskTable<(i64, u64), String> = serde_json::from_str(&json).unwrap();
        assert_eq!(copy, t);
    }
}
