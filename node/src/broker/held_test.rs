//! Held messages through apply: timers fire once and never early, recalls and resolutions are
//! decided by the first entry, checks count once, holds keep entries from retention, and all of
//! it survives a checkpoint and restart.

use prost::Message;
use rockraft_proto::rockraft::StoredMessage;

use crate::broker::held::HeldCounts;
use crate::broker::state_test::{Node, node, send};
use crate::broker::timer::{TimerCommand, TimerOutcome, timer_key};
use crate::broker::transaction::{HalfState, Resolver, TransactionCommand, TransactionOutcome};
use crate::broker::{AdminCommand, Command, Held, Reply, TopicConfig, TopicKind, split_position};

const NOW: i64 = 1_000_000;

fn topic(n: &mut Node, name: &str, kind: TopicKind) {
    let config = TopicConfig::new(name, 2, kind);
    assert_eq!(n.commit(&Command::Admin(AdminCommand::CreateTopic(config))), Reply::Applied);
}

/// Sends `ids` to queue 0 of `topic` at `NOW`, each due at `due_ms` (delay topics).
fn send_held(n: &mut Node, topic: &str, ids: &[&str], due_ms: i64) -> Vec<Held> {
    let mut command = send(topic, 0, NOW, ids);
    if let Command::Send(batch) = &mut command {
        for raw in &mut batch.messages {
            let mut m = StoredMessage::decode(raw.clone()).unwrap();
            m.delivery_timestamp_ms = due_ms;
            m.transaction_recovery_ms = 5_000;
            *raw = m.encode_to_vec().into();
        }
    }
    match n.commit(&command) {
        Reply::Sent(outcomes) => outcomes.into_iter().map(|o| o.held.expect("held")).collect(),
        other => panic!("not sent: {other:?}"),
    }
}

fn delivered(n: &Node, topic: &str) -> Vec<String> {
    let next = n.broker.queue_status(topic)[0].next;
    (0..next).filter_map(|o| n.broker.read(topic, 0, o).unwrap()).map(|e| e.message.message_id).collect()
}

fn fire(n: &mut Node, at: i64) -> TimerOutcome {
    let timers = n.broker.due_timers(at, 100).unwrap();
    match n.commit(&Command::Timer(TimerCommand::Fire { now_ms: at, timers })) {
        Reply::Timer(o) => o,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_timer_fires_once_at_its_time_pointing_at_the_bytes_stored_with_the_send() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    let held = send_held(&mut n, "D", &["a", "b"], NOW + 10_000);
    let Held::Timer { due_ms, position } = held[0] else { panic!("a timer") };
    assert_eq!(due_ms, NOW + 10_000);
    assert_eq!(n.broker.held_counts(), vec![("D".to_string(), HeldCounts { timers: 2, open_halves: 0 })]);
    assert!(delivered(&n, "D").is_empty(), "nothing visible before the time");
    // A fire proposed too early (a confused leader) delivers nothing.
    let early = Command::Timer(TimerCommand::Fire { now_ms: NOW + 9_999, timers: vec![timer_key(due_ms, position)] });
    assert_eq!(n.commit(&early), Reply::Timer(TimerOutcome::Fired(0)));
    assert_eq!(fire(&mut n, NOW + 10_000), TimerOutcome::Fired(2));
    assert_eq!(delivered(&n, "D"), vec!["a", "b"]);
    let record = n.broker.queue_record("D", 0, 0).unwrap().unwrap();
    assert_eq!(record.position, position, "the record points at the send entry: no second copy");
    // The same fire again (a new leader proposing what the old one did) delivers nothing twice.
    let again = Command::Timer(TimerCommand::Fire { now_ms: NOW + 20_000, timers: vec![timer_key(due_ms, position)] });
    assert_eq!(n.commit(&again), Reply::Timer(TimerOutcome::Fired(0)));
    assert_eq!(delivered(&n, "D").len(), 2);
    assert!(n.broker.held_counts().is_empty());
}

#[test]
fn a_recalled_timer_never_fires_and_a_due_or_unknown_one_cannot_be_recalled() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    let held = send_held(&mut n, "D", &["x", "y"], NOW + 10_000);
    let key = |h: Held| match h {
        Held::Timer { due_ms, position } => timer_key(due_ms, position),
        _ => panic!(),
    };
    let recall = |timer, at| Command::Timer(TimerCommand::Recall { now_ms: at, topic: "D".into(), timer });
    assert_eq!(
        n.commit(&recall(key(held[0]), NOW + 1)),
        Reply::Timer(TimerOutcome::Recalled { message_id: "x".into() })
    );
    assert_eq!(n.commit(&recall(key(held[0]), NOW + 2)), Reply::Timer(TimerOutcome::NotFound));
    let wrong_topic = Command::Timer(TimerCommand::Recall { now_ms: NOW, topic: "E".into(), timer: key(held[1]) });
    assert_eq!(n.commit(&wrong_topic), Reply::Timer(TimerOutcome::NotFound));
    assert_eq!(n.commit(&recall(key(held[1]), NOW + 10_000)), Reply::Timer(TimerOutcome::AlreadyDue));
    fire(&mut n, NOW + 10_000);
    assert_eq!(delivered(&n, "D"), vec!["y"]);
}

