//! Broker state: topics, queue offsets, the dedupe window and the ConsumeQueues, with the
//! deterministic apply step and the reads the proxy and admin API serve.
//!
//! The in-memory [`Metadata`] is authoritative while running. Changes are collected as dirty
//! keys and written to sled in one atomic batch together with `last_applied`, after the
//! ConsumeQueues they describe are synced (a checkpoint). A crash loses at most the changes since
//! the last checkpoint, and those are re-derived by re-applying the log from `last_applied`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rockraft_proto::rockraft::{DeadLetter, SendBatch, StoredMessage};
use serde::{Deserialize, Serialize};

use crate::broker::command::{AdminCommand, Command, is_send};
use crate::broker::dedupe_journal::{DedupeJournal, Seen};
use crate::broker::group::{GroupConfig, dead_letter_topic, dead_letter_topic_config};
use crate::broker::pop::{Changed, ConsumeCommand, ConsumeOutcome, Consumption, PopQueue, Receipt};
use crate::broker::queues::Queues;
use crate::broker::topic::TopicConfig;
use crate::broker::{BrokerError, MAX_MESSAGES_PER_ENTRY, Reply, SendOutcome, queue_position, split_position};
use crate::raft::{LogId, StoredMembership, is_command_record};
use crate::store::{CqRecord, LogReader, tag_hash};

pub struct BrokerOptions {
    /// Holds `meta/` (sled) and `queues/` (ConsumeQueues).
    pub dir: PathBuf,
    pub cq_records_per_file: u64,
    /// A message id already stored in a topic within this window is not stored again.
    pub dedupe_window: Duration,
    /// How often applied state is made durable.
    pub checkpoint_interval: Duration,
}

/// One (topic, queue)'s readable offsets: `start..next`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRange {
    pub start: u64,
    pub next: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStatus {
    pub topic: String,
    pub queue_id: u32,
    pub start: u64,
    pub next: u64,
}

/// How far a group is on one topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupProgress {
    pub group: String,
    pub topic: String,
    /// Messages not acked yet: waiting, in flight or held back.
    pub lag: u64,
    pub inflight: u64,
}

/// A message as stored, with where it sits.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEntry {
    pub topic: String,
    pub queue_id: u32,
    pub offset: u64,
    pub store_timestamp_ms: i64,
    /// Bytes of the encoded message (what the ConsumeQueue's size counts).
    pub size: u32,
    pub message: StoredMessage,
    /// The encoded message, as stored.
    pub raw: Bytes,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Metadata {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    /// The last few memberships, so a snapshot at an older index carries the one in force there.
    pub membership_history: Vec<StoredMembership>,
    pub topics: BTreeMap<String, TopicConfig>,
    pub queues: BTreeMap<(String, u32), QueueRange>,
    dedupe: HashMap<(String, String), Seen>,
    dedupe_order: VecDeque<(i64, String, String)>,
    pub consumption: Consumption,
}

/// [`Metadata`] as a snapshot carries it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SnapshotData {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    topics: Vec<TopicConfig>,
    pub queues: Vec<(String, u32, QueueRange)>,
    dedupe: Vec<(String, String, Seen)>,
    #[serde(default)]
    groups: Vec<GroupConfig>,
    #[serde(default)]
    pops: Vec<(String, String, u32, PopQueue)>,
    #[serde(default)]
    topic_epochs: Vec<(String, u64)>,
}

impl SnapshotData {
    pub fn empty() -> SnapshotData {
        Metadata::default().into()
    }
}

impl From<Metadata> for SnapshotData {
    fn from(m: Metadata) -> SnapshotData {
        SnapshotData {
            last_applied: m.last_applied,
            membership: m.membership,
            topics: m.topics.into_values().collect(),
            queues: m.queues.into_iter().map(|((t, q), r)| (t, q, r)).collect(),
            dedupe: m.dedupe.into_iter().map(|((t, id), s)| (t, id, s)).collect(),
            groups: m.consumption.groups.into_values().collect(),
            pops: m.consumption.queues.into_iter().map(|((g, t, q), p)| (g, t, q, p)).collect(),
            topic_epochs: m.consumption.topics.into_iter().collect(),
        }
    }
}

