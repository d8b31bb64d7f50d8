//! What a subscription's filter costs per message, as pop planning pays it: reading each stored
//! message in place, encoding the batch of message views, the call into the WASM plugin (fuel
//! metering on), and reading the answers.
//!
//! Messages carry a tag, two keys and five user properties (~200 bytes of metadata, 1 KiB body
//! not passed). Cases: SQL92 expressions typical of RocketMQ subscriptions, the tag plugin on
//! messages whose tag hash matched, and a match-all SQL92 expression; batches of 32 (a receive's
//! default) and 256 (the filter batch limit).
//!
//! `cargo bench -p rockraft --bench filter`; the `read` group compares decoding a stored message
//! with reading it in place.

use std::time::Duration;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use rockraft::broker::{MessageFilter, StoredEntry, StoredView};
use rockraft::plugin::subscription::{FilterKind, Subscription};
use rockraft::plugin::{PluginHost, PluginLimits};
use rockraft_proto::rockraft::StoredMessage;

fn entry(i: u64) -> StoredEntry {
    let properties = [
        ("region", if i.is_multiple_of(2) { "Hangzhou" } else { "Beijing" }),
        ("price", &(i % 100).to_string()),
        ("a", &(i % 10).to_string()),
        ("b", if i.is_multiple_of(3) { "abc" } else { "xyz" }),
        ("trace_id", "0af7651916cd43dd8448eb211c80319c"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let message = StoredMessage {
        message_id: format!("01F2A9B3C4D5E6F7{i:016X}"),
        tag: if i.is_multiple_of(2) { "TagA".into() } else { "TagB".into() },
        keys: vec![format!("order-{i}"), "customer-42".into()],
        properties,
        body: Bytes::from(vec![b'x'; 1024]),
        born_timestamp_ms: 1_700_000_000_000,
        ..Default::default()
    };
    StoredEntry::new("Orders", 0, i, 1_700_000_000_000, message)
}

fn filters(c: &mut Criterion) {
    let host = std::sync::Arc::new(PluginHost::new(PluginLimits::default()).expect("plugin engine"));
    let cases = [
        ("sql92 a > 5 AND b = 'abc'", FilterKind::Sql92, "a > 5 AND b = 'abc'"),
        (
            "sql92 region/price",
            FilterKind::Sql92,
            "region IS NOT NULL AND price IS NOT NULL AND region = 'Hangzhou' AND price > 30",
        ),
        ("sql92 TRUE (match all)", FilterKind::Sql92, "TRUE"),
        ("tag TagA || TagC", FilterKind::Tag, "TagA || TagC"),
    ];
    let entries: Vec<StoredEntry> = (0..256).map(entry).collect();
    let mut group = c.benchmark_group("filter");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for batch in [32usize, 256] {
        let stored = &entries[..batch];
        group.throughput(Throughput::Elements(batch as u64));
        for (name, kind, expression) in cases {
            let sub = Subscription::compile(&host, kind, expression).expect("expression compiles");
            // As pop planning pays it: each stored message read in place, then the filter call.
            group.bench_with_input(BenchmarkId::new(name, batch), &stored, |b, stored| {
                b.iter(|| {
                    let views: Vec<StoredView> = stored.iter().map(|e| e.view().expect("a stored message")).collect();
                    sub.passes(&views, 0)
                });
            });
        }
    }
    group.finish();
}

/// Reading a stored message to filter it: decoding it into an owned `StoredMessage`, as planning
/// did, against reading it in place.
fn reading(c: &mut Criterion) {
    let entries: Vec<StoredEntry> = (0..256).map(entry).collect();
    let mut group = c.benchmark_group("read");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(entries.len() as u64));
    group.bench_function("decode", |b| {
        b.iter(|| entries.iter().filter_map(|e| StoredMessage::decode(e.raw.clone()).ok()).count())
    });
    group.bench_function("in place", |b| b.iter(|| entries.iter().filter_map(|e| e.view().ok()).count()));
    group.finish();
}

criterion_group!(benches, filters, reading);
criterion_main!(benches);
