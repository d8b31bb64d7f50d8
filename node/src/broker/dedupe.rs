//! The send dedupe window's rows: which (topic, message id) pairs were stored within the window,
//! and where. Apply, the journal (`dedupe_journal.rs`), snapshots and reads all use these types.
//!
//! # The key is a 128-bit hash
//!
//! At 50k msg/s and a 120 s window the table holds 6M live rows. Keyed by the two strings (twice:
//! once in the table, once in the expiry order) that cost ~340 bytes a row, ~2 GB; keyed by a
//! fixed 16-byte hash in hash maps it costs ~140 (docs/durability.md has the measurement,
//! `cargo bench -p rockraft --bench dedupe`).
//!
//! The hash is XXH3-128 (seed 0, the default secret) of `topic length as u64 LE | topic | id`.
//! The length prefix makes the encoding unambiguous (`("ab", "c")` and `("a", "bc")` hash
//! different bytes). A message sent by a user (authentication on) is keyed with its sender too:
//! XXH3-128 with seed [`SENDER_SEED`] of `topic length | topic | sender length | sender | id`, so
//! one user's send is never taken for a retry of another's (which would hand it the other's
//! transaction id or recall handle); the seed keeps those keys apart from the unsent-by-anyone
//! ones, which stay what earlier releases computed. XXH3 is specified independently of platform and endianness and its output
//! is frozen by its specification, so every replica and every release computes the same key for
//! the same pair — apply depends on that, like on the entries themselves (a test pins a value).
//!
//! Why a hash is safe: two different pairs sharing a key would make the second message look like
//! a retry of the first, so it would be answered as a duplicate and not stored. With `n` live
//! keys the chance that any two of them collide is about `n² / 2^129`: for n = 6M, 5e-26. Over
//! a century at 50k msg/s (1.6e14 sends, each compared with at most 6M live keys) the chance of
//! a single false duplicate is about 3e-18. And a collision, however unlikely, is deterministic:
//! every replica computes the same keys, so replicas never diverge over it. Sending another
//! user's message id first suppresses nothing (the keys differ by sender). XXH3 is not a
//! cryptographic hash: a user who knows another's future message id and access key could craft an
//! id whose key collides, and that message would then be answered as a duplicate of the crafted
//! one and not stored (its sender is handed the crafter's results, never the reverse): a denial
//! that needs the victim's ids in advance, and gains the crafter nothing to read.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use xxhash_rust::xxh3::Xxh3;

/// The XXH3 seed of keys of messages with a sender.
const SENDER_SEED: u64 = 1;

/// A (topic, message id) pair as the dedupe window knows it: a 128-bit hash, 16 bytes, alignment
/// 1, so an expiry-order element `(i64, DedupeKey)` is 24 bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DedupeKey([u8; 16]);

impl DedupeKey {
    /// The key of `message_id` sent to `topic` (see the module docs for the encoding).
    pub fn new(topic: &str, message_id: &str) -> DedupeKey {
        let mut h = Xxh3::new();
        h.update(&(topic.len() as u64).to_le_bytes());
        h.update(topic.as_bytes());
        h.update(message_id.as_bytes());
        DedupeKey(h.digest128().to_be_bytes())
    }

    /// The key of a message: by its sender too when it has one (see the module docs).
    pub fn of_message(topic: &str, message_id: &str, sender: &str) -> DedupeKey {
        if sender.is_empty() {
            return DedupeKey::new(topic, message_id);
        }
        let mut h = Xxh3::with_seed(SENDER_SEED);
        h.update(&(topic.len() as u64).to_le_bytes());
        h.update(topic.as_bytes());
        h.update(&(sender.len() as u64).to_le_bytes());
        h.update(sender.as_bytes());
        h.update(message_id.as_bytes());
        DedupeKey(h.digest128().to_be_bytes())
    }

