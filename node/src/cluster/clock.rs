//! The leader's clock: the time stamped into every command that carries one.
//!
//! A leader stamps its own clock, never below a time it stamped before (its system clock may step
//! back). It is *not* held at the newest time any earlier leader stamped: one leader whose clock
//! ran a day ahead would otherwise push every later invisible time, check time and dedupe expiry
//! a day out, for good. Only store times are held, per queue, at the queue's latest store time
//! (`Command::hold_store_time`), so they never go back along a queue (`offset_at_time`
//! binary-searches them); time-outs go by the stamped clock. Before its first stamp in a term, a
//! leader applies everything committed before the term, so those per-queue floors cover every
//! earlier leader's stamps.
//!
//! Clock jumps, then: a leader's clock stepping back holds its stamps at the last one until the
//! clock passes it again (time-outs come late, never early); stepping forward moves its stamps
//! forward (time-outs come early by the step). A new leader whose clock is behind the old one's
//! delivers and expires later by the difference; one ahead, earlier. `skew.rs` finds a member
//! whose clock is off and keeps it from leading.

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, by this node's clock.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64) + test_offset_ms()
}

/// Builds with crash points (tests only) may run a node whose clock is off by
/// `ROCKRAFT_TEST_CLOCK_OFFSET_MS`, to test what a skewed clock does to a cluster.
#[cfg(feature = "failpoints")]
fn test_offset_ms() -> i64 {
    static OFFSET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *OFFSET
        .get_or_init(|| std::env::var("ROCKRAFT_TEST_CLOCK_OFFSET_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
}

#[cfg(not(feature = "failpoints"))]
fn test_offset_ms() -> i64 {
    0
}

type Millis = Box<dyn Fn() -> i64 + Send + Sync>;

pub struct LeaderClock {
    now_ms: Millis,
    /// At least every stamp handed out before.
    floor: AtomicI64,
    /// The last term whose earlier entries are known to be applied here.
    ready_term: AtomicU64,
    /// One catch-up at a time; the others wait for it.
    catching_up: tokio::sync::Mutex<()>,
}

impl LeaderClock {
    pub fn new(now_ms: impl Fn() -> i64 + Send + Sync + 'static) -> LeaderClock {
        LeaderClock {
            now_ms: Box::new(now_ms),
            floor: AtomicI64::new(i64::MIN),
            ready_term: AtomicU64::new(0),
            catching_up: tokio::sync::Mutex::new(()),
        }
    }

    /// The time for the next command: this node's clock, but never less than a time it stamped
    /// before. Call [`LeaderClock::ready`] for the term first.
    pub fn stamp(&self) -> i64 {
        let candidate = (self.now_ms)();
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
        let clock = LeaderClock::new(now_fn);
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

    #[tokio::test]
    async fn the_backlog_is_applied_once_per_term_and_again_after_a_failure() {
        let clock = LeaderClock::new(|| 0);
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
