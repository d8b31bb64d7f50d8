//! [`Broker`]: the live state on one node — the [`State`] in memory, its ConsumeQueue files,
//! its checkpoints in sled and the dedupe journal — shared by the Raft state machine (apply,
//! snapshots) and the services (reads).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use bytes::Bytes;

use crate::broker::dedupe_journal::{DedupeJournal, JournalMark};
use crate::broker::effects::Effects;
use crate::broker::entry_cache::EntryCache;
use crate::broker::queues::Queues;
use crate::broker::state::{Applied, LogPosition, SNAPSHOT_FORMAT, State};
use crate::broker::timer_wheel::{TimerWheel, WheelMark};
use crate::broker::{BrokerError, Reply};
use crate::store::{LogReader, MessageIndex, Place};

#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// Holds `meta/` (sled), `queues/` (ConsumeQueues) and the dedupe journal.
    pub dir: PathBuf,
    pub cq_records_per_file: u64,
    /// Entries per message index file (`store::MessageIndex`).
    pub message_index_entries_per_file: u32,
    /// How often applied state is made durable.
    pub checkpoint_interval: Duration,
    /// The data partition (Raft group) this state is of, which handles and ids name
    /// ([`PartitionId::NONE`](crate::broker::position::PartitionId::NONE) for the metadata group).
    pub partition: crate::broker::position::PartitionId,
    /// Whether this group holds the cluster's metadata: the metadata group, or in a data
    /// directory of layout 2 the first data group. The others read topics and consumer groups
    /// from what placements copied into their partition.
    pub holds_metadata: bool,
}

/// Sled keys besides the tables' rows.
pub(crate) const KEY_APPLIED: &str = "@applied";
pub(crate) const KEY_JOURNAL: &str = "@journal";
pub(crate) const KEY_TIMERS: &str = "@timers";
const KEY_SCHEMA: &str = "@schema";
/// The layout of the sled tree and the journal; a directory written with another is refused
/// (its files are left as they are). 4: the dedupe journal keyed by a hash (`dedupe.rs`); 5:
/// pending timers in a timing wheel of files (`timer_wheel.rs`) instead of sled rows.
const SCHEMA: u32 = 5;
/// The shape of the rows (the snapshot's: the same types), `SNAPSHOT_FORMAT` of the release that
/// last wrote them. Rows of a newer shape are refused, never read with their new fields dropped.
const KEY_ROWS_FORMAT: &str = "@rows";

pub(crate) struct Inner {
    pub tree: sled::Tree,
    pub db: sled::Db,
    pub queues: Queues,
    /// Message id → where the message is (node-local, written with the ConsumeQueues).
    pub message_index: MessageIndex,
    pub log: LogReader,
    /// Message batches of recently read entries, decoded once.
    pub entries: Arc<EntryCache>,
    pub state: RwLock<State>,
    /// Held through a checkpoint or an install: one at a time, and only they write the journal
    /// and the timer wheel's files.
    pub journal: Mutex<DedupeJournal>,
    /// The applied position the last checkpoint of this run made durable (`None`: none yet).
    /// Written under `journal`.
    pub checkpointed: Mutex<Option<Option<LogPosition>>>,
    /// Set when writing state to disk failed in a way that leaves the disk unknown (a failed
    /// fsync, a ConsumeQueue write lost): the node must stop acknowledging, not carry on.
    pub failure: Mutex<Option<String>>,
    /// 0: none requested.
    pub snapshot_target: AtomicU64,
    pub options: BrokerOptions,
    /// Per topic, bumped whenever something a waiting receiver may want is applied.
    pub watchers: Mutex<HashMap<String, tokio::sync::watch::Sender<u64>>>,
    /// Bumped whenever a metadata command applies: data groups place it without polling.
    pub metadata_changes: tokio::sync::watch::Sender<u64>,
    /// Bumped whenever a timer or a transaction check is scheduled, or a snapshot installed: the
    /// leader's timer and check jobs sleep until the earliest is due instead of polling.
    pub schedule_changes: tokio::sync::watch::Sender<u64>,
    /// Where repairs of the ConsumeQueues are counted and noted, once the node set it.
    pub meters: std::sync::OnceLock<crate::metrics::Meters>,
    /// ConsumeQueue records (topic, queue, offset) found damaged that could not be rebuilt
    /// (`queue_repair.rs`); bounded.
    pub unrebuilt: Mutex<std::collections::HashSet<(String, u32, u64)>>,
}

