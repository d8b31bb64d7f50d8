//! How far the log is known to be on disk, and whether it can still be trusted to get further.
//!
//! The durable index is the highest Raft index such that it and every record before it is on
//! disk (fdatasync'd, or covered by a purge the owner recorded durably). It only moves forward,
//! except that a truncation clamps it to what it keeps. Each truncation starts a new epoch, and a
//! sync only counts for the epoch it was started in: a sync of records that were truncated away
//! meanwhile must not vouch for the records that replaced them.
//!
//! Fail-stop: after a failed fsync the kernel may have dropped the dirty pages it could not
//! write and marked them clean, so a later fsync that succeeds proves nothing (PostgreSQL's and
//! etcd's "fsyncgate"). The first failed fsync of log data therefore stops the log for good:
//! appends, truncations, purges and flushes all fail from then on, and the node must stop
//! acknowledging and restart, recovering from what really reached the disk.

use std::io;
use std::sync::Mutex;

use crate::store::StoreError;
use crate::store::sync_mark::SyncMark;

/// What a sync vouches for: every record below `next_index`, written in `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Covers {
    pub epoch: u64,
    pub next_index: u64,
}

#[derive(Debug, Default)]
struct State {
    through: Option<u64>,
    epoch: u64,
    failure: Option<String>,
}

#[derive(Default)]
pub(crate) struct DurableState {
    state: Mutex<State>,
    /// Told every new durable index (see `sync_mark.rs`); written after the lock is released.
    mark: Option<SyncMark>,
}

impl std::fmt::Debug for DurableState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableState").field("state", &self.state).finish()
    }
}

impl DurableState {
    pub fn new(through: Option<u64>) -> DurableState {
        DurableState { state: Mutex::new(State { through, ..State::default() }), mark: None }
    }

    /// Like [`DurableState::new`], keeping `mark` up to date with the durable index.
    pub fn with_mark(through: Option<u64>, mark: SyncMark) -> DurableState {
        DurableState { mark: Some(mark), ..DurableState::new(through) }
    }

    fn write_mark(&self, through: Option<u64>) {
        if let Some(mark) = &self.mark {
            mark.write(through);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a few plain fields updated in one step each: a panic elsewhere cannot leave
        // it half-written, so a poisoned lock is still good.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn through(&self) -> Option<u64> {
        self.lock().through
    }

    /// The current epoch and durable index, read together.
    pub fn position(&self) -> (u64, Option<u64>) {
        let s = self.lock();
        (s.epoch, s.through)
    }

    /// Records a sync that covered `covers`; ignored if a truncation happened since it began.
    pub fn advance(&self, covers: Covers) {
        let moved = {
            let mut s = self.lock();
            if s.epoch != covers.epoch || s.failure.is_some() {
                return;
            }
            let Some(index) = covers.next_index.checked_sub(1) else { return };
            let before = s.through;
            s.through = Some(s.through.map_or(index, |t| t.max(index)));
            (s.through != before).then_some(s.through)
        };
        // Two advances racing may write their marks out of order: the mark then lags a little,
        // which only loses evidence, never claims too much.
        if let Some(through) = moved {
            self.write_mark(through);
        }
    }

    /// Everything after `keep` is being truncated: clamps the durable index and starts a new
    /// epoch, which it returns.
    pub fn truncated(&self, keep: Option<u64>) -> u64 {
        let (through, epoch) = {
            let mut s = self.lock();
            s.through = match (s.through, keep) {
                (Some(t), Some(k)) => Some(t.min(k)),
                _ => None,
            };
            s.epoch += 1;
            (s.through, s.epoch)
        };
        // The records after `keep` are going: damage among their successors is a torn write.
        self.write_mark(through);
        epoch
    }

    /// Everything up to `upto` was purged, after the owner recorded that durably: a restart
    /// starts the log after it, so nothing at or below it can be lost any more.
    pub fn purged(&self, upto: u64) {
        let mut s = self.lock();
        s.through = Some(s.through.map_or(upto, |t| t.max(upto)));
    }

    /// Stops the log for good (the first reason is kept).
    pub fn fail(&self, reason: String) {
        let mut s = self.lock();
        if s.failure.is_none() {
            tracing::error!(%reason, "fsync failed: the log stops accepting appends until the node restarts");
            s.failure = Some(reason);
        }
    }

    pub fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    /// `Err(FailStopped)` once the log has stopped.
    pub fn check(&self) -> Result<(), StoreError> {
        match self.failure() {
            Some(reason) => Err(StoreError::FailStopped(reason)),
            None => Ok(()),
        }
    }

    /// The same, for flush callbacks.
    pub fn check_io(&self) -> io::Result<()> {
        self.check().map_err(|e| io::Error::other(e.to_string()))
    }

    /// Passes `e` through, stopping the log first if it is a failed fsync.
    pub fn note(&self, e: StoreError) -> StoreError {
        if matches!(e, StoreError::SyncFailed { .. }) {
            self.fail(e.to_string());
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_begun_before_a_truncation_does_not_count_after_it() {
        let d = DurableState::new(Some(10));
        let before = Covers { epoch: d.position().0, next_index: 51 };
        let epoch = d.truncated(Some(20));
        assert_eq!(d.through(), Some(10), "clamped only downwards");
        d.advance(before);
        assert_eq!(d.through(), Some(10), "records 21..=50 are gone; their sync vouches for nothing now");
        d.advance(Covers { epoch, next_index: 31 });
        assert_eq!(d.through(), Some(30));
        d.truncated(Some(5));
        assert_eq!(d.through(), Some(5));
    }

    #[test]
    fn nothing_counts_as_durable_after_a_failure() {
        let d = DurableState::new(None);
        d.note(StoreError::SyncFailed { path: "x".into(), source: io::Error::other("EIO") });
        d.advance(Covers { epoch: 0, next_index: 5 });
        assert_eq!(d.through(), None);
        assert!(matches!(d.check(), Err(StoreError::FailStopped(r)) if r.contains("EIO")));
    }
}