impl From<SnapshotData> for Metadata {
    fn from(s: SnapshotData) -> Metadata {
        let mut m = Metadata {
            last_applied: s.last_applied,
            membership_history: vec![s.membership.clone()],
            membership: s.membership,
            topics: s.topics.into_iter().map(|t| (t.name.clone(), t)).collect(),
            queues: s.queues.into_iter().map(|(t, q, r)| ((t, q), r)).collect(),
            dedupe: s.dedupe.into_iter().map(|(t, id, s)| ((t, id), s)).collect(),
            dedupe_order: VecDeque::new(),
            consumption: Consumption {
                groups: s.groups.into_iter().map(|g| (g.name.clone(), g)).collect(),
                queues: s.pops.into_iter().map(|(g, t, q, p)| ((g, t, q), p)).collect(),
                topics: s.topic_epochs.into_iter().collect(),
            },
        };
        m.rebuild_dedupe_order();
        m
    }
}

/// Keys changed since the last checkpoint.
#[derive(Default)]
struct Dirty {
    topics: BTreeSet<String>,
    queues: BTreeSet<(String, u32)>,
    dedupe: BTreeSet<(String, String)>,
    consumption: Changed,
}

struct Inner {
    tree: sled::Tree,
    db: sled::Db,
    queues: Queues,
    log: LogReader,
    meta: RwLock<Metadata>,
    dirty: Mutex<Dirty>,
    /// Held through a checkpoint; the dedupe journal is only written under it.
    checkpointing: Mutex<DedupeJournal>,
    /// 0: none requested.
    snapshot_target: std::sync::atomic::AtomicU64,
    options: BrokerOptions,
    /// Per topic, bumped whenever something a waiting receiver may want is applied.
    watchers: Mutex<HashMap<String, tokio::sync::watch::Sender<u64>>>,
}

/// A cheap, cloneable handle on the broker state, shared by the state machine (writes) and the
/// proxy and admin API (reads).
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

const KEY_APPLIED: &str = "applied";
const KEY_MEMBERSHIP: &str = "membership";
const KEY_MEMBERSHIP_HISTORY: &str = "membership_history";
const MEMBERSHIP_HISTORY: usize = 8;

fn topic_key(t: &str) -> String {
    format!("t/{t}")
}
fn queue_key(t: &str, q: u32) -> String {
    format!("q/{t}/{q}")
}
fn group_key(g: &str) -> String {
    format!("g/{g}")
}
fn epoch_key(t: &str) -> String {
    format!("e/{t}")
}
/// Names never contain `/` (see `validate_name`).
fn pop_key((g, t, q): &(String, String, u32)) -> String {
    format!("p/{g}/{t}/{q}")
}

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("metadata serializes")
}

fn parse<T: for<'de> Deserialize<'de>>(key: &[u8], v: &[u8]) -> Result<T, BrokerError> {
    serde_json::from_slice(v)
        .map_err(|e| BrokerError::CorruptEntry(format!("metadata key {}: {e}", String::from_utf8_lossy(key))))
}

impl Broker {
    pub fn open(options: BrokerOptions, log: LogReader) -> Result<Broker, BrokerError> {
        let db =
            sled::Config::new().path(options.dir.join("meta")).flush_every_ms(None).cache_capacity(16 << 20).open()?;
        let tree = db.open_tree("broker")?;
        let mut meta = Metadata::default();
        for item in tree.iter() {
            let (k, v) = item?;
            let key = std::str::from_utf8(&k).unwrap_or_default();
            if key == KEY_APPLIED {
                meta.last_applied = parse(&k, &v)?;
            } else if key == KEY_MEMBERSHIP {
                meta.membership = parse(&k, &v)?;
            } else if key == KEY_MEMBERSHIP_HISTORY {
                meta.membership_history = parse(&k, &v)?;
            } else if key.starts_with("t/") {
                let t: TopicConfig = parse(&k, &v)?;
                meta.topics.insert(t.name.clone(), t);
            } else if let Some(rest) = key.strip_prefix("q/") {
                let (t, q) = rest.rsplit_once('/').unwrap_or_default();
                let q: u32 = q.parse().map_err(|_| BrokerError::CorruptEntry(format!("metadata key {key}")))?;
                meta.queues.insert((t.to_string(), q), parse(&k, &v)?);
            } else if let Some(t) = key.strip_prefix("e/") {
                meta.consumption.topics.insert(t.to_string(), parse(&k, &v)?);
            } else if key.starts_with("g/") {
                let g: GroupConfig = parse(&k, &v)?;
                meta.consumption.groups.insert(g.name.clone(), g);
            } else if let Some(rest) = key.strip_prefix("p/") {
                let bad = || BrokerError::CorruptEntry(format!("metadata key {key}"));
                let mut parts = rest.splitn(3, '/');
                let (Some(g), Some(t), Some(q)) = (parts.next(), parts.next(), parts.next()) else { return Err(bad()) };
                let q: u32 = q.parse().map_err(|_| bad())?;
                meta.consumption.queues.insert((g.to_string(), t.to_string(), q), parse(&k, &v)?);
            }
        }
        let (journal, dedupe) = DedupeJournal::open(&options.dir.join("dedupe.journal"))?;
        meta.dedupe = dedupe;
        meta.rebuild_dedupe_order();
        let queues = Queues::new(options.dir.join("queues"), options.cq_records_per_file);
        let inner = Inner {
            tree,
            db,
            queues,
            log,
            meta: RwLock::new(meta),
            dirty: Mutex::new(Dirty::default()),
            checkpointing: Mutex::new(journal),
            snapshot_target: std::sync::atomic::AtomicU64::new(0),
            options,
            watchers: Mutex::new(HashMap::new()),
        };
        Ok(Broker { inner: Arc::new(inner) })
    }

