//! The replicated registry through apply: names, sizes and kinds are checked the same way on every
//! replica, bindings follow their group or topic, and registrations survive a checkpoint and a
//! restart byte for byte.

use crate::broker::group::GroupConfig;
use crate::broker::plugins::{
    Binding, MAX_MODULE_BYTES, MAX_PLUGINS, PluginCommand, PluginKind, PluginRecord, PluginTables, Quarantine,
    module_hash,
};
use crate::broker::state_test::{Node, node};
use crate::broker::{AdminCommand, Command, Reply, TopicConfig, TopicKind};

fn register(n: &mut Node, name: &str, kind: PluginKind, module: &[u8]) -> Reply {
    let command =
        PluginCommand::Register { name: name.into(), kind, version: "1".into(), now_ms: 7, module: module.to_vec() };
    n.commit(&Command::Plugin(command))
}

fn bind_group(n: &mut Node, group: &str, plugin: Option<&str>) -> Reply {
    let binding = plugin.map(|p| Binding { plugin: p.into(), config: "x == 1".into() });
    n.commit(&Command::Plugin(PluginCommand::BindGroup { group: group.into(), binding }))
}

fn bind_topic(n: &mut Node, topic: &str, plugin: Option<&str>) -> Reply {
    let binding = plugin.map(|p| Binding { plugin: p.into(), config: String::new() });
    n.commit(&Command::Plugin(PluginCommand::BindTopic { topic: topic.into(), binding }))
}

fn rejected(r: Reply) -> String {
    match r {
        Reply::Rejected(why) => why,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn setup(n: &mut Node) {
    for (name, kind) in [("T", TopicKind::Normal), ("X", TopicKind::Transaction)] {
        let config = TopicConfig::new(name, 1, kind);
        assert_eq!(n.commit(&Command::Admin(AdminCommand::CreateTopic(config))), Reply::Applied);
    }
    let g = GroupConfig { name: "g".into(), fifo: false, max_attempts: 16, priority_factor: 100, lite: None };
    n.commit(&Command::Admin(AdminCommand::CreateGroup(g)));
}

#[test]
fn registrations_are_checked_alike_on_every_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n);
    assert_eq!(register(&mut n, "json", PluginKind::Filter, b"module-1"), Reply::Applied);
    // The same bytes again (a retried request) change nothing; other bytes need a remove first.
    assert_eq!(register(&mut n, "json", PluginKind::Filter, b"module-1"), Reply::Applied);
    assert!(rejected(register(&mut n, "json", PluginKind::Filter, b"module-2")).contains("remove it first"));
    assert!(rejected(register(&mut n, "sql92", PluginKind::Filter, b"m")).contains("built-in"));
    assert!(rejected(register(&mut n, "bad name!", PluginKind::Filter, b"m")).contains("illegal plugin name"));
    // Too large for this test's 1 MiB segments as an entry: applied to the tables directly.
    let huge = PluginCommand::Register {
        name: "huge".into(),
        kind: PluginKind::Filter,
        version: "1".into(),
        now_ms: 7,
        module: vec![0u8; MAX_MODULE_BYTES + 1],
    };
    let mut tables = PluginTables::default();
    assert!(rejected(tables.apply(huge, &Default::default(), |_| true)).contains("exceeds"));
    for i in 1..MAX_PLUGINS {
        assert_eq!(register(&mut n, &format!("p{i}"), PluginKind::Filter, format!("m{i}").as_bytes()), Reply::Applied);
    }
    assert!(rejected(register(&mut n, "one-more", PluginKind::Filter, b"m")).contains("the most"));
    let state = n.broker.state();
    let r = state.meta.plugins.modules.get("json").unwrap();
    assert_eq!((&r.module[..], r.registered_ms, r.kind), (&b"module-1"[..], 7, PluginKind::Filter));
    assert_eq!(r.hash, module_hash(b"module-1"));
}

