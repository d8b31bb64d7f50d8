//! Crash, corruption, truncation, purge and rollover behaviour of the CommitLog.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use proptest::prelude::*;

use crate::store::record::HEADER_LEN;
use crate::store::{CommitLog, Durability, LogConfig, RecordMeta, StoreError};

const SEGMENT: u64 = 1 << 20;

fn config(dir: &Path, durability: Durability) -> LogConfig {
    let mut c = LogConfig::new(dir);
    c.segment_size = SEGMENT;
    c.index_slots_per_file = 16;
    c.durability = durability;
    c
}

fn open(dir: &Path) -> CommitLog {
    CommitLog::open(config(dir, Durability::Sync), None).unwrap()
}

fn payload(index: u64, len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| (index as usize * 31 + i) as u8).collect::<Vec<u8>>())
}

fn meta(index: u64, term: u64) -> RecordMeta {
    RecordMeta { term, index, leader: 1, kind: 2 }
}

fn append(log: &mut CommitLog, first: u64, term: u64, lens: &[usize]) {
    let records = lens.iter().enumerate().map(|(i, &len)| {
        let index = first + i as u64;
        (meta(index, term), payload(index, len))
    });
    log.append(records.collect::<Vec<_>>(), Box::new(|r| r.expect("flushed"))).unwrap();
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir.join("segments")).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

fn last_index(log: &CommitLog) -> Option<u64> {
    log.bounds().last.map(|m| m.index)
}

#[test]
fn records_read_back_intact_across_segment_rollover_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let lens: Vec<usize> = (0..100).map(|i| 20_000 + i * 100).collect();
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &lens[..50]);
        append(&mut log, 50, 2, &lens[50..]);
    }
    assert!(segment_files(dir.path()).len() >= 3, "2.5 MB of records must span several 1 MiB segments");
    let log = open(dir.path());
    assert_eq!(last_index(&log), Some(99));
    let reader = log.reader();
    for (i, &len) in lens.iter().enumerate() {
        let r = reader.read(i as u64).unwrap().expect("present");
        assert_eq!(r.payload, payload(i as u64, len));
        assert_eq!(r.meta.term, if i < 50 { 1 } else { 2 });
    }
    assert_eq!(reader.read(100).unwrap(), None);
}

#[test]
fn appends_must_continue_the_log_and_fit_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    append(&mut log, 0, 1, &[10, 10]);
    let gap = log.append(vec![(meta(5, 1), payload(5, 1))], Box::new(|_| {}));
    assert!(matches!(gap, Err(StoreError::OutOfOrder { expected: 2, got: 5 })));
    let huge = log.append(vec![(meta(2, 1), Bytes::from(vec![0u8; SEGMENT as usize]))], Box::new(|_| {}));
    assert!(matches!(huge, Err(StoreError::RecordTooLarge { .. })));
    assert_eq!(last_index(&log), Some(1), "rejected appends change nothing");
}

