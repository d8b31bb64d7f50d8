//! RocketMQ 4.x Remoting clients, unchanged (PyPI `rocketmq` 0.4.4, rocketmq-client-cpp 1.2.3
//! inside), against a three-node cluster: each node is their name server and broker. Messages
//! sent over Remoting are read over gRPC and the other way round; a producer given a follower
//! survives the leader's SIGKILL without losing an acknowledged message.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rocketmq::model::message::MessageBuilder;
use rockraft::broker::TopicKind;
use rockraft::remoting::codes::*;
use rockraft::remoting::frame::{Form, Frame, FrameLimits, decode};
use rockraft_cluster_tests::clients::{consumer, producer, receive_all};
use rockraft_cluster_tests::{Cluster, Options, run_remoting_python};
use rockraft_proto::rockraft as pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn leader_of(cluster: &Cluster) -> u64 {
    cluster.wait_for_leader(Duration::from_secs(10)).await
}

async fn follower(cluster: &Cluster) -> u64 {
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    (1..=3).find(|id| *id != leader).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remoting_clients_produce_pull_and_push_through_a_follower_and_share_messages_with_grpc() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("TopicTest", 4, TopicKind::Normal).await;
    for group in ["CID_PUSH", "CID_PULL", "grpc-reader"] {
        cluster.create_group(group, false, 16).await;
    }
    let node = follower(&cluster).await;
    // Sent over gRPC first: the Remoting pull consumer must read them.
    let p = producer(&cluster.client_addr(node), "TopicTest").await;
    let mut grpc_sent = BTreeSet::new();
    for i in 0..6 {
        let m = MessageBuilder::builder()
            .set_topic("TopicTest")
            .set_tag("grpc")
            .set_keys(vec![format!("g{i}")])
            .set_body(format!("grpc-{i}").into_bytes())
            .build()
            .unwrap();
        grpc_sent.insert((p.send(m).await.expect("gRPC send").message_id().to_string(), format!("grpc-{i}")));
    }
    let namesrv = cluster.remoting_addr(node);
    let args = ["--namesrv", &namesrv, "--topic", "TopicTest", "--group", "CID_PUSH", "--pull-group", "CID_PULL"];
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let run = move || run_remoting_python("produce_consume.py", &args.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "produce_consume.py failed:\n{output}");
    let pulled: Vec<(&str, &str, &str)> = output
        .lines()
        .filter_map(|l| l.strip_prefix("PULLED "))
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            Some((parts.next()?, parts.next()?, parts.next()?))
        })
        .collect();
    for (id, body) in &grpc_sent {
        assert!(
            pulled.iter().any(|(pid, tag, pbody)| pid == id && *tag == "grpc" && pbody == body),
            "the gRPC message {id} ({body}) was not pulled over Remoting with its tag and body"
        );
    }
    // And the other way: every message the Remoting producer sent is received over gRPC, by id.
    let remoting_ids: BTreeSet<String> = pulled
        .iter()
        .filter(|(_, _, body)| body.starts_with("remoting-") || body.starts_with("oneway-"))
        .map(|(id, _, _)| id.to_string())
        .collect();
    assert_eq!(remoting_ids.len(), 25, "{output}");
    let c = consumer(&cluster.access_url(), "grpc-reader", "TopicTest").await;
    let received = receive_all(&c, "TopicTest", 31, Duration::from_secs(60)).await;
    let missing: Vec<_> = remoting_ids.difference(&received).collect();
    assert!(missing.is_empty(), "sent over Remoting, not received over gRPC: {missing:?}");
    // The push consumer's commits are its group's replicated position, which `group list` shows
    // on every node (with no commit the group would have no progress on the topic at all).
    cluster.wait_caught_up(leader_of(&cluster).await, Duration::from_secs(10)).await;
    for id in 1..=3 {
        let groups = cluster.groups(id).await;
        let push = groups.iter().find(|g| g.name == "CID_PUSH").expect("CID_PUSH listed");
        let progress = push.progress.iter().find(|p| p.topic == "TopicTest");
        assert!(progress.is_some_and(|p| p.lag < 31), "node {id}: {:?}", push.progress);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remoting_producer_given_a_follower_loses_no_acknowledged_message_when_the_leader_is_killed() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Failover", 4, TopicKind::Normal).await;
    cluster.create_group("CID_FO", false, 16).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let node = follower(&cluster).await;
    let namesrv = cluster.remoting_addr(node);
    let pid = cluster.pid(leader).expect("the leader runs").to_string();
    let run = move || {
        run_remoting_python(
            "failover.py",
            &["--namesrv", &namesrv, "--topic", "Failover", "--pull-group", "CID_FO", "--kill-pid", &pid],
        )
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    cluster.kill(leader);
    assert!(ok, "failover.py failed:\n{output}");
    let result = output.lines().find(|l| l.starts_with("RESULT")).unwrap_or("RESULT missing");
    eprintln!("Remoting producer through node {node}, leader {leader} SIGKILLed: {result}");
}

/// A Remoting connection that speaks the frames by hand: what no 4.x client here sends (SQL92
/// subscriptions, the binary header form, unknown codes, malformed frames, signed requests).
struct Conn {
    stream: tokio::net::TcpStream,
    opaque: i32,
}

const LIMITS: FrameLimits = FrameLimits { max_frame: 64 << 20, max_header: 1 << 20 };

impl Conn {
    async fn to(addr: &str) -> Conn {
        Conn { stream: tokio::net::TcpStream::connect(addr).await.expect("connect to the Remoting port"), opaque: 0 }
    }

    /// Sends `frame` (signed with `credential` when given) and reads its answer.
    async fn call(&mut self, mut frame: Frame, credential: Option<(&str, &str)>) -> Frame {
        self.opaque += 1;
        frame.opaque = self.opaque;
        if let Some((key, secret)) = credential {
            frame.ext.insert("AccessKey".into(), key.into());
            let signature = rockraft::remoting::signature::sign(&frame, secret);
            frame.ext.insert("Signature".into(), signature);
        }
        self.stream.write_all(&frame.encode()).await.expect("write a frame");
        // Requests of the node's own (transaction checks) may come first.
        loop {
            let answer = self.read().await.expect("an answer");
            if answer.is_response() && answer.opaque == self.opaque {
                return answer;
            }
        }
    }

    async fn read(&mut self) -> Option<Frame> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).await.ok()?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).await.ok()?;
        Some(decode(body.into(), LIMITS).expect("a readable answer"))
    }
}

