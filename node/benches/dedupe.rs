//! The memory the send dedupe window takes per remembered message: inserts N entries (1M unless
//! given) into the dedupe table and its expiry order, as apply does, and reports the growth of
//! the process's resident set (`/proc/self/statm`). The changed-key set is emptied every 10k
//! inserts, as a checkpoint every 200 ms at 50k msg/s would. For comparison it then does the
//! same with the layouts of earlier releases (the same keys in a B-tree; the (topic, id) strings
//! as the key, and again in the order queue), each kept alive beside the others so none reuses
//! another's freed memory. It also reports the longest single insert into the window, against
//! one hash map of the same rows (which grows by rehashing everything in one insert).
//!
//! Ids look like RocketMQ 5's (34 hex characters), the topic has 15 characters. The system
//! allocator is used; under mimalloc, which the node binary uses, the same layouts measured 111
//! (hashed) and 319 (strings) bytes per entry against 101 and 337 here.
//!
//! `cargo bench -p rockraft --bench dedupe [-- N]`

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hint::black_box;
use std::time::{Duration, Instant};

use rockraft::broker::dedupe::{DedupeKey, DedupeTable, Seen};
use rockraft::broker::table::Table;

const TOPIC: &str = "orders-payments";

/// The resident set: `statm`'s second field, in pages (4 KiB on the machines this runs on).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm is readable");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("statm has a resident field");
    pages * 4096
}

fn message_id(i: u64) -> String {
    format!("01{:032X}", u128::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835))
}

fn seen(i: u64) -> Seen {
    Seen { queue_id: (i % 8) as u32, offset: i, seen_ms: 1_700_000_000_000 + (i / 50) as i64, index: i / 32 }
}

fn report(layout: &str, n: u64, bytes: u64) {
    let per = bytes as f64 / n as f64;
    println!(
        "{layout}: {n} entries, RSS +{:.1} MiB, {per:.0} bytes/entry; at 50k msg/s x 120 s (6M entries): {:.2} GiB",
        bytes as f64 / (1 << 20) as f64,
        per * 6e6 / (1u64 << 30) as f64
    );
}

fn main() {
    let n: u64 =
        std::env::args().skip(1).find(|a| !a.starts_with("--")).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    println!(
        "size_of: key {} B, row {} B, order element {} B",
        std::mem::size_of::<DedupeKey>(),
        std::mem::size_of::<Seen>(),
        std::mem::size_of::<(i64, DedupeKey)>()
    );

    let before = rss_bytes();
    let mut table = DedupeTable::default();
    let mut order: VecDeque<(i64, DedupeKey)> = VecDeque::new();
    let mut longest = Duration::ZERO;
    for i in 0..n {
        let key = DedupeKey::new(TOPIC, &message_id(i));
        let s = seen(i);
        let started = Instant::now();
        table.insert(key, s);
        longest = longest.max(started.elapsed());
        order.push_back((s.seen_ms, key));
        if i % 10_000 == 9_999 {
            table.take_changed();
        }
    }
    table.take_changed();
    report("hashed key in a hash map (this release)", n, rss_bytes().saturating_sub(before));
    // A hash map grows by rehashing all it holds within one insert: apply's longest pause.
    let mut one_map: HashMap<DedupeKey, Seen> = HashMap::new();
    let mut longest_one = Duration::ZERO;
    for i in 0..n {
        let started = Instant::now();
        one_map.insert(DedupeKey::new(TOPIC, &message_id(i)), seen(i));
        longest_one = longest_one.max(started.elapsed());
    }
    println!(
        "longest single insert: {:.2} ms in this release's 256 maps, {:.2} ms in one hash map",
        longest.as_secs_f64() * 1e3,
        longest_one.as_secs_f64() * 1e3
    );

    let before = rss_bytes();
    let mut tree: Table<DedupeKey, Seen> = Table::default();
    for i in 0..n {
        tree.insert(DedupeKey::new(TOPIC, &message_id(i)), seen(i));
        if i % 10_000 == 9_999 {
            tree.take_changed();
        }
    }
    tree.take_changed();
    report("hashed key in a B-tree (releases before 2026-12-06)", n, rss_bytes().saturating_sub(before));

    let before = rss_bytes();
    let mut rows: BTreeMap<(String, String), Seen> = BTreeMap::new();
    let mut changed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut old_order: VecDeque<(i64, String, String)> = VecDeque::new();
    for i in 0..n {
        let key = (TOPIC.to_string(), message_id(i));
        let s = seen(i);
        changed.insert(key.clone());
        rows.insert(key.clone(), s);
        old_order.push_back((s.seen_ms, key.0, key.1));
        if i % 10_000 == 9_999 {
            changed.clear();
        }
    }
    changed.clear();
    report("string keys (earlier releases)", n, rss_bytes().saturating_sub(before));

    black_box((&table, &order, &one_map, &tree, &rows, &old_order));
}