#[test]
fn sync_mode_reports_every_append_durable() {
    let dir = tempfile::tempdir().unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    {
        let mut log = open(dir.path());
        for i in 0..200u64 {
            let done = Arc::clone(&done);
            log.append(
                vec![(meta(i, 1), payload(i, 100))],
                Box::new(move |r| {
                    r.unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                }),
            )
            .unwrap();
        }
    }
    assert_eq!(done.load(Ordering::SeqCst), 200);
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    /// The file is cut short at the byte (a crash before the size was preallocated).
    Shorten,
    /// Everything from the byte on reads as zeroes (unwritten pages after a power cut).
    Zero,
    /// Everything from the byte on is garbage (a torn write).
    Garbage,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn recovery_after_a_cut_at_any_byte_keeps_exactly_the_whole_records(
        lens in proptest::collection::vec(0usize..3000, 1..40),
        cut_fraction in 0.0f64..1.0,
        damage in prop_oneof![Just(Damage::Shorten), Just(Damage::Zero), Just(Damage::Garbage)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let ends: Vec<u64> = {
            let mut log = open(dir.path());
            append(&mut log, 0, 3, &lens);
            let reader = log.reader();
            (0..lens.len() as u64)
                .map(|i| reader.payload_offset(i).unwrap().unwrap() + lens[i as usize] as u64)
                .collect()
        };
        let written = *ends.last().unwrap();
        let cut = 64 + ((written - 64) as f64 * cut_fraction) as u64;
        let path = segment_files(dir.path()).pop().unwrap();
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        match damage {
            Damage::Shorten => file.set_len(cut).unwrap(),
            Damage::Zero => file.write_all_at(&vec![0u8; (written - cut + 64) as usize], cut).unwrap(),
            Damage::Garbage => {
                let junk: Vec<u8> = (0..written - cut + 64).map(|i| (i * 7 + 13) as u8).collect();
                file.write_all_at(&junk, cut).unwrap();
            }
        }
        drop(file);
        // As after a power loss before any sync: nothing vouches for the damaged records.
        fs::remove_file(dir.path().join("synced")).unwrap();

        let mut log = open(dir.path());
        let survivors = ends.iter().filter(|&&end| end <= cut).count() as u64;
        prop_assert_eq!(last_index(&log), survivors.checked_sub(1));
        let reader = log.reader();
        for i in 0..survivors {
            prop_assert_eq!(reader.read(i).unwrap().unwrap().payload, payload(i, lens[i as usize]));
        }
        // The log carries on from the cut, and what is appended now survives a restart.
        append(&mut log, survivors, 4, &[123]);
        drop(log);
        let log = open(dir.path());
        prop_assert_eq!(last_index(&log), Some(survivors));
        prop_assert_eq!(log.reader().read(survivors).unwrap().unwrap().payload, payload(survivors, 123));
    }
}

fn flip_byte_of(dir: &Path, log: &CommitLog, index: u64) {
    let offset = log.reader().payload_offset(index).unwrap().unwrap();
    let (path, base) = segment_files(dir)
        .into_iter()
        .map(|p| {
            let base: u64 = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            (p, base)
        })
        .rfind(|(_, base)| *base <= offset)
        .unwrap();
    let file = OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut b = [0u8; 1];
    let at = offset - base - HEADER_LEN as u64 + 10; // inside the term field of the header
    file.read_exact_at(&mut b, at).unwrap();
    file.write_all_at(&[b[0] ^ 0x40], at).unwrap();
}

/// Reopened, the log at `dir` holds no damage and records `0..count`, each of `len` bytes, whole.
fn assert_whole_after_restart(dir: &Path, count: u64, len: usize) {
    let log = open(dir);
    assert!(log.damage().is_empty());
    for i in 0..count {
        assert_eq!(log.reader().read(i).unwrap().unwrap().payload, payload(i, len));
    }
}

fn originals(first: u64, end: u64, len: usize) -> Vec<(RecordMeta, Bytes)> {
    (first..end).map(|i| (meta(i, 1), payload(i, len))).collect()
}

#[test]
fn damage_in_the_tail_segment_is_never_served_and_is_filled_from_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[500; 20]);
        flip_byte_of(dir.path(), &log, 12);
    }
    let mut log = open(dir.path());
    assert_eq!(last_index(&log), Some(19), "the records after the damage are kept");
    let damage = log.damage();
    assert_eq!(damage.len(), 1);
    assert_eq!((damage[0].first_index, damage[0].end_index, damage[0].at_tail), (12, 13, false));
    assert_eq!(damage[0].anchor.map(|a| a.index), Some(13));
    match log.reader().read(12) {
        Err(StoreError::Damaged { index: 12, path, offset }) => {
            assert_eq!(path, segment_files(dir.path())[0]);
            assert!(offset > 64);
        }
        other => panic!("damaged record 12 read as {other:?}"),
    }
    for i in (0..20).filter(|&i| i != 12) {
        assert_eq!(log.reader().read(i).unwrap().unwrap().payload, payload(i, 500));
    }

    // A copy of another length or term is not the record the log held.
    assert!(matches!(log.fill(12, originals(12, 13, 499)), Err(StoreError::Unfit { .. })));
    assert!(matches!(log.fill(12, vec![(meta(12, 2), payload(12, 500))]), Err(StoreError::Unfit { .. })));
    assert!(log.reader().read(12).is_err());

    log.fill(12, originals(12, 13, 500)).unwrap();
    assert!(log.damage().is_empty());
    assert_eq!(log.reader().read(12).unwrap().unwrap().payload, payload(12, 500));
    append(&mut log, 20, 1, &[500]);
    drop(log);
    assert_whole_after_restart(dir.path(), 21, 500);
}

