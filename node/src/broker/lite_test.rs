//! Lite topics through apply: channels per lite topic, subscriptions, ordered delivery, expiry,
//! and the same state after a restart (checkpoint + replay).

use bytes::Bytes;
use prost::Message;
use rockraft_proto::rockraft::{SendBatch, StoredMessage};

use crate::broker::group::GroupConfig;
use crate::broker::lite::{
    LiteActor, LiteBinding, LiteCommand, LiteModel, LiteOutcome, LitePlan, LiteRequest, LiteSubscription, SyncAction,
};
use crate::broker::pop::{ChannelId, ConsumeCommand, ConsumeOutcome, Receipt};
use crate::broker::state_test::{Node, node};
use crate::broker::{AdminCommand, Command, Reply, TopicConfig, TopicKind};

const PARENT: &str = "Chats";

fn setup(n: &mut Node, model: LiteModel, quota: u32) {
    let mut parent = TopicConfig::new(PARENT, 2, TopicKind::Lite);
    parent.lite_ttl_minutes = 1;
    assert_eq!(n.commit(&Command::Admin(AdminCommand::CreateTopic(parent))), Reply::Applied);
    let lite = Some(LiteBinding { topic: PARENT.into(), model, quota });
    let g = GroupConfig { name: "g".into(), fifo: false, max_attempts: 2, priority_factor: 100, lite };
    n.commit(&Command::Admin(AdminCommand::CreateGroup(g)));
}

/// One entry of messages `(lite topic, body)` to queue 0 of the parent, stored at `at_ms`.
fn send(n: &mut Node, at_ms: i64, messages: &[(&str, &str)]) -> Reply {
    let messages = messages
        .iter()
        .map(|(lite, body)| {
            let m = StoredMessage {
                message_id: format!("id-{body}"),
                body: Bytes::from(body.to_string()),
                lite_topic: lite.to_string(),
                ..Default::default()
            };
            m.encode_to_vec().into()
        })
        .collect();
    n.commit(&Command::Send(SendBatch {
        topic: PARENT.into(),
        queue_id: 0,
        store_timestamp_ms: at_ms,
        clock_ms: at_ms,
        messages,
        queue_ids: vec![],
    }))
}

fn sync(n: &mut Node, client: &str, action: SyncAction, lites: &[&str]) -> Reply {
    sync_as(n, &LiteActor::Open, client, action, lites)
}

fn sync_as(n: &mut Node, by: &LiteActor, client: &str, action: SyncAction, lites: &[&str]) -> Reply {
    n.commit(&Command::Lite(LiteCommand::Sync {
        group: "g".into(),
        parent: PARENT.into(),
        client: client.into(),
        action,
        lites: lites.iter().map(|l| l.to_string()).collect(),
        now_ms: 1000,
        by: by.clone(),
    }))
}

fn plan(n: &Node, client: &str, max: usize, now_ms: i64) -> LitePlan {
    plan_as(n, &LiteActor::Open, client, max, now_ms)
}

fn plan_as(n: &Node, by: &LiteActor, client: &str, max: usize, now_ms: i64) -> LitePlan {
    let group = n.broker.group("g").unwrap();
    let r = LiteRequest {
        group: &group,
        parent: PARENT,
        client,
        by,
        max_messages: max,
        invisible_ms: 10_000,
        now_ms,
        first: 0,
        scan_limit: usize::MAX,
    };
    n.broker.plan_lite_pop(&r).unwrap()
}

/// Plans and commits a receive; the bodies delivered, in order, with their receipts.
fn receive(n: &mut Node, client: &str, max: usize, now_ms: i64) -> Vec<(String, Receipt)> {
    receive_as(n, &LiteActor::Open, client, max, now_ms)
}

