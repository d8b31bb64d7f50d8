//! One POP attempt: plan from the leader's state and propose the pop. A follower's receive asks
//! the leader to do it (`AdminRequest::Pop`) and streams the messages from its own store, so pops
//! of one group are planned in one place, one at a time, and never race each other across nodes.
//! (Apply checks each pop's expectations anyway; this keeps them from failing.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::admin::api::{AdminRequest, AdminResponse};
use crate::broker::pop::{ConsumeCommand, ConsumeOutcome, Delivery, Receipt};
use crate::broker::subscription::TagFilter;
use crate::broker::{Command, PopRequest, Reply};
use crate::node::{Node, WriteError};
use crate::proxy::now_ms;

/// What a receive asks for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PopOrder {
    pub group: String,
    pub topic: String,
    /// A tag expression (checked by the receiving node).
    pub filter: String,
    pub max_messages: usize,
    pub invisible_ms: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Popped {
    pub deliveries: Vec<Delivery>,
    /// How long until the earliest invisible delivery falls due, if any; relative, as the leader's
    /// clock and the receiving node's may differ.
    pub next_due_in_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
pub enum PopError {
    #[error("consumer group {0} does not exist")]
    GroupNotFound(String),
    #[error("topic {0} does not exist")]
    TopicNotFound(String),
    #[error("illegal filter expression: {0}")]
    IllegalFilter(String),
    /// No leader, or it could not be reached: the client may retry.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

/// One lock per (group, topic): the leader plans and proposes their pops one at a time.
#[derive(Default)]
pub struct PopLocks(Mutex<HashMap<(String, String), PopLock>>);

type PopLock = Arc<tokio::sync::Mutex<()>>;

impl PopLocks {
    fn get(&self, group: &str, topic: &str) -> PopLock {
        let mut locks = self.0.lock().expect("pop locks");
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        Arc::clone(locks.entry((group.to_string(), topic.to_string())).or_default())
    }
}

/// Pops on the leader, wherever this node is; the deliveries are applied here when it returns.
pub async fn pop(node: &Node, order: &PopOrder) -> Result<Popped, PopError> {
    if node.is_leader() {
        return pop_here(node, order).await;
    }
    let answer = node.call_leader(&AdminRequest::Pop(order.clone())).await.map_err(PopError::Unavailable)?;
    let popped = match answer {
        AdminResponse::Popped(result) => result?,
        AdminResponse::Error(e) => return Err(PopError::Unavailable(e)),
        other => return Err(PopError::Internal(format!("unexpected answer {other:?}"))),
    };
    // The messages are read from this node's store: wait until it has applied the pop.
    if let Some(last) = popped.deliveries.iter().map(|d| d.generation).max() {
        node.wait_applied(last).await;
    }
    Ok(popped)
}

fn failed(e: WriteError) -> PopError {
    match e {
        WriteError::NoLeader | WriteError::Forward(_) => PopError::Unavailable(e.to_string()),
        WriteError::Raft(_) => PopError::Internal(e.to_string()),
    }
}

/// Moves the delivery `receipt` names to its group's dead-letter topic, on the leader.
pub async fn dead_letter(node: &Node, receipt: &Receipt) -> Result<ConsumeOutcome, PopError> {
    if node.is_leader() {
        return dead_letter_here(node, receipt).await;
    }
    match node.call_leader(&AdminRequest::DeadLetter(receipt.clone())).await.map_err(PopError::Unavailable)? {
        AdminResponse::DeadLettered(result) => result,
        AdminResponse::Error(e) => Err(PopError::Unavailable(e)),
        other => Err(PopError::Internal(format!("unexpected answer {other:?}"))),
    }
}

/// Builds the dead letter from this node's store (the leader's) and proposes it.
pub async fn dead_letter_here(node: &Node, receipt: &Receipt) -> Result<ConsumeOutcome, PopError> {
    if !node.broker.is_current(receipt) {
        return Ok(ConsumeOutcome::StaleReceipt);
    }
    let dead = node.broker.dead_letter_of(receipt, now_ms()).map_err(|e| PopError::Internal(e.to_string()))?;
    match node.write(&Command::DeadLetter(dead)).await.map_err(failed)? {
        Reply::Consume(outcome) => Ok(outcome),
        other => Err(PopError::Internal(format!("unexpected reply {other:?}"))),
    }
}

/// Plans and proposes one pop from this node's state (the leader's).
pub async fn pop_here(node: &Node, order: &PopOrder) -> Result<Popped, PopError> {
    let broker = &node.broker;
    let group = broker.group(&order.group).ok_or_else(|| PopError::GroupNotFound(order.group.clone()))?;
    let topic = broker.topic(&order.topic).ok_or_else(|| PopError::TopicNotFound(order.topic.clone()))?;
    let filter = TagFilter::parse(&order.filter).map_err(|e| PopError::IllegalFilter(e.to_string()))?;
    let lock = node.pop_locks.get(&order.group, &order.topic);
    let _serial = lock.lock().await;
    let request = PopRequest {
        group: &group,
        topic: &topic,
        filter: &filter,
        max_messages: order.max_messages,
        invisible_ms: order.invisible_ms,
        now_ms: now_ms(),
        first_queue: node.next_queue(),
    };
    let mut plan = broker.plan_pop(&request).map_err(|e| PopError::Internal(e.to_string()))?;
    for dead in std::mem::take(&mut plan.dead_letters) {
        // A failure leaves the delivery in flight: the next pop tries again.
        if let Err(e) = node.write(&Command::DeadLetter(dead)).await {
            tracing::warn!(error = %e, "moving a message to the dead-letter topic failed");
        }
    }
    let next_due_in_ms = plan.next_due_ms.map(|due| due.saturating_sub(request.now_ms).max(0) as u64);
    if !plan.changes_state() {
        return Ok(Popped { deliveries: Vec::new(), next_due_in_ms });
    }
    match node.write(&Command::Consume(ConsumeCommand::Pop(plan.pop))).await.map_err(failed)? {
        Reply::Consume(ConsumeOutcome::Delivered(deliveries)) => Ok(Popped { deliveries, next_due_in_ms }),
        Reply::Consume(ConsumeOutcome::GroupNotFound(g)) => Err(PopError::GroupNotFound(g)),
        Reply::Consume(ConsumeOutcome::TopicNotFound(t)) => Err(PopError::TopicNotFound(t)),
        other => Err(PopError::Internal(format!("unexpected reply {other:?}"))),
    }
}
