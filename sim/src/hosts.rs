//! The three simulated nodes: their addresses, configurations and data directories.

use std::path::{Path, PathBuf};

/// The simulated hosts, registered in this order so that node `i` (1-based) has address
/// `192.168.0.i`; the workload's host comes after them.
pub const NODES: [&str; 3] = ["n1", "n2", "n3"];
pub const CLIENT: &str = "client";

pub const RAFT_PORT: u16 = 7001;
pub const CLIENT_PORT: u16 = 8081;
pub const ADMIN_PORT: u16 = 9091;

/// The address of node `id` (1-based).
pub fn ip(id: usize) -> String {
    format!("192.168.0.{id}")
}

pub fn client_addr(id: usize) -> String {
    format!("{}:{CLIENT_PORT}", ip(id))
}

pub fn admin_addr(id: usize) -> String {
    format!("{}:{ADMIN_PORT}", ip(id))
}

/// Node `id`'s data directory under `root`.
pub fn data_dir(root: &Path, id: usize) -> PathBuf {
    root.join(format!("n{id}"))
}

/// Writes each node's configuration under `root`; returns their paths, node 1 first.
///
/// Small segments, so a run seals several and the scrubber has something to read; retention
/// that never purges (segment ages are the files' real modification times, which the simulated
/// clock does not share); the scrubber re-reads often.
pub fn write_configs(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let members: String = (1..=NODES.len())
        .map(|id| {
            format!(
                "\n[[members]]\nid = {id}\nraft_addr = \"{ip}:{RAFT_PORT}\"\nclient_addr = \"{ip}:{CLIENT_PORT}\"\nadmin_addr = \"{ip}:{ADMIN_PORT}\"\n",
                ip = ip(id)
            )
        })
        .collect();
    let mut paths = Vec::new();
    for id in 1..=NODES.len() {
        let dir = data_dir(root, id);
        std::fs::create_dir_all(&dir)?;
        let config = format!(
            "node_id = {id}\nraft_addr = \"{ip}:{RAFT_PORT}\"\nclient_addr = \"{ip}:{CLIENT_PORT}\"\n\
             admin_addr = \"{ip}:{ADMIN_PORT}\"\nhttp_addr = \"{ip}:10091\"\ndata_dir = \"{dir}\"\n\
             cluster_secret = \"simulated-cluster-secret-0123456789abcdef\"\nallow_insecure = true\n\
             [storage]\nsegment_size = 1048576\nconsume_queue_records_per_file = 1024\n\
             retention_hours = 1000000\nscrub_mb_per_sec = 4\nscrub_pause_secs = 5\n\
             [broker]\nmax_body_bytes = 65536\n{members}",
            ip = ip(id),
            dir = dir.display(),
        );
        let path = root.join(format!("n{id}.toml"));
        std::fs::write(&path, config)?;
        paths.push(path);
    }
    Ok(paths)
}

/// The log segment files of data group 1 on the node whose data directory is `dir`, in order.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("groups/1/log/segments"))
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
}
