//! What one client may hold of a node, each limit hit: the longest long poll, long polls per
//! client and per node, entries per AckMessage, and HTTP/2 streams per connection. Each is
//! refused with a status the official clients act on (or, for streams, queued by the client), and
//! the node keeps serving.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::receive_message_response::Content;
use rockraft_proto::rocketmq::{
    AckMessageEntry, AckMessageRequest, Code, HeartbeatRequest, MessageQueue, ReceiveMessageRequest, Resource,
};
use tonic::transport::Channel;

fn resource(name: &str) -> Option<Resource> {
    Some(Resource { resource_namespace: String::new(), name: name.into() })
}

async fn channel(addr: &str) -> Channel {
    Channel::from_shared(format!("http://{addr}")).expect("url").connect().await.expect("connect")
}

/// A receive on an empty topic by `client`, waiting up to `poll_secs`: the code it ends with.
async fn receive(channel: Channel, client: &str, poll_secs: i64) -> i32 {
    receive_as(channel, None, client, poll_secs).await
}

/// `receive`, signed as `user` (whose secret is `<user>-secret`) if given.
async fn receive_as(channel: Channel, user: Option<&str>, client: &str, poll_secs: i64) -> i32 {
    let mut c = MessagingServiceClient::new(channel);
    let mut req = tonic::Request::new(ReceiveMessageRequest {
        group: resource("pollers"),
        message_queue: Some(MessageQueue { topic: resource("Quiet"), ..Default::default() }),
        batch_size: 1,
        invisible_duration: Some(prost_types::Duration { seconds: 30, nanos: 0 }),
        long_polling_timeout: Some(prost_types::Duration { seconds: poll_secs, nanos: 0 }),
        ..Default::default()
    });
    req.metadata_mut().insert("x-mq-client-id", client.parse().expect("ascii"));
    if let Some(user) = user {
        let secret = format!("{user}-secret");
        let (date_time, header) = rockraft::auth::signature::sign(user, &secret, time::OffsetDateTime::now_utc());
        req.metadata_mut().insert("x-mq-date-time", date_time.parse().expect("ascii"));
        req.metadata_mut().insert("authorization", header.parse().expect("ascii"));
    }
    let mut stream = c.receive_message(req).await.expect("rpc").into_inner();
    match stream.next().await.expect("a frame").expect("frame").content {
        Some(Content::Status(s)) => s.code,
        other => panic!("a receive starts with its status: {other:?}"),
    }
}