#[test]
fn a_flipped_byte_in_a_sealed_segment_is_never_served_and_the_scrubber_finds_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    append(&mut log, 0, 1, &[100_000; 30]);
    flip_byte_of(dir.path(), &log, 4);
    let reader = log.reader();
    let mut found = Vec::new();
    let mut after = None;
    while let Some((base, bytes, damage)) = reader.scrub_next(after) {
        assert!(bytes > 0);
        found.extend(damage);
        after = Some(base);
    }
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].first_index, found[0].end_index), (4, 5));
    assert_eq!(reader.scrub_next(None).map(|(_, _, d)| d.len()), Some(0), "known damage is not found twice");
    assert!(matches!(reader.read(4), Err(StoreError::Damaged { index: 4, .. })));
    for i in (0..30).filter(|&i| i != 4) {
        assert_eq!(reader.read(i).unwrap().unwrap().payload, payload(i, 100_000));
    }
    reader.fill(4, originals(4, 5, 100_000)).unwrap();
    assert_eq!(reader.read(4).unwrap().unwrap().payload, payload(4, 100_000));
}

#[test]
fn a_cut_middle_segment_keeps_the_segments_after_it_and_is_filled_from_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[100_000; 30]);
    }
    let files = segment_files(dir.path());
    assert!(files.len() >= 3);
    OpenOptions::new().write(true).open(&files[1]).unwrap().set_len(SEGMENT / 2).unwrap();

    let mut log = open(dir.path());
    assert_eq!(last_index(&log), Some(29));
    let damage = log.damage();
    assert_eq!(damage.len(), 1, "{damage:?}");
    let (first, end) = (damage[0].first_index, damage[0].end_index);
    assert!(first > 0 && end < 30 && !damage[0].at_tail);
    assert!(log.reader().read(first).is_err());
    assert_eq!(log.reader().read(end).unwrap().unwrap().payload, payload(end, 100_000));
    log.fill(first, originals(first, end, 100_000)).unwrap();
    drop(log);
    assert_whole_after_restart(dir.path(), 30, 100_000);
}

#[test]
fn damage_at_the_tail_below_the_sync_mark_takes_no_appends_until_it_is_filled() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[500; 20]);
        let at = log.reader().payload_offset(15).unwrap().unwrap() - HEADER_LEN as u64;
        let file = OpenOptions::new().write(true).open(&segment_files(dir.path())[0]).unwrap();
        file.write_all_at(&[0u8; 4096], at).unwrap();
    }
    let mut log = open(dir.path());
    assert_eq!(last_index(&log), Some(14));
    let damage = log.damage();
    assert_eq!((damage[0].first_index, damage[0].end_index, damage[0].at_tail), (15, 20, true));
    let refused = log.append(vec![(meta(15, 2), payload(15, 10))], Box::new(|r| assert!(r.is_err())));
    assert!(matches!(refused, Err(StoreError::Damaged { index: 15, .. })));
    drop(log);
    // The evidence outlives a restart before the fill.
    let mut log = open(dir.path());
    assert_eq!(log.damage().len(), 1);
    log.fill(15, originals(15, 20, 500)).unwrap();
    assert_eq!(last_index(&log), Some(19));
    append(&mut log, 20, 1, &[500]);
    drop(log);
    assert_whole_after_restart(dir.path(), 21, 500);
}

