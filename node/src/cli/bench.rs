//! `rockraft bench produce|consume`: load generators speaking the RocketMQ protocol to the proxy
//! endpoint, with a progress bar and a latency summary.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use tonic::service::interceptor::InterceptedService;

use crate::auth::signature::SignRequests;
use rockraft_proto::rocketmq::receive_message_response::Content;
use rockraft_proto::rocketmq::{
    AckMessageEntry, AckMessageRequest, Code, LiteSubscriptionAction, Message, MessageQueue, MessageType,
    QueryRouteRequest, ReceiveMessageRequest, Resource, SendMessageRequest, SyncLiteSubscriptionRequest,
    SystemProperties,
};
use tokio::sync::Mutex;

pub struct ProduceOptions {
    pub endpoints: Endpoints,
    pub topic: String,
    pub messages: u64,
    pub size: usize,
    pub concurrency: usize,
    pub batch: usize,
    /// Every message gets `bench_mark`: "1" on every Nth, "0" on the others.
    pub mark_every: Option<u64>,
    /// Lite messages to this many lite topics (see [`lite_topic`]).
    pub lite_topics: Option<u64>,
    /// Worker w sends to queue w mod N; each queue's longest time without an acknowledged send
    /// is reported.
    pub queue_gaps: Option<u32>,
    /// Worker w sends to queue w mod (the topic's queues), at the endpoint the topic's route
    /// names for it, as the official clients do.
    pub follow_routes: bool,
}

/// Per queue: when a send to it was last acknowledged, and the longest time between two.
#[derive(Default)]
struct QueueGap {
    last: Option<Instant>,
    longest: Duration,
}

/// The lite topic of message `i` among `n`: `i mod n` times Knuth's multiplier (a prime, so
/// coprime with any smaller `n`), mod `n`: consecutive sends go to scattered lite topics and `n`
/// sends reach all `n` of them.
pub fn lite_topic(i: u64, n: u64) -> String {
    format!("lite-{}", (i % n).wrapping_mul(2_654_435_761) % n)
}

/// Why a load run did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Before any load: an option, an endpoint, the progress display.
    #[error("{0}")]
    Setup(String),
    /// A worker task died.
    #[error("a load worker failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
    /// The broker refused a step the run needs (a lite subscription).
    #[error("{0}")]
    Refused(String),
    /// The run ended short of what was asked: messages failed, or were not delivered (in time).
    #[error("{0}")]
    Short(String),
}

pub(super) fn setup(e: impl std::fmt::Display) -> BenchError {
    BenchError::Setup(e.to_string())
}

