//! The official Rust producer against a real three-node cluster: normal and FIFO sends, a leader
//! killed mid-stream, the killed node catching up, and bad input.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rocketmq::Producer;
use rocketmq::conf::{ClientOption, ProducerOption};
use rocketmq::model::message::MessageBuilder;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options, queue_difference};

async fn producer(access_url: &str, topics: &[&str]) -> Producer {
    let mut po = ProducerOption::default();
    po.set_topics(topics.to_vec());
    let mut co = ClientOption::default();
    co.set_access_url(access_url);
    co.set_enable_tls(false);
    let mut p = Producer::new(po, co).expect("producer");
    p.start().await.expect("producer start");
    p
}

/// message id → (queue, offset) as node `id` stores `topic`, asserting each id appears once and
/// every queue's offsets are dense from 0. Only the queues whose data group the node holds: from
/// five nodes, a group is held by three.
async fn stored(cluster: &Cluster, id: u64, topic: &str, queues: u32) -> BTreeMap<String, (u32, u64)> {
    let mut out = BTreeMap::new();
    for q in 0..queues {
        if !cluster.holds_queue(id, topic, q).await {
            continue;
        }
        let lines = cluster.local_messages(id, topic, q).await;
        for (i, m) in lines.iter().enumerate() {
            assert_eq!(m.offset, i as u64, "node {id}: queue {q} offsets are not dense");
            assert!(
                out.insert(m.message_id.clone(), (q, m.offset)).is_none(),
                "node {id}: {} stored twice",
                m.message_id
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn official_producer_sends_normal_and_fifo_messages_through_any_node() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Orders", 4, TopicKind::Normal).await;
    cluster.create_topic("Ledger", 2, TopicKind::Fifo).await;
    let mut sent = BTreeSet::new();
    let mut fifo_sent: Vec<(String, String)> = Vec::new();
    for id in 1..=3 {
        // A producer per node: each endpoint serves every RPC, followers forward to the leader.
        let p = producer(&cluster.client_addr(id), &["Orders", "Ledger"]).await;
        for i in 0..10 {
            let msg = MessageBuilder::builder()
                .set_topic("Orders")
                .set_tag("TagA")
                .set_keys(vec![format!("k{id}-{i}")])
                .set_body(format!("order {id}-{i}").into_bytes())
                .build()
                .unwrap();
            sent.insert(p.send(msg).await.expect("normal send").message_id().to_string());
            let group = format!("account-{}", i % 3);
            let msg =
                MessageBuilder::fifo_message_builder("Ledger", format!("entry {id}-{i}").into_bytes(), group.clone())
                    .build()
                    .unwrap();
            fifo_sent.push((group, p.send(msg).await.expect("fifo send").message_id().to_string()));
        }
    }
    // Every holder of a queue stores the same messages at the same offsets, and together the
    // nodes store exactly what was acknowledged.
    let mut everywhere: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    let mut ledger_everywhere = BTreeMap::new();
    for id in cluster.nodes.iter().map(|n| n.id) {
        cluster.wait_caught_up(id, Duration::from_secs(10)).await;
        let orders = stored(&cluster, id, "Orders", 4).await;
        for (msg_id, at) in orders {
            assert!(sent.contains(&msg_id), "node {id} stores {msg_id}, which was never acknowledged");
            let before = everywhere.insert(msg_id.clone(), at);
            assert!(before.is_none_or(|b| b == at), "node {id} stores {msg_id} at {at:?}, another at {before:?}");
        }
        for (msg_id, at) in stored(&cluster, id, "Ledger", 2).await {
            let before = ledger_everywhere.insert(msg_id.clone(), at);
            assert!(before.is_none_or(|b| b == at), "node {id} stores {msg_id} at {at:?}, another at {before:?}");
        }
    }
    assert_eq!(everywhere.keys().cloned().collect::<BTreeSet<_>>(), sent, "the nodes hold what was acknowledged");
    // Per message group: one queue, in send order.
    let mut last: BTreeMap<&str, (u32, u64)> = BTreeMap::new();
    for (group, msg_id) in &fifo_sent {
        let at = *ledger_everywhere.get(msg_id).unwrap_or_else(|| panic!("acknowledged {msg_id} is stored"));
        if let Some(prev) = last.insert(group, at) {
            assert_eq!(prev.0, at.0, "group {group} stays on one queue");
            assert!(prev.1 < at.1, "group {group} keeps its order");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_leader_mid_stream_loses_no_acknowledged_message() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Stream", 2, TopicKind::Normal).await;
    let p = producer(&cluster.access_url(), &["Stream"]).await;
    let mut acked = BTreeSet::new();
    let mut acked_after_kill = 0;
    let mut failed = 0;
    let mut killed = None;
    let mut i = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while acked_after_kill < 150 && std::time::Instant::now() < deadline {
        if i == 150 {
            let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
            cluster.kill(leader);
            killed = Some(leader);
        }
        let msg = MessageBuilder::builder().set_topic("Stream").set_body(format!("m{i}").into_bytes()).build().unwrap();
        // The official client does not retry: a send during the election may fail, which is fine;
        // one that succeeds must never be lost.
        match p.send(msg).await {
            Ok(receipt) => {
                acked.insert(receipt.message_id().to_string());
                if killed.is_some() {
                    acked_after_kill += 1;
                }
            }
            Err(_) => {
                failed += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        i += 1;
    }
    assert!(
        acked_after_kill >= 150,
        "sends resume after the leader dies ({acked_after_kill} acknowledged, {failed} failed)"
    );
    let killed = killed.unwrap();
    // Every acknowledged message on every survivor holding its queue (from five nodes, a queue's
    // group is held by three of them), at the same place on each.
    let mut got = BTreeMap::new();
    let mut on_nodes = Vec::new();
    for id in cluster.nodes.iter().map(|n| n.id).filter(|&id| id != killed) {
        cluster.wait_caught_up(id, Duration::from_secs(10)).await;
        let on_node = stored(&cluster, id, "Stream", 2).await;
        for (msg_id, at) in &on_node {
            let before = got.insert(msg_id.clone(), *at);
            assert!(before.is_none_or(|b| b == *at), "node {id} stores {msg_id} at {at:?}, another at {before:?}");
        }
        on_nodes.push((id, on_node));
    }
    for (id, on_node) in &on_nodes {
        for q in 0..2 {
            if cluster.holds_queue(*id, "Stream", q).await {
                let missing: Vec<&String> =
                    got.iter().filter(|(m, at)| at.0 == q && !on_node.contains_key(*m)).map(|(m, _)| m).collect();
                assert!(missing.is_empty(), "node {id} lost acknowledged messages of queue {q}: {missing:?}");
            }
        }
    }
    let missing: Vec<&String> = acked.iter().filter(|m| !got.contains_key(*m)).collect();
    assert!(missing.is_empty(), "the survivors lost acknowledged messages: {missing:?}");

    cluster.restart(killed);
    cluster.wait_caught_up(killed, Duration::from_secs(30)).await;
    // The ConsumeQueue files of each group holding a queue of the topic, alike on its holders.
    let mut groups = BTreeSet::new();
    for q in 0..2 {
        groups.insert(cluster.queue_group("Stream", q).await);
    }
    for group in groups {
        let holders: Vec<u64> = cluster.holders(group).await.into_iter().collect();
        let reference = cluster.queue_files(holders[0], group);
        assert!(!reference.is_empty());
        for &id in &holders[1..] {
            let difference = queue_difference(&reference, &cluster.queue_files(id, group));
            assert_eq!(
                difference, None,
                "node {id}'s ConsumeQueues of group {group} differ from node {}'s",
                holders[0]
            );
        }
    }
}

/// A follower forwards a send to a slow leader, gives up waiting after its attempt's time and
/// forwards it again, more than once: the retries wait for the first attempt's answer, so the
/// message's body is written to the log once, not once per attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_send_forwarded_again_while_the_leader_is_slow_is_written_to_the_log_once() {
    use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
    use rockraft_proto::rocketmq::{Code, Message, MessageType, Resource, SendMessageRequest, SystemProperties};
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Slow", 1, TopicKind::Normal).await;
    let group = cluster.queue_group("Slow", 0).await;
    // Every round the leader proposes waits 1.2 s first; a forward attempt gives up after 1 s, and
    // a send is held for 1.75 s at most.
    let leader = cluster.wait_for_leader_of(Some(group), Duration::from_secs(10)).await;
    cluster.kill(leader);
    cluster.restart_with_crash_points(leader, "cluster::propose_round=return(1200)");
    cluster.make_leader(leader).await;
    cluster.wait_caught_up(leader, Duration::from_secs(30)).await;
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    cluster.wait_caught_up(follower, Duration::from_secs(30)).await;
    // A new leader writes an entry or two of its own at first: wait until its log is quiet.
    let last = async || cluster.status_of(leader, Some(group)).await.and_then(|s| s.last_log_index).unwrap();
    let mut before = last().await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let now = last().await;
        if now == before {
            break;
        }
        before = now;
    }

    let mut client =
        MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(follower))).await.unwrap();
    let message = Message {
        topic: Some(Resource { resource_namespace: String::new(), name: "Slow".into() }),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: "slow-1".into(),
            message_type: MessageType::Normal as i32,
            ..Default::default()
        }),
        body: bytes::Bytes::from_static(b"once"),
    };
    let reply = client.send_message(SendMessageRequest { messages: vec![message] }).await.unwrap().into_inner();
    assert_eq!(reply.status.map(|s| s.code), Some(Code::Ok as i32), "the send is acknowledged");
    cluster.wait_caught_up(follower, Duration::from_secs(30)).await;
    let after = last().await;
    assert_eq!(after - before, 1, "one entry for one send, however often it was forwarded");
    let stored = cluster.local_messages(leader, "Slow", 0).await;
    assert_eq!(stored.iter().filter(|m| m.message_id == "slow-1").count(), 1);
}
