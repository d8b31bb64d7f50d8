//! Renewal of deliveries made to receives that asked for `auto_renew` (PushConsumers): while the
//! client lives and has not settled a delivery, its invisible time is extended before it runs
//! out, so a slow listener does not get the message twice. Renewal keeps the receipt handle.
//! This is the table of what to renew; the renewal job (`jobs::renewals`) works through it.
//!
//! Renewals live on the node that made the delivery; if that node goes away they stop and the
//! message is delivered again once its invisible time passes — the at-least-once contract.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::broker::pop::{ChannelId, Receipt};
use crate::broker::position::PartitionId;

/// How long one delivery is kept invisible at most, renewals included.
pub const MAX_RENEWED: Duration = Duration::from_secs(3600);

/// How long before a delivery's invisible time runs out it is renewed at the latest: the renewal
/// job looks once a second and its entry must commit, so two thirds into a short invisible time
/// (two seconds: renewed at 1.3 s, looked at up to 2.3 s) would come too late.
const RENEW_AHEAD: Duration = Duration::from_millis(1500);

/// When a delivery invisible for `invisible` from `now` is due for renewal: two thirds in, or
/// `RENEW_AHEAD` before it runs out if that is earlier.
fn renewal_due(now: Instant, invisible: Duration) -> Instant {
    now + (invisible * 2 / 3).min(invisible.saturating_sub(RENEW_AHEAD))
}
/// A client not heard from (heartbeat or receive) for this long is gone: its renewals stop.
const CLIENT_SILENCE: Duration = Duration::from_secs(60);

/// A delivery: the partition that made it, and its group, topic, channel and offset.
type Key = (PartitionId, String, String, ChannelId, u64);

struct Renewal {
    partition: PartitionId,
    receipt: Receipt,
    client: String,
    invisible: Duration,
    /// Renew at this time: two thirds into the current invisible time.
    due: Instant,
    stop: Instant,
}

#[derive(Default)]
pub struct Renewals {
    deliveries: Mutex<HashMap<Key, Renewal>>,
    clients: Mutex<HashMap<String, Instant>>,
}

fn key(partition: PartitionId, r: &Receipt) -> Key {
    (partition, r.group.clone(), r.topic.clone(), r.channel, r.offset)
}

impl Renewals {
    /// `receipts`: each with the partition that made the delivery.
    pub fn track(&self, client: &str, receipts: Vec<(PartitionId, Receipt)>, invisible: Duration) {
        let now = Instant::now();
        self.seen(client);
        let mut deliveries = self.deliveries.lock().expect("renewals lock");
        for (partition, receipt) in receipts {
            let renewal = Renewal {
                partition,
                client: client.to_string(),
                invisible,
                due: renewal_due(now, invisible),
                stop: now + MAX_RENEWED,
                receipt,
            };
            deliveries.insert(key(partition, &renewal.receipt), renewal);
        }
    }

    /// The delivery `r` names ended (acked, given a new invisible time, dead-lettered) or was
    /// found stale. A receipt of another delivery of the same message leaves it alone.
    pub fn settled(&self, partition: PartitionId, r: &Receipt) {
        let mut deliveries = self.deliveries.lock().expect("renewals lock");
        let key = key(partition, r);
        if deliveries.get(&key).is_some_and(|d| d.receipt.generation == r.generation) {
            deliveries.remove(&key);
        }
    }

    pub fn seen(&self, client: &str) {
        if !client.is_empty() {
            self.clients.lock().expect("renewals lock").insert(client.to_string(), Instant::now());
        }
    }

    pub fn client_gone(&self, client: &str) {
        self.clients.lock().expect("renewals lock").remove(client);
        self.deliveries.lock().expect("renewals lock").retain(|_, r| r.client != client);
    }

    /// Deliveries to renew now; those past their limit or of silent clients are dropped. The
    /// renewal job (`jobs::renewals`) asks every second.
    pub fn due(&self) -> Vec<(PartitionId, Receipt, Duration)> {
        let now = Instant::now();
        let alive: std::collections::HashSet<String> = {
            let mut clients = self.clients.lock().expect("renewals lock");
            clients.retain(|_, seen| now.duration_since(*seen) < CLIENT_SILENCE);
            clients.keys().cloned().collect()
        };
        let mut deliveries = self.deliveries.lock().expect("renewals lock");
        deliveries.retain(|_, r| r.stop > now && alive.contains(&r.client));
        deliveries
            .values_mut()
            .filter(|r| r.due <= now)
            .map(|r| {
                r.due = renewal_due(now, r.invisible);
                (r.partition, r.receipt.clone(), r.invisible)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PartitionId = PartitionId::FIRST;

    fn receipt(offset: u64) -> Receipt {
        Receipt { group: "g".into(), topic: "t".into(), channel: ChannelId::Queue(0), offset, generation: 7 }
    }

    #[tokio::test(start_paused = true)]
    async fn deliveries_are_renewed_two_thirds_in_until_settled_or_the_client_is_gone() {
        let r = Renewals::default();
        r.track("c1", vec![(P, receipt(1)), (P, receipt(2)), (PartitionId(2), receipt(1))], Duration::from_secs(30));
        assert!(r.due().is_empty());
        tokio::time::advance(Duration::from_secs(21)).await;
        r.seen("c1");
        assert_eq!(r.due().len(), 3, "one delivery per partition");
        assert!(r.due().is_empty(), "not due again until two thirds of the new invisible time");
        r.settled(P, &receipt(1));
        r.settled(PartitionId(2), &receipt(1));
        // A receipt of an earlier delivery of message 2 does not stop the current one's renewal.
        r.settled(P, &Receipt { generation: 3, ..receipt(2) });
        tokio::time::advance(Duration::from_secs(20)).await;
        r.seen("c1");
        assert_eq!(r.due().iter().map(|(_, x, _)| x.offset).collect::<Vec<_>>(), vec![2]);
        r.client_gone("c1");
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(r.due().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_invisible_time_is_renewed_a_tick_and_a_commit_before_it_runs_out() {
        let r = Renewals::default();
        r.track("c1", vec![(P, receipt(1))], Duration::from_secs(2));
        tokio::time::advance(Duration::from_millis(400)).await;
        assert!(r.due().is_empty());
        tokio::time::advance(Duration::from_millis(100)).await;
        // Due at 0.5 s: a job looking a second later still renews it before 2 s.
        assert_eq!(r.due().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_client_loses_its_renewals() {
        let r = Renewals::default();
        r.track("quiet", vec![(P, receipt(1))], Duration::from_secs(30));
        tokio::time::advance(CLIENT_SILENCE + Duration::from_secs(1)).await;
        assert!(r.due().is_empty());
    }
}
