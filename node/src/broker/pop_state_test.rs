//! Consumption through the broker state: plans from real queues, dead letters, restarts, and
//! snapshots taken at an older index than the one applied.

use std::path::Path;

use crate::broker::StoredView;
use crate::broker::group::{GroupConfig, dead_letter_topic};
use crate::broker::pop::{ChannelId, ConsumeCommand, ConsumeOutcome, Consumption, Delivery, Receipt};
use crate::broker::pop_plan::{MatchAll, MessageFilter};
use crate::broker::state_test::{Node, create, no_membership, node, send};
use crate::broker::{AdminCommand, Command, PopRequest, Reply, TopicConfig};

fn group(name: &str, max_attempts: u32) -> GroupConfig {
    GroupConfig { name: name.into(), fifo: false, max_attempts, priority_factor: 100, lite: None }
}

fn topic(n: &Node, name: &str) -> TopicConfig {
    n.broker.topic(name).expect("topic exists")
}

/// Plans a pop as a receive would, commits its dead letters and the pop, returns the deliveries.
fn pop(
    n: &mut Node,
    g: &GroupConfig,
    t: &str,
    filter: &dyn MessageFilter,
    now_ms: i64,
    invisible_ms: i64,
) -> Vec<Delivery> {
    let t = topic(n, t);
    let request = PopRequest {
        group: g,
        topic: &t,
        filter,
        max_messages: 32,
        invisible_ms,
        now_ms,
        first_queue: 0,
        by_priority: false,
    };
    let plan = n.broker.plan_pop(&request).unwrap();
    for d in plan.dead_letters {
        n.commit(&Command::DeadLetter(d));
    }
    match n.commit(&Command::Consume(ConsumeCommand::Pop(plan.pop))) {
        Reply::Consume(ConsumeOutcome::Delivered(d)) => d,
        other => panic!("not a pop reply: {other:?}"),
    }
}

fn receipt(g: &str, t: &str, d: &Delivery) -> Receipt {
    d.receipt(g, t)
}

fn queue_of(d: &Delivery) -> u32 {
    let ChannelId::Queue(q) = d.channel else { panic!("a queue's delivery: {d:?}") };
    q
}

fn consumption(n: &Node) -> Consumption {
    n.broker.state().data.consumption.clone()
}

fn setup(dir: &Path, max_attempts: u32) -> (Node, GroupConfig) {
    let mut n = node(dir);
    n.commit(&create("T", 2));
    let g = group("g", max_attempts);
    n.commit(&Command::Admin(AdminCommand::CreateGroup(g.clone())));
    (n, g)
}

#[test]
fn a_group_gets_each_message_once_until_its_invisible_time_passes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut n, g) = setup(dir.path(), 16);
    n.commit(&send("T", 0, 1, &["a", "b"]));
    n.commit(&send("T", 1, 1, &["c"]));
    let first = pop(&mut n, &g, "T", &MatchAll, 1000, 500);
    assert_eq!(first.len(), 3);
    assert!(pop(&mut n, &g, "T", &MatchAll, 1400, 500).is_empty(), "all in flight");
    n.commit(&Command::Consume(ConsumeCommand::Ack(receipt("g", "T", &first[0]))));
    let again = pop(&mut n, &g, "T", &MatchAll, 1500, 500);
    assert_eq!(again.len(), 2, "the two unacked come back");
    assert!(again.iter().all(|d| d.attempt == 2));
    // Another group has its own progress.
    let other = group("h", 16);
    n.commit(&Command::Admin(AdminCommand::CreateGroup(other.clone())));
    assert_eq!(pop(&mut n, &other, "T", &MatchAll, 1500, 500).len(), 3);
}

/// Passes messages with exactly this tag (the plugin host's tag filter does this in WASM).
struct OnlyTag(&'static str);

impl MessageFilter for OnlyTag {
    fn may_match(&self, hash: u64) -> bool {
        hash == crate::store::tag_hash(self.0)
    }
    fn reads_messages(&self) -> bool {
        true
    }
    fn passes(&self, messages: &[StoredView], _: i64) -> Vec<bool> {
        messages.iter().map(|m| m.message.tag == self.0).collect()
    }
}

#[test]
fn filtered_out_messages_are_passed_over_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let (mut n, g) = setup(dir.path(), 16);
    n.commit(&send("T", 0, 1, &["a", "b", "c"])); // all tagged TagA
    let none = pop(&mut n, &g, "T", &OnlyTag("TagB"), 1000, 500);
    assert!(none.is_empty());
    let progress = n.broker.group_progress();
    assert_eq!(progress.iter().map(|p| p.lag + p.inflight).sum::<u64>(), 0, "nothing left to consume");
    assert_eq!(progress.len(), 1, "the group's progress on T is known");
}