    pub fn from_bytes(bytes: [u8; 16]) -> DedupeKey {
        DedupeKey(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Debug for DedupeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// 32 lowercase hex digits: the big-endian hash value.
impl fmt::Display for DedupeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// In snapshots (JSON): the hex string.
impl Serialize for DedupeKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Reads the hex string, or a `[topic, id]` pair as snapshots of releases before the hashed key
/// carried it: a node of this release can then join a cluster whose leader still runs the
/// previous one (it installs that leader's snapshot) and computes the very keys it would have.
impl<'de> Deserialize<'de> for DedupeKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = DedupeKey;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("32 hex digits, or a [topic, message id] pair")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<DedupeKey, E> {
                let bad = || E::invalid_value(de::Unexpected::Str(v), &self);
                if v.len() != 32 || !v.is_ascii() {
                    return Err(bad());
                }
                let mut bytes = [0u8; 16];
                for (i, b) in bytes.iter_mut().enumerate() {
                    *b = u8::from_str_radix(&v[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
                }
                Ok(DedupeKey(bytes))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DedupeKey, A::Error> {
                let topic: String = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let id: String = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(DedupeKey::new(&topic, &id))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

/// Where a message id was stored, and by which entry. 32 bytes: every field is needed — the
/// reply to a retry (queue id and offset, or the held message's position), expiry and rebuilding
/// the expiry order after a load (the dedupe clock when stored), and telling a replayed entry
/// from a retry (index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Seen {
    pub queue_id: u32,
    pub offset: u64,
    /// [`DedupeClock::now_ms`] when it was stored.
    #[serde(alias = "store_timestamp_ms")]
    pub seen_ms: i64,
    /// The entry that stored it: replaying that entry is not a retry of itself.
    pub index: u64,
}

/// In snapshots: `[queue_id, offset, seen_ms, index]`, not a map with the field names
/// (millions of rows). The derived `Deserialize` reads this and the map earlier releases wrote.
impl Serialize for Seen {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.queue_id, self.offset, self.seen_ms, self.index).serialize(s)
    }
}

/// The clock the dedupe window is measured by. It moves on by the time between one leader's
/// stamps, and not at all from the last stamp of one term to the first of the next: two leaders'
/// clocks may disagree by any amount, so a retry that reaches a new leader whose clock runs
/// minutes ahead must still find its first attempt, and one leader whose clock ran a day ahead
/// must not expire the whole window. The price: the time between two leaders' stamps (an
/// election, or an idle cluster's failover) is not counted, so ids are kept that much longer,
/// never shorter. It starts at the first stamp it sees, so it reads like a wall clock (and rows
/// written by releases that measured by store time compare with it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupeClock {
    /// The term of the last stamp seen.
    pub term: u64,
    /// The highest stamp seen in that term.
    pub stamp_ms: i64,
    /// The window's time now.
    pub now_ms: i64,
}

impl DedupeClock {
    /// Moves on to an entry of `term` stamped `stamp_ms`, and returns the window's time.
    pub fn advance(&mut self, term: u64, stamp_ms: i64) -> i64 {
        if self.now_ms == 0 {
            self.now_ms = stamp_ms;
        } else if term == self.term {
            self.now_ms = self.now_ms.saturating_add(stamp_ms.saturating_sub(self.stamp_ms).max(0));
        }
        if term != self.term || stamp_ms > self.stamp_ms {
            self.stamp_ms = stamp_ms;
        }
        self.term = term;
        self.now_ms
    }
}

/// Maps the window's rows are spread over, by the key's first byte.
const SHARDS: usize = 256;
/// Rows a shard keeps room for however few it holds: shrinking below is not worth a rehash.
const MIN_ROOM: usize = 64;

/// The window's rows, by key.
///
/// Hash maps, not a [`Table`](crate::broker::table::Table): the keys are random and there are
/// millions of them (a 120 s window at 20k msg/s holds 2.4M), so each send's look-up and insert
/// in a B-tree missed the cache at every level — 7 % of a follower's CPU at 512 sends in flight.
/// [`SHARDS`] of them, because a hash map grows by rehashing all it holds in one insert: one map of
/// 1M rows took 54 ms for it (`cargo bench -p rockraft --bench dedupe`), in apply, on every
/// replica at once; a shard holds a 256th.
/// Snapshots and digests list the rows sorted by key, as a `Table` does, so two replicas with the
/// same rows serialize to the same bytes. The default hasher is keyed per process: a client
/// choosing message ids cannot aim them at one bucket.
#[derive(Clone)]
pub struct DedupeTable {
    shards: Box<[HashMap<DedupeKey, Seen>]>,
    len: usize,
    /// Keys inserted or removed since the last checkpoint took them.
    changed: HashSet<DedupeKey>,
}

impl Default for DedupeTable {
    fn default() -> Self {
        DedupeTable { shards: (0..SHARDS).map(|_| HashMap::new()).collect(), len: 0, changed: HashSet::new() }
    }
}

impl DedupeTable {
    fn shard(&self, key: &DedupeKey) -> usize {
        usize::from(key.0[0]) % SHARDS
    }

    pub fn get(&self, key: &DedupeKey) -> Option<&Seen> {
        self.shards[self.shard(key)].get(key)
    }

    /// Sets the row; it is written at the next checkpoint.
    pub fn insert(&mut self, key: DedupeKey, seen: Seen) -> Option<Seen> {
        self.changed.insert(key);
        let old = self.shards[self.shard(&key)].insert(key, seen);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes the row; the removal is written at the next checkpoint. A shard left at a quarter
    /// of its room or less (a burst of ids has expired) gives the rest back: a hash map keeps its
    /// room otherwise, and a burst's would stay taken for good.
    pub fn remove(&mut self, key: &DedupeKey) -> Option<Seen> {
        let i = self.shard(key);
        let shard = &mut self.shards[i];
        let removed = shard.remove(key)?;
        if shard.capacity() > MIN_ROOM && shard.capacity() / 4 > shard.len() {
            shard.shrink_to(2 * shard.len());
        }
        self.len -= 1;
        self.changed.insert(*key);
        Some(removed)
    }

    /// The rows, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&DedupeKey, &Seen)> {
        self.shards.iter().flat_map(HashMap::iter)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Takes the keys changed since the last call (the checkpoint journals their rows).
    pub fn take_changed(&mut self) -> HashSet<DedupeKey> {
        std::mem::take(&mut self.changed)
    }

    /// Marks `keys` changed again (a checkpoint that took them failed).
    pub fn mark_changed(&mut self, keys: HashSet<DedupeKey>) {
        self.changed.extend(keys);
    }

    fn sorted(&self) -> Vec<(&DedupeKey, &Seen)> {
        let mut rows: Vec<_> = self.iter().collect();
        rows.sort_unstable_by_key(|(k, _)| **k);
        rows
    }
}

impl PartialEq for DedupeTable {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.shards == other.shards
    }
}

impl fmt::Debug for DedupeTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.sorted()).finish()
    }
}

