//! RabbitMQ: persistent messages to a durable quorum queue (Raft-replicated, like RockRaft),
//! each awaited until its publisher confirm, which a quorum queue sends once a majority of its
//! replicas has written the message to disk.

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::load;

#[derive(clap::Args)]
pub struct ProduceArgs {
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    uri: String,
    #[arg(long)]
    queue: String,
    #[command(flatten)]
    load: load::Load,
    /// Channels the window is spread over (at most `window`). A channel is one Erlang process on
    /// the broker, so a single one would measure that process rather than the queue.
    #[arg(long, default_value_t = 8)]
    channels: usize,
    /// Replicas of the quorum queue when it is created.
    #[arg(long, default_value_t = 3)]
    replicas: i32,
}

pub async fn produce(a: ProduceArgs) -> Result<(), String> {
    let props = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio);
    let conn = Connection::connect(&a.uri, props).await.map_err(|e| format!("connect {}: {e}", a.uri))?;
    let mut channels: Vec<Channel> = Vec::new();
    for _ in 0..a.channels.clamp(1, a.load.window.max(1)) {
        let ch = conn.create_channel().await.map_err(|e| format!("channel: {e}"))?;
        ch.confirm_select(ConfirmSelectOptions::default()).await.map_err(|e| format!("confirm.select: {e}"))?;
        channels.push(ch);
    }
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args.insert("x-quorum-initial-group-size".into(), AMQPValue::LongInt(a.replicas));
    channels[0]
        .queue_declare(&a.queue, QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .map_err(|e| format!("declare quorum queue {}: {e}", a.queue))?;

    let (body, queue) = (load::payload(a.load.size), a.queue.clone());
    let outcome = load::closed_loop(a.load.messages, a.load.window, move |i| {
        let ch = channels[i as usize % channels.len()].clone();
        let (body, queue) = (body.clone(), queue.clone());
        async move {
            // delivery_mode 2: persistent. Quorum queues store every message on disk anyway,
            // but this is what a producer that wants durability sets.
            let props = BasicProperties::default().with_delivery_mode(2);
            let confirm = ch
                .basic_publish("", &queue, BasicPublishOptions::default(), &body, props)
                .await
                .map_err(|e| e.to_string())?;
            match confirm.await.map_err(|e| e.to_string())? {
                Confirmation::Ack(_) => Ok(()),
                Confirmation::Nack(_) => Err("nack".to_string()),
                Confirmation::NotRequested => Err("confirms are not enabled".to_string()),
            }
        }
    })
    .await;
    let _ = conn.close(200, "done").await;
    outcome.report("rabbitmq", "produce", a.load.window, a.load.messages);
    Ok(())
}
