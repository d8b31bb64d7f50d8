//! The `rockraft` command line: run a node, operate a cluster, manage topics, read messages,
//! generate load.

mod bench;
mod bench_delay;
mod plugin;
mod user;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::admin::api::{
    AdminRequest, AdminResponse, MAX_CHECKSUMMED_RECORDS, MAX_CHECKSUMS, MessageLine, NodeStatus, Role,
};
use crate::admin::{CallOptions, Credentials, NodeConfig, call_with};
use crate::auth::signature::SignRequests;
use crate::broker::failover::Failover;
use crate::broker::group::GroupConfig;
use crate::broker::held::HeldEntry;
use crate::broker::settings::SettingsChange;
use crate::broker::{TopicConfig, TopicKind};
use crate::store::free_space::DiskLevel;

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

#[derive(Subcommand)]
enum ClusterCmd {
    /// Each member's role, term, last/committed/applied index and lag.
    Status,
    /// Initialise the group from the answering node's `members` (once; repeating is harmless).
    Init,
    TransferLeader {
        #[arg(long)]
        to: u64,
    },
    /// Add a node: it joins as a learner, catches up, then becomes a voter.
    AddNode {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        raft_addr: String,
        #[arg(long)]
        client_addr: String,
        /// Where operators reach the node's admin API (`cluster status` asks each member there).
        #[arg(long, default_value = "")]
        admin_addr: String,
    },
    RemoveNode {
        #[arg(long)]
        id: u64,
    },
    /// Seal new receipt handles, recall handles and transaction ids with a new key; those sealed
    /// under the key before it still work, older ones no longer do.
    RotateHandleKey,
    /// Every leadership change kept (the newest 64), with its phases: the old leader's last
    /// heartbeat, the election, the first commit of the new term, every member following.
    History,
    /// Checks that the replicas agree: every member's digest of its replicated state, compared
    /// once they have applied the same index (exit code 1 if they differ).
    Verify,
    /// Changes cluster-wide settings through the log, so every node uses the same value from the
    /// same entry on; with no option, prints them.
    Configure {
        /// How long a message id is remembered, so a retried send is not stored twice.
        #[arg(long)]
        dedupe_window_secs: Option<u64>,
        /// The largest plugin module `plugin register` accepts.
        #[arg(long)]
        max_module_bytes: Option<u64>,
    },
}

#[derive(Subcommand)]
enum TopicCmd {
    Create {
        name: String,
        #[arg(long, default_value_t = 4)]
        queues: u32,
        #[arg(long = "type", default_value = "normal")]
        kind: TopicKind,
        /// Lite parents (`--type lite`): minutes after its last write that a lite topic is
        /// deleted, with its offsets and subscriptions.
        #[arg(long, default_value_t = crate::broker::lite::DEFAULT_LITE_TTL_MINUTES)]
        lite_ttl_minutes: u32,
    },
    /// The lite topics of a lite parent, with their messages and, for a group, its backlog.
    Lite {
        parent: String,
        /// Show this group's backlog (not taken yet) and in-flight count per lite topic.
        #[arg(long)]
        group: Option<String>,
        /// List lite topics from this name on (the listing is paged).
        #[arg(long, default_value = "")]
        from: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    List,
    Delete {
        name: String,
    },
}

#[derive(Subcommand)]
enum GroupCmd {
    Create {
        name: String,
        /// Deliver each message group of a FIFO topic one message at a time, in order.
        #[arg(long)]
        fifo: bool,
        /// Deliveries before a message goes to the dead-letter topic `%DLQ%<name>`.
        #[arg(long, default_value_t = crate::broker::group::DEFAULT_MAX_ATTEMPTS)]
        max_attempts: u32,
        /// On priority topics: the percentage of receives that take the highest priority first;
        /// the others take from every queue in turn, so low priorities are not starved.
        #[arg(long, default_value_t = crate::broker::group::FULL_PRIORITY,
              value_parser = clap::value_parser!(u8).range(0..=100))]
        priority_factor: u8,
        /// Make this a lite consumer group of this lite parent topic.
        #[arg(long)]
        lite_bind_topic: Option<String>,
        /// Lite groups: `shared` (each message to one subscriber) or `exclusive` (the newest
        /// subscriber of a lite topic takes it over).
        #[arg(long, default_value = "shared")]
        lite_model: crate::broker::lite::LiteModel,
        /// Lite groups: how many lite topics one client may subscribe to.
        #[arg(long, default_value_t = crate::broker::lite::DEFAULT_LITE_QUOTA)]
        lite_quota: u32,
    },
    /// Each group, and per topic it consumed: lag (messages not acked yet) and in-flight count.
    List,
    Delete {
        name: String,
    },
    /// Replay (or skip) to the first message stored at or after a time; nothing stays in flight.
    ResetOffset {
        group: String,
        #[arg(long)]
        topic: String,
        /// RFC 3339 (`2026-11-30T04:00:00Z`) or milliseconds since the Unix epoch.
        #[arg(long)]
        to_time: String,
    },
}

