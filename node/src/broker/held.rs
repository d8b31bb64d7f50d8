//! Messages stored now and delivered later — delayed messages until their timer fires,
//! transactional halves until they are committed — and the log entries they hold back from
//! retention.
//!
//! A held message is written once, in its send entry. Nothing points at it from a ConsumeQueue
//! until it is delivered; delivering adds the ConsumeQueue record under the real topic pointing
//! at the same stored bytes, so there is never a second copy of the body. Its log entry must
//! outlive retention until then, and for a retention period after (consumers read it from
//! there): [`Hold`] rows say so, per log index.

use serde::{Deserialize, Serialize};

/// What is needed to deliver a held message without reading it: where it goes and its
/// ConsumeQueue record's fields. The message itself stays in its send entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldMessage {
    pub topic: String,
    pub queue_id: u32,
    pub message_id: String,
    pub size: u32,
    pub tag_hash: u64,
    /// When the send was stored (the leader's clock).
    pub stored_ms: i64,
}

/// Why a log entry must not be purged yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// Messages of the entry still waiting for a timer or a transaction's end.
    pub pending: u32,
    /// When the last of them was delivered or dropped: the entry is then kept for a retention
    /// period from this time, like a message stored then.
    pub released_ms: i64,
}

impl Hold {
    /// Whether the entry must still be kept, for a node whose retention time is `max_age_ms`.
    pub fn blocks(&self, now_ms: i64, max_age_ms: i64) -> bool {
        self.pending > 0 || self.released_ms.saturating_add(max_age_ms) > now_ms
    }
}

/// Per topic: how many messages are held (shown by `topic list`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldCounts {
    pub timers: u64,
    pub open_halves: u64,
}