    pub(crate) fn meta(&self) -> std::sync::RwLockReadGuard<'_, Metadata> {
        self.inner.meta.read().expect("metadata lock")
    }

    pub fn last_applied(&self) -> Option<LogId> {
        self.meta().last_applied
    }

    pub fn membership(&self) -> StoredMembership {
        self.meta().membership.clone()
    }

    pub fn topic(&self, name: &str) -> Option<TopicConfig> {
        self.meta().topics.get(name).cloned()
    }

    pub fn topics(&self) -> Vec<TopicConfig> {
        self.meta().topics.values().cloned().collect()
    }

    pub fn queue_status(&self, topic: &str) -> Vec<QueueStatus> {
        let meta = self.meta();
        let Some(t) = meta.topics.get(topic) else { return Vec::new() };
        (0..t.queues)
            .map(|q| {
                let r = meta.queues.get(&(topic.to_string(), q)).copied().unwrap_or_default();
                QueueStatus { topic: topic.to_string(), queue_id: q, start: r.start, next: r.next }
            })
            .collect()
    }

    /// Applies one committed entry's command and records it as applied, in one step under the
    /// metadata lock, so a checkpoint never sees the effects without `last_applied` (a restart
    /// would apply the entry twice). `Err` only for failures that must stop the node (disk
    /// errors): bad commands are answered, not raised, so every replica answers the same.
    pub fn apply(&self, log_id: LogId, command: Bytes) -> Result<Reply, BrokerError> {
        let mut meta = self.inner.meta.write().expect("metadata lock");
        let mut dirty = self.inner.dirty.lock().expect("dirty lock");
        let reply = match Command::decode(command) {
            Ok(command) => self.apply_command(&mut meta, &mut dirty, log_id.index, command)?,
            Err(e) => {
                tracing::error!(index = log_id.index, error = %e, "skipping an entry that is not a broker command");
                Reply::Rejected(e.to_string())
            }
        };
        meta.last_applied = Some(log_id);
        Ok(reply)
    }

    fn apply_command(
        &self,
        meta: &mut Metadata,
        dirty: &mut Dirty,
        index: u64,
        command: Command,
    ) -> Result<Reply, BrokerError> {
        match command {
            Command::Send(batch) => {
                let topic = batch.topic.clone();
                let reply = self.apply_send(meta, dirty, index, batch, true);
                self.wake(&topic);
                reply
            }
            Command::Consume(c) => Ok(self.apply_consume(meta, dirty, index, c)),
            Command::DeadLetter(d) => self.apply_dead_letter(meta, dirty, index, d),
            Command::Admin(AdminCommand::CreateTopic(t)) => {
                if let Err(e) = t.validate() {
                    return Ok(Reply::Rejected(e.to_string()));
                }
                match meta.topics.get(&t.name) {
                    Some(existing) if *existing == t => Ok(Reply::Applied),
                    Some(_) => Ok(Reply::TopicExists(t.name)),
                    None => {
                        dirty.topics.insert(t.name.clone());
                        meta.consumption.topic_created(&t.name, index, &mut dirty.consumption);
                        meta.topics.insert(t.name.clone(), t);
                        Ok(Reply::Applied)
                    }
                }
            }
            Command::Admin(AdminCommand::DeleteTopic { name }) => {
                meta.consumption.topic_deleted(&name, &mut dirty.consumption);
                if meta.topics.remove(&name).is_none() {
                    return Ok(Reply::TopicNotFound(name));
                }
                dirty.topics.insert(name.clone());
                let gone: Vec<(String, u32)> = meta.queues.keys().filter(|(t, _)| *t == name).cloned().collect();
                for key in gone {
                    meta.queues.remove(&key);
                    dirty.queues.insert(key);
                }
                self.inner.queues.remove_topic(&name)?;
                self.wake(&name);
                Ok(Reply::Applied)
            }
        }
    }

    fn apply_send(
        &self,
        meta: &mut Metadata,
        dirty: &mut Dirty,
        index: u64,
        batch: SendBatch,
        dedupe: bool,
    ) -> Result<Reply, BrokerError> {
        let Some(topic) = meta.topics.get(&batch.topic) else { return Ok(Reply::TopicNotFound(batch.topic)) };
        if batch.queue_id >= topic.queues {
            return Ok(Reply::Rejected(format!("topic {} has no queue {}", batch.topic, batch.queue_id)));
        }
        if batch.messages.len() > MAX_MESSAGES_PER_ENTRY {
            return Ok(Reply::Rejected(format!("more than {MAX_MESSAGES_PER_ENTRY} messages in one send")));
        }
        let mut decoded = Vec::with_capacity(batch.messages.len());
        for raw in &batch.messages {
            match StoredMessage::decode(raw.clone()) {
                Ok(m) => decoded.push(m),
                Err(e) => return Ok(Reply::Rejected(format!("undecodable message: {e}"))),
            }
        }
        let now = batch.store_timestamp_ms;
        meta.expire_dedupe(now - self.inner.options.dedupe_window.as_millis() as i64, dirty);
        let queue = self.inner.queues.get(&batch.topic, batch.queue_id)?;
        let key = (batch.topic.clone(), batch.queue_id);
        let mut range = meta.queues.get(&key).copied().unwrap_or_default();
        let mut outcomes = Vec::with_capacity(decoded.len());
        for (ordinal, (msg, raw)) in decoded.iter().zip(&batch.messages).enumerate() {
            let dedupe_key = (batch.topic.clone(), msg.message_id.clone());
            if dedupe
                && !msg.message_id.is_empty()
                && let Some(seen) = meta.dedupe.get(&dedupe_key)
            {
                outcomes.push(SendOutcome {
                    message_id: msg.message_id.clone(),
                    queue_id: seen.queue_id,
                    offset: seen.offset,
                    duplicate: true,
                });
                continue;
            }
            let offset = range.next;
            let record = CqRecord {
                position: queue_position(index, ordinal),
                size: raw.len() as u32,
                tag_hash: tag_hash(&msg.tag),
            };
            queue.put(offset, &record)?;
            range.next += 1;
            if dedupe && !msg.message_id.is_empty() {
                let seen = Seen { queue_id: batch.queue_id, offset, store_timestamp_ms: now, index };
                meta.dedupe.insert(dedupe_key.clone(), seen);
                meta.dedupe_order.push_back((now, dedupe_key.0.clone(), dedupe_key.1.clone()));
                dirty.dedupe.insert(dedupe_key);
            }
            outcomes.push(SendOutcome {
                message_id: msg.message_id.clone(),
                queue_id: batch.queue_id,
                offset,
                duplicate: false,
            });
        }
        meta.queues.insert(key.clone(), range);
        dirty.queues.insert(key);
        Ok(Reply::Sent(outcomes))
    }

    fn apply_consume(&self, meta: &mut Metadata, dirty: &mut Dirty, index: u64, command: ConsumeCommand) -> Reply {
        let wakes = command.wakes(&meta.consumption).map(str::to_string);
        let outcome = meta.consumption.apply(index, &command, &mut dirty.consumption);
        if let (ConsumeCommand::CreateGroup(g), ConsumeOutcome::Done) = (&command, &outcome) {
            // The dead-letter topic exists from the start, so it can be subscribed to at once.
            let dlq = dead_letter_topic_config(&g.name);
            if !meta.topics.contains_key(&dlq.name) {
                dirty.topics.insert(dlq.name.clone());
                meta.topics.insert(dlq.name.clone(), dlq);
            }
        }
        if let Some(topic) = wakes {
            self.wake(&topic);
        }
        Reply::Consume(outcome)
    }

    /// Ends the delivery, then stores the message's copy in the group's dead-letter topic.
    fn apply_dead_letter(
        &self,
        meta: &mut Metadata,
        dirty: &mut Dirty,
        index: u64,
        d: DeadLetter,
    ) -> Result<Reply, BrokerError> {
        let receipt = dead_letter_receipt(&d);
        let with_copy = dead_letter_copy(&d).is_some();
        let frees = meta.consumption.frees_message_group(&receipt);
        if !meta.consumption.dead_letter(index, &receipt, with_copy, &mut dirty.consumption) {
            return Ok(Reply::Consume(ConsumeOutcome::StaleReceipt));
        }
        if frees {
            self.wake(&d.topic);
        }
        let dlq = dead_letter_topic_config(&d.group);
        let Some(batch) = dead_letter_copy(&d).cloned() else {
            // The message was gone (retention): the delivery ends all the same.
            return Ok(Reply::Consume(ConsumeOutcome::Done));
        };
        if !meta.topics.contains_key(&dlq.name) {
            dirty.topics.insert(dlq.name.clone());
            meta.topics.insert(dlq.name.clone(), dlq);
        }
        let reply = self.apply_send(meta, dirty, index, batch, false)?;
        self.wake(&dead_letter_topic(&d.group));
        Ok(match reply {
            Reply::Sent(_) => Reply::Consume(ConsumeOutcome::Done),
            other => other,
        })
    }

    /// A receiver of `topic`'s changes: its value moves whenever a message arrives or a
    /// consumption command for the topic applies.
    pub fn watch(&self, topic: &str) -> tokio::sync::watch::Receiver<u64> {
        let mut watchers = self.inner.watchers.lock().expect("watchers lock");
        watchers.entry(topic.to_string()).or_insert_with(|| tokio::sync::watch::channel(0).0).subscribe()
    }

    fn wake(&self, topic: &str) {
        let mut watchers = self.inner.watchers.lock().expect("watchers lock");
        if let Some(tx) = watchers.get(topic) {
            if tx.receiver_count() == 0 {
                watchers.remove(topic);
            } else {
                tx.send_modify(|v| *v += 1);
            }
        }
    }

    /// Records what an entry without a command changes (blank, membership).
    pub fn set_applied(&self, log_id: LogId, membership: Option<StoredMembership>) {
        let mut meta = self.inner.meta.write().expect("metadata lock");
        meta.last_applied = Some(log_id);
        if let Some(m) = membership {
            meta.membership_history.push(m.clone());
            let excess = meta.membership_history.len().saturating_sub(MEMBERSHIP_HISTORY);
            meta.membership_history.drain(..excess);
            meta.membership = m;
        }
    }

    /// Makes the applied state durable: the metadata as of now is captured, the queues are synced
    /// (which covers every record that metadata describes, and maybe more), then the metadata is
    /// written in one atomic batch. Runs beside apply, which only waits while the batch is built.
    pub fn checkpoint(&self) -> Result<(), BrokerError> {
        let mut journal = self.inner.checkpointing.lock().expect("checkpoint lock");
        let (batch, pending) = {
            let meta = self.meta();
            let mut dirty = self.inner.dirty.lock().expect("dirty lock");
            let mut batch = sled::Batch::default();
            for t in std::mem::take(&mut dirty.topics) {
                match meta.topics.get(&t) {
                    Some(cfg) => batch.insert(topic_key(&t).as_bytes(), json(cfg)),
                    None => batch.remove(topic_key(&t).as_bytes()),
                }
            }
            for (t, q) in std::mem::take(&mut dirty.queues) {
                match meta.queues.get(&(t.clone(), q)) {
                    Some(r) => batch.insert(queue_key(&t, q).as_bytes(), json(r)),
                    None => batch.remove(queue_key(&t, q).as_bytes()),
                }
            }
            let changed = std::mem::take(&mut dirty.consumption);
            for g in changed.groups {
                match meta.consumption.groups.get(&g) {
                    Some(cfg) => batch.insert(group_key(&g).as_bytes(), json(cfg)),
                    None => batch.remove(group_key(&g).as_bytes()),
                }
            }
            for key in changed.queues {
                match meta.consumption.queues.get(&key) {
                    Some(p) => batch.insert(pop_key(&key).as_bytes(), json(p)),
                    None => batch.remove(pop_key(&key).as_bytes()),
                }
            }
            for t in changed.topics {
                match meta.consumption.topics.get(&t) {
                    Some(epoch) => batch.insert(epoch_key(&t).as_bytes(), json(epoch)),
                    None => batch.remove(epoch_key(&t).as_bytes()),
                }
            }
            let pending = journal.prepare(std::mem::take(&mut dirty.dedupe).iter(), &meta.dedupe);
            batch.insert(KEY_APPLIED, json(&meta.last_applied));
            batch.insert(KEY_MEMBERSHIP, json(&meta.membership));
            batch.insert(KEY_MEMBERSHIP_HISTORY, json(&meta.membership_history));
            (batch, pending)
        };
        // Queue records and the dedupe journal first: metadata must never claim more than they
        // hold on disk.
        journal.commit(pending)?;
        self.inner.queues.sync()?;
        self.inner.tree.apply_batch(batch)?;
        self.inner.db.flush()?;
        Ok(())
    }

    /// How often [`Broker::checkpoint`] should run.
    pub fn checkpoint_interval(&self) -> std::time::Duration {
        self.inner.options.checkpoint_interval
    }

    /// The message at `offset` of (`topic`, `queue_id`), read from the log without copying the body.
    pub fn read(&self, topic: &str, queue_id: u32, offset: u64) -> Result<Option<StoredEntry>, BrokerError> {
        let range = self.meta().queues.get(&(topic.to_string(), queue_id)).copied().unwrap_or_default();
        if offset < range.start || offset >= range.next {
            return Ok(None);
        }
        let Some(record) = self.inner.queues.get(topic, queue_id)?.get(offset) else { return Ok(None) };
        let (index, ordinal) = split_position(record.position);
        let Some(entry) = self.inner.log.read(index)? else { return Ok(None) };
        let Some(batch) = Command::decode(entry.payload).ok().and_then(Command::stored_batch) else {
            return Err(BrokerError::CorruptEntry(format!("queue record points at entry {index}")));
        };
        let raw = batch
            .messages
            .get(ordinal)
            .ok_or_else(|| BrokerError::CorruptEntry(format!("entry {index} has no message {ordinal}")))?;
        let message = StoredMessage::decode(raw.clone()).map_err(|e| BrokerError::CorruptEntry(e.to_string()))?;
        Ok(Some(StoredEntry {
            topic: topic.to_string(),
            queue_id,
            offset,
            store_timestamp_ms: batch.store_timestamp_ms,
            size: raw.len() as u32,
            message,
            raw: raw.clone(),
        }))
    }

    /// The ConsumeQueue record at `offset`, if it is readable.
    pub(crate) fn queue_record(
        &self,
        topic: &str,
        queue_id: u32,
        offset: u64,
    ) -> Result<Option<CqRecord>, BrokerError> {
        let range = self.meta().queues.get(&(topic.to_string(), queue_id)).copied().unwrap_or_default();
        if offset < range.start || offset >= range.next {
            return Ok(None);
        }
        Ok(self.inner.queues.get(topic, queue_id)?.get(offset))
    }

    /// Whether `r` names a delivery that is in flight now.
    pub fn is_current(&self, r: &Receipt) -> bool {
        let meta = self.meta();
        let q = meta.consumption.queues.get(&r.key());
        q.and_then(|q| q.inflight.get(&r.offset)).is_some_and(|f| f.generation == r.generation)
    }

    /// Which incarnation of a topic exists: the index of the entry that created it.
    pub fn topic_epoch(&self, name: &str) -> Option<u64> {
        self.meta().consumption.topics.get(name).copied()
    }

    pub fn group(&self, name: &str) -> Option<GroupConfig> {
        self.meta().consumption.groups.get(name).cloned()
    }

    pub fn groups(&self) -> Vec<GroupConfig> {
        self.meta().consumption.groups.values().cloned().collect()
    }

    /// Each group's progress on each topic it has consumed.
    pub fn group_progress(&self) -> Vec<GroupProgress> {
        let meta = self.meta();
        let mut out: Vec<GroupProgress> = Vec::new();
        for ((group, topic, q), pop) in &meta.consumption.queues {
            let range = meta.queues.get(&(topic.clone(), *q)).copied().unwrap_or_default();
            let waiting = range.next.saturating_sub(pop.position.max(range.start));
            let inflight = pop.inflight.len() as u64;
            let held = pop.held.len() as u64;
            match out.last_mut() {
                Some(p) if p.group == *group && p.topic == *topic => {
                    p.lag += waiting + inflight + held;
                    p.inflight += inflight;
                }
                _ => out.push(GroupProgress {
                    group: group.clone(),
                    topic: topic.clone(),
                    lag: waiting + inflight + held,
                    inflight,
                }),
            }
        }
        out
    }

    /// The first offset of (`topic`, `queue_id`) stored at or after `time_ms` (the queue's end
    /// if none): store times grow along a queue, so a binary search finds it.
    pub fn offset_at_time(&self, topic: &str, queue_id: u32, time_ms: i64) -> Result<u64, BrokerError> {
        let range = self.meta().queues.get(&(topic.to_string(), queue_id)).copied().unwrap_or_default();
        let (mut lo, mut hi) = (range.start, range.next);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.read(topic, queue_id, mid)? {
                Some(e) if e.store_timestamp_ms < time_ms => lo = mid + 1,
                _ => hi = mid,
            }
        }
        Ok(lo)
    }

    /// Finds a message by id: the dedupe window first, then a scan of every queue.
    pub fn find(&self, message_id: &str) -> Result<Option<StoredEntry>, BrokerError> {
        let hit = self.meta().dedupe.iter().find(|((_, id), _)| id == message_id).map(|((t, _), s)| (t.clone(), *s));
        if let Some((topic, seen)) = hit
            && let Some(e) = self.read(&topic, seen.queue_id, seen.offset)?
        {
            return Ok(Some(e));
        }
        let queues: Vec<((String, u32), QueueRange)> =
            self.meta().queues.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for ((topic, q), range) in queues {
            for offset in range.start..range.next {
                if let Some(e) = self.read(&topic, q, offset)?
                    && e.message.message_id == message_id
                {
                    return Ok(Some(e));
                }
            }
        }
        Ok(None)
    }

    /// Where the next snapshot is taken: the retention purge point.
    pub fn set_snapshot_target(&self, index: u64) {
        self.inner.snapshot_target.fetch_max(index, std::sync::atomic::Ordering::AcqRel);
    }

    pub fn snapshot_target(&self) -> Option<u64> {
        match self.inner.snapshot_target.load(std::sync::atomic::Ordering::Acquire) {
            0 => None,
            t => Some(t),
        }
    }

    /// The state as it was right after applying `at` (which must not be after `last_applied`):
    /// queue ranges cut back to what entries up to `at` wrote, the dedupe window as of then, the
    /// membership in force then. Topics are today's: replaying the later entries recreates and
    /// deletes them the same way, so the result converges.
    pub(crate) fn snapshot_data_at(
        &self,
        at: LogId,
        previous: Option<SnapshotData>,
    ) -> Result<SnapshotData, BrokerError> {
        let mut m = self.meta().clone();
        m.consumption = self.consumption_at(at.index, previous)?;
        for ((topic, q), range) in m.queues.iter_mut() {
            let cq = self.inner.queues.get(topic, *q)?;
            let (mut lo, mut hi) = (range.start, range.next);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match cq.get(mid) {
                    Some(rec) if split_position(rec.position).0 <= at.index => lo = mid + 1,
                    _ => hi = mid,
                }
            }
            range.next = lo;
        }
        m.dedupe.retain(|_, s| s.index <= at.index);
        if let Some(old) =
            m.membership_history.iter().rev().find(|sm| sm.log_id().as_ref().is_none_or(|l| l.index <= at.index))
        {
            m.membership = old.clone();
        }
        m.last_applied = Some(at);
        Ok(m.into())
    }

    /// Consumer groups and POP state right after applying `at`: the previous snapshot's, with the
    /// consumption commands since then replayed (they are still in the log: it is only purged up
    /// to a snapshot). Today's state can't simply be cut back, as queue ranges are.
    fn consumption_at(&self, at: u64, previous: Option<SnapshotData>) -> Result<Consumption, BrokerError> {
        let (mut c, from) = match previous {
            Some(p) => {
                let from = p.last_applied.map_or(0, |l| l.index + 1);
                (Metadata::from(p).consumption, from)
            }
            None => (Consumption::default(), 0),
        };
        let mut ignored = Changed::default();
        for index in from..=at {
            let Some(record) = self.inner.log.read(index)? else { continue };
            if !is_command_record(&record.meta) || is_send(&record.payload) {
                continue;
            }
            match Command::decode(record.payload) {
                Ok(Command::Consume(command)) => {
                    c.apply(index, &command, &mut ignored);
                }
                Ok(Command::DeadLetter(d)) => {
                    c.dead_letter(index, &dead_letter_receipt(&d), dead_letter_copy(&d).is_some(), &mut ignored);
                }
                // As `apply_command` does: a valid topic new to the state is created.
                Ok(Command::Admin(AdminCommand::CreateTopic(t))) if t.validate().is_ok() => {
                    c.topic_created(&t.name, index, &mut ignored)
                }
                Ok(Command::Admin(AdminCommand::DeleteTopic { name })) => c.topic_deleted(&name, &mut ignored),
                _ => {}
            }
        }
        Ok(c)
    }

    /// After the log is purged up to a snapshot, queue records that point below it are gone:
    /// each queue now starts where the snapshot's range ends. Local bookkeeping only.
    pub(crate) fn forget_before(&self, snapshot: &SnapshotData) -> Result<(), BrokerError> {
        let mut meta = self.inner.meta.write().expect("metadata lock");
        let mut dirty = self.inner.dirty.lock().expect("dirty lock");
        for (topic, q, at) in &snapshot.queues {
            let key = (topic.clone(), *q);
            if let Some(range) = meta.queues.get_mut(&key)
                && range.start < at.next
            {
                range.start = at.next;
                self.inner.queues.get(topic, *q)?.purge_below(at.next)?;
                dirty.queues.insert(key);
            }
        }
        Ok(())
    }

    /// Replaces all state with a snapshot's. Queue records below each queue's `next` that this
    /// node lacks are out of reach from now on (their entries are not in its log).
    pub(crate) fn install(&self, snapshot: SnapshotData) -> Result<(), BrokerError> {
        let mut snapshot = Metadata::from(snapshot);
        {
            let mut meta = self.inner.meta.write().expect("metadata lock");
            let mut dirty = self.inner.dirty.lock().expect("dirty lock");
            for t in meta.topics.keys().chain(snapshot.topics.keys()) {
                dirty.topics.insert(t.clone());
            }
            for t in meta.topics.keys().filter(|t| !snapshot.topics.contains_key(*t)) {
                self.inner.queues.remove_topic(t)?;
            }
            for (key, range) in snapshot.queues.iter_mut() {
                let queue = self.inner.queues.get(&key.0, key.1)?;
                let have = meta.queues.get(key).copied().unwrap_or_default();
                if have.next < range.next {
                    // This node never applied those records: only what follows the snapshot exists here.
                    range.start = range.next;
                    queue.purge_below(range.next)?;
                }
            }
            for key in meta.queues.keys().chain(snapshot.queues.keys()) {
                dirty.queues.insert(key.clone());
            }
            for key in meta.dedupe.keys().chain(snapshot.dedupe.keys()) {
                dirty.dedupe.insert(key.clone());
            }
            for g in meta.consumption.groups.keys().chain(snapshot.consumption.groups.keys()) {
                dirty.consumption.groups.insert(g.clone());
            }
            for key in meta.consumption.queues.keys().chain(snapshot.consumption.queues.keys()) {
                dirty.consumption.queues.insert(key.clone());
            }
            for t in meta.consumption.topics.keys().chain(snapshot.consumption.topics.keys()) {
                dirty.consumption.topics.insert(t.clone());
            }
            *meta = snapshot;
        }
        self.checkpoint()
    }
}

