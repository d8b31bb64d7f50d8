//! A crash at every step of a checkpoint, a journal rewrite, a snapshot build and a snapshot
//! install recovers, after the log is replayed, to exactly the state of a replica that never
//! crashed: the same tables (digest) and the same messages at the same queue offsets.
//!
//! Each crash point is armed with `return`: the operation stops right there with an error, the
//! test drops every handle — what a process crash leaves, since completed writes stay in the page
//! cache — and reopens the directory as a restarting node would. Run with
//! `cargo test -p rockraft --features failpoints --test broker_crash_points`.
#![cfg(feature = "failpoints")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use openraft::RaftSnapshotBuilder;
use openraft::storage::RaftStateMachine;
use prost::Message;
use rockraft::broker::MatchAll;
use rockraft::broker::group::GroupConfig;
use rockraft::broker::lite::{LiteActor, LiteBinding, LiteCommand, LiteModel, LiteRequest, SyncAction};
use rockraft::broker::pop::{ChannelId, ConsumeCommand, Receipt};
use rockraft::broker::{AdminCommand, Broker, BrokerOptions, Command, LogPosition, PopRequest};
use rockraft::raft::StateMachine;
use rockraft::store::{CommitLog, LogConfig, RecordMeta};
use rockraft_proto::rockraft::{SendBatch, StoredMessage};

/// One node's storage: its log, its broker, and the snapshot file the Raft layer keeps.
struct Replica {
    dir: PathBuf,
    log: CommitLog,
    broker: Broker,
    next: u64,
}

fn options(dir: &Path) -> BrokerOptions {
    BrokerOptions {
        dir: dir.join("broker"),
        cq_records_per_file: 4,
        message_index_entries_per_file: 8,
        checkpoint_interval: Duration::from_secs(3600),
        partition: rockraft::broker::position::PartitionId::FIRST,
        holds_metadata: true,
    }
}

impl Replica {
    fn open(dir: &Path) -> Replica {
        let mut config = LogConfig::new(dir.join("log"));
        config.segment_size = 1 << 20;
        let log = CommitLog::open(config, None).expect("open log");
        // sled's threads may still hold the lock of a handle this process just dropped.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let broker = loop {
            match Broker::open(options(dir), log.reader()) {
                Ok(b) => break b,
                Err(e) if e.to_string().contains("lock") && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("opening the broker: {e}"),
            }
        };
        let next = log.bounds().next_index();
        Replica { dir: dir.to_path_buf(), log, broker, next }
    }

    /// What a restart does: reopen everything, finish an interrupted install, and re-apply the
    /// log after the last checkpoint (as openraft does on start).
    async fn restart(self) -> Replica {
        let dir = self.dir.clone();
        drop(self);
        let r = Replica::open(&dir);
        StateMachine::open(r.broker.clone(), r.log.reader(), dir.join("snapshot.json")).expect("open state machine");
        let from = r.broker.last_applied().map_or(0, |l| l.index + 1);
        r.replay(&r.log.reader(), from, r.next);
        r
    }

    /// Reopens from disk only: what the last checkpoint holds.
    fn restart_without_replay(self) -> Replica {
        let dir = self.dir.clone();
        drop(self);
        Replica::open(&dir)
    }

    fn state_machine(&self) -> StateMachine {
        StateMachine::open(self.broker.clone(), self.log.reader(), self.dir.join("snapshot.json")).unwrap()
    }

    /// Commits `command`; a metadata change is followed by its placement, as the leader does.
    fn commit(&mut self, command: &Command) {
        self.commit_one(command);
        if command.needs_placement() {
            let placement = self.broker.placement();
            if !placement.changes.is_empty() {
                self.commit_one(&Command::Place(placement));
            }
        }
    }

    fn commit_one(&mut self, command: &Command) {
        let bytes = command.encode();
        let meta = RecordMeta { term: 1, index: self.next, leader: 1, kind: rockraft::store::record::KIND_COMMAND };
        self.log.append(vec![(meta, bytes.clone())], Box::new(|r| r.expect("append"))).unwrap();
        self.broker.apply(LogPosition::from(&meta), bytes).unwrap();
        self.next += 1;
    }

    /// Applies `from..to` of `log` (its own, or a leader's it is catching up from).
    fn replay(&self, log: &rockraft::store::LogReader, from: u64, to: u64) {
        for index in from..to {
            let record = log.read(index).unwrap().expect("entry present");
            self.broker.apply(LogPosition::from(&record.meta), record.payload).unwrap();
        }
    }

    /// Appends the leader's entries `from..to` to this replica's log and applies them.
    fn follow(&mut self, leader: &Replica, from: u64, to: u64) {
        let log = leader.log.reader();
        for index in from..to {
            let record = log.read(index).unwrap().unwrap();
            self.log.append(vec![(record.meta, record.payload.clone())], Box::new(|r| r.expect("append"))).unwrap();
            self.broker.apply(LogPosition::from(&record.meta), record.payload).unwrap();
        }
        self.next = to;
    }
}

