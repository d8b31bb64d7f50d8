//! `rockraft cluster …`: status, initialisation, membership, leadership, settings, the failover
//! history, and `verify`, which compares the replicas.

use std::time::Duration;

use clap::Subcommand;
use rockraft_proto::rockraft as pb;

use super::{Admin, CliError, format_ms};
use crate::admin::AdminCall;
use crate::admin::api::{MAX_CHECKSUMMED_RECORDS, MAX_CHECKSUMS, NodeStatus, Role, StateDigest};
use crate::broker::failover::Failover;
use crate::broker::repair::Repair;
use crate::store::free_space::DiskLevel;

#[derive(Subcommand)]
pub(super) enum ClusterCmd {
    /// Each member's role, term, last/committed/applied index and lag in the group holding the
    /// metadata (or in `--group N`), and each group's leader.
    Status {
        #[arg(long)]
        group: Option<u32>,
    },
    /// Initialise the cluster from the answering node's `members` (once; repeating is harmless).
    Init {
        /// How many data groups to run (each a Raft group of its own on every node); more can be
        /// added later with `cluster add-group`.
        #[arg(long)]
        data_groups: Option<u32>,
    },
    /// Adds data groups (never removed): each node starts a replica of each, and the balancer
    /// gives each node its share of their leaderships.
    AddGroup {
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Hands the leadership of the group holding the metadata (or of `--group N`) to a node.
    TransferLeader {
        #[arg(long)]
        to: u64,
        #[arg(long)]
        group: Option<u32>,
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
        /// The rack (or zone) the node runs in: from five nodes each data group's three replicas
        /// are spread over the racks named.
        #[arg(long, default_value = "")]
        rack: String,
    },
    RemoveNode {
        #[arg(long)]
        id: u64,
    },
    /// Seal new receipt handles, recall handles and transaction ids with a new key; those sealed
    /// under the key before it still work, older ones no longer do.
    RotateHandleKey,
    /// Every leadership change kept (the newest 64), with its phases: the old leader's last
    /// heartbeat, the election, the first commit of the new term, every member following; of
    /// the metadata group, or of `--group N`. Then the repairs nodes made of their disks (the
    /// newest 64; of every group, or of `--group N`).
    History {
        #[arg(long)]
        group: Option<u32>,
    },
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
        /// Whether each data group's leadership is handed to the node whose turn it is (`false`:
        /// leaderships stay where elections and `transfer-leader` put them).
        #[arg(long)]
        balance_leaders: Option<bool>,
    },
}

pub(super) async fn run(admin: &Admin, cmd: ClusterCmd) -> Result<(), CliError> {
    let message = match cmd {
        ClusterCmd::Status { group } => return status(admin, group).await,
        ClusterCmd::Verify => return verify(admin).await,
        ClusterCmd::History { group } => {
            let history = admin.send(pb::GetFailoverHistoryRequest { group }).await?;
            let repairs: Vec<Repair> = history.repairs.into_iter().filter_map(|r| Repair::try_from(r).ok()).collect();
            let history: Vec<Failover> = history.failovers.into_iter().map(Failover::from).collect();
            print!("{}\n{}", history_table(&history), repairs_table(&repairs));
            return Ok(());
        }
        ClusterCmd::Configure { dedupe_window_secs, max_module_bytes, balance_leaders } => {
            let change =
                pb::ConfigureRequest { dedupe_window_secs, max_module_bytes, data_groups: None, balance_leaders };
            if change != pb::ConfigureRequest::default() {
                admin.send(change).await?;
            }
            let s = admin.send(pb::GetSettingsRequest {}).await?;
            println!(
                "dedupe_window_secs = {}\nmax_module_bytes = {}\ndata_groups = {}\nbalance_leaders = {}",
                s.dedupe_window_secs, s.max_module_bytes, s.data_groups, s.balance_leaders
            );
            return Ok(());
        }
        ClusterCmd::AddGroup { count } => {
            let now = admin.send(pb::GetSettingsRequest {}).await?.data_groups;
            let data_groups = Some(now.saturating_add(count));
            admin.send(pb::ConfigureRequest { data_groups, ..Default::default() }).await?;
            let now = admin.send(pb::GetSettingsRequest {}).await?.data_groups;
            println!("data groups: {now}");
            return Ok(());
        }
        ClusterCmd::Init { data_groups } => {
            let done = admin.send(pb::InitRequest {}).await?;
            if let Some(n) = data_groups.filter(|&n| n > 1) {
                admin.send(pb::ConfigureRequest { data_groups: Some(n), ..Default::default() }).await?;
            }
            done
        }
        ClusterCmd::TransferLeader { to, group: None | Some(0) } => {
            admin.send(pb::TransferLeaderRequest { to, group: None }).await?
        }
        ClusterCmd::TransferLeader { to, group: Some(g) } => {
            // Asked of the node leading the group, as the answering node knows it.
            let here = status_at(admin, &admin.endpoint, None).await?;
            let leader = here.groups.iter().find(|r| r.id == g).and_then(|r| r.leader);
            let leader =
                leader.ok_or_else(|| CliError::Usage(format!("group {g} has no leader known to this node")))?;
            let addr = member_endpoints(&here).into_iter().find(|(id, _)| *id == leader).map(|(_, a)| a);
            let addr = addr.unwrap_or_else(|| admin.endpoint.clone());
            admin.send_at(&addr, pb::TransferLeaderRequest { to, group: Some(g) }).await?
        }
        ClusterCmd::AddNode { id, raft_addr, client_addr, admin_addr, rack } => {
            admin.send(pb::AddNodeRequest { id, raft_addr, client_addr, admin_addr, rack }).await?
        }
        ClusterCmd::RemoveNode { id } => admin.send(pb::RemoveNodeRequest { id }).await?,
        ClusterCmd::RotateHandleKey => admin.send(pb::RotateHandleKeyRequest {}).await?,
    };
    println!("{}", message.message);
    Ok(())
}