/// Passes messages whose id ends in `0` (reads every message, as a SQL92 filter does).
struct IdsEndingInZero;

impl MessageFilter for IdsEndingInZero {
    fn may_match(&self, _: u64) -> bool {
        true
    }
    fn reads_messages(&self) -> bool {
        true
    }
    fn passes(&self, messages: &[StoredView], _: i64) -> Vec<bool> {
        messages.iter().map(|m| m.message.message_id.ends_with('0')).collect()
    }
}

#[test]
fn a_selective_filter_over_many_queues_delivers_each_match_once_within_the_budget() {
    // Queues are screened on several threads sharing one budget: no match may be lost, doubled or
    // delivered past the budget, and what does not match is passed over.
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("T", 6));
    let g = group("g", 16);
    n.commit(&Command::Admin(AdminCommand::CreateGroup(g.clone())));
    let mut expected = std::collections::BTreeSet::new();
    for q in 0..6u32 {
        for chunk in 0..10 {
            let ids: Vec<String> = (0..50).map(|i| format!("q{q}-{}", chunk * 50 + i)).collect();
            expected.extend(ids.iter().filter(|id| id.ends_with('0')).map(|id| (q, id.clone())));
            let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
            n.commit(&send("T", q, 1, &refs));
        }
    }
    let mut delivered = std::collections::BTreeSet::new();
    for round in 0.. {
        assert!(round < 100, "the backlog should drain");
        let got = pop(&mut n, &g, "T", &IdsEndingInZero, 1000, 60_000);
        assert!(got.len() <= 32, "a pop of 32 delivered {}", got.len());
        if got.is_empty() {
            break;
        }
        for d in got {
            let id = n.broker.read("T", queue_of(&d), d.offset).unwrap().unwrap().message.message_id;
            assert!(id.ends_with('0'), "{id} does not pass the filter");
            assert!(delivered.insert((queue_of(&d), id.clone())), "{id} delivered twice");
        }
    }
    assert_eq!(delivered, expected);
    let progress = n.broker.group_progress();
    let (lag, inflight) = progress.iter().fold((0, 0), |(l, f), p| (l + p.lag, f + p.inflight));
    assert_eq!((lag, inflight), (expected.len() as u64, expected.len() as u64), "all else was passed over");
}

#[test]
fn after_max_attempts_a_copy_goes_to_the_dead_letter_topic_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut n, g) = setup(dir.path(), 2);
    n.commit(&send("T", 1, 1, &["doomed"]));
    assert_eq!(pop(&mut n, &g, "T", &MatchAll, 1000, 100).len(), 1);
    assert_eq!(pop(&mut n, &g, "T", &MatchAll, 1100, 100)[0].attempt, 2);
    let last =
        consumption(&n).queues.get(&("g".to_string(), "T".to_string(), 1)).unwrap().inflight.get(&0).unwrap().clone();
    // Attempts used up: this pop dead-letters instead of delivering.
    assert!(pop(&mut n, &g, "T", &MatchAll, 1200, 100).is_empty());
    let dlq = dead_letter_topic("g");
    let dead = n.broker.read(&dlq, 0, 0).unwrap().expect("a copy in the dead-letter topic");
    assert_eq!((dead.message.message_id.as_str(), &dead.message.body[..]), ("doomed", &b"body of doomed"[..]));
    assert!(consumption(&n).queues.get(&("g".to_string(), "T".to_string(), 1)).unwrap().inflight.is_empty());
    // The same dead letter again (a retry) is stale: no second copy.
    let r = Receipt {
        group: "g".into(),
        topic: "T".into(),
        channel: ChannelId::Queue(1),
        offset: 0,
        generation: last.generation,
    };
    let again = n.broker.dead_letter_of(&r, 1300);
    assert!(again.is_ok());
    let reply = n.commit(&Command::DeadLetter(again.unwrap()));
    assert_eq!(reply, Reply::Consume(ConsumeOutcome::StaleReceipt));
    assert!(n.broker.read(&dlq, 0, 1).unwrap().is_none());
}

#[test]
fn consumption_state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let (mut n, g) = setup(dir.path(), 16);
        n.commit(&send("T", 0, 1, &["a", "b"]));
        let d = pop(&mut n, &g, "T", &MatchAll, 1000, 60_000);
        n.commit(&Command::Consume(ConsumeCommand::Ack(receipt("g", "T", &d[0]))));
        n.broker.checkpoint().unwrap();
        consumption(&n)
    };
    let n = node(dir.path());
    assert_eq!(consumption(&n), before);
    assert_eq!(n.broker.group("g"), Some(group("g", 16)));
}

