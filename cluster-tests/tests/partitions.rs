//! Partitions, one at a time, with the nodes in network namespaces of their own
//! (`rockraft_cluster_tests::network`): a node cut off from the others answers its clients with a
//! retriable status within 2 s, never OK and never silence, while the side with a
//! majority goes on accepting sends; once healed, every replica holds every acknowledged send.
//! Skipped, with a message, where network namespaces cannot be made.

use std::time::Duration;

use bytes::Bytes;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::{Code, Message, MessageType, Resource, SendMessageRequest, SystemProperties};

const TOPIC: &str = "Partitioned";
/// The client's deadline, sent in `grpc-timeout` as the official clients do (theirs is 3 s).
const DEADLINE: Duration = Duration::from_secs(3);
/// How long any send may wait for its answer, whatever the partition: the official clients
/// then still have time to retry it on another queue.
const ANSWER_BOUND: Duration = Duration::from_secs(2);

/// Sends `id` through node `node`; the status code, or `None` if no answer came within 2 s.
async fn send(cluster: &Cluster, node: u64, id: &str) -> Option<i32> {
    let mut client = MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(node))).await.ok()?;
    let message = Message {
        topic: Some(Resource { resource_namespace: String::new(), name: TOPIC.into() }),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: id.into(),
            message_type: MessageType::Normal as i32,
            ..Default::default()
        }),
        body: Bytes::from(format!("body of {id}")),
    };
    let mut request = tonic::Request::new(SendMessageRequest { messages: vec![message] });
    request.set_timeout(DEADLINE);
    let answer = tokio::time::timeout(ANSWER_BOUND, client.send_message(request)).await;
    Some(answer.ok()?.ok()?.into_inner().status?.code)
}

/// Sends through `node` until one is accepted; the id accepted.
async fn send_until_accepted(cluster: &Cluster, node: u64, prefix: &str) -> String {
    for n in 0..40 {
        let id = format!("{prefix}-{n}");
        if send(cluster, node, &id).await == Some(Code::Ok as i32) {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("no send through node {node} was accepted");
}

/// Every send through `cut_off` is answered within 2 s with a retriable status.
async fn refused_in_time(cluster: &Cluster, cut_off: u64, what: &str) {
    for n in 0..4 {
        let code = send(cluster, cut_off, &format!("{what}-cut-{n}")).await;
        assert_eq!(
            code,
            Some(Code::HaNotAvailable as i32),
            "a send through node {cut_off} ({what}) must be answered HA_NOT_AVAILABLE within {ANSWER_BOUND:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_off_node_answers_retriably_in_time_and_the_majority_serves_on() {
    let cluster = Cluster::start(3, Options { network: true, ..Options::default() }).await;
    if cluster.network.is_none() {
        eprintln!("skipped: no network namespaces here (see above), so no partitions");
        return;
    }
    cluster.create_topic(TOPIC, 1, TopicKind::Normal).await;
    let mut acked = vec![send_until_accepted(&cluster, 1, "before").await];

    // A follower cut off: it refuses in time, the leader goes on.
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let follower = (1..=3).find(|&n| n != leader).expect("a follower");
    cluster.network.as_ref().unwrap().isolate(follower);
    refused_in_time(&cluster, follower, "follower").await;
    acked.push(send_until_accepted(&cluster, leader, "follower-cut").await);
    cluster.network.as_ref().unwrap().heal();
    acked.push(send_until_accepted(&cluster, follower, "follower-healed").await);

    // The leader cut off: it refuses in time, the other two elect a leader and go on.
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    cluster.network.as_ref().unwrap().isolate(leader);
    refused_in_time(&cluster, leader, "leader").await;
    let other = (1..=3).find(|&n| n != leader).expect("another node");
    acked.push(send_until_accepted(&cluster, other, "leader-cut").await);
    cluster.network.as_ref().unwrap().heal();
    acked.push(send_until_accepted(&cluster, leader, "leader-healed").await);

    // Every replica holds every acknowledged send, once.
    for id in cluster.queue_holders(TOPIC, 0).await {
        cluster.wait_caught_up(id, Duration::from_secs(30)).await;
        let stored: Vec<String> =
            cluster.local_messages(id, TOPIC, 0).await.into_iter().map(|m| m.message_id).collect();
        for a in &acked {
            assert_eq!(stored.iter().filter(|s| *s == a).count(), 1, "node {id} stores {a} once: {stored:?}");
        }
    }
}
