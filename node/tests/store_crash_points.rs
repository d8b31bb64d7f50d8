//! Every crash point in the store's write paths: fail there, drop the log as a process crash
//! would (completed writes stay in the page cache), reopen, and find exactly the log before the
//! operation or exactly the log after it, which then takes appends again. Also: a failed fsync
//! stops the log for good, and new files and directories get their directory entries synced.
//!
//! Fail points are process-global, so these tests live in their own binary and each holds a
//! `FailScenario` (which serialises them) for its whole body.
//! Run with `cargo test -p rockraft --features failpoints --test store_crash_points`.
#![cfg(feature = "failpoints")]

use std::path::Path;
use std::sync::mpsc;

use bytes::Bytes;
use fail::FailScenario;
use rockraft::store::{CommitLog, ConsumeQueue, CqRecord, Durability, LogConfig, RecordMeta, StoreError};

const SEGMENT: u64 = 1 << 20;
/// Three of these fill a 1 MiB segment; a fourth rolls to the next.
const BIG: usize = 300_000;

fn config(dir: &Path, durability: Durability) -> LogConfig {
    let mut c = LogConfig::new(dir);
    c.segment_size = SEGMENT;
    c.index_slots_per_file = 4;
    c.durability = durability;
    c
}

fn open(dir: &Path, last_purged: Option<u64>) -> CommitLog {
    CommitLog::open(config(dir, Durability::Sync), last_purged).expect("open")
}

fn meta(index: u64, term: u64) -> RecordMeta {
    RecordMeta { term, index, leader: 1, kind: 2 }
}

fn payload(index: u64, len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| (index as usize * 31 + i) as u8).collect::<Vec<u8>>())
}

fn try_append(log: &mut CommitLog, first: u64, term: u64, lens: &[usize]) -> Result<(), StoreError> {
    let records: Vec<_> = lens
        .iter()
        .enumerate()
        .map(|(i, &len)| (meta(first + i as u64, term), payload(first + i as u64, len)))
        .collect();
    log.append(records, Box::new(|_| {}))
}

fn append(log: &mut CommitLog, first: u64, term: u64, lens: &[usize]) {
    try_append(log, first, term, lens).expect("append");
}

/// Everything a reader can see: the readable range and each record, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contents {
    first_index: u64,
    records: Vec<(RecordMeta, Bytes)>,
}

