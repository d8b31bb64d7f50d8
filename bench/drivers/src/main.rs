//! `peer-bench`: the load drivers `bench/compare.sh` runs against NATS JetStream, RabbitMQ quorum
//! queues and RockRaft (through the official RocketMQ Rust client), so that the three systems are
//! measured by the same closed-loop harness: `window` tasks, each sending one message and waiting
//! for the system's durable acknowledgement before sending the next.
//!
//! Every subcommand ends with one line starting `RESULT ` of `key=value` pairs, which the script
//! parses; anything before it is for people.

mod jetstream;
mod load;
mod rabbit;
mod rocket;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Load drivers for comparing RockRaft with JetStream and RabbitMQ")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create (afresh) an R3 file-backed stream and a durable explicit-ack pull consumer.
    JetstreamSetup(jetstream::SetupArgs),
    /// Publish, each of `window` tasks awaiting its PubAck before the next publish.
    JetstreamProduce(jetstream::ProduceArgs),
    /// Fetch and double-ack (confirmed ack) with `fetchers` concurrent pull loops.
    JetstreamConsume(jetstream::ConsumeArgs),
    /// Publish persistent messages to a quorum queue with publisher confirms.
    RabbitProduce(rabbit::ProduceArgs),
    /// Send with the official RocketMQ Rust client.
    RocketmqProduce(rocket::ProduceArgs),
    /// Send for a fixed time and report the longest pause between acknowledged sends.
    RockraftGap(rocket::GapArgs),
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::JetstreamSetup(a) => jetstream::setup(a).await,
        Command::JetstreamProduce(a) => jetstream::produce(a).await,
        Command::JetstreamConsume(a) => jetstream::consume(a).await,
        Command::RabbitProduce(a) => rabbit::produce(a).await,
        Command::RocketmqProduce(a) => rocket::produce(a).await,
        Command::RockraftGap(a) => rocket::gap(a).await,
    };
    if let Err(e) = outcome {
        eprintln!("peer-bench: {e}");
        std::process::exit(1);
    }
}
