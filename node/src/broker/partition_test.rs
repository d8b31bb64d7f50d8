//! Metadata apart from data: one metadata state and data partitions that each keep their own
//! copy of what they need, brought up to date by placement entries; a metadata change whose
//! placement did not follow (a crash between the two steps) is finished later, once.

use bytes::Bytes;

use crate::broker::effects::Effects;
use crate::broker::group::GroupConfig;
use crate::broker::metadata::Metadata;
use crate::broker::partition::{Partition, Placement, PlacementChange};
use crate::broker::state_test::{create, lid, node, send};
use crate::broker::{AdminCommand, Command, LogPosition, Reply, State};

fn group(name: &str) -> GroupConfig {
    GroupConfig { name: name.into(), fifo: false, max_attempts: 3, priority_factor: 0, lite: None }
}

/// A data partition carried by a group of its own: its own log positions.
struct DataGroup {
    partition: Partition,
    next: u64,
}

impl DataGroup {
    fn new() -> DataGroup {
        let mut partition = Partition::default();
        partition.prepare_local();
        DataGroup { partition, next: 1 }
    }

    fn apply(&mut self, command: Command) -> (Reply, Effects) {
        let mut fx = Effects::default();
        let at = LogPosition { term: 1, leader: 1, index: self.next };
        self.next += 1;
        (self.partition.apply(at, command, &mut fx), fx)
    }

    /// What the partition's leader does after a metadata change: place what it lacks.
    fn place(&mut self, meta: &Metadata) -> Option<Effects> {
        let changes = meta.placement_for(&self.partition);
        if changes.is_empty() {
            return None;
        }
        Some(self.apply(Command::Place(Placement { changes, through: None })).1)
    }

    fn next_offset(&self, topic: &str, queue: u32) -> u64 {
        self.partition.queues.get(&(topic.to_string(), queue)).map_or(0, |r| r.next)
    }
}

fn sent_offsets(reply: &Reply) -> Vec<u64> {
    match reply {
        Reply::Sent(outcomes) => outcomes.iter().map(|o| o.offset).collect(),
        other => panic!("not sent: {other:?}"),
    }
}

#[test]
fn two_data_partitions_follow_one_metadata_through_creation_deletion_and_a_crash_between_steps() {
    let mut meta = Metadata::default();
    let (mut a, mut b) = (DataGroup::new(), DataGroup::new());
    assert_eq!(meta.apply(lid(1), create("T", 2)), Reply::Applied);
    assert_eq!(meta.apply(lid(2), Command::Admin(AdminCommand::CreateGroup(group("G")))), Reply::Applied);
    // Before its placement, a partition knows nothing of the topic.
    assert_eq!(a.apply(send("T", 0, 1, &["early"])).0, Reply::TopicNotFound("T".into()));
    for p in [&mut a, &mut b] {
        assert!(p.place(&meta).is_some());
        assert!(p.place(&meta).is_none(), "placed once, nothing is left to place");
        assert_eq!(p.partition.settings, Some(meta.settings));
        assert!(p.partition.consumption.groups.contains_key("G"));
        assert!(p.partition.topics.contains_key("%DLQ%G"), "the dead-letter topic comes with the group");
    }
    // Each partition numbers its own queues.
    assert_eq!(sent_offsets(&a.apply(send("T", 0, 2, &["a1", "a2"])).0), vec![0, 1]);
    assert_eq!(sent_offsets(&b.apply(send("T", 0, 2, &["b1"])).0), vec![0]);

    // The topic is deleted; partition `a` takes the change, then the leader fails before `b`.
    assert_eq!(meta.apply(lid(3), Command::Admin(AdminCommand::DeleteTopic { name: "T".into() })), Reply::Applied);
    let fx = a.place(&meta).expect("a drop to place");
    assert_eq!(fx.removed_topics, vec!["T".to_string()]);
    assert_eq!(a.next_offset("T", 0), 0);
    assert_eq!(b.next_offset("T", 0), 1, "b has not taken the deletion yet");
    // The next leader finds what is missing from the state alone, and places it once.
    assert_eq!(meta.placement_for(&b.partition), vec![PlacementChange::DropTopic("T".into())]);
    let fx = b.place(&meta).expect("a drop to place");
    assert_eq!(fx.removed_topics, vec!["T".to_string()]);
    assert!(b.place(&meta).is_none());
    // Applying the same placement again changes nothing.
    let before = b.partition.clone();
    let (_, fx) =
        b.apply(Command::Place(Placement { changes: vec![PlacementChange::DropTopic("T".into())], through: None }));
    assert!(fx.removed_topics.is_empty());
    assert_eq!(b.partition, before);
    assert_eq!(b.apply(send("T", 0, 3, &["late"])).0, Reply::TopicNotFound("T".into()));
}

