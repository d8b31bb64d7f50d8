//! Receives and acks messages with the official RocketMQ Rust client (a SimpleConsumer), printing
//! one line per message: message id, delivery attempt, tag, body.
//!
//! `cargo run -p rockraft-examples --bin consume -- ENDPOINTS TOPIC GROUP [COUNT] [TAG_EXPRESSION]`
//! The group must exist (`rockraft group create GROUP`). Stops after COUNT messages (default 1),
//! or with exit code 1 if none arrives for 30 s. With `ROCKRAFT_CLIENT_ACCESS_KEY` and
//! `ROCKRAFT_CLIENT_SECRET_KEY` set, requests are signed; with `ROCKRAFT_CLIENT_TLS=1`, sent
//! over TLS.

use std::time::{Duration, Instant};

use rocketmq::SimpleConsumer;
use rocketmq::conf::{ClientOption, SimpleConsumerOption};
use rocketmq::model::common::{FilterExpression, FilterType};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [endpoints, topic, group, rest @ ..] = args.as_slice() else {
        eprintln!("usage: consume ENDPOINTS TOPIC GROUP [COUNT] [TAG_EXPRESSION]");
        std::process::exit(2);
    };
    let count: usize = rest.first().and_then(|c| c.parse().ok()).unwrap_or(1);
    let filter = FilterExpression::new(FilterType::Tag, rest.get(1).map_or("*", String::as_str));
    let mut consumer_option = SimpleConsumerOption::default();
    consumer_option.set_consumer_group(group.as_str());
    consumer_option.set_topics(vec![topic.as_str()]);
    let mut client_option = ClientOption::default();
    client_option.set_access_url(endpoints.as_str());
    // A cluster with authentication on: sign as this user.
    if let (Ok(key), Ok(secret)) =
        (std::env::var("ROCKRAFT_CLIENT_ACCESS_KEY"), std::env::var("ROCKRAFT_CLIENT_SECRET_KEY"))
    {
        client_option.set_access_key(key);
        client_option.set_secret_key(secret);
    }
    // A cluster with TLS: `ROCKRAFT_CLIENT_TLS=1`; the client verifies the node against the
    // system's roots, or the CA file `SSL_CERT_FILE` names.
    client_option.set_enable_tls(std::env::var("ROCKRAFT_CLIENT_TLS").is_ok_and(|v| v == "1"));
    client_option.set_long_polling_timeout(Duration::from_secs(10));
    let mut consumer = match SimpleConsumer::new(consumer_option, client_option) {
        Ok(c) => c,
        Err(e) => fail(&format!("{e:?}")),
    };
    if let Err(e) = consumer.start().await {
        fail(&format!("cannot start the consumer: {e:?}"));
    }
    let mut done = 0;
    let mut last = Instant::now();
    while done < count {
        if last.elapsed() > Duration::from_secs(30) {
            fail(&format!("no message for 30 s ({done} of {count} received)"));
        }
        let batch = match consumer.receive_with(topic.as_str(), &filter, 16, Duration::from_secs(30)).await {
            Ok(b) => b,
            Err(e) => {
                // An election, say: try again.
                eprintln!("receive failed: {e:?}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        for m in batch {
            last = Instant::now();
            println!(
                "{} attempt={} tag={} body={}",
                m.message_id(),
                m.delivery_attempt(),
                m.tag().unwrap_or(""),
                String::from_utf8_lossy(m.body())
            );
            match consumer.ack(&m).await {
                Ok(()) => done += 1,
                // Not acked: it comes back after its invisible time.
                Err(e) => eprintln!("ack failed: {e:?}"),
            }
        }
    }
    let _ = consumer.shutdown().await;
}

fn fail(why: &str) -> ! {
    eprintln!("error: {why}");
    std::process::exit(1);
}
