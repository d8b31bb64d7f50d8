//! The `rockraft` command line: run a node, operate a cluster, manage topics, read messages,
//! generate load.

mod bench;
mod bench_delay;
mod bench_remoting;
mod cluster;
mod messages;
mod plugin;
mod topics;
mod user;

use std::fmt::Display;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::admin::api::UnknownWord;
use crate::admin::{AdminCall, AdminClient, CallError, CallOptions, Credentials, MAX_PAGE, NodeConfig};
use crate::auth::signature::SignRequests;
use cluster::ClusterCmd;
use messages::{MessageCmd, TimerCmd, TransactionCmd};
use topics::{GroupCmd, TopicCmd};

#[derive(Parser)]
#[command(name = "rockraft", version, about = "A Raft-replicated, RocketMQ-compatible message broker")]
pub struct Cli {
    /// A node's admin endpoint (its `admin_addr`, HOST:PORT) to send operator requests to.
    #[arg(long, global = true, env = "ROCKRAFT_ENDPOINT", default_value = "127.0.0.1:7081")]
    endpoint: String,
    /// An admin's access key, when the cluster has authentication on.
    #[arg(long, global = true, env = "ROCKRAFT_ACCESS_KEY")]
    access_key: Option<String>,
    /// The secret of `--access-key` (better given in the environment than on a command line).
    #[arg(long, global = true, env = "ROCKRAFT_SECRET_KEY", hide_env_values = true)]
    secret_key: Option<String>,
    /// Connect over TLS, verifying the node's certificate against this CA certificate (PEM).
    #[arg(long, global = true, env = "ROCKRAFT_TLS_CA")]
    tls_ca: Option<PathBuf>,
    #[command(subcommand)]
    command: Top,
}

