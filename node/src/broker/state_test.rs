//! Apply determinism, dedupe, rejection and restart of the broker state.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rockraft_proto::rockraft::{SendBatch, StoredMessage};

use crate::broker::{AdminCommand, Broker, BrokerOptions, Command, Reply, TopicConfig, TopicKind};
use crate::store::{CommitLog, LogConfig, RecordMeta};

pub(crate) struct Node {
    pub log: CommitLog,
    pub broker: Broker,
    pub next_index: u64,
    /// The term entries are committed in (a new term: another leader, maybe another clock).
    pub term: u64,
}

/// For `Broker::state_at` over a log without membership records (the broker's own tests).
pub(crate) fn no_membership(_: u8, _: bytes::Bytes) -> std::io::Result<String> {
    Err(std::io::Error::other("no membership records in these tests"))
}

pub(crate) fn lid(index: u64) -> crate::broker::LogPosition {
    crate::broker::LogPosition { term: 1, leader: 1, index }
}

fn options(dir: &Path) -> BrokerOptions {
    BrokerOptions {
        dir: dir.join("broker"),
        cq_records_per_file: 8,
        message_index_entries_per_file: 16,
        checkpoint_interval: Duration::from_secs(3600),
        partition: crate::broker::position::PartitionId::FIRST,
        holds_metadata: true,
    }
}

/// Opens a broker, waiting out sled's file lock while a handle on the same directory that this
/// process just dropped (a simulated restart) is still being released by sled's threads.
pub(crate) fn open_broker(options: BrokerOptions, log: crate::store::LogReader) -> Broker {
    while_locked(|| Broker::open(options.clone(), log.clone())).unwrap_or_else(|e| panic!("opening the broker: {e}"))
}

/// `open`, tried again while sled's file lock is still held by a handle just dropped.
fn while_locked<T, E: std::fmt::Display>(mut open: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match open() {
            Err(e) if e.to_string().contains("lock") && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            done => return done,
        }
    }
}

pub(crate) fn node(dir: &Path) -> Node {
    let mut config = LogConfig::new(dir.join("log"));
    config.segment_size = 1 << 20;
    let log = CommitLog::open(config, None).unwrap();
    let broker = open_broker(options(dir), log.reader());
    let next_index = log.bounds().next_index();
    Node { log, broker, next_index, term: 1 }
}

impl Node {
    /// Appends `command` to the log as the next entry and applies it, as a committed entry would
    /// be; a metadata change is followed by its placement, as the leader proposes it.
    pub fn commit(&mut self, command: &Command) -> Reply {
        let reply = self.commit_only(command);
        if command.needs_placement() {
            let placement = self.broker.placement();
            if !placement.changes.is_empty() {
                self.commit_only(&Command::Place(placement));
            }
        }
        reply
    }

    /// [`Node::commit`] without the placement that follows a metadata change (a leader that
    /// failed between the two).
    pub fn commit_only(&mut self, command: &Command) -> Reply {
        let bytes = command.encode();
        let index = self.next_index;
        let meta = RecordMeta { term: self.term, index, leader: 1, kind: 2 };
        self.log.append(vec![(meta, bytes.clone())], Box::new(|r| r.unwrap())).unwrap();
        self.next_index += 1;
        self.broker.apply(crate::broker::LogPosition::from(&meta), bytes).unwrap()
    }

    /// Appends `payload` as the next entry, as is, and applies it.
    pub fn commit_bytes(&mut self, payload: Bytes) -> Result<Reply, crate::broker::BrokerError> {
        let index = self.next_index;
        let meta = RecordMeta { term: self.term, index, leader: 1, kind: 2 };
        self.log.append(vec![(meta, payload.clone())], Box::new(|r| r.unwrap())).unwrap();
        self.next_index += 1;
        self.broker.apply(crate::broker::LogPosition::from(&meta), payload)
    }

    /// A restart: the broker reopens from its last checkpoint in `dir` and replays the log after it.
    pub fn restart(self, dir: &Path) -> Node {
        let Node { log, broker, next_index, term } = self;
        drop(broker);
        let broker = open_broker(options(dir), log.reader());
        let from = broker.last_applied().map_or(log.bounds().first_index, |p| p.index + 1);
        for index in from..next_index {
            let record = log.reader().read(index).unwrap().unwrap();
            broker.apply(crate::broker::LogPosition::from(&record.meta), record.payload).unwrap();
        }
        Node { log, broker, next_index, term }
    }
}

pub(crate) fn create(name: &str, queues: u32) -> Command {
    Command::Admin(AdminCommand::CreateTopic(TopicConfig::new(name, queues, TopicKind::Normal)))
}

