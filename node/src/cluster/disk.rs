//! Every member's free space, and the alarm that keeps a full disk from stopping the cluster.
//!
//! Each node judges its own data filesystem against its own marks (`store/free_space.rs`) and
//! answers `PeerService.DiskSpace` with the result. Every second each node reads the other
//! voters' answers; the worst level among the voters that answer is the cluster's *alarm*. The
//! leader checks it before it proposes anything: below a voter's soft mark it stores no new
//! messages (sends get a retriable "disk low on node N"), below a hard mark it appends only what
//! frees space. So a follower's disk never fills with entries the leader already accepted, and
//! the refusal comes before anyone meets ENOSPC. When space comes back (retention, deletions, a
//! bigger disk) the next reading clears the alarm and sends go on, without a restart. Members
//! that do not answer count for nothing: they receive nothing meanwhile either.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::broker::Footprint;
use crate::cluster::{Cluster, ClusterError};
use crate::raft::NodeId;
use crate::store::free_space::{DiskLevel, Watermarks, filesystem_id, free_space};

/// How long one member's reading may take; a member slower than this is left out this round.
const READ_TIMEOUT: Duration = Duration::from_millis(500);

/// One node's free space, judged against its own marks (times the voters sharing its
/// filesystem).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskReading {
    pub free_bytes: u64,
    pub total_bytes: u64,
    pub marks: Watermarks,
    pub level: DiskLevel,
    /// Which filesystem this is (`free_space::filesystem_id`): equal for nodes sharing one.
    #[serde(default)]
    pub filesystem: u64,
    /// How many voters keep their data on it, this node included (as it knew at the reading).
    #[serde(default)]
    pub sharing: u32,
}

impl DiskReading {
    /// For people: how much is free, and the mark it is below (`LOW 6.0 MiB free < 8.0 MiB`).
    pub fn describe(&self) -> String {
        let free = human_bytes(self.free_bytes);
        match (self.level, self.mark_below()) {
            (DiskLevel::Ok, _) | (_, None) => format!("{free} free"),
            (level, Some(mark)) => format!("{} {free} free < {}", level.as_str().to_uppercase(), human_bytes(mark)),
        }
    }

    /// The mark this reading is below, if any.
    fn mark_below(&self) -> Option<u64> {
        match self.level {
            DiskLevel::Ok => None,
            DiskLevel::Low => Some(self.marks.soft),
            DiskLevel::Critical => Some(self.marks.hard),
        }
    }
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{:.1} KiB", b as f64 / 1024.0),
    }
}

/// What `cluster status` and the metrics show: every answering voter's free space, as this
/// node read it last, and the cluster's alarm level.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskReport {
    pub members: BTreeMap<NodeId, DiskReading>,
    pub alarm: DiskLevel,
}

/// This node's side: its own data directory and marks, and the members' last readings.
pub struct DiskWatch {
    dir: PathBuf,
    marks: Watermarks,
    filesystem: u64,
    /// Voters keeping their data on this node's filesystem (itself included), at the last check:
    /// the marks count that many times, since each of them fills it.
    sharing: AtomicU32,
    own: Mutex<DiskReading>,
    report: Mutex<DiskReport>,
}

impl DiskWatch {
    pub fn new(dir: PathBuf, marks: Watermarks) -> DiskWatch {
        let filesystem = filesystem_id(&dir).unwrap_or_else(|e| {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot tell which filesystem holds the data");
            0
        });
        DiskWatch {
            dir,
            marks,
            filesystem,
            sharing: AtomicU32::new(1),
            own: Mutex::new(DiskReading { marks, filesystem, sharing: 1, ..DiskReading::default() }),
            report: Mutex::default(),
        }
    }

    /// This node's marks as they apply now: its own, times the voters sharing its filesystem.
    pub fn marks(&self) -> Watermarks {
        self.marks.times(self.sharing.load(Ordering::Acquire))
    }