fn receive_as(n: &mut Node, by: &LiteActor, client: &str, max: usize, now_ms: i64) -> Vec<(String, Receipt)> {
    let plan = plan_as(n, by, client, max, now_ms);
    let Reply::Lite(LiteOutcome::Delivered { deliveries, names }) =
        n.commit(&Command::Lite(LiteCommand::Pop(plan.pop)))
    else {
        panic!("not delivered")
    };
    deliveries
        .iter()
        .map(|d| {
            let ChannelId::Lite(id) = d.channel else { panic!("a lite delivery: {d:?}") };
            let e = n.broker.read_lite(PARENT, &names[&id], id, d.offset).unwrap().unwrap();
            assert!(!e.message.lite_topic.is_empty(), "a lite message keeps its lite topic");
            let body = String::from_utf8(e.message.body.to_vec()).unwrap();
            (body, d.receipt("g", PARENT))
        })
        .collect()
}

/// Acks by receipt, as for a queue: one outcome for one, one each for several.
fn ack(n: &mut Node, receipts: Vec<Receipt>) -> Reply {
    n.commit(&Command::Consume(ConsumeCommand::Acks { receipts }))
}

fn acked(outcomes: &[ConsumeOutcome]) -> Reply {
    Reply::Consume(ConsumeOutcome::Each(outcomes.to_vec()))
}

fn bodies(got: &[(String, Receipt)]) -> Vec<&str> {
    got.iter().map(|(b, _)| b.as_str()).collect()
}

#[test]
fn a_client_receives_only_its_lite_topics_each_in_order_one_batch_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    send(&mut n, 1000, &[("a", "a0"), ("b", "b0"), ("a", "a1"), ("c", "c0")]);
    send(&mut n, 1001, &[("a", "a2"), ("b", "b1")]);
    let rows = n.broker.lite_topics(PARENT, Some("g"), "", 10).unwrap();
    let listed: Vec<(&str, u64, u64)> = rows.iter().map(|r| (r.lite.as_str(), r.messages, r.backlog)).collect();
    assert_eq!(listed, vec![("a", 3, 3), ("b", 2, 2), ("c", 1, 1)]);

    assert!(receive(&mut n, "client-1", 10, 2000).is_empty(), "nothing before a subscription");
    assert_eq!(
        sync(&mut n, "client-1", SyncAction::Add, &["a", "b"]),
        Reply::Lite(LiteOutcome::Synced { taken_from: vec![] })
    );
    let first = receive(&mut n, "client-1", 10, 2000);
    assert_eq!(bodies(&first), vec!["a0", "a1", "a2", "b0", "b1"], "c is not subscribed");
    // Nothing more while the batches are in flight, even once new messages arrive.
    send(&mut n, 1002, &[("a", "a3")]);
    assert!(receive(&mut n, "client-1", 10, 2001).is_empty());
    // Acking a's batch lets a's next message go; b's batch is still out.
    let a_receipts: Vec<Receipt> = first.iter().filter(|(b, _)| b.starts_with('a')).map(|(_, r)| r.clone()).collect();
    assert_eq!(
        ack(&mut n, a_receipts.clone()),
        acked(&[ConsumeOutcome::Done, ConsumeOutcome::Done, ConsumeOutcome::Done])
    );
    assert_eq!(bodies(&receive(&mut n, "client-1", 10, 2002)), vec!["a3"]);
    // An ack again of what ended is done; a made-up generation is stale.
    assert_eq!(ack(&mut n, vec![a_receipts[0].clone()]), acked(&[ConsumeOutcome::Done]));
    let mut forged = first[3].1.clone();
    forged.generation += 1;
    assert_eq!(ack(&mut n, vec![forged]), acked(&[ConsumeOutcome::StaleReceipt]));
    let rows = n.broker.lite_topics(PARENT, Some("g"), "b", 1).unwrap();
    assert_eq!((rows[0].lite.as_str(), rows[0].backlog, rows[0].inflight), ("b", 0, 2));
}

