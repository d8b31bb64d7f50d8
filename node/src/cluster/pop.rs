//! One POP attempt: plan from the leader's state and propose the pop. A follower's receive asks
//! the leader to do it (`PeerService.Pop`) and streams the messages from its own store (a node
//! holding no replica of the group gets them with the answer), so pops of one group are planned
//! in one place, one round at a time, and never race each other across nodes.
//! (Apply checks each pop's expectations anyway; this keeps them from failing.)

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::broker::lite::LiteActor;
use crate::broker::pop::{ChannelId, ConsumeCommand, ConsumeOutcome, Delivery, Receipt};
use crate::broker::{Broker, BrokerError, Command, PopRequest, StoredEntry};
use crate::cluster::clock::now_ms;
use crate::cluster::{Cluster, ClusterError};
use crate::plugin::subscription::{FilterKind, Subscription};
use crate::plugin::{PluginError, blocking};

/// What a receive asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopOrder {
    pub group: String,
    pub topic: String,
    /// The subscription's expression (checked by the receiving node).
    pub filter: String,
    pub filter_kind: FilterKind,
    pub max_messages: usize,
    pub invisible_ms: i64,
    /// The receive's `attempt_id`: the same id again (a retry after a lost answer) gets the
    /// deliveries the first attempt made, while they are in flight.
    pub attempt_id: Option<String>,
    /// A lite group's receive: the client whose subscribed lite topics it serves.
    pub lite_client: Option<String>,
    /// A lite receive's caller: only the owner of the client's subscriptions (or an admin) may
    /// receive from them.
    pub lite_by: LiteActor,
    /// Set by a receiving node that holds no replica of the group: the leader sends the
    /// delivered messages along ([`Popped::messages`]).
    pub with_messages: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Popped {
    /// Of queues, or of lite topics for a lite receive.
    pub deliveries: Vec<Delivery>,
    /// How long until the earliest invisible delivery falls due, if any; relative, as the leader's
    /// clock and the receiving node's may differ.
    pub next_due_in_ms: Option<u64>,
    /// The pop passed over messages its filter did not want: there may be more to look at past
    /// them, so a receive that got nothing asks again at once instead of waiting.
    pub passed_over: bool,
    /// The names of the lite topics of lite deliveries, by id.
    pub lite_topics: BTreeMap<u64, String>,
    /// Asked for with [`PopOrder::with_messages`]: each delivery's message as the leader read it
    /// (`None`: retention took it), in the order of `deliveries`; otherwise empty.
    pub messages: Vec<Option<CarriedMessage>>,
}

/// A delivered message as the group's leader read it, carried to a receiving node that holds no
/// replica of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarriedMessage {
    pub queue_id: u32,
    pub offset: u64,
    pub store_timestamp_ms: i64,
    /// The message as stored.
    pub raw: bytes::Bytes,
}

impl Popped {
    /// The message of `deliveries[i]` from `broker`'s store, or as the leader carried it.
    pub fn read(&self, broker: &Broker, topic: &str, i: usize) -> Result<Option<StoredEntry>, BrokerError> {
        if !self.messages.is_empty() {
            return match self.messages.get(i).cloned().flatten() {
                Some(m) => StoredEntry::decoded(topic, m.queue_id, m.offset, m.store_timestamp_ms, m.raw).map(Some),
                None => Ok(None),
            };
        }
        let Some(d) = self.deliveries.get(i) else { return Ok(None) };
        match d.channel {
            ChannelId::Queue(queue_id) => broker.read(topic, queue_id, d.offset),
            ChannelId::Lite(id) => match self.lite_topics.get(&id) {
                Some(lite) => broker.read_lite(topic, lite, id, d.offset),
                None => Ok(None),
            },
        }
    }

