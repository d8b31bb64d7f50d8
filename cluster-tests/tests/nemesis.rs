//! Many faults, a recorded history, and a checker (`rockraft_cluster_tests::history`).
//!
//! Producers (normal sends to random queues, delayed messages, and FIFO message groups sent in
//! order) and POP consumers (acking most deliveries, letting some invisible times lapse, changing
//! others) work through random nodes, followers included, while a nemesis injects one fault at a
//! time, at random moments, so a majority is always up and able to talk:
//! - SIGKILL, SIGTERM and restart, of the leader or a follower;
//! - SIGSTOP for longer than an election timeout, then SIGCONT;
//! - network partitions, each node in a network namespace of its own (`network.rs`): the leader
//!   or a follower isolated, a bridge (two nodes cut apart, the third seeing both), and one-way
//!   loss (a node hears nobody, or nobody hears it);
//! - a clock jump forward or back on one node, while it runs;
//! - a disk that fails an fsync (the node fail-stops; it is restarted once it has);
//! - a torn tail: a node killed, a record cut short written past its log's end, restarted.
//!
//! Every operation is recorded with what its client saw: ok, failed, or unknown (no answer within
//! the client's deadline). Once the faults heal, the consumers drain the topics, every replica's
//! store is read, and the checker judges the history; a failure prints each operation that breaks
//! a rule. It also reports how soon sends were accepted again after each fault began and healed,
//! and how long sends through a cut-off node took to be answered.
//!
//! `ROCKRAFT_NEMESIS_NODES=5` runs five nodes, each data group on three of them (five data groups
//! unless `ROCKRAFT_TEST_DATA_GROUPS` says otherwise; each node's store is read for the queues
//! whose group it holds). `ROCKRAFT_NEMESIS_SECS` sets how long faults are injected (60 s unless given),
//! `ROCKRAFT_NEMESIS_SEED` the seed (the faults' order and timing follow it, the interleaving
//! with the clients does not), and `ROCKRAFT_NEMESIS_FAULTS` which kinds of fault, by name
//! (`kill,pause,terminate,isolate,bridge,deaf,mute,clock,fsync,torn`; all unless given). Partitions need root and network namespaces: where the kernel
//! refuses, the run says so and injects the other faults.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::history::{self, Ack, Delivery, History, Outcome, Rules, Send, Stored};
use rockraft_cluster_tests::{Cluster, Options, Rng};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::receive_message_response::Content;
use rockraft_proto::rocketmq::{
    AckMessageEntry, AckMessageRequest, ChangeInvisibleDurationRequest, Code, FilterExpression, FilterType, Message,
    MessageQueue, MessageType, ReceiveMessageRequest, Resource, SendMessageRequest, SystemProperties,
};
use tonic::transport::Channel;

const TOPIC: &str = "Ledger";
const FIFO_TOPIC: &str = "LedgerFifo";
const DELAY_TOPIC: &str = "LedgerDelayed";
const GROUP: &str = "auditors";
const FIFO_GROUP: &str = "fifo-auditors";
const QUEUES: u32 = 4;
const MAX_ATTEMPTS: u32 = 16;
/// How long a client waits for an answer before it counts the operation as unknown.
const DEADLINE: Duration = Duration::from_secs(3);
const PRODUCERS: usize = 3;
const FIFO_PRODUCERS: usize = 2;
const CONSUMERS: usize = 2;
/// The disk fault: the node's fourth fsync fails, and the node stops itself (fail-stop).
const SEGMENT_SYNC_FAILS: &str = "segment::sync=3*off->return";

fn resource(name: &str) -> Option<Resource> {
    Some(Resource { resource_namespace: String::new(), name: name.into() })
}

fn epoch_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// One send call: (node, start ms, end ms, answered before the deadline).
type Call = (u64, u64, u64, bool);

/// What every client shares: where the nodes are, the history, the test's clock, and when to stop.
#[derive(Clone)]
struct Shared {
    addrs: Arc<Vec<String>>,
    history: Arc<Mutex<History>>,
    started: Instant,
    stop_sending: Arc<AtomicBool>,
    stop_consuming: Arc<AtomicBool>,
    /// How often each status other than OK answered a send.
    refusals: Arc<Mutex<BTreeMap<i32, u64>>>,
    /// Every send as the node it went to saw it.
    calls: Arc<Mutex<Vec<Call>>>,
    /// Receives retried with their attempt id that delivered messages.
    retried_receives: Arc<std::sync::atomic::AtomicU64>,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The node `pick` chooses.
    fn node(&self, pick: u64) -> u64 {
        1 + pick % self.addrs.len() as u64
    }

