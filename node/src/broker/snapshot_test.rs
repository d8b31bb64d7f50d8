//! Snapshots are one point in time: installing the snapshot taken at `at` and applying the log
//! after it gives exactly the state — every table, every ConsumeQueue record — of a replica that
//! applied everything (and purged its log at the same point).

use std::path::Path;

use proptest::prelude::*;

use crate::broker::group::GroupConfig;
use crate::broker::pop::{ChannelId, ConsumeCommand, ConsumeOutcome, Receipt};
use crate::broker::pop_plan::MatchAll;
use crate::broker::state_test::{Node, create, lid, no_membership, node, send};
use crate::broker::timer::{TimerCommand, parse_recall_handle};
use crate::broker::transaction::{Resolver, TransactionCommand, parse_transaction_id};
use crate::broker::{
    AdminCommand, Broker, BrokerOptions, Command, LogPosition, PopRequest, Reply, State, TopicConfig, TopicKind,
};
use prost::Message;
use rockraft_proto::rockraft::StoredMessage;

/// Two normal topics, a delay topic and a transaction topic.
const TOPICS: [&str; 4] = ["A", "B", "D", "X"];
const KINDS: [TopicKind; 4] = [TopicKind::Normal, TopicKind::Normal, TopicKind::Delay, TopicKind::Transaction];
const GROUPS: [&str; 2] = ["g", "h"];

#[derive(Debug, Clone)]
enum Op {
    CreateTopic {
        topic: usize,
        queues: u32,
    },
    DeleteTopic {
        topic: usize,
    },
    /// Message ids come from a small pool, so retries (duplicates) happen.
    Send {
        topic: usize,
        queue: u32,
        ids: Vec<u8>,
        later_ms: i64,
    },
    CreateGroup {
        group: usize,
        fifo: bool,
    },
    DeleteGroup {
        group: usize,
    },
    Pop {
        group: usize,
        topic: usize,
        later_ms: i64,
    },
    /// Acks (or, if `change`, gives a new invisible time to) the group's first delivery in flight.
    Settle {
        group: usize,
        change: bool,
    },
    Reset {
        group: usize,
        topic: usize,
    },
    /// A pull consumer's commit of one queue.
    Commit {
        group: usize,
        topic: usize,
        queue: u32,
        offset: u64,
    },
    /// The leader fires the timers due by then.
    Fire {
        later_ms: i64,
    },
    /// Recalls the `pick`-th pending timer (or a fired one's key again).
    Recall {
        pick: usize,
    },
    /// Resolves the `pick`-th half, whatever its state.
    Resolve {
        pick: usize,
        commit: bool,
        operator: bool,
    },
    /// The check job reschedules the halves due by then.
    Check {
        later_ms: i64,
        asked: bool,
    },
    /// Creates, changes or deletes a user, or grants or revokes one of their rules.
    Access {
        user: usize,
        what: u8,
    },
    /// A new term whose leader records its failover.
    Failover {
        later_ms: i64,
    },
    /// A node records a repair of its disk (some from a member, some rebuilt from its own log).
    Repair {
        node: u64,
        first: u64,
        from_member: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize, 1..4u32).prop_map(|(topic, queues)| Op::CreateTopic { topic, queues }),
        (0..4usize).prop_map(|topic| Op::DeleteTopic { topic }),
        (0..4usize, 0..3u32, proptest::collection::vec(0..12u8, 1..4), 0..90_000i64)
            .prop_map(|(topic, queue, ids, later_ms)| Op::Send { topic, queue, ids, later_ms }),
        (0..2usize, any::<bool>()).prop_map(|(group, fifo)| Op::CreateGroup { group, fifo }),
        (0..2usize).prop_map(|group| Op::DeleteGroup { group }),
        (0..2usize, 0..4usize, 0..3_000i64).prop_map(|(group, topic, later_ms)| Op::Pop { group, topic, later_ms }),
        (0..2usize, any::<bool>()).prop_map(|(group, change)| Op::Settle { group, change }),
        (0..2usize, 0..4usize).prop_map(|(group, topic)| Op::Reset { group, topic }),
        (0..2usize, 0..4usize, 0..3u32, 0..6u64).prop_map(|(group, topic, queue, offset)| Op::Commit {
            group,
            topic,
            queue,
            offset
        }),
        (0..4_000i64).prop_map(|later_ms| Op::Fire { later_ms }),
        (0..4usize).prop_map(|pick| Op::Recall { pick }),
        (0..4usize, any::<bool>(), any::<bool>()).prop_map(|(pick, commit, operator)| Op::Resolve {
            pick,
            commit,
            operator
        }),
        (0..4_000i64, any::<bool>()).prop_map(|(later_ms, asked)| Op::Check { later_ms, asked }),
        (0..2usize, 0..5u8).prop_map(|(user, what)| Op::Access { user, what }),
        (0..3_000i64).prop_map(|later_ms| Op::Failover { later_ms }),
        (1..4u64, 0..500u64, any::<bool>()).prop_map(|(node, first, from_member)| Op::Repair {
            node,
            first,
            from_member
        }),
    ]
}

