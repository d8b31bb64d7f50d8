//! The plugin host with the built-in modules and with hostile ones: RocketMQ's filter cases
//! through the same path pop planning takes, and modules that loop, grow memory, trap, answer out
//! of bounds or speak another ABI, none of which may harm the host or later calls.

use bytes::Bytes;
use rockraft_proto::rockraft::StoredMessage;

use crate::broker::plugins::FilterUnavailable;
use crate::broker::{AdminCommand, MessageFilter, StoredEntry, StoredView};
use crate::plugin::subscription::{FilterKind, Subscription};
use crate::plugin::{PluginError, PluginHost, PluginKind, PluginLimits, test_host};
use crate::store::tag_hash;

fn entry(offset: u64, tag: &str, properties: &[(&str, &str)]) -> StoredEntry {
    let message = StoredMessage {
        message_id: format!("m{offset}"),
        tag: tag.into(),
        properties: properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        body: Bytes::from_static(b"body"),
        ..Default::default()
    };
    StoredEntry::new("T", 0, offset, 1, message)
}

/// The entries as filters see them.
fn views(entries: &[StoredEntry]) -> Vec<StoredView<'_>> {
    entries.iter().map(|e| e.view().expect("an encoded message")).collect()
}

/// Whether a message is delivered to a subscription, the way pop planning decides.
fn delivered(sub: &Subscription, e: &StoredEntry) -> bool {
    sub.may_match(tag_hash(&e.message.tag))
        && (!sub.reads_messages() || sub.passes(&views(std::slice::from_ref(e)), 0)[0])
}

/// Lines of a conformance file: the repository's copy, and the shared original beside the
/// repository when it is there.
fn cases(file: &str) -> Vec<Vec<String>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut out = Vec::new();
    for dir in ["testdata/conformance", "../shared/conformance"] {
        let Ok(text) = std::fs::read_to_string(format!("{root}/{dir}/{file}")) else { continue };
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            out.push(line.split('\t').map(str::to_string).collect());
        }
    }
    out
}

#[test]
fn tag_conformance_cases_through_the_tag_plugin() {
    let cases = cases("tag_public.tsv");
    assert!(cases.len() >= 20, "read {} cases", cases.len());
    for c in &cases {
        let (expr, tag, expected) = (&c[0], c.get(1).map_or("", String::as_str), c.get(2).map_or("", String::as_str));
        let got =
            Subscription::compile(test_host(), FilterKind::Tag, expr).is_ok_and(|s| delivered(&s, &entry(0, tag, &[])));
        assert_eq!(got, expected == "true", "{expr:?} on tag {tag:?}");
    }
}

#[test]
fn sql92_conformance_cases_through_the_sql92_plugin() {
    let cases = cases("sql92_public.tsv");
    assert!(cases.len() >= 80, "read {} cases", cases.len());
    for c in &cases {
        let (expr, props, expected) = (&c[0], &c[1], c[2].as_str());
        let props: serde_json::Map<String, serde_json::Value> = serde_json::from_str(props).expect("case properties");
        let props: Vec<(String, String)> =
            props.into_iter().map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string())).collect();
        let props: Vec<(&str, &str)> = props.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let got = match Subscription::compile(test_host(), FilterKind::Sql92, expr) {
            Err(PluginError::Rejected(_)) => "error",
            Err(e) => panic!("{expr:?}: {e}"),
            Ok(s) => {
                if delivered(&s, &entry(0, "", &props)) {
                    "true"
                } else {
                    "false"
                }
            }
        };
        assert_eq!(got, expected, "{expr:?} on {props:?}");
    }
}

#[test]
fn batches_answer_per_message_in_order() {
    let sub = Subscription::compile(test_host(), FilterKind::Sql92, "a > 5 AND b = 'x'").unwrap();
    let entries: Vec<StoredEntry> =
        (0..700).map(|i| entry(i, "", &[("a", &i.to_string()), ("b", if i % 3 == 0 { "x" } else { "y" })])).collect();
    let passed = sub.passes(&views(&entries), 0);
    let expected: Vec<bool> = (0..700).map(|i| i > 5 && i % 3 == 0).collect();
    assert_eq!(passed, expected);
}

#[test]
fn expressions_the_plugins_refuse_are_rejected_with_their_reason() {
    for (kind, bad) in [(FilterKind::Sql92, "a >"), (FilterKind::Sql92, ""), (FilterKind::Tag, " || ")] {
        match Subscription::compile(test_host(), kind, bad) {
            Err(PluginError::Rejected(reason)) => assert!(!reason.is_empty()),
            other => panic!("{bad:?}: {:?}", other.map(|_| ())),
        }
    }
}