#[derive(Subcommand)]
enum Top {
    /// Run one node.
    Node {
        #[arg(long)]
        config: PathBuf,
    },
    /// The Raft group: status, initialisation, membership, leadership.
    #[command(subcommand)]
    Cluster(ClusterCmd),
    #[command(subcommand)]
    Topic(TopicCmd),
    /// Consumer groups: create, list with lag, reset to a point in time.
    #[command(subcommand)]
    Group(GroupCmd),
    #[command(subcommand)]
    Message(MessageCmd),
    /// Delayed messages waiting for their delivery time.
    #[command(subcommand)]
    Timer(TimerCmd),
    /// Transactional halves: list, and commit or roll back a stuck one.
    #[command(subcommand)]
    Transaction(TransactionCmd),
    /// Filter and transaction-checker plugins (WASM): register, bind, try one locally.
    #[command(subcommand)]
    Plugin(plugin::PluginCmd),
    /// Users: access keys and secrets that clients and operators sign requests with.
    #[command(subcommand)]
    User(user::UserCmd),
    /// Access rules: who may publish to or subscribe to which topics and groups.
    #[command(subcommand)]
    Acl(user::AclCmd),
    /// Load generators.
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Send messages as fast as `--concurrency` in-flight requests allow.
    Produce {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 100_000)]
        messages: u64,
        /// Body size in bytes.
        #[arg(long, default_value_t = 1024)]
        size: usize,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Messages per SendMessage request.
        #[arg(long, default_value_t = 1)]
        batch: usize,
        /// Client endpoints to spread the load over (comma-separated).
        #[arg(long)]
        endpoints: Option<String>,
        /// Give every message the user property `bench_mark`: '1' on every Nth message, '0' on the
        /// others, so `bench consume --sql "bench_mark = '1'"` selects 1 in N.
        #[arg(long)]
        mark_every: Option<u64>,
        /// Send to a lite parent topic: message i goes to lite topic `lite-<j>`, j a scrambled
        /// i mod N, so N messages or more create N lite topics in random order.
        #[arg(long)]
        lite_topics: Option<u64>,
        /// Send worker w's messages to queue w mod N of the topic's N queues, and report each
        /// queue's longest time without an acknowledged send (what a failover costs each queue).
        #[arg(long)]
        queue_gaps: Option<u32>,
        /// Send worker w's messages to queue w mod (the topic's queues), at the endpoint the
        /// topic's route (asked of the first endpoint) names for that queue, as the official
        /// clients do: with several data groups, straight to each queue's group leader.
        #[arg(long)]
        follow_routes: bool,
    },
    /// Send as RocketMQ 4.x clients do, over the Remoting protocol (SEND_MESSAGE_V2, one message
    /// per request, workers sharing one connection per address).
    ProduceRemoting {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 100_000)]
        messages: u64,
        /// Body size in bytes.
        #[arg(long, default_value_t = 1024)]
        size: usize,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Remoting addresses (the nodes' `remoting_addr`, `;` or `,` separated).
        #[arg(long, default_value = "127.0.0.1:9876")]
        namesrv: String,
    },
    /// Receive and ack (POP) with `--concurrency` long polls, until `--messages` are acked.
    Consume {
        #[arg(long)]
        topic: String,
        /// An existing consumer group.
        #[arg(long)]
        group: String,
        #[arg(long, default_value_t = 100_000)]
        messages: u64,
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Messages per receive (acked with one AckMessage).
        #[arg(long, default_value_t = 32)]
        batch: i32,
        /// Give up after this many seconds without a message.
        #[arg(long, default_value_t = 10)]
        idle_secs: u64,
        /// Client endpoints to spread the load over (comma-separated).
        #[arg(long)]
        endpoints: Option<String>,
        /// Subscribe with this SQL92 expression (e.g. `TRUE` to measure the filter's own cost).
        #[arg(long, conflicts_with = "tag")]
        sql: Option<String>,
        /// Subscribe with this tag expression.
        #[arg(long)]
        tag: Option<String>,
        /// A lite group of a lite parent: worker w first subscribes to the lite topics `lite-<j>`
        /// (j < N, j mod concurrency = w), at most `--lite-per-client`, as its own client.
        #[arg(long)]
        lite_topics: Option<u64>,
        #[arg(long, default_value_t = crate::broker::lite::DEFAULT_LITE_QUOTA as u64)]
        lite_per_client: u64,
    },
    /// Delayed messages: delivery lateness (`--mode spread|burst`), or send throughput with many
    /// timers pending (`--mode pending`).
    Delay(bench_delay::DelayArgs),
}

/// The client endpoint load goes to without `--endpoints`: the quick start's first node.
const DEFAULT_CLIENT_ENDPOINT: &str = "127.0.0.1:8081";