pub(crate) fn send(topic: &str, queue_id: u32, at_ms: i64, ids: &[&str]) -> Command {
    let messages = ids
        .iter()
        .map(|id| {
            let m = StoredMessage {
                message_id: id.to_string(),
                tag: "TagA".into(),
                body: Bytes::from(format!("body of {id}")),
                ..Default::default()
            };
            m.encode_to_vec().into()
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

fn offsets(reply: &Reply) -> Vec<(u64, bool)> {
    match reply {
        Reply::Sent(o) => o.iter().map(|o| (o.offset, o.duplicate)).collect(),
        other => panic!("not a send reply: {other:?}"),
    }
}

#[test]
fn sends_get_dense_offsets_and_read_back_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    assert_eq!(n.commit(&create("T", 2)), Reply::Applied);
    assert_eq!(offsets(&n.commit(&send("T", 1, 1000, &["a", "b"]))), vec![(0, false), (1, false)]);
    assert_eq!(offsets(&n.commit(&send("T", 1, 1001, &["c"]))), vec![(2, false)]);
    assert_eq!(offsets(&n.commit(&send("T", 0, 1002, &["d"]))), vec![(0, false)]);
    let e = n.broker.read("T", 1, 2).unwrap().unwrap();
    assert_eq!(e.message.message_id, "c");
    assert_eq!(e.message.body, Bytes::from("body of c"));
    assert_eq!(e.store_timestamp_ms, 1001);
    assert_eq!(n.broker.read("T", 1, 3).unwrap(), None);
    assert_eq!(n.broker.find("b").unwrap().unwrap().offset, 1);
}

/// A send of `ids` to the queues `queues` (one per message) of `topic`, as one entry: the
/// leader's form for concurrent sends to several queues.
fn send_across(topic: &str, at_ms: i64, ids: &[&str], queues: &[u32]) -> Command {
    let Command::Send(mut batch) = send(topic, 0, at_ms, ids) else { unreachable!() };
    batch.queue_ids = queues.to_vec();
    Command::Send(batch)
}

fn queues_and_offsets(reply: &Reply) -> Vec<(u32, u64)> {
    match reply {
        Reply::Sent(o) => o.iter().map(|o| (o.queue_id, o.offset)).collect(),
        other => panic!("not a send reply: {other:?}"),
    }
}

#[test]
fn one_entry_across_queues_gives_each_queue_its_own_dense_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 4));
    n.broker.checkpoint().unwrap();
    n.commit(&send("T", 2, 1000, &["a"]));
    let reply = n.commit(&send_across("T", 1001, &["b", "c", "d", "e", "f"], &[2, 0, 2, 3, 0]));
    assert_eq!(queues_and_offsets(&reply), [(2, 1), (0, 0), (2, 2), (3, 0), (0, 1)]);
    for (queue, offset, id) in [(2, 1, "b"), (0, 0, "c"), (2, 2, "d"), (3, 0, "e"), (0, 1, "f")] {
        let e = n.broker.read("T", queue, offset).unwrap().unwrap();
        assert_eq!((e.message.message_id.as_str(), e.queue_id, e.store_timestamp_ms), (id, queue, 1001));
        assert_eq!(n.broker.find(id).unwrap().map(|e| (e.queue_id, e.offset)), Some((queue, offset)));
    }
    let next: Vec<u64> = n.broker.queue_status("T").iter().map(|q| q.next).collect();
    assert_eq!(next, [2, 0, 3, 1]);
    // A retry of some of them, again across queues: the first results, as duplicates.
    let retry = n.commit(&send_across("T", 1002, &["d", "g"], &[1, 1]));
    assert_eq!(queues_and_offsets(&retry), [(2, 2), (1, 0)]);
    // Replayed after a restart (the entries came after the checkpoint): the same state.
    let digest = n.broker.live_digest().unwrap();
    let n = n.restart(dir.path());
    assert_eq!(n.broker.live_digest().unwrap(), digest);
    assert_eq!(n.broker.find("e").unwrap().map(|e| (e.queue_id, e.offset)), Some((3, 0)));
    let next: Vec<u64> = n.broker.queue_status("T").iter().map(|q| q.next).collect();
    assert_eq!(next, [2, 1, 3, 1]);
}

#[test]
fn an_entry_naming_a_missing_queue_or_too_few_queues_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 2));
    assert!(matches!(n.commit(&send_across("T", 1000, &["a", "b"], &[0, 2])), Reply::Rejected(_)));
    assert!(matches!(n.commit(&send_across("T", 1000, &["a", "b"], &[1])), Reply::Rejected(_)));
    assert!(matches!(n.commit(&send_across("T", 1000, &["a"], &[1, 1])), Reply::Rejected(_)));
    let next: Vec<u64> = n.broker.queue_status("T").iter().map(|q| q.next).collect();
    assert_eq!(next, [0, 0], "nothing stored");
    assert_eq!(n.broker.find("a").unwrap(), None);
    // Nor remembered: the same ids sent again are new.
    let reply = n.commit(&send_across("T", 1001, &["a", "b"], &[1, 0]));
    assert_eq!(offsets(&reply), [(0, false), (0, false)]);
}

#[test]
fn a_retried_message_id_within_the_window_returns_the_original_result() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    n.commit(&send("T", 0, 1_000, &["a", "b"]));
    assert_eq!(offsets(&n.commit(&send("T", 0, 60_000, &["b", "c"]))), vec![(1, true), (2, false)]);
    // Past the 120 s window the id is new again (RocketMQ would store every retry).
    assert_eq!(offsets(&n.commit(&send("T", 0, 200_000, &["a"]))), vec![(3, false)]);
    assert_eq!(n.broker.queue_status("T")[0].next, 4);
}

/// `send` with every message sent by `sender`.
fn send_by(sender: &str, topic: &str, at_ms: i64, ids: &[&str]) -> Command {
    let Command::Send(mut batch) = send(topic, 0, at_ms, ids) else { unreachable!() };
    for raw in &mut batch.messages {
        let mut m = StoredMessage::decode(raw.clone()).unwrap();
        m.sender = sender.into();
        *raw = m.encode_to_vec().into();
    }
    Command::Send(batch)
}

