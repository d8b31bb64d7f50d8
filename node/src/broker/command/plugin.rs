//! [`PluginCommand`] ↔ `rockraft.v1.log.PluginCommand`.

use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::log::plugin_command::Op;

use super::{DecodeError, Footprint, known, required};
use crate::broker::plugins::{Binding, PluginCommand, PluginKind, Quarantine};

pub(super) fn footprint(c: &PluginCommand) -> Footprint {
    match c {
        // A module's bytes are kept in the state.
        PluginCommand::Register { .. } => Footprint::Stores,
        PluginCommand::Remove { .. } => Footprint::Relieves,
        PluginCommand::BindGroup { .. }
        | PluginCommand::BindTopic { .. }
        | PluginCommand::Quarantine { .. }
        | PluginCommand::Enable { .. } => Footprint::Records,
    }
}

fn binding_to_proto(b: &Option<Binding>) -> Option<pb::Binding> {
    b.as_ref().map(|b| pb::Binding { plugin: b.plugin.clone(), config: b.config.clone() })
}

fn binding_from_proto(b: Option<pb::Binding>) -> Option<Binding> {
    b.map(|b| Binding { plugin: b.plugin, config: b.config })
}

pub(super) fn to_proto(c: &PluginCommand) -> pb::PluginCommand {
    let op = match c {
        PluginCommand::Register { name, kind, version, now_ms, module } => Op::Register(pb::RegisterPlugin {
            name: name.clone(),
            kind: match kind {
                PluginKind::Filter => pb::PluginKind::Filter,
                PluginKind::TxChecker => pb::PluginKind::TxChecker,
            } as i32,
            version: version.clone(),
            now_ms: *now_ms,
            module: module.clone().into(),
        }),
        PluginCommand::Remove { name } => Op::Remove(pb::PluginName { name: name.clone() }),
        PluginCommand::BindGroup { group, binding } => {
            Op::BindGroup(pb::BindGroup { group: group.clone(), binding: binding_to_proto(binding) })
        }
        PluginCommand::BindTopic { topic, binding } => {
            Op::BindTopic(pb::BindTopic { topic: topic.clone(), binding: binding_to_proto(binding) })
        }
        PluginCommand::Quarantine { name, hash, quarantine } => Op::Quarantine(pb::QuarantinePlugin {
            name: name.clone(),
            hash: hash.clone(),
            quarantine: Some(pb::Quarantine {
                failures: quarantine.failures,
                window_secs: quarantine.window_secs,
                since_ms: quarantine.since_ms,
            }),
        }),
        PluginCommand::Enable { name } => Op::Enable(pb::PluginName { name: name.clone() }),
    };
    pb::PluginCommand { op: Some(op) }
}

pub(super) fn from_proto(c: pb::PluginCommand) -> Result<PluginCommand, DecodeError> {
    Ok(match c.op.ok_or(DecodeError::UnknownVariant("plugin"))? {
        Op::Register(r) => PluginCommand::Register {
            name: r.name,
            kind: known(r.kind, "plugin kind", |v| match pb::PluginKind::try_from(v).ok()? {
                pb::PluginKind::Unspecified => None,
                pb::PluginKind::Filter => Some(PluginKind::Filter),
                pb::PluginKind::TxChecker => Some(PluginKind::TxChecker),
            })?,
            version: r.version,
            now_ms: r.now_ms,
            module: r.module.to_vec(),
        },
        Op::Remove(p) => PluginCommand::Remove { name: p.name },
        Op::BindGroup(b) => PluginCommand::BindGroup { group: b.group, binding: binding_from_proto(b.binding) },
        Op::BindTopic(b) => PluginCommand::BindTopic { topic: b.topic, binding: binding_from_proto(b.binding) },
        Op::Quarantine(q) => {
            let quarantine = required(q.quarantine, "quarantine")?;
            PluginCommand::Quarantine {
                name: q.name,
                hash: q.hash,
                quarantine: Quarantine {
                    failures: quarantine.failures,
                    window_secs: quarantine.window_secs,
                    since_ms: quarantine.since_ms,
                },
            }
        }
        Op::Enable(p) => PluginCommand::Enable { name: p.name },
    })
}
