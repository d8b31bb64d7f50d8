//! Retention purges whole segments, and a follower that was down past the purge point catches up
//! by installing a snapshot, then holds the same messages at the same offsets as the leader.

use std::time::{Duration, Instant};

use rocketmq::Producer;
use rocketmq::conf::{ClientOption, ProducerOption};
use rocketmq::model::message::MessageBuilder;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options};

async fn send(p: &Producer, n: usize, tag: &str) {
    for i in 0..n {
        let msg = MessageBuilder::builder()
            .set_topic("Retained")
            .set_tag(tag)
            .set_body(vec![b'x'; 8 << 10])
            .set_keys(vec![format!("{tag}-{i}")])
            .build()
            .unwrap();
        p.send(msg).await.expect("send");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_behind_the_purge_point_catches_up_by_snapshot() {
    let options = Options {
        // About a second of retention, checked twice a second.
        storage: "retention_hours = 0.0003\nretention_check_secs = 0.5\n".into(),
        ..Default::default()
    };
    let mut cluster = Cluster::start(3, options).await;
    cluster.create_topic("Retained", 1, TopicKind::Normal).await;
    // The data group holding the queue: the log that grows and is purged.
    let group = Some(cluster.queue_group("Retained", 0).await);
    let leader = cluster.wait_for_leader_of(group, Duration::from_secs(10)).await;
    let lagging = (1..=3).find(|&id| id != leader).unwrap();
    cluster.wait_caught_up(lagging, Duration::from_secs(10)).await;
    let left_at = cluster.status_of(lagging, group).await.unwrap().last_log_index.unwrap_or(0);
    cluster.kill(lagging);

    let mut po = ProducerOption::default();
    po.set_topics(vec!["Retained"]);
    let mut co = ClientOption::default();
    co.set_access_url(cluster.client_addr(leader));
    co.set_enable_tls(false);
    let mut p = Producer::new(po, co).unwrap();
    p.start().await.unwrap();
    // ~3.2 MB: several 1 MiB segments are sealed and then expire.
    send(&p, 400, "before").await;

    let deadline = Instant::now() + Duration::from_secs(30);
    let purged = loop {
        let s = cluster.status_of(leader, group).await.expect("leader answers");
        // Once the leader no longer has the entries after `left_at`, only a snapshot can help.
        if let Some(purged) = s.purged.filter(|&p| p > left_at + 100) {
            break purged;
        }
        assert!(Instant::now() < deadline, "the leader never purged its log");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    cluster.restart(lagging);
    cluster.wait_caught_up(lagging, Duration::from_secs(30)).await;
    send(&p, 50, "after").await;
    cluster.wait_caught_up(lagging, Duration::from_secs(30)).await;

    let on_leader = cluster.local_messages(leader, "Retained", 0).await;
    let on_follower = cluster.local_messages(lagging, "Retained", 0).await;
    assert!(on_follower.iter().any(|m| m.tag == "after"), "messages after the restart reach the follower");
    assert!(on_follower.len() >= 50);
    // Each node purges on its own schedule, so compare where both still hold messages.
    let leader_from = on_leader.first().map_or(u64::MAX, |m| m.offset);
    for m in on_follower.iter().filter(|m| m.offset >= leader_from) {
        let same = on_leader.iter().find(|l| l.offset == m.offset).expect("the leader has that offset too");
        assert_eq!((&same.message_id, &same.keys), (&m.message_id, &m.keys), "offset {} differs", m.offset);
    }
    assert_eq!(on_follower.iter().filter(|m| m.tag == "after").count(), 50);
    assert_eq!(on_follower.last().map(|m| m.offset), on_leader.last().map(|m| m.offset));
    assert!(purged > left_at);
}

/// A node that stopped just after saving a snapshot, before its log was purged up to it, purges
/// the log once restarted, and does not write an entry at every retention check meanwhile: once
/// the sends stop, its log stays still.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_saved_just_before_a_crash_still_purges_the_log_after_restart() {
    let options =
        Options { storage: "retention_hours = 0.0003\nretention_check_secs = 0.3\n".into(), ..Default::default() };
    let mut cluster = Cluster::start(1, options).await;
    cluster.create_topic("Retained", 1, TopicKind::Normal).await;
    let group = Some(cluster.queue_group("Retained", 0).await);
    cluster.kill(1);
    cluster.restart_with_crash_points(1, "snapshot::build::after_save=return(abort)");
    cluster.wait_for_leader(Duration::from_secs(30)).await;
    let mut po = ProducerOption::default();
    po.set_topics(vec!["Retained"]);
    let mut co = ClientOption::default();
    co.set_access_url(cluster.client_addr(1));
    co.set_enable_tls(false);
    let mut p = Producer::new(po, co).unwrap();
    p.start().await.unwrap();
    // A little over one 1 MiB segment, then nothing: the one sealed segment expires, and the
    // snapshot at its purge point is the only one there is to take.
    for _ in 0..140 {
        let msg = MessageBuilder::builder().set_topic("Retained").set_body(vec![b'x'; 8 << 10]).build().unwrap();
        if p.send(msg).await.is_err() {
            break;
        }
    }
    drop(p);
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster.is_running(1) {
        assert!(Instant::now() < deadline, "the node never built a snapshot");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.restart(1);
    cluster.wait_for_leader(Duration::from_secs(30)).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.status_of(1, group).await.and_then(|s| s.purged).is_none() {
        assert!(Instant::now() < deadline, "the log was never purged up to the snapshot saved before the crash");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Sealed segments written before the crash expire within the retention time (a second):
    // each purge writes one entry. After that, nothing may.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let last = async || cluster.status_of(1, group).await.and_then(|s| s.last_log_index);
    let before = last().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(last().await, before, "the log grew with nothing sent");
}
