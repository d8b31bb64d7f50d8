//! The closed loop every produce driver shares, and the `RESULT` line.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// What every produce driver is asked for: how many messages, how large, how many in flight.
#[derive(clap::Args)]
pub struct Load {
    #[arg(long, default_value_t = 100_000)]
    pub messages: u64,
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Messages in flight.
    #[arg(long, default_value_t = 64)]
    pub window: usize,
}

/// Latencies in microseconds, up to an hour, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

pub fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

/// What a run measured.
pub struct Outcome {
    pub latencies: Histogram<u64>,
    pub ok: u64,
    pub failed: u64,
    pub elapsed: Duration,
    pub first_error: Option<String>,
}

impl Outcome {
    pub fn new() -> Self {
        Outcome { latencies: histogram(), ok: 0, failed: 0, elapsed: Duration::ZERO, first_error: None }
    }

    pub fn merge(&mut self, other: Outcome) {
        self.latencies.add(&other.latencies).expect("same histogram bounds");
        self.ok += other.ok;
        self.failed += other.failed;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    /// Prints the summary; `messages` is what was asked for.
    pub fn report(&self, system: &str, op: &str, window: usize, messages: u64) {
        if let Some(e) = &self.first_error {
            println!("first error: {e}");
        }
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let ms = |us: u64| us as f64 / 1000.0;
        println!(
            "RESULT system={system} op={op} window={window} messages={messages} secs={secs:.3} rate={:.0} \
             p50_ms={:.2} p99_ms={:.2} max_ms={:.2} failed={}",
            self.ok as f64 / secs,
            ms(self.latencies.value_at_quantile(0.5)),
            ms(self.latencies.value_at_quantile(0.99)),
            ms(self.latencies.max()),
            self.failed
        );
    }
}

/// Sends `messages` messages with `window` of them in flight: `window` tasks, each calling
/// `send(i)` and awaiting it before taking the next index. Latency is per call, so a driver's
/// `send` must return only when the system has acknowledged the message durably.
pub async fn closed_loop<F, Fut>(messages: u64, window: usize, send: F) -> Outcome
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..window.max(1))
        .map(|_| {
            let (next, send) = (next.clone(), send.clone());
            tokio::spawn(async move {
                let mut out = Outcome::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= messages {
                        return out;
                    }
                    let t = Instant::now();
                    match send(i).await {
                        Ok(()) => {
                            out.ok += 1;
                            out.latencies.record(micros(t.elapsed())).expect("in bounds");
                        }
                        Err(e) => {
                            out.failed += 1;
                            out.first_error.get_or_insert(e);
                        }
                    }
                }
            })
        })
        .collect();
    let mut total = Outcome::new();
    for t in tasks {
        total.merge(t.await.expect("send task panicked"));
    }
    total.elapsed = start.elapsed();
    total
}

/// One message body of `size` bytes (the content does not matter to any of the systems).
pub fn payload(size: usize) -> bytes::Bytes {
    bytes::Bytes::from(vec![b'x'; size])
}