/// The message copy a dead letter carries, if it is one for the group's dead-letter topic.
fn dead_letter_copy(d: &DeadLetter) -> Option<&SendBatch> {
    d.batch.as_ref().filter(|b| b.topic == dead_letter_topic(&d.group) && b.queue_id == 0)
}

fn dead_letter_receipt(d: &DeadLetter) -> Receipt {
    Receipt {
        group: d.group.clone(),
        topic: d.topic.clone(),
        queue_id: d.queue_id,
        offset: d.offset,
        generation: d.generation,
    }
}

impl Metadata {
    fn rebuild_dedupe_order(&mut self) {
        let mut order: Vec<(i64, String, String)> =
            self.dedupe.iter().map(|((t, id), s)| (s.store_timestamp_ms, t.clone(), id.clone())).collect();
        order.sort();
        self.dedupe_order = order.into();
    }

    fn expire_dedupe(&mut self, before_ms: i64, dirty: &mut Dirty) {
        while self.dedupe_order.front().is_some_and(|(ts, _, _)| *ts < before_ms) {
            let (_, t, id) = self.dedupe_order.pop_front().expect("non-empty");
            let key = (t, id);
            if self.dedupe.get(&key).is_some_and(|s| s.store_timestamp_ms < before_ms) {
                self.dedupe.remove(&key);
                dirty.dedupe.insert(key);
            }
        }
    }
}