fn request(code: i32) -> Frame {
    Frame::request(code, 0, BTreeMap::new())
}

fn send(topic: &str, queue: u32, properties: &str, body: &'static str) -> Frame {
    request(SEND_MESSAGE_V2)
        .with("a", "PID")
        .with("b", topic)
        .with("e", queue)
        .with("f", 0)
        .with("g", 1)
        .with("i", properties)
        .with("m", "false")
        .with_body(body)
}

fn pull(topic: &str, group: &str, queue: u32, offset: u64, sql: Option<&str>) -> Frame {
    let mut f = request(PULL_MESSAGE)
        .with("consumerGroup", group)
        .with("topic", topic)
        .with("queueId", queue)
        .with("queueOffset", offset)
        .with("maxMsgNums", 32)
        .with("sysFlag", 0)
        .with("commitOffset", 0)
        .with("suspendTimeoutMillis", 1000);
    if let Some(expression) = sql {
        f = f.with("sysFlag", 4).with("subscription", expression).with("expressionType", "SQL92");
    }
    f
}

/// The bodies of the messages in a pull answer (the stored-message layout, decoded in order).
fn bodies(mut b: bytes::Bytes) -> Vec<String> {
    use bytes::Buf;
    let mut out = Vec::new();
    while b.remaining() > 0 {
        let total = b.get_i32() as usize;
        let mut m = b.split_to(total - 4);
        m.advance(4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8);
        let len = m.get_i32() as usize;
        out.push(String::from_utf8(m.split_to(len).to_vec()).unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remoting_frames_of_every_form_are_answered_sql92_filters_pulls_and_commits_are_replicated() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Sql", 1, TopicKind::Normal).await;
    cluster.create_group("CID_SQL", false, 16).await;
    let (a, b) = (cluster.remoting_addr(1), cluster.remoting_addr(2));
    let mut one = Conn::to(&a).await;
    // Unknown codes are answered, and the connection goes on.
    let unknown = one.call(request(9999), None).await;
    assert_eq!(unknown.code, REQUEST_CODE_NOT_SUPPORTED);
    let missing = one.call(request(GET_ROUTEINFO_BY_TOPIC).with("topic", "Nope"), None).await;
    assert_eq!(missing.code, TOPIC_NOT_EXIST);
    // The binary header form is read, and answered in it.
    let binary = Frame { form: Form::Binary, ..request(GET_ROUTEINFO_BY_TOPIC).with("topic", "Sql") };
    let route = one.call(binary, None).await;
    assert_eq!((route.code, route.form), (SUCCESS, Form::Binary));
    let route: serde_json::Value = serde_json::from_slice(&route.body).unwrap();
    assert_eq!(route["brokerDatas"][0]["brokerAddrs"]["0"], serde_json::json!(a));
    // Sends with the short field names; an SQL92 pull through another node sees only matches.
    for (i, level) in [1, 5, 2, 9].iter().enumerate() {
        let props = format!("UNIQ_KEY\u{1}sql-{i}\u{2}level\u{1}{level}\u{2}");
        let body: &'static str = ["l1", "l5", "l2", "l9"][i];
        let answer = one.call(send("Sql", 0, &props, body), None).await;
        assert_eq!(answer.code, SUCCESS, "{}", answer.remark);
        assert_eq!(answer.field("queueOffset"), Some(i.to_string().as_str()));
        assert_eq!(answer.field("queueId"), Some("0"), "the queue the offset belongs to");
    }
    let mut two = Conn::to(&b).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let matched = loop {
        let answer = two.call(pull("Sql", "CID_SQL", 0, 0, Some("level > 3")), None).await;
        if answer.code == SUCCESS || tokio::time::Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(matched.code, SUCCESS, "{}", matched.remark);
    assert_eq!(bodies(matched.body.clone()), vec!["l5".to_string(), "l9".to_string()]);
    assert_eq!(matched.field("nextBeginOffset"), Some("4"));
    assert_eq!(matched.field("maxOffset"), Some("4"));
    let broken = two.call(pull("Sql", "CID_SQL", 0, 0, Some("level >")), None).await;
    assert_eq!(broken.code, SUBSCRIPTION_PARSE_FAILED);
    let past = two.call(pull("Sql", "CID_SQL", 0, 4, None), None).await;
    assert_eq!(past.code, PULL_NOT_FOUND, "nothing new, answered once the hold is over");
    let no_group = two.call(pull("Sql", "nobody", 0, 0, None), None).await;
    assert_eq!(no_group.code, SUBSCRIPTION_GROUP_NOT_EXIST);
    // A commit through node 1 is the group's replicated position, read through node 2.
    let commit = request(UPDATE_CONSUMER_OFFSET)
        .with("consumerGroup", "CID_SQL")
        .with("topic", "Sql")
        .with("queueId", 0)
        .with("commitOffset", 3);
    assert_eq!(one.call(commit, None).await.code, SUCCESS);
    let query = request(QUERY_CONSUMER_OFFSET).with("consumerGroup", "CID_SQL").with("topic", "Sql").with("queueId", 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = two.call(query.clone(), None).await;
        if answer.field("offset") == Some("3") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "node 2 answers {answer:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let max = two.call(request(GET_MAX_OFFSET).with("topic", "Sql").with("queueId", 0), None).await;
    assert_eq!(max.field("offset"), Some("4"));
    // A frame whose header claims more than it holds closes that connection, and nothing else.
    let mut bad = Conn::to(&a).await;
    bad.stream.write_all(&[0, 0, 0, 8, 0, 0, 0, 200, b'{', b'}', 0, 0]).await.unwrap();
    assert!(bad.read().await.is_none(), "the connection is closed");
    assert_eq!(one.call(request(CHECK_CLIENT_CONFIG), None).await.code, SUCCESS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_auth_on_remoting_requests_need_a_valid_signature_and_the_acl() {
    let cluster = Cluster::start(3, Options { auth: true, ..Default::default() }).await;
    cluster.create_topic("Signed", 1, TopicKind::Normal).await;
    cluster
        .admin(pb::CreateUserRequest { access_key: "pub".into(), secret_key: "pub-secret".into(), admin: false })
        .await;
    cluster
        .admin(pb::CreateUserRequest { access_key: "sub".into(), secret_key: "sub-secret".into(), admin: false })
        .await;
    let grant = pb::GrantRequest {
        access_key: "pub".into(),
        resource: "Topic:Signed".into(),
        actions: vec!["PUB".into()],
        deny: false,
    };
    cluster.admin(grant).await;
    let mut conn = Conn::to(&cluster.remoting_addr(2)).await;
    let message = || send("Signed", 0, "UNIQ_KEY\u{1}s1\u{2}", "signed");
    let unsigned = conn.call(message(), None).await;
    assert_eq!(unsigned.code, NO_PERMISSION, "unsigned");
    let wrong = conn.call(message(), Some(("pub", "not-the-secret"))).await;
    assert_eq!(wrong.code, NO_PERMISSION, "wrong secret");
    let not_allowed = conn.call(message(), Some(("sub", "sub-secret"))).await;
    assert_eq!(not_allowed.code, NO_PERMISSION, "no PUB right");
    let route = conn.call(request(GET_ROUTEINFO_BY_TOPIC).with("topic", "Signed"), None).await;
    assert_eq!(route.code, NO_PERMISSION, "routes need a signature too");
    let signed = conn.call(message(), Some(("pub", "pub-secret"))).await;
    assert_eq!(signed.code, SUCCESS, "{}", signed.remark);
    // Only the signed send was stored.
    let max = conn
        .call(request(GET_MAX_OFFSET).with("topic", "Signed").with("queueId", 0), Some(("pub", "pub-secret")))
        .await;
    assert_eq!((max.code, max.field("offset")), (NO_PERMISSION, None), "queue bounds need SUB");
    let admin = cluster.admin.clone().expect("admin credentials");
    let max = conn
        .call(
            request(GET_MAX_OFFSET).with("topic", "Signed").with("queueId", 0),
            Some((&admin.access_key, admin.secret.expose())),
        )
        .await;
    assert_eq!(max.field("offset"), Some("1"));
    // A member of a group may send back only messages of topics it consumes: a commit-log offset
    // of another topic's message is refused, and copies nothing into its retry topic.
    cluster.create_group("CID_SNOOP", false, 16).await;
    let grant = pb::GrantRequest {
        access_key: "sub".into(),
        resource: "Group:CID_SNOOP".into(),
        actions: vec!["SUB".into()],
        deny: false,
    };
    cluster.admin(grant).await;
    let admin_key = Some((admin.access_key.as_str(), admin.secret.expose()));
    let pulled = conn.call(pull("Signed", "CID_SNOOP", 0, 0, None), admin_key).await;
    assert_eq!(pulled.code, SUCCESS, "{}", pulled.remark);
    let physical = i64::from_be_bytes(pulled.body[28..36].try_into().unwrap());
    let back = |offset: i64| {
        request(CONSUMER_SEND_MSG_BACK).with("group", "CID_SNOOP").with("offset", offset).with("delayLevel", 0)
    };
    let snooped = conn.call(back(physical), Some(("sub", "sub-secret"))).await;
    assert_eq!(snooped.code, NO_PERMISSION, "{}", snooped.remark);
    let made_up = conn.call(back(physical + 1), admin_key).await;
    assert_eq!(made_up.code, SYSTEM_ERROR, "no message is queued at a made-up offset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remoting_delay_levels_wait_and_a_failing_consumer_retries_then_dead_letters() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Later", 2, TopicKind::Delay).await;
    cluster.create_topic("Work", 2, TopicKind::Normal).await;
    // Two deliveries, then the dead-letter topic; retries wait in the group's retry topic.
    cluster.create_group("CID_FAIL", false, 2).await;
    cluster.create_topic("%RETRY%CID_FAIL", 1, TopicKind::Delay).await;
    cluster.create_group("CID_DELAY_PULL", false, 16).await;
    cluster.create_group("CID_DLQ_READER", false, 16).await;
    let namesrv = cluster.remoting_addr(follower(&cluster).await);
    let run = move || {
        run_remoting_python(
            "delay_retry.py",
            &[
                "--namesrv",
                &namesrv,
                "--delay-topic",
                "Later",
                "--topic",
                "Work",
                "--group",
                "CID_FAIL",
                "--pull-group",
                "CID_DELAY_PULL",
                "--dlq-reader",
                "CID_DLQ_READER",
            ],
        )
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "delay_retry.py failed:\n{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remoting_transactions_commit_by_the_producer_and_roll_back_when_the_broker_asks() {
    // Open halves are checked after 1 s, then every 2 s.
    let broker = "transaction_recovery_secs = 1\ntransaction_check_interval_secs = 2\n".to_string();
    let cluster = Cluster::start(3, Options { broker, ..Default::default() }).await;
    cluster.create_topic("Pay", 1, TopicKind::Transaction).await;
    cluster.create_group("CID_PAY", false, 16).await;
    let mut conn = Conn::to(&cluster.remoting_addr(follower(&cluster).await)).await;
    let half =
        |id: &str, body: &'static str| send("Pay", 0, &format!("UNIQ_KEY\u{1}{id}\u{2}TRAN_MSG\u{1}true\u{2}"), body);
    let first = conn.call(half("tx-1", "committed"), None).await;
    assert_eq!(first.code, SUCCESS, "{}", first.remark);
    let transaction = first.field("transactionId").expect("a transaction id").to_string();
    let nothing = conn.call(pull("Pay", "CID_PAY", 0, 0, None), None).await;
    assert_eq!(nothing.code, PULL_NOT_FOUND, "a half is not delivered");
    let end = |id: &str, transaction: &str, resolution: i32, from_check: bool| {
        request(END_TRANSACTION)
            .with("producerGroup", "PID")
            .with("msgId", id)
            .with("transactionId", transaction)
            .with("commitOrRollback", resolution)
            .with("fromTransactionCheck", from_check)
            .with("tranStateTableOffset", 0)
            .with("commitLogOffset", 0)
    };
    let forged = conn.call(end("tx-1", "6e6f:forged", 8, false), None).await;
    assert_ne!(forged.code, SUCCESS, "a forged transaction id resolves nothing");
    assert_eq!(conn.call(end("tx-1", &transaction, 8, false), None).await.code, SUCCESS);
    // The second half is left open: the broker asks this connection, which rolls it back.
    assert_eq!(conn.call(half("tx-2", "rolled back"), None).await.code, SUCCESS);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let check = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let frame = tokio::time::timeout(left, conn.read()).await.expect("asked within 20 s").expect("a frame");
        if frame.code == CHECK_TRANSACTION_STATE && !frame.is_response() {
            break frame;
        }
    };
    assert_eq!(check.field("msgId"), Some("tx-2"));
    assert_eq!(bodies(check.body.clone()), vec!["rolled back".to_string()]);
    let answer = end("tx-2", check.field("transactionId").unwrap(), 12, true);
    conn.opaque += 1;
    let answer = Frame { opaque: conn.opaque, ..answer };
    conn.stream.write_all(&answer.encode()).await.unwrap();
    let resolved = loop {
        let f = conn.read().await.expect("an answer");
        if f.is_response() && f.opaque == conn.opaque {
            break f;
        }
    };
    assert_eq!(resolved.code, SUCCESS, "{}", resolved.remark);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let found = loop {
        let f = conn.call(pull("Pay", "CID_PAY", 0, 0, None), None).await;
        if f.code == SUCCESS || tokio::time::Instant::now() > deadline {
            break f;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(bodies(found.body.clone()), vec!["committed".to_string()], "only the committed half is delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_remoting_client_signs_with_its_credentials_and_is_refused_without_them() {
    let cluster = Cluster::start(3, Options { auth: true, ..Default::default() }).await;
    cluster.create_topic("Guarded", 2, TopicKind::Normal).await;
    cluster.create_group("CID_GUARD", false, 16).await;
    cluster
        .admin(pb::CreateUserRequest { access_key: "app".into(), secret_key: "app-secret".into(), admin: false })
        .await;
    // One rule per resource: a second grant on a resource replaces the first.
    for (resource, actions) in [("Topic:Guarded", vec!["PUB", "SUB"]), ("Group:CID_GUARD", vec!["SUB"])] {
        let grant = pb::GrantRequest {
            access_key: "app".into(),
            resource: resource.into(),
            actions: actions.into_iter().map(String::from).collect(),
            deny: false,
        };
        cluster.admin(grant).await;
    }
    let namesrv = cluster.remoting_addr(follower(&cluster).await);
    // Refused first: nothing they sent may be stored, which the signed pull then checks.
    for mode in ["wrong", "none", "signed"] {
        let namesrv = namesrv.clone();
        let run = move || {
            let args =
                ["--namesrv", &namesrv, "--topic", "Guarded", "--pull-group", "CID_GUARD", "--access-key", "app"];
            let mut args = args.to_vec();
            args.extend(["--secret-key", "app-secret", "--mode", mode]);
            run_remoting_python("auth.py", &args)
        };
        let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
        assert!(ok, "auth.py --mode {mode} failed:\n{output}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_consumers_of_one_group_on_different_nodes_share_the_queues() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Shared", 4, TopicKind::Normal).await;
    cluster.create_group("CID_SPLIT", false, 16).await;
    let (a, b) = (cluster.remoting_addr(1), cluster.remoting_addr(2));
    let run = move || {
        run_remoting_python(
            "group_split.py",
            &["--namesrv-a", &a, "--namesrv-b", &b, "--topic", "Shared", "--group", "CID_SPLIT"],
        )
    };
    let (ok, output) = tokio::task::spawn_blocking(run).await.unwrap();
    assert!(ok, "group_split.py failed:\n{output}");
}
