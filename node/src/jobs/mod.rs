//! The one owner of background work. Every job runs under [`Jobs`]: per-node jobs until shutdown,
//! leader-only jobs for each leadership of this node (started when it becomes leader, cancelled
//! when it steps down, started afresh on the next leadership). Shutdown cancels every job and
//! waits until each has stopped. A job is cancelled by dropping it at its next await point.
//!
//! - `checkpoint`: makes applied broker state durable; `retention`: purges old segments;
//! - `renewals`: extends the invisible time of deliveries to auto-renewing receives;
//! - `plugin_warmup`: compiles registered plugins in the background and quarantines failing ones;
//! - leader only: `timers` fires due delayed messages; `transaction_checks` checks unresolved
//!   transactional halves; `lite_topics` expires idle lite topics and forgets the subscriptions
//!   of clients that went away; `placement` finishes metadata changes the data partition has
//!   not taken yet;
//! - leader only, with several data groups: `data_groups` starts the data groups the metadata
//!   adds (on the metadata group's leader) and hands each group's leadership to the node whose turn
//!   it is;
//! - `group_traffic`: samples each group's stored, consumed and lag counts for the status page;
//! - `clock_skew`: reads the members' clocks; a node whose clock is off does not lead;
//! - `disk_space`: reads the voters' free space; below a mark the leader refuses what would
//!   fill a disk further;
//! - `repairs`: records what this node repaired of its disk in the cluster's repair history;
//! - `health`: notices a failed fsync of the log or the broker state, or Raft stopping, and
//!   fail-stops the node.
//!
//! A step of a job that keeps failing is reported at most once a minute and tried again with a
//! growing pause (`failing`).
//!
//! [`Jobs::fail_stop`] is how a part of the node that meets a fatal condition (a failed log fsync)
//! asks the node to stop: `node::run` waits for it beside SIGTERM.

mod checkpoint;
mod clock_skew;
mod data_groups;
mod disk_space;
mod failing;
mod group_traffic;
mod handle_key;
mod health;
mod leaders;
mod lite_topics;
mod placement;
mod plugin_warmup;
mod renewals;
mod repairs;
mod retention;
mod scrub;
mod timers;
mod transaction_checks;

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
pub use checkpoint::checkpoints;
pub use clock_skew::watch_clocks;
pub use data_groups::{balance_leaders, follow_membership, start_data_groups};
pub use disk_space::watch_disks;
pub use group_traffic::group_traffic;
pub use handle_key::first_handle_key;
pub use health::watch_health;
pub use leaders::watch_leaders;
pub use lite_topics::lite_upkeep;
pub use placement::placement;
pub use plugin_warmup::plugin_warmup;
pub use renewals::renewals;
pub use repairs::record_repairs;
pub use retention::{RetentionOptions, retention};
pub use scrub::{ScrubOptions, scrub};
pub use timers::fire_timers;
pub use transaction_checks::{CheckOptions, check_transactions};

/// Cheap to clone; clones share the jobs.
#[derive(Clone)]
pub struct Jobs {
    inner: Arc<Inner>,
}

