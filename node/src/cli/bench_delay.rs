//! `rockraft bench delay`: delayed-message delivery on a DELAY topic, measured from the client.
//!
//! * `spread`: timers due uniformly over `--over-secs`, starting 5 s after the start, while
//!   `--concurrency` long polls receive and ack them: lateness (receive time − due time).
//! * `burst`: every timer due in the same instant T = start + `--lead-secs`: how long after T the
//!   last one arrives, and the lateness.
//! * `pending`: send throughput with `--pending` timers waiting far ahead.
//!
//! Each message carries its run, sequence number and due time as user properties, so a receiver
//! computes its lateness from the message itself; sender and receivers read the same clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use hdrhistogram::Histogram;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use rockraft_proto::rocketmq::receive_message_response::Content;
use rockraft_proto::rocketmq::{
    AckMessageEntry, AckMessageRequest, Code, Message, MessageQueue, MessageType, ReceiveMessageRequest,
    SendMessageRequest, SystemProperties,
};
use tokio::sync::watch;

use super::bench::{BenchError, Client, connect, resource, setup};

/// User properties every bench message carries.
const RUN: &str = "bench-run";
const SEQ: &str = "bench-seq";
const DUE: &str = "bench-due-ms";
/// In `spread`, the first timer is due this long after the start.
const SPREAD_START: Duration = Duration::from_secs(5);
/// In `pending`, the far-ahead timers are spread over this window after `--pending-due-secs`.
const PENDING_WINDOW_MS: u64 = 60_000;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DelayMode {
    /// Timers due uniformly over `--over-secs`, received and acked as they fall due.
    Spread,
    /// All timers due in the same instant, `--lead-secs` after the start.
    Burst,
    /// Send throughput with `--pending` timers waiting far ahead.
    Pending,
}