#[test]
fn an_unacked_batch_comes_back_in_order_then_goes_to_the_dead_letter_topic() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    send(&mut n, 1000, &[("a", "a0"), ("a", "a1")]);
    sync(&mut n, "c1", SyncAction::Add, &["a"]);
    assert_eq!(bodies(&receive(&mut n, "c1", 10, 2000)), vec!["a0", "a1"]);
    assert!(plan(&n, "c1", 10, 5000).pop.redeliveries.is_empty(), "still invisible");
    assert_eq!(plan(&n, "c1", 10, 5000).next_due_ms, Some(12_000));
    let again = receive(&mut n, "c1", 10, 12_000);
    assert_eq!(bodies(&again), vec!["a0", "a1"], "redelivered, in order");
    // The group allows two attempts: the third time they are due, they are dead letters.
    let p = plan(&n, "c1", 10, 22_000);
    assert!(p.pop.redeliveries.is_empty());
    assert_eq!(p.dead.len(), 2);
    let (lite, receipt) = &p.dead[0];
    let letter = n.broker.lite_dead_letter_of(lite, receipt, 22_000).unwrap();
    assert!(matches!(n.commit(&Command::DeadLetter(letter.clone())), Reply::Consume(_)));
    let dlq = n.broker.read("%DLQ%g", 0, 0).unwrap().unwrap();
    assert_eq!(dlq.message.body, Bytes::from("a0"));
    // The same dead letter again (a retried entry) ends nothing and stores no second copy, as
    // for a queue.
    assert_eq!(n.commit(&Command::DeadLetter(letter)), Reply::Consume(ConsumeOutcome::StaleReceipt));
    assert_eq!(n.broker.queue_status("%DLQ%g")[0].next, 1);
    assert_eq!(plan(&n, "c1", 10, 22_000).dead.len(), 1, "a1 is still to go");
}

#[test]
fn a_plan_looks_at_most_at_its_scan_limit_and_the_next_goes_on_from_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    send(&mut n, 1000, &[("e", "e0")]);
    sync(&mut n, "c1", SyncAction::Add, &["a", "b", "c", "d", "e"]);
    let group = n.broker.group("g").unwrap();
    let request = |first| LiteRequest {
        group: &group,
        parent: PARENT,
        client: "c1",
        by: &LiteActor::Open,
        max_messages: 10,
        invisible_ms: 10_000,
        now_ms: 2000,
        first,
        scan_limit: 2,
    };
    let p = n.broker.plan_lite_pop(&request(0)).unwrap();
    assert!(!p.delivers() && !p.scanned_all);
    assert_eq!((p.scanned, p.subscribed, p.next_first), (2, 5, 2));
    let p = n.broker.plan_lite_pop(&request(p.next_first)).unwrap();
    assert_eq!((p.delivers(), p.next_first), (false, 4));
    let p = n.broker.plan_lite_pop(&request(p.next_first)).unwrap();
    assert!(p.delivers(), "e, the fifth, is reached by the third plan");
    assert_eq!(p.pop.takes[0].lite, "e");
}

#[test]
fn subscriptions_are_checked_and_bounded_by_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 2);
    assert!(matches!(
        sync(&mut n, "c1", SyncAction::Add, &["bad name"]),
        Reply::Lite(LiteOutcome::IllegalLiteTopic(_))
    ));
    assert!(matches!(
        sync(&mut n, "c1", SyncAction::Add, &["a", "b", "c"]),
        Reply::Lite(LiteOutcome::QuotaExceeded(_))
    ));
    assert!(n.broker.lite_subscription("g", "c1").is_empty(), "a refused sync changes nothing");
    sync(&mut n, "c1", SyncAction::Add, &["a", "b"]);
    assert!(matches!(sync(&mut n, "c1", SyncAction::Add, &["c"]), Reply::Lite(LiteOutcome::QuotaExceeded(_))));
    sync(&mut n, "c1", SyncAction::Remove, &["a"]);
    assert_eq!(n.broker.lite_subscription("g", "c1"), vec!["b"]);
    sync(&mut n, "c1", SyncAction::Replace, &["c", "d"]);
    assert_eq!(n.broker.lite_subscription("g", "c1"), vec!["c", "d"]);
    sync(&mut n, "c1", SyncAction::Replace, &[]);
    assert!(n.broker.lite_subscription("g", "c1").is_empty());
    // A plain group cannot sync, nor a lite group of another parent.
    let plain = GroupConfig { name: "plain".into(), fifo: false, max_attempts: 2, priority_factor: 100, lite: None };
    n.commit(&Command::Admin(AdminCommand::CreateGroup(plain)));
    let r = n.commit(&Command::Lite(LiteCommand::Sync {
        group: "plain".into(),
        parent: PARENT.into(),
        client: "c1".into(),
        action: SyncAction::Add,
        lites: vec!["a".into()],
        now_ms: 0,
        by: LiteActor::Open,
    }));
    assert!(matches!(r, Reply::Lite(LiteOutcome::IllegalGroup(_))));
}

