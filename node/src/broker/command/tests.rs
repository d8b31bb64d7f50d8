use bytes::Bytes;
use proptest::prelude::*;
use prost::Message;
use rockraft_proto::rockraft::log as pb;
use rockraft_proto::rockraft::{DeadLetter, SendBatch};

use super::envelope::{FORMAT, Kind, MARKER};
use super::*;
use crate::broker::access::{Action, Decision, HandleKey, Resource, ResourceKind, Rule, Secret};
use crate::broker::failover::Failover;
use crate::broker::group::GroupConfig;
use crate::broker::lite::{LiteActor, LiteBinding, LiteModel, LitePop, LiteRedelivery, LiteTake, SyncAction};
use crate::broker::partition::PlacementChange;
use crate::broker::plugins::{Binding, PluginKind, Quarantine};
use crate::broker::pop::{ChannelId, Pop, QueueTake, Receipt, Redelivery};
use crate::broker::settings::{ClusterSettings, SettingsChange};
use crate::broker::topic::TopicKind;
use crate::broker::transaction::Resolver;

fn batch() -> SendBatch {
    SendBatch {
        topic: "T".into(),
        queue_id: 3,
        store_timestamp_ms: 1_700_000_000_000,
        clock_ms: 1_700_000_000_001,
        messages: vec![Bytes::from_static(b"one"), Bytes::from_static(b"two")],
        queue_ids: vec![3, 1],
    }
}

fn receipt(offset: u64) -> Receipt {
    Receipt { group: "G".into(), topic: "T".into(), channel: ChannelId::Queue(2), offset, generation: 40 + offset }
}

fn lite_receipt(offset: u64) -> Receipt {
    Receipt { group: "LG".into(), topic: "P".into(), channel: ChannelId::Lite(7), offset, generation: 9 }
}