#[test]
fn a_snapshot_at_an_older_index_has_the_consumption_state_of_that_index() {
    let dir = tempfile::tempdir().unwrap();
    let (mut n, g) = setup(dir.path(), 2);
    n.commit(&send("T", 0, 1, &["a", "b", "c"]));
    let d = pop(&mut n, &g, "T", &MatchAll, 1000, 100);
    n.commit(&Command::Consume(ConsumeCommand::Ack(receipt("g", "T", &d[0]))));
    let early = (n.next_index - 1, consumption(&n));
    pop(&mut n, &g, "T", &MatchAll, 1200, 100);
    let change = ConsumeCommand::ChangeInvisible { receipt: receipt("g", "T", &d[1]), now_ms: 1300, invisible_ms: 5 };
    n.commit(&Command::Consume(change));
    let later = (n.next_index - 1, consumption(&n));
    // Dead letters, new messages and deliveries after both points.
    n.commit(&send("T", 1, 1, &["d"]));
    pop(&mut n, &g, "T", &MatchAll, 5000, 100);
    pop(&mut n, &g, "T", &MatchAll, 9000, 100);
    assert_ne!(consumption(&n), later.1);

    let snap_early = n.broker.state_at(early.0, None, &no_membership).unwrap();
    assert_eq!(snap_early.data.consumption, early.1);
    // The next snapshot builds on the previous one.
    let snap_later = n.broker.state_at(later.0, Some(snap_early), &no_membership).unwrap();
    assert_eq!(snap_later.data.consumption, later.1);
}

#[test]
fn a_pop_planned_before_its_topic_was_deleted_and_recreated_does_not_apply_to_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let (mut n, g) = setup(dir.path(), 16);
    n.commit(&send("T", 0, 1, &["old-1", "old-2"]));
    let t = topic(&n, "T");
    let filter = MatchAll;
    let request = PopRequest {
        group: &g,
        topic: &t,
        filter: &filter,
        max_messages: 32,
        invisible_ms: 100,
        now_ms: 1,
        first_queue: 0,
        by_priority: false,
    };
    let stale = n.broker.plan_pop(&request).unwrap();
    n.commit(&Command::Admin(crate::broker::AdminCommand::DeleteTopic { name: "T".into() }));
    n.commit(&create("T", 2));
    let reply = n.commit(&Command::Consume(ConsumeCommand::Pop(stale.pop)));
    assert_eq!(reply, Reply::Consume(ConsumeOutcome::TopicNotFound("T".into())));
    assert!(consumption(&n).queues.is_empty(), "no POP state carried over to the new topic");
    n.commit(&send("T", 0, 1, &["new-1"]));
    let fresh = pop(&mut n, &g, "T", &MatchAll, 2, 100);
    assert_eq!(fresh.iter().map(|d| d.offset).collect::<Vec<_>>(), vec![0], "the new topic is read from its start");

    // A snapshot taken now replays the deletion and re-creation the same way.
    let at = n.next_index - 1;
    let snap = n.broker.state_at(at, None, &no_membership).unwrap();
    assert_eq!(snap.data.consumption, consumption(&n));
}

#[test]
fn a_receive_by_priority_takes_the_highest_queue_first_and_fills_its_batch_going_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&Command::Admin(crate::broker::AdminCommand::CreateTopic(TopicConfig::new(
        "P",
        4,
        crate::broker::TopicKind::Priority,
    ))));
    let g = group("g", 16);
    n.commit(&Command::Admin(AdminCommand::CreateGroup(g.clone())));
    for (queue, ids) in [(0, ["q0a", "q0b"]), (1, ["q1a", "q1b"]), (3, ["q3a", "q3b"])] {
        n.commit(&send("P", queue, 1, &ids));
    }
    let t = topic(&n, "P");
    let plan = |n: &Node, by_priority, first_queue, max_messages| {
        let request = PopRequest {
            group: &g,
            topic: &t,
            filter: &MatchAll,
            max_messages,
            invisible_ms: 60_000,
            now_ms: 1_000,
            first_queue,
            by_priority,
        };
        let plan = n.broker.plan_pop(&request).unwrap();
        plan.pop.takes.iter().flat_map(|t| t.deliver.iter().map(move |(o, _)| (t.queue_id, *o))).collect::<Vec<_>>()
    };
    // By priority: queue 3's two, then queue 1's first; whatever queue the rotation is at.
    for first_queue in 0..4 {
        assert_eq!(plan(&n, true, first_queue, 3), [(3, 0), (3, 1), (1, 0)]);
    }
    // In turn: from the rotation's queue on.
    assert_eq!(plan(&n, false, 0, 3), [(0, 0), (0, 1), (1, 0)]);
}