#[test]
fn a_lost_or_damaged_index_is_rebuilt_from_the_segments() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[50_000; 60]);
    }
    let index_dir = dir.path().join("index");
    let mut files: Vec<PathBuf> = fs::read_dir(&index_dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    fs::remove_file(&files[0]).unwrap();
    let f = OpenOptions::new().write(true).open(&files[2]).unwrap();
    f.write_all_at(&[0x5A; 100], 10).unwrap();
    let log = open(dir.path());
    assert_eq!(last_index(&log), Some(59));
    for i in 0..60 {
        assert_eq!(log.reader().read(i).unwrap().unwrap().payload, payload(i, 50_000));
    }
}

#[test]
fn truncate_after_drops_later_records_while_readers_keep_what_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    let held;
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[40_000; 50]);
        held = log.reader().read(40).unwrap().unwrap().payload;
        log.truncate_after(Some(20)).unwrap();
        assert_eq!(last_index(&log), Some(20));
        assert_eq!(log.reader().read(21).unwrap(), None);
        append(&mut log, 21, 2, &[7; 10]);
        assert_eq!(log.reader().read(25).unwrap().unwrap().meta.term, 2);
    }
    assert_eq!(held, payload(40, 40_000), "a truncated record a reader holds is never rewritten");
    let log = open(dir.path());
    assert_eq!(last_index(&log), Some(30));
    let reader = log.reader();
    for i in 0..=20 {
        assert_eq!(reader.read(i).unwrap().unwrap().meta.term, 1);
    }
    for i in 21..=30 {
        let r = reader.read(i).unwrap().unwrap();
        assert_eq!((r.meta.term, r.payload), (2, payload(i, 7)));
    }
}

#[test]
fn truncate_interrupted_before_old_segments_were_deleted_still_recovers_the_truncated_log() {
    let dir = tempfile::tempdir().unwrap();
    let backup = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[40_000; 50]);
        for f in segment_files(dir.path()) {
            fs::copy(&f, backup.path().join(f.file_name().unwrap())).unwrap();
        }
        log.truncate_after(Some(20)).unwrap();
        append(&mut log, 21, 2, &[9; 3]);
    }
    // Put back the segments the truncation deleted, as if the crash came before the deletes.
    for f in fs::read_dir(backup.path()).unwrap() {
        let f = f.unwrap();
        let target = dir.path().join("segments").join(f.file_name());
        if !target.exists() {
            fs::copy(f.path(), target).unwrap();
        }
    }
    let log = open(dir.path());
    assert_eq!(last_index(&log), Some(23));
    assert_eq!(log.reader().read(22).unwrap().unwrap().meta.term, 2);
    assert_eq!(log.reader().read(20).unwrap().unwrap().meta.term, 1);
}

#[test]
fn truncating_everything_leaves_an_empty_log_that_accepts_new_records() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[10; 5]);
        log.truncate_after(None).unwrap();
        assert_eq!(last_index(&log), None);
        append(&mut log, 0, 2, &[11; 2]);
    }
    let log = open(dir.path());
    assert_eq!(last_index(&log), Some(1));
    assert_eq!(log.reader().read(0).unwrap().unwrap().meta.term, 2);
}

#[test]
fn purge_deletes_whole_segments_below_the_point_and_restart_honours_it() {
    let dir = tempfile::tempdir().unwrap();
    let held;
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[100_000; 40]);
        let before = segment_files(dir.path()).len();
        held = log.reader().read(3).unwrap().unwrap().payload;
        log.purge(25).unwrap();
        assert!(segment_files(dir.path()).len() < before, "whole segments below the point are deleted");
        assert_eq!(log.reader().read(25).unwrap(), None);
        assert!(log.reader().read(26).unwrap().is_some());
    }
    assert_eq!(held, payload(3, 100_000), "bytes held by a reader outlive the purge");
    let log = CommitLog::open(config(dir.path(), Durability::Sync), Some(25)).unwrap();
    assert_eq!(log.bounds().first_index, 26);
    assert_eq!(last_index(&log), Some(39));
    assert_eq!(log.reader().read(25).unwrap(), None);
    assert_eq!(log.reader().read(39).unwrap().unwrap().payload, payload(39, 100_000));
}