#[test]
fn a_delivery_time_already_passed_delivers_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    let reply = n.commit(&send("D", 0, NOW, &["now"]));
    let Reply::Sent(o) = reply else { panic!() };
    assert_eq!(o[0].held, None);
    assert_eq!(delivered(&n, "D"), vec!["now"]);
}

fn resolve(n: &mut Node, position: u64, id: &str, commit: bool, by: Resolver) -> TransactionOutcome {
    let command =
        TransactionCommand::Resolve { now_ms: NOW + 1, topic: "X".into(), position, message_id: id.into(), commit, by };
    match n.commit(&Command::Transaction(command)) {
        Reply::Transaction(o) => o,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_first_resolution_of_a_half_wins_and_repeating_it_is_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "X", TopicKind::Transaction);
    let held = send_held(&mut n, "X", &["c", "r", "aged"], 0);
    let pos = |i: usize| match held[i] {
        Held::Half { position } => position,
        _ => panic!(),
    };
    assert!(delivered(&n, "X").is_empty(), "halves are invisible");
    assert_eq!(resolve(&mut n, pos(0), "c", true, Resolver::Producer), TransactionOutcome::Done);
    assert_eq!(resolve(&mut n, pos(0), "c", true, Resolver::ProducerCheck), TransactionOutcome::Done);
    assert!(matches!(resolve(&mut n, pos(0), "c", false, Resolver::Producer), TransactionOutcome::Conflict(_)));
    assert_eq!(resolve(&mut n, pos(1), "r", false, Resolver::Producer), TransactionOutcome::Done);
    assert!(matches!(resolve(&mut n, pos(1), "r", true, Resolver::Operator), TransactionOutcome::Conflict(_)));
    assert_eq!(resolve(&mut n, pos(1), "not-r", true, Resolver::Producer), TransactionOutcome::Unknown);
    // One the checker gave up on can be resumed by an operator.
    assert_eq!(resolve(&mut n, pos(2), "aged", false, Resolver::Checker), TransactionOutcome::Done);
    assert_eq!(resolve(&mut n, pos(2), "aged", true, Resolver::Operator), TransactionOutcome::Done);
    assert_eq!(delivered(&n, "X"), vec!["c", "aged"]);
    assert!(matches!(n.broker.half(pos(1)).unwrap().unwrap().state, HalfState::RolledBack { .. }));
    assert!(n.broker.due_checks(i64::MAX, 10).unwrap().is_empty(), "resolved halves are never checked");
}

