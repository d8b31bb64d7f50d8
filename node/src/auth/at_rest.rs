//! Secrets at rest. User secrets and handle keys are replicated state, so they are in the log,
//! the snapshots and the state files; the cluster and admin secrets are in the config or files
//! of their own. A node makes every file and directory it creates private to its user, and says
//! at start which of the files it was given others can read.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Permission bits that let anyone but the owner in: what the node's own files never have.
const GROUP_AND_OTHERS: u32 = 0o077;
/// Permission bits that let every user of the machine in: what the node warns of. (A group may be
/// meant: Kubernetes gives a pod's fsGroup read access to its mounted secrets.)
const OTHERS: u32 = 0o007;

/// From here on, files this process creates are 0600 and directories 0700, whatever the
/// caller's umask. Called once, before the node opens anything.
pub fn create_private() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(GROUP_AND_OTHERS));
}

/// Why `path` is open to every user of the machine, or `None` when it is not or cannot be read
/// (the node reports a missing file where it opens it).
pub fn open_to_others(path: &Path) -> Option<String> {
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & OTHERS != 0).then(|| format!("{} is mode {mode:03o}", path.display()))
}

/// Warns, once at start, of each of the node's secret-holding paths others may read.
/// `paths`: what holds a secret, and what it holds.
pub fn warn_if_open(paths: &[(&Path, &str)]) {
    for (path, holds) in paths {
        if let Some(why) = open_to_others(path) {
            tracing::warn!(
                "{why}, but it holds {holds}: others on this machine can read it; make it private (chmod {})",
                if path.is_dir() { "700" } else { "600" }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_others_can_read_is_named_and_a_private_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(open_to_others(&file).unwrap().contains("644"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(open_to_others(&file), None);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(open_to_others(&file), None, "a group of its own may read it");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(open_to_others(dir.path()).is_some(), "anyone may list it");
        assert_eq!(open_to_others(&dir.path().join("missing")), None);
    }
}
