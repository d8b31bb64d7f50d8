//! POP consumption with the official Rust SimpleConsumer against a real three-node cluster:
//! receive, ack, tag filters, redelivery after the invisible time, the dead-letter topic, orderly
//! message groups under concurrency, a replay from a point in time, a leader killed between
//! receive and ack, and acks through leadership handed over and over.

use rockraft_proto::rockraft as pb;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocketmq::conf::{ClientOption, ProducerOption, SimpleConsumerOption};
use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::{MessageBuilder, MessageView};
use rocketmq::{Producer, SimpleConsumer};
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options};

fn client_option(access_url: &str) -> ClientOption {
    let mut co = ClientOption::default();
    co.set_access_url(access_url);
    co.set_enable_tls(false);
    // Empty receives come back after this (less a margin): keeps the tests quick.
    co.set_long_polling_timeout(Duration::from_secs(3));
    co
}

async fn producer(access_url: &str, topic: &str) -> Producer {
    let mut po = ProducerOption::default();
    po.set_topics(vec![topic]);
    let mut p = Producer::new(po, client_option(access_url)).expect("producer");
    p.start().await.expect("producer start");
    p
}

async fn consumer(access_url: &str, group: &str, topic: &str) -> SimpleConsumer {
    let mut so = SimpleConsumerOption::default();
    so.set_consumer_group(group);
    so.set_topics(vec![topic]);
    let mut c = SimpleConsumer::new(so, client_option(access_url)).expect("consumer");
    c.start().await.expect("consumer start");
    c
}

fn all() -> FilterExpression {
    FilterExpression::new(FilterType::Tag, "*")
}

/// Sends `body` and returns its message id.
async fn send(p: &Producer, topic: &str, tag: &str, group: Option<&str>, body: String) -> String {
    let mut b = MessageBuilder::builder().set_topic(topic).set_tag(tag).set_body(body.into_bytes());
    if let Some(g) = group {
        b = b.set_message_group(g);
    }
    p.send(b.build().unwrap()).await.expect("send").message_id().to_string()
}