/// With authentication on, a message id is one user's: another user's send of it is a message of
/// its own (stored, and answered with its own offset or handle), never a retry of the first, so
/// it is never handed the first message's transaction id or recall handle. The same user's retry
/// is still a duplicate, also in the stored-results shortcut.
#[test]
fn a_message_id_reused_by_another_user_is_not_taken_for_a_retry() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    assert_eq!(offsets(&n.commit(&send_by("alice", "T", 1_000, &["a"]))), vec![(0, false)]);
    assert_eq!(offsets(&n.commit(&send_by("mallory", "T", 2_000, &["a"]))), vec![(1, false)]);
    assert_eq!(offsets(&n.commit(&send_by("alice", "T", 3_000, &["a"]))), vec![(0, true)]);
    assert_eq!(offsets(&n.commit(&send_by("mallory", "T", 4_000, &["a"]))), vec![(1, true)]);
    // Unsigned sends (authentication off) share one space, as before.
    assert_eq!(offsets(&n.commit(&send("T", 0, 5_000, &["a"]))), vec![(2, false)]);
    assert_eq!(offsets(&n.commit(&send("T", 0, 6_000, &["a"]))), vec![(2, true)]);
    let Command::Send(retry) = send_by("mallory", "T", 7_000, &["a"]) else { unreachable!() };
    assert_eq!(n.broker.stored_sends(&retry).unwrap()[0].offset, 1);
    let Command::Send(other) = send_by("eve", "T", 7_000, &["a"]) else { unreachable!() };
    assert_eq!(n.broker.stored_sends(&other), None, "eve never sent it");

    // Held messages: another user's half is a half of its own, at its own position.
    n.commit(&Command::Admin(AdminCommand::CreateTopic(TopicConfig::new("X", 1, TopicKind::Transaction))));
    let held = |r: Reply| match r {
        Reply::Sent(o) => (o[0].held, o[0].duplicate),
        other => panic!("{other:?}"),
    };
    let (first, _) = held(n.commit(&send_by("alice", "X", 8_000, &["t"])));
    let (second, duplicate) = held(n.commit(&send_by("mallory", "X", 9_000, &["t"])));
    assert!(!duplicate);
    assert_ne!(first, second, "mallory's half is not alice's");
    assert_eq!(held(n.commit(&send_by("alice", "X", 10_000, &["t"]))), (first, true));
}

#[test]
fn invalid_commands_are_answered_the_same_everywhere_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    assert_eq!(n.commit(&send("missing", 0, 1, &["a"])), Reply::TopicNotFound("missing".into()));
    n.commit(&create("T", 1));
    assert!(matches!(n.commit(&send("T", 5, 1, &["a"])), Reply::Rejected(_)));
    assert!(matches!(n.commit(&create("../evil", 1)), Reply::Rejected(_)));
    assert_eq!(n.commit(&create("T", 3)), Reply::TopicExists("T".into()));
    let garbage = n.broker.apply(lid(99), Bytes::from_static(b"\x01\xff\xff")).unwrap();
    assert!(matches!(garbage, Reply::Rejected(_)));
    assert_eq!(n.broker.queue_status("T")[0].next, 0);
    assert_eq!(n.broker.topics().len(), 1);
}

fn queue_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join("broker/queues")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.strip_prefix(dir).unwrap().display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn replicas_applying_the_same_log_have_identical_queues_and_metadata() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut x, mut y) = (node(a.path()), node(b.path()));
    let mut commands = vec![create("T", 3), create("U", 1)];
    for i in 0..40 {
        let ids: Vec<String> = (0..(i % 4 + 1)).map(|k| format!("m{}", (i * 7 + k) % 50)).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        commands.push(send(
            if i % 5 == 0 { "U" } else { "T" },
            (i % 3) as u32 % if i % 5 == 0 { 1 } else { 3 },
            1000 * i as i64,
            &ids,
        ));
    }
    for c in &commands {
        assert_eq!(x.commit(c), y.commit(c));
    }
    assert_eq!(queue_files(a.path()), queue_files(b.path()));
    assert!(!queue_files(a.path()).is_empty());
    assert_eq!(*x.broker.state(), *y.broker.state());
}

#[test]
fn restart_recovers_the_last_checkpoint_and_replay_reaches_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let commands = [create("T", 1), send("T", 0, 1, &["a"]), send("T", 0, 2, &["b"]), send("T", 0, 3, &["c"])];
    let full;
    {
        let mut n = node(dir.path());
        for c in &commands[..2] {
            n.commit(c);
        }
        n.broker.checkpoint().unwrap();
        for c in &commands[2..] {
            n.commit(c);
        }
        full = n.broker.queue_status("T");
        // No checkpoint: the last two entries are applied again after the restart.
    }
    let mut n = node(dir.path());
    // The topic's creation, its placement and the first send.
    assert_eq!(n.broker.last_applied().map(|l| l.index), Some(2));
    assert_eq!(n.broker.queue_status("T")[0].next, 1);
    let reader = n.log.reader();
    for index in 3..5 {
        let payload = reader.read(index).unwrap().unwrap().payload;
        n.broker.apply(lid(index), payload).unwrap();
    }
    n.next_index = 5;
    assert_eq!(n.broker.queue_status("T"), full);
    assert_eq!(n.broker.read("T", 0, 2).unwrap().unwrap().message.message_id, "c");
}

/// M is stored at T. The leader changes to one whose clock runs 300 s ahead (past the 120 s
/// window), and M's retry reaches it: a duplicate, since the window's clock does not move with a
/// change of leader. Nor does a leader a day ahead expire it for later leaders with the right
/// clock. Time that passes under one leader still ends the window.
#[test]
fn a_leader_whose_clock_runs_ahead_expires_nothing_in_the_dedupe_window() {
    const T: i64 = 1_700_000_000_000;
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    assert_eq!(offsets(&n.commit(&send("T", 0, T, &["m"]))), vec![(0, false)]);
    n.term = 2;
    assert_eq!(offsets(&n.commit(&send("T", 0, T + 300_000, &["m"]))), vec![(0, true)], "a retry at T + 300 s");
    n.term = 3;
    assert_eq!(offsets(&n.commit(&send("T", 0, T + 86_400_000, &["x"]))), vec![(1, false)]);
    n.term = 4;
    assert_eq!(offsets(&n.commit(&send("T", 0, T + 10_000, &["m"]))), vec![(0, true)], "after a day-ahead leader");
    // Under the one leader of term 4, 121 s pass: M is new again.
    assert_eq!(offsets(&n.commit(&send("T", 0, T + 131_000, &["m"]))), vec![(2, false)]);
}

