//! Real node processes crashed at every crash point (and at random moments) under a workload of
//! sends, retries, receives and acks, and delayed messages whose timers are set and fire all the
//! while, with segments rolling and retention purging: after each
//! crash the node restarts on its data and must converge to the other replicas — the same
//! applied index, the same state digest — and every acknowledged send must be stored exactly
//! once, at the offset it was acknowledged with, on every node that still keeps that offset.
//!
//! The node binary is built with the `failpoints` feature (scripts/test.sh does); a crash point
//! armed with `return(abort)` aborts the process right there. CI runs every point once with
//! seeded counts; `ROCKRAFT_CRASH_ROUNDS=N` runs N passes (and `ROCKRAFT_CRASH_SEED` picks the
//! seed) for a longer hunt.

use rockraft_proto::rockraft as pb;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options, Rng};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::receive_message_response::Content;
use rockraft_proto::rocketmq::{
    AckMessageEntry, AckMessageRequest, Code, Message, MessageQueue, MessageType, ReceiveMessageRequest, Resource,
    SendMessageRequest, SystemProperties,
};

const TOPIC: &str = "Crash";
/// Delayed messages, due within a few seconds: timers are set and fire all through the run.
const DELAY_TOPIC: &str = "CrashDelay";
const GROUP: &str = "crash-readers";
const QUEUES: u32 = 4;
const BODY: usize = 4 << 10;

fn resource(name: &str) -> Option<Resource> {
    Some(Resource { resource_namespace: String::new(), name: name.into() })
}

/// What the clients were told: each acknowledged message id with its queue and offset.
#[derive(Default)]
struct Acked(BTreeMap<String, (u32, u64)>);

struct Workload {
    /// The queues of `TOPIC`: at least one in each data group.
    queues: u32,
    /// While not empty, sends go to these queues only: those whose group the node about to
    /// crash holds (from five nodes, three of every five groups), so its logs roll and its
    /// snapshots are built as fast as on three.
    focus: Vec<u32>,
    next_id: u64,
    acked: Acked,
    /// `TOPIC` as sends are routed (the queue a send lands in: `rockraft::proxy::queue_for`).
    config: rockraft::broker::TopicConfig,
    /// Delayed sends acknowledged.
    delayed: u64,
}

impl Workload {
    /// One send of `n` messages to some running node, retried (same ids) on others until it is
    /// acknowledged or a few seconds pass. Returns whether it was acknowledged.
    async fn send(&mut self, cluster: &mut Cluster, rng: &mut Rng, n: usize) -> bool {
        let queue = match self.focus.is_empty() {
            true => rng.below(self.queues as u64) as u32,
            false => self.focus[rng.below(self.focus.len() as u64) as usize],
        };
        self.send_to(cluster, rng, n, queue).await
    }