#[test]
fn in_an_exclusive_group_the_newest_subscriber_takes_a_lite_topic_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Exclusive, 10);
    send(&mut n, 1000, &[("a", "a0")]);
    sync(&mut n, "old", SyncAction::Add, &["a"]);
    let r = sync(&mut n, "new", SyncAction::Add, &["a"]);
    assert_eq!(r, Reply::Lite(LiteOutcome::Synced { taken_from: vec![("a".into(), "old".into())] }));
    assert!(n.broker.lite_subscription("g", "old").is_empty());
    // The old client's periodic whole-set sync does not take it back.
    sync(&mut n, "old", SyncAction::Replace, &["a"]);
    assert!(receive(&mut n, "old", 10, 2000).is_empty());
    assert_eq!(bodies(&receive(&mut n, "new", 10, 2000)), vec!["a0"]);
}

#[test]
fn idle_lite_topics_expire_with_their_progress_and_subscriptions_and_start_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    let olds: Vec<String> = (0..10).map(|i| format!("o{i}")).collect();
    let mut first: Vec<(&str, &str)> = olds.iter().map(|b| ("old", b.as_str())).collect();
    first.push(("busy", "b0"));
    send(&mut n, 1000, &first);
    send(&mut n, 50_000, &[("busy", "b1")]);
    sync(&mut n, "c1", SyncAction::Add, &["old", "busy"]);
    let got = receive(&mut n, "c1", 20, 51_000);
    let mut want = vec!["b0", "b1"];
    want.extend(olds.iter().map(String::as_str));
    assert_eq!(bodies(&got), want);
    let old_id = n.broker.lite_id(PARENT, "old").unwrap();
    assert!(n.broker.state().data.lite.records.get(&(old_id, 0)).unwrap().is_some(), "a full chunk of records");
    let expired = n.broker.expired_lite_topics(PARENT, "", 40_000, 100).unwrap().0;
    assert_eq!(expired.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(), vec!["old"]);
    // "busy" was named too, but was written after the cut-off: it stays.
    let mut named = expired.clone();
    named.push(("busy".into(), n.broker.state().data.lite.topic(PARENT, "busy").unwrap().unwrap().id));
    n.commit(&Command::Lite(LiteCommand::Expire { parent: PARENT.into(), before_ms: 40_000, lites: named }));
    let left: Vec<String> = n.broker.lite_topics(PARENT, None, "", 10).unwrap().into_iter().map(|r| r.lite).collect();
    assert_eq!(left, vec!["busy"]);
    assert_eq!(n.broker.lite_subscription("g", "c1"), vec!["busy"]);
    // A message to the expired name starts a new channel: offset 0, nothing of the old progress.
    send(&mut n, 60_000, &[("old", "o-new")]);
    sync(&mut n, "c1", SyncAction::Add, &["old"]);
    // (busy's batch is still in flight until 61 000.)
    assert_eq!(bodies(&receive(&mut n, "c1", 10, 60_500)), vec!["o-new"]);
    assert!(n.broker.state().data.lite.records.get(&(old_id, 0)).unwrap().is_none(), "old records are gone");
}

#[test]
fn lite_state_is_the_same_after_a_restart_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Exclusive, 10);
    send(&mut n, 1000, &[("a", "a0"), ("b", "b0"), ("a", "a1")]);
    sync(&mut n, "c1", SyncAction::Add, &["a", "b"]);
    let got = receive(&mut n, "c1", 1, 2000);
    ack(&mut n, vec![got[0].1.clone()]);
    n.broker.checkpoint().unwrap();
    receive(&mut n, "c1", 10, 3000);
    sync(&mut n, "c2", SyncAction::Add, &["b"]);
    let before = n.broker.live_digest().unwrap();
    let listing = n.broker.lite_topics(PARENT, Some("g"), "", 10).unwrap();
    let n = n.restart(dir.path());
    assert_eq!(n.broker.live_digest().unwrap(), before);
    let after = n.broker.lite_topics(PARENT, Some("g"), "", 10).unwrap();
    assert_eq!(format!("{after:?}"), format!("{listing:?}"));
    assert_eq!(n.broker.lite_subscription("g", "c2"), vec!["b"]);
}

