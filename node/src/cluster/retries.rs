//! A send a member forwards again while its first attempt is still pending on the leader (the
//! member gave up waiting after `FORWARD_ATTEMPT` while the leader was slow, not gone). Proposing
//! it again would write every body to the log once more, only for apply to drop the copy as a
//! duplicate; so the leader keeps the message ids of the forwarded rounds it is proposing, and a
//! retry of them waits for the first round's answer instead of joining a new one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prost::Message;
use rockraft_proto::rockraft::{SendBatch, StoredMessage};
use tokio::sync::watch;

use crate::broker::Reply;
use crate::broker::dedupe::DedupeKey;
use crate::cluster::coalesce::Answer;

/// Where a pending message's answer comes: its round's, and its place in the round.
type Slot = (watch::Receiver<Option<Answer>>, usize);

/// The messages of the rounds this leader is proposing for forwarded sends.
#[derive(Default)]
pub(crate) struct PendingSends {
    by_key: Arc<Mutex<HashMap<DedupeKey, Slot>>>,
}

/// A round registered as pending: answer it with [`PendingSends::answered`]. Dropped unanswered
/// (its task ended), its messages are forgotten and their retries proposed.
pub(crate) struct Registered {
    keys: Vec<DedupeKey>,
    answer: watch::Sender<Option<Answer>>,
    by_key: Arc<Mutex<HashMap<DedupeKey, Slot>>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut by_key = self.by_key.lock().expect("pending sends lock");
        for key in &self.keys {
            by_key.remove(key);
        }
    }
}

/// Each message's dedupe key; `None` for one without an id (never a retry) or undecodable.
fn keys_of(batch: &SendBatch) -> Vec<Option<DedupeKey>> {
    let key = |raw: &bytes::Bytes| {
        let m = StoredMessage::decode(raw.clone()).ok()?;
        (!m.message_id.is_empty()).then(|| DedupeKey::of_message(&batch.topic, &m.message_id, &m.sender))
    };
    batch.messages.iter().map(key).collect()
}

impl PendingSends {
    /// Marks the messages of `round` pending until [`PendingSends::answered`].
    pub fn register(&self, round: &SendBatch) -> Registered {
        let (answer, receiver) = watch::channel(None);
        let mut keys = Vec::new();
        let mut by_key = self.by_key.lock().expect("pending sends lock");
        for (place, key) in keys_of(round).into_iter().enumerate() {
            if let Some(key) = key
                && !by_key.contains_key(&key)
            {
                by_key.insert(key, (receiver.clone(), place));
                keys.push(key);
            }
        }
        Registered { keys, answer, by_key: Arc::clone(&self.by_key) }
    }

    /// The round's answer: handed to the retries waiting for it, and its messages forgotten.
    pub fn answered(&self, round: Registered, answer: &Answer) {
        let _ = round.answer.send(Some(answer.clone()));
    }

    /// When every message of `batch` is pending here, the answer its first attempt gets (each
    /// outcome marked a duplicate, as apply answers a retry); `None` otherwise.
    pub async fn retry_answer(&self, batch: &SendBatch) -> Option<Answer> {
        let slots: Vec<Slot> = {
            let by_key = self.by_key.lock().expect("pending sends lock");
            if by_key.is_empty() {
                return None;
            }
            keys_of(batch).iter().map(|k| k.as_ref().and_then(|k| by_key.get(k).cloned())).collect::<Option<_>>()?
        };
        if slots.is_empty() {
            return None;
        }
        let mut outcomes = Vec::with_capacity(slots.len());
        for (mut receiver, place) in slots {
            // A round dropped unanswered (its task ended) leaves the retry to be proposed.
            let answer = receiver.wait_for(Option::is_some).await.ok()?.clone()?;
            match answer {
                Ok(Reply::Sent(all)) => {
                    let mut outcome = all.get(place)?.clone();
                    outcome.duplicate = true;
                    outcomes.push(outcome);
                }
                Ok(_) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(Reply::Sent(outcomes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::SendOutcome;
    use crate::cluster::ClusterError;

    fn batch(ids: &[&str]) -> SendBatch {
        let messages = ids
            .iter()
            .map(|id| StoredMessage { message_id: id.to_string(), ..Default::default() }.encode_to_vec().into())
            .collect();
        SendBatch { topic: "T".into(), queue_id: 1, messages, ..Default::default() }
    }

    fn stored(ids: &[&str]) -> Answer {
        let outcome = |(i, id): (usize, &&str)| SendOutcome {
            message_id: id.to_string(),
            queue_id: 1,
            offset: 10 + i as u64,
            duplicate: false,
            held: None,
        };
        Ok(Reply::Sent(ids.iter().enumerate().map(outcome).collect()))
    }

    #[tokio::test]
    async fn a_retry_of_pending_messages_waits_for_their_first_answer_as_duplicates() {
        let pending = std::sync::Arc::new(PendingSends::default());
        let round = pending.register(&batch(&["a", "b", "c"]));
        // The member forwards "b" and "c" again (in a round of its own) while the first is pending.
        let waiting = tokio::spawn({
            let pending = pending.clone();
            async move { pending.retry_answer(&batch(&["b", "c"])).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the retry waits for the first round");
        pending.answered(round, &stored(&["a", "b", "c"]));
        let Some(Ok(Reply::Sent(outcomes))) = waiting.await.unwrap() else { panic!("answered") };
        let got: Vec<(&str, u64, bool)> =
            outcomes.iter().map(|o| (o.message_id.as_str(), o.offset, o.duplicate)).collect();
        assert_eq!(got, vec![("b", 11, true), ("c", 12, true)]);
        // Answered, the messages are no longer pending: a later retry goes the usual way.
        assert!(pending.retry_answer(&batch(&["b"])).await.is_none());
    }

    #[tokio::test]
    async fn a_batch_with_anything_not_pending_is_proposed_and_a_failed_round_fails_its_retries() {
        let pending = std::sync::Arc::new(PendingSends::default());
        let retry_of = |ids: &'static [&'static str]| {
            let pending = pending.clone();
            tokio::spawn(async move { pending.retry_answer(&batch(ids)).await })
        };
        let round = pending.register(&batch(&["a", "b"]));
        assert!(retry_of(&["a", "new"]).await.unwrap().is_none(), "new is not pending");
        assert!(retry_of(&[""]).await.unwrap().is_none(), "no id: never a retry");
        let mut by_another = batch(&["a"]);
        by_another.messages[0] =
            StoredMessage { message_id: "a".into(), sender: "mallory".into(), ..Default::default() }
                .encode_to_vec()
                .into();
        assert!(pending.retry_answer(&by_another).await.is_none(), "another user's a is not a retry of this a");
        let retry = retry_of(&["a"]);
        tokio::task::yield_now().await;
        pending.answered(round, &Err(ClusterError::NoLeader));
        assert!(matches!(retry.await.unwrap(), Some(Err(ClusterError::NoLeader))));
        // A round dropped unanswered leaves its retries to be proposed, and is forgotten.
        let dropped = pending.register(&batch(&["x"]));
        let retry = retry_of(&["x"]);
        tokio::task::yield_now().await;
        drop(dropped);
        assert!(retry.await.unwrap().is_none());
        assert!(pending.by_key.lock().unwrap().is_empty());
    }
}
