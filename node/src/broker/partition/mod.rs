//! A data partition: the messages' side of the state. Queue ranges and ConsumeQueues' offsets,
//! the dedupe window, consumption, pending timers, transactional halves and what they hold back
//! from retention, lite topics — and the partition's own copy of the metadata its entries read
//! (topics, groups, settings), kept by [`Placement`] changes that follow each metadata change.
//!
//! Applying a data entry reads nothing but the entry and the partition, so a partition can be
//! carried by a Raft group of its own.

mod held;
mod send;
pub(crate) use send::HELD_FLAG;
#[cfg(test)]
pub(crate) use send::MAX_EXPIRED_PER_ENTRY;
mod timer;
mod transaction;

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};

use serde::{Deserialize, Serialize};

use crate::broker::dedupe::{DedupeClock, DedupeKey, DedupeTable};
use crate::broker::disk_table::DiskTable;
use crate::broker::effects::Effects;
use crate::broker::group::GroupConfig;
use crate::broker::held::{HeldCounts, Hold};
use crate::broker::lite::LiteTables;
pub use crate::broker::placement::{Placement, PlacementChange};
use crate::broker::pop::Consumption;
pub use crate::broker::position::PartitionId;
use crate::broker::settings::ClusterSettings;
use crate::broker::table::{Persisted, RowError, Table, Taken, persisted_tables};
use crate::broker::timer_wheel::TimerWheel;
use crate::broker::topic::TopicConfig;
use crate::broker::transaction::Half;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Partition {
    /// The settings this partition's entries apply under; `None` in state an earlier release
    /// wrote, until `State::upgrade` copies them.
    #[serde(default)]
    pub settings: Option<ClusterSettings>,
    /// The index of the metadata the last placement taken was worked out from (see
    /// [`Placement::through`]).
    #[serde(default)]
    pub placed_through: Option<u64>,
    /// The data group this partition is, as placement entries name it (`None` until one does):
    /// a queue the placement puts in another group is refused here.
    #[serde(default)]
    pub holder: Option<u32>,
    /// What the dedupe window is measured by.
    #[serde(default)]
    pub dedupe_clock: DedupeClock,
    /// The topics whose queues are here, as the metadata last placed them.
    #[serde(default)]
    pub topics: Table<String, TopicConfig>,
    pub queues: QueueRanges,
    /// Message ids stored within the dedupe window, per topic, keyed by a hash of the pair.
    pub dedupe: DedupeTable,
    /// Groups (as placed), their epochs and POP progress; topics' epochs (as placed).
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
    /// Lite topics, their records, groups' progress on them and clients' subscriptions.
    #[serde(default)]
    pub lite: LiteTables,
    #[serde(skip)]
    pub(crate) local: Local,
}

/// What apply needs besides the tables: derived from them, so never compared or serialized.
#[derive(Debug, Clone, Default)]
pub(crate) struct Local {
    /// [`Partition::dedupe`] in the order entries expire: (dedupe clock when stored, key), 24
    /// bytes each.
    pub dedupe_order: VecDeque<(i64, DedupeKey)>,
}

impl PartialEq for Local {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Partition {
    persisted_tables! {
        "placed_topic/" => topics,
        "queue/" => queues,
        "group/" => consumption.groups,
        "placed_group_epoch/" => consumption.group_epochs,
        "pop/" => consumption.queues,
        "epoch/" => consumption.topics,
        "held/" => held_counts,
        "lite_sub/" => lite.subscriptions,
        "~half/" => halves,
        "~check/" => checks,
        "~hold/" => holds,
        "~lite/" => lite.topics,
        "~lite_record/" => lite.records,
        "~lite_progress/" => lite.progress,
    }

    /// Rebuilds what is derived from the tables (after a load, for a replay, for an install).
    pub(crate) fn prepare_local(&mut self) {
        let mut order: Vec<(i64, DedupeKey)> = self.dedupe.iter().map(|(k, s)| (s.seen_ms, *k)).collect();
        order.sort_unstable();
        self.local.dedupe_order = order.into();
    }

    /// Whether any of `queues` of `topic` is placed in another data group than this partition's.
    /// A group's dead-letter topic is in every data group: each keeps the dead letters of its own
    /// queues.
    pub(crate) fn misplaced(&self, topic: &TopicConfig, queues: &[u32]) -> bool {
        !crate::broker::group::is_dead_letter_topic(&topic.name)
            && self.holder.is_some_and(|me| queues.iter().any(|&q| topic.group_of(q) != me))
    }