/// Why a command failed, as `main` prints it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// The node did not answer, or answered with an error.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The command line asks for something that cannot be done.
    #[error("{0}")]
    Usage(String),
    /// An answer holds what this build does not know (a newer node).
    #[error(transparent)]
    Unknown(#[from] UnknownWord),
    /// `cluster verify` found the replicas differ, or could not compare them.
    #[error("{0}")]
    Verify(String),
    /// The node's configuration cannot be used.
    #[error(transparent)]
    Config(#[from] crate::admin::ConfigError),
    /// The node stopped (or could not start) with this error.
    #[error("{0}")]
    Node(String),
    /// `plugin eval`: the plugin did not load, or failed on the message.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::PluginError),
    /// A load generator failed.
    #[error(transparent)]
    Bench(#[from] bench::BenchError),
}

/// Where a listing starts and how many rows it prints (asked for [`MAX_PAGE`] at a time).
#[derive(clap::Args)]
pub(crate) struct Listing {
    /// Start after this name (where a listing cut at `--limit` says to go on).
    #[arg(long, default_value = "")]
    after: String,
    /// At most this many rows (all when not given).
    #[arg(long, default_value_t = usize::MAX)]
    limit: usize,
}

/// Where operator requests go, and how: signed, over TLS.
pub(crate) struct Admin {
    endpoint: String,
    options: CallOptions,
}

impl Admin {
    /// `request` to the admin endpoint.
    async fn send<R: AdminCall>(&self, request: R) -> Result<R::Reply, CliError> {
        self.send_at(&self.endpoint, request).await
    }

    /// `request` to another node's admin endpoint, signed as the CLI signs.
    async fn send_at<R: AdminCall>(&self, endpoint: &str, request: R) -> Result<R::Reply, CliError> {
        Ok(AdminClient::connect(endpoint, &self.options)?.send(request).await?)
    }

    /// Prints a listing from `cursor` on, a page at a time, until `limit` rows are printed or it
    /// ends. `ask(cursor, page size)` is the request for a page; `rows` splits its reply into
    /// rows and the cursor of the next page (`None`: none follows). A listing cut at `limit` with
    /// more left says so on stderr (stdout holds rows only, for scripts), with the option `flag`
    /// and the value that go on from there.
    async fn page_through<R: AdminCall, T, C: Display>(
        &self,
        mut cursor: C,
        limit: usize,
        flag: &str,
        ask: impl Fn(&C, u32) -> R,
        rows: impl Fn(R::Reply) -> (Vec<T>, Option<C>),
        mut print: impl FnMut(T),
    ) -> Result<(), CliError> {
        let mut left = limit;
        while left > 0 {
            let (page, next) = rows(self.send(ask(&cursor, left.min(MAX_PAGE) as u32)).await?);
            left -= page.len().min(left);
            page.into_iter().for_each(&mut print);
            match next {
                None => return Ok(()),
                Some(next) => cursor = next,
            }
        }
        // Quoted when it holds a space (an ACL cursor), so it can be pasted back.
        let cursor = cursor.to_string();
        let cursor = if cursor.contains(' ') { format!("{cursor:?}") } else { cursor };
        eprintln!("more remain: stopped at --limit {limit}; continue with {flag} {cursor}");
        Ok(())
    }

    /// `--endpoints A,B,C`, else the quick start's first node, reached as operator requests are.
    fn client_endpoints(&self, endpoints: Option<String>) -> bench::Endpoints {
        let list = endpoints.unwrap_or_else(|| DEFAULT_CLIENT_ENDPOINT.to_string());
        let credentials = self.options.credentials.as_ref();
        bench::Endpoints {
            addrs: list.split(',').map(str::to_string).collect(),
            sign: SignRequests(credentials.map(|c| (c.access_key.clone(), c.secret.clone()))),
            tls_ca: self.options.tls_ca.clone(),
        }
    }
}

/// Milliseconds since the epoch, from RFC 3339 or a plain number of milliseconds.
fn parse_time(s: &str) -> Result<i64, CliError> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| CliError::Usage(format!("--to-time {s:?}: expected RFC 3339 or epoch milliseconds ({e})")))?;
    Ok((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// Milliseconds since the epoch as RFC 3339 (UTC).
fn format_ms(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

async fn run_command(cli: Cli) -> Result<(), CliError> {
    let credentials = match (cli.access_key, cli.secret_key) {
        (Some(access_key), Some(secret)) => {
            Some(Credentials { access_key, secret: crate::broker::access::Secret::new(secret) })
        }
        (None, None) => None,
        _ => return Err(CliError::Usage("--access-key and --secret-key go together".into())),
    };
    let admin = Admin { endpoint: cli.endpoint, options: CallOptions { credentials, tls_ca: cli.tls_ca } };
    match cli.command {
        Top::Node { config: path } => {
            let config = NodeConfig::load(&path)?;
            config.warn_of_open_secrets(&path);
            crate::node::run(config).await.map_err(|e| CliError::Node(e.to_string()))
        }
        Top::Bench(cmd) => Ok(bench(&admin, cmd).await?),
        Top::Cluster(cmd) => cluster::run(&admin, cmd).await,
        Top::Topic(cmd) => topics::topic(&admin, cmd).await,
        Top::Group(cmd) => topics::group(&admin, cmd).await,
        Top::Message(cmd) => messages::message(&admin, cmd).await,
        Top::Timer(cmd) => messages::timer(&admin, cmd).await,
        Top::Transaction(cmd) => messages::transaction(&admin, cmd).await,
        Top::Plugin(cmd) => plugin::run(&admin, cmd).await,
        Top::User(cmd) => user::user(&admin, cmd).await,
        Top::Acl(cmd) => user::acl(&admin, cmd).await,
    }
}

async fn bench(admin: &Admin, cmd: BenchCmd) -> Result<(), bench::BenchError> {
    match cmd {
        BenchCmd::Produce {
            topic,
            messages,
            size,
            concurrency,
            batch,
            endpoints,
            mark_every,
            lite_topics,
            queue_gaps,
            follow_routes,
        } => {
            let endpoints = admin.client_endpoints(endpoints);
            bench::produce(bench::ProduceOptions {
                endpoints,
                topic,
                messages,
                size,
                concurrency: concurrency.max(1),
                batch: batch.max(1),
                mark_every: mark_every.map(|n| n.max(1)),
                lite_topics: lite_topics.map(|n| n.max(1)),
                queue_gaps: queue_gaps.map(|n| n.max(1)),
                follow_routes,
            })
            .await
        }
        BenchCmd::ProduceRemoting { topic, messages, size, concurrency, namesrv } => {
            let endpoints =
                namesrv.split([';', ',']).map(str::trim).filter(|a| !a.is_empty()).map(str::to_string).collect();
            bench_remoting::produce(bench_remoting::RemotingProduceOptions {
                endpoints,
                topic,
                messages,
                size,
                concurrency: concurrency.max(1),
            })
            .await
        }
        BenchCmd::Consume {
            topic,
            group,
            messages,
            concurrency,
            batch,
            idle_secs,
            endpoints,
            sql,
            tag,
            lite_topics,
            lite_per_client,
        } => {
            let endpoints = admin.client_endpoints(endpoints);
            use rockraft_proto::rocketmq::{FilterExpression, FilterType};
            let filter = match (sql, tag) {
                (Some(expression), _) => Some(FilterExpression { r#type: FilterType::Sql as i32, expression }),
                (None, Some(expression)) => Some(FilterExpression { r#type: FilterType::Tag as i32, expression }),
                (None, None) => None,
            };
            bench::consume(bench::ConsumeOptions {
                filter,
                endpoints,
                topic,
                group,
                messages,
                concurrency: concurrency.max(1),
                batch: batch.clamp(1, 1024),
                idle: std::time::Duration::from_secs(idle_secs),
                lite: lite_topics.map(|n| (n.max(1), lite_per_client.max(1))),
            })
            .await
        }
        BenchCmd::Delay(args) => {
            let endpoints = admin.client_endpoints(args.endpoints.clone());
            bench_delay::run(args, endpoints).await
        }
    }
}

/// Entry point of the binary; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    if let Top::Plugin(plugin::PluginCmd::Eval { plugin, expr, message }) = &cli.command {
        // Prints on stdout either way: scripts read one line.
        return match plugin::eval(plugin, expr, message) {
            Ok(answer) => {
                println!("{answer}");
                0
            }
            Err(e) => {
                println!("error: {e}");
                1
            }
        };
    }
    if matches!(cli.command, Top::Node { .. }) {
        // Before any thread starts: every file the node writes (log, snapshots, state: user
        // secrets and handle keys are replicated) is its user's alone.
        crate::auth::at_rest::create_private();
        let logs = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(crate::raft::DEFAULT_LOG_FILTER)),
            )
            .with_writer(std::io::stderr)
            // A span's end is one line (at the span's level): requests at debug (`node.rs`).
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE);
        // One JSON object per line, for log shippers.
        match std::env::var("ROCKRAFT_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
            true => logs.json().init(),
            false => logs.init(),
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    // The one place an error becomes text.
    match runtime.block_on(run_command(cli)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}