    /// Reads this node's free space now and judges it, saying in the log when its level changes.
    /// A filesystem that cannot be read keeps the last reading (and says why).
    pub fn read_own(&self, node: NodeId) -> DiskReading {
        let sharing = self.sharing.load(Ordering::Acquire);
        let marks = self.marks.times(sharing);
        // Read before the lock: no lock is held across a call to the filesystem.
        let space = free_space(&self.dir);
        let mut own = self.own.lock().expect("own disk reading");
        match space {
            Ok((free, total)) => {
                let level = marks.judge(free, own.level);
                if level != own.level {
                    log_own_change(node, own.level, level, free, &marks);
                }
                let filesystem = self.filesystem;
                *own = DiskReading { free_bytes: free, total_bytes: total, marks, level, filesystem, sharing };
            }
            Err(e) => tracing::warn!(dir = %self.dir.display(), error = %e, "reading free space failed"),
        }
        *own
    }

    /// Counts the voters whose readings name this node's filesystem, and says so when that changes.
    fn count_sharing(&self, node: NodeId, members: &BTreeMap<NodeId, DiskReading>) {
        let others = members.iter().filter(|(id, r)| **id != node && r.filesystem == self.filesystem).count();
        let sharing = u32::try_from(others + 1).unwrap_or(u32::MAX);
        if self.sharing.swap(sharing, Ordering::AcqRel) != sharing {
            tracing::info!(
                node,
                voters = sharing,
                "voters keeping their data on this node's filesystem: its free-space marks count that many times"
            );
        }
    }

    pub fn report(&self) -> DiskReport {
        self.report.lock().expect("disk report").clone()
    }

    /// The worst reading among the voters, if it is below a mark: (node, its reading).
    fn worst(&self) -> Option<(NodeId, DiskReading)> {
        let report = self.report.lock().expect("disk report");
        if report.alarm == DiskLevel::Ok {
            return None;
        }
        report.members.iter().max_by_key(|(_, r)| r.level).map(|(id, r)| (*id, *r))
    }
}

fn log_own_change(node: NodeId, was: DiskLevel, now: DiskLevel, free: u64, marks: &Watermarks) {
    let free_mib = free >> 20;
    match now {
        DiskLevel::Critical => tracing::error!(
            node,
            free_mib,
            hard_mark_mib = marks.hard >> 20,
            "disk critical on this node: below its hard free-space mark, the cluster appends only what frees space"
        ),
        DiskLevel::Low => tracing::warn!(
            node,
            free_mib,
            soft_mark_mib = marks.soft >> 20,
            was = was.as_str(),
            "disk low on this node: below its soft free-space mark, the cluster stores no new messages"
        ),
        DiskLevel::Ok => tracing::warn!(node, free_mib, "disk space on this node is above its marks again"),
    }
}

impl Cluster {
    /// Reads this node's and every other voter's free space and sets the cluster's alarm.
    pub async fn check_disks(&self) {
        let (voters, peers) = self.voters_and_peers();
        let disk = &self.inner.disk;
        let mut members = BTreeMap::new();
        if voters.contains(&self.id()) {
            members.insert(self.id(), disk.read_own(self.id()));
        }
        let readings = futures_util::future::join_all(peers.iter().map(|(id, addr)| async move {
            let reading = tokio::time::timeout(READ_TIMEOUT, self.peers().disk_space(addr)).await;
            (*id, reading)
        }))
        .await;
        for (id, reading) in readings {
            if let Ok(Ok(reading)) = reading {
                members.insert(id, reading);
            }
        }
        // A filesystem that cannot be told apart (0) is counted as nobody else's.
        if disk.filesystem != 0 {
            disk.count_sharing(self.id(), &members);
        }
        let alarm = members.values().map(|r| r.level).max().unwrap_or_default();
        let was = {
            let mut report = disk.report.lock().expect("disk report");
            let was = report.alarm;
            *report = DiskReport { members: members.clone(), alarm };
            was
        };
        if alarm != was && self.is_leader() {
            let low: BTreeMap<NodeId, u64> = members
                .iter()
                .filter(|(_, r)| r.level != DiskLevel::Ok)
                .map(|(id, r)| (*id, r.free_bytes >> 20))
                .collect();
            match alarm {
                DiskLevel::Ok => tracing::warn!("disk alarm cleared: every voter is above its free-space marks"),
                DiskLevel::Low => {
                    tracing::warn!(
                        ?low,
                        "disk alarm (low): sends are refused until space is freed on these nodes (MiB free)"
                    )
                }
                DiskLevel::Critical => tracing::error!(
                    ?low,
                    "disk alarm (critical): only what frees space is appended until space is freed on these nodes (MiB free)"
                ),
            }
        }
    }

