//! Checkpoints: making the applied state durable, so a restart replays only the log's tail.
//!
//! A checkpoint captures, under the state lock, the rows changed since the last one, the dedupe
//! journal records for them and `last_applied` = A. Then, without the lock:
//!
//! 1. the log is made durable through A: `last_applied` must never be on disk ahead of the
//!    entries it covers (openraft applies entries a majority holds, which may not include this
//!    node's disk yet, and in `async` mode a power cut would otherwise leave state that points at
//!    entries this node no longer has);
//! 2. the ConsumeQueues are synced: they hold every record the captured state counts (and maybe
//!    later ones, which the state does not claim and a replay rewrites identically);
//! 3. the journal records are written and synced, past the length the current checkpoint names,
//!    and so are the timer wheel's new records (`timer_wheel.rs`);
//! 4. one atomic sled batch writes the rows, A, the journal's new length and the wheel's file
//!    lengths, then is flushed.
//!
//! A checkpoint that finds `last_applied` where the last successful one of this run left it
//! does none of this: nothing changed.
//!
//! A crash before step 4 completes leaves the previous batch in force — its journal length and
//! the wheel's file lengths cut off what step 3 wrote — so the node restarts exactly at the
//! previous checkpoint and replays from there. A crash after it restarts at A. There is no point at which part of one checkpoint
//! is visible. If a step fails, the changes it took are marked changed again for the next
//! checkpoint; a failed sync of ConsumeQueues or sled means the disk may have dropped written
//! pages, so the broker fails stop instead of trusting a later sync (see `Broker::failure`).

use crate::broker::handle::{Broker, KEY_APPLIED, KEY_JOURNAL, KEY_TIMERS, json};
use crate::broker::timer_wheel::{WheelWrites, remove_files};
use crate::broker::{BrokerError, dedupe_journal::Pending, state::LogPosition};

impl Broker {
    /// Whether anything was applied since the last successful checkpoint of this run. Every
    /// change of the state comes with an entry applied (or a snapshot installed, which moves
    /// `last_applied` too): with none there is nothing to write, and an idle group neither
    /// writes nor syncs.
    pub fn needs_checkpoint(&self) -> bool {
        let last_applied = self.state().last_applied;
        *self.inner.checkpointed.lock().expect("checkpointed") != Some(last_applied)
    }

    /// Makes the applied state durable (see the module docs). Runs beside apply, which waits
    /// only while the changes are captured.
    pub fn checkpoint(&self) -> Result<(), BrokerError> {
        let mut journal = self.inner.journal.lock().expect("journal lock");
        self.refuse_if_failed()?;
        if !self.needs_checkpoint() {
            return Ok(());
        }
        let (batch, taken, pending, mut wheel, applied) = {
            let mut state = self.state_mut();
            let mut batch = sled::Batch::default();
            let taken: Vec<_> =
                state.tables().into_iter().map(|(prefix, table)| table.write_changes(prefix, &mut batch)).collect();
            let changed = state.data.dedupe.take_changed();
            let pending = journal.prepare(changed, &state.data.dedupe);
            let wheel = state.data.timers.prepare();
            batch.insert(KEY_APPLIED, json(&state.applied()));
            (batch, taken, pending, wheel, state.last_applied)
        };
        match self.persist(&mut journal, batch, &pending, &mut wheel, applied) {
            Ok(()) => {
                *self.inner.checkpointed.lock().expect("checkpointed") = Some(applied);
                // Tables kept on disk can now read these rows from sled instead of memory.
                let emptied = {
                    let mut state = self.state_mut();
                    for ((_, table), taken) in state.tables().into_iter().zip(taken) {
                        table.settle(taken);
                    }
                    state.data.timers.committed(wheel)
                };
                if let Err(e) = remove_files(&self.inner.options.dir, &emptied) {
                    // The checkpoint stands; the next start removes files its mark does not name.
                    tracing::warn!(error = %e, "removing the files of emptied timer hours failed");
                }
                Ok(())
            }
            Err(e) => {
                // Nothing of this checkpoint is in force: the next one writes these changes.
                let mut state = self.state_mut();
                for ((_, table), taken) in state.tables().into_iter().zip(taken) {
                    table.give_back(taken);
                }
                state.data.dedupe.mark_changed(pending.keys);
                journal.abandoned();
                Err(e)
            }
        }
    }

    fn persist(
        &self,
        journal: &mut crate::broker::dedupe_journal::DedupeJournal,
        mut batch: sled::Batch,
        pending: &Pending,
        wheel: &mut WheelWrites,
        applied: Option<LogPosition>,
    ) -> Result<(), BrokerError> {
        crate::crash_point!("checkpoint::after_capture");
        if let Some(a) = applied {
            self.inner.log.sync_through(a.index)?;
        }
        crate::crash_point!("checkpoint::after_log_sync");
        if let Err(e) = self.inner.queues.sync() {
            return Err(self.fail(format!("syncing ConsumeQueues: {e}")));
        }
        if let Err(e) = self.inner.message_index.sync() {
            return Err(self.fail(format!("syncing the message index: {e}")));
        }
        crate::crash_point!("checkpoint::after_queue_sync");
        let mark = journal.write(pending)?;
        crate::crash_point!("checkpoint::after_journal");
        batch.insert(KEY_JOURNAL, json(&mark));
        wheel.write()?;
        crate::crash_point!("checkpoint::after_timer_wheel");
        batch.insert(KEY_TIMERS, json(&wheel.mark));
        self.inner.tree.apply_batch(batch)?;
        crate::crash_point!("checkpoint::after_batch");
        if let Err(e) = self.inner.db.flush() {
            return Err(self.fail(format!("flushing metadata: {e}")));
        }
        crate::crash_point!("checkpoint::after_flush");
        journal.committed(mark, pending)?;
        Ok(())
    }
}
