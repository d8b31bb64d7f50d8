//! Planning a POP: which messages a receive hands out, read from this node's applied state.
//!
//! The plan becomes a [`Pop`] command that names what it expects (queue positions, delivery
//! generations), so planning from a follower's or a stale view is safe: apply drops what no longer
//! holds, and the receiver plans again. Order of preference in each queue: deliveries whose
//! invisible time passed (again, or to the dead-letter topic after the group's max attempts),
//! held messages of orderly groups that are free now, then new messages from the group's position.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use rockraft_proto::rockraft::{DeadLetter, SendBatch};

use crate::broker::delivery;
use crate::broker::group::{GroupConfig, dead_letter_topic};
use crate::broker::message_view::MessageView;
use crate::broker::plugins::FilterUnavailable;
use crate::broker::pop::{ChannelId, Pop, PopQueue, QueueTake, Receipt, Redelivery};
use crate::broker::read::message_in;
use crate::broker::state::QueueRange;
use crate::broker::{Broker, BrokerError, StoredView, TopicConfig, split_position};

/// How many new queue records one plan looks at per queue, so a heavily filtered queue still
/// makes a small entry.
const SCAN_LIMIT: u64 = 2048;
/// Dead letters one plan proposes at most (each is an entry carrying a message).
const DEAD_LETTERS_PER_PLAN: usize = 64;
/// Queue records one filter window covers at least, so a small receive still filters in batches.
const MIN_WINDOW: u64 = 32;

/// Which messages a subscription wants (the plugin host implements it with WASM filters).
pub trait MessageFilter: Sync {
    /// False only if no message with this tag hash can pass.
    fn may_match(&self, tag_hash: u64) -> bool;
    /// Whether deciding needs the messages themselves (else the tag hash settles it).
    fn reads_messages(&self) -> bool;
    /// Which messages pass, in order.
    fn passes(&self, messages: &[StoredView], now_ms: i64) -> Vec<bool>;
    /// `passes`, for a filter that may not be able to run at all (its host failed, not the
    /// message): the answers before the first entry it could not be run on, and why. Planning
    /// stops before that entry, so a later pop offers it again; it is never passed over.
    fn screen(&self, messages: &[StoredView], now_ms: i64) -> Result<Vec<bool>, FilterUnavailable> {
        Ok(self.passes(messages, now_ms))
    }
}

/// Every message, none read.
pub struct MatchAll;

impl MessageFilter for MatchAll {
    fn may_match(&self, _: u64) -> bool {
        true
    }
    fn reads_messages(&self) -> bool {
        false
    }
    fn passes(&self, messages: &[StoredView], _: i64) -> Vec<bool> {
        vec![true; messages.len()]
    }
}

pub struct PopRequest<'a> {
    pub group: &'a GroupConfig,
    pub topic: &'a TopicConfig,
    pub filter: &'a dyn MessageFilter,
    pub max_messages: usize,
    pub invisible_ms: i64,
    pub now_ms: i64,
    /// The queue looked at first; callers rotate it so queues share batches fairly.
    pub first_queue: u32,
    /// Take from the highest queue down and fill the batch before moving on (a priority topic's
    /// receive, see [`GroupConfig::by_priority_on`]), instead of from `first_queue` in turn.
    pub by_priority: bool,
}

#[derive(Debug)]
pub struct PopPlan {
    pub pop: Pop,
    /// Deliveries that used up the group's attempts.
    pub dead_letters: Vec<DeadLetter>,
    /// When the earliest delivery still invisible falls due, if any: a waiting receiver wakes then.
    pub next_due_ms: Option<i64>,
    /// Why the filter could not be run on some message, if it could not: planning stopped before
    /// that message in its queue.
    pub filter_unavailable: Option<String>,
}

/// Threads queues are screened on at most.
const MAX_SCAN_THREADS: usize = 4;

