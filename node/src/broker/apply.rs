//! The deterministic apply step: one committed entry in, the new [`State`], the reply, and the
//! [`Effects`] the live broker carries out on disk (ConsumeQueue records, removed topics) and in
//! memory (waking receivers).
//!
//! Apply reads nothing but the entry and the state: no clock (the leader stamps times into
//! entries), no files. The snapshot builder runs this same code over older entries and simply
//! drops the effects, so a snapshot at any index is exactly the live state at that index.

use bytes::Bytes;
use rockraft_proto::rockraft::{DeadLetter, SendBatch};

use crate::broker::Reply;
use crate::broker::command::{AdminCommand, Command, DecodeError, Steps};
use crate::broker::delivery::{ChannelId, Settle, Settled};
use crate::broker::effects::Effects;
use crate::broker::failover::{self, Failover};
use crate::broker::group::GroupConfig;
use crate::broker::group::{dead_letter_topic, dead_letter_topic_config};
use crate::broker::lite::LiteCommand;
use crate::broker::metadata::Metadata;
use crate::broker::partition::Partition;
use crate::broker::placement::Placement;
use crate::broker::plugins::PluginCommand;
use crate::broker::pop::{ConsumeCommand, ConsumeOutcome, Receipt};
use crate::broker::repair::{self, Repair};
use crate::broker::settings::SettingsChange;
use crate::broker::state::{LogPosition, MembershipRecord, State};
use crate::broker::topic::TopicConfig;

impl State {
    /// Applies a committed command entry at `at`. Commands that are invalid when applied are
    /// answered, the same way on every replica; an undecodable payload changes nothing. `Err`
    /// (nothing applied, `last_applied` unchanged) for an entry of a format, kind or variant
    /// this release does not know: a newer release wrote it, and skipping it would leave this
    /// replica apart from those that apply it.
    pub(crate) fn apply(&mut self, at: LogPosition, payload: Bytes, fx: &mut Effects) -> Result<Reply, DecodeError> {
        let reply = match Command::decode_entry(payload) {
            Ok((command, steps)) => self.apply_command(at, command, steps, fx),
            Err(e) if e.is_unknown() => return Err(e),
            // A known kind whose body does not decode: no release writes one (the leader decodes
            // a forwarded command before it proposes it), and every replica runs the same decoder
            // over the same bytes, so all of them skip it alike. Stopping instead would stop the
            // whole cluster on an entry that can never leave the log.
            Err(e) => {
                tracing::error!(index = at.index, error = %e, "skipping an entry that is not a broker command");
                Reply::Rejected(format!("the entry {e}"))
            }
        };
        self.last_applied = Some(at);
        Ok(reply)
    }

    /// Applies an entry without a command: blank, or a membership change (`config`).
    pub(crate) fn apply_other(&mut self, at: LogPosition, config: Option<String>) {
        self.last_applied = Some(at);
        if let Some(config) = config {
            self.membership = Some(MembershipRecord { at, config });
        }
    }

    /// A metadata command changes the metadata; a data command the partition. An entry of an
    /// earlier release ([`Steps::Combined`]) changed both at once: the partition takes its
    /// placement in the same step, as it did then.
    fn apply_command(&mut self, at: LogPosition, command: Command, steps: Steps, fx: &mut Effects) -> Reply {
        let combined = steps == Steps::Combined;
        if let (true, Command::DeadLetter(d)) = (combined, &command) {
            // Releases before the dead-letter topic came with its group created it here.
            if dead_letter_copy(d).is_some() && !self.meta.topics.contains_key(&dead_letter_topic(&d.group)) {
                let dlq = dead_letter_topic_config(&d.group);
                self.meta.topics.insert(dlq.name.clone(), dlq);
                let changes = self.meta.placement_for(&self.data);
                self.data.apply_placement(&Placement { changes, through: Some(at.index) }, fx);
            }
        }
        if !command.is_metadata() {
            return self.data.apply(at, command, fx);
        }
        let reply = self.meta.apply(at, command);
        fx.metadata_changed = true;
        if combined {
            let changes = self.meta.placement_for(&self.data);
            self.data.apply_placement(&Placement { changes, through: Some(at.index) }, fx);
        }
        reply
    }
}

