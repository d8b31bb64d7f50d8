//! The proxy endpoint at the wire level: exact RocketMQ status codes for bad input (and no state
//! change), retried sends deduplicated, graceful shutdown handing leadership over, and no peer
//! RPC on the client port.

use std::time::Duration;

use bytes::Bytes;
use rockraft::auth::member::SECRET_HEADER;
use rockraft::broker::TopicKind;
use rockraft::raft::GroupId;
use rockraft_cluster_tests::{Cluster, Options};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::{
    Code, Message, MessageType, QueryRouteRequest, Resource, SendMessageRequest, SendMessageResponse, SystemProperties,
};
use rockraft_proto::rockraft::admin_service_client::AdminServiceClient;
use rockraft_proto::rockraft::peer::read_index_result;
use rockraft_proto::rockraft::peer_service_client::PeerServiceClient;
use rockraft_proto::rockraft::raft_service_client::RaftServiceClient;
use rockraft_proto::rockraft::{
    GetSettingsRequest, RaftTransferLeaderRequest, ReadIndexRequest, VoteRequest, WriteRequest,
};
use tonic::transport::Channel;

async fn client(addr: &str) -> MessagingServiceClient<Channel> {
    MessagingServiceClient::connect(format!("http://{addr}")).await.expect("connect")
}

fn message(topic: &str, id: &str, body: Bytes, group: Option<&str>) -> Message {
    Message {
        topic: Some(Resource { resource_namespace: String::new(), name: topic.into() }),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: id.into(),
            message_group: group.map(String::from),
            message_type: if group.is_some() { MessageType::Fifo } else { MessageType::Normal } as i32,
            ..Default::default()
        }),
        body,
    }
}

async fn send(c: &mut MessagingServiceClient<Channel>, messages: Vec<Message>) -> SendMessageResponse {
    c.send_message(SendMessageRequest { messages }).await.expect("rpc").into_inner()
}