pub async fn produce(o: ProduceOptions) -> Result<(), BenchError> {
    let clients = connect(&o.endpoints).await?;
    let routed = match o.follow_routes {
        true => Some(routed_clients(&o.endpoints, &clients[0], &o.topic).await?),
        false => None,
    };
    let body = Bytes::from(vec![b'r'; o.size]);
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Histogram::<u64>::new(3).map_err(setup)?));
    let queues = routed.as_ref().map_or(0, Vec::len).max(o.queue_gaps.unwrap_or(0) as usize);
    let gaps: Arc<std::sync::Mutex<Vec<QueueGap>>> =
        Arc::new(std::sync::Mutex::new((0..queues).map(|_| QueueGap::default()).collect()));
    let bar = ProgressBar::new(o.messages);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} messages {per_sec} eta {eta}").map_err(setup)?);
    let run = format!("{:x}", std::process::id());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..o.concurrency {
        // Each worker to one queue, at the endpoint its route names; or to one queue of
        // `--queue-gaps`; or the broker picks the queue.
        let (mut client, queue) = match (&routed, o.queue_gaps) {
            (Some(routed), _) => {
                let (queue, client) = &routed[worker % routed.len()];
                (client.clone(), Some(*queue))
            }
            (None, Some(n)) => (clients[worker % clients.len()].clone(), Some((worker % n as usize) as i32)),
            (None, None) => (clients[worker % clients.len()].clone(), None),
        };
        let (next, failed, latencies, bar, body, topic, run) =
            (next.clone(), failed.clone(), latencies.clone(), bar.clone(), body.clone(), o.topic.clone(), run.clone());
        let reporting = o.queue_gaps.is_some();
        let gaps = gaps.clone();
        let (total, batch, mark_every, lite_topics) = (o.messages, o.batch as u64, o.mark_every, o.lite_topics);
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(batch, Ordering::Relaxed);
                if first >= total {
                    return;
                }
                let n = batch.min(total - first);
                let messages = (first..first + n)
                    .map(|i| Message {
                        topic: Some(Resource { resource_namespace: String::new(), name: topic.clone() }),
                        user_properties: mark_every
                            .map(|n| {
                                [("bench_mark".to_string(), if i % n == 0 { "1" } else { "0" }.to_string())].into()
                            })
                            .unwrap_or_default(),
                        system_properties: Some(SystemProperties {
                            message_id: format!("bench-{run}-{i}"),
                            message_type: match lite_topics {
                                Some(_) => MessageType::Lite as i32,
                                None => MessageType::Normal as i32,
                            },
                            lite_topic: lite_topics.map(|n| lite_topic(i, n)),
                            // No queue of its own choosing unless asked: the broker spreads
                            // messages over the topic's queues (0 would name queue 0).
                            queue_id: queue.unwrap_or(-1),
                            ..Default::default()
                        }),
                        body: body.clone(),
                    })
                    .collect();
                let sent = Instant::now();
                let ok = match client.send_message(SendMessageRequest { messages }).await {
                    Ok(r) => r.into_inner().status.is_some_and(|s| s.code == Code::Ok as i32),
                    Err(_) => false,
                };
                if ok {
                    let _ = latencies.lock().await.record(sent.elapsed().as_micros() as u64);
                    if let Some(q) = queue.filter(|_| reporting) {
                        let now = Instant::now();
                        let mut gaps = gaps.lock().unwrap_or_else(|p| p.into_inner());
                        if let Some(gap) = gaps.get_mut(q as usize) {
                            let since = gap.last.map_or(Duration::ZERO, |last| now.saturating_duration_since(last));
                            gap.longest = gap.longest.max(since);
                            gap.last = Some(now);
                        }
                    }
                } else {
                    failed.fetch_add(n, Ordering::Relaxed);
                }
                bar.inc(n);
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    let failed = failed.load(Ordering::Relaxed);
    let ok = o.messages - failed;
    let h = latencies.lock().await;
    let ms = |us: u64| Duration::from_micros(us).as_secs_f64() * 1000.0;
    println!(
        "sent {ok} messages of {} B ({failed} failed) in {:.2} s: {:.0} messages/s, {:.1} MiB/s",
        o.size,
        elapsed.as_secs_f64(),
        ok as f64 / elapsed.as_secs_f64(),
        ok as f64 * o.size as f64 / (1 << 20) as f64 / elapsed.as_secs_f64()
    );
    println!(
        "send latency (per request of {} messages): p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        o.batch,
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.99)),
        ms(h.value_at_quantile(0.999)),
        ms(h.max())
    );
    let gaps = gaps.lock().unwrap_or_else(|p| p.into_inner());
    for (q, gap) in gaps.iter().enumerate().filter(|_| o.queue_gaps.is_some()) {
        println!("queue {q}: longest time without an acknowledged send {:.0} ms", gap.longest.as_secs_f64() * 1000.0);
    }
    if failed > 0 { Err(BenchError::Short(format!("{failed} messages failed"))) } else { Ok(()) }
}

pub struct ConsumeOptions {
    pub endpoints: Endpoints,
    /// The subscription's expression; `None` receives everything.
    pub filter: Option<rockraft_proto::rocketmq::FilterExpression>,
    pub topic: String,
    pub group: String,
    /// Stop after this many acks (or after `idle` without a message).
    pub messages: u64,
    pub concurrency: usize,
    pub batch: i32,
    pub idle: Duration,
    /// A lite receive: (lite topics, at most per client) each worker subscribes to first.
    pub lite: Option<(u64, u64)>,
}

/// Subscribes worker `worker` of `workers` (client `client_id`) to its share of `n` lite topics.
async fn subscribe_lite(
    client: &mut Client,
    o: &ConsumeOptions,
    client_id: &str,
    worker: usize,
    (n, per_client): (u64, u64),
) -> Result<usize, BenchError> {
    let lites: Vec<String> =
        (worker as u64..n).step_by(o.concurrency).take(per_client as usize).map(|j| format!("lite-{j}")).collect();
    let count = lites.len();
    let mut req = tonic::Request::new(SyncLiteSubscriptionRequest {
        action: LiteSubscriptionAction::CompleteAdd as i32,
        topic: resource(&o.topic),
        group: resource(&o.group),
        lite_topic_set: lites,
        version: None,
        offset_option: None,
    });
    if let Ok(v) = client_id.parse() {
        req.metadata_mut().insert("x-mq-client-id", v);
    }
    let refused = |why: String| BenchError::Refused(format!("subscribing to lite topics failed: {why}"));
    let status = client.sync_lite_subscription(req).await.map_err(|e| refused(e.to_string()))?.into_inner().status;
    match status {
        Some(s) if s.code == Code::Ok as i32 => Ok(count),
        other => Err(refused(format!("{other:?}"))),
    }
}

