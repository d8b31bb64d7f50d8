//! Consumption at the wire level: every field a delivered message must carry, receipt handles
//! replaced by ChangeInvisibleDuration, and bad input (unknown group or topic, SQL filters,
//! illegal invisible times, stale or forged handles) answered with the exact RocketMQ code and no
//! change of state.

use bytes::Bytes;
use futures_util::StreamExt;
use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::receive_message_response::Content;
use rockraft_proto::rocketmq::{
    AckMessageEntry, AckMessageRequest, ChangeInvisibleDurationRequest, Code, DigestType, Encoding, FilterExpression,
    FilterType, ForwardMessageToDeadLetterQueueRequest, ForwardMessageToDeadLetterQueueResponse, Message, MessageQueue,
    MessageType, Permission, QueryAssignmentRequest, ReceiveMessageRequest, Resource, SendMessageRequest,
    SystemProperties,
};
use std::collections::BTreeMap;
use tonic::transport::Channel;

type Client = MessagingServiceClient<Channel>;

fn resource(name: &str) -> Option<Resource> {
    Some(Resource { resource_namespace: String::new(), name: name.into() })
}

fn seconds(s: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds: s, nanos: 0 })
}

fn receive_request(
    group: &str,
    topic: &str,
    filter: Option<FilterExpression>,
    invisible: i64,
) -> ReceiveMessageRequest {
    ReceiveMessageRequest {
        group: resource(group),
        message_queue: Some(MessageQueue { topic: resource(topic), ..Default::default() }),
        filter_expression: filter,
        batch_size: 8,
        invisible_duration: seconds(invisible),
        auto_renew: false,
        long_polling_timeout: seconds(2),
        attempt_id: None,
    }
}

/// The stream's frames, in order.
async fn receive(c: &mut Client, req: ReceiveMessageRequest) -> Vec<Content> {
    let mut stream = c.receive_message(req).await.expect("rpc").into_inner();
    let mut out = Vec::new();
    while let Some(frame) = stream.next().await {
        out.push(frame.expect("frame").content.expect("every frame has its oneof set"));
    }
    out
}

fn status_code(frames: &[Content]) -> i32 {
    match frames.first() {
        Some(Content::Status(s)) => s.code,
        other => panic!("a receive stream starts with a status, got {other:?}"),
    }
}

async fn ack(c: &mut Client, group: &str, topic: &str, handle: &str) -> i32 {
    let entries = vec![AckMessageEntry { message_id: "m".into(), receipt_handle: handle.into(), lite_topic: None }];
    let req = AckMessageRequest { group: resource(group), topic: resource(topic), entries };
    c.ack_message(req).await.expect("rpc").into_inner().status.expect("status").code
}