/// A module speaking ABI v1 whose `rockraft_filter` body is `filter` and `rockraft_alloc` body is
/// `alloc` (WAT).
fn module(filter: &str, alloc: &str) -> Vec<u8> {
    module_with("", filter, alloc)
}

/// Answers "match" for every message: out[i] = 1.
const GOOD_ALLOC: &str = "(i32.const 1024)";

const MATCH_ALL: &str = "(local $i i32)
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $i) (local.get 3)))
      (i32.store8 (i32.add (local.get 4) (local.get $i)) (i32.const 1))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $next)))
    (i32.const 0)";

fn host() -> PluginHost {
    PluginHost::new(PluginLimits::default()).unwrap()
}

fn run(host: &PluginHost, bytes: &[u8], n: u64) -> Result<Vec<bool>, FilterUnavailable> {
    let m = host.load(bytes, PluginKind::Filter).expect("module loads");
    let entries: Vec<StoredEntry> = (0..n).map(|i| entry(i, "a", &[])).collect();
    host.filter(&m, "", &views(&entries), 0)
}

#[test]
fn a_well_behaved_module_works() {
    assert_eq!(run(&host(), &module(MATCH_ALL, GOOD_ALLOC), 3).unwrap(), [true, true, true]);
}

#[test]
fn hostile_modules_fail_their_own_calls_only() {
    let host = host();
    let infinite_loop = module("(loop (br 0)) (i32.const 0)", GOOD_ALLOC);
    let memory_bomb =
        module("(loop (br_if 0 (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) unreachable", GOOD_ALLOC);
    let trap = module("unreachable", GOOD_ALLOC);
    let failing = [("infinite loop", &infinite_loop), ("memory bomb", &memory_bomb), ("trap", &trap)];
    for (what, bytes) in failing {
        let m = host.load(bytes, PluginKind::Filter).unwrap();
        let before = m.counters.failures.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(run(&host, bytes, 4).unwrap(), [false; 4], "{what}: a failed call matches nothing");
        // The batch failed, then each message alone: five failed calls, each in a fresh instance.
        let failures = m.counters.failures.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert_eq!(failures, 5, "{what}");
        // The host still runs other modules.
        assert_eq!(run(&host, &module(MATCH_ALL, GOOD_ALLOC), 2).unwrap(), [true, true], "after {what}");
    }
    // Hands the host a buffer that ends past its memory: no message can be given to it, so none
    // is decided (the pop stops before them) rather than each counted as no match.
    let out_of_bounds = module(MATCH_ALL, "(i32.const -16)");
    let stopped = run(&host, &out_of_bounds, 4).unwrap_err();
    assert!(stopped.decided.is_empty(), "{stopped:?}");
    assert!(stopped.reason.contains("outside its memory"), "{}", stopped.reason);
    assert_eq!(run(&host, &module(MATCH_ALL, GOOD_ALLOC), 2).unwrap(), [true, true]);
}

#[test]
fn a_manifest_outside_the_modules_memory_is_refused() {
    let host = host();
    let bad_manifest = wat::parse_str(
        r#"(module (memory (export "memory") 1)
          (func (export "rockraft_abi_v1"))
          (func (export "rockraft_manifest") (result i64) (i64.const 0xFFFFFFF0_00000010))
          (func (export "rockraft_alloc") (param i32) (result i32) (i32.const -16))
          (func (export "rockraft_open") (param i32 i32 i32) (result i32) (i32.const 0))
          (func (export "rockraft_close") (param i32))
          (func (export "rockraft_last_error") (result i64) (i64.const 0))
          (func (export "rockraft_filter") (param i32 i32 i32 i32 i32) (result i32) (i32.const 0)))"#,
    )
    .unwrap();
    match host.load(&bad_manifest, PluginKind::Filter) {
        Err(PluginError::Malformed(_)) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn modules_of_another_abi_or_with_imports_are_refused_with_the_reason() {
    let host = host();
    let v2 = wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "rockraft_abi_v2")))"#).unwrap();
    let err = host.load(&v2, PluginKind::Filter).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("ABI v2"), "{err}");
    let importing = wat::parse_str(
        r#"(module (import "wasi_snapshot_preview1" "fd_write" (func)) (func (export "rockraft_abi_v1")))"#,
    )
    .unwrap();
    let err = host.load(&importing, PluginKind::Filter).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("imports wasi_snapshot_preview1::fd_write"), "{err}");
    let err = host.load(b"not wasm at all", PluginKind::Filter).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("not a valid WASM module"), "{err}");
    // A filter is not a transaction checker.
    let err = host.load(&module(MATCH_ALL, GOOD_ALLOC), PluginKind::TxChecker).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("rockraft_tx_check"), "{err}");
    let too_big = padded(module(MATCH_ALL, GOOD_ALLOC), crate::broker::plugins::MAX_MODULE_BYTES);
    let err = host.load(&too_big, PluginKind::Filter).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"), "{err}");
}

