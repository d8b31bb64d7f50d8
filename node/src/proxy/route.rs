//! `QueryRoute`: every queue of a topic, spread over the group's live members, each member a
//! RocketMQ broker of its own (`<group>-<node id>`, broker id 0) at its advertised client
//! endpoint, as RocketMQ's local-mode proxies do. `QueryAssignment`: what a PushConsumer receives
//! from, spread the same way.
//!
//! A client given one endpoint thus learns every live member, and the official clients' own
//! retry (the next queue, on another broker) and endpoint isolation carry its sends and receives
//! to the surviving members when one dies. Any member serves any queue (followers forward to the
//! leader, acks and receipt handles are replicated state), so the broker a queue is listed under
//! decides only where a client sends, never what the queue holds: the queue count and ids are the
//! same whatever the liveness, and FIFO message groups map to queues on the server (`send.rs`).
//!
//! With several data groups, a topic whose queues are spread over them is routed by its groups'
//! leaders instead (`Layout::Leaders`): each queue under the member leading its group, while
//! those leaders cover every live member.
//!
//! Three layouts, for what the clients do with routes (see docs/consumption.md, "Clients and node
//! failures"):
//! - Routes start at the answering node: queue i is on live member (k + i) mod n, k this node's
//!   place among them by id. The Node.js client only ever uses queue 0 (its publishing and
//!   subscription load balancers keep `queueId === MASTER_BROKER_ID`), so it keeps talking to the
//!   node it was given; clients that take the queues in turn (Java, Python, Go) reach them all.
//! - Assignments use one order on every node, queue i on member i mod n: the Python and Java
//!   PushConsumers ask a different member each time and rebuild their process queues whenever
//!   the answer changes.
//! - The Rust client (5.0.0) gets back the endpoints it asked with, as they were sent, as one
//!   broker: it opens a session for every new endpoints string it meets in a route, lazily, at
//!   first use, and unwraps the result (`client.rs`, `get_session_with_endpoints(..).await
//!   .unwrap()` in send, receive and ack); opening one connects at once to a single address and
//!   makes a Telemetry call (`session.rs`, `Session::new`, `Session::start`), so any member down
//!   at that moment panics the client. Its access endpoints' session exists from `start()` on,
//!   and with several addresses it is a balanced channel (tonic `balance_list`) that works
//!   around a dead member; the client keeps its first route forever and never retries a send.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use rockraft_proto::rocketmq::{
    Address, AddressScheme, Assignment, Broker, Code, Endpoints, MessageQueue, Permission, QueryAssignmentRequest,
    QueryAssignmentResponse, QueryRouteRequest, QueryRouteResponse, Resource,
};

use crate::broker::TopicConfig;
use crate::proxy::status::{Rejection, ok};
use crate::raft::{NodeId, NodeInfo};

/// A member as routes show it: its id and the address clients reach it at.
pub type RouteMember = (NodeId, String);

/// How the queues of a route are laid over the members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Queue i on member (start + i) mod n, each member a broker of its own.
    Spread { start: usize },
    /// Queue i on the member leading the data group that holds it (`leaders[i]`), so clients
    /// send straight to it; a queue whose group has no live leader known is spread as above.
    /// While the leaders do not cover every live member (at start, while a failed node's groups
    /// move), every queue is spread as above instead, so a client learns every live member.
    /// Where groups are placed on some members only (`holders[i]` names queue i's group's),
    /// queue i is always on its leader, or on a live holder while none is known: only they read
    /// the queue's messages.
    Leaders { start: usize, leaders: Vec<Option<NodeId>>, holders: Vec<Vec<NodeId>> },
    /// One broker named after the group, at the endpoints the client asked with, as they were
    /// sent (the Rust client); spread from the first member if the request names none.
    Echo,
}

/// The members routes lead clients to, in id order: the voters `heard` names (what the leader
/// heard from lately; `None` when this node cannot tell), and always this node, which is alive
/// since it answers. `here` is this node's id and own advertised address, for when the
/// membership does not list it. Never empty; members whose address is not `host:port` are left
/// out (config validation keeps them from the membership).
pub fn live_members(
    members: &[(NodeId, NodeInfo)],
    voters: &BTreeSet<NodeId>,
    heard: Option<&BTreeSet<NodeId>>,
    here: (NodeId, &str),
) -> Vec<RouteMember> {
    let mut live: BTreeMap<NodeId, String> = members
        .iter()
        .filter(|(id, _)| voters.contains(id) && heard.is_some_and(|h| h.contains(id)))
        .map(|(id, n)| (*id, n.client_addr.clone()))
        .collect();
    let mine = members.iter().find(|(id, _)| *id == here.0).map_or(here.1, |(_, n)| n.client_addr.as_str());
    live.insert(here.0, mine.to_string());
    live.into_iter().filter(|(id, a)| *id == here.0 || address(a).is_some()).collect()
}