/// Turns `op` into the commands a leader would propose against `n`'s state, and commits them.
fn run(n: &mut Node, op: &Op, clock: &mut i64) {
    match op {
        Op::Failover { later_ms } => {
            n.term += 1;
            *clock += later_ms;
            let record = crate::broker::failover::Failover {
                term: n.term,
                leader: 1,
                previous: Some(2),
                last_heard_ms: Some(*clock - later_ms),
                election_started_ms: *clock - later_ms / 2,
                elected_ms: *clock,
                first_commit_ms: *clock,
                routes_converged_ms: *clock,
                not_following: vec![2],
            };
            n.commit(&Command::Admin(AdminCommand::RecordFailover(record)));
        }
        Op::Repair { node, first, from_member } => {
            use crate::broker::repair::{Repair, RepairedPart};
            let record = Repair {
                node: *node,
                group: 1,
                part: if *from_member { RepairedPart::LogRecords } else { RepairedPart::QueueRecord },
                first: *first,
                last: first + u64::from(*from_member) * 7,
                source: from_member.then_some(node % 3 + 1),
                place: format!("file of {first}"),
                began_ms: *clock,
                done_ms: *clock + 3,
            };
            n.commit(&Command::Admin(AdminCommand::RecordRepair(record)));
        }
        Op::Access { user, what } => {
            use crate::broker::access::{AccessCommand, Action, Decision, Rule, Secret};
            let access_key = ["alice", "bob"][*user].to_string();
            let resource = ["Topic:orders*", "Group:readers"][*user].parse().unwrap();
            let command = match what {
                0 | 1 => AccessCommand::PutUser {
                    access_key,
                    secret: Secret::new(format!("secret-{what}-{clock}")),
                    admin: *what == 1,
                    create: *what == 0,
                },
                2 => AccessCommand::DeleteUser { access_key },
                3 => AccessCommand::Grant {
                    access_key,
                    resource,
                    rule: Rule { actions: vec![Action::Sub], decision: Decision::Allow },
                },
                _ => AccessCommand::Revoke { access_key, resource },
            };
            n.commit(&Command::Access(command));
        }
        Op::CreateTopic { topic, queues } => {
            let config = TopicConfig::new(TOPICS[*topic], *queues, KINDS[*topic]);
            n.commit(&Command::Admin(AdminCommand::CreateTopic(config)));
        }
        Op::DeleteTopic { topic } => {
            n.commit(&Command::Admin(AdminCommand::DeleteTopic { name: TOPICS[*topic].into() }));
        }
        Op::Send { topic, queue, ids, later_ms } => {
            *clock += later_ms;
            let ids: Vec<String> = ids.iter().map(|i| format!("id-{i}")).collect();
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            let mut command = send(TOPICS[*topic], *queue, *clock, &ids);
            // Delayed messages due up to 5 s ahead (some already due); halves checked after 1 s.
            if let Command::Send(batch) = &mut command {
                for (i, raw) in batch.messages.iter_mut().enumerate() {
                    let mut m = StoredMessage::decode(raw.clone()).unwrap();
                    m.delivery_timestamp_ms = *clock + (i as i64 * 1_700 + later_ms) % 5_000 - 500;
                    m.transaction_recovery_ms = 1_000;
                    *raw = m.encode_to_vec().into();
                }
            }
            n.commit(&command);
        }
        Op::Fire { later_ms } => {
            *clock += later_ms;
            let due = n.broker.due_timers(*clock, 16).unwrap();
            n.commit(&Command::Timer(TimerCommand::Fire { now_ms: *clock, timers: due }));
        }
        Op::Recall { pick } => {
            let timers = n.broker.held(true, None, true, None, 8).unwrap();
            let Some(t) = timers.get(pick % timers.len().max(1)) else { return };
            let (_, key) = parse_recall_handle(&t.handle).unwrap();
            let topic = t.message.topic.clone();
            n.commit(&Command::Timer(TimerCommand::Recall { now_ms: *clock, topic, timer: key }));
        }
        Op::Resolve { pick, commit, operator } => {
            let halves = n.broker.held(false, None, true, None, 8).unwrap();
            let Some(h) = halves.get(pick % halves.len().max(1)) else { return };
            let command = TransactionCommand::Resolve {
                now_ms: *clock,
                topic: h.message.topic.clone(),
                position: parse_transaction_id(&h.handle).unwrap().1,
                message_id: h.message.message_id.clone(),
                commit: *commit,
                by: if *operator { Resolver::Operator } else { Resolver::Checker },
            };
            n.commit(&Command::Transaction(command));
        }
        Op::Check { later_ms, asked } => {
            *clock += later_ms;
            let due = n.broker.due_checks(*clock, 16).unwrap();
            let halves = due.into_iter().map(|(p, h)| (p, h.checks, *clock + 2_000)).collect();
            n.commit(&Command::Transaction(TransactionCommand::Checked { now_ms: *clock, halves, asked: *asked }));
        }
        Op::CreateGroup { group, fifo } => {
            let g = GroupConfig {
                name: GROUPS[*group].into(),
                fifo: *fifo,
                max_attempts: 2,
                priority_factor: 100,
                lite: None,
            };
            n.commit(&Command::Admin(AdminCommand::CreateGroup(g)));
        }
        Op::DeleteGroup { group } => {
            n.commit(&Command::Admin(AdminCommand::DeleteGroup { name: GROUPS[*group].into() }));
        }
        Op::Pop { group, topic, later_ms } => {
            *clock += later_ms;
            let (Some(g), Some(t)) = (n.broker.group(GROUPS[*group]), n.broker.topic(TOPICS[*topic])) else { return };
            let request = PopRequest {
                group: &g,
                topic: &t,
                filter: &MatchAll,
                max_messages: 3,
                invisible_ms: 1_000,
                now_ms: *clock,
                first_queue: 0,
                by_priority: false,
            };
            let plan = n.broker.plan_pop(&request).expect("plan");
            for d in plan.dead_letters {
                n.commit(&Command::DeadLetter(d));
            }
            n.commit(&Command::Consume(ConsumeCommand::Pop(plan.pop)));
        }
        Op::Settle { group, change } => {
            let first = {
                let state = n.broker.state();
                state.data.consumption.queues.iter().filter(|((g, _, _), _)| g == GROUPS[*group]).find_map(
                    |((g, t, q), p)| {
                        p.inflight.iter().next().map(|(o, f)| Receipt {
                            group: g.clone(),
                            topic: t.clone(),
                            channel: ChannelId::Queue(*q),
                            offset: *o,
                            generation: f.generation,
                        })
                    },
                )
            };
            let Some(receipt) = first else { return };
            let command = if *change {
                ConsumeCommand::ChangeInvisible { receipt, now_ms: *clock, invisible_ms: 500 }
            } else {
                ConsumeCommand::Ack(receipt)
            };
            n.commit(&Command::Consume(command));
        }
        Op::Reset { group, topic } => {
            let Some(epoch) = n.broker.topic_epoch(TOPICS[*topic]) else { return };
            let command = ConsumeCommand::ResetOffset {
                group: GROUPS[*group].into(),
                topic: TOPICS[*topic].into(),
                topic_epoch: epoch,
                positions: vec![(0, 0)],
            };
            n.commit(&Command::Consume(command));
        }
        Op::Commit { group, topic, queue, offset } => {
            let Some(epoch) = n.broker.topic_epoch(TOPICS[*topic]) else { return };
            let command = ConsumeCommand::CommitOffset {
                group: GROUPS[*group].into(),
                topic: TOPICS[*topic].into(),
                topic_epoch: epoch,
                queue_id: *queue,
                offset: *offset,
            };
            n.commit(&Command::Consume(command));
        }
    }
}

