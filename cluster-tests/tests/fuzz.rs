//! Arbitrary bytes and arbitrary field values against every RPC of the three planes of a live
//! cluster with authentication on: every `MessagingService` RPC (unsigned, signed by a user
//! without rules, signed by an admin), the admin API (unsigned and as an admin) and the peer API
//! (without and with the cluster secret). Requests are valid encodings with random bytes
//! changed, cut short, or random bytes outright, so both undecodable input and decodable input
//! with arbitrary field values arrive.
//!
//! Checked after every request: no node died (each still answers), the answer is a gRPC status
//! or a RocketMQ status from the set the official clients know, refused callers get exactly the
//! refusal, and refused calls changed nothing (every node's state digest is what it was).
//! `ROCKRAFT_FUZZ_CASES=N` runs N cases per phase (default 48).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use prost::Message as _;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options};
use rockraft_proto::rocketmq as mq;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// Sends and receives message bodies as they are: arbitrary bytes go out untouched.
#[derive(Clone, Default)]
struct Raw;

impl Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

/// Every `MessagingService` answer has its status in field 1 (a receive's first frame too).
#[derive(Clone, PartialEq, prost::Message)]
struct StatusOnly {
    #[prost(message, optional, tag = "1")]
    status: Option<mq::Status>,
}

/// The codes the official clients know (the Rust client panics on others: PROTOCOL.md).
fn known_code(code: i32) -> bool {
    let unknown = [40019, 40020, 40021, 40404, 41302, 42901, 42902];
    mq::Code::try_from(code).is_ok() && !unknown.contains(&code)
}

/// How a call is made: its credentials as headers.
#[derive(Clone, Debug)]
enum Caller {
    Unsigned,
    User(&'static str, &'static str),
    /// An operator's signature (`auth::operator`): over the method, a nonce and the body.
    Operator(&'static str, &'static str),
    Member(String),
}

fn headers(caller: &Caller) -> Vec<(&'static str, String)> {
    match caller {
        Caller::Unsigned => vec![],
        Caller::User(key, secret) => {
            let (date, auth) = rockraft::auth::signature::sign(key, secret, time::OffsetDateTime::now_utc());
            vec![("x-mq-date-time", date), ("authorization", auth), ("x-mq-client-id", "fuzz".into())]
        }
        Caller::Member(secret) => vec![(rockraft::auth::member::SECRET_HEADER, secret.clone())],
        // Signed per request, over its body (`call`).
        Caller::Operator(..) => vec![],
    }
}

/// The operator signature's headers for a unary call to `path` carrying `message`: signed over
/// the gRPC frame it travels in.
fn operator_headers(key: &str, secret: &str, path: &str, message: &[u8]) -> Vec<(&'static str, String)> {
    use rockraft::auth::operator::{CONTENT_SHA256, NONCE, sign};
    static NONCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nonce =
        format!("fuzz{:016x}{:012x}", NONCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed), std::process::id());
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    let s = sign(key, secret, path, &frame, time::OffsetDateTime::now_utc(), &nonce);
    vec![
        ("x-mq-date-time", s.date_time),
        (NONCE, s.nonce),
        (CONTENT_SHA256, s.content_sha256),
        ("authorization", s.authorization),
    ]
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Unary,
    ServerStream,
    BidiStream,
}

/// One RPC: its path, how it streams, and a valid request to start from.
struct Rpc {
    path: &'static str,
    shape: Shape,
    valid: Bytes,
}

fn resource(name: &str) -> Option<mq::Resource> {
    Some(mq::Resource { resource_namespace: String::new(), name: name.into() })
}