/// Where a route starts for the node `here`: its place among `members`.
pub fn start_at(members: &[RouteMember], here: NodeId) -> usize {
    members.iter().position(|(id, _)| *id == here).unwrap_or(0)
}

/// `host:port` as a route address; an IPv6 address keeps its brackets, as clients join host and
/// port with a colon to dial.
fn address(addr: &str) -> Option<Address> {
    let (host, port) = addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    (!host.is_empty()).then(|| Address { host: host.to_string(), port: port.into() })
}

fn ip(host: &str) -> Option<IpAddr> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse().ok()
}

/// Endpoints listing `addrs`, with the scheme their hosts need: IPv4 or IPv6 when all are IP
/// addresses of that family, else DOMAIN_NAME (which the Python client accepts with one address
/// only; spread routes give each broker one).
pub fn endpoints<'a>(addrs: impl IntoIterator<Item = &'a str>) -> Endpoints {
    let addresses: Vec<Address> = addrs.into_iter().filter_map(address).collect();
    let ips: Vec<Option<IpAddr>> = addresses.iter().map(|a| ip(&a.host)).collect();
    let scheme = if !ips.is_empty() && ips.iter().all(|i| matches!(i, Some(IpAddr::V4(_)))) {
        AddressScheme::IPv4
    } else if !ips.is_empty() && ips.iter().all(|i| matches!(i, Some(IpAddr::V6(_)))) {
        AddressScheme::IPv6
    } else {
        AddressScheme::DomainName
    };
    Endpoints { scheme: scheme as i32, addresses }
}

/// The broker name of member `id`: distinct per member, so clients treat members as brokers of
/// their own (isolation, retry elsewhere).
pub fn broker_name(group: &str, id: NodeId) -> String {
    format!("{group}-{id}")
}

pub fn route(
    req: &QueryRouteRequest,
    topic: Option<TopicConfig>,
    group: &str,
    members: &[RouteMember],
    layout: Layout,
) -> Result<QueryRouteResponse, Rejection> {
    let resource = req.topic.clone().ok_or_else(|| Rejection::new(Code::BadRequest, "QueryRoute needs a topic"))?;
    let topic =
        topic.ok_or_else(|| Rejection::new(Code::TopicNotFound, format!("topic {} does not exist", resource.name)))?;
    if members.is_empty() {
        return Err(Rejection::new(Code::InternalServerError, "no member to route to"));
    }
    let asked = req.endpoints.as_ref().filter(|e| !e.addresses.is_empty());
    // Broker id 0: the Python client only uses the "master".
    let brokers: Vec<Broker> = match (&layout, asked) {
        (Layout::Echo, Some(asked)) => vec![Broker { name: group.to_string(), id: 0, endpoints: Some(asked.clone()) }],
        _ => members
            .iter()
            .map(|(id, addr)| Broker {
                name: broker_name(group, *id),
                id: 0,
                endpoints: Some(endpoints([addr.as_str()])),
            })
            .collect(),
    };
    let (start, leaders, holders) = match &layout {
        Layout::Spread { start } => (*start, &[][..], &[][..]),
        Layout::Leaders { start, leaders, holders } => (*start, &leaders[..], &holders[..]),
        Layout::Echo => (0, &[][..], &[][..]),
    };
    let spread = |id: u32| (start + id as usize) % brokers.len();
    let at_leader = |id: u32| {
        let leader = leaders.get(id as usize).copied().flatten()?;
        members.iter().position(|(m, _)| *m == leader).filter(|i| *i < brokers.len())
    };
    // Only while the leaders cover every live member: a client that was given one endpoint
    // learns the others from its route, and its retries go to them when that one dies.
    let covered: BTreeSet<usize> = (0..topic.queues).filter_map(at_leader).collect();
    let by_leader = !leaders.is_empty() && covered.len() == brokers.len();
    let at_holder = |id: u32| {
        let held: &Vec<NodeId> = holders.get(id as usize)?;
        let live = |h: &NodeId| members.iter().position(|(m, _)| m == h).filter(|i| *i < brokers.len());
        at_leader(id).or_else(|| held.iter().find_map(live))
    };
    let placed = |id: u32| match holders.get(id as usize).is_some_and(|h| !h.is_empty()) {
        true => at_holder(id),
        false if by_leader => at_leader(id),
        false => None,
    };
    let message_queues = (0..topic.queues)
        .map(|id| MessageQueue {
            topic: Some(Resource {
                resource_namespace: resource.resource_namespace.clone(),
                name: resource.name.clone(),
            }),
            id: id as i32,
            permission: Permission::ReadWrite as i32,
            broker: Some(brokers[placed(id).unwrap_or_else(|| spread(id))].clone()),
            accept_message_types: topic.kind.accepted_message_types().into_iter().map(|t| t as i32).collect(),
        })
        .collect();
    Ok(QueryRouteResponse { status: Some(ok()), message_queues })
}

