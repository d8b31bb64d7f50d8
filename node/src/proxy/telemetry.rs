//! `Telemetry`: the client's settings handshake. Response headers go out at once (the Rust client
//! waits for them without a timeout); each `Settings` command is answered on the same stream with
//! the settings filled in the way the official clients need.

use std::time::Duration;

use rockraft_proto::rocketmq::{
    ExponentialBackoff, Metric, RetryPolicy, Settings, TelemetryCommand, retry_policy, settings, telemetry_command,
};

use crate::proxy::status::ok;

const RECEIVE_BATCH: i32 = 32;
const LONG_POLLING: Duration = Duration::from_secs(20);
const MAX_DELIVERY_ATTEMPTS: i32 = 16;

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
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

/// The server's answer to a client's `Settings`.
pub fn answer(mut s: Settings, max_body_bytes: u64) -> Settings {
    match &mut s.pub_sub {
        Some(settings::PubSub::Publishing(p)) => {
            p.max_body_size = i32::try_from(max_body_bytes).unwrap_or(i32::MAX);
            p.validate_message_type = true;
            s.backoff_policy = Some(backoff(3));
        }
        Some(settings::PubSub::Subscription(sub)) => {
            sub.fifo = Some(sub.fifo.unwrap_or(false));
            sub.receive_batch_size = Some(RECEIVE_BATCH);
            sub.long_polling_timeout = Some(duration(LONG_POLLING));
            s.backoff_policy = Some(backoff(MAX_DELIVERY_ATTEMPTS));
        }
        None => {}
    }
    s.metric = Some(Metric { on: false, endpoints: None });
    s
}

/// The reply to one command from the client, if it needs one.
pub fn reply(cmd: TelemetryCommand, max_body_bytes: u64) -> Option<TelemetryCommand> {
    match cmd.command? {
        telemetry_command::Command::Settings(s) => Some(TelemetryCommand {
            status: Some(ok()),
            command: Some(telemetry_command::Command::Settings(answer(s, max_body_bytes))),
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
        let a = answer(s, 4 << 20);
        let Some(settings::PubSub::Publishing(p)) = a.pub_sub else { panic!("publishing kept") };
        assert_eq!(p.max_body_size, 4 << 20);
        assert!(matches!(a.backoff_policy.unwrap().strategy, Some(retry_policy::Strategy::ExponentialBackoff(_))));
        assert_eq!(a.metric, Some(Metric { on: false, endpoints: None }));
    }
}