    /// [`Self::send`] to queue `queue`.
    async fn send_to(&mut self, cluster: &mut Cluster, rng: &mut Rng, n: usize, queue: u32) -> bool {
        let messages: Vec<Message> = (0..n)
            .map(|i| Message {
                topic: resource(TOPIC),
                user_properties: Default::default(),
                system_properties: Some(SystemProperties {
                    message_id: format!("m{}", self.next_id + i as u64),
                    message_type: MessageType::Normal as i32,
                    queue_id: queue as i32,
                    ..Default::default()
                }),
                body: Bytes::from(vec![b'x'; BODY]),
            })
            .collect();
        self.next_id += n as u64;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let running: Vec<u64> = cluster.ids().into_iter().filter(|&id| cluster.is_running(id)).collect();
            let id = running[rng.below(running.len() as u64) as usize];
            let Ok(mut c) = MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(id))).await else {
                continue;
            };
            let request = SendMessageRequest { messages: messages.clone() };
            if let Ok(r) = c.send_message(request).await {
                let r = r.into_inner();
                if r.status.as_ref().is_some_and(|s| s.code == Code::Ok as i32) {
                    // The queue named, unless it is in another data group than the first id's.
                    let first = format!("m{}", self.next_id - n as u64);
                    let stored = rockraft::proxy::queue_for(&self.config, queue as i32, &first, |_| 0);
                    for e in r.entries {
                        self.acked.0.insert(e.message_id, (stored, e.offset as u64));
                    }
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    /// One delayed message, due 0.2–3 s from now, through some running node (not retried: the
    /// state digests compare its timer on every replica).
    async fn send_delayed(&mut self, cluster: &mut Cluster, rng: &mut Rng) {
        let running: Vec<u64> = cluster.ids().into_iter().filter(|&id| cluster.is_running(id)).collect();
        let id = running[rng.below(running.len() as u64) as usize];
        let Ok(mut c) = MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(id))).await else {
            return;
        };
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let due = now + Duration::from_millis(200 + rng.below(2800));
        let message = Message {
            topic: resource(DELAY_TOPIC),
            user_properties: Default::default(),
            system_properties: Some(SystemProperties {
                message_id: format!("d{}", self.next_id),
                message_type: MessageType::Delay as i32,
                delivery_timestamp: Some(prost_types::Timestamp {
                    seconds: due.as_secs() as i64,
                    nanos: due.subsec_nanos() as i32,
                }),
                ..Default::default()
            }),
            body: Bytes::from_static(b"later"),
        };
        self.next_id += 1;
        if let Ok(r) = c.send_message(SendMessageRequest { messages: vec![message] }).await
            && r.into_inner().status.is_some_and(|s| s.code == Code::Ok as i32)
        {
            self.delayed += 1;
        }
    }

    /// Receives a batch through some running node and acks it: POP state changes too.
    async fn consume(&mut self, cluster: &mut Cluster, rng: &mut Rng) {
        let running: Vec<u64> = cluster.ids().into_iter().filter(|&id| cluster.is_running(id)).collect();
        let id = running[rng.below(running.len() as u64) as usize];
        let Ok(mut c) = MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(id))).await else {
            return;
        };
        let request = ReceiveMessageRequest {
            group: resource(GROUP),
            message_queue: Some(MessageQueue { topic: resource(TOPIC), ..Default::default() }),
            filter_expression: None,
            batch_size: 16,
            invisible_duration: Some(prost_types::Duration { seconds: 30, nanos: 0 }),
            auto_renew: false,
            long_polling_timeout: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
            attempt_id: None,
        };
        let Ok(stream) = c.receive_message(request).await else { return };
        let mut stream = stream.into_inner();
        let mut entries = Vec::new();
        while let Some(Ok(frame)) = stream.next().await {
            if let Some(Content::Message(m)) = frame.content
                && let Some(sp) = m.system_properties
                && let Some(handle) = sp.receipt_handle
            {
                entries.push(AckMessageEntry { message_id: sp.message_id, receipt_handle: handle, lite_topic: None });
            }
        }
        if !entries.is_empty() {
            let ack = AckMessageRequest { group: resource(GROUP), topic: resource(TOPIC), entries };
            let _ = c.ack_message(ack).await;
        }
    }

    /// Drives sends and receives until `done` says stop (or `limit` passes; then false).
    async fn run_until(
        &mut self,
        cluster: &mut Cluster,
        rng: &mut Rng,
        limit: Duration,
        mut done: impl FnMut(&mut Cluster) -> bool,
    ) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if done(cluster) {
                return true;
            }
            let n = 1 + rng.below(16) as usize;
            self.send(cluster, rng, n).await;
            if rng.below(2) == 0 {
                self.send_delayed(cluster, rng).await;
            }
            if rng.below(4) == 0 {
                self.consume(cluster, rng).await;
            }
        }
        done(cluster)
    }
}