impl Metadata {
    /// Applies a metadata command at `at`: it reads only the metadata. A data command is
    /// refused (the caller routes by [`Command::is_metadata`]).
    pub(crate) fn apply(&mut self, at: LogPosition, command: Command) -> Reply {
        match command {
            Command::Admin(AdminCommand::CreateTopic(t)) => self.create_topic(at.index, t),
            Command::Admin(AdminCommand::DeleteTopic { name }) => self.delete_topic(name),
            Command::Admin(AdminCommand::Configure(change)) => self.configure(&change),
            Command::Admin(AdminCommand::RecordFailover(f)) => self.record_failover(at, f),
            Command::Admin(AdminCommand::RecordRepair(r)) => self.record_repair(r),
            Command::Admin(AdminCommand::CreateGroup(g)) => self.create_group(at.index, g),
            Command::Admin(AdminCommand::DeleteGroup { name }) => self.delete_group(name),
            Command::Plugin(p) => self.apply_plugin(p),
            Command::Access(a) => self.access.apply(a),
            Command::Send(_)
            | Command::Consume(_)
            | Command::DeadLetter(_)
            | Command::Timer(_)
            | Command::Transaction(_)
            | Command::Lite(_)
            | Command::Place(_)
            | Command::Admin(AdminCommand::ReleaseHolds { .. }) => {
                Reply::Rejected("a data command applied to the metadata".into())
            }
        }
    }

    fn create_topic(&mut self, index: u64, t: TopicConfig) -> Reply {
        if let Err(e) = t.validate() {
            return Reply::Rejected(e.to_string());
        }
        match self.topics.get(&t.name) {
            Some(existing) if existing.same_request(&t) => Reply::Applied,
            Some(_) => Reply::TopicExists(t.name),
            None => {
                self.topic_epochs.insert(t.name.clone(), index);
                let placed = t.spread(index, self.settings.data_groups);
                self.topics.insert(placed.name.clone(), placed);
                Reply::Applied
            }
        }
    }

    /// The topic's data goes from each partition by placement (`DropTopic`).
    fn delete_topic(&mut self, name: String) -> Reply {
        self.topic_epochs.remove(&name);
        self.plugins.topic_deleted(&name);
        match self.topics.remove(&name) {
            Some(_) => Reply::Applied,
            None => Reply::TopicNotFound(name),
        }
    }

    fn configure(&mut self, change: &SettingsChange) -> Reply {
        match self.settings.changed(change) {
            Ok(settings) => {
                self.settings = settings;
                Reply::Applied
            }
            Err(e) => Reply::Rejected(e.to_string()),
        }
    }

    /// Keeps a new leader's failover record: only from the leader of the entry's own term, and
    /// only the newest [`failover::KEPT`].
    fn record_failover(&mut self, at: LogPosition, f: Failover) -> Reply {
        if f.term != at.term || f.leader != at.leader {
            return Reply::Rejected(format!("a failover record of term {} in an entry of term {}", f.term, at.term));
        }
        if let Err(e) = f.validate() {
            return Reply::Rejected(e.to_string());
        }
        self.failovers.insert(f.term, f);
        while self.failovers.len() > failover::KEPT {
            let Some(oldest) = self.failovers.keys().next().copied() else { break };
            self.failovers.remove(&oldest);
        }
        Reply::Applied
    }

    /// Keeps a node's repair record (once, however often it is proposed): only the newest
    /// [`repair::KEPT`] by when they were done.
    fn record_repair(&mut self, r: Repair) -> Reply {
        if let Err(e) = r.validate() {
            return Reply::Rejected(e.to_string());
        }
        self.repairs.insert(r.key(), r);
        while self.repairs.len() > repair::KEPT {
            let oldest = self.repairs.iter().min_by_key(|(key, r)| (r.done_ms, (*key).clone())).map(|(k, _)| k.clone());
            let Some(oldest) = oldest else { break };
            self.repairs.remove(&oldest);
        }
        Reply::Applied
    }

    /// A group comes with its dead-letter topic, so that can be subscribed to at once.
    fn create_group(&mut self, index: u64, g: GroupConfig) -> Reply {
        if let Err(e) = g.validate() {
            return Reply::Rejected(e.to_string());
        }
        match self.groups.get(&g.name) {
            Some(existing) if *existing == g => return Reply::Applied,
            Some(_) => return Reply::GroupExists(g.name),
            None => {}
        }
        let dlq = dead_letter_topic_config(&g.name);
        if !self.topic_epochs.contains_key(&dlq.name) {
            self.topic_epochs.insert(dlq.name.clone(), index);
        }
        if !self.topics.contains_key(&dlq.name) {
            self.topics.insert(dlq.name.clone(), dlq);
        }
        self.group_epochs.insert(g.name.clone(), index);
        self.groups.insert(g.name.clone(), g);
        Reply::Applied
    }

