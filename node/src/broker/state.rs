//! The replicated broker state: every table, and where in the log it stands.
//!
//! [`State`] is plain data. It changes only through [`State::apply`] (see `apply.rs`), which
//! reads nothing but the entry and the state, so every replica — and the snapshot builder, which
//! replays the log onto an older snapshot — reaches the same `State` at the same index. A
//! snapshot *is* a serialized `State`.
//!
//! The state is two halves: the cluster's [`Metadata`] and a data [`Partition`]. To add
//! replicated state: add a `Table` field to the half it belongs to (or to a struct of tables it
//! holds) and one line to that half's `persisted_tables!` list. Loading, checkpoints, snapshots,
//! install and the digest all go through the lists (the dedupe window is kept in its own journal,
//! see `dedupe.rs` and `dedupe_journal.rs`, and pending timers in their own files, see
//! `timer_wheel.rs`: the digest names those two).

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::broker::dedupe::DedupeClock;
#[cfg(doc)]
use crate::broker::disk_table::DiskTable;
pub use crate::broker::metadata::Metadata;
pub use crate::broker::partition::{Partition, QueueRange};
pub use crate::broker::position::LogPosition;
use crate::broker::settings::ClusterSettings;
use crate::broker::table::Persisted;

/// The last membership entry applied, as the log carries it. The broker keeps it only so that
/// it is persisted atomically with the state it belongs to; the Raft layer reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipRecord {
    pub at: LogPosition,
    /// The membership entry's payload (JSON), byte for byte.
    pub config: String,
}

/// Everything the log has built, as of `last_applied`: the cluster's metadata and one data
/// partition. Today one Raft group carries both; each half applies its own entries and reads
/// only itself (see `apply.rs`), so a metadata group and data groups can each carry one.
///
/// A snapshot serializes it as `{format, last_applied, membership, meta, data}`; snapshots of
/// earlier releases, one flat state without a format, are still read, and one of a newer format
/// is refused (see the `Deserialize` impl).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    pub last_applied: Option<LogPosition>,
    pub membership: Option<MembershipRecord>,
    pub meta: Metadata,
    pub data: Partition,
}

/// The snapshot form this release writes: 1 is the nested `{meta, data}` form (earlier releases
/// wrote one flat state, without a format); 2 the fields added under 1 (lite topics, placement
/// through, the partition's settings); 3 the data group a partition is (`holder`); 4 the repair
/// history (`meta.repairs`). Its shape is
/// pinned by `snapshot_test::the_snapshot_keeps_the_shape_its_format_names`.
pub const SNAPSHOT_FORMAT: u32 = 4;

impl Serialize for State {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(5))?;
        map.serialize_entry("format", &SNAPSHOT_FORMAT)?;
        map.serialize_entry("last_applied", &self.last_applied)?;
        map.serialize_entry("membership", &self.membership)?;
        map.serialize_entry("meta", &self.meta)?;
        map.serialize_entry("data", &self.data)?;
        map.end()
    }
}

/// Reads a snapshot field by field as it streams in (a snapshot may be large, and buffering it
/// would also lose the number keys of its maps): this release's nested form, or the flat form of
/// earlier releases, whose fields each go to the half that keeps them now.
impl<'de> Deserialize<'de> for State {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<State, D::Error> {
        d.deserialize_map(StateVisitor)
    }
}

struct StateVisitor;

impl<'de> serde::de::Visitor<'de> for StateVisitor {
    type Value = State;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a broker state")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<State, A::Error> {
        let mut s = State::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format" => {
                    let format: u32 = map.next_value()?;
                    if format > SNAPSHOT_FORMAT {
                        return Err(serde::de::Error::custom(format!(
                            "a snapshot of format {format}; this release reads formats up to {SNAPSHOT_FORMAT}: upgrade this node"
                        )));
                    }
                }
                "last_applied" => s.last_applied = map.next_value()?,
                "membership" => s.membership = map.next_value()?,
                "meta" => s.meta = map.next_value()?,
                "data" => s.data = map.next_value()?,
                // The flat state of earlier releases.
                "settings" => s.meta.settings = map.next_value()?,
                "topics" => s.meta.topics = map.next_value()?,
                "plugins" => s.meta.plugins = map.next_value()?,
                "access" => s.meta.access = map.next_value()?,
                "failovers" => s.meta.failovers = map.next_value()?,
                "dedupe_clock" => s.data.dedupe_clock = map.next_value()?,
                "queues" => s.data.queues = map.next_value()?,
                "dedupe" => s.data.dedupe = map.next_value()?,
                "consumption" => s.data.consumption = map.next_value()?,
                "timers" => s.data.timers = map.next_value()?,
                "halves" => s.data.halves = map.next_value()?,
                "checks" => s.data.checks = map.next_value()?,
                "holds" => s.data.holds = map.next_value()?,
                "held_counts" => s.data.held_counts = map.next_value()?,
                "lite" => s.data.lite = map.next_value()?,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(s)
    }
}