/// Every variant of every family, with each field set to something other than its default.
fn samples() -> Vec<Command> {
    let failover = Failover {
        term: 4,
        leader: 2,
        previous: Some(1),
        last_heard_ms: Some(-5),
        election_started_ms: 10,
        elected_ms: 11,
        first_commit_ms: 12,
        routes_converged_ms: 13,
        not_following: vec![3],
    };
    let group = GroupConfig { name: "G".into(), fifo: true, max_attempts: 16, priority_factor: 55, lite: None };
    let placed_group = group.clone();
    let lite_group = GroupConfig {
        name: "LG".into(),
        fifo: false,
        max_attempts: 3,
        priority_factor: 100,
        lite: Some(LiteBinding { topic: "P".into(), model: LiteModel::Exclusive, quota: 30 }),
    };
    let pop = Pop {
        group: "G".into(),
        topic: "T".into(),
        topic_epoch: 6,
        now_ms: 1_000,
        invisible_ms: 30_000,
        takes: vec![QueueTake {
            queue_id: 1,
            from: 4,
            to: 9,
            deliver: vec![(4, "a".into()), (2, String::new())],
            hold: vec![(5, "a".into())],
        }],
        redeliveries: vec![Redelivery { queue_id: 0, offset: 1, generation: 2 }],
        receives: vec![(Some("attempt".into()), 2), (None, 1)],
    };
    let resource = Resource { kind: ResourceKind::Group, name: "orders".into(), prefix: true };
    let lite_pop = LitePop {
        group: "LG".into(),
        parent: "P".into(),
        client: "c1".into(),
        by: LiteActor::User("alice".into()),
        now_ms: 3,
        invisible_ms: 4,
        takes: vec![LiteTake { lite: "l1".into(), id: 7, from: 1, to: 4, deliver: vec![1, 3] }],
        redeliveries: vec![LiteRedelivery { lite: "l2".into(), id: 7, offset: 2, generation: 9 }],
    };
    vec![
        Command::Send(batch()),
        Command::DeadLetter(DeadLetter {
            group: "G".into(),
            topic: "T".into(),
            queue_id: 1,
            offset: 2,
            generation: 3,
            batch: Some(batch()),
            lite_id: Some(8),
        }),
        Command::Admin(AdminCommand::CreateTopic(TopicConfig::new("T", 4, TopicKind::Fifo))),
        Command::Admin(AdminCommand::CreateTopic(TopicConfig::new("P", 1, TopicKind::Lite))),
        Command::Admin(AdminCommand::DeleteTopic { name: "T".into() }),
        Command::Admin(AdminCommand::ReleaseHolds { below: 77 }),
        Command::Admin(AdminCommand::Configure(SettingsChange {
            dedupe_window_secs: Some(60),
            max_module_bytes: None,
            data_groups: Some(3),
            balance_leaders: Some(false),
        })),
        Command::Admin(AdminCommand::RecordFailover(failover)),
        Command::Admin(AdminCommand::RecordRepair(crate::broker::repair::Repair {
            node: 2,
            group: 3,
            part: crate::broker::repair::RepairedPart::Snapshot,
            first: 40,
            last: 40,
            source: Some(1),
            place: "snapshot.json".into(),
            began_ms: 5,
            done_ms: 9,
        })),
        Command::Admin(AdminCommand::CreateGroup(group)),
        Command::Admin(AdminCommand::CreateGroup(lite_group)),
        Command::Admin(AdminCommand::DeleteGroup { name: "G".into() }),
        Command::Place(Placement {
            changes: vec![
                PlacementChange::Settings(ClusterSettings {
                    dedupe_window_secs: 60,
                    max_module_bytes: 5,
                    data_groups: 3,
                    balance_leaders: false,
                }),
                PlacementChange::PlaceTopic { config: TopicConfig::new("T", 4, TopicKind::Fifo), epoch: Some(9) },
                PlacementChange::PlaceTopic { config: TopicConfig::new("%DLQ%G", 1, TopicKind::Normal), epoch: None },
                PlacementChange::DropTopic("U".into()),
                PlacementChange::PlaceGroup { config: placed_group, epoch: 12 },
                PlacementChange::DropGroup("H".into()),
            ],
            through: Some(41),
        }),
        Command::Consume(ConsumeCommand::Pop(pop)),
        Command::Consume(ConsumeCommand::Ack(receipt(1))),
        Command::Consume(ConsumeCommand::Acks { receipts: vec![receipt(1), receipt(2)] }),
        Command::Consume(ConsumeCommand::ChangeInvisible { receipt: receipt(3), now_ms: 5, invisible_ms: 6 }),
        Command::Consume(ConsumeCommand::Renew { receipt: receipt(4), now_ms: 5, invisible_ms: 7 }),
        Command::Consume(ConsumeCommand::RenewMany { renewals: vec![(receipt(5), 8), (receipt(6), 9)], now_ms: 10 }),
        Command::Consume(ConsumeCommand::ResetOffset {
            group: "G".into(),
            topic: "T".into(),
            topic_epoch: 2,
            positions: vec![(0, 10), (3, 0)],
        }),
        Command::Timer(TimerCommand::Fire { now_ms: 1, timers: vec![(5, 6), (-1, 7)] }),
        Command::Timer(TimerCommand::Recall { now_ms: 2, topic: "D".into(), timer: (9, 10) }),
        Command::Transaction(TransactionCommand::Resolve {
            now_ms: 3,
            topic: "X".into(),
            position: 11,
            message_id: "m".into(),
            commit: true,
            by: Resolver::ProducerCheck,
        }),
        Command::Transaction(TransactionCommand::Checked {
            now_ms: 4,
            halves: vec![(1, 2, 3), (4, 0, -6)],
            asked: true,
        }),
        Command::Plugin(PluginCommand::Register {
            name: "f".into(),
            kind: PluginKind::TxChecker,
            version: "1.2".into(),
            now_ms: 5,
            module: vec![0, 97, 115, 109],
        }),
        Command::Plugin(PluginCommand::Remove { name: "f".into() }),
        Command::Plugin(PluginCommand::BindGroup {
            group: "G".into(),
            binding: Some(Binding { plugin: "f".into(), config: "{\"k\":1}".into() }),
        }),
        Command::Plugin(PluginCommand::BindGroup { group: "G".into(), binding: None }),
        Command::Plugin(PluginCommand::BindTopic {
            topic: "X".into(),
            binding: Some(Binding { plugin: "c".into(), config: String::new() }),
        }),
        Command::Plugin(PluginCommand::Quarantine {
            name: "f".into(),
            hash: "abc".into(),
            quarantine: Quarantine { failures: 5, window_secs: 60, since_ms: 7 },
        }),
        Command::Plugin(PluginCommand::Enable { name: "f".into() }),
        Command::Access(AccessCommand::PutUser {
            access_key: "alice".into(),
            secret: Secret::new("s3cret-pass"),
            admin: true,
            create: true,
        }),
        Command::Access(AccessCommand::DeleteUser { access_key: "alice".into() }),
        Command::Access(AccessCommand::Grant {
            access_key: "alice".into(),
            resource: resource.clone(),
            rule: Rule { actions: vec![Action::Pub, Action::Sub], decision: Decision::Deny },
        }),
        Command::Access(AccessCommand::Revoke { access_key: "alice".into(), resource }),
        Command::Access(AccessCommand::RotateHandleKey { key: HandleKey::new("ab".repeat(32)) }),
        Command::Lite(LiteCommand::Sync {
            group: "LG".into(),
            parent: "P".into(),
            client: "c1".into(),
            action: SyncAction::Replace,
            lites: vec!["l1".into(), "l2".into()],
            now_ms: 5,
            by: LiteActor::Admin("root".into()),
        }),
        Command::Lite(LiteCommand::Pop(lite_pop)),
        Command::Consume(ConsumeCommand::Acks { receipts: vec![lite_receipt(1), receipt(2)] }),
        Command::Consume(ConsumeCommand::ChangeInvisible { receipt: lite_receipt(3), now_ms: 1, invisible_ms: 2 }),
        Command::Consume(ConsumeCommand::RenewMany { renewals: vec![(lite_receipt(4), 5)], now_ms: 6 }),
        Command::Lite(LiteCommand::Expire { parent: "P".into(), before_ms: 9, lites: vec![("l1".into(), 7)] }),
        Command::Lite(LiteCommand::Unsubscribe { group: "LG".into(), client: "c1".into(), by: LiteActor::Open }),
    ]
}

