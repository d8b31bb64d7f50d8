//! A private network for a test cluster, so faults can cut links between nodes: each node runs in
//! its own network namespace, joined to a bridge in the test's namespace by a veth pair, and its
//! nftables input chain drops what a partition says it must not hear.
//!
//! Needs root (CI has it) and the `ip` and `nft` tools (`scripts/setup.sh` installs nftables).
//! [`Network::create`] says why when the kernel refuses, and the caller runs on loopback instead.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Where a node listens: every node has its own address, so the ports can be fixed.
pub const RAFT_PORT: u16 = 7100;
pub const CLIENT_PORT: u16 = 7101;
pub const ADMIN_PORT: u16 = 7102;
pub const HTTP_PORT: u16 = 7103;
pub const REMOTING_PORT: u16 = 9876;

pub struct Network {
    /// Names this network's namespaces and interfaces apart from any other test's.
    tag: u32,
    ids: Vec<u64>,
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("`{}` could not run: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Network {
    /// Makes the namespaces, the bridge and the links for nodes `ids` (1 to 250), with every link
    /// open.
    pub fn create(ids: &[u64]) -> Result<Network, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // Interface names have at most 15 bytes; the tag keeps them under it and the subnet apart.
        let tag = (std::process::id() * 7 + NEXT.fetch_add(1, Ordering::Relaxed)) % 200;
        let network = Network { tag, ids: ids.to_vec() };
        network.remove(); // whatever an earlier run with this tag left behind
        network.build().inspect_err(|_| network.remove())?;
        Ok(network)
    }

    fn build(&self) -> Result<(), String> {
        let bridge = self.bridge();
        run(&["ip", "link", "add", &bridge, "type", "bridge"])?;
        run(&["ip", "addr", "add", &format!("{}/24", self.host_ip()), "dev", &bridge])?;
        run(&["ip", "link", "set", &bridge, "up"])?;
        for &id in &self.ids {
            let ns = self.namespace(id);
            let outside = format!("rrv{}n{id}", self.tag);
            run(&["ip", "netns", "add", &ns])?;
            run(&["ip", "link", "add", &outside, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            run(&["ip", "link", "set", &outside, "master", &bridge])?;
            run(&["ip", "link", "set", &outside, "up"])?;
            let inside = |args: &[&str]| {
                let mut all = vec!["ip", "netns", "exec", &ns];
                all.extend_from_slice(args);
                run(&all)
            };
            inside(&["ip", "link", "set", "lo", "up"])?;
            inside(&["ip", "addr", "add", &format!("{}/24", self.ip(id)), "dev", "eth0"])?;
            inside(&["ip", "link", "set", "eth0", "up"])?;
            inside(&["nft", "add", "table", "inet", "rockraft"])?;
            inside(&["nft", "add chain inet rockraft input { type filter hook input priority 0; policy accept; }"])?;
        }
        Ok(())
    }

    fn bridge(&self) -> String {
        format!("rrbr{}", self.tag)
    }

    /// The namespace node `id` runs in.
    pub fn namespace(&self, id: u64) -> String {
        format!("rockraft-{}-n{id}", self.tag)
    }

    /// Node `id`'s address.
    pub fn ip(&self, id: u64) -> String {
        format!("10.213.{}.{id}", self.tag)
    }

    /// The test's own address on the bridge (clients and the harness talk from it).
    fn host_ip(&self) -> String {
        format!("10.213.{}.254", self.tag)
    }

    fn nft(&self, id: u64, rule: &str) {
        let ns = self.namespace(id);
        if let Err(e) = run(&["ip", "netns", "exec", &ns, "nft", rule]) {
            panic!("network fault on node {id}: {e}");
        }
    }

    /// Node `to` stops hearing node `from` (one way: `from` still hears `to`).
    pub fn drop_from(&self, from: u64, to: u64) {
        self.nft(to, &format!("add rule inet rockraft input ip saddr {} drop", self.ip(from)));
    }

    /// Nodes `a` and `b` stop hearing each other.
    pub fn cut(&self, a: u64, b: u64) {
        self.drop_from(a, b);
        self.drop_from(b, a);
    }

    /// Node `id` and every other node stop hearing each other (clients still reach it).
    pub fn isolate(&self, id: u64) {
        for &other in self.ids.iter().filter(|&&o| o != id) {
            self.cut(id, other);
        }
    }

    /// Every link open again.
    pub fn heal(&self) {
        for &id in &self.ids {
            self.nft(id, "flush chain inet rockraft input");
        }
    }

    fn remove(&self) {
        for &id in &self.ids {
            let _ = run(&["ip", "netns", "del", &self.namespace(id)]);
        }
        let _ = run(&["ip", "link", "del", &self.bridge()]);
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.remove();
    }
}