/// A sequence of `(key, row)` pairs sorted by key: what a `Table` of the same rows writes.
impl Serialize for DedupeTable {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.sorted())
    }
}

impl<'de> Deserialize<'de> for DedupeTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<(DedupeKey, Seen)> = Vec::deserialize(d)?;
        let mut table = DedupeTable::default();
        for (key, seen) in pairs {
            table.insert(key, seen);
        }
        table.changed.clear();
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, size_of};

    use super::*;
    use crate::broker::table::Table;

    /// Bounded memory per remembered message: a 16-byte key, a row of at most 32 bytes and an
    /// expiry element of at most 24, whatever the lengths of topic and message id, and nothing
    /// on the heap besides the table's and the queue's own nodes (the measured total per entry
    /// is in docs/durability.md: `cargo bench -p rockraft --bench dedupe`).
    #[test]
    fn a_remembered_message_costs_a_fixed_few_bytes() {
        assert_eq!(size_of::<DedupeKey>(), 16);
        assert_eq!(align_of::<DedupeKey>(), 1);
        assert!(size_of::<Seen>() <= 32, "row: {} bytes", size_of::<Seen>());
        assert!(size_of::<(i64, DedupeKey)>() <= 24, "order element: {} bytes", size_of::<(i64, DedupeKey)>());
    }

    /// Every replica and every release must compute the same key: these values are XXH3-128's,
    /// fixed by its specification (computed with the reference C implementation, libxxhash
    /// 0.8.x, not with this crate). A change here would make a node of another version take
    /// other messages for retries, so it must never happen.
    #[test]
    fn keys_are_stable_across_platforms_and_releases() {
        assert_eq!(DedupeKey::new("", "").to_string(), "2c0a8a99dc147d5445c3b49d035665b2");
        assert_eq!(
            DedupeKey::new("TopicTest", "01A1B2C3D4E5F6000000000000000001").to_string(),
            "e47b9a069149ed31c318db0d956db237"
        );
        // The streaming hasher hashes exactly the documented bytes.
        let mut bytes = 9u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"TopicTestmsg-1");
        assert_eq!(DedupeKey::new("TopicTest", "msg-1").as_bytes(), &xxhash_rust::xxh3::xxh3_128(&bytes).to_be_bytes());
    }

    #[test]
    fn the_dedupe_clock_counts_time_within_a_term_only() {
        let mut c = DedupeClock::default();
        assert_eq!(c.advance(1, 1_000), 1_000, "starts at the first stamp");
        assert_eq!(c.advance(1, 31_000), 31_000);
        assert_eq!(c.advance(1, 30_000), 31_000, "a stamp below the term's highest adds nothing");
        assert_eq!(c.advance(1, 32_000), 32_000);
        // A new leader a day ahead: its first stamp adds nothing, its later ones their distance.
        let day = 86_400_000;
        assert_eq!(c.advance(2, 32_000 + day), 32_000);
        assert_eq!(c.advance(2, 37_000 + day), 37_000);
        // Back to a leader with the right clock.
        assert_eq!(c.advance(3, 40_000), 37_000);
        assert_eq!(c.advance(3, 41_000), 38_000);
    }

    #[test]
    fn topic_and_id_are_not_confused() {
        assert_ne!(DedupeKey::new("ab", "c"), DedupeKey::new("a", "bc"));
        assert_ne!(DedupeKey::new("T", "a"), DedupeKey::new("U", "a"));
        assert_ne!(DedupeKey::new("T", "a"), DedupeKey::new("T", "b"));
        assert_eq!(DedupeKey::new("T", "a"), DedupeKey::new("T", "a"));
    }

    #[test]
    fn snapshots_carry_keys_as_hex_and_read_the_earlier_string_pairs() {
        let key = DedupeKey::new("T", "id-1");
        let json = serde_json::to_string(&key).unwrap();
        assert_eq!(json, format!("\"{key}\""));
        assert_eq!(serde_json::from_str::<DedupeKey>(&json).unwrap(), key);
        assert_eq!(serde_json::from_str::<DedupeKey>(r#"["T","id-1"]"#).unwrap(), key);
        for bad in [r#""abc""#, r#"["T"]"#, r#"["T","a","b"]"#, "7", r#""zz000000000000000000000000000000""#] {
            assert!(serde_json::from_str::<DedupeKey>(bad).is_err(), "{bad}");
        }
        let seen = Seen { queue_id: 1, offset: 2, seen_ms: -3, index: 4 };
        assert_eq!(serde_json::to_string(&seen).unwrap(), "[1,2,-3,4]");
        assert_eq!(serde_json::from_str::<Seen>("[1,2,-3,4]").unwrap(), seen);
        let earlier = r#"{"queue_id":1,"offset":2,"store_timestamp_ms":-3,"index":4}"#;
        assert_eq!(serde_json::from_str::<Seen>(earlier).unwrap(), seen);
        // A whole table as an earlier release's snapshot held it.
        let table: DedupeTable = serde_json::from_str(&format!(r#"[[["T","id-1"],{earlier}]]"#)).unwrap();
        assert_eq!(table.get(&key), Some(&seen));
    }

    #[test]
    fn the_window_serializes_as_a_table_of_the_same_rows_and_writes_only_what_changed() {
        let mut window = DedupeTable::default();
        let mut table: Table<DedupeKey, Seen> = Table::default();
        for i in 0..200u64 {
            let key = DedupeKey::new("T", &format!("id-{i}"));
            let seen = Seen { queue_id: (i % 8) as u32, offset: i, seen_ms: i as i64, index: i };
            window.insert(key, seen);
            table.insert(key, seen);
        }
        let json = serde_json::to_string(&window).unwrap();
        assert_eq!(json, serde_json::to_string(&table).unwrap(), "sorted by key, byte for byte");
        let mut back: DedupeTable = serde_json::from_str(&json).unwrap();
        assert_eq!(back, window);
        assert!(back.take_changed().is_empty(), "a loaded window has nothing to write");
        assert_eq!(window.take_changed().len(), 200);
        let gone = DedupeKey::new("T", "id-7");
        assert!(window.remove(&gone).is_some());
        assert!(window.remove(&DedupeKey::new("T", "never")).is_none());
        assert_eq!(window.take_changed(), HashSet::from([gone]), "only a row that went is written");
        window.mark_changed(HashSet::from([gone]));
        assert_eq!(window.take_changed().len(), 1, "a failed checkpoint's keys come back");
    }

    #[test]
    fn a_window_grows_in_small_maps_and_gives_back_the_room_of_an_expired_burst() {
        let mut window = DedupeTable::default();
        let keys: Vec<DedupeKey> = (0..100_000u64).map(|i| DedupeKey::new("T", &format!("id-{i}"))).collect();
        for (i, key) in keys.iter().enumerate() {
            window.insert(*key, Seen { queue_id: 0, offset: i as u64, seen_ms: 0, index: 1 });
        }
        let room = |w: &DedupeTable| w.shards.iter().map(HashMap::capacity).sum::<usize>();
        let largest = window.shards.iter().map(HashMap::len).max().unwrap();
        assert!(largest < 1_000, "a shard rehashed at once holds {largest} of 100,000 rows");
        let burst = room(&window);
        for key in &keys[10..] {
            window.remove(key);
        }
        assert_eq!(window.len(), 10);
        assert!(room(&window) <= SHARDS * MIN_ROOM, "room for {} rows kept of {burst}", room(&window));
        assert!(keys[..10].iter().all(|k| window.get(k).is_some()), "the rows left are all still there");
    }
}
