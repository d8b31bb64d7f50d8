//! A full disk is a state the cluster serves through, not a crash: each node's data on a small
//! filesystem of its own, filled to the free-space marks.

use rockraft_proto::rockraft as pb;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::MessageBuilder;
use rocketmq::{Producer, SimpleConsumer};
use rockraft::broker::TopicKind;
use rockraft::store::free_space::{DiskLevel, free_space};
use rockraft_cluster_tests::clients::{consumer, producer};
use rockraft_cluster_tests::{Cluster, Options, http_get, small_disks_allowed};

const MIB: u64 = 1 << 20;
const SOFT: u64 = 8 * MIB;
const HARD: u64 = 4 * MIB;

/// Writes a file of zeros in `dir` until the filesystem has about `leave` bytes free (tmpfs
/// counts what is written, so the space is really taken).
fn fill_to(dir: &Path, name: &str, leave: u64) -> PathBuf {
    let path = dir.join(name);
    let (free, _) = free_space(dir).expect("free space");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("ballast");
    let chunk = vec![0u8; 64 << 10];
    let mut left = free.saturating_sub(leave);
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n]).expect("ballast write");
        left -= n as u64;
    }
    file.sync_all().expect("ballast sync");
    path
}

async fn send(p: &Producer, i: usize) -> Result<String, String> {
    let msg = MessageBuilder::builder()
        .set_topic("Filled")
        .set_tag("fill")
        .set_body(vec![b'x'; 16 << 10])
        .set_keys(vec![format!("fill-{i}")])
        .build()
        .expect("message");
    p.send(msg).await.map(|r| r.message_id().to_string()).map_err(|e| format!("{e:?}"))
}

/// The cluster's alarm as each group's leader sees it, the metadata group's first. Each node
/// reads every voter's free space once a second, so two leaders may see a change a second
/// apart, and each refuses by its own view.
async fn alarms(cluster: &Cluster) -> Vec<Option<DiskLevel>> {
    let mut seen = Vec::new();
    let groups = std::iter::once(None).chain((1..=cluster.data_groups.max(1)).map(Some));
    for group in groups {
        let leader = cluster.wait_for_leader_of(group, Duration::from_secs(10)).await;
        seen.push(cluster.status_of(leader, group).await.map(|s| s.disk.cluster.alarm));
    }
    seen
}

