//! The cluster's metadata: what every partition's data is organised by. Topics, consumer
//! groups, plugins and their bindings, users and rules, handle keys, settings, and the failover
//! and repair histories.
//!
//! Metadata changes through its own entries (`Metadata::apply` in `apply.rs`) and reads only
//! itself. A change that data partitions must see (a topic or group created or deleted,
//! settings changed) is followed by [`Placement`] changes to each partition: [`Metadata::placement_for`]
//! says which, from the metadata and what the partition holds now, so proposing them is
//! idempotent and a leader that crashed between the two steps proposes them again.

use serde::{Deserialize, Serialize};

use crate::broker::access::AccessTables;
use crate::broker::failover::Failover;
use crate::broker::group::GroupConfig;
use crate::broker::partition::Partition;
use crate::broker::placement::PlacementChange;
use crate::broker::plugins::PluginTables;
use crate::broker::repair::Repair;
use crate::broker::settings::ClusterSettings;
use crate::broker::table::{Table, persisted_tables};
use crate::broker::topic::TopicConfig;

#[cfg(doc)]
use crate::broker::placement::Placement;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// Settings apply reads, changed through the log.
    #[serde(default)]
    pub settings: ClusterSettings,
    pub topics: Table<String, TopicConfig>,
    /// Each topic's epoch: the index of the entry that created it. A topic deleted and created
    /// again is another topic, whose data starts afresh.
    #[serde(default)]
    pub topic_epochs: Table<String, u64>,
    /// Consumer groups.
    #[serde(default)]
    pub groups: Table<String, GroupConfig>,
    /// Each group's epoch, as for topics.
    #[serde(default)]
    pub group_epochs: Table<String, u64>,
    /// Registered plugin modules and what groups and topics are bound to.
    #[serde(default)]
    pub plugins: PluginTables,
    /// Users and their access rules.
    #[serde(default)]
    pub access: AccessTables,
    /// The newest leadership changes with their phases, by term.
    #[serde(default)]
    pub failovers: Table<u64, Failover>,
    /// The newest repairs nodes made of their disks, by `Repair::key`.
    #[serde(default)]
    pub repairs: Table<String, Repair>,
}

impl Metadata {
    persisted_tables! {
        "topic/" => topics,
        "topic_epoch/" => topic_epochs,
        "meta_group/" => groups,
        "group_epoch/" => group_epochs,
        "plugin/" => plugins.modules,
        "group_filter/" => plugins.group_filters,
        "topic_checker/" => plugins.topic_checkers,
        "user/" => access.users,
        "acl/" => access.rules,
        "handle_key/" => access.handle_keys,
        "failover/" => failovers,
        "repair/" => repairs,
    }

    /// The changes that bring `partition`'s copy of the metadata up to date: nothing once it is.
    pub fn placement_for(&self, partition: &Partition) -> Vec<PlacementChange> {
        let mut changes = Vec::new();
        if partition.settings != Some(self.settings) {
            changes.push(PlacementChange::Settings(self.settings));
        }
        let placed = &partition.consumption;
        for (name, config) in self.topics.iter() {
            // A topic without an epoch (a dead-letter topic an earlier release created on its
            // first message) matches whatever epoch the partition gave it.
            let epoch = self.topic_epochs.get(name).copied();
            let other_epoch = epoch.is_some() && placed.topics.get(name).copied() != epoch;
            if partition.topics.get(name) != Some(config) || other_epoch {
                changes.push(PlacementChange::PlaceTopic { config: config.clone(), epoch });
            }
        }
        for name in partition.topics.keys().filter(|n| !self.topics.contains_key(*n)) {
            changes.push(PlacementChange::DropTopic(name.clone()));
        }
        for (name, config) in self.groups.iter() {
            let epoch = self.group_epochs.get(name).copied().unwrap_or_default();
            if placed.groups.get(name) != Some(config)
                || placed.group_epochs.get(name).copied().unwrap_or_default() != epoch
            {
                changes.push(PlacementChange::PlaceGroup { config: config.clone(), epoch });
            }
        }
        for name in placed.groups.keys().filter(|n| !self.groups.contains_key(*n)) {
            changes.push(PlacementChange::DropGroup(name.clone()));
        }
        changes
    }
}