/// The threads selective pops screen queues on, kept for the process (their filter buffers and
/// allocator state with them); none on a single core.
fn scan_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_SCAN_THREADS);
        if threads < 2 {
            return None;
        }
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).thread_name(|i| format!("rockraft-scan-{i}"));
        pool.build().map_err(|e| tracing::warn!(error = %e, "screening queues on one thread")).ok()
    })
    .as_ref()
}

/// One queue's part of a plan while new messages are taken.
struct QueueScan {
    range: QueueRange,
    take: QueueTake,
    blocked: BTreeSet<String>,
    filter_unavailable: Option<String>,
}

/// A window of a queue through the filter.
struct Screened {
    /// The offsets that pass, with their message group (orderly deliveries) or "".
    wanted: Vec<(u64, String)>,
    /// The offset the filter could not be run on, and why: the window is decided only before it.
    stopped: Option<(u64, String)>,
}

impl PopPlan {
    pub fn delivers(&self) -> bool {
        !self.pop.redeliveries.is_empty() || self.pop.takes.iter().any(|t| !t.deliver.is_empty())
    }

    /// Whether proposing the pop changes anything (it may only move past filtered-out messages).
    pub fn changes_state(&self) -> bool {
        self.delivers() || self.pop.takes.iter().any(|t| t.to != t.from || !t.hold.is_empty())
    }
}

impl Broker {
    pub fn plan_pop(&self, r: &PopRequest) -> Result<PopPlan, BrokerError> {
        let topic = r.topic.name.as_str();
        let (topic_epoch, queues): (u64, Vec<(u32, QueueRange, PopQueue)>) = {
            let state = self.state();
            let data = &state.data;
            // 0 matches no topic: the pop is refused if the topic is gone.
            let epoch = data.consumption.topics.get(topic).copied().unwrap_or(0);
            let n = r.topic.queues;
            let order: Box<dyn Iterator<Item = u32>> = if r.by_priority {
                Box::new((0..n).rev())
            } else {
                Box::new((0..n).map(|i| r.first_queue.wrapping_add(i) % n))
            };
            let queues = order
                .map(|q| {
                    let range = data.queues.get(&(topic.to_string(), q)).copied().unwrap_or_default();
                    let key = (r.group.name.clone(), topic.to_string(), q);
                    let pop = data.consumption.queues.get(&key).cloned().unwrap_or(PopQueue {
                        // A group starts at the oldest message still kept.
                        position: range.start,
                        ..Default::default()
                    });
                    (q, range, pop)
                })
                .collect();
            (epoch, queues)
        };
        let mut plan = PopPlan {
            pop: Pop {
                group: r.group.name.clone(),
                topic: topic.to_string(),
                topic_epoch,
                now_ms: r.now_ms,
                invisible_ms: r.invisible_ms,
                takes: Vec::new(),
                redeliveries: Vec::new(),
                receives: Vec::new(),
            },
            dead_letters: Vec::new(),
            next_due_ms: None,
            filter_unavailable: None,
        };
        let mut budget = r.max_messages;
        let orderly = r.group.orderly_on(r.topic);
        // First what is owed: expired deliveries and held messages whose group is free.
        let mut scans = Vec::with_capacity(queues.len());
        for (queue_id, range, pop) in queues {
            let due = delivery::due(&pop, r.now_ms, r.group.max_attempts, &mut budget, &mut plan.next_due_ms);
            for (offset, generation) in due.dead {
                if plan.dead_letters.len() >= DEAD_LETTERS_PER_PLAN {
                    break;
                }
                let channel = ChannelId::Queue(queue_id);
                let receipt =
                    Receipt { group: r.group.name.clone(), topic: topic.to_string(), channel, offset, generation };
                match self.dead_letter_of(&receipt, r.now_ms) {
                    Ok(d) => plan.dead_letters.push(d),
                    // It stays in flight; the next plan tries again.
                    Err(e) => tracing::warn!(error = %e, offset, "cannot dead-letter a message yet"),
                }
            }
            let again =
                due.redeliver.into_iter().map(|(offset, generation)| Redelivery { queue_id, offset, generation });
            plan.pop.redeliveries.extend(again);
            // Message groups that may not get a delivery: in flight, or with an earlier message held.
            let mut blocked: BTreeSet<String> = pop.busy_groups().into_iter().map(str::to_string).collect();
            let mut take = QueueTake { queue_id, from: pop.position, to: pop.position, ..Default::default() };
            for (&offset, group) in &pop.held {
                if budget > 0 && !blocked.contains(group) {
                    take.deliver.push((offset, group.clone()));
                    budget -= 1;
                }
                blocked.insert(group.clone());
            }
            scans.push(QueueScan { range, take, blocked, filter_unavailable: None });
        }
        // Then new messages. Screening them through a filter that reads each message is the cost
        // of a selective subscription's pop: the queues are screened on several threads then,
        // sharing the budget.
        let budget = AtomicUsize::new(budget);
        let backlog = scans.iter().filter(|s| s.take.from.max(s.range.start) < s.range.next).count();
        // By priority, the queues are taken in order: a lower one only gets what a higher one
        // left of the budget.
        match scan_pool().filter(|_| (r.filter.reads_messages() || orderly) && backlog > 1 && !r.by_priority) {
            Some(pool) => {
                use rayon::prelude::*;
                pool.install(|| scans.par_iter_mut().try_for_each(|scan| self.scan_new(r, orderly, scan, &budget)))?;
            }
            None => {
                for scan in &mut scans {
                    self.scan_new(r, orderly, scan, &budget)?;
                }
            }
        }
        for QueueScan { take, filter_unavailable, .. } in scans {
            if let Some(reason) = filter_unavailable {
                plan.filter_unavailable.get_or_insert(reason);
            }
            if take.to != take.from || !take.deliver.is_empty() {
                plan.pop.takes.push(take);
            }
        }
        Ok(plan)
    }

