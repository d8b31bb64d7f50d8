//! The plugin host with the built-in modules and with hostile ones: RocketMQ's filter cases
//! through the same path pop planning takes, and modules that loop, grow memory, trap, answer out
//! of bounds or speak another ABI, none of which may harm the host or later calls.

use bytes::Bytes;
use rockraft_proto::rockraft::StoredMessage;

use crate::broker::{MessageFilter, StoredEntry};
use crate::plugin::subscription::{FilterKind, Subscription};
use crate::plugin::{PluginError, PluginHost, PluginKind, PluginLimits, test_host};
use crate::store::tag_hash;

fn entry(offset: u64, tag: &str, properties: &[(&str, &str)]) -> StoredEntry {
    StoredEntry {
        topic: "T".into(),
        queue_id: 0,
        offset,
        store_timestamp_ms: 1,
        size: 0,
        message: StoredMessage {
            message_id: format!("m{offset}"),
            tag: tag.into(),
            properties: properties.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            body: Bytes::from_static(b"body"),
            ..Default::default()
        },
        raw: Bytes::new(),
    }
}

/// Whether a message is delivered to a subscription, the way pop planning decides.
fn delivered(sub: &Subscription, e: &StoredEntry) -> bool {
    sub.may_match(tag_hash(&e.message.tag)) && (!sub.reads_messages() || sub.passes(&[e], 0)[0])
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
    let refs: Vec<&StoredEntry> = entries.iter().collect();
    let passed = sub.passes(&refs, 0);
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
    let manifest = r#"{"abi":1,"name":"hostile","version":"1","kinds":["filter"],"bodies":false}"#;
    let text = format!(
        r#"(module
          (memory (export "memory") 1)
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

fn run(host: &PluginHost, bytes: &[u8], n: u64) -> Vec<bool> {
    let m = host.load(bytes, PluginKind::Filter).expect("module loads");
    let entries: Vec<StoredEntry> = (0..n).map(|i| entry(i, "a", &[])).collect();
    let refs: Vec<&StoredEntry> = entries.iter().collect();
    host.filter(&m, "", &refs, 0)
}

#[test]
fn a_well_behaved_module_works() {
    assert_eq!(run(&host(), &module(MATCH_ALL, GOOD_ALLOC), 3), [true, true, true]);
}

#[test]
fn hostile_modules_fail_their_own_calls_only() {
    let host = host();
    let infinite_loop = module("(loop (br 0)) (i32.const 0)", GOOD_ALLOC);
    let memory_bomb =
        module("(loop (br_if 0 (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) unreachable", GOOD_ALLOC);
    let trap = module("unreachable", GOOD_ALLOC);
    // Hands the host a buffer that ends past its memory.
    let out_of_bounds = module(MATCH_ALL, "(i32.const -16)");
    let failing = [
        ("infinite loop", &infinite_loop),
        ("memory bomb", &memory_bomb),
        ("trap", &trap),
        ("bad buffer", &out_of_bounds),
    ];
    for (what, bytes) in failing {
        let m = host.load(bytes, PluginKind::Filter).unwrap();
        let before = m.counters.failures.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(run(&host, bytes, 4), [false; 4], "{what}: a failed call matches nothing");
        // The batch failed, then each message alone: five failed calls, each in a fresh instance.
        let failures = m.counters.failures.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert_eq!(failures, 5, "{what}");
        // The host still runs other modules.
        assert_eq!(run(&host, &module(MATCH_ALL, GOOD_ALLOC), 2), [true, true], "after {what}");
    }
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
    let limits = PluginLimits { max_module_bytes: 10, ..PluginLimits::default() };
    let err = PluginHost::new(limits)
        .unwrap()
        .load(&module(MATCH_ALL, GOOD_ALLOC), PluginKind::Filter)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"), "{err}");
}

#[test]
fn the_built_in_modules_are_the_kinds_the_registry_reserves() {
    for (name, kind) in crate::broker::plugins::BUILT_IN {
        assert_eq!(crate::plugin::builtin::module(name).map(|(_, k)| k), Some(kind), "{name}");
    }
    assert_eq!(crate::broker::plugins::BUILT_IN.len(), crate::plugin::builtin::NAMES.len());
}
