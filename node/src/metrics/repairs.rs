//! Repairs this node made that the cluster's history does not hold yet: each is proposed to the
//! metadata group (`jobs::record_repairs`) once it runs, so `rockraft cluster history` and every
//! replica can tell what rotted where, and from whom it came back.
//!
//! Kept in memory, at most [`PENDING`]: a node that stops before proposing them loses the
//! records, never the repair (the log lines and the counters say it happened).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most repairs waiting to be recorded; beyond, the oldest are dropped (and counted).
const PENDING: usize = 256;

/// What was repaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repaired {
    /// Log records filled again from another member.
    LogRecords,
    /// A snapshot file replaced by another member's.
    Snapshot,
    /// A ConsumeQueue record rebuilt from the log and the message index.
    QueueRecord,
}

/// One repair as this node saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairNote {
    pub group: u32,
    pub repaired: Repaired,
    /// The first and last log index (a queue record: its queue offset, both) repaired.
    pub first: u64,
    pub last: u64,
    /// The member the records came from (`None`: rebuilt from this node's own log).
    pub source: Option<u64>,
    /// The file the damage was in, where known.
    pub place: String,
    /// Wall milliseconds on this node when it began, and when it was done.
    pub began_ms: i64,
    pub done_ms: i64,
}

#[derive(Default)]
pub(crate) struct RepairNotes {
    pending: Mutex<VecDeque<RepairNote>>,
    dropped: AtomicU64,
    noted: tokio::sync::Notify,
}

impl RepairNotes {
    pub(crate) fn note(&self, note: RepairNote) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.len() >= PENDING {
            pending.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        pending.push_back(note);
        drop(pending);
        self.noted.notify_one();
    }

    /// Every note waiting, oldest first, once there is one.
    pub(crate) async fn take(&self) -> Vec<RepairNote> {
        loop {
            let notified = self.noted.notified();
            let taken: Vec<RepairNote> = self.pending.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
            if !taken.is_empty() {
                return taken;
            }
            notified.await;
        }
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
