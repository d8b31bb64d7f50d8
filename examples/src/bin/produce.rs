//! Sends one message with the official RocketMQ Rust client.
//!
//! `cargo run -p rockraft-examples --bin produce -- ENDPOINTS TOPIC BODY [TAG]`
//! ENDPOINTS is one or more client endpoints, comma-separated (e.g. 127.0.0.1:8081). With
//! `ROCKRAFT_CLIENT_ACCESS_KEY` and `ROCKRAFT_CLIENT_SECRET_KEY` set, requests are signed; with `ROCKRAFT_CLIENT_TLS=1`, sent
//! over TLS.

use rocketmq::Producer;
use rocketmq::conf::{ClientOption, ProducerOption};
use rocketmq::model::message::MessageBuilder;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [endpoints, topic, body, rest @ ..] = args.as_slice() else {
        eprintln!("usage: produce ENDPOINTS TOPIC BODY [TAG]");
        std::process::exit(2);
    };
    let mut producer_option = ProducerOption::default();
    producer_option.set_topics(vec![topic.as_str()]);
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
    let mut producer = match Producer::new(producer_option, client_option) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e:?}");
            std::process::exit(1);
        }
    };
    if let Err(e) = producer.start().await {
        eprintln!("error: cannot start the producer: {e:?}");
        std::process::exit(1);
    }
    let mut message = MessageBuilder::builder().set_topic(topic.as_str()).set_body(body.clone().into_bytes());
    if let Some(tag) = rest.first() {
        message = message.set_tag(tag.as_str());
    }
    let message = match message.build() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e:?}");
            std::process::exit(1);
        }
    };
    match producer.send(message).await {
        Ok(receipt) => println!("sent: message id {}", receipt.message_id()),
        Err(e) => {
            eprintln!("error: send failed: {e:?}");
            std::process::exit(1);
        }
    }
    let _ = producer.shutdown().await;
}
