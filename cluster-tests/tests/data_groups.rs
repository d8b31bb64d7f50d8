//! Data groups: Raft groups of their own beside the metadata group, on every node below five
//! nodes and on three of them from five. Adding them starts a replica on each node holding them,
//! each node comes to lead its share, a killed node's groups elect another leader while the
//! others keep theirs, and once it is back the leaderships return.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rockraft_cluster_tests::{Cluster, Options};
use rockraft_proto::rockraft as pb;

/// Each data group's leader as node `id` sees them (groups it does not run are absent).
async fn leaders_seen_by(cluster: &Cluster, id: u64) -> BTreeMap<u32, Option<u64>> {
    match cluster.status(id).await {
        Some(s) => s.groups.iter().filter(|g| g.id != 0).map(|g| (g.id, g.leader)).collect(),
        None => BTreeMap::new(),
    }
}

/// Waits until every running node in `ids` sees the groups led as `want`; the last view if not.
async fn wait_for_leaders(
    cluster: &Cluster,
    ids: &[u64],
    want: &BTreeMap<u32, Option<u64>>,
    timeout: Duration,
) -> Result<(), BTreeMap<u64, BTreeMap<u32, Option<u64>>>> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut seen = BTreeMap::new();
        for &id in ids {
            seen.insert(id, leaders_seen_by(cluster, id).await);
        }
        if seen.values().all(|s| s == want) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(seen);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Three nodes and one data group to start from, whatever the suite's size: the tests that add
/// groups themselves and check the shape they take on three nodes.
fn three_nodes_one_group() -> Options {
    Options { exact_nodes: true, data_groups: Some(1), ..Options::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn data_groups_run_on_every_node_and_their_leaders_are_spread_and_kept_spread() {
    // Three nodes, each in every group, whatever the suite's size.
    let mut cluster = Cluster::start(3, three_nodes_one_group()).await;
    let configure = |n: u32| pb::ConfigureRequest { data_groups: Some(n), ..Default::default() };
    cluster.admin(configure(3)).await;

    // Every node runs every group, and leads one: group g is node g's turn.
    let spread: BTreeMap<u32, Option<u64>> = [(1, Some(1)), (2, Some(2)), (3, Some(3))].into();
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("the groups' leaders were not spread over the nodes: {seen:?}");
    }
    let settings = cluster.admin(pb::GetSettingsRequest {}).await;
    assert_eq!(settings.data_groups, 3);

    // Fewer data groups than there are is refused, and changes nothing.
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let shrink = cluster.call(&cluster.admin_addr(leader), configure(2)).await;
    assert!(shrink.is_err(), "a data group was removed: {shrink:?}");
    assert_eq!(cluster.admin(pb::GetSettingsRequest {}).await.data_groups, 3);

    // Node 2 dies: its group elects another leader; the groups it did not lead keep theirs.
    cluster.kill(2);
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let seen = leaders_seen_by(&cluster, 1).await;
        let moved = seen.get(&2).copied().flatten().is_some_and(|l| l != 2);
        if moved || Instant::now() > deadline {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(after.get(&2).copied().flatten().is_some_and(|l| l != 2), "group 2 elected another leader: {after:?}");
    assert_eq!((after.get(&1), after.get(&3)), (Some(&Some(1)), Some(&Some(3))), "the others kept theirs");

    // Back, it reopens every group and takes its turn again.
    cluster.restart(2);
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("the leaderships did not return to their nodes: {seen:?}");
    }

    // With balancing off, a leadership handed elsewhere stays there past several balancing
    // rounds (one every 2 s); on again, it returns to the node whose turn it is.
    let balance = |on: bool| pb::ConfigureRequest { balance_leaders: Some(on), ..Default::default() };
    cluster.admin(balance(false)).await;
    assert!(!cluster.admin(pb::GetSettingsRequest {}).await.balance_leaders);
    cluster.make_leader_of(1, 3).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let handed: BTreeMap<u32, Option<u64>> = [(1, Some(3)), (2, Some(2)), (3, Some(3))].into();
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &handed, Duration::from_secs(5)).await {
        panic!("with balancing off, a leadership moved: {seen:?}");
    }
    cluster.admin(balance(true)).await;
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("with balancing on again, group 1 did not return to node 1: {seen:?}");
    }
}

