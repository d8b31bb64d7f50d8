//! The cost of a send's log entry on the proposing and forwarding path: encoding a batch into an
//! entry payload, decoding it back (as apply and the entry cache do), the forwarding leader's
//! look at a payload (`decode_send`, `footprint_of`) and its restamp of a forwarded command.
//!
//! Batches of 1 KiB messages, each a separately encoded `StoredMessage` as the proxy makes them:
//! 1 message (one send) and 64 (a coalesced round). Also prints the payload size of each.
//!
//! `cargo bench -p rockraft --bench command`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use rockraft::broker::Command;
use rockraft_proto::rockraft::{SendBatch, StoredMessage};

fn batch(messages: usize) -> SendBatch {
    let message = |i: usize| {
        StoredMessage {
            message_id: format!("01{i:032X}"),
            tag: "TagA".into(),
            body: Bytes::from(vec![0x5A; 1024]),
            born_timestamp_ms: 1_700_000_000_000,
            born_host: "10.0.0.1".into(),
            ..Default::default()
        }
        .encode_to_vec()
        .into()
    };
    SendBatch {
        topic: "orders".into(),
        queue_id: 3,
        store_timestamp_ms: 1_700_000_000_000,
        clock_ms: 1_700_000_000_000,
        messages: (0..messages).map(message).collect(),
        queue_ids: vec![],
    }
}

fn send_entries(c: &mut Criterion) {
    let mut g = c.benchmark_group("send_entry");
    for n in [1usize, 64] {
        let command = Command::Send(batch(n));
        let payload = command.encode();
        println!("a send of {n} message(s): payload {} bytes", payload.len());
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::new("encode", n), &command, |b, c| b.iter(|| black_box(c.encode())));
        g.bench_with_input(BenchmarkId::new("decode", n), &payload, |b, p| {
            b.iter(|| black_box(Command::decode(p.clone()).is_ok()))
        });
        g.bench_with_input(BenchmarkId::new("decode_send", n), &payload, |b, p| {
            b.iter(|| black_box(Command::decode_send(p)))
        });
        g.bench_with_input(BenchmarkId::new("footprint_of", n), &payload, |b, p| {
            b.iter(|| black_box(Command::footprint_of(p)))
        });
        g.bench_with_input(BenchmarkId::new("restamp", n), &payload, |b, p| {
            b.iter(|| black_box(Command::restamp(p.clone(), |c| c.set_time(1_700_000_000_001))))
        });
    }
    g.finish();
}

criterion_group!(benches, send_entries);
criterion_main!(benches);
