//! [`TimerCommand`] ↔ `rockraft.v1.log.TimerCommand`.

use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::log::timer_command::Op;

use super::{DecodeError, Footprint, required};
use crate::broker::timer::{TimerCommand, TimerKey};

pub(super) fn footprint(c: &TimerCommand) -> Footprint {
    match c {
        // Timers due go to their queues; a recall ends one.
        TimerCommand::Fire { .. } | TimerCommand::Recall { .. } => Footprint::Records,
    }
}

fn key_to_proto(&(due_ms, position): &TimerKey) -> pb::TimerKey {
    pb::TimerKey { due_ms, position }
}

fn key_from_proto(k: pb::TimerKey) -> TimerKey {
    (k.due_ms, k.position)
}

pub(super) fn to_proto(c: &TimerCommand) -> pb::TimerCommand {
    let op = match c {
        TimerCommand::Fire { now_ms, timers } => {
            Op::Fire(pb::Fire { now_ms: *now_ms, timers: timers.iter().map(key_to_proto).collect() })
        }
        TimerCommand::Recall { now_ms, topic, timer } => {
            Op::Recall(pb::Recall { now_ms: *now_ms, topic: topic.clone(), timer: Some(key_to_proto(timer)) })
        }
    };
    pb::TimerCommand { op: Some(op) }
}

pub(super) fn from_proto(c: pb::TimerCommand) -> Result<TimerCommand, DecodeError> {
    Ok(match c.op.ok_or(DecodeError::UnknownVariant("timer"))? {
        Op::Fire(f) => {
            TimerCommand::Fire { now_ms: f.now_ms, timers: f.timers.into_iter().map(key_from_proto).collect() }
        }
        Op::Recall(r) => TimerCommand::Recall {
            now_ms: r.now_ms,
            topic: r.topic,
            timer: key_from_proto(required(r.timer, "timer")?),
        },
    })
}