async fn change(c: &mut Client, group: &str, topic: &str, handle: &str, invisible: i64) -> (i32, String) {
    let req = ChangeInvisibleDurationRequest {
        group: resource(group),
        topic: resource(topic),
        receipt_handle: handle.into(),
        invisible_duration: seconds(invisible),
        message_id: "m".into(),
        lite_topic: None,
        suspend: None,
    };
    let r = c.change_invisible_duration(req).await.expect("rpc").into_inner();
    (r.status.expect("status").code, r.receipt_handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delivery_carries_every_field_and_its_receipt_handle_is_replaced_on_change() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Wire", 1, TopicKind::Normal).await;
    cluster.create_group("wire-readers", false, 16).await;
    let mut c = MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(2))).await.unwrap();
    let message = Message {
        topic: resource("Wire"),
        user_properties: BTreeMap::from([("color".to_string(), "blue".to_string())]).into_iter().collect(),
        system_properties: Some(SystemProperties {
            message_id: "wire-1".into(),
            tag: Some("T".into()),
            keys: vec!["k1".into()],
            born_host: "10.0.0.9".into(),
            born_timestamp: Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 0 }),
            message_type: MessageType::Normal as i32,
            body_encoding: Encoding::Identity as i32,
            ..Default::default()
        }),
        body: Bytes::from_static(b"hello"),
    };
    let sent = c.send_message(SendMessageRequest { messages: vec![message] }).await.unwrap().into_inner();
    assert_eq!(sent.status.unwrap().code, Code::Ok as i32);

    let frames = receive(&mut c, receive_request("wire-readers", "Wire", None, 30)).await;
    assert_eq!(status_code(&frames), Code::Ok as i32);
    assert!(matches!(frames.last(), Some(Content::DeliveryTimestamp(_))), "the stream ends with a delivery timestamp");
    let Some(Content::Message(m)) = frames.get(1) else { panic!("a message follows the status: {frames:?}") };
    assert_eq!(frames.len(), 3);
    let sp = m.system_properties.clone().expect("system properties");
    assert_eq!(m.topic.as_ref().map(|t| t.name.as_str()), Some("Wire"));
    assert_eq!(m.body, Bytes::from_static(b"hello"));
    assert_eq!(m.user_properties.get("color").map(String::as_str), Some("blue"));
    assert_eq!(
        (sp.message_id.as_str(), sp.tag.as_deref(), sp.keys.as_slice()),
        ("wire-1", Some("T"), &["k1".to_string()][..])
    );
    let digest = sp.body_digest.expect("body digest");
    assert_eq!((digest.r#type, digest.checksum.as_str()), (DigestType::Md5 as i32, "5D41402ABC4B2A76B9719D911017C592"));
    assert_eq!(sp.body_encoding, Encoding::Identity as i32);
    assert_eq!(sp.message_type, MessageType::Normal as i32);
    assert_eq!(sp.delivery_attempt, Some(1));
    assert_eq!((sp.queue_id, sp.queue_offset), (0, Some(0)));
    assert_eq!(sp.born_host, "10.0.0.9");
    assert_eq!(sp.born_timestamp.map(|t| t.seconds), Some(1_700_000_000));
    assert!(sp.store_timestamp.is_some_and(|t| t.seconds > 1_700_000_000));
    let first = sp.receipt_handle.expect("receipt handle");

    // A new invisible time comes with a new handle. The old one still names the delivery, for a
    // client whose answer was lost: the change retried with it answers OK with a current handle.
    let (code, second) = change(&mut c, "wire-readers", "Wire", &first, 30).await;
    assert_eq!(code, Code::Ok as i32);
    assert_ne!(second, first);
    let (code, again) = change(&mut c, "wire-readers", "Wire", &first, 30).await;
    assert_eq!(code, Code::Ok as i32, "a change retried after it took effect");
    assert_ne!(again, first);
    assert_eq!(ack(&mut c, "wire-readers", "Wire", &second).await, Code::Ok as i32);
    // An ack retried after it took effect is answered OK, and changes nothing.
    assert_eq!(ack(&mut c, "wire-readers", "Wire", &second).await, Code::Ok as i32, "retried ack");
    assert_eq!(ack(&mut c, "wire-readers", "Wire", &again).await, Code::Ok as i32, "retried ack, other handle");
    assert_eq!(
        change(&mut c, "wire-readers", "Wire", &second, 30).await.0,
        Code::InvalidReceiptHandle as i32,
        "an ended delivery has no invisible time to change"
    );
    let frames = receive(&mut c, receive_request("wire-readers", "Wire", None, 30)).await;
    assert_eq!(
        status_code(&frames),
        Code::MessageNotFound as i32,
        "an acked message is not delivered again: {frames:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_consumption_requests_get_a_clear_status_and_change_nothing() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Quiet", 1, TopicKind::Normal).await;
    cluster.create_group("quiet-readers", false, 16).await;
    let mut c = MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(3))).await.unwrap();
    let message = Message {
        topic: resource("Quiet"),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties { message_id: "q-1".into(), ..Default::default() }),
        body: Bytes::from_static(b"x"),
    };
    c.send_message(SendMessageRequest { messages: vec![message] }).await.unwrap();

    let code = |frames: Vec<Content>| {
        assert_eq!(frames.len(), 1, "an error is a single status frame");
        status_code(&frames)
    };
    let unknown_group = receive(&mut c, receive_request("nobody", "Quiet", None, 30)).await;
    assert_eq!(code(unknown_group), Code::ConsumerGroupNotFound as i32);
    let unknown_topic = receive(&mut c, receive_request("quiet-readers", "Nowhere", None, 30)).await;
    assert_eq!(code(unknown_topic), Code::TopicNotFound as i32);
    let sql = Some(FilterExpression { r#type: FilterType::Sql as i32, expression: "a >".into() });
    assert_eq!(
        code(receive(&mut c, receive_request("quiet-readers", "Quiet", sql, 30)).await),
        Code::IllegalFilterExpression as i32
    );
    let empty_tags = Some(FilterExpression { r#type: FilterType::Tag as i32, expression: " || ".into() });
    let r = receive(&mut c, receive_request("quiet-readers", "Quiet", empty_tags, 30)).await;
    assert_eq!(code(r), Code::IllegalFilterExpression as i32);
    assert_eq!(
        code(receive(&mut c, receive_request("quiet-readers", "Quiet", None, 0)).await),
        Code::IllegalInvisibleTime as i32
    );

    for forged in ["", "garbage", "r1.0.0.999999", "r1.5.0.3"] {
        assert_eq!(
            ack(&mut c, "quiet-readers", "Quiet", forged).await,
            Code::InvalidReceiptHandle as i32,
            "{forged:?}"
        );
        assert_eq!(change(&mut c, "quiet-readers", "Quiet", forged, 10).await.0, Code::InvalidReceiptHandle as i32);
    }
    assert_eq!(ack(&mut c, "nobody", "Quiet", "r1.0.0.1").await, Code::ConsumerGroupNotFound as i32);

    // Nothing was taken: the message is still there for the group, as its first delivery.
    let frames = receive(&mut c, receive_request("quiet-readers", "Quiet", None, 30)).await;
    assert_eq!(status_code(&frames), Code::Ok as i32);
    let Some(Content::Message(m)) = frames.get(1) else { panic!("the message: {frames:?}") };
    let sp = m.system_properties.clone().unwrap();
    assert_eq!((sp.message_id.as_str(), sp.delivery_attempt), ("q-1", Some(1)));
    let handle = sp.receipt_handle.unwrap();
    assert_eq!(change(&mut c, "quiet-readers", "Quiet", &handle, 0).await.0, Code::IllegalInvisibleTime as i32);
    assert_eq!(
        ack(&mut c, "quiet-readers", "Quiet", &handle).await,
        Code::Ok as i32,
        "the refused change left the handle valid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn auto_renewed_deliveries_stay_invisible_and_keep_their_receipt_handle() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Slow", 1, TopicKind::Normal).await;
    cluster.create_group("slow-workers", false, 16).await;
    let mut c = MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(1))).await.unwrap();
    let message = Message {
        topic: resource("Slow"),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties { message_id: "slow-1".into(), ..Default::default() }),
        body: Bytes::from_static(b"x"),
    };
    c.send_message(SendMessageRequest { messages: vec![message] }).await.unwrap();

    // A PushConsumer-style receive: auto_renew, from a client that identifies itself.
    let mut req = tonic::Request::new(ReceiveMessageRequest {
        auto_renew: true,
        ..receive_request("slow-workers", "Slow", None, 2)
    });
    req.metadata_mut().insert("x-mq-client-id", "slow-client-1".parse().unwrap());
    let mut stream = c.receive_message(req).await.unwrap().into_inner();
    let mut handle = None;
    while let Some(frame) = stream.next().await {
        if let Some(Content::Message(m)) = frame.unwrap().content {
            handle = m.system_properties.and_then(|p| p.receipt_handle);
        }
    }
    let handle = handle.expect("delivered");
    // Three times the invisible time later it has not been delivered again: it was renewed.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let frames = receive(&mut c, receive_request("slow-workers", "Slow", None, 2)).await;
    assert_eq!(status_code(&frames), Code::MessageNotFound as i32, "a renewed delivery stays invisible");
    assert_eq!(ack(&mut c, "slow-workers", "Slow", &handle).await, Code::Ok as i32, "the first handle still acks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn push_consumers_get_assignments_a_default_invisible_time_and_can_dead_letter_a_message() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Pushed", 3, TopicKind::Normal).await;
    cluster.create_group("pushers", true, 16).await;
    cluster.create_group("dead-readers", false, 16).await;
    let mut c = MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(2))).await.unwrap();

    let assignment = c
        .query_assignment(QueryAssignmentRequest {
            topic: resource("Pushed"),
            group: resource("pushers"),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(assignment.status.unwrap().code, Code::Ok as i32);
    assert_eq!(assignment.assignments.len(), 3, "one per queue");
    for a in &assignment.assignments {
        let q = a.message_queue.as_ref().unwrap();
        let endpoints = q.broker.as_ref().and_then(|b| b.endpoints.as_ref()).expect("broker endpoints");
        assert!(!endpoints.addresses.is_empty());
        assert_eq!(q.permission, Permission::ReadWrite as i32);
    }
    let unknown = c.query_assignment(QueryAssignmentRequest {
        topic: resource("Nope"),
        group: resource("pushers"),
        endpoints: None,
    });
    assert_eq!(unknown.await.unwrap().into_inner().status.unwrap().code, Code::TopicNotFound as i32);

    let message = Message {
        topic: resource("Pushed"),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties { message_id: "push-1".into(), ..Default::default() }),
        body: Bytes::from_static(b"cannot be processed"),
    };
    c.send_message(SendMessageRequest { messages: vec![message] }).await.unwrap();
    // A PushConsumer's receive names no invisible time.
    let frames = receive(
        &mut c,
        ReceiveMessageRequest { invisible_duration: None, ..receive_request("pushers", "Pushed", None, 0) },
    )
    .await;
    let Some(Content::Message(m)) = frames.get(1) else { panic!("a delivery: {frames:?}") };
    let sp = m.system_properties.clone().unwrap();
    assert_eq!(sp.invisible_duration.map(|d| d.seconds), Some(60), "the server's default invisible time");
    let handle = sp.receipt_handle.unwrap();

    let forward = |handle: String| ForwardMessageToDeadLetterQueueRequest {
        group: resource("pushers"),
        topic: resource("Pushed"),
        receipt_handle: handle,
        message_id: "push-1".into(),
        delivery_attempt: 1,
        max_delivery_attempts: 1,
        lite_topic: None,
    };
    let code = |r: ForwardMessageToDeadLetterQueueResponse| r.status.unwrap().code;
    assert_eq!(
        code(c.forward_message_to_dead_letter_queue(forward(handle.clone())).await.unwrap().into_inner()),
        Code::Ok as i32
    );
    assert_eq!(
        code(c.forward_message_to_dead_letter_queue(forward(handle.clone())).await.unwrap().into_inner()),
        Code::InvalidReceiptHandle as i32,
        "a delivery is dead-lettered once"
    );
    assert_eq!(
        change(&mut c, "pushers", "Pushed", &handle, 10).await.0,
        Code::InvalidReceiptHandle as i32,
        "forwarding ended the delivery"
    );
    assert_eq!(ack(&mut c, "pushers", "Pushed", &handle).await, Code::Ok as i32, "an ack of it changes nothing");
    let dead = receive(&mut c, receive_request("dead-readers", "%DLQ%pushers", None, 30)).await;
    let Some(Content::Message(d)) = dead.get(1) else { panic!("the dead letter: {dead:?}") };
    assert_eq!(
        (d.system_properties.as_ref().unwrap().message_id.as_str(), &d.body[..]),
        ("push-1", &b"cannot be processed"[..])
    );
    let again = receive(&mut c, receive_request("pushers", "Pushed", None, 30)).await;
    assert_eq!(status_code(&again), Code::MessageNotFound as i32, "not delivered again after dead-lettering");
}