/// A cheap, cloneable handle on the broker state.
#[derive(Clone)]
pub struct Broker {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("metadata serializes")
}

fn parse<T: for<'de> serde::Deserialize<'de>>(key: &str, v: &[u8]) -> Result<T, BrokerError> {
    serde_json::from_slice(v).map_err(|e| BrokerError::CorruptEntry(format!("metadata key {key}: {e}")))
}

impl Broker {
    /// Opens the state as the last checkpoint left it. The log from `last_applied` on is then
    /// applied again by Raft: apply is deterministic, so the replay reaches the state the other
    /// replicas have.
    pub fn open(options: BrokerOptions, log: LogReader) -> Result<Broker, BrokerError> {
        std::fs::create_dir_all(&options.dir)
            .map_err(|source| crate::store::StoreError::Io { path: options.dir.clone(), source })?;
        let db =
            sled::Config::new().path(options.dir.join("meta")).flush_every_ms(None).cache_capacity(16 << 20).open()?;
        let tree = db.open_tree("broker")?;
        let mut state = State::default();
        let found = match tree.get(KEY_SCHEMA)? {
            Some(v) => Some(parse::<u32>(KEY_SCHEMA, &v)?),
            None => None,
        };
        match found {
            Some(SCHEMA) => {}
            None if tree.is_empty() => {
                tree.insert(KEY_SCHEMA, json(&SCHEMA))?;
                db.flush()?;
            }
            _ => {
                let layout = found.map_or("no".to_string(), |v| v.to_string());
                return Err(BrokerError::CorruptEntry(format!(
                    "{} was written by another RockRaft version (layout {layout}, this one reads {SCHEMA}); start \
                     the node on an empty data directory, and it catches up from the other replicas",
                    options.dir.display()
                )));
            }
        }
        let rows_format = tree.get(KEY_ROWS_FORMAT)?.map(|v| parse::<u32>(KEY_ROWS_FORMAT, &v)).transpose()?;
        match rows_format {
            Some(format) if format > SNAPSHOT_FORMAT => {
                return Err(BrokerError::CorruptEntry(format!(
                    "{}: its rows are of format {format}, written by a newer release; this one reads formats up to \
                     {SNAPSHOT_FORMAT}: run the newer release on it, or start this one on an empty data directory",
                    options.dir.display()
                )));
            }
            Some(format) if format == SNAPSHOT_FORMAT => {}
            // Earlier shapes read with defaults for what they lack; from now on rows are of this one.
            _ => {
                tree.insert(KEY_ROWS_FORMAT, json(&SNAPSHOT_FORMAT))?;
                db.flush()?;
            }
        }
        let (journal_mark, wheel_mark) = load_rows(&tree, &mut state)?;
        let (journal, dedupe) = DedupeJournal::open(&options.dir, journal_mark)?;
        state.data.dedupe = dedupe;
        state.data.timers = TimerWheel::open(&options.dir, wheel_mark)?;
        // Loaded rows are what the last checkpoint wrote: nothing to write again.
        state.data.dedupe.take_changed();
        state.prepare_local();
        for (prefix, table) in state.tables() {
            table.attach(&tree, prefix);
        }
        let queues = Queues::open(options.dir.join("queues"), options.cq_records_per_file)?;
        let (message_index, index_created) =
            MessageIndex::open(&options.dir.join("message-index"), options.message_index_entries_per_file)?;
        let entries = Arc::new(EntryCache::default());
        let released = Arc::clone(&entries);
        log.on_purge(Box::new(move |first_index| released.release_below(first_index)));
        let inner = Inner {
            tree,
            db,
            queues,
            message_index,
            log,
            state: RwLock::new(state),
            journal: Mutex::new(journal),
            checkpointed: Mutex::new(None),
            failure: Mutex::new(None),
            snapshot_target: AtomicU64::new(0),
            options,
            watchers: Mutex::new(HashMap::new()),
            metadata_changes: tokio::sync::watch::channel(0).0,
            schedule_changes: tokio::sync::watch::channel(0).0,
            entries,
            meters: std::sync::OnceLock::new(),
            unrebuilt: Mutex::default(),
        };
        let broker = Broker { inner: Arc::new(inner) };
        if index_created {
            // A data directory from before the message index: what it stores is indexed once.
            let indexed = broker.index_stored_messages(true)?;
            broker.inner.message_index.sync()?;
            if indexed > 0 {
                tracing::info!(messages = indexed, "indexed the stored messages by id");
            }
        }
        Ok(broker)
    }