/// Receives until `want` messages arrived in total (or `timeout` passed); retries transient errors.
async fn receive_n(
    c: &SimpleConsumer,
    topic: &str,
    filter: &FilterExpression,
    want: usize,
    invisible: Duration,
    timeout: Duration,
) -> Vec<MessageView> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        match c.receive_with(topic, filter, 32, invisible).await {
            Ok(batch) => got.extend(batch),
            Err(e) => {
                eprintln!("receive failed (retrying): {e:?}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    got
}

/// `i` of a body `order-i`.
fn number(m: &MessageView) -> u32 {
    body(m).trim_start_matches("order-").parse().expect("order-<i>")
}

fn body(m: &MessageView) -> String {
    String::from_utf8_lossy(m.body()).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn official_consumer_receives_filters_acks_and_gets_what_it_did_not_ack_again() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Orders", 4, TopicKind::Normal).await;
    cluster.create_group("billing", false, 16).await;
    let p = producer(&cluster.access_url(), "Orders").await;
    let mut wanted = BTreeMap::new();
    for i in 0..20 {
        let tag = if i % 2 == 0 { "Paid" } else { "Refund" };
        let id = send(&p, "Orders", tag, None, format!("order-{i}")).await;
        if tag == "Paid" {
            wanted.insert(id, format!("order-{i}"));
        }
    }

    // Through a follower's endpoint: it plans the pop, the leader commits it.
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let c = consumer(&cluster.client_addr(follower), "billing", "Orders").await;
    let paid = FilterExpression::new(FilterType::Tag, "Paid");
    let first = receive_n(&c, "Orders", &paid, 10, Duration::from_secs(4), Duration::from_secs(30)).await;
    let got: BTreeMap<String, String> = first.iter().map(|m| (m.message_id().to_string(), body(m))).collect();
    assert_eq!(got, wanted, "exactly the Paid messages, each once");
    assert!(first.iter().all(|m| m.tag() == Some("Paid") && m.delivery_attempt() == 1));

    // Ack half; the other half comes back after the invisible time, as attempt 2.
    let (acked, kept): (Vec<&MessageView>, Vec<&MessageView>) = first.iter().partition(|m| number(m) < 10);
    assert!(!acked.is_empty() && !kept.is_empty());
    for m in &acked {
        c.ack(*m).await.expect("ack");
    }
    let again = receive_n(&c, "Orders", &paid, kept.len(), Duration::from_secs(30), Duration::from_secs(30)).await;
    let again_ids: BTreeSet<&str> = again.iter().map(|m| m.message_id()).collect();
    let kept_ids: BTreeSet<&str> = kept.iter().map(|m| m.message_id()).collect();
    assert_eq!(again_ids, kept_ids, "only the unacked messages are delivered again");
    assert!(again.iter().all(|m| m.delivery_attempt() == 2), "redeliveries count as attempt 2");
    // The first delivery's handle is dead now; the new one acks.
    assert!(c.ack(kept[0]).await.is_err(), "a receipt from before the redelivery no longer acks");
    for m in &again {
        c.ack(m).await.expect("ack of the redelivery");
    }
    assert!(receive_n(&c, "Orders", &paid, 1, Duration::from_secs(4), Duration::from_secs(4)).await.is_empty());

    let groups = cluster.groups(leader).await;
    let billing = groups.iter().find(|g| g.name == "billing").expect("group listed");
    let orders = billing.progress.iter().find(|p| p.topic == "Orders").expect("progress on Orders");
    assert_eq!((orders.lag, orders.inflight), (0, 0), "everything acked or filtered out");

    // Replay from before the first send: everything that matches comes again, as new deliveries.
    let reset =
        pb::ResetOffsetRequest { group: "billing".into(), topic: "Orders".into(), time_ms: 0, data_group: None };
    cluster.admin(reset).await;
    let replay = receive_n(&c, "Orders", &paid, 10, Duration::from_secs(30), Duration::from_secs(30)).await;
    let replayed: BTreeSet<String> = replay.iter().map(|m| m.message_id().to_string()).collect();
    assert_eq!(replayed, wanted.keys().cloned().collect::<BTreeSet<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_max_attempts_a_message_moves_to_the_dead_letter_topic() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Jobs", 2, TopicKind::Normal).await;
    cluster.create_group("workers", false, 2).await;
    cluster.create_group("dlq-readers", false, 16).await;
    let p = producer(&cluster.access_url(), "Jobs").await;
    let id = send(&p, "Jobs", "job", None, "poison".into()).await;
    let c = consumer(&cluster.access_url(), "workers", "Jobs").await;
    for attempt in 1..=2 {
        let got = receive_n(&c, "Jobs", &all(), 1, Duration::from_secs(1), Duration::from_secs(20)).await;
        assert_eq!(got.len(), 1, "delivery {attempt}");
        assert_eq!((got[0].message_id(), got[0].delivery_attempt()), (id.as_str(), attempt));
        // Not acked: the consumer "failed".
    }
    // A third delivery would exceed max attempts: the message goes to %DLQ%workers instead.
    let third = receive_n(&c, "Jobs", &all(), 1, Duration::from_secs(1), Duration::from_secs(5)).await;
    assert!(third.is_empty(), "no delivery past max attempts, got {:?}", third.iter().map(|m| m.delivery_attempt()));
    let dlq = consumer(&cluster.access_url(), "dlq-readers", "%DLQ%workers").await;
    let dead = receive_n(&dlq, "%DLQ%workers", &all(), 1, Duration::from_secs(10), Duration::from_secs(20)).await;
    assert_eq!(dead.len(), 1, "the message is in the dead-letter topic");
    assert_eq!((dead[0].message_id(), body(&dead[0]).as_str()), (id.as_str(), "poison"));
    dlq.ack(&dead[0]).await.expect("ack in the dead-letter topic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orderly_groups_deliver_each_message_group_in_order_and_a_stuck_one_holds_back_only_itself() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Ledger", 2, TopicKind::Fifo).await;
    cluster.create_group("ledger-readers", true, 16).await;
    let p = producer(&cluster.access_url(), "Ledger").await;
    const GROUPS: [&str; 4] = ["alice", "bob", "carol", "stuck"];
    const PER_GROUP: usize = 8;
    for i in 0..PER_GROUP {
        for g in GROUPS {
            send(&p, "Ledger", "entry", Some(g), format!("{g}:{i}")).await;
        }
    }
    // Three consumers on different nodes, receiving concurrently. Each records what it got, then
    // acks — except the first message of "stuck", which it never acks.
    let seen: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
    let mut tasks = Vec::new();
    for id in 1..=3 {
        let c = consumer(&cluster.client_addr(id), "ledger-readers", "Ledger").await;
        let seen = Arc::clone(&seen);
        tasks.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let done = seen.lock().unwrap().iter().filter(|(g, _)| g != "stuck").count() == 3 * PER_GROUP;
                if done || Instant::now() > deadline {
                    return;
                }
                let Ok(batch) = c.receive_with("Ledger", &all(), 8, Duration::from_secs(60)).await else { continue };
                for m in batch {
                    let text = body(&m);
                    let (g, i) = text.split_once(':').unwrap();
                    seen.lock().unwrap().push((g.to_string(), i.parse().unwrap()));
                    if g != "stuck" {
                        c.ack(&m).await.expect("ack");
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    for g in ["alice", "bob", "carol"] {
        let order: Vec<usize> = seen.iter().filter(|(x, _)| x == g).map(|(_, i)| *i).collect();
        assert_eq!(order, (0..PER_GROUP).collect::<Vec<_>>(), "message group {g} in order, each once");
    }
    let stuck: Vec<usize> = seen.iter().filter(|(x, _)| x == "stuck").map(|(_, i)| *i).collect();
    assert_eq!(stuck, vec![0], "while its first message is in flight, nothing else of that group goes out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_killed_between_receive_and_ack_loses_no_message() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Events", 4, TopicKind::Normal).await;
    cluster.create_group("auditors", false, 16).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    let addr = cluster.client_addr(survivor);
    let p = producer(&addr, "Events").await;
    let mut sent = BTreeSet::new();
    for i in 0..40 {
        sent.insert(send(&p, "Events", "e", None, format!("event-{i}")).await);
    }
    let c = consumer(&addr, "auditors", "Events").await;
    let first = receive_n(&c, "Events", &all(), 20, Duration::from_secs(5), Duration::from_secs(30)).await;
    assert!(!first.is_empty());
    cluster.kill(leader);

    // Acks after the failover either land or the message comes back; in the end every message
    // sent has been acked at least once.
    let mut acked = BTreeSet::new();
    let mut pending: Vec<MessageView> = first;
    let deadline = Instant::now() + Duration::from_secs(90);
    while acked.len() < sent.len() {
        assert!(Instant::now() < deadline, "acked {} of {} before the deadline", acked.len(), sent.len());
        for m in pending.drain(..) {
            for _ in 0..20 {
                match c.ack(&m).await {
                    Ok(()) => {
                        acked.insert(m.message_id().to_string());
                        break;
                    }
                    // INVALID_RECEIPT_HANDLE: the delivery ended; it is delivered again.
                    Err(e) if format!("{e:?}").contains("INVALID_RECEIPT_HANDLE") => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        }
        pending = receive_n(&c, "Events", &all(), 1, Duration::from_secs(5), Duration::from_secs(5)).await;
    }
    assert_eq!(acked, sent, "every message sent was consumed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sparse_filter_finds_its_message_behind_a_long_run_of_others_in_one_receive() {
    // One plan looks at a bounded number of records per queue (2,048). A receive whose plan only
    // passed over messages its filter did not want must look further at once, not sit out its
    // long poll with matches still behind the records it looked at.
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Audit", 1, TopicKind::Normal).await;
    cluster.create_group("rare", false, 16).await;
    let p = producer(&cluster.access_url(), "Audit").await;
    use futures_util::StreamExt;
    let sent = futures_util::stream::iter(0..7000)
        .map(|i| send(&p, "Audit", "Noise", None, format!("noise-{i}")))
        .buffer_unordered(64)
        .count()
        .await;
    assert_eq!(sent, 7000);
    let wanted = send(&p, "Audit", "Rare", None, "the one".into()).await;

    let c = consumer(&cluster.access_url(), "rare", "Audit").await;
    let rare = FilterExpression::new(FilterType::Tag, "Rare");
    let first = c.receive_with("Audit", &rare, 32, Duration::from_secs(30)).await.expect("receive");
    let ids: Vec<&str> = first.iter().map(|m| m.message_id()).collect();
    assert_eq!(ids, vec![wanted.as_str()], "the first receive brings the one match");
}

/// Acks sent through a follower while the leadership of the queue's group is handed from node to
/// node (as the leader balancer does) all succeed: a moment with no leader is waited out, not
/// answered with HA_NOT_AVAILABLE, which the official clients do not retry for an ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acks_through_leadership_handed_over_and_over_all_succeed() {
    let cluster = Arc::new(Cluster::start(3, Options::default()).await);
    cluster.create_topic("Handover", 1, TopicKind::Normal).await;
    cluster.create_group("steady", false, 16).await;
    let group = cluster.queue_group("Handover", 0).await;
    let p = producer(&cluster.access_url(), "Handover").await;
    let mut sent = BTreeSet::new();
    for i in 0..150 {
        sent.insert(send(&p, "Handover", "h", None, format!("h-{i}")).await);
    }

    let handing = {
        let cluster = Arc::clone(&cluster);
        tokio::spawn(async move {
            for round in 0..10u64 {
                let leader = cluster.wait_for_leader_of(Some(group), Duration::from_secs(10)).await;
                cluster.hand_over(group, (leader + round % 2) % 3 + 1).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let c = consumer(&cluster.client_addr(3), "steady", "Handover").await;
    let mut acked = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while acked.len() < sent.len() || !handing.is_finished() {
        assert!(Instant::now() < deadline, "acked {} of {}", acked.len(), sent.len());
        for m in receive_n(&c, "Handover", &all(), 1, Duration::from_secs(30), Duration::from_secs(5)).await {
            c.ack(&m).await.expect("an ack through a leadership hand-over");
            acked.insert(m.message_id().to_string());
            // Spread over the hand-overs.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    handing.await.expect("hand-overs");
    assert_eq!(acked, sent, "every message acked once");
}