/// A node removed from the cluster leaves every data group too: the groups it led elect another
/// leader among the remaining voters, and the turns are taken among those.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_removed_from_the_cluster_leaves_every_data_group() {
    let cluster = Cluster::start(3, three_nodes_one_group()).await;
    cluster.admin(pb::ConfigureRequest { data_groups: Some(3), ..Default::default() }).await;
    let spread: BTreeMap<u32, Option<u64>> = [(1, Some(1)), (2, Some(2)), (3, Some(3))].into();
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("the groups' leaders were not spread over the nodes: {seen:?}");
    }
    cluster.admin(pb::RemoveNodeRequest { id: 3 }).await;
    // Among voters 1 and 2, group 3 is node 1's turn: only so if node 3 left group 3.
    let two: BTreeMap<u32, Option<u64>> = [(1, Some(1)), (2, Some(2)), (3, Some(1))].into();
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2], &two, Duration::from_secs(60)).await {
        panic!("group 3 did not leave node 3: {seen:?}");
    }
}

/// Every group's replicas agree: the same digest at the same applied index on every node holding
/// the group.
async fn wait_replicas_agree(cluster: &Cluster, groups: u32) {
    for group in 1..=groups {
        let holders = cluster.holders(group).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut seen = Vec::new();
            for &id in &holders {
                let d = cluster.call(&cluster.admin_addr(id), pb::GetDigestRequest { group }).await;
                seen.push(d.ok().map(|d| (d.applied, d.digest)));
            }
            if seen.iter().all(|d| d.is_some() && *d == seen[0]) {
                break;
            }
            assert!(Instant::now() < deadline, "group {group}'s replicas did not agree: {seen:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A topic's queues spread over three data groups, each queue's messages in its own group's
/// log: the official client sends to all of them, receives and acks every message through a
/// node that leads only one group, the group's lag goes to zero, a message given up goes to the
/// dead-letter queue of the group that held it and is read from there, and every group's
/// replicas agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queues_spread_over_the_data_groups_are_sent_to_and_consumed_through_any_node() {
    use rocketmq::model::common::{FilterExpression, FilterType};
    use rocketmq::model::message::MessageBuilder;
    use rockraft::broker::TopicKind;
    use rockraft_cluster_tests::clients::{consumer, producer, receive_all};
    use rockraft_cluster_tests::retry;

    let cluster = Cluster::start(3, Options { data_groups: Some(3), ..Default::default() }).await;
    cluster.create_topic("Spread", 6, TopicKind::Normal).await;
    cluster.create_group("readers", false, 16).await;
    cluster.create_group("doomed", false, 1).await;
    let topics = cluster.admin(pb::ListTopicsRequest::default()).await.topics;
    let spread = topics.iter().find(|t| t.name == "Spread").expect("listed").groups.clone();
    assert_eq!(spread.len(), 6, "a group per queue: {spread:?}");
    assert_eq!(spread.iter().copied().collect::<std::collections::BTreeSet<_>>(), [1, 2, 3].into());

    let p = producer(&cluster.access_url(), "Spread").await;
    let mut sent = std::collections::BTreeSet::new();
    for i in 0..60 {
        let m = MessageBuilder::builder().set_topic("Spread").set_tag("t").set_body(format!("m-{i}").into_bytes());
        sent.insert(p.send(m.build().unwrap()).await.expect("send").message_id().to_string());
    }
    // Each queue's messages are read from the group holding it, on every node holding it: all
    // of them together are exactly what was sent.
    assert_eq!(stored_by_holders(&cluster, "Spread", 6).await, sent);

    // Node 2 leads group 2 only: a receive there pops from every group.
    let c = consumer(&cluster.client_addr(2), "readers", "Spread").await;
    let received = receive_all(&c, "Spread", sent.len(), Duration::from_secs(60)).await;
    assert_eq!(received, sent, "every message received and acked once");
    let lag = |groups: Vec<pb::Group>| {
        let readers = groups.into_iter().find(|g| g.name == "readers").expect("listed");
        readers.progress.iter().filter(|p| p.topic == "Spread").map(|p| p.lag).sum::<u64>()
    };
    // Node 1 counts from its own replicas, which apply the last acks a moment after they commit.
    retry(Duration::from_secs(10), async || match lag(cluster.groups(1).await) {
        0 => Ok(()),
        left => Err(format!("lag {left} left")),
    })
    .await;
    // A data group the cluster does not run is named as missing, and nothing changes.
    let reset =
        pb::ResetOffsetRequest { group: "readers".into(), topic: "Spread".into(), time_ms: 0, data_group: Some(9) };
    let refused = cluster.call(&cluster.admin_addr(1), reset).await.expect_err("group 9 does not exist");
    assert_eq!(refused.code(), Some(tonic::Code::NotFound), "{refused}");
    assert_eq!(lag(cluster.groups(1).await), 0, "the refused reset changed nothing");

    // Given up after one attempt: each moved to the dead-letter queue of the group that held
    // it (one message per queue, so each group gives one up), and all read from there.
    cluster.create_topic("Poison", 3, TopicKind::Normal).await;
    let p = producer(&cluster.access_url(), "Poison").await;
    let mut poison = std::collections::BTreeSet::new();
    for i in 0..3 {
        let m = MessageBuilder::builder().set_topic("Poison").set_tag("t").set_body(format!("p-{i}").into_bytes());
        poison.insert(p.send(m.build().unwrap()).await.expect("send").message_id().to_string());
    }
    let holding: std::collections::BTreeSet<u32> = {
        let topics = cluster.admin(pb::ListTopicsRequest::default()).await.topics;
        let t = topics.into_iter().find(|t| t.name == "Poison").expect("listed");
        (0..3).filter(|q| t.queue_ranges.get(*q).is_some_and(|r| r.next > r.start)).map(|q| t.groups[q]).collect()
    };
    assert!(holding.len() > 1, "the poison messages are in several groups: {holding:?}");
    let all = FilterExpression::new(FilterType::Tag, "*");
    let doomed = consumer(&cluster.client_addr(3), "doomed", "Poison").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut delivered = std::collections::BTreeSet::new();
    while delivered.len() < 3 {
        assert!(Instant::now() < deadline, "delivered {delivered:?} of {poison:?}");
        let batch = doomed.receive_with("Poison", &all, 32, Duration::from_secs(1)).await.unwrap_or_default();
        delivered.extend(batch.iter().map(|m| m.message_id().to_string()));
    }
    let dlq = consumer(&cluster.client_addr(1), "readers", "%DLQ%doomed").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut dead = std::collections::BTreeSet::new();
    while dead.len() < 3 {
        assert!(Instant::now() < deadline, "in the dead-letter topic: {dead:?} of {poison:?}");
        // A receive for "doomed" finds the expired deliveries and gives them up.
        let again = doomed.receive_with("Poison", &all, 32, Duration::from_secs(1)).await.unwrap_or_default();
        assert!(again.is_empty(), "delivered past the group's one attempt");
        for m in dlq.receive_with("%DLQ%doomed", &all, 32, Duration::from_secs(20)).await.unwrap_or_default() {
            dlq.ack(&m).await.expect("ack from the dead-letter queue");
            dead.insert(m.message_id().to_string());
        }
    }
    assert_eq!(dead, poison, "every given-up message, from every group's dead-letter queue");

    // The operator's listing of the dead-letter topic shows every group's copy, each under its
    // group's heading.
    let args = ["--endpoint", &cluster.admin_addr(2), "message", "list", "--topic", "%DLQ%doomed", "--queue", "0"];
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(rockraft_cluster_tests::node_binary()).args(&args).output().expect("rockraft runs")
    })
    .await
    .expect("joined");
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "message list: {}", String::from_utf8_lossy(&out.stderr));
    let headings: Vec<&str> = listed.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(headings, ["# data group 1", "# data group 2", "# data group 3"], "{listed}");
    let ids: std::collections::BTreeSet<String> =
        listed.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split('\t').nth(1)).map(String::from).collect();
    assert_eq!(ids, poison, "every group's copy listed: {listed}");
    // A queue asked of a group that does not hold it is refused, not listed from another group.
    let topics = cluster.admin(pb::ListTopicsRequest::default()).await.topics;
    let holder = topics.iter().find(|t| t.name == "Poison").expect("listed").groups[0];
    let elsewhere = holder % 3 + 1;
    let ask = pb::ListMessagesRequest {
        topic: "Poison".into(),
        queue: 0,
        from: 0,
        limit: 10,
        local: false,
        data_group: Some(elsewhere),
    };
    let refused = cluster.call(&cluster.admin_addr(1), ask).await.expect_err("queue 0 is in another group");
    assert_eq!(refused.code(), Some(tonic::Code::InvalidArgument), "{refused}");

    wait_replicas_agree(&cluster, 3).await;
}

