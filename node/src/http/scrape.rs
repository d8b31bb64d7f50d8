//! What `/metrics` reads from the node's state at each scrape: Raft (term, role, indexes, each
//! follower's lag on the leader), topics and groups, plugins, the log on disk, and the process
//! (named as the Prometheus client libraries' process collectors name them).

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::HttpState;
use crate::store::free_space::free_space;

type Labels = Vec<(&'static str, String)>;

/// A per-scrape registry with helpers that register and set in one step.
struct Scrape {
    registry: Registry,
}

impl Scrape {
    fn gauge(&mut self, name: &str, help: &str, unit: Option<Unit>, value: i64) {
        let g = Gauge::<i64>::default();
        g.set(value);
        match unit {
            Some(u) => self.registry.register_with_unit(name, help, u, g),
            None => self.registry.register(name, help, g),
        }
    }

    fn gauges(&mut self, name: &str, help: &str, values: impl IntoIterator<Item = (Labels, i64)>) {
        let family = Family::<Labels, Gauge<i64>>::default();
        for (labels, v) in values {
            family.get_or_create(&labels).set(v);
        }
        self.registry.register(name, help, family);
    }

    fn counters(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        values: impl IntoIterator<Item = (Labels, f64)>,
    ) {
        let family = Family::<Labels, Counter<f64, AtomicU64>>::default();
        for (labels, v) in values {
            family.get_or_create(&labels).inc_by(v);
        }
        match unit {
            Some(u) => self.registry.register_with_unit(name, help, u, family),
            None => self.registry.register(name, help, family),
        }
    }
}

fn index(index: Option<u64>) -> i64 {
    index.map_or(0, |i| i as i64)
}

pub(super) fn encode(state: &HttpState, out: &mut String) -> std::fmt::Result {
    let mut s = Scrape { registry: Registry::with_prefix("rockraft") };
    let m = state.cluster.status();
    let me = state.cluster.id();
    s.gauge("raft_term", "The Raft term this node is in", None, m.term as i64);
    s.gauge("raft_leader_id", "The node this node takes as leader (0: none known)", None, m.leader.unwrap_or(0) as i64);
    let role = m.role.name();
    s.gauges(
        "raft_role",
        "1 for the part this node plays now",
        ["leader", "follower", "candidate", "learner", "shutdown"]
            .into_iter()
            .map(|r| (vec![("role", r.to_string())], i64::from(role == r))),
    );
    s.gauge("raft_last_log_index", "The last index in this node's log", None, m.last_log_index.unwrap_or(0) as i64);
    s.gauge("raft_commit_index", "The highest index this node knows committed", None, index(m.committed));
    s.gauge("raft_applied_index", "The highest index this node applied", None, index(m.applied));
    s.gauge("raft_purged_index", "The highest index retention removed from this node's log", None, index(m.purged));
    // The leader alone knows how far each follower has replicated.
    let last = m.last_log_index.unwrap_or(0);
    let lag = m.replication.iter().filter(|(id, _)| **id != me).map(|(id, matched)| {
        (vec![("peer", id.to_string())], last.saturating_sub(matched.map_or(0, |(index, _)| index)) as i64)
    });
    s.gauges("raft_replication_lag_entries", "On the leader: entries each follower has yet to store", lag);

    // Summed over the data groups holding each topic's queues that this node holds a replica of
    // (every group, below five voters).
    let topics = state.admin.list_topics_here();
    let mut stored = Vec::new();
    let mut queues = Vec::new();
    let (mut timers, mut halves) = (Vec::new(), Vec::new());
    for t in &topics {
        let total: u64 = t.queues.iter().map(|(_, start, next)| next.saturating_sub(*start)).sum();
        let topic = || vec![("topic", t.config.name.clone())];
        stored.push((topic(), total as i64));
        queues.push((topic(), t.config.queues as i64));
        timers.push((topic(), t.held.timers as i64));
        halves.push((topic(), t.held.open_halves as i64));
    }
    s.gauges("topic_queues", "Queues of each topic", queues);
    s.gauges("topic_stored_messages", "Messages each topic holds (not yet purged)", stored);
    s.gauges("topic_pending_timers", "Delayed messages and retries waiting for their time, by topic", timers);
    s.gauges("topic_open_transactions", "Half messages waiting for a commit or rollback, by topic", halves);
    let progress: Vec<_> = state.admin.list_groups_here().into_iter().flat_map(|g| g.progress).collect();
    let group_topic = |p: &crate::broker::GroupProgress| vec![("group", p.group.clone()), ("topic", p.topic.clone())];
    s.gauges(
        "consumer_lag_messages",
        "Messages a group has not acknowledged yet, by group and topic",
        progress.iter().map(|p| (group_topic(p), p.lag as i64)),
    );
    s.gauges(
        "consumer_inflight_messages",
        "Messages delivered to a group and not yet acknowledged or returned",
        progress.iter().map(|p| (group_topic(p), p.inflight as i64)),
    );

    // Per Raft group, as this node's replica of each last showed it (sampled every few seconds).
    let latest = state.parts.meters.traffic().latest();
    let per_group = |f: fn(&crate::metrics::traffic::Sample) -> u64| {
        latest.iter().map(move |(g, s)| (vec![("group", g.to_string())], f(s) as i64)).collect::<Vec<_>>()
    };
    s.gauges("group_stored_messages", "Messages ever stored in each Raft group's queues", per_group(|s| s.stored));
    s.gauges(
        "group_consumed_messages",
        "Messages acked from each Raft group's queues, summed over the consumer groups",
        per_group(|s| s.consumed),
    );
    s.gauges(
        "group_lag_messages",
        "Messages of each Raft group's queues not acked yet, summed over the consumer groups",
        per_group(|s| s.lag),
    );

    let plugins = state.admin.list_plugins();
    let per_plugin = |f: fn(&crate::admin::api::PluginInfo) -> f64| {
        plugins.iter().map(move |p| (vec![("plugin", p.name.clone())], f(p))).collect::<Vec<_>>()
    };
    s.counters("plugin_calls", "Batch calls of each plugin on this node", None, per_plugin(|p| p.calls as f64));
    s.counters("plugin_messages", "Messages each plugin looked at", None, per_plugin(|p| p.messages as f64));
    s.counters(
        "plugin_failures",
        "Calls that trapped, ran out of fuel or failed",
        None,
        per_plugin(|p| p.failures as f64),
    );
    s.counters("plugin_fuel", "Fuel each plugin's calls burned", None, per_plugin(|p| p.fuel as f64));
    s.counters(
        "plugin_busy",
        "Time spent in each plugin",
        Some(Unit::Seconds),
        per_plugin(|p| p.busy_ms as f64 / 1000.0),
    );
    s.gauges(
        "plugin_quarantined",
        "1 for a plugin not called because it failed too often",
        plugins.iter().map(|p| (vec![("plugin", p.name.clone())], i64::from(p.quarantined.is_some()))),
    );

    let segments = state.log.segment_stats();
    s.gauge("log_segments", "Segment files of the log", None, segments.len() as i64);
    s.gauge(
        "log_size",
        "Bytes of the log's segment files",
        Some(Unit::Bytes),
        segments.iter().map(|g| g.bytes).sum::<u64>() as i64,
    );
    if let Ok((free, total)) = free_space(&state.data_dir) {
        s.gauge("disk_free", "Free bytes on the data directory's filesystem", Some(Unit::Bytes), free as i64);
        s.gauge("disk_size", "Size of the data directory's filesystem", Some(Unit::Bytes), total as i64);
    }
    let marks = state.cluster.disk_marks();
    s.gauge(
        "disk_soft_mark",
        "Below this much free space here, the cluster stores no new messages (the configured mark times the voters sharing this filesystem)",
        Some(Unit::Bytes),
        marks.soft as i64,
    );
    s.gauge(
        "disk_hard_mark",
        "Below this much free space here, the cluster appends only what frees space",
        Some(Unit::Bytes),
        marks.hard as i64,
    );
    let disks = state.cluster.disk_report();
    s.gauge(
        "disk_alarm",
        "The cluster's free-space alarm as this node sees it: 0 ok, 1 low (no sends), 2 critical (only what frees space)",
        None,
        disks.alarm as i64,
    );
    s.gauges(
        "member_disk_free_bytes",
        "Each answering voter's free bytes, as this node read them last",
        disks.members.iter().map(|(id, r)| (vec![("member", id.to_string())], r.free_bytes as i64)),
    );
    let members = state.cluster.members();
    let refusals: Vec<(Labels, _)> = state
        .cluster
        .refusals()
        .report()
        .into_iter()
        .map(|r| {
            let member =
                members.iter().find(|(_, n)| n.raft_addr == r.addr).map_or(r.addr.clone(), |(id, _)| id.to_string());
            (vec![("member", member)], r)
        })
        .collect();
    s.gauges(
        "member_refusing",
        "1 for a member that refuses this node's calls (another cluster secret, a certificate it does not take): calls to it back off",
        refusals.iter().map(|(l, r)| (l.clone(), i64::from(r.refusing.is_some()))),
    );
    s.counters(
        "member_refusals",
        "Calls other members refused, by member",
        None,
        refusals.iter().map(|(l, r)| (l.clone(), r.total as f64)),
    );
    prometheus_client::encoding::prometheus_text::encode(out, &s.registry)?;
    process(out)
}

/// The process metrics, named as the Prometheus client libraries name them, from `/proc`.
fn process(out: &mut String) -> std::fmt::Result {
    let mut s = Scrape { registry: Registry::with_prefix("process") };
    let page = rustix::param::page_size() as i64;
    let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
    if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
        let mut fields = statm.split_whitespace().map(|f| f.parse::<i64>().unwrap_or(0));
        let (virt, resident) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
        s.gauge("virtual_memory", "Virtual memory size", Some(Unit::Bytes), virt * page);
        s.gauge("resident_memory", "Resident memory size", Some(Unit::Bytes), resident * page);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        s.gauge("open_fds", "Open file descriptors", None, fds.count() as i64);
    }
    if let Some(max) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
        s.gauge("max_fds", "The most file descriptors this process may open", None, max.min(i64::MAX as u64) as i64);
    }
    // /proc/self/stat: the fields after the command name (which may hold spaces) in parentheses.
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some((_, rest)) = stat.rsplit_once(')')
    {
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
        let cpu = (field(14) + field(15)) / ticks;
        s.counters("cpu", "User and system CPU time", Some(Unit::Seconds), [(Vec::new(), cpu)]);
        s.gauge("threads", "Threads of the process", None, field(20) as i64);
        if let Some(boot) = boot_time() {
            let start = boot + field(22) / ticks;
            s.gauge(
                "start_time",
                "When the process started, in seconds since the epoch",
                Some(Unit::Seconds),
                start as i64,
            );
        }
    }
    prometheus_client::encoding::prometheus_text::encode(out, &s.registry)
}

/// When the machine booted, in seconds since the epoch (`btime` of /proc/stat).
fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}
