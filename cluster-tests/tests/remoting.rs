//! RocketMQ 4.x Remoting clients, unchanged (PyPI `rocketmq` 0.4.4, rocketmq-client-cpp 1.2.3
//! inside), against a three-node cluster: each node is their name server and broker. Messages
//! sent over Remoting are read over gRPC and the other way round; a producer given a follower
//! survives the leader's SIGKILL without losing an acknowledged message.

use std::collections::BTreeSet;
use std::time::Duration;

use rocketmq::model::message::MessageBuilder;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::clients::{consumer, producer, receive_all};
use rockraft_cluster_tests::{Cluster, Options, run_remoting_python};

async fn leader_of(cluster: &Cluster) -> u64 {
    cluster.wait_for_leader(Duration::from_secs(10)).await
}

async fn follower(cluster: &Cluster) -> u64 {
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    (1..=3).find(|id| *id != leader).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remoting_clients_produce_pull_and_push_through_a_follower_and_share_messages_with_grpc() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("TopicTest", 4, TopicKind::Normal).await;
    for group in ["CID_PUSH", "CID_PULL", "grpc-reader"] {
        cluster.create_group(group, false, 16).await;
    }
    let node = follower(&cluster).await;
    // Sent over gRPC first: the Remoting pull consumer must read them.
    let p = producer(&cluster.client_addr(node), "TopicTest").await;
    let mut grpc_sent = BTreeSet::new();
    for i in 0..6 {
        let m = MessageBuilder::builder()
            .set_topic("TopicTest")
            .set_tag("grpc")
            .set_keys(vec![format!("g{i}")])
            .set_body(format!("grpc-{i}").into_bytes())
            .build()
            .unwrap();
        grpc_sent.insert((p.send(m).await.expect("gRPC send").message_id().to_string(), format!("grpc-{i}")));
    }
    let namesrv = cluster.remoting_addr(node);
    let args = ["--namesrv", &namesrv, "--topic", "TopicTest", "--group", "CID_PUSH", "--pull-group", "CID_PULL"];
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let run = move || run_remoting_python("produce_consume.py", &args.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "produce_consume.py failed:\n{output}");
    let pulled: Vec<(&str, &str, &str)> = output
        .lines()
        .filter_map(|l| l.strip_prefix("PULLED "))
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            Some((parts.next()?, parts.next()?, parts.next()?))
        })
        .collect();
    for (id, body) in &grpc_sent {
        assert!(
            pulled.iter().any(|(pid, tag, pbody)| pid == id && *tag == "grpc" && pbody == body),
            "the gRPC message {id} ({body}) was not pulled over Remoting with its tag and body"
        );
    }
    // And the other way: every message the Remoting producer sent is received over gRPC, by id.
    let remoting_ids: BTreeSet<String> = pulled
        .iter()
        .filter(|(_, _, body)| body.starts_with("remoting-") || body.starts_with("oneway-"))
        .map(|(id, _, _)| id.to_string())
        .collect();
    assert_eq!(remoting_ids.len(), 25, "{output}");
    let c = consumer(&cluster.access_url(), "grpc-reader", "TopicTest").await;
    let received = receive_all(&c, "TopicTest", 31, Duration::from_secs(60)).await;
    let missing: Vec<_> = remoting_ids.difference(&received).collect();
    assert!(missing.is_empty(), "sent over Remoting, not received over gRPC: {missing:?}");
    // The push consumer's commits are its group's replicated position, which `group list` shows
    // on every node (with no commit the group would have no progress on the topic at all).
    cluster.wait_caught_up(leader_of(&cluster).await, Duration::from_secs(10)).await;
    for id in 1..=3 {
        let groups = cluster.groups(id).await;
        let push = groups.iter().find(|g| g.name == "CID_PUSH").expect("CID_PUSH listed");
        let progress = push.progress.iter().find(|p| p.topic == "TopicTest");
        assert!(progress.is_some_and(|p| p.lag < 31), "node {id}: {:?}", push.progress);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remoting_producer_given_a_follower_loses_no_acknowledged_message_when_the_leader_is_killed() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Failover", 4, TopicKind::Normal).await;
    cluster.create_group("CID_FO", false, 16).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let node = follower(&cluster).await;
    let namesrv = cluster.remoting_addr(node);
    let pid = cluster.pid(leader).expect("the leader runs").to_string();
    let run = move || {
        run_remoting_python(
            "failover.py",
            &["--namesrv", &namesrv, "--topic", "Failover", "--pull-group", "CID_FO", "--kill-pid", &pid],
        )
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    cluster.kill(leader);
    assert!(ok, "failover.py failed:\n{output}");
    let result = output.lines().find(|l| l.starts_with("RESULT")).unwrap_or("RESULT missing");
    eprintln!("Remoting producer through node {node}, leader {leader} SIGKILLed: {result}");
}