/// Waits until the replicas of each Raft group report the same applied index and digest, then
/// checks the acknowledged messages on each node holding their queue. The metadata group runs
/// on every node; from five nodes a data group on three of them.
async fn assert_converged(cluster: &mut Cluster, w: &Workload, what: &str) {
    let states = cluster.replicas_agreed(Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut held: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for &(group, id) in states.keys() {
        held.entry(id).or_default().insert(group);
    }
    let mut queue_groups = BTreeMap::new();
    for q in 0..w.queues {
        queue_groups.insert(q, cluster.queue_group(TOPIC, q).await);
    }
    for id in cluster.ids() {
        let mut ids_seen = BTreeSet::new();
        for q in (0..w.queues).filter(|q| held[&id].contains(&queue_groups[q])) {
            let stored = cluster.local_messages(id, TOPIC, q).await;
            // Retention may purge while the queue is listed: only offsets at or after the queue's
            // start once the listing is done were readable all along.
            let first = queue_start(cluster, id, q).await;
            let by_offset: BTreeMap<u64, &str> = stored.iter().map(|m| (m.offset, m.message_id.as_str())).collect();
            for m in &stored {
                assert!(ids_seen.insert(m.message_id.clone()), "{what}: node {id} stores {} twice", m.message_id);
            }
            for (mid, (queue, offset)) in w.acked.0.iter().filter(|(_, (queue, _))| *queue == q) {
                if *offset >= first {
                    assert_eq!(
                        by_offset.get(offset).copied(),
                        Some(mid.as_str()),
                        "{what}: node {id} lost or moved acknowledged {mid} (queue {queue}, offset {offset})"
                    );
                }
            }
        }
    }
}

/// Where node `id`'s copy of queue `q` starts now (it moves up as that node purges its log).
async fn queue_start(cluster: &Cluster, id: u64, q: u32) -> u64 {
    match cluster.call(&cluster.admin_addr(id), pb::ListTopicsRequest { after: String::new(), limit: 1000 }).await {
        Ok(listed) => listed
            .topics
            .iter()
            .find(|t| t.name == TOPIC)
            .and_then(|t| t.queue_ranges.iter().find(|r| r.queue == q))
            .map_or(u64::MAX, |r| r.start),
        other => panic!("listing topics on node {id}: {other:?}"),
    }
}

/// Where crash points sit, and which node should hit them.
#[derive(Clone, Copy, Debug)]
enum Victim {
    /// Any node: a follower, so the leader keeps taking the workload.
    Follower,
    /// A follower kept down until the leader purged past it: it must install a snapshot.
    Lagging,
}

const POINTS: &[(&str, Victim)] = &[
    ("checkpoint::after_capture", Victim::Follower),
    ("checkpoint::after_log_sync", Victim::Follower),
    ("checkpoint::after_queue_sync", Victim::Follower),
    ("journal::append::after_write", Victim::Follower),
    ("checkpoint::after_journal", Victim::Follower),
    ("timer_wheel::after_write", Victim::Follower),
    ("checkpoint::after_timer_wheel", Victim::Follower),
    ("checkpoint::after_batch", Victim::Follower),
    ("checkpoint::after_flush", Victim::Follower),
    ("segment::create", Victim::Follower),
    ("log::roll::after_pad", Victim::Follower),
    ("log::roll::after_sync", Victim::Follower),
    ("log::roll::before_dir_sync", Victim::Follower),
    ("log::roll::after", Victim::Follower),
    ("snapshot::build::after_replay", Victim::Follower),
    ("snapshot::build::after_save", Victim::Follower),
    ("snapshot::forget::after_purge", Victim::Follower),
    ("log::purge::after_save", Victim::Follower),
    ("log::purge::after_delete", Victim::Follower),
    ("log::purge::after_index_remove", Victim::Follower),
    ("snapshot::install::after_save", Victim::Lagging),
    ("snapshot::install::after_queues", Victim::Lagging),
    ("snapshot::install::after_journal", Victim::Lagging),
    ("snapshot::install::after_batch", Victim::Lagging),
];

/// A follower of the first data group (which the snapshot-install points fill and purge).
async fn follower(cluster: &Cluster, rng: &mut Rng) -> u64 {
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    let holders = cluster.holders(rockraft::raft::GroupId::FIRST.0).await;
    let followers: Vec<u64> = holders.into_iter().filter(|&id| id != leader).collect();
    followers[rng.below(followers.len() as u64) as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crashes_at_every_crash_point_and_at_random_converge_without_losing_acknowledged_sends() {
    let seed: u64 = std::env::var("ROCKRAFT_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_cafe);
    let rounds: u64 = std::env::var("ROCKRAFT_CRASH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    eprintln!("crash points: seed {seed}, {rounds} round(s)");
    let mut rng = Rng(seed | 1);
    let options = Options {
        // Delivered delayed messages keep their entries for the retention time: a short one, so
        // purges (and the snapshots they take) still happen under the delayed sends.
        storage: "disk_budget_bytes = 3145728\nretention_check_secs = 0.3\nretention_hours = 0.001\n".into(),
        broker: "checkpoint_interval_ms = 50\n".into(),
        ..Default::default()
    };
    let mut cluster = Cluster::start(3, options).await;
    let queues = QUEUES.max(cluster.data_groups);
    cluster.create_topic(TOPIC, queues, TopicKind::Normal).await;
    // A queue of each in every data group: a node crashes at the points of whichever group
    // it holds (from five nodes, three of every five).
    cluster.create_topic(DELAY_TOPIC, cluster.data_groups.max(2), TopicKind::Delay).await;
    cluster.create_group(GROUP, false, 16).await;
    let config = cluster.topic_config(TOPIC).await;
    let mut w = Workload { queues, focus: Vec::new(), next_id: 0, acked: Acked::default(), delayed: 0, config };
    for round in 0..rounds {
        for &(point, victim) in POINTS {
            let what = format!("round {round}, {point}");
            let id = follower(&cluster, &mut rng).await;
            cluster.kill(id);
            if let Victim::Lagging = victim {
                // The leader's last index: at least as far as the stopped node got.
                let leader = cluster.status(cluster.wait_for_leader(Duration::from_secs(30)).await).await;
                let left_at = leader.and_then(|s| s.last_log_index).unwrap_or(0);
                wait_purged_past(&mut cluster, &mut w, &mut rng, left_at).await;
            }
            // Crash at a pass of the point a little way in, so the node has work under way.
            let skip = match victim {
                Victim::Follower if ["checkpoint", "journal", "timer_wheel"].iter().any(|p| point.starts_with(p)) => {
                    2 + rng.below(20)
                }
                _ => 0,
            };
            cluster.restart_with_crash_points(id, &format!("{point}={skip}*off->return(abort)"));
            w.focus = Vec::new();
            for q in 0..w.queues {
                if cluster.holds_queue(id, TOPIC, q).await {
                    w.focus.push(q);
                }
            }
            let crashed = w.run_until(&mut cluster, &mut rng, Duration::from_secs(60), |c| !c.is_running(id)).await;
            w.focus.clear();
            assert!(crashed, "{what}: node {id} never reached the crash point");
            let log = std::fs::read_to_string(cluster.nodes[id as usize - 1].dir.join("node.log")).unwrap_or_default();
            assert!(log.contains(&format!("crash point {point}: aborting")), "{what}: node {id} stopped elsewhere");
            cluster.restart(id);
            assert_converged(&mut cluster, &w, &what).await;
            eprintln!(
                "{what}: node {id} crashed there and converged ({} messages acknowledged so far)",
                w.acked.0.len()
            );
        }
        // Crashes at random moments: any node, the leader included, killed mid-workload.
        for k in 0..3 {
            let what = format!("round {round}, random kill {k}");
            let all = cluster.ids();
            let id = all[rng.below(all.len() as u64) as usize];
            let run_for = Duration::from_millis(200 + rng.below(1500));
            w.run_until(&mut cluster, &mut rng, run_for, |_| false).await;
            cluster.kill(id);
            let down_for = Duration::from_millis(500 + rng.below(1000));
            w.run_until(&mut cluster, &mut rng, down_for, |_| false).await;
            cluster.restart(id);
            assert_converged(&mut cluster, &w, &what).await;
            eprintln!("{what}: node {id} killed, restarted and converged");
        }
    }
    // A failed fsync (the disk lost written pages): the node stops itself instead of carrying on,
    // and once restarted it converges like after any crash.
    let id = follower(&cluster, &mut rng).await;
    cluster.kill(id);
    cluster.restart_with_crash_points(id, "segment::sync=5*off->return");
    let stopped = w.run_until(&mut cluster, &mut rng, Duration::from_secs(60), |c| !c.is_running(id)).await;
    assert!(stopped, "node {id} carried on after a failed fsync");
    cluster.restart(id);
    assert_converged(&mut cluster, &w, "after a failed fsync").await;
    eprintln!("a failed fsync stopped node {id}; restarted, it converged");
    assert!(w.acked.0.len() > 500, "the workload acknowledged only {} messages", w.acked.0.len());
    assert!(w.delayed > 100, "the workload set only {} timers", w.delayed);
}

/// Sends until the leader has purged its log past `left_at`: a node that stopped there can only
/// catch up by installing a snapshot. "The leader" is the first data group's: the sends go to
/// the queues that group holds, so that with several groups they all fill its log.
async fn wait_purged_past(cluster: &mut Cluster, w: &mut Workload, rng: &mut Rng, left_at: u64) {
    let mut first_group_queues = Vec::new();
    for q in 0..w.queues {
        if cluster.queue_group(TOPIC, q).await == rockraft::raft::GroupId::FIRST.0 {
            first_group_queues.push(q);
        }
    }
    assert!(!first_group_queues.is_empty(), "the first data group holds none of {TOPIC}'s queues");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
        if cluster.status(leader).await.and_then(|s| s.purged).is_some_and(|p| p > left_at) {
            return;
        }
        assert!(Instant::now() < deadline, "the leader never purged past {left_at}");
        for _ in 0..8 {
            let queue = first_group_queues[rng.below(first_group_queues.len() as u64) as usize];
            w.send_to(cluster, rng, 16, queue).await;
        }
    }
}