/// Replicas apply the same entries to the same state whatever their configuration files say:
/// the window is a cluster setting, changed through the log. Before the change a 90 s old id is
/// within the default 120 s window; after the change to 60 s it is not, on every replica, and in
/// a replay after a restart.
#[test]
fn the_dedupe_window_is_a_replicated_setting() {
    use crate::broker::settings::SettingsChange;
    const T: i64 = 1_700_000_000_000;
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    n.commit(&send("T", 0, T, &["m"]));
    assert_eq!(offsets(&n.commit(&send("T", 0, T + 90_000, &["m"]))), vec![(0, true)]);
    let sixty = SettingsChange { dedupe_window_secs: Some(60), ..Default::default() };
    assert_eq!(n.commit(&Command::Admin(AdminCommand::Configure(sixty))), Reply::Applied);
    n.commit(&send("T", 0, T + 100_000, &["k"]));
    assert_eq!(offsets(&n.commit(&send("T", 0, T + 190_000, &["k"]))), vec![(2, false)], "90 s > 60 s");
    let refused = SettingsChange { dedupe_window_secs: Some(0), ..Default::default() };
    assert!(matches!(n.commit(&Command::Admin(AdminCommand::Configure(refused))), Reply::Rejected(_)));
    assert_eq!(n.broker.settings().dedupe_window_secs, 60, "a refused change changes nothing");
    let live = n.broker.live_digest().unwrap();

    // Another replica replaying the same log from scratch reaches the same state.
    let other = tempfile::tempdir().unwrap();
    let replica = open_broker(options(other.path()), n.log.reader());
    for index in 0..n.next_index {
        let record = n.log.reader().read(index).unwrap().unwrap();
        replica.apply(crate::broker::LogPosition::from(&record.meta), record.payload).unwrap();
    }
    assert_eq!(replica.live_digest().unwrap(), live);
}

/// A window that ended for many ids at once (a burst, then quiet) is worked off a bounded number
/// of rows per entry, not in one entry that holds apply for seconds; a replica restarted midway,
/// whose expiry order is rebuilt from the table, expires exactly the rows the others do.
#[test]
fn a_window_ending_for_many_ids_at_once_expires_in_bounded_steps_alike_on_every_replica() {
    use crate::broker::partition::MAX_EXPIRED_PER_ENTRY;
    const T: i64 = 1_700_000_000_000;
    const DAY: i64 = 86_400_000;
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    let groups = 3 * MAX_EXPIRED_PER_ENTRY / 256;
    for g in 0..groups {
        let ids: Vec<String> = (0..256).map(|i| format!("g{g}-{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        n.commit(&send("T", 0, T + g as i64, &ids));
    }
    let rows = |n: &Node| n.broker.state().data.dedupe.len();
    let all = groups * 256;
    assert_eq!(rows(&n), all);
    n.commit(&send("T", 0, T + DAY, &["late-1"]));
    assert_eq!(rows(&n), all + 1 - MAX_EXPIRED_PER_ENTRY, "one entry expires a bounded number of rows");
    n.broker.checkpoint().unwrap();
    drop(n);

    // Restarted: the expiry order comes from the table now. It goes on exactly like a replica
    // that never stopped.
    let mut n = node(dir.path());
    n.commit(&send("T", 0, T + DAY + 1, &["late-2"]));
    n.commit(&send("T", 0, T + DAY + 2, &["late-3"]));
    assert_eq!(rows(&n), 3, "drained: only the late ids are left");
    let other = tempfile::tempdir().unwrap();
    let replica = open_broker(options(other.path()), n.log.reader());
    for index in 0..n.next_index {
        let record = n.log.reader().read(index).unwrap().unwrap();
        replica.apply(crate::broker::LogPosition::from(&record.meta), record.payload).unwrap();
    }
    assert_eq!(replica.live_digest().unwrap(), n.broker.live_digest().unwrap());
}

#[test]
fn the_dedupe_window_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut n = node(dir.path());
        n.commit(&create("T", 1));
        n.commit(&send("T", 0, 1_000, &["a", "b"]));
        n.broker.checkpoint().unwrap();
    }
    let mut n = node(dir.path());
    assert_eq!(offsets(&n.commit(&send("T", 0, 2_000, &["b", "c"]))), vec![(1, true), (2, false)]);
}

#[test]
fn a_checkpoint_never_makes_last_applied_durable_ahead_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path().join("log"));
    config.segment_size = 1 << 20;
    // The log's own background sync would not come for an hour.
    config.durability = crate::store::Durability::Async;
    config.flush_interval = Duration::from_secs(3600);
    let log = CommitLog::open(config, None).unwrap();
    let broker = open_broker(options(dir.path()), log.reader());
    let mut n = Node { log, broker, next_index: 0, term: 1 };
    n.commit(&create("T", 1));
    n.commit(&send("T", 0, 1, &["a", "b"]));
    let applied = n.broker.last_applied().map(|l| l.index);
    assert!(n.log.reader().durable_index() < applied, "the log has not synced on its own yet");
    n.broker.checkpoint().unwrap();
    assert!(
        n.log.reader().durable_index() >= applied,
        "the checkpoint made the log durable through last_applied first"
    );
}