/// The messages of `topic`'s first `queues` queues, after checking that every node holding a
/// queue's group (every node, below five) stores the same ones in that queue.
async fn stored_by_holders(cluster: &Cluster, topic: &str, queues: u32) -> std::collections::BTreeSet<String> {
    let mut all = std::collections::BTreeSet::new();
    for q in 0..queues {
        let mut first: Option<(u64, Vec<String>)> = None;
        for id in cluster.queue_holders(topic, q).await {
            let ids: Vec<String> =
                cluster.local_messages(id, topic, q).await.into_iter().map(|m| m.message_id).collect();
            match &first {
                Some((by, seen)) => assert_eq!(&ids, seen, "queue {q} on node {id} and on node {by}"),
                None => first = Some((id, ids)),
            }
        }
        for id in first.map(|(_, ids)| ids).unwrap_or_default() {
            assert!(all.insert(id.clone()), "message {id} is stored twice in {topic}");
        }
    }
    all
}

/// A send of one message to `queue` of `topic` through node `via`, as the official clients make
/// it: the id and queue are the client's.
async fn send_raw(
    cluster: &Cluster,
    via: u64,
    topic: &str,
    id: &str,
    queue: u32,
) -> rockraft_proto::rocketmq::SendResultEntry {
    use rockraft_proto::rocketmq::{Code, Message, MessageType, Resource, SendMessageRequest, SystemProperties};
    let message = Message {
        topic: Some(Resource { resource_namespace: String::new(), name: topic.into() }),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: id.into(),
            message_type: MessageType::Normal as i32,
            queue_id: queue as i32,
            tag: Some("t".into()),
            ..Default::default()
        }),
        body: format!("body of {id}").into_bytes().into(),
    };
    let mut client = rockraft_cluster_tests::signed_client(&cluster.client_addr(via), None);
    let reply = client.send_message(SendMessageRequest { messages: vec![message] }).await.expect("answered");
    let mut entry = reply.into_inner().entries.remove(0);
    assert_eq!(entry.status.take().map(|s| s.code), Some(Code::Ok as i32), "send of {id} through node {via}");
    entry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_send_retried_through_another_node_naming_a_queue_of_another_group_is_stored_once() {
    use rockraft::broker::TopicKind;
    let cluster = Cluster::start(3, Options { exact_nodes: true, data_groups: Some(3), ..Default::default() }).await;
    cluster.create_topic("Once", 6, TopicKind::Normal).await;
    let topics = cluster.admin(pb::ListTopicsRequest::default()).await.topics;
    let groups = topics.iter().find(|t| t.name == "Once").expect("listed").groups.clone();
    // Each id is sent naming queue `q` through node 1, then again (its first answer lost, as
    // far as the client knows) naming the next queue of another group through node 2, as the
    // Java and Rust clients retry.
    let mut sent = std::collections::BTreeSet::new();
    for i in 0..24u32 {
        let q = i % 6;
        let other =
            (1..6).map(|k| (q + k) % 6).find(|&o| groups[o as usize] != groups[q as usize]).expect("another group");
        let id = format!("once-{i}");
        let first = send_raw(&cluster, 1, "Once", &id, q).await;
        let again = send_raw(&cluster, 2, "Once", &id, other).await;
        assert_eq!(
            (again.message_id.as_str(), again.offset),
            (id.as_str(), first.offset),
            "answered as the first copy"
        );
        sent.insert(id);
    }
    assert_eq!(stored_by_holders(&cluster, "Once", 6).await, sent, "every id stored, none twice");
}

