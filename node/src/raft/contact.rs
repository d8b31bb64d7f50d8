//! When a leader last replicated to this node. A member that has heard no leader for longer than
//! an election takes is cut off from the group (or the group has none), and says so to its
//! clients at once instead of holding their requests (`cluster::Cluster::cut_off`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

pub struct LeaderContact {
    start: Instant,
    /// One more than the milliseconds from `start` to the last append a leader sent here (0:
    /// none yet).
    last_ms: AtomicU64,
}

impl Default for LeaderContact {
    fn default() -> Self {
        LeaderContact { start: Instant::now(), last_ms: AtomicU64::new(0) }
    }
}

impl LeaderContact {
    /// A leader's append (a heartbeat or entries) reached this node and was accepted.
    pub fn heard(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms + 1, Ordering::Relaxed);
    }

    /// How long since a leader's append last reached this node; `None` if none ever did.
    pub fn silence(&self) -> Option<Duration> {
        match self.last_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.start.elapsed().saturating_sub(Duration::from_millis(ms - 1))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_counts_from_the_last_append() {
        let contact = LeaderContact::default();
        assert_eq!(contact.silence(), None, "no leader heard yet");
        contact.heard();
        let first = contact.silence().expect("heard");
        std::thread::sleep(Duration::from_millis(30));
        assert!(contact.silence().expect("heard") >= first + Duration::from_millis(30));
        contact.heard();
        assert!(contact.silence().expect("heard") < Duration::from_millis(30));
    }
}
