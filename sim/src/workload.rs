//! The simulated clients: one producer and one consumer over the RocketMQ gRPC protocol, each
//! going to the three nodes in turn, recording what they see in the [`History`].

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::receive_message_response::Content;
use rockraft_proto::rocketmq::{
    AckMessageEntry, AckMessageRequest, Code, Encoding, Message, MessageQueue, MessageType, ReceiveMessageRequest,
    Resource, SendMessageRequest, SystemProperties,
};
use rockraft_proto::rockraft as pb;
use tokio::time::{Instant, sleep, timeout};
use tonic::transport::{Channel, Endpoint};

use crate::history::{History, SEND_ANSWER_BOUND};
use crate::hosts;

pub const TOPIC: &str = "Sim";
pub const GROUP: &str = "sim-readers";
const QUEUES: u32 = 4;
/// Every third message goes to a FIFO topic, in one of four message groups, read by an
/// orderly consumer group.
pub const FIFO_TOPIC: &str = "SimFifo";
pub const FIFO_GROUP: &str = "sim-orderly-readers";
const FIFO_QUEUES: u32 = 2;

/// The message group of message `id`, if it goes to the FIFO topic.
pub fn message_group(id: u64) -> Option<String> {
    id.is_multiple_of(3).then(|| format!("g{}", (id / 3) % 4))
}

/// What the step loop and the clients share (one thread).
#[derive(Default)]
pub struct Shared {
    /// The cluster is initialised and the topic exists: faults may begin.
    pub ready: Cell<bool>,
    /// The faults are over and every node runs again: what is left is to drain.
    pub healed: Cell<bool>,
    /// The producer is still sending.
    pub producing: Cell<bool>,
    /// The nodes (1-based) whose files the nemesis damaged, latest last.
    pub damaged: RefCell<Vec<usize>>,
    pub history: RefCell<History>,
}

/// The simulated time, ms.
pub fn now_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as u64)
}

