//! The node's TOML configuration. Every key has a default except `node_id`; see
//! `docs/configuration.md` for the full list.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::raft::{NodeId, NodeInfo};
use crate::store::{DEFAULT_SEGMENT_SIZE, Durability, LogConfig};

/// What one message may add to its Raft entry besides its body and user properties: message id,
/// tag, keys, message group, born host, topic name and the encoding's framing. The proxy bounds
/// each of those (`proxy/send.rs`) to far less than this.
pub const MESSAGE_OVERHEAD_BYTES: u64 = 64 << 10;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    pub node_id: NodeId,
    /// Name of the Raft group; also the broker name clients see in routes.
    #[serde(default = "default_group")]
    pub group: String,
    /// Node-to-node gRPC (replication, the peer calls to the leader, admin): listen and advertised
    /// address.
    #[serde(default = "default_raft_addr")]
    pub raft_addr: String,
    /// The RocketMQ proxy endpoint for clients (and the admin API the CLI uses).
    #[serde(default = "default_client_addr")]
    pub client_addr: String,
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// The initial members, used by `rockraft cluster init`.
    #[serde(default)]
    pub members: Vec<Member>,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub broker: BrokerConfig,
    #[serde(default)]
    pub raft: RaftTimings,
    /// Limits on filter and transaction-checker plugins.
    #[serde(default)]
    pub plugins: crate::plugin::PluginLimits,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub id: NodeId,
    pub raft_addr: String,
    pub client_addr: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    pub segment_size: u64,
    pub durability: Durability,
    pub flush_interval_ms: u64,
    /// Segments whose newest record is older than this are purged (fractions allowed).
    pub retention_hours: f64,
    /// How often retention looks for segments to purge.
    pub retention_check_secs: f64,
    /// Purge the oldest segments while the log takes more than this many bytes (0: no limit).
    pub disk_budget_bytes: u64,
    pub consume_queue_records_per_file: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerConfig {
    pub dedupe_window_secs: u64,
    pub max_body_bytes: u64,
    pub max_properties_bytes: u64,
    pub checkpoint_interval_ms: u64,
    /// How far ahead a delayed message may be scheduled; further is ILLEGAL_DELIVERY_TIME.
    pub max_delay_secs: u64,
    /// When an unresolved transactional half is first checked, unless the producer set its own
    /// recovery time.
    pub transaction_recovery_secs: u64,
    /// How often an unresolved half is checked again.
    pub transaction_check_interval_secs: u64,
    /// An unresolved half this old is rolled back.
    pub transaction_max_age_secs: u64,
    /// An unresolved half is rolled back after a producer was asked this often (0: no limit).
    pub transaction_max_checks: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTimings {
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
}

fn default_group() -> String {
    "rockraft".into()
}
fn default_raft_addr() -> String {
    "127.0.0.1:9081".into()
}
fn default_client_addr() -> String {
    "127.0.0.1:8081".into()
}
fn default_data_dir() -> PathBuf {
    "./data".into()
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            segment_size: DEFAULT_SEGMENT_SIZE,
            durability: Durability::Sync,
            flush_interval_ms: 10,
            retention_hours: 72.0,
            retention_check_secs: 60.0,
            disk_budget_bytes: 0,
            consume_queue_records_per_file: 300_000,
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            dedupe_window_secs: 120,
            max_body_bytes: 4 << 20,
            max_properties_bytes: 16 << 10,
            checkpoint_interval_ms: 200,
            max_delay_secs: 30 * 24 * 3600,
            transaction_recovery_secs: 6,
            transaction_check_interval_secs: 60,
            transaction_max_age_secs: 4 * 3600,
            transaction_max_checks: 0,
        }
    }
}

impl Default for RaftTimings {
    fn default() -> Self {
        // Longer than openraft's defaults: an fsync stall on a shared disk must not cost a leader.
        RaftTimings { heartbeat_ms: 100, election_timeout_min_ms: 1000, election_timeout_max_ms: 2000 }
    }
}

impl NodeConfig {
    pub fn load(path: &Path) -> Result<NodeConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let config: NodeConfig = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), String> {
        let log = self.log_config();
        log.validate().map_err(|e| e.to_string())?;
        // A record never spans two segments: a message the proxy accepts but the log cannot hold
        // would fail at append time, after the client was told nothing better than an error.
        let largest = self
            .broker
            .max_body_bytes
            .saturating_add(self.broker.max_properties_bytes)
            .saturating_add(MESSAGE_OVERHEAD_BYTES);
        if largest > log.max_record_payload() {
            return Err(format!(
                "broker.max_body_bytes ({}) + broker.max_properties_bytes ({}) + {MESSAGE_OVERHEAD_BYTES} bytes of \
                 per-message overhead must fit one log record, at most {} bytes with storage.segment_size = {}: \
                 lower the limits or raise segment_size",
                self.broker.max_body_bytes,
                self.broker.max_properties_bytes,
                log.max_record_payload(),
                self.storage.segment_size
            ));
        }
        if self.raft.election_timeout_min_ms <= self.raft.heartbeat_ms
            || self.raft.election_timeout_max_ms <= self.raft.election_timeout_min_ms
        {
            return Err("raft timings need heartbeat_ms < election_timeout_min_ms < election_timeout_max_ms".into());
        }
        if !self.members.is_empty() && !self.members.iter().any(|m| m.id == self.node_id) {
            return Err(format!("members does not list this node ({})", self.node_id));
        }
        Ok(())
    }

    pub fn node_info(&self) -> NodeInfo {
        NodeInfo { raft_addr: self.raft_addr.clone(), client_addr: self.client_addr.clone() }
    }

    pub fn log_config(&self) -> LogConfig {
        let mut c = LogConfig::new(self.data_dir.join("log"));
        c.segment_size = self.storage.segment_size;
        c.durability = self.storage.durability;
        c.flush_interval = Duration::from_millis(self.storage.flush_interval_ms.max(1));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_config_takes_every_default_and_typos_are_refused() {
        let c: NodeConfig = toml::from_str("node_id = 3").unwrap();
        assert_eq!(c.storage.durability, Durability::Sync);
        assert_eq!(c.storage.retention_hours, 72.0);
        assert_eq!(c.broker.dedupe_window_secs, 120);
        c.validate().unwrap();
        assert!(toml::from_str::<NodeConfig>("node_id = 1\nsegmnet_size = 5").is_err());
        let bad: NodeConfig = toml::from_str("node_id = 1\n[storage]\nsegment_size = 10").unwrap();
        assert!(bad.validate().is_err());
    }

    #[test]
    fn the_largest_message_a_send_accepts_must_fit_one_segment() {
        // 1 MiB segments cannot hold the default 4 MiB body.
        let small = "node_id = 1\n[storage]\nsegment_size = 1048576\n";
        let c: NodeConfig = toml::from_str(small).unwrap();
        let err = c.validate().unwrap_err();
        assert!(err.contains("max_body_bytes"), "{err}");
        let c: NodeConfig = toml::from_str(&format!("{small}[broker]\nmax_body_bytes = 524288\n")).unwrap();
        c.validate().unwrap();
        // Exactly full is fine; one byte more is not.
        let room = c.log_config().max_record_payload() - MESSAGE_OVERHEAD_BYTES;
        let at = |body: u64| format!("{small}[broker]\nmax_body_bytes = {body}\nmax_properties_bytes = 0\n");
        toml::from_str::<NodeConfig>(&at(room)).unwrap().validate().unwrap();
        assert!(toml::from_str::<NodeConfig>(&at(room + 1)).unwrap().validate().is_err());
    }
}