#[test]
fn every_command_round_trips_in_the_format_this_release_writes() {
    for command in samples() {
        let payload = command.encode();
        assert_eq!(&payload[..2], &[MARKER, FORMAT], "{command:?}");
        assert_eq!(Command::decode(payload.clone()).as_ref(), Ok(&command));
        assert_eq!(Command::footprint_of(&payload), command.footprint(), "{command:?}");
        assert_eq!(
            Command::carries_time(&payload),
            !matches!(command, Command::Admin(_) | Command::Access(_) | Command::Place(_))
        );
    }
}

/// Entries written by the previous release (a tag byte, then JSON or protobuf) still apply.
#[test]
fn every_command_of_the_previous_format_still_decodes() {
    for command in samples() {
        let mut payload = vec![command.encode()[2]];
        match &command {
            Command::Send(b) => b.encode(&mut payload).unwrap(),
            Command::DeadLetter(d) => d.encode(&mut payload).unwrap(),
            Command::Admin(c) => serde_json::to_writer(&mut payload, c).unwrap(),
            Command::Consume(c) => serde_json::to_writer(&mut payload, c).unwrap(),
            Command::Timer(c) => serde_json::to_writer(&mut payload, c).unwrap(),
            Command::Transaction(c) => serde_json::to_writer(&mut payload, c).unwrap(),
            Command::Plugin(c) => serde_json::to_writer(&mut payload, c).unwrap(),
            Command::Access(c) => serde_json::to_writer(&mut payload, c).unwrap(),
            Command::Lite(c) => serde_json::to_writer(&mut payload, c).unwrap(),
            // Placement came with format 3: format 1 has no such tag.
            Command::Place(_) => {
                assert_eq!(Command::decode(payload.into()), Err(DecodeError::NotACommand(10)));
                continue;
            }
        }
        let payload = Bytes::from(payload);
        assert_eq!(Command::decode(payload.clone()).as_ref(), Ok(&command));
        assert_eq!(Command::footprint_of(&payload), command.footprint(), "{command:?}");
        // A member not upgraded yet forwards such a command: the leader writes it anew.
        let restamped = Command::restamp(payload, |c| c.set_time(42));
        assert_eq!(&restamped[..2], &[MARKER, FORMAT], "{command:?}");
    }
}

