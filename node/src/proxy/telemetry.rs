//! `Telemetry`: the client's settings handshake, and the server's way to reach a producer.
//! Response headers go out at once (the Rust client waits for them without a timeout); each
//! `Settings` command is answered on the same stream with the settings filled in the way the
//! official clients need. A producer's stream is registered with the topics it publishes, so the
//! leader can send it `RecoverOrphanedTransactionCommand` while the stream lives.

use std::time::Duration;

use rockraft_proto::rocketmq::{
    Code, CustomizedBackoff, ExponentialBackoff, Language, Metric, RetryPolicy, Settings, TelemetryCommand,
    retry_policy, settings, telemetry_command,
};

use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::auth::{Denied, Pin};
use crate::broker::Broker;
use crate::broker::access::{Action, ResourceKind};
use crate::broker::group::{DEFAULT_MAX_ATTEMPTS, GroupConfig};
use crate::broker::lite::MAX_LITE_TOPIC_BYTES;
use crate::proxy::send::{qualified, topic_name};
use crate::proxy::status::{ok, status};
use crate::sessions::ProducerSessions;

/// Commands waiting to go out on one stream.
const OUTBOX: usize = 64;

/// Serves one Telemetry stream: the commands to send back, until the client closes its side or
/// sends garbage.
///
/// `pin` is who opened the stream, resolved again against the replicated users for each command
/// (and by the sessions before each question): a producer is registered only for the topics it
/// may publish to, so it is never asked about (nor sent the body of) another's transaction; a
/// caller that is not authenticated (never, or no longer: its user deleted or given a new secret)
/// is answered UNAUTHORIZED and the stream ends.
pub fn serve(
    mut inbound: tonic::Streaming<TelemetryCommand>,
    broker: Broker,
    sessions: Arc<ProducerSessions>,
    max_body_bytes: u64,
    namespace: String,
    pin: Pin,
) -> ReceiverStream<TelemetryCommand> {
    let (outbox, commands) = mpsc::channel(OUTBOX);
    tokio::spawn(async move {
        let mut registration = None;
        let revoked = Arc::new(Notify::new());
        loop {
            let command = tokio::select! {
                next = inbound.next() => match next {
                    Some(Ok(command)) => Some(command),
                    _ => break,
                },
                // The sessions found the user gone while about to ask this stream.
                () = revoked.notified() => None,
            };
            let caller = pin.caller(&broker);
            let command = match (command, caller.authenticated()) {
                (Some(command), Ok(())) => command,
                (_, Err(Denied::Unauthenticated(why))) => {
                    drop(registration.take());
                    let refusal = TelemetryCommand { status: Some(status(Code::Unauthorized, why)), command: None };
                    let _ = outbox.send(refusal).await;
                    break;
                }
                // Told revoked, yet authenticated again (a secret set back): nothing to answer.
                _ => continue,
            };
            if let Some(telemetry_command::Command::Settings(Settings {
                pub_sub: Some(settings::PubSub::Publishing(p)),
                ..
            })) = &command.command
            {
                drop(registration.take());
                let topics = p
                    .topics
                    .iter()
                    .map(|r| (topic_name(r, &namespace), r.clone()))
                    .filter(|(name, _)| caller.may(&broker, Action::Pub, ResourceKind::Topic, name).is_ok())
                    .collect();
                registration = Some(sessions.register(pin.clone(), topics, outbox.clone(), Arc::clone(&revoked)));
            }
            let group_of = |name: &str| broker.group(&qualified(&namespace, name)).or_else(|| broker.group(name));
            if let Some(reply) = reply(command, max_body_bytes, &group_of)
                && outbox.send(reply).await.is_err()
            {
                break;
            }
        }
        drop(registration);
    });
    ReceiverStream::new(commands)
}

const RECEIVE_BATCH: i32 = 32;
const LONG_POLLING: Duration = Duration::from_secs(20);
/// A consumer's wait before a failed message is retried, by attempt (the last one repeats).
/// Whole seconds: clients drop the fraction, and invisible times start at one second.
const RETRY_DELAYS_SECS: [u64; 10] = [1, 2, 5, 10, 30, 60, 120, 300, 600, 1800];

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
}

/// The retry schedule consumers follow after a failure. The Python client reads only the
/// customized form, the Node client only the exponential one.
fn consumer_backoff(max_attempts: i32, language: Language) -> RetryPolicy {
    let strategy = if language == Language::NodeJs {
        retry_policy::Strategy::ExponentialBackoff(ExponentialBackoff {
            initial: Some(duration(Duration::from_secs(1))),
            max: Some(duration(Duration::from_secs(1800))),
            multiplier: 2.0,
        })
    } else {
        retry_policy::Strategy::CustomizedBackoff(CustomizedBackoff {
            next: RETRY_DELAYS_SECS.iter().map(|s| duration(Duration::from_secs(*s))).collect(),
        })
    };
    RetryPolicy { max_attempts, strategy: Some(strategy) }
}

