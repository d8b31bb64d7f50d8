//! Lite receives and subscription syncs on the leader. A lite receive is planned like a POP
//! (`pop.rs`), in its (group, parent) lane so two plans never pick the same lite topic's
//! messages, but from the receiving client's subscriptions rather than from queues.

use crate::broker::lite::{LiteCommand, LiteOutcome, LiteRequest};
use crate::broker::{Command, Reply};
use crate::cluster::Cluster;
use crate::cluster::clock::now_ms;
use crate::cluster::pop::{PopError, PopOrder, Popped};

impl Cluster {
    /// Plans and proposes a lite receive for `client` from this node's state (the leader's).
    pub async fn lite_pop_here(&self, order: &PopOrder, client: &str) -> Result<Popped, PopError> {
        let broker = self.broker();
        let group = broker.group(&order.group).ok_or_else(|| PopError::GroupNotFound(order.group.clone()))?;
        broker.topic(&order.topic).ok_or_else(|| PopError::TopicNotFound(order.topic.clone()))?;
        let lane = self.pop_locks().get(&order.group, &order.topic);
        let _serial = lane.serial.lock().await;
        let now = now_ms();
        let request = LiteRequest {
            group: &group,
            parent: &order.topic,
            client,
            max_messages: order.max_messages,
            invisible_ms: order.invisible_ms,
            now_ms: now,
            first: self.next_queue() as usize,
        };
        let plan = broker.plan_lite_pop(&request).map_err(|e| PopError::Internal(e.to_string()))?;
        for dead in &plan.dead {
            let letter =
                broker.lite_dead_letter_of(&order.topic, dead, now).map_err(|e| PopError::Internal(e.to_string()))?;
            // A failure leaves the delivery in flight: the next receive tries again.
            if let Err(e) = self.write(&Command::DeadLetter(letter)).await {
                tracing::warn!(error = %e, "moving a lite message to the dead-letter topic failed");
            }
        }
        let next_due_in_ms = plan.next_due_ms.map(|due| due.saturating_sub(now).max(0) as u64);
        if !plan.delivers() {
            return Ok(Popped { next_due_in_ms, ..Default::default() });
        }
        match self.write(&Command::Lite(LiteCommand::Pop(plan.pop))).await? {
            Reply::Lite(LiteOutcome::Delivered(lite)) => Ok(Popped { lite, next_due_in_ms, ..Default::default() }),
            Reply::Lite(LiteOutcome::GroupNotFound(g)) => Err(PopError::GroupNotFound(g)),
            other => Err(PopError::Internal(format!("unexpected reply {other:?}"))),
        }
    }
}