    /// A client of some node: any of them, followers too.
    async fn client(&self, pick: u64) -> Option<MessagingServiceClient<Channel>> {
        let addr = &self.addrs[(self.node(pick) - 1) as usize];
        let connect = MessagingServiceClient::connect(format!("http://{addr}"));
        tokio::time::timeout(DEADLINE, connect).await.ok()?.ok()
    }
}

/// A send's outcome from its answer: refusals before anything was proposed are failures, any
/// other trouble leaves it unknown.
fn send_outcome(code: i32) -> Outcome {
    match code {
        c if c == Code::Ok as i32 => Outcome::Ok,
        c if (40000..40500).contains(&c) || c == Code::TooManyRequests as i32 => Outcome::Failed,
        _ => Outcome::Unknown,
    }
}

/// Sends one message; returns its outcome and offset.
async fn send_once(shared: &Shared, pick: u64, message: Message) -> (Outcome, Option<u64>) {
    let Some(mut client) = shared.client(pick).await else { return (Outcome::Failed, None) };
    let start_ms = shared.now_ms();
    // With its deadline in `grpc-timeout`, as the official clients send it: a node answers before it.
    let mut request = tonic::Request::new(SendMessageRequest { messages: vec![message] });
    request.set_timeout(DEADLINE);
    let sent = tokio::time::timeout(DEADLINE + Duration::from_millis(500), client.send_message(request)).await;
    let answered = matches!(sent, Ok(Ok(_)));
    shared.calls.lock().unwrap().push((shared.node(pick), start_ms, shared.now_ms(), answered));
    match sent {
        Ok(Ok(r)) => {
            let r = r.into_inner();
            let code = r.status.map_or(Code::Unspecified as i32, |s| s.code);
            let outcome = send_outcome(code);
            if outcome != Outcome::Ok {
                *shared.refusals.lock().unwrap().entry(code).or_default() += 1;
            }
            let offset = r.entries.first().filter(|_| outcome == Outcome::Ok).map(|e| e.offset as u64);
            (outcome, offset)
        }
        _ => (Outcome::Unknown, None),
    }
}

fn message(topic: &str, id: &str, queue: u32, group: Option<&str>, due_ms: Option<i64>) -> Message {
    let message_type = match (group, due_ms) {
        (Some(_), _) => MessageType::Fifo,
        (None, Some(_)) => MessageType::Delay,
        (None, None) => MessageType::Normal,
    };
    Message {
        topic: resource(topic),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: id.into(),
            message_type: message_type as i32,
            queue_id: queue as i32,
            message_group: group.map(str::to_string),
            delivery_timestamp: due_ms.map(|ms| prost_types::Timestamp {
                seconds: ms.div_euclid(1000),
                nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
            }),
            ..Default::default()
        }),
        body: Bytes::from(format!("body of {id}")),
    }
}

/// What one send carries besides its id and queue.
#[derive(Clone)]
enum Kind {
    Normal,
    /// Message group and sequence number in it.
    Fifo(String, u64),
    /// Due time, ms since the epoch.
    Delayed(i64),
}

/// Sends one message through some node and records the send with its outcome.
async fn send_recorded(shared: &Shared, pick: u64, process: usize, id: &str, queue: u32, kind: Kind) -> Outcome {
    let (topic, fifo, due_ms) = match &kind {
        Kind::Normal => (TOPIC, None, None),
        Kind::Fifo(group, seq) => (FIFO_TOPIC, Some((group.clone(), *seq)), None),
        Kind::Delayed(due) => (DELAY_TOPIC, None, Some(*due)),
    };
    let sent = message(topic, id, queue, fifo.as_ref().map(|(group, _)| group.as_str()), due_ms);
    let start_ms = shared.now_ms();
    let (outcome, offset) = send_once(shared, pick, sent).await;
    let end_ms = shared.now_ms();
    shared.history.lock().unwrap().sends.push(Send {
        process,
        message_id: id.into(),
        topic: topic.into(),
        queue,
        fifo,
        due_ms,
        outcome,
        offset,
        start_ms,
        end_ms,
    });
    outcome
}