/// SplitMix64.
pub fn mix(x: u64) -> u64 {
    let z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The body of message `id` in the run of `seed`: 64 B to 16 KiB (a run fills a few 1 MiB segments) the seed and the id determine,
/// so the consumer knows every byte it must get.
pub fn body(seed: u64, id: u64) -> Vec<u8> {
    let mut state = mix(seed ^ mix(id));
    let len = 64 + (state % 16320) as usize;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = mix(state);
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn resource(name: &str) -> Option<Resource> {
    Some(Resource { resource_namespace: String::new(), name: name.into() })
}

fn channel(addr: &str) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("a simulated address")
        .connect_timeout(Duration::from_secs(1))
        .http2_keep_alive_interval(Duration::from_millis(500))
        .keep_alive_timeout(Duration::from_millis(500))
        .keep_alive_while_idle(true)
        .connect_with_connector_lazy(rockraft::simulation::connector())
}

type Client = MessagingServiceClient<Channel>;

fn clients() -> Vec<Client> {
    (1..=hosts::NODES.len()).map(|id| MessagingServiceClient::new(channel(&hosts::client_addr(id)))).collect()
}

/// Sends one admin request to the nodes in turn until one answers it (or says it is done).
async fn admin<R: rockraft::admin::AdminCall + Clone>(request: R, what: &str) {
    let options = rockraft::admin::CallOptions::default();
    for attempt in 0usize.. {
        let addr = hosts::admin_addr(attempt % hosts::NODES.len() + 1);
        match timeout(Duration::from_secs(3), rockraft::admin::call(&addr, &options, request.clone())).await {
            Ok(Ok(_)) => return,
            Ok(Err(e)) if e.code() == Some(tonic::Code::AlreadyExists) => return,
            Ok(Err(e)) if attempt % 20 == 19 => tracing::info!(%what, error = %e, "still trying"),
            _ => {}
        }
        sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until every node's replicas of the metadata group and of data group 1 are at one
/// applied index with one digest; what differs otherwise, after `wait`.
pub async fn replicas_agree(wait: Duration) -> Result<(), String> {
    let options = rockraft::admin::CallOptions::default();
    let started = Instant::now();
    loop {
        let mut states = Vec::new();
        for group in [0, 1] {
            for id in 1..=hosts::NODES.len() {
                let addr = hosts::admin_addr(id);
                let asked = rockraft::admin::call(&addr, &options, pb::GetDigestRequest { group });
                let state = match timeout(Duration::from_secs(3), asked).await {
                    Ok(Ok(reply)) => reply.applied.map(|applied| (applied, reply.digest)),
                    _ => None,
                };
                states.push((group, id, state));
            }
        }
        let mut differ = None;
        let mut lagging = None;
        for group in [0, 1] {
            let of: Vec<_> = states.iter().filter(|s| s.0 == group).map(|s| (s.1, s.2)).collect();
            let same_index =
                of.iter().all(|s| s.1.is_some()) && of.windows(2).all(|w| w[0].1.map(|s| s.0) == w[1].1.map(|s| s.0));
            if !same_index {
                lagging.get_or_insert(format!("group {group}: (node, (applied, digest))  {of:?}"));
            } else if !of.windows(2).all(|w| w[0].1 == w[1].1) {
                differ.get_or_insert(format!("the replicas of group {group} at one index differ: {of:?}"));
            }
        }
        if let Some(differ) = differ {
            return Err(differ);
        }
        match lagging {
            None => return Ok(()),
            Some(which) if started.elapsed() > wait => {
                return Err(format!("the replicas never reached one index: {which}"));
            }
            Some(_) => sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Hands the leadership of data group 1 to node `to`, asking each node in turn (a data group's
/// leadership is handed over by its leader); whether it was.
pub async fn make_leader(to: usize, wait: Duration) -> bool {
    let options = rockraft::admin::CallOptions::default();
    let started = Instant::now();
    for attempt in 0usize.. {
        let addr = hosts::admin_addr(attempt % hosts::NODES.len() + 1);
        let request = pb::TransferLeaderRequest { to: to as u64, group: Some(1) };
        if let Ok(Ok(_)) = timeout(Duration::from_secs(5), rockraft::admin::call(&addr, &options, request)).await {
            return true;
        }
        if started.elapsed() > wait {
            return false;
        }
        sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Initialises the cluster and creates the topic and the consumer group.
pub async fn set_up(shared: &Shared) {
    admin(pb::InitRequest {}, "init").await;
    let topic =
        pb::CreateTopicRequest { name: TOPIC.into(), queues: QUEUES, kind: "NORMAL".into(), lite_ttl_minutes: None };
    admin(topic, "create topic").await;
    let group = pb::CreateGroupRequest { name: GROUP.into(), fifo: false, max_attempts: 16, ..Default::default() };
    admin(group, "create group").await;
    let fifo = pb::CreateTopicRequest {
        name: FIFO_TOPIC.into(),
        queues: FIFO_QUEUES,
        kind: "FIFO".into(),
        lite_ttl_minutes: None,
    };
    admin(fifo, "create FIFO topic").await;
    let orderly =
        pb::CreateGroupRequest { name: FIFO_GROUP.into(), fifo: true, max_attempts: 16, ..Default::default() };
    admin(orderly, "create orderly group").await;
    shared.history.borrow_mut().note(now_ms(), "ready".into());
    shared.ready.set(true);
}

fn message(seed: u64, id: u64) -> Message {
    let group = message_group(id);
    let (topic, queue, kind) = match &group {
        // One queue per message group, as the clients pick it (by the group's hash).
        Some(_) => (FIFO_TOPIC, (id / 3) % 4 % u64::from(FIFO_QUEUES), MessageType::Fifo),
        None => (TOPIC, id % u64::from(QUEUES), MessageType::Normal),
    };
    Message {
        topic: resource(topic),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: format!("m-{id}"),
            queue_id: queue as i32,
            message_group: group,
            born_host: "client".into(),
            born_timestamp: Some(prost_types::Timestamp { seconds: 1_800_000_000, nanos: 0 }),
            message_type: kind as i32,
            body_encoding: Encoding::Identity as i32,
            ..Default::default()
        }),
        body: Bytes::from(body(seed, id)),
    }
}

/// Sends messages `ids` one after another, each retried (same message id, next node) until
/// acknowledged or 30 s have passed; clears `producing` (which the caller sets) when done.
pub async fn produce(shared: Rc<Shared>, seed: u64, ids: std::ops::Range<u64>) {
    let mut clients = clients();
    for id in ids {
        let started = Instant::now();
        let mut acknowledged = false;
        for attempt in 0usize.. {
            let node = (id as usize + attempt) % clients.len();
            let request = SendMessageRequest { messages: vec![message(seed, id)] };
            let asked = Instant::now();
            let answer = timeout(Duration::from_secs(10), clients[node].send_message(request)).await;
            let waited = asked.elapsed();
            let code = match &answer {
                Ok(Ok(reply)) => reply.get_ref().status.as_ref().map_or(-1, |s| s.code),
                Ok(Err(status)) => -(status.code() as i32) - 100,
                Err(_) => -1,
            };
            {
                let mut history = shared.history.borrow_mut();
                history.slowest_send = history.slowest_send.max(waited);
                if waited > SEND_ANSWER_BOUND {
                    history.slow_sends.push((id, node + 1, waited));
                }
                let line = format!("send m-{id} via n{} -> {code} after {} ms", node + 1, waited.as_millis());
                history.note(now_ms(), line);
            }
            if code == Code::Ok as i32 {
                acknowledged = true;
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                break;
            }
            sleep(Duration::from_millis(100)).await;
        }
        shared.history.borrow_mut().sent.insert(id, acknowledged);
        sleep(Duration::from_millis(40)).await;
    }
    shared.producing.set(false);
}

/// Receives and acks until the producer is done, the faults are over and every acknowledged
/// message is consumed, or `drain` has passed since the faults ended. Ids up to `count` are the
/// producer's; any other is a stranger.
pub async fn consume(shared: Rc<Shared>, seed: u64, count: u64, drain: Duration) {
    let mut clients = clients();
    let mut healed_at = None;
    // The producer takes the first millisecond (the seeds' schedules were found with it).
    sleep(Duration::from_millis(1)).await;
    for round in 0usize.. {
        let done_sending = !shared.producing.get();
        if shared.healed.get() {
            let healed_at = *healed_at.get_or_insert_with(Instant::now);
            if done_sending && shared.history.borrow().unconsumed().is_empty() {
                return;
            }
            if healed_at.elapsed() > drain {
                return;
            }
        }
        let node = round % clients.len();
        // The two topics in turn, each from every node.
        let (topic, group) = match (round / clients.len()) % 2 {
            0 => (TOPIC, GROUP),
            _ => (FIFO_TOPIC, FIFO_GROUP),
        };
        let request = ReceiveMessageRequest {
            group: resource(group),
            message_queue: Some(MessageQueue { topic: resource(topic), ..Default::default() }),
            filter_expression: None,
            batch_size: 16,
            invisible_duration: Some(prost_types::Duration { seconds: 15, nanos: 0 }),
            auto_renew: false,
            long_polling_timeout: Some(prost_types::Duration { seconds: 1, nanos: 0 }),
            attempt_id: None,
        };
        let client = &mut clients[node];
        let frames = timeout(Duration::from_secs(5), async {
            let mut stream = client.receive_message(request).await?.into_inner();
            let mut frames = Vec::new();
            while let Some(frame) = stream.next().await {
                frames.extend(frame?.content);
            }
            Ok::<_, tonic::Status>(frames)
        })
        .await;
        let Ok(Ok(frames)) = frames else {
            sleep(Duration::from_millis(100)).await;
            continue;
        };
        for frame in frames {
            let Content::Message(m) = frame else { continue };
            let props = m.system_properties.clone().unwrap_or_default();
            let at_ms = now_ms();
            let id = props.message_id.strip_prefix("m-").and_then(|n| n.parse::<u64>().ok());
            let Some(id) = id.filter(|id| shared.history.borrow().sent.contains_key(id) || *id < count) else {
                shared.history.borrow_mut().strangers.push(props.message_id.clone());
                continue;
            };
            // Queues of the FIFO topic are told apart from the normal topic's by a sign.
            let queue = match topic {
                FIFO_TOPIC => -1 - props.queue_id,
                _ => props.queue_id,
            };
            let offset = props.queue_offset.unwrap_or(-1);
            let intact = m.body.as_ref() == body(seed, id).as_slice();
            {
                let mut history = shared.history.borrow_mut();
                history.note(at_ms, format!("deliver m-{id} q{queue}@{offset} via n{} intact={intact}", node + 1));
                history.deliveries.push(crate::history::Delivery { id, queue, offset, at_ms, intact });
            }
            let Some(handle) = props.receipt_handle else { continue };
            let ack = AckMessageRequest {
                group: resource(group),
                topic: resource(topic),
                entries: vec![AckMessageEntry {
                    message_id: props.message_id.clone(),
                    receipt_handle: handle,
                    lite_topic: None,
                }],
            };
            let answer = timeout(Duration::from_secs(5), client.ack_message(ack)).await;
            let ok = matches!(&answer, Ok(Ok(r)) if r.get_ref().status.as_ref().is_some_and(|s| s.code == Code::Ok as i32)
                && r.get_ref().entries.iter().all(|e| e.status.as_ref().is_some_and(|s| s.code == Code::Ok as i32)));
            let mut history = shared.history.borrow_mut();
            history.note(now_ms(), format!("ack m-{id} q{queue}@{offset} ok={ok}"));
            if ok {
                history.acked.entry((queue, offset)).or_insert(now_ms());
            }
        }
    }
}
