//! Raft messages cross the wire as themselves, and a malformed one is an error, never a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use bytes::Bytes;
use openraft::EntryPayload;
use openraft::entry::RaftEntry;
use openraft::impls::leader_id_adv::LeaderId;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendError, StreamAppendResult,
    TransferLeaderError, TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use proptest::prelude::*;
use prost::Message;
use rockraft_proto::rockraft as pb;

use crate::raft::entry_codec;
use crate::raft::wire::{FromPb, ToPb, append_from_pb, append_to_pb};
use crate::raft::{
    CommandBytes, Entry, LogId, Membership, NodeId, NodeInfo, SnapshotMeta, StoredMembership, TypeConfig, Vote,
};
use crate::store::record::{KIND_MEMBERSHIP, KIND_MEMBERSHIP_PB};
use crate::store::{RecordMeta, StoredRecord};

/// Encodes to bytes and back, as a call does.
fn round_trip<T>(value: &T) -> io::Result<T>
where
    T: ToPb + FromPb<Pb = <T as ToPb>::Pb>,
    <T as ToPb>::Pb: Message + Default,
{
    let bytes = value.to_pb().encode_to_vec();
    T::from_pb(<T as ToPb>::Pb::decode(bytes.as_slice()).map_err(io::Error::other)?)
}

fn leader_id() -> impl Strategy<Value = LeaderId<u64, NodeId>> {
    (any::<u64>(), any::<u64>()).prop_map(|(term, node_id)| LeaderId { term, node_id })
}

fn vote() -> impl Strategy<Value = Vote> {
    (leader_id(), any::<bool>()).prop_map(|(leader_id, committed)| Vote { leader_id, committed })
}

fn log_id() -> impl Strategy<Value = LogId> {
    (leader_id(), any::<u64>()).prop_map(|(l, index)| LogId::new(l, index))
}

fn node_info() -> impl Strategy<Value = NodeInfo> {
    ("[a-z0-9.:]{0,16}", "[a-z0-9.:]{0,16}", "[a-z0-9.:]{0,16}", "[a-z0-9-]{0,8}")
        .prop_map(|(raft_addr, client_addr, admin_addr, rack)| NodeInfo { raft_addr, client_addr, admin_addr, rack })
}

/// One voter set, or two (a joint config), and every voter's node plus some learners.
fn membership() -> impl Strategy<Value = Membership> {
    (
        proptest::collection::vec(proptest::collection::btree_set(0u64..8, 1..4), 1..=2),
        proptest::collection::btree_set(8u64..12, 0..3),
        proptest::collection::vec(node_info(), 12),
    )
        .prop_map(|(configs, learners, infos)| {
            let ids: BTreeSet<u64> = configs.iter().flatten().copied().chain(learners).collect();
            let nodes: BTreeMap<u64, NodeInfo> = ids.into_iter().map(|id| (id, infos[id as usize].clone())).collect();
            Membership::new(configs, nodes).expect("every voter has a node")
        })
}

fn snapshot_meta() -> impl Strategy<Value = SnapshotMeta> {
    (proptest::option::of(log_id()), proptest::option::of(log_id()), membership()).prop_map(
        |(last_log_id, membership_at, m)| SnapshotMeta {
            last_log_id,
            last_membership: StoredMembership::new(membership_at, m),
        },
    )
}

fn entry() -> impl Strategy<Value = Entry> {
    let payload = prop_oneof![
        Just(EntryPayload::Blank),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(|b| EntryPayload::Normal(CommandBytes(Bytes::from(b)))),
        membership().prop_map(EntryPayload::Membership),
    ];
    (log_id(), payload).prop_map(|(id, payload)| Entry::new(id, payload))
}

fn append_response() -> impl Strategy<Value = AppendEntriesResponse<TypeConfig>> {
    prop_oneof![
        Just(AppendEntriesResponse::Success),
        proptest::option::of(log_id()).prop_map(AppendEntriesResponse::PartialSuccess),
        Just(AppendEntriesResponse::Conflict),
        vote().prop_map(AppendEntriesResponse::HigherVote),
    ]
}