fn code(r: &SendMessageResponse) -> i32 {
    r.status.as_ref().map_or(-1, |s| s.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_gets_a_clear_status_and_changes_nothing() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Plain", 2, TopicKind::Normal).await;
    let mut c = client(&cluster.client_addr(2)).await;
    let body = || Bytes::from_static(b"hello");

    let r = send(&mut c, vec![message("Nope", "m1", body(), None)]).await;
    assert_eq!(code(&r), Code::TopicNotFound as i32);
    // The harness sets max_body_bytes = 512 KiB.
    let r = send(&mut c, vec![message("Plain", "m2", Bytes::from(vec![0u8; (512 << 10) + 1]), None)]).await;
    assert_eq!(code(&r), Code::MessageBodyTooLarge as i32);
    let r = send(&mut c, vec![message("Plain", "m3", body(), Some("group"))]).await;
    assert_eq!(code(&r), Code::MessagePropertyConflictWithType as i32);
    let mut no_props = message("Plain", "m4", body(), None);
    no_props.system_properties = None;
    assert_eq!(code(&send(&mut c, vec![no_props]).await), Code::BadRequest as i32);
    assert_eq!(code(&send(&mut c, vec![]).await), Code::BadRequest as i32);
    let mut no_topic = message("Plain", "m5", body(), None);
    no_topic.topic = None;
    assert_eq!(code(&send(&mut c, vec![no_topic]).await), Code::BadRequest as i32);
    let route = c.query_route(QueryRouteRequest { topic: None, endpoints: None }).await.unwrap().into_inner();
    assert_eq!(route.status.map(|s| s.code), Some(Code::BadRequest as i32));
    let route = c
        .query_route(QueryRouteRequest {
            topic: Some(Resource { resource_namespace: String::new(), name: "Nope".into() }),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(route.status.map(|s| s.code), Some(Code::TopicNotFound as i32));

    for q in 0..2 {
        for id in cluster.queue_holders("Plain", q).await {
            assert!(cluster.local_messages(id, "Plain", q).await.is_empty(), "node {id} stored rejected input");
        }
    }
    // And the endpoint still works.
    let r = send(&mut c, vec![message("Plain", "ok", body(), None)]).await;
    assert_eq!(code(&r), Code::Ok as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retried_send_returns_the_original_result_and_is_stored_once() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Once", 1, TopicKind::Normal).await;
    let mut via_1 = client(&cluster.client_addr(1)).await;
    let mut via_3 = client(&cluster.client_addr(3)).await;
    let first = send(&mut via_1, vec![message("Once", "A", Bytes::from_static(b"a"), None)]).await;
    send(&mut via_1, vec![message("Once", "B", Bytes::from_static(b"b"), None)]).await;
    // The client timed out and retries the same message id, through another node.
    let retry = send(&mut via_3, vec![message("Once", "A", Bytes::from_static(b"a"), None)]).await;
    assert_eq!(code(&retry), Code::Ok as i32);
    assert_eq!(retry.entries[0].offset, first.entries[0].offset);
    assert_eq!(retry.entries[0].message_id, "A");
    for id in cluster.queue_holders("Once", 0).await {
        cluster.wait_caught_up(id, Duration::from_secs(10)).await;
        let ids: Vec<String> = cluster.local_messages(id, "Once", 0).await.into_iter().map(|m| m.message_id).collect();
        assert_eq!(ids, vec!["A", "B"], "node {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_stopped_with_sigterm_hands_leadership_over_first() {
    let mut cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Handover", 1, TopicKind::Normal).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let other = (1..=3).find(|&id| id != leader).unwrap();
    let term_before = cluster.status(other).await.unwrap().term;
    cluster.stop(leader);
    // A handed-over leadership needs no election timeout: the next term has a leader at once.
    let status = cluster.status(other).await.unwrap();
    assert!(status.leader.is_some_and(|l| l != leader), "a new leader was named before the old one exited");
    assert!(status.term > term_before);
    let mut c = client(&cluster.client_addr(other)).await;
    let r = send(&mut c, vec![message("Handover", "x", Bytes::from_static(b"x"), None)]).await;
    assert_eq!(code(&r), Code::Ok as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_topic_is_usable_through_every_node_as_soon_as_it_is_created() {
    let cluster = Cluster::start(3, Options::default()).await;
    for round in 0..5 {
        let name = format!("Fresh{round}");
        cluster.create_topic(&name, 1, TopicKind::Normal).await;
        // No waiting: a follower that has not applied the creation yet catches up first.
        for id in 1..=3 {
            let mut c = client(&cluster.client_addr(id)).await;
            let topic = Some(Resource { resource_namespace: String::new(), name: name.clone() });
            let route = c.query_route(QueryRouteRequest { topic, endpoints: None }).await.unwrap().into_inner();
            assert_eq!(route.status.map(|s| s.code), Some(Code::Ok as i32), "node {id}, topic {name}");
        }
        cluster.create_topic(&format!("{name}Send"), 1, TopicKind::Normal).await;
        for id in 1..=3 {
            let mut c = client(&cluster.client_addr(id)).await;
            let sent =
                send(&mut c, vec![message(&format!("{name}Send"), &format!("m{id}"), Bytes::from_static(b"x"), None)])
                    .await;
            assert_eq!(code(&sent), Code::Ok as i32, "send through node {id}, topic {name}Send");
        }
    }
}

/// Messages of `size` bytes for queue 0, so a send of several is one batch, one log entry.
fn to_queue_0(topic: &str, prefix: &str, n: usize, size: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let mut m = message(topic, &format!("{prefix}{i}"), Bytes::from(vec![b'x'; size]), None);
            m.system_properties.as_mut().expect("set").queue_id = 0;
            m
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_larger_than_a_log_entry_is_payload_too_large_and_the_node_keeps_serving() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Big", 1, TopicKind::Normal).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    // Three bodies of 400 KiB: each within max_body_bytes, together more than a 1 MiB segment.
    for id in [leader, follower] {
        let mut c = client(&cluster.client_addr(id)).await;
        let r = send(&mut c, to_queue_0("Big", &format!("big-{id}-"), 3, 400 << 10)).await;
        assert_eq!(code(&r), Code::PayloadTooLarge as i32, "through node {id}: {:?}", r.status);
        assert!(r.entries.iter().all(|e| e.status.as_ref().map(|s| s.code) == Some(Code::PayloadTooLarge as i32)));
        let r = send(&mut c, to_queue_0("Big", &format!("small-{id}-"), 2, 1 << 10)).await;
        assert_eq!(code(&r), Code::Ok as i32, "through node {id} afterwards: {:?}", r.status);
    }
    for id in cluster.queue_holders("Big", 0).await {
        cluster.wait_caught_up(id, Duration::from_secs(10)).await;
        let stored: Vec<String> =
            cluster.local_messages(id, "Big", 0).await.into_iter().map(|m| m.message_id).collect();
        assert_eq!(stored.len(), 4, "node {id} stores only the small sends: {stored:?}");
        assert!(stored.iter().all(|m| m.starts_with("small-")), "node {id}: {stored:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn peer_rpcs_are_served_only_on_the_raft_port_and_only_to_members() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Peers", 1, TopicKind::Normal).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let connect = |addr: String| async move {
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("url")
            .connect()
            .await
            .expect("connect")
    };
    // A raw command: a send of one message to the topic, as a forwarded write would carry it.
    let stored = rockraft_proto::rockraft::StoredMessage { message_id: "forged".into(), ..Default::default() };
    let batch = rockraft_proto::rockraft::SendBatch {
        topic: "Peers".into(),
        messages: vec![prost::Message::encode_to_vec(&stored).into()],
        ..Default::default()
    };
    let command = rockraft::broker::Command::Send(batch).encode();
    for id in 1..=3 {
        let mut c = PeerServiceClient::new(connect(cluster.client_addr(id)).await);
        let read = c.read_index(ReadIndexRequest {}).await.map(drop).expect_err("no read index on the client port");
        assert_eq!(read.code(), tonic::Code::Unimplemented, "node {id}");
        let write =
            c.write(WriteRequest { command: command.clone() }).await.map(drop).expect_err("no raw writes there");
        assert_eq!(write.code(), tonic::Code::Unimplemented, "node {id}");
    }
    // The raft port refuses every call without the cluster secret, or with another one, before
    // looking at it: Raft, the peer calls and the operator requests members forward.
    for id in 1..=3 {
        let raft_addr = cluster.nodes.iter().find(|n| n.id == id).expect("node").raft_addr.clone();
        for secret in [None, Some("not-the-secret-of-this-cluster")] {
            let channel = connect(raft_addr.clone()).await;
            let with = |mut r: tonic::Request<()>| {
                if let Some(s) = secret {
                    r.metadata_mut().insert(SECRET_HEADER, s.parse().expect("header"));
                }
                Ok(r)
            };
            let mut peer = PeerServiceClient::with_interceptor(channel.clone(), with);
            let refused = [
                peer.write(WriteRequest { command: command.clone() }).await.map(drop),
                peer.read_index(ReadIndexRequest {}).await.map(drop),
                RaftServiceClient::with_interceptor(channel.clone(), with).vote(VoteRequest::default()).await.map(drop),
                RaftServiceClient::with_interceptor(channel.clone(), with)
                    .transfer_leader(RaftTransferLeaderRequest::default())
                    .await
                    .map(drop),
                AdminServiceClient::with_interceptor(channel, with)
                    .delete_topic(rockraft_proto::rockraft::DeleteTopicRequest { name: "Peers".into() })
                    .await
                    .map(drop),
            ];
            for (rpc, r) in ["Write", "ReadIndex", "Vote", "TransferLeader", "Admin"].iter().zip(refused) {
                let status = r.expect_err("refused");
                assert_eq!(status.code(), tonic::Code::Unauthenticated, "node {id}, {rpc}, secret {secret:?}");
            }
        }
    }
    // Nothing of that reached the state: the topic is there, with no message in it.
    assert_eq!(cluster.wait_for_leader(Duration::from_secs(10)).await, leader, "no leader was moved");
    for id in cluster.queue_holders("Peers", 0).await {
        cluster.wait_caught_up(id, Duration::from_secs(10)).await;
        assert!(cluster.local_messages(id, "Peers", 0).await.is_empty(), "node {id} stored a forged message");
    }
    let listed = cluster.admin(rockraft_proto::rockraft::ListTopicsRequest { after: String::new(), limit: 1000 }).await;
    assert!(listed.topics.iter().any(|t| t.name == "Peers"), "the topic was deleted");
    // A member's call, secret attached, is served: the leader answers its read index.
    let raft_addr = cluster.nodes.iter().find(|n| n.id == leader).expect("leader").raft_addr.clone();
    let secret = cluster.secret.clone();
    let member = move |mut r: tonic::Request<()>| {
        r.metadata_mut().insert(SECRET_HEADER, secret.parse().expect("header"));
        Ok(r)
    };
    let mut c = PeerServiceClient::with_interceptor(connect(raft_addr.clone()).await, member.clone());
    // It names the group it asks about; a call that names none, or a group the node does not run,
    // is refused.
    let unnamed = c.read_index(ReadIndexRequest {}).await.expect_err("no group named");
    assert_eq!(unnamed.code(), tonic::Code::InvalidArgument, "{unnamed:?}");
    let unknown = c.read_index(GroupId(9).address(ReadIndexRequest {})).await.expect_err("a group not run");
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    let reply = c.read_index(GroupId::FIRST.address(ReadIndexRequest {})).await.expect("served to a member");
    let index = reply.into_inner().result;
    assert!(matches!(index, Some(read_index_result::Result::Ok(i)) if i > 0), "the leader's read index: {index:?}");
    // An operator's request only the leader answers crosses the network once: a follower's admin
    // listener passes it on to the leader; a follower's raft port, where members pass such
    // requests on, refuses it (the operator asks again) rather than passing it on a second time.
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    let settings = cluster.call(&cluster.admin_addr(follower), GetSettingsRequest {}).await;
    assert!(settings.is_ok(), "passed on to the leader and answered: {settings:?}");
    let follower_raft = cluster.nodes.iter().find(|n| n.id == follower).expect("follower").raft_addr.clone();
    let mut admin = AdminServiceClient::with_interceptor(connect(follower_raft).await, member);
    let again = admin.get_settings(GetSettingsRequest {}).await.expect_err("not passed on a second time");
    assert_eq!(again.code(), tonic::Code::Unavailable, "{again:?}");
}
