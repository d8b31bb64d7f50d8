//! Routes on a live cluster: every node spreads a topic's queues over the live members, each a
//! broker of its own at its own client endpoint; every node hands out the same assignments; a
//! member that dies leaves every node's routes (followers learn it from the leader) and comes
//! back once it answers again; the queues stay the same throughout. The Rust client gets back the
//! endpoints it asked with.

use std::time::{Duration, Instant};

use rockraft::broker::TopicKind;
use rockraft_cluster_tests::{Cluster, Options};
use rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient;
use rockraft_proto::rocketmq::{
    Address, Code, Endpoints, MessageQueue, QueryAssignmentRequest, QueryRouteRequest, Resource,
};
use tonic::transport::Channel;

const QUEUES: u32 = 6;

async fn client(addr: &str) -> MessagingServiceClient<Channel> {
    MessagingServiceClient::connect(format!("http://{addr}")).await.expect("connect")
}

fn resource(name: &str) -> Option<Resource> {
    Some(Resource { resource_namespace: String::new(), name: name.into() })
}

fn asked_with(addr: &str) -> Option<Endpoints> {
    let (host, port) = addr.rsplit_once(':').unwrap();
    Some(Endpoints { scheme: 1, addresses: vec![Address { host: host.into(), port: port.parse().unwrap() }] })
}

/// (queue id, broker name, "host:port") per queue.
fn shape(queues: &[MessageQueue]) -> Vec<(i32, String, String)> {
    queues
        .iter()
        .map(|q| {
            let b = q.broker.as_ref().expect("broker");
            let e = b.endpoints.as_ref().expect("endpoints");
            let a: Vec<String> = e.addresses.iter().map(|a| format!("{}:{}", a.host, a.port)).collect();
            (q.id, b.name.clone(), a.join(","))
        })
        .collect()
}

async fn route(cluster: &Cluster, via: u64) -> Vec<(i32, String, String)> {
    let addr = cluster.client_addr(via);
    let req = QueryRouteRequest { topic: resource("Spread"), endpoints: asked_with(&addr) };
    let r = client(&addr).await.query_route(req).await.expect("rpc").into_inner();
    assert_eq!(r.status.map(|s| s.code), Some(Code::Ok as i32));
    shape(&r.message_queues)
}

async fn assignment(cluster: &Cluster, via: u64) -> Vec<(i32, String, String)> {
    let addr = cluster.client_addr(via);
    let req = QueryAssignmentRequest { topic: resource("Spread"), group: resource("spread"), endpoints: None };
    let r = client(&addr).await.query_assignment(req).await.expect("rpc").into_inner();
    assert_eq!(r.status.map(|s| s.code), Some(Code::Ok as i32));
    shape(&r.assignments.into_iter().filter_map(|a| a.message_queue).collect::<Vec<_>>())
}

/// The members a route or an assignment leads to, by node id, from the broker names.
fn members(shape: &[(i32, String, String)]) -> Vec<u64> {
    let mut ids: Vec<u64> =
        shape.iter().map(|(_, name, _)| name.rsplit_once('-').unwrap().1.parse().unwrap()).collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Waits until node `via`'s routes lead to exactly `want`.
async fn wait_for_members(cluster: &Cluster, via: u64, want: &[u64]) -> Vec<(i32, String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = route(cluster, via).await;
        if members(&r) == want {
            return r;
        }
        assert!(Instant::now() < deadline, "node {via}'s routes lead to {:?}, not {want:?}: {r:?}", members(&r));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Queue ids 0..QUEUES in order, each at its member's own client endpoint.
fn check_queues(cluster: &Cluster, shape: &[(i32, String, String)]) {
    let ids: Vec<i32> = shape.iter().map(|(id, _, _)| *id).collect();
    assert_eq!(ids, (0..QUEUES as i32).collect::<Vec<_>>(), "the same queues whatever the liveness");
    for (_, name, addr) in shape {
        let id: u64 = name.strip_prefix("rockraft-").expect("broker <group>-<id>").parse().unwrap();
        assert_eq!(addr, &cluster.client_addr(id), "broker {name} at its own endpoint");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn routes_spread_over_the_live_members_and_follow_a_death_and_a_return() {
    // Routes spread over every live member are the shape of one data group on every node: three
    // nodes and one group, whatever the suite's size. From five nodes a queue's route names
    // its group's leader among the three holding it: `proxy/route.rs`'s tests check that rule,
    // and `data_groups.rs` sends through such routes on five nodes.
    let mut cluster =
        Cluster::start(3, Options { exact_nodes: true, data_groups: Some(1), ..Options::default() }).await;
    cluster.create_topic("Spread", QUEUES, TopicKind::Normal).await;
    cluster.create_group("spread", false, 16).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();

    for via in 1..=3 {
        wait_for_members(&cluster, via, &[1, 2, 3]).await;
    }
    let reference = assignment(&cluster, 1).await;
    for via in 1..=3 {
        let r = route(&cluster, via).await;
        check_queues(&cluster, &r);
        // Queue 0 is the answering node, then the others in id order (the Node.js client only
        // uses queue 0).
        let order: Vec<u64> = r.iter().map(|(_, n, _)| n.rsplit_once('-').unwrap().1.parse().unwrap()).collect();
        let expect: Vec<u64> = (0..QUEUES as u64).map(|i| (via - 1 + i) % 3 + 1).collect();
        assert_eq!(order, expect, "route through node {via}");
        // Assignments: one order on every node, queue i on member i mod 3.
        assert_eq!(assignment(&cluster, via).await, reference, "assignment through node {via}");
    }
    let order: Vec<String> = reference.iter().map(|(_, n, _)| n.clone()).collect();
    assert_eq!(order, ["rockraft-1", "rockraft-2", "rockraft-3", "rockraft-1", "rockraft-2", "rockraft-3"]);

    // The Rust client keeps the endpoints it asked with.
    let addr = cluster.client_addr(followers[0]);
    let asked = Endpoints {
        scheme: 1,
        addresses: (1..=3)
            .map(|id| {
                let (host, port) =
                    cluster.client_addr(id).rsplit_once(':').map(|(h, p)| (h.to_string(), p.to_string())).unwrap();
                Address { host, port: port.parse().unwrap() }
            })
            .collect(),
    };
    let mut req = tonic::Request::new(QueryRouteRequest { topic: resource("Spread"), endpoints: Some(asked.clone()) });
    req.metadata_mut().insert("x-mq-language", "RUST".parse().unwrap());
    let r = client(&addr).await.query_route(req).await.expect("rpc").into_inner();
    assert_eq!(r.message_queues.len(), QUEUES as usize);
    assert!(r.message_queues.iter().all(|q| q.broker.as_ref().unwrap().endpoints.as_ref() == Some(&asked)));

    // A follower dies: the leader stops hearing from it, the other follower asks the leader.
    let (dead, other) = (followers[0], followers[1]);
    cluster.kill(dead);
    let mut live = vec![leader, other];
    live.sort();
    for via in [leader, other] {
        let r = wait_for_members(&cluster, via, &live).await;
        check_queues(&cluster, &r);
        assert_eq!(r[0].1, format!("rockraft-{via}"), "a route starts at the answering node");
    }
    let a = assignment(&cluster, leader).await;
    assert_eq!(members(&a), live);
    assert_eq!(assignment(&cluster, other).await, a, "both survivors hand out the same assignments");

    // It comes back: every node leads clients to it again.
    cluster.restart(dead);
    cluster.wait_caught_up(dead, Duration::from_secs(30)).await;
    for via in 1..=3 {
        wait_for_members(&cluster, via, &[1, 2, 3]).await;
    }
}
