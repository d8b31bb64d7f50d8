//! A job's step that keeps failing (a storage read, a proposal refused): said at the first
//! failure, then at most once a minute with how many since, and once more when it works again;
//! and the pause before the next try doubles while it fails (from the job's own pause up to
//! [`MAX_PAUSE`]), so a broken disk neither fills the log nor spins a core.

use std::time::Duration;

use tokio::time::Instant;

/// While a step keeps failing, the log says so at most this often.
pub const REPORT_EVERY: Duration = Duration::from_secs(60);
/// The longest pause between two tries of a failing step.
pub const MAX_PAUSE: Duration = Duration::from_secs(5);

pub struct Failing {
    what: &'static str,
    first_pause: Duration,
    pause: Duration,
    /// Failures since the last report, and since the step last worked.
    unreported: u64,
    total: u64,
    reported: Option<Instant>,
}

impl Failing {
    /// `what` names the step in the log ("reading due timers"); `first_pause` is the pause after
    /// a first failure.
    pub fn new(what: &'static str, first_pause: Duration) -> Failing {
        Failing { what, first_pause, pause: first_pause, unreported: 0, total: 0, reported: None }
    }

    /// The step failed with `error`: reported if a report is due; returns how long to pause.
    pub fn failed(&mut self, error: &dyn std::fmt::Display) -> Duration {
        self.unreported += 1;
        self.total += 1;
        if self.reported.is_none_or(|at| at.elapsed() >= REPORT_EVERY) {
            tracing::error!(error = %error, failures = self.unreported, "{} failed", self.what);
            self.unreported = 0;
            self.reported = Some(Instant::now());
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(MAX_PAUSE.max(self.first_pause));
        pause
    }

    /// The step worked: said once if it had been failing, and the pause is short again.
    pub fn worked(&mut self) {
        if self.total > 0 {
            tracing::info!(failures = self.total, "{} works again", self.what);
        }
        self.total = 0;
        self.unreported = 0;
        self.reported = None;
        self.pause = self.first_pause;
    }

    /// The pause [`Self::failed`] says, to be awaited (the error is not held across it).
    pub fn pause_after(&mut self, error: &dyn std::fmt::Display) -> tokio::time::Sleep {
        tokio::time::sleep(self.failed(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failing_step_backs_off_and_is_reported_once_a_minute_until_it_works() {
        let mut failing = Failing::new("reading", Duration::from_millis(50));
        let pauses: Vec<Duration> = (0..10).map(|_| failing.failed(&"broken")).collect();
        assert_eq!(pauses[0], Duration::from_millis(50));
        assert_eq!(pauses[1], Duration::from_millis(100));
        assert_eq!(*pauses.last().unwrap(), MAX_PAUSE, "doubling up to the longest pause");
        assert_eq!(failing.unreported, 9, "only the first of ten within a minute was reported");
        tokio::time::advance(REPORT_EVERY).await;
        failing.failed(&"broken");
        assert_eq!(failing.unreported, 0, "a minute on: reported, with the count");
        failing.worked();
        assert_eq!(failing.failed(&"broken"), Duration::from_millis(50), "short again after it worked");
        assert_eq!(failing.unreported, 0, "a new run of failures is reported at once");
    }
}