/// A broker of its own that reads `leader`'s log (it only reads it to serve messages).
fn follower(dir: &Path, leader: &Node) -> Broker {
    let options = BrokerOptions {
        dir: dir.join("broker"),
        cq_records_per_file: 8,
        message_index_entries_per_file: 16,
        checkpoint_interval: std::time::Duration::from_secs(3600),
        partition: crate::broker::position::PartitionId::FIRST,
        holds_metadata: true,
    };
    crate::broker::state_test::open_broker(options, leader.log.reader())
}

/// Applies the leader's log entries `from..to` to `b`.
fn replay(b: &Broker, leader: &Node, from: u64, to: u64) {
    let reader = leader.log.reader();
    for index in from..to {
        let record = reader.read(index).unwrap().unwrap();
        b.apply(LogPosition::from(&record.meta), record.payload).unwrap();
    }
}

/// Every table equal, and every readable ConsumeQueue record byte for byte.
fn assert_same(a: &Broker, b: &Broker) {
    let (sa, sb): (State, State) = (a.state().clone(), b.state().clone());
    assert_eq!(sa, sb);
    assert_eq!(sa.digest().unwrap(), sb.digest().unwrap());
    for ((topic, q), range) in sa.data.queues.iter() {
        for offset in range.start..range.next {
            assert_eq!(
                a.queue_record(topic, *q, offset).unwrap(),
                b.queue_record(topic, *q, offset).unwrap(),
                "{topic}/{q} offset {offset}"
            );
        }
    }
}