/// Compares the members' replicas of each Raft group in turn (each group its own log and
/// state); says which groups differ.
async fn verify(admin: &Admin) -> Result<(), CliError> {
    let here = status_at(admin, &admin.endpoint, None).await?;
    let mut members = member_endpoints(&here);
    if members.is_empty() {
        members.push((here.id, admin.endpoint.clone()));
    }
    // Every group this node runs: the metadata group and each data group.
    let mut groups: Vec<u32> = here.groups.iter().map(|g| g.id).collect();
    if groups.is_empty() {
        groups = (1..=admin.send(pb::GetSettingsRequest {}).await?.data_groups.max(1)).collect();
    }
    let mut failed = Vec::new();
    for &group in &groups {
        if groups.len() > 1 {
            match group {
                0 => println!("group 0 (metadata):"),
                n => println!("group {n}:"),
            }
        }
        let (holders, known) = group_members(admin, &here, &members, group).await;
        if let Err(e) = verify_group(admin, &holders, known, group).await {
            println!("{e}");
            failed.push(group.to_string());
        }
    }
    match failed.is_empty() {
        true => Ok(()),
        false if groups.len() == 1 => Err(CliError::Verify("the replicas do not agree".into())),
        false => Err(CliError::Verify(format!("the replicas of group(s) {} do not agree", failed.join(", ")))),
    }
}

/// The members of data group `group` with their admin endpoints, as its leader has them (from
/// five nodes a data group is held by three), and `true`; or `all`, the cluster's, and `false`,
/// for the metadata group or while no member names the group's leader. The asked node may hold
/// no replica of the group: then the members are asked, in turn, who leads it.
async fn group_members(
    admin: &Admin,
    here: &NodeStatus,
    all: &[(u64, String)],
    group: u32,
) -> (Vec<(u64, String)>, bool) {
    if group == 0 {
        return (all.to_vec(), true);
    }
    let status_of = async |addr: &str| match tokio::time::timeout(
        Duration::from_secs(2),
        status_at(admin, addr, Some(group)),
    )
    .await
    {
        Ok(Ok(status)) => Some(status),
        _ => None,
    };
    let mut leader = here.groups.iter().find(|g| g.id == group && !g.elsewhere).and_then(|g| g.leader);
    for (_, addr) in all.iter().filter(|_| leader.is_none()) {
        let holder = status_of(addr).await.and_then(|s| s.groups.into_iter().find(|g| g.id == group && !g.elsewhere));
        if let Some(known) = holder.and_then(|g| g.leader) {
            leader = Some(known);
            break;
        }
    }
    let Some((_, addr)) = leader.and_then(|l| all.iter().find(|(id, _)| *id == l)) else {
        return (all.to_vec(), false);
    };
    match status_of(addr).await {
        Some(status) if !member_endpoints(&status).is_empty() => (member_endpoints(&status), true),
        _ => (all.to_vec(), false),
    }
}