#[test]
fn checks_count_once_per_proposal_and_never_before_their_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "X", TopicKind::Transaction);
    let Held::Half { position } = send_held(&mut n, "X", &["h"], 0)[0] else { panic!() };
    assert!(n.broker.due_checks(NOW + 4_999, 10).unwrap().is_empty(), "first check after the recovery time");
    let due = n.broker.due_checks(NOW + 5_000, 10).unwrap();
    assert_eq!(due.len(), 1);
    let checked = Command::Transaction(TransactionCommand::Checked {
        now_ms: NOW + 5_000,
        halves: vec![(position, 0, NOW + 65_000)],
        asked: true,
    });
    n.commit(&checked);
    // The same proposal again (a retry after failover) does not count twice.
    n.commit(&checked);
    assert_eq!(n.broker.half(position).unwrap().unwrap().checks, 1);
    assert!(n.broker.due_checks(NOW + 64_999, 10).unwrap().is_empty());
    assert_eq!(n.broker.due_checks(NOW + 65_000, 10).unwrap().len(), 1);
}

#[test]
fn held_entries_are_kept_from_retention_until_delivered_plus_the_retention_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    n.commit(&send("D", 0, NOW, &["plain"]));
    let Held::Timer { due_ms, position } = send_held(&mut n, "D", &["later"], NOW + 10_000)[0] else { panic!() };
    let index = split_position(position).0;
    let max_age = 60_000;
    assert_eq!(n.broker.first_held_index(NOW, max_age).unwrap(), Some(index));
    fire(&mut n, due_ms);
    assert_eq!(n.broker.first_held_index(due_ms + max_age - 1, max_age).unwrap(), Some(index), "kept after delivery");
    assert_eq!(n.broker.first_held_index(due_ms + max_age, max_age).unwrap(), None);
    n.commit(&Command::Admin(AdminCommand::ReleaseHolds { below: index + 1 }));
    assert!(n.broker.state().data.holds.all().unwrap().is_empty());
}

#[test]
fn pending_timers_and_halves_survive_a_checkpoint_and_restart_and_fire_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    topic(&mut n, "X", TopicKind::Transaction);
    send_held(&mut n, "D", &["t1", "t2"], NOW + 10_000);
    let Held::Half { position } = send_held(&mut n, "X", &["half"], 0)[0] else { panic!() };
    n.broker.checkpoint().unwrap();
    // Changed after the checkpoint: replayed on restart.
    send_held(&mut n, "D", &["t3"], NOW + 20_000);
    let digest = n.broker.live_digest().unwrap();
    let mut n = n.restart(dir.path());
    assert_eq!(n.broker.live_digest().unwrap(), digest);
    assert_eq!(n.broker.due_timers(i64::MAX, 10).unwrap().len(), 3);
    assert_eq!(fire(&mut n, NOW + 20_000), TimerOutcome::Fired(3));
    assert_eq!(fire(&mut n, NOW + 30_000), TimerOutcome::Fired(0));
    assert_eq!(resolve(&mut n, position, "half", true, Resolver::Producer), TransactionOutcome::Done);
    let mut ids = delivered(&n, "D");
    ids.sort();
    assert_eq!(ids, vec!["t1", "t2", "t3"]);
    assert_eq!(delivered(&n, "X"), vec!["half"]);
}

/// A leader a day ahead stored a message in queue 0; the next leader's clock is right, so it
/// holds store times in that queue at a day ahead but stamps its own clock for time-outs. A
/// message it stores there due in 50 s is held for those 50 s, not delivered at once for being
/// "a day late".
#[test]
fn a_store_time_held_up_by_an_earlier_leader_does_not_make_timers_due() {
    let day = 86_400_000;
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    n.term = 2;
    let ahead = send("D", 0, NOW + day, &["early-bird"]);
    assert!(matches!(n.commit(&ahead), Reply::Sent(_)));
    assert_eq!(n.broker.store_floor_ms("D", 0), NOW + day);
    n.term = 3;
    let mut command = send("D", 0, NOW + 10_000, &["in-50-s"]);
    command.hold_store_time(|topic, queue| n.broker.store_floor_ms(topic, queue));
    if let Command::Send(batch) = &mut command {
        assert_eq!((batch.store_timestamp_ms, batch.clock_ms), (NOW + day, NOW + 10_000));
        let mut m = StoredMessage::decode(batch.messages[0].clone()).unwrap();
        m.delivery_timestamp_ms = NOW + 60_000;
        batch.messages[0] = m.encode_to_vec().into();
    }
    match n.commit(&command) {
        Reply::Sent(o) => assert_eq!(o[0].held.map(|h| matches!(h, Held::Timer { .. })), Some(true), "{o:?}"),
        other => panic!("not sent: {other:?}"),
    }
    assert_eq!(delivered(&n, "D"), ["early-bird"]);
    assert_eq!(fire(&mut n, NOW + 59_999), TimerOutcome::Fired(0));
    assert_eq!(fire(&mut n, NOW + 60_000), TimerOutcome::Fired(1));
    assert_eq!(delivered(&n, "D"), ["early-bird", "in-50-s"]);
    let stored: Vec<i64> = (0..2).map(|o| n.broker.read("D", 0, o).unwrap().unwrap().store_timestamp_ms).collect();
    assert_eq!(stored, [NOW + day, NOW + day], "store times never go back along the queue");
}

