//! Delayed messages: a send to a DELAY topic whose delivery time is still ahead is held
//! ([`HeldMessage`]) under a timer keyed by (due second, position), kept in a timing wheel of
//! files (`timer_wheel.rs`): 16 bytes of memory per pending timer. The leader proposes a
//! [`TimerCommand::Fire`] entry for timers that are due, many per entry; applying it delivers
//! each. A timer is removed by the entry that fires or recalls it, so it fires exactly once
//! whichever leader proposes, and however often.

use serde::{Deserialize, Serialize};

use crate::broker::held::HeldMessage;
use crate::broker::position::PartitionId;

/// A timer: (due second, position of the message in the log).
pub type TimerKey = (i64, u64);

/// A pending delayed message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timer {
    pub due_ms: i64,
    pub message: HeldMessage,
}

/// The key of the timer of the message at `position`, due at `due_ms`.
pub fn timer_key(due_ms: i64, position: u64) -> TimerKey {
    (due_ms.div_euclid(1000), position)
}

/// Most timers one fire entry delivers.
pub const MAX_FIRES_PER_ENTRY: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TimerCommand {
    /// Delivers these timers; each must be due by `now_ms` (the proposing leader's clock).
    Fire { now_ms: i64, timers: Vec<TimerKey> },
    /// Cancels a timer of `topic` that is not due yet (RecallMessage).
    Recall { now_ms: i64, topic: String, timer: TimerKey },
}

impl TimerCommand {
    pub(crate) fn set_time(&mut self, now: i64) {
        match self {
            TimerCommand::Fire { now_ms, .. } | TimerCommand::Recall { now_ms, .. } => *now_ms = now,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimerOutcome {
    /// How many of the listed timers were delivered (the others had fired or been recalled).
    Fired(u32),
    Recalled {
        message_id: String,
    },
    /// No such timer: it fired, was recalled, or never existed.
    NotFound,
    /// Its time has come: it is being delivered and can no longer be recalled.
    AlreadyDue,
}

/// The recall handle a delayed send returns: the timer's partition and key, opaque to clients.
pub fn recall_handle(partition: PartitionId, due_ms: i64, position: u64) -> String {
    let key = timer_key(due_ms, position);
    format!("R{partition}:{:x}.{:x}", key.0, key.1)
}

/// The timer a recall handle names, with its partition; `None` if it is not one this broker
/// made. Handles of earlier releases (no partition) name the first.
pub fn parse_recall_handle(handle: &str) -> Option<(PartitionId, TimerKey)> {
    let rest = handle.strip_prefix('R')?;
    let (partition, key) = match rest.split_once(':') {
        Some((p, key)) => (p.parse().ok()?, key),
        None => (PartitionId::FIRST, rest),
    };
    let (due, position) = key.split_once('.')?;
    Some((partition, (i64::from_str_radix(due, 16).ok()?, u64::from_str_radix(position, 16).ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_handles_round_trip_and_garbage_is_refused() {
        let position = crate::broker::queue_position(42, 3);
        let handle = recall_handle(PartitionId(7), 1_764_000_000_123, position);
        assert_eq!(parse_recall_handle(&handle), Some((PartitionId(7), (1_764_000_000, position))));
        // A handle of an earlier release names the first partition.
        assert_eq!(parse_recall_handle("R1a.2b"), Some((PartitionId::FIRST, (0x1a, 0x2b))));
        for bad in ["", "R", "R1", "Rzz.1", "X1.2", "R1.2.3", "R-1.2x", "R:1.2", "Rz:1.2", "R1:2:3.4"] {
            assert_eq!(parse_recall_handle(bad), None, "{bad:?}");
        }
    }
}