/// Node `id`'s process has exited within `timeout`.
async fn wait_exited(cluster: &mut Cluster, id: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if !cluster.is_running(id) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A topic's creation and deletion span the groups: the metadata entry in the metadata group, then
/// a placement in each data group. A data group's leader killed between the two (a crash point
/// just before it proposes its placement) leaves it to the group's next leader: the topic's
/// queues in that group take every send, and after the deletion hold nothing, and once the
/// crashed node is back every group's replicas agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_data_group_leader_crashed_between_a_metadata_change_and_its_placement_loses_nothing() {
    use rocketmq::model::message::MessageBuilder;
    use rockraft::broker::TopicKind;
    use rockraft_cluster_tests::clients::producer;

    const POINT: &str = "placement::data_group::before_propose=return(abort)";
    // Three nodes, each in every group, whatever the suite's size: node g leads group g.
    let options = Options { exact_nodes: true, data_groups: Some(3), ..Default::default() };
    let mut cluster = Cluster::start(3, options).await;
    let spread: BTreeMap<u32, Option<u64>> = [(1, Some(1)), (2, Some(2)), (3, Some(3))].into();
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("the groups' leaders were not spread over the nodes: {seen:?}");
    }
    // Node 2, leading group 2, crashes as it is about to place the new topic in group 2.
    cluster.stop(2);
    cluster.restart_with_crash_points(2, POINT);
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("node 2 did not lead group 2 again: {seen:?}");
    }
    cluster.create_topic("Across", 6, TopicKind::Normal).await;
    assert!(wait_exited(&mut cluster, 2, Duration::from_secs(10)).await, "node 2 crashed before placing");

    // Group 2's next leader places it: every queue takes sends, through the first node.
    let p = producer(&cluster.client_addr(1), "Across").await;
    let mut sent = std::collections::BTreeSet::new();
    for i in 0..30 {
        let m = MessageBuilder::builder().set_topic("Across").set_tag("t").set_body(format!("a-{i}").into_bytes());
        sent.insert(p.send(m.build().unwrap()).await.expect("send").message_id().to_string());
    }
    cluster.restart(2);
    cluster.wait_for_groups(3, Duration::from_secs(60)).await;
    wait_replicas_agree(&cluster, 3).await;
    assert_eq!(stored_by_holders(&cluster, "Across", 6).await, sent, "every message sent is held");

    // Node 3, leading group 3, crashes as it is about to drop the deleted topic from group 3.
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("the leaderships did not return: {seen:?}");
    }
    cluster.stop(3);
    cluster.restart_with_crash_points(3, POINT);
    if let Err(seen) = wait_for_leaders(&cluster, &[1, 2, 3], &spread, Duration::from_secs(60)).await {
        panic!("node 3 did not lead group 3 again: {seen:?}");
    }
    cluster.admin(pb::DeleteTopicRequest { name: "Across".into() }).await;
    assert!(wait_exited(&mut cluster, 3, Duration::from_secs(10)).await, "node 3 crashed before dropping");
    cluster.restart(3);
    cluster.wait_for_groups(3, Duration::from_secs(60)).await;
    wait_replicas_agree(&cluster, 3).await;
    // Gone from every group on every node: a topic of the same name starts empty.
    cluster.create_topic("Across", 6, TopicKind::Normal).await;
    for id in 1..=3 {
        for q in 0..6 {
            let left = cluster.local_messages(id, "Across", q).await;
            assert!(left.is_empty(), "node {id} queue {q} kept {} messages of the deleted topic", left.len());
        }
    }
}

