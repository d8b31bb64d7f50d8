//! A retried send is stored once, whatever data group the retry reaches: official Rust producers,
//! one per node, send unique messages to a 4-queue topic of a cluster of three data groups while
//! a random node is SIGKILLed and restarted every 1–4 s. Every acknowledged message must be
//! stored, and no message id twice. A soak run, not part of CI (`bench/retry_once/run.sh` is the
//! same with the official Python client):
//!
//!     ROCKRAFT_RETRY_ONCE_SECS=90 cargo test -p rockraft-cluster-tests --test retry_once -- --ignored

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rocketmq::model::message::MessageBuilder;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::clients::producer;
use rockraft_cluster_tests::{Cluster, Options, Rng};

const TOPIC: &str = "Once";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a soak run of a minute or more; run it with --ignored"]
async fn official_rust_producers_under_kills_store_every_acknowledged_send_once() {
    let secs: u64 = std::env::var("ROCKRAFT_RETRY_ONCE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let mut cluster =
        Cluster::start(3, Options { exact_nodes: true, data_groups: Some(3), ..Default::default() }).await;
    cluster.create_topic(TOPIC, 4, TopicKind::Normal).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for id in cluster.ids() {
        let (url, stop) = (cluster.client_addr(id), Arc::clone(&stop));
        producers.push(tokio::spawn(async move {
            let p = producer(&url, TOPIC).await;
            let (mut acked, mut failed, mut n) = (Vec::new(), 0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let m = MessageBuilder::builder()
                    .set_topic(TOPIC)
                    .set_tag("once")
                    .set_body(format!("{id}-{n}").into_bytes());
                n += 1;
                match p.send(m.build().expect("message")).await {
                    Ok(receipt) => acked.push(receipt.message_id().to_string()),
                    // Every attempt failed: the message may or may not be stored.
                    Err(_) => {
                        failed += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            (acked, failed)
        }));
    }
    let mut rng = Rng(0x0ce5_eed5);
    let mut kills = 0;
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1_000 + rng.below(3_000))).await;
        let victim = 1 + rng.below(3);
        cluster.kill(victim);
        cluster.restart(victim);
        kills += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut acked, mut failed) = (BTreeSet::new(), 0);
    for p in producers {
        let (ids, f) = p.await.expect("producer");
        acked.extend(ids);
        failed += f;
    }
    for id in cluster.ids() {
        cluster.wait_caught_up(id, Duration::from_secs(60)).await;
        let twice = cluster.ids_stored_twice(id, TOPIC).await;
        let mut stored = BTreeSet::new();
        for q in 0..4 {
            stored.extend(cluster.local_messages(id, TOPIC, q).await.into_iter().map(|m| m.message_id));
        }
        let missing: Vec<_> = acked.difference(&stored).collect();
        eprintln!(
            "node {id}: {} stored, {} ids twice, {} acknowledged missing ({kills} kills, {} acknowledged, {failed} failed)",
            stored.len(),
            twice.len(),
            missing.len(),
            acked.len()
        );
        assert!(twice.is_empty(), "node {id} stores ids twice: {twice:?}");
        assert!(missing.is_empty(), "node {id} lost acknowledged sends: {missing:?}");
    }
}
