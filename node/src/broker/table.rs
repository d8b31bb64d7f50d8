//! A table of replicated broker state: an ordered map that remembers which keys changed since
//! the last checkpoint, and knows how its rows are stored in sled and in snapshots.
//!
//! Every piece of broker state that is persisted is one `Table` field of the metadata or of a
//! data partition, listed once in its `persisted_tables!`. From that listing the
//! broker loads it on start, writes its changed rows in each checkpoint (atomically with
//! `last_applied`), carries it in snapshots (serde: a sequence of `(key, value)` pairs) and
//! replaces it on install. Adding state is adding a field and its line there.
//!
//! Rows are kept in `BTreeMap`s so that iteration, snapshots and digests are deterministic: two
//! replicas with the same rows serialize to the same bytes.

use std::any::Any;
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Keys changed since the last checkpoint, taken by a checkpoint under way: given back if it fails.
pub(crate) type Taken = Box<dyn Any + Send>;

#[derive(Clone)]
pub struct Table<K, V> {
    rows: BTreeMap<K, V>,
    /// Keys inserted, changed or removed since the last checkpoint took them.
    changed: BTreeSet<K>,
}

impl<K: Ord + Clone, V> Default for Table<K, V> {
    fn default() -> Self {
        Table { rows: BTreeMap::new(), changed: BTreeSet::new() }
    }
}

impl<K: Ord + Clone, V> Table<K, V> {
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.rows.get(key)
    }

    /// The row to change in place; it is written at the next checkpoint.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let (k, _) = self.rows.get_key_value(key)?;
        self.changed.insert(k.clone());
        self.rows.get_mut(key)
    }

    /// The row, inserted with `make` if missing; it is written at the next checkpoint.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        self.changed.insert(key.clone());
        self.rows.entry(key).or_insert_with(make)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.rows.contains_key(key)
    }

    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.changed.insert(key.clone());
        self.rows.insert(key, value)
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let (k, old) = self.rows.remove_entry(key)?;
        self.changed.insert(k);
        Some(old)
    }

    /// Removes every row whose key `gone` accepts.
    pub fn remove_where(&mut self, gone: impl Fn(&K) -> bool) {
        let keys: Vec<K> = self.rows.keys().filter(|k| gone(k)).cloned().collect();
        for k in keys {
            self.remove(&k);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.rows.iter()
    }

    /// The rows from `from` on, in key order.
    pub fn range(&self, from: std::ops::RangeFrom<K>) -> impl Iterator<Item = (&K, &V)> {
        self.rows.range(from)
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.rows.keys()
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.rows.values()
    }

    /// Changes every value in place (all rows count as changed).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.changed.extend(self.rows.keys().cloned());
        self.rows.values_mut()
    }

    /// Changes every row in place (all rows count as changed).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.changed.extend(self.rows.keys().cloned());
        self.rows.iter_mut()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Takes the keys changed since the last call (to persist them some other way than sled).
    pub fn take_changed(&mut self) -> BTreeSet<K> {
        std::mem::take(&mut self.changed)
    }

    /// Marks `keys` changed again (a checkpoint that took them failed).
    pub fn mark_changed(&mut self, keys: BTreeSet<K>) {
        self.changed.extend(keys);
    }
}

/// Why a row read from sled could not be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowError {
    #[error("row {key}: {source}")]
    Undecodable {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    /// A table kept on disk is read where its rows are, never loaded into memory.
    #[error("a row of a table kept on disk")]
    KeptOnDisk,
}