#[test]
fn bindings_name_plugins_of_the_right_kind_and_follow_their_group_or_topic() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n);
    register(&mut n, "json", PluginKind::Filter, b"f");
    register(&mut n, "orders", PluginKind::TxChecker, b"c");
    assert!(rejected(bind_group(&mut n, "g", Some("orders"))).contains("not a filter"));
    assert!(rejected(bind_group(&mut n, "g", Some("nope"))).contains("no plugin named nope"));
    assert!(rejected(bind_group(&mut n, "missing", Some("json"))).contains("does not exist"));
    assert!(rejected(bind_topic(&mut n, "X", Some("json"))).contains("not a tx-checker"));
    assert!(rejected(bind_topic(&mut n, "T", Some("orders"))).contains("not a transaction topic"));
    assert_eq!(bind_group(&mut n, "g", Some("json")), Reply::Applied);
    assert_eq!(bind_topic(&mut n, "X", Some("orders")), Reply::Applied);
    // Built-in plugins may be bound too.
    assert_eq!(bind_topic(&mut n, "X", Some("default-tx-checker")), Reply::Applied);
    assert_eq!(bind_topic(&mut n, "X", Some("orders")), Reply::Applied);
    let removing = |name: &str| Command::Plugin(PluginCommand::Remove { name: name.into() });
    assert!(rejected(n.commit(&removing("json"))).contains("bound to group g"));
    // Deleting the group and the topic drops their bindings; then the plugins can go.
    n.commit(&Command::Admin(AdminCommand::DeleteGroup { name: "g".into() }));
    n.commit(&Command::Admin(AdminCommand::DeleteTopic { name: "X".into() }));
    assert_eq!(n.commit(&removing("json")), Reply::Applied);
    assert_eq!(n.commit(&removing("orders")), Reply::Applied);
    assert!(rejected(n.commit(&removing("orders"))).contains("no plugin named"));
    let state = n.broker.state();
    assert!(state.meta.plugins.group_filters.is_empty() && state.meta.plugins.topic_checkers.is_empty());
    assert!(state.meta.plugins.modules.is_empty());
}

#[test]
fn registrations_and_bindings_survive_a_checkpoint_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n);
    register(&mut n, "json", PluginKind::Filter, &[0, 1, 2, 255, 254]);
    n.broker.checkpoint().unwrap();
    // After the checkpoint: replayed from the log on restart.
    assert_eq!(bind_group(&mut n, "g", Some("json")), Reply::Applied);
    let digest = n.broker.live_digest().unwrap();
    let n = n.restart(dir.path());
    assert_eq!(n.broker.live_digest().unwrap(), digest);
    let state = n.broker.state();
    assert_eq!(state.meta.plugins.modules.get("json").unwrap().module[..], [0, 1, 2, 255, 254]);
    assert_eq!(state.meta.plugins.group_filters.get("g").unwrap().plugin, "json");
}

#[test]
fn a_quarantine_holds_on_every_replica_and_through_a_restart_until_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    setup(&mut n);
    register(&mut n, "json", PluginKind::Filter, b"module-1");
    let quarantine = |hash: &str| {
        let quarantine = Quarantine { failures: 100, window_secs: 60, since_ms: 5 };
        Command::Plugin(PluginCommand::Quarantine { name: "json".into(), hash: hash.into(), quarantine })
    };
    // A proposal about other bytes (the plugin was replaced since) changes nothing.
    assert_eq!(n.commit(&quarantine(&module_hash(b"module-0"))), Reply::Applied);
    assert!(n.broker.state().meta.plugins.modules.get("json").unwrap().quarantine.is_none());
    assert_eq!(n.commit(&quarantine(&module_hash(b"module-1"))), Reply::Applied);
    n.broker.checkpoint().unwrap();
    let mut n = n.restart(dir.path());
    let q = n.broker.state().meta.plugins.modules.get("json").unwrap().quarantine.clone();
    assert_eq!(q.map(|q| (q.failures, q.window_secs)), Some((100, 60)));
    let enable = |name: &str| Command::Plugin(PluginCommand::Enable { name: name.into() });
    assert!(rejected(n.commit(&enable("nope"))).contains("no plugin named nope"));
    assert!(rejected(n.commit(&enable("sql92"))).contains("built-in"));
    assert_eq!(n.commit(&enable("json")), Reply::Applied);
    assert!(n.broker.state().meta.plugins.modules.get("json").unwrap().quarantine.is_none());
}

#[test]
fn records_written_before_quarantines_existed_still_load() {
    let old = r#"{"kind":"filter","version":"1","hash":"ab","registered_ms":7,"module":"AAEC"}"#;
    let r: PluginRecord = serde_json::from_str(old).unwrap();
    assert_eq!((&r.module[..], &r.quarantine), (&[0u8, 1, 2][..], &None));
    // And an unquarantined record is written as before.
    assert_eq!(serde_json::to_string(&r).unwrap(), old);
}