/// The messages a receive delivered: (message id, receipt handle), in order.
fn delivered(frames: &[Content]) -> Vec<(String, String)> {
    frames
        .iter()
        .filter_map(|f| match f {
            Content::Message(m) => {
                let sp = m.system_properties.as_ref()?;
                Some((sp.message_id.clone(), sp.receipt_handle.clone()?))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receive_retried_with_its_attempt_id_gets_the_same_messages_and_handles_on_any_node() {
    let cluster = Cluster::start(3, Options::default()).await;
    cluster.create_topic("Orders", 1, TopicKind::Fifo).await;
    cluster.create_group("order-readers", true, 16).await;
    let mut clients = Vec::new();
    for id in 1..=3 {
        clients.push(MessagingServiceClient::connect(format!("http://{}", cluster.client_addr(id))).await.unwrap());
    }
    for n in 0..2 {
        let message = Message {
            topic: resource("Orders"),
            user_properties: Default::default(),
            system_properties: Some(SystemProperties {
                message_id: format!("order-{n}"),
                message_type: MessageType::Fifo as i32,
                message_group: Some("customer-7".into()),
                ..Default::default()
            }),
            body: Bytes::from(format!("step {n}")),
        };
        let sent = clients[0].send_message(SendMessageRequest { messages: vec![message] }).await.unwrap();
        assert_eq!(sent.into_inner().status.unwrap().code, Code::Ok as i32);
    }
    let request = |attempt: &str| ReceiveMessageRequest {
        batch_size: 2,
        attempt_id: Some(attempt.into()),
        ..receive_request("order-readers", "Orders", None, 30)
    };
    // One message of a message group at a time.
    let first = delivered(&receive(&mut clients[1], request("attempt-a")).await);
    let ids: Vec<&str> = first.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["order-0"]);
    // The answer was lost: the client asks again with the same attempt id, through any node,
    // and gets the same messages with the same handles (so acking them works, in order).
    for c in [2, 0, 1] {
        let again = delivered(&receive(&mut clients[c], request("attempt-a")).await);
        assert_eq!(again, first, "retry through node {}", c + 1);
    }
    // Another receive of the group gets nothing of it while they are in flight (FIFO).
    let other =
        receive(&mut clients[0], ReceiveMessageRequest { long_polling_timeout: seconds(1), ..request("b") }).await;
    assert_eq!(status_code(&other), Code::MessageNotFound as i32);
    for (_, handle) in &first {
        assert_eq!(ack(&mut clients[2], "order-readers", "Orders", handle).await, Code::Ok as i32);
    }
    // Once it is acked, the same id is a new receive: the group's next message.
    let next = delivered(&receive(&mut clients[0], request("attempt-a")).await);
    let ids: Vec<&str> = next.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["order-1"]);
    // An attempt id past its bound is refused.
    let long = receive(&mut clients[0], request(&"x".repeat(200))).await;
    assert_eq!(status_code(&long), Code::BadRequest as i32);
}
