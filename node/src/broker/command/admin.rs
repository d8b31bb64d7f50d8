//! [`AdminCommand`] ↔ `rockraft.v1.log.AdminCommand`.

use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::log::admin_command::Op;

use super::consume::{group_from_proto, group_to_proto};
use super::{AdminCommand, DecodeError, Footprint, known};
use crate::broker::failover::Failover;
use crate::broker::repair::{Repair, RepairedPart};
use crate::broker::settings::SettingsChange;
use crate::broker::topic::{TopicConfig, TopicKind};

pub(super) fn footprint(c: &AdminCommand) -> Footprint {
    match c {
        AdminCommand::CreateTopic(_) | AdminCommand::Configure(_) | AdminCommand::CreateGroup(_) => Footprint::Records,
        AdminCommand::DeleteTopic { .. }
        | AdminCommand::DeleteGroup { .. }
        | AdminCommand::ReleaseHolds { .. }
        | AdminCommand::RecordFailover(_)
        | AdminCommand::RecordRepair(_) => Footprint::Relieves,
    }
}

pub(super) fn to_proto(c: &AdminCommand) -> pb::AdminCommand {
    let op = match c {
        AdminCommand::CreateTopic(t) => Op::CreateTopic(topic_to_proto(t)),
        AdminCommand::DeleteTopic { name } => Op::DeleteTopic(pb::DeleteTopic { name: name.clone() }),
        AdminCommand::ReleaseHolds { below } => Op::ReleaseHolds(pb::ReleaseHolds { below: *below }),
        AdminCommand::Configure(s) => Op::Configure(pb::SettingsChange {
            dedupe_window_secs: s.dedupe_window_secs,
            max_module_bytes: s.max_module_bytes,
            data_groups: s.data_groups,
            balance_leaders: s.balance_leaders,
        }),
        AdminCommand::RecordFailover(f) => Op::RecordFailover(pb::Failover::from(f)),
        AdminCommand::RecordRepair(r) => Op::RecordRepair(pb::Repair::from(r)),
        AdminCommand::CreateGroup(g) => Op::CreateGroup(group_to_proto(g)),
        AdminCommand::DeleteGroup { name } => Op::DeleteGroup(pb::DeleteGroup { name: name.clone() }),
    };
    pb::AdminCommand { op: Some(op) }
}

pub(super) fn from_proto(c: pb::AdminCommand) -> Result<AdminCommand, DecodeError> {
    Ok(match c.op.ok_or(DecodeError::UnknownVariant("admin"))? {
        Op::CreateTopic(t) => AdminCommand::CreateTopic(topic_from_proto(t)?),
        Op::DeleteTopic(d) => AdminCommand::DeleteTopic { name: d.name },
        Op::ReleaseHolds(r) => AdminCommand::ReleaseHolds { below: r.below },
        Op::Configure(s) => AdminCommand::Configure(SettingsChange {
            dedupe_window_secs: s.dedupe_window_secs,
            max_module_bytes: s.max_module_bytes,
            data_groups: s.data_groups,
            balance_leaders: s.balance_leaders,
        }),
        Op::RecordFailover(f) => AdminCommand::RecordFailover(Failover::from(f)),
        Op::RecordRepair(r) => AdminCommand::RecordRepair(Repair::try_from(r)?),
        Op::CreateGroup(g) => AdminCommand::CreateGroup(group_from_proto(g)?),
        Op::DeleteGroup(d) => AdminCommand::DeleteGroup { name: d.name },
    })
}

/// A failover record's one protobuf form, in log entries and in the admin API's history alike.
impl From<&Failover> for pb::Failover {
    fn from(f: &Failover) -> pb::Failover {
        pb::Failover {
            term: f.term,
            leader: f.leader,
            previous: f.previous,
            last_heard_ms: f.last_heard_ms,
            election_started_ms: f.election_started_ms,
            elected_ms: f.elected_ms,
            first_commit_ms: f.first_commit_ms,
            routes_converged_ms: f.routes_converged_ms,
            not_following: f.not_following.clone(),
        }
    }
}

