//! How much room the data directory's filesystem has left, and what that means for writing.
//!
//! Two marks on free space (`storage.free_space_soft_mark_bytes`, `..._hard_mark_bytes`): below
//! the soft one a node is *low*, and the cluster stores no new messages; below the hard one it is
//! *critical*, and the cluster appends only what frees space. The space between them is kept for
//! consumption (pops, acks, timers already due, transaction resolutions: small entries), so a
//! consuming group can always drain. Both default to multiples of the segment size, because
//! free space goes down a whole segment at a time (segments are preallocated when the log
//! rolls): the hard mark leaves room for two more rolls' worth of log and state, the soft one for
//! two more beyond that. Retention purges from a third mark up (`purge`).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The free-space marks of one node, in bytes. Zero marks never trip.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watermarks {
    pub soft: u64,
    pub hard: u64,
}

impl Watermarks {
    /// The defaults for a log of `segment_size` segments: 4 and 2 segments.
    pub fn for_segment_size(segment_size: u64) -> Watermarks {
        Watermarks { soft: segment_size.saturating_mul(4), hard: segment_size.saturating_mul(2) }
    }

    /// The marks for `nodes` nodes keeping their data on one filesystem: each needs its own room.
    pub fn times(&self, nodes: u32) -> Watermarks {
        let n = u64::from(nodes.max(1));
        Watermarks { soft: self.soft.saturating_mul(n), hard: self.hard.saturating_mul(n) }
    }

    /// Below this much free space, retention purges what the disk budget allows even before the
    /// budget is reached: as far above the soft mark as the soft mark is above the hard one.
    pub fn purge(&self) -> u64 {
        self.soft.saturating_add(self.soft.saturating_sub(self.hard))
    }

    /// How far above a mark free space must come back before its alarm clears, so a disk that
    /// hovers at the mark does not raise and clear it every second.
    fn slack(&self) -> u64 {
        self.soft / 32
    }

    /// The level `free` bytes put a node at, which was at `was` before.
    pub fn judge(&self, free: u64, was: DiskLevel) -> DiskLevel {
        let slack = self.slack();
        let below = |mark: u64, level: DiskLevel| {
            let clears_at = if was >= level { mark.saturating_add(slack) } else { mark };
            free < clears_at
        };
        if below(self.hard, DiskLevel::Critical) {
            DiskLevel::Critical
        } else if below(self.soft, DiskLevel::Low) {
            DiskLevel::Low
        } else {
            DiskLevel::Ok
        }
    }
}

/// Where a node's free space stands against its marks; ordered from best to worst.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskLevel {
    #[default]
    Ok,
    /// Below the soft mark: no new messages.
    Low,
    /// Below the hard mark: only what frees space.
    Critical,
}

impl DiskLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            DiskLevel::Ok => "ok",
            DiskLevel::Low => "low",
            DiskLevel::Critical => "critical",
        }
    }

    /// What the cluster refuses while its alarm is at this level, for people.
    pub fn refuses(self) -> &'static str {
        match self {
            DiskLevel::Ok => "nothing",
            DiskLevel::Low => "sends are refused (TOO_MANY_REQUESTS); consumption goes on",
            DiskLevel::Critical => "only what frees space is appended",
        }
    }
}

/// Free and total bytes of the filesystem holding `dir`, as an unprivileged writer sees them
/// (blocks reserved for root do not count as free).
pub fn free_space(dir: &Path) -> std::io::Result<(u64, u64)> {
    let st = rustix::fs::statvfs(dir)?;
    Ok((st.f_bavail.saturating_mul(st.f_frsize), st.f_blocks.saturating_mul(st.f_frsize)))
}

/// Names the filesystem holding `dir` among every node's: the same for two directories on one
/// filesystem of one machine (the kernel's boot id and the device), different otherwise.
pub fn filesystem_id(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let device = std::fs::metadata(dir)?.dev();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    // A stable hash (not the randomly keyed default): nodes compare each other's.
    let key = format!("{}/{device}", boot.trim());
    Ok(xxhash_rust::xxh3::xxh3_64(key.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn levels_follow_the_marks_and_clear_only_clear_of_them() {
        let marks = Watermarks::for_segment_size(8 * MIB);
        assert_eq!(marks, Watermarks { soft: 32 * MIB, hard: 16 * MIB });
        assert_eq!(marks.purge(), 48 * MIB);
        assert_eq!(marks.judge(100 * MIB, DiskLevel::Ok), DiskLevel::Ok);
        assert_eq!(marks.judge(32 * MIB, DiskLevel::Ok), DiskLevel::Ok, "at the mark is not below it");
        assert_eq!(marks.judge(32 * MIB - 1, DiskLevel::Ok), DiskLevel::Low);
        assert_eq!(marks.judge(16 * MIB - 1, DiskLevel::Low), DiskLevel::Critical);
        // Back just above a mark: the alarm stays until free space is a slack (1 MiB) above it.
        assert_eq!(marks.judge(32 * MIB + 1, DiskLevel::Low), DiskLevel::Low);
        assert_eq!(marks.judge(33 * MIB, DiskLevel::Low), DiskLevel::Ok);
        assert_eq!(marks.judge(16 * MIB + 1, DiskLevel::Critical), DiskLevel::Critical);
        assert_eq!(marks.judge(17 * MIB, DiskLevel::Critical), DiskLevel::Low);
        assert_eq!(marks.judge(40 * MIB, DiskLevel::Critical), DiskLevel::Ok);
        // Zero marks never trip.
        // Three nodes on one filesystem need three times the room.
        assert_eq!(marks.times(3), Watermarks { soft: 96 * MIB, hard: 48 * MIB });
        assert_eq!(marks.times(0), marks);
        let off = Watermarks { soft: 0, hard: 0 };
        assert_eq!(off.judge(0, DiskLevel::Ok), DiskLevel::Ok);
    }

    #[test]
    fn free_space_of_a_real_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (free, total) = free_space(dir.path()).unwrap();
        assert!(total > 0 && free <= total);
        assert!(free_space(&dir.path().join("missing")).is_err());
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        assert_eq!(filesystem_id(dir.path()).unwrap(), filesystem_id(&inner).unwrap(), "one filesystem");
        assert_ne!(filesystem_id(dir.path()).unwrap(), filesystem_id(Path::new("/proc")).unwrap());
    }
}
