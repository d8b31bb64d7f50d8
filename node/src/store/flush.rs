//! The background thread that makes appends durable.
//!
//! `sync` mode: every append hands in its completion callback; the thread takes everything pending
//! at the moment it wakes, issues one `fdatasync` per segment involved, then completes all of
//! those callbacks (group commit). `async` mode: appends complete at once and only mark their
//! segment dirty; the thread syncs dirty segments every `flush_interval`. Either way a successful
//! sync advances the log's durable index to the last record appended before it started, and a
//! failed one stops the log (see `durable.rs`).

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::store::Durability;
use crate::store::durable::{Covers, DurableState};
use crate::store::segment::Segment;

/// Called once the appended records are durable, or with the error that stopped it.
pub type FlushCallback = Box<dyn FnOnce(io::Result<()>) + Send>;

pub(crate) enum FlushJob {
    /// Sync `segment`, which holds the appends `covers` describes, then report to `done`.
    Sync { segment: Arc<Segment>, covers: Covers, done: FlushCallback },
    /// `segment` has unsynced writes up to `covers` (async mode).
    Dirty { segment: Arc<Segment>, covers: Covers },
}

pub(crate) struct Flusher {
    tx: Option<Sender<FlushJob>>,
    thread: Option<JoinHandle<()>>,
    /// Inside a simulation: each job is synced at once by the caller, since a thread would run
    /// on real time and reorder the simulated run.
    inline: Option<Arc<DurableState>>,
}

impl Flusher {
    pub fn start(durability: Durability, interval: Duration, durable: Arc<DurableState>) -> io::Result<Flusher> {
        if crate::simulation::active() {
            return Ok(Flusher { tx: None, thread: None, inline: Some(durable) });
        }
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new().name("rockraft-flush".into()).spawn(move || match durability {
            Durability::Sync => run_group_commit(rx, &durable),
            Durability::Async => run_periodic(rx, interval, &durable),
        })?;
        Ok(Flusher { tx: Some(tx), thread: Some(thread), inline: None })
    }

    pub fn submit(&self, job: FlushJob) {
        if let Some(durable) = &self.inline {
            let mut batch = Batch::default();
            batch.take(job);
            batch.sync(durable);
            return;
        }
        if let Some(tx) = &self.tx
            && let Err(mpsc::SendError(job)) = tx.send(job)
            && let FlushJob::Sync { done, .. } = job
        {
            done(Err(io::Error::other("log flusher has stopped")));
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        // Closing the channel lets the thread finish what is pending, sync, and exit.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The jobs one sync covers.
#[derive(Default)]
struct Batch {
    segments: BTreeMap<u64, Arc<Segment>>,
    callbacks: Vec<FlushCallback>,
    covers: Option<Covers>,
}

impl Batch {
    fn take(&mut self, job: FlushJob) {
        let (segment, covers) = match job {
            FlushJob::Sync { segment, covers, done } => {
                self.callbacks.push(done);
                (segment, covers)
            }
            FlushJob::Dirty { segment, covers } => (segment, covers),
        };
        self.segments.insert(segment.base_offset, segment);
        // Jobs arrive in append order, so the newest covers the most.
        self.covers = Some(covers);
    }

    fn is_empty(&self) -> bool {
        self.segments.is_empty() && self.callbacks.is_empty()
    }

    /// Syncs, records what became durable, and completes the callbacks.
    fn sync(self, durable: &DurableState) {
        let result = sync_segments(&self.segments, self.covers, durable);
        for cb in self.callbacks {
            cb(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            });
        }
    }
}

fn sync_segments(
    segments: &BTreeMap<u64, Arc<Segment>>,
    covers: Option<Covers>,
    durable: &DurableState,
) -> io::Result<()> {
    durable.check_io()?;
    for s in segments.values() {
        if let Err(e) = s.sync() {
            let e = durable.note(e);
            tracing::error!(segment = %s.path().display(), error = %e, "fdatasync failed");
            return Err(io::Error::other(e.to_string()));
        }
    }
    // A failed fsync elsewhere meanwhile may have dropped these very pages: this one's success
    // would then prove nothing.
    durable.check_io()?;
    if let Some(c) = covers {
        durable.advance(c);
    }
    Ok(())
}

fn run_group_commit(rx: Receiver<FlushJob>, durable: &DurableState) {
    while let Ok(first) = rx.recv() {
        let mut batch = Batch::default();
        batch.take(first);
        // Everything queued by now was written before this fsync starts, so one sync covers it.
        while let Ok(job) = rx.try_recv() {
            batch.take(job);
        }
        batch.sync(durable);
    }
}

fn run_periodic(rx: Receiver<FlushJob>, interval: Duration, durable: &DurableState) {
    let mut batch = Batch::default();
    let mut deadline = Instant::now() + interval;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(job) => {
                batch.take(job);
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                if !batch.is_empty() {
                    batch.sync(durable);
                }
                return;
            }
        }
        if !batch.is_empty() {
            std::mem::take(&mut batch).sync(durable);
        }
        deadline = Instant::now() + interval;
    }
}
