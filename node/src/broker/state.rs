//! The replicated broker state: every table, and where in the log it stands.
//!
//! [`State`] is plain data. It changes only through [`State::apply`] (see `apply.rs`), which
//! reads nothing but the entry and the state, so every replica — and the snapshot builder, which
//! replays the log onto an older snapshot — reaches the same `State` at the same index. A
//! snapshot *is* a serialized `State`.
//!
//! To add replicated state: add a [`Table`] field (or a field of a struct made of tables, like
//! [`Consumption`]) and list it once in [`State::tables`]. Loading, checkpoints, snapshots,
//! install and digests all go through that list (the dedupe window is kept in its own journal,
//! see `dedupe.rs` and `dedupe_journal.rs`, and pending timers in their own files, see
//! `timer_wheel.rs`).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::broker::access::AccessTables;
use crate::broker::dedupe::{DedupeClock, DedupeKey, Seen};
use crate::broker::disk_table::DiskTable;
use crate::broker::failover::Failover;
use crate::broker::held::{HeldCounts, Hold};
use crate::broker::lite::LiteTables;
use crate::broker::plugins::PluginTables;
use crate::broker::pop::Consumption;
use crate::broker::settings::ClusterSettings;
use crate::broker::table::{Persisted, Table};
use crate::broker::timer_wheel::TimerWheel;
use crate::broker::topic::TopicConfig;
use crate::broker::transaction::Half;
use crate::store::RecordMeta;

/// Where an entry sits in the replicated log: the broker's own name for a Raft log id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LogPosition {
    pub term: u64,
    /// The node that proposed the entry.
    pub leader: u64,
    pub index: u64,
}

impl From<&RecordMeta> for LogPosition {
    fn from(m: &RecordMeta) -> LogPosition {
        LogPosition { term: m.term, leader: m.leader, index: m.index }
    }
}

/// The last membership entry applied, as the log carries it. The broker keeps it only so that
/// it is persisted atomically with the state it belongs to; the Raft layer reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipRecord {
    pub at: LogPosition,
    /// The membership entry's payload (JSON), byte for byte.
    pub config: String,
}

/// One (topic, queue)'s readable offsets: `start..next`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRange {
    /// The first offset whose message this node still holds: local bookkeeping, moved by this
    /// node's own retention (replicas purge on their own schedule). Not part of [`State::digest`].
    pub start: u64,
    /// The next offset to assign: the same on every replica.
    pub next: u64,
    /// The latest store time of a message in the queue: a leader stores the next no earlier.
    #[serde(default)]
    pub last_store_ms: i64,
}

/// Everything the log has built, as of `last_applied`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub last_applied: Option<LogPosition>,
    pub membership: Option<MembershipRecord>,
    /// What the dedupe window is measured by.
    #[serde(default)]
    pub dedupe_clock: DedupeClock,
    /// Settings apply reads, changed through the log.
    #[serde(default)]
    pub settings: ClusterSettings,
    pub topics: Table<String, TopicConfig>,
    pub queues: Table<(String, u32), QueueRange>,
    /// Message ids stored within the dedupe window, per topic, keyed by a hash of the pair.
    pub dedupe: Table<DedupeKey, Seen>,
    pub consumption: Consumption,
    /// Pending delayed messages, by (due second, position), in files of their own.
    pub timers: TimerWheel,
    /// Transactional halves by position: open, or resolved and kept until their entry is purged.
    pub halves: DiskTable<u64, Half>,
    /// When each open half is checked next: (time, position).
    pub checks: DiskTable<(i64, u64), ()>,
    /// Log entries retention must keep, by index.
    pub holds: DiskTable<u64, Hold>,
    /// Held messages per topic.
    pub held_counts: Table<String, HeldCounts>,
    /// Registered plugin modules and what groups and topics are bound to.
    #[serde(default)]
    pub plugins: PluginTables,
    /// Users and their access rules.
    #[serde(default)]
    pub access: AccessTables,
    /// The newest leadership changes with their phases, by term.
    #[serde(default)]
    pub failovers: Table<u64, Failover>,
    /// Lite topics, their records, groups' progress on them and clients' subscriptions.
    #[serde(default)]
    pub lite: LiteTables,
    #[serde(skip)]
    pub(crate) local: Local,
}