/// What registration accepts is a cluster setting: any node loads a module the cluster accepted,
/// whatever its own configuration (here: a 1.5 MiB module, over the old per-node default).
#[test]
fn a_module_the_cluster_accepted_loads_on_every_node() {
    let big = padded(module(MATCH_ALL, GOOD_ALLOC), 3 << 19);
    assert!(big.len() > 1 << 20);
    let host = PluginHost::new(PluginLimits::default()).unwrap();
    assert!(host.load(&big, PluginKind::Filter).is_ok());
}

#[test]
fn the_built_in_modules_are_the_kinds_the_registry_reserves() {
    for (name, kind) in crate::broker::plugins::BUILT_IN {
        assert_eq!(crate::plugin::builtin::module(name).map(|(_, k)| k), Some(kind), "{name}");
    }
    assert_eq!(crate::broker::plugins::BUILT_IN.len(), crate::plugin::builtin::NAMES.len());
}

/// `module` with `extra` fields (tables, globals) added to the module.
fn module_with(extra: &str, filter: &str, alloc: &str) -> Vec<u8> {
    let manifest = r#"{"abi":1,"name":"hostile","version":"1","kinds":["filter"],"bodies":false}"#;
    let text = format!(
        r#"(module
          (memory (export "memory") 1)
          {extra}
          (data (i32.const 16) "{}")
          (func (export "rockraft_abi_v1"))
          (func (export "rockraft_manifest") (result i64) (i64.or (i64.shl (i64.const 16) (i64.const 32)) (i64.const {})))
          (func (export "rockraft_alloc") (param i32) (result i32) {alloc})
          (func (export "rockraft_open") (param i32 i32 i32) (result i32) (i32.const 0))
          (func (export "rockraft_close") (param i32))
          (func (export "rockraft_last_error") (result i64) (i64.const 0))
          (func (export "rockraft_filter") (param i32 i32 i32 i32 i32) (result i32) {filter}))"#,
        manifest.replace('"', "\\\""),
        manifest.len()
    );
    wat::parse_str(text).expect("test module assembles")
}

/// `bytes` with a custom section of `pad` bytes appended: a large, valid module.
fn padded(mut bytes: Vec<u8>, pad: usize) -> Vec<u8> {
    let name = b"padding";
    let mut payload = vec![name.len() as u8];
    payload.extend_from_slice(name);
    payload.resize(payload.len() + pad, 0x5A);
    bytes.push(0);
    let mut len = payload.len();
    loop {
        let byte = (len & 0x7F) as u8;
        len >>= 7;
        if len == 0 {
            bytes.push(byte);
            break;
        }
        bytes.push(byte | 0x80);
    }
    bytes.extend_from_slice(&payload);
    bytes
}

mod with_broker {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::broker::group::GroupConfig;
    use crate::broker::plugins::{Binding, PluginCommand};
    use crate::broker::state_test::{Node, create, node, send};
    use crate::broker::{Command, PopRequest, Reply};

    /// A node with topic `T` holding `messages` messages, group `g`, and `g` bound to `module`
    /// registered as `bound`.
    fn bound_group(dir: &std::path::Path, module: &[u8], messages: &[&str]) -> Node {
        let mut n = node(dir);
        assert_eq!(n.commit(&create("T", 1)), Reply::Applied);
        let g = GroupConfig { name: "g".into(), fifo: false, max_attempts: 16, priority_factor: 100, lite: None };
        n.commit(&Command::Admin(AdminCommand::CreateGroup(g)));
        if !messages.is_empty() {
            n.commit(&send("T", 0, 1, messages));
        }
        let register = PluginCommand::Register {
            name: "bound".into(),
            kind: PluginKind::Filter,
            version: "1".into(),
            now_ms: 1,
            module: module.to_vec(),
        };
        assert_eq!(n.commit(&Command::Plugin(register)), Reply::Applied);
        let binding = Some(Binding { plugin: "bound".into(), config: String::new() });
        let bind = PluginCommand::BindGroup { group: "g".into(), binding };
        assert_eq!(n.commit(&Command::Plugin(bind)), Reply::Applied);
        n
    }

