//! The official Node.js client (`rocketmq-client-nodejs`, installed by `scripts/setup.sh`)
//! against a real three-node cluster: produce, receive through a follower, a new invisible time
//! with a new receipt handle, acks, and nothing delivered twice (`cluster-tests/node/consume.js`);
//! priority messages received highest first, and a LitePushConsumer given only its subscribed lite
//! topic, in order (`lite_priority.js`). Each scenario exits 0 only if every check held.

use rockraft_proto::rockraft as pb;
use std::time::Duration;

use rockraft::broker::TopicKind;
use rockraft::broker::lite::LiteModel;
use rockraft_cluster_tests::{Cluster, Options, run_node};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_simple_consumer_receives_changes_invisible_time_and_acks() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("NodeOrders", 2, TopicKind::Normal).await;
    cluster.create_group("node-readers", false, 16).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let endpoint = cluster.client_addr((1..=3).find(|id| *id != leader).unwrap());
    let run = move || run_node("consume.js", &[&endpoint, "NodeOrders", "node-readers"]);
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "consume.js failed:\n{output}");
}

/// Priority messages and a LitePushConsumer with the Node.js client (lite_priority.js).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_client_receives_priorities_highest_first_and_a_lite_push_consumer_its_lite_topic_in_order() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("NodeUrgent", 8, TopicKind::Priority).await;
    cluster.create_group("node-priority", false, 16).await;
    cluster.create_topic("NodeChats", 4, TopicKind::Lite).await;
    let group = pb::CreateGroupRequest {
        name: "node-lite".into(),
        max_attempts: 16,
        lite_bind_topic: "NodeChats".into(),
        lite_model: LiteModel::Shared.to_string(),
        lite_quota: Some(10),
        ..Default::default()
    };
    cluster.admin(group).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let endpoint = cluster.client_addr((1..=3).find(|id| *id != leader).unwrap());
    let run =
        move || run_node("lite_priority.js", &[&endpoint, "NodeUrgent", "node-priority", "NodeChats", "node-lite"]);
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "lite_priority.js failed:\n{output}");
}
