//! Append throughput of the Raft log store, beside the raw sequential write bandwidth of the same
//! disk measured in the same run.
//!
//! Workload: 1 KiB messages, 64 per Raft entry (64 KiB entries), appended through openraft's
//! `RaftLogStorage::append`. Modes:
//! - raw: plain 64 KiB `write`s of the same byte count to one file, then one `fdatasync`;
//! - async: appends complete in the page cache, a background fsync every 10 ms, final sync timed;
//! - sync, 1 appender: each append waits for its fsync before the next is written;
//! - sync, 64 appenders: up to 64 appends in flight, their fsyncs shared (group commit).
//!
//! `cargo bench --bench append`; `ROCKRAFT_BENCH_MIB` sets the volume per mode (default 512),
//! `ROCKRAFT_BENCH_DIR` the directory (default `target/bench-data`, on the project's disk).

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use rockraft::raft::{CommandBytes, Entry, LogId, LogStore, TypeConfig};
use rockraft::store::{Durability, LogConfig};

const MESSAGE: usize = 1024;
const PER_ENTRY: usize = 64;
const ENTRY_BYTES: usize = MESSAGE * PER_ENTRY;

struct Run {
    name: &'static str,
    elapsed: Duration,
    bytes: u64,
}

impl Run {
    fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.elapsed.as_secs_f64()
    }
}

fn raw(dir: &Path, total: u64, name: &'static str) -> Run {
    let path = dir.join("raw.bin");
    let chunk = vec![0x5Au8; ENTRY_BYTES];
    let start = Instant::now();
    let mut f = File::create(&path).expect("create raw file");
    // Same as the log's segments: blocks reserved up front, so neither side pays for allocation.
    // SAFETY: plain syscall on a file descriptor we own.
    let rc = unsafe { libc::posix_fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, total as libc::off_t) };
    assert_eq!(rc, 0, "posix_fallocate");
    let mut written = 0u64;
    while written < total {
        f.write_all(&chunk).expect("write");
        written += chunk.len() as u64;
    }
    f.sync_data().expect("fdatasync");
    let elapsed = start.elapsed();
    std::fs::remove_file(&path).ok();
    Run { name, elapsed, bytes: written }
}

fn entry(index: u64, body: &Bytes) -> Entry {
    let leader = openraft::impls::leader_id_adv::LeaderId { term: 1, node_id: 1 };
    Entry::new_normal(LogId::new(leader, index), CommandBytes(body.clone()))
}

async fn log_store(dir: &Path, total: u64, durability: Durability, window: usize, name: &'static str) -> Run {
    let path = dir.join(name.replace([' ', ','], "-"));
    let mut config = LogConfig::new(&path);
    config.durability = durability;
    let mut store = LogStore::open(config).expect("open log store");
    let body = Bytes::from((0..ENTRY_BYTES).map(|i| i as u8).collect::<Vec<u8>>());
    let entries = total / ENTRY_BYTES as u64;
    let mut in_flight: VecDeque<openraft::alias::OneshotReceiverOf<TypeConfig, std::io::Result<()>>> = VecDeque::new();
    let start = Instant::now();
    for index in 1..=entries {
        if in_flight.len() == window {
            let rx = in_flight.pop_front().expect("non-empty");
            rx.await.expect("callback called").expect("flushed");
        }
        let (tx, rx) = TypeConfig::oneshot::<std::io::Result<()>>();
        store.append([entry(index, &body)], IOFlushed::signal(tx)).await.expect("append");
        in_flight.push_back(rx);
    }
    for rx in in_flight {
        rx.await.expect("callback called").expect("flushed");
    }
    if durability == Durability::Async {
        // The async run only counts once its data is on disk too, like the raw run.
        store.commit_log_flush().expect("flush");
    }
    let elapsed = start.elapsed();
    drop(store);
    std::fs::remove_dir_all(&path).ok();
    Run { name, elapsed, bytes: entries * ENTRY_BYTES as u64 }
}

fn main() {
    let mib: u64 = std::env::var("ROCKRAFT_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(512);
    let total = mib << 20;
    let base = std::env::var("ROCKRAFT_BENCH_DIR").unwrap_or_else(|_| "target/bench-data".into());
    std::fs::create_dir_all(&base).expect("bench dir");
    let dir = tempfile::tempdir_in(&base).expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("runtime");

    println!("append benchmark: {mib} MiB per mode, {MESSAGE} B messages, {PER_ENTRY} per entry, in {base}");
    // Raw is measured before and after the log runs; the better of the two is the reference.
    let runs = vec![
        raw(dir.path(), total, "raw write + fdatasync"),
        rt.block_on(log_store(dir.path(), total, Durability::Async, usize::MAX, "async")),
        rt.block_on(log_store(dir.path(), total, Durability::Sync, 1, "sync, 1 appender")),
        rt.block_on(log_store(dir.path(), total, Durability::Sync, 64, "sync, 64 appenders")),
        raw(dir.path(), total, "raw write + fdatasync"),
    ];
    let raw_bw = runs[0].mib_per_s().max(runs[4].mib_per_s());
    println!("{:<24} {:>10} {:>14} {:>10}", "mode", "MiB/s", "messages/s", "% of raw");
    for r in &runs {
        let msgs = r.bytes as f64 / MESSAGE as f64 / r.elapsed.as_secs_f64();
        println!("{:<24} {:>10.1} {:>14.0} {:>9.0}%", r.name, r.mib_per_s(), msgs, 100.0 * r.mib_per_s() / raw_bw);
    }
}