/// Waits until every group's leader sees the alarm at `want`.
async fn wait_alarm(cluster: &Cluster, want: DiskLevel) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while alarms(cluster).await.iter().any(|a| *a != Some(want)) {
        assert!(Instant::now() < deadline, "the alarm did not become {want:?}: {:?}", alarms(cluster).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Three nodes, each with its data on a 40 MiB filesystem of its own and `storage` keys, or
/// `None` (said why) where the machine refuses to mount one.
async fn small_disk_cluster(storage: String) -> Option<Cluster> {
    if let Err(why) = small_disks_allowed() {
        eprintln!("skipped: this machine does not let the test mount small filesystems ({why})");
        return None;
    }
    let options = Options { disk_mib: Some(40), storage, ..Default::default() };
    Some(Cluster::start(3, options).await)
}

/// Receives and acks until nothing more comes; the ids received.
async fn drain(c: &SimpleConsumer) -> BTreeSet<String> {
    let all = FilterExpression::new(FilterType::Tag, "*");
    let mut got = BTreeSet::new();
    let mut empty = 0;
    while empty < 2 {
        match c.receive_with("Filled", &all, 32, Duration::from_secs(30)).await {
            Ok(batch) if batch.is_empty() => empty += 1,
            Ok(batch) => {
                empty = 0;
                for m in batch {
                    c.ack(&m).await.expect("an ack");
                    got.insert(m.message_id().to_string());
                }
            }
            Err(e) => panic!("a receive failed: {e:?}"),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_refuses_sends_while_consumers_drain_and_sends_resume_when_space_returns() {
    let marks = format!("free_space_soft_mark_bytes = {SOFT}\nfree_space_hard_mark_bytes = {HARD}\n");
    let Some(mut cluster) = small_disk_cluster(marks).await else { return };
    cluster.create_topic("Filled", 4, TopicKind::Normal).await;
    cluster.create_topic("Scratch", 1, TopicKind::Normal).await;
    cluster.create_group("drainers", false, 16).await;
    let data_dirs: Vec<PathBuf> = cluster.nodes.iter().map(|n| n.data_dir.clone()).collect();
    // 6 MiB above the soft mark on every node: a few hundred 16 KiB messages reach it.
    let ballast: Vec<PathBuf> = data_dirs.iter().map(|d| fill_to(d, "ballast", SOFT + 6 * MIB)).collect();
    assert!(alarms(&cluster).await.iter().all(|a| *a == Some(DiskLevel::Ok)), "no alarm yet");

    // Send until the cluster refuses: the refusal is retriable and says which node is low.
    let p = producer(&cluster.access_url(), "Filled").await;
    let mut acked = BTreeSet::new();
    let started = Instant::now();
    let refusal = loop {
        match send(&p, acked.len()).await {
            Ok(id) => {
                acked.insert(id);
            }
            Err(e) => break e,
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{} sends and no refusal", acked.len());
    };
    assert!(refusal.contains("disk low on node"), "the refusal names the low node: {refusal}");
    assert!(refusal.contains("TOO_MANY_REQUESTS"), "a retriable status: {refusal}");
    assert!(acked.len() > 100, "only {} sends before the refusal", acked.len());
    wait_alarm(&cluster, DiskLevel::Low).await;
    // Nobody met ENOSPC: every node is up, each still above its hard mark.
    for (id, dir) in cluster.ids().into_iter().zip(&data_dirs) {
        assert!(cluster.is_running(id), "node {id} stopped");
        assert!(free_space(dir).unwrap().0 > HARD, "node {id} went below its hard mark");
    }
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let (_, metrics) = http_get(&cluster.http_addr(leader), "/metrics").await.expect("/metrics answers");
    assert!(metrics.lines().any(|l| l == "rockraft_disk_alarm 1"), "the alarm is a metric");

    // Consumption goes on at the soft mark: every acknowledged message is received and acked.
    let c = consumer(&cluster.access_url(), "drainers", "Filled").await;
    let got = drain(&c).await;
    let missing: Vec<&String> = acked.difference(&got).collect();
    assert!(missing.is_empty(), "{} acknowledged messages never arrived: {missing:?}", missing.len());
    assert!(send(&p, 0).await.is_err(), "still refused: draining frees no space");

    // Below one node's hard mark, only what frees space is appended.
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let deeper = fill_to(&data_dirs[follower as usize - 1], "ballast-deeper", HARD - MIB);
    wait_alarm(&cluster, DiskLevel::Critical).await;
    let admin = cluster.admin_addr(leader);
    let create =
        pb::CreateTopicRequest { name: "Another".into(), queues: 1, kind: "NORMAL".into(), lite_ttl_minutes: None };
    match cluster.call(&admin, create).await {
        Err(why) => assert!(why.to_string().contains("disk low on node"), "{why}"),
        other => panic!("a new topic below the hard mark: {other:?}"),
    }
    let delete = pb::DeleteTopicRequest { name: "Scratch".into() };
    assert!(cluster.call(&admin, delete).await.is_ok(), "a deletion frees space");

    // Space comes back: sends resume by themselves, no node restarted.
    std::fs::remove_file(&deeper).unwrap();
    for b in &ballast {
        std::fs::remove_file(b).unwrap();
    }
    wait_alarm(&cluster, DiskLevel::Ok).await;
    let mut later = BTreeSet::new();
    for i in 0..20 {
        later.insert(send(&p, 100_000 + i).await.expect("sends resume once space is freed"));
    }
    let got = drain(&c).await;
    assert!(later.is_subset(&got), "the messages sent after the alarm arrive");
    for id in cluster.ids() {
        assert!(cluster.is_running(id), "node {id} stopped");
    }

    cluster.assert_replicas_agree(Duration::from_secs(30)).await;
}

/// With the marks off, a node that runs out of space stops (fail-stop, as for any I/O error)
/// rather than acknowledge what it may not hold; once space exists again it restarts cleanly,
/// catches up, and nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_ran_out_of_space_restarts_cleanly_once_space_exists() {
    let marks_off = "free_space_soft_mark_bytes = 0\nfree_space_hard_mark_bytes = 0\n".to_string();
    let Some(mut cluster) = small_disk_cluster(marks_off).await else { return };
    cluster.create_topic("Filled", 4, TopicKind::Normal).await;
    cluster.create_group("drainers", false, 16).await;
    let data_dirs: Vec<PathBuf> = cluster.nodes.iter().map(|n| n.data_dir.clone()).collect();
    let ballast: Vec<PathBuf> = data_dirs.iter().map(|d| fill_to(d, "ballast", 4 * MIB)).collect();

    // Send until nodes stop: each acknowledged send is on a majority.
    let p = producer(&cluster.access_url(), "Filled").await;
    let mut acked = BTreeSet::new();
    let started = Instant::now();
    loop {
        if let Ok(id) = send(&p, acked.len()).await {
            acked.insert(id);
        }
        if cluster.ids().into_iter().any(|id| !cluster.is_running(id)) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{} sends and every node still up", acked.len());
    }
    // The others on full disks stop moments later (their next roll fails too): let them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stopped: Vec<u64> = cluster.ids().into_iter().filter(|&id| !cluster.is_running(id)).collect();
    let log = std::fs::read_to_string(cluster.nodes[stopped[0] as usize - 1].dir.join("node.log")).unwrap();
    assert!(log.contains("No space left on device"), "node {} says why it stopped", stopped[0]);

    // Space again: the stopped nodes start, catch up, and every acknowledged message is there.
    for b in &ballast {
        std::fs::remove_file(b).unwrap();
    }
    for &id in &stopped {
        cluster.restart(id);
    }
    cluster.wait_for_leader(Duration::from_secs(30)).await;
    for id in cluster.ids() {
        cluster.wait_caught_up(id, Duration::from_secs(60)).await;
    }
    let c = consumer(&cluster.access_url(), "drainers", "Filled").await;
    let got = drain(&c).await;
    let missing: Vec<&String> = acked.difference(&got).collect();
    assert!(missing.is_empty(), "{} acknowledged messages lost: {missing:?}", missing.len());
    cluster.assert_replicas_agree(Duration::from_secs(30)).await;
}

/// With a disk budget set, retention purges the oldest segments as free space nears the soft
/// mark, however far the log is below the budget: more messages than the filesystem holds go
/// through, and the alarm ends clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_disk_pressure_a_disk_budget_purges_before_sends_are_refused() {
    // A budget the log never reaches on its own, and no age purges within the test.
    let storage = format!(
        "free_space_soft_mark_bytes = {SOFT}\nfree_space_hard_mark_bytes = {HARD}\n\
         disk_budget_bytes = 1073741824\nretention_check_secs = 3600\n"
    );
    let Some(mut cluster) = small_disk_cluster(storage).await else { return };
    cluster.create_topic("Filled", 4, TopicKind::Normal).await;
    let data_dirs: Vec<PathBuf> = cluster.nodes.iter().map(|n| n.data_dir.clone()).collect();
    for d in &data_dirs {
        fill_to(d, "ballast", SOFT + 12 * MIB);
    }
    // 32 MiB of messages into 12 MiB of room above the soft mark.
    let p = producer(&cluster.access_url(), "Filled").await;
    let started = Instant::now();
    let (mut sent, mut refused) = (0, 0);
    while sent < 2048 {
        match send(&p, sent).await {
            Ok(_) => sent += 1,
            Err(e) => {
                assert!(e.contains("disk low on node"), "{e}");
                refused += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(180), "{sent} sent, {refused} refused: no room was made");
    }
    eprintln!("2048 sends of 16 KiB, {refused} refused on the way");
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    assert!(cluster.status(leader).await.and_then(|s| s.purged).is_some(), "retention purged the log");
    wait_alarm(&cluster, DiskLevel::Ok).await;
    for (id, dir) in cluster.ids().into_iter().zip(&data_dirs) {
        assert!(cluster.is_running(id), "node {id} stopped");
        assert!(free_space(dir).unwrap().0 > HARD, "node {id} went below its hard mark");
    }
    cluster.assert_replicas_agree(Duration::from_secs(30)).await;
}