#[test]
fn a_retry_sharing_an_entry_with_its_first_attempt_is_a_duplicate_also_after_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    n.broker.checkpoint().unwrap();
    // The leader batched a send and its retry into one entry.
    let batched = send("T", 0, 1_000, &["a", "b", "a"]);
    assert_eq!(offsets(&n.commit(&batched)), vec![(0, false), (1, false), (0, true)]);
    // (Not a clone of the whole state: its tables on disk would keep sled's lock.)
    let (digest, dedupe) = (n.broker.live_digest().unwrap(), n.broker.state().data.dedupe.clone());
    // The entry is applied again after a restart (it came after the checkpoint): the same state,
    // not a duplicate of itself.
    let n = n.restart(dir.path());
    assert_eq!((n.broker.live_digest().unwrap(), &n.broker.state().data.dedupe), (digest, &dedupe));
    assert_eq!(n.broker.queue_status("T")[0].next, 2);
}

#[test]
fn a_message_is_found_by_id_in_whichever_topic_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    n.commit(&create("U", 2));
    n.commit(&send("T", 0, 1_000, &["t-1"]));
    n.commit(&send("U", 1, 1_001, &["u-1", "u-2"]));
    let found = n.broker.find("u-2").unwrap().unwrap();
    assert_eq!((found.topic.as_str(), found.queue_id, found.offset), ("U", 1, 1));
    assert_eq!(n.broker.find("t-1").unwrap().unwrap().topic, "T");
    assert_eq!(n.broker.find("nowhere").unwrap(), None);
    // Long past the dedupe window, and past several index files (16 entries each here).
    for i in 0..40 {
        n.commit(&send("T", 0, 500_000 + i, &[format!("late-{i}").as_str()]));
    }
    assert_eq!(n.broker.find("u-2").unwrap().unwrap().offset, 1);
    assert_eq!(n.broker.find("late-7").unwrap().unwrap().offset, 8);
}

#[test]
fn messages_are_found_by_id_after_a_restart_and_after_the_index_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 2));
    for i in 0..30u64 {
        n.commit(&send("T", (i % 2) as u32, 1_000 + i as i64, &[format!("m{i}").as_str()]));
    }
    n.broker.checkpoint().unwrap();
    // Applied after the checkpoint: replayed on restart, and indexed again then.
    n.commit(&send("T", 0, 2_000, &["after"]));
    let n = n.restart(dir.path());
    let found = |n: &Node, id: &str| n.broker.find(id).unwrap().map(|e| (e.queue_id, e.offset));
    assert_eq!(found(&n, "m0"), Some((0, 0)));
    assert_eq!(found(&n, "m29"), Some((1, 14)));
    assert_eq!(found(&n, "after"), Some((0, 15)));
    // A data directory without the index (an earlier release's, or a lost one): indexed on open.
    n.broker.checkpoint().unwrap();
    std::fs::remove_dir_all(dir.path().join("broker/message-index")).unwrap();
    let n = n.restart(dir.path());
    assert_eq!(found(&n, "m13"), Some((1, 6)));
    assert_eq!(found(&n, "after"), Some((0, 15)));
    assert_eq!(found(&n, "never"), None);
}

#[test]
fn a_deleted_topic_s_messages_are_not_found_by_id_even_in_a_topic_made_again_under_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    n.commit(&send("T", 0, 1_000, &["old"]));
    n.commit(&Command::Admin(AdminCommand::DeleteTopic { name: "T".into() }));
    assert_eq!(n.broker.find("old").unwrap(), None);
    n.commit(&create("T", 1));
    n.commit(&send("T", 0, 2_000, &["new"]));
    assert_eq!(n.broker.find("old").unwrap(), None, "offset 0 of the new topic is another message");
    assert_eq!(n.broker.find("new").unwrap().unwrap().offset, 0);
}

/// A data directory of a release with the string-keyed dedupe journal is refused with a clear
/// error, not read (and not a panic).
#[test]
fn a_data_directory_of_an_earlier_layout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    n.commit(&send("T", 0, 1_000, &["a"]));
    n.broker.checkpoint().unwrap();
    let Node { log, broker, .. } = n;
    drop(broker);
    let meta = dir.path().join("broker/meta");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let db = loop {
        match sled::open(&meta) {
            Ok(db) => break db,
            Err(_) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("opening sled: {e}"),
        }
    };
    db.open_tree("broker").unwrap().insert("@schema", b"3".to_vec()).unwrap();
    db.flush().unwrap();
    drop(db);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let err = loop {
        match Broker::open(options(dir.path()), log.reader()) {
            Err(e) if e.to_string().contains("lock") && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => break e,
            Ok(_) => panic!("a directory of layout 3 was opened"),
        }
    };
    assert!(err.to_string().contains("another RockRaft version (layout 3"), "{err}");
}

/// The largest plugin module is a cluster setting: a registration over it is refused by every
/// replica alike, and raising it lets the same registration through.
#[test]
fn the_module_size_limit_is_a_replicated_setting() {
    use crate::broker::plugins::{PluginCommand, PluginKind};
    use crate::broker::settings::SettingsChange;
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    let register = |name: &str| {
        Command::Plugin(PluginCommand::Register {
            name: name.into(),
            kind: PluginKind::Filter,
            version: "1".into(),
            now_ms: 1,
            module: vec![0; 200_000],
        })
    };
    let limit = |bytes| {
        Command::Admin(AdminCommand::Configure(SettingsChange { max_module_bytes: Some(bytes), ..Default::default() }))
    };
    assert_eq!(n.commit(&limit(100_000)), Reply::Applied);
    assert!(matches!(n.commit(&register("big")), Reply::Rejected(why) if why.contains("max_module_bytes")));
    assert_eq!(n.commit(&limit(300_000)), Reply::Applied);
    assert_eq!(n.commit(&register("big")), Reply::Applied);
}

