//! `QueryRoute`: every queue of a topic, served by this group. `QueryAssignment`: what a
//! PushConsumer receives from.

use std::net::IpAddr;

use rockraft_proto::rocketmq::{
    Address, AddressScheme, Assignment, Broker, Code, Endpoints, MessageQueue, Permission, QueryAssignmentRequest,
    QueryAssignmentResponse, QueryRouteRequest, QueryRouteResponse, Resource,
};

use crate::broker::TopicConfig;
use crate::proxy::status::{Rejection, ok};

/// The endpoints to put in routes. Clients key their sessions by the address string, so the
/// endpoints they reached us with are echoed back as they were sent; only a request without
/// them gets the members' client endpoints.
pub fn endpoints(requested: Option<&Endpoints>, members: &[String]) -> Endpoints {
    if let Some(e) = requested.filter(|e| !e.addresses.is_empty()) {
        return e.clone();
    }
    let addresses: Vec<Address> = members
        .iter()
        .filter_map(|m| {
            let (host, port) = m.rsplit_once(':')?;
            Some(Address { host: host.to_string(), port: port.parse().ok()? })
        })
        .collect();
    let all_ip = addresses.iter().all(|a| a.host.parse::<IpAddr>().is_ok());
    let scheme = match (all_ip, addresses.first().and_then(|a| a.host.parse::<IpAddr>().ok())) {
        (true, Some(IpAddr::V6(_))) => AddressScheme::IPv6,
        (true, _) => AddressScheme::IPv4,
        (false, _) => AddressScheme::DomainName,
    };
    Endpoints { scheme: scheme as i32, addresses }
}

pub fn route(
    req: &QueryRouteRequest,
    topic: Option<TopicConfig>,
    group: &str,
    members: &[String],
) -> Result<QueryRouteResponse, Rejection> {
    let resource = req.topic.clone().ok_or_else(|| Rejection::new(Code::BadRequest, "QueryRoute needs a topic"))?;
    let topic =
        topic.ok_or_else(|| Rejection::new(Code::TopicNotFound, format!("topic {} does not exist", resource.name)))?;
    let endpoints = endpoints(req.endpoints.as_ref(), members);
    let message_queues = (0..topic.queues)
        .map(|id| MessageQueue {
            topic: Some(Resource {
                resource_namespace: resource.resource_namespace.clone(),
                name: resource.name.clone(),
            }),
            id: id as i32,
            permission: Permission::ReadWrite as i32,
            // Broker id 0: the Python client only uses the "master".
            broker: Some(Broker { name: group.to_string(), id: 0, endpoints: Some(endpoints.clone()) }),
            accept_message_types: vec![topic.kind.message_type() as i32],
        })
        .collect();
    Ok(QueryRouteResponse { status: Some(ok()), message_queues })
}

/// One assignment per queue: a PushConsumer runs a receive loop for each. A receive pops from
/// every queue of the topic whatever queue it names, so the loops share the work.
pub fn assignment(
    req: &QueryAssignmentRequest,
    topic: Option<TopicConfig>,
    group: &str,
    members: &[String],
) -> Result<QueryAssignmentResponse, Rejection> {
    let route = route(
        &QueryRouteRequest { topic: req.topic.clone(), endpoints: req.endpoints.clone() },
        topic,
        group,
        members,
    )?;
    let assignments = route.message_queues.into_iter().map(|q| Assignment { message_queue: Some(q) }).collect();
    Ok(QueryAssignmentResponse { status: Some(ok()), assignments })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::TopicKind;

    fn req(endpoints: Option<Endpoints>) -> QueryRouteRequest {
        QueryRouteRequest { topic: Some(Resource { resource_namespace: String::new(), name: "T".into() }), endpoints }
    }

    #[test]
    fn routes_list_every_queue_readable_and_writable_with_the_callers_endpoints() {
        let asked = Endpoints { scheme: 1, addresses: vec![Address { host: "127.0.0.1".into(), port: 8082 }] };
        let topic = TopicConfig { name: "T".into(), queues: 3, kind: TopicKind::Fifo };
        let r = route(&req(Some(asked.clone())), Some(topic), "g", &[]).unwrap();
        assert_eq!(r.message_queues.len(), 3);
        assert_eq!(r.message_queues[0].id, 0);
        assert!(r.message_queues.iter().all(|q| q.permission == Permission::ReadWrite as i32));
        assert_eq!(r.message_queues[0].accept_message_types, vec![rockraft_proto::rocketmq::MessageType::Fifo as i32]);
        let broker = r.message_queues[2].broker.as_ref().unwrap();
        assert_eq!((broker.id, broker.endpoints.as_ref()), (0, Some(&asked)));
    }

    #[test]
    fn an_unknown_topic_is_topic_not_found() {
        let err = route(&req(None), None, "g", &[]).unwrap_err();
        assert_eq!(err.0.code, Code::TopicNotFound as i32);
    }

    #[test]
    fn without_caller_endpoints_the_members_are_listed_with_a_matching_scheme() {
        let e = endpoints(None, &["127.0.0.1:8081".into(), "127.0.0.1:8082".into()]);
        assert_eq!(e.scheme, AddressScheme::IPv4 as i32);
        assert_eq!(e.addresses.len(), 2);
        assert_eq!(endpoints(None, &["broker.local:8081".into()]).scheme, AddressScheme::DomainName as i32);
    }
}
