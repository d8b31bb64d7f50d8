//! The official Node.js client (`rocketmq-client-nodejs`, installed by `scripts/setup.sh`)
//! against a real three-node cluster: produce, receive through a follower, a new invisible time
//! with a new receipt handle, acks, and nothing delivered twice. The scenario is
//! `cluster-tests/node/consume.js`; it exits 0 only if every check held.

use std::time::Duration;

use rockraft::broker::TopicKind;
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