impl From<pb::Failover> for Failover {
    fn from(f: pb::Failover) -> Failover {
        Failover {
            term: f.term,
            leader: f.leader,
            previous: f.previous,
            last_heard_ms: f.last_heard_ms,
            election_started_ms: f.election_started_ms,
            elected_ms: f.elected_ms,
            first_commit_ms: f.first_commit_ms,
            routes_converged_ms: f.routes_converged_ms,
            not_following: f.not_following,
        }
    }
}

pub(super) fn topic_to_proto(t: &TopicConfig) -> pb::TopicConfig {
    let kind = match t.kind {
        TopicKind::Normal => pb::TopicKind::Normal,
        TopicKind::Fifo => pb::TopicKind::Fifo,
        TopicKind::Delay => pb::TopicKind::Delay,
        TopicKind::Transaction => pb::TopicKind::Transaction,
        TopicKind::Priority => pb::TopicKind::Priority,
        TopicKind::Lite => pb::TopicKind::Lite,
    };
    pb::TopicConfig {
        name: t.name.clone(),
        queues: t.queues,
        kind: kind as i32,
        lite_ttl_minutes: t.lite_ttl_minutes,
        groups: t.groups.clone(),
    }
}

pub(super) fn topic_from_proto(t: pb::TopicConfig) -> Result<TopicConfig, DecodeError> {
    let kind = known(t.kind, "topic kind", |v| match pb::TopicKind::try_from(v).ok()? {
        pb::TopicKind::Unspecified => None,
        pb::TopicKind::Normal => Some(TopicKind::Normal),
        pb::TopicKind::Fifo => Some(TopicKind::Fifo),
        pb::TopicKind::Delay => Some(TopicKind::Delay),
        pb::TopicKind::Transaction => Some(TopicKind::Transaction),
        pb::TopicKind::Priority => Some(TopicKind::Priority),
        pb::TopicKind::Lite => Some(TopicKind::Lite),
    })?;
    Ok(TopicConfig { name: t.name, queues: t.queues, kind, lite_ttl_minutes: t.lite_ttl_minutes, groups: t.groups })
}

/// A repair record's one protobuf form, in log entries and in the admin API's history alike.
impl From<&Repair> for pb::Repair {
    fn from(r: &Repair) -> pb::Repair {
        let part = match r.part {
            RepairedPart::LogRecords => pb::RepairedPart::LogRecords,
            RepairedPart::Snapshot => pb::RepairedPart::Snapshot,
            RepairedPart::QueueRecord => pb::RepairedPart::QueueRecord,
        };
        pb::Repair {
            node: r.node,
            group: r.group,
            part: part as i32,
            first: r.first,
            last: r.last,
            source: r.source,
            place: r.place.clone(),
            began_ms: r.began_ms,
            done_ms: r.done_ms,
        }
    }
}

impl TryFrom<pb::Repair> for Repair {
    type Error = DecodeError;

    fn try_from(r: pb::Repair) -> Result<Repair, DecodeError> {
        let part = match pb::RepairedPart::try_from(r.part) {
            Ok(pb::RepairedPart::LogRecords) => RepairedPart::LogRecords,
            Ok(pb::RepairedPart::Snapshot) => RepairedPart::Snapshot,
            Ok(pb::RepairedPart::QueueRecord) => RepairedPart::QueueRecord,
            // A part a newer release repairs: the entry is newer than this one knows.
            Ok(pb::RepairedPart::Unspecified) | Err(_) => return Err(DecodeError::UnknownVariant("repaired part")),
        };
        Ok(Repair {
            node: r.node,
            group: r.group,
            part,
            first: r.first,
            last: r.last,
            source: r.source,
            place: r.place,
            began_ms: r.began_ms,
            done_ms: r.done_ms,
        })
    }
}