fn send(topic: &str, queue_id: u32, at_ms: i64, ids: &[String]) -> Command {
    let messages = ids
        .iter()
        .map(|id| {
            let m = StoredMessage {
                message_id: id.clone(),
                tag: "T".into(),
                body: Bytes::from(id.clone()),
                ..Default::default()
            };
            Bytes::from(m.encode_to_vec())
        })
        .collect();
    Command::Send(SendBatch {
        topic: topic.into(),
        queue_id,
        store_timestamp_ms: at_ms,
        clock_ms: at_ms,
        messages,
        queue_ids: vec![],
    })
}

/// Delayed messages due `delays_ms` after `at_ms`, or (no delays) one transactional half.
fn send_held(topic: &str, at_ms: i64, id: &str, delays_ms: &[i64]) -> Command {
    let one = |due: i64, n: usize| {
        let m = StoredMessage {
            message_id: format!("{id}-{n}"),
            body: Bytes::from(id.to_string()),
            delivery_timestamp_ms: due,
            transaction_recovery_ms: 2_000,
            ..Default::default()
        };
        Bytes::from(m.encode_to_vec())
    };
    let messages = if delays_ms.is_empty() {
        vec![one(0, 0)]
    } else {
        delays_ms.iter().enumerate().map(|(n, d)| one(at_ms + d, n)).collect()
    };
    Command::Send(SendBatch {
        topic: topic.into(),
        queue_id: 0,
        store_timestamp_ms: at_ms,
        clock_ms: at_ms,
        messages,
        queue_ids: vec![],
    })
}

/// Timers set, fired and recalled, halves stored, checked and resolved: the tables kept on disk.
fn held_workload(r: &mut Replica, round: u64, base: i64) {
    use rockraft::broker::timer::{TimerCommand, parse_recall_handle};
    use rockraft::broker::transaction::{Resolver, TransactionCommand, parse_transaction_id};
    r.commit(&send_held("D", base, &format!("d{round}"), &[5_000, 25_000, 45_000]));
    r.commit(&send_held("X", base, &format!("x{round}"), &[]));
    let now = base + 200;
    let timers = r.broker.due_timers(now, 100).unwrap();
    r.commit(&Command::Timer(TimerCommand::Fire { now_ms: now, timers }));
    // Recall the latest timer of every other round.
    if !round.is_multiple_of(2)
        && let Some(t) = r.broker.held(true, Some("D"), false, None, 100).unwrap().last()
    {
        let (_, timer) = parse_recall_handle(&t.handle).unwrap();
        r.commit(&Command::Timer(TimerCommand::Recall { now_ms: now, topic: "D".into(), timer }));
    }
    let due = r.broker.due_checks(now, 100).unwrap();
    let halves = due.iter().map(|(p, h)| (*p, h.checks, now + 3_000)).collect();
    r.commit(&Command::Transaction(TransactionCommand::Checked { now_ms: now, halves, asked: true }));
    // Resolve the oldest open half: commit or roll back, by turns.
    if let Some(h) = r.broker.held(false, Some("X"), false, None, 1).unwrap().first() {
        let command = TransactionCommand::Resolve {
            now_ms: now,
            topic: "X".into(),
            position: parse_transaction_id(&h.handle).unwrap().1,
            message_id: h.message.message_id.clone(),
            commit: round.is_multiple_of(2),
            by: Resolver::Producer,
        };
        r.commit(&Command::Transaction(command));
    }
    // The workload does reach every path: timers fired, halves committed, timers still pending.
    assert!(r.broker.queue_status("X")[0].next > 0, "a half was committed");
    assert!(round == 0 || r.broker.queue_status("D")[0].next > 0, "timers fired");
    assert!(!r.broker.held(true, Some("D"), false, None, 1).unwrap().is_empty(), "timers are pending");
}

