//! WASM plugins against a real three-node cluster, through the official Rust client and the
//! `rockraft` command line: RocketMQ's tag and SQL92 filter cases as live subscriptions and
//! through `plugin eval`; hostile filters (an endless loop, a memory bomb, a trap) that fail only
//! their own calls; registrations and bindings the cluster refuses; and the two example plugins
//! (`examples/plugins/`), built for wasm32 and registered with the CLI: a group filter on JSON
//! bodies that keeps filtering after a leader dies, and a transaction checker that commits or
//! rolls back halves nobody resolves.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rocketmq::conf::ProducerOption;
use rocketmq::error::ClientError;
use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::{MessageBuilder, MessageView};
use rocketmq::model::transaction::{Transaction, TransactionResolution};
use rocketmq::{Producer, SimpleConsumer};
use rockraft::admin::AdminCall;
use rockraft::broker::TopicKind;
use rockraft::plugin::PluginKind;
use rockraft_cluster_tests::clients::{client_option, consumer, producer};
use rockraft_cluster_tests::{Cluster, Options, abi_v1_module as module, retry};
use rockraft_proto::rockraft as pb;

/// Longer than any test: an ack lost to a failover never shows up as a second delivery.
const INVISIBLE: Duration = Duration::from_secs(60);

/// The property that names a conformance case's row in the messages sent for it.
const ROW: &str = "case_row";

/// Conformance groups receiving at once.
const CONCURRENT_GROUPS: usize = 6;

// ---------------------------------------------------------------------------------------------
// Clients

fn all() -> FilterExpression {
    FilterExpression::new(FilterType::Tag, "*")
}

/// The status code a failed call carries (`ILLEGAL_FILTER_EXPRESSION`, …).
fn code(e: &ClientError) -> Option<&str> {
    e.context().iter().find(|(k, _)| *k == "code").map(|(_, v)| v.as_str())
}

fn body(m: &MessageView) -> String {
    String::from_utf8_lossy(m.body()).into_owned()
}