/// A retry whose every message is stored already is answered from the stored results, as apply
/// would answer it; anything new, unknown or held leaves it to be proposed.
#[test]
fn a_retry_of_stored_messages_is_answered_with_their_first_results() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 2));
    n.commit(&send("T", 1, 1_000, &["a", "b"]));
    let batch = |ids: &[&str]| match send("T", 1, 2_000, ids) {
        Command::Send(b) => b,
        _ => unreachable!(),
    };
    let answered = n.broker.stored_sends(&batch(&["b", "a"])).expect("both stored");
    let got: Vec<(&str, u32, u64, bool)> =
        answered.iter().map(|o| (o.message_id.as_str(), o.queue_id, o.offset, o.duplicate)).collect();
    assert_eq!(got, vec![("b", 1, 1, true), ("a", 1, 0, true)]);
    assert_eq!(n.broker.stored_sends(&batch(&["a", "new"])), None);
    assert_eq!(n.broker.stored_sends(&batch(&[])), None);
    let mut elsewhere = batch(&["a"]);
    elsewhere.topic = "Gone".into();
    assert_eq!(n.broker.stored_sends(&elsewhere), None);
}

#[test]
fn failover_records_are_kept_newest_only_from_their_own_term_and_survive_a_restart() {
    use crate::broker::failover::{Failover, KEPT};
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    let record = |term: u64| Failover {
        term,
        leader: 1,
        previous: Some(2),
        last_heard_ms: Some(1_000),
        election_started_ms: 1_300,
        elected_ms: 1_350,
        first_commit_ms: 1_360,
        routes_converged_ms: 1_400,
        not_following: vec![],
    };
    // A record claiming another term than its entry's (a stale or forged one) changes nothing.
    let stale = n.commit(&Command::Admin(AdminCommand::RecordFailover(record(7))));
    assert!(matches!(stale, Reply::Rejected(_)), "{stale:?}");
    assert!(n.broker.state().meta.failovers.is_empty());
    for term in 1..=(KEPT as u64 + 5) {
        n.term = term;
        assert_eq!(n.commit(&Command::Admin(AdminCommand::RecordFailover(record(term)))), Reply::Applied);
    }
    let terms: Vec<u64> = n.broker.state().meta.failovers.keys().copied().collect();
    assert_eq!(terms.len(), KEPT);
    assert_eq!((terms[0], terms[KEPT - 1]), (6, KEPT as u64 + 5), "the oldest go first");
    n.broker.checkpoint().unwrap();
    let before = n.broker.state().meta.failovers.clone();
    let n = n.restart(dir.path());
    assert_eq!(n.broker.state().meta.failovers.iter().collect::<Vec<_>>(), before.iter().collect::<Vec<_>>());
}

#[test]
fn repair_records_are_kept_once_newest_only_and_survive_a_restart() {
    use crate::broker::repair::{KEPT, Repair, RepairedPart};
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    let record = |i: u64| Repair {
        node: 3,
        group: 1,
        part: RepairedPart::LogRecords,
        first: 10 * i,
        last: 10 * i + 4,
        source: Some(1),
        place: format!("segment byte {i}"),
        began_ms: 1_000 + i as i64,
        done_ms: 1_010 + i as i64,
    };
    let record_of = |r: Repair| Command::Admin(AdminCommand::RecordRepair(r));
    // One the repairing node could not have made changes nothing.
    let backwards = n.commit(&record_of(Repair { first: 99, last: 1, ..record(0) }));
    assert!(matches!(backwards, Reply::Rejected(_)), "{backwards:?}");
    assert!(n.broker.repairs().is_empty());
    // Proposed twice (its first answer lost): stored once.
    assert_eq!(n.commit(&record_of(record(0))), Reply::Applied);
    assert_eq!(n.commit(&record_of(record(0))), Reply::Applied);
    assert_eq!(n.broker.repairs(), vec![record(0)]);
    for i in 1..=(KEPT as u64 + 5) {
        assert_eq!(n.commit(&record_of(record(i))), Reply::Applied);
    }
    let kept = n.broker.repairs();
    assert_eq!(kept.len(), KEPT);
    assert_eq!((kept[0].clone(), kept[KEPT - 1].clone()), (record(KEPT as u64 + 5), record(6)), "newest first");
    n.broker.checkpoint().unwrap();
    let n = n.restart(dir.path());
    assert_eq!(n.broker.repairs(), kept);
}

/// Flips one byte of the ConsumeQueue record at `offset` of `topic`'s queue `queue_id`.
fn rot_queue_record(dir: &Path, topic: &str, queue_id: u32, offset: u64, records_per_file: u64) {
    let first = offset - offset % records_per_file;
    let file = dir.join(format!("broker/queues/{topic}/{queue_id}/{first:020}.cq"));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[(offset % records_per_file) as usize * crate::store::CQ_RECORD_LEN + 3] ^= 0x10;
    std::fs::write(&file, bytes).unwrap();
}

