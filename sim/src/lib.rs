//! A deterministic simulation of a three-node RockRaft cluster.
//!
//! The nodes run their real code — openraft, tonic over HTTP/2, the store, the broker, the
//! proxy — as turmoil hosts: one thread, simulated TCP between them, simulated time. A producer
//! and a consumer speak the RocketMQ gRPC protocol to them while a nemesis, drawn from the seed,
//! partitions nodes, crashes and restarts them, and flips bytes in a stopped node's log. The
//! history the clients saw is then checked (`history.rs`).
//!
//! What the seed fixes: the network (latencies, the order hosts run in), the faults, the
//! workload, Raft's election timeouts, and the nodes' wall clock and keys (`rockraft::simulation`).
//! Each host's tokio runtime is seeded too, which needs `--cfg tokio_unstable` (set in the
//! workspace's `.cargo/config.toml`). The nodes' files are real files in a temporary directory,
//! so a crash here loses no written byte: lost and torn writes are the crash-point suites' part;
//! a flipped byte is the nemesis'.

#[cfg(not(tokio_unstable))]
compile_error!("the simulator needs --cfg tokio_unstable (see .cargo/config.toml; a RUSTFLAGS variable replaces it)");

pub mod history;
pub mod hosts;
pub mod nemesis;
pub mod workload;

use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use history::History;
use nemesis::Nemesis;
use workload::Shared;

/// Messages sent after the faults, once the node whose log was damaged leads.
const AFTER: u64 = 30;

/// One run's settings.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    /// Messages the producer sends (one after another, 40 ms apart).
    pub messages: u64,
    /// How long the nemesis acts, once the cluster is ready.
    pub faults: Duration,
    /// How long the consumer may take, after the faults, to consume every acknowledged message.
    pub drain: Duration,
}

impl Options {
    pub fn for_seed(seed: u64) -> Options {
        Options { seed, messages: 300, faults: Duration::from_secs(30), drain: Duration::from_secs(60) }
    }
}

/// What one run did and found.
pub struct Report {
    pub seed: u64,
    pub faults: Vec<String>,
    pub history: History,
    /// Problems in the history, or the simulation itself failing (a node stopped on an error,
    /// a panic, the time limit).
    pub problems: Vec<String>,
    /// Simulated time the run took.
    pub simulated: Duration,
}

impl Report {
    pub fn summary(&self) -> String {
        let h = &self.history;
        format!(
            "seed {}: {} sent, {} acknowledged, {} deliveries, slowest send answer {} ms, {} faults, {:.1} s simulated, trace {:016x}{}",
            self.seed,
            h.sent.len(),
            h.acknowledged(),
            h.deliveries.len(),
            h.slowest_send.as_millis(),
            self.faults.len(),
            self.simulated.as_secs_f64(),
            h.fingerprint(),
            match self.problems.is_empty() {
                true => String::new(),
                false => format!("\n  PROBLEMS:\n  - {}", self.problems.join("\n  - ")),
            }
        )
    }
}

/// Runs the simulation of `options.seed` to its end.
pub fn run(options: &Options) -> Report {
    let seed = options.seed;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let configs = hosts::write_configs(dir.path()).expect("node configurations");
    rockraft::simulation::seed(seed);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_millis(rockraft::simulation::EPOCH_MS as u64))
        .simulation_duration(options.faults + options.drain + Duration::from_secs(240))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(0))
        .max_message_latency(Duration::from_millis(10))
        .tcp_capacity(65536)
        .enable_random_order()
        .build();
    for (i, name) in hosts::NODES.iter().enumerate() {
        let config = configs[i].clone();
        sim.host(*name, move || {
            let config = config.clone();
            async move {
                let config = rockraft::admin::NodeConfig::load(&config)?;
                rockraft::node::run(config).await?;
                Ok(())
            }
        });
    }
    let shared = Rc::new(Shared::default());
    {
        let shared = Rc::clone(&shared);
        let (messages, drain) = (options.messages, options.drain);
        sim.client(hosts::CLIENT, async move {
            workload::set_up(&shared).await;
            shared.producing.set(true);
            let producer = workload::produce(Rc::clone(&shared), seed, 0..messages);
            let consumer = workload::consume(Rc::clone(&shared), seed, messages + AFTER, drain);
            futures_util::future::join(producer, consumer).await;
            // The node whose log was damaged last leads, and takes more messages.
            let damaged = shared.damaged.borrow().last().copied();
            if let Some(node) = damaged {
                let led = workload::make_leader(node, Duration::from_secs(20)).await;
                shared.history.borrow_mut().note(workload::now_ms(), format!("n{node} made leader of group 1: {led}"));
                if !led {
                    shared
                        .history
                        .borrow_mut()
                        .failures
                        .push(format!("n{node}, whose log was repaired, could not be made leader"));
                }
            }
            shared.producing.set(true);
            let producer = workload::produce(Rc::clone(&shared), seed, messages..messages + AFTER);
            let consumer = workload::consume(Rc::clone(&shared), seed, messages + AFTER, drain);
            futures_util::future::join(producer, consumer).await;
            if let Err(e) = workload::replicas_agree(Duration::from_secs(60)).await {
                shared.history.borrow_mut().failures.push(e);
            }
            Ok(())
        });
    }
    let mut nemesis = Nemesis::new(seed, options.faults, dir.path());
    let mut failure = None;
    loop {
        if shared.ready.get() {
            nemesis.act(&mut sim, &shared);
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                failure = Some(format!("the simulation stopped at {:?}: {e}", sim.elapsed()));
                break;
            }
        }
    }
    let simulated = sim.elapsed();
    drop(sim);
    let history = std::mem::take(&mut *shared.history.borrow_mut());
    let mut problems = history.problems();
    if !nemesis.finished() && failure.is_none() {
        problems.push("the run ended before the nemesis finished".into());
    }
    problems.extend(failure);
    Report { seed, faults: nemesis.log, history, problems, simulated }
}