/// A topic deleted and created again while a partition missed both steps is another topic there
/// too: its old messages and progress go, and the new one starts at offset 0.
#[test]
fn a_topic_recreated_while_a_partition_missed_the_deletion_starts_afresh_there() {
    let mut meta = Metadata::default();
    let mut p = DataGroup::new();
    meta.apply(lid(1), create("T", 1));
    p.place(&meta);
    assert_eq!(sent_offsets(&p.apply(send("T", 0, 1, &["old"])).0), vec![0]);
    meta.apply(lid(2), Command::Admin(AdminCommand::DeleteTopic { name: "T".into() }));
    meta.apply(lid(3), create("T", 1));
    let changes = meta.placement_for(&p.partition);
    assert!(matches!(changes[..], [PlacementChange::PlaceTopic { epoch: Some(3), .. }]), "{changes:?}");
    let fx = p.place(&meta).unwrap();
    assert_eq!(fx.removed_topics, vec!["T".to_string()]);
    assert_eq!(sent_offsets(&p.apply(send("T", 0, 2, &["new"])).0), vec![0]);
}

/// Through the broker: a metadata entry whose placement did not follow leaves the partition
/// behind until the placement applies, and a replica replaying the log reaches the same state.
#[test]
fn a_placement_that_did_not_follow_is_proposed_from_the_state_and_replays_alike() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit_only(&create("T", 1));
    assert_eq!(n.commit(&send("T", 0, 1, &["m"])), Reply::TopicNotFound("T".into()));
    assert!(!n.broker.placement().changes.is_empty());
    let placement = n.broker.placement();
    n.commit(&Command::Place(placement));
    assert!(n.broker.placement().changes.is_empty());
    assert!(matches!(n.commit(&send("T", 0, 2, &["m"])), Reply::Sent(_)));
    let live = n.broker.state().digest().unwrap();
    let replayed = n.broker.state_at(n.next_index - 1, None, &crate::broker::state_test::no_membership).unwrap();
    assert_eq!(replayed.digest().unwrap(), live);
    let n = n.restart(dir.path());
    assert_eq!(n.broker.state().digest().unwrap(), live);
}

/// Entries of the previous release (format 2) changed metadata and data in one step: they still
/// do, so a log written then replays to what it was.
#[test]
fn a_metadata_entry_of_the_previous_format_places_in_the_same_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    let mut payload = create("T", 1).encode().to_vec();
    payload[1] = crate::broker::command::envelope::FIRST_MARKED_FORMAT;
    assert_eq!(n.commit_bytes(Bytes::from(payload)).unwrap(), Reply::Applied);
    // Nothing left to place but which group the partition is, which no entry of then named.
    assert_eq!(n.broker.placement().changes, vec![crate::broker::placement::PlacementChange::Holder(1)]);
    assert!(matches!(n.commit(&send("T", 0, 1, &["m"])), Reply::Sent(_)));
}

/// State an earlier release wrote has no partition copy: the first load makes it, from the
/// tables that release kept, so nothing needs placing.
#[test]
fn state_of_an_earlier_release_gets_its_partition_copy_once() {
    let mut old = State::default();
    old.meta.topics.insert("T".into(), crate::broker::TopicConfig::new("T", 2, crate::broker::TopicKind::Normal));
    old.data.consumption.topics.insert("T".into(), 7);
    old.data.consumption.groups.insert("G".into(), group("G"));
    let mut in_flight = crate::broker::pop::PopQueue { position: 300, ..Default::default() };
    in_flight.inflight.insert(
        272,
        crate::broker::pop::Inflight {
            attempt: 1,
            generation: 8,
            invisible_until_ms: 5,
            message_group: String::new(),
            renewed_from: None,
            receive_attempt: None,
        },
    );
    old.data.consumption.queues.insert(("G".into(), "T".into(), 0), in_flight);
    old.last_applied = Some(lid(9));
    // The flat form an earlier release's snapshot has: every table side by side.
    let serde_json::Value::Object(mut nested) = serde_json::to_value(&old).unwrap() else { panic!() };
    let mut flat = serde_json::Map::new();
    for half in ["meta", "data"] {
        let Some(serde_json::Value::Object(fields)) = nested.remove(half) else { panic!() };
        flat.extend(fields.into_iter().filter(|(k, _)| {
            !["topic_epochs", "groups", "group_epochs", "settings", "topics"].contains(&k.as_str()) || half == "meta"
        }));
    }
    nested.remove("format");
    flat.extend(nested);
    for new_only in ["topic_epochs", "groups", "group_epochs"] {
        flat.remove(new_only);
    }
    let mut read: State = serde_json::from_value(serde_json::Value::Object(flat)).unwrap();
    assert_eq!(read.data.settings, None);
    assert_eq!(read.data.consumption.queues, old.data.consumption.queues, "maps with number keys read back");
    assert_eq!(serde_json::from_slice::<State>(&serde_json::to_vec(&old).unwrap()).unwrap(), old);
    read.prepare_local();
    assert!(read.meta.placement_for(&read.data).is_empty());
    assert_eq!(read.meta.topic_epochs.get("T"), Some(&7));
    assert!(read.meta.groups.contains_key("G"));
    let once = read.clone();
    read.prepare_local();
    assert_eq!(read, once);
}