/// Five nodes, five data groups: each group's replicas on three nodes (each node holding three
/// groups and coming to lead one), the official client sending to every queue through the routes
/// and consuming every queue through one node, a send through a node that holds no replica of its queue's group passed
/// to that group's leader, `topic list` and `group list` asked of any node counting every group,
/// a lite delivery dead-lettered through a node holding no replica, and each group's replicas
/// agreeing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_nodes_hold_each_data_group_on_three_and_serve_every_queue_through_any_node() {
    use rocketmq::model::message::MessageBuilder;
    use rockraft::broker::TopicKind;
    use rockraft_cluster_tests::clients::{consumer, producer, receive_all};
    use rockraft_cluster_tests::retry;
    use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
    use rockraft_proto::rocketmq::{Code, Message, Resource, SendMessageRequest, SystemProperties};

    // Halves checked a second after they are stored, then every second.
    let broker = "transaction_recovery_secs = 1\ntransaction_check_interval_secs = 1\n".to_string();
    let cluster = Cluster::start(5, Options { data_groups: Some(5), broker, ..Default::default() }).await;
    let mut held: BTreeMap<u64, usize> = BTreeMap::new();
    let mut holders = BTreeMap::new();
    for group in 1..=5 {
        let h = cluster.holders(group).await;
        assert_eq!(h.len(), 3, "group {group} has three replicas: {h:?}");
        for &id in &h {
            *held.entry(id).or_default() += 1;
        }
        holders.insert(group, h);
    }
    assert_eq!(held, (1..=5).map(|id| (id, 3)).collect(), "each node holds three groups");
    // The balancer hands each node one group to lead.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut leaders = Vec::new();
        for group in 1..=5 {
            leaders.push(cluster.wait_for_leader_of(Some(group), Duration::from_secs(10)).await);
        }
        if leaders == [1, 2, 3, 4, 5] {
            break;
        }
        assert!(Instant::now() < deadline, "the leaders stayed {leaders:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    cluster.create_topic("Wide", 10, TopicKind::Normal).await;
    cluster.create_group("everyone", false, 16).await;
    let p = producer(&cluster.access_url(), "Wide").await;
    let mut sent = std::collections::BTreeSet::new();
    for i in 0..50 {
        let m = MessageBuilder::builder().set_topic("Wide").set_tag("t").set_body(format!("w-{i}").into_bytes());
        sent.insert(p.send(m.build().unwrap()).await.expect("send").message_id().to_string());
    }
    // Each queue once through a node holding no replica of its group.
    for queue in 0..10u32 {
        let group = cluster.queue_group("Wide", queue).await;
        let elsewhere = (1..=5).find(|id| !holders[&group].contains(id)).expect("two nodes hold no replica");
        let mut c = MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(elsewhere)))
            .await
            .expect("connect");
        let id = format!("elsewhere-{queue}");
        let message = Message {
            topic: Some(Resource { resource_namespace: String::new(), name: "Wide".into() }),
            user_properties: Default::default(),
            system_properties: Some(SystemProperties {
                message_id: id.clone(),
                queue_id: queue as i32,
                ..Default::default()
            }),
            body: b"passed on".to_vec().into(),
        };
        let r = c.send_message(SendMessageRequest { messages: vec![message] }).await.expect("rpc").into_inner();
        let code = r.status.as_ref().map(|s| s.code);
        assert_eq!(code, Some(Code::Ok as i32), "queue {queue} (group {group}) through node {elsewhere}: {r:?}");
        sent.insert(id);
    }
    // Every node counts every group's messages, held here or not.
    for id in 1..=5 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let topics = cluster.call(&cluster.admin_addr(id), pb::ListTopicsRequest::default()).await.expect("list");
            let wide = topics.topics.iter().find(|t| t.name == "Wide").map_or(0, |t| t.messages);
            if wide == sent.len() as u64 {
                break;
            }
            assert!(Instant::now() < deadline, "node {id} counts {wide} messages of {}", sent.len());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Through node 1 alone, as the official Rust client receives when given one endpoint: it
    // holds three of the five groups, and the other two send their messages with the deliveries.
    let c = consumer(&cluster.client_addr(1), "everyone", "Wide").await;
    let received = receive_all(&c, "Wide", sent.len(), Duration::from_secs(90)).await;
    assert_eq!(received, sent, "every message received and acked once");
    // As each node counts it, once the replicas it reads have applied the last acks.
    for id in [1, 5] {
        retry(Duration::from_secs(10), async || {
            let groups = cluster.call(&cluster.admin_addr(id), pb::ListGroupsRequest::default()).await;
            let groups = groups.map_err(|e| e.to_string())?;
            let everyone = groups.groups.iter().find(|g| g.name == "everyone").expect("listed");
            match everyone.progress.iter().map(|p| p.lag).sum::<u64>() {
                0 => Ok(()),
                left => Err(format!("node {id} counts a lag of {left}")),
            }
        })
        .await;
    }
    lite_dead_letter_through_a_node_holding_no_replica(&cluster, &holders).await;
    transaction_check_through_a_node_holding_no_replica(&cluster, &holders).await;
    wait_replicas_agree(&cluster, 5).await;
}

