//! The message batches of recently read log entries, decoded once.
//!
//! A ConsumeQueue record points at one message of an entry that may hold hundreds (sends to a
//! queue are coalesced into one entry). Reading a message means checking the whole entry's
//! checksum and decoding its batch; doing that once per message made a receive of 32 messages
//! check and decode the same entry 32 times. Receives read a queue's offsets in order, so the
//! entries they touch are few and recent: a small cache turns that into once per entry.
//!
//! Only committed entries are read through it (queue records, held messages and the message
//! index are written at apply), and a committed entry never changes at its index, so nothing is
//! ever invalidated. A batch's messages share the segment's mapping (copying them cost more than
//! the checks it saves), which keeps a deleted segment file's space in use while it is held: the
//! log tells the cache of every purge ([`EntryCache::release_below`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rockraft_proto::rockraft::SendBatch;

/// Payload bytes the cache holds at most; an entry larger than this is decoded and not kept.
const MAX_BYTES: usize = 16 << 20;
/// Entries the cache holds at most.
const MAX_ENTRIES: usize = 512;

#[derive(Default)]
pub(crate) struct EntryCache(Mutex<Cached>);

#[derive(Default)]
struct Cached {
    batches: HashMap<u64, Arc<SendBatch>>,
    /// Insertion order with each entry's payload size: the oldest go first.
    order: VecDeque<(u64, usize)>,
    bytes: usize,
}

impl EntryCache {
    pub fn get(&self, index: u64) -> Option<Arc<SendBatch>> {
        self.0.lock().expect("entry cache").batches.get(&index).cloned()
    }

    /// Decodes `payload` with `decode` (on a copy, see the module doc) and keeps the batch.
    pub fn insert(
        &self,
        index: u64,
        payload: &Bytes,
        decode: impl FnOnce(Bytes) -> Option<SendBatch>,
    ) -> Option<Arc<SendBatch>> {
        let size = payload.len();
        let batch = Arc::new(decode(payload.clone())?);
        if size > MAX_BYTES {
            return Some(batch);
        }
        let mut cached = self.0.lock().expect("entry cache");
        if cached.batches.insert(index, Arc::clone(&batch)).is_some() {
            // Another reader decoded it meanwhile: it is in `order` already.
            return Some(batch);
        }
        cached.order.push_back((index, size));
        cached.bytes += size;
        while cached.bytes > MAX_BYTES || cached.order.len() > MAX_ENTRIES {
            let Some((old, old_size)) = cached.order.pop_front() else { break };
            cached.batches.remove(&old);
            cached.bytes -= old_size;
        }
        Some(batch)
    }

    /// Drops the batches of entries below `first_index` (purged from the log).
    pub fn release_below(&self, first_index: u64) {
        let mut cached = self.0.lock().expect("entry cache");
        let Cached { batches, order, bytes } = &mut *cached;
        order.retain(|&(index, size)| {
            let keep = index >= first_index;
            if !keep {
                batches.remove(&index);
                *bytes -= size;
            }
            keep
        });
    }

    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        let cached = self.0.lock().expect("entry cache");
        (cached.batches.len(), cached.bytes)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn batch(messages: usize, size: usize) -> Bytes {
        SendBatch { topic: "t".into(), messages: vec![Bytes::from(vec![7u8; size]); messages], ..Default::default() }
            .encode_to_vec()
            .into()
    }

    fn decode(b: Bytes) -> Option<SendBatch> {
        SendBatch::decode(b).ok()
    }

    #[test]
    fn a_batch_is_decoded_once_and_then_served_from_memory() {
        let cache = EntryCache::default();
        assert!(cache.get(5).is_none());
        let first = cache.insert(5, &batch(3, 10), decode).unwrap();
        assert_eq!(first.messages.len(), 3);
        let again = cache.get(5).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
    }

    #[test]
    fn a_payload_that_does_not_decode_is_not_kept() {
        let cache = EntryCache::default();
        assert!(cache.insert(1, &Bytes::from_static(&[0xff, 0xff, 0xff]), decode).is_none());
        assert!(cache.get(1).is_none());
    }

    #[test]
    fn the_oldest_entries_leave_once_the_byte_budget_is_spent() {
        let cache = EntryCache::default();
        let payload = batch(1, 4 << 20);
        for index in 0..10 {
            cache.insert(index, &payload, decode).unwrap();
        }
        let (entries, bytes) = cache.len();
        assert!(bytes <= MAX_BYTES, "{bytes}");
        assert_eq!(entries, MAX_BYTES / payload.len());
        assert!(cache.get(0).is_none());
        assert!(cache.get(9).is_some());
    }

    #[test]
    fn an_entry_larger_than_the_budget_is_answered_but_not_kept() {
        let cache = EntryCache::default();
        let payload = batch(1, MAX_BYTES + 1);
        assert_eq!(cache.insert(1, &payload, decode).unwrap().messages.len(), 1);
        assert_eq!(cache.len(), (0, 0));
    }

    #[test]
    fn a_purge_releases_the_batches_below_the_new_first_index() {
        let cache = EntryCache::default();
        let payload = batch(2, 100);
        for index in 1..=6 {
            cache.insert(index, &payload, decode).unwrap();
        }
        cache.release_below(4);
        assert_eq!(cache.len(), (3, 3 * payload.len()));
        assert!(cache.get(3).is_none());
        assert!(cache.get(4).is_some());
        // What stays is evicted in order as before.
        cache.insert(7, &payload, decode).unwrap();
        assert_eq!(cache.len().0, 4);
    }

    #[test]
    fn the_entry_count_is_bounded_too() {
        let cache = EntryCache::default();
        let payload = batch(1, 1);
        for index in 0..(MAX_ENTRIES as u64 + 10) {
            cache.insert(index, &payload, decode).unwrap();
        }
        assert_eq!(cache.len().0, MAX_ENTRIES);
        assert!(cache.get(9).is_none());
        assert!(cache.get(10).is_some());
    }
}
