//! RockRaft through the official RocketMQ Rust client (`rocketmq` 5.0.0), the way an application
//! would use it: `Producer::send` returns once the broker answered, which RockRaft does only after
//! the message is committed by a majority.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq::Producer;
use rocketmq::conf::{ClientOption, ProducerOption};
use rocketmq::model::message::MessageBuilder;
use tokio::signal::unix::{SignalKind, signal};

use crate::load;

#[derive(clap::Args)]
pub struct ProduceArgs {
    /// Proxy endpoints, separated by `;` (RocketMQ's usual form) or `,` (what the Rust client
    /// parses).
    #[arg(long, default_value = "127.0.0.1:8081")]
    endpoints: String,
    #[arg(long)]
    topic: String,
    #[command(flatten)]
    load: load::Load,
    /// Producers the window is shared by (each has its own gRPC connections).
    #[arg(long, default_value_t = 2)]
    producers: usize,
}

#[derive(clap::Args)]
pub struct GapArgs {
    /// Proxy endpoints; give one node to send through that node only (RockRaft routes a client
    /// to the endpoints it asked).
    #[arg(long, default_value = "127.0.0.1:8081")]
    endpoints: String,
    #[arg(long)]
    topic: String,
    /// How long to send.
    #[arg(long, default_value_t = 30)]
    secs: u64,
    #[arg(long, default_value_t = 8)]
    window: usize,
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Print every gap at least this long (ms).
    #[arg(long, default_value_t = 200)]
    report_ms: u64,
}

async fn producer(endpoints: &str, topic: &str) -> Result<Producer, String> {
    let mut po = ProducerOption::default();
    po.set_topics(vec![topic]);
    let mut co = ClientOption::default();
    co.set_access_url(endpoints.replace(';', ","));
    co.set_enable_tls(false);
    let mut p = Producer::new(po, co).map_err(|e| format!("producer: {e}"))?;
    p.start().await.map_err(|e| format!("producer start ({endpoints}): {e}"))?;
    Ok(p)
}

async fn send(p: &Producer, topic: &str, body: &[u8]) -> Result<(), String> {
    let msg = MessageBuilder::builder().set_topic(topic).set_body(body.to_vec()).build().map_err(|e| e.to_string())?;
    p.send(msg).await.map(|_| ()).map_err(|e| e.to_string())
}

pub async fn produce(a: ProduceArgs) -> Result<(), String> {
    let mut producers = Vec::new();
    for _ in 0..a.producers.clamp(1, a.load.window.max(1)) {
        producers.push(Arc::new(producer(&a.endpoints, &a.topic).await?));
    }
    let producers = Arc::new(producers);
    let (body, topic) = (load::payload(a.load.size), Arc::new(a.topic.clone()));
    let outcome = load::closed_loop(a.load.messages, a.load.window, move |i| {
        let p = producers[i as usize % producers.len()].clone();
        let (body, topic) = (body.clone(), topic.clone());
        async move { send(&p, &topic, &body).await }
    })
    .await;
    outcome.report("rockraft", "produce", a.load.window, a.load.messages);
    Ok(())
}

/// Sends for `secs` (or until SIGTERM) and reports the pauses between consecutive acknowledged
/// sends. A leader kill shows up as one long gap: from the last send the old leader committed to
/// the first the new leader did. Gaps are printed with their wall-clock start, so that the script
/// can match each one to the kill that caused it.
pub async fn gap(a: GapArgs) -> Result<(), String> {
    let p = Arc::new(producer(&a.endpoints, &a.topic).await?);
    let body = load::payload(a.size);
    let (start, start_unix) =
        (Instant::now(), SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis());
    let end = start + Duration::from_secs(a.secs);
    // SIGTERM ends the run early but still reports, so the script need not guess its length.
    let stop = Arc::new(AtomicBool::new(false));
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
    let on_term = stop.clone();
    tokio::spawn(async move {
        term.recv().await;
        on_term.store(true, Ordering::Relaxed);
    });
    let tasks: Vec<_> = (0..a.window.max(1))
        .map(|_| {
            let (p, body, topic, stop) = (p.clone(), body.clone(), a.topic.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut acks, mut failed, mut first_error) = (Vec::new(), 0u64, None);
                while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                    match send(&p, &topic, &body).await {
                        Ok(()) => acks.push(Instant::now()),
                        Err(e) => {
                            failed += 1;
                            first_error.get_or_insert(e);
                            // A refused connection fails at once; don't spin on it.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
                (acks, failed, first_error)
            })
        })
        .collect();
    let (mut acks, mut failed, mut first_error) = (Vec::new(), 0, None);
    for t in tasks {
        let (a, f, e) = t.await.map_err(|e| e.to_string())?;
        acks.extend(a);
        failed += f;
        first_error = first_error.or(e);
    }
    acks.sort();
    let unix_ms = |t: Instant| start_unix + t.duration_since(start).as_millis();
    let (mut max_gap, mut max_at) = (Duration::ZERO, start);
    for w in acks.windows(2) {
        let gap = w[1] - w[0];
        if gap.as_millis() >= a.report_ms as u128 {
            println!("GAP start_unix_ms={} ms={}", unix_ms(w[0]), gap.as_millis());
        }
        if gap > max_gap {
            (max_gap, max_at) = (gap, w[0]);
        }
    }
    if let Some(e) = first_error {
        println!("first error: {e}");
    }
    println!(
        "RESULT system=rockraft op=gap window={} secs={:.1} acked={} failed={failed} max_gap_ms={} max_gap_start_unix_ms={}",
        a.window,
        start.elapsed().as_secs_f64(),
        acks.len(),
        max_gap.as_millis(),
        unix_ms(max_at)
    );
    if acks.is_empty() { Err("no send was acknowledged".into()) } else { Ok(()) }
}
