//! A cluster with authentication on, plane by plane and RPC by RPC: every unsigned, wrongly
//! signed or unauthorised request is refused with the status the official clients understand
//! (UNAUTHORIZED, FORBIDDEN on the client port; UNAUTHENTICATED, PERMISSION_DENIED on the admin
//! port) and changes nothing; the rules are replicated, so every node decides the same; and a
//! producer's Telemetry stream is asked only about transactions of topics it may publish to.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use rockraft::admin::{CallOptions, Credentials};
use rockraft::broker::TopicKind;
use rockraft::broker::access::{Action, Decision, Secret};
use rockraft_cluster_tests::{Cluster, Options, Signer, retry};
use rockraft_proto::rocketmq::receive_message_response::Content;
use rockraft_proto::rocketmq::{
    AckMessageEntry, AckMessageRequest, ChangeInvisibleDurationRequest, Code, EndTransactionRequest,
    ForwardMessageToDeadLetterQueueRequest, HeartbeatRequest, Message, MessageQueue, MessageType,
    NotifyClientTerminationRequest, Publishing, QueryAssignmentRequest, QueryRouteRequest, RecallMessageRequest,
    ReceiveMessageRequest, Resource, SendMessageRequest, Settings, SystemProperties, TelemetryCommand, settings,
    telemetry_command,
};
use rockraft_proto::rockraft as pb;

type Client = rockraft_cluster_tests::SignedClient;

async fn client(addr: &str, as_user: Option<(&str, &str)>) -> Client {
    rockraft_cluster_tests::signed_client(addr, as_user)
}

fn resource(name: &str) -> Option<Resource> {
    Some(Resource { resource_namespace: String::new(), name: name.into() })
}

fn message(topic: &str, id: &str, kind: MessageType) -> Message {
    Message {
        topic: resource(topic),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: id.into(),
            message_type: kind as i32,
            ..Default::default()
        }),
        body: Bytes::from_static(b"hello"),
    }
}

fn seconds(s: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds: s, nanos: 0 })
}

fn status_of(s: &Option<rockraft_proto::rocketmq::Status>) -> i32 {
    s.as_ref().map_or(-1, |s| s.code)
}

fn publishing(topic: &str) -> TelemetryCommand {
    TelemetryCommand {
        status: None,
        command: Some(telemetry_command::Command::Settings(Settings {
            pub_sub: Some(settings::PubSub::Publishing(Publishing {
                topics: vec![Resource { resource_namespace: String::new(), name: topic.into() }],
                max_body_size: 0,
                validate_message_type: false,
            })),
            ..Default::default()
        })),
    }
}