/// Receives and acks as fast as `--concurrency` long polls allow: each worker receives a batch,
/// acks it in one AckMessage, and receives again.
pub async fn consume(o: ConsumeOptions) -> Result<(), BenchError> {
    let clients = connect(&o.endpoints).await?;
    let acked = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Histogram::<u64>::new(3).map_err(setup)?));
    let bar = ProgressBar::new(o.messages);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} acked {per_sec} eta {eta}").map_err(setup)?);
    if let Some(lite) = o.lite {
        let begin = Instant::now();
        let mut subscribed = 0;
        for worker in 0..o.concurrency {
            let mut client = clients[worker % clients.len()].clone();
            let id = format!("bench-consume-{}-{worker}", std::process::id());
            subscribed += subscribe_lite(&mut client, &o, &id, worker, lite).await?;
        }
        println!(
            "{} clients subscribed to {subscribed} lite topics in {:.2} s",
            o.concurrency,
            begin.elapsed().as_secs_f64()
        );
    }
    let start = Instant::now();
    // When the last confirmed ack came, in µs from `start`: consumption time ends there, not
    // when the workers still in a long poll on an emptied topic give up.
    let last_ack_us = Arc::new(AtomicU64::new(0));
    let all_acked = Arc::new(tokio::sync::Notify::new());
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..o.concurrency {
        let mut client = clients[worker % clients.len()].clone();
        let (acked, failed, bytes, latencies, bar, last_ack_us, all_acked) = (
            acked.clone(),
            failed.clone(),
            bytes.clone(),
            latencies.clone(),
            bar.clone(),
            last_ack_us.clone(),
            all_acked.clone(),
        );
        let (group, topic, total, batch, idle) = (resource(&o.group), resource(&o.topic), o.messages, o.batch, o.idle);
        let filter = o.filter.clone();
        let client_id = format!("bench-consume-{}-{worker}", std::process::id());
        tasks.spawn(async move {
            let mut last_message = Instant::now();
            while acked.load(Ordering::Relaxed) < total && last_message.elapsed() < idle {
                let round = Instant::now();
                let mut req = tonic::Request::new(ReceiveMessageRequest {
                    group: group.clone(),
                    message_queue: Some(MessageQueue { topic: topic.clone(), ..Default::default() }),
                    filter_expression: filter.clone(),
                    batch_size: batch,
                    invisible_duration: Some(prost_types::Duration { seconds: 30, nanos: 0 }),
                    auto_renew: false,
                    long_polling_timeout: Some(prost_types::Duration { seconds: 5, nanos: 0 }),
                    attempt_id: None,
                });
                if let Ok(v) = client_id.parse() {
                    req.metadata_mut().insert("x-mq-client-id", v);
                }
                let mut entries = Vec::new();
                if let Ok(stream) = client.receive_message(req).await {
                    let mut stream = stream.into_inner();
                    while let Some(Ok(frame)) = stream.next().await {
                        if let Some(Content::Message(m)) = frame.content {
                            bytes.fetch_add(m.body.len() as u64, Ordering::Relaxed);
                            let sp = m.system_properties.unwrap_or_default();
                            entries.push(AckMessageEntry {
                                message_id: sp.message_id,
                                receipt_handle: sp.receipt_handle.unwrap_or_default(),
                                lite_topic: None,
                            });
                        }
                    }
                }
                if entries.is_empty() {
                    continue;
                }
                last_message = Instant::now();
                let n = entries.len() as u64;
                let ack = AckMessageRequest { group: group.clone(), topic: topic.clone(), entries };
                let ok = match client.ack_message(ack).await {
                    Ok(r) => r.into_inner().status.is_some_and(|s| s.code == Code::Ok as i32),
                    Err(_) => false,
                };
                if ok {
                    last_ack_us.fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
                    bar.inc(n);
                    let _ = latencies.lock().await.record(round.elapsed().as_micros() as u64);
                    if acked.fetch_add(n, Ordering::Relaxed) + n >= total {
                        all_acked.notify_one();
                    }
                } else {
                    failed.fetch_add(n, Ordering::Relaxed);
                }
            }
        });
    }
    tokio::select! {
        _ = all_acked.notified() => tasks.abort_all(),
        _ = async { while tasks.join_next().await.is_some() {} } => {}
    }
    while let Some(t) = tasks.join_next().await {
        if let Err(e) = t
            && !e.is_cancelled()
        {
            return Err(e.into());
        }
    }
    bar.finish_and_clear();
    let acked = acked.load(Ordering::Relaxed);
    // Neither the idle wait at the end nor long polls left waiting on an emptied topic are
    // consumption time.
    let elapsed = Duration::from_micros(last_ack_us.load(Ordering::Relaxed).max(1));
    let h = latencies.lock().await;
    let ms = |us: u64| Duration::from_micros(us).as_secs_f64() * 1000.0;
    println!(
        "received and acked {acked} messages ({} failed acks) in {:.2} s: {:.0} messages/s, {:.1} MiB/s",
        failed.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        acked as f64 / elapsed.as_secs_f64(),
        bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64 / elapsed.as_secs_f64()
    );
    println!(
        "receive + ack latency (per batch of up to {}): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        o.batch,
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.99)),
        ms(h.max())
    );
    if acked < o.messages {
        // An ack whose answer was lost (a leader change) may still have committed: `group list`
        // tells whether anything is left.
        Err(BenchError::Short(format!(
            "{acked} of {} messages acked with a confirmed answer; see `rockraft group list`",
            o.messages
        )))
    } else {
        Ok(())
    }
}