#[test]
fn a_long_lite_topic_reads_back_in_order_across_record_chunks_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    let bodies_sent: Vec<String> = (0..37).map(|i| format!("m{i:02}")).collect();
    for chunk in bodies_sent.chunks(5) {
        let messages: Vec<(&str, &str)> = chunk.iter().map(|b| ("long", b.as_str())).collect();
        send(&mut n, 1000, &messages);
    }
    n.broker.checkpoint().unwrap();
    let mut n = n.restart(dir.path());
    sync(&mut n, "c1", SyncAction::Add, &["long"]);
    let mut got = Vec::new();
    for round in 0..10 {
        let batch = receive(&mut n, "c1", 7, 2000 + round);
        let receipts = batch.iter().map(|(_, r)| r.clone()).collect();
        got.extend(batch.into_iter().map(|(b, _)| b));
        ack(&mut n, receipts);
    }
    assert_eq!(got, bodies_sent, "every offset, across chunk rows and the registry row's tail");
}

fn unsubscribe(n: &mut Node, by: &LiteActor, client: &str) -> Reply {
    n.commit(&Command::Lite(LiteCommand::Unsubscribe { group: "g".into(), client: client.into(), by: by.clone() }))
}

fn not_owner(r: &Reply) -> bool {
    matches!(r, Reply::Lite(LiteOutcome::NotOwner(_)))
}

#[test]
fn another_user_naming_a_client_cannot_change_drop_or_receive_from_its_lite_subscriptions() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    let (alice, mallory) = (LiteActor::User("alice".into()), LiteActor::User("mallory".into()));
    let admin = LiteActor::Admin("root".into());
    send(&mut n, 1000, &[("a", "a0")]);
    assert!(matches!(
        sync_as(&mut n, &alice, "alice-1", SyncAction::Add, &["a"]),
        Reply::Lite(LiteOutcome::Synced { .. })
    ));
    assert_eq!(n.broker.lite_owner("g", "alice-1").as_deref(), Some("alice"));
    n.broker.checkpoint().unwrap();
    let mut n = n.restart(dir.path());
    assert_eq!(n.broker.lite_owner("g", "alice-1").as_deref(), Some("alice"), "the owner is kept on disk");

    // Mallory names alice's client: replacing, removing, dropping and receiving are all refused.
    assert!(not_owner(&sync_as(&mut n, &mallory, "alice-1", SyncAction::Replace, &["b"])));
    assert!(not_owner(&sync_as(&mut n, &mallory, "alice-1", SyncAction::Remove, &["a"])));
    assert!(not_owner(&sync_as(&mut n, &mallory, "alice-1", SyncAction::Replace, &[])));
    assert!(not_owner(&unsubscribe(&mut n, &mallory, "alice-1")));
    assert!(n.broker.lite_not_owner("g", "alice-1", &mallory).is_some());
    let stolen = plan_as(&n, &mallory, "alice-1", 10, 2000);
    assert!(stolen.delivers(), "the plan alone does not check: apply does");
    assert!(not_owner(&n.commit(&Command::Lite(LiteCommand::Pop(stolen.pop)))));
    assert_eq!(n.broker.lite_subscription("g", "alice-1"), vec!["a"]);
    assert_eq!(n.broker.lite_owner("g", "alice-1").as_deref(), Some("alice"));

    // Alice still gets her message: mallory's pop took nothing.
    assert_eq!(bodies(&receive_as(&mut n, &alice, "alice-1", 10, 2000)), vec!["a0"]);
    // An admin may act on any client; its sync leaves the owner as it was.
    assert!(matches!(
        sync_as(&mut n, &admin, "alice-1", SyncAction::Add, &["b"]),
        Reply::Lite(LiteOutcome::Synced { .. })
    ));
    assert_eq!(n.broker.lite_subscription("g", "alice-1"), vec!["a", "b"]);
    assert_eq!(n.broker.lite_owner("g", "alice-1").as_deref(), Some("alice"));
    // Mallory's own client is hers, and the owner drops her own.
    sync_as(&mut n, &mallory, "mallory-1", SyncAction::Add, &["a"]);
    assert_eq!(n.broker.lite_owner("g", "mallory-1").as_deref(), Some("mallory"));
    assert_eq!(unsubscribe(&mut n, &alice, "alice-1"), Reply::Lite(LiteOutcome::Done));
    assert!(n.broker.lite_subscription("g", "alice-1").is_empty());
    // The cluster's own upkeep (Open) drops any client's subscriptions.
    assert_eq!(unsubscribe(&mut n, &LiteActor::Open, "mallory-1"), Reply::Lite(LiteOutcome::Done));
    assert!(n.broker.lite_subscription("g", "mallory-1").is_empty());
}