#[test]
fn a_queue_record_that_rots_is_rebuilt_from_the_log_and_never_read_as_another_message() {
    let (dir, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut n, mut replica) = (node(dir.path()), node(other.path()));
    let meters = crate::metrics::Meters::new();
    n.broker.report_repairs_to(meters.clone());
    let mut commands = vec![create("T", 2), create("U", 1)];
    // Every queue holds a message at each low offset: the index has many at offset 1.
    for i in 0..6 {
        let (a, b, c) = (format!("t0-{i}"), format!("t1-{i}"), format!("u-{i}"));
        commands.push(send("T", 0, 1000 + i, &[&a]));
        commands.push(send("T", 1, 1000 + i, &[&b]));
        commands.push(send("U", 0, 1000 + i, &[&c]));
    }
    for c in &commands {
        assert_eq!(n.commit(c), replica.commit(c));
    }
    n.broker.checkpoint().unwrap();
    rot_queue_record(dir.path(), "T", 1, 1, 8);
    // A read, a pop's screening and an operator's lookup all get the message that was there.
    let read = n.broker.read("T", 1, 1).unwrap().unwrap();
    assert_eq!((read.message.message_id.as_str(), read.message.body.as_ref()), ("t1-1", &b"body of t1-1"[..]));
    assert_eq!(meters.corruption(), (1, 1));
    // Written back as every replica has it.
    assert_eq!(queue_files(dir.path()), queue_files(other.path()));
    // Once rebuilt, nothing more to repair.
    assert_eq!(n.broker.read("T", 1, 1).unwrap().unwrap().message.message_id, "t1-1");
    assert_eq!(meters.corruption(), (1, 1));
    let noted = tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(meters.take_repairs());
    assert_eq!(noted.len(), 1);
    assert_eq!((noted[0].repaired, noted[0].first, noted[0].source), (crate::metrics::Repaired::QueueRecord, 1, None));

    // A record rewritten whole (its checksum matching) with another tag: what `cluster verify`
    // compares differs from the replica's at that offset.
    let file = dir.path().join("broker/queues/T/1/00000000000000000000.cq");
    let mut bytes = std::fs::read(&file).unwrap();
    let slot = &mut bytes[2 * 20..3 * 20];
    let mut forged = crate::store::CqRecord::decode(&<[u8; 20]>::try_from(&*slot).unwrap()).unwrap();
    forged.tag_hash = crate::store::tag_hash("Forged");
    slot.copy_from_slice(&forged.encode());
    std::fs::write(&file, bytes).unwrap();
    let (ours, theirs) =
        (n.broker.queue_checksums("T", 1, 0, 6, 1).unwrap(), replica.broker.queue_checksums("T", 1, 0, 6, 1).unwrap());
    let differ: Vec<usize> = (0..6).filter(|&o| ours[o] != theirs[o]).collect();
    assert_eq!(differ, [2], "{ours:?} {theirs:?}");

    // With the index gone too, nothing to rebuild it from: an error naming the file, never
    // another message; the node still opens and serves the rest.
    rot_queue_record(dir.path(), "T", 0, 2, 8);
    let log = n.log;
    drop(n.broker);
    std::fs::remove_dir_all(dir.path().join("broker/message-index")).unwrap();
    let broker = open_broker(options(dir.path()), log.reader());
    let e = broker.read("T", 0, 2).unwrap_err().to_string();
    assert!(e.contains("consume queue record 2 does not read back") && e.contains("00000000000000000000.cq"), "{e}");
    assert_eq!(broker.read("T", 0, 3).unwrap().unwrap().message.message_id, "t0-3");
    assert!(broker.find("t0-2").unwrap().is_none());
    assert_eq!(broker.find("t0-3").unwrap().unwrap().offset, 3);
}

/// An entry of a format or kind this release does not know (a newer release wrote it) stops
/// the apply with a message naming the entry: it is neither answered nor skipped, and nothing
/// applies after it, so this replica never drifts apart from those that read the entry.
#[test]
fn an_entry_of_a_newer_release_stops_the_apply() {
    for (payload, says) in [
        (&b"R\x0b\x01"[..], "is of format 11; this release reads formats 1 to 10"),
        (b"R\x02\x63", "is of kind 99 (format 2), which this release does not know"),
        // An admin command of a variant added later (its protobuf field 99).
        (b"R\x02\x02\x9a\x06\x01x", "is of a variant of admin commands this release does not know"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut n = node(dir.path());
        n.commit(&create("T", 1));
        let index = n.next_index;
        let e = n.commit_bytes(Bytes::from_static(payload)).unwrap_err();
        let expected = format!("log entry {index} {says}: upgrade this node before it applies the log");
        assert_eq!(e.to_string(), expected);
        assert!(matches!(e, crate::broker::BrokerError::Unreadable { index: i, .. } if i == index));
        // What openraft gets from the state machine: a fatal error with the same words.
        assert_eq!(std::io::Error::from(e).to_string(), expected);
        assert_eq!(n.broker.last_applied().map(|p| p.index), Some(index - 1));
        // Nor does a snapshot build replay past it.
        let replay = n.broker.state_at(index, None, &no_membership).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(replay, Err(expected));
    }
}

/// A refused entry changes nothing, and is refused again the same way when retried.
#[test]
fn a_refused_entry_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    let newer = Bytes::from_static(b"R\x0b\x02");
    let index = n.next_index;
    let first = n.commit_bytes(newer.clone()).unwrap_err().to_string();
    assert_eq!(n.broker.last_applied(), None);
    let again = n.broker.apply(lid(index), newer).unwrap_err().to_string();
    assert_eq!(first, again);
    assert!(first.starts_with(&format!("log entry {index} is of format 11")), "{first}");
    assert!(n.broker.topics().is_empty());
}