/// The client endpoint load goes to without `--endpoints`: the quick start's first node.
const DEFAULT_CLIENT_ENDPOINT: &str = "127.0.0.1:8081";

/// Where operator requests go, and how: signed, over TLS.
pub(crate) struct Admin {
    endpoint: String,
    options: CallOptions,
}

impl Admin {
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
fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("--to-time {s:?}: expected RFC 3339 or epoch milliseconds ({e})"))?;
    Ok((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

#[derive(Subcommand)]
enum TimerCmd {
    /// Pending timers, earliest first: due time, topic, queue, message id, recall handle.
    List {
        #[arg(long)]
        topic: Option<String>,
        /// The next page: the timers after this recall handle (the last one listed).
        #[arg(long)]
        after: Option<String>,
        /// At most this many (the node answers at most 1000 at a time).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
}

#[derive(Subcommand)]
enum TransactionCmd {
    /// Open halves (with `--all`, also committed and rolled back ones still kept).
    List {
        #[arg(long)]
        topic: Option<String>,
        #[arg(long)]
        all: bool,
        /// The next page: the halves after this transaction id (the last one listed).
        #[arg(long)]
        after: Option<String>,
        /// At most this many (the node answers at most 1000 at a time).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Commits a half by message id: it is delivered. Also resumes one the checker rolled back.
    Commit {
        #[arg(long)]
        id: String,
    },
    /// Rolls a half back by message id: it is never delivered.
    Rollback {
        #[arg(long)]
        id: String,
    },
}

fn print_held(entries: &[HeldEntry]) {
    for h in entries {
        let state = match &h.state {
            None => "pending".to_string(),
            Some(s) => {
                serde_json::to_value(s).ok().and_then(|v| v["state"].as_str().map(str::to_string)).unwrap_or_default()
            }
        };
        println!(
            "{}\t{}\ttopic={}\tqueue={}\tid={}\t{}={}\tstate={}\tchecks={}\tbody_bytes={}",
            h.kind,
            format_ms(h.at_ms),
            h.message.topic,
            h.message.queue_id,
            h.message.message_id,
            if h.kind == "timer" { "recall_handle" } else { "transaction_id" },
            h.handle,
            state,
            h.checks,
            h.message.size
        );
    }
}

/// Milliseconds since the epoch as RFC 3339 (UTC).
fn format_ms(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

#[derive(Subcommand)]
enum MessageCmd {
    /// One line per message: queue offset, message id, tag, keys, body length.
    List {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        queue: u32,
        #[arg(long, default_value_t = 0)]
        from: u64,
        #[arg(long, default_value_t = 1000)]
        limit: u64,
        /// Read the answering node's own store (to compare replicas).
        #[arg(long)]
        local: bool,
    },
    Get {
        #[arg(long)]
        id: String,
        #[arg(long)]
        local: bool,
    },
}

fn print_lines(lines: &[MessageLine]) {
    for m in lines {
        println!("{}\t{}\t{}\t{}\t{}", m.offset, m.message_id, m.tag, m.keys.join(","), m.body_len);
    }
}

async fn request(admin: &Admin, req: AdminRequest) -> Result<AdminResponse, String> {
    request_at(admin, &admin.endpoint, req).await
}

/// `req` to another node's admin endpoint, signed as the CLI signs.
async fn request_at(admin: &Admin, endpoint: &str, req: AdminRequest) -> Result<AdminResponse, String> {
    match call_with(endpoint, &req, &admin.options).await? {
        AdminResponse::Error(e) => Err(e),
        ok => Ok(ok),
    }
}

/// Asks every member for its state digest until they report the same applied index (writes may
/// be going on), then compares the digests.
async fn cluster_verify(admin: &Admin) -> Result<(), String> {
    let AdminResponse::Status(here) = request(admin, AdminRequest::Status).await? else {
        return Err("unexpected answer".into());
    };
    let mut members = member_endpoints(&here);
    if members.is_empty() {
        members.push((here.id, admin.endpoint.clone()));
    }
    let mut last = Vec::new();
    for _ in 0..50 {
        last.clear();
        for (id, addr) in &members {
            let answer =
                tokio::time::timeout(Duration::from_secs(2), request_at(admin, addr, AdminRequest::Digest)).await;
            match answer {
                Ok(Ok(AdminResponse::Digest(d))) => last.push((*id, Some(d))),
                _ => last.push((*id, None)),
            }
        }
        let applied: std::collections::BTreeSet<Option<u64>> =
            last.iter().map(|(_, d)| d.and_then(|d| d.applied)).collect();
        if applied.len() == 1 && last.iter().all(|(_, d)| d.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (id, d) in &last {
        match d {
            Some(d) => println!(
                "node {id}: applied {} digest {:016x}",
                d.applied.map_or("-".into(), |a| a.to_string()),
                d.digest
            ),
            None => println!("node {id}: no answer"),
        }
    }
    let answers: Vec<_> = last.iter().filter_map(|(_, d)| *d).collect();
    if answers.len() != last.len() {
        return Err("not every member answered".into());
    }
    // The queues' records and messages, up to the index every member has applied.
    let upto = answers.iter().filter_map(|d| d.applied).min();
    if let Some(upto) = upto {
        match compare_queues(admin, &members, upto).await? {
            QueueComparison::Same { queues, records } => {
                let queues = if queues == 1 { "1 queue".to_string() } else { format!("{queues} queues") };
                println!("ConsumeQueues agree up to index {upto}: {records} records and messages in {queues}")
            }
            QueueComparison::Differ(first) => return Err(format!("first difference up to index {upto}: {first}")),
        }
    }
    let same_index = answers.windows(2).all(|w| w[0].applied == w[1].applied);
    if !same_index {
        return Err("the replicas did not reach the same applied index; try again when writes pause".into());
    }
    if answers.windows(2).all(|w| w[0].digest == w[1].digest) {
        println!("the replicas agree");
        Ok(())
    } else {
        Err("the replicas' states differ".into())
    }
}

enum QueueComparison {
    Same {
        queues: usize,
        records: u64,
    },
    /// The first difference, in (topic, queue, offset) order, in words.
    Differ(String),
}

/// How many chunks a range is cut into at each step of narrowing a difference down; a step
/// whose chunks are single records names the offset.
const SUMS_PER_QUEUE: u64 = 256;

/// Each member's checksums of a queue's records and messages `from..to`, `chunk` at a time.
type MemberSums = Vec<(u64, Vec<u32>)>;

/// Compares every member's ConsumeQueue records, and the messages they point at, written by
/// entries up to `upto`, over the offsets all of them still hold: per queue in chunks, then the
/// first differing chunk in smaller ones, down to the record.
async fn compare_queues(admin: &Admin, members: &[(u64, String)], upto: u64) -> Result<QueueComparison, String> {
    use std::collections::BTreeMap;
    const WAIT: Duration = Duration::from_secs(120);
    let ask = |addr: &str, req: AdminRequest| {
        let addr = addr.to_string();
        async move {
            tokio::time::timeout(WAIT, request_at(admin, &addr, req))
                .await
                .map_err(|_| format!("{addr} did not answer in {} s", WAIT.as_secs()))?
        }
    };
    // (topic, queue) -> each member's (start, end).
    let mut spans: BTreeMap<(String, u32), BTreeMap<u64, (u64, u64)>> = BTreeMap::new();
    for (id, addr) in members {
        match ask(addr, AdminRequest::QueueSpans { upto }).await? {
            AdminResponse::QueueSpans(list) => {
                for s in list {
                    spans.entry((s.topic, s.queue_id)).or_default().insert(*id, (s.start, s.end));
                }
            }
            other => return Err(format!("unexpected answer from node {id}: {other:?}")),
        }
    }
    let mut records = 0;
    for ((topic, queue), held) in &spans {
        if let Some((id, _)) = members.iter().find(|(id, _)| !held.contains_key(id)) {
            return Ok(QueueComparison::Differ(format!("topic {topic} queue {queue} is missing on node {id}")));
        }
        let from = held.values().map(|(start, _)| *start).max().unwrap_or(0);
        let to = held.values().map(|(_, end)| *end).min().unwrap_or(0);
        let ends: std::collections::BTreeSet<u64> = held.values().map(|(_, end)| *end).collect();
        let sums = |from: u64, to: u64, chunk: u64| {
            let topic = topic.clone();
            async move {
                let mut all = Vec::new();
                for (id, addr) in members {
                    let mut own = Vec::new();
                    for (lo, hi) in checksum_slices(from, to, chunk) {
                        let req = AdminRequest::QueueChecksums {
                            topic: topic.clone(),
                            queue: *queue,
                            from: lo,
                            to: hi,
                            chunk,
                        };
                        match ask(addr, req).await? {
                            AdminResponse::Checksums(c) => own.extend(c),
                            other => return Err(format!("unexpected answer from node {id}: {other:?}")),
                        }
                    }
                    all.push((*id, own));
                }
                Ok(all)
            }
        };
        match first_difference(from, to, sums).await? {
            Difference::None => {}
            Difference::At(offset, each) => {
                let who: Vec<String> = each.iter().map(|(id, sum)| format!("node {id} {sum:08x}")).collect();
                return Ok(QueueComparison::Differ(format!(
                    "topic {topic} queue {queue} offset {offset}: record and message checksums {}",
                    who.join(", ")
                )));
            }
            Difference::Within(lo, hi) => {
                return Ok(QueueComparison::Differ(format!(
                    "topic {topic} queue {queue} offsets {lo}..{hi}: the checksums of the range differ, those of its \
                     records did not when asked again"
                )));
            }
        }
        if ends.len() > 1 {
            let counts: Vec<String> = held.iter().map(|(id, (_, end))| format!("node {id} {end}")).collect();
            return Ok(QueueComparison::Differ(format!(
                "topic {topic} queue {queue} offset {to}: records written up to the index: {}",
                counts.join(", ")
            )));
        }
        records += to.saturating_sub(from);
    }
    Ok(QueueComparison::Same { queues: spans.len(), records })
}

#[derive(Debug, PartialEq, Eq)]
enum Difference {
    None,
    /// The first offset whose checksums differ, and each member's checksum of it.
    At(u64, Vec<(u64, u32)>),
    /// A range that differed, whose parts then agreed (the data changed between the questions).
    Within(u64, u64),
}

/// The first offset of `from..to` where the members' checksums differ: the range in at most
/// [`SUMS_PER_QUEUE`] chunks, then the first chunk that differs the same way, down to one record.
/// `sums(from, to, chunk)` asks the members.
async fn first_difference<F, Fut>(from: u64, to: u64, sums: F) -> Result<Difference, String>
where
    F: Fn(u64, u64, u64) -> Fut,
    Fut: std::future::Future<Output = Result<MemberSums, String>>,
{
    let (mut lo, mut hi) = (from, to);
    let mut narrowing = false;
    loop {
        let chunk = (hi - lo).div_ceil(SUMS_PER_QUEUE).clamp(1, MAX_CHECKSUMMED_RECORDS);
        let each = sums(lo, hi, chunk).await?;
        let Some(k) = first_disagreement(&each) else {
            return Ok(if narrowing { Difference::Within(lo, hi) } else { Difference::None });
        };
        let start = lo + k as u64 * chunk;
        if chunk == 1 {
            let at = each.iter().map(|(id, c)| (*id, c.get(k).copied().unwrap_or(0))).collect();
            return Ok(Difference::At(start, at));
        }
        (lo, hi, narrowing) = (start, hi.min(start + chunk), true);
    }
}

/// The `QueueChecksums` requests that cover `from..to` in chunks of `chunk` (at most
/// [`MAX_CHECKSUMMED_RECORDS`]): each within one request's limits, cut at chunk boundaries.
fn checksum_slices(from: u64, to: u64, chunk: u64) -> Vec<(u64, u64)> {
    let chunk = chunk.max(1);
    let per_request = MAX_CHECKSUMS.min(MAX_CHECKSUMMED_RECORDS / chunk).max(1) * chunk;
    let mut slices = Vec::new();
    let mut lo = from;
    while lo < to {
        let hi = to.min(lo.saturating_add(per_request));
        slices.push((lo, hi));
        lo = hi;
    }
    slices
}

/// The first position where the members' checksums are not all the same.
fn first_disagreement(sums: &[(u64, Vec<u32>)]) -> Option<usize> {
    let longest = sums.iter().map(|(_, c)| c.len()).max().unwrap_or(0);
    (0..longest).find(|&i| sums.windows(2).any(|w| w[0].1.get(i) != w[1].1.get(i)))
}

/// The failover history as a table, newest first; durations in milliseconds, each phase from
/// the end of the one before.
fn history_table(history: &[Failover]) -> String {
    use std::fmt::Write;
    if history.is_empty() {
        return "no leadership change recorded yet\n".into();
    }
    let mut out = format!(
        "{:>5} {:>6} {:>8} {:<24} {:>9} {:>8} {:>12} {:>6} {:>11}  {}\n",
        "TERM",
        "LEADER",
        "PREVIOUS",
        "ELECTED (UTC)",
        "DETECTION",
        "ELECTION",
        "FIRST_COMMIT",
        "ROUTES",
        "UNAVAILABLE",
        "NOT_FOLLOWING"
    );
    for f in history {
        let p = f.phases();
        let previous = f.previous.map_or("-".into(), |id| id.to_string());
        let detection = p.detection_ms.map_or("-".into(), |ms| ms.to_string());
        let missing = if f.not_following.is_empty() {
            "-".to_string()
        } else {
            f.not_following.iter().map(|id| id.to_string()).collect::<Vec<_>>().join(",")
        };
        let _ = writeln!(
            out,
            "{:>5} {:>6} {:>8} {:<24} {:>9} {:>8} {:>12} {:>6} {:>11}  {}",
            f.term,
            f.leader,
            previous,
            format_ms(f.elected_ms),
            detection,
            p.election_ms,
            p.first_commit_ms,
            p.routes_ms,
            p.unavailable_ms,
            missing
        );
    }
    out
}

/// Each member's admin endpoint, as the membership records it; the answering node's own is the
/// one asked (a membership made by an earlier release records none).
fn member_endpoints(here: &NodeStatus) -> Vec<(u64, String)> {
    here.members.iter().filter(|m| !m.admin_addr.is_empty()).map(|m| (m.id, m.admin_addr.clone())).collect()
}

async fn cluster_status(admin: &Admin) -> Result<(), String> {
    let AdminResponse::Status(here) = request(admin, AdminRequest::Status).await? else {
        return Err("unexpected answer".into());
    };
    let mut rows: Vec<(u64, String, Option<NodeStatus>)> = Vec::new();
    for (id, addr) in member_endpoints(&here) {
        let status = tokio::time::timeout(Duration::from_secs(2), request_at(admin, &addr, AdminRequest::Status)).await;
        let status = match status {
            Ok(Ok(AdminResponse::Status(s))) => Some(s),
            _ => None,
        };
        rows.push((id, addr, status));
    }
    if rows.is_empty() {
        rows.push((here.id, admin.endpoint.clone(), Some(here.clone())));
    }
    let leader_last = rows
        .iter()
        .filter_map(|(_, _, s)| s.as_ref())
        .filter(|s| s.role == Role::Leader)
        .find_map(|s| s.last_log_index);
    let leader_disk =
        rows.iter().filter_map(|(_, _, s)| s.as_ref()).find(|s| s.role == Role::Leader).map(|s| s.disk.clone());
    println!(
        "{:<4} {:<22} {:<10} {:>6} {:>10} {:>10} {:>10} {:>8}  {:<32}  clock",
        "id", "endpoint", "role", "term", "last", "committed", "applied", "lag", "disk"
    );
    let show = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
    let refusals: Vec<String> = rows
        .iter()
        .filter_map(|(id, _, s)| Some((id, s.as_ref()?)))
        .flat_map(|(id, s)| s.refused_by.iter().map(move |(by, why)| format!("member {by} refuses node {id}: {why}")))
        .collect();
    for (id, addr, s) in rows {
        match s {
            Some(s) => {
                let lag = match (leader_last, s.applied) {
                    (Some(l), Some(a)) => l.saturating_sub(a).to_string(),
                    _ => "-".into(),
                };
                // The largest offset this node reads from another member's clock.
                let widest = s.clock.offsets_ms.values().max_by_key(|o| o.abs()).copied().unwrap_or(0);
                let clock = match s.clock.skewed {
                    true => format!("SKEWED ({widest:+} ms): will not lead"),
                    false => format!("ok ({widest:+} ms)"),
                };
                println!(
                    "{:<4} {:<22} {:<10} {:>6} {:>10} {:>10} {:>10} {:>8}  {:<32}  {}",
                    id,
                    addr,
                    s.role,
                    s.term,
                    show(s.last_log_index),
                    show(s.committed),
                    show(s.applied),
                    lag,
                    s.disk.here.describe(),
                    clock
                );
            }
            None => println!("{:<4} {:<22} {:<10}", id, addr, "unreachable"),
        }
    }
    if let Some(alarm) = leader_disk.map(|d| d.cluster.alarm).filter(|a| *a != DiskLevel::Ok) {
        println!("disk alarm ({}): {} until space is freed", alarm.as_str(), alarm.refuses());
    }
    for line in refusals {
        println!("{line}");
    }
    Ok(())
}

async fn run_command(cli: Cli) -> Result<(), String> {
    let credentials = match (cli.access_key, cli.secret_key) {
        (Some(access_key), Some(secret)) => {
            Some(Credentials { access_key, secret: crate::broker::access::Secret::new(secret) })
        }
        (None, None) => None,
        _ => return Err("--access-key and --secret-key go together".into()),
    };
    let admin = Admin { endpoint: cli.endpoint, options: CallOptions { credentials, tls_ca: cli.tls_ca } };
    let ep = &admin;
    let done = |r: AdminResponse| {
        if let AdminResponse::Done(text) = r {
            println!("{text}");
        }
    };
    match cli.command {
        Top::Node { config: path } => {
            let config = NodeConfig::load(&path)?;
            config.warn_of_open_secrets(&path);
            crate::node::run(config).await
        }
        Top::Bench(BenchCmd::Produce {
            topic,
            messages,
            size,
            concurrency,
            batch,
            endpoints,
            mark_every,
            lite_topics,
        }) => {
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
            })
            .await
        }
        Top::Bench(BenchCmd::Consume {
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
        }) => {
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
        Top::Bench(BenchCmd::Delay(args)) => {
            let endpoints = admin.client_endpoints(args.endpoints.clone());
            bench_delay::run(args, endpoints).await
        }
        Top::Cluster(ClusterCmd::Status) => cluster_status(ep).await,
        Top::Cluster(ClusterCmd::Init) => request(ep, AdminRequest::Init).await.map(done),
        Top::Cluster(ClusterCmd::TransferLeader { to }) => {
            request(ep, AdminRequest::TransferLeader { to }).await.map(done)
        }
        Top::Cluster(ClusterCmd::AddNode { id, raft_addr, client_addr, admin_addr }) => {
            request(ep, AdminRequest::AddNode { id, raft_addr, client_addr, admin_addr }).await.map(done)
        }
        Top::Cluster(ClusterCmd::RemoveNode { id }) => request(ep, AdminRequest::RemoveNode { id }).await.map(done),
        Top::Cluster(ClusterCmd::Verify) => cluster_verify(ep).await,
        Top::Cluster(ClusterCmd::History) => match request(ep, AdminRequest::History).await? {
            AdminResponse::History(h) => {
                print!("{}", history_table(&h));
                Ok(())
            }
            other => Err(format!("unexpected answer: {other:?}")),
        },
        Top::Cluster(ClusterCmd::RotateHandleKey) => request(ep, AdminRequest::RotateHandleKey).await.map(done),
        Top::Cluster(ClusterCmd::Configure { dedupe_window_secs, max_module_bytes }) => {
            if dedupe_window_secs.is_some() || max_module_bytes.is_some() {
                let change = SettingsChange { dedupe_window_secs, max_module_bytes };
                request(ep, AdminRequest::Configure(change)).await?;
            }
            match request(ep, AdminRequest::Settings).await? {
                AdminResponse::Settings(s) => {
                    println!(
                        "dedupe_window_secs = {}\nmax_module_bytes = {}",
                        s.dedupe_window_secs, s.max_module_bytes
                    );
                    Ok(())
                }
                other => Err(format!("unexpected answer: {other:?}")),
            }
        }
        Top::Topic(TopicCmd::Create { name, queues, kind, lite_ttl_minutes }) => {
            let mut config = TopicConfig::new(name, queues, kind);
            if kind == TopicKind::Lite {
                config.lite_ttl_minutes = lite_ttl_minutes;
            }
            request(ep, AdminRequest::CreateTopic(config)).await.map(done)
        }
        Top::Topic(TopicCmd::Lite { parent, group, from, limit }) => {
            match request(ep, AdminRequest::ListLiteTopics { parent, group: group.clone(), from, limit }).await? {
                AdminResponse::LiteTopics(rows) => {
                    for r in rows {
                        match &group {
                            Some(_) => println!(
                                "{}\tmessages={}\tbacklog={}\tinflight={}\tlast_write={}",
                                r.lite, r.messages, r.backlog, r.inflight, r.last_write_ms
                            ),
                            None => println!("{}\tmessages={}\tlast_write={}", r.lite, r.messages, r.last_write_ms),
                        }
                    }
                    Ok(())
                }
                other => Err(format!("unexpected answer: {other:?}")),
            }
        }
        Top::Topic(TopicCmd::Delete { name }) => request(ep, AdminRequest::DeleteTopic { name }).await.map(done),
        Top::Topic(TopicCmd::List) => {
            if let AdminResponse::Topics(topics) = request(ep, AdminRequest::ListTopics).await? {
                for t in topics {
                    let messages: u64 = t.queues.iter().map(|(_, start, next)| next - start).sum();
                    println!(
                        "{}\t{}\tqueues={}\tmessages={}\ttimers={}\topen_halves={}",
                        t.config.name, t.config.kind, t.config.queues, messages, t.held.timers, t.held.open_halves
                    );
                }
            }
            Ok(())
        }
        Top::Group(GroupCmd::Create {
            name,
            fifo,
            max_attempts,
            priority_factor,
            lite_bind_topic,
            lite_model,
            lite_quota,
        }) => {
            let lite = lite_bind_topic.map(|topic| crate::broker::lite::LiteBinding {
                topic,
                model: lite_model,
                quota: lite_quota,
            });
            let config = GroupConfig { name, fifo, max_attempts, priority_factor, lite };
            request(ep, AdminRequest::CreateGroup(config)).await.map(done)
        }
        Top::Group(GroupCmd::Delete { name }) => request(ep, AdminRequest::DeleteGroup { name }).await.map(done),
        Top::Group(GroupCmd::ResetOffset { group, topic, to_time }) => {
            let time_ms = parse_time(&to_time)?;
            request(ep, AdminRequest::ResetOffset { group, topic, time_ms }).await.map(done)
        }
        Top::Group(GroupCmd::List) => {
            if let AdminResponse::Groups(groups) = request(ep, AdminRequest::ListGroups).await? {
                for g in groups {
                    let kind = if g.config.fifo { "fifo" } else { "normal" };
                    let (name, attempts, factor) = (&g.config.name, g.config.max_attempts, g.config.priority_factor);
                    let lite = match &g.config.lite {
                        Some(b) => {
                            format!("\tlite_bind_topic={}\tlite_model={}\tlite_quota={}", b.topic, b.model, b.quota)
                        }
                        None => String::new(),
                    };
                    println!("{name}	{kind}	max_attempts={attempts}	priority_factor={factor}{lite}");
                    for p in g.progress {
                        println!("  topic={}	lag={}	inflight={}", p.topic, p.lag, p.inflight);
                    }
                }
            }
            Ok(())
        }
        Top::Message(MessageCmd::List { topic, queue, from, limit, local }) => {
            if let AdminResponse::Messages(lines) =
                request(ep, AdminRequest::ListMessages { topic, queue, from, limit, local }).await?
            {
                print_lines(&lines);
            }
            Ok(())
        }
        Top::Message(MessageCmd::Get { id, local }) => {
            match request(ep, AdminRequest::GetMessage { id: id.clone(), local }).await? {
                AdminResponse::Messages(lines) if !lines.is_empty() => {
                    for m in lines {
                        println!(
                            "topic={} queue={} offset={} id={} tag={} keys={} body_len={} store_time_ms={}",
                            m.topic,
                            m.queue,
                            m.offset,
                            m.message_id,
                            m.tag,
                            m.keys.join(","),
                            m.body_len,
                            m.store_timestamp_ms
                        );
                    }
                    Ok(())
                }
                AdminResponse::Held(held) if !held.is_empty() => {
                    print_held(&held);
                    Ok(())
                }
                _ => Err(format!("message {id} not found")),
            }
        }
        Top::Timer(TimerCmd::List { topic, after, limit }) => {
            if let AdminResponse::Held(held) =
                request(ep, AdminRequest::ListHeld { timers: true, topic, all: false, after, limit }).await?
            {
                print_held(&held);
            }
            Ok(())
        }
        Top::Transaction(TransactionCmd::List { topic, all, after, limit }) => {
            if let AdminResponse::Held(held) =
                request(ep, AdminRequest::ListHeld { timers: false, topic, all, after, limit }).await?
            {
                print_held(&held);
            }
            Ok(())
        }
        Top::Transaction(TransactionCmd::Commit { id }) => {
            request(ep, AdminRequest::ResolveTransaction { message_id: id, commit: true }).await.map(done)
        }
        Top::Transaction(TransactionCmd::Rollback { id }) => {
            request(ep, AdminRequest::ResolveTransaction { message_id: id, commit: false }).await.map(done)
        }
        Top::Plugin(cmd) => request(ep, plugin::request(cmd)?).await.map(plugin::print),
        Top::User(cmd) => request(ep, user::user_request(cmd)?).await.map(user::print),
        Top::Acl(cmd) => request(ep, user::acl_request(cmd)?).await.map(user::print),
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
    match runtime.block_on(run_command(cli)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_table_shows_each_phase_and_who_did_not_follow() {
        let failover = Failover {
            term: 7,
            leader: 3,
            previous: Some(1),
            last_heard_ms: Some(1_000),
            election_started_ms: 1_420,
            elected_ms: 1_480,
            first_commit_ms: 1_495,
            routes_converged_ms: 1_600,
            not_following: vec![1],
        };
        let table = history_table(&[failover]);
        let row: Vec<&str> = table.lines().nth(1).expect("one row").split_whitespace().collect();
        assert_eq!(row, ["7", "3", "1", "1970-01-01T00:00:01.48Z", "420", "60", "15", "105", "495", "1"]);
        assert_eq!(history_table(&[]), "no leadership change recorded yet\n");
    }

    /// Three members' records of a queue of `len` offsets: node 2's differs at `bad`.
    fn answers(len: u64, bad: u64) -> impl Fn(u64, u64, u64) -> std::future::Ready<Result<MemberSums, String>> {
        move |from, to, chunk| {
            assert!(chunk <= MAX_CHECKSUMMED_RECORDS && to <= len);
            let sums = |node: u64| -> Vec<u32> {
                // One chunk's checksum: whether it holds the damaged record, and where it starts.
                (from..to)
                    .step_by(chunk as usize)
                    .map(|lo| u32::from(node == 2 && (lo..lo + chunk).contains(&bad)) + (lo as u32).wrapping_mul(2))
                    .collect()
            };
            std::future::ready(Ok((1..=3).map(|node| (node, sums(node))).collect()))
        }
    }

    #[tokio::test]
    async fn a_difference_deep_in_a_long_queue_is_narrowed_down_to_its_offset() {
        let len = 3_000_000_000;
        let found = first_difference(0, len, answers(len, 1_234_567_891)).await.unwrap();
        let Difference::At(offset, each) = found else { panic!("{found:?}") };
        assert_eq!(offset, 1_234_567_891);
        assert_eq!(each.iter().filter(|(_, sum)| *sum != each[0].1).count(), 1, "node 2 alone differs");
        assert_eq!(first_difference(0, 10, answers(10, 99)).await.unwrap(), Difference::None);
    }

    #[test]
    fn checksum_requests_stay_within_one_request_s_limits_and_cover_the_range() {
        for (from, to, chunk) in [(0, 10, 1), (5, 20_000, 1), (0, 1_000_000_000, 3_906_250), (7, 7, 1)] {
            let slices = checksum_slices(from, to, chunk);
            let mut next = from;
            for (lo, hi) in slices {
                assert_eq!(lo, next, "contiguous");
                assert!(hi - lo <= MAX_CHECKSUMMED_RECORDS && (hi - lo).div_ceil(chunk) <= MAX_CHECKSUMS);
                assert!(hi == to || (hi - from) % chunk == 0, "cut at chunk boundaries");
                next = hi;
            }
            assert_eq!(next, to.max(from));
        }
    }
}