    /// This node's own reading, for a member asking (`PeerService.DiskSpace`).
    pub fn disk_here(&self) -> DiskReading {
        self.inner.disk.read_own(self.id())
    }

    /// This node's free-space marks as they apply now (times the voters sharing its filesystem).
    pub fn disk_marks(&self) -> Watermarks {
        self.inner.disk.marks()
    }

    pub fn disk_report(&self) -> DiskReport {
        self.inner.disk.report()
    }

    /// Refuses a command of `footprint` the alarm does not let through: sends below a voter's
    /// soft mark, anything but what frees space below a hard mark.
    pub(crate) fn check_disk(&self, footprint: impl FnOnce() -> Footprint) -> Result<(), ClusterError> {
        let Some((node, worst)) = self.inner.disk.worst() else { return Ok(()) };
        let refused = match footprint() {
            Footprint::Stores => worst.level >= DiskLevel::Low,
            Footprint::Records => worst.level >= DiskLevel::Critical,
            Footprint::Relieves => false,
        };
        if !refused {
            return Ok(());
        }
        self.inner.options.meters.disk_refused();
        Err(ClusterError::DiskLow {
            node,
            free_bytes: worst.free_bytes,
            mark_bytes: worst.mark_below().unwrap_or_default(),
            critical: worst.level == DiskLevel::Critical,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three nodes with their data on one filesystem each need their own room: the marks count
    /// three times; a member on another filesystem does not count.
    #[test]
    fn marks_grow_with_the_voters_sharing_a_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let marks = Watermarks { soft: 8 << 20, hard: 4 << 20 };
        let watch = DiskWatch::new(dir.path().to_path_buf(), marks);
        let own = watch.read_own(1);
        assert_eq!((own.sharing, own.marks), (1, marks));
        let elsewhere = DiskReading { filesystem: own.filesystem ^ 1, ..own };
        let members = BTreeMap::from([(1, own), (2, own), (3, elsewhere)]);
        watch.count_sharing(1, &members);
        assert_eq!(watch.marks(), marks.times(2));
        let again = watch.read_own(1);
        assert_eq!((again.sharing, again.marks), (2, marks.times(2)));
        watch.count_sharing(1, &BTreeMap::from([(1, own)]));
        assert_eq!(watch.marks(), marks, "alone again once the others stop answering");
    }

    #[test]
    fn a_reading_says_how_much_is_free_and_which_mark_it_is_below() {
        let marks = Watermarks { soft: 8 << 20, hard: 4 << 20 };
        let mut r = DiskReading {
            free_bytes: 3 << 30,
            total_bytes: 4 << 30,
            marks,
            level: DiskLevel::Ok,
            ..DiskReading::default()
        };
        assert_eq!(r.describe(), "3.0 GiB free");
        r.free_bytes = 6 << 20;
        r.level = DiskLevel::Low;
        assert_eq!(r.describe(), "LOW 6.0 MiB free < 8.0 MiB");
        r.free_bytes = 512 << 10;
        r.level = DiskLevel::Critical;
        assert_eq!(r.describe(), "CRITICAL 512.0 KiB free < 4.0 MiB");
    }
}
