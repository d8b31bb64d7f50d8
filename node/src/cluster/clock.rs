//! The leader's clock: the time stamped into every command that carries one.
//!
//! Store times must grow along a queue whichever node received the send, since `offset_at_time`
//! binary-searches them and the dedupe window is measured by them. So the leader stamps them, and
//! never below a time it stamped before (its system clock may step back) nor below the newest
//! store time applied (the previous leader's clock may have been ahead). Before its first stamp in
//! a term, a leader applies everything committed before the term, so that floor covers every
//! earlier leader's stamps.

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, by this node's clock.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

type Millis = Box<dyn Fn() -> i64 + Send + Sync>;

pub struct LeaderClock {
    now_ms: Millis,
    /// The largest store time applied on this node so far.
    applied_floor_ms: Millis,
    /// At least every stamp handed out before.
    floor: AtomicI64,
    /// The last term whose earlier entries are known to be applied here.
    ready_term: AtomicU64,
    /// One catch-up at a time; the others wait for it.
    catching_up: tokio::sync::Mutex<()>,
}

impl LeaderClock {
    pub fn new(
        now_ms: impl Fn() -> i64 + Send + Sync + 'static,
        applied_floor_ms: impl Fn() -> i64 + Send + Sync + 'static,
    ) -> LeaderClock {
        LeaderClock {
            now_ms: Box::new(now_ms),
            applied_floor_ms: Box::new(applied_floor_ms),
            floor: AtomicI64::new(i64::MIN),
            ready_term: AtomicU64::new(0),
            catching_up: tokio::sync::Mutex::new(()),
        }
    }

    /// The time for the next command: this node's clock, but never less than a time stamped
    /// before or the newest store time applied. Call [`LeaderClock::ready`] for the term first.
    pub fn stamp(&self) -> i64 {
        let candidate = (self.now_ms)().max((self.applied_floor_ms)());
        self.floor.fetch_max(candidate, Ordering::AcqRel).max(candidate)
    }

    /// Runs `catch_up` (apply everything committed before `term`) unless it already succeeded for
    /// this term; concurrent callers wait for the one running. A failure is returned and the next
    /// call tries again.
    pub async fn ready<E, Fut>(&self, term: u64, catch_up: impl FnOnce() -> Fut) -> Result<(), E>
    where
        Fut: Future<Output = Result<(), E>>,
    {
        if self.ready_term.load(Ordering::Acquire) == term {
            return Ok(());
        }
        let _one = self.catching_up.lock().await;
        if self.ready_term.load(Ordering::Acquire) == term {
            return Ok(());
        }
        catch_up().await?;
        self.ready_term.store(term, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn settable(start: i64) -> (Arc<AtomicI64>, impl Fn() -> i64 + Send + Sync + 'static) {
        let value = Arc::new(AtomicI64::new(start));
        let read = Arc::clone(&value);
        (value, move || read.load(Ordering::SeqCst))
    }

    #[test]
    fn a_clock_stepping_back_never_yields_a_smaller_stamp() {
        let (now, now_fn) = settable(1_000);
        let clock = LeaderClock::new(now_fn, || 0);
        assert_eq!(clock.stamp(), 1_000);
        now.store(400, Ordering::SeqCst);
        assert_eq!(clock.stamp(), 1_000, "a step back keeps the last stamp");
        now.store(1_200, Ordering::SeqCst);
        assert_eq!(clock.stamp(), 1_200, "and the clock takes over again once it has passed it");
        let mut last = i64::MIN;
        for t in [1_300, 900, 1_250, 1_301, 0, 2_000] {
            now.store(t, Ordering::SeqCst);
            let s = clock.stamp();
            assert!(s >= last && s >= t, "stamp {s} after {last} at clock {t}");
            last = s;
        }
        assert_eq!(last, 2_000);
    }

    #[test]
    fn the_applied_floor_wins_over_a_leader_clock_that_is_behind() {
        // The previous leader's clock ran ahead: its store times reached 5 000.
        let (applied, applied_fn) = settable(5_000);
        let (now, now_fn) = settable(3_000);
        let clock = LeaderClock::new(now_fn, applied_fn);
        assert_eq!(clock.stamp(), 5_000);
        applied.store(5_010, Ordering::SeqCst);
        assert_eq!(clock.stamp(), 5_010);
        now.store(6_000, Ordering::SeqCst);
        assert_eq!(clock.stamp(), 6_000);
    }

    #[tokio::test]
    async fn the_backlog_is_applied_once_per_term_and_again_after_a_failure() {
        let clock = LeaderClock::new(|| 0, || 0);
        let runs = AtomicU64::new(0);
        let catch_up = |ok: bool| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { if ok { Ok(()) } else { Err("not yet") } }
        };
        assert_eq!(clock.ready(3, || catch_up(false)).await, Err("not yet"));
        assert_eq!(clock.ready(3, || catch_up(true)).await, Ok(()));
        assert_eq!(clock.ready(3, || catch_up(true)).await, Ok(()));
        assert_eq!(runs.load(Ordering::SeqCst), 2, "the third call found term 3 ready");
        assert_eq!(clock.ready(4, || catch_up(true)).await, Ok(()));
        assert_eq!(runs.load(Ordering::SeqCst), 3, "a new term catches up again");
    }
}
