//! Cluster settings that apply reads. They are replicated state, changed only by a log entry
//! ([`AdminCommand::Configure`](crate::broker::AdminCommand)), so every replica — and every
//! replay of the log, before or after a change — uses the value in force at that index. A setting
//! in each node's configuration file would let replicas with different files (a rolling change)
//! disagree on what a command does, and their queues diverge.
//!
//! What apply reads of them: `dedupe_window_secs` (whether a send is a retry) and
//! `max_module_bytes` (whether a plugin registration is accepted). `data_groups` is what every
//! node reads to know which data groups to run, `balance_leaders` whether each data group's
//! leader hands its leadership to the node whose turn it is.

use serde::{Deserialize, Serialize};

use crate::broker::plugins::MAX_MODULE_BYTES;

/// The most data groups a cluster runs: each is a Raft group with its own log, ticks and jobs on
/// every node that holds it.
pub const MAX_DATA_GROUPS: u32 = 64;

/// The longest dedupe window: its memory grows with the send rate times the window (about 100
/// bytes a message).
pub const MAX_DEDUPE_WINDOW_SECS: u64 = 3600;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterSettings {
    /// A message id already stored in a topic within this window is not stored again; the send
    /// returns the original result.
    pub dedupe_window_secs: u64,
    /// The largest plugin module a registration may carry.
    pub max_module_bytes: u64,
    /// How many data groups the cluster runs (groups 1 to `data_groups`); only ever grows.
    pub data_groups: u32,
    /// Whether each data group's leader hands the leadership to the node whose turn it is. Off,
    /// a leadership stays where an election or `cluster transfer-leader` put it (while a node is
    /// serviced, say).
    pub balance_leaders: bool,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings { dedupe_window_secs: 120, max_module_bytes: 1 << 20, data_groups: 1, balance_leaders: true }
    }
}

/// A change to some of the settings (`None`: unchanged).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsChange {
    pub dedupe_window_secs: Option<u64>,
    pub max_module_bytes: Option<u64>,
    pub data_groups: Option<u32>,
    pub balance_leaders: Option<bool>,
}

/// A setting out of its range; holds the value asked for. Its text goes into the replicated reply:
/// it must not change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("dedupe_window_secs must be 1-{MAX_DEDUPE_WINDOW_SECS}, not {0}")]
    DedupeWindow(u64),
    #[error("max_module_bytes must be 1-{MAX_MODULE_BYTES}, not {0}")]
    MaxModuleBytes(u64),
    #[error("data_groups must be {0}-{MAX_DATA_GROUPS} (a data group is never removed), not {1}")]
    DataGroups(u32, u32),
}

impl ClusterSettings {
    pub fn dedupe_window_ms(&self) -> i64 {
        self.dedupe_window_secs.saturating_mul(1000) as i64
    }

    /// The settings with `change` made, or why it is refused.
    pub fn changed(&self, change: &SettingsChange) -> Result<ClusterSettings, SettingsError> {
        let mut next = *self;
        if let Some(secs) = change.dedupe_window_secs {
            if !(1..=MAX_DEDUPE_WINDOW_SECS).contains(&secs) {
                return Err(SettingsError::DedupeWindow(secs));
            }
            next.dedupe_window_secs = secs;
        }
        if let Some(bytes) = change.max_module_bytes {
            if !(1..=MAX_MODULE_BYTES as u64).contains(&bytes) {
                return Err(SettingsError::MaxModuleBytes(bytes));
            }
            next.max_module_bytes = bytes;
        }
        if let Some(groups) = change.data_groups {
            if !(self.data_groups..=MAX_DATA_GROUPS).contains(&groups) {
                return Err(SettingsError::DataGroups(self.data_groups, groups));
            }
            next.data_groups = groups;
        }
        if let Some(on) = change.balance_leaders {
            next.balance_leaders = on;
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_changes_are_refused_and_change_nothing() {
        let s = ClusterSettings::default();
        for bad in [
            SettingsChange { dedupe_window_secs: Some(0), ..Default::default() },
            SettingsChange { dedupe_window_secs: Some(MAX_DEDUPE_WINDOW_SECS + 1), ..Default::default() },
            SettingsChange { max_module_bytes: Some(MAX_MODULE_BYTES as u64 + 1), ..Default::default() },
        ] {
            assert!(s.changed(&bad).is_err(), "{bad:?}");
        }
        let refused = s.changed(&SettingsChange { dedupe_window_secs: Some(0), ..Default::default() });
        assert_eq!(refused, Err(SettingsError::DedupeWindow(0)));
        // The text is what the refusal's replicated reply holds: replicas compare their digests.
        assert_eq!(refused.unwrap_err().to_string(), "dedupe_window_secs must be 1-3600, not 0");
        let both =
            SettingsChange { dedupe_window_secs: Some(600), max_module_bytes: Some(2 << 20), ..Default::default() };
        let changed = ClusterSettings { dedupe_window_secs: 600, max_module_bytes: 2 << 20, ..Default::default() };
        assert_eq!(s.changed(&both), Ok(changed));
        // Data groups grow and never shrink.
        let three = s.changed(&SettingsChange { data_groups: Some(3), ..Default::default() }).unwrap();
        assert_eq!(three.data_groups, 3);
        for bad in [0, 2, MAX_DATA_GROUPS + 1] {
            let refused = three.changed(&SettingsChange { data_groups: Some(bad), ..Default::default() });
            assert_eq!(refused, Err(SettingsError::DataGroups(3, bad)));
        }
        assert_eq!(three.changed(&SettingsChange { data_groups: Some(3), ..Default::default() }), Ok(three));
        // Balancing is on until switched off, and switching it changes nothing else.
        assert!(three.balance_leaders);
        let off = three.changed(&SettingsChange { balance_leaders: Some(false), ..Default::default() }).unwrap();
        assert_eq!(off, ClusterSettings { balance_leaders: false, ..three });
        assert_eq!(off.changed(&SettingsChange { balance_leaders: Some(true), ..Default::default() }), Ok(three));
    }
}