fn check_install_then_replay(ops: &[Op], at_pick: prop::sample::Index, earlier_pick: prop::sample::Index) {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut leader = node(ld.path());
    let mut clock = 1_000_000;
    for op in ops {
        run(&mut leader, op, &mut clock);
    }
    let end = leader.next_index;
    if end == 0 {
        return;
    }
    let at = at_pick.index(end as usize) as u64;
    // Built as retention builds them: on top of an earlier snapshot.
    let earlier = earlier_pick.index(at as usize + 1) as u64;
    let previous = leader.broker.state_at(earlier, None, &no_membership).unwrap();
    let snapshot = leader.broker.state_at(at, Some(previous), &no_membership).unwrap();
    assert_eq!(snapshot, leader.broker.state_at(at, None, &no_membership).unwrap(), "the same with or without a base");
    leader.broker.forget_before(&snapshot).unwrap();

    let f = follower(fd.path(), &leader);
    f.install(serde_json::from_slice(&serde_json::to_vec(&snapshot).unwrap()).unwrap()).unwrap();
    replay(&f, &leader, at + 1, end);
    assert_same(&leader.broker, &f);
    // Held messages sent before the snapshot point are found by id on the replica too.
    for timers in [true, false] {
        for e in leader.broker.held(timers, None, true, None, 1000).unwrap() {
            let id = &e.message.message_id;
            assert!(f.find_held(id).unwrap().is_some(), "held {id} is found by id after the install");
        }
    }
    // And the install was durable: a restart plus the replay of what was not checkpointed.
    drop(f);
    let f = follower(fd.path(), &leader);
    let applied = f.last_applied().map(|l| l.index).unwrap();
    replay(&f, &leader, applied + 1, end);
    assert_same(&leader.broker, &f);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn installing_a_snapshot_then_replaying_equals_applying_everything(
        ops in proptest::collection::vec(op(), 1..40),
        at in any::<prop::sample::Index>(),
        earlier in any::<prop::sample::Index>(),
    ) {
        // Always start with something to consume, then the random mix.
        let mut all = vec![
            Op::CreateTopic { topic: 0, queues: 2 },
            Op::CreateGroup { group: 0, fifo: false },
        ];
        all.extend(ops);
        check_install_then_replay(&all, at, earlier);
    }
}