fn messaging_rpcs() -> Vec<Rpc> {
    let m = |path, shape, valid: Vec<u8>| Rpc { path, shape, valid: valid.into() };
    let message = mq::Message {
        topic: resource("Fuzz"),
        system_properties: Some(mq::SystemProperties {
            message_id: "fuzz-1".into(),
            message_type: mq::MessageType::Normal as i32,
            ..Default::default()
        }),
        body: Bytes::from_static(b"payload"),
        ..Default::default()
    };
    let queue = Some(mq::MessageQueue { topic: resource("Fuzz"), ..Default::default() });
    let seconds = |s| Some(prost_types::Duration { seconds: s, nanos: 0 });
    let entry =
        mq::AckMessageEntry { message_id: "fuzz-1".into(), receipt_handle: "r1.0.0.0".into(), lite_topic: None };
    vec![
        m(
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            Shape::Unary,
            mq::QueryRouteRequest { topic: resource("Fuzz"), endpoints: None }.encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/Heartbeat",
            Shape::Unary,
            mq::HeartbeatRequest { group: resource("fuzzers"), client_type: 2 }.encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            Shape::Unary,
            mq::SendMessageRequest { messages: vec![message] }.encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/QueryAssignment",
            Shape::Unary,
            mq::QueryAssignmentRequest { topic: resource("Fuzz"), group: resource("fuzzers"), endpoints: None }
                .encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/ReceiveMessage",
            Shape::ServerStream,
            mq::ReceiveMessageRequest {
                group: resource("fuzzers"),
                message_queue: queue,
                batch_size: 4,
                invisible_duration: seconds(30),
                long_polling_timeout: seconds(1),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/AckMessage",
            Shape::Unary,
            mq::AckMessageRequest { group: resource("fuzzers"), topic: resource("Fuzz"), entries: vec![entry] }
                .encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration",
            Shape::Unary,
            mq::ChangeInvisibleDurationRequest {
                group: resource("fuzzers"),
                topic: resource("Fuzz"),
                receipt_handle: "r1.0.0.0".into(),
                invisible_duration: seconds(10),
                message_id: "fuzz-1".into(),
                lite_topic: None,
                suspend: None,
            }
            .encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/ForwardMessageToDeadLetterQueue",
            Shape::Unary,
            mq::ForwardMessageToDeadLetterQueueRequest {
                group: resource("fuzzers"),
                topic: resource("Fuzz"),
                receipt_handle: "r1.0.0.0".into(),
                message_id: "fuzz-1".into(),
                delivery_attempt: 1,
                max_delivery_attempts: 16,
                lite_topic: None,
            }
            .encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/EndTransaction",
            Shape::Unary,
            mq::EndTransactionRequest {
                topic: resource("Fuzz"),
                message_id: "fuzz-1".into(),
                transaction_id: "T1".into(),
                resolution: 1,
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/RecallMessage",
            Shape::Unary,
            mq::RecallMessageRequest { topic: resource("Fuzz"), recall_handle: "R1.1".into() }.encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/NotifyClientTermination",
            Shape::Unary,
            mq::NotifyClientTerminationRequest { group: resource("fuzzers") }.encode_to_vec(),
        ),
        m(
            "/apache.rocketmq.v2.MessagingService/Telemetry",
            Shape::BidiStream,
            mq::TelemetryCommand {
                status: None,
                command: Some(mq::telemetry_command::Command::Settings(mq::Settings::default())),
            }
            .encode_to_vec(),
        ),
    ]
}

fn admin_rpcs() -> Vec<Rpc> {
    use rockraft_proto::rockraft as pb;
    let typed = |path: &'static str, valid: Vec<u8>| Rpc { path, shape: Shape::Unary, valid: valid.into() };
    let mut rpcs: Vec<Rpc> = vec![
        typed(
            "/rockraft.v1.AdminService/ListTopics",
            pb::ListTopicsRequest { after: String::new(), limit: 5 }.encode_to_vec(),
        ),
        typed(
            "/rockraft.v1.AdminService/ListUsers",
            pb::ListUsersRequest { after: String::new(), limit: 5 }.encode_to_vec(),
        ),
    ];
    rpcs.extend([
        typed("/rockraft.v1.AdminService/DeleteTopic", pb::DeleteTopicRequest { name: "Fuzz".into() }.encode_to_vec()),
        typed(
            "/rockraft.v1.AdminService/GetMessage",
            pb::GetMessageRequest { message_id: "fuzz-1".into(), local: false, data_group: None }.encode_to_vec(),
        ),
        typed(
            "/rockraft.v1.AdminService/ListMessages",
            pb::ListMessagesRequest {
                topic: "Fuzz".into(),
                queue: 0,
                from: 0,
                limit: 5,
                local: true,
                data_group: None,
            }
            .encode_to_vec(),
        ),
        typed(
            "/rockraft.v1.AdminService/ListHeld",
            pb::ListHeldRequest { kind: "HALF".into(), after: "T1".into(), limit: 5, ..Default::default() }
                .encode_to_vec(),
        ),
        typed(
            "/rockraft.v1.AdminService/ResolveTransaction",
            pb::ResolveTransactionRequest { message_id: "fuzz-1".into(), commit: true, data_group: None }
                .encode_to_vec(),
        ),
        typed(
            "/rockraft.v1.AdminService/BindPlugin",
            pb::BindPluginRequest {
                target: Some(pb::bind_plugin_request::Target::Group("fuzzers".into())),
                plugin: "tag".into(),
                config: "*".into(),
            }
            .encode_to_vec(),
        ),
    ]);
    rpcs
}

fn peer_rpcs() -> Vec<Rpc> {
    let batch = rockraft_proto::rockraft::SendBatch {
        topic: "Fuzz".into(),
        messages: vec![
            rockraft_proto::rockraft::StoredMessage { message_id: "peer".into(), ..Default::default() }
                .encode_to_vec()
                .into(),
        ],
        ..Default::default()
    };
    let write = rockraft_proto::rockraft::WriteRequest { command: rockraft::broker::Command::Send(batch).encode() };
    use rockraft_proto::rockraft as pb;
    let half = rockraft_proto::rockraft::StoredMessage { message_id: "half".into(), ..Default::default() };
    let ask = pb::peer::AskProducer {
        topic: "Fuzz".into(),
        transaction_id: "T1:1".into(),
        message: Some(half),
        store_timestamp_ms: 1,
    };
    let leader = pb::Vote { leader_id: Some(pb::LeaderId { term: 1, node_id: 1 }), committed: false };
    let vote = pb::VoteRequest { vote: Some(leader), last_log_id: None, leadership_transfer: false };
    let transfer = pb::RaftTransferLeaderRequest { from_leader: Some(leader), to_node_id: 1, last_log_id: None };
    vec![
        Rpc { path: "/rockraft.v1.PeerService/Write", shape: Shape::Unary, valid: write.encode_to_vec().into() },
        Rpc { path: "/rockraft.v1.PeerService/AskProducer", shape: Shape::Unary, valid: ask.encode_to_vec().into() },
        Rpc { path: "/rockraft.v1.RaftService/Vote", shape: Shape::Unary, valid: vote.encode_to_vec().into() },
        Rpc {
            path: "/rockraft.v1.RaftService/TransferLeader",
            shape: Shape::Unary,
            valid: transfer.encode_to_vec().into(),
        },
    ]
}

fn signed<T>(body: T, caller: &Caller) -> tonic::Request<T> {
    let mut r = tonic::Request::new(body);
    for (k, v) in headers(caller) {
        r.metadata_mut().insert(k, v.parse().expect("ascii header"));
    }
    r
}

/// What a call answered: a gRPC error code, or the RocketMQ status codes its frames carried.
#[derive(Debug)]
enum Answer {
    Grpc(tonic::Code),
    Statuses(Vec<i32>),
}

async fn call(channel: Channel, rpc: &Rpc, body: Bytes, caller: &Caller) -> Answer {
    let mut grpc = tonic::client::Grpc::new(channel);
    if grpc.ready().await.is_err() {
        return Answer::Grpc(tonic::Code::Unavailable);
    }
    let path = PathAndQuery::from_static(rpc.path);
    let frames: Result<Vec<Bytes>, tonic::Status> = match rpc.shape {
        Shape::Unary => {
            let mut request = signed(body.clone(), caller);
            if let Caller::Operator(key, secret) = caller {
                for (k, v) in operator_headers(key, secret, rpc.path, &body) {
                    request.metadata_mut().insert(k, v.parse().expect("ascii header"));
                }
            }
            grpc.unary(request, path, Raw).await.map(|r| vec![r.into_inner()])
        }
        Shape::ServerStream => match grpc.server_streaming(signed(body, caller), path, Raw).await {
            Ok(r) => {
                let mut stream = r.into_inner();
                let mut out = Vec::new();
                while let Ok(Some(frame)) = stream.message().await {
                    out.push(frame);
                }
                Ok(out)
            }
            Err(e) => Err(e),
        },
        Shape::BidiStream => {
            let outbound = tokio_stream::once(body);
            match grpc.streaming(signed(outbound, caller), path, Raw).await {
                Ok(r) => {
                    let mut stream = r.into_inner();
                    let first = tokio::time::timeout(Duration::from_secs(2), stream.message()).await;
                    Ok(first.ok().and_then(Result::ok).flatten().into_iter().collect())
                }
                Err(e) => Err(e),
            }
        }
    };
    match frames {
        Err(s) => Answer::Grpc(s.code()),
        Ok(frames) => Answer::Statuses(
            frames.iter().filter_map(|f| StatusOnly::decode(f.clone()).ok()?.status.map(|s| s.code)).collect(),
        ),
    }
}

/// A valid request with some bytes changed and maybe cut short, or random bytes outright.
fn mutated(valid: Bytes) -> impl Strategy<Value = Bytes> {
    let len = valid.len().max(1);
    let edits = (prop::collection::vec((0..len, any::<u8>()), 0..6), prop::option::of(0..=len)).prop_map(
        move |(edits, cut)| {
            let mut b = valid.to_vec();
            for (at, byte) in edits {
                if let Some(x) = b.get_mut(at) {
                    *x = byte;
                }
            }
            if let Some(cut) = cut {
                b.truncate(cut);
            }
            Bytes::from(b)
        },
    );
    prop_oneof![4 => edits, 1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from)]
}

fn cases() -> u32 {
    std::env::var("ROCKRAFT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
}

/// Runs `cases()` random requests to random RPCs of `rpcs` at `addr` as `caller`; `check` judges
/// each answer (`Err`: why it is wrong).
fn fuzz(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    rpcs: &[Rpc],
    caller: Caller,
    check: impl Fn(&Rpc, &Answer) -> Result<(), String>,
) {
    let channel = rt
        .block_on(async { Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.expect("connect") });
    let mut runner = TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() });
    let strategy = (0..rpcs.len()).prop_flat_map(|i| (Just(i), mutated(rpcs[i].valid.clone())));
    runner
        .run(&strategy, |(i, body)| {
            let rpc = &rpcs[i];
            let answer = rt.block_on(call(channel.clone(), rpc, body.clone(), &caller));
            check(rpc, &answer).map_err(|why| {
                TestCaseError::fail(format!("{} as {caller:?} with {:02x?}: {why} ({answer:?})", rpc.path, &body[..]))
            })
        })
        .unwrap();
}

