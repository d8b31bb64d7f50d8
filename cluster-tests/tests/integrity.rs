//! A follower's log damaged on disk — bytes flipped while it is down, a segment cut short, a
//! sealed segment rotting while it runs — never serves a wrong byte, is filled again from the
//! other members, and the node may then lead with every acknowledged message intact.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::MessageBuilder;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options, Rng, clients, http_get};
use rockraft_proto::rockraft as pb;

const TOPIC: &str = "Ledger";

/// Sends `n` messages of `size` bytes, each body unique; answers id → body.
async fn send(cluster: &Cluster, n: usize, size: usize) -> BTreeMap<String, Vec<u8>> {
    send_to(cluster, TOPIC, n, size).await
}

async fn send_to(cluster: &Cluster, topic: &str, n: usize, size: usize) -> BTreeMap<String, Vec<u8>> {
    let p = clients::producer(&cluster.access_url(), topic).await;
    let mut sent = BTreeMap::new();
    for i in 0..n {
        let mut body = format!("entry {i} ").into_bytes();
        body.resize(size, b'a' + (i % 26) as u8);
        let msg = MessageBuilder::builder().set_topic(topic).set_body(body.clone()).build().unwrap();
        let receipt = p.send(msg).await.expect("send");
        sent.insert(receipt.message_id().to_string(), body);
    }
    sent
}

/// Receives every message through node `via` and checks each body is exactly the one sent.
async fn consume_exactly(cluster: &Cluster, via: u64, sent: &BTreeMap<String, Vec<u8>>) {
    consume_exactly_from(cluster, TOPIC, via, sent).await
}

async fn consume_exactly_from(cluster: &Cluster, topic: &str, via: u64, sent: &BTreeMap<String, Vec<u8>>) {
    let c = clients::consumer(&cluster.client_addr(via), "auditors", topic).await;
    let all = FilterExpression::new(FilterType::Tag, "*");
    let mut seen: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < sent.len() {
        assert!(Instant::now() < deadline, "consumed {} of {}", seen.len(), sent.len());
        match c.receive_with(topic, &all, 32, Duration::from_secs(10)).await {
            Ok(batch) => {
                for m in batch {
                    let id = m.message_id().to_string();
                    let want = sent.get(&id).unwrap_or_else(|| panic!("{id} was never sent"));
                    assert_eq!(m.body(), want, "message {id} came back with other bytes");
                    if c.ack(&m).await.is_ok() {
                        seen.insert(id, m.body().to_vec());
                    }
                }
            }
            Err(e) => eprintln!("receive failed (retrying): {e:?}"),
        }
    }
}

/// The segment files of data group 1 on node `id`, in log order.
fn segments(cluster: &Cluster, id: u64) -> Vec<PathBuf> {
    let dir = cluster.group_dir(id, 1).join("log/segments");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.extension().is_some_and(|x| x == "seg"));
    files.sort();
    files
}

/// Flips one bit in each of `count` random bytes of the records of `path`.
fn flip_bytes(path: &Path, rng: &mut Rng, count: usize) {
    let end = rockraft::store::segment_written_end(path).unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    for _ in 0..count {
        let at = 64 + rng.below(end - 64);
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, at).unwrap();
        file.write_all_at(&[b[0] ^ (1 << rng.below(8))], at).unwrap();
    }
}

