//! What applying an entry does besides changing the state: the disk and memory work the live
//! broker carries out after apply (the snapshot builder drops it).

use crate::store::CqRecord;

/// ConsumeQueue records for consecutive offsets of one queue.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct QueueWrite {
    pub topic: String,
    pub queue_id: u32,
    pub first_offset: u64,
    pub records: Vec<CqRecord>,
    /// The message id of each record, for the message index.
    pub message_ids: Vec<String>,
}

/// A message now held (a timer or a half), for the message index.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HeldPlace {
    pub message_id: String,
    pub position: u64,
    pub place: crate::store::Place,
}

/// What applying an entry does besides changing the state.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub writes: Vec<QueueWrite>,
    /// Messages held from now on.
    pub held: Vec<HeldPlace>,
    /// Topics whose ConsumeQueue files go.
    pub removed_topics: Vec<String>,
    /// Topics whose waiting receivers may now find something.
    pub wakes: Vec<String>,
    /// Reading a table kept on disk failed: the state may be wrong, so the node must stop.
    pub failure: Option<String>,
    /// A metadata command applied: the data groups have something to place.
    pub metadata_changed: bool,
    /// A timer or a transaction check was scheduled: the leader's jobs may have an earlier one to
    /// wait for.
    pub scheduled: bool,
}

impl Effects {
    pub(crate) fn fail(&mut self, e: sled::Error) {
        self.failure.get_or_insert_with(|| format!("reading broker state: {e}"));
    }

    pub(crate) fn fail_with<T>(&mut self, e: sled::Error, value: T) -> T {
        self.fail(e);
        value
    }
}