/// A workload touching every kind of state: topics, queues, retries, groups, pops, acks, timers
/// and transactional halves.
fn workload(r: &mut Replica, round: u64) {
    if round == 0 {
        for (name, kind) in [("D", rockraft::broker::TopicKind::Delay), ("X", rockraft::broker::TopicKind::Transaction)]
        {
            let config = rockraft::broker::TopicConfig::new(name, 1, kind);
            r.commit(&Command::Admin(AdminCommand::CreateTopic(config)));
        }
        r.commit(&Command::Admin(AdminCommand::CreateTopic(rockraft::broker::TopicConfig::new(
            "T",
            2,
            rockraft::broker::TopicKind::Normal,
        ))));
        let g = GroupConfig { name: "g".into(), fifo: false, max_attempts: 3, priority_factor: 100, lite: None };
        r.commit(&Command::Admin(AdminCommand::CreateGroup(g)));
        let mut lite = rockraft::broker::TopicConfig::new("L", 2, rockraft::broker::TopicKind::Lite);
        lite.lite_ttl_minutes = 1;
        r.commit(&Command::Admin(AdminCommand::CreateTopic(lite)));
        let binding = LiteBinding { topic: "L".into(), model: LiteModel::Exclusive, quota: 8 };
        let g =
            GroupConfig { name: "lg".into(), fifo: false, max_attempts: 3, priority_factor: 100, lite: Some(binding) };
        r.commit(&Command::Admin(AdminCommand::CreateGroup(g)));
    }
    let base = 1_000_000 + round as i64 * 10_000;
    held_workload(r, round, base);
    lite_workload(r, round, base);
    for i in 0..6u64 {
        // Every id is sent twice: the retry must be stored once, on every replica.
        let ids = vec![format!("m{round}-{i}"), format!("m{round}-{}", i.saturating_sub(1))];
        let mut command = send("T", (i % 2) as u32, base + i as i64, &ids);
        // Some entries span both queues, as the leader batches concurrent sends to a topic.
        if let Command::Send(batch) = &mut command
            && i % 3 == 2
        {
            batch.queue_ids = vec![1, 0];
        }
        r.commit(&command);
    }
    let g = r.broker.group("g").unwrap();
    let t = r.broker.topic("T").unwrap();
    let request = PopRequest {
        group: &g,
        topic: &t,
        filter: &MatchAll,
        max_messages: 4,
        invisible_ms: 60_000,
        now_ms: base + 100,
        first_queue: round as u32,
        by_priority: false,
    };
    let plan = r.broker.plan_pop(&request).unwrap();
    let pop = plan.pop.clone();
    r.commit(&Command::Consume(ConsumeCommand::Pop(plan.pop)));
    let index = r.next - 1;
    if let Some(take) = pop.takes.first()
        && let Some((offset, _)) = take.deliver.first()
    {
        let receipt = Receipt {
            group: "g".into(),
            topic: "T".into(),
            channel: ChannelId::Queue(take.queue_id),
            offset: *offset,
            generation: index,
        };
        r.commit(&Command::Consume(ConsumeCommand::Ack(receipt)));
    }
}