/// What apply needs besides the tables: derived from them or set by the node, so never compared
/// or serialized.
#[derive(Debug, Clone, Default)]
pub(crate) struct Local {
    /// [`State::dedupe`] in the order entries expire: (dedupe clock when stored, key), 24 bytes
    /// each.
    pub dedupe_order: VecDeque<(i64, DedupeKey)>,
}

impl PartialEq for Local {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The scalars persisted with every checkpoint, in the same batch as the tables' rows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Applied {
    pub last_applied: Option<LogPosition>,
    pub membership: Option<MembershipRecord>,
    #[serde(default)]
    pub dedupe_clock: DedupeClock,
    #[serde(default)]
    pub settings: ClusterSettings,
}

impl State {
    /// Every sled-backed table with its key prefix. Load, checkpoint and install walk this list.
    /// Tables kept on disk ([`DiskTable`]) have prefixes from `~` on, after every other key, so
    /// loading the others reads none of their rows.
    pub(crate) fn tables(&mut self) -> [(&'static str, &mut dyn Persisted); 20] {
        [
            ("topic/", &mut self.topics),
            ("queue/", &mut self.queues),
            ("group/", &mut self.consumption.groups),
            ("pop/", &mut self.consumption.queues),
            ("epoch/", &mut self.consumption.topics),
            ("held/", &mut self.held_counts),
            ("plugin/", &mut self.plugins.modules),
            ("group_filter/", &mut self.plugins.group_filters),
            ("topic_checker/", &mut self.plugins.topic_checkers),
            ("user/", &mut self.access.users),
            ("acl/", &mut self.access.rules),
            ("handle_key/", &mut self.access.handle_keys),
            ("failover/", &mut self.failovers),
            ("lite_sub/", &mut self.lite.subscriptions),
            ("~half/", &mut self.halves),
            ("~check/", &mut self.checks),
            ("~hold/", &mut self.holds),
            ("~lite/", &mut self.lite.topics),
            ("~lite_record/", &mut self.lite.records),
            ("~lite_progress/", &mut self.lite.progress),
        ]
    }

    pub(crate) fn applied(&self) -> Applied {
        Applied {
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            dedupe_clock: self.dedupe_clock,
            settings: self.settings,
        }
    }

    pub(crate) fn set_applied(&mut self, a: Applied) {
        self.last_applied = a.last_applied;
        self.membership = a.membership;
        self.dedupe_clock = a.dedupe_clock;
        self.settings = a.settings;
    }

    /// Sets up what apply needs besides the tables (after a load, for a replay, for an install):
    /// what is derived from the tables.
    pub(crate) fn prepare_local(&mut self) {
        let mut order: Vec<(i64, DedupeKey)> = self.dedupe.iter().map(|(k, s)| (s.seen_ms, *k)).collect();
        order.sort_unstable();
        self.local.dedupe_order = order.into();
    }

    /// A digest of the replicated state: equal on replicas that applied the same entries. Queue
    /// starts are left out (each node purges its own log). `Err` if a row kept on disk could not
    /// be read (the digest reads every pending timer's record).
    pub fn digest(&self) -> Result<u64, serde_json::Error> {
        let replicated_queues: Vec<(&(String, u32), u64, i64)> =
            self.queues.iter().map(|(k, r)| (k, r.next, r.last_store_ms)).collect();
        let mut hash = DigestWriter(0, 0x5253_5441);
        serde_json::to_writer(
            &mut hash,
            &(
                (&self.last_applied, &self.membership, &self.dedupe_clock, &self.settings),
                (&self.topics, &replicated_queues),
                (&self.dedupe, &self.consumption, &self.timers, &self.halves, &self.checks),
                (&self.holds, &self.held_counts, &self.plugins, &self.access, &self.failovers),
                &self.lite,
            ),
        )?;
        Ok((u64::from(hash.1) << 32) | u64::from(hash.0))
    }
}

/// Two CRC32C's of everything written, without holding the bytes (the state may be large).
struct DigestWriter(u32, u32);

impl std::io::Write for DigestWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = crc32c::crc32c_append(self.0, buf);
        self.1 = crc32c::crc32c_append(self.1, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