/// A lite delivery received where its group is held, then given up through a node that holds no
/// replica of the group: the group's leader builds the dead letter, which is read from the
/// consumer group's dead-letter queue.
/// A producer whose Telemetry stream a node holding no replica of a half's group serves is asked
/// about that half: the group's leader reads the half and asks through that node.
async fn transaction_check_through_a_node_holding_no_replica(
    cluster: &Cluster,
    holders: &BTreeMap<u32, std::collections::BTreeSet<u64>>,
) {
    use futures_util::StreamExt;
    use rockraft::broker::TopicKind;
    use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
    use rockraft_proto::rocketmq::{
        Code, Message, MessageType, Publishing, Resource, SendMessageRequest, Settings, SystemProperties,
        TelemetryCommand, settings, telemetry_command,
    };
    let topic = Resource { resource_namespace: String::new(), name: "Checked".into() };
    cluster.create_topic("Checked", 1, TopicKind::Transaction).await;
    let group = cluster.queue_group("Checked", 0).await;
    let elsewhere = (1..=5).find(|id| !holders[&group].contains(id)).expect("two nodes hold no replica");
    let mut c =
        MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(elsewhere))).await.expect("connect");
    // A producer of the topic, connected to that node alone.
    let (commands, rx) = tokio::sync::mpsc::channel(4);
    let publishing = settings::PubSub::Publishing(Publishing {
        topics: vec![topic.clone()],
        max_body_size: 0,
        validate_message_type: false,
    });
    let hello = Settings { pub_sub: Some(publishing), ..Default::default() };
    commands
        .send(TelemetryCommand { status: None, command: Some(telemetry_command::Command::Settings(hello)) })
        .await
        .expect("queued");
    let mut replies =
        c.telemetry(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("telemetry").into_inner();
    let settled = replies.next().await.expect("a reply to the settings").expect("settings answered");
    assert_eq!(settled.status.map(|s| s.code), Some(Code::Ok as i32));

    let half = Message {
        topic: Some(topic),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: "half-elsewhere".into(),
            message_type: MessageType::Transaction as i32,
            ..Default::default()
        }),
        body: b"undecided".to_vec().into(),
    };
    let r = c.send_message(SendMessageRequest { messages: vec![half] }).await.expect("rpc").into_inner();
    assert_eq!(r.status.map(|s| s.code), Some(Code::Ok as i32), "the half is stored (group {group})");

    // Never committed: the group's leader checks it within seconds and asks this producer.
    let asked = tokio::time::timeout(Duration::from_secs(20), replies.next()).await;
    let asked = asked.unwrap_or_else(|_| panic!("the producer on node {elsewhere} was never asked about the half"));
    match asked.expect("a command").expect("a frame").command {
        Some(telemetry_command::Command::RecoverOrphanedTransactionCommand(check)) => {
            let id = check.message.and_then(|m| m.system_properties).map(|p| p.message_id);
            assert_eq!(id.as_deref(), Some("half-elsewhere"));
            assert!(!check.transaction_id.is_empty(), "the check names its transaction");
        }
        other => panic!("the producer was sent {other:?}"),
    }
    drop(commands);
}