    /// Counts and notes the repairs of its ConsumeQueues in `meters` (set once; later calls are
    /// ignored).
    pub fn report_repairs_to(&self, meters: crate::metrics::Meters) {
        let _ = self.inner.meters.set(meters);
    }

    /// The data partition this broker holds: today a cluster's one.
    pub fn partition(&self) -> crate::broker::position::PartitionId {
        self.inner.options.partition
    }

    pub(crate) fn state(&self) -> RwLockReadGuard<'_, State> {
        self.inner.state.read().expect("state lock")
    }

    pub(crate) fn state_mut(&self) -> RwLockWriteGuard<'_, State> {
        self.inner.state.write().expect("state lock")
    }

    /// Why this node stopped writing state, if it did (see [`Inner::failure`]).
    pub fn failure(&self) -> Option<String> {
        self.inner.failure.lock().expect("failure lock").clone()
    }

    pub(crate) fn fail(&self, why: String) -> BrokerError {
        tracing::error!(reason = %why, "broker state can no longer be written; this node stops acknowledging");
        self.inner.failure.lock().expect("failure lock").get_or_insert(why.clone());
        BrokerError::FailStopped(why)
    }

    pub(crate) fn refuse_if_failed(&self) -> Result<(), BrokerError> {
        match self.failure() {
            Some(why) => Err(BrokerError::FailStopped(why)),
            None => Ok(()),
        }
    }

    /// Applies one committed command entry and records it as applied, in one step under the
    /// state lock, so a checkpoint never sees the state without the ConsumeQueue records it
    /// counts. `Err` only when the node must stop (disk errors, an entry of a newer release):
    /// bad commands are answered.
    pub fn apply(&self, at: LogPosition, payload: Bytes) -> Result<Reply, BrokerError> {
        self.refuse_if_failed()?;
        let mut fx = Effects::default();
        let reply = {
            let mut state = self.state_mut();
            let reply = match state.apply(at, payload, &mut fx) {
                Ok(reply) => reply,
                // openraft stops on the error, and the node with it (`jobs::health`).
                Err(source) => {
                    let e = BrokerError::Unreadable { index: at.index, source };
                    tracing::error!(error = %e, "this node stops applying the log");
                    return Err(e);
                }
            };
            if let Some(why) = fx.failure.take() {
                return Err(self.fail(format!("applying entry {}: {why}", at.index)));
            }
            if let Err(e) = self.carry_out(&fx) {
                // The state counts records that are not on disk: it must never be checkpointed.
                return Err(self.fail(format!("applying entry {}: {e}", at.index)));
            }
            reply
        };
        for topic in &fx.wakes {
            self.wake(topic);
        }
        if fx.metadata_changed {
            self.inner.metadata_changes.send_modify(|v| *v += 1);
        }
        if fx.scheduled {
            self.inner.schedule_changes.send_modify(|v| *v += 1);
        }
        Ok(reply)
    }

    /// Records an entry without a command: blank, or a membership change (its payload, as JSON).
    pub fn apply_other(&self, at: LogPosition, membership: Option<String>) {
        self.state_mut().apply_other(at, membership);
    }

    fn carry_out(&self, fx: &Effects) -> Result<(), BrokerError> {
        for topic in &fx.removed_topics {
            self.inner.queues.remove_topic(topic)?;
        }
        for w in &fx.writes {
            self.inner.queues.get(&w.topic, w.queue_id)?.put(w.first_offset, &w.records)?;
        }
        // One put for the whole entry: its index entries are written in one run.
        let placed = fx.writes.iter().flat_map(|w| {
            w.records.iter().zip(&w.message_ids).enumerate().map(|(i, (record, id))| {
                (id.as_str(), record.position, Place::Queued { offset: w.first_offset + i as u64 })
            })
        });
        let held = fx.held.iter().map(|h| (h.message_id.as_str(), h.position, h.place));
        self.inner.message_index.put(placed.chain(held))?;
        Ok(())
    }

    /// A receiver of `topic`'s changes: its value moves whenever a message arrives or a
    /// consumption command for the topic applies.
    pub fn watch(&self, topic: &str) -> tokio::sync::watch::Receiver<u64> {
        let mut watchers = self.inner.watchers.lock().expect("watchers lock");
        watchers.entry(topic.to_string()).or_insert_with(|| tokio::sync::watch::channel(0).0).subscribe()
    }

    /// A receiver whose value moves whenever a timer or a transaction check is scheduled here, or a
    /// snapshot is installed.
    pub fn watch_schedule(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.schedule_changes.subscribe()
    }

    /// A receiver whose value moves whenever a metadata command applies here.
    pub fn watch_metadata(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.metadata_changes.subscribe()
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

    /// The state as the last checkpoint wrote it, read without changing a file. The caller holds
    /// the journal lock, so no checkpoint or install writes meanwhile.
    pub(crate) fn read_checkpoint(&self) -> Result<State, BrokerError> {
        let mut state = State::default();
        let (journal_mark, wheel_mark) = load_rows(&self.inner.tree, &mut state)?;
        let dir = &self.inner.options.dir;
        state.data.dedupe = DedupeJournal::read(dir, journal_mark)?.0;
        state.data.timers = TimerWheel::read_only(dir, wheel_mark)?;
        for (prefix, table) in state.tables() {
            table.attach(&self.inner.tree, prefix);
        }
        Ok(state)
    }

    /// How often [`Broker::checkpoint`] should run.
    pub fn checkpoint_interval(&self) -> Duration {
        self.inner.options.checkpoint_interval
    }

    /// Where the next snapshot is taken: the retention purge point.
    pub fn set_snapshot_target(&self, index: u64) {
        self.inner.snapshot_target.fetch_max(index, Ordering::AcqRel);
    }

    pub fn snapshot_target(&self) -> Option<u64> {
        match self.inner.snapshot_target.load(Ordering::Acquire) {
            0 => None,
            t => Some(t),
        }
    }
}