/// How a sled-backed table is stored, with its key and value types erased so that the broker
/// can walk every table of the state in one loop.
pub(crate) trait Persisted: Send + Sync {
    /// Adds a row read from sled (the key without the table's prefix).
    fn load(&mut self, key: &[u8], value: &[u8]) -> Result<(), RowError>;
    /// Writes the changed rows into `batch` under `prefix`, and returns the keys taken.
    fn write_changes(&mut self, prefix: &str, batch: &mut sled::Batch) -> Taken;
    /// Marks keys taken by [`Persisted::write_changes`] changed again.
    fn give_back(&mut self, taken: Taken);
    /// Writes every row into `batch` under `prefix` (snapshot install) and forgets what changed.
    fn write_all(&mut self, prefix: &str, batch: &mut sled::Batch);
    /// The batch with the rows [`Persisted::write_changes`] took is durable.
    fn settle(&mut self, _taken: Taken) {}
    /// Reads its rows from `tree` from now on (tables whose rows stay on disk).
    fn attach(&mut self, _tree: &sled::Tree, _prefix: &'static str) {}
    /// Writes what replicas must agree on into the state's digest: every row, unless a table
    /// keeps node-local bookkeeping in its rows (see `QueueRanges`).
    fn digest(&self, out: &mut dyn std::io::Write) -> Result<(), serde_json::Error>;
}

/// Declares a state's persisted tables once, as `prefix => field` (or `field.field`): from
/// that one list come `tables()`, which load, checkpoint and install walk, and `tables_ref()`,
/// which the digest walks.
macro_rules! persisted_tables {
    ($($prefix:literal => $($field:ident).+),* $(,)?) => {
        pub(crate) fn tables(&mut self) -> Vec<(&'static str, &mut dyn $crate::broker::table::Persisted)> {
            vec![$(($prefix, &mut self.$($field).+ as &mut dyn $crate::broker::table::Persisted)),*]
        }

        pub(crate) fn tables_ref(&self) -> Vec<(&'static str, &dyn $crate::broker::table::Persisted)> {
            vec![$(($prefix, &self.$($field).+ as &dyn $crate::broker::table::Persisted)),*]
        }
    };
}
pub(crate) use persisted_tables;

/// The sled key of a row: the table's prefix, then the key as JSON (collision-free for any key).
pub(crate) fn row_key<K: Serialize>(prefix: &str, key: &K) -> Vec<u8> {
    let mut k = prefix.as_bytes().to_vec();
    serde_json::to_writer(&mut k, key).expect("table keys serialize");
    k
}

fn row_value<V: Serialize>(value: &V) -> Vec<u8> {
    serde_json::to_vec(value).expect("table rows serialize")
}

impl<K, V> Persisted for Table<K, V>
where
    K: Ord + Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
    V: Serialize + DeserializeOwned + Send + Sync,
{
    fn load(&mut self, key: &[u8], value: &[u8]) -> Result<(), RowError> {
        let undecodable = |source| RowError::Undecodable { key: String::from_utf8_lossy(key).into_owned(), source };
        let k: K = serde_json::from_slice(key).map_err(undecodable)?;
        let v: V = serde_json::from_slice(value).map_err(undecodable)?;
        self.rows.insert(k, v);
        Ok(())
    }

    fn write_changes(&mut self, prefix: &str, batch: &mut sled::Batch) -> Taken {
        let keys = std::mem::take(&mut self.changed);
        for k in &keys {
            match self.rows.get(k) {
                Some(v) => batch.insert(row_key(prefix, k), row_value(v)),
                None => batch.remove(row_key(prefix, k)),
            }
        }
        Box::new(keys)
    }

    fn give_back(&mut self, taken: Taken) {
        if let Ok(keys) = taken.downcast::<BTreeSet<K>>() {
            self.changed.extend(*keys);
        }
    }

    fn write_all(&mut self, prefix: &str, batch: &mut sled::Batch) {
        self.changed.clear();
        for (k, v) in &self.rows {
            batch.insert(row_key(prefix, k), row_value(v));
        }
    }

    fn digest(&self, out: &mut dyn std::io::Write) -> Result<(), serde_json::Error> {
        serde_json::to_writer(out, self)
    }
}

/// Two tables are equal when their rows are: what changed since a checkpoint is bookkeeping.
impl<K: PartialEq, V: PartialEq> PartialEq for Table<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.rows == other.rows
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for Table<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.rows.iter()).finish()
    }
}

impl<K: Serialize, V: Serialize> Serialize for Table<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.rows.iter())
    }
}

impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for Table<K, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<(K, V)> = Vec::deserialize(d)?;
        Ok(Table { rows: pairs.into_iter().collect(), changed: BTreeSet::new() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(batch: sled::Batch, dir: &std::path::Path) -> Vec<(Vec<u8>, Vec<u8>)> {
        let db = sled::open(dir).unwrap();
        db.apply_batch(batch).unwrap();
        db.iter().map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap()).collect()
    }

    #[test]
    fn a_checkpoint_writes_exactly_the_changed_rows_and_a_failed_one_gives_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut t: Table<(String, u32), u64> = Table::default();
        t.insert(("a".into(), 1), 10);
        t.insert(("b".into(), 2), 20);
        let mut batch = sled::Batch::default();
        let taken = t.write_changes("q", &mut batch);
        assert_eq!(written(batch, &dir.path().join("1")).len(), 2);
        // Nothing changed since: nothing to write.
        let mut batch = sled::Batch::default();
        t.write_changes("q", &mut batch);
        assert!(written(batch, &dir.path().join("2")).is_empty());
        // A failed checkpoint gives its keys back, so the next one still writes them.
        Persisted::give_back(&mut t, taken);
        t.remove(&("a".into(), 1));
        let mut batch = sled::Batch::default();
        t.write_changes("q", &mut batch);
        let db = sled::open(dir.path().join("1")).unwrap();
        db.apply_batch(batch).unwrap();
        let rows: Vec<(Vec<u8>, Vec<u8>)> =
            db.iter().map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap()).collect();
        assert_eq!(rows, vec![(row_key("q", &("b".to_string(), 2u32)), b"20".to_vec())]);
        let mut loaded: Table<(String, u32), u64> = Table::default();
        for (k, v) in rows {
            loaded.load(&k[1..], &v).unwrap();
        }
        assert_eq!(loaded, t);
    }

    #[test]
    fn snapshots_carry_the_rows_and_equality_ignores_bookkeeping() {
        let mut t: Table<String, u32> = Table::default();
        t.insert("x".into(), 1);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#"[["x",1]]"#);
        let back: Table<String, u32> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
        assert!(serde_json::from_str::<Table<String, u32>>(r#"[["x"]]"#).is_err());
    }
}