#[test]
fn readers_that_keep_records_are_told_the_first_index_after_each_purge() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    append(&mut log, 0, 1, &[1_000; 30]);
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = Arc::clone(&told);
    log.reader().on_purge(Box::new(move |first| listener.lock().unwrap().push(first)));
    log.purge(9).unwrap();
    log.purge(19).unwrap();
    assert_eq!(*told.lock().unwrap(), vec![10, 20]);
}

#[test]
fn after_a_purge_past_the_end_the_log_continues_where_the_purge_left_it() {
    // What a follower does when it installs a snapshot newer than its whole log.
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[10; 10]);
        log.purge(20).unwrap();
        assert_eq!(last_index(&log), None);
        assert_eq!(log.bounds().next_index(), 21);
        append(&mut log, 21, 3, &[10; 5]);
    }
    let log = CommitLog::open(config(dir.path(), Durability::Sync), Some(20)).unwrap();
    assert_eq!(log.bounds().first_index, 21);
    assert_eq!(last_index(&log), Some(25));
    assert_eq!(segment_files(dir.path()).len(), 1, "the purged segment is gone after restart");
}

#[test]
fn async_mode_keeps_records_across_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = CommitLog::open(config(dir.path(), Durability::Async), None).unwrap();
        append(&mut log, 0, 1, &[1000; 100]);
    }
    let log = CommitLog::open(config(dir.path(), Durability::Async), None).unwrap();
    assert_eq!(last_index(&log), Some(99));
}

fn quiet_async(dir: &Path) -> CommitLog {
    // Long enough that the periodic sync never runs during a test: durability comes only from
    // rolls, truncations and `sync_through`.
    let mut c = config(dir, Durability::Async);
    c.flush_interval = std::time::Duration::from_secs(3600);
    CommitLog::open(c, None).unwrap()
}

#[test]
fn sync_mode_reports_each_append_durable_only_once_the_durable_index_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut log = open(dir.path());
    let reader = log.reader();
    for batch in 0..40u64 {
        let records: Vec<_> = (batch * 5..batch * 5 + 5).map(|i| (meta(i, 1), payload(i, 30_000))).collect();
        let (tx, reader) = (tx.clone(), reader.clone());
        log.append(records, Box::new(move |r| tx.send((batch * 5 + 4, r.is_ok(), reader.durable_index())).unwrap()))
            .unwrap();
    }
    drop(tx);
    let reports: Vec<_> = rx.iter().take(40).collect();
    assert_eq!(reports.len(), 40);
    for (last, ok, durable) in reports {
        assert!(ok);
        assert!(durable >= Some(last), "append through {last} reported done with durable index {durable:?}");
    }
    assert_eq!(reader.durable_index(), Some(199));
}

#[test]
fn async_mode_durable_index_lags_until_sync_through() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = quiet_async(dir.path());
    append(&mut log, 0, 1, &[100; 10]);
    let reader = log.reader();
    assert_eq!(reader.durable_index(), None, "async appends are not durable when reported done");
    reader.sync_through(5).unwrap();
    assert!(reader.durable_index() >= Some(5));
    reader.sync_through(1_000).unwrap();
    assert_eq!(reader.durable_index(), Some(9), "only records that exist become durable");
    append(&mut log, 10, 1, &[100; 3]);
    assert_eq!(reader.durable_index(), Some(9));
    log.flush().unwrap();
    assert_eq!(reader.durable_index(), Some(12));
}

#[test]
fn a_roll_makes_the_sealed_segment_durable() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = quiet_async(dir.path());
    // 300 KB records: the fourth does not fit a 1 MiB segment.
    append(&mut log, 0, 1, &[300_000; 3]);
    assert_eq!(log.reader().durable_index(), None);
    append(&mut log, 3, 1, &[300_000; 2]);
    assert_eq!(segment_files(dir.path()).len(), 2);
    assert_eq!(log.reader().durable_index(), Some(2), "the roll synced records 0..=2, not the new tail");
}