/// gRPC codes an undecodable or malformed request may get, besides the refusals.
fn malformed(code: tonic::Code) -> bool {
    matches!(code, tonic::Code::Internal | tonic::Code::InvalidArgument | tonic::Code::Unimplemented)
}

/// Each Raft group's digest on each node holding it, once its replicas agree (a node stopped
/// answering, or replicas that disagree, fail the test).
fn digests(rt: &tokio::runtime::Runtime, cluster: &Cluster) -> BTreeMap<(u32, u64), Option<u64>> {
    rt.block_on(async {
        let states = cluster.assert_replicas_agree(Duration::from_secs(20)).await;
        states.into_iter().map(|(at, d)| (at, d.map(|d| d.digest))).collect()
    })
}

#[test]
fn arbitrary_requests_on_every_plane_never_panic_and_refused_ones_change_nothing() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let cluster = rt.block_on(async {
        let cluster = Cluster::start(3, Options { auth: true, ..Default::default() }).await;
        cluster.create_topic("Fuzz", 2, TopicKind::Normal).await;
        cluster.create_group("fuzzers", false, 4).await;
        use rockraft_proto::rockraft::CreateUserRequest;
        let user = CreateUserRequest { access_key: "nobody".into(), secret_key: "nobody-secret".into(), admin: false };
        cluster.admin(user).await;
        let admin = CreateUserRequest { access_key: "root".into(), secret_key: "root-secret".into(), admin: true };
        cluster.admin(admin).await;
        cluster
    });
    // Once the setup's placements in the data groups have applied.
    let before: BTreeMap<(u32, u64), Option<u64>> = rt.block_on(async {
        let states = cluster.settled_states(Duration::from_secs(30)).await;
        states.into_iter().map(|(at, d)| (at, d.map(|d| d.digest))).collect()
    });
    let messaging = messaging_rpcs();
    let (client, admin, raft) = (cluster.client_addr(1), cluster.admin_addr(2), cluster.nodes[2].raft_addr.clone());
    let unauthorized = mq::Code::Unauthorized as i32;

    // Refused callers: exactly the refusal, whatever they send.
    // (A Telemetry stream whose one command does not decode ends without an answer.)
    fuzz(&rt, &client, &messaging, Caller::Unsigned, |rpc, a| match a {
        Answer::Statuses(codes)
            if (!codes.is_empty() || rpc.shape == Shape::BidiStream) && codes.iter().all(|c| *c == unauthorized) =>
        {
            Ok(())
        }
        Answer::Grpc(c) if malformed(*c) => Ok(()),
        _ => Err("an unsigned call was not refused as UNAUTHORIZED".into()),
    });
    fuzz(&rt, &client, &messaging, Caller::User("nobody", "nobody-secret"), |rpc, a| match a {
        Answer::Statuses(codes) if codes.iter().all(|c| known_code(*c)) => {
            let free = rpc.path.ends_with("/Heartbeat")
                || rpc.path.ends_with("/NotifyClientTermination")
                || rpc.path.ends_with("/Telemetry");
            match codes.first() {
                Some(&c) if c == mq::Code::Ok as i32 && !free => Err("a user without rules was served".into()),
                _ => Ok(()),
            }
        }
        Answer::Grpc(c) if malformed(*c) => Ok(()),
        _ => Err("an answer outside the documented set".into()),
    });
    fuzz(&rt, &admin, &admin_rpcs(), Caller::Unsigned, |_, a| match a {
        Answer::Grpc(tonic::Code::Unauthenticated) => Ok(()),
        _ => Err("an unsigned operator request was not refused".into()),
    });
    fuzz(&rt, &admin, &admin_rpcs(), Caller::Operator("nobody", "nobody-secret"), |_, a| match a {
        Answer::Grpc(tonic::Code::PermissionDenied) => Ok(()),
        _ => Err("a non-admin's operator request was not refused".into()),
    });
    fuzz(&rt, &raft, &peer_rpcs(), Caller::Unsigned, |_, a| match a {
        Answer::Grpc(tonic::Code::Unauthenticated) => Ok(()),
        _ => Err("a peer call without the cluster secret was not refused".into()),
    });
    assert_eq!(digests(&rt, &cluster), before, "a refused call changed the replicated state");

    // Callers allowed in: any answer from the documented set, and no node goes down.
    fuzz(&rt, &client, &messaging, Caller::User("root", "root-secret"), |_, a| match a {
        Answer::Statuses(codes) if codes.iter().all(|c| known_code(*c)) => Ok(()),
        Answer::Grpc(c) if malformed(*c) => Ok(()),
        _ => Err("an answer outside the documented set".into()),
    });
    fuzz(&rt, &admin, &admin_rpcs(), Caller::Operator("root", "root-secret"), |_, a| match a {
        // The documented answers: a refusal (INVALID_ARGUMENT, FAILED_PRECONDITION), NOT_FOUND,
        // ALREADY_EXISTS, or a retry later (UNAVAILABLE, RESOURCE_EXHAUSTED).
        Answer::Grpc(c)
            if malformed(*c)
                || matches!(
                    c,
                    tonic::Code::Ok
                        | tonic::Code::InvalidArgument
                        | tonic::Code::FailedPrecondition
                        | tonic::Code::NotFound
                        | tonic::Code::AlreadyExists
                        | tonic::Code::Unavailable
                        | tonic::Code::ResourceExhausted
                ) =>
        {
            Ok(())
        }
        Answer::Statuses(_) => Ok(()),
        _ => Err("an operator request got an unexpected gRPC status".into()),
    });
    fuzz(&rt, &raft, &peer_rpcs(), Caller::Member(cluster.secret.clone()), |_, a| match a {
        Answer::Grpc(c) if malformed(*c) => Ok(()),
        Answer::Statuses(_) => Ok(()),
        _ => Err("a member's call got an unexpected gRPC status".into()),
    });
    // Every node is still up, and the replicas agree.
    digests(&rt, &cluster);
}