    /// Reads each delivery's message from `broker`'s store into [`Self::messages`], for a node
    /// that holds no replica of the group.
    pub fn carry_messages(&mut self, broker: &Broker, topic: &str) {
        let messages = (0..self.deliveries.len())
            .map(|i| match self.read(broker, topic, i) {
                Ok(found) => found.map(|e| CarriedMessage {
                    queue_id: e.queue_id,
                    offset: e.offset,
                    store_timestamp_ms: e.store_timestamp_ms,
                    raw: e.raw,
                }),
                Err(e) => {
                    tracing::error!(error = %e, "reading a delivered message for another node failed");
                    None
                }
            })
            .collect();
        self.messages = messages;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PopError {
    #[error("consumer group {0} does not exist")]
    GroupNotFound(String),
    #[error("topic {0} does not exist")]
    TopicNotFound(String),
    #[error("illegal filter expression: {0}")]
    IllegalFilter(String),
    /// The caller may not receive as this client (its lite subscriptions are another user's).
    #[error("{0}")]
    Forbidden(String),
    /// The group's filter plugin is quarantined: nothing is delivered (or passed over) until an
    /// operator enables it. The text says which plugin and how to enable it.
    #[error("{0}")]
    Quarantined(String),
    /// A filter plugin could not be run: nothing past the first message it could not decide was
    /// delivered or passed over, so a later receive is offered that message again.
    #[error("{0}")]
    FilterUnavailable(String),
    /// The leader could not be reached or could not propose.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("{0}")]
    Internal(String),
}

/// The pops of one (group, topic) are planned one round at a time (two plans from the same state
/// would pick the same messages). Receives that arrive while a round is under way wait for the
/// next, and it serves all of them with one plan and one Raft entry: sixteen long polls cost one
/// commit per round, not sixteen rounds in a row.
#[derive(Default)]
pub struct PopLocks(Mutex<HashMap<(String, String), Arc<PopLane>>>);

#[derive(Default)]
pub(super) struct PopLane {
    waiting: Mutex<Vec<PopWaiter>>,
    /// Held while a round of the lane is planned and proposed.
    pub(super) serial: tokio::sync::Mutex<()>,
}

struct PopWaiter {
    order: PopOrder,
    answer: tokio::sync::oneshot::Sender<Result<Popped, PopError>>,
}

/// The most message bytes a pop answered to a node holding no replica of the group carries.
const CARRIED_BYTES: usize = 64 << 20;

/// The most messages one round plans, whatever the receives waiting ask for together.
const MAX_MESSAGES_PER_ROUND: usize = 1024;

impl PopLocks {
    pub(super) fn get(&self, group: &str, topic: &str) -> Arc<PopLane> {
        let mut lanes = self.0.lock().expect("pop lanes");
        lanes.retain(|_, l| Arc::strong_count(l) > 1);
        Arc::clone(lanes.entry((group.to_string(), topic.to_string())).or_default())
    }
}

/// Whether two receives can share a plan: the same filter and invisible time.
fn same_kind(a: &PopOrder, b: &PopOrder) -> bool {
    a.filter == b.filter && a.filter_kind == b.filter_kind && a.invisible_ms == b.invisible_ms
}

impl Cluster {
    /// Pops on the leader, wherever this node is; the deliveries are applied here when it returns.
    /// A node holding no replica of the group gets the messages with the deliveries.
    pub async fn pop(&self, order: &PopOrder) -> Result<Popped, PopError> {
        if !self.holds_replica() {
            // Bounded, as the answer carries the messages: at most as many as fit the budget
            // at the largest entry size (at least one).
            let fit = (CARRIED_BYTES / self.max_entry_bytes().max(1)).max(1);
            let order = PopOrder { with_messages: true, max_messages: order.max_messages.min(fit), ..order.clone() };
            let asked = self.find_leader().await.map(|(id, _)| id);
            let popped = self
                .on_leader(async |c| c.pop_here(&order).await, async |peers, addr| peers.pop(addr, &order).await)
                .await;
            if let Err(PopError::Cluster(e)) = &popped
                && e.is_transient()
            {
                // Nothing here tells this node of a new leader: ask the group's holders, so the
                // receive's next try goes there.
                self.forget_leader(asked).await;
            }
            return popped;
        }
        self.on_leader(
            async |c| c.pop_here(order).await,
            async |peers, addr| {
                let popped = peers.pop(addr, order).await?;
                // The messages are read from this node's store: wait until it has applied the pop.
                let generations = popped.deliveries.iter().map(|d| d.generation);
                if let Some(last) = generations.max()
                    && let Err(e) = self.wait_applied(last).await
                {
                    // What is not applied yet is skipped when streaming and delivered again later.
                    tracing::debug!(error = %e, "streaming a pop before it is applied here");
                }
                Ok(popped)
            },
        )
        .await
    }

    /// Moves the delivery `receipt` names to its group's dead-letter topic, on the leader.
    pub async fn dead_letter(&self, receipt: &Receipt) -> Result<ConsumeOutcome, PopError> {
        self.on_leader(
            async |c| c.dead_letter_here(receipt).await,
            async |peers, addr| peers.dead_letter(addr, receipt).await,
        )
        .await
    }

    /// Ends a lite delivery into the dead-letter queue: the group's leader builds the letter
    /// from its store (this node may hold no replica of the group), finding the message by the
    /// lite topic's name `lite`.
    pub async fn lite_dead_letter(&self, lite: &str, receipt: &Receipt) -> Result<ConsumeOutcome, PopError> {
        self.on_leader(
            async |c| c.lite_dead_letter_here(lite, receipt).await,
            async |peers, addr| peers.lite_dead_letter(addr, lite, receipt).await,
        )
        .await
    }

    /// Builds a lite delivery's dead letter from this node's store (the leader's) and proposes it.
    pub async fn lite_dead_letter_here(&self, lite: &str, receipt: &Receipt) -> Result<ConsumeOutcome, PopError> {
        let letter = self
            .broker()
            .lite_dead_letter_of(lite, receipt, now_ms())
            .map_err(|e| PopError::Internal(e.to_string()))?;
        self.request(letter).await?.map_err(|refusal| PopError::Internal(refusal.to_string()))
    }

    /// Builds the dead letter from this node's store (the leader's) and proposes it.
    pub async fn dead_letter_here(&self, receipt: &Receipt) -> Result<ConsumeOutcome, PopError> {
        let broker = self.broker();
        if !broker.is_current(receipt) {
            return Ok(ConsumeOutcome::StaleReceipt);
        }
        let dead = broker.dead_letter_of(receipt, now_ms()).map_err(|e| PopError::Internal(e.to_string()))?;
        self.request(dead).await?.map_err(|refusal| PopError::Internal(refusal.to_string()))
    }

    /// The order's filter, compiled (its plugins cache what they compile), with the filter the
    /// group is bound to. Compiling happens off the async workers and with no lock held.
    pub fn subscription(&self, order: &PopOrder) -> Result<Subscription, PopError> {
        let host = self.plugins();
        let illegal = |e: PluginError| PopError::IllegalFilter(e.to_string());
        blocking(|| {
            let compiled = Subscription::compile(host, order.filter_kind, &order.filter).map_err(illegal)?;
            compiled.with_group_filter(host, self.metadata(), &order.group).map_err(|e| match e {
                PluginError::Quarantined { .. } => PopError::Quarantined(e.to_string()),
                e => PopError::FilterUnavailable(format!("the filter of group {}: {e}", order.group)),
            })
        })
    }

    /// Plans and proposes a pop from this node's state (the leader's), in the next round of
    /// its (group, topic), which may serve other receives too.
    pub async fn pop_here(&self, order: &PopOrder) -> Result<Popped, PopError> {
        if let Some(client) = &order.lite_client {
            return self.lite_pop_here(order, client).await;
        }
        let broker = self.broker();
        broker.group(&order.group).ok_or_else(|| PopError::GroupNotFound(order.group.clone()))?;
        broker.topic(&order.topic).ok_or_else(|| PopError::TopicNotFound(order.topic.clone()))?;
        // Checked before joining, so a bad expression fails only its own receive.
        self.subscription(order)?;
        if let Some(attempt_id) = &order.attempt_id {
            let now_ms = self.leader_now().await?;
            let again = broker.deliveries_of_attempt(&order.group, &order.topic, attempt_id, now_ms);
            if !again.is_empty() {
                return Ok(Popped { deliveries: again, ..Default::default() });
            }
        }
        let lane = self.pop_locks().get(&order.group, &order.topic);
        let (answer, popped) = tokio::sync::oneshot::channel();
        lane.waiting.lock().expect("pop lane").push(PopWaiter { order: order.clone(), answer });
        let this = self.clone();
        // Its own task: a round answers every receive in it, whichever client goes away.
        tokio::spawn(async move {
            let _serial = lane.serial.lock().await;
            loop {
                // Receives whose clients went away are not planned for.
                let round: Vec<PopWaiter> = {
                    let mut waiting = lane.waiting.lock().expect("pop lane");
                    waiting.retain(|w| !w.answer.is_closed());
                    let Some(first) = waiting.first() else { return };
                    let first = first.order.clone();
                    let (mut round, rest): (Vec<_>, Vec<_>) =
                        waiting.drain(..).partition(|w| same_kind(&w.order, &first));
                    *waiting = rest;
                    // Keep a round within its bound; the rest go in the next.
                    let mut total = 0;
                    let over = round.iter().position(|w| {
                        total += w.order.max_messages;
                        total > MAX_MESSAGES_PER_ROUND
                    });
                    let keep = over.unwrap_or(round.len()).max(1);
                    waiting.extend(round.drain(keep..));
                    round
                };
                this.pop_round(round).await;
            }
        });
        popped.await.map_err(|_| PopError::Internal("the pop was dropped before it was planned".into()))?
    }

    /// One plan and one entry for `round` (receives of the same kind); each receive gets up to
    /// what it asked for, in order.
    async fn pop_round(&self, round: Vec<PopWaiter>) {
        let total = round.iter().map(|w| w.order.max_messages).sum();
        let mut order = round[0].order.clone();
        order.max_messages = total;
        // Which deliveries go to which receive, for those a retry may ask for again.
        let receives = match round.iter().any(|w| w.order.attempt_id.is_some()) {
            true => round.iter().map(|w| (w.order.attempt_id.clone(), w.order.max_messages as u32)).collect(),
            false => Vec::new(),
        };
        match self.plan_and_pop(&order, receives).await {
            Ok(Popped { deliveries, next_due_in_ms, passed_over, .. }) => {
                let mut deliveries = deliveries.into_iter();
                for w in round {
                    let own = deliveries.by_ref().take(w.order.max_messages).collect();
                    let popped = Popped { deliveries: own, next_due_in_ms, passed_over, ..Default::default() };
                    let _ = w.answer.send(Ok(popped));
                }
            }
            Err(e) => {
                for w in round {
                    let _ = w.answer.send(Err(e.clone()));
                }
            }
        }
    }

    /// Plans and proposes one pop of up to `order.max_messages` from this node's state.
    async fn plan_and_pop(&self, order: &PopOrder, receives: Vec<(Option<String>, u32)>) -> Result<Popped, PopError> {
        let broker = self.broker();
        let group = broker.group(&order.group).ok_or_else(|| PopError::GroupNotFound(order.group.clone()))?;
        let topic = broker.topic(&order.topic).ok_or_else(|| PopError::TopicNotFound(order.topic.clone()))?;
        let filter = self.subscription(order)?;
        let turn = self.next_queue();
        let request = PopRequest {
            group: &group,
            topic: &topic,
            filter: &filter,
            max_messages: order.max_messages,
            invisible_ms: order.invisible_ms,
            now_ms: now_ms(),
            first_queue: turn,
            by_priority: group.by_priority_on(&topic, priority_draw(turn)),
        };
        // Filters may spend a plugin call's limit of CPU: off the async workers.
        let mut plan = blocking(|| broker.plan_pop(&request)).map_err(|e| PopError::Internal(e.to_string()))?;
        for dead in std::mem::take(&mut plan.dead_letters) {
            // A failure leaves the delivery in flight: the next pop tries again.
            if let Err(e) = self.write(&Command::DeadLetter(dead)).await {
                tracing::warn!(error = %e, "moving a message to the dead-letter topic failed");
            }
        }
        if let Some(reason) = plan.filter_unavailable.take()
            && !plan.delivers()
        {
            return Err(PopError::FilterUnavailable(reason));
        }
        let next_due_in_ms = plan.next_due_ms.map(|due| due.saturating_sub(request.now_ms).max(0) as u64);
        if !plan.changes_state() {
            return Ok(Popped { next_due_in_ms, ..Default::default() });
        }
        // Only messages the filter did not want: none held back for their message group.
        let passed_over =
            plan.pop.takes.iter().any(|t| t.to > t.from) && plan.pop.takes.iter().all(|t| t.hold.is_empty());
        plan.pop.receives = receives;
        let outcome = self.request(ConsumeCommand::Pop(plan.pop)).await?;
        match outcome.map_err(|refusal| PopError::Internal(refusal.to_string()))? {
            ConsumeOutcome::Delivered(deliveries) => {
                Ok(Popped { deliveries, next_due_in_ms, passed_over, ..Default::default() })
            }
            ConsumeOutcome::GroupNotFound(g) => Err(PopError::GroupNotFound(g)),
            ConsumeOutcome::TopicNotFound(t) => Err(PopError::TopicNotFound(t)),
            other => Err(PopError::Internal(format!("a pop answered {other:?}"))),
        }
    }
}

/// The receive's draw against a group's priority factor (0-99), from the node's turn counter:
/// any hundred consecutive turns give each value once, scattered (37 is coprime with 100), so
/// about `priority_factor` receives in a hundred go by priority, interleaved with the others.
fn priority_draw(turn: u32) -> u8 {
    (turn.wrapping_mul(37) % 100) as u8
}
