//! What a node counts as it works: requests by topic and status, timers fired, transaction
//! checks, commit and apply latency, snapshots and purges. One [`Meters`] per node, shared by
//! the parts that count; `http/` adds what it reads from the node's state at each scrape and
//! serves both in the Prometheus text format.
//!
//! Labels only ever carry names the cluster already holds (topics, groups, plugins, members) or
//! fixed words: a name a client made up is counted under `topic=""`, so no client can grow the
//! label sets without bound.

mod repairs;
pub mod traffic;

pub use repairs::{RepairNote, Repaired};

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// A request's topic (empty when the topic does not exist) and its RocketMQ status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicStatus {
    pub topic: String,
    pub status: String,
}

/// Messages delivered to a group from a topic.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicGroup {
    pub topic: String,
    pub group: String,
}

/// What a transaction check decided for a half of a topic.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicDecision {
    pub topic: String,
    pub decision: String,
}

/// The RocketMQ status name of `code` (`OK`, `TOPIC_NOT_FOUND`, …).
pub fn status_name(code: i32) -> String {
    rockraft_proto::rocketmq::Code::try_from(code)
        .map_or_else(|_| format!("CODE_{code}"), |c| c.as_str_name().to_string())
}

/// Latency buckets from 100 µs to about 13 s, doubling.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 18))
}

/// The node's counters and histograms. Cloning shares them.
#[derive(Clone)]
pub struct Meters {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    sends: Family<TopicStatus, Counter>,
    receives: Family<TopicStatus, Counter>,
    delivered: Family<TopicGroup, Counter>,
    acks: Family<TopicStatus, Counter>,
    invisible_changes: Family<TopicStatus, Counter>,
    timers_fired: Counter,
    transaction_checks: Family<TopicDecision, Counter>,
    commit: Histogram,
    apply: Histogram,
    snapshots_built: Counter,
    snapshots_installed: Counter,
    purges: Counter,
    purged_entries: Counter,
    leader_changes: Counter,
    disk_refusals: Counter,
    status_page_gathers: Counter,
    corruption_found: Counter,
    corruption_repaired: Counter,
    /// Repairs not yet in the cluster's history.
    repairs: repairs::RepairNotes,
    /// Each Raft group's traffic over the last minutes, for the status page.
    traffic: traffic::GroupTraffic,
}

impl Default for Meters {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Meters")
    }
}

impl Meters {
    /// Each Raft group's traffic over the last minutes (`traffic`).
    pub fn traffic(&self) -> &traffic::GroupTraffic {
        &self.inner.traffic
    }

    pub fn new() -> Meters {
        let mut registry = Registry::with_prefix("rockraft");
        let sends = Family::<TopicStatus, Counter>::default();
        registry.register("sends", "Messages sent, by topic and the status they were answered with", sends.clone());
        let receives = Family::<TopicStatus, Counter>::default();
        registry.register("receives", "Receive requests, by topic and final status", receives.clone());
        let delivered = Family::<TopicGroup, Counter>::default();
        registry.register(
            "delivered_messages",
            "Messages delivered to consumers, by topic and group",
            delivered.clone(),
        );
        let acks = Family::<TopicStatus, Counter>::default();
        registry.register("acks", "Acknowledged deliveries, by topic and status", acks.clone());
        let invisible_changes = Family::<TopicStatus, Counter>::default();
        registry.register(
            "invisible_duration_changes",
            "Invisible-time changes, by topic and status",
            invisible_changes.clone(),
        );
        let timers_fired = Counter::default();
        registry.register(
            "timers_fired",
            "Delayed messages and retries this node fired as leader",
            timers_fired.clone(),
        );
        let corruption_found = Counter::default();
        registry.register(
            "corruption_found",
            "Records this node had written that did not read back: log records (found at start, by a read or by the scrubber), snapshot files, ConsumeQueue records",
            corruption_found.clone(),
        );
        let corruption_repaired = Counter::default();
        registry.register(
            "corruption_repaired",
            "Damaged records this node repaired: log records and snapshot files from another member, ConsumeQueue records from its own log",
            corruption_repaired.clone(),
        );
        let transaction_checks = Family::<TopicDecision, Counter>::default();
        registry.register(
            "transaction_checks",
            "Transaction checks this node ran as leader, by topic and decision",
            transaction_checks.clone(),
        );
        let commit = latency();
        registry.register_with_unit(
            "commit_latency",
            "From a proposal on the leader to its reply, once a majority stored and this node applied it",
            Unit::Seconds,
            commit.clone(),
        );
        let apply = latency();
        registry.register_with_unit(
            "apply_latency",
            "Applying one batch of committed entries",
            Unit::Seconds,
            apply.clone(),
        );
        let snapshots_built = Counter::default();
        registry.register("snapshots_built", "Snapshots this node built", snapshots_built.clone());
        let snapshots_installed = Counter::default();
        registry.register(
            "snapshots_installed",
            "Snapshots this node installed from a leader",
            snapshots_installed.clone(),
        );
        let purges = Counter::default();
        registry.register("retention_purges", "Purges of the log's oldest segments by retention", purges.clone());
        let purged_entries = Counter::default();
        registry.register("retention_purged_entries", "Log entries removed by retention", purged_entries.clone());
        let leader_changes = Counter::default();
        registry.register("leader_changes", "Changes of the leader this node saw", leader_changes.clone());
        let disk_refusals = Counter::default();
        registry.register(
            "disk_refusals",
            "Proposals this node refused as leader because a voter's free space was below a mark",
            disk_refusals.clone(),
        );
        let status_page_gathers = Counter::default();
        registry.register(
            "status_page_gathers",
            "Times the status page gathered its data (a call to every member, every topic and group listed)",
            status_page_gathers.clone(),
        );
        let inner = Inner {
            registry,
            sends,
            receives,
            delivered,
            acks,
            invisible_changes,
            timers_fired,
            transaction_checks,
            commit,
            apply,
            snapshots_built,
            snapshots_installed,
            purges,
            purged_entries,
            leader_changes,
            disk_refusals,
            status_page_gathers,
            corruption_found,
            corruption_repaired,
            repairs: repairs::RepairNotes::default(),
            traffic: traffic::GroupTraffic::default(),
        };
        Meters { inner: Arc::new(inner) }
    }

