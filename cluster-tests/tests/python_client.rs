//! The official Python client (`rocketmq-python-client`, installed by `scripts/setup.sh`) against
//! a real three-node cluster: what the Rust client lacks — ChangeInvisibleDuration, the
//! PushConsumer with a listener that always fails, whose message must reach the dead-letter topic,
//! RecallMessage of delayed messages, repeated or wrong EndTransaction resolutions, priority
//! messages (RocketMQ 5.4) received highest priority first; lite topics (RocketMQ 5.5) with the
//! LiteSimpleConsumer and LitePushConsumer; and a
//! client given one endpoint whose node is SIGKILLed mid-stream, carried to the other nodes by
//! the routes.
//! Each scenario is a script in `cluster-tests/python/`; it exits 0 only if every check held.

use rockraft_proto::rockraft as pb;
use std::time::Duration;

use rockraft::broker::TopicKind;
use rockraft::broker::lite::LiteModel;
use rockraft_cluster_tests::{Cluster, Options, run_python};

/// A follower's endpoint: it serves every RPC, forwarding writes to the leader. (Given several
/// addresses, the Python client sends them all as the HTTP/2 authority, which the server refuses
/// as malformed.)
async fn endpoints(cluster: &Cluster) -> String {
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    cluster.client_addr((1..=3).find(|id| *id != leader).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_simple_consumer_changes_invisible_duration_and_an_ack_with_either_handle_works() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Tasks", 2, TopicKind::Normal).await;
    cluster.create_group("py-simple", false, 16).await;
    let eps = endpoints(&cluster).await;
    let run =
        move || run_python("change_invisible.py", &["--endpoints", &eps, "--topic", "Tasks", "--group", "py-simple"]);
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "change_invisible.py failed:\n{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_push_consumer_with_a_failing_listener_reaches_the_dead_letter_topic() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Payments", 2, TopicKind::Normal).await;
    cluster.create_group("py-push", false, 3).await;
    cluster.create_group("py-push-dlq-reader", false, 16).await;
    let eps = endpoints(&cluster).await;
    let run = move || {
        run_python(
            "push_dlq.py",
            &["--endpoints", &eps, "--topic", "Payments", "--group", "py-push", "--max-attempts", "3"],
        )
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "push_dlq.py failed:\n{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_producer_recalls_delayed_messages_and_resolves_transactions_itself_or_by_its_checker() {
    // Open halves are checked after 1 s, then every 2 s.
    let broker = "transaction_recovery_secs = 1\ntransaction_check_interval_secs = 2\n".to_string();
    let cluster = Cluster::start(3, Options { broker, ..Default::default() }).await;
    cluster.create_topic("Alarms", 2, TopicKind::Delay).await;
    cluster.create_topic("Deposits", 2, TopicKind::Transaction).await;
    cluster.create_group("py-delay-tx", false, 16).await;
    let eps = endpoints(&cluster).await;
    let run = move || {
        run_python(
            "delay_transaction.py",
            &["--endpoints", &eps, "--delay-topic", "Alarms", "--tx-topic", "Deposits", "--group", "py-delay-tx"],
        )
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "delay_transaction.py failed:\n{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_simple_consumer_subscribes_with_sql92_and_an_invalid_expression_is_refused() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Shipments", 2, TopicKind::Normal).await;
    cluster.create_group("py-sql", false, 16).await;
    cluster.create_group("py-sql-bad", false, 16).await;
    let eps = endpoints(&cluster).await;
    let run = move || {
        run_python(
            "sql92.py",
            &["--endpoints", &eps, "--topic", "Shipments", "--group", "py-sql", "--bad-group", "py-sql-bad"],
        )
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "sql92.py failed:\n{output}");
}

/// A producer and a SimpleConsumer given only node X's endpoint; X is SIGKILLed after 100
/// acknowledged sends. Sends must be acknowledged again through the other nodes (within 30 s,
/// which only says the client is not stuck) and every acknowledged message received. Prints the
/// longest gap between two acknowledged sends.
async fn python_client_survives_the_death_of_its_only_endpoint(kill_the_leader: bool) {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Failover", 8, TopicKind::Normal).await;
    cluster.create_group("py-failover", false, 16).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let x = if kill_the_leader { leader } else { (1..=3).find(|id| *id != leader).unwrap() };
    let eps = cluster.client_addr(x);
    let pid = cluster.pid(x).expect("node X runs").to_string();
    let run = move || {
        run_python(
            "failover.py",
            &["--endpoints", &eps, "--topic", "Failover", "--group", "py-failover", "--kill-pid", &pid],
        )
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    cluster.kill(x);
    assert!(ok, "failover.py failed:\n{output}");
    // The client retried sends the dead node may have stored: each is stored once, in whichever
    // queue (and data group) its attempts reached.
    let survivor = (1..=3).find(|id| *id != x).unwrap();
    cluster.wait_caught_up(survivor, Duration::from_secs(30)).await;
    let twice = cluster.ids_stored_twice(survivor, "Failover").await;
    assert!(twice.is_empty(), "message ids stored twice: {twice:?}");
    let role = if kill_the_leader { "the leader" } else { "a follower" };
    let result = output.lines().find(|l| l.starts_with("RESULT")).unwrap_or("RESULT missing");
    // The script's own progress lines, without the client's tracebacks about the dead node.
    let steps: Vec<&str> = output.lines().filter(|l| l.starts_with("[failover.py")).collect();
    eprintln!("python client given only node {x} ({role}), SIGKILLed: {result}\n{}", steps.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_client_given_one_follower_survives_its_death() {
    python_client_survives_the_death_of_its_only_endpoint(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_client_given_the_leader_alone_survives_its_death() {
    python_client_survives_the_death_of_its_only_endpoint(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_priority_messages_arrive_highest_priority_first_with_their_priority() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Urgent", 8, TopicKind::Priority).await;
    cluster.create_group("py-priority", false, 16).await;
    let eps = endpoints(&cluster).await;
    let run = move || run_python("priority.py", &["--endpoints", &eps, "--topic", "Urgent", "--group", "py-priority"]);
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "priority.py failed:\n{output}");
}

/// A lite group of `parent`.
async fn create_lite_group(cluster: &Cluster, name: &str, parent: &str, model: LiteModel, quota: u32) {
    let config = pb::CreateGroupRequest {
        name: name.into(),
        max_attempts: 16,
        lite_bind_topic: parent.into(),
        lite_model: model.to_string(),
        lite_quota: Some(quota),
        ..Default::default()
    };
    cluster.admin(config).await;
}

/// Lite topics with the unchanged Python client: subscriptions, order per lite topic, bad names,
/// quota, exclusive takeover, a LitePushConsumer, the leader SIGKILLed mid-stream (lite.py), then
/// the expiry of an idle lite topic after its parent's TTL (one minute here).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_lite_consumers_get_their_lite_topics_in_order_across_a_leader_kill_and_idle_ones_expire() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Chats", 4, TopicKind::Lite).await;
    let ephemeral =
        pb::CreateTopicRequest { name: "Ephemeral".into(), queues: 2, kind: "LITE".into(), lite_ttl_minutes: Some(1) };
    cluster.admin(ephemeral).await;
    cluster.create_topic("Plain", 2, TopicKind::Normal).await;
    create_lite_group(&cluster, "py-lite", "Chats", LiteModel::Shared, 3).await;
    create_lite_group(&cluster, "py-lite-excl", "Chats", LiteModel::Exclusive, 10).await;
    create_lite_group(&cluster, "py-lite-push", "Chats", LiteModel::Shared, 10).await;
    create_lite_group(&cluster, "py-lite-kill", "Chats", LiteModel::Shared, 10).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    let eps = cluster.client_addr(survivor);
    let pid = cluster.pid(leader).expect("the leader runs").to_string();
    let started = std::time::Instant::now();
    let run = move || {
        run_python(
            "lite.py",
            &[
                "--endpoints",
                &eps,
                "--topic",
                "Chats",
                "--ttl-topic",
                "Ephemeral",
                "--plain-topic",
                "Plain",
                "--group",
                "py-lite",
                "--exclusive-group",
                "py-lite-excl",
                "--push-group",
                "py-lite-push",
                "--kill-group",
                "py-lite-kill",
                "--kill-pid",
                &pid,
            ],
        )
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    cluster.kill(leader);
    assert!(ok, "lite.py failed:\n{output}");
    let steps: Vec<&str> = output.lines().filter(|l| l.starts_with("[lite.py")).collect();
    eprintln!("{}", steps.join("\n"));
    // tmp-1 was written at the start of the run: within the TTL plus two looks of the expiry job
    // it is gone, while the lite topics of the parent with the default TTL (a day) stay.
    let listing = |parent: &str| pb::ListLiteTopicsRequest { parent: parent.into(), limit: 100, ..Default::default() };
    let admin = cluster.admin_addr(survivor);
    let deadline = started + Duration::from_secs(100);
    loop {
        match cluster.call(&admin, listing("Ephemeral")).await {
            Ok(rows) if rows.topics.is_empty() => break,
            other => assert!(std::time::Instant::now() < deadline, "tmp-1 did not expire: {other:?}"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    match cluster.call(&admin, listing("Chats")).await {
        Ok(rows) => {
            let names: Vec<&str> = rows.topics.iter().map(|r| r.name.as_str()).collect();
            assert!(names.contains(&"chat-a") && names.contains(&"kill-1"), "lite topics of Chats: {names:?}");
        }
        other => panic!("listing Chats: {other:?}"),
    }
}