/// Normal sends to random queues, and now and then a message delayed by up to 5 s; an unknown
/// outcome is retried with the same id after 50 ms, naming the next queue, as the Java and Rust
/// clients retry (with several data groups, often a queue of another group).
async fn producer(shared: Shared, process: usize, seed: u64) {
    let mut rng = Rng(seed | 1);
    let mut n = 0u64;
    while !shared.stop_sending.load(Ordering::Relaxed) {
        let id = format!("p{process}-{n}");
        n += 1;
        let (kind, first, queues) = match rng.below(10) {
            0 => (Kind::Delayed(epoch_ms() + 200 + rng.below(4_800) as i64), rng.below(2) as u32, 2),
            _ => (Kind::Normal, rng.below(QUEUES as u64) as u32, QUEUES),
        };
        for attempt in 0..3 {
            let queue = (first + attempt) % queues;
            match send_recorded(&shared, rng.next_u64(), process, &id, queue, kind.clone()).await {
                // A short pause, as clients back off: a cut-off node answers at once.
                Outcome::Unknown => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Outcome::Failed => tokio::time::sleep(Duration::from_millis(100)).await,
                Outcome::Ok => {}
            }
            break;
        }
    }
}

/// A send every 100 ms, each through the next node in turn, none waiting for the one before:
/// the closed-loop producers may all be waiting on a paused node (its kernel accepts what they
/// send; only their deadline frees them), so this shows when the nodes that are up accept sends.
async fn prober(shared: Shared, process: usize) {
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let mut n = 0u64;
    let mut sends = Vec::new();
    while !shared.stop_sending.load(Ordering::Relaxed) {
        ticks.tick().await;
        let shared = shared.clone();
        let id = format!("probe-{n}");
        sends.push(tokio::spawn(async move {
            send_recorded(&shared, n, process, &id, (n % QUEUES as u64) as u32, Kind::Normal).await
        }));
        n += 1;
        sends.retain(|s| !s.is_finished());
    }
    for s in sends {
        let _ = s.await;
    }
}

