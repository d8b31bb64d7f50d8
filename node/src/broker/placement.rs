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
    /// The partition is data group N's: queues placed elsewhere are refused in it.
    Holder(u32),
}

/// One entry's placement changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub changes: Vec<PlacementChange>,
    /// The index of the metadata (in the log of the group holding it) the changes were worked out from:
    /// a partition that took a placement of a later one ignores this one, which a leader reading
    /// a replica of the metadata behind its predecessor's would otherwise use to undo newer
    /// changes. `None` in entries before format 6: always applied.
    pub through: Option<u64>,
}
