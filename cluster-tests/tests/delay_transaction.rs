//! Delayed and transactional messages through the official Rust client against a real
//! three-node cluster: delayed messages arrive once and never before their time (and a time in
//! the past at once, a time too far ahead is refused); committed halves arrive once, rolled-back
//! and still-open ones never; an unresolved half is settled by the producer's checker, also when
//! the producer that sent it is gone; and all of it survives a leader killed mid-way, a node
//! stopped and then made leader, and a node that caught up by installing a snapshot.
//!
//! The clients send delivery times in whole seconds. Timing assertions are about order (a
//! message is never received before its delivery time, measured on the same clock after the
//! receive returned) and generous about lateness.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq::conf::{ClientOption, ProducerOption, SimpleConsumerOption};
use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::{MessageBuilder, MessageView};
use rocketmq::model::transaction::{Transaction, TransactionResolution};
use rocketmq::{Producer, SimpleConsumer};
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options, abi_v1_module};
use rockraft_proto::rockraft as pb;

/// Keys of the node's `[broker]` table that make unresolved halves checked after 1 s and then
/// every 2 s, so the checker paths run within a test's time.
const QUICK_CHECKS: &str = "transaction_recovery_secs = 1\ntransaction_check_interval_secs = 2\n";

/// How long a received message stays invisible: longer than any test, so an ack lost in a
/// failover can never show up as a second delivery.
const INVISIBLE: Duration = Duration::from_secs(60);

/// How late a delayed message may be on an idle cluster (the broker aims at ~1 s; a receive long
/// poll adds up to 2 s here).
const LATE: Duration = Duration::from_secs(5);

/// Nodes with these `[broker]` keys.
fn options(broker: &str) -> Options {
    Options { broker: broker.into(), ..Default::default() }
}

fn client_option(access_url: &str) -> ClientOption {
    let mut co = ClientOption::default();
    co.set_access_url(access_url);
    co.set_enable_tls(false);
    // Empty receives come back after this (less a margin): keeps the loops responsive.
    co.set_long_polling_timeout(Duration::from_secs(2));
    co
}

async fn producer(access_url: &str, topics: &[&str]) -> Producer {
    let mut po = ProducerOption::default();
    po.set_topics(topics.to_vec());
    let mut p = Producer::new(po, client_option(access_url)).expect("producer");
    p.start().await.expect("producer start");
    p
}

/// One question the broker asked a transactional producer (RecoverOrphanedTransactionCommand).
#[derive(Clone, Debug)]
struct Check {
    transaction_id: String,
    message_id: String,
    body: String,
    at: Instant,
}

type Checks = Arc<Mutex<Vec<Check>>>;

/// A transactional producer of `topic` whose checker records each question in `checks` and
/// answers with `answer(body)`.
async fn tx_producer(
    access_url: &str,
    topic: &str,
    checks: &Checks,
    answer: fn(&str) -> TransactionResolution,
) -> Producer {
    let mut po = ProducerOption::default();
    po.set_topics(vec![topic]);
    let checks = Arc::clone(checks);
    let checker = Box::new(move |transaction_id: String, m: MessageView| {
        let body = String::from_utf8_lossy(m.body()).into_owned();
        eprintln!("checker asked about {} ({body}), transaction {transaction_id}", m.message_id());
        let answer = answer(&body);
        checks.lock().unwrap().push(Check {
            transaction_id,
            message_id: m.message_id().to_string(),
            body,
            at: Instant::now(),
        });
        answer
    });
    let mut p =
        Producer::new_transaction_producer(po, client_option(access_url), checker).expect("transactional producer");
    p.start().await.expect("transactional producer start");
    p
}

fn unknown(_: &str) -> TransactionResolution {
    TransactionResolution::UNKNOWN
}

fn checks_of(checks: &Checks, message_id: &str) -> Vec<Check> {
    checks.lock().unwrap().iter().filter(|c| c.message_id == message_id).cloned().collect()
}

async fn consumer(access_url: &str, group: &str, topic: &str) -> SimpleConsumer {
    let mut so = SimpleConsumerOption::default();
    so.set_consumer_group(group);
    so.set_topics(vec![topic]);
    let mut c = SimpleConsumer::new(so, client_option(access_url)).expect("consumer");
    c.start().await.expect("consumer start");
    c
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_millis() as i64
}

fn now_secs() -> i64 {
    now_ms() / 1000
}

/// Sends a delayed message due at `due_secs` (epoch seconds) and returns its message id.
async fn send_delayed(p: &Producer, topic: &str, body: &str, due_secs: i64) -> String {
    let msg = MessageBuilder::delay_message_builder(topic, body.as_bytes().to_vec(), due_secs).build().unwrap();
    let receipt = p.send(msg).await.unwrap_or_else(|e| panic!("delayed send of {body}: {e:?}"));
    receipt.message_id().to_string()
}