/// One assignment per queue: a PushConsumer runs a receive loop for each. A receive pops from
/// every queue of the topic whatever queue it names, so the loops share the work. `members`
/// must be in the same order on every node (by id): the layout starts at the first.
pub fn assignment(
    req: &QueryAssignmentRequest,
    topic: Option<TopicConfig>,
    group: &str,
    members: &[RouteMember],
    layout: Layout,
) -> Result<QueryAssignmentResponse, Rejection> {
    let route = route(
        &QueryRouteRequest { topic: req.topic.clone(), endpoints: req.endpoints.clone() },
        topic,
        group,
        members,
        layout,
    )?;
    let assignments = route.message_queues.into_iter().map(|q| Assignment { message_queue: Some(q) }).collect();
    Ok(QueryAssignmentResponse { status: Some(ok()), assignments })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::TopicKind;

    fn req() -> QueryRouteRequest {
        let asked = Endpoints { scheme: 1, addresses: vec![Address { host: "127.0.0.1".into(), port: 8082 }] };
        QueryRouteRequest {
            topic: Some(Resource { resource_namespace: String::new(), name: "T".into() }),
            endpoints: Some(asked),
        }
    }

    fn topic(queues: u32) -> Option<TopicConfig> {
        Some(TopicConfig::new("T", queues, TopicKind::Fifo))
    }

    fn three() -> Vec<RouteMember> {
        (1..=3).map(|id| (id, format!("10.0.0.{id}:8081"))).collect()
    }

    fn info(id: NodeId, client_addr: &str) -> (NodeId, NodeInfo) {
        (id, NodeInfo { raft_addr: format!("10.0.0.{id}:9081"), client_addr: client_addr.into(), ..Default::default() })
    }

    /// (broker name, its one address) of each queue, in queue order.
    fn layout(r: &QueryRouteResponse) -> Vec<(String, String)> {
        r.message_queues
            .iter()
            .map(|q| {
                let b = q.broker.as_ref().unwrap();
                let a = &b.endpoints.as_ref().unwrap().addresses;
                assert_eq!(a.len(), 1, "one address per broker");
                (b.name.clone(), format!("{}:{}", a[0].host, a[0].port))
            })
            .collect()
    }

    #[test]
    fn queues_spread_over_the_members_each_a_broker_of_its_own_starting_at_the_answering_node() {
        let r = route(&req(), topic(5), "g", &three(), Layout::Spread { start: 1 }).unwrap();
        let ids: Vec<i32> = r.message_queues.iter().map(|q| q.id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        let names: Vec<String> = layout(&r).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["g-2", "g-3", "g-1", "g-2", "g-3"]);
        // Not the endpoint the client asked with (127.0.0.1:8082): the members' own.
        assert_eq!(layout(&r)[0].1, "10.0.0.2:8081");
        for q in &r.message_queues {
            assert_eq!(q.permission, Permission::ReadWrite as i32);
            assert_eq!(q.broker.as_ref().unwrap().id, 0, "the Python client only uses broker id 0");
            assert_eq!(q.accept_message_types, vec![rockraft_proto::rocketmq::MessageType::Fifo as i32]);
        }
    }

    #[test]
    fn a_queue_in_a_data_group_is_routed_to_the_group_s_leader_or_spread_without_a_live_one() {
        // Queue 0's group led by node 3, queue 1's by node 1, queue 2's by a node not live, queue
        // 3's by none known.
        let leaders = vec![Some(3), Some(1), Some(9), None, Some(2)];
        let r = route(&req(), topic(5), "g", &three(), Layout::Leaders { start: 1, leaders, holders: vec![] }).unwrap();
        let names: Vec<String> = layout(&r).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["g-3", "g-1", "g-1", "g-2", "g-2"]);
        // Every group led by node 1 (the groups have just started): spread, so a client given
        // node 1 alone learns the others.
        let leaders = vec![Some(1); 5];
        let r = route(&req(), topic(5), "g", &three(), Layout::Leaders { start: 1, leaders, holders: vec![] }).unwrap();
        let names: Vec<String> = layout(&r).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["g-2", "g-3", "g-1", "g-2", "g-3"]);
    }

    #[test]
    fn where_groups_are_on_some_members_each_queue_goes_to_its_leader_or_a_live_holder() {
        let five: Vec<RouteMember> = (1..=5).map(|id| (id, format!("10.0.0.{id}:8081"))).collect();
        // Two queues, far from covering five members: still each at its group's leader. Queue 2's
        // group has no leader known: its first live holder; queue 3's holders are all down:
        // spread.
        let leaders = vec![Some(4), Some(2), None, None];
        let holders = vec![vec![4, 5, 1], vec![2, 3, 4], vec![9, 3, 4], vec![8, 9, 7]];
        let r = route(&req(), topic(4), "g", &five, Layout::Leaders { start: 0, leaders, holders }).unwrap();
        let names: Vec<String> = layout(&r).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["g-4", "g-2", "g-3", "g-4"]);
    }

    #[test]
    fn assignments_follow_the_same_order_on_every_node() {
        let ask = QueryAssignmentRequest { topic: req().topic, group: None, endpoints: None };
        let a = assignment(&ask, topic(4), "g", &three(), Layout::Spread { start: 0 }).unwrap();
        let names: Vec<String> = a
            .assignments
            .iter()
            .map(|a| a.message_queue.as_ref().unwrap().broker.as_ref().unwrap().name.clone())
            .collect();
        assert_eq!(names, vec!["g-1", "g-2", "g-3", "g-1"]);
    }

    #[test]
    fn the_rust_client_gets_back_the_endpoints_it_asked_with() {
        let r = route(&req(), topic(3), "g", &three(), Layout::Echo).unwrap();
        for q in &r.message_queues {
            let b = q.broker.as_ref().unwrap();
            assert_eq!(b.name, "g");
            assert_eq!(b.endpoints, req().endpoints);
        }
        // A request that names none is spread.
        let bare = QueryRouteRequest { endpoints: None, ..req() };
        let r = route(&bare, topic(3), "g", &three(), Layout::Echo).unwrap();
        assert_eq!(layout(&r)[0], ("g-1".to_string(), "10.0.0.1:8081".to_string()));
    }

    #[test]
    fn members_not_heard_from_are_left_out_but_never_the_answering_node() {
        let members = vec![info(1, "10.0.0.1:8081"), info(2, "10.0.0.2:8081"), info(3, "10.0.0.3:8081")];
        let voters = BTreeSet::from([1, 2, 3]);
        let live = live_members(&members, &voters, Some(&BTreeSet::from([1, 3])), (2, "unused:1"));
        let ids: Vec<NodeId> = live.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, vec![1, 2, 3], "node 2 answers, so it is alive");
        let live = live_members(&members, &voters, Some(&BTreeSet::from([1, 2])), (1, "unused:1"));
        assert_eq!(live.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(start_at(&live, 2), 1);
        // Not knowing the leader's view: only this node is vouched for.
        assert_eq!(live_members(&members, &voters, None, (3, "unused:1")), vec![(3, "10.0.0.3:8081".to_string())]);
        // Learners are not handed out.
        let voters = BTreeSet::from([1, 2]);
        let live = live_members(&members, &voters, Some(&BTreeSet::from([1, 2, 3])), (1, "unused:1"));
        assert_eq!(live.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn a_route_is_never_empty() {
        // Not in the membership yet (before init): this node, at its own advertised address.
        let live = live_members(&[], &BTreeSet::new(), None, (7, "broker-7.example.com:8081"));
        assert_eq!(live, vec![(7, "broker-7.example.com:8081".to_string())]);
        let r = route(&req(), topic(2), "g", &live, Layout::Spread { start: start_at(&live, 7) }).unwrap();
        assert_eq!(r.message_queues.len(), 2);
        assert_eq!(layout(&r)[1], ("g-7".to_string(), "broker-7.example.com:8081".to_string()));
        let e = r.message_queues[0].broker.as_ref().unwrap().endpoints.as_ref().unwrap();
        assert_eq!(e.scheme, AddressScheme::DomainName as i32);
    }

    #[test]
    fn routes_hand_out_the_advertised_addresses_the_membership_records() {
        // Node 2 listens on 0.0.0.0 behind NAT; the membership holds what it advertises.
        let members = vec![info(1, "10.0.0.1:8081"), info(2, "broker-2.example.com:18081"), info(3, "[::1]:8083")];
        let voters = BTreeSet::from([1, 2, 3]);
        let live = live_members(&members, &voters, Some(&voters), (1, "10.0.0.1:8081"));
        let r = route(&req(), topic(3), "g", &live, Layout::Spread { start: 0 }).unwrap();
        let got = layout(&r);
        assert_eq!(got[1].1, "broker-2.example.com:18081");
        assert_eq!(got[2].1, "[::1]:8083");
        let schemes: Vec<i32> =
            r.message_queues.iter().map(|q| q.broker.as_ref().unwrap().endpoints.as_ref().unwrap().scheme).collect();
        assert_eq!(
            schemes,
            vec![AddressScheme::IPv4 as i32, AddressScheme::DomainName as i32, AddressScheme::IPv6 as i32]
        );
    }

    #[test]
    fn an_unknown_topic_is_topic_not_found() {
        let err = route(&req(), None, "g", &three(), Layout::Echo).unwrap_err();
        assert_eq!(err.0.code, Code::TopicNotFound as i32);
    }
}