/// The topic's queues, each with a client of the endpoint its route names (asked of `first`),
/// in queue order: where the official clients send each queue's messages.
async fn routed_clients(endpoints: &Endpoints, first: &Client, topic: &str) -> Result<Vec<(i32, Client)>, BenchError> {
    let asked = QueryRouteRequest { topic: resource(topic), endpoints: None };
    let route = first.clone().query_route(asked).await.map_err(setup)?.into_inner();
    if route.status.as_ref().is_none_or(|s| s.code != Code::Ok as i32) {
        return Err(BenchError::Refused(format!("QueryRoute of {topic}: {:?}", route.status)));
    }
    let mut by_addr: std::collections::BTreeMap<String, Client> = std::collections::BTreeMap::new();
    let mut routed = Vec::new();
    for q in route.message_queues {
        let address = q.broker.and_then(|b| b.endpoints).and_then(|e| e.addresses.into_iter().next());
        let Some(a) = address else { return Err(setup(format!("queue {} has no endpoint in its route", q.id))) };
        let addr = format!("{}:{}", a.host, a.port);
        if !by_addr.contains_key(&addr) {
            let one =
                Endpoints { addrs: vec![addr.clone()], sign: endpoints.sign.clone(), tls_ca: endpoints.tls_ca.clone() };
            let client = connect(&one).await?.remove(0);
            by_addr.insert(addr.clone(), client);
        }
        routed.push((q.id, by_addr[&addr].clone()));
    }
    routed.sort_by_key(|(q, _)| *q);
    if routed.is_empty() {
        return Err(setup(format!("the route of {topic} has no queue")));
    }
    Ok(routed)
}

/// The client endpoints load goes to, and how to reach them: signed as the official clients
/// sign (a cluster with authentication on), over TLS (verified against `tls_ca`).
pub struct Endpoints {
    pub addrs: Vec<String>,
    pub sign: SignRequests,
    pub tls_ca: Option<std::path::PathBuf>,
}

pub(super) type Client = MessagingServiceClient<InterceptedService<tonic::transport::Channel, SignRequests>>;

/// One client per endpoint; workers take turns over them.
pub(super) async fn connect(endpoints: &Endpoints) -> Result<Vec<Client>, BenchError> {
    let mut clients = Vec::new();
    for e in &endpoints.addrs {
        let channel =
            crate::auth::tls::channel(e, endpoints.tls_ca.as_deref()).map_err(|e| BenchError::Setup(e.to_string()))?;
        let c = MessagingServiceClient::with_interceptor(channel, endpoints.sign.clone());
        clients.push(c.max_encoding_message_size(usize::MAX).max_decoding_message_size(usize::MAX));
    }
    Ok(clients)
}

pub(super) fn resource(name: &str) -> Option<Resource> {
    Some(Resource { resource_namespace: String::new(), name: name.to_string() })
}