#[test]
fn an_unowned_subscription_works_as_before_and_the_first_user_to_sync_it_owns_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    send(&mut n, 1000, &[("a", "a0")]);
    // Authentication off: no owner, anyone acts.
    sync(&mut n, "c1", SyncAction::Add, &["a"]);
    assert_eq!(n.broker.lite_owner("g", "c1"), None);
    assert_eq!(bodies(&receive(&mut n, "c1", 10, 2000)), vec!["a0"]);
    // With authentication on, the first user to sync it owns it; then it is refused to others.
    let bob = LiteActor::User("bob".into());
    sync_as(&mut n, &bob, "c1", SyncAction::Replace, &["a"]);
    assert_eq!(n.broker.lite_owner("g", "c1").as_deref(), Some("bob"));
    assert!(not_owner(&sync_as(&mut n, &LiteActor::User("eve".into()), "c1", SyncAction::Add, &["b"])));
    // A client with no subscriptions left has no owner: the id is free for the next user.
    sync_as(&mut n, &bob, "c1", SyncAction::Replace, &[]);
    assert_eq!(n.broker.lite_owner("g", "c1"), None);
    let unowned = LiteSubscription { lites: ["a".to_string()].into(), synced_ms: 5, owner: None };
    assert_eq!(serde_json::to_string(&unowned).unwrap(), r#"{"lites":["a"],"synced_ms":5}"#, "rows as before");
}