/// A retried delayed send answers with the recall handle of the first attempt, even when the
/// retry carries another delivery time: the handle recalls the timer that exists.
#[test]
fn a_retried_delayed_send_answers_with_the_first_attempts_timer() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    let first = send_held(&mut n, "D", &["a"], NOW + 10_000);
    let retry = send_held(&mut n, "D", &["a"], NOW + 99_000);
    assert_eq!(retry, first);
    let Held::Timer { due_ms, position } = first[0] else { panic!("a timer") };
    let recall =
        Command::Timer(TimerCommand::Recall { now_ms: NOW, topic: "D".into(), timer: timer_key(due_ms, position) });
    assert!(matches!(n.commit(&recall), Reply::Timer(TimerOutcome::Recalled { .. })));
}

/// Deleting a topic drops its timers and halves: a topic created again under the name gets
/// none of them, and nothing is counted as held any more.
#[test]
fn a_deleted_topic_takes_its_timers_and_halves_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    topic(&mut n, "X", TopicKind::Transaction);
    send_held(&mut n, "D", &["timer"], NOW + 10_000);
    let halves = send_held(&mut n, "X", &["half"], 0);
    let Held::Half { position } = halves[0] else { panic!("a half") };
    for name in ["D", "X"] {
        assert_eq!(n.commit(&Command::Admin(AdminCommand::DeleteTopic { name: name.into() })), Reply::Applied);
    }
    assert!(n.broker.held_counts().is_empty(), "{:?}", n.broker.held_counts());
    topic(&mut n, "D", TopicKind::Delay);
    topic(&mut n, "X", TopicKind::Transaction);
    assert_eq!(fire(&mut n, NOW + 20_000), TimerOutcome::Fired(0));
    assert!(delivered(&n, "D").is_empty(), "the old timer fired into the new topic");
    let commit = Command::Transaction(TransactionCommand::Resolve {
        now_ms: NOW,
        topic: "X".into(),
        position,
        message_id: "half".into(),
        commit: true,
        by: Resolver::Producer,
    });
    assert_eq!(n.commit(&commit), Reply::Transaction(TransactionOutcome::Unknown));
    assert!(delivered(&n, "X").is_empty(), "the old half was committed into the new topic");
    assert!(n.broker.due_checks(i64::MAX, 10).unwrap().is_empty());
}

/// An operator resumes a half the checker rolled back long ago: its entry is then kept for a
/// retention period from the delivery, like any delivered message, not from the rollback.
#[test]
fn a_resumed_half_is_kept_for_a_retention_period_from_its_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "X", TopicKind::Transaction);
    let Held::Half { position } = send_held(&mut n, "X", &["aged"], 0)[0] else { panic!() };
    let index = split_position(position).0;
    let max_age = 60_000;
    let at = |n: &mut Node, now: i64, commit: bool, by: Resolver| {
        let command = TransactionCommand::Resolve {
            now_ms: now,
            topic: "X".into(),
            position,
            message_id: "aged".into(),
            commit,
            by,
        };
        n.commit(&Command::Transaction(command))
    };
    at(&mut n, NOW + 1, false, Resolver::Checker);
    assert_eq!(n.broker.first_held_index(NOW + 1 + max_age, max_age).unwrap(), None, "released at the rollback");
    let resumed = NOW + 10 * max_age;
    assert_eq!(at(&mut n, resumed, true, Resolver::Operator), Reply::Transaction(TransactionOutcome::Done));
    assert_eq!(delivered(&n, "X"), ["aged"]);
    assert_eq!(n.broker.first_held_index(resumed + max_age - 1, max_age).unwrap(), Some(index), "kept after delivery");
    assert_eq!(n.broker.first_held_index(resumed + max_age, max_age).unwrap(), None);
}

