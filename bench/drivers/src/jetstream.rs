//! NATS JetStream: an R3 file-backed stream (the counterpart of a RockRaft topic on three nodes),
//! published to with PubAcks and consumed by a durable pull consumer with confirmed acks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::ServerAddr;
use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;
use tokio::sync::Mutex;

use crate::load::{self, Outcome};

#[derive(clap::Args)]
pub struct SetupArgs {
    /// Comma-separated server URLs.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    servers: String,
    #[arg(long)]
    stream: String,
    #[arg(long)]
    subject: String,
    /// Durable pull consumer to create.
    #[arg(long)]
    consumer: String,
    #[arg(long, default_value_t = 3)]
    replicas: usize,
}

#[derive(clap::Args)]
pub struct ProduceArgs {
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    servers: String,
    /// The stream the subject belongs to (reported only).
    #[arg(long)]
    stream: String,
    #[arg(long)]
    subject: String,
    #[command(flatten)]
    load: load::Load,
}

#[derive(clap::Args)]
pub struct ConsumeArgs {
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    servers: String,
    #[arg(long)]
    stream: String,
    #[arg(long)]
    consumer: String,
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// Concurrent fetch loops.
    #[arg(long, default_value_t = 16)]
    fetchers: usize,
    /// Messages per fetch, at most.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Give up after this long without a message.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
}

async fn connect(servers: &str) -> Result<jetstream::Context, String> {
    let addrs = servers
        .split(',')
        .map(|s| s.trim().parse::<ServerAddr>().map_err(|e| format!("server {s}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let client = async_nats::connect(addrs).await.map_err(|e| format!("connect {servers}: {e}"))?;
    Ok(jetstream::new(client))
}

pub async fn setup(a: SetupArgs) -> Result<(), String> {
    let js = connect(&a.servers).await?;
    // Start empty, so that a run measures only its own messages; the stream may not exist yet.
    let _ = js.delete_stream(&a.stream).await;
    let s = js
        .create_stream(stream::Config {
            name: a.stream.clone(),
            subjects: vec![a.subject.clone()],
            storage: stream::StorageType::File,
            num_replicas: a.replicas,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("create stream {}: {e}", a.stream))?;
    s.create_consumer(consumer::pull::Config {
        durable_name: Some(a.consumer.clone()),
        ack_policy: consumer::AckPolicy::Explicit,
        ..Default::default()
    })
    .await
    .map_err(|e| format!("create consumer {}: {e}", a.consumer))?;
    println!("stream {} (R{}, file) with durable pull consumer {}", a.stream, a.replicas, a.consumer);
    Ok(())
}

pub async fn produce(a: ProduceArgs) -> Result<(), String> {
    let js = connect(&a.servers).await?;
    let (body, subject) = (load::payload(a.load.size), a.subject.clone());
    let outcome = load::closed_loop(a.load.messages, a.load.window, move |_| {
        let (js, body, subject) = (js.clone(), body.clone(), subject.clone());
        async move {
            // The first await hands the message to the client; the second waits for the PubAck,
            // which the stream leader sends once a majority of replicas stored it.
            let ack = js.publish(subject, body).await.map_err(|e| e.to_string())?;
            ack.await.map(|_| ()).map_err(|e| e.to_string())
        }
    })
    .await;
    println!("stream {}: published {} of {} messages", a.stream, outcome.ok, a.load.messages);
    outcome.report("jetstream", "produce", a.load.window, a.load.messages);
    Ok(())
}

pub async fn consume(a: ConsumeArgs) -> Result<(), String> {
    let js = connect(&a.servers).await?;
    let stream = js.get_stream(&a.stream).await.map_err(|e| format!("stream {}: {e}", a.stream))?;
    let consumer: consumer::PullConsumer =
        stream.get_consumer(&a.consumer).await.map_err(|e| format!("consumer {}: {e}", a.consumer))?;
    let acked = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    // When the last ack came: the idle wait before giving up is not consumption time.
    let last_ack = Arc::new(Mutex::new(start));
    let idle = Duration::from_secs(a.idle_secs);
    let tasks: Vec<_> = (0..a.fetchers.max(1))
        .map(|_| {
            let (consumer, acked, last_ack) = (consumer.clone(), acked.clone(), last_ack.clone());
            let (messages, batch) = (a.messages, a.batch);
            tokio::spawn(async move {
                let mut out = Outcome::new();
                let mut idle_since = Instant::now();
                while acked.load(Ordering::Relaxed) < messages && idle_since.elapsed() < idle {
                    let t = Instant::now();
                    // `fetch` does not wait on the server when nothing is pending, so an empty
                    // answer means the stream is drained (for now): back off briefly.
                    let msgs: Vec<_> = match consumer.fetch().max_messages(batch).messages().await {
                        Ok(b) => b.collect().await,
                        Err(e) => {
                            out.failed += 1;
                            out.first_error.get_or_insert(e.to_string());
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let msgs: Vec<_> = msgs.into_iter().filter_map(Result::ok).collect();
                    if msgs.is_empty() {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    idle_since = Instant::now();
                    // Confirmed acks, all of a batch at once: RocketMQ's POP acks a batch in one
                    // request, so acking one message after another here would only add round trips.
                    let acks = futures_util::future::join_all(msgs.iter().map(|m| m.double_ack())).await;
                    for r in acks {
                        match r {
                            Ok(()) => out.ok += 1,
                            Err(e) => {
                                out.failed += 1;
                                out.first_error.get_or_insert(e.to_string());
                            }
                        }
                    }
                    acked.fetch_add(msgs.len() as u64, Ordering::Relaxed);
                    out.latencies.record(load::micros(t.elapsed())).expect("in bounds");
                    *last_ack.lock().await = Instant::now();
                }
                out
            })
        })
        .collect();
    let mut total = Outcome::new();
    for t in tasks {
        total.merge(t.await.map_err(|e| e.to_string())?);
    }
    total.elapsed = last_ack.lock().await.duration_since(start);
    println!("consumer {}: acked {} of {} (latency per batch of up to {})", a.consumer, total.ok, a.messages, a.batch);
    total.report("jetstream", "consume", a.fetchers, a.messages);
    if total.ok < a.messages { Err(format!("only {} of {} messages acked", total.ok, a.messages)) } else { Ok(()) }
}