/// Exponential, as the Node client needs: 10 ms doubling up to 1 s.
fn backoff(max_attempts: i32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        strategy: Some(retry_policy::Strategy::ExponentialBackoff(ExponentialBackoff {
            initial: Some(duration(Duration::from_millis(10))),
            max: Some(duration(Duration::from_secs(1))),
            multiplier: 2.0,
        })),
    }
}

/// The server's answer to a client's `Settings`. `group_of` finds a consumer group by its
/// qualified name.
pub fn answer(mut s: Settings, max_body_bytes: u64, group_of: &dyn Fn(&str) -> Option<GroupConfig>) -> Settings {
    let language = s.user_agent.as_ref().map_or(Language::Unspecified, |ua| ua.language());
    match &mut s.pub_sub {
        Some(settings::PubSub::Publishing(p)) => {
            p.max_body_size = i32::try_from(max_body_bytes).unwrap_or(i32::MAX);
            p.validate_message_type = true;
            s.backoff_policy = Some(backoff(3));
        }
        Some(settings::PubSub::Subscription(sub)) => {
            let group = sub.group.as_ref().and_then(|g| group_of(&topic_name(g, "")));
            sub.fifo = Some(group.as_ref().map_or(sub.fifo.unwrap_or(false), |g| g.fifo));
            sub.receive_batch_size = Some(RECEIVE_BATCH);
            sub.long_polling_timeout = Some(duration(LONG_POLLING));
            // The clients refuse every lite subscription until the server states its limits.
            if let Some(b) = group.as_ref().and_then(|g| g.lite.as_ref()) {
                sub.lite_subscription_quota = Some(i32::try_from(b.quota).unwrap_or(i32::MAX));
                sub.max_lite_topic_size = Some(MAX_LITE_TOPIC_BYTES as i32);
            }
            let max_attempts = group.map_or(DEFAULT_MAX_ATTEMPTS, |g| g.max_attempts);
            s.backoff_policy = Some(consumer_backoff(max_attempts as i32, language));
        }
        None => {}
    }
    s.metric = Some(Metric { on: false, endpoints: None });
    s
}

/// The reply to one command from the client, if it needs one.
pub fn reply(
    cmd: TelemetryCommand,
    max_body_bytes: u64,
    group_of: &dyn Fn(&str) -> Option<GroupConfig>,
) -> Option<TelemetryCommand> {
    match cmd.command? {
        telemetry_command::Command::Settings(s) => Some(TelemetryCommand {
            status: Some(ok()),
            command: Some(telemetry_command::Command::Settings(answer(s, max_body_bytes, group_of))),
        }),
        // Stack traces and verification results are answers to commands we never send.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rockraft_proto::rocketmq::Publishing;

    #[test]
    fn producer_settings_come_back_with_a_body_limit_and_exponential_backoff() {
        let s = Settings {
            pub_sub: Some(settings::PubSub::Publishing(Publishing {
                topics: vec![],
                max_body_size: 0,
                validate_message_type: false,
            })),
            ..Default::default()
        };
        let a = answer(s, 4 << 20, &|_| None);
        let Some(settings::PubSub::Publishing(p)) = a.pub_sub else { panic!("publishing kept") };
        assert_eq!(p.max_body_size, 4 << 20);
        assert!(matches!(a.backoff_policy.unwrap().strategy, Some(retry_policy::Strategy::ExponentialBackoff(_))));
        assert_eq!(a.metric, Some(Metric { on: false, endpoints: None }));
    }

    #[test]
    fn consumers_get_their_group_fifo_flag_and_max_attempts() {
        use rockraft_proto::rocketmq::{Resource, Subscription, Ua};
        let group = GroupConfig { name: "g".into(), fifo: true, max_attempts: 5, priority_factor: 100, lite: None };
        let settings = |language: Language| Settings {
            pub_sub: Some(settings::PubSub::Subscription(Subscription {
                group: Some(Resource { name: "g".into(), resource_namespace: String::new() }),
                ..Default::default()
            })),
            user_agent: Some(Ua { language: language as i32, ..Default::default() }),
            ..Default::default()
        };
        let a = answer(settings(Language::Python), 1, &|name| (name == "g").then(|| group.clone()));
        let Some(settings::PubSub::Subscription(sub)) = &a.pub_sub else { panic!("subscription kept") };
        assert_eq!(sub.fifo, Some(true));
        let policy = a.backoff_policy.unwrap();
        assert_eq!(policy.max_attempts, 5);
        let Some(retry_policy::Strategy::CustomizedBackoff(c)) = policy.strategy else { panic!("customized") };
        assert!(c.next.iter().all(|d| d.seconds >= 1 && d.nanos == 0), "whole seconds, at least one");
        let node = answer(settings(Language::NodeJs), 1, &|_| None);
        let strategy = node.backoff_policy.unwrap().strategy;
        assert!(matches!(strategy, Some(retry_policy::Strategy::ExponentialBackoff(_))));
    }
}