    #[test]
    fn compiling_a_bound_filter_holds_no_broker_lock() {
        let dir = tempfile::tempdir().unwrap();
        let big = padded(module(MATCH_ALL, GOOD_ALLOC), 256 << 10);
        let n = bound_group(dir.path(), &big, &[]);
        // A cold host: the bound module is compiled by the subscription that first needs it.
        let host = Arc::new(host());
        let writer_waited = Arc::new(AtomicBool::new(false));
        let (broker, waited) = (n.broker.clone(), Arc::clone(&writer_waited));
        // Half way through the compilation, another thread takes the broker's write lock, as
        // applying an entry does; the compilation goes on only once it has it (or gave up).
        host.on_compile(move || {
            let (tx, rx) = std::sync::mpsc::channel();
            let broker = broker.clone();
            std::thread::spawn(move || {
                drop(broker.state_mut());
                let _ = tx.send(());
            });
            if rx.recv_timeout(Duration::from_secs(5)).is_err() {
                waited.store(true, Ordering::SeqCst);
            }
            Ok(())
        });
        let sub = Subscription::all().with_group_filter(&host, &n.broker, "g").expect("the filter compiles");
        assert!(sub.reads_messages(), "the group's filter is in the subscription");
        assert!(!writer_waited.load(Ordering::SeqCst), "apply waited for a plugin to compile");
    }

    /// Alloc costs fuel in proportion to the size asked for, as a guest that clears its buffer does.
    const COSTLY_ALLOC: &str = "(local $i i32)
        (local.set $i (i32.mul (local.get 0) (i32.const 10)))
        (block $done (loop $next
          (br_if $done (i32.eqz (local.get $i)))
          (local.set $i (i32.sub (local.get $i) (i32.const 1)))
          (br $next)))
        (i32.const 1024)";

    #[test]
    fn a_cached_handle_gets_fresh_fuel_for_every_call() {
        let limits = PluginLimits { filter_fuel_per_call: 1_000, filter_fuel_per_message: 100, ..Default::default() };
        let host = PluginHost::new(limits).unwrap();
        let m = host.load(&module(MATCH_ALL, COSTLY_ALLOC), PluginKind::Filter).unwrap();
        let entries: Vec<StoredEntry> = (0..100).map(|i| entry(i, "a", &[])).collect();
        let refs = views(&entries);
        // The first call opens the handle; the next ones reuse it.
        assert_eq!(host.filter(&m, "", &refs[..1], 0).unwrap(), [true]);
        assert_eq!(host.filter(&m, "", &refs, 0).unwrap(), vec![true; 100], "every message matches");
        assert_eq!(m.counters.failures.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn registered_modules_are_compiled_before_first_use_by_the_warm_up() {
        let dir = tempfile::tempdir().unwrap();
        let n = bound_group(dir.path(), &module(MATCH_ALL, GOOD_ALLOC), &[]);
        let host = Arc::new(host());
        let uncompiled = host.uncompiled(&n.broker.state().meta.plugins);
        let names: Vec<&str> = uncompiled.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"bound") && names.contains(&"sql92"), "{names:?}");
        for source in &uncompiled {
            host.compiled(source).unwrap();
        }
        assert!(host.uncompiled(&n.broker.state().meta.plugins).is_empty());
        // The first subscription finds it compiled.
        host.on_compile(|| panic!("compiled at first use"));
        Subscription::all().with_group_filter(&host, &n.broker, "g").unwrap();
    }