/// Sends a half of a transaction and checks it got a transaction id.
async fn send_half(p: &Producer, topic: &str, body: &str) -> impl Transaction + use<> {
    let msg = MessageBuilder::transaction_message_builder(topic, body.as_bytes().to_vec()).build().unwrap();
    let tx = p.send_transaction_message(msg).await.unwrap_or_else(|e| panic!("half send of {body}: {e:?}"));
    assert!(!tx.transaction_id().is_empty(), "the half {body} was acknowledged without a transaction id");
    assert!(!tx.message_id().is_empty());
    tx
}

/// One delivery as the consumer saw it.
#[derive(Debug)]
struct Arrival {
    body: String,
    message_id: String,
    /// Wall clock when the receive that brought it returned.
    at_ms: i64,
    delivery_timestamp: Option<i64>,
}

/// Receives (and acks) from `topic` until every body in `expect` has arrived and `quiet` more
/// has passed — or, with nothing expected, until `deadline`. Returns every delivery seen.
async fn collect(c: &SimpleConsumer, topic: &str, expect: &[&str], quiet: Duration, deadline: Instant) -> Vec<Arrival> {
    let all = FilterExpression::new(FilterType::Tag, "*");
    let mut got: Vec<Arrival> = Vec::new();
    let mut complete_since: Option<Instant> = None;
    while Instant::now() < deadline {
        if !expect.is_empty() && expect.iter().all(|b| got.iter().any(|a| a.body == *b)) {
            let since = *complete_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= quiet {
                break;
            }
        }
        let batch = match c.receive_with(topic, &all, 32, INVISIBLE).await {
            Ok(batch) => batch,
            Err(e) => {
                eprintln!("receive from {topic} failed (retrying): {e:?}");
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        let at_ms = now_ms();
        for m in batch {
            let body = String::from_utf8_lossy(m.body()).into_owned();
            eprintln!("received {body} ({}) from {topic}", m.message_id());
            got.push(Arrival {
                body,
                message_id: m.message_id().to_string(),
                at_ms,
                delivery_timestamp: m.delivery_timestamp(),
            });
            for attempt in 0.. {
                match c.ack(&m).await {
                    Ok(()) => break,
                    Err(e) if attempt >= 20 => {
                        eprintln!("giving up acking {}: {e:?}", m.message_id());
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
                }
            }
        }
    }
    got
}

/// The only delivery of `body`, asserting there was exactly one.
fn once<'a>(got: &'a [Arrival], body: &str) -> &'a Arrival {
    let of: Vec<&Arrival> = got.iter().filter(|a| a.body == body).collect();
    assert_eq!(of.len(), 1, "{body} must be delivered exactly once; deliveries: {got:?}");
    of[0]
}

fn never(got: &[Arrival], body: &str) {
    assert!(got.iter().all(|a| a.body != body), "{body} must never be delivered; deliveries: {got:?}");
}

/// Delivered not before `due_secs`, and within `late` after it.
fn on_time(a: &Arrival, due_secs: i64, late: Duration) {
    let due_ms = due_secs * 1000;
    assert!(a.at_ms >= due_ms, "{} was received {} ms before its delivery time", a.body, due_ms - a.at_ms);
    assert!(
        a.at_ms <= due_ms + late.as_millis() as i64,
        "{} was received {} ms after its delivery time",
        a.body,
        a.at_ms - due_ms
    );
}

async fn leader_and_followers(cluster: &Cluster) -> (u64, u64, u64) {
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let f: Vec<u64> = (1..=3).filter(|&id| id != leader).collect();
    (leader, f[0], f[1])
}

/// For a test that stops a node holding the timers and halves of `topics` (their queue 0) and
/// then makes it their leader: (that node, a node to talk through meanwhile, those groups). On
/// five nodes a group is held by three of them: the stopped node must hold every one, and
/// two groups of three out of five always share a node.
async fn holder_and_other(cluster: &Cluster, topics: &[&str]) -> (u64, u64, Vec<u32>) {
    let mut groups = Vec::new();
    for topic in topics {
        let group = cluster.queue_group(topic, 0).await;
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    let mut holders: BTreeSet<u64> = cluster.nodes.iter().map(|n| n.id).collect();
    for &group in &groups {
        let of_group = cluster.holders(group).await;
        holders.retain(|id| of_group.contains(id));
    }
    // A follower of the first group where one qualifies, as on three nodes.
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let held = holders.iter().copied().find(|&id| id != leader).or(holders.first().copied());
    let held = held.expect("a node holds every group of the topics");
    let other =
        if held != leader { leader } else { cluster.nodes.iter().map(|n| n.id).find(|&id| id != held).unwrap() };
    (held, other, groups)
}

async fn sleep_until_ms(at_ms: i64) {
    let wait = at_ms - now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delayed_messages_arrive_once_never_early_and_a_past_time_at_once() {
    let cluster = Cluster::start(3, options("max_delay_secs = 600\n")).await;
    cluster.create_topic("Reminders", 2, TopicKind::Delay).await;
    cluster.create_group("reminder-readers", false, 16).await;
    let url = cluster.access_url();
    let p = producer(&url, &["Reminders"]).await;
    let c = consumer(&url, "reminder-readers", "Reminders").await;

    let base = now_secs();
    let sent_ms = now_ms();
    let in3 = send_delayed(&p, "Reminders", "in-3s", base + 3).await;
    let in6 = send_delayed(&p, "Reminders", "in-6s", base + 6).await;
    let past = send_delayed(&p, "Reminders", "past", base - 30).await;

    // Beyond max_delay_secs (600 s here): refused, not stored.
    let far = MessageBuilder::delay_message_builder("Reminders", b"too-far".to_vec(), base + 1200).build().unwrap();
    let refused = p.send(far).await;
    let error = format!("{:?}", refused.as_ref().err());
    assert!(error.contains("ILLEGAL_DELIVERY_TIME"), "a delivery time 20 min ahead must be refused: {refused:?}");

    let deadline = Instant::now() + Duration::from_secs(20);
    let got = collect(&c, "Reminders", &["in-3s", "in-6s", "past"], Duration::from_secs(3), deadline).await;
    let (a3, a6, ap) = (once(&got, "in-3s"), once(&got, "in-6s"), once(&got, "past"));
    never(&got, "too-far");
    assert_eq!((a3.message_id.as_str(), a6.message_id.as_str(), ap.message_id.as_str()), (&*in3, &*in6, &*past));
    on_time(a3, base + 3, LATE);
    on_time(a6, base + 6, LATE);
    assert!(ap.at_ms <= sent_ms + LATE.as_millis() as i64, "a delivery time in the past is delivered at once: {ap:?}");
    // A delayed message tells its consumer when it was due.
    assert_eq!(a3.delivery_timestamp, Some(base + 3));
    assert_eq!(a6.delivery_timestamp, Some(base + 6));
}

fn answer_by_body(body: &str) -> TransactionResolution {
    if body.contains("rollback") { TransactionResolution::ROLLBACK } else { TransactionResolution::COMMIT }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_committed_half_arrives_once_a_rolled_back_one_never_and_unknown_answers_leave_them_open() {
    let cluster = Cluster::start(3, options(QUICK_CHECKS)).await;
    cluster.create_topic("Payments", 2, TopicKind::Transaction).await;
    cluster.create_group("ledger", false, 16).await;
    let url = cluster.access_url();
    let checks: Checks = Arc::default();
    // The checker does not know: the halves stay open until the producer resolves them.
    let p = tx_producer(&url, "Payments", &checks, unknown).await;
    let c = consumer(&url, "ledger", "Payments").await;

    let keep = send_half(&p, "Payments", "pay-commit").await;
    let undo = send_half(&p, "Payments", "pay-rollback").await;
    let (keep_id, undo_id) = (keep.message_id().to_string(), undo.message_id().to_string());
    let keep_tx = keep.transaction_id().to_string();
    assert_ne!(keep.transaction_id(), undo.transaction_id(), "each half has its own transaction id");

    // Open halves are invisible, also after the broker asked about them and heard "unknown".
    let open = collect(&c, "Payments", &[], Duration::ZERO, Instant::now() + Duration::from_secs(4)).await;
    assert!(open.is_empty(), "open halves were delivered: {open:?}");
    let asked = checks_of(&checks, &keep_id);
    assert!(!asked.is_empty(), "an open half was not checked within 4 s (transaction_recovery_secs = 1)");
    assert!(asked.iter().all(|c| c.transaction_id == keep_tx && c.body == "pay-commit"), "{asked:?}");

    keep.commit().await.expect("commit");
    undo.rollback().await.expect("rollback");
    let resolved = Instant::now();

    let deadline = Instant::now() + Duration::from_secs(20);
    // Quiet for two check intervals: neither a second delivery nor a late rollback victim.
    let got = collect(&c, "Payments", &["pay-commit"], Duration::from_secs(5), deadline).await;
    assert_eq!(once(&got, "pay-commit").message_id, keep_id, "the committed message keeps its message id");
    never(&got, "pay-rollback");

    // Resolved halves are not checked again (a question already on its way may still land).
    let grace = resolved + Duration::from_millis(1500);
    for id in [&keep_id, &undo_id] {
        let late: Vec<Check> = checks_of(&checks, id).into_iter().filter(|c| c.at > grace).collect();
        assert!(late.is_empty(), "a resolved half was checked again: {late:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unresolved_half_is_settled_by_the_producers_checker_once() {
    let cluster = Cluster::start(3, options(QUICK_CHECKS)).await;
    cluster.create_topic("Orders", 2, TopicKind::Transaction).await;
    cluster.create_group("shipping", false, 16).await;
    // The producer's Telemetry stream is on a follower: the leader's question must reach it there.
    let (_, follower, _) = leader_and_followers(&cluster).await;
    let url = cluster.client_addr(follower);
    let checks: Checks = Arc::default();
    let p = tx_producer(&url, "Orders", &checks, answer_by_body).await;
    let c = consumer(&cluster.access_url(), "shipping", "Orders").await;

    // Neither is resolved by the producer: the checker answers COMMIT for one, ROLLBACK for the other.
    let commit = send_half(&p, "Orders", "recover-commit").await;
    let rollback = send_half(&p, "Orders", "recover-rollback").await;
    let ids = [commit.message_id().to_string(), rollback.message_id().to_string()];
    let txs = [commit.transaction_id().to_string(), rollback.transaction_id().to_string()];

    let deadline = Instant::now() + Duration::from_secs(25);
    // Quiet past two more check intervals.
    let got = collect(&c, "Orders", &["recover-commit"], Duration::from_secs(5), deadline).await;
    assert_eq!(once(&got, "recover-commit").message_id, ids[0]);
    never(&got, "recover-rollback");

    for ((id, tx), body) in ids.iter().zip(&txs).zip(["recover-commit", "recover-rollback"]) {
        let asked = checks_of(&checks, id);
        assert_eq!(asked.len(), 1, "{body}: one check settles it, and a settled half is not asked about again");
        assert_eq!((&asked[0].transaction_id, asked[0].body.as_str()), (tx, body), "the check names the half");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_half_whose_producer_is_gone_is_settled_by_another_live_producer_of_the_topic() {
    let cluster = Cluster::start(3, options(QUICK_CHECKS)).await;
    cluster.create_topic("Transfers", 2, TopicKind::Transaction).await;
    cluster.create_group("accounts", false, 16).await;
    let (_, f1, f2) = leader_and_followers(&cluster).await;
    // The one left to ask (kept running to the end), connected to another node than the sender.
    let live_checks: Checks = Arc::default();
    let _live = tx_producer(&cluster.client_addr(f2), "Transfers", &live_checks, answer_by_body).await;
    let c = consumer(&cluster.access_url(), "accounts", "Transfers").await;

    let gone_checks: Checks = Arc::default();
    let sender = tx_producer(&cluster.client_addr(f1), "Transfers", &gone_checks, unknown).await;
    let orphan = send_half(&sender, "Transfers", "orphan-commit").await;
    let orphan_rb = send_half(&sender, "Transfers", "orphan-rollback").await;
    let ids = [orphan.message_id().to_string(), orphan_rb.message_id().to_string()];
    let tx = orphan.transaction_id().to_string();
    // Gone before the first check is due (1 s): NotifyClientTermination, its stream closed.
    sender.shutdown().await.expect("sender shutdown");

    let deadline = Instant::now() + Duration::from_secs(25);
    let got = collect(&c, "Transfers", &["orphan-commit"], Duration::from_secs(5), deadline).await;
    assert_eq!(once(&got, "orphan-commit").message_id, ids[0]);
    never(&got, "orphan-rollback");
    let asked = checks_of(&live_checks, &ids[0]);
    assert_eq!(asked.len(), 1, "the live producer settles the orphan with one answer: {asked:?}");
    assert_eq!(asked[0].transaction_id, tx);
    assert_eq!(checks_of(&live_checks, &ids[1]).len(), 1, "the other orphan is asked about once too");
    assert!(gone_checks.lock().unwrap().is_empty(), "a producer that shut down was asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_half_sent_before_the_leader_dies_is_committed_through_a_survivor_and_delivered_once() {
    let mut cluster = Cluster::start(3, options(QUICK_CHECKS)).await;
    cluster.create_topic("Invoices", 2, TopicKind::Transaction).await;
    cluster.create_group("billing", false, 16).await;
    let (leader, survivor, _) = leader_and_followers(&cluster).await;
    let url = cluster.client_addr(survivor);
    let checks: Checks = Arc::default();
    // "Unknown" to every check: only the producer's own commit can deliver it.
    let p = tx_producer(&url, "Invoices", &checks, unknown).await;
    let c = consumer(&url, "billing", "Invoices").await;

    let tx = send_half(&p, "Invoices", "invoice-1").await;
    let id = tx.message_id().to_string();
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader(Duration::from_secs(20)).await;
    assert_ne!(new_leader, leader);
    cluster.wait_caught_up(survivor, Duration::from_secs(20)).await;

    // Still open on the new leader: checks went on, nothing was delivered.
    let open = collect(&c, "Invoices", &[], Duration::ZERO, Instant::now() + Duration::from_secs(3)).await;
    assert!(open.is_empty(), "an open half was delivered after the failover: {open:?}");
    tx.commit().await.expect("commit through a survivor after the election");

    let deadline = Instant::now() + Duration::from_secs(20);
    let got = collect(&c, "Invoices", &["invoice-1"], Duration::from_secs(4), deadline).await;
    assert_eq!(once(&got, "invoice-1").message_id, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timers_due_around_a_leader_kill_fire_once_after_the_new_leader_takes_over() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Alarms", 2, TopicKind::Delay).await;
    cluster.create_group("sirens", false, 16).await;
    let (leader, survivor, _) = leader_and_followers(&cluster).await;
    let url = cluster.client_addr(survivor);
    let p = producer(&url, &["Alarms"]).await;
    let c = consumer(&url, "sirens", "Alarms").await;

    let base = now_secs();
    // One fires about half a second before the kill (its delivery may be under way), two are due
    // about half a second after it.
    send_delayed(&p, "Alarms", "before-kill", base + 3).await;
    send_delayed(&p, "Alarms", "after-kill-1", base + 4).await;
    send_delayed(&p, "Alarms", "after-kill-2", base + 4).await;
    let collector = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(40);
        let expect = ["before-kill", "after-kill-1", "after-kill-2"];
        collect(&c, "Alarms", &expect, Duration::from_secs(4), deadline).await
    });
    sleep_until_ms((base + 4) * 1000 - 500).await;
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader(Duration::from_secs(20)).await;
    assert_ne!(new_leader, leader);

    let got = collector.await.unwrap();
    // An election takes a few seconds: late, but once.
    let failover = Duration::from_secs(15);
    on_time(once(&got, "before-kill"), base + 3, failover);
    on_time(once(&got, "after-kill-1"), base + 4, failover);
    on_time(once(&got, "after-kill-2"), base + 4, failover);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_stopped_with_timers_and_halves_pending_fires_and_commits_them_once_as_leader() {
    let mut cluster = Cluster::start(3, options(QUICK_CHECKS)).await;
    cluster.create_topic("Later", 1, TopicKind::Delay).await;
    cluster.create_topic("Held", 1, TopicKind::Transaction).await;
    cluster.create_group("readers", false, 16).await;
    let (stopped, talked_to, groups) = holder_and_other(&cluster, &["Later", "Held"]).await;
    // Clients talk to a node that is never stopped.
    let url = cluster.client_addr(talked_to);
    let p = producer(&url, &["Later"]).await;
    let checks: Checks = Arc::default();
    let tp = tx_producer(&url, "Held", &checks, unknown).await;

    let base = now_secs();
    // Fires while the node is down (it must not fire again under it), and after it leads.
    send_delayed(&p, "Later", "while-down", base + 3).await;
    send_delayed(&p, "Later", "under-new-leader", base + 26).await;
    let tx = send_half(&tp, "Held", "held-order").await;
    let half_id = tx.message_id().to_string();
    // Already receiving when the node stops, as a running application is: the first timer is
    // late only by how long the cluster takes to fire it without that node.
    let c = consumer(&url, "readers", "Later").await;
    let collector = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(55);
        collect(&c, "Later", &["while-down", "under-new-leader"], Duration::from_secs(4), deadline).await
    });
    cluster.wait_caught_up(stopped, Duration::from_secs(10)).await;
    cluster.stop(stopped);
    sleep_until_ms((base + 4) * 1000).await;
    cluster.restart(stopped);
    cluster.wait_caught_up(stopped, Duration::from_secs(30)).await;
    cluster.make_leader_in(stopped, &groups).await;
    assert!(now_ms() < (base + 26) * 1000, "setup too slow: node {stopped} led only after the second timer was due");

    tx.commit().await.expect("commit of a half the new leader learnt before its restart");
    let tc = consumer(&url, "readers", "Held").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let held = collect(&tc, "Held", &["held-order"], Duration::from_secs(4), deadline).await;
    assert_eq!(once(&held, "held-order").message_id, half_id);

    let got = collector.await.unwrap();
    on_time(once(&got, "while-down"), base + 3, LATE);
    on_time(once(&got, "under-new-leader"), base + 26, LATE);
    for group in groups {
        let leads = cluster.wait_for_leader_of(Some(group), Duration::from_secs(5)).await;
        assert_eq!(leads, stopped, "leadership of group {group} stayed put");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_caught_up_by_snapshot_install_fires_pending_timers_once_as_leader() {
    let options = Options {
        broker: QUICK_CHECKS.into(),
        // About a second of retention, checked twice a second (see retention.rs).
        storage: "retention_hours = 0.0003\nretention_check_secs = 0.5\n".into(),
        ..Default::default()
    };
    let mut cluster = Cluster::start(3, options).await;
    cluster.create_topic("Later", 1, TopicKind::Delay).await;
    cluster.create_topic("Held", 1, TopicKind::Transaction).await;
    // A filler queue in every data group: segments roll and expire in each.
    let groups = cluster.data_groups;
    cluster.create_topic("Filler", groups, TopicKind::Normal).await;
    cluster.create_group("readers", false, 16).await;
    let (lagging, talked_to, held_in) = holder_and_other(&cluster, &["Later", "Held"]).await;
    cluster.wait_caught_up(lagging, Duration::from_secs(10)).await;
    // Where the lagging node stopped in each group holding a timer or a half.
    let mut left_at = BTreeMap::new();
    for &group in &held_in {
        let last = cluster.status_of(lagging, Some(group)).await.unwrap().last_log_index.unwrap_or(0);
        left_at.insert(group, last);
    }
    cluster.kill(lagging);

    let url = cluster.client_addr(talked_to);
    let p = producer(&url, &["Later", "Filler"]).await;
    let checks: Checks = Arc::default();
    let tp = tx_producer(&url, "Held", &checks, unknown).await;
    // Over 2 MiB past where the lagging node stopped: its segment can expire. Pending timers
    // and halves hold their own entries back from retention, so they go after this filler.
    fill(&p, 20 * groups as usize).await;

    // The first timer fires under the old leader and is consumed there, while the filler goes
    // on: retention (a second here) may purge its message soon after it is delivered.
    let c = consumer(&url, "readers", "Later").await;
    let base = now_secs();
    send_delayed(&p, "Later", "before-install", base + 2).await;
    send_delayed(&p, "Later", "after-install", base + 26).await;
    let tx = send_half(&tp, "Held", "held-order").await;
    let half_id = tx.message_id().to_string();
    let early = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(15);
        collect(&c, "Later", &["before-install"], Duration::ZERO, deadline).await
    });
    fill(&p, 10 * groups as usize).await;
    let early = early.await.unwrap();
    on_time(once(&early, "before-install"), base + 2, LATE);

    // Once each group's leader has dropped the entries after `left_at`, only a snapshot can help.
    let deadline = Instant::now() + Duration::from_secs(30);
    for (&group, &left_at) in &left_at {
        loop {
            let leads = cluster.wait_for_leader_of(Some(group), Duration::from_secs(10)).await;
            let purged = cluster.status_of(leads, Some(group)).await.and_then(|s| s.purged);
            if purged.is_some_and(|p| p > left_at) {
                break;
            }
            assert!(Instant::now() < deadline, "group {group} never purged past {left_at} (purged: {purged:?})");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    cluster.restart(lagging);
    cluster.wait_caught_up(lagging, Duration::from_secs(30)).await;
    cluster.make_leader_in(lagging, &held_in).await;
    assert!(now_ms() < (base + 26) * 1000, "setup too slow: node {lagging} led only after the pending timer was due");

    // Read through the new leader: the bodies must be there too, not just the timers.
    let lagging_url = cluster.client_addr(lagging);
    tx.commit().await.expect("commit of a half the installed node holds");
    let tc = consumer(&lagging_url, "readers", "Held").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let held = collect(&tc, "Held", &["held-order"], Duration::from_secs(3), deadline).await;
    assert_eq!(once(&held, "held-order").message_id, half_id);

    let c = consumer(&lagging_url, "readers", "Later").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let got = collect(&c, "Later", &["after-install"], Duration::from_secs(4), deadline).await;
    on_time(once(&got, "after-install"), base + 26, LATE);
    never(&got, "before-install");
    let bodies: BTreeSet<&str> = got.iter().map(|a| a.body.as_str()).collect();
    assert_eq!(bodies, BTreeSet::from(["after-install"]));
}

/// `n` messages of 128 KiB to the normal topic "Filler": segments roll and expire.
async fn fill(p: &Producer, n: usize) {
    for i in 0..n {
        let msg = MessageBuilder::builder()
            .set_topic("Filler")
            .set_body(vec![b'f'; 128 << 10])
            .set_keys(vec![format!("filler-{i}")])
            .build()
            .unwrap();
        p.send(msg).await.expect("filler send");
    }
}

/// The operator's view: pending timers and open halves are listed and counted per topic, found
/// by message id; a half the checker rolled back for its age is still listed and an operator can
/// resume (commit) it; a stuck half can be rolled back by id and then never arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operators_see_pending_timers_and_halves_and_resolve_stuck_halves_by_id() {
    // Halves are checked after 1 s and rolled back by the checker at 3 s of age.
    let cluster = Cluster::start(3, options(&format!("{QUICK_CHECKS}transaction_max_age_secs = 3\n"))).await;
    cluster.create_topic("Scheduled", 2, TopicKind::Delay).await;
    cluster.create_topic("Orders", 2, TopicKind::Transaction).await;
    cluster.create_group("ops", false, 16).await;
    let url = cluster.access_url();
    let p = producer(&url, &["Scheduled"]).await;
    let timer_id = send_delayed(&p, "Scheduled", "in-an-hour", now_secs() + 3600).await;
    let checks: Checks = Arc::default();
    let tp = tx_producer(&url, "Orders", &checks, unknown).await;
    let aged = send_half(&tp, "Orders", "aged-out").await.message_id().to_string();
    let stuck = send_half(&tp, "Orders", "stuck").await.message_id().to_string();

    let held = |timers: bool, all: bool| {
        let cluster = &cluster;
        async move {
            let kind = if timers { "TIMER" } else { "HALF" };
            cluster.admin(pb::ListHeldRequest { kind: kind.into(), all, limit: 100, ..Default::default() }).await.held
        }
    };
    let timers = held(true, false).await;
    assert_eq!(timers.len(), 1);
    assert_eq!(timers[0].message_id, timer_id);
    assert_eq!(held(false, false).await.len(), 2, "both halves are open");
    let topics = cluster.admin(pb::ListTopicsRequest::default()).await.topics;
    let of = |name: &str| topics.iter().find(|t| t.name == name).unwrap();
    assert_eq!(of("Scheduled").timers, 1);
    assert_eq!(of("Orders").open_halves, 2);
    let found =
        cluster.admin(pb::GetMessageRequest { message_id: timer_id.clone(), local: false, data_group: None }).await;
    assert_eq!(found.held.map(|h| h.kind), Some("TIMER".into()), "GetMessage of a pending timer");

    // An operator rolls one back at once; the checker rolls the other back at 3 s of age.
    cluster.admin(pb::ResolveTransactionRequest { message_id: stuck.clone(), commit: false, data_group: None }).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let rolled_back_by_checker = loop {
        let all = held(false, true).await;
        let half = all.iter().find(|h| h.message_id == aged);
        if half.is_some_and(|h| h.state == "ROLLED_BACK" && h.resolved_by == "CHECKER") {
            break all;
        }
        assert!(Instant::now() < deadline, "the checker never rolled back the aged half: {all:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(held(false, false).await.is_empty(), "no half is open any more");
    let stuck_half = rolled_back_by_checker.iter().find(|h| h.message_id == stuck).unwrap();
    assert_eq!((stuck_half.state.as_str(), stuck_half.resolved_by.as_str()), ("ROLLED_BACK", "OPERATOR"));
    let asked = checks_of(&checks, &aged).len();

    // Resumed by the operator: delivered once; the one rolled back by the operator never.
    // An aged-out half can be resumed.
    cluster.admin(pb::ResolveTransactionRequest { message_id: aged.clone(), commit: true, data_group: None }).await;
    let c = consumer(&url, "ops", "Orders").await;
    let got =
        collect(&c, "Orders", &["aged-out"], Duration::from_secs(3), Instant::now() + Duration::from_secs(20)).await;
    assert_eq!(once(&got, "aged-out").message_id, aged);
    never(&got, "stuck");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(checks_of(&checks, &aged).len(), asked, "a resolved half is never checked again");

    // The same through the typed API, as grpcurl or a generated client sees it, on a follower.
    use rockraft_proto::rockraft as pb;
    let endpoint = format!("http://{}", cluster.admin_addr(2));
    let mut typed = pb::admin_service_client::AdminServiceClient::connect(endpoint).await.unwrap();
    let by_id = |id: &str| pb::GetMessageRequest { message_id: id.to_string(), local: false, data_group: None };
    let found = typed.get_message(by_id(&aged)).await.unwrap().into_inner();
    let line = found.message.expect("delivered: found as a stored message");
    assert_eq!((line.topic.as_str(), line.message_id.as_str()), ("Orders", aged.as_str()));
    let pending = typed.get_message(by_id(&timer_id)).await.unwrap().into_inner();
    let pending = pending.held.expect("a pending timer is found as a held message");
    assert_eq!((pending.kind.as_str(), pending.topic.as_str()), ("TIMER", "Scheduled"));
    let missing = typed.get_message(by_id("no-such-id")).await.expect_err("an unknown id");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    // Both halves, one page at a time.
    let half_page =
        |after: String| pb::ListHeldRequest { kind: "HALF".into(), all: true, after, limit: 1, ..Default::default() };
    let first = typed.list_held(half_page(String::new())).await.unwrap().into_inner();
    let second = typed.list_held(half_page(first.next_after.clone())).await.unwrap().into_inner();
    let third = typed.list_held(half_page(second.next_after.clone())).await.unwrap().into_inner();
    let mut ids: Vec<String> = first.held.iter().chain(&second.held).map(|h| h.message_id.clone()).collect();
    ids.sort();
    let mut expected = vec![aged.clone(), stuck.clone()];
    expected.sort();
    assert_eq!((ids, third.held.len()), (expected, 0));
    let bad = typed.list_held(pb::ListHeldRequest { kind: "BOTH".into(), ..Default::default() }).await;
    assert_eq!(bad.expect_err("no such kind").code(), tonic::Code::InvalidArgument);
    let listed = pb::ListMessagesRequest {
        topic: "Orders".into(),
        queue: line.queue,
        from: 0,
        limit: 10,
        local: false,
        data_group: None,
    };
    let listed = typed.list_messages(listed).await.unwrap().into_inner();
    assert!(listed.messages.iter().any(|m| m.message_id == aged));
    // The checks that compare replicas ask about the group holding the queue (none named: the
    // first data group).
    let group = of("Orders").groups.get(line.queue as usize).copied().unwrap_or(1);
    let digest = typed.get_digest(pb::GetDigestRequest { group }).await.unwrap().into_inner();
    assert!(digest.applied.is_some() && digest.digest != 0);
    let settings = typed.get_settings(pb::GetSettingsRequest {}).await.unwrap().into_inner();
    assert_eq!(settings.dedupe_window_secs, 120);
    let history = typed.get_failover_history(pb::GetFailoverHistoryRequest::default()).await.unwrap().into_inner();
    assert!(!history.failovers.is_empty(), "the first election at least is recorded");
    assert!(history.failovers.iter().all(|f| f.elected_ms <= f.first_commit_ms), "{history:?}");
    let applied = digest.applied.expect("applied");
    let spans = typed.get_queue_spans(pb::GetQueueSpansRequest { upto: applied, group }).await.unwrap().into_inner();
    let span = spans.spans.iter().find(|s| s.topic == "Orders" && s.queue == line.queue).expect("the queue");
    assert!(span.end > span.start, "{span:?}");
    let asked = pb::GetQueueChecksumsRequest {
        topic: "Orders".into(),
        queue: line.queue,
        from: span.start,
        to: span.end,
        chunk: 1,
        group,
    };
    let sums = typed.get_queue_checksums(asked).await.unwrap().into_inner();
    assert_eq!(sums.checksums.len() as u64, span.end - span.start, "one checksum per record");
}

/// A transaction checker's body (WAT) that answers WAIT (0) for every half, whatever its age.
const WAIT_ALL: &str = "(memory.fill (local.get 4) (i32.const 0) (local.get 3)) (i32.const 0)";

/// A bound checker that never decides cannot keep a half open past the maximum age, nor make
/// the leader check it in a loop: the host rolls it back at 2 s of age, after a few checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_checker_that_always_waits_is_overruled_at_the_maximum_age() {
    use rockraft::broker::plugins::PluginKind;
    let broker = "transaction_recovery_secs = 1\ntransaction_check_interval_secs = 1\ntransaction_max_age_secs = 2\n";
    let cluster = Cluster::start(3, options(broker)).await;
    cluster.create_topic("Waits", 1, TopicKind::Transaction).await;
    let register = pb::RegisterPluginRequest {
        name: "wait-forever".into(),
        kind: "TX_CHECKER".into(),
        module: abi_v1_module(PluginKind::TxChecker, WAIT_ALL, 1, "").into(),
    };
    cluster.admin(register).await;
    let bind = pb::BindPluginRequest {
        target: Some(pb::bind_plugin_request::Target::Topic("Waits".into())),
        plugin: "wait-forever".into(),
        config: String::new(),
    };
    cluster.admin(bind).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let last_index = |id| {
        let cluster = &cluster;
        async move { cluster.status(id).await.and_then(|s| s.last_log_index).unwrap_or(0) }
    };

    let checks: Checks = Arc::default();
    let tp = tx_producer(&cluster.access_url(), "Waits", &checks, unknown).await;
    let before = last_index(leader).await;
    let id = send_half(&tp, "Waits", "never-decided").await.message_id().to_string();
    tokio::time::sleep(Duration::from_secs(10)).await;

    let halves = cluster
        .admin(pb::ListHeldRequest { kind: "HALF".into(), all: true, limit: 10, ..Default::default() })
        .await
        .held;
    let half = halves.iter().find(|h| h.message_id == id);
    assert!(
        half.is_some_and(|h| h.state == "ROLLED_BACK" && h.resolved_by == "CHECKER"),
        "the half is rolled back by the host at its maximum age: {halves:?}"
    );
    // The send, a check or two, the rollback: a handful of entries, not a loop.
    let entries = last_index(leader).await - before;
    assert!(entries <= 8, "{entries} log entries in 10 s for one half");
    assert!(checks_of(&checks, &id).is_empty(), "a checker answering WAIT never has the producer asked");
}