async fn ack(c: &SimpleConsumer, m: &MessageView) {
    for attempt in 0.. {
        match c.ack(m).await {
            Ok(()) => return,
            Err(e) if attempt >= 20 => panic!("acking {} failed: {e:?}", m.message_id()),
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
}

/// Receives (and acks) with `filter` until every body in `expect` has arrived and one more
/// receive came back empty, or `deadline` passes. Returns every body delivered, in order.
async fn collect(
    c: &SimpleConsumer,
    topic: &str,
    filter: &FilterExpression,
    expect: &BTreeSet<String>,
    deadline: Instant,
) -> Vec<String> {
    let mut got: Vec<String> = Vec::new();
    while Instant::now() < deadline {
        let complete = expect.iter().all(|b| got.contains(b));
        match c.receive_with(topic, filter, 32, INVISIBLE).await {
            Ok(batch) if batch.is_empty() && complete => break,
            Ok(batch) => {
                for m in batch {
                    got.push(body(&m));
                    ack(c, &m).await;
                }
            }
            Err(e) => {
                eprintln!("receive from {topic} failed (retrying): {e:?}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    got
}

async fn send_body(p: &Producer, topic: &str, tag: Option<&str>, body: &str) {
    let mut b = MessageBuilder::builder().set_topic(topic).set_body(body.as_bytes().to_vec());
    if let Some(t) = tag {
        b = b.set_tag(t);
    }
    p.send(b.build().unwrap()).await.unwrap_or_else(|e| panic!("send of {body}: {e:?}"));
}

// ---------------------------------------------------------------------------------------------
// Admin

/// The reason the cluster gives for refusing `req` (a refusal, not a node that is not there).
async fn refused<R: AdminCall + std::fmt::Debug + Clone>(cluster: &Cluster, req: R) -> String
where
    R::Reply: std::fmt::Debug,
{
    let addr = cluster.admin_addr(1);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match cluster.call(&addr, req.clone()).await {
            Ok(answer) => panic!("{req:?} must be refused, but was answered {answer:?}"),
            Err(e) if e.code().is_some_and(|c| c != tonic::Code::Unavailable) => return e.reason(),
            Err(e) => assert!(Instant::now() < deadline, "{req:?}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn plugins(cluster: &Cluster, id: u64) -> Vec<pb::Plugin> {
    let addr = cluster.admin_addr(id);
    retry(Duration::from_secs(20), || async {
        let listed = cluster.call(&addr, pb::ListPluginsRequest { after: String::new(), limit: 1000 }).await;
        listed.map(|l| l.plugins).map_err(|e| e.to_string())
    })
    .await
}

fn bind_group(group: &str, plugin: &str, config: &str) -> pb::BindPluginRequest {
    pb::BindPluginRequest {
        target: Some(pb::bind_plugin_request::Target::Group(group.into())),
        plugin: plugin.into(),
        config: config.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// The node binary and the CLI

fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// The binary the harness runs (`$ROCKRAFT_BIN`, or `target/debug/rockraft`).
fn rockraft_bin() -> PathBuf {
    if let Ok(p) = std::env::var("ROCKRAFT_BIN") {
        return p.into();
    }
    let bin = target_dir().join("debug/rockraft");
    assert!(bin.exists(), "{} is missing: run `cargo build -p rockraft` first", bin.display());
    bin
}

/// Runs `rockraft ARGS`: (exit code, stdout, stderr).
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(rockraft_bin())
        .args(args)
        .env_remove("ROCKRAFT_ENDPOINT")
        .output()
        .unwrap_or_else(|e| panic!("running rockraft {args:?}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// `rockraft --endpoint ADDR plugin ARGS`, which must succeed; returns its stdout.
async fn plugin_cli(endpoint: &str, args: &[&str]) -> String {
    let mut all = vec!["--endpoint", endpoint, "plugin"];
    all.extend_from_slice(args);
    let all: Vec<String> = all.into_iter().map(str::to_string).collect();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        cli(&refs)
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "rockraft plugin {args:?} failed:\n{stdout}{stderr}");
    stdout
}

/// Builds the example plugin `examples/plugins/<name>` for wasm32 (release) into a directory of
/// the shared target dir, and returns the module.
fn build_example(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = root.join("examples/plugins").join(name).join("Cargo.toml");
    assert!(manifest.exists(), "{} is missing", manifest.display());
    let target = target_dir().join("example-plugins");
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build
        .args(["build", "--release", "--target", "wasm32-unknown-unknown", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target);
    // The test build's flags and wrappers are for the host, not for wasm.
    for var in
        ["CARGO_ENCODED_RUSTFLAGS", "RUSTFLAGS", "RUSTC_WORKSPACE_WRAPPER", "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET"]
    {
        build.env_remove(var);
    }
    let out = build.output().unwrap_or_else(|e| panic!("running cargo for {name}: {e}"));
    assert!(out.status.success(), "building {name} for wasm32 failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let wasm = target.join("wasm32-unknown-unknown/release").join(format!("{}.wasm", name.replace('-', "_")));
    assert!(wasm.exists(), "{} was not built", wasm.display());
    wasm
}

// ---------------------------------------------------------------------------------------------
// Conformance cases

#[derive(Clone, Debug)]
struct Case {
    /// 1-based, over the cases of one file (the repository's copy, then new shared ones).
    row: usize,
    expression: String,
    /// The message tag (tag cases) or its properties as JSON (SQL92 cases).
    subject: String,
    /// `true`, `false` or `error`.
    expected: String,
}

impl Case {
    fn properties(&self) -> Vec<(String, String)> {
        let props: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&self.subject)
            .unwrap_or_else(|e| panic!("row {} has unreadable properties {:?}: {e}", self.row, self.subject));
        props.into_iter().map(|(k, v)| (k, v.as_str().expect("property values are strings").to_string())).collect()
    }
}

/// The cases of a conformance file: the repository's copy and, when it is checked out beside the
/// repository, the shared original; identical lines once.
fn cases(file: &str) -> Vec<Case> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut lines: Vec<String> = Vec::new();
    for dir in ["testdata/conformance", "../shared/conformance"] {
        let Ok(text) = std::fs::read_to_string(root.join(dir).join(file)) else { continue };
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            if !lines.iter().any(|l| l == line) {
                lines.push(line.to_string());
            }
        }
    }
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), 3, "{file} row {}: expected 3 columns: {line:?}", i + 1);
            let expected = cols[2].trim().to_string();
            assert!(["true", "false", "error"].contains(&expected.as_str()), "{file} row {}: {line:?}", i + 1);
            Case { row: i + 1, expression: cols[0].into(), subject: cols[1].into(), expected }
        })
        .collect()
}

/// The distinct expressions, in the order they first appear, each with its cases.
fn by_expression(cases: &[Case]) -> Vec<(String, Vec<Case>)> {
    let mut out: Vec<(String, Vec<Case>)> = Vec::new();
    for c in cases {
        match out.iter_mut().find(|(e, _)| *e == c.expression) {
            Some((_, v)) => v.push(c.clone()),
            None => out.push((c.expression.clone(), vec![c.clone()])),
        }
    }
    out
}

/// Sends one message per case: the case's tag or properties, plus `case_row`.
async fn send_case(p: &Producer, topic: &str, kind: FilterType, c: &Case) {
    assert!(!c.expression.contains(ROW), "row {}'s expression names {ROW}", c.row);
    let mut props: HashMap<String, String> = HashMap::new();
    let mut b = MessageBuilder::builder().set_topic(topic).set_body(format!("case-{}", c.row).into_bytes());
    match kind {
        FilterType::Sql => props.extend(c.properties()),
        FilterType::Tag if !c.subject.is_empty() => b = b.set_tag(c.subject.clone()),
        FilterType::Tag => {}
    }
    props.insert(ROW.into(), c.row.to_string());
    let msg = b.set_properties(props).build().unwrap();
    p.send(msg).await.unwrap_or_else(|e| panic!("send of row {}: {e:?}", c.row));
}

/// One group subscribing with `expression`: refused with ILLEGAL_FILTER_EXPRESSION if its cases
/// expect `error`, else receives until nothing more arrives. Returns what disagrees with the
/// cases (one line each).
async fn check_subscription(
    url: String,
    group: String,
    topic: &'static str,
    kind: FilterType,
    expression: String,
    cases: Vec<Case>,
) -> Vec<String> {
    let c = consumer(&url, &group, topic).await;
    let filter = FilterExpression::new(kind, expression.clone());
    let deadline = Instant::now() + Duration::from_secs(40);
    let errors = cases.iter().filter(|c| c.expected == "error").count();
    if errors > 0 {
        assert_eq!(errors, cases.len(), "{expression:?}: some of its cases expect an error, some do not");
        loop {
            match c.receive_with(topic, &filter, 32, INVISIBLE).await {
                Err(e) if code(&e) == Some("ILLEGAL_FILTER_EXPRESSION") => return Vec::new(),
                Ok(batch) => {
                    return vec![format!(
                        "{expression:?} (rows {:?}): the subscription was accepted ({} messages), expected ILLEGAL_FILTER_EXPRESSION",
                        cases.iter().map(|c| c.row).collect::<Vec<_>>(),
                        batch.len()
                    )];
                }
                Err(e) if Instant::now() > deadline => {
                    return vec![format!("{expression:?}: no ILLEGAL_FILTER_EXPRESSION, last error {e:?}")];
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }
    let wanted: BTreeSet<usize> = cases.iter().filter(|c| c.expected == "true").map(|c| c.row).collect();
    let mut delivered: BTreeMap<usize, usize> = BTreeMap::new();
    loop {
        let complete = wanted.iter().all(|r| delivered.contains_key(r));
        if Instant::now() > deadline {
            break;
        }
        match c.receive_with(topic, &filter, 32, INVISIBLE).await {
            Ok(batch) if batch.is_empty() && complete => break,
            Ok(batch) => {
                for m in batch {
                    let row: usize = m.properties().get(ROW).and_then(|r| r.parse().ok()).expect("case_row property");
                    assert_eq!(body(&m), format!("case-{row}"), "the body and the properties belong together");
                    *delivered.entry(row).or_default() += 1;
                    ack(&c, &m).await;
                }
            }
            Err(e) if code(&e) == Some("ILLEGAL_FILTER_EXPRESSION") => {
                return vec![format!("{expression:?}: refused as ILLEGAL_FILTER_EXPRESSION: {e:?}")];
            }
            Err(e) => {
                eprintln!("{group}: receive failed (retrying): {e:?}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    let mut wrong = Vec::new();
    for case in &cases {
        let times = delivered.get(&case.row).copied().unwrap_or(0);
        let expected = usize::from(case.expected == "true");
        if times != expected {
            wrong.push(format!(
                "row {}: {expression:?} on {:?}: delivered {times} times, expected {}",
                case.row, case.subject, case.expected
            ));
        }
    }
    wrong
}

/// Every case of `file` through live subscriptions: one message per case on one topic, one group
/// per distinct expression, a few groups receiving at once.
async fn live_conformance(file: &str, kind: FilterType, min_cases: usize) {
    const TOPIC: &str = "Conformance";
    let cases = cases(file);
    assert!(cases.len() >= min_cases, "read only {} cases from {file}", cases.len());
    let expressions = by_expression(&cases);
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic(TOPIC, 2, TopicKind::Normal).await;
    for i in 0..expressions.len() {
        cluster.create_group(&format!("expr-{i}"), false, 16).await;
    }
    let url = cluster.access_url();
    let p = producer(&url, TOPIC).await;
    futures_util::stream::iter(cases.iter().map(|c| send_case(&p, TOPIC, kind, c)))
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    for id in 1..=3 {
        cluster.wait_caught_up(id, Duration::from_secs(30)).await;
    }

    // A few groups at a time: dozens of long polls at once would only measure a small machine.
    let checks = expressions.into_iter().enumerate().map(|(i, (expression, cases))| {
        check_subscription(url.clone(), format!("expr-{i}"), TOPIC, kind, expression, cases)
    });
    let wrong: Vec<String> = futures_util::stream::iter(checks)
        .buffer_unordered(CONCURRENT_GROUPS)
        .flat_map(futures_util::stream::iter)
        .collect()
        .await;
    assert!(wrong.is_empty(), "{} of {} cases of {file} went wrong:\n{}", wrong.len(), cases.len(), wrong.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sql92_conformance_cases_through_live_subscriptions() {
    live_conformance("sql92_public.tsv", FilterType::Sql, 80).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tag_conformance_cases_through_live_subscriptions() {
    live_conformance("tag_public.tsv", FilterType::Tag, 20).await;
}

/// `rockraft plugin eval --plugin sql92|tag` on every case: `true`/`false` and exit 0, or
/// `error: …` and exit 1.
#[test]
fn conformance_cases_through_plugin_eval() {
    let sql = cases("sql92_public.tsv");
    let tag = cases("tag_public.tsv");
    assert!(sql.len() >= 80 && tag.len() >= 20, "read {} SQL92 and {} tag cases", sql.len(), tag.len());
    let runs: Vec<(&str, &Case, String)> = sql
        .iter()
        .map(|c| {
            let props: BTreeMap<String, String> = c.properties().into_iter().collect();
            ("sql92", c, serde_json::json!({ "properties": props }).to_string())
        })
        .chain(tag.iter().map(|c| ("tag", c, serde_json::json!({ "tag": c.subject }).to_string())))
        .collect();
    // Two at a time: a call takes a fraction of a second, mostly compiling the module.
    let wrong: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|w| {
                let runs = &runs;
                s.spawn(move || {
                    let mut wrong = Vec::new();
                    for (plugin, c, message) in runs.iter().skip(w).step_by(2) {
                        let (code, stdout, stderr) =
                            cli(&["plugin", "eval", "--plugin", plugin, "--expr", &c.expression, "--message", message]);
                        let line = stdout.trim_end();
                        let ok = match c.expected.as_str() {
                            "error" => code == 1 && line.starts_with("error: ") && line.len() > "error: ".len(),
                            answer => code == 0 && line == answer,
                        };
                        if !ok {
                            wrong.push(format!(
                                "{plugin} row {}: {:?} on {message}: exit {code}, printed {line:?} {stderr:?}, expected {}",
                                c.row, c.expression, c.expected
                            ));
                        }
                    }
                    wrong
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("eval worker")).collect()
    });
    assert!(wrong.is_empty(), "{} of {} evaluations went wrong:\n{}", wrong.len(), runs.len(), wrong.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Hostile plugins

/// A filter that loops forever.
const ENDLESS_LOOP: &str = "(loop (br 0)) (i32.const 0)";
/// A filter that grows its memory until refused, then traps.
const MEMORY_BOMB: &str = "(loop (br_if 0 (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) unreachable";
/// A filter that traps at once.
const TRAP: &str = "unreachable";
/// A checker that answers WAIT (0) for every message.
const WAIT_ALL: &str = "(memory.fill (local.get 4) (i32.const 0) (local.get 3)) (i32.const 0)";

fn register(name: &str, kind: PluginKind, module: Vec<u8>) -> pb::RegisterPluginRequest {
    let kind = kind.as_str().to_ascii_uppercase().replace('-', "_");
    pb::RegisterPluginRequest { name: name.into(), kind, module: module.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_plugins_cannot_hurt_the_node() {
    const TOPIC: &str = "Jobs";
    const N: usize = 50;
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic(TOPIC, 2, TopicKind::Normal).await;
    cluster.create_topic("Payments", 2, TopicKind::Transaction).await;
    let hostile = [("looper", ENDLESS_LOOP), ("bomber", MEMORY_BOMB), ("trapper", TRAP)];
    for (name, call) in hostile {
        cluster.admin(register(name, PluginKind::Filter, module(PluginKind::Filter, call, 1, ""))).await;
        cluster.create_group(&format!("{name}-group"), false, 16).await;
        cluster.admin(bind_group(&format!("{name}-group"), name, "")).await;
    }
    cluster.create_group("healthy", false, 16).await;
    cluster.admin(register("waiter", PluginKind::TxChecker, module(PluginKind::TxChecker, WAIT_ALL, 1, ""))).await;

    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let term = cluster.status(leader).await.expect("leader status").term;
    // Through the leader's endpoint: it plans the pops, so it runs the filters and counts them.
    let url = cluster.client_addr(leader);
    let p = producer(&url, TOPIC).await;
    let bodies: BTreeSet<String> = (0..N).map(|i| format!("job-{i}")).collect();
    for b in &bodies {
        send_body(&p, TOPIC, Some("job"), b).await;
    }

    // All four groups receive at once; the hostile ones until the healthy one is done and one
    // receive of theirs started after that came back.
    let healthy_done = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (name, _) in hostile {
        let c = consumer(&url, &format!("{name}-group"), TOPIC).await;
        let done = Arc::clone(&healthy_done);
        tasks.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut got = Vec::new();
            while Instant::now() < deadline {
                let after_healthy = done.load(Ordering::SeqCst);
                if let Ok(batch) = c.receive_with(TOPIC, &all(), 32, INVISIBLE).await {
                    got.extend(batch.iter().map(body));
                }
                if after_healthy {
                    break;
                }
            }
            (name, got)
        }));
    }
    let c = consumer(&url, "healthy", TOPIC).await;
    let got = collect(&c, TOPIC, &all(), &bodies, Instant::now() + Duration::from_secs(45)).await;
    healthy_done.store(true, Ordering::SeqCst);
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        bodies.iter().cloned().collect::<Vec<_>>(),
        "the group without a plugin gets every message once"
    );
    for t in tasks {
        let (name, got) = t.await.unwrap();
        assert!(got.is_empty(), "{name}: a failing filter must deliver nothing, delivered {got:?}");
    }

    // The cluster did not notice: same leader, same term, every node up, sends go on.
    for id in 1..=3 {
        assert!(cluster.is_running(id), "node {id} died");
    }
    let status = cluster.status(leader).await.expect("the leader answers");
    assert_eq!((status.leader, status.term), (Some(leader), term), "leadership changed under hostile plugins");
    send_body(&p, TOPIC, Some("job"), "after").await;
    let after = BTreeSet::from(["after".to_string()]);
    let got = collect(&c, TOPIC, &all(), &after, Instant::now() + Duration::from_secs(20)).await;
    assert_eq!(got, ["after"], "a send after the hostile calls is delivered");

    let listed = plugins(&cluster, leader).await;
    for (name, _) in hostile {
        let p = listed.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name} is not listed: {listed:?}"));
        assert!(p.failures > 0, "{name}: its failures are counted on the leader: {p:?}");
        assert_eq!(p.bound_to, [format!("group {name}-group")]);
    }

    // Modules the cluster refuses, each with its reason; none of them is listed afterwards.
    let abi_v2 = wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "rockraft_abi_v2")))"#).unwrap();
    let wasi = wat::parse_str(
        r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
             (memory (export "memory") 1) (func (export "rockraft_abi_v1")))"#,
    )
    .unwrap();
    // Otherwise a working filter, over the default limit of 1 MiB.
    let big = module(PluginKind::Filter, TRAP, 20, &"x".repeat(1_100_000));
    assert!(big.len() > 1 << 20);
    let bad: [(&str, Vec<u8>, &str); 4] = [
        ("speaks-v2", abi_v2, "ABI v2"),
        ("uses-wasi", wasi, "imports wasi_snapshot_preview1::fd_write"),
        ("not-wasm", b"this is not a WebAssembly module".to_vec(), "not a valid WASM module"),
        ("too-big", big, "over the cluster's max_module_bytes"),
    ];
    for (name, bytes, reason) in bad {
        let e = refused(&cluster, register(name, PluginKind::Filter, bytes)).await;
        assert!(e.contains(reason), "registering {name}: the error must say {reason:?}: {e}");
    }
    let listed = plugin_cli(&cluster.admin_addr(1), &["list"]).await;
    for name in ["speaks-v2", "uses-wasi", "not-wasm", "too-big"] {
        assert!(!listed.lines().any(|l| l.starts_with(&format!("{name}\t"))), "{name} is listed:\n{listed}");
    }
    for name in ["looper", "bomber", "trapper", "waiter"] {
        assert!(listed.lines().any(|l| l.starts_with(&format!("{name}\t"))), "{name} is not listed:\n{listed}");
    }

    // Bindings of the wrong kind.
    for checker in ["waiter", "default-tx-checker"] {
        let e = refused(&cluster, bind_group("healthy", checker, "")).await;
        assert!(e.contains("not a filter"), "binding the checker {checker} to a group: {e}");
    }
    let to_topic = pb::BindPluginRequest {
        target: Some(pb::bind_plugin_request::Target::Topic("Payments".into())),
        plugin: "trapper".into(),
        config: String::new(),
    };
    let e = refused(&cluster, to_topic).await;
    assert!(e.contains("not a tx-checker"), "binding a filter to a transaction topic: {e}");

    // A bound plugin stays until it is unbound.
    let e = refused(&cluster, pb::RemovePluginRequest { name: "trapper".into() }).await;
    assert!(e.contains("trapper-group") && e.contains("unbind"), "removing a bound plugin: {e}");
    assert!(plugins(&cluster, 1).await.iter().any(|p| p.name == "trapper"));
    let unbind = pb::BindPluginRequest {
        target: Some(pb::bind_plugin_request::Target::Group("trapper-group".into())),
        plugin: String::new(),
        config: String::new(),
    };
    cluster.admin(unbind).await;
    cluster.admin(pb::RemovePluginRequest { name: "trapper".into() }).await;
    assert!(!plugins(&cluster, 1).await.iter().any(|p| p.name == "trapper"), "trapper was removed");
    // Unbound, the group gets what is sent now.
    let tc = consumer(&url, "trapper-group", TOPIC).await;
    send_body(&p, TOPIC, Some("job"), "unfiltered").await;
    let want = BTreeSet::from(["unfiltered".to_string()]);
    let mut got = collect(&tc, TOPIC, &all(), &want, Instant::now() + Duration::from_secs(20)).await;
    got.sort();
    // "after" was sent when nobody of the group received: its filter never saw it.
    assert_eq!(got, ["after", "unfiltered"], "unbound, the group gets what its filter did not refuse, once");
}

// ---------------------------------------------------------------------------------------------
// The example plugins

/// Sends a message with a JSON body, named by its key.
async fn send_json(p: &Producer, topic: &str, tag: &str, key: &str, body: &str) -> Result<(), ClientError> {
    let msg = MessageBuilder::builder()
        .set_topic(topic)
        .set_tag(tag)
        .set_keys(vec![key])
        .set_body(body.as_bytes().to_vec())
        .build()
        .unwrap();
    p.send(msg).await.map(|_| ())
}

/// Receives (and acks) with `filter` until every key in `expect` has arrived and one more
/// receive came back empty, or `deadline` passes. Returns the key of every delivery.
async fn collect_keys(
    c: &SimpleConsumer,
    topic: &str,
    filter: &FilterExpression,
    expect: &BTreeSet<&str>,
    deadline: Instant,
) -> Vec<String> {
    let mut got: Vec<String> = Vec::new();
    while Instant::now() < deadline {
        let complete = expect.iter().all(|k| got.iter().any(|g| g == k));
        match c.receive_with(topic, filter, 32, INVISIBLE).await {
            Ok(batch) if batch.is_empty() && complete => break,
            Ok(batch) => {
                for m in batch {
                    got.push(m.keys().first().cloned().unwrap_or_default());
                    ack(c, &m).await;
                }
            }
            Err(e) => {
                eprintln!("receive from {topic} failed (retrying): {e:?}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    got
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn strings(keys: &BTreeSet<&str>) -> Vec<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn example_filter_plugin_filters_a_live_subscription() {
    const TOPIC: &str = "Orders";
    let wasm = tokio::task::spawn_blocking(|| build_example("json-field-filter")).await.unwrap();
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic(TOPIC, 2, TopicKind::Normal).await;
    cluster.create_group("paid-orders", false, 16).await;
    cluster.create_group("eu-orders", false, 16).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    // Clients and the CLI talk to a node that survives the leader's death.
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    let endpoint = cluster.client_addr(survivor);
    let admin = cluster.admin_addr(survivor);

    // As its README says: register the module, bind the group with an expression.
    plugin_cli(&admin, &["register", "--name", "json-field", "--kind", "filter", wasm.to_str().unwrap()]).await;
    let expression = r#"status == "paid" && amount != 0"#;
    plugin_cli(&admin, &["bind", "--group", "paid-orders", "--plugin", "json-field", "--config", expression]).await;
    let listed = plugin_cli(&admin, &["list"]).await;
    let line =
        listed.lines().find(|l| l.starts_with("json-field\t")).unwrap_or_else(|| panic!("not listed:\n{listed}"));
    assert!(line.contains("\tfilter\tregistered\t") && line.contains("bound_to=group paid-orders"), "{line}");

    let p = producer(&endpoint, TOPIC).await;
    // (key, tag, body, delivered to paid-orders subscribing to tag "eu")
    let orders: [(&str, &str, &str, bool); 9] = [
        ("paid", "eu", r#"{"id": 1, "status": "paid", "amount": 10}"#, true),
        ("paid-escaped", "eu", r#"{"amount": 1.5, "status": "p\u0061id", "items": [{"status": "open"}]}"#, true),
        ("paid-zero", "eu", r#"{"status": "paid", "amount": 0.0}"#, false),
        ("open", "eu", r#"{"status": "open", "amount": 5}"#, false),
        ("capital", "eu", r#"{"status": "Paid", "amount": 5}"#, false),
        ("no-status", "eu", r#"{"amount": 5}"#, false),
        ("nested-only", "eu", r#"{"order": {"status": "paid"}, "amount": 5}"#, false),
        ("not-json", "eu", "status=paid amount=5", false),
        // Matches the plugin, but not the subscription's own tag expression.
        ("paid-us", "us", r#"{"status": "paid", "amount": 10}"#, false),
    ];
    for (key, tag, body, _) in orders {
        send_json(&p, TOPIC, tag, key, body).await.unwrap_or_else(|e| panic!("send of {key}: {e:?}"));
    }
    let eu = FilterExpression::new(FilterType::Tag, "eu");
    let wanted: BTreeSet<&str> = orders.iter().filter(|o| o.3).map(|o| o.0).collect();
    let c = consumer(&endpoint, "paid-orders", TOPIC).await;
    let got = collect_keys(&c, TOPIC, &eu, &wanted, Instant::now() + Duration::from_secs(30)).await;
    assert_eq!(sorted(got), strings(&wanted), "paid-orders gets exactly the eu orders the plugin lets through, once");
    // Without the plugin, the same subscription gets every eu order.
    let control = consumer(&endpoint, "eu-orders", TOPIC).await;
    let eu_orders: BTreeSet<&str> = orders.iter().filter(|o| o.1 == "eu").map(|o| o.0).collect();
    let got = collect_keys(&control, TOPIC, &eu, &eu_orders, Instant::now() + Duration::from_secs(30)).await;
    assert_eq!(sorted(got), strings(&eu_orders), "a group without the plugin gets every eu order");

    // The leader dies; the new one has the module from the log and filters with it.
    cluster.kill(leader);
    let new_leader = cluster.wait_for_leader(Duration::from_secs(30)).await;
    assert_ne!(new_leader, leader);
    cluster.wait_caught_up(survivor, Duration::from_secs(30)).await;
    let before = plugins(&cluster, new_leader).await;
    let ran_before =
        before.iter().find(|p| p.name == "json-field").expect("json-field listed on the new leader").messages;
    let later: [(&str, &str, &str, bool); 3] = [
        ("paid-later", "eu", r#"{"status": "paid", "amount": 3}"#, true),
        ("open-later", "eu", r#"{"status": "open", "amount": 3}"#, false),
        ("paid-later-us", "us", r#"{"status": "paid", "amount": 3}"#, false),
    ];
    for (key, tag, body, _) in later {
        let deadline = Instant::now() + Duration::from_secs(20);
        // An election may still be settling: retried (a duplicate would show below).
        while let Err(e) = send_json(&p, TOPIC, tag, key, body).await {
            assert!(Instant::now() < deadline, "send of {key} after the failover: {e:?}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let wanted: BTreeSet<&str> = later.iter().filter(|o| o.3).map(|o| o.0).collect();
    let got = collect_keys(&c, TOPIC, &eu, &wanted, Instant::now() + Duration::from_secs(30)).await;
    assert_eq!(sorted(got), strings(&wanted), "after the failover paid-orders still gets only what the plugin passes");
    let after = plugins(&cluster, new_leader).await;
    let json_field = after.iter().find(|p| p.name == "json-field").expect("json-field listed");
    assert!(json_field.messages > ran_before, "the new leader ran the registered module: {json_field:?}");
    assert_eq!(json_field.bound_to, ["group paid-orders"]);
}

/// The keys of the messages the broker asked the producer's own checker about.
type Asked = Arc<Mutex<Vec<String>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn example_checker_plugin_resolves_transactions() {
    const TOPIC: &str = "Orders";
    // Bound with the README's ten minutes: nothing there is old enough to roll back.
    const SLOW_TOPIC: &str = "Backorders";
    let wasm = tokio::task::spawn_blocking(|| build_example("order-checker")).await.unwrap();
    // Open halves are checked after 1 s, then every second.
    let broker = "transaction_recovery_secs = 1\ntransaction_check_interval_secs = 1\n".to_string();
    let cluster = Cluster::start(3, Options { broker, ..Default::default() }).await;
    cluster.create_topic(TOPIC, 2, TopicKind::Transaction).await;
    cluster.create_topic(SLOW_TOPIC, 2, TopicKind::Transaction).await;
    cluster.create_group("shipping", false, 16).await;
    let endpoint = cluster.admin_addr(1);
    plugin_cli(&endpoint, &["register", "--name", "order-checker", "--kind", "tx-checker", wasm.to_str().unwrap()])
        .await;
    let config = "property=order_state commit=paid rollback_after_ms=3000";
    plugin_cli(&endpoint, &["bind", "--topic", TOPIC, "--plugin", "order-checker", "--config", config]).await;
    let slow = "property=order_state commit=paid rollback_after_ms=600000";
    plugin_cli(&endpoint, &["bind", "--topic", SLOW_TOPIC, "--plugin", "order-checker", "--config", slow]).await;

    // A producer that never resolves anything: it neither commits nor rolls back, and its checker
    // answers "unknown".
    let asked: Asked = Arc::default();
    let mut po = ProducerOption::default();
    po.set_topics(vec![TOPIC, SLOW_TOPIC]);
    let recorder = Arc::clone(&asked);
    let checker = Box::new(move |_transaction_id: String, m: MessageView| {
        recorder.lock().unwrap().push(m.keys().first().cloned().unwrap_or_default());
        TransactionResolution::UNKNOWN
    });
    let mut p = Producer::new_transaction_producer(po, client_option(&cluster.access_url()), checker)
        .expect("transactional producer");
    p.start().await.expect("transactional producer start");
    let mut ids = BTreeMap::new();
    let mut open = Vec::new();
    let halves = [
        (TOPIC, "paid-order", Some("paid")),
        (TOPIC, "pending-order", Some("pending")),
        (TOPIC, "bare-order", None),
        (SLOW_TOPIC, "pending-backorder", Some("pending")),
    ];
    for (topic, key, state) in halves {
        let mut b = MessageBuilder::transaction_message_builder(topic, key.as_bytes().to_vec()).set_keys(vec![key]);
        if let Some(s) = state {
            b = b.set_properties(HashMap::from([("order_state", s)]));
        }
        let tx = p.send_transaction_message(b.build().unwrap()).await.unwrap_or_else(|e| panic!("half {key}: {e:?}"));
        ids.insert(key, tx.message_id().to_string());
        // Kept, never committed or rolled back.
        open.push(tx);
    }

    // The paid order is committed by the plugin and delivered.
    let c = consumer(&cluster.access_url(), "shipping", TOPIC).await;
    let want = BTreeSet::from(["paid-order"]);
    let got = collect_keys(&c, TOPIC, &all(), &want, Instant::now() + Duration::from_secs(20)).await;
    assert_eq!(got, ["paid-order"], "the paid half is committed by the checker plugin and delivered once");

    // The others are rolled back by it once 3 s old, and never delivered.
    let list = |topic: &str| {
        let req = pb::ListHeldRequest {
            kind: "HALF".into(),
            topic: topic.into(),
            all: true,
            after: String::new(),
            limit: 100,
            data_group: None,
        };
        let cluster = &cluster;
        async move { cluster.admin(req).await.held }
    };
    // (state, resolved by)
    let state_of = |halves: &[pb::HeldMessage], key: &str| {
        halves.iter().find(|h| h.message_id == ids[key]).map(|h| (h.state.clone(), h.resolved_by.clone()))
    };
    let rolled_back_by_checker = Some(("ROLLED_BACK".to_string(), "CHECKER".to_string()));
    let deadline = Instant::now() + Duration::from_secs(20);
    let held = loop {
        let held = list(TOPIC).await;
        if ["pending-order", "bare-order"]
            .iter()
            .all(|k| state_of(&held, k).is_some_and(|(state, _)| state == "ROLLED_BACK"))
        {
            break held;
        }
        assert!(Instant::now() < deadline, "the unpaid halves were not rolled back: {held:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    for (key, committed) in [("paid-order", true), ("pending-order", false), ("bare-order", false)] {
        let expected = match committed {
            true => Some(("COMMITTED".to_string(), "CHECKER".to_string())),
            false => rolled_back_by_checker.clone(),
        };
        assert_eq!(state_of(&held, key), expected, "{key}: resolved otherwise than by the checker plugin");
    }
    let got = collect_keys(&c, TOPIC, &all(), &BTreeSet::new(), Instant::now() + Duration::from_secs(10)).await;
    assert!(got.is_empty(), "a rolled-back half was delivered: {got:?}");

    // Before its deadline an unpaid order is left to the producer, who is asked (and does not
    // know): the half stays open.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !asked.lock().unwrap().iter().any(|k| k == "pending-backorder") {
        assert!(Instant::now() < deadline, "the plugin never had the producer asked: {:?}", asked.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let backorders = list(SLOW_TOPIC).await;
    assert_eq!(state_of(&backorders, "pending-backorder"), Some(("OPEN".into(), String::new())), "{backorders:?}");
    let asked = asked.lock().unwrap().clone();
    assert!(!asked.iter().any(|k| k == "paid-order"), "the producer was asked about the paid half: {asked:?}");

    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let listed = plugins(&cluster, leader).await;
    let checker = listed.iter().find(|p| p.name == "order-checker").expect("order-checker listed");
    let bound: BTreeSet<&str> = checker.bound_to.iter().map(String::as_str).collect();
    assert_eq!(bound, BTreeSet::from(["topic Backorders", "topic Orders"]));
    assert!(checker.calls > 0 && checker.failures == 0, "{checker:?}");
    drop(open);
}

/// A filter that fails every call is quarantined after `quarantine_failures` failures: every
/// node lists it so, receives of its group fail with a status that names it and how to enable
/// it, and the messages it was not run on are not passed over (they arrive once the binding is
/// gone). `plugin enable` lifts the quarantine.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_failing_every_call_is_quarantined_on_every_node_until_enabled() {
    const TOPIC: &str = "Quarantine";
    const N: usize = 20;
    let options = Options { extra_config: "[plugins]\nquarantine_failures = 5\n".into(), ..Default::default() };
    let cluster = Cluster::start(3, options).await;
    cluster.create_topic(TOPIC, 1, TopicKind::Normal).await;
    cluster.create_group("guarded", false, 16).await;
    cluster.admin(register("always-traps", PluginKind::Filter, module(PluginKind::Filter, TRAP, 1, ""))).await;
    cluster.admin(bind_group("guarded", "always-traps", "")).await;
    if cluster.data_groups > 1 {
        // The filter runs where the queue's pops are planned, on its data group's leader: make
        // that a node that does not lead the metadata group, where the quarantine is written.
        let metadata_leader = cluster.wait_for_leader_of(None, Duration::from_secs(10)).await;
        let other = (1..=3).find(|&id| id != metadata_leader).expect("three nodes");
        cluster.admin(pb::ConfigureRequest { balance_leaders: Some(false), ..Default::default() }).await;
        cluster.make_leader_of(cluster.queue_group(TOPIC, 0).await, other).await;
    }
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let url = cluster.client_addr(leader);
    let p = producer(&url, TOPIC).await;
    for i in 0..N {
        send_body(&p, TOPIC, None, &format!("q-{i}")).await;
    }

    let c = consumer(&url, "guarded", TOPIC).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    // A node that counted the failures refuses at once ("being quarantined"); the refusal names
    // the way out once the quarantine is in the replicated state.
    let refusal = loop {
        match c.receive_with(TOPIC, &all(), 32, INVISIBLE).await {
            Err(e) if format!("{e:?}").contains("rockraft plugin enable") => break e,
            Ok(batch) => assert!(batch.is_empty(), "a filter that traps passed messages: {batch:?}"),
            Err(e) => eprintln!("receive: {e:?}"),
        }
        assert!(Instant::now() < deadline, "the failing plugin was never quarantined");
    };
    let text = format!("{refusal:?}");
    assert_eq!(code(&refusal), Some("INTERNAL_SERVER_ERROR"), "{text}");
    assert!(text.contains("rockraft plugin enable always-traps"), "{text}");
    for id in 1..=3 {
        let listed = plugins(&cluster, id).await;
        let info = listed.iter().find(|p| p.name == "always-traps").expect("listed");
        assert!(!info.quarantined.is_empty(), "node {id} does not show the quarantine: {info:?}");
    }

    // Unbound, the group gets what the plugin was never run on: most of the messages.
    cluster
        .admin(pb::BindPluginRequest {
            target: Some(pb::bind_plugin_request::Target::Group("guarded".into())),
            plugin: String::new(),
            config: String::new(),
        })
        .await;
    let mut got = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && got.len() < N - 6 {
        if let Ok(batch) = c.receive_with(TOPIC, &all(), 32, INVISIBLE).await {
            for m in &batch {
                got.insert(body(m));
                ack(&c, m).await;
            }
        }
    }
    assert!(got.len() >= N - 6, "messages were passed over while the plugin was quarantined: got {got:?}");

    cluster.admin(pb::EnablePluginRequest { name: "always-traps".into() }).await;
    for id in 1..=3 {
        let listed = plugins(&cluster, id).await;
        let info = listed.iter().find(|p| p.name == "always-traps").expect("listed");
        assert!(info.quarantined.is_empty(), "node {id} still shows the quarantine after enable: {info:?}");
    }
}