    /// Takes new messages of one queue from its position, while `budget` lasts: those that pass
    /// are delivered (or held behind their message group), those that do not are passed over.
    fn scan_new(
        &self,
        r: &PopRequest,
        orderly: bool,
        scan: &mut QueueScan,
        budget: &AtomicUsize,
    ) -> Result<(), BrokerError> {
        let QueueScan { range, take, blocked, filter_unavailable } = scan;
        let claim = || budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1)).is_ok();
        let mut offset = take.from.max(range.start);
        let end = range.next.min(offset.saturating_add(SCAN_LIMIT));
        while budget.load(Ordering::Relaxed) > 0 && offset < end {
            // Filters run over a window at a time; what lies past the budget is left untaken.
            let left = budget.load(Ordering::Relaxed) as u64;
            let to = end.min(offset.saturating_add(left.max(MIN_WINDOW)));
            let mut next = to;
            let Screened { wanted, stopped } = self.screen(r, take.queue_id, offset, to, orderly)?;
            for (at, group) in wanted {
                if !group.is_empty() && blocked.contains(&group) {
                    take.hold.push((at, group));
                    continue;
                }
                if !claim() {
                    next = at;
                    break;
                }
                if !group.is_empty() {
                    blocked.insert(group.clone());
                }
                take.deliver.push((at, group));
            }
            if let Some((at, reason)) = stopped {
                // The filter could not be run on the message at `at`: this queue goes no further.
                offset = next.min(at);
                filter_unavailable.get_or_insert(reason);
                break;
            }
            offset = next;
        }
        take.to = offset.max(take.from);
        Ok(())
    }

    /// The messages in `from..to` of a queue that pass the filter, with their message group
    /// when deliveries are orderly (else ""), in queue order; and, if the filter could not be run
    /// on some message, its offset and why (the messages answered are those before it).
    fn screen(
        &self,
        r: &PopRequest,
        queue_id: u32,
        from: u64,
        to: u64,
        orderly: bool,
    ) -> Result<Screened, BrokerError> {
        let topic = r.topic.name.as_str();
        let mut wanted = Vec::new();
        // The encoded messages to look at, with their offsets and store times; records of one
        // entry come in a row, so the entry is looked up once for them.
        let mut found = Vec::new();
        let mut last: Option<(u64, Arc<SendBatch>)> = None;
        // `from..to` lies within the queue's range as planned; a record retention took since is
        // missing and skipped.
        let queue = self.inner.queues.get(topic, queue_id)?;
        for offset in from..to {
            let Some(record) = self.queue_record_in(&queue, topic, queue_id, offset)? else { continue };
            if !r.filter.may_match(record.tag_hash) {
                continue;
            }
            if !r.filter.reads_messages() && !orderly {
                wanted.push((offset, String::new()));
                continue;
            }
            let (index, ordinal) = split_position(record.position);
            if last.as_ref().is_none_or(|(at, _)| *at != index) {
                let Some(batch) = self.batch_at(index)? else { continue };
                last = Some((index, batch));
            }
            let Some((_, batch)) = &last else { continue };
            found.push((offset, message_in(batch, index, ordinal)?.clone(), batch.store_timestamp_ms));
        }
        if found.is_empty() {
            return Ok(Screened { wanted, stopped: None });
        }
        let read = found
            .iter()
            .map(|(offset, raw, store_timestamp_ms)| {
                Ok(StoredView {
                    topic,
                    queue_id,
                    offset: *offset,
                    store_timestamp_ms: *store_timestamp_ms,
                    message: MessageView::parse(raw)?,
                })
            })
            .collect::<Result<Vec<_>, BrokerError>>()?;
        let (passed, stopped) = if r.filter.reads_messages() {
            match r.filter.screen(&read, r.now_ms) {
                Ok(passed) => (passed, None),
                Err(FilterUnavailable { decided, reason }) => {
                    let at = read.get(decided.len()).map(|m| m.offset);
                    (decided, at.map(|at| (at, reason)))
                }
            }
        } else {
            (vec![true; read.len()], None)
        };
        for (m, pass) in read.iter().zip(passed) {
            if pass {
                wanted.push((m.offset, if orderly { m.message.message_group.to_string() } else { String::new() }));
            }
        }
        Ok(Screened { wanted, stopped })
    }

    /// The command that moves the delivery `receipt` names to the group's dead-letter topic,
    /// carrying a copy of the message (none only if retention already took it).
    pub fn dead_letter_of(&self, receipt: &Receipt, now_ms: i64) -> Result<DeadLetter, BrokerError> {
        let ChannelId::Queue(queue_id) = receipt.channel else {
            return Err(BrokerError::BadRequest("a lite delivery is dead-lettered with its lite topic".into()));
        };
        let entry = self.read(&receipt.topic, queue_id, receipt.offset)?;
        let start = self.state().data.queues.get(&(receipt.topic.clone(), queue_id)).map_or(0, |r| r.start);
        if entry.is_none() && receipt.offset >= start {
            // Not applied here yet: never dead-letter a message without its copy.
            return Err(BrokerError::BadRequest(format!("message at offset {} is not known here yet", receipt.offset)));
        }
        Ok(dead_letter(receipt, entry.map(|e| dead_letter_copy(&receipt.group, e.raw, now_ms))))
    }
}

/// The dead letter that ends the delivery `r` names, with the message's copy if there is one.
pub(crate) fn dead_letter(r: &Receipt, batch: Option<SendBatch>) -> DeadLetter {
    let (queue_id, lite_id) = match r.channel {
        ChannelId::Queue(queue_id) => (queue_id, None),
        ChannelId::Lite(id) => (0, Some(id)),
    };
    DeadLetter {
        group: r.group.clone(),
        topic: r.topic.clone(),
        queue_id,
        offset: r.offset,
        generation: r.generation,
        batch,
        lite_id,
    }
}

/// The copy of a message `group` gave up on, for its dead-letter topic (one queue).
pub(crate) fn dead_letter_copy(group: &str, raw: bytes::Bytes, now_ms: i64) -> SendBatch {
    SendBatch {
        topic: dead_letter_topic(group),
        queue_id: 0,
        store_timestamp_ms: now_ms,
        clock_ms: now_ms,
        messages: vec![raw],
        queue_ids: vec![],
    }
}
