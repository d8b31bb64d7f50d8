//! Members whose clocks disagree, through real nodes (the test build sets a node's clock ahead
//! with `ROCKRAFT_TEST_CLOCK_OFFSET_MS`) and the official Rust client: a node whose clock is off
//! does not lead and says so in `cluster status`; and a leader whose clock ran a day ahead leaves
//! no mark on the time-outs of the leaders after it.

use rockraft_proto::rockraft as pb;
use std::time::{Duration, Instant};

use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::{MessageBuilder, MessageView};
use rocketmq::{Producer, SimpleConsumer};
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::clients::{consumer, producer};
use rockraft_cluster_tests::{Cluster, Options};

const DAY_MS: i64 = 86_400_000;

async fn send(p: &Producer, topic: &str, body: &str) {
    let msg = MessageBuilder::builder().set_topic(topic).set_body(body.as_bytes().to_vec()).build().unwrap();
    p.send(msg).await.unwrap_or_else(|e| panic!("send of {body}: {e:?}"));
}

/// Receives `body` (without acking it) within `deadline`, invisible for `invisible` after.
async fn receive(c: &SimpleConsumer, topic: &str, body: &str, invisible: Duration, deadline: Instant) -> MessageView {
    let all = FilterExpression::new(FilterType::Tag, "*");
    while Instant::now() < deadline {
        match c.receive_with(topic, &all, 16, invisible).await {
            Ok(batch) => {
                if let Some(m) = batch.into_iter().find(|m| m.body() == body.as_bytes()) {
                    return m;
                }
            }
            Err(e) => {
                eprintln!("receive failed (retrying): {e:?}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    panic!("{body} was not received in time");
}

/// A send stored by a leader a day ahead, then received under a leader with the right clock with
/// 3 s of invisibility: it is offered again about 3 s later, not a day and 3 s after its store
/// time; and the store times of later sends to the same queue do not go back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_clock_ran_a_day_ahead_shifts_no_later_time_out() {
    // Skew detection off, so the node a day ahead can be made leader.
    let options = Options { extra_config: "[raft]\nmax_clock_skew_ms = 0\n".into(), ..Default::default() };
    let mut cluster = Cluster::start(3, options).await;
    cluster.create_topic("Skew", 1, TopicKind::Normal).await;
    cluster.create_group("skew-readers", false, 16).await;
    let ahead = 3;
    cluster.stop(ahead);
    cluster.restart_with_clock_offset(ahead, DAY_MS);
    cluster.wait_caught_up(ahead, Duration::from_secs(30)).await;
    cluster.make_leader(ahead).await;
    let p = producer(&cluster.access_url(), "Skew").await;
    send(&p, "Skew", "stamped-a-day-ahead").await;
    cluster.make_leader(1).await;
    send(&p, "Skew", "stamped-on-time").await;

    let c = consumer(&cluster.access_url(), "skew-readers", "Skew").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = receive(&c, "Skew", "stamped-a-day-ahead", Duration::from_secs(3), deadline).await;
    assert_eq!(first.delivery_attempt(), 1);
    let again = receive(&c, "Skew", "stamped-a-day-ahead", Duration::from_secs(60), deadline).await;
    assert_eq!(again.delivery_attempt(), 2, "offered again once its 3 s of invisibility passed");

    let holder = cluster.queue_holders("Skew", 0).await[0];
    let lines = cluster.local_messages(holder, "Skew", 0).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[1].store_timestamp_ms >= lines[0].store_timestamp_ms,
        "store times went back along the queue: {lines:?}"
    );
}

/// A node whose clock is a day ahead finds out from the others, says so in `cluster status`,
/// and does not lead: leadership handed to it comes back, and sends through it are stored at
/// the right time by another leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_whose_clock_is_off_does_not_lead() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Timely", 1, TopicKind::Normal).await;
    let ahead = 3;
    cluster.stop(ahead);
    cluster.restart_with_clock_offset(ahead, DAY_MS);
    cluster.wait_caught_up(ahead, Duration::from_secs(30)).await;

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = cluster.status(ahead).await;
        if status.as_ref().is_some_and(|s| s.clock.skewed) {
            let offsets = &status.unwrap().clock.offsets_ms;
            assert!(offsets.values().all(|o| (o + DAY_MS).abs() < 60_000), "the others read a day behind: {offsets:?}");
            break;
        }
        assert!(Instant::now() < deadline, "node {ahead} never found its clock off: {status:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for id in [1, 2] {
        let clock = cluster.status(id).await.expect("status").clock;
        assert!(!clock.skewed, "node {id} is in step with a majority: {clock:?}");
    }

    // Leadership handed to it (the metadata group's) does not stay.
    cluster.admin(pb::TransferLeaderRequest { to: ahead, group: None }).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let leader = cluster.wait_for_leader_of(None, Duration::from_secs(10)).await;
    assert_ne!(leader, ahead, "the node a day ahead leads");
    // Nor does it lead a data group, though with several it is one's turn to.
    for group in 1..=cluster.data_groups {
        let leader = cluster.wait_for_leader_of(Some(group), Duration::from_secs(10)).await;
        assert_ne!(leader, ahead, "the node a day ahead leads data group {group}");
    }

    let p = producer(&cluster.client_addr(ahead), "Timely").await;
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    send(&p, "Timely", "through-the-skewed-node").await;
    let holder = cluster.queue_holders("Timely", 0).await[0];
    let lines = cluster.local_messages(holder, "Timely", 0).await;
    let stored = lines.first().expect("the send is stored").store_timestamp_ms;
    assert!((stored - before).abs() < 60_000, "stored at {stored}, sent at {before}: a skewed clock stamped it");
}