#[test]
fn subscriptions_and_entries_written_before_owners_were_kept_still_read() {
    let row: LiteSubscription = serde_json::from_str(r#"{"lites":["a"],"synced_ms":5}"#).unwrap();
    assert_eq!((row.lites.len(), row.owner), (1, None));
    let old = [
        r#"{"op":"sync","group":"g","parent":"P","client":"c","action":"add","lites":["a"],"now_ms":1}"#,
        r#"{"op":"unsubscribe","group":"g","client":"c"}"#,
        r#"{"op":"pop","group":"g","parent":"P","now_ms":1,"invisible_ms":2,"takes":[],"redeliveries":[]}"#,
    ];
    for entry in old {
        let command: LiteCommand = serde_json::from_str(entry).unwrap();
        let by = match &command {
            LiteCommand::Sync { by, .. } | LiteCommand::Unsubscribe { by, .. } => by.clone(),
            LiteCommand::Pop(p) => p.by.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(by, LiteActor::Open, "{entry}");
        // And written again the same way: an open command's entry is what it was.
        assert!(!serde_json::to_string(&command).unwrap().contains("\"by\""));
    }
}

/// A renewal (what a receive with `auto_renew` proposes) extends a lite delivery as it does a
/// queue's, keeping its receipt; one of a delivery redelivered since is stale.
#[test]
fn a_renewal_keeps_a_lite_delivery_invisible_and_its_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    send(&mut n, 1000, &[("a", "a0"), ("b", "b0")]);
    sync(&mut n, "c1", SyncAction::Add, &["a", "b"]);
    let got = receive(&mut n, "c1", 10, 2000);
    let (a, b) = (got[0].1.clone(), got[1].1.clone());
    let renew = Command::Consume(ConsumeCommand::RenewMany { renewals: vec![(a.clone(), 60_000)], now_ms: 2000 });
    let Reply::Consume(ConsumeOutcome::Each(outcomes)) = n.commit(&renew) else { panic!("one outcome each") };
    let [ConsumeOutcome::Renewed(d)] = outcomes.as_slice() else { panic!("renewed: {outcomes:?}") };
    assert_eq!((d.generation, d.invisible_until_ms), (a.generation, 62_000), "same receipt, later");
    // At 12 000 only b falls due; a stays invisible.
    assert_eq!(bodies(&receive(&mut n, "c1", 10, 12_000)), vec!["b0"]);
    let stale = Command::Consume(ConsumeCommand::RenewMany { renewals: vec![(b, 60_000)], now_ms: 12_001 });
    assert_eq!(n.commit(&stale), acked(&[ConsumeOutcome::StaleReceipt]), "b was redelivered");
    assert_eq!(ack(&mut n, vec![a]), acked(&[ConsumeOutcome::Done]));
}

/// A lite ack written by an earlier release (format 3: a lite command, its receipt naming no
/// parent) ends the delivery as an ack of this release does, and the next batch goes out.
#[test]
fn a_lite_ack_of_an_earlier_release_still_ends_its_delivery() {
    use rockraft_proto::rockraft::log as pb;
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    send(&mut n, 1000, &[("a", "a0")]);
    sync(&mut n, "c1", SyncAction::Add, &["a"]);
    let got = receive(&mut n, "c1", 10, 2000);
    send(&mut n, 2001, &[("a", "a1")]);
    assert!(receive(&mut n, "c1", 10, 2002).is_empty(), "a0 is in flight");
    let ChannelId::Lite(id) = got[0].1.channel else { panic!("a lite receipt") };
    let r = &got[0].1;
    let old = pb::LiteCommand {
        op: Some(pb::lite_command::Op::Ack(pb::LiteAcks {
            receipts: vec![pb::LiteReceipt { group: r.group.clone(), id, offset: r.offset, generation: r.generation }],
        })),
    };
    let mut payload = vec![b'R', 3, crate::broker::command::envelope::Kind::Lite as u8];
    payload.extend_from_slice(&old.encode_to_vec());
    let reply = n.commit_bytes(Bytes::from(payload)).unwrap();
    assert_eq!(reply, acked(&[ConsumeOutcome::Done]));
    assert_eq!(bodies(&receive(&mut n, "c1", 10, 2003)), vec!["a1"]);
}

#[test]
fn a_changed_invisible_time_holds_the_delivery_back_and_either_handle_acks_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n, LiteModel::Shared, 10);
    send(&mut n, 1000, &[("a", "a0"), ("a", "a1")]);
    sync(&mut n, "c1", SyncAction::Add, &["a"]);
    let got = receive(&mut n, "c1", 10, 2000);
    let (first, second) = (got[0].1.clone(), got[1].1.clone());
    let change = |receipt: &Receipt| {
        Command::Consume(ConsumeCommand::ChangeInvisible {
            receipt: receipt.clone(),
            now_ms: 2000,
            invisible_ms: 30_000,
        })
    };
    let Reply::Consume(ConsumeOutcome::Renewed(d)) = n.commit(&change(&first)) else { panic!("renewed") };
    let renewed = d.receipt("g", PARENT);
    assert_ne!(renewed.generation, first.generation, "a new receipt");
    // The other delivery falls due at 12 000; the changed one not before 32 000.
    assert_eq!(bodies(&receive(&mut n, "c1", 10, 12_000)), vec!["a1"]);
    assert_eq!(ack(&mut n, vec![second]), acked(&[ConsumeOutcome::StaleReceipt]), "redelivered since");
    // The answer with the new receipt was lost: the old one still acks the delivery.
    assert_eq!(ack(&mut n, vec![first.clone()]), acked(&[ConsumeOutcome::Done]));
    assert_eq!(ack(&mut n, vec![renewed]), acked(&[ConsumeOutcome::Done]), "over already");
    assert_eq!(n.commit(&change(&first)), Reply::Consume(ConsumeOutcome::StaleReceipt));
}