/// Loads the rows of the tables kept in memory from `tree` into `state` (tables kept on disk,
/// prefixes from `~`, stay there), and returns the marks of the journal and the timer wheel.
fn load_rows(tree: &sled::Tree, state: &mut State) -> Result<(Option<JournalMark>, Option<WheelMark>), BrokerError> {
    let mut journal_mark: Option<JournalMark> = None;
    let mut wheel_mark: Option<WheelMark> = None;
    for item in tree.range(..&b"~"[..]) {
        let (k, v) = item?;
        let key = String::from_utf8_lossy(&k);
        match key.as_ref() {
            KEY_SCHEMA | KEY_ROWS_FORMAT => {}
            KEY_APPLIED => state.set_applied(parse::<Applied>(&key, &v)?),
            KEY_JOURNAL => journal_mark = Some(parse(&key, &v)?),
            KEY_TIMERS => wheel_mark = Some(parse(&key, &v)?),
            _ => {
                let mut loaded = false;
                for (prefix, table) in state.tables() {
                    if let Some(row) = k.strip_prefix(prefix.as_bytes()) {
                        table.load(row, &v).map_err(|e| BrokerError::CorruptEntry(format!("{prefix}: {e}")))?;
                        loaded = true;
                        break;
                    }
                }
                if !loaded {
                    return Err(BrokerError::CorruptEntry(format!("unknown metadata key {key}")));
                }
            }
        }
    }
    Ok((journal_mark, wheel_mark))
}