#[derive(clap::Args)]
pub struct DelayArgs {
    /// A topic created with `--type delay`.
    #[arg(long)]
    pub topic: String,
    /// An existing consumer group (spread and burst).
    #[arg(long)]
    pub group: Option<String>,
    #[arg(long, value_enum, default_value_t = DelayMode::Spread)]
    pub mode: DelayMode,
    /// Delayed messages measured [default: 10000 in spread, 100000 in burst and pending].
    #[arg(long)]
    pub messages: Option<u64>,
    /// Body size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Receivers (spread, burst) [default: 16], or sends in flight in pending's measured phase
    /// [default: 64].
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Sends in flight while setting timers (spread, burst, and pending's fill).
    #[arg(long, default_value_t = 32)]
    pub send_concurrency: usize,
    /// Messages per SendMessage while setting timers (spread, burst, and pending's fill).
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Messages per SendMessage in pending's measured phase.
    #[arg(long, default_value_t = 1)]
    pub measure_batch: usize,
    /// spread: the due times cover this many seconds.
    #[arg(long, default_value_t = 60)]
    pub over_secs: u64,
    /// spread, burst: give up this long after the last due time without a new message.
    #[arg(long, default_value_t = 30)]
    pub idle_secs: u64,
    /// burst: the timers fall due this long after the start; sending them must take less.
    #[arg(long, default_value_t = 30)]
    pub lead_secs: u64,
    /// pending: timers set first, due far ahead.
    #[arg(long, default_value_t = 1_000_000)]
    pub pending: u64,
    /// pending: every timer is due this far ahead (spread over the minute after it).
    #[arg(long, default_value_t = 3600)]
    pub pending_due_secs: u64,
    /// Client endpoints to spread the load over (comma-separated).
    #[arg(long)]
    pub endpoints: Option<String>,
}

pub async fn run(a: DelayArgs, endpoints: super::bench::Endpoints) -> Result<(), BenchError> {
    if a.mode != DelayMode::Pending && a.group.is_none() {
        return Err(setup("--group is required with --mode spread and burst"));
    }
    let clients = connect(&endpoints).await?;
    let run = format!("{:x}-{:x}", std::process::id(), now_ms());
    let timers =
        Arc::new(Timers { topic: a.topic.clone(), run: run.clone(), body: Bytes::from(vec![b'd'; a.size.max(1)]) });
    match a.mode {
        DelayMode::Spread | DelayMode::Burst => lateness(&a, clients, timers).await,
        DelayMode::Pending => pending(&a, clients, timers).await,
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn style(bar: &ProgressBar, template: &str) -> Result<(), BenchError> {
    bar.set_style(ProgressStyle::with_template(template).map_err(setup)?);
    Ok(())
}

/// The command as typed, with the binary's path shortened to `rockraft`, for the summary row.
fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("rockraft {}", args.join(" "))
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// What every timer of one run shares.
struct Timers {
    topic: String,
    run: String,
    body: Bytes,
}

impl Timers {
    fn message(&self, label: &str, seq: u64, due_ms: i64) -> Message {
        let user_properties = HashMap::from([
            (RUN.to_string(), self.run.clone()),
            (SEQ.to_string(), seq.to_string()),
            (DUE.to_string(), due_ms.to_string()),
        ]);
        Message {
            topic: resource(&self.topic),
            user_properties,
            system_properties: Some(SystemProperties {
                message_id: format!("delay-{}-{label}{seq}", self.run),
                message_type: MessageType::Delay as i32,
                born_timestamp: Some(timestamp(now_ms())),
                delivery_timestamp: Some(timestamp(due_ms)),
                ..Default::default()
            }),
            body: self.body.clone(),
        }
    }
}

fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: ms.div_euclid(1000), nanos: (ms.rem_euclid(1000) * 1_000_000) as i32 }
}

struct SendStats {
    ok: u64,
    failed: u64,
    /// Messages whose send was answered only after they were due.
    after_due: u64,
    /// Per request, in microseconds.
    latencies: Histogram<u64>,
    elapsed: Duration,
    first_error: Option<String>,
}

/// When timer `seq` is due (wall-clock ms).
type Due = Arc<dyn Fn(u64) -> i64 + Send + Sync>;

/// One round of timer sends.
struct SendJob {
    /// Goes into the message ids, to tell the rounds of one run apart.
    label: &'static str,
    total: u64,
    concurrency: usize,
    batch: usize,
    due: Due,
}

/// Sends timers `0..total` (`due(seq)` each), `batch` per request, `concurrency` requests in
/// flight over the clients in turn.
async fn send_timers(
    clients: Vec<Client>,
    timers: Arc<Timers>,
    job: SendJob,
    bar: ProgressBar,
) -> Result<SendStats, BenchError> {
    let SendJob { label, total, concurrency, batch, due } = job;
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let after_due = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Histogram::<u64>::new(3).map_err(setup)?));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..concurrency.max(1) {
        let mut client = clients[worker % clients.len()].clone();
        let (next, failed, after_due, latencies, first_error, timers, due, bar) = (
            next.clone(),
            failed.clone(),
            after_due.clone(),
            latencies.clone(),
            first_error.clone(),
            timers.clone(),
            due.clone(),
            bar.clone(),
        );
        let batch = batch.max(1) as u64;
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(batch, Ordering::Relaxed);
                if first >= total {
                    return;
                }
                let n = batch.min(total - first);
                let dues: Vec<i64> = (first..first + n).map(|i| due(i)).collect();
                let messages = (first..first + n).zip(&dues).map(|(i, d)| timers.message(label, i, *d)).collect();
                let sent = Instant::now();
                let error = match client.send_message(SendMessageRequest { messages }).await {
                    Ok(r) => match r.into_inner().status {
                        Some(s) if s.code == Code::Ok as i32 => None,
                        Some(s) => {
                            Some(format!("{}: {}", Code::try_from(s.code).map_or("?", |c| c.as_str_name()), s.message))
                        }
                        None => Some("an answer without a status".to_string()),
                    },
                    Err(e) => Some(e.message().to_string()),
                };
                match error {
                    None => {
                        let answered = now_ms();
                        after_due.fetch_add(dues.iter().filter(|d| **d <= answered).count() as u64, Ordering::Relaxed);
                        let _ = latencies.lock().expect("not poisoned").record(sent.elapsed().as_micros() as u64);
                    }
                    Some(e) => {
                        failed.fetch_add(n, Ordering::Relaxed);
                        first_error.lock().expect("not poisoned").get_or_insert(e);
                    }
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
    let latencies = std::mem::replace(&mut *latencies.lock().expect("not poisoned"), Histogram::new(3).expect("3"));
    let first_error = first_error.lock().expect("not poisoned").take();
    Ok(SendStats {
        ok: total - failed,
        failed,
        after_due: after_due.load(Ordering::Relaxed),
        latencies,
        elapsed,
        first_error,
    })
}

/// What the receivers have seen.
struct Received {
    run: String,
    /// Per sequence number: delivered at least once.
    seen: Vec<AtomicBool>,
    unique: AtomicU64,
    duplicates: AtomicU64,
    early: AtomicU64,
    /// The largest amount (ms) by which a message came before its due time.
    most_early_ms: AtomicI64,
    /// Messages of other runs (or without bench properties), acked and otherwise ignored.
    foreign: AtomicU64,
    failed_acks: AtomicU64,
    /// Wall-clock ms of the latest first delivery.
    last_ms: AtomicI64,
    /// Lateness (ms) of each first delivery; early ones count as 0.
    lateness: Mutex<Histogram<u64>>,
    bar: ProgressBar,
}

impl Received {
    fn note(&self, m: &Message, at_ms: i64) {
        let p = &m.user_properties;
        if p.get(RUN) != Some(&self.run) {
            self.foreign.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let seq = p.get(SEQ).and_then(|s| s.parse::<usize>().ok()).filter(|s| *s < self.seen.len());
        let (Some(seq), Some(due)) = (seq, p.get(DUE).and_then(|s| s.parse::<i64>().ok())) else {
            self.foreign.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if self.seen[seq].swap(true, Ordering::Relaxed) {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let late = at_ms - due;
        if late < 0 {
            self.early.fetch_add(1, Ordering::Relaxed);
            self.most_early_ms.fetch_max(-late, Ordering::Relaxed);
        }
        let _ = self.lateness.lock().expect("not poisoned").record(late.max(0) as u64);
        self.last_ms.fetch_max(at_ms, Ordering::Relaxed);
        self.unique.fetch_add(1, Ordering::Relaxed);
        self.bar.inc(1);
    }
}

/// One receiver: long polls (20 s, invisible 30 s, up to 32 messages) and acks each batch in
/// one AckMessage, until told to stop.
async fn receive_loop(
    mut client: Client,
    received: Arc<Received>,
    group: String,
    topic: String,
    client_id: String,
    mut stop: watch::Receiver<bool>,
) {
    let (group, topic) = (resource(&group), resource(&topic));
    loop {
        if *stop.borrow() {
            return;
        }
        let mut req = tonic::Request::new(ReceiveMessageRequest {
            group: group.clone(),
            message_queue: Some(MessageQueue { topic: topic.clone(), ..Default::default() }),
            filter_expression: None,
            batch_size: 32,
            invisible_duration: Some(prost_types::Duration { seconds: 30, nanos: 0 }),
            auto_renew: false,
            long_polling_timeout: Some(prost_types::Duration { seconds: 20, nanos: 0 }),
            attempt_id: None,
        });
        if let Ok(v) = client_id.parse() {
            req.metadata_mut().insert("x-mq-client-id", v);
        }
        let poll = async {
            let mut got = Vec::new();
            let stream = client.receive_message(req).await.map_err(|_| ())?;
            let mut stream = stream.into_inner();
            let mut refused = false;
            while let Some(Ok(frame)) = stream.next().await {
                match frame.content {
                    Some(Content::Message(m)) => got.push((now_ms(), m)),
                    Some(Content::Status(s)) => {
                        refused = s.code != Code::Ok as i32 && s.code != Code::MessageNotFound as i32
                    }
                    _ => {}
                }
            }
            if got.is_empty() && refused { Err(()) } else { Ok(got) }
        };
        let got = tokio::select! {
            got = poll => got,
            _ = stop.changed() => return,
        };
        let Ok(got) = got else {
            // Not a leader yet, a restart, an unsupported request: do not spin.
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if got.is_empty() {
            continue;
        }
        let mut entries = Vec::with_capacity(got.len());
        for (at, m) in got {
            received.note(&m, at);
            let sp = m.system_properties.unwrap_or_default();
            entries.push(AckMessageEntry {
                message_id: sp.message_id,
                receipt_handle: sp.receipt_handle.unwrap_or_default(),
                lite_topic: None,
            });
        }
        let n = entries.len() as u64;
        let ack = AckMessageRequest { group: group.clone(), topic: topic.clone(), entries };
        let ok = match client.ack_message(ack).await {
            Ok(r) => r.into_inner().status.is_some_and(|s| s.code == Code::Ok as i32),
            Err(_) => false,
        };
        if !ok {
            received.failed_acks.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// `spread` and `burst`: set the timers while the receivers wait for them.
async fn lateness(a: &DelayArgs, clients: Vec<Client>, timers: Arc<Timers>) -> Result<(), BenchError> {
    let group = a.group.clone().ok_or_else(|| setup("--group is required with --mode spread and burst"))?;
    let burst = a.mode == DelayMode::Burst;
    let messages = a.messages.unwrap_or(if burst { 100_000 } else { 10_000 });
    let receivers = a.concurrency.unwrap_or(16).max(1);
    let start_ms = now_ms();
    // The instant the last timer is due; `due` gives each one's.
    let (due, last_due_ms): (Due, i64) = if burst {
        let t = start_ms + a.lead_secs as i64 * 1000;
        (Arc::new(move |_| t), t)
    } else {
        let first = start_ms + SPREAD_START.as_millis() as i64;
        let over = a.over_secs as i64 * 1000;
        let n = messages.max(1) as i64;
        (Arc::new(move |i| first + i as i64 * over / n), first + over)
    };
    let bars = MultiProgress::new();
    let send_bar = bars.add(ProgressBar::new(messages));
    style(&send_bar, "{bar:40} {pos}/{len} timers set {per_sec}")?;
    let recv_bar = bars.add(ProgressBar::new(messages));
    style(&recv_bar, "{bar:40} {pos}/{len} delivered {per_sec} {msg}")?;
    let received = Arc::new(Received {
        run: timers.run.clone(),
        seen: (0..messages).map(|_| AtomicBool::new(false)).collect(),
        unique: AtomicU64::new(0),
        duplicates: AtomicU64::new(0),
        early: AtomicU64::new(0),
        most_early_ms: AtomicI64::new(0),
        foreign: AtomicU64::new(0),
        failed_acks: AtomicU64::new(0),
        last_ms: AtomicI64::new(0),
        lateness: Mutex::new(Histogram::<u64>::new(3).map_err(setup)?),
        bar: recv_bar.clone(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut workers = Vec::new();
    for w in 0..receivers {
        let client_id = format!("bench-delay-{}-{w}", timers.run);
        workers.push(tokio::spawn(receive_loop(
            clients[w % clients.len()].clone(),
            received.clone(),
            group.clone(),
            timers.topic.clone(),
            client_id,
            stop_rx.clone(),
        )));
    }
    let job = SendJob { label: "", total: messages, concurrency: a.send_concurrency, batch: a.batch, due };
    let mut sending = Some(tokio::spawn(send_timers(clients.clone(), timers.clone(), job, send_bar)));
    let mut sent: Option<SendStats> = None;
    let idle_ms = a.idle_secs as i64 * 1000;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let outcome: Result<(), BenchError> = loop {
        tick.tick().await;
        if let Some(task) = sending.take_if(|t| t.is_finished()) {
            let stats = match task.await.map_err(BenchError::from).and_then(|r| r) {
                Ok(s) => s,
                Err(e) => break Err(e),
            };
            if burst && stats.after_due > 0 {
                break Err(BenchError::Short(format!(
                    "setting the timers took {:.1} s, longer than --lead-secs {}: {} were due before their send was \
                     answered; raise --lead-secs",
                    stats.elapsed.as_secs_f64(),
                    a.lead_secs,
                    stats.after_due
                )));
            }
            if stats.ok == 0 {
                let first = stats.first_error.as_deref().unwrap_or("?");
                break Err(BenchError::Short(format!("every send failed: {first}")));
            }
            sent = Some(stats);
        }
        if burst && sending.is_some() && now_ms() > last_due_ms {
            break Err(BenchError::Short(format!(
                "the timers were not all set within --lead-secs {} (T has passed); raise --lead-secs",
                a.lead_secs
            )));
        }
        let unique = received.unique.load(Ordering::Relaxed);
        if sent.as_ref().is_some_and(|s| unique >= s.ok) {
            break Ok(());
        }
        let now = now_ms();
        let quiet_since = received.last_ms.load(Ordering::Relaxed).max(last_due_ms);
        if now - quiet_since >= idle_ms {
            break Ok(());
        }
        let to_due = last_due_ms - now;
        recv_bar.set_message(if to_due > 0 {
            format!("last due in {:.0} s", to_due as f64 / 1000.0)
        } else {
            format!("last due {:.0} s ago", -to_due as f64 / 1000.0)
        });
    };
    let _ = stop_tx.send(true);
    for w in workers {
        w.await?;
    }
    recv_bar.finish_and_clear();
    if let Some(task) = sending {
        task.abort();
    }
    outcome?;
    let sent =
        sent.ok_or_else(|| BenchError::Short("the sends had not finished --idle-secs after the last due time".into()))?;
    let r = &received;
    let unique = r.unique.load(Ordering::Relaxed);
    let (early, duplicates) = (r.early.load(Ordering::Relaxed), r.duplicates.load(Ordering::Relaxed));
    let h = r.lateness.lock().expect("not poisoned");
    let (p50, p99, max) =
        if h.is_empty() { (0, 0, 0) } else { (h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max()) };
    println!(
        "set {} timers ({} failed) in {:.2} s: {:.0} messages/s, {} answered only after they were due",
        sent.ok,
        sent.failed,
        sent.elapsed.as_secs_f64(),
        sent.ok as f64 / sent.elapsed.as_secs_f64().max(1e-9),
        sent.after_due
    );
    if let Some(e) = &sent.first_error {
        println!("first send error: {e}");
    }
    println!(
        "delivered {unique} of {} ({duplicates} duplicates, {} of other runs, {} failed acks) to {receivers} receivers",
        sent.ok,
        r.foreign.load(Ordering::Relaxed),
        r.failed_acks.load(Ordering::Relaxed)
    );
    println!(
        "lateness (receive time - due time): p50 {p50} ms, p99 {p99} ms, p99.9 {} ms, max {max} ms",
        h.value_at_quantile(0.999)
    );
    if early > 0 {
        println!("early: {early} (must be 0), up to {} ms before due", r.most_early_ms.load(Ordering::Relaxed));
    } else {
        println!("early: 0");
    }
    let last = r.last_ms.load(Ordering::Relaxed);
    let tail = if burst && unique > 0 {
        let secs = (last - last_due_ms) as f64 / 1000.0;
        println!("burst: all due at T; the last delivered T + {secs:.2} s");
        format!(", the last at T + {secs:.2} s")
    } else {
        String::new()
    };
    let what = if burst {
        format!("{messages} due in the same instant")
    } else {
        format!("{messages} due over {} s", a.over_secs)
    };
    println!();
    println!("| command | delivered | lateness p50 / p99 / max | early / duplicates |");
    println!("|---|---|---|---|");
    println!(
        "| `{}` | {unique} of {} ({what}){tail} | {p50} / {p99} / {max} ms | {early} / {duplicates} |",
        command_line(),
        sent.ok
    );
    if early > 0 {
        Err(BenchError::Short(format!("{early} messages were delivered before their due time")))
    } else if unique < sent.ok {
        Err(BenchError::Short(format!(
            "{} of {} timers were not delivered within --idle-secs after the last due time",
            sent.ok - unique,
            sent.ok
        )))
    } else {
        Ok(())
    }
}

/// `pending`: fill with far-ahead timers, then measure sends of more of them.
async fn pending(a: &DelayArgs, clients: Vec<Client>, timers: Arc<Timers>) -> Result<(), BenchError> {
    let messages = a.messages.unwrap_or(100_000);
    let concurrency = a.concurrency.unwrap_or(64).max(1);
    let far = now_ms() + a.pending_due_secs as i64 * 1000;
    let due: Due = Arc::new(move |i| far + (i % PENDING_WINDOW_MS) as i64);
    if a.pending > 0 {
        let bar = ProgressBar::new(a.pending);
        style(&bar, "{bar:40} {pos}/{len} pending timers set {per_sec} eta {eta}")?;
        let job =
            SendJob { label: "p", total: a.pending, concurrency: a.send_concurrency, batch: a.batch, due: due.clone() };
        let fill = send_timers(clients.clone(), timers.clone(), job, bar).await?;
        println!(
            "fill: set {} timers due in {} s ({} failed) in {:.2} s: {:.0} messages/s in requests of {}",
            fill.ok,
            a.pending_due_secs,
            fill.failed,
            fill.elapsed.as_secs_f64(),
            fill.ok as f64 / fill.elapsed.as_secs_f64().max(1e-9),
            a.batch
        );
        if fill.failed > 0 {
            return Err(BenchError::Short(format!(
                "{} pending timers failed: {}",
                fill.failed,
                fill.first_error.as_deref().unwrap_or("?")
            )));
        }
    }
    let bar = ProgressBar::new(messages);
    style(&bar, "{bar:40} {pos}/{len} messages {per_sec} eta {eta}")?;
    let job = SendJob { label: "m", total: messages, concurrency, batch: a.measure_batch, due };
    let s = send_timers(clients, timers, job, bar).await?;
    let h = &s.latencies;
    let rate = s.ok as f64 / s.elapsed.as_secs_f64().max(1e-9);
    println!(
        "sent {} delay messages of {} B ({} failed) in {:.2} s with {} timers pending: {rate:.0} messages/s",
        s.ok,
        a.size,
        s.failed,
        s.elapsed.as_secs_f64(),
        a.pending
    );
    println!(
        "send latency (per request of {} messages): p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        a.measure_batch,
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.99)),
        ms(h.value_at_quantile(0.999)),
        ms(h.max())
    );
    if let Some(e) = &s.first_error {
        println!("first send error: {e}");
    }
    println!();
    println!("| command | throughput | p50 / p99 latency |");
    println!("|---|---|---|");
    println!(
        "| `{}` | {:.1}k messages/s with {} timers pending | {:.1} / {:.1} ms |",
        command_line(),
        rate / 1000.0,
        a.pending,
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.99))
    );
    if s.failed > 0 { Err(BenchError::Short(format!("{} messages failed", s.failed))) } else { Ok(()) }
}