    #[test]
    fn a_plugin_failing_every_call_is_quarantined_until_enabled() {
        let dir = tempfile::tempdir().unwrap();
        let trap = module("unreachable", GOOD_ALLOC);
        let mut n = bound_group(dir.path(), &trap, &["a", "b", "c", "d", "e", "f", "g", "h"]);
        let limits = PluginLimits { quarantine_failures: 5, quarantine_window_secs: 60, ..Default::default() };
        let host = Arc::new(PluginHost::new(limits).unwrap());
        let plan = |n: &Node| {
            let sub = Subscription::all().with_group_filter(&host, &n.broker, "g")?;
            let (group, topic) = (n.broker.group("g").unwrap(), n.broker.topic("T").unwrap());
            let request = PopRequest {
                group: &group,
                topic: &topic,
                filter: &sub,
                max_messages: 8,
                invisible_ms: 1000,
                now_ms: 10,
                first_queue: 0,
                by_priority: false,
            };
            Ok::<_, PluginError>(n.broker.plan_pop(&request).unwrap())
        };
        // The batch fails, then one message at a time until the fifth failure: from then on the
        // plugin is not called, and the pop stops before the messages it did not decide.
        let first = plan(&n).unwrap();
        assert!(!first.delivers());
        assert_eq!(first.pop.takes[0].to, first.pop.takes[0].from + 4, "only the messages it failed on are passed");
        assert!(first.filter_unavailable.is_some());
        let proposed = host.quarantines(&n.broker.state().meta.plugins, 99);
        assert_eq!(proposed.len(), 1, "{proposed:?}");
        for command in proposed {
            assert_eq!(n.commit(&Command::Plugin(command)), Reply::Applied);
        }
        let refused = plan(&n).unwrap_err();
        assert!(matches!(refused, PluginError::Quarantined { .. }));
        assert_eq!(
            refused.to_string(),
            "plugin bound is quarantined: 5 failures in 60 s; re-enable with `rockraft plugin enable bound`"
        );
        assert!(host.quarantines(&n.broker.state().meta.plugins, 100).is_empty(), "quarantined once");
        let m = host.load(&trap, PluginKind::Filter).unwrap();
        let calls = m.counters.calls.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(n.commit(&Command::Plugin(PluginCommand::Enable { name: "bound".into() })), Reply::Applied);
        plan(&n).expect("enabled: the plugin is called again");
        assert!(m.counters.calls.load(std::sync::atomic::Ordering::Relaxed) > calls);
    }

    #[test]
    fn a_filter_the_host_cannot_run_passes_over_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // Its buffer cannot be had: no message can be put to it.
        let n = bound_group(dir.path(), &module(MATCH_ALL, "unreachable"), &["a", "b", "c"]);
        let host = Arc::new(host());
        let sub = Subscription::all().with_group_filter(&host, &n.broker, "g").unwrap();
        let (group, topic) = (n.broker.group("g").unwrap(), n.broker.topic("T").unwrap());
        let request = PopRequest {
            group: &group,
            topic: &topic,
            filter: &sub,
            max_messages: 8,
            invisible_ms: 1000,
            now_ms: 10,
            first_queue: 0,
            by_priority: false,
        };
        let plan = n.broker.plan_pop(&request).unwrap();
        assert!(!plan.delivers());
        for take in &plan.pop.takes {
            assert_eq!(take.to, take.from, "the group's position moved past messages no filter decided");
        }
    }
}

#[test]
fn a_filter_growing_its_table_hits_the_memory_cap() {
    let host = host();
    let grows = module_with(
        "(table $t 1 funcref)",
        &MATCH_ALL.replacen(
            "(local $i i32)",
            "(local $i i32) (if (i32.eq (table.grow $t (ref.null func) (i32.const 100000)) (i32.const -1)) (then unreachable))",
            1,
        ),
        GOOD_ALLOC,
    );
    let m = host.load(&grows, PluginKind::Filter).unwrap();
    let e = entry(0, "a", &[]);
    let answers: Vec<bool> =
        (0..200).map(|_| host.filter(&m, "", &views(std::slice::from_ref(&e)), 0).is_ok_and(|a| a[0])).collect();
    // 16 MiB holds about 20 growths of 100,000 elements (8 bytes each) beside the linear memory.
    let longest_run = answers.split(|ok| !ok).map(<[bool]>::len).max().unwrap_or(0);
    assert!(longest_run <= 21, "{longest_run} growths in a row: the instance outgrew its memory cap");
    assert!(answers.iter().any(|ok| !ok));
}

#[test]
fn a_transient_compile_failure_is_tried_again_and_an_invalid_module_is_refused_by_hash() {
    let host = host();
    let failed_once = std::sync::atomic::AtomicBool::new(false);
    host.on_compile(move || match failed_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
        false => Err(PluginError::Engine("out of address space".into())),
        true => Ok(()),
    });
    let source = crate::plugin::ModuleSource::builtin("tag").unwrap();
    assert!(host.compiled(&source).is_err());
    assert!(!host.needs_compiling(&source), "waits out a backoff");
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(host.needs_compiling(&source), "tried again after the backoff");
    host.compiled(&source).expect("compiles the second time");
    // Invalid bytes fail the same way every time: refused by their hash without compiling again.
    assert!(host.load(b"not wasm", PluginKind::Filter).is_err());
    host.on_compile(|| panic!("an invalid module compiled again"));
    assert!(host.load(b"not wasm", PluginKind::Filter).is_err());
}
