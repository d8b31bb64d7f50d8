//! Snapshots: the whole [`State`] as of one index.
//!
//! Snapshots are taken at the retention purge point, which is usually well behind
//! `last_applied`, so the live state can't simply be copied. Instead the previous snapshot (or
//! the empty state) is taken and the log from just after it up to the snapshot index is replayed
//! onto it with the same apply the live state ran, effects dropped. Every table — those of today
//! and any added later — is therefore exactly as of the snapshot index, and installing the
//! snapshot and then applying the rest of the log gives exactly the state of a replica that
//! applied everything. The entries replayed are still in the log: it is only ever purged up to
//! a snapshot.

use bytes::Bytes;

use crate::broker::BrokerError;
use crate::broker::effects::Effects;
use crate::broker::handle::{Broker, KEY_APPLIED, KEY_JOURNAL, KEY_TIMERS, json};
use crate::broker::state::{LogPosition, State};
use crate::broker::timer_wheel::remove_files_except;
use crate::store::record::{KIND_BLANK, KIND_COMMAND};

impl Broker {
    /// The state right after applying entry `at` (at most `last_applied`): `previous` — a
    /// snapshot at an earlier index, or none for the start of the log — with the log between
    /// them replayed onto it. `membership` renders a record of any other kind than a command or
    /// a blank (a membership change: the Raft layer knows its forms) as the JSON the state keeps,
    /// or refuses it.
    pub fn state_at(
        &self,
        at: u64,
        previous: Option<State>,
        membership: &dyn Fn(u8, Bytes) -> std::io::Result<String>,
    ) -> Result<State, BrokerError> {
        let mut state = previous.unwrap_or_default();
        state.prepare_local();
        let from = state.last_applied.map_or(0, |l| l.index + 1);
        let first = self.inner.log.bounds().first_index;
        if from < first && from <= at {
            return Err(BrokerError::CorruptEntry(format!(
                "a snapshot at {at} needs the log from {from}, but it starts at {first}"
            )));
        }
        let mut discard = Effects::default();
        for index in from..=at {
            let record = self.inner.log.read(index)?.ok_or(crate::store::StoreError::Missing(index))?;
            let position = LogPosition::from(&record.meta);
            match record.meta.kind {
                KIND_COMMAND => {
                    state
                        .apply(position, record.payload, &mut discard)
                        .map_err(|source| BrokerError::Unreadable { index, source })?;
                    discard = Effects::default();
                }
                KIND_BLANK => state.apply_other(position, None),
                kind => {
                    let json = membership(kind, record.payload)
                        .map_err(|e| BrokerError::CorruptEntry(format!("log record {index}: {e}")))?;
                    state.apply_other(position, Some(json));
                }
            }
        }
        // Below the snapshot the log is purged: no queue keeps an older message.
        for range in state.data.queues.values_mut() {
            range.start = range.next;
        }
        Ok(state)
    }

    /// After the log is purged up to `snapshot`, messages below each queue's `next` there are
    /// gone: the queue starts there. Local bookkeeping; safe to repeat (and repeated on start).
    pub fn forget_before(&self, snapshot: &State) -> Result<(), BrokerError> {
        let mut state = self.state_mut();
        for ((topic, q), at) in snapshot.data.queues.iter() {
            // A topic deleted and created again since the snapshot is another topic: its queues
            // start afresh.
            if snapshot.data.consumption.topics.get(topic) != state.data.consumption.topics.get(topic) {
                continue;
            }
            let key = (topic.clone(), *q);
            let Some(start) = state.data.queues.get(&key).map(|r| r.start) else { continue };
            if start < at.next {
                self.inner.queues.get(topic, *q)?.purge_below(at.next)?;
                crate::crash_point!("snapshot::forget::after_purge");
                if let Some(range) = state.data.queues.get_mut(&key) {
                    range.start = at.next;
                }
            }
        }
        drop(state);
        // Every message below the snapshot is gone from the log.
        if let Some(at) = snapshot.last_applied {
            self.inner.message_index.purge_below(at.index)?;
        }
        Ok(())
    }

    /// Replaces the whole state with `snapshot`, durably and at once: this node's log below the
    /// snapshot is going, so its queues start at the snapshot's `next`.
    pub fn install(&self, snapshot: State) -> Result<(), BrokerError> {
        let mut journal = self.inner.journal.lock().expect("journal lock");
        self.refuse_if_failed()?;
        let mut state = self.state_mut();
        let mut new = snapshot;
        new.prepare_local();
        // ConsumeQueue files first: a crash here leaves the old state, whose replay or the next
        // install rewrites them. A topic recreated since (another epoch) loses its old files.
        for name in state.data.topics.keys() {
            let same = new.data.consumption.topics.get(name) == state.data.consumption.topics.get(name);
            if !new.data.topics.contains_key(name) || !same {
                self.inner.queues.remove_topic(name)?;
            }
        }
        for ((topic, q), range) in new.data.queues.iter_mut() {
            range.start = range.next;
            self.inner.queues.get(topic, *q)?.purge_below(range.next)?;
        }
        crate::crash_point!("snapshot::install::after_queues");
        // Then every row at once: one batch replaces the tree, naming a journal generation that
        // holds exactly the snapshot's dedupe window.
        let pending = journal.prepare_rewrite(&new.data.dedupe);
        let mark = journal.write(&pending)?;
        crate::crash_point!("snapshot::install::after_journal");
        // The snapshot's timers as new files, past every generation of the files they replace.
        let dir = &self.inner.options.dir;
        let mut wheel = new.data.timers.prepare_install(dir, state.data.timers.next_generation());
        wheel.write()?;
        let mut batch = sled::Batch::default();
        for key in self.inner.tree.iter().keys() {
            let key = key?;
            if !key.starts_with(b"@schema") {
                batch.remove(key);
            }
        }
        for (prefix, table) in new.tables() {
            table.write_all(prefix, &mut batch);
        }
        new.data.dedupe.take_changed();
        batch.insert(KEY_APPLIED, json(&new.applied()));
        batch.insert(KEY_JOURNAL, json(&mark));
        batch.insert(KEY_TIMERS, json(&wheel.mark));
        self.inner.tree.apply_batch(batch)?;
        if let Err(e) = self.inner.db.flush() {
            return Err(self.fail(format!("flushing metadata: {e}")));
        }
        crate::crash_point!("snapshot::install::after_batch");
        journal.committed(mark, &pending)?;
        let keep: Vec<(i64, u64)> = wheel.mark.files.iter().map(|&(b, g, _)| (b, g)).collect();
        new.data.timers.committed(wheel);
        if let Err(e) = remove_files_except(dir, &keep) {
            // The install stands (its batch committed); the next start removes files its mark
            // does not name.
            tracing::warn!(error = %e, "removing the timer files the snapshot replaced failed");
        }
        for (prefix, table) in new.tables() {
            table.attach(&self.inner.tree, prefix);
        }
        let purged_below = new.last_applied.map(|a| a.index);
        *state = new;
        drop(state);
        drop(journal);
        self.inner.schedule_changes.send_modify(|v| *v += 1);
        // The snapshot's held messages were sent before this node's log starts: they are indexed
        // from the state; everything older is gone.
        if let Some(index) = purged_below {
            self.inner.message_index.purge_below(index)?;
        }
        self.index_stored_messages(false)?;
        Ok(())
    }
}