    /// The settings entries apply under.
    pub(crate) fn settings(&self) -> ClusterSettings {
        self.settings.unwrap_or_default()
    }

    /// Applies a placement: each change sets the partition's copy to what the metadata says, so
    /// applying one again changes nothing. One worked out from metadata older than the last one
    /// taken changes nothing either. Whether it was taken.
    pub(crate) fn apply_placement(&mut self, placement: &Placement, fx: &mut Effects) -> bool {
        if let (Some(through), Some(placed)) = (placement.through, self.placed_through)
            && through < placed
        {
            return false;
        }
        if placement.through.is_some() {
            self.placed_through = placement.through;
        }
        for change in &placement.changes {
            match change {
                PlacementChange::Settings(s) => self.settings = Some(*s),
                PlacementChange::PlaceTopic { config, epoch } => self.place_topic(config, *epoch, fx),
                PlacementChange::DropTopic(name) => self.drop_topic(name, fx),
                PlacementChange::PlaceGroup { config, epoch } => self.place_group(config, *epoch),
                PlacementChange::DropGroup(name) => self.drop_group(name),
                PlacementChange::Holder(group) => self.holder = Some(*group),
            }
        }
        true
    }

    fn place_topic(&mut self, config: &TopicConfig, epoch: Option<u64>, fx: &mut Effects) {
        let name = &config.name;
        // Another topic of the same name (deleted and created again): the old one's data goes.
        let placed = self.consumption.topics.get(name).copied();
        if epoch.is_some() && placed.is_some() && placed != epoch {
            self.drop_topic(name, fx);
        }
        if self.topics.get(name) != Some(config) {
            self.topics.insert(name.clone(), config.clone());
        }
        if let Some(epoch) = epoch {
            self.consumption.topic_created(name, epoch);
        }
        fx.wakes.push(name.clone());
    }

    /// The topic's queues, every group's progress on it, its lite topics and its held messages
    /// go: none may reach a topic created later under the same name.
    pub(crate) fn drop_topic(&mut self, name: &str, fx: &mut Effects) {
        if !self.topics.contains_key(name) && !self.consumption.topics.contains_key(name) {
            return;
        }
        self.topics.remove(name);
        self.consumption.topic_deleted(name);
        self.queues.remove_where(|(t, _)| t == name);
        if let Err(e) = self.lite.parent_deleted(name) {
            fx.fail(e);
        }
        self.drop_held_of_topic(name, fx);
        fx.removed_topics.push(name.to_string());
        fx.wakes.push(name.to_string());
    }

    fn place_group(&mut self, config: &GroupConfig, epoch: u64) {
        let name = &config.name;
        let placed = self.consumption.group_epochs.get(name).copied().unwrap_or_default();
        if self.consumption.groups.contains_key(name) && placed != epoch {
            self.drop_group(name);
        }
        if self.consumption.groups.get(name) != Some(config) {
            self.consumption.groups.insert(name.clone(), config.clone());
        }
        if epoch != 0 && placed != epoch {
            self.consumption.group_epochs.insert(name.clone(), epoch);
        }
    }

    /// The group's POP progress goes with it.
    fn drop_group(&mut self, name: &str) {
        self.consumption.groups.remove(name);
        self.consumption.group_epochs.remove(name);
        self.consumption.queues.remove_where(|(g, _, _)| g == name);
    }
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

/// Each (topic, queue)'s offsets. The start is this node's own bookkeeping (each node purges
/// its own log), so the digest leaves it out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QueueRanges(Table<(String, u32), QueueRange>);

impl Deref for QueueRanges {
    type Target = Table<(String, u32), QueueRange>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for QueueRanges {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Persisted for QueueRanges {
    fn load(&mut self, key: &[u8], value: &[u8]) -> Result<(), RowError> {
        self.0.load(key, value)
    }

    fn write_changes(&mut self, prefix: &str, batch: &mut sled::Batch) -> Taken {
        self.0.write_changes(prefix, batch)
    }

    fn give_back(&mut self, taken: Taken) {
        self.0.give_back(taken)
    }

    fn write_all(&mut self, prefix: &str, batch: &mut sled::Batch) {
        self.0.write_all(prefix, batch)
    }

    fn digest(&self, out: &mut dyn std::io::Write) -> Result<(), serde_json::Error> {
        let replicated: Vec<(&(String, u32), u64, i64)> =
            self.0.iter().map(|(k, r)| (k, r.next, r.last_store_ms)).collect();
        serde_json::to_writer(out, &replicated)
    }
}