#[test]
fn truncation_clamps_the_durable_index_to_what_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = quiet_async(dir.path());
    let reader = log.reader();
    append(&mut log, 0, 1, &[1000; 50]);
    reader.sync_through(40).unwrap();
    assert_eq!(reader.durable_index(), Some(40));
    log.truncate_after(Some(20)).unwrap();
    assert_eq!(reader.durable_index(), Some(20));
    append(&mut log, 21, 2, &[1000; 10]);
    assert_eq!(reader.durable_index(), Some(20), "the new term-2 records are not synced yet");
    reader.sync_through(25).unwrap();
    assert_eq!(reader.durable_index(), Some(25));
}

#[test]
fn a_reopened_log_is_durable_through_its_last_record_or_its_purge_point() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = quiet_async(dir.path());
        append(&mut log, 0, 1, &[100; 10]);
    }
    let log = CommitLog::open(config(dir.path(), Durability::Async), None).unwrap();
    assert_eq!(log.reader().durable_index(), Some(9));
    drop(log);
    let mut log = CommitLog::open(config(dir.path(), Durability::Async), None).unwrap();
    log.purge(30).unwrap();
    assert_eq!(log.reader().durable_index(), Some(30), "a recorded purge point counts as durable");
    drop(log);
    let log = CommitLog::open(config(dir.path(), Durability::Async), Some(30)).unwrap();
    assert_eq!(log.reader().durable_index(), Some(30));
}

#[test]
fn sync_through_from_another_thread_never_runs_ahead_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = quiet_async(dir.path());
    let reader = log.reader();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = {
        let (reader, stop) = (reader.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                reader.sync_through(u64::MAX).unwrap();
                let durable = reader.durable_index();
                let last = reader.bounds().last.map(|m| m.index);
                assert!(durable <= last, "durable index {durable:?} past the last record {last:?}");
            }
        })
    };
    for i in 0..60 {
        append(&mut log, i * 2, 1, &[40_000; 2]);
    }
    stop.store(true, Ordering::SeqCst);
    syncer.join().unwrap();
    reader.sync_through(119).unwrap();
    assert_eq!(reader.durable_index(), Some(119));
}

#[test]
fn a_read_that_meets_damage_keeps_it_for_the_repair() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    append(&mut log, 0, 1, &[100_000; 30]);
    flip_byte_of(dir.path(), &log, 7);
    assert!(log.damage().is_empty());
    assert!(matches!(log.reader().read(7), Err(StoreError::Damaged { index: 7, .. })));
    let damage = log.damage();
    assert_eq!((damage[0].first_index, damage[0].end_index), (7, 8), "kept by the read");
    assert_eq!(damage[0].anchor.map(|a| a.index), Some(8));
    assert_eq!(log.reader().scrub_next(None).map(|(_, _, d)| d.len()), Some(0));
    log.fill(7, originals(7, 8, 100_000)).unwrap();
    assert_eq!(log.reader().read(7).unwrap().unwrap().payload, payload(7, 100_000));
}

#[test]
fn damage_in_a_sealed_segment_is_found_by_reading_what_raft_will_apply() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = open(dir.path());
        append(&mut log, 0, 1, &[100_000; 30]);
        flip_byte_of(dir.path(), &log, 5);
    }
    // Recovery checks a sealed segment by its first and last records only.
    let log = open(dir.path());
    assert!(log.damage().is_empty());
    log.reader().check_readable(3);
    let damage = log.damage();
    assert_eq!((damage[0].first_index, damage[0].end_index), (5, 6));
}

#[test]
fn damage_among_purged_records_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    append(&mut log, 0, 1, &[100_000; 30]);
    flip_byte_of(dir.path(), &log, 2);
    assert!(log.reader().read(2).is_err());
    assert_eq!(log.damage().len(), 1);
    log.purge(15).unwrap();
    assert!(log.damage().is_empty(), "nothing left to fill: the records are gone");
}