fn stream_append_result() -> impl Strategy<Value = StreamAppendResult<TypeConfig>> {
    prop_oneof![
        proptest::option::of(log_id()).prop_map(Ok),
        log_id().prop_map(|id| Err(StreamAppendError::Conflict(id))),
        vote().prop_map(|v| Err(StreamAppendError::HigherVote(v))),
    ]
}

fn transfer_response() -> impl Strategy<Value = TransferLeaderResponse<TypeConfig>> {
    prop_oneof![
        Just(Ok(())),
        (vote(), vote()).prop_map(|(expected, actual)| Err(TransferLeaderError::VoteChanged { expected, actual })),
        (proptest::option::of(log_id()), proptest::option::of(log_id()))
            .prop_map(|(expected, actual)| Err(TransferLeaderError::LogNotFlushed { expected, actual })),
    ]
}

proptest! {
    #[test]
    fn vote_messages_round_trip(v in vote(), last in proptest::option::of(log_id()), transfer: bool, granted: bool) {
        let mut req = VoteRequest::<TypeConfig>::new(v, last);
        req.leadership_transfer = transfer;
        prop_assert_eq!(round_trip(&req).unwrap(), req);
        let resp = VoteResponse::<TypeConfig>::new(v, last, granted);
        prop_assert_eq!(round_trip(&resp).unwrap(), resp);
    }

    #[test]
    fn append_requests_round_trip_with_their_entries(
        v in vote(),
        prev in proptest::option::of(log_id()),
        commit in proptest::option::of(log_id()),
        entries in proptest::collection::vec(entry(), 0..4),
    ) {
        let req = AppendEntriesRequest::<TypeConfig> { vote: v, prev_log_id: prev, entries: entries.clone(), leader_commit: commit };
        let bytes = append_to_pb(req).unwrap().encode_to_vec();
        let back = append_from_pb(pb::AppendEntriesRequest::decode(bytes.as_slice()).unwrap()).unwrap();
        prop_assert_eq!(back.vote, v);
        prop_assert_eq!(back.prev_log_id, prev);
        prop_assert_eq!(back.leader_commit, commit);
        prop_assert_eq!(back.entries, entries);
    }

    #[test]
    fn append_responses_round_trip(resp in append_response(), streamed in stream_append_result()) {
        prop_assert_eq!(round_trip(&resp).unwrap(), resp);
        prop_assert_eq!(round_trip(&streamed).unwrap(), streamed);
    }

    #[test]
    fn snapshot_messages_round_trip(v in vote(), meta in snapshot_meta()) {
        let header = (v, meta);
        prop_assert_eq!(round_trip(&header).unwrap(), header);
        let resp = SnapshotResponse::<TypeConfig>::new(v);
        prop_assert_eq!(round_trip(&resp).unwrap(), resp);
    }

    #[test]
    fn transfer_leader_messages_round_trip(
        v in vote(),
        to: u64,
        last in proptest::option::of(log_id()),
        resp in transfer_response(),
    ) {
        let req = TransferLeaderRequest::<TypeConfig>::new(v, to, last);
        prop_assert_eq!(round_trip(&req).unwrap(), req);
        prop_assert_eq!(round_trip(&resp).unwrap(), resp);
    }

    #[test]
    fn membership_entries_are_stored_as_protobuf_and_read_back(e in entry()) {
        let (meta, payload) = entry_codec::encode(&e).unwrap();
        if let EntryPayload::Membership(m) = &e.payload {
            prop_assert_eq!(meta.kind, KIND_MEMBERSHIP_PB);
            // The snapshot replay records what the state machine does when it applies the entry.
            prop_assert_eq!(entry_codec::membership_json(meta.kind, payload.clone()).unwrap(), serde_json::to_string(m).unwrap());
        }
        prop_assert_eq!(entry_codec::decode(StoredRecord { meta, payload }).unwrap(), e);
    }

    /// Whatever bytes arrive, decoding answers (a value or an error) and never panics.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(m) = pb::VoteRequest::decode(bytes.as_slice()) {
            let _ = VoteRequest::<TypeConfig>::from_pb(m);
        }
        if let Ok(m) = pb::AppendEntriesRequest::decode(bytes.as_slice()) {
            let _ = append_from_pb(m);
        }
        if let Ok(m) = pb::StreamAppendResponse::decode(bytes.as_slice()) {
            let _ = StreamAppendResult::<TypeConfig>::from_pb(m);
        }
        if let Ok(m) = pb::SnapshotHeader::decode(bytes.as_slice()) {
            let _ = <(Vote, SnapshotMeta)>::from_pb(m);
        }
        if let Ok(m) = pb::RaftTransferLeaderResponse::decode(bytes.as_slice()) {
            let _ = TransferLeaderResponse::<TypeConfig>::from_pb(m);
        }
        let meta = RecordMeta { term: 1, index: 1, leader: 1, kind: KIND_MEMBERSHIP_PB };
        let _ = entry_codec::decode(StoredRecord { meta, payload: Bytes::from(bytes) });
    }
}

