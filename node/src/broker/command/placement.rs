//! [`Placement`] ↔ `rockraft.v1.log.Placement`.

use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::log::placement_change::Change;

use super::admin::{topic_from_proto, topic_to_proto};
use super::consume::{group_from_proto, group_to_proto};
use super::{DecodeError, required};
use crate::broker::placement::{Placement, PlacementChange};
use crate::broker::settings::ClusterSettings;

pub(super) fn to_proto(p: &Placement) -> pb::Placement {
    let change = |c: &PlacementChange| {
        let change = match c {
            PlacementChange::Settings(s) => Change::Settings(pb::SettingsChange {
                dedupe_window_secs: Some(s.dedupe_window_secs),
                max_module_bytes: Some(s.max_module_bytes),
                data_groups: Some(s.data_groups),
                balance_leaders: Some(s.balance_leaders),
            }),
            PlacementChange::PlaceTopic { config, epoch } => {
                Change::PlaceTopic(pb::PlaceTopic { config: Some(topic_to_proto(config)), epoch: *epoch })
            }
            PlacementChange::DropTopic(name) => Change::DropTopic(name.clone()),
            PlacementChange::PlaceGroup { config, epoch } => {
                Change::PlaceGroup(pb::PlaceGroup { config: Some(group_to_proto(config)), epoch: *epoch })
            }
            PlacementChange::DropGroup(name) => Change::DropGroup(name.clone()),
            PlacementChange::Holder(group) => Change::Holder(*group),
        };
        pb::PlacementChange { change: Some(change) }
    };
    pb::Placement { changes: p.changes.iter().map(change).collect(), through: p.through }
}

pub(super) fn from_proto(p: pb::Placement) -> Result<Placement, DecodeError> {
    let change = |c: pb::PlacementChange| -> Result<PlacementChange, DecodeError> {
        Ok(match c.change.ok_or(DecodeError::UnknownVariant("placement"))? {
            Change::Settings(s) => PlacementChange::Settings(ClusterSettings {
                dedupe_window_secs: required(s.dedupe_window_secs, "dedupe_window_secs")?,
                max_module_bytes: required(s.max_module_bytes, "max_module_bytes")?,
                // Absent before format 5: one data group.
                data_groups: s.data_groups.unwrap_or(1),
                // Absent before format 7: on.
                balance_leaders: s.balance_leaders.unwrap_or(true),
            }),
            Change::PlaceTopic(t) => {
                PlacementChange::PlaceTopic { config: topic_from_proto(required(t.config, "config")?)?, epoch: t.epoch }
            }
            Change::DropTopic(name) => PlacementChange::DropTopic(name),
            Change::PlaceGroup(g) => {
                PlacementChange::PlaceGroup { config: group_from_proto(required(g.config, "config")?)?, epoch: g.epoch }
            }
            Change::DropGroup(name) => PlacementChange::DropGroup(name),
            Change::Holder(group) => PlacementChange::Holder(group),
        })
    };
    Ok(Placement { changes: p.changes.into_iter().map(change).collect::<Result<_, _>>()?, through: p.through })
}