    /// The group's progress goes from each partition by placement (`DropGroup`).
    fn delete_group(&mut self, name: String) -> Reply {
        if self.groups.remove(&name).is_none() {
            return Reply::GroupNotFound(name);
        }
        self.group_epochs.remove(&name);
        self.plugins.group_filters.remove(&name);
        Reply::Applied
    }

    fn apply_plugin(&mut self, p: PluginCommand) -> Reply {
        if let PluginCommand::Register { module, .. } = &p
            && module.len() as u64 > self.settings.max_module_bytes
        {
            return Reply::Rejected(format!(
                "a module of {} bytes is over the cluster's max_module_bytes ({})",
                module.len(),
                self.settings.max_module_bytes
            ));
        }
        let groups = &self.groups;
        self.plugins.apply(p, &self.topics, |g| groups.contains_key(g))
    }
}

impl Partition {
    /// Applies a data command at `at`: it reads only the partition. A metadata command is
    /// refused (the caller routes by [`Command::is_metadata`]).
    pub(crate) fn apply(&mut self, at: LogPosition, command: Command, fx: &mut Effects) -> Reply {
        let index = at.index;
        match command {
            Command::Send(batch) => {
                let topic = batch.topic.clone();
                let reply = self.apply_send(at, batch, true, fx);
                fx.wakes.push(topic);
                reply
            }
            Command::Consume(c) => self.apply_consume(index, c, fx),
            Command::Timer(t) => Reply::Timer(self.apply_timer(t, fx)),
            Command::Transaction(t) => Reply::Transaction(self.apply_transaction(t, fx)),
            Command::Admin(AdminCommand::ReleaseHolds { below }) => {
                self.release_holds(below, fx);
                Reply::Applied
            }
            Command::DeadLetter(d) => self.apply_dead_letter(at, d, fx),
            Command::Lite(l) => self.apply_lite(index, l, fx),
            Command::Place(p) => {
                // One of older metadata than the partition has is answered alike: nothing to do.
                self.apply_placement(&p, fx);
                Reply::Applied
            }
            Command::Admin(
                AdminCommand::CreateTopic(_)
                | AdminCommand::DeleteTopic { .. }
                | AdminCommand::Configure(_)
                | AdminCommand::RecordFailover(_)
                | AdminCommand::RecordRepair(_)
                | AdminCommand::CreateGroup(_)
                | AdminCommand::DeleteGroup { .. },
            )
            | Command::Plugin(_)
            | Command::Access(_) => Reply::Rejected("a metadata command applied to a data partition".into()),
        }
    }

    /// Pops and resets change the queues; acks, changes of invisible time and renewals settle
    /// each delivery on the channel its receipt names, a queue's or a lite topic's alike.
    fn apply_consume(&mut self, index: u64, command: ConsumeCommand, fx: &mut Effects) -> Reply {
        // Only queues this group holds by the placement: one placed elsewhere is another group's.
        if let ConsumeCommand::Pop(pop) = &command
            && let Some(topic) = self.topics.get(&pop.topic)
            && self.misplaced(topic, &pop.takes.iter().map(|t| t.queue_id).collect::<Vec<_>>())
        {
            return Reply::Consume(ConsumeOutcome::TopicNotFound(pop.topic.clone()));
        }
        // A pull consumer's commit: a queue this group holds, to a position inside the queue (a
        // client's number beyond its end would otherwise skip what is stored next).
        let command = match command {
            ConsumeCommand::CommitOffset { group, topic, topic_epoch, queue_id, offset } => {
                match self.topics.get(&topic) {
                    Some(config) if queue_id >= config.queues || self.misplaced(config, &[queue_id]) => {
                        return Reply::Consume(ConsumeOutcome::TopicNotFound(topic));
                    }
                    _ => {}
                }
                let range = self.queues.get(&(topic.clone(), queue_id)).copied().unwrap_or_default();
                let offset = offset.clamp(range.start, range.next.max(range.start));
                ConsumeCommand::CommitOffset { group, topic, topic_epoch, queue_id, offset }
            }
            other => other,
        };
        let wakes = command.wakes(&self.consumption).map(str::to_string);
        let outcome = match command.settle_each(index, |r, step| self.settle(r, step, fx)) {
            None => self.consumption.apply(index, &command),
            Some(Some(outcome)) => outcome,
            Some(None) => return Reply::Rejected("reading lite topic state failed".into()),
        };
        fx.wakes.extend(wakes);
        Reply::Consume(outcome)
    }