async fn lite_dead_letter_through_a_node_holding_no_replica(
    cluster: &Cluster,
    holders: &BTreeMap<u32, std::collections::BTreeSet<u64>>,
) {
    use futures_util::StreamExt;
    use rockraft::broker::TopicKind;
    use rockraft_cluster_tests::clients::{consumer, receive_all};
    use rockraft_cluster_tests::signed_client;
    use rockraft_proto::rocketmq::receive_message_response::Content;
    use rockraft_proto::rocketmq::{
        Code, ForwardMessageToDeadLetterQueueRequest, LiteSubscriptionAction, Message, MessageQueue, MessageType,
        ReceiveMessageRequest, Resource, SendMessageRequest, SyncLiteSubscriptionRequest, SystemProperties,
    };
    let resource = |name: &str| Some(Resource { resource_namespace: String::new(), name: name.into() });
    let seconds = |s: i64| Some(prost_types::Duration { seconds: s, nanos: 0 });

    cluster.create_topic("Chats", 1, TopicKind::Lite).await;
    let lite_group = pb::CreateGroupRequest {
        name: "chatters".into(),
        max_attempts: 16,
        lite_bind_topic: "Chats".into(),
        ..Default::default()
    };
    cluster.admin(lite_group).await;
    cluster.create_group("undeliverable", false, 16).await;
    let group = cluster.queue_group("Chats", 0).await;
    let held_at = cluster.wait_for_leader_of(Some(group), Duration::from_secs(10)).await;
    let elsewhere = (1..=5).find(|id| !holders[&group].contains(id)).expect("two nodes hold no replica");

    let mut c = signed_client(&cluster.client_addr(held_at), None);
    let subscribe = SyncLiteSubscriptionRequest {
        action: LiteSubscriptionAction::CompleteAdd as i32,
        topic: resource("Chats"),
        group: resource("chatters"),
        lite_topic_set: vec!["room-1".into()],
        version: None,
        offset_option: None,
    };
    let r = c.sync_lite_subscription(subscribe).await.expect("rpc").into_inner();
    assert_eq!(r.status.map(|s| s.code), Some(Code::Ok as i32));
    let message = Message {
        topic: resource("Chats"),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: "lite-1".into(),
            message_type: MessageType::Lite as i32,
            lite_topic: Some("room-1".into()),
            ..Default::default()
        }),
        body: b"undeliverable".to_vec().into(),
    };
    let r = c.send_message(SendMessageRequest { messages: vec![message] }).await.expect("rpc").into_inner();
    assert_eq!(r.status.as_ref().map(|s| s.code), Some(Code::Ok as i32), "{r:?}");
    let receive = ReceiveMessageRequest {
        group: resource("chatters"),
        message_queue: Some(MessageQueue { topic: resource("Chats"), ..Default::default() }),
        batch_size: 1,
        invisible_duration: seconds(60),
        long_polling_timeout: seconds(5),
        ..Default::default()
    };
    let mut handle = None;
    let mut frames = c.receive_message(receive).await.expect("rpc").into_inner();
    while let Some(frame) = frames.next().await {
        if let Some(Content::Message(m)) = frame.expect("frame").content {
            handle = m.system_properties.and_then(|p| p.receipt_handle);
        }
    }
    let handle = handle.expect("the lite message delivered where its group is held");

    let forward = ForwardMessageToDeadLetterQueueRequest {
        group: resource("chatters"),
        topic: resource("Chats"),
        receipt_handle: handle,
        message_id: "lite-1".into(),
        delivery_attempt: 1,
        max_delivery_attempts: 16,
        lite_topic: Some("room-1".into()),
    };
    let mut e = signed_client(&cluster.client_addr(elsewhere), None);
    let r = e.forward_message_to_dead_letter_queue(forward).await.expect("rpc").into_inner();
    let code = r.status.as_ref().map(|s| s.code);
    assert_eq!(code, Some(Code::Ok as i32), "dead-lettered through node {elsewhere} (group {group}): {r:?}");

    let dlq = consumer(&cluster.access_url(), "undeliverable", "%DLQ%chatters").await;
    let dead = receive_all(&dlq, "%DLQ%chatters", 1, Duration::from_secs(30)).await;
    assert_eq!(dead, ["lite-1".to_string()].into(), "the given-up lite message, in the dead-letter queue");
}
