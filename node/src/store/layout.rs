//! Where a node keeps each Raft group's files under its data directory, and the move of a data
//! directory of an earlier release into that layout.
//!
//! ```text
//! <data_dir>/layout            the layout's number ("3", or "2")
//! <data_dir>/groups/<id>/log/  the group's CommitLog (its Raft log)
//! <data_dir>/groups/<id>/broker/  the group's state: tables, ConsumeQueues, message index
//! <data_dir>/groups/<id>/snapshot.json  the group's last snapshot
//! ```
//!
//! Releases before layout 2 ran one group and kept its three entries at the top of the data
//! directory. Such a directory is moved into `groups/1` at first start, one rename per entry:
//! each rename is atomic and a start that finds some entries moved and some not moves the rest,
//! so a crash at any point leaves a directory the next start finishes.
//!
//! Layout 3 differs from layout 2 in where the cluster's metadata lives: in group 0, the
//! metadata group, apart from every data group; in layout 2 it shares group 1 with the first
//! data partition. A new data directory is of layout 3; one of layout 2 keeps its metadata in
//! group 1.

use std::path::{Path, PathBuf};

/// The layout this release writes in a new directory.
pub const LAYOUT: u32 = 3;
/// The earlier layout this release still runs: the metadata in group 1.
const LAYOUT_2: u32 = 2;
/// The file that names a directory's layout.
const LAYOUT_FILE: &str = "layout";
/// The group a directory of layout 1 held, and that holds the metadata in layout 2.
const LAYOUT_1_GROUP: u32 = 1;
/// The metadata group's number in layout 3.
const METADATA_GROUP: u32 = 0;
/// What a group's directory holds, and what a directory of layout 1 held at its top
/// (`snapshot.tmp`: a snapshot being written when that node stopped).
const GROUP_ENTRIES: [&str; 4] = ["log", "broker", "snapshot.json", "snapshot.tmp"];

#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "{} holds data directory layout {found}, which this release (layout {LAYOUT}) does not know: \
         run the release that wrote it",
        dir.display()
    )]
    Unknown { dir: PathBuf, found: String },
    #[error(
        "both {} (an earlier release's) and {} exist, so it is unclear which is this node's: move one away",
        old.display(),
        new.display()
    )]
    Both { old: PathBuf, new: PathBuf },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// A node's data directory, in layout 3 or 2.
#[derive(Debug, Clone)]
pub struct DataLayout {
    root: PathBuf,
    layout: u32,
}

/// One group's directory.
#[derive(Debug, Clone)]
pub struct GroupDir(PathBuf);

