//! Lite receives and subscription syncs on the leader. A lite receive is planned like a POP
//! (`pop.rs`), in its (group, parent) lane so two plans never pick the same lite topic's
//! messages, but from the receiving client's subscriptions rather than from queues.

use crate::broker::Command;
use crate::broker::lite::{LiteCommand, LiteOutcome, LiteRequest};
use crate::cluster::Cluster;
use crate::cluster::clock::now_ms;
use crate::cluster::pop::{PopError, PopOrder, Popped};

/// Per (group, client): where its next lite receive starts in its subscriptions, and how many
/// it looked at since one delivered.
pub(super) type LiteCursors = std::sync::Mutex<std::collections::HashMap<(String, String), (usize, usize)>>;

/// Subscribed lite topics one plan looks at, at most: a client's plan costs the same whatever
/// its quota, and the next plan goes on from where this one stopped.
const LITE_SCAN_LIMIT: usize = 256;
/// (group, client) cursors a leader keeps.
const MAX_LITE_CURSORS: usize = 100_000;

impl Cluster {
    /// Plans and proposes a lite receive for `client` from this node's state (the leader's).
    pub async fn lite_pop_here(&self, order: &PopOrder, client: &str) -> Result<Popped, PopError> {
        let broker = self.broker();
        let group = broker.group(&order.group).ok_or_else(|| PopError::GroupNotFound(order.group.clone()))?;
        broker.topic(&order.topic).ok_or_else(|| PopError::TopicNotFound(order.topic.clone()))?;
        // Refused before planning, so a receive as another user's client is told so even when
        // there is nothing to deliver; apply checks again.
        if let Some(why) = broker.lite_not_owner(&order.group, client, &order.lite_by) {
            return Err(PopError::Forbidden(why));
        }
        let lane = self.pop_locks().get(&order.group, &order.topic);
        let _serial = lane.serial.lock().await;
        let now = now_ms();
        let key = (order.group.clone(), client.to_string());
        let (first, fruitless) = self.lite_cursors().lock().expect("lite cursors").get(&key).copied().unwrap_or((0, 0));
        let request = LiteRequest {
            group: &group,
            parent: &order.topic,
            client,
            by: &order.lite_by,
            max_messages: order.max_messages,
            invisible_ms: order.invisible_ms,
            now_ms: now,
            first,
            scan_limit: LITE_SCAN_LIMIT,
        };
        let plan = broker.plan_lite_pop(&request).map_err(|e| PopError::Internal(e.to_string()))?;
        let passed_over;
        {
            let mut cursors = self.lite_cursors().lock().expect("lite cursors");
            // Clients come and go with new ids: a leader that served very many forgets them all.
            if cursors.len() >= MAX_LITE_CURSORS {
                cursors.clear();
            }
            // Subscriptions looked at since the last plan that delivered.
            let fruitless = if plan.delivers() { 0 } else { fruitless + plan.scanned };
            cursors.insert(key, (plan.next_first, fruitless));
            // The scan stopped short of lite topics not looked at since something was delivered:
            // look at them at once. Once all were, the receive waits for news instead.
            passed_over = !plan.scanned_all && fruitless < plan.subscribed;
        }
        for (lite, dead) in &plan.dead {
            let letter = broker.lite_dead_letter_of(lite, dead, now).map_err(|e| PopError::Internal(e.to_string()))?;
            // A failure leaves the delivery in flight: the next receive tries again.
            if let Err(e) = self.write(&Command::DeadLetter(letter)).await {
                tracing::warn!(error = %e, "moving a lite message to the dead-letter topic failed");
            }
        }
        let next_due_in_ms = plan.next_due_ms.map(|due| due.saturating_sub(now).max(0) as u64);
        if !plan.delivers() {
            return Ok(Popped { next_due_in_ms, passed_over, ..Default::default() });
        }
        let outcome = self.request(LiteCommand::Pop(plan.pop)).await?;
        match outcome.map_err(|refusal| PopError::Internal(refusal.to_string()))? {
            LiteOutcome::Delivered { deliveries, names } => {
                Ok(Popped { deliveries, lite_topics: names, next_due_in_ms, passed_over, messages: Vec::new() })
            }
            LiteOutcome::GroupNotFound(g) => Err(PopError::GroupNotFound(g)),
            LiteOutcome::NotOwner(why) => Err(PopError::Forbidden(why)),
            other => Err(PopError::Internal(format!("a lite pop answered {other:?}"))),
        }
    }
}
