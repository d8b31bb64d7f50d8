//! What an operator sees of a running cluster: `/metrics` parsed as Prometheus parses it, the
//! health checks, and the status page rendered by a real browser (headless Chromium) through a
//! failover.

use std::process::Command;
use std::time::{Duration, Instant};

use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::MessageBuilder;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::clients::{consumer, producer};
use rockraft_cluster_tests::{Cluster, Options};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::{Code, Message, Resource, SendMessageRequest, SystemProperties};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GETs `path` from `addr` over plain HTTP/1.0: (status code, body).
async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await.ok()?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut response)).await.ok()?.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("a Prometheus parser accepts /metrics")
}

/// The value of the sample `name` whose labels include all of `labels`.
fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape.samples.iter().find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))).map(
        |s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(ref buckets) => buckets.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => f64::NAN,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_count_what_clients_did_and_parse_as_prometheus_text() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Orders", 4, TopicKind::Normal).await;
    cluster.create_group("billing", false, 16).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;

    let p = producer(&cluster.client_addr(leader), "Orders").await;
    for i in 0..20 {
        let m =
            MessageBuilder::builder().set_topic("Orders").set_tag("Paid").set_body(format!("order {i}").into_bytes());
        p.send(m.build().expect("message")).await.expect("send");
    }
    let c = consumer(&cluster.client_addr(leader), "billing", "Orders").await;
    let all = FilterExpression::new(FilterType::Tag, "*");
    let mut delivered = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while delivered.len() < 20 && Instant::now() < deadline {
        delivered.extend(c.receive_with("Orders", &all, 32, Duration::from_secs(30)).await.unwrap_or_default());
    }
    assert_eq!(delivered.len(), 20, "every message delivered");
    for m in delivered.iter().take(5) {
        c.ack(m).await.expect("ack");
    }

    let (code, text) = get(&cluster.http_addr(leader), "/metrics").await.expect("/metrics answers");
    assert_eq!(code, 200);
    let scrape = parse(&text);
    let sent = value(&scrape, "rockraft_sends_total", &[("topic", "Orders"), ("status", "OK")]);
    assert_eq!(sent, Some(20.0), "the leader counted the 20 sends it answered");
    assert_eq!(value(&scrape, "rockraft_acks_total", &[("topic", "Orders"), ("status", "OK")]), Some(5.0));
    let delivered_count =
        value(&scrape, "rockraft_delivered_messages_total", &[("topic", "Orders"), ("group", "billing")]);
    assert_eq!(delivered_count, Some(20.0));
    assert_eq!(value(&scrape, "rockraft_raft_role", &[("role", "leader")]), Some(1.0));
    assert_eq!(value(&scrape, "rockraft_raft_leader_id", &[]), Some(leader as f64));
    assert!(value(&scrape, "rockraft_raft_term", &[]).is_some_and(|t| t >= 1.0));
    assert!(
        value(&scrape, "rockraft_commit_latency_seconds", &[]).is_some_and(|n| n >= 20.0),
        "a commit latency per proposal"
    );
    assert_eq!(value(&scrape, "rockraft_topic_stored_messages", &[("topic", "Orders")]), Some(20.0));
    assert_eq!(
        value(&scrape, "rockraft_consumer_lag_messages", &[("group", "billing"), ("topic", "Orders")]),
        Some(15.0),
        "15 delivered and not acknowledged"
    );
    assert!(
        value(&scrape, "rockraft_plugin_calls_total", &[("plugin", "tag")]).is_some(),
        "built-in plugins are listed"
    );
    for follower in (1..=3).filter(|&id| id != leader) {
        let lag = value(&scrape, "rockraft_raft_replication_lag_entries", &[("peer", &follower.to_string())]);
        assert!(lag.is_some(), "the leader reports node {follower}'s replication lag");
    }
    assert!(value(&scrape, "process_resident_memory_bytes", &[]).is_some_and(|b| b > 0.0));
    assert!(value(&scrape, "process_open_fds", &[]).is_some_and(|n| n > 0.0));
    assert!(value(&scrape, "rockraft_disk_free_bytes", &[]).is_some_and(|b| b > 0.0));

    // A follower sees the same cluster from its side.
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    let (_, text) = get(&cluster.http_addr(follower), "/metrics").await.expect("a follower's /metrics");
    let scrape = parse(&text);
    assert_eq!(value(&scrape, "rockraft_raft_role", &[("role", "follower")]), Some(1.0));
    assert_eq!(value(&scrape, "rockraft_raft_leader_id", &[]), Some(leader as f64));

    // Sends to a topic that does not exist are counted under no topic name: clients cannot
    // make up label values.
    let mut raw =
        MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(leader))).await.expect("connect");
    let stray = Message {
        topic: Some(Resource { resource_namespace: String::new(), name: "NoSuchTopic".into() }),
        system_properties: Some(SystemProperties { message_id: "stray-1".into(), ..Default::default() }),
        body: b"x".to_vec().into(),
        ..Default::default()
    };
    let answer = raw.send_message(SendMessageRequest { messages: vec![stray] }).await.expect("answered").into_inner();
    assert_eq!(answer.status.map(|s| s.code), Some(Code::TopicNotFound as i32));
    let (_, text) = get(&cluster.http_addr(leader), "/metrics").await.expect("/metrics");
    assert!(!text.contains("NoSuchTopic"), "a made-up topic name became a label");
    assert!(value(&parse(&text), "rockraft_sends_total", &[("topic", ""), ("status", "TOPIC_NOT_FOUND")]).is_some());

    assert_eq!(get(&cluster.http_addr(follower), "/healthz").await.map(|r| r.0), Some(200));
    assert_eq!(get(&cluster.http_addr(follower), "/readyz").await.map(|r| r.0), Some(200));
}

/// The page as Chromium renders it (after its scripts ran), or `None` where no Chromium is
/// installed.
fn rendered(url: &str) -> Option<String> {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))?;
    let profile = tempfile::tempdir().expect("a browser profile dir");
    let out = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--virtual-time-budget=3000"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", url])
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_page_shows_a_failover_in_a_browser() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Orders", 2, TopicKind::Normal).await;
    let old = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let watcher = (1..=3).find(|&id| id != old).expect("a follower");
    let url = format!("http://{}/", cluster.http_addr(watcher));
    let Some(before) = rendered(&url) else {
        eprintln!("SKIPPED: no Chromium here (scripts/setup.sh installs Debian's `chromium` as root)");
        return;
    };
    assert!(before.contains(&format!("Leader: <b>node {old}</b>")), "the page names the leader: {before}");
    assert!(before.contains("Orders"), "the page lists the topics");
    assert!(before.contains("answering"), "members' health is shown");

    cluster.kill(old);
    let new = loop {
        let now = cluster.wait_for_leader(Duration::from_secs(30)).await;
        if now != old {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The watcher may learn of the new leader a moment after the others.
    let deadline = Instant::now() + Duration::from_secs(15);
    let after = loop {
        let page = rendered(&url).expect("chromium is still here");
        if page.contains(&format!("Leader: <b>node {new}</b>")) || Instant::now() > deadline {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(after.contains(&format!("Leader: <b>node {new}</b>")), "the page names the new leader: {after}");
    let change = format!("<td>node {new}</td><td>node {old}</td>");
    assert!(after.contains(&change), "the page shows the change from node {old} to node {new}: {after}");
    assert!(after.contains("not answering"), "the killed node is shown as not answering: {after}");
}