impl GroupDir {
    /// The group's CommitLog.
    pub fn log(&self) -> PathBuf {
        self.0.join("log")
    }
    /// The group's broker state.
    pub fn broker(&self) -> PathBuf {
        self.0.join("broker")
    }
    /// The group's snapshot file.
    pub fn snapshot(&self) -> PathBuf {
        self.0.join("snapshot.json")
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LayoutError + '_ {
    move |source| LayoutError::Io { path: path.to_path_buf(), source }
}

impl DataLayout {
    /// Opens `root` (made if missing): a new directory in layout 3, one of layout 2 as it is,
    /// first moving a directory of layout 1 into layout 2 (logged). Refuses a layout it does not
    /// know, and an entry that exists both where layout 1 and where layout 2 keeps it.
    pub fn open(root: &Path) -> Result<DataLayout, LayoutError> {
        crate::store::create_dir_durable(root)?;
        let file = root.join(LAYOUT_FILE);
        let named = match std::fs::read_to_string(&file) {
            Ok(found) => match found.trim().parse::<u32>() {
                Ok(n) if n == LAYOUT || n == LAYOUT_2 => Some(n),
                _ => return Err(LayoutError::Unknown { dir: root.to_path_buf(), found: found.trim().to_string() }),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(LayoutError::Io { path: file, source: e }),
        };
        let mut layout = DataLayout { root: root.to_path_buf(), layout: named.unwrap_or(LAYOUT) };
        // Looked for in a directory of a later layout too, where it refuses entries of layout 1
        // copied back beside the groups.
        if layout.move_layout_1()? || (named.is_none() && layout.group(LAYOUT_1_GROUP).path().exists()) {
            // A directory an earlier release wrote: its metadata is in group 1.
            layout.layout = LAYOUT_2;
        }
        if named.is_none() {
            // Written last: a directory that names its layout has nothing left to move.
            let tmp = root.join("layout.tmp");
            let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
            std::io::Write::write_all(&mut f, format!("{}\n", layout.layout).as_bytes()).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
            std::fs::rename(&tmp, &file).map_err(io(&file))?;
            crate::store::sync_dir(root)?;
        }
        Ok(layout)
    }

    /// The group that holds the cluster's metadata on this node: the metadata group, or in a
    /// directory of layout 2 the first data group.
    pub fn metadata_group(&self) -> u32 {
        match self.layout {
            LAYOUT_2 => LAYOUT_1_GROUP,
            _ => METADATA_GROUP,
        }
    }

    pub fn group(&self, id: u32) -> GroupDir {
        GroupDir(self.root.join("groups").join(id.to_string()))
    }

    /// Moves the entries a release of layout 1 kept at the top into `groups/1`; `true` if
    /// there were some.
    fn move_layout_1(&self) -> Result<bool, LayoutError> {
        let old: Vec<&str> = GROUP_ENTRIES.iter().copied().filter(|e| self.root.join(e).exists()).collect();
        if old.is_empty() {
            return Ok(false);
        }
        let group = self.group(LAYOUT_1_GROUP);
        for entry in &old {
            let new = group.path().join(entry);
            if new.exists() {
                return Err(LayoutError::Both { old: self.root.join(entry), new });
            }
        }
        tracing::warn!(
            dir = %self.root.display(),
            into = %group.path().display(),
            entries = ?old,
            "data directory of an earlier release (one group): moving its log, state and snapshot into group {LAYOUT_1_GROUP}"
        );
        crate::store::create_dir_durable(group.path())?;
        for entry in old {
            let (from, to) = (self.root.join(entry), group.path().join(entry));
            std::fs::rename(&from, &to).map_err(io(&from))?;
            // Both directories' entries changed: durable before the next rename, so a crash
            // never finds an entry in neither place.
            crate::store::sync_dir(group.path())?;
            crate::store::sync_dir(&self.root)?;
        }
        tracing::warn!(into = %group.path().display(), "data directory moved into layout {LAYOUT_2}");
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout_1(root: &Path) {
        std::fs::create_dir_all(root.join("log/segments")).unwrap();
        std::fs::write(root.join("log/segments/0.seg"), b"entries").unwrap();
        std::fs::create_dir_all(root.join("broker/meta")).unwrap();
        std::fs::write(root.join("broker/meta/db"), b"tables").unwrap();
        std::fs::write(root.join("snapshot.json"), b"{}").unwrap();
    }

    #[test]
    fn a_directory_of_layout_1_moves_into_group_1_with_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        layout_1(dir.path());
        let layout = DataLayout::open(dir.path()).unwrap();
        let group = layout.group(1);
        assert_eq!(std::fs::read(group.log().join("segments/0.seg")).unwrap(), b"entries");
        assert_eq!(std::fs::read(group.broker().join("meta/db")).unwrap(), b"tables");
        assert_eq!(std::fs::read(group.snapshot()).unwrap(), b"{}");
        for entry in ["log", "broker", "snapshot.json"] {
            assert!(!dir.path().join(entry).exists(), "{entry} left at the top");
        }
        assert_eq!(std::fs::read_to_string(dir.path().join("layout")).unwrap().trim(), "2");
        // Opening again changes nothing.
        DataLayout::open(dir.path()).unwrap();
        assert_eq!(std::fs::read(group.log().join("segments/0.seg")).unwrap(), b"entries");
    }

    /// A start that crashed after moving some entries finishes the move.
    #[test]
    fn a_move_cut_short_is_finished_by_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        layout_1(dir.path());
        let group = dir.path().join("groups/1");
        std::fs::create_dir_all(&group).unwrap();
        std::fs::rename(dir.path().join("log"), group.join("log")).unwrap();
        let layout = DataLayout::open(dir.path()).unwrap();
        assert_eq!(std::fs::read(layout.group(1).log().join("segments/0.seg")).unwrap(), b"entries");
        assert_eq!(std::fs::read(layout.group(1).broker().join("meta/db")).unwrap(), b"tables");
        assert!(!dir.path().join("broker").exists());
    }

    #[test]
    fn an_entry_in_both_places_is_refused_and_nothing_moves() {
        let dir = tempfile::tempdir().unwrap();
        layout_1(dir.path());
        std::fs::create_dir_all(dir.path().join("groups/1/broker")).unwrap();
        let err = DataLayout::open(dir.path()).unwrap_err();
        assert!(matches!(err, LayoutError::Both { .. }), "{err}");
        assert!(dir.path().join("log/segments/0.seg").exists(), "nothing moved");
        assert!(!dir.path().join("layout").exists());
    }

    #[test]
    fn a_layout_this_release_does_not_know_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("layout"), "4\n").unwrap();
        let err = DataLayout::open(dir.path()).unwrap_err();
        assert!(err.to_string().contains("layout 4"), "{err}");
    }

    #[test]
    fn a_new_directory_is_written_in_layout_3_with_the_metadata_in_group_0() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("data");
        let layout = DataLayout::open(&root).unwrap();
        assert_eq!(std::fs::read_to_string(root.join("layout")).unwrap().trim(), "3");
        assert_eq!(layout.metadata_group(), 0);
        assert_eq!(layout.group(3).snapshot(), root.join("groups/3/snapshot.json"));
        // And stays so.
        assert_eq!(DataLayout::open(&root).unwrap().metadata_group(), 0);
    }

    /// A directory of layout 2 keeps its metadata in group 1.
    #[test]
    fn a_directory_of_layout_2_keeps_its_metadata_in_group_1() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("groups/1/log")).unwrap();
        std::fs::write(dir.path().join("layout"), "2\n").unwrap();
        assert_eq!(DataLayout::open(dir.path()).unwrap().metadata_group(), 1);
        // Moved from layout 1 just now: layout 2 too.
        let moved = tempfile::tempdir().unwrap();
        layout_1(moved.path());
        assert_eq!(DataLayout::open(moved.path()).unwrap().metadata_group(), 1);
    }
}
