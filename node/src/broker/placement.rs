//! What a data partition keeps of the metadata, as placement entries carry it (see
//! `Metadata::placement_for` and `Partition::apply_placement`).

use crate::broker::group::GroupConfig;
use crate::broker::settings::ClusterSettings;
use crate::broker::topic::TopicConfig;

/// What a partition keeps of a metadata change (see `Metadata::placement_for`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacementChange {
    Settings(ClusterSettings),
    /// `epoch`: the index of the metadata entry that created the topic, if one did.
    PlaceTopic {
        config: TopicConfig,
        epoch: Option<u64>,
    },
    DropTopic(String),
    PlaceGroup {
        config: GroupConfig,
        epoch: u64,
    },
    DropGroup(String),
}

/// One entry's placement changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub changes: Vec<PlacementChange>,
}