/// A snapshot of a newer form is refused, not read as an empty state.
#[test]
fn a_snapshot_of_a_newer_format_is_refused() {
    let mut json = serde_json::to_value(State::default()).unwrap();
    json["format"] = serde_json::json!(crate::broker::state::SNAPSHOT_FORMAT + 1);
    let e = serde_json::from_value::<State>(json).unwrap_err().to_string();
    assert!(e.contains("upgrade this node"), "{e}");
}

/// A data group's leader that reads a replica of the metadata older than the one its predecessor
/// placed from cannot undo what that one placed: its placement names the older metadata's index
/// and is ignored, on every replica alike and after a restart of one.
#[test]
fn a_placement_worked_out_from_older_metadata_changes_nothing() {
    let topic = crate::broker::topic::TopicConfig::new("T", 1, crate::broker::topic::TopicKind::Normal);
    let mut b = DataGroup::new();
    let newer =
        Placement { changes: vec![PlacementChange::PlaceTopic { config: topic, epoch: Some(9) }], through: Some(9) };
    b.apply(Command::Place(newer));
    assert!(matches!(b.apply(send("T", 0, 1, &["m"])).0, Reply::Sent(_)));
    // Worked out from the metadata at index 5, before T was created: it would drop T.
    let older = Placement { changes: vec![PlacementChange::DropTopic("T".into())], through: Some(5) };
    let (_, fx) = b.apply(Command::Place(older.clone()));
    assert!(fx.removed_topics.is_empty());
    assert!(matches!(b.apply(send("T", 0, 2, &["n"])).0, Reply::Sent(_)), "T is still placed");
    assert_eq!(b.partition.placed_through, Some(9));

    // The index taken is kept by checkpoints: a replica restarted from one ignores it alike.
    let dir = tempfile::tempdir().unwrap();
    let mut n = node(dir.path());
    n.commit(&create("Earlier", 1));
    n.commit(&create("T", 1));
    let through = n.broker.state().data.placed_through;
    assert!(through.is_some(), "the placement that followed the creation named its metadata");
    n.broker.checkpoint().unwrap();
    let mut n = n.restart(dir.path());
    assert_eq!(n.broker.state().data.placed_through, through);
    let before_creation = through.map(|t| t - 1);
    let stale = Placement { changes: vec![PlacementChange::DropTopic("T".into())], through: before_creation };
    n.commit(&Command::Place(stale));
    let sent = n.commit(&send("T", 0, 3, &["o"]));
    assert!(matches!(sent, Reply::Sent(_)), "the restarted replica kept T too: {sent:?}");
}

/// A router whose metadata lags sends a queue to the group that held it before the topic was
/// created again elsewhere: that group refuses it (the router routes again), and stores nothing
/// no consumer of the queue would read.
#[test]
fn a_queue_placed_in_another_data_group_is_refused_and_changes_nothing() {
    use crate::broker::settings::SettingsChange;
    let mut meta = Metadata::default();
    let two = SettingsChange { data_groups: Some(2), ..Default::default() };
    assert_eq!(meta.apply(lid(1), Command::Admin(AdminCommand::Configure(two))), Reply::Applied);
    let (mut g1, mut g2) = (DataGroup::new(), DataGroup::new());
    let place = |g: &mut DataGroup, id: u32, meta: &Metadata| {
        let mut changes = meta.placement_for(&g.partition);
        changes.push(PlacementChange::Holder(id));
        g.apply(Command::Place(Placement { changes, through: None }));
    };
    // Created at index 2: queue 0 goes to group 1 + (2 % 2) = 1.
    assert_eq!(meta.apply(lid(2), create("T", 1)), Reply::Applied);
    assert_eq!(meta.topics.get("T").unwrap().group_of(0), 1);
    place(&mut g1, 1, &meta);
    place(&mut g2, 2, &meta);
    assert!(matches!(g1.apply(send("T", 0, 1, &["first"])).0, Reply::Sent(_)));
    assert_eq!(g2.apply(send("T", 0, 1, &["lost"])).0, Reply::TopicNotFound("T".into()), "queue 0 is group 1's");
    assert_eq!(g2.next_offset("T", 0), 0);

    // Deleted and created again at index 5: queue 0 is group 2's now.
    assert_eq!(meta.apply(lid(3), Command::Admin(AdminCommand::DeleteTopic { name: "T".into() })), Reply::Applied);
    assert_eq!(meta.apply(lid(5), create("T", 1)), Reply::Applied);
    assert_eq!(meta.topics.get("T").unwrap().group_of(0), 2);
    place(&mut g1, 1, &meta);
    place(&mut g2, 2, &meta);
    // A router still on the old placement sends to group 1: refused, nothing stored there.
    let before = g1.partition.clone();
    assert_eq!(g1.apply(send("T", 0, 2, &["late"])).0, Reply::TopicNotFound("T".into()));
    assert_eq!(g1.partition, before);
    // Routed again by the new placement, it is stored where the queue's consumers read.
    assert_eq!(sent_offsets(&g2.apply(send("T", 0, 2, &["late"])).0), vec![0]);
}