#[test]
fn a_topic_created_after_the_snapshot_point_is_consumable_on_the_replica_that_installed_it() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut leader = node(ld.path());
    leader.commit(&create("Old", 1));
    let g = GroupConfig { name: "g".into(), fifo: false, max_attempts: 5, priority_factor: 100, lite: None };
    leader.commit(&Command::Admin(AdminCommand::CreateGroup(g.clone())));
    leader.commit(&send("Old", 0, 1_000, &["retry-me"]));
    let at = leader.next_index - 1;
    leader.commit(&create("New", 1));
    leader.commit(&send("New", 0, 2_000, &["n1"]));
    // A retry of a message sent just before the snapshot point.
    assert!(matches!(leader.commit(&send("Old", 0, 3_000, &["retry-me"])), Reply::Sent(o) if o[0].duplicate));

    let snapshot = leader.broker.state_at(at, None, &no_membership).unwrap();
    let f = follower(fd.path(), &leader);
    f.install(snapshot).unwrap();
    replay(&f, &leader, at + 1, leader.next_index);
    assert_eq!(f.topic_epoch("New"), leader.broker.topic_epoch("New"));
    assert_eq!(f.queue_status("Old")[0].next, 1, "the retry was not stored twice on the replica");
    // The replica can plan a pop of the new topic that its state accepts.
    let t = f.topic("New").unwrap();
    let request = PopRequest {
        group: &g,
        topic: &t,
        filter: &MatchAll,
        max_messages: 8,
        invisible_ms: 1_000,
        now_ms: 5_000,
        first_queue: 0,
        by_priority: false,
    };
    let plan = f.plan_pop(&request).unwrap();
    let mut f_state = f.state().clone();
    let reply = f_state
        .apply(
            lid(leader.next_index),
            Command::Consume(ConsumeCommand::Pop(plan.pop)).encode(),
            &mut Default::default(),
        )
        .unwrap();
    assert!(matches!(reply, Reply::Consume(ConsumeOutcome::Delivered(d)) if d.len() == 1));
}

/// Every key path a JSON value holds, with map keys that are data (numbers, names) folded into
/// `*`, so that only the shape is left.
fn shape(value: &serde_json::Value, path: &str, out: &mut std::collections::BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let is_field = k.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && k.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                let key = if is_field && !TOPICS.contains(&k.as_str()) && !GROUPS.contains(&k.as_str()) {
                    k.as_str()
                } else {
                    "*"
                };
                let here = format!("{path}.{key}");
                out.insert(here.clone());
                shape(v, &here, out);
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                shape(v, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// The snapshot (and the table rows checkpoints write, the same types) may only change shape
/// with a new `SNAPSHOT_FORMAT`: a node of an earlier release then refuses it and says why,
/// instead of dropping the fields it does not know. The shape each format names is kept in
/// `snapshot_shape.txt`; a change of shape fails here until the format is raised and the file
/// rewritten (`ROCKRAFT_WRITE_SNAPSHOT_SHAPE=1`).
#[test]
fn the_snapshot_keeps_the_shape_its_format_names() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let dir = tempfile::tempdir().unwrap();
    let mut leader = node(dir.path());
    let mut clock = 1_000_000;
    let mut seen = std::collections::BTreeSet::new();
    let start = [Op::CreateTopic { topic: 0, queues: 2 }, Op::CreateGroup { group: 0, fifo: false }];
    for round in 0..12 {
        let ops = proptest::collection::vec(op(), 60).new_tree(&mut runner).unwrap().current();
        for op in start.iter().filter(|_| round == 0).chain(ops.iter()) {
            run(&mut leader, op, &mut clock);
            let json = serde_json::to_value(leader.broker.state().clone()).unwrap();
            shape(&json, "", &mut seen);
        }
    }
    let mut written = format!("format {}\n", crate::broker::state::SNAPSHOT_FORMAT);
    for path in &seen {
        written.push_str(path);
        written.push('\n');
    }
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/broker/snapshot_shape.txt");
    if std::env::var_os("ROCKRAFT_WRITE_SNAPSHOT_SHAPE").is_some() {
        std::fs::write(&file, &written).unwrap();
    }
    let pinned = std::fs::read_to_string(&file).unwrap();
    let pinned_format = pinned.lines().next().unwrap_or_default();
    let pinned_paths: std::collections::BTreeSet<&str> = pinned.lines().skip(1).collect();
    let now: std::collections::BTreeSet<&str> = written.lines().skip(1).collect();
    let added: Vec<_> = now.difference(&pinned_paths).collect();
    let removed: Vec<_> = pinned_paths.difference(&now).collect();
    assert!(
        added.is_empty() && removed.is_empty() && pinned_format == written.lines().next().unwrap(),
        "the snapshot's shape changed (added {added:?}, removed {removed:?}; pinned as {pinned_format}): raise \
         SNAPSHOT_FORMAT and rewrite snapshot_shape.txt with ROCKRAFT_WRITE_SNAPSHOT_SHAPE=1"
    );
}