fn invalid_data<T: std::fmt::Debug>(r: io::Result<T>) -> bool {
    matches!(r, Err(e) if e.kind() == io::ErrorKind::InvalidData)
}

#[test]
fn incomplete_messages_are_invalid_data() {
    let no_vote = pb::VoteRequest { vote: None, last_log_id: None, leadership_transfer: false };
    assert!(invalid_data(VoteRequest::<TypeConfig>::from_pb(no_vote)));
    let no_leader = pb::VoteRequest {
        vote: Some(pb::Vote { leader_id: None, committed: true }),
        last_log_id: None,
        leadership_transfer: false,
    };
    assert!(invalid_data(VoteRequest::<TypeConfig>::from_pb(no_leader)));
    assert!(invalid_data(AppendEntriesResponse::<TypeConfig>::from_pb(pb::AppendEntriesResponse { result: None })));
    let headless = pb::AppendEntriesRequest { entries: vec![], vote: None, prev_log_id: None, leader_commit: None };
    assert!(invalid_data(append_from_pb(headless)));
    let voter_without_node = pb::Membership { configs: vec![pb::Voters { ids: vec![1, 2] }], nodes: vec![] };
    assert!(invalid_data(Membership::from_pb(voter_without_node)));
    let twice = pb::MemberNode { id: 1, ..Default::default() };
    let named_twice = pb::Membership { configs: vec![pb::Voters { ids: vec![1] }], nodes: vec![twice.clone(), twice] };
    assert!(invalid_data(Membership::from_pb(named_twice)));
    let wide_kind = pb::RaftEntry { term: 1, leader: 1, index: 1, kind: 300, payload: Bytes::new() };
    let wide = pb::AppendEntriesRequest {
        entries: vec![wide_kind],
        vote: Some(Vote { leader_id: LeaderId { term: 1, node_id: 1 }, committed: true }.to_pb()),
        prev_log_id: None,
        leader_commit: None,
    };
    assert!(invalid_data(append_from_pb(wide)));
}

#[test]
fn a_record_of_an_unknown_kind_or_with_a_garbled_membership_is_invalid_data() {
    let record = |kind, payload: &'static [u8]| StoredRecord {
        meta: RecordMeta { term: 1, index: 9, leader: 1, kind },
        payload: Bytes::from_static(payload),
    };
    assert!(invalid_data(entry_codec::decode(record(200, b""))));
    assert!(invalid_data(entry_codec::decode(record(KIND_MEMBERSHIP_PB, b"\xff\xff\xff"))));
    assert!(invalid_data(entry_codec::decode(record(KIND_MEMBERSHIP, b"{not json"))));
}

/// A data directory of an earlier release holds JSON membership records: they still read.
#[test]
fn membership_records_of_earlier_releases_still_read() {
    let node = |raft: &str| NodeInfo { raft_addr: raft.into(), client_addr: "c:1".into(), ..Default::default() };
    let m =
        Membership::new(vec![BTreeSet::from([1, 2])], BTreeMap::from([(1, node("a:1")), (2, node("b:1"))])).unwrap();
    // As earlier releases wrote it: no admin address yet.
    let json = r#"{"configs":[[1,2]],"nodes":{"1":{"raft_addr":"a:1","client_addr":"c:1"},"2":{"raft_addr":"b:1","client_addr":"c:1"}}}"#;
    let meta = RecordMeta { term: 2, index: 5, leader: 1, kind: KIND_MEMBERSHIP };
    let entry = entry_codec::decode(StoredRecord { meta, payload: Bytes::from_static(json.as_bytes()) }).unwrap();
    assert_eq!(entry.payload, EntryPayload::Membership(m));
}