/// A Telemetry stream for each user, in order, each naming `topic` as one it publishes, its
/// settings answered OK: the stream's sender (kept open) and its replies.
async fn publishing_streams(
    addr: &str,
    users: &[(&str, &str)],
    topic: &str,
) -> Vec<(tokio::sync::mpsc::Sender<TelemetryCommand>, tonic::Streaming<TelemetryCommand>)> {
    let mut streams = Vec::new();
    for who in users {
        let mut c = client(addr, Some(*who)).await;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(publishing(topic)).await.unwrap();
        let mut replies = c.telemetry(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
        let settings = replies.next().await.expect("settings").expect("reply");
        assert_eq!(status_of(&settings.status), Code::Ok as i32);
        streams.push((tx, replies));
    }
    streams
}

/// Every RPC of `MessagingService` on topic `Orders` and group `readers`, with the code each
/// answered.
async fn every_rpc(c: &mut Client) -> Vec<(&'static str, i32)> {
    let mut out = Vec::new();
    let r = c.query_route(QueryRouteRequest { topic: resource("Orders"), endpoints: None }).await.unwrap();
    out.push(("QueryRoute", status_of(&r.into_inner().status)));
    let r = c.heartbeat(HeartbeatRequest { group: None, client_type: 1 }).await.unwrap();
    out.push(("Heartbeat", status_of(&r.into_inner().status)));
    let send = SendMessageRequest { messages: vec![message("Orders", "forbidden-send", MessageType::Normal)] };
    out.push(("SendMessage", status_of(&c.send_message(send).await.unwrap().into_inner().status)));
    let assignment = QueryAssignmentRequest { topic: resource("Orders"), group: resource("readers"), endpoints: None };
    out.push(("QueryAssignment", status_of(&c.query_assignment(assignment).await.unwrap().into_inner().status)));
    let receive = ReceiveMessageRequest {
        group: resource("readers"),
        message_queue: Some(MessageQueue { topic: resource("Orders"), ..Default::default() }),
        batch_size: 8,
        invisible_duration: seconds(30),
        long_polling_timeout: seconds(1),
        ..Default::default()
    };
    let mut stream = c.receive_message(receive).await.unwrap().into_inner();
    let first = stream.next().await.expect("a frame").expect("frame");
    let Some(Content::Status(s)) = first.content else { panic!("a refused receive starts with its status") };
    out.push(("ReceiveMessage", s.code));
    let entries = vec![AckMessageEntry { message_id: "m".into(), receipt_handle: "r1.0.0.0".into(), lite_topic: None }];
    let ack = AckMessageRequest { group: resource("readers"), topic: resource("Orders"), entries };
    out.push(("AckMessage", status_of(&c.ack_message(ack).await.unwrap().into_inner().status)));
    let change = ChangeInvisibleDurationRequest {
        group: resource("readers"),
        topic: resource("Orders"),
        receipt_handle: "r1.0.0.0".into(),
        invisible_duration: seconds(10),
        message_id: "m".into(),
        lite_topic: None,
        suspend: None,
    };
    out.push((
        "ChangeInvisibleDuration",
        status_of(&c.change_invisible_duration(change).await.unwrap().into_inner().status),
    ));
    let dlq = ForwardMessageToDeadLetterQueueRequest {
        group: resource("readers"),
        topic: resource("Orders"),
        receipt_handle: "r1.0.0.0".into(),
        message_id: "m".into(),
        delivery_attempt: 1,
        max_delivery_attempts: 16,
        lite_topic: None,
    };
    let r = c.forward_message_to_dead_letter_queue(dlq).await.unwrap();
    out.push(("ForwardMessageToDeadLetterQueue", status_of(&r.into_inner().status)));
    let end = EndTransactionRequest {
        topic: resource("Orders"),
        message_id: "m".into(),
        transaction_id: "t".into(),
        ..Default::default()
    };
    out.push(("EndTransaction", status_of(&c.end_transaction(end).await.unwrap().into_inner().status)));
    let recall = RecallMessageRequest { topic: resource("Orders"), recall_handle: "x".into() };
    out.push(("RecallMessage", status_of(&c.recall_message(recall).await.unwrap().into_inner().status)));
    let notify = NotifyClientTerminationRequest { group: None };
    out.push((
        "NotifyClientTermination",
        status_of(&c.notify_client_termination(notify).await.unwrap().into_inner().status),
    ));
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(publishing("Orders")).await.unwrap();
    let mut replies = c.telemetry(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap().into_inner();
    let reply = tokio::time::timeout(Duration::from_secs(5), replies.next()).await.expect("a telemetry reply");
    out.push(("Telemetry", status_of(&reply.expect("frame").expect("reply").status)));
    out
}

async fn admin_as(
    cluster: &Cluster,
    id: u64,
    who: Option<(&str, &str)>,
    req: pb::ListTopicsRequest,
) -> Result<pb::ListTopicsReply, rockraft::admin::CallError> {
    let credentials = who.map(|(k, s)| Credentials { access_key: k.into(), secret: Secret::new(s) });
    rockraft::admin::call(&cluster.admin_addr(id), &CallOptions { credentials, tls_ca: None }, req).await
}

async fn grant(cluster: &Cluster, key: &str, resource: &str, actions: &[Action], decision: Decision) {
    let actions = actions.iter().map(|a| format!("{a:?}").to_uppercase()).collect();
    let deny = decision == Decision::Deny;
    cluster.admin(pb::GrantRequest { access_key: key.into(), resource: resource.into(), actions, deny }).await;
}

async fn create_user(cluster: &Cluster, key: &str, secret: &str, admin: bool) {
    cluster.admin(pb::CreateUserRequest { access_key: key.into(), secret_key: secret.into(), admin }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_plane_refuses_whoever_does_not_belong_and_refused_calls_change_nothing() {
    let cluster = Cluster::start(3, Options { auth: true, ..Default::default() }).await;
    cluster.create_topic("Orders", 2, TopicKind::Normal).await;
    cluster.create_group("readers", false, 16).await;
    create_user(&cluster, "producer", "producer-secret", false).await;
    create_user(&cluster, "consumer", "consumer-secret", false).await;
    create_user(&cluster, "nobody", "nobody-secret", false).await;
    create_user(&cluster, "operator", "operator-secret", true).await;
    grant(&cluster, "producer", "Topic:Ord*", &[Action::Pub], Decision::Allow).await;
    grant(&cluster, "consumer", "Topic:Orders", &[Action::Sub], Decision::Allow).await;
    grant(&cluster, "consumer", "Group:readers", &[Action::Sub], Decision::Allow).await;

    // The admin plane: admins only, checked before anything is decoded.
    let status = pb::ListTopicsRequest::default();
    for (who, expect) in [
        (None, "authentication is required"),
        (Some(("operator", "not-the-secret")), "wrong signature"),
        (Some(("ghost", "ghost-secret")), "wrong signature"),
        (Some(("consumer", "consumer-secret")), "not an admin"),
    ] {
        for id in 1..=3 {
            let e = admin_as(&cluster, id, who, status.clone()).await.expect_err("refused");
            assert!(e.to_string().contains(expect), "{who:?} on node {id}: {e}");
        }
    }
    // A refused operator request changes nothing: the topic is still there.
    let consumer = CallOptions {
        credentials: Some(Credentials { access_key: "consumer".into(), secret: Secret::new("consumer-secret") }),
        tls_ca: None,
    };
    let delete = pb::DeleteTopicRequest { name: "Orders".into() };
    rockraft::admin::call(&cluster.admin_addr(1), &consumer, delete).await.expect_err("not an admin");
    match admin_as(&cluster, 2, Some(("operator", "operator-secret")), pb::ListTopicsRequest::default()).await {
        Ok(t) => assert!(t.topics.iter().any(|t| t.name == "Orders"), "{t:?}"),
        other => panic!("a replicated admin user lists topics: {other:?}"),
    }
    // Listings never show a secret.
    let users = format!("{:?}", cluster.admin(pb::ListUsersRequest::default()).await);
    assert!(users.contains("producer") && !users.contains("producer-secret"), "{users}");

    // The planes are apart: no operator API on the client port, no RocketMQ API on the admin port.
    let on_client_port =
        rockraft::admin::call(&cluster.client_addr(1), &cluster.admin_options(), pb::ListTopicsRequest::default())
            .await
            .expect_err("no admin API on the client port")
            .to_string();
    assert!(on_client_port.contains("unimplemented") || on_client_port.contains("Unimplemented"), "{on_client_port}");
    let mut wrong_port = client(&cluster.admin_addr(1), None).await;
    let route = wrong_port.query_route(QueryRouteRequest { topic: resource("Orders"), endpoints: None }).await;
    assert!(route.is_err(), "the admin port serves no MessagingService");

    // The client plane, RPC by RPC, on every node: unsigned and wrongly signed calls are
    // UNAUTHORIZED; an authenticated user without a rule is FORBIDDEN (a heartbeat, a goodbye and
    // the Telemetry handshake need only authentication).
    let unauthorized = Code::Unauthorized as i32;
    let forbidden = Code::Forbidden as i32;
    for id in 1..=3 {
        let addr = cluster.client_addr(id);
        for who in [None, Some(("consumer", "wrong-secret")), Some(("ghost", "ghost-secret"))] {
            for (rpc, code) in every_rpc(&mut client(&addr, who).await).await {
                assert_eq!(code, unauthorized, "{rpc} as {who:?} on node {id}");
            }
        }
        for (rpc, code) in every_rpc(&mut client(&addr, Some(("nobody", "nobody-secret"))).await).await {
            let expect = match rpc {
                "Heartbeat" | "NotifyClientTermination" | "Telemetry" => Code::Ok as i32,
                _ => forbidden,
            };
            assert_eq!(code, expect, "{rpc} as nobody on node {id}");
        }
    }
    for q in 0..2 {
        for id in cluster.queue_holders("Orders", q).await {
            assert!(cluster.local_messages(id, "Orders", q).await.is_empty(), "a refused send stored something");
        }
    }

    // Each user may do what their rules allow, and nothing else.
    let mut producer = client(&cluster.client_addr(2), Some(("producer", "producer-secret"))).await;
    let mut consumer = client(&cluster.client_addr(3), Some(("consumer", "consumer-secret"))).await;
    let send = |id: &str| SendMessageRequest { messages: vec![message("Orders", id, MessageType::Normal)] };
    let r = producer.send_message(send("allowed-1")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32, "{r:?}");
    let r = consumer.send_message(send("not-the-consumers")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), forbidden, "{r:?}");
    let receive = || ReceiveMessageRequest {
        group: resource("readers"),
        message_queue: Some(MessageQueue { topic: resource("Orders"), ..Default::default() }),
        batch_size: 8,
        invisible_duration: seconds(30),
        long_polling_timeout: seconds(3),
        ..Default::default()
    };
    let frames: Vec<Content> = consumer
        .receive_message(receive())
        .await
        .unwrap()
        .into_inner()
        .filter_map(|f| async move { f.ok().and_then(|f| f.content) })
        .collect()
        .await;
    let delivered: Vec<_> = frames
        .iter()
        .filter_map(|c| match c {
            Content::Message(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(delivered.len(), 1, "{frames:?}");
    let handle = delivered[0].system_properties.as_ref().unwrap().receipt_handle.clone().expect("a receipt handle");
    let entries = vec![AckMessageEntry { message_id: "allowed-1".into(), receipt_handle: handle, lite_topic: None }];
    let ack = AckMessageRequest { group: resource("readers"), topic: resource("Orders"), entries };
    let r = consumer.ack_message(ack).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32, "{r:?}");

    // Deny wins, the rules are replicated (every node refuses from the same entry on), and a
    // revoked or deleted credential stops working everywhere.
    grant(&cluster, "producer", "Topic:Orders", &[Action::Pub], Decision::Deny).await;
    for id in 1..=3 {
        let mut p = client(&cluster.client_addr(id), Some(("producer", "producer-secret"))).await;
        let code = retry(Duration::from_secs(10), || {
            let mut p = p.clone();
            async move {
                let r = p.send_message(send("denied")).await.map_err(|e| e.to_string())?.into_inner();
                let code = status_of(&r.status);
                if code == forbidden { Ok(code) } else { Err(format!("answered {code}")) }
            }
        })
        .await;
        assert_eq!(code, forbidden);
        let r = p.send_message(send("denied")).await.unwrap().into_inner();
        assert_eq!(status_of(&r.status), forbidden, "node {id}");
    }
    cluster.admin(pb::RevokeRequest { access_key: "producer".into(), resource: "Topic:Orders".into() }).await;
    let r = retry(Duration::from_secs(10), || {
        let mut p = producer.clone();
        async move {
            let r = p.send_message(send("allowed-2")).await.map_err(|e| e.to_string())?.into_inner();
            if status_of(&r.status) == Code::Ok as i32 { Ok(r) } else { Err(format!("{r:?}")) }
        }
    })
    .await;
    assert_eq!(r.entries.len(), 1);
    // A new secret replaces the old one at once.
    let rotate =
        pb::UpdateUserRequest { access_key: "producer".into(), secret_key: Some("rotated-secret".into()), admin: None };
    cluster.admin(rotate).await;
    let rotated = client(&cluster.client_addr(1), Some(("producer", "rotated-secret"))).await;
    let r = retry(Duration::from_secs(10), || {
        let mut p = rotated.clone();
        async move {
            let r = p.send_message(send("allowed-3")).await.map_err(|e| e.to_string())?.into_inner();
            if status_of(&r.status) == Code::Ok as i32 { Ok(r) } else { Err(format!("{r:?}")) }
        }
    })
    .await;
    assert_eq!(r.entries.len(), 1);
    let mut old = client(&cluster.client_addr(1), Some(("producer", "producer-secret"))).await;
    let r = old.send_message(send("old-secret")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), unauthorized, "{r:?}");
    cluster.admin(pb::DeleteUserRequest { access_key: "consumer".into() }).await;
    let gone = retry(Duration::from_secs(10), || {
        let mut c = consumer.clone();
        async move {
            let r = c.heartbeat(HeartbeatRequest { group: None, client_type: 1 }).await.map_err(|e| e.to_string())?;
            let code = status_of(&r.into_inner().status);
            if code == unauthorized { Ok(code) } else { Err(format!("answered {code}")) }
        }
    })
    .await;
    assert_eq!(gone, unauthorized);
}

/// A cluster checking transactional halves every second, with a transactional topic `Payments`
/// that user `payer` may publish to, and `other` (access key, secret, admin) beside it; and the
/// leader's client endpoint, where producers are asked.
async fn payments_cluster(other: (&str, &str, bool)) -> (Cluster, String) {
    let broker = "transaction_recovery_secs = 1\ntransaction_check_interval_secs = 1\n".to_string();
    let cluster = Cluster::start(3, Options { auth: true, broker, ..Default::default() }).await;
    cluster.create_topic("Payments", 1, TopicKind::Transaction).await;
    create_user(&cluster, "payer", "payer-secret", false).await;
    create_user(&cluster, other.0, other.1, other.2).await;
    grant(&cluster, "payer", "Topic:Payments", &[Action::Pub], Decision::Allow).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let addr = cluster.client_addr(leader);
    (cluster, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_a_producer_allowed_to_publish_is_asked_about_a_transaction() {
    let (_cluster, addr) = payments_cluster(("eavesdropper", "eavesdropper-secret", false)).await;

    // Both open a Telemetry stream naming the topic; the eavesdropper first.
    let mut streams =
        publishing_streams(&addr, &[("eavesdropper", "eavesdropper-secret"), ("payer", "payer-secret")], "Payments")
            .await;
    let mut payer = client(&addr, Some(("payer", "payer-secret"))).await;
    let half = SendMessageRequest { messages: vec![message("Payments", "half-1", MessageType::Transaction)] };
    let r = payer.send_message(half).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32, "{r:?}");

    // Checks come every second; the payer is asked, the eavesdropper never.
    let (_payer_tx, payer_replies) = streams.pop().unwrap();
    let (_eavesdropper_tx, mut eavesdropper_replies) = streams.pop().unwrap();
    let mut payer_replies = payer_replies;
    let asked = tokio::time::timeout(Duration::from_secs(15), payer_replies.next()).await.expect("the payer is asked");
    let asked = asked.expect("frame").expect("command");
    assert!(
        matches!(asked.command, Some(telemetry_command::Command::RecoverOrphanedTransactionCommand(_))),
        "{asked:?}"
    );
    let overheard = tokio::time::timeout(Duration::from_secs(4), eavesdropper_replies.next()).await;
    assert!(overheard.is_err(), "the eavesdropper was sent {overheard:?}");
}

/// What is done to the revoked producer's user while its Telemetry stream is open.
#[derive(Clone, Copy, Debug)]
enum Revocation {
    PubRight,
    User,
    Secret,
}

/// Two transactional producers of the official Python client on one topic, each its own user;
/// once both have been asked about a half, one user loses its right (`how`): from then on only
/// the other is asked, and the revoked one is sent no half's body (`revoked_producer.py`).
async fn a_producer_revoked_mid_stream_is_no_longer_asked(how: Revocation) {
    use std::io::{BufRead, Write};
    let broker = "transaction_recovery_secs = 1\ntransaction_check_interval_secs = 1\n".to_string();
    let cluster = Cluster::start(3, Options { auth: true, broker, ..Default::default() }).await;
    cluster.create_topic("Payments", 1, TopicKind::Transaction).await;
    for key in ["kept", "revoked"] {
        create_user(&cluster, key, &format!("{key}-secret-1"), false).await;
        grant(&cluster, key, "Topic:Payments", &[Action::Pub], Decision::Allow).await;
    }
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let endpoint = cluster.client_addr(leader);
    let args = [
        "--endpoints",
        &endpoint,
        "--topic",
        "Payments",
        "--kept",
        "kept",
        "kept-secret-1",
        "--revoked",
        "revoked",
        "revoked-secret-1",
    ];
    let mut child = rockraft_cluster_tests::spawn_python("revoked_producer.py", &args);
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let (ready, stdout) = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        (line, stdout)
    })
    .await
    .unwrap();
    if ready.trim() != "READY" {
        let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap();
        panic!("revoked_producer.py did not get both producers asked ({status:?}); its log is above");
    }
    match how {
        Revocation::PubRight => {
            cluster.admin(pb::RevokeRequest { access_key: "revoked".into(), resource: "Topic:Payments".into() }).await;
        }
        Revocation::User => {
            cluster.admin(pb::DeleteUserRequest { access_key: "revoked".into() }).await;
        }
        Revocation::Secret => {
            let secret_key = Some("revoked-secret-2".to_string());
            cluster.admin(pb::UpdateUserRequest { access_key: "revoked".into(), secret_key, admin: None }).await;
        }
    }
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "go").expect("the scenario reads its next step");
    let status = tokio::task::spawn_blocking(move || {
        drop(stdout);
        child.wait()
    })
    .await
    .unwrap()
    .expect("the scenario ends");
    assert!(status.success(), "revoked_producer.py failed after {how:?} was revoked; its log is above");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_producer_whose_pub_right_is_revoked_mid_stream_is_no_longer_asked_about_transactions() {
    a_producer_revoked_mid_stream_is_no_longer_asked(Revocation::PubRight).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_producer_whose_user_is_deleted_mid_stream_is_no_longer_asked_about_transactions() {
    a_producer_revoked_mid_stream_is_no_longer_asked(Revocation::User).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_producer_whose_secret_is_rotated_mid_stream_is_no_longer_asked_about_transactions() {
    a_producer_revoked_mid_stream_is_no_longer_asked(Revocation::Secret).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_demoted_admin_loses_admin_on_its_open_stream() {
    let (cluster, addr) = payments_cluster(("ops", "ops-secret-1", true)).await;

    // The admin (no rules: its admin flag alone lets it publish) and the payer each open a stream.
    let mut streams =
        publishing_streams(&addr, &[("ops", "ops-secret-1"), ("payer", "payer-secret")], "Payments").await;
    let (_payer_tx, mut payer_replies) = streams.pop().unwrap();
    let (_ops_tx, mut ops_replies) = streams.pop().unwrap();
    cluster.admin(pb::UpdateUserRequest { access_key: "ops".into(), secret_key: None, admin: Some(false) }).await;

    // The half is asked about every second until settled (the payer here never answers): asked
    // in turn, the admin would be asked by the second round.
    let mut payer = client(&addr, Some(("payer", "payer-secret"))).await;
    let half = SendMessageRequest { messages: vec![message("Payments", "half-1", MessageType::Transaction)] };
    let r = payer.send_message(half).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32, "{r:?}");
    for _ in 0..2 {
        let asked = tokio::time::timeout(Duration::from_secs(15), payer_replies.next()).await.expect("the payer asked");
        let asked = asked.expect("frame").expect("command");
        assert!(matches!(asked.command, Some(telemetry_command::Command::RecoverOrphanedTransactionCommand(_))));
    }
    let overheard = tokio::time::timeout(Duration::from_secs(3), ops_replies.next()).await;
    assert!(overheard.is_err(), "the demoted admin was sent {overheard:?}");
}

/// A cluster with a lite topic `Chats` whose group `chatters` both users, `alice` and `mallory`,
/// may consume: only the client id tells their clients apart.
async fn chat_cluster() -> Cluster {
    let cluster = Cluster::start(3, Options { auth: true, ..Default::default() }).await;
    cluster.create_topic("Chats", 2, TopicKind::Lite).await;
    let config = pb::CreateGroupRequest {
        name: "chatters".into(),
        max_attempts: 16,
        lite_bind_topic: "Chats".into(),
        lite_quota: Some(10),
        ..Default::default()
    };
    cluster.admin(config).await;
    for key in ["alice", "mallory"] {
        create_user(&cluster, key, &format!("{key}-secret"), false).await;
        grant(&cluster, key, "Topic:Chats", &[Action::Pub, Action::Sub], Decision::Allow).await;
        grant(&cluster, key, "Group:chatters", &[Action::Sub], Decision::Allow).await;
    }
    cluster
}

/// A request naming client `client_id` (`x-mq-client-id`).
fn as_client<T>(req: T, client_id: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(req);
    r.metadata_mut().insert("x-mq-client-id", client_id.parse().expect("ascii"));
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_user_cannot_end_or_change_another_user_s_client_by_naming_its_id() {
    use rockraft_proto::rocketmq::{LiteSubscriptionAction, SyncLiteSubscriptionRequest};
    let cluster = chat_cluster().await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let addr = cluster.client_addr(leader);
    let mut alice = client(&addr, Some(("alice", "alice-secret"))).await;
    let mut mallory = client(&addr, Some(("mallory", "mallory-secret"))).await;
    let sync = |action: LiteSubscriptionAction, lites: &[&str]| SyncLiteSubscriptionRequest {
        action: action as i32,
        topic: resource("Chats"),
        group: resource("chatters"),
        lite_topic_set: lites.iter().map(|l| l.to_string()).collect(),
        version: None,
        offset_option: None,
    };
    let r = alice.sync_lite_subscription(as_client(sync(LiteSubscriptionAction::CompleteAdd, &["room-1"]), "alice-1"));
    assert_eq!(status_of(&r.await.unwrap().into_inner().status), Code::Ok as i32);

    // Mallory names alice's client: every call that would act on it is refused.
    let forbidden = Code::Forbidden as i32;
    let end = NotifyClientTerminationRequest { group: resource("chatters") };
    let r = mallory.notify_client_termination(as_client(end.clone(), "alice-1")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), forbidden, "ending alice's client");
    let drop_all = sync(LiteSubscriptionAction::CompleteRemove, &["room-1"]);
    let r = mallory.sync_lite_subscription(as_client(drop_all, "alice-1")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), forbidden, "dropping alice's lite subscriptions");
    let r = mallory.heartbeat(as_client(HeartbeatRequest::default(), "alice-1")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), forbidden, "keeping alice's client alive");
    // Under its own id, mallory is served.
    let r = mallory.heartbeat(as_client(HeartbeatRequest::default(), "mallory-1")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32);
    let r = mallory.notify_client_termination(as_client(end, "mallory-1")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32);

    // Alice's subscription is intact: a message to her lite topic reaches her client.
    let mut m = message("Chats", "chat-1", MessageType::Lite);
    m.system_properties.as_mut().unwrap().lite_topic = Some("room-1".into());
    let r = alice.send_message(SendMessageRequest { messages: vec![m] }).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32, "{r:?}");
    let receive = ReceiveMessageRequest {
        group: resource("chatters"),
        message_queue: Some(MessageQueue { topic: resource("Chats"), ..Default::default() }),
        batch_size: 1,
        invisible_duration: seconds(30),
        long_polling_timeout: seconds(5),
        ..Default::default()
    };
    let mut got = None;
    let mut frames = alice.receive_message(as_client(receive, "alice-1")).await.unwrap().into_inner();
    while let Some(frame) = frames.next().await {
        if let Some(Content::Message(m)) = frame.unwrap().content {
            got = m.system_properties.map(|p| p.message_id);
        }
    }
    assert_eq!(got.as_deref(), Some("chat-1"), "alice's client still has its lite subscription");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_user_cannot_change_drop_or_receive_from_another_user_s_lite_subscriptions_through_another_node() {
    use rockraft_proto::rocketmq::{LiteSubscriptionAction, SyncLiteSubscriptionRequest};
    let cluster = chat_cluster().await;
    // Alice's client works through node 1; mallory goes to node 2, where alice's id was never
    // used, so only the replicated subscriptions can say whose client it is.
    let mut alice = client(&cluster.client_addr(1), Some(("alice", "alice-secret"))).await;
    let mallory = client(&cluster.client_addr(2), Some(("mallory", "mallory-secret"))).await;
    let sync = |action: LiteSubscriptionAction, lites: &[&str]| SyncLiteSubscriptionRequest {
        action: action as i32,
        topic: resource("Chats"),
        group: resource("chatters"),
        lite_topic_set: lites.iter().map(|l| l.to_string()).collect(),
        version: None,
        offset_option: None,
    };
    let subscribe = sync(LiteSubscriptionAction::CompleteAdd, &["room-1"]);
    let r = retry(Duration::from_secs(10), || {
        let (mut alice, subscribe) = (alice.clone(), subscribe.clone());
        async move {
            let r = alice.sync_lite_subscription(as_client(subscribe, "alice-1")).await.map_err(|e| e.to_string())?;
            let code = status_of(&r.into_inner().status);
            if code == Code::Ok as i32 { Ok(code) } else { Err(format!("answered {code}")) }
        }
    })
    .await;
    assert_eq!(r, Code::Ok as i32);
    let mut m = message("Chats", "chat-1", MessageType::Lite);
    m.system_properties.as_mut().unwrap().lite_topic = Some("room-1".into());
    let r = alice.send_message(SendMessageRequest { messages: vec![m] }).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32, "{r:?}");
    // Node 2 knows mallory (the users are replicated) before she tries anything.
    retry(Duration::from_secs(10), || {
        let mut m = mallory.clone();
        async move {
            let r =
                m.heartbeat(as_client(HeartbeatRequest::default(), "mallory-1")).await.map_err(|e| e.to_string())?;
            let code = status_of(&r.into_inner().status);
            if code == Code::Ok as i32 { Ok(()) } else { Err(format!("answered {code}")) }
        }
    })
    .await;

    let forbidden = Code::Forbidden as i32;
    let mut m = mallory.clone();
    for (what, action, lites) in [
        ("replacing alice's lite subscriptions", LiteSubscriptionAction::CompleteAdd, &["room-2"][..]),
        ("removing alice's lite topic", LiteSubscriptionAction::PartialRemove, &["room-1"][..]),
        ("dropping all of alice's lite subscriptions", LiteSubscriptionAction::CompleteRemove, &[][..]),
    ] {
        let r = m.sync_lite_subscription(as_client(sync(action, lites), "alice-1")).await.unwrap().into_inner();
        assert_eq!(status_of(&r.status), forbidden, "{what}");
    }
    let end = NotifyClientTerminationRequest { group: resource("chatters") };
    let r = m.notify_client_termination(as_client(end, "alice-1")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), forbidden, "ending alice's client");
    let receive = ReceiveMessageRequest {
        group: resource("chatters"),
        message_queue: Some(MessageQueue { topic: resource("Chats"), ..Default::default() }),
        batch_size: 1,
        invisible_duration: seconds(30),
        long_polling_timeout: seconds(5),
        ..Default::default()
    };
    let (mut code, mut stolen) = (0, 0);
    let mut frames = m.receive_message(as_client(receive.clone(), "alice-1")).await.unwrap().into_inner();
    while let Some(frame) = frames.next().await {
        match frame.unwrap().content {
            Some(Content::Status(s)) => code = s.code,
            Some(Content::Message(_)) => stolen += 1,
            _ => {}
        }
    }
    assert_eq!((code, stolen), (forbidden, 0), "receiving as alice's client");

    // Alice's client still has its lite subscription, and the message mallory could not take.
    let mut got = None;
    let mut frames = alice.receive_message(as_client(receive, "alice-1")).await.unwrap().into_inner();
    while let Some(frame) = frames.next().await {
        if let Some(Content::Message(m)) = frame.unwrap().content {
            got = m.system_properties.map(|p| p.message_id);
        }
    }
    assert_eq!(got.as_deref(), Some("chat-1"), "alice's client still has its lite subscription");
    // Alice herself may end her client through another node (node 3: on node 2 mallory's calls
    // bound the id to mallory, which that node alone goes by until the id idles out).
    let mut alice_3 = client(&cluster.client_addr(3), Some(("alice", "alice-secret"))).await;
    let end = NotifyClientTerminationRequest { group: resource("chatters") };
    let r = alice_3.notify_client_termination(as_client(end, "alice-1")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32);
}

/// A cluster with authentication and TLS, and a user allowed one topic and group.
async fn secured_cluster() -> Cluster {
    let cluster = Cluster::start(3, Options { auth: true, tls: true, ..Default::default() }).await;
    cluster.create_topic("Secure", 2, TopicKind::Normal).await;
    cluster.create_group("secure-readers", false, 16).await;
    create_user(&cluster, "app", "app-secret-1", false).await;
    grant(&cluster, "app", "Topic:Secure", &[Action::Pub, Action::Sub], Decision::Allow).await;
    grant(&cluster, "app", "Group:secure-readers", &[Action::Sub], Decision::Allow).await;
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_official_python_client_signs_over_tls_and_a_wrong_secret_is_refused() {
    let cluster = secured_cluster().await;
    let ca = cluster.tls_ca.clone().expect("a CA").display().to_string();
    let endpoint = cluster.client_addr(2);
    let run = move || {
        let args = [
            "--endpoints",
            &endpoint,
            "--topic",
            "Secure",
            "--group",
            "secure-readers",
            "--access-key",
            "app",
            "--secret-key",
            "app-secret-1",
            "--ca",
            &ca,
        ];
        rockraft_cluster_tests::run_python("auth_tls.py", &args)
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "auth_tls.py failed:\n{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_official_node_client_signs_over_tls_and_a_wrong_secret_is_refused() {
    let cluster = secured_cluster().await;
    let ca = cluster.tls_ca.clone().expect("a CA").display().to_string();
    let endpoint = cluster.client_addr(3);
    let run = move || {
        let args = [endpoint.as_str(), "Secure", "secure-readers", "app", "app-secret-1", &ca];
        rockraft_cluster_tests::run_node("auth_tls.js", &args)
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "auth_tls.js failed:\n{output}");
}

/// Runs one of the examples (the official Rust client; `scripts/smoke.sh` builds them) with the
/// user's credentials, over TLS verified against the test CA; returns whether it succeeded and
/// what it printed.
fn run_example(bin: &str, args: &[&str], secret: &str, ca: &std::path::Path) -> (bool, String) {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let path = target.join("debug").join(bin);
    assert!(path.exists(), "{} is missing: `cargo build -p rockraft-examples` (scripts/smoke.sh does)", path.display());
    let out = std::process::Command::new(path)
        .args(args)
        .env("ROCKRAFT_CLIENT_ACCESS_KEY", "app")
        .env("ROCKRAFT_CLIENT_SECRET_KEY", secret)
        .env("ROCKRAFT_CLIENT_TLS", "1")
        .env("SSL_CERT_FILE", ca)
        .output()
        .expect("run the example");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_official_rust_client_signs_over_tls_and_a_wrong_secret_is_refused() {
    let cluster = secured_cluster().await;
    let ca = cluster.tls_ca.clone().expect("a CA");
    let endpoint = cluster.client_addr(1);
    let (sent, output) = tokio::task::spawn_blocking({
        let (endpoint, ca) = (endpoint.clone(), ca.clone());
        move || run_example("produce", &[&endpoint, "Secure", "from-rust-over-tls"], "app-secret-1", &ca)
    })
    .await
    .unwrap();
    assert!(sent, "a signed send over TLS failed:\n{output}");
    let (received, output) = tokio::task::spawn_blocking({
        let (endpoint, ca) = (endpoint.clone(), ca.clone());
        move || run_example("consume", &[&endpoint, "Secure", "secure-readers", "1"], "app-secret-1", &ca)
    })
    .await
    .unwrap();
    assert!(received && output.contains("from-rust-over-tls"), "receiving over TLS failed:\n{output}");
    let (sent, output) = tokio::task::spawn_blocking({
        let (endpoint, ca) = (endpoint.clone(), ca.clone());
        move || run_example("produce", &[&endpoint, "Secure", "wrong"], "not-the-secret", &ca)
    })
    .await
    .unwrap();
    assert!(!sent, "a send with a wrong secret succeeded:\n{output}");
    assert!(
        output.contains("40100") || output.contains("Unauthorized") || output.contains("wrong signature"),
        "{output}"
    );
}

/// A receive of one message of `topic` as `group`, waiting up to `wait_secs` for it.
fn receive_one_request(group: &str, topic: &str, wait_secs: i64) -> ReceiveMessageRequest {
    ReceiveMessageRequest {
        group: resource(group),
        message_queue: Some(MessageQueue { topic: resource(topic), ..Default::default() }),
        batch_size: 1,
        invisible_duration: seconds(30),
        long_polling_timeout: seconds(wait_secs),
        ..Default::default()
    }
}

/// The first delivery of a receive, with its receipt handle.
async fn receive_one(c: &mut Client, group: &str, topic: &str) -> (String, String) {
    let mut stream = c.receive_message(receive_one_request(group, topic, 5)).await.unwrap().into_inner();
    while let Some(frame) = stream.next().await {
        if let Some(Content::Message(m)) = frame.unwrap().content {
            let sp = m.system_properties.unwrap();
            return (sp.message_id, sp.receipt_handle.expect("a receipt handle"));
        }
    }
    panic!("nothing delivered from {topic} to {group}");
}

async fn ack_code(c: &mut Client, group: &str, topic: &str, id: &str, handle: &str) -> i32 {
    let entries = vec![AckMessageEntry { message_id: id.into(), receipt_handle: handle.into(), lite_topic: None }];
    let req = AckMessageRequest { group: resource(group), topic: resource(topic), entries };
    let r = c.ack_message(req).await.unwrap().into_inner();
    r.entries.first().and_then(|e| e.status.as_ref()).map_or(status_of(&r.status), |s| s.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn guessed_altered_or_borrowed_handles_are_refused_and_survive_one_key_rotation() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Jobs", 1, TopicKind::Normal).await;
    cluster.create_topic("Deferred", 1, TopicKind::Delay).await;
    cluster.create_topic("Payments", 1, TopicKind::Transaction).await;
    cluster.create_group("workers", false, 16).await;
    cluster.create_group("thieves", false, 16).await;
    let mut c = client(&cluster.client_addr(2), None).await;
    let invalid = Code::InvalidReceiptHandle as i32;
    for id in ["job-1", "job-2", "job-3"] {
        let r = c.send_message(SendMessageRequest { messages: vec![message("Jobs", id, MessageType::Normal)] }).await;
        assert_eq!(status_of(&r.unwrap().into_inner().status), Code::Ok as i32);
    }

    // Receipt handles: sealed for their group and topic.
    let (id, handle) = receive_one(&mut c, "workers", "Jobs").await;
    let (inner, _) = handle.split_once('~').expect("a sealed handle");
    let parts: Vec<&str> = inner.split('.').collect();
    let next_offset = format!("{}.{}.{}.{}", parts[0], parts[1], parts[2].parse::<u64>().unwrap() + 1, parts[3]);
    let altered = handle.replacen(inner, &next_offset, 1);
    for forged in [inner.to_string(), altered, format!("{handle}0"), handle.replace('~', "~1")] {
        assert_eq!(ack_code(&mut c, "workers", "Jobs", &id, &forged).await, invalid, "{forged}");
    }
    assert_eq!(ack_code(&mut c, "thieves", "Jobs", &id, &handle).await, invalid, "another group's handle");
    // One rotation: the handle still works; the refused attempts changed nothing.
    cluster.admin(pb::RotateHandleKeyRequest {}).await;
    retry(Duration::from_secs(10), || {
        let (mut c, id, handle) = (c.clone(), id.clone(), handle.clone());
        async move {
            match ack_code(&mut c, "workers", "Jobs", &id, &handle).await {
                0 | 20000 => Ok(()),
                code => Err(format!("ack after one rotation answered {code}")),
            }
        }
    })
    .await;
    // Two rotations: a handle sealed before both no longer opens.
    let (id2, handle2) = receive_one(&mut c, "workers", "Jobs").await;
    cluster.admin(pb::RotateHandleKeyRequest {}).await;
    cluster.admin(pb::RotateHandleKeyRequest {}).await;
    cluster.wait_caught_up(2, Duration::from_secs(10)).await;
    assert_eq!(ack_code(&mut c, "workers", "Jobs", &id2, &handle2).await, invalid, "sealed two keys ago");

    // Transaction ids: sealed for their topic and message.
    let r =
        c.send_message(SendMessageRequest { messages: vec![message("Payments", "pay-1", MessageType::Transaction)] });
    let entry = r.await.unwrap().into_inner().entries.remove(0);
    let tx = entry.transaction_id.clone();
    assert!(tx.contains('~'), "a sealed transaction id: {tx}");
    let end = |transaction_id: String, message_id: &str| EndTransactionRequest {
        topic: resource("Payments"),
        message_id: message_id.into(),
        transaction_id,
        resolution: rockraft_proto::rocketmq::TransactionResolution::Commit as i32,
        ..Default::default()
    };
    let unsealed = tx.split_once('~').unwrap().0.to_string();
    for (forged, message_id) in [(unsealed, "pay-1"), (tx.clone(), "pay-2"), (format!("{tx}f"), "pay-1")] {
        let r = c.end_transaction(end(forged.clone(), message_id)).await.unwrap().into_inner();
        assert_eq!(status_of(&r.status), Code::InvalidTransactionId as i32, "{forged} for {message_id}");
    }
    let r = c.end_transaction(end(tx, "pay-1")).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32, "{r:?}");

    // Recall handles: sealed for their topic.
    let mut delayed = message("Deferred", "later-1", MessageType::Delay);
    let later = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap() + Duration::from_secs(600);
    delayed.system_properties.as_mut().unwrap().delivery_timestamp =
        Some(prost_types::Timestamp { seconds: later.as_secs() as i64, nanos: 0 });
    let entry =
        c.send_message(SendMessageRequest { messages: vec![delayed] }).await.unwrap().into_inner().entries.remove(0);
    let recall = entry.recall_handle;
    assert!(recall.contains('~'), "a sealed recall handle: {recall}");
    let unsealed = recall.split_once('~').unwrap().0.to_string();
    for forged in [unsealed, format!("{recall}0")] {
        let r = c.recall_message(RecallMessageRequest { topic: resource("Deferred"), recall_handle: forged.clone() });
        let code = status_of(&r.await.unwrap().into_inner().status);
        assert_eq!(code, Code::BadRequest as i32, "{forged}");
    }
    let r = c.recall_message(RecallMessageRequest { topic: resource("Jobs"), recall_handle: recall.clone() });
    assert_ne!(status_of(&r.await.unwrap().into_inner().status), Code::Ok as i32, "another topic's recall handle");
    let r = c.recall_message(RecallMessageRequest { topic: resource("Deferred"), recall_handle: recall });
    assert_eq!(status_of(&r.await.unwrap().into_inner().status), Code::Ok as i32);
}

/// The first frame's status of a receive, and the message it delivered if any.
async fn receive_status(c: &mut Client, group: &str, topic: &str) -> (i32, Option<Message>) {
    let mut stream = c.receive_message(receive_one_request(group, topic, 2)).await.unwrap().into_inner();
    let (mut code, mut delivered) = (-1, None);
    while let Some(frame) = stream.next().await {
        match frame.unwrap().content {
            Some(Content::Status(s)) if code == -1 => code = s.code,
            Some(Content::Message(m)) => delivered = Some(m),
            _ => {}
        }
    }
    (code, delivered)
}

/// A cluster whose first handle key is held back: until a key is in place no node hands out a
/// handle (receives and sends that would carry one are refused with a status the clients retry,
/// before anything is popped or stored) nor accepts one; once it is, every handle is sealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_handle_is_handed_out_or_accepted_before_the_first_handle_key() {
    let failpoints = Some("no_first_handle_key=return".to_string());
    let cluster = Cluster::start(3, Options { failpoints, ..Default::default() }).await;
    cluster.create_topic("Jobs", 1, TopicKind::Normal).await;
    cluster.create_topic("Payments", 1, TopicKind::Transaction).await;
    cluster.create_group("workers", false, 16).await;
    let retriable = Code::HaNotAvailable as i32;
    let mut clients = Vec::new();
    for id in 1..=3 {
        clients.push(client(&cluster.client_addr(id), None).await);
    }
    let c = &mut clients[0];
    let sent = c.send_message(SendMessageRequest { messages: vec![message("Jobs", "job-1", MessageType::Normal)] });
    assert_eq!(status_of(&sent.await.unwrap().into_inner().status), Code::Ok as i32, "a send that needs no handle");
    for c in &mut clients {
        assert_eq!(receive_status(c, "workers", "Jobs").await.0, retriable, "a receive without a key");
        let half = SendMessageRequest { messages: vec![message("Payments", "pay-1", MessageType::Transaction)] };
        let r = c.send_message(half).await.unwrap().into_inner();
        assert_eq!(status_of(&r.status), retriable, "a transactional send without a key: {r:?}");
        assert_eq!(ack_code(c, "workers", "Jobs", "job-1", "r1.0.0.1").await, retriable, "an unsealed handle");
    }
    let halves =
        cluster.admin(pb::ListHeldRequest { kind: "HALF".into(), all: true, limit: 100, ..Default::default() }).await;
    assert!(!format!("{halves:?}").contains("pay-1"), "a refused send stored its half: {halves:?}");

    cluster.admin(pb::RotateHandleKeyRequest {}).await;
    for id in 1..=3 {
        cluster.wait_caught_up(id, Duration::from_secs(10)).await;
    }
    let (code, delivered) = receive_status(&mut clients[1], "workers", "Jobs").await;
    let m = delivered.unwrap_or_else(|| panic!("nothing delivered once the key is in place ({code})"));
    let sp = m.system_properties.unwrap();
    assert_eq!(sp.delivery_attempt, Some(1), "the refused receives popped nothing");
    let handle = sp.receipt_handle.unwrap();
    assert!(handle.contains('~'), "a sealed handle: {handle}");
    // Acked on another node than the one that handed it out.
    assert_eq!(ack_code(&mut clients[2], "workers", "Jobs", "job-1", &handle).await, Code::Ok as i32);
    let half = SendMessageRequest { messages: vec![message("Payments", "pay-1", MessageType::Transaction)] };
    let entry = clients[0].send_message(half).await.unwrap().into_inner().entries.remove(0);
    assert!(entry.transaction_id.contains('~'), "a sealed transaction id: {entry:?}");
}

/// Two users send the same message id: the second is not taken for a retry of the first, so it
/// is never handed the first's transaction id or recall handle; each user resolves or recalls
/// only its own message.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_id_another_user_sent_gets_none_of_that_user_s_handles() {
    let cluster = Cluster::start(3, Options { auth: true, ..Default::default() }).await;
    cluster.create_topic("Payments", 1, TopicKind::Transaction).await;
    cluster.create_topic("Deferred", 1, TopicKind::Delay).await;
    for user in ["alice", "mallory"] {
        create_user(&cluster, user, &format!("{user}-secret"), false).await;
        grant(&cluster, user, "Topic:*", &[Action::Pub], Decision::Allow).await;
    }
    let addr = cluster.client_addr(2);
    let mut alice = client(&addr, Some(("alice", "alice-secret"))).await;
    let mut mallory = client(&addr, Some(("mallory", "mallory-secret"))).await;

    let half = || SendMessageRequest { messages: vec![message("Payments", "pay-1", MessageType::Transaction)] };
    let alices = alice.send_message(half()).await.unwrap().into_inner().entries.remove(0);
    let mallorys = mallory.send_message(half()).await.unwrap().into_inner().entries.remove(0);
    assert_eq!(status_of(&mallorys.status), Code::Ok as i32, "{mallorys:?}");
    assert_ne!(alices.transaction_id, mallorys.transaction_id, "mallory was handed alice's transaction");
    let end =
        |transaction_id: &str, resolution: rockraft_proto::rocketmq::TransactionResolution| EndTransactionRequest {
            topic: resource("Payments"),
            message_id: "pay-1".into(),
            transaction_id: transaction_id.into(),
            resolution: resolution as i32,
            ..Default::default()
        };
    use rockraft_proto::rocketmq::TransactionResolution::{Commit, Rollback};
    let r = mallory.end_transaction(end(&mallorys.transaction_id, Commit)).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32, "{r:?}");
    let r = alice.end_transaction(end(&alices.transaction_id, Rollback)).await.unwrap().into_inner();
    assert_eq!(status_of(&r.status), Code::Ok as i32, "alice's half is still hers to roll back: {r:?}");

    let delayed = || {
        let mut m = message("Deferred", "later-1", MessageType::Delay);
        let later =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap() + Duration::from_secs(600);
        m.system_properties.as_mut().unwrap().delivery_timestamp =
            Some(prost_types::Timestamp { seconds: later.as_secs() as i64, nanos: 0 });
        SendMessageRequest { messages: vec![m] }
    };
    let alices = alice.send_message(delayed()).await.unwrap().into_inner().entries.remove(0).recall_handle;
    let mallorys = mallory.send_message(delayed()).await.unwrap().into_inner().entries.remove(0).recall_handle;
    assert_ne!(alices, mallorys, "mallory was handed alice's recall handle");
    for (c, handle) in [(&mut mallory, mallorys), (&mut alice, alices)] {
        let r = c.recall_message(RecallMessageRequest { topic: resource("Deferred"), recall_handle: handle });
        let r = r.await.unwrap().into_inner();
        assert_eq!(status_of(&r.status), Code::Ok as i32, "each recalls its own message: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_typed_admin_api_serves_generated_clients_admins_only_with_paged_listings() {
    use rockraft_proto::rockraft as pb;
    use rockraft_proto::rockraft::admin_service_client::AdminServiceClient;
    let cluster = Cluster::start(3, Options { auth: true, ..Default::default() }).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.admin_addr(2)))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let admin = cluster.admin.clone().expect("an admin credential");
    // A generated client signs operator requests through the layer the CLI uses.
    use rockraft::auth::operator::SignOperator;
    let signed = |key: &str, secret: &str| Some((key.to_string(), rockraft::broker::access::Secret::new(secret)));
    let mut c = AdminServiceClient::new(SignOperator::new(
        channel.clone(),
        Some((admin.access_key.clone(), admin.secret.clone())),
    ));
    for i in 0..5 {
        let req = pb::CreateTopicRequest {
            name: format!("Paged{i}"),
            queues: 2,
            kind: "FIFO".into(),
            lite_ttl_minutes: None,
        };
        c.create_topic(req).await.expect("created");
    }
    let bad = c
        .create_topic(pb::CreateTopicRequest {
            name: "Odd".into(),
            queues: 2,
            kind: "QUEUE".into(),
            lite_ttl_minutes: None,
        })
        .await;
    assert_eq!(bad.expect_err("an unknown kind").code(), tonic::Code::InvalidArgument);
    let mut names = Vec::new();
    let mut after = String::new();
    loop {
        let page = c.list_topics(pb::ListTopicsRequest { after, limit: 2 }).await.expect("listed").into_inner();
        assert!(page.topics.len() <= 2);
        names.extend(page.topics.iter().map(|t| (t.name.clone(), t.kind.clone())));
        if page.next_after.is_empty() {
            break;
        }
        after = page.next_after;
    }
    let expected: Vec<(String, String)> = (0..5).map(|i| (format!("Paged{i}"), "FIFO".to_string())).collect();
    assert_eq!(names, expected);
    c.create_user(pb::CreateUserRequest {
        access_key: "typed".into(),
        secret_key: "typed-secret".into(),
        admin: false,
    })
    .await
    .expect("user created");
    let grant = pb::GrantRequest {
        access_key: "typed".into(),
        resource: "Topic:Paged*".into(),
        actions: vec!["PUB".into()],
        deny: false,
    };
    c.grant(grant).await.expect("granted");
    let wrong = pb::GrantRequest {
        access_key: "typed".into(),
        resource: "Topic:x".into(),
        actions: vec!["FLY".into()],
        deny: false,
    };
    assert_eq!(c.grant(wrong).await.expect_err("no such action").code(), tonic::Code::InvalidArgument);
    let users = c.list_users(pb::ListUsersRequest::default()).await.unwrap().into_inner();
    let typed = users.users.iter().find(|u| u.access_key == "typed").expect("listed");
    assert_eq!((typed.admin, typed.rules), (false, 1));
    assert!(!format!("{users:?}").contains("typed-secret"));
    let acl =
        c.list_acl(pb::ListAclRequest { access_key: "typed".into(), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(acl.rules.len(), 1);
    assert_eq!((acl.rules[0].actions.clone(), acl.rules[0].decision.as_str()), (vec!["PUB".to_string()], "ALLOW"));
    // The rules page too: every one once, a page of one at a time.
    for resource in ["Group:g1", "Topic:Other"] {
        let actions = vec!["SUB".into()];
        c.grant(pb::GrantRequest { access_key: "typed".into(), resource: resource.into(), actions, deny: false })
            .await
            .expect("granted");
    }
    let (mut resources, mut after) = (Vec::new(), String::new());
    loop {
        let asked = pb::ListAclRequest { access_key: "typed".into(), after, limit: 1 };
        let page = c.list_acl(asked).await.expect("listed").into_inner();
        assert!(page.rules.len() <= 1);
        resources.extend(page.rules.into_iter().map(|r| r.resource));
        if page.next_after.is_empty() {
            break;
        }
        after = page.next_after;
    }
    resources.sort();
    assert_eq!(resources, ["Group:g1", "Topic:Other", "Topic:Paged*"]);
    let dup = c
        .create_topic(pb::CreateTopicRequest {
            name: "Paged0".into(),
            queues: 3,
            kind: "FIFO".into(),
            lite_ttl_minutes: None,
        })
        .await;
    assert_eq!(dup.expect_err("exists with another configuration").code(), tonic::Code::AlreadyExists);
    let status = c.get_status(pb::GetStatusRequest::default()).await.unwrap().into_inner();
    assert_eq!(status.members.len(), cluster.nodes.len());
    // Unsigned and non-admin callers are refused on every typed method too.
    let mut anonymous = AdminServiceClient::new(SignOperator::new(channel.clone(), None));
    let e = anonymous.list_topics(pb::ListTopicsRequest::default()).await.expect_err("unsigned");
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let mut user = AdminServiceClient::new(SignOperator::new(channel.clone(), signed("typed", "typed-secret")));
    let e = user.delete_topic(pb::DeleteTopicRequest { name: "Paged0".into() }).await.expect_err("not an admin");
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let still = c.list_topics(pb::ListTopicsRequest::default()).await.unwrap().into_inner();
    assert_eq!(still.topics.len(), 5, "the refused delete changed nothing");
    // The official clients' signature (the date alone) opens no operator request, an admin's
    // included.
    let mut official = AdminServiceClient::with_interceptor(
        channel,
        Signer(Some((admin.access_key.clone(), admin.secret.expose().to_string()))),
    );
    let e = official.list_topics(pb::ListTopicsRequest::default()).await.expect_err("the official clients' signature");
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
}
