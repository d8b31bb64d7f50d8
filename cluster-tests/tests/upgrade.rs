//! Upgrading in place: a three-node cluster's data directories written by an earlier release
//! (layout 1: one group, its log and state at the top of each directory;
//! `testdata/upgrade/README.md` says how they were made) are moved into this release's layout at
//! first start, and the cluster resumes with every message and every consumer's progress.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::MessageBuilder;
use rockraft_cluster_tests::{Cluster, Options, clients};

/// The ports the earlier release's cluster ran on (its members' addresses are in its log).
const PORT_BASES: [u16; 4] = [15180, 15080, 15280, 15380];
/// What the earlier release's cluster was given: 40 messages in two queues, 10 of them acked by G.
const SENT_BEFORE: usize = 40;
const ACKED_BEFORE: u64 = 10;

fn archive() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/upgrade/layout-1-three-nodes.tar.gz")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_earlier_release_s_data_directories_are_moved_into_groups_and_the_cluster_resumes() {
    let options = Options {
        port_bases: Some(PORT_BASES),
        existing_data: Some(archive()),
        // Its messages are as old as the archive: kept, whatever the day the test runs.
        storage: "retention_hours = 1000000\n".into(),
        ..Options::default()
    };
    let cluster = Cluster::start(3, options).await;

    for node in &cluster.nodes {
        let log = std::fs::read_to_string(node.dir.join("node.log")).expect("node log");
        assert!(
            log.contains("data directory of an earlier release"),
            "node {} said it moved its data:\n{log}",
            node.id
        );
        for entry in ["log", "broker"] {
            assert!(!node.data_dir.join(entry).exists(), "node {}: {entry} left at the top", node.id);
        }
        assert!(cluster.group_dir(node.id, 1).join("log/segments").is_dir(), "node {}: the log moved", node.id);
        let layout = std::fs::read_to_string(node.data_dir.join("layout")).expect("layout file");
        assert_eq!(layout.trim(), "2");
    }

    // Every replica still holds every message the earlier release acknowledged.
    let mut before = BTreeSet::new();
    for id in 1..=3 {
        let mut ids = BTreeSet::new();
        for queue in 0..2 {
            ids.extend(cluster.local_messages(id, "Before", queue).await.into_iter().map(|m| m.message_id));
        }
        assert_eq!(ids.len(), SENT_BEFORE, "node {id} holds every message sent before the upgrade");
        if id == 1 {
            before = ids;
        } else {
            assert_eq!(ids, before, "node {id} holds the same messages as node 1");
        }
    }
    // And the consumer group's progress.
    let lag = |groups: Vec<rockraft_proto::rockraft::Group>| {
        let g = groups.into_iter().find(|g| g.name == "G").expect("group G kept");
        g.progress.iter().find(|p| p.topic == "Before").map(|p| p.lag)
    };
    assert_eq!(lag(cluster.groups(1).await), Some(SENT_BEFORE as u64 - ACKED_BEFORE));

    // The upgraded cluster takes sends and serves the rest of the backlog, then the new message.
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let url = cluster.access_url();
    let producer = clients::producer(&url, "Before").await;
    let body = MessageBuilder::builder().set_topic("Before").set_tag("after").set_body(b"after".to_vec());
    let sent_after = producer.send(body.build().expect("message")).await.expect("send after the upgrade");
    let consumer = clients::consumer(&url, "G", "Before").await;
    let all = FilterExpression::new(FilterType::Tag, "*");
    let mut received = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let want = SENT_BEFORE - ACKED_BEFORE as usize + 1;
    while received.len() < want && Instant::now() < deadline {
        let Ok(batch) = consumer.receive_with("Before", &all, 16, Duration::from_secs(30)).await else { continue };
        for m in batch {
            received.insert(m.message_id().to_string());
            consumer.ack(&m).await.expect("ack");
        }
    }
    assert_eq!(received.len(), want, "the 30 not acked before the upgrade and the one sent after");
    assert!(received.contains(sent_after.message_id()));
    assert_eq!(received.iter().filter(|id| before.contains(*id)).count(), want - 1);
    assert_eq!(lag(cluster.groups(leader).await), Some(0));
}