/// Lite topics: sends that create lite topics, subscriptions (an exclusive takeover), a lite pop,
/// an ack, and the expiry of the lite topics idle for a minute.
fn lite_workload(r: &mut Replica, round: u64, base: i64) {
    let lites = [format!("l{}", round % 3), format!("l{round}")];
    let messages = lites
        .iter()
        .chain(&lites)
        .enumerate()
        .map(|(i, lite)| {
            let m = StoredMessage {
                message_id: format!("lite-{round}-{i}"),
                body: Bytes::from(format!("lite body {round} {i}")),
                lite_topic: lite.clone(),
                ..Default::default()
            };
            m.encode_to_vec().into()
        })
        .collect();
    let batch = SendBatch {
        topic: "L".into(),
        queue_id: 0,
        store_timestamp_ms: base,
        clock_ms: base,
        messages,
        queue_ids: vec![],
    };
    r.commit(&Command::Send(batch));
    let client = format!("c{}", round % 2);
    let sync = LiteCommand::Sync {
        group: "lg".into(),
        parent: "L".into(),
        client: client.clone(),
        action: if round % 4 == 3 { SyncAction::Replace } else { SyncAction::Add },
        lites: lites.to_vec(),
        now_ms: base,
        // Owned, so the owner goes through every crash point too.
        by: LiteActor::User("app".into()),
    };
    r.commit(&Command::Lite(sync));
    let g = r.broker.group("lg").unwrap();
    let request = LiteRequest {
        group: &g,
        parent: "L",
        client: &client,
        by: &LiteActor::User("app".into()),
        max_messages: 3,
        invisible_ms: 60_000,
        now_ms: base + 100,
        first: round as usize,
        scan_limit: usize::MAX,
    };
    let plan = r.broker.plan_lite_pop(&request).unwrap();
    assert!(plan.delivers(), "round {round}: the new lite messages are delivered");
    r.commit(&Command::Lite(LiteCommand::Pop(plan.pop)));
    let index = r.next - 1;
    if let Some(take) = r.broker.lite_topics("L", Some("lg"), "", 100).unwrap().iter().find(|t| t.inflight > 0) {
        let id = r.broker.lite_id("L", &take.lite).unwrap();
        let channel = ChannelId::Lite(id);
        let receipt = Receipt { group: "lg".into(), topic: "L".into(), channel, offset: 0, generation: index };
        r.commit(&Command::Consume(ConsumeCommand::Ack(receipt)));
    }
    if round % 3 == 2 {
        let before_ms = base - 60_000;
        let (lites, _) = r.broker.expired_lite_topics("L", "", before_ms, 100).unwrap();
        r.commit(&Command::Lite(LiteCommand::Expire { parent: "L".into(), before_ms, lites }));
    }
}

/// Same tables, same messages at the same offsets.
fn assert_converged(a: &Broker, b: &Broker) {
    assert_eq!(a.digest().unwrap(), b.digest().unwrap(), "replicated state differs");
    for t in a.topics() {
        for q in a.queue_status(&t.name) {
            for offset in q.start..q.next {
                assert_eq!(
                    a.queue_record(&t.name, q.queue_id, offset).unwrap(),
                    b.queue_record(&t.name, q.queue_id, offset).unwrap(),
                    "{} queue {} offset {offset}",
                    t.name,
                    q.queue_id
                );
                let (x, y) =
                    (a.read(&t.name, q.queue_id, offset).unwrap(), b.read(&t.name, q.queue_id, offset).unwrap());
                assert_eq!(x.map(|e| e.message), y.map(|e| e.message));
            }
        }
    }
    let lites = |b: &Broker| format!("{:?}", b.lite_topics("L", Some("lg"), "", 1000).unwrap());
    assert_eq!(lites(a), lites(b), "lite topics differ");
}

const CHECKPOINT_POINTS: [&str; 7] = [
    "checkpoint::after_capture",
    "checkpoint::after_log_sync",
    "checkpoint::after_queue_sync",
    "journal::append::after_write",
    "checkpoint::after_journal",
    "checkpoint::after_batch",
    "checkpoint::after_flush",
];

