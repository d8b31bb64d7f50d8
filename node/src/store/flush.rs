//! The background thread that makes appends durable.
//!
//! `sync` mode: every append hands in its completion callback; the thread takes everything pending
//! at the moment it wakes, issues one `fdatasync` per segment involved, then completes all of
//! those callbacks (group commit). `async` mode: appends complete at once and only mark their
//! segment dirty; the thread syncs dirty segments every `flush_interval`.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::store::Durability;
use crate::store::segment::Segment;

/// Called once the appended records are durable, or with the error that stopped it.
pub type FlushCallback = Box<dyn FnOnce(io::Result<()>) + Send>;

pub(crate) enum FlushJob {
    /// Sync `segment`, then report to `done`.
    Sync { segment: Arc<Segment>, done: FlushCallback },
    /// `segment` has unsynced writes (async mode).
    Dirty(Arc<Segment>),
}

pub(crate) struct Flusher {
    tx: Option<Sender<FlushJob>>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    pub fn start(durability: Durability, interval: Duration) -> io::Result<Flusher> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new().name("rockraft-flush".into()).spawn(move || match durability {
            Durability::Sync => run_group_commit(rx),
            Durability::Async => run_periodic(rx, interval),
        })?;
        Ok(Flusher { tx: Some(tx), thread: Some(thread) })
    }

    pub fn submit(&self, job: FlushJob) {
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

fn sync_all(segments: &BTreeMap<u64, Arc<Segment>>) -> io::Result<()> {
    for s in segments.values() {
        if let Err(e) = s.sync() {
            tracing::error!(segment = %s.path().display(), error = %e, "fdatasync failed");
            return Err(io::Error::other(e.to_string()));
        }
    }
    Ok(())
}

fn complete(callbacks: Vec<FlushCallback>, result: &io::Result<()>) {
    for cb in callbacks {
        cb(match result {
            Ok(()) => Ok(()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        });
    }
}

fn take(job: FlushJob, segments: &mut BTreeMap<u64, Arc<Segment>>, callbacks: &mut Vec<FlushCallback>) {
    match job {
        FlushJob::Sync { segment, done } => {
            segments.insert(segment.base_offset, segment);
            callbacks.push(done);
        }
        FlushJob::Dirty(segment) => {
            segments.insert(segment.base_offset, segment);
        }
    }
}

fn run_group_commit(rx: Receiver<FlushJob>) {
    while let Ok(first) = rx.recv() {
        let mut segments = BTreeMap::new();
        let mut callbacks = Vec::new();
        take(first, &mut segments, &mut callbacks);
        // Everything queued by now was written before this fsync starts, so one sync covers it.
        while let Ok(job) = rx.try_recv() {
            take(job, &mut segments, &mut callbacks);
        }
        let result = sync_all(&segments);
        complete(callbacks, &result);
    }
}

fn run_periodic(rx: Receiver<FlushJob>, interval: Duration) {
    let mut segments = BTreeMap::new();
    let mut callbacks = Vec::new();
    let mut deadline = Instant::now() + interval;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(job) => {
                take(job, &mut segments, &mut callbacks);
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                let result = sync_all(&segments);
                complete(std::mem::take(&mut callbacks), &result);
                return;
            }
        }
        if !segments.is_empty() || !callbacks.is_empty() {
            let result = sync_all(&segments);
            complete(std::mem::take(&mut callbacks), &result);
            segments.clear();
        }
        deadline = Instant::now() + interval;
    }
}