/// Receives by `clients`, all at once, each waiting up to 4 s (so all overlap): the codes they
/// ended with, sorted.
async fn all_at_once(addr: &str, clients: &[&'static str]) -> Vec<i32> {
    let clients: Vec<_> = clients.iter().map(|c| (None, *c)).collect();
    all_at_once_as(addr, &clients).await
}

/// `all_at_once`, each receive signed as its user (None: unsigned).
async fn all_at_once_as(addr: &str, clients: &[(Option<&'static str>, &'static str)]) -> Vec<i32> {
    let polls: Vec<_> = clients
        .iter()
        .map(|&(user, client)| {
            let addr = addr.to_string();
            tokio::spawn(async move { receive_as(channel(&addr).await, user, client, 4).await })
        })
        .collect();
    let mut codes = Vec::new();
    for p in polls {
        codes.push(p.await.unwrap());
    }
    codes.sort_unstable();
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_limit_on_what_a_client_holds_is_enforced_and_the_node_keeps_serving() {
    let limits = "max_streams_per_connection = 3\nmax_long_polls = 4\nmax_long_polls_per_client = 2\n\
                  max_long_poll_secs = 5\nmax_ack_entries = 8\n"
        .to_string();
    let cluster = Cluster::start(3, Options { limits, ..Default::default() }).await;
    cluster.create_topic("Quiet", 1, TopicKind::Normal).await;
    cluster.create_group("pollers", false, 16).await;
    let addr = cluster.client_addr(2);

    // The longest poll.
    assert_eq!(receive(channel(&addr).await, "a", 6).await, Code::IllegalPollingTime as i32);

    // Long polls per client, then per node: of polls that overlap, exactly those over the limit
    // are refused, whichever arrives first; the rest are answered as usual, and slots come back
    // when polls end.
    let (waited, refused) = (Code::MessageNotFound as i32, Code::TooManyRequests as i32);
    assert_eq!(all_at_once(&addr, &["x", "x", "x"]).await, vec![waited, waited, refused], "a third poll of one client");
    assert_eq!(
        all_at_once(&addr, &["a", "b", "c", "d", "e"]).await,
        vec![waited; 4].into_iter().chain([refused]).collect::<Vec<_>>(),
        "the node's fifth poll"
    );
    assert_eq!(receive(channel(&addr).await, "x", 1).await, waited, "slots came back");

    // Entries per AckMessage.
    let mut c = MessagingServiceClient::new(channel(&addr).await);
    let entries = (0..9)
        .map(|i| AckMessageEntry { message_id: format!("m{i}"), receipt_handle: "r1.0.0.0".into(), lite_topic: None })
        .collect();
    let ack = AckMessageRequest { group: resource("pollers"), topic: resource("Quiet"), entries };
    let r = c.ack_message(ack).await.unwrap().into_inner();
    assert_eq!(r.status.map(|s| s.code), Some(Code::BadRequest as i32));

    // HTTP/2 streams per connection: with three polls open on one connection, a heartbeat on it
    // waits for one of them to end.
    let shared = channel(&addr).await;
    let ended = Arc::new(AtomicUsize::new(0));
    let polls: Vec<_> = ["s1", "s2", "s3"]
        .into_iter()
        .map(|client| {
            let (shared, ended) = (shared.clone(), Arc::clone(&ended));
            tokio::spawn(async move {
                let code = receive(shared, client, 2).await;
                ended.fetch_add(1, Ordering::SeqCst);
                code
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut hb = MessagingServiceClient::new(shared.clone());
    let r = hb.heartbeat(HeartbeatRequest { group: None, client_type: 1 }).await.unwrap().into_inner();
    assert_eq!(r.status.map(|s| s.code), Some(Code::Ok as i32));
    assert!(ended.load(Ordering::SeqCst) >= 1, "the heartbeat got a fourth stream while three polls were open");
    for p in polls {
        assert_eq!(p.await.unwrap(), Code::MessageNotFound as i32);
    }
    // A fresh connection is served at once.
    let mut other = MessagingServiceClient::new(channel(&addr).await);
    let r = other.heartbeat(HeartbeatRequest { group: None, client_type: 1 }).await.unwrap().into_inner();
    assert_eq!(r.status.map(|s| s.code), Some(Code::Ok as i32));
}

/// With authentication on, long polls count by the signed-in user and the client id bound to it:
/// one user's clients share a per-user limit whatever ids they make up, and an id bound to one
/// user is refused to another rather than using up its owner's slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_auth_long_polls_are_bounded_per_user_and_nobody_uses_up_another_user_s_client() {
    use rockraft_proto::rockraft as pb;
    let limits = "max_long_polls = 100\nmax_long_polls_per_client = 2\nmax_long_polls_per_user = 3\n".to_string();
    let cluster = Cluster::start(3, Options { auth: true, limits, ..Default::default() }).await;
    cluster.create_topic("Quiet", 1, TopicKind::Normal).await;
    cluster.create_group("pollers", false, 16).await;
    for user in ["flood", "victim"] {
        let secret_key = format!("{user}-secret");
        cluster.admin(pb::CreateUserRequest { access_key: user.into(), secret_key, admin: false }).await;
        for resource in ["Topic:Quiet", "Group:pollers"] {
            let (access_key, resource) = (user.into(), resource.into());
            let grant = pb::GrantRequest { access_key, resource, actions: vec!["SUB".into()], deny: false };
            cluster.admin(grant).await;
        }
    }
    let addr = cluster.client_addr(2);
    let (waited, refused, forbidden) =
        (Code::MessageNotFound as i32, Code::TooManyRequests as i32, Code::Forbidden as i32);

    // Four made-up ids of one user: the fourth poll is over the user's limit.
    let flood = [(Some("flood"), "f1"), (Some("flood"), "f2"), (Some("flood"), "f3"), (Some("flood"), "f4")];
    assert_eq!(all_at_once_as(&addr, &flood).await, vec![waited, waited, waited, refused]);

    // The victim's client id is its own: the flooder naming it is refused, and the victim still
    // gets both of its client's slots.
    assert_eq!(receive_as(channel(&addr).await, Some("victim"), "v1", 1).await, waited);
    let mixed = [
        (Some("victim"), "v1"),
        (Some("victim"), "v1"),
        (Some("flood"), "v1"),
        (Some("flood"), "v1"),
        (Some("flood"), "v1"),
    ];
    assert_eq!(all_at_once_as(&addr, &mixed).await, vec![forbidden, forbidden, forbidden, waited, waited]);
}