/// Asks every member for its state digest of `group` until they report the same applied index
/// (writes may be going on), then compares the digests. With `members` not known to be the
/// group's (`known` false: the cluster's), a node that holds no replica says so and is left out.
async fn verify_group(admin: &Admin, members: &[(u64, String)], known: bool, group: u32) -> Result<(), CliError> {
    let mut last = Vec::new();
    for _ in 0..50 {
        last.clear();
        for (id, addr) in members {
            let answer =
                tokio::time::timeout(Duration::from_secs(2), admin.send_at(addr, pb::GetDigestRequest { group })).await;
            match answer {
                Ok(Ok(d)) => last.push((*id, Some(StateDigest { applied: d.applied, digest: d.digest }))),
                Ok(Err(CliError::Call(e))) if !known && e.code() == Some(tonic::Code::NotFound) => {}
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
    if last.is_empty() {
        return Err(CliError::Verify(format!("no member answered for a replica of group {group}")));
    }
    if answers.len() != last.len() {
        return Err(CliError::Verify("not every member answered".into()));
    }
    // The queues' records and messages, up to the index every member has applied.
    let upto = answers.iter().filter_map(|d| d.applied).min();
    if let Some(upto) = upto {
        match compare_queues(admin, members, group, upto).await? {
            QueueComparison::Same { queues, records } => {
                let queues = if queues == 1 { "1 queue".to_string() } else { format!("{queues} queues") };
                println!("ConsumeQueues agree up to index {upto}: {records} records and messages in {queues}")
            }
            QueueComparison::Differ(first) => {
                return Err(CliError::Verify(format!("first difference up to index {upto}: {first}")));
            }
        }
    }
    let same_index = answers.windows(2).all(|w| w[0].applied == w[1].applied);
    if !same_index {
        return Err(CliError::Verify(
            "the replicas did not reach the same applied index; try again when writes pause".into(),
        ));
    }
    if answers.windows(2).all(|w| w[0].digest == w[1].digest) {
        println!("the replicas agree");
        Ok(())
    } else {
        Err(CliError::Verify("the replicas' states differ".into()))
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
async fn compare_queues(
    admin: &Admin,
    members: &[(u64, String)],
    group: u32,
    upto: u64,
) -> Result<QueueComparison, CliError> {
    use std::collections::BTreeMap;
    const WAIT: Duration = Duration::from_secs(120);
    async fn ask<R: AdminCall>(admin: &Admin, addr: &str, req: R) -> Result<R::Reply, CliError> {
        match tokio::time::timeout(WAIT, admin.send_at(addr, req)).await {
            Ok(answer) => answer,
            Err(_) => Err(CliError::Verify(format!("{addr} did not answer in {} s", WAIT.as_secs()))),
        }
    }
    // (topic, queue) -> each member's (start, end).
    let mut spans: BTreeMap<(String, u32), BTreeMap<u64, (u64, u64)>> = BTreeMap::new();
    for (id, addr) in members {
        for s in ask(admin, addr, pb::GetQueueSpansRequest { upto, group }).await?.spans {
            spans.entry((s.topic, s.queue)).or_default().insert(*id, (s.start, s.end));
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
                        let req = pb::GetQueueChecksumsRequest {
                            topic: topic.clone(),
                            queue: *queue,
                            from: lo,
                            to: hi,
                            chunk,
                            group,
                        };
                        own.extend(ask(admin, addr, req).await?.checksums);
                    }
                    all.push((*id, own));
                }
                Ok::<_, CliError>(all)
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
async fn first_difference<F, Fut, E>(from: u64, to: u64, sums: F) -> Result<Difference, E>
where
    F: Fn(u64, u64, u64) -> Fut,
    Fut: std::future::Future<Output = Result<MemberSums, E>>,
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

/// The repair history as a table, newest first.
fn repairs_table(repairs: &[Repair]) -> String {
    use std::fmt::Write;
    if repairs.is_empty() {
        return "no repair recorded\n".into();
    }
    let mut out = format!(
        "{:<24} {:>4} {:>5} {:<12} {:>21} {:>7} {:>4} {:>6}  {}\n",
        "REPAIRED (UTC)", "NODE", "GROUP", "WHAT", "INDEXES", "RECORDS", "FROM", "TOOK", "DAMAGED FILE"
    );
    for r in repairs {
        let span = if r.first == r.last { r.first.to_string() } else { format!("{}-{}", r.first, r.last) };
        let from = r.source.map_or("self".into(), |id| id.to_string());
        let _ = writeln!(
            out,
            "{:<24} {:>4} {:>5} {:<12} {:>21} {:>7} {:>4} {:>6}  {}",
            format_ms(r.done_ms),
            r.node,
            r.group,
            r.part.name(),
            span,
            r.records(),
            from,
            format!("{}ms", r.done_ms - r.began_ms),
            r.place
        );
    }
    out
}

/// Each member's admin endpoint, as the membership records it; the answering node's own is the
/// one asked (a membership made by an earlier release records none).
fn member_endpoints(here: &NodeStatus) -> Vec<(u64, String)> {
    here.members.iter().filter(|m| !m.admin_addr.is_empty()).map(|m| (m.id, m.admin_addr.clone())).collect()
}

/// A node's status as it reports it, its top figures of `group` (`None`: the metadata's).
async fn status_at(admin: &Admin, addr: &str, group: Option<u32>) -> Result<NodeStatus, CliError> {
    Ok(NodeStatus::try_from(admin.send_at(addr, pb::GetStatusRequest { group }).await?)?)
}

async fn status(admin: &Admin, group: Option<u32>) -> Result<(), CliError> {
    let here = status_at(admin, &admin.endpoint, group).await?;
    let mut rows: Vec<(u64, String, Option<NodeStatus>)> = Vec::new();
    for (id, addr) in member_endpoints(&here) {
        let status = tokio::time::timeout(Duration::from_secs(2), status_at(admin, &addr, group)).await;
        let status = status.ok().and_then(Result::ok);
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
    if here.groups.len() > 1 {
        print!("\n{}", groups_table(&here.groups, here.id));
    }
    Ok(())
}

/// Each Raft group with its leader, term and indexes, as node `seen_by` sees them.
fn groups_table(groups: &[crate::admin::api::GroupRow], seen_by: u64) -> String {
    use std::fmt::Write;
    let show = |v: Option<u64>| v.map_or("-".to_string(), |x| x.to_string());
    let mut out = format!(
        "{:<12} {:>6} {:>6} {:>10} {:>10}  (as node {} sees them)\n",
        "group", "leader", "term", "committed", "applied", seen_by
    );
    for g in groups {
        let name = match g.id {
            0 => "0 metadata".to_string(),
            n => n.to_string(),
        };
        if g.elsewhere {
            let _ = writeln!(out, "{:<12} {:>6}  (no replica on node {seen_by})", name, show(g.leader));
            continue;
        }
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>6} {:>10} {:>10}",
            name,
            show(g.leader),
            g.term,
            show(g.committed),
            show(g.applied)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_groups_table_names_the_metadata_group_and_each_leader() {
        let row = |id, leader| crate::admin::api::GroupRow {
            id,
            role: Role::Follower,
            leader,
            term: 3,
            committed: Some(40),
            applied: Some(39),
            elsewhere: false,
        };
        let elsewhere = crate::admin::api::GroupRow { elsewhere: true, ..row(2, Some(4)) };
        let table = groups_table(&[row(0, Some(2)), row(1, None), elsewhere], 3);
        let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
        assert!(table.starts_with("group") && table.contains("as node 3 sees them"), "{table}");
        assert_eq!(lines[1], ["0", "metadata", "2", "3", "40", "39"]);
        assert_eq!(lines[2], ["1", "-", "3", "40", "39"]);
        assert_eq!(lines[3], ["2", "4", "(no", "replica", "on", "node", "3)"]);
    }

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

    #[test]
    fn the_repairs_table_names_what_where_and_from_whom() {
        use crate::broker::repair::RepairedPart;
        let filled = Repair {
            node: 3,
            group: 1,
            part: RepairedPart::LogRecords,
            first: 40,
            last: 49,
            source: Some(2),
            place: "seg.log byte 8".into(),
            began_ms: 2_000,
            done_ms: 2_030,
        };
        let rebuilt = Repair {
            part: RepairedPart::QueueRecord,
            first: 7,
            last: 7,
            source: None,
            done_ms: 2_001,
            ..filled.clone()
        };
        let table = repairs_table(&[filled, rebuilt]);
        let rows: Vec<Vec<&str>> = table.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            rows[0],
            ["1970-01-01T00:00:02.03Z", "3", "1", "log", "records", "40-49", "10", "2", "30ms", "seg.log", "byte", "8"]
        );
        assert_eq!(rows[1][3..8], ["queue", "record", "7", "1", "self"]);
        assert_eq!(repairs_table(&[]), "no repair recorded\n");
    }

    /// Three members' records of a queue of `len` offsets: node 2's differs at `bad`.
    fn answers(len: u64, bad: u64) -> impl Fn(u64, u64, u64) -> std::future::Ready<Result<MemberSums, CliError>> {
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