    /// Takes `step` on the delivery `r` names; `None` if the disk failed (`fx` says so). What
    /// settles a lite delivery may make its lite topic deliverable again.
    fn settle(&mut self, r: &Receipt, step: Settle, fx: &mut Effects) -> Option<Settled> {
        if let ChannelId::Queue(_) = r.channel {
            return Some(self.consumption.settle(r, step));
        }
        let settled = match self.lite.settle(r, step) {
            Ok(settled) => settled,
            Err(e) => return fx.fail_with(e, None),
        };
        // The parent as the group is bound to it (a receipt of an earlier release names none).
        let groups = &self.consumption.groups;
        if let Some(parent) = groups.get(&r.group).and_then(|g| g.lite.as_ref()).map(|b| b.topic.clone()) {
            fx.wakes.push(parent);
        }
        Some(settled)
    }

    fn apply_lite(&mut self, index: u64, command: LiteCommand, fx: &mut Effects) -> Reply {
        let groups = &self.consumption.groups;
        let group_of = |g: &str| groups.get(g).cloned();
        let outcome = match self.lite.apply(index, &command, &group_of) {
            Ok(outcome) => outcome,
            Err(e) => return fx.fail_with(e, Reply::Rejected("reading lite topic state failed".into())),
        };
        // A sync may hand lite topics to a client that waits for them.
        let group = match &command {
            LiteCommand::Sync { group, .. } => Some(group.as_str()),
            _ => None,
        };
        if let Some(parent) = group.and_then(|g| groups.get(g)).and_then(|g| g.lite.as_ref()).map(|b| b.topic.clone()) {
            fx.wakes.push(parent);
        }
        Reply::Lite(outcome)
    }

    /// Ends the delivery, then stores the message's copy in the group's dead-letter topic.
    fn apply_dead_letter(&mut self, at: LogPosition, d: DeadLetter, fx: &mut Effects) -> Reply {
        let index = at.index;
        let receipt = dead_letter_receipt(&d);
        let with_copy = dead_letter_copy(&d).is_some();
        let dlq = dead_letter_topic(&d.group);
        // The delivery ends only if its copy can be stored: the topic comes with the group.
        if with_copy && !self.topics.contains_key(&dlq) {
            return Reply::TopicNotFound(dlq);
        }
        if let ChannelId::Lite(_) = receipt.channel {
            match self.settle(&receipt, Settle::DeadLetter, fx) {
                Some(Settled::Done) => {}
                Some(_) => return Reply::Consume(ConsumeOutcome::StaleReceipt),
                None => return Reply::Rejected("reading lite topic state failed".into()),
            }
        } else {
            let frees = self.consumption.frees_message_group(&receipt);
            if !self.consumption.dead_letter(index, &receipt, with_copy) {
                return Reply::Consume(ConsumeOutcome::StaleReceipt);
            }
            if frees {
                fx.wakes.push(d.topic.clone());
            }
        }
        let Some(batch) = dead_letter_copy(&d).cloned() else {
            // The message was gone (retention): the delivery ends all the same.
            return Reply::Consume(ConsumeOutcome::Done);
        };
        let reply = self.apply_send(at, batch, false, fx);
        fx.wakes.push(dlq);
        match reply {
            Reply::Sent(_) => Reply::Consume(ConsumeOutcome::Done),
            other => other,
        }
    }
}

/// The message copy a dead letter carries, if it is one for the group's dead-letter topic.
pub(crate) fn dead_letter_copy(d: &DeadLetter) -> Option<&SendBatch> {
    d.batch.as_ref().filter(|b| b.topic == dead_letter_topic(&d.group) && b.queue_id == 0)
}

fn dead_letter_receipt(d: &DeadLetter) -> Receipt {
    Receipt {
        group: d.group.clone(),
        topic: d.topic.clone(),
        channel: d.lite_id.map_or(ChannelId::Queue(d.queue_id), ChannelId::Lite),
        offset: d.offset,
        generation: d.generation,
    }
}