/// A send is stamped without decoding the messages' bodies, and its messages stay slices of the
/// payload (what a ConsumeQueue record points at).
#[test]
fn a_send_is_read_from_its_header_and_its_messages_are_not_copied() {
    let payload = Command::Send(batch()).encode();
    let sent = Command::decode_send(&payload).unwrap();
    assert_eq!(sent, batch());
    let inside = payload.as_ptr_range();
    assert!(sent.messages.iter().all(|m| inside.contains(&m.as_ptr())));
    assert!(Command::decode_send(&Command::Timer(TimerCommand::Fire { now_ms: 1, timers: vec![] }).encode()).is_none());
    assert_eq!(Command::send_len(&batch()), payload.len());
    let restamped = Command::decode_send(&Command::restamp(payload, |c| c.set_time(5))).unwrap();
    assert_eq!((restamped.store_timestamp_ms, restamped.clock_ms), (5, 5));
    // A command without a time comes back as it was.
    let admin = Command::Admin(AdminCommand::DeleteTopic { name: "T".into() }).encode();
    assert_eq!(Command::restamp(admin.clone(), |_| unreachable!()), admin);
}

/// The free-space alarm's classes: messages are refused first, consumption next, and what
/// frees space never.
#[test]
fn footprints_sort_commands_by_what_they_do_to_the_disk() {
    let send = Command::Send(SendBatch { topic: "T".into(), ..Default::default() });
    let ack = Command::Consume(ConsumeCommand::Acks { receipts: vec![] });
    let create = Command::Admin(AdminCommand::CreateTopic(TopicConfig::new("T", 4, TopicKind::Normal)));
    let delete = Command::Admin(AdminCommand::DeleteTopic { name: "T".into() });
    let drop_group = Command::Admin(AdminCommand::DeleteGroup { name: "G".into() });
    let fire = Command::Timer(TimerCommand::Fire { now_ms: 1, timers: vec![] });
    let register = Command::Plugin(PluginCommand::Register {
        name: "f".into(),
        kind: PluginKind::Filter,
        version: "1".into(),
        now_ms: 0,
        module: vec![1],
    });
    for (command, footprint) in [
        (&send, Footprint::Stores),
        (&register, Footprint::Stores),
        (&ack, Footprint::Records),
        (&create, Footprint::Records),
        (&fire, Footprint::Records),
        (&delete, Footprint::Relieves),
        (&drop_group, Footprint::Relieves),
    ] {
        assert_eq!(command.footprint(), footprint, "{command:?}");
        assert_eq!(Command::footprint_of(&command.encode()), footprint, "{command:?} encoded");
    }
    assert_eq!(Command::footprint_of(&Bytes::from_static(b"\x02{")), Footprint::Records);
    assert_eq!(Command::footprint_of(&Bytes::from_static(b"R\x0a\x02")), Footprint::Records);
}

