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
        // The archive holds three nodes' directories, whatever the suite's size.
        exact_nodes: true,
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

    // A node added to the upgraded cluster, whose metadata stays in group 1. One started on a
    // new data directory (metadata in group 0) is refused, saying what to do, and nothing
    // changes; one started on a directory whose `layout` file reads 2 joins and takes the log.
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let members = |status: Option<rockraft::admin::api::NodeStatus>| -> Vec<(u64, bool)> {
        status.expect("a status").members.iter().map(|m| (m.id, m.voter)).collect()
    };
    let members_before = members(cluster.status(leader).await);
    let fresh = cluster.start_joiner(4, |_| {}).await;
    let refused = cluster.call(&cluster.admin_addr(leader), fresh.add_request()).await.expect_err("node 4 is refused");
    assert_eq!(refused.code(), Some(tonic::Code::FailedPrecondition), "{refused}");
    assert!(refused.to_string().contains("write 2 into a file named `layout`"), "{refused}");
    assert_eq!(members(cluster.status(leader).await), members_before, "no learner was added");
    drop(fresh);
    let ready = cluster.start_joiner(5, |dir| std::fs::write(dir.join("layout"), "2\n").expect("layout")).await;
    cluster.call(&cluster.admin_addr(leader), ready.add_request()).await.expect("node 5 joins");
    let voters: Vec<u64> =
        members(cluster.status(leader).await).into_iter().filter(|(_, voter)| *voter).map(|(id, _)| id).collect();
    assert_eq!(voters, [1, 2, 3, 5]);
    // Node 5's own store, once it has applied the log.
    let held = rockraft_cluster_tests::retry(Duration::from_secs(30), || async {
        let mut held = BTreeSet::new();
        for queue in 0..2 {
            let req = rockraft_proto::rockraft::ListMessagesRequest {
                topic: "Before".into(),
                queue,
                from: 0,
                limit: 1000,
                local: true,
                data_group: None,
            };
            let page = cluster.call(&ready.admin_addr, req).await.map_err(|e| e.to_string())?;
            held.extend(page.messages.into_iter().map(|m| m.message_id));
        }
        match held.len() {
            n if n == SENT_BEFORE + 1 => Ok(held),
            n => Err(format!("node 5 holds {n} messages so far")),
        }
    })
    .await;
    assert!(held.contains(sent_after.message_id()) && before.is_subset(&held), "node 5 holds every message");
}
