//! The leader checks unresolved transactional halves when their check time comes: the
//! [`TransactionChecker`] decides per half; commits and rollbacks are proposed as resolutions,
//! the others are rescheduled in one entry (a producer being asked counts as a check) before a
//! live producer of the topic is asked on its Telemetry stream, wherever that stream is held.
//! Everything the schedule needs is replicated, so a new leader carries on where the old one
//! stopped: no half is checked early, twice for one check, or after it was resolved.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::transaction::{Decision, Half, HalfView, Resolver, TransactionChecker, TransactionCommand};
use rockraft_proto::rockraft::StoredMessage;

use crate::broker::{Command, split_position};
use crate::cluster::{AskProducer, Cluster, now_ms};

const POLL: Duration = Duration::from_millis(200);
/// Halves looked at per round.
const BATCH: usize = 256;

#[derive(Clone)]
pub struct CheckOptions {
    pub interval: Duration,
    /// A half is never left unresolved longer than this: its last check is at this age.
    pub max_age: Duration,
}

pub async fn check_transactions(cluster: Cluster, checker: Arc<dyn TransactionChecker>, options: CheckOptions) {
    loop {
        let now = now_ms();
        let due = match cluster.broker().due_checks(now, BATCH) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "reading due transaction checks failed");
                Vec::new()
            }
        };
        if due.is_empty() {
            tokio::time::sleep(POLL).await;
            continue;
        }
        if let Err(e) = check(&cluster, checker.as_ref(), &options, now, due).await {
            tracing::debug!(error = %e, "transaction check round failed; retrying");
            tokio::time::sleep(POLL).await;
        }
    }
}

fn view(cluster: &Cluster, position: u64, half: &Half) -> HalfView {
    let stored = cluster.broker().message_at(position).ok().flatten();
    let message = stored
        .map(|(m, _)| m)
        .unwrap_or_else(|| StoredMessage { message_id: half.message.message_id.clone(), ..Default::default() });
    HalfView { topic: half.message.topic.clone(), store_ms: half.message.stored_ms, message }
}

async fn check(
    cluster: &Cluster,
    checker: &dyn TransactionChecker,
    options: &CheckOptions,
    now: i64,
    due: Vec<(u64, Half)>,
) -> Result<(), crate::cluster::ClusterError> {
    let interval = options.interval.as_millis() as i64;
    let max_age = options.max_age.as_millis() as i64;
    let (mut asked, mut waiting) = (Vec::new(), Vec::new());
    for (position, half) in due {
        let age = Duration::from_millis(now.saturating_sub(half.message.stored_ms).max(0) as u64);
        let decision = checker.decide(&view(cluster, position, &half), age, half.checks);
        // The next check, but never past the maximum age: the half is rolled back exactly then.
        let next = now.saturating_add(interval).min(half.message.stored_ms.saturating_add(max_age)).max(now + 1);
        match decision {
            Decision::Commit | Decision::Rollback => {
                let command = TransactionCommand::Resolve {
                    now_ms: now,
                    topic: half.message.topic.clone(),
                    position,
                    message_id: half.message.message_id.clone(),
                    commit: decision == Decision::Commit,
                    by: Resolver::Checker,
                };
                tracing::info!(topic = %half.message.topic, message_id = %half.message.message_id, ?decision, checks = half.checks, "transaction checker resolved a half");
                cluster.write(&Command::Transaction(command)).await?;
            }
            Decision::AskProducer => asked.push((position, half, next)),
            Decision::Wait => waiting.push((position, half.checks, next)),
        }
    }
    if !waiting.is_empty() {
        let command = TransactionCommand::Checked { now_ms: now, halves: waiting, asked: false };
        cluster.write(&Command::Transaction(command)).await?;
    }
    if asked.is_empty() {
        return Ok(());
    }
    let halves = asked.iter().map(|(p, h, next)| (*p, h.checks, *next)).collect();
    cluster.write(&Command::Transaction(TransactionCommand::Checked { now_ms: now, halves, asked: true })).await?;
    for (position, half, _) in asked {
        let ask = AskProducer { topic: half.message.topic.clone(), position };
        if !cluster.ask_producer(&ask).await {
            tracing::info!(topic = %ask.topic, index = split_position(position).0, "no live producer of the topic to ask about a transaction");
        }
    }
    Ok(())
}
