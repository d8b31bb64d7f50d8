//! What the message index costs: the time apply spends indexing each stored message (entries of
//! 32 messages, as the leader batches sends under load), a checkpoint's sync of the index, and a
//! lookup by id. N messages (1M unless given) into files of the default size, in a temporary
//! directory.
//!
//! `cargo bench -p rockraft --bench message_index [-- N]`

use std::hint::black_box;
use std::time::Instant;

use rockraft::store::{DEFAULT_MESSAGE_INDEX_ENTRIES_PER_FILE, MessageIndex, Place};

const PER_ENTRY: u64 = 32;

fn message_id(i: u64) -> String {
    format!("01{:032X}", u128::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835))
}

fn main() {
    let n: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let (index, _) = MessageIndex::open(dir.path(), DEFAULT_MESSAGE_INDEX_ENTRIES_PER_FILE).expect("index opens");
    let ids: Vec<String> = (0..n).map(message_id).collect();

    let started = Instant::now();
    let mut syncs = std::time::Duration::ZERO;
    for (entry, chunk) in ids.chunks(PER_ENTRY as usize).enumerate() {
        let base = entry as u64 * PER_ENTRY;
        let puts = chunk.iter().enumerate().map(|(i, id)| {
            (id.as_str(), ((entry as u64 + 1) << 16) | i as u64, Place::Queued { offset: base + i as u64 })
        });
        index.put(puts).expect("put");
        // A checkpoint every 10k entries' worth (every 200 ms at 50k msg/s).
        if (base + PER_ENTRY).is_multiple_of(10_240) {
            let s = Instant::now();
            index.sync().expect("sync");
            syncs += s.elapsed();
        }
    }
    let put_total = started.elapsed() - syncs;
    let checkpoints = (n / 10_240).max(1);

    let started = Instant::now();
    let mut found = 0usize;
    for id in ids.iter().step_by(97) {
        found += black_box(index.candidates(id)).len();
    }
    let lookups = ids.len().div_ceil(97);
    let lookup = started.elapsed();
    assert!(found >= lookups, "every id is found");

    println!("messages indexed:     {n} ({} files)", index.file_count());
    println!("put, per message:     {:.0} ns", put_total.as_nanos() as f64 / n as f64);
    println!("sync, per checkpoint: {:.2} ms", syncs.as_secs_f64() * 1e3 / checkpoints as f64);
    println!("lookup by id:         {:.1} µs", lookup.as_secs_f64() * 1e6 / lookups as f64);
}