#[tokio::test]
async fn a_crash_at_any_step_of_a_checkpoint_recovers_to_the_replicas_state() {
    let _scenario = fail::FailScenario::setup();
    for point in CHECKPOINT_POINTS {
        let (rd, cd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut reference = Replica::open(rd.path());
        let mut crashed = Replica::open(cd.path());
        for r in [&mut reference, &mut crashed] {
            workload(r, 0);
        }
        crashed.broker.checkpoint().unwrap();
        for r in [&mut reference, &mut crashed] {
            workload(r, 1);
        }
        fail::cfg(point, "return").unwrap();
        assert!(crashed.broker.checkpoint().is_err(), "{point} was not reached");
        fail::remove(point);
        let mut crashed = crashed.restart().await;
        assert_converged(&reference.broker, &crashed.broker);
        // It carries on like the others, and its next checkpoint holds.
        for r in [&mut reference, &mut crashed] {
            workload(r, 2);
        }
        crashed.broker.checkpoint().unwrap();
        let crashed = crashed.restart().await;
        assert_converged(&reference.broker, &crashed.broker);
    }
}

#[tokio::test]
async fn a_crash_while_the_dedupe_journal_is_rewritten_recovers_to_the_replicas_state() {
    let _scenario = fail::FailScenario::setup();
    for point in ["journal::rewrite::after_write", "journal::rewrite::before_removing_old"] {
        let (rd, cd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut reference = Replica::open(rd.path());
        let mut crashed = Replica::open(cd.path());
        for r in [&mut reference, &mut crashed] {
            workload(r, 0);
        }
        // A failed checkpoint leaves the journal's tail unknown: the next one rewrites it.
        fail::cfg("checkpoint::after_journal", "return").unwrap();
        assert!(crashed.broker.checkpoint().is_err());
        fail::remove("checkpoint::after_journal");
        for r in [&mut reference, &mut crashed] {
            workload(r, 1);
        }
        fail::cfg(point, "return").unwrap();
        assert!(crashed.broker.checkpoint().is_err(), "{point} was not reached");
        fail::remove(point);
        let crashed = crashed.restart().await;
        assert_converged(&reference.broker, &crashed.broker);
    }
}

#[tokio::test]
async fn a_crash_while_a_snapshot_is_built_recovers_to_the_replicas_state() {
    let _scenario = fail::FailScenario::setup();
    for point in ["snapshot::build::after_replay", "snapshot::build::after_save", "snapshot::forget::after_purge"] {
        let (rd, cd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut reference = Replica::open(rd.path());
        let mut crashed = Replica::open(cd.path());
        for round in 0..3 {
            for r in [&mut reference, &mut crashed] {
                workload(r, round);
            }
        }
        let at = crashed.next - 4;
        for r in [&reference, &crashed] {
            r.broker.set_snapshot_target(at);
        }
        reference.state_machine().build_snapshot().await.unwrap();
        fail::cfg(point, "return").unwrap();
        assert!(crashed.state_machine().build_snapshot().await.is_err(), "{point} was not reached");
        fail::remove(point);
        let crashed = crashed.restart().await;
        // A snapshot that was saved is in force after the restart; one that was not is rebuilt.
        crashed.broker.set_snapshot_target(at);
        crashed.state_machine().build_snapshot().await.unwrap();
        assert_converged(&reference.broker, &crashed.broker);
    }
}

#[tokio::test]
async fn a_crash_while_a_snapshot_is_installed_recovers_to_the_replicas_state() {
    let _scenario = fail::FailScenario::setup();
    for point in [
        "snapshot::install::after_save",
        "snapshot::install::after_queues",
        "snapshot::install::after_journal",
        "snapshot::install::after_batch",
    ] {
        let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut leader = Replica::open(ld.path());
        let mut follower = Replica::open(fd.path());
        workload(&mut leader, 0);
        // The follower had the start of the log, then fell behind the leader's purge point.
        follower.follow(&leader, 0, 3);
        follower.broker.checkpoint().unwrap();
        for round in 1..3 {
            workload(&mut leader, round);
        }
        let at = leader.next - 5;
        leader.broker.set_snapshot_target(at);
        let snapshot = leader.state_machine().build_snapshot().await.unwrap();
        fail::cfg(point, "return").unwrap();
        let installed = follower.state_machine().install_snapshot(&snapshot.meta, snapshot.snapshot.clone()).await;
        assert!(installed.is_err(), "{point} was not reached");
        fail::remove(point);
        let mut follower = follower.restart().await;
        // Every install step comes after the snapshot file is saved: the restart finishes it.
        assert_eq!(follower.broker.last_applied().map(|l| l.index), Some(at), "{point}: install not finished");
        // As openraft does after an install: the log below the snapshot goes, the leader's follows.
        follower.log.purge(at).unwrap();
        follower.follow(&leader, at + 1, leader.next);
        assert_converged(&leader.broker, &follower.broker);
    }
}

#[tokio::test]
async fn a_checkpoint_that_fails_part_way_leaves_its_changes_to_the_next_one() {
    let _scenario = fail::FailScenario::setup();
    for point in CHECKPOINT_POINTS {
        let (rd, cd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut reference = Replica::open(rd.path());
        let mut node = Replica::open(cd.path());
        for r in [&mut reference, &mut node] {
            workload(r, 0);
        }
        // The disk refuses a write (ENOSPC, EIO) part way; the node carries on.
        fail::cfg(point, "return").unwrap();
        assert!(node.broker.checkpoint().is_err(), "{point} was not reached");
        fail::remove(point);
        for r in [&mut reference, &mut node] {
            workload(r, 1);
        }
        node.broker.checkpoint().unwrap();
        // Everything is in that checkpoint: a restart has nothing to replay.
        let applied = node.broker.last_applied();
        let node = node.restart_without_replay();
        assert_eq!(node.broker.last_applied(), applied, "{point}");
        assert_converged(&reference.broker, &node.broker);
    }
}

/// openraft builds snapshots in their own task, beside the installs of the state machine's: a
/// build that began before an install must not put its older snapshot back over the installed
/// one (the node's next build would then need log entries the install purged, and stop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_build_racing_an_install_never_replaces_the_newer_snapshot() {
    let _scenario = fail::FailScenario::setup();
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut leader = Replica::open(ld.path());
    let mut follower = Replica::open(fd.path());
    workload(&mut leader, 0);
    follower.follow(&leader, 0, leader.next);
    for round in 1..3 {
        workload(&mut leader, round);
    }
    let newer = leader.next - 2;
    leader.broker.set_snapshot_target(newer);
    let snapshot = leader.state_machine().build_snapshot().await.unwrap();

    // The follower starts a build of its own at an older point, and it stalls after its replay.
    let older = follower.next - 3;
    follower.broker.set_snapshot_target(older);
    // The follower's build stops right after its replay, until the test lets it go on.
    let (reached_tx, reached_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (reached_tx, go_rx) = (std::sync::Mutex::new(reached_tx), std::sync::Mutex::new(go_rx));
    fail::cfg_callback("snapshot::build::after_replay", move || {
        let _ = reached_tx.lock().unwrap().send(());
        let _ = go_rx.lock().unwrap().recv();
    })
    .unwrap();
    // As openraft runs them: the builder is the state machine's own, cloned.
    let mut installer = follower.state_machine();
    let mut builder = installer.get_snapshot_builder().await;
    let build = tokio::spawn(async move { builder.build_snapshot().await });
    tokio::task::spawn_blocking(move || reached_rx.recv()).await.unwrap().unwrap();
    let meta = snapshot.meta.clone();
    let mut install = tokio::spawn(async move { installer.install_snapshot(&meta, snapshot.snapshot).await });
    // Give an install that does not wait for the build the time to finish first (it must wait).
    let early = tokio::time::timeout(Duration::from_millis(300), &mut install).await;
    go_tx.send(()).unwrap();
    fail::remove("snapshot::build::after_replay");
    if let Ok(done) = early {
        done.unwrap().unwrap();
    } else {
        install.await.unwrap().unwrap();
    }
    build.await.unwrap().unwrap();

    let current = follower.state_machine().get_current_snapshot().await.unwrap().expect("a snapshot");
    assert_eq!(current.meta.last_log_id.map(|l| l.index), Some(newer), "the installed snapshot stands");
    assert_eq!(follower.broker.last_applied().map(|l| l.index), Some(newer));
}
