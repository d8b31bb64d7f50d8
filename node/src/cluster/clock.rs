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
//! Clock jumps, then: within a term the leader's stamps follow its monotonic clock from the
//! wall-clock time it read when the term became ready, so a step of its wall clock (an operator,
//! a VM resumed, NTP stepping) moves no stamp until the next term; time-outs are neither early nor
//! late by it. A new leader reads its wall clock afresh: one whose clock is behind the old one's
//! delivers and expires later by the difference, one ahead earlier, and `skew.rs` finds a member
//! whose clock is off by more than the allowed skew and keeps it from leading.

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, by this node's clock.
pub fn now_ms() -> i64 {
    if let Some(ms) = crate::simulation::wall_ms() {
        return ms;
    }
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64) + test_offset_ms()
}

/// Builds with crash points (tests only) may run a node whose clock is off by
/// `ROCKRAFT_TEST_CLOCK_OFFSET_MS`, to test what a skewed clock does to a cluster; a test moves it
/// while the node runs through [`watch_test_offset`].
#[cfg(feature = "failpoints")]
fn test_offset_ms() -> i64 {
    test_offset().load(Ordering::Relaxed)
}

#[cfg(feature = "failpoints")]
fn test_offset() -> &'static AtomicI64 {
    static OFFSET: std::sync::OnceLock<AtomicI64> = std::sync::OnceLock::new();
    OFFSET.get_or_init(|| {
        AtomicI64::new(std::env::var("ROCKRAFT_TEST_CLOCK_OFFSET_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
    })
}

/// Test builds: the clock offset follows the number in `file` (checked every 100 ms) once it
/// exists, so a fault suite can make one node's clock jump forward or back while it runs.
#[cfg(feature = "failpoints")]
pub fn watch_test_offset(file: std::path::PathBuf) {
    tokio::spawn(async move {
        loop {
            if let Some(ms) = tokio::fs::read_to_string(&file).await.ok().and_then(|s| s.trim().parse().ok()) {
                test_offset().store(ms, Ordering::Relaxed);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
}

#[cfg(not(feature = "failpoints"))]
fn test_offset_ms() -> i64 {
    0
}

type Millis = Box<dyn Fn() -> i64 + Send + Sync>;

pub struct LeaderClock {
    now_ms: Millis,
    /// The wall-clock time read when the current term became ready, and when (monotonic).
    anchor: std::sync::Mutex<Option<(i64, tokio::time::Instant)>>,
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
            anchor: std::sync::Mutex::new(None),
            floor: AtomicI64::new(i64::MIN),
            ready_term: AtomicU64::new(0),
            catching_up: tokio::sync::Mutex::new(()),
        }
    }

    /// The time for the next command: this node's clock as it read it when the term became ready,
    /// advanced by the monotonic clock since, and never less than a time it stamped before. Call
    /// [`LeaderClock::ready`] for the term first.
    pub fn stamp(&self) -> i64 {
        let anchor = *self.anchor.lock().expect("anchor lock");
        let candidate = match anchor {
            Some((wall_ms, at)) => wall_ms.saturating_add(at.elapsed().as_millis() as i64),
            None => (self.now_ms)(),
        };
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
        *self.anchor.lock().expect("anchor lock") = Some(((self.now_ms)(), tokio::time::Instant::now()));
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
    async fn a_wall_clock_step_during_a_term_moves_no_stamp_until_the_next_term() {
        let (now, now_fn) = settable(10_000);
        let clock = LeaderClock::new(now_fn);
        clock.ready(1, || async { Ok::<(), ()>(()) }).await.unwrap();
        let first = clock.stamp();
        assert!((10_000..10_000 + 1_000).contains(&first), "stamped {first}");
        now.store(70_000, Ordering::SeqCst); // a minute forward
        let after_step = clock.stamp();
        assert!(after_step < 10_000 + 1_000, "a forward step leaked into the term's stamps: {after_step}");
        now.store(0, Ordering::SeqCst); // and far back
        assert!(clock.stamp() >= after_step, "stamps never go back");
        now.store(70_000, Ordering::SeqCst);
        clock.ready(2, || async { Ok::<(), ()>(()) }).await.unwrap();
        assert!(clock.stamp() >= 70_000, "the next term reads the wall clock afresh");
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