fn contents(log: &CommitLog) -> Contents {
    let bounds = log.bounds();
    let records = log.reader().read_range(bounds.first_index, bounds.next_index(), u64::MAX).expect("readable");
    assert_eq!(records.len() as u64, bounds.next_index() - bounds.first_index, "no holes in the readable range");
    Contents { first_index: bounds.first_index, records: records.into_iter().map(|r| (r.meta, r.payload)).collect() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Before,
    After,
}

type Step = fn(&mut CommitLog) -> Result<(), StoreError>;

/// One operation on a log built by `setup`: where it is interrupted and which state recovery
/// must find (the operation's caller records `last_purged` durably before it starts).
struct Case {
    setup: fn(&mut CommitLog),
    op: Step,
    last_purged: Option<u64>,
}

/// Runs `case` cleanly in one directory and interrupted at `point` (configured as `actions`) in
/// another, reopens the interrupted one and checks it recovered to `expect`, then that it takes
/// appends that survive another restart.
fn crash_at(point: &str, actions: &str, case: &Case, expect: Expect) {
    let clean = tempfile::tempdir().expect("tempdir");
    let after = {
        let mut log = open(clean.path(), None);
        (case.setup)(&mut log);
        (case.op)(&mut log).expect("the operation succeeds without the crash point");
        drop(log);
        contents(&open(clean.path(), case.last_purged))
    };

    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open(dir.path(), None);
    (case.setup)(&mut log);
    let before = contents(&log);
    assert_ne!(before, after, "{point}: the operation must change the log for this test to mean anything");
    fail::cfg(point, actions).expect("fail point configured");
    let result = (case.op)(&mut log);
    fail::remove(point);
    let err = result.expect_err("the operation stops at the crash point");
    assert!(err.to_string().contains(point), "{point}: failed elsewhere: {err}");
    drop(log);

    let mut log = open(dir.path(), case.last_purged);
    let recovered = contents(&log);
    let want = if expect == Expect::Before { &before } else { &after };
    assert!(
        recovered == *want,
        "{point} ({actions}): recovered {}..{} records, expected the state {expect:?} the operation ({}..{})",
        recovered.first_index,
        recovered.first_index + recovered.records.len() as u64,
        want.first_index,
        want.first_index + want.records.len() as u64,
    );

    let next = log.bounds().next_index();
    append(&mut log, next, 9, &[BIG, 77]);
    let mut expected = recovered.records.clone();
    expected.extend([(meta(next, 9), payload(next, BIG)), (meta(next + 1, 9), payload(next + 1, 77))]);
    drop(log);
    let log = open(dir.path(), case.last_purged);
    assert_eq!(contents(&log).records, expected, "{point}: appends after recovery survive a restart");
}

fn seven_segments(log: &mut CommitLog) {
    // Records 0..=19, three to a segment: segments start at 0, 3, 6, 9, 12, 15, 18.
    append(log, 0, 1, &[BIG; 10]);
    append(log, 10, 2, &[BIG; 10]);
}

/// An append whose first record rolls to a new segment; nothing of it is written before the roll.
const ROLL: Case = Case {
    setup: |log| append(log, 0, 1, &[BIG; 3]),
    op: |log| try_append(log, 3, 1, &[BIG, 10, 20]),
    last_purged: None,
};

const TRUNCATE: Case = Case { setup: seven_segments, op: |log| log.truncate_after(Some(4)), last_purged: None };

const PURGE: Case = Case { setup: seven_segments, op: |log| log.purge(10), last_purged: Some(10) };

#[test]
fn a_crash_at_any_step_of_a_segment_roll_recovers_the_log_before_the_append() {
    let _scenario = FailScenario::setup();
    for point in [
        "log::roll::after_pad",
        "log::roll::after_sync",
        "segment::create",
        "log::roll::before_dir_sync",
        "log::roll::after",
    ] {
        crash_at(point, "return", &ROLL, Expect::Before);
    }
}

#[test]
fn a_crash_at_any_step_of_a_truncation_recovers_the_truncated_log() {
    let _scenario = FailScenario::setup();
    // Once the new segment exists on disk it supersedes the truncated records, so every step
    // recovers the truncated log; before that nothing has changed on disk.
    let steps = [
        ("segment::create", "return"),
        ("log::roll::before_dir_sync", "return"),
        ("log::roll::after", "return"),
        ("log::truncate::after_new_segment", "return"),
        ("log::truncate::after_delete", "return"),
        ("log::truncate::after_delete", "2*off->return"),
        ("log::truncate::before_dir_sync", "return"),
    ];
    for (point, actions) in steps {
        crash_at(point, actions, &TRUNCATE, Expect::After);
    }
}

#[test]
fn a_crash_at_any_step_of_a_purge_recovers_the_purged_log() {
    let _scenario = FailScenario::setup();
    let steps = [
        ("log::purge::after_delete", "return"),
        ("log::purge::after_delete", "1*off->return"),
        ("log::purge::after_index_remove", "return"),
    ];
    for (point, actions) in steps {
        crash_at(point, actions, &PURGE, Expect::After);
    }
}

#[test]
fn a_crash_after_the_purge_point_is_saved_recovers_the_purged_log() {
    use openraft::storage::RaftLogStorage;
    use rockraft::raft::{LogStore, log_id};

    let _scenario = FailScenario::setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let before = {
        let mut log = open(dir.path(), None);
        seven_segments(&mut log);
        contents(&log)
    };
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    runtime.block_on(async {
        let mut store = LogStore::open(config(dir.path(), Durability::Sync)).expect("open");
        fail::cfg("log::purge::after_save", "return").expect("fail point configured");
        let result = store.purge(log_id(&meta(10, 2))).await;
        fail::remove("log::purge::after_save");
        assert!(result.is_err(), "the purge stops at the crash point");
    });

    let mut store = LogStore::open(config(dir.path(), Durability::Sync)).expect("reopen");
    let state = runtime.block_on(store.get_log_state()).expect("log state");
    assert_eq!(state.last_purged_log_id, Some(log_id(&meta(10, 2))));
    assert_eq!(state.last_log_id, Some(log_id(&meta(19, 2))));
    let recovered = contents_of(&store.commit_log());
    assert_eq!(recovered.first_index, 11);
    assert_eq!(recovered.records, before.records[11..].to_vec(), "what is kept is intact");
    drop(store);

    let mut log = open(dir.path(), Some(10));
    append(&mut log, 20, 3, &[10]);
    assert_eq!(log.reader().read(20).expect("read").expect("present").meta.term, 3);
}

fn contents_of(reader: &rockraft::store::LogReader) -> Contents {
    let bounds = reader.bounds();
    let records = reader.read_range(bounds.first_index, bounds.next_index(), u64::MAX).expect("readable");
    Contents { first_index: bounds.first_index, records: records.into_iter().map(|r| (r.meta, r.payload)).collect() }
}

/// Asserts the log has stopped for good: even with the disk healthy again, nothing more is
/// appended, flushed or reported durable.
fn assert_fail_stopped(log: &mut CommitLog, what: &str) {
    let reader = log.reader();
    assert!(reader.failure().is_some(), "{what}: the failed fsync is reported");
    let durable = reader.durable_index();
    let next = log.bounds().next_index();
    let (tx, rx) = mpsc::channel();
    let appended = log.append(vec![(meta(next, 1), payload(next, 10))], Box::new(move |r| tx.send(r).expect("send")));
    assert!(matches!(appended, Err(StoreError::FailStopped(_))), "{what}: append after the failure: {appended:?}");
    assert!(rx.recv().expect("callback called").is_err(), "{what}: the append's callback gets the error");
    assert!(matches!(reader.sync_through(u64::MAX), Err(StoreError::FailStopped(_))), "{what}: sync_through");
    assert!(matches!(log.flush(), Err(StoreError::FailStopped(_))), "{what}: flush");
    assert!(matches!(log.truncate_after(Some(0)), Err(StoreError::FailStopped(_))), "{what}: truncate");
    assert_eq!(reader.durable_index(), durable, "{what}: nothing more counts as durable");
}

fn open_mode(dir: &Path, durability: Durability, interval_ms: u64) -> CommitLog {
    let mut c = config(dir, durability);
    c.flush_interval = std::time::Duration::from_millis(interval_ms);
    CommitLog::open(c, None).expect("open")
}

#[test]
fn a_failed_fsync_of_the_group_commit_fails_its_appends_and_stops_the_log() {
    let _scenario = FailScenario::setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open_mode(dir.path(), Durability::Sync, 10);
    let (tx, rx) = mpsc::channel();
    let done = tx.clone();
    let records: Vec<_> = (0..5).map(|i| (meta(i, 1), payload(i, 100))).collect();
    log.append(records, Box::new(move |r| done.send(r).expect("send"))).expect("written");
    rx.recv().expect("callback called").expect("durable");
    fail::cfg("segment::sync", "return").expect("fail point configured");
    log.append(vec![(meta(5, 1), payload(5, 100))], Box::new(move |r| tx.send(r).expect("send"))).expect("written");
    assert!(rx.recv().expect("callback called").is_err(), "the pending append is not reported durable");
    fail::remove("segment::sync");
    assert_fail_stopped(&mut log, "group commit");
    assert_eq!(log.reader().durable_index(), Some(4));
}

#[test]
fn a_failed_periodic_fsync_in_async_mode_stops_the_log() {
    let _scenario = FailScenario::setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open_mode(dir.path(), Durability::Async, 1);
    fail::cfg("segment::sync", "return").expect("fail point configured");
    append(&mut log, 0, 1, &[100; 5]);
    let reader = log.reader();
    // Waits for the background sync (every millisecond); the bound only keeps a broken build
    // from hanging.
    for _ in 0..60_000 {
        if reader.failure().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    fail::remove("segment::sync");
    assert_fail_stopped(&mut log, "periodic sync");
    assert_eq!(reader.durable_index(), None);
}

#[test]
fn a_failed_fsync_anywhere_in_the_log_stops_it() {
    let _scenario = FailScenario::setup();
    type Trigger = fn(&mut CommitLog) -> Result<(), StoreError>;
    let triggers: [(&str, &str, Trigger); 5] = [
        ("sync_through", "segment::sync", |log| log.reader().sync_through(u64::MAX)),
        ("roll", "segment::sync", |log| try_append(log, 6, 1, &[BIG])),
        ("new segment's directory entry", "store::sync_dir", |log| try_append(log, 6, 1, &[BIG])),
        ("truncate", "segment::sync", |log| log.truncate_after(Some(1))),
        ("purge", "store::sync_dir", |log| log.purge(3)),
    ];
    for (what, point, trigger) in triggers {
        let dir = tempfile::tempdir().expect("tempdir");
        // Async with a long interval: only the trigger syncs.
        let mut log = open_mode(dir.path(), Durability::Async, 3_600_000);
        append(&mut log, 0, 1, &[BIG; 6]);
        fail::cfg(point, "return").expect("fail point configured");
        let result = trigger(&mut log);
        fail::remove(point);
        assert!(matches!(result, Err(StoreError::SyncFailed { .. })), "{what}: {result:?}");
        assert_fail_stopped(&mut log, what);
        drop(log);
        // A restart recovers from what is on disk and carries on.
        let mut log = open(dir.path(), None);
        let next = log.bounds().next_index();
        append(&mut log, next, 2, &[10]);
    }
}

fn cq_record(i: u64) -> CqRecord {
    CqRecord { position: i << 16, size: 100, tag_hash: 7 }
}

#[test]
fn new_consume_queue_files_and_directories_have_their_entries_synced() {
    let _scenario = FailScenario::setup();
    let root = tempfile::tempdir().expect("tempdir");
    let queue_dir = root.path().join("TopicA").join("0");

    fail::cfg("store::sync_dir", "return").expect("fail point configured");
    assert!(ConsumeQueue::open(&queue_dir, 4).is_err(), "creating the queue's directories syncs their parents");
    fail::remove("store::sync_dir");
    let cq = ConsumeQueue::open(&queue_dir, 4).expect("open");
    assert!(queue_dir.is_dir());

    fail::cfg("store::sync_dir", "return").expect("fail point configured");
    assert!(cq.put(0, &[cq_record(0)]).is_err(), "a new queue file syncs its directory");
    fail::remove("store::sync_dir");
    cq.put(0, &[cq_record(0)]).expect("put");
    cq.put(1, &[cq_record(1)]).expect("an existing file needs no directory sync");
    for i in 2..8 {
        cq.put(i, &[cq_record(i)]).expect("put");
    }

    fail::cfg("store::sync_dir", "return").expect("fail point configured");
    cq.put(3, &[cq_record(3)]).expect("rewriting a record in an existing file syncs nothing");
    assert!(cq.purge_below(4).is_err(), "deleting a queue file syncs its directory");
    fail::remove("store::sync_dir");
    drop(cq);

    let cq = ConsumeQueue::open(&queue_dir, 4).expect("reopen");
    assert_eq!((cq.start(), cq.end()), (4, 8));
    assert_eq!(cq.get(5).unwrap(), Some(cq_record(5)));
}