/// A data directory of the previous release: its log holds entries of format 1 (a tag byte, then
/// JSON or protobuf), which apply as they did, also when replayed after a restart.
#[test]
fn entries_of_the_previous_format_apply() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    let mut create_t = vec![2u8];
    serde_json::to_writer(&mut create_t, &AdminCommand::CreateTopic(TopicConfig::new("T", 1, TopicKind::Normal)))
        .unwrap();
    assert_eq!(n.commit_bytes(create_t.into()).unwrap(), Reply::Applied);
    let Command::Send(batch) = send("T", 0, 1_000, &["a", "b"]) else { unreachable!() };
    let mut send_t = vec![1u8];
    batch.encode(&mut send_t).unwrap();
    assert_eq!(offsets(&n.commit_bytes(send_t.into()).unwrap()), vec![(0, false), (1, false)]);
    n.commit(&send("T", 0, 2_000, &["c"]));
    let read = |n: &Node, offset| n.broker.read("T", 0, offset).unwrap().map(|e| e.message.message_id);
    let all = |n: &Node| [read(n, 0), read(n, 1), read(n, 2)];
    let expected = [Some("a".to_string()), Some("b".to_string()), Some("c".to_string())];
    assert_eq!(all(&n), expected);
    let n = n.restart(dir.path());
    assert_eq!(n.broker.queue_status("T")[0].next, 3);
    assert_eq!(all(&n), expected);
}

/// With several data groups, a new topic's queues are spread over them at its creation, the same
/// on every replica and in the partition's copy; asking for the topic again is answered as done,
/// and topics created before keep their queues where they were.
#[test]
fn a_new_topic_s_queues_are_spread_over_the_data_groups() {
    use crate::broker::settings::SettingsChange;
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    assert_eq!(n.commit(&create("Before", 2)), Reply::Applied);
    let three = SettingsChange { data_groups: Some(3), ..Default::default() };
    assert_eq!(n.commit(&Command::Admin(AdminCommand::Configure(three))), Reply::Applied);
    let index = n.next_index;
    assert_eq!(n.commit(&create("T", 4)), Reply::Applied);
    let state = n.broker.state();
    let placed = state.meta.topics.get("T").unwrap().clone();
    let expected: Vec<u32> = (0..4).map(|q| 1 + ((index + q) % 3) as u32).collect();
    assert_eq!(placed.groups, expected);
    assert_eq!(state.data.topics.get("T"), Some(&placed), "the partition's copy names the same groups");
    assert!(state.meta.topics.get("Before").unwrap().groups.is_empty(), "an earlier topic stays in group 1");
    drop(state);
    assert_eq!(n.commit(&create("T", 4)), Reply::Applied, "the same request again");
    assert_eq!(n.commit(&create("T", 5)), Reply::TopicExists("T".into()));
}

/// The metadata group's state (no partition) knows the topics, but holds no queues: a send that
/// reached it is refused, and nothing of it is stored.
#[test]
fn the_metadata_group_knows_topics_but_stores_no_messages() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path().join("log"));
    config.segment_size = 1 << 20;
    let log = CommitLog::open(config, None).unwrap();
    let mut metadata = options(dir.path());
    metadata.partition = crate::broker::position::PartitionId::NONE;
    let broker = open_broker(metadata, log.reader());
    let next_index = log.bounds().next_index();
    let mut n = Node { log, broker, next_index, term: 1 };
    assert!(n.broker.holds_metadata() && !n.broker.holds_queues());
    n.commit_only(&create("T", 2));
    assert!(n.broker.topic("T").is_some(), "the metadata has the topic");
    let reply = n.commit_only(&send("T", 0, 1000, &["a"]));
    assert!(matches!(reply, Reply::TopicNotFound(_)), "{reply:?}");
    assert_eq!(n.broker.find("a").unwrap(), None, "nothing stored");
}

/// Every file under `dir`, with when it was last written.
fn written(dir: &Path) -> std::collections::BTreeMap<std::path::PathBuf, std::time::SystemTime> {
    let mut out = std::collections::BTreeMap::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().map(Result::unwrap) {
            let meta = entry.metadata().unwrap();
            match meta.is_dir() {
                true => dirs.push(entry.path()),
                false => {
                    out.insert(entry.path(), meta.modified().unwrap());
                }
            }
        }
    }
    out
}

#[test]
fn a_checkpoint_with_nothing_applied_since_the_last_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 1));
    n.commit(&send("T", 0, 1_000, &["a"]));
    n.broker.checkpoint().unwrap();
    let before = written(dir.path());
    n.broker.checkpoint().unwrap();
    n.broker.checkpoint().unwrap();
    assert_eq!(written(dir.path()), before, "an idle group's checkpoints wrote to its files");
    // An entry applied since: the next checkpoint writes it, and a restart resumes from it.
    n.commit(&send("T", 0, 2_000, &["b"]));
    n.broker.checkpoint().unwrap();
    assert_ne!(written(dir.path()), before);
    let checkpointed = n.broker.last_applied();
    drop(n.broker);
    let reopened = open_broker(options(dir.path()), n.log.reader());
    assert_eq!(reopened.last_applied(), checkpointed, "the checkpoint after the apply is the one in force");
}

#[test]
fn rows_written_by_a_newer_release_are_refused_not_read_with_fields_dropped() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut n = node(dir.path());
        n.commit(&create("T", 1));
        n.broker.checkpoint().unwrap();
    }
    {
        let db = while_locked(|| sled::open(dir.path().join("broker/meta"))).unwrap();
        let tree = db.open_tree("broker").unwrap();
        let newer = crate::broker::state::SNAPSHOT_FORMAT + 1;
        tree.insert("@rows", serde_json::to_vec(&newer).unwrap()).unwrap();
        db.flush().unwrap();
    }
    let log = CommitLog::open(LogConfig::new(dir.path().join("other-log")), None).unwrap();
    let why = match while_locked(|| Broker::open(options(dir.path()), log.reader())) {
        Ok(_) => panic!("rows of a newer format were read"),
        Err(e) => e.to_string(),
    };
    assert!(why.contains("newer release") && why.contains("format"), "{why}");
}