struct Inner {
    /// `true` once shutdown began: every job stops.
    stop: watch::Sender<bool>,
    /// The first fatal condition reported, if any.
    fatal: watch::Sender<Option<String>>,
    tasks: Mutex<Vec<(&'static str, JoinHandle<()>)>>,
}

impl Default for Jobs {
    fn default() -> Self {
        Jobs::new()
    }
}

impl Jobs {
    pub fn new() -> Jobs {
        Jobs {
            inner: Arc::new(Inner {
                stop: watch::channel(false).0,
                fatal: watch::channel(None).0,
                tasks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Runs `job` until it ends or shutdown cancels it.
    pub fn spawn(&self, name: &'static str, job: impl Future<Output = ()> + Send + 'static) {
        let mut stop = self.inner.stop.subscribe();
        let task = tokio::spawn(async move {
            tokio::select! {
                _ = job => tracing::debug!(job = name, "job ended"),
                _ = stop.wait_for(|s| *s) => tracing::debug!(job = name, "job cancelled"),
            }
        });
        let mut tasks = self.inner.tasks.lock().expect("jobs lock");
        tasks.retain(|(_, t)| !t.is_finished());
        tasks.push((name, task));
    }

    /// Runs a fresh `start()` for each leadership: while `leadership` is `true`. Any change of
    /// it cancels the run, so a step-down and re-election seen only as a change (the values
    /// between were missed) still restarts the job. A run that ends by itself is started again
    /// on the next change.
    pub fn spawn_leader<F, Fut>(&self, name: &'static str, mut leadership: watch::Receiver<bool>, mut start: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.spawn(name, async move {
            loop {
                if *leadership.borrow_and_update() {
                    tracing::info!(job = name, "leader: starting");
                    tokio::select! {
                        _ = start() => {
                            tracing::debug!(job = name, "leader job ended");
                            if leadership.changed().await.is_err() {
                                return;
                            }
                        }
                        changed = leadership.changed() => {
                            tracing::info!(job = name, "leadership changed: stopped");
                            if changed.is_err() {
                                return;
                            }
                        }
                    }
                } else if leadership.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// This node's leadership, from its group's status: `true` while it leads. A new term of
    /// leadership is sent as `false` then `true`, so leader jobs restart even if they missed the
    /// step-down in between.
    pub fn follow_leadership(&self, cluster: &Cluster) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        let mut watch = cluster.group().watch();
        self.spawn("leadership", async move {
            let mut led: Option<u64> = None;
            loop {
                let leads = watch.leading();
                if leads != led {
                    if led.is_some() {
                        tx.send_replace(false);
                    }
                    if leads.is_some() {
                        tx.send_replace(true);
                    }
                    led = leads;
                }
                if watch.changed().await.is_err() {
                    return;
                }
            }
        });
        rx
    }

    /// Asks the node to stop because of `reason`, a condition it cannot run on with (the first
    /// reason given is kept).
    pub fn fail_stop(&self, reason: impl Into<String>) {
        let reason = reason.into();
        tracing::error!(%reason, "fatal: the node stops");
        self.inner.fatal.send_if_modified(|fatal| {
            if fatal.is_some() {
                return false;
            }
            *fatal = Some(reason);
            true
        });
    }

    /// The fail-stop signal: `Some(reason)` once [`Jobs::fail_stop`] was called.
    pub fn fail_stop_signal(&self) -> watch::Receiver<Option<String>> {
        self.inner.fatal.subscribe()
    }

    /// Resolves with the reason once [`Jobs::fail_stop`] was called.
    pub fn failed(&self) -> impl Future<Output = String> + Send + 'static {
        let mut fatal = self.fail_stop_signal();
        async move {
            let reason = fatal.wait_for(|f| f.is_some()).await.map(|r| r.clone().unwrap_or_default());
            match reason {
                Ok(reason) => reason,
                // Every `Jobs` is gone, so no one can ask to stop any more.
                Err(_) => std::future::pending().await,
            }
        }
    }

    /// Cancels every job and waits until each has stopped.
    pub async fn shutdown(&self) {
        self.inner.stop.send_replace(true);
        let tasks = std::mem::take(&mut *self.inner.tasks.lock().expect("jobs lock"));
        for (name, task) in tasks {
            if let Err(e) = task.await {
                tracing::error!(job = name, error = %e, "job panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

    #[derive(Debug, PartialEq)]
    enum Event {
        Started(u32),
        Stopped(u32),
    }

    /// Reports its run's end when dropped, as a cancelled job's future is.
    struct Running(u32, mpsc::UnboundedSender<Event>);

    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.1.send(Event::Stopped(self.0));
        }
    }

    /// The next event. Time is paused in these tests and jumps ahead whenever every task waits,
    /// so an event that will never come fails the test at once instead of hanging it.
    async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
        let event = tokio::time::timeout(std::time::Duration::from_secs(3600), events.recv()).await;
        event.expect("an event, not silence").expect("the job holds a sender")
    }

    /// A job that reports its start and runs until cancelled.
    fn counting_job(
        events: mpsc::UnboundedSender<Event>,
    ) -> impl FnMut() -> futures_util::future::BoxFuture<'static, ()> {
        let mut runs = 0;
        move || {
            runs += 1;
            let (run, events) = (runs, events.clone());
            Box::pin(async move {
                let _running = Running(run, events.clone());
                let _ = events.send(Event::Started(run));
                std::future::pending::<()>().await;
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn leader_jobs_start_with_leadership_stop_on_step_down_and_restart_on_the_next() {
        let jobs = Jobs::new();
        let (leader, leadership) = watch::channel(false);
        let (tx, mut events) = mpsc::unbounded_channel();
        jobs.spawn_leader("test", leadership, counting_job(tx));
        leader.send_replace(true);
        assert_eq!(next(&mut events).await, Event::Started(1));
        leader.send_replace(false);
        assert_eq!(next(&mut events).await, Event::Stopped(1));
        leader.send_replace(true);
        assert_eq!(next(&mut events).await, Event::Started(2));
        jobs.shutdown().await;
        assert_eq!(events.try_recv(), Ok(Event::Stopped(2)), "stopped before shutdown returned");
        leader.send_replace(false);
        leader.send_replace(true);
        tokio::task::yield_now().await;
        assert!(events.try_recv().is_err(), "nothing starts after shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_down_seen_only_as_a_change_still_restarts_the_job() {
        let jobs = Jobs::new();
        let (leader, leadership) = watch::channel(true);
        let (tx, mut events) = mpsc::unbounded_channel();
        jobs.spawn_leader("test", leadership, counting_job(tx));
        assert_eq!(next(&mut events).await, Event::Started(1));
        // Both sent before the job's task runs again: it only sees that something changed.
        leader.send_replace(false);
        leader.send_replace(true);
        assert_eq!(next(&mut events).await, Event::Stopped(1));
        assert_eq!(next(&mut events).await, Event::Started(2));
        jobs.shutdown().await;
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_cancels_every_job_and_waits_for_it() {
        let jobs = Jobs::new();
        let (tx, mut events) = mpsc::unbounded_channel();
        let mut job = counting_job(tx);
        jobs.spawn("forever", job());
        assert_eq!(next(&mut events).await, Event::Started(1));
        jobs.shutdown().await;
        assert_eq!(events.try_recv(), Ok(Event::Stopped(1)));
    }

    #[tokio::test]
    async fn a_fail_stop_is_seen_with_its_first_reason() {
        let jobs = Jobs::new();
        let failed = jobs.failed();
        jobs.clone().fail_stop("fsync of the log failed");
        jobs.fail_stop("later trouble");
        assert_eq!(failed.await, "fsync of the log failed");
        assert_eq!(jobs.failed().await, "fsync of the log failed");
    }
}
