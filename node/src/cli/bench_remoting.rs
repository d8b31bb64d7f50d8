//! `rockraft bench produce-remoting`: the send load of RocketMQ 4.x clients, over the Remoting
//! protocol. One connection per name server address, shared by the workers and matched by
//! `opaque`, as the Java and C++ clients share theirs; each worker sends one message at a time
//! (SEND_MESSAGE_V2, as cpp 2.x and the Java client send).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Mutex, oneshot};

use crate::cli::bench::{BenchError, setup};
use crate::remoting::codes::{SEND_MESSAGE_V2, SUCCESS};
use crate::remoting::frame::{Frame, FrameLimits, decode};

pub struct RemotingProduceOptions {
    /// Remoting addresses (`remoting_addr`) to spread the workers over.
    pub endpoints: Vec<String>,
    pub topic: String,
    pub messages: u64,
    pub size: usize,
    pub concurrency: usize,
}

type Waiting = Arc<std::sync::Mutex<HashMap<i32, oneshot::Sender<Frame>>>>;

/// One shared connection: requests written under a lock, answers routed by `opaque`.
struct Connection {
    writer: Mutex<tokio::net::tcp::OwnedWriteHalf>,
    waiting: Waiting,
    opaque: AtomicI32,
}

const LIMITS: FrameLimits = FrameLimits { max_frame: 64 << 20, max_header: 1 << 20 };

impl Connection {
    async fn open(addr: &str) -> Result<Arc<Connection>, BenchError> {
        let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| setup(format!("{addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let (mut reader, writer) = stream.into_split();
        let waiting: Waiting = Arc::default();
        let routes = Arc::clone(&waiting);
        tokio::spawn(async move {
            loop {
                let mut len = [0u8; 4];
                if reader.read_exact(&mut len).await.is_err() {
                    break;
                }
                let mut body = BytesMut::zeroed(u32::from_be_bytes(len) as usize);
                if reader.read_exact(&mut body).await.is_err() {
                    break;
                }
                let Ok(frame) = decode(body.freeze(), LIMITS) else { break };
                if let Some(tx) = routes.lock().unwrap_or_else(|p| p.into_inner()).remove(&frame.opaque) {
                    let _ = tx.send(frame);
                }
            }
            // Whoever still waits is told by their sender being dropped.
            routes.lock().unwrap_or_else(|p| p.into_inner()).clear();
        });
        Ok(Arc::new(Connection { writer: Mutex::new(writer), waiting, opaque: AtomicI32::new(1) }))
    }

    async fn call(&self, mut frame: Frame) -> Option<Frame> {
        frame.opaque = self.opaque.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).insert(frame.opaque, tx);
        self.writer.lock().await.write_all(&frame.encode()).await.ok()?;
        tokio::time::timeout(Duration::from_secs(10), rx).await.ok()?.ok()
    }
}

pub async fn produce(o: RemotingProduceOptions) -> Result<(), BenchError> {
    let mut connections = Vec::new();
    for addr in &o.endpoints {
        connections.push(Connection::open(addr).await?);
    }
    let body = bytes::Bytes::from(vec![b'r'; o.size]);
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(std::sync::Mutex::new(Histogram::<u64>::new(3).map_err(setup)?));
    let bar = ProgressBar::new(o.messages);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} messages {per_sec} eta {eta}").map_err(setup)?);
    let run = format!("{:08X}", std::process::id());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..o.concurrency {
        let connection = Arc::clone(&connections[worker % connections.len()]);
        let (next, failed, latencies, bar, body, topic, run) =
            (next.clone(), failed.clone(), latencies.clone(), bar.clone(), body.clone(), o.topic.clone(), run.clone());
        let total = o.messages;
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let properties = format!("UNIQ_KEY\u{1}{run}{i:024X}\u{2}WAIT\u{1}true\u{2}");
                let frame = Frame::request(SEND_MESSAGE_V2, 0, BTreeMap::new())
                    .with("a", "bench-producer")
                    .with("b", &topic)
                    .with("c", "TBW102")
                    .with("d", 4)
                    .with("e", worker)
                    .with("f", 0)
                    .with("g", crate::cluster::now_ms())
                    .with("h", 0)
                    .with("i", properties)
                    .with("j", 0)
                    .with("k", "false")
                    .with("m", "false")
                    .with_body(body.clone());
                let sent = Instant::now();
                match connection.call(frame).await {
                    Some(answer) if answer.code == SUCCESS => {
                        let _ = latencies
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .record(sent.elapsed().as_micros() as u64);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                bar.inc(1);
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
    let h = latencies.lock().unwrap_or_else(|p| p.into_inner());
    let ms = |us: u64| Duration::from_micros(us).as_secs_f64() * 1000.0;
    println!(
        "sent {ok} messages of {} B over Remoting ({failed} failed) in {:.2} s: {:.0} messages/s",
        o.size,
        elapsed.as_secs_f64(),
        ok as f64 / elapsed.as_secs_f64()
    );
    println!(
        "send latency: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        ms(h.value_at_quantile(0.5)),
        ms(h.value_at_quantile(0.99)),
        ms(h.value_at_quantile(0.999)),
        ms(h.max())
    );
    if failed > 0 { Err(BenchError::Short(format!("{failed} messages failed"))) } else { Ok(()) }
}