    /// Every counter and histogram, in the Prometheus text format.
    pub fn encode(&self, out: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::prometheus_text::encode(out, &self.inner.registry)
    }

    pub fn sent(&self, topic: &str, code: i32, messages: u64) {
        let labels = TopicStatus { topic: topic.into(), status: status_name(code) };
        self.inner.sends.get_or_create(&labels).inc_by(messages);
    }

    pub fn received(&self, topic: &str, group: &str, code: i32, messages: u64) {
        let labels = TopicStatus { topic: topic.into(), status: status_name(code) };
        self.inner.receives.get_or_create(&labels).inc();
        if messages > 0 {
            let labels = TopicGroup { topic: topic.into(), group: group.into() };
            self.inner.delivered.get_or_create(&labels).inc_by(messages);
        }
    }

    pub fn acked(&self, topic: &str, code: i32, entries: u64) {
        let labels = TopicStatus { topic: topic.into(), status: status_name(code) };
        self.inner.acks.get_or_create(&labels).inc_by(entries);
    }

    pub fn invisible_changed(&self, topic: &str, code: i32) {
        let labels = TopicStatus { topic: topic.into(), status: status_name(code) };
        self.inner.invisible_changes.get_or_create(&labels).inc();
    }

    pub fn timers_fired(&self, n: u64) {
        self.inner.timers_fired.inc_by(n);
    }

    pub fn transaction_checked(&self, topic: &str, decision: &str) {
        let labels = TopicDecision { topic: topic.into(), decision: decision.into() };
        self.inner.transaction_checks.get_or_create(&labels).inc();
    }

    pub fn committed(&self, took: Duration) {
        self.inner.commit.observe(took.as_secs_f64());
    }

    pub fn applied(&self, took: Duration) {
        self.inner.apply.observe(took.as_secs_f64());
    }

    pub fn snapshot_built(&self) {
        self.inner.snapshots_built.inc();
    }

    pub fn snapshot_installed(&self) {
        self.inner.snapshots_installed.inc();
    }

    pub fn purged(&self, entries: u64) {
        self.inner.purges.inc();
        self.inner.purged_entries.inc_by(entries);
    }

    /// `records` log records found damaged.
    pub fn corruption_found(&self, records: u64) {
        self.inner.corruption_found.inc_by(records);
    }

    /// Damaged log records found, and filled again, since this node started.
    pub fn corruption(&self) -> (u64, u64) {
        (self.inner.corruption_found.get(), self.inner.corruption_repaired.get())
    }

    /// A repair done: counted (its records, or one file), and kept until the cluster's history
    /// holds it (`take_repairs`).
    pub fn corruption_repaired(&self, note: RepairNote) {
        let records = match note.repaired {
            Repaired::LogRecords => note.last.saturating_sub(note.first) + 1,
            Repaired::Snapshot | Repaired::QueueRecord => 1,
        };
        self.inner.corruption_repaired.inc_by(records);
        self.inner.repairs.note(note);
    }

    /// The repairs not yet recorded in the cluster's history, oldest first, once there is one.
    pub async fn take_repairs(&self) -> Vec<RepairNote> {
        self.inner.repairs.take().await
    }

    /// Repairs dropped before they were recorded (more than the node keeps waiting).
    pub fn repairs_dropped(&self) -> u64 {
        self.inner.repairs.dropped()
    }

    pub fn disk_refused(&self) {
        self.inner.disk_refusals.inc();
    }

    pub fn status_page_gathered(&self) {
        self.inner.status_page_gathers.inc();
    }

    pub fn leader_changed(&self) {
        self.inner.leader_changes.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_come_out_with_units_and_totals_in_the_text_format() {
        let meters = Meters::new();
        meters.sent("Orders", 20000, 3);
        meters.sent("", 40402, 1);
        meters.committed(Duration::from_millis(3));
        let mut text = String::new();
        meters.encode(&mut text).expect("encodes");
        assert!(text.contains(r#"rockraft_sends_total{topic="Orders",status="OK"} 3"#), "{text}");
        assert!(text.contains(r#"rockraft_sends_total{topic="",status="TOPIC_NOT_FOUND"} 1"#), "{text}");
        assert!(text.contains("# TYPE rockraft_commit_latency_seconds histogram"), "{text}");
        assert!(text.contains(r#"rockraft_commit_latency_seconds_bucket{le="0.0064"} 1"#), "{text}");
        assert!(!text.contains("# EOF"), "the Prometheus format has no EOF marker: {text}");
    }
}