/// The scalars persisted with every checkpoint, in the same batch as the tables' rows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Applied {
    pub last_applied: Option<LogPosition>,
    pub membership: Option<MembershipRecord>,
    #[serde(default)]
    pub dedupe_clock: DedupeClock,
    #[serde(default)]
    pub settings: ClusterSettings,
    /// The partition's copy of the settings, and whether the partition keeps its own copy of
    /// the metadata at all (absent in state an earlier release wrote: see [`State::upgrade`]).
    #[serde(default)]
    pub placed_settings: Option<ClusterSettings>,
    /// The index of the metadata the partition's last placement was worked out from.
    #[serde(default)]
    pub placed_through: Option<u64>,
    /// The data group the partition is, as its placements name it.
    #[serde(default)]
    pub holder: Option<u32>,
}

impl State {
    /// Every sled-backed table with its key prefix: the metadata's, then the partition's. Load,
    /// checkpoint, install and the digest walk this list. Tables kept on disk ([`DiskTable`])
    /// have prefixes from `~` on, after every other key, so loading the others reads none of
    /// their rows.
    pub(crate) fn tables(&mut self) -> Vec<(&'static str, &mut dyn Persisted)> {
        let mut all = self.meta.tables();
        all.extend(self.data.tables());
        all
    }

    pub(crate) fn applied(&self) -> Applied {
        Applied {
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            dedupe_clock: self.data.dedupe_clock,
            settings: self.meta.settings,
            placed_settings: self.data.settings,
            placed_through: self.data.placed_through,
            holder: self.data.holder,
        }
    }

    pub(crate) fn set_applied(&mut self, a: Applied) {
        self.last_applied = a.last_applied;
        self.membership = a.membership;
        self.data.dedupe_clock = a.dedupe_clock;
        self.meta.settings = a.settings;
        self.data.settings = a.placed_settings;
        self.data.placed_through = a.placed_through;
        self.data.holder = a.holder;
    }

    /// Sets up what apply needs besides the tables (after a load, for a replay, for an install):
    /// what is derived from the tables.
    pub(crate) fn prepare_local(&mut self) {
        if self.upgrade() && self.last_applied.is_some() {
            tracing::info!(
                "state written by an earlier release: the data partition now keeps its own copy of the topics, groups and settings (done once)"
            );
        }
        self.data.prepare_local();
    }

    /// State written by a release that kept metadata and data in one: the partition gets its
    /// copy of the metadata, and the metadata the group and topic creations the partition
    /// recorded. Every entry of those releases changed both at once, so the copy is what the
    /// partition would hold at this index whichever index a replica upgrades at. True if it did
    /// anything (once per data directory or snapshot).
    pub(crate) fn upgrade(&mut self) -> bool {
        if self.data.settings.is_some() {
            return false;
        }
        self.data.settings = Some(self.meta.settings);
        for (name, config) in self.meta.topics.iter() {
            self.data.topics.insert(name.clone(), config.clone());
        }
        for (name, epoch) in self.data.consumption.topics.iter() {
            self.meta.topic_epochs.insert(name.clone(), *epoch);
        }
        for (name, config) in self.data.consumption.groups.iter() {
            self.meta.groups.insert(name.clone(), config.clone());
        }
        true
    }

    /// A digest of the replicated state: equal on replicas that applied the same entries. It
    /// covers every table of [`State::tables`] (each as it declares, see
    /// [`Persisted::digest`]), the checkpoint's scalars and the two kept in files of their own:
    /// the dedupe window and pending timers. `Err` if a row kept on disk could not be read.
    pub fn digest(&self) -> Result<u64, serde_json::Error> {
        let mut hash = DigestWriter(0, 0x5253_5441);
        let applied = self.applied();
        serde_json::to_writer(
            &mut hash,
            &(
                &applied.last_applied,
                &applied.membership,
                &applied.dedupe_clock,
                &applied.settings,
                &applied.placed_settings,
                &applied.placed_through,
                &applied.holder,
            ),
        )?;
        for (prefix, table) in self.meta.tables_ref().into_iter().chain(self.data.tables_ref()) {
            hash.write_all(prefix.as_bytes()).map_err(serde_json::Error::io)?;
            table.digest(&mut hash)?;
        }
        serde_json::to_writer(&mut hash, &(&self.data.dedupe, &self.data.timers))?;
        Ok((u64::from(hash.1) << 32) | u64::from(hash.0))
    }
}

/// Two CRC32C's of everything written, without holding the bytes (the state may be large).
struct DigestWriter(u32, u32);

impl std::io::Write for DigestWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = crc32c::crc32c_append(self.0, buf);
        self.1 = crc32c::crc32c_append(self.1, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
