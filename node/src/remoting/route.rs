//! GET_ROUTEINFO_BY_TOPIC: this node is the topic's one broker (id 0) with all its queues.
//! Compact JSON with quoted keys: Go's hand-written route parser breaks on whitespace, and the
//! C++ and Java (≥ 4.9.4) clients read quoted integer keys.

use crate::auth::Caller;
use crate::broker::TopicConfig;
use crate::broker::access::{Action, ResourceKind};
use crate::remoting::codes::*;
use crate::remoting::frame::Frame;
use crate::remoting::{Remoting, RemotingOptions};

/// Readable and writable (RocketMQ's `PermName`: read 4, write 2).
const PERM_READ_WRITE: u32 = 6;

/// The route body for `topic`'s `queues`.
pub fn route_body(options: &RemotingOptions, queues: u32) -> Vec<u8> {
    let body = serde_json::json!({
        "brokerDatas": [{
            "brokerAddrs": { "0": options.advertised.to_string() },
            "brokerName": options.broker_name,
            "cluster": options.broker_name,
        }],
        "filterServerTable": {},
        "queueDatas": [{
            "brokerName": options.broker_name,
            "perm": PERM_READ_WRITE,
            "readQueueNums": queues,
            "topicSynFlag": 0,
            "writeQueueNums": queues,
        }],
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

impl Remoting {
    pub(super) async fn route(&self, request: &Frame, caller: &Caller) -> Frame {
        let topic = request.field("topic").unwrap_or_default();
        // Producers and consumers both ask for routes: either right will do.
        let publish = self.refused(request, caller, &[(Action::Pub, ResourceKind::Topic, topic)]);
        if let Some(refused) = publish
            && self.refused(request, caller, &[(Action::Sub, ResourceKind::Topic, topic)]).is_some()
        {
            return refused;
        }
        match self.proxy.topic(topic).await {
            Some(TopicConfig { queues, .. }) => {
                Frame::answer(request, SUCCESS).with_body(route_body(&self.options, queues))
            }
            None => Frame::answer(request, TOPIC_NOT_EXIST)
                .with_remark(format!("No topic route info in name server for the topic: {topic}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_compact_with_quoted_broker_ids_and_name_this_node() {
        let options = RemotingOptions {
            advertised: "127.0.0.1:9876".parse().unwrap(),
            broker_name: "rockraft".into(),
            limits: crate::remoting::frame::FrameLimits { max_frame: 1, max_header: 1 },
            max_clients: 1,
            max_long_poll: std::time::Duration::from_secs(1),
            max_requests_per_connection: 1,
        };
        let body = String::from_utf8(route_body(&options, 8)).unwrap();
        assert!(!body.contains(' '), "no whitespace: {body}");
        assert!(body.contains(r#""brokerAddrs":{"0":"127.0.0.1:9876"}"#), "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["queueDatas"][0]["writeQueueNums"], 8);
        assert_eq!(v["queueDatas"][0]["perm"], 6);
        assert!(v.get("orderTopicConf").is_none(), "the C++ client only reads it as a string");
    }
}