#[test]
fn held_messages_are_found_by_id_and_listed_a_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    topic(&mut n, "X", TopicKind::Transaction);
    let ids: Vec<String> = (0..7).map(|i| format!("t{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        send_held(&mut n, "D", &[id.as_str()], NOW + 10_000 + i as i64 * 1_000);
    }
    send_held(&mut n, "X", &["half"], 0);
    let timer = n.broker.find_held("t3").unwrap().expect("a pending timer is found by id");
    assert_eq!((timer.kind.as_str(), timer.at_ms), ("timer", NOW + 13_000));
    assert_eq!(n.broker.find_held("half").unwrap().expect("a half is found by id").kind, "half");
    assert_eq!(n.broker.find_held("nothing").unwrap(), None);
    assert_eq!(n.broker.find("t3").unwrap(), None, "not delivered yet");

    // Pages of 3, each after the last handle of the one before: every timer once, in order.
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let page = n.broker.held(true, None, false, after.as_deref(), 3).unwrap();
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        after = Some(last.handle.clone());
        listed.extend(page.into_iter().map(|e| e.message.message_id));
    }
    assert_eq!(listed, ids);
    assert!(n.broker.held(true, None, false, Some("not-a-handle"), 3).is_err());

    // Once fired, the message is found where it was delivered.
    assert_eq!(fire(&mut n, NOW + 13_000), TimerOutcome::Fired(4));
    assert_eq!(n.broker.find_held("t3").unwrap(), None);
    assert_eq!(n.broker.find("t3").unwrap().expect("delivered").topic, "D");
    // A restart keeps all of it.
    n.broker.checkpoint().unwrap();
    let n = n.restart(dir.path());
    assert_eq!(n.broker.find("t3").unwrap().expect("delivered").topic, "D");
    assert_eq!(n.broker.find_held("t6").unwrap().expect("still pending").kind, "timer");
    assert_eq!(n.broker.find_held("half").unwrap().expect("still open").kind, "half");
}

/// `cluster verify` compares digests read back from the checkpoint on disk (so apply never waits
/// for one): it must be the digest of the live state, with timers, halves and dedupe rows in it,
/// and it must not change the state or its files.
#[test]
fn the_digest_read_from_disk_is_the_live_state_s_digest() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    topic(&mut n, "D", TopicKind::Delay);
    topic(&mut n, "X", TopicKind::Transaction);
    send_held(&mut n, "D", &["t1", "t2"], NOW + 10_000);
    send_held(&mut n, "X", &["h1"], 0);
    n.broker.checkpoint().unwrap();
    // Some state only in memory yet: the digest checkpoints it first.
    send_held(&mut n, "D", &["t3"], NOW + 20_000);
    n.commit(&send("D", 1, NOW, &["plain"]));
    let live = n.broker.live_digest().unwrap();
    assert_eq!(n.broker.digest().unwrap(), live);
    assert_eq!(n.broker.digest().unwrap(), live, "reading it back changed nothing");
    // The node goes on from there: a timer fires, and the two digests still agree.
    assert_eq!(fire(&mut n, NOW + 10_000), TimerOutcome::Fired(2));
    let live = n.broker.live_digest().unwrap();
    assert_eq!(n.broker.digest().unwrap(), live);
    let n = n.restart(dir.path());
    assert_eq!(n.broker.live_digest().unwrap(), live);
}