/// One message group, in order: the next message is sent only once the one before is stored.
async fn fifo_producer(shared: Shared, process: usize, seed: u64) {
    let mut rng = Rng(seed | 1);
    let group = format!("g{process}");
    let queue = process as u32 % 2;
    let mut seq = 0u64;
    while !shared.stop_sending.load(Ordering::Relaxed) {
        let id = format!("f{process}-{seq}");
        match send_recorded(&shared, rng.next_u64(), 100 + process, &id, queue, Kind::Fifo(group.clone(), seq)).await {
            // A steady trickle: one group is consumed a message at a time.
            Outcome::Ok => {
                seq += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Outcome::Failed => tokio::time::sleep(Duration::from_millis(100)).await,
            Outcome::Unknown => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Receives from `topic` as `group` through random nodes: acks most deliveries, lets some lapse
/// and changes the invisible time of others (to 1 s: they come back soon, as a retry).
async fn consumer(shared: Shared, process: usize, seed: u64, topic: &'static str, group: &'static str) {
    let mut rng = Rng(seed | 1);
    // Every receive has an attempt id; one that got no answer is retried with the same id (up to
    // twice), as the official push consumers do, and gets the same deliveries back.
    let (mut receives, mut retrying) = (0u64, None::<(String, u32)>);
    while !shared.stop_consuming.load(Ordering::Relaxed) {
        let Some(mut client) = shared.client(rng.next_u64()).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (attempt_id, retry) = match retrying.take() {
            Some((id, tries)) if tries < 3 => (id, tries),
            _ => {
                receives += 1;
                (format!("r{process}-{receives}"), 0)
            }
        };
        retrying = Some((attempt_id.clone(), retry + 1));
        let request = ReceiveMessageRequest {
            group: resource(group),
            message_queue: Some(MessageQueue { topic: resource(topic), ..Default::default() }),
            filter_expression: Some(FilterExpression { r#type: FilterType::Tag as i32, expression: "*".into() }),
            batch_size: 8,
            invisible_duration: Some(prost_types::Duration { seconds: 4, nanos: 0 }),
            auto_renew: false,
            long_polling_timeout: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
            attempt_id: Some(attempt_id),
        };
        let received = async {
            let mut got = Vec::new();
            let mut stream = client.receive_message(request).await.ok()?.into_inner();
            while let Some(frame) = stream.next().await {
                if let Some(Content::Message(m)) = frame.ok()?.content
                    && let Some(sp) = m.system_properties
                {
                    got.push(sp);
                }
            }
            Some(got)
        };
        let Ok(Some(received)) = tokio::time::timeout(DEADLINE + Duration::from_secs(1), received).await else {
            continue;
        };
        retrying = None;
        if retry > 0 && !received.is_empty() {
            shared.retried_receives.fetch_add(1, Ordering::Relaxed);
        }
        let at_ms = shared.now_ms();
        let at_epoch_ms = epoch_ms();
        let mut acks = Vec::new();
        for sp in received {
            shared.history.lock().unwrap().deliveries.push(Delivery {
                process,
                message_id: sp.message_id.clone(),
                topic: topic.into(),
                queue: sp.queue_id.max(0) as u32,
                offset: sp.queue_offset.unwrap_or(-1) as u64,
                attempt: sp.delivery_attempt.unwrap_or(1) as u32,
                at_ms,
                at_epoch_ms,
            });
            let Some(handle) = sp.receipt_handle else { continue };
            match rng.below(20) {
                0 => {} // lapses: delivered again after the invisible time
                1 => {
                    let change = ChangeInvisibleDurationRequest {
                        group: resource(group),
                        topic: resource(topic),
                        receipt_handle: handle,
                        invisible_duration: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
                        message_id: sp.message_id,
                        ..Default::default()
                    };
                    let _ = tokio::time::timeout(DEADLINE, client.change_invisible_duration(change)).await;
                }
                _ => acks.push(AckMessageEntry { message_id: sp.message_id, receipt_handle: handle, lite_topic: None }),
            }
        }
        if acks.is_empty() {
            continue;
        }
        let ids: Vec<String> = acks.iter().map(|a| a.message_id.clone()).collect();
        // An ack with no answer is sent again once, through some node: answered OK if the first
        // took effect.
        for attempt in 0..2 {
            if attempt > 0 {
                match shared.client(rng.next_u64()).await {
                    Some(other) => client = other,
                    None => break,
                }
            }
            let start_ms = shared.now_ms();
            let request = AckMessageRequest { group: resource(group), topic: resource(topic), entries: acks.clone() };
            let outcomes: Vec<Outcome> = match tokio::time::timeout(DEADLINE, client.ack_message(request)).await {
                Ok(Ok(r)) => {
                    let r = r.into_inner();
                    let by_id: BTreeMap<String, i32> = r
                        .entries
                        .into_iter()
                        .map(|e| (e.message_id, e.status.map_or(Code::Unspecified as i32, |s| s.code)))
                        .collect();
                    ids.iter().map(|id| by_id.get(id).map_or(Outcome::Unknown, |&c| send_outcome(c))).collect()
                }
                _ => vec![Outcome::Unknown; ids.len()],
            };
            let end_ms = shared.now_ms();
            let answered = outcomes.iter().any(|o| *o != Outcome::Unknown);
            let mut history = shared.history.lock().unwrap();
            for (message_id, outcome) in ids.iter().cloned().zip(outcomes) {
                history.acks.push(Ack { process, message_id, outcome, start_ms, end_ms });
            }
            if answered {
                break;
            }
        }
    }
}

/// One fault, as the nemesis injected it.
#[derive(Debug)]
struct Fault {
    kind: Nemesis,
    /// Whether it hit the node that led when it began.
    on_leader: bool,
    what: String,
    /// When it began and when it healed (ms on the test's clock).
    began_ms: u64,
    healed_ms: u64,
    /// The node cut off from the others by a partition, if any.
    cut_off: Option<u64>,
    /// How long after the heal the node it hit had applied what the leader had committed at
    /// the heal (`None`: not within 30 s).
    caught_up_ms: Option<u64>,
}

async fn leader(cluster: &Cluster) -> u64 {
    cluster.wait_for_leader(Duration::from_secs(30)).await
}

/// How long node `id` takes to apply what the leader of data group `group` has committed now.
async fn catch_up_time(cluster: &Cluster, id: u64, group: u32) -> Option<u64> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    let target = loop {
        let leader = cluster.wait_for_leader_of(Some(group), Duration::from_secs(30)).await;
        if let Some(committed) = cluster.status_of(leader, Some(group)).await.and_then(|s| s.committed) {
            break committed;
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    while Instant::now() < deadline {
        if cluster.status_of(id, Some(group)).await.and_then(|s| s.applied).is_some_and(|a| a >= target) {
            return Some(started.elapsed().as_millis() as u64);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[derive(Clone, Copy, Debug)]
enum Nemesis {
    Kill,
    Pause,
    Terminate,
    Isolate,
    Bridge,
    DeafNode,
    MuteNode,
    ClockJump,
    FailedFsync,
    TornTail,
}

impl Nemesis {
    const ALL: [Nemesis; 10] = [
        Nemesis::Kill,
        Nemesis::Pause,
        Nemesis::Terminate,
        Nemesis::Isolate,
        Nemesis::Bridge,
        Nemesis::DeafNode,
        Nemesis::MuteNode,
        Nemesis::ClockJump,
        Nemesis::FailedFsync,
        Nemesis::TornTail,
    ];

    /// The name `ROCKRAFT_NEMESIS_FAULTS` picks it by.
    fn name(self) -> &'static str {
        match self {
            Nemesis::Kill => "kill",
            Nemesis::Pause => "pause",
            Nemesis::Terminate => "terminate",
            Nemesis::Isolate => "isolate",
            Nemesis::Bridge => "bridge",
            Nemesis::DeafNode => "deaf",
            Nemesis::MuteNode => "mute",
            Nemesis::ClockJump => "clock",
            Nemesis::FailedFsync => "fsync",
            Nemesis::TornTail => "torn",
        }
    }

    fn needs_network(self) -> bool {
        matches!(self, Nemesis::Isolate | Nemesis::Bridge | Nemesis::DeafNode | Nemesis::MuteNode)
    }
}

/// Injects one fault on one node (the leader half the time), waits, heals it. `held`: the data
/// groups each node holds.
async fn inject(cluster: &mut Cluster, rng: &mut Rng, shared: &Shared, held: &Held) -> Fault {
    let nodes = held.len() as u64;
    let chosen = std::env::var("ROCKRAFT_NEMESIS_FAULTS").unwrap_or_default();
    let kinds: Vec<Nemesis> = Nemesis::ALL
        .into_iter()
        .filter(|k| cluster.network.is_some() || !k.needs_network())
        .filter(|k| chosen.is_empty() || chosen.split(',').any(|c| c.trim() == k.name()))
        .collect();
    assert!(!kinds.is_empty(), "ROCKRAFT_NEMESIS_FAULTS={chosen} names no fault this machine can inject");
    let kind = kinds[rng.below(kinds.len() as u64) as usize];
    let leader_now = leader(cluster).await;
    let victim = match rng.below(2) {
        0 => leader_now,
        _ => 1 + rng.below(nodes),
    };
    let other = (1..=nodes).find(|&n| n != victim).expect("three nodes or more");
    let hold = rng.millis(600, 3_000);
    let began_ms = shared.now_ms();
    let mut cut_off = None;
    let what = match kind {
        Nemesis::Kill => {
            cluster.kill(victim);
            tokio::time::sleep(hold).await;
            cluster.restart(victim);
            format!("SIGKILL node {victim}, restarted after {hold:?}")
        }
        Nemesis::Pause => {
            // Longer than an election timeout: the others elect a leader meanwhile.
            let hold = hold + Duration::from_millis(1_500);
            cluster.pause(victim);
            tokio::time::sleep(hold).await;
            cluster.resume(victim);
            format!("SIGSTOP node {victim} for {hold:?}")
        }
        Nemesis::Terminate => {
            cluster.stop(victim);
            tokio::time::sleep(hold).await;
            cluster.restart(victim);
            format!("SIGTERM node {victim}, restarted after {hold:?}")
        }
        Nemesis::Isolate | Nemesis::Bridge | Nemesis::DeafNode | Nemesis::MuteNode => {
            // Longer than an election timeout, like a pause.
            let hold = hold + Duration::from_millis(1_500);
            let net = cluster.network.as_ref().expect("network");
            let others = (1..=nodes).filter(|&n| n != victim);
            let what = match kind {
                Nemesis::Isolate => {
                    net.isolate(victim);
                    format!("node {victim} isolated")
                }
                // The two cut apart are the victim and another; the rest see both.
                Nemesis::Bridge => {
                    net.cut(victim, other);
                    format!("nodes {victim} and {other} cut apart (the third a bridge)")
                }
                Nemesis::DeafNode => {
                    others.for_each(|n| net.drop_from(n, victim));
                    format!("node {victim} heard nobody")
                }
                _ => {
                    others.for_each(|n| net.drop_from(victim, n));
                    format!("nobody heard node {victim}")
                }
            };
            // A bridge leaves each of the two talking to the third: neither is cut off.
            cut_off = (!matches!(kind, Nemesis::Bridge)).then_some(victim);
            tokio::time::sleep(hold).await;
            net.heal();
            format!("{what} for {hold:?}")
        }
        Nemesis::ClockJump => {
            let step_ms = (2_000 + rng.below(28_000) as i64) * if rng.below(2) == 0 { 1 } else { -1 };
            cluster.set_clock_offset(victim, step_ms);
            tokio::time::sleep(hold + Duration::from_millis(1_500)).await;
            cluster.set_clock_offset(victim, 0);
            format!("node {victim}'s clock jumped {step_ms} ms for {hold:?}, then back")
        }
        Nemesis::FailedFsync => {
            cluster.kill(victim);
            cluster.restart_with_crash_points(victim, SEGMENT_SYNC_FAILS);
            let deadline = Instant::now() + Duration::from_secs(20);
            while cluster.is_running(victim) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let stopped = !cluster.is_running(victim);
            cluster.kill(victim);
            cluster.restart(victim);
            match stopped {
                true => format!("node {victim}'s disk failed an fsync; it stopped itself and was restarted"),
                false => format!("node {victim}'s disk was to fail an fsync, but it wrote too little in 20 s"),
            }
        }
        Nemesis::TornTail => {
            cluster.kill(victim);
            let torn = cluster.tear_log_tail(victim);
            tokio::time::sleep(hold).await;
            cluster.restart(victim);
            format!("SIGKILL node {victim}, a torn record past its log's end at {torn:?}, restarted after {hold:?}")
        }
    };
    let healed_ms = shared.now_ms();
    let group = held[&victim].iter().next().copied().expect("every node holds a data group");
    let caught_up_ms = catch_up_time(cluster, victim, group).await;
    Fault { kind, on_leader: victim == leader_now, what, began_ms, healed_ms, cut_off, caught_up_ms }
}

/// The data groups each node holds, by node.
type Held = BTreeMap<u64, BTreeSet<u32>>;

async fn held(cluster: &Cluster, nodes: u64) -> Held {
    let mut held: Held = (1..=nodes).map(|id| (id, BTreeSet::new())).collect();
    for group in 1..=cluster.data_groups {
        for id in cluster.holders(group).await {
            held.entry(id).or_default().insert(group);
        }
    }
    held
}

/// Every message id node `id` stores in the three topics, in the queues whose group it holds.
async fn stored(cluster: &Cluster, id: u64, held: &Held) -> Stored {
    let mut out = Stored::new();
    for (topic, queues) in [(TOPIC, QUEUES), (FIFO_TOPIC, 2), (DELAY_TOPIC, 2)] {
        for q in 0..queues {
            if !held[&id].contains(&cluster.queue_group(topic, q).await) {
                continue;
            }
            let lines = cluster.local_messages(id, topic, q).await;
            out.insert((topic.to_string(), q), lines.into_iter().map(|m| (m.offset, m.message_id)).collect());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_faults_no_acknowledged_message_is_lost_and_every_rule_holds() {
    let seed: u64 = std::env::var("ROCKRAFT_NEMESIS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0xfa17_5eed);
    let secs: u64 = std::env::var("ROCKRAFT_NEMESIS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    eprintln!("nemesis: seed {seed}, {secs} s of faults");
    let mut rng = Rng(seed | 1);
    let nodes: u64 = std::env::var("ROCKRAFT_NEMESIS_NODES").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    // From five nodes, a data group per node unless the environment names a number.
    let data_groups = (nodes >= 5 && std::env::var("ROCKRAFT_TEST_DATA_GROUPS").is_err()).then_some(nodes as u32);
    let options = Options { network: true, data_groups, ..Options::default() };
    let mut cluster = Cluster::start(nodes, options).await;
    cluster.create_topic(TOPIC, QUEUES, TopicKind::Normal).await;
    cluster.create_topic(DELAY_TOPIC, 2, TopicKind::Delay).await;
    cluster.create_topic(FIFO_TOPIC, 2, TopicKind::Fifo).await;
    cluster.create_group(GROUP, false, MAX_ATTEMPTS).await;
    cluster.create_group(FIFO_GROUP, true, MAX_ATTEMPTS).await;
    let held = held(&cluster, nodes).await;
    let shared = Shared {
        addrs: Arc::new((1..=nodes).map(|id| cluster.client_addr(id)).collect()),
        history: Arc::default(),
        started: Instant::now(),
        stop_sending: Arc::default(),
        stop_consuming: Arc::default(),
        refusals: Arc::default(),
        calls: Arc::default(),
        retried_receives: Arc::default(),
    };
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        tasks.push(tokio::spawn(producer(shared.clone(), p, rng.next_u64())));
    }
    tasks.push(tokio::spawn(prober(shared.clone(), 200)));
    for p in 0..FIFO_PRODUCERS {
        tasks.push(tokio::spawn(fifo_producer(shared.clone(), p, rng.next_u64())));
    }
    for c in 0..CONSUMERS {
        tasks.push(tokio::spawn(consumer(shared.clone(), c, rng.next_u64(), TOPIC, GROUP)));
    }
    tasks.push(tokio::spawn(consumer(shared.clone(), 50, rng.next_u64(), FIFO_TOPIC, FIFO_GROUP)));
    tasks.push(tokio::spawn(consumer(shared.clone(), 60, rng.next_u64(), DELAY_TOPIC, GROUP)));

    let mut faults = Vec::new();
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        tokio::time::sleep(rng.millis(300, 2_000)).await;
        let fault = inject(&mut cluster, &mut rng, &shared, &held).await;
        eprintln!("nemesis: {} (healed at {} ms)", fault.what, fault.healed_ms);
        faults.push(fault);
    }
    // Healed: every node up. Sends go on a little, then stop; the consumers drain.
    for id in 1..=nodes {
        if !cluster.is_running(id) {
            cluster.restart(id);
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    shared.stop_sending.store(true, Ordering::Relaxed);
    // The last delayed messages come due (5 s at most) before the drain counts what is stored.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut stored_ids = BTreeSet::new();
    for id in 1..=nodes {
        cluster.wait_caught_up(id, Duration::from_secs(60)).await;
        stored_ids.extend(stored(&cluster, id, &held).await.into_values().flat_map(|m| m.into_values()));
    }
    // Drained once everything stored was delivered; stuck once 30 s pass with no progress (a long
    // run's FIFO backlog takes a while, a stuck group never moves).
    let (mut least_waiting, mut progress_at) = (usize::MAX, Instant::now());
    loop {
        let delivered: BTreeSet<String> =
            shared.history.lock().unwrap().deliveries.iter().map(|d| d.message_id.clone()).collect();
        let waiting = stored_ids.difference(&delivered).count();
        if waiting < least_waiting {
            (least_waiting, progress_at) = (waiting, Instant::now());
        }
        if waiting == 0 || progress_at.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    shared.stop_consuming.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }

    let mut stores = BTreeMap::new();
    for id in 1..=nodes {
        cluster.wait_caught_up(id, Duration::from_secs(60)).await;
        stores.insert(id, stored(&cluster, id, &held).await);
    }
    // Each group's digest on each node holding it (the metadata group on every node).
    let mut digests = BTreeMap::new();
    for group in 0..=cluster.data_groups {
        let mut d = Vec::new();
        for id in (1..=nodes).filter(|id| group == 0 || held[id].contains(&group)) {
            let req = rockraft_proto::rockraft::GetDigestRequest { group };
            d.push(cluster.call(&cluster.admin_addr(id), req).await.ok().map(|d| (d.applied, d.digest)));
        }
        digests.insert(group, d);
    }
    let history = shared.history.lock().unwrap().clone();
    let rules = Rules {
        max_attempts: MAX_ATTEMPTS,
        drained: [TOPIC, FIFO_TOPIC, DELAY_TOPIC].into_iter().map(str::to_string).collect(),
    };
    let anomalies = history::check(&history, &stores, &rules);

    // Liveness: how soon a send was accepted once each fault began (a failover's cost) and once
    // it healed, and how long a node cut off by a partition took to answer a send.
    let first_ok_after = |t: u64| {
        history.sends.iter().filter(|s| s.outcome == Outcome::Ok && s.start_ms >= t).map(|s| s.end_ms - t).min()
    };
    // The longest stretch, from a fault's start until 2 s after it healed (or the next fault
    // began), in which no send was accepted (by the time each accepted send was answered).
    let mut accepted: Vec<u64> = history.sends.iter().filter(|s| s.outcome == Outcome::Ok).map(|s| s.end_ms).collect();
    accepted.sort_unstable();
    let next_began: BTreeMap<u64, u64> = faults.windows(2).map(|w| (w[0].began_ms, w[1].began_ms)).collect();
    let longest_outage = |f: &Fault| {
        let until = (f.healed_ms + 2_000).min(next_began.get(&f.began_ms).copied().unwrap_or(u64::MAX));
        let within = accepted.iter().copied().filter(|&t| t > f.began_ms && t <= until);
        let (mut last, mut longest) = (f.began_ms, 0);
        for t in within.chain(std::iter::once(until)) {
            longest = longest.max(t - last);
            last = t;
        }
        longest
    };
    let mut after_begin: Vec<(u64, &str)> = faults.iter().map(|f| (longest_outage(f), f.what.as_str())).collect();
    for f in &faults {
        eprintln!("nemesis: {} ms without an accepted send during: {}", longest_outage(f), f.what);
    }
    // Per kind of fault, and apart for the faults that hit the leader (a failover).
    let summary = |v: &mut Vec<u64>| {
        v.sort_unstable();
        let at = |q: usize| v.get((v.len() * q / 100).min(v.len().saturating_sub(1))).copied().unwrap_or(0);
        let over = v.iter().filter(|&&t| t > 1_500).count();
        format!("n {}, median {} ms, p90 {} ms, max {} ms, {} over 1.5 s", v.len(), at(50), at(90), at(100), over)
    };
    for kind in Nemesis::ALL {
        for on_leader in [true, false] {
            let mut v: Vec<u64> = faults
                .iter()
                .filter(|f| f.kind.name() == kind.name() && f.on_leader == on_leader)
                .map(&longest_outage)
                .collect();
            if !v.is_empty() {
                let whom = if on_leader { "the leader" } else { "a follower" };
                eprintln!("nemesis: without an accepted send, {} on {whom}: {}", kind.name(), summary(&mut v));
            }
        }
    }
    let mut after_heal: Vec<(u64, &str)> =
        faults.iter().filter_map(|f| Some((first_ok_after(f.healed_ms)?, f.what.as_str()))).collect();
    after_begin.sort_unstable();
    after_heal.sort_unstable();
    let calls = shared.calls.lock().unwrap().clone();
    let cut_off_calls: Vec<(u64, bool, u64, &str, bool)> = faults
        .iter()
        .filter_map(|f| Some((f, f.cut_off?)))
        .flat_map(|(f, node)| {
            calls
                .iter()
                .filter(move |c| c.0 == node && c.1 >= f.began_ms && c.2 <= f.healed_ms)
                .map(|c| (c.2 - c.1, c.3, c.1 - f.began_ms, f.what.as_str(), f.on_leader))
        })
        .collect();
    let mut slowest = cut_off_calls.clone();
    slowest.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    for (took, answered, after, what, on_leader) in slowest.iter().take(5) {
        eprintln!(
            "nemesis: a send through the cut-off node {after} ms into \"{what}\" (it led: {on_leader}) took {took} ms \
             (answered: {answered})"
        );
    }
    let count = |o: Outcome| history.sends.iter().filter(|s| s.outcome == o).count();
    let median = |v: &[(u64, &str)]| v.get(v.len() / 2).map(|x| x.0);
    eprintln!(
        "nemesis: {} faults; sends ok {} / failed {} / unknown {}; {} deliveries, {} acks",
        faults.len(),
        count(Outcome::Ok),
        count(Outcome::Failed),
        count(Outcome::Unknown),
        history.deliveries.len(),
        history.acks.len(),
    );
    eprintln!(
        "nemesis: longest stretch without an accepted send, per fault: median {:?} ms, max {:?}; first accepted \
         send after a heal: median {:?} ms, max {:?}",
        median(&after_begin),
        after_begin.last(),
        median(&after_heal),
        after_heal.last(),
    );
    eprintln!(
        "nemesis: {} sends through a cut-off node: {} unanswered within {DEADLINE:?}, slowest answer {:?} ms",
        cut_off_calls.len(),
        cut_off_calls.iter().filter(|c| !c.1).count(),
        cut_off_calls.iter().filter(|c| c.1).map(|c| c.0).max(),
    );
    let mut catch_up: Vec<u64> = faults.iter().filter_map(|f| f.caught_up_ms).collect();
    catch_up.sort_unstable();
    eprintln!(
        "nemesis: the node a fault hit had caught up after the heal in: median {:?} ms, max {:?} ms; {} not \
         within 30 s",
        catch_up.get(catch_up.len() / 2),
        catch_up.last(),
        faults.len() - catch_up.len(),
    );
    eprintln!(
        "nemesis: {} receives retried with their attempt id delivered messages",
        shared.retried_receives.load(Ordering::Relaxed)
    );
    eprintln!("nemesis: sends answered other than OK, by status: {:?}", shared.refusals.lock().unwrap());
    for a in &anomalies {
        eprintln!("anomaly: {a}");
    }
    if !anomalies.is_empty() {
        let path = std::env::temp_dir().join(format!("rockraft-nemesis-{seed}.history"));
        let text = format!("{faults:#?}\n{history:#?}\n");
        if std::fs::write(&path, text).is_ok() {
            eprintln!("nemesis: the history is in {}", path.display());
        }
    }
    assert!(anomalies.is_empty(), "{} anomalies (seed {seed}); see above", anomalies.len());
    for (group, d) in &digests {
        let applied: BTreeSet<_> = d.iter().map(|d| d.map(|d| d.0)).collect();
        if applied.len() == 1 {
            assert!(d.windows(2).all(|w| w[0] == w[1]), "group {group}'s replicas at the same index differ: {d:?}");
        }
    }
    assert!(count(Outcome::Ok) > 200, "the workload acknowledged only {} sends", count(Outcome::Ok));
    assert!(faults.len() >= 5, "only {} faults were injected", faults.len());
}