/// Earlier releases acked, changed and dropped a lite delivery with lite commands, whose receipts
/// named no parent topic: their entries read as the consumption command or dead letter that does
/// the same now, and apply does (`lite_test`).
#[test]
fn lite_settling_entries_of_earlier_formats_read_as_what_does_the_same_now() {
    let old = |group: &str, offset: u64| Receipt {
        group: group.into(),
        topic: String::new(),
        channel: ChannelId::Lite(7),
        offset,
        generation: 9,
    };
    let format_1 = |json: &str| {
        let mut payload = vec![Kind::Lite as u8];
        payload.extend_from_slice(json.as_bytes());
        Command::decode(Bytes::from(payload))
    };
    let receipt = r#"{"group":"LG","id":7,"offset":1,"generation":9}"#;
    assert_eq!(
        format_1(&format!(r#"{{"op":"ack","receipts":[{receipt}]}}"#)),
        Ok(Command::Consume(ConsumeCommand::Acks { receipts: vec![old("LG", 1)] }))
    );
    assert_eq!(
        format_1(&format!(r#"{{"op":"change_invisible","receipt":{receipt},"now_ms":3,"invisible_ms":4}}"#)),
        Ok(Command::Consume(ConsumeCommand::ChangeInvisible { receipt: old("LG", 1), now_ms: 3, invisible_ms: 4 }))
    );
    let dropped = DeadLetter { group: "LG".into(), offset: 1, generation: 9, lite_id: Some(7), ..Default::default() };
    assert_eq!(format_1(&format!(r#"{{"op":"drop","receipt":{receipt}}}"#)), Ok(Command::DeadLetter(dropped)));
    let pop = format_1(&format!(
        r#"{{"op":"pop","group":"LG","parent":"P","now_ms":1,"invisible_ms":2,"takes":[],"redeliveries":[["l1",{receipt}]]}}"#
    ));
    let Ok(Command::Lite(LiteCommand::Pop(pop))) = pop else { panic!("a lite pop: {pop:?}") };
    assert_eq!(pop.redeliveries, vec![LiteRedelivery { lite: "l1".into(), id: 7, offset: 1, generation: 9 }]);

    // Formats 2 and 3: the lite command's protobuf.
    let acks = pb::LiteCommand {
        op: Some(pb::lite_command::Op::Ack(pb::LiteAcks {
            receipts: vec![pb::LiteReceipt { group: "LG".into(), id: 7, offset: 2, generation: 9 }],
        })),
    };
    for format in [2, 3] {
        let decoded = Command::decode(framed_raw(format, Kind::Lite as u8, &acks.encode_to_vec()));
        assert_eq!(decoded, Ok(Command::Consume(ConsumeCommand::Acks { receipts: vec![old("LG", 2)] })));
    }
    // This release writes none of them: a lite receipt is a receipt.
    let written = Command::Consume(ConsumeCommand::Ack(lite_receipt(1))).encode();
    assert_eq!(&written[..3], &[MARKER, FORMAT, Kind::Consume as u8]);
    const { assert!(FORMAT >= 4, "a release that reads a lite receipt as a queue's must refuse these") };
}

/// Earlier releases created and deleted groups with consumption commands: those entries read as
/// the admin commands that do the same now.
#[test]
fn group_changes_of_earlier_formats_read_as_admin_commands() {
    let group = GroupConfig { name: "G".into(), fifo: true, max_attempts: 16, priority_factor: 55, lite: None };
    let created = Ok(Command::Admin(AdminCommand::CreateGroup(group.clone())));
    let deleted = Ok(Command::Admin(AdminCommand::DeleteGroup { name: "G".into() }));
    let format_1 = |json: &str| {
        let mut payload = vec![Kind::Consume as u8];
        payload.extend_from_slice(json.as_bytes());
        Command::decode(Bytes::from(payload))
    };
    let json = r#"{"op":"create_group","name":"G","fifo":true,"max_attempts":16,"priority_factor":55}"#;
    assert_eq!(format_1(json), created);
    assert_eq!(format_1(r#"{"op":"delete_group","name":"G"}"#), deleted);
    let create = pb::ConsumeCommand { op: Some(pb::consume_command::Op::CreateGroup(consume::group_to_proto(&group))) };
    let delete =
        pb::ConsumeCommand { op: Some(pb::consume_command::Op::DeleteGroup(pb::DeleteGroup { name: "G".into() })) };
    for format in [2, 3] {
        assert_eq!(Command::decode(framed_raw(format, Kind::Consume as u8, &create.encode_to_vec())), created);
        assert_eq!(Command::decode(framed_raw(format, Kind::Consume as u8, &delete.encode_to_vec())), deleted);
    }
    let written = Command::Admin(AdminCommand::CreateGroup(group)).encode();
    assert_eq!(&written[..3], &[MARKER, FORMAT, Kind::Admin as u8]);
}

fn framed_raw(format: u8, kind: u8, body: &[u8]) -> Bytes {
    let mut payload = vec![MARKER, format, kind];
    payload.extend_from_slice(body);
    Bytes::from(payload)
}

#[test]
fn what_a_newer_release_may_write_is_told_from_garbage() {
    let unknown = |payload: Bytes| Command::decode(payload).map(|_| ()).map_err(|e| e.is_unknown());
    assert_eq!(unknown(framed_raw(FORMAT + 1, Kind::Send as u8, b"")), Err(true));
    assert_eq!(unknown(framed_raw(FORMAT, 11, b"")), Err(true));
    // A family message whose variant this release does not know (field 99).
    let newer_variant = pb::AdminCommand::default().encode_to_vec();
    assert_eq!(unknown(framed_raw(FORMAT, Kind::Admin as u8, &newer_variant)), Err(true));
    let mut newer_variant = newer_variant;
    prost::encoding::string::encode(99, &"x".to_string(), &mut newer_variant);
    assert_eq!(unknown(framed_raw(FORMAT, Kind::Admin as u8, &newer_variant)), Err(true));
    // A topic kind this release does not know.
    let topic = pb::AdminCommand {
        op: Some(pb::admin_command::Op::CreateTopic(pb::TopicConfig {
            name: "T".into(),
            queues: 1,
            kind: 40,
            lite_ttl_minutes: 0,
            groups: vec![],
        })),
    };
    let e = Command::decode(framed_raw(FORMAT, Kind::Admin as u8, &topic.encode_to_vec())).unwrap_err();
    assert_eq!(e, DecodeError::UnknownValue { field: "topic kind", value: 40 });
    // Unset fields and enumerations, and bytes that are no protobuf, are garbage.
    let unset = pb::TimerCommand { op: Some(pb::timer_command::Op::Recall(pb::Recall::default())) };
    let e = Command::decode(framed_raw(FORMAT, Kind::Timer as u8, &unset.encode_to_vec())).unwrap_err();
    assert_eq!(e, DecodeError::Missing("timer"));
    let unset = pb::AdminCommand { op: Some(pb::admin_command::Op::CreateTopic(pb::TopicConfig::default())) };
    assert_eq!(unknown(framed_raw(FORMAT, Kind::Admin as u8, &unset.encode_to_vec())), Err(false));
    assert_eq!(unknown(framed_raw(FORMAT, Kind::Consume as u8, b"\xff\xff\xff")), Err(false));
    for bad in [&b""[..], b"\x09", b"\x01\xff\xff\xff", b"\x02{", b"R", b"R\x02", b"\x00", b"{}"] {
        assert_eq!(unknown(Bytes::copy_from_slice(bad)), Err(false), "{bad:?}");
    }
}

#[test]
fn a_refusal_names_the_format_this_release_reads() {
    let e = Command::decode(framed_raw(11, 1, b"")).unwrap_err();
    assert_eq!(e.to_string(), "is of format 11; this release reads formats 1 to 10");
}

#[test]
fn a_pull_consumers_commit_reads_back_as_written() {
    let commit = Command::Consume(crate::broker::pop::ConsumeCommand::CommitOffset {
        group: "g".into(),
        topic: "t".into(),
        topic_epoch: 7,
        queue_id: 3,
        offset: 42,
    });
    assert_eq!(Command::decode(commit.encode()).unwrap(), commit);
}

proptest! {
    #[test]
    fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), kind in 0u8..12) {
        let _ = Command::decode(Bytes::from(bytes.clone()));
        let framed = framed_raw(FORMAT, kind, &bytes);
        let _ = Command::decode(framed.clone());
        let _ = Command::footprint_of(&framed);
        let _ = Command::decode_send(&framed);
        let _ = Command::restamp(framed, |c| c.set_time(1));
    }

    #[test]
    fn consumption_round_trips(
        group in "[a-zA-Z0-9_%-]{0,16}",
        topic in "\\PC{0,16}",
        queue_id in any::<u32>(),
        offsets in proptest::collection::vec(any::<u64>(), 0..8),
        now_ms in any::<i64>(),
        invisible_ms in any::<i64>(),
        attempt in proptest::option::of("\\PC{0,8}"),
    ) {
        let receipts: Vec<Receipt> = offsets
            .iter()
            .map(|&offset| Receipt {
                group: group.clone(),
                topic: topic.clone(),
                channel: if offset % 2 == 0 { ChannelId::Queue(queue_id) } else { ChannelId::Lite(offset) },
                offset,
                generation: offset ^ 5,
            })
            .collect();
        let pop = Pop {
            group: group.clone(),
            topic: topic.clone(),
            topic_epoch: queue_id.into(),
            now_ms,
            invisible_ms,
            takes: vec![QueueTake {
                queue_id,
                from: offsets.first().copied().unwrap_or_default(),
                to: offsets.last().copied().unwrap_or_default(),
                deliver: offsets.iter().map(|&o| (o, group.clone())).collect(),
                hold: offsets.iter().map(|&o| (o, topic.clone())).collect(),
            }],
            redeliveries: offsets.iter().map(|&offset| Redelivery { queue_id, offset, generation: offset }).collect(),
            receives: vec![(attempt, queue_id)],
        };
        for command in [
            Command::Consume(ConsumeCommand::Pop(pop)),
            Command::Consume(ConsumeCommand::Acks { receipts: receipts.clone() }),
            Command::Consume(ConsumeCommand::RenewMany { renewals: receipts.into_iter().map(|r| (r, invisible_ms)).collect(), now_ms }),
        ] {
            prop_assert_eq!(Command::decode(command.encode()), Ok(command));
        }
    }

    #[test]
    fn sends_round_trip(
        topic in "\\PC{0,16}",
        queue_id in any::<u32>(),
        store in any::<i64>(),
        clock in any::<i64>(),
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
        queue_ids in proptest::collection::vec(any::<u32>(), 0..8),
    ) {
        let batch = SendBatch {
            topic,
            queue_id,
            store_timestamp_ms: store,
            clock_ms: clock,
            messages: messages.into_iter().map(Bytes::from).collect(),
            queue_ids,
        };
        let payload = Command::Send(batch.clone()).encode();
        prop_assert_eq!(Command::decode_send(&payload), Some(batch.clone()));
        prop_assert_eq!(Command::decode(payload), Ok(Command::Send(batch)));
    }
}

/// Settings written before format 5 name no number of data groups: a change leaves it as it is,
/// and a placed copy of the settings is of one data group.
#[test]
fn settings_of_format_4_name_no_data_groups() {
    use rockraft_proto::rockraft::log as pb;
    let configure = pb::AdminCommand {
        op: Some(pb::admin_command::Op::Configure(pb::SettingsChange {
            dedupe_window_secs: Some(60),
            ..Default::default()
        })),
    };
    let decoded = Command::decode(framed_raw(4, Kind::Admin as u8, &configure.encode_to_vec()));
    let change = SettingsChange { dedupe_window_secs: Some(60), ..Default::default() };
    assert_eq!(decoded, Ok(Command::Admin(AdminCommand::Configure(change))));
    let placed = pb::Placement {
        changes: vec![pb::PlacementChange {
            change: Some(pb::placement_change::Change::Settings(pb::SettingsChange {
                dedupe_window_secs: Some(60),
                max_module_bytes: Some(5),
                ..Default::default()
            })),
        }],
        through: None,
    };
    let decoded = Command::decode(framed_raw(4, Kind::Placement as u8, &placed.encode_to_vec()));
    // Absent before format 5 and 7: one data group, leaders balanced.
    let settings =
        ClusterSettings { dedupe_window_secs: 60, max_module_bytes: 5, data_groups: 1, balance_leaders: true };
    assert_eq!(
        decoded,
        Ok(Command::Place(Placement { changes: vec![PlacementChange::Settings(settings)], through: None }))
    );
    // Written in format 5 or later: a release of format 4 would drop the number unread.
    let written =
        Command::Admin(AdminCommand::Configure(SettingsChange { data_groups: Some(3), ..Default::default() }));
    assert_eq!(&written.encode()[..2], &[MARKER, FORMAT]);
    const { assert!(FORMAT >= 5) };
    // Format 7 on: a release of format 6 would drop whether leaders are balanced unread.
    let written =
        Command::Admin(AdminCommand::Configure(SettingsChange { balance_leaders: Some(false), ..Default::default() }));
    assert_eq!(&written.encode()[..2], &[MARKER, FORMAT]);
    const { assert!(FORMAT >= 7) };
}