/// `rockraft_<name>_total` on node `id`'s `/metrics`.
async fn counter(cluster: &Cluster, id: u64, name: &str) -> u64 {
    let (_, page) = http_get(&cluster.http_addr(id), "/metrics").await.expect("metrics");
    let line = format!("rockraft_{name}_total ");
    page.lines().find_map(|l| l.strip_prefix(&line)).map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

/// A cluster with the topic and the consumer group, `n` messages of `size` bytes sent.
async fn started(options: Options, n: usize, size: usize) -> (Cluster, BTreeMap<String, Vec<u8>>) {
    let cluster = Cluster::start(3, options).await;
    cluster.create_topic(TOPIC, 2, TopicKind::Normal).await;
    cluster.create_group("auditors", false, 16).await;
    let sent = send(&cluster, n, size).await;
    (cluster, sent)
}

/// A follower of group 1 that holds everything sent so far.
async fn follower(cluster: &Cluster) -> u64 {
    let leader = cluster.wait_for_leader_of(Some(1), Duration::from_secs(20)).await;
    let id = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    cluster.wait_caught_up_in(Some(1), id, Duration::from_secs(30)).await;
    id
}

/// Waits until the cluster's history (`rockraft cluster history`, as every node applied it)
/// records a repair of `part` that `victim` made of group 1: from another member, or (a queue
/// record) from its own log.
async fn history_records_repair(cluster: &Cluster, victim: u64, part: pb::log::RepairedPart) {
    let own = part == pb::log::RepairedPart::QueueRecord;
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in cluster.ids() {
        loop {
            let history = cluster
                .call(&cluster.admin_addr(id), pb::GetFailoverHistoryRequest { group: Some(1) })
                .await
                .expect("history");
            let recorded = history.repairs.iter().any(|r| {
                let source_ok = if own { r.source.is_none() } else { r.source.is_some_and(|s| s != victim) };
                r.node == victim && r.group == 1 && r.part == part as i32 && source_ok
            });
            if recorded {
                break;
            }
            assert!(Instant::now() < deadline, "node {id}'s history has no repair by node {victim}: {history:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Restarts `victim` on its damaged log, waits until it has its records again, makes it lead,
/// and checks every message and the replicas.
async fn repaired_and_leading(cluster: &mut Cluster, victim: u64, sent: &BTreeMap<String, Vec<u8>>) {
    cluster.restart(victim);
    cluster.wait_caught_up_in(Some(1), victim, Duration::from_secs(60)).await;
    assert!(counter(cluster, victim, "corruption_found").await > 0, "the damage is reported");
    assert!(counter(cluster, victim, "corruption_repaired").await > 0, "the repair is reported");
    history_records_repair(cluster, victim, pb::log::RepairedPart::LogRecords).await;
    cluster.make_leader_of(1, victim).await;
    consume_exactly(cluster, victim, sent).await;
    cluster.assert_replicas_agree(Duration::from_secs(30)).await;
    let (_, page) = http_get(&cluster.http_addr(victim), "/").await.expect("status page");
    assert!(page.contains("id=integrity class=ok"), "the status page tells of the repair");
    let dir = &cluster.nodes.iter().find(|n| n.id == victim).unwrap().dir;
    let log = std::fs::read_to_string(dir.join("node.log")).unwrap();
    assert!(log.contains("do not read back") && log.contains("filled again"), "the node's log says what happened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_whose_log_had_bytes_flipped_repairs_and_leads_with_every_message_intact() {
    let (mut cluster, sent) = started(Options::default(), 400, 2_000).await;
    let victim = follower(&cluster).await;
    cluster.kill(victim);
    let mut rng = Rng(0x5eed_0053);
    for path in segments(&cluster, victim) {
        flip_bytes(&path, &mut rng, 8);
    }
    repaired_and_leading(&mut cluster, victim, &sent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_whose_middle_segment_was_cut_short_repairs_and_leads_with_every_message_intact() {
    let (mut cluster, sent) = started(Options::default(), 500, 8_000).await;
    let victim = follower(&cluster).await;
    cluster.kill(victim);
    let files = segments(&cluster, victim);
    assert!(files.len() >= 3, "the log spans {} segments", files.len());
    let middle = &files[files.len() / 2];
    std::fs::OpenOptions::new().write(true).open(middle).unwrap().set_len(200_000).unwrap();
    repaired_and_leading(&mut cluster, victim, &sent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scrubber_finds_a_sealed_segment_rotting_under_a_running_follower_and_fills_it() {
    let options = Options { storage: "scrub_mb_per_sec = 100.0\nscrub_pause_secs = 1.0".into(), ..Options::default() };
    let (cluster, sent) = started(options, 400, 8_000).await;
    let victim = follower(&cluster).await;
    let files = segments(&cluster, victim);
    assert!(files.len() >= 2);
    flip_bytes(&files[0], &mut Rng(7), 4);
    let deadline = Instant::now() + Duration::from_secs(60);
    while counter(&cluster, victim, "corruption_repaired").await == 0 {
        assert!(Instant::now() < deadline, "the scrubber did not repair the damage");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    history_records_repair(&cluster, victim, pb::log::RepairedPart::LogRecords).await;
    cluster.make_leader_of(1, victim).await;
    consume_exactly(&cluster, victim, &sent).await;
    cluster.assert_replicas_agree(Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_whose_snapshot_file_was_damaged_takes_another_members_and_leads() {
    let options =
        Options { storage: "retention_hours = 0.0003\nretention_check_secs = 0.3\n".into(), ..Default::default() };
    // A little over one 1 MiB segment: it expires, and every member snapshots at its end.
    let (mut cluster, _) = started(options, 150, 8_000).await;
    let victim = follower(&cluster).await;
    let snapshot = cluster.group_dir(victim, 1).join("snapshot.json");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !snapshot.exists() || cluster.status_of(victim, Some(1)).await.and_then(|s| s.purged).is_none() {
        assert!(Instant::now() < deadline, "node {victim} never snapshotted and purged");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.kill(victim);
    let mut bytes = std::fs::read(&snapshot).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x04;
    std::fs::write(&snapshot, &bytes).unwrap();

    cluster.restart(victim);
    cluster.wait_caught_up_in(Some(1), victim, Duration::from_secs(60)).await;
    assert!(counter(&cluster, victim, "corruption_repaired").await > 0, "the repair is reported");
    assert_ne!(std::fs::read(&snapshot).unwrap(), bytes, "the damaged file was replaced");
    history_records_repair(&cluster, victim, pb::log::RepairedPart::Snapshot).await;
    cluster.make_leader_of(1, victim).await;
    cluster.create_topic("Fresh", 1, TopicKind::Normal).await;
    let fresh = send_to(&cluster, "Fresh", 20, 100).await;
    consume_exactly_from(&cluster, "Fresh", victim, &fresh).await;
    cluster.assert_replicas_agree(Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_whose_consume_queue_rotted_rebuilds_it_from_its_log_and_serves_every_message() {
    let (mut cluster, sent) = started(Options::default(), 300, 500).await;
    let victim = follower(&cluster).await;
    // Past a checkpoint: the restart does not write these records again, reads find them rotten.
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.kill(victim);
    let queues = cluster.group_dir(victim, 1).join("broker/queues").join(TOPIC);
    let mut rng = Rng(0x5eed_00c0);
    for queue in ["0", "1"] {
        let file = queues.join(queue).join(format!("{:020}.cq", 0));
        let mut bytes = std::fs::read(&file).unwrap();
        for record in [3usize, 40, 77] {
            let at = record * 20 + rng.below(20) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        std::fs::write(&file, &bytes).unwrap();
    }
    cluster.restart(victim);
    cluster.wait_caught_up_in(Some(1), victim, Duration::from_secs(60)).await;
    cluster.make_leader_of(1, victim).await;
    consume_exactly(&cluster, victim, &sent).await;
    assert!(counter(&cluster, victim, "corruption_repaired").await >= 6, "each rotten record is rebuilt and counted");
    history_records_repair(&cluster, victim, pb::log::RepairedPart::QueueRecord).await;
    cluster.assert_replicas_agree(Duration::from_secs(30)).await;
}
