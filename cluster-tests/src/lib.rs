//! A harness that runs real `rockraft` node processes on free loopback ports, with small
//! segment files, for tests that use the official RocketMQ clients and inject faults.
//!
//! The node binary is `$ROCKRAFT_BIN`, or `target/debug/rockraft` of this workspace
//! (`scripts/test.sh` builds it before the tests run).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rockraft::admin::api::{NodeStatus, Role};
use rockraft::admin::{AdminCall, CallError, CallOptions, Credentials, call};
use rockraft::broker::TopicKind;
use rockraft::plugin::PluginKind;
use rockraft_proto::rockraft as pb;

pub mod history;
pub mod network;

use network::Network;

/// Each Raft group's state on each node holding a replica of it, by (group, node).
pub type ReplicaStates = BTreeMap<(u32, u64), Option<rockraft::admin::api::StateDigest>>;

/// A small deterministic generator (xorshift), so a failing seed replays the same choices.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A duration from `from_ms` up to (not including) `to_ms` milliseconds.
    pub fn millis(&mut self, from_ms: u64, to_ms: u64) -> Duration {
        Duration::from_millis(from_ms + self.below(to_ms - from_ms))
    }
}

pub struct Node {
    pub id: u64,
    pub raft_addr: String,
    pub client_addr: String,
    pub admin_addr: String,
    /// The status page, `/metrics` and the health checks.
    pub http_addr: String,
    /// RocketMQ 4.x Remoting clients' name server and broker.
    pub remoting_addr: String,
    /// Its config and log (`node.log`).
    pub dir: PathBuf,
    /// Its data: `dir` itself, or a small filesystem mounted in it (`Options::disk_mib`).
    pub data_dir: PathBuf,
    child: Option<Child>,
    /// How far this node's clock is set ahead (the test build reads `ROCKRAFT_TEST_CLOCK_OFFSET_MS`).
    clock_offset_ms: i64,
}

/// A node started apart from the cluster, not initialised and knowing no member, as an operator
/// starts one before `cluster add-node`. Stopped when dropped.
pub struct Joiner {
    pub id: u64,
    pub raft_addr: String,
    pub client_addr: String,
    pub admin_addr: String,
    child: Child,
}

impl Joiner {
    /// What `cluster add-node` is given for it.
    pub fn add_request(&self) -> pb::AddNodeRequest {
        pb::AddNodeRequest {
            id: self.id,
            raft_addr: self.raft_addr.clone(),
            client_addr: self.client_addr.clone(),
            admin_addr: self.admin_addr.clone(),
            ..Default::default()
        }
    }
}

impl Drop for Joiner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    /// The secret the members share: calls to a raft port must carry it.
    pub secret: String,
    /// The admin credential of a cluster started with `Options::auth` (every node's config
    /// carries it): the harness signs its admin requests with it.
    pub admin: Option<Credentials>,
    /// The CA that signed the nodes' certificates, when started with `Options::tls`.
    pub tls_ca: Option<PathBuf>,
    /// That CA, to sign more certificates with (nodes added later).
    pub ca: Option<TestCa>,
    /// The nodes' private network, for a cluster started with `Options::network` where the
    /// kernel allows it: partitions go through it.
    pub network: Option<Network>,
    /// The data groups the cluster was started with (1 unless `Options::data_groups` or the
    /// environment said more): `digest` covers each.
    pub data_groups: u32,
    bin: PathBuf,
    /// Unmounted before `_dir` goes (fields drop in order), after `drop` stopped the nodes.
    _mounts: Vec<SmallDisk>,
    _dir: tempfile::TempDir,
}

/// Extra config lines for every node.
#[derive(Default, Clone)]
pub struct Options {
    /// Top-level keys.
    pub extra_config: String,
    /// Keys of the `[storage]` table (segments are 1 MiB already).
    pub storage: String,
    /// Keys of the `[broker]` table.
    pub broker: String,
    /// Keys of the `[limits]` table.
    pub limits: String,
    /// Authentication on, with an admin credential in every node's config.
    pub auth: bool,
    /// TLS on the client and admin listeners, with a certificate for 127.0.0.1 and localhost
    /// signed by a CA made for this cluster (`Cluster::tls_ca`).
    pub tls: bool,
    /// Members over mutual TLS on the raft port (`[tls] peer_ca_file`, implies `tls`), each
    /// node's certificate naming its member id, beside the cluster secret.
    pub member_tls: bool,
    /// Each node in a network namespace of its own, so links can be cut (`Cluster::network`);
    /// on loopback, with a message saying why, where namespaces cannot be made.
    pub network: bool,
    /// Each node's data on a filesystem of its own this many MiB large (a tmpfs: see
    /// `small_disks_allowed`, which a test asks first).
    pub disk_mib: Option<u64>,
    /// `FAILPOINTS` for every node's first start (the test build has the `failpoints` feature).
    pub failpoints: Option<String>,
    /// Fixed ports instead of free ones: node N's raft, client, admin and HTTP ports are these
    /// bases plus N, as `scripts/cluster.sh` assigns them.
    pub port_bases: Option<[u16; 4]>,
    /// A `.tar.gz` of `node<id>/` data directories a cluster wrote earlier (another release's,
    /// say): unpacked before the nodes start, which then resume that cluster instead of
    /// initialising a new one. Its members' addresses are in its log: give its `port_bases`.
    pub existing_data: Option<PathBuf>,
    /// Data groups the new cluster runs (`cluster init --data-groups`); unset: the
    /// `ROCKRAFT_TEST_DATA_GROUPS` environment variable, else one. The cluster is handed over
    /// once every node sees every group led.
    pub data_groups: Option<u32>,
    /// Exactly the nodes `Cluster::start` is asked for, whatever `ROCKRAFT_TEST_NODES` says: for
    /// tests of the shape data groups take on three nodes (every node holds every group).
    pub exact_nodes: bool,
}

/// A tmpfs mounted for one node's data, unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    fn mount(path: &Path, mib: u64) -> Result<SmallDisk, String> {
        std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "rockraft-test"])
            .arg(path)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        match out.status.success() {
            true => Ok(SmallDisk { path: path.to_path_buf() }),
            false => Err(format!("mount -t tmpfs: {}", String::from_utf8_lossy(&out.stderr).trim())),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Whether this machine lets the tests mount small filesystems (root, and a kernel that allows
/// it here): why not, if not.
pub fn small_disks_allowed() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    SmallDisk::mount(&dir.path().join("probe"), 1).map(drop)
}

/// What a test caller of a raft port adds to each call: the cluster secret (when it has one) and
/// the group it names.
#[derive(Clone)]
pub struct RaftPortHeaders {
    pub secret: Option<String>,
    pub group: u32,
}

impl tonic::service::Interceptor for RaftPortHeaders {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(secret) = &self.secret {
            r.metadata_mut().insert(rockraft::auth::member::SECRET_HEADER, secret.parse().expect("ascii"));
        }
        r.metadata_mut().insert("rockraft-group", self.group.into());
        Ok(r)
    }
}

/// A certificate authority made for a test, which signs node certificates.
pub struct TestCa {
    /// Its certificate, PEM.
    pub cert: PathBuf,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    /// A new CA, its certificate written to `dir/ca.pem`.
    pub fn new(dir: &Path) -> TestCa {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "RockRaft test CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let cert = dir.join("ca.pem");
        std::fs::create_dir_all(dir).expect("CA dir");
        std::fs::write(&cert, ca_cert.pem()).expect("write CA");
        TestCa { cert, issuer: Issuer::new(ca_params, ca_key) }
    }

    /// A certificate for `names` (IP addresses become IP SANs) signed by this CA, naming no
    /// member (what the CA issues to other services), written to `dir/<file>.pem` and
    /// `dir/<file>.key`; returns (certificate, key).
    pub fn issue(&self, dir: &Path, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        self.issue_with(dir, file, None, names)
    }

    /// [`Self::issue`] for member `id` of the test clusters (named `rockraft`, the default): its
    /// URI SAN `rockraft://rockraft/node/<id>`.
    pub fn issue_member(&self, dir: &Path, file: &str, id: u64, names: &[&str]) -> (PathBuf, PathBuf) {
        self.issue_with(dir, file, Some(rockraft::auth::member_tls::member_uri("rockraft", id)), names)
    }

    /// [`Self::issue`] with any URI SAN (another cluster's member, a malformed one).
    pub fn issue_with(&self, dir: &Path, file: &str, uri: Option<String>, names: &[&str]) -> (PathBuf, PathBuf) {
        use rcgen::{CertificateParams, DnType, KeyPair, SanType};
        let key = KeyPair::generate().expect("node key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("node params");
        if let Some(uri) = uri {
            params.subject_alt_names.push(SanType::URI(uri.try_into().expect("an ASCII URI")));
        }
        params.distinguished_name.push(DnType::CommonName, file);
        let cert = params.signed_by(&key, &self.issuer).expect("node certificate");
        let paths = (dir.join(format!("{file}.pem")), dir.join(format!("{file}.key")));
        std::fs::write(&paths.0, cert.pem()).expect("write certificate");
        std::fs::write(&paths.1, key.serialize_pem()).expect("write key");
        paths
    }
}

/// Makes a CA and a certificate for 127.0.0.1 and localhost signed by it, in `dir`; returns the
/// paths of (CA certificate, node certificate, node key), PEM.
pub fn make_certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca = TestCa::new(dir);
    let (cert, key) = ca.issue_member(dir, "node", 1, &["127.0.0.1", "localhost"]);
    (ca.cert, cert, key)
}

/// A fresh cluster secret: 48 hex digits from the standard library's random hash keys.
fn new_secret() -> String {
    use std::hash::{BuildHasher, Hasher};
    (0..3).map(|_| format!("{:016x}", std::collections::hash_map::RandomState::new().build_hasher().finish())).collect()
}

/// A port for a test node: below the kernel's ephemeral range (32768-60999 by default), so no
/// connection this machine opens is given it as its own port (say while its node is down for a
/// restart), and handed out once per process, so two nodes never get the same one.
pub fn free_port() -> u16 {
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: std::sync::OnceLock<std::sync::atomic::AtomicU32> = std::sync::OnceLock::new();
    // Test binaries run one after another; each starts somewhere else in the span.
    let next = NEXT.get_or_init(|| std::sync::atomic::AtomicU32::new(std::process::id() % SPAN));
    for _ in 0..SPAN {
        let port = (FIRST + next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}-{}", FIRST + SPAN)
}

/// The workspace's target directory, where the binary and the client installs live.
fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// The `rockraft` binary the nodes run (also the CLI).
pub fn node_binary() -> PathBuf {
    if let Ok(p) = std::env::var("ROCKRAFT_BIN") {
        return p.into();
    }
    let bin = target_dir().join("debug/rockraft");
    assert!(bin.exists(), "{} is missing: run `cargo build -p rockraft` first (scripts/test.sh does)", bin.display());
    bin
}

/// Starts a node of the binary under test on `config`, which is written to `<dir>/config.toml`;
/// its log goes to `<dir>/node.log`.
pub fn spawn_node(dir: &Path, config: &str) -> Child {
    std::fs::write(dir.join("config.toml"), config).expect("config");
    let log = std::fs::File::create(dir.join("node.log")).expect("log");
    Command::new(node_binary())
        .arg("node")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start node")
}

impl Cluster {
    /// Starts `n` nodes with 1 MiB segments (so bodies are capped at 512 KiB: a message must fit
    /// one segment), initialises the group and waits for a leader.
    ///
    /// `ROCKRAFT_TEST_NODES=5` starts five nodes where a test asks for three, so the suite runs
    /// with each data group on three of five nodes (with `ROCKRAFT_TEST_DATA_GROUPS=5`).
    pub async fn start(n: u64, options: Options) -> Cluster {
        let n = match std::env::var("ROCKRAFT_TEST_NODES").ok().and_then(|v| v.parse::<u64>().ok()) {
            Some(more) if n == 3 && more > 3 && !options.exact_nodes => more,
            _ => n,
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let ids: Vec<u64> = (1..=n).collect();
        let network = match options.network {
            true => Network::create(&ids)
                .inspect_err(|e| eprintln!("no private network ({e}): the nodes run on loopback, unpartitioned"))
                .ok(),
            false => None,
        };
        let nodes: Vec<Node> = ids
            .iter()
            .map(|&id| {
                let (raft_addr, client_addr, admin_addr, http_addr) = match (&network, options.port_bases) {
                    (_, Some([raft, client, admin, http])) => {
                        let at = |base: u16| format!("127.0.0.1:{}", u64::from(base) + id);
                        (at(raft), at(client), at(admin), at(http))
                    }
                    (Some(net), None) => (
                        format!("{}:{}", net.ip(id), network::RAFT_PORT),
                        format!("{}:{}", net.ip(id), network::CLIENT_PORT),
                        format!("{}:{}", net.ip(id), network::ADMIN_PORT),
                        format!("{}:{}", net.ip(id), network::HTTP_PORT),
                    ),
                    (None, None) => (
                        format!("127.0.0.1:{}", free_port()),
                        format!("127.0.0.1:{}", free_port()),
                        format!("127.0.0.1:{}", free_port()),
                        format!("127.0.0.1:{}", free_port()),
                    ),
                };
                let remoting_addr = match &network {
                    Some(net) if options.port_bases.is_none() => format!("{}:{}", net.ip(id), network::REMOTING_PORT),
                    _ => format!("127.0.0.1:{}", free_port()),
                };
                Node {
                    id,
                    raft_addr,
                    client_addr,
                    admin_addr,
                    http_addr,
                    remoting_addr,
                    dir: dir.path().join(format!("node{id}")),
                    data_dir: match options.disk_mib {
                        Some(_) => dir.path().join(format!("node{id}/data")),
                        None => dir.path().join(format!("node{id}")),
                    },
                    child: None,
                    clock_offset_ms: 0,
                }
            })
            .collect();
        let members: String = nodes
            .iter()
            .map(|m| {
                format!(
                    "\n[[members]]\nid = {}\nraft_addr = \"{}\"\nclient_addr = \"{}\"\nadmin_addr = \"{}\"\n",
                    m.id, m.raft_addr, m.client_addr, m.admin_addr
                )
            })
            .collect();
        let secret = new_secret();
        let admin = options.auth.then(|| Credentials {
            access_key: "admin".into(),
            secret: rockraft::broker::access::Secret::new(new_secret()),
        });
        let auth = match &admin {
            Some(a) => format!(
                "[auth]\nenabled = true\nadmin_access_key = \"{}\"\nadmin_secret_key = \"{}\"\n",
                a.access_key,
                a.secret.expose()
            ),
            None => String::new(),
        };
        // Each node's certificate names it (the member id it presents to the others).
        let ca = (options.tls || options.member_tls).then(|| TestCa::new(dir.path()));
        let tls_of = |node: &Node| match &ca {
            Some(ca) => {
                // Its addresses too, where it has its own (a network namespace).
                let mut names = vec!["127.0.0.1", "localhost"];
                for addr in [&node.raft_addr, &node.client_addr, &node.admin_addr] {
                    let host = rockraft::auth::tls::host_of(addr);
                    if !names.contains(&host) {
                        names.push(host);
                    }
                }
                let id = node.id;
                let (cert, key) = ca.issue_member(dir.path(), &format!("node{id}"), id, &names);
                let mut tls = format!("[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n", cert.display(), key.display());
                if options.member_tls {
                    tls += &format!("peer_ca_file = \"{}\"\n", ca.cert.display());
                }
                tls
            }
            None => String::new(),
        };
        // Nodes on a private network with authentication off serve their admin ports beyond
        // loopback: said explicitly, as a deployment would have to.
        let insecure = if network.is_some() && admin.is_none() { "allow_insecure = true\n" } else { "" };
        let tls_ca = ca.as_ref().map(|c| c.cert.clone());
        // With mutual TLS as well: members prove both.
        let secret_line = format!("cluster_secret = \"{secret}\"");
        if let Some(archive) = &options.existing_data {
            let out = Command::new("tar").arg("xzf").arg(archive).arg("-C").arg(dir.path()).output().expect("run tar");
            assert!(out.status.success(), "unpacking {}: {}", archive.display(), String::from_utf8_lossy(&out.stderr));
        }
        // Five debug builds on a two-core host miss 100 ms heartbeats often enough to elect leaders
        // over and over (each of their groups ticks and heartbeats on its own); slower timings
        // keep them steady. Three keep the defaults, which are the product's.
        let raft = match n >= 5 && !options.extra_config.contains("[raft]") {
            true => "[raft]\nheartbeat_ms = 250\nelection_timeout_min_ms = 1000\nelection_timeout_max_ms = 1500\n",
            false => "",
        };
        let mut mounts = Vec::new();
        for node in &nodes {
            std::fs::create_dir_all(&node.dir).expect("node dir");
            let tls = tls_of(node);
            if let Some(mib) = options.disk_mib {
                mounts.push(SmallDisk::mount(&node.data_dir, mib).expect("a small filesystem for the node's data"));
            }
            let config = format!(
                "node_id = {}\nraft_addr = \"{}\"\nclient_addr = \"{}\"\nadmin_addr = \"{}\"\nhttp_addr = \"{}\"\nremoting_addr = \"{}\"\ndata_dir = \"{}\"\n{secret_line}\n{insecure}{}\n{auth}\n{tls}\n[storage]\nsegment_size = 1048576\nconsume_queue_records_per_file = 1024\n{}\n[broker]\nmax_body_bytes = 524288\n{}\n[limits]\n{}\n{}\n{raft}",
                node.id,
                node.raft_addr,
                node.client_addr,
                node.admin_addr,
                node.http_addr,
                node.remoting_addr,
                node.data_dir.display(),
                options.extra_config,
                options.storage,
                options.broker,
                options.limits,
                members
            );
            std::fs::write(node.dir.join("config.toml"), config).expect("config");
        }
        let mut cluster = Cluster {
            nodes,
            secret,
            admin,
            tls_ca,
            ca,
            network,
            data_groups: 1,
            bin: node_binary(),
            _mounts: mounts,
            _dir: dir,
        };
        for id in 1..=n {
            cluster.spawn_with(id, options.failpoints.as_deref());
        }
        let first = cluster.nodes[0].admin_addr.clone();
        let deadline = Instant::now() + Duration::from_secs(30);
        while options.existing_data.is_none() {
            match cluster.call(&first, pb::InitRequest {}).await {
                Ok(_) => break,
                Err(e) => {
                    // A node that could not start says why in its log: show it, not a timeout.
                    if let Some((id, log)) = cluster.exited() {
                        panic!("node {id} exited while the cluster started; its log ends:\n{log}");
                    }
                    assert!(Instant::now() < deadline, "the cluster did not initialise within 30 s: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        cluster.wait_for_leader(Duration::from_secs(30)).await;
        let data_groups = options
            .data_groups
            .or_else(|| std::env::var("ROCKRAFT_TEST_DATA_GROUPS").ok().and_then(|v| v.parse().ok()));
        if options.existing_data.is_none() {
            let groups = data_groups.unwrap_or(1).max(1);
            if groups > 1 {
                cluster.admin(pb::ConfigureRequest { data_groups: Some(groups), ..Default::default() }).await;
            }
            cluster.wait_for_groups(groups, Duration::from_secs(60)).await;
            cluster.data_groups = groups;
            if groups > 1 {
                cluster.wait_balanced(Duration::from_secs(60)).await;
            }
        }
        // Every node must have heard from the leaders before a test starts talking to it.
        for id in 1..=n {
            cluster.wait_caught_up_in(None, id, Duration::from_secs(30)).await;
            cluster.wait_caught_up(id, Duration::from_secs(30)).await;
        }
        cluster
    }

    /// Waits until each data group is led by the node whose turn it is (the first of its
    /// replica set, as the balancer hands leaderships over), so a test starts with no hand-over
    /// still to come.
    pub async fn wait_balanced(&self, timeout: Duration) {
        let voters: BTreeMap<u64, rockraft::raft::NodeInfo> =
            self.ids().into_iter().map(|id| (id, rockraft::raft::NodeInfo::default())).collect();
        let deadline = Instant::now() + timeout;
        for group in 1..=self.data_groups {
            let turn = rockraft::cluster::replica_set::replica_set(rockraft::raft::GroupId(group), &voters)[0];
            loop {
                let leader = self.group_leader_status(group).await.and_then(|s| s.leader);
                if leader == Some(turn) {
                    break;
                }
                assert!(Instant::now() < deadline, "group {group} is led by {leader:?}, not by node {turn}, its turn");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Waits until every running node runs groups 1 to `groups`, each it holds a replica of with
    /// a leader it knows; from five nodes, also until each group has its three voters.
    pub async fn wait_for_groups(&mut self, groups: u32, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let ids: Vec<u64> = self.nodes.iter().map(|n| n.id).collect();
        loop {
            let mut ready = true;
            for &id in &ids {
                if !self.is_running(id) {
                    continue;
                }
                let led = match self.status(id).await {
                    Some(s) => s
                        .groups
                        .iter()
                        .filter(|g| (1..=groups).contains(&g.id) && (g.elsewhere || g.leader.is_some()))
                        .count(),
                    None => 0,
                };
                ready &= led == groups as usize;
            }
            if ready && ids.len() >= 5 {
                // Its three voters and no one else: the learners it placed elsewhere at first
                // have left (each step an entry of the group's, which a test would see arrive).
                for group in 1..=groups {
                    let members = self.group_leader_status(group).await.map(|s| s.members);
                    ready &= members.is_some_and(|m| m.len() == 3 && m.iter().all(|m| m.voter));
                }
            }
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the {groups} data groups did not all elect a leader within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A node whose process has exited, with the end of its log.
    fn exited(&mut self) -> Option<(u64, String)> {
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut()
                && child.try_wait().ok().flatten().is_some()
            {
                let log = std::fs::read_to_string(node.dir.join("node.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                return Some((node.id, tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
            }
        }
        None
    }

    fn node(&self, id: u64) -> &Node {
        self.nodes.iter().find(|n| n.id == id).expect("known node")
    }

    fn spawn(&mut self, id: u64) {
        self.spawn_with(id, None);
    }

    /// Starts node `id`, with `FAILPOINTS` set when `crash_points` is given (the node binary of
    /// the test suite is built with the `failpoints` feature).
    fn spawn_with(&mut self, id: u64, crash_points: Option<&str>) {
        let bin = self.bin.clone();
        let namespace = self.network.as_ref().map(|net| net.namespace(id));
        let node = self.nodes.iter_mut().find(|n| n.id == id).expect("known node");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(node.dir.join("node.log")).expect("log");
        // `ip netns exec` enters the namespace and execs the node: the child's pid is the node's.
        let mut command = match namespace {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        match crash_points {
            Some(f) => command.env("FAILPOINTS", f),
            None => command.env_remove("FAILPOINTS"),
        };
        let child = command
            .env("ROCKRAFT_TEST_CLOCK_OFFSET_MS", node.clock_offset_ms.to_string())
            .arg("node")
            .arg("--config")
            .arg(node.dir.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start rockraft node");
        node.child = Some(child);
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill(&mut self, id: u64) {
        let node = self.nodes.iter_mut().find(|n| n.id == id).expect("known node");
        if let Some(mut c) = node.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait for the process to exit.
    pub fn stop(&mut self, id: u64) {
        let node = self.nodes.iter_mut().find(|n| n.id == id).expect("known node");
        if let Some(mut c) = node.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self, id: u64) {
        self.spawn(id);
    }

    /// SIGSTOP: the process freezes (timers, sockets and all) until [`Cluster::resume`].
    pub fn pause(&mut self, id: u64) {
        self.signal(id, "-STOP");
    }

    /// SIGCONT after [`Cluster::pause`].
    pub fn resume(&mut self, id: u64) {
        self.signal(id, "-CONT");
    }

    fn signal(&mut self, id: u64, signal: &str) {
        if let Some(pid) = self.pid(id) {
            let _ = Command::new("kill").arg(signal).arg(pid.to_string()).status();
        }
    }

    /// Starts node `id` again on its data with its clock `offset_ms` ahead of the machine's (for
    /// this and later restarts).
    pub fn restart_with_clock_offset(&mut self, id: u64, offset_ms: i64) {
        self.nodes.iter_mut().find(|n| n.id == id).expect("known node").clock_offset_ms = offset_ms;
        self.spawn(id);
    }

    /// Steps node `id`'s clock to `offset_ms` from the machine's while it runs (and for its later
    /// restarts): the test build follows a file in its data directory, within 100 ms.
    pub fn set_clock_offset(&mut self, id: u64, offset_ms: i64) {
        let node = self.nodes.iter_mut().find(|n| n.id == id).expect("known node");
        node.clock_offset_ms = offset_ms;
        std::fs::write(node.data_dir.join("test-clock-offset-ms"), offset_ms.to_string()).expect("clock offset file");
    }

    /// Writes a record cut short just past the end of node `id`'s log (the node must be down): a
    /// header whose payload never made it to disk, as a crash during a write leaves. Returns
    /// where it was written, or `None` if the log has no segment yet.
    pub fn tear_log_tail(&self, id: u64) -> Option<(PathBuf, u64)> {
        use std::os::unix::fs::FileExt;
        let segments = self.node(id).data_dir.join(data_group_dir(1)).join("log/segments");
        let newest = std::fs::read_dir(&segments)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "seg"))
            .max()?;
        let end = rockraft::store::segment_written_end(&newest).expect("the newest segment opens");
        let mut torn = Vec::new();
        torn.extend_from_slice(&rockraft::store::record::RECORD_MAGIC.to_le_bytes());
        torn.extend_from_slice(&4096u32.to_le_bytes());
        torn.extend_from_slice(&[0x5a; 64]); // the rest of the header and a little payload
        let file = std::fs::OpenOptions::new().write(true).open(&newest).expect("segment opens for writing");
        let room = file.metadata().map_or(0, |m| m.len()).saturating_sub(end);
        torn.truncate(room as usize);
        file.write_all_at(&torn, end).expect("tear the tail");
        Some((newest, end))
    }

    /// Starts node `id` again on its data with crash points armed (`FAILPOINTS` syntax, e.g.
    /// `checkpoint::after_journal=3*off->return(abort)`).
    pub fn restart_with_crash_points(&mut self, id: u64, crash_points: &str) {
        self.spawn_with(id, Some(crash_points));
    }

    /// Whether node `id`'s process is running.
    pub fn is_running(&mut self, id: u64) -> bool {
        let node = self.nodes.iter_mut().find(|n| n.id == id).expect("known node");
        match node.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => true,
            Some(_) => {
                node.child = None;
                false
            }
            None => false,
        }
    }

    /// Node `id`'s digest of Raft group `group` alone (0: the metadata group), if it answers:
    /// from five nodes a data group is compared among the three holding it.
    pub async fn group_digest(&self, id: u64, group: u32) -> Option<rockraft::admin::api::StateDigest> {
        let d = self.call(&self.node(id).admin_addr, pb::GetDigestRequest { group }).await.ok()?;
        Some(rockraft::admin::api::StateDigest { applied: d.applied, digest: d.digest })
    }

    /// Each Raft group's state on each node holding a replica of it, by (group, node): the
    /// metadata group (0) on every node, a data group on the voters its leader lists. `None`
    /// where a holder does not answer.
    pub async fn replica_states(&self) -> ReplicaStates {
        let mut states = ReplicaStates::new();
        for group in 0..=self.data_groups {
            let holders: Vec<u64> = match group {
                0 => self.ids(),
                _ => self.holders(group).await.into_iter().collect(),
            };
            for id in holders {
                states.insert((group, id), self.group_digest(id, group).await);
            }
        }
        states
    }

    /// Waits until the replicas of every Raft group answer with the same applied index and
    /// digest, and returns their states; or says which group differs once `timeout` has passed.
    /// Replicas of a group at the same index with different digests differ at once.
    pub async fn replicas_agreed(&self, timeout: Duration) -> Result<ReplicaStates, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let states = self.replica_states().await;
            let mut lagging = None;
            for group in 0..=self.data_groups {
                let of_group: Vec<(u64, Option<rockraft::admin::api::StateDigest>)> =
                    states.range((group, 0)..=(group, u64::MAX)).map(|(&(_, id), d)| (id, *d)).collect();
                let same_index = of_group.iter().all(|(_, d)| d.is_some())
                    && of_group.windows(2).all(|w| w[0].1.map(|d| d.applied) == w[1].1.map(|d| d.applied));
                if !same_index {
                    lagging.get_or_insert(format!("group {group} (node, state): {of_group:?}"));
                } else if !of_group.windows(2).all(|w| w[0].1 == w[1].1) {
                    return Err(format!("the replicas of group {group} at the same index differ: {of_group:?}"));
                }
            }
            match lagging {
                None => return Ok(states),
                Some(which) if Instant::now() >= deadline => {
                    return Err(format!("the replicas did not reach the same index: {which}"));
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// The replicas' states once they agree and have not moved for a second: what a test's
    /// setup set off (placements in the data groups, leaderships handed over) has ended.
    pub async fn settled_states(&self, timeout: Duration) -> ReplicaStates {
        let deadline = Instant::now() + timeout;
        let mut last = self.assert_replicas_agree(timeout).await;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = self.assert_replicas_agree(deadline.saturating_duration_since(Instant::now())).await;
            if now == last {
                return now;
            }
            assert!(Instant::now() < deadline, "the replicas kept moving for {timeout:?}");
            last = now;
        }
    }

    /// [`Self::replicas_agreed`], failing the test with what differs.
    pub async fn assert_replicas_agree(&self, timeout: Duration) -> ReplicaStates {
        self.replicas_agreed(timeout).await.unwrap_or_else(|differ| panic!("{differ}"))
    }

    /// All client endpoints, comma-separated: the official Rust client's `access_url`.
    pub fn access_url(&self) -> String {
        self.nodes.iter().map(|n| n.client_addr.as_str()).collect::<Vec<_>>().join(",")
    }

    /// Every node's id, in order (three, or five with `ROCKRAFT_TEST_NODES=5`).
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    pub fn client_addr(&self, id: u64) -> String {
        self.node(id).client_addr.clone()
    }

    /// Node `id`'s admin endpoint (the CLI's `--endpoint`).
    /// Where node `id` serves its status page and `/metrics`.
    /// Node `id`'s Remoting listener (the 4.x clients' `namesrvAddr`).
    pub fn remoting_addr(&self, id: u64) -> String {
        self.node(id).remoting_addr.clone()
    }

    pub fn http_addr(&self, id: u64) -> String {
        self.node(id).http_addr.clone()
    }

    pub fn admin_addr(&self, id: u64) -> String {
        self.node(id).admin_addr.clone()
    }

    /// `req` to the admin endpoint at `addr`, signed with the cluster's admin credential if it
    /// has one.
    pub async fn call<R: AdminCall>(&self, addr: &str, req: R) -> Result<R::Reply, CallError> {
        call(addr, &self.admin_options(), req).await
    }

    /// The certificate and key (PEM) node `id` presents to the other members, on a cluster
    /// started with `Options::member_tls`.
    pub fn member_identity(&self, id: u64) -> (PathBuf, PathBuf) {
        let dir = self._dir.path();
        (dir.join(format!("node{id}.pem")), dir.join(format!("node{id}.key")))
    }

    /// A channel to node `id`'s raft port as the holder of `identity` (a certificate and key,
    /// PEM) dials it, over TLS trusting the cluster's CA; every call carries `secret` when given
    /// (the cluster's, say, to show it is not enough alone), and names group `group`.
    pub fn raft_channel_as(
        &self,
        id: u64,
        identity: Option<(&Path, &Path)>,
        secret: Option<&str>,
        group: u32,
    ) -> tonic::service::interceptor::InterceptedService<tonic::transport::Channel, RaftPortHeaders> {
        use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
        let ca = self.tls_ca.as_ref().expect("a cluster on mutual TLS");
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(std::fs::read(ca).expect("the CA")))
            .domain_name("127.0.0.1");
        if let Some((cert, key)) = identity {
            let identity = Identity::from_pem(std::fs::read(cert).expect("cert"), std::fs::read(key).expect("key"));
            tls = tls.identity(identity);
        }
        let channel = Endpoint::from_shared(format!("https://{}", self.node(id).raft_addr))
            .expect("url")
            .tls_config(tls)
            .expect("tls")
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        let headers = RaftPortHeaders { secret: secret.map(str::to_string), group };
        tonic::service::interceptor::InterceptedService::new(channel, headers)
    }

    /// How the harness reaches an admin listener: as the cluster's admin, over its TLS.
    pub fn admin_options(&self) -> CallOptions {
        CallOptions { credentials: self.admin.clone(), tls_ca: self.tls_ca.clone() }
    }

    /// The process id of node `id`, while it runs (for a client scenario that kills it itself at
    /// a chosen moment; `kill` afterwards reaps it).
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.node(id).child.as_ref().map(|c| c.id())
    }

    /// Node `id`'s status, its top figures of the first data group (the one a cluster of one
    /// data group keeps every queue in): "the leader" of these tests is that group's.
    pub async fn status(&self, id: u64) -> Option<NodeStatus> {
        self.status_of(id, Some(rockraft::raft::GroupId::FIRST.0)).await
    }

    /// Node `id`'s status, its top figures of `group` (`None`: the group holding the metadata).
    pub async fn status_of(&self, id: u64, group: Option<u32>) -> Option<NodeStatus> {
        let status = self.call(&self.node(id).admin_addr, pb::GetStatusRequest { group }).await.ok()?;
        NodeStatus::try_from(status).ok()
    }

    /// Waits until a running node leads with a quorum of voters behind it, and returns it.
    ///
    /// A node reporting itself leader is not enough: a leader that restarts resumes its old term
    /// as leader until it hears of the newer one, and an isolated leader keeps its role. So the
    /// leader is the one of the highest term that a majority of voters name, in that term.
    pub async fn wait_for_leader(&self, timeout: Duration) -> u64 {
        self.wait_for_leader_of(Some(rockraft::raft::GroupId::FIRST.0), timeout).await
    }

    /// [`Cluster::wait_for_leader`] of Raft group `group` (`None`: the group holding the metadata).
    pub async fn wait_for_leader_of(&self, group: Option<u32>, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        loop {
            let mut statuses = Vec::new();
            for n in self.nodes.iter().filter(|n| n.child.is_some()) {
                if let Some(s) = self.status_of(n.id, group).await {
                    statuses.push(s);
                }
            }
            if let Some(leader) = statuses.iter().filter(|s| s.role == Role::Leader).max_by_key(|s| s.term) {
                let voters: Vec<u64> = leader.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
                let behind = statuses
                    .iter()
                    .filter(|s| voters.contains(&s.id) && s.term == leader.term && s.leader == Some(leader.id))
                    .count();
                if behind > voters.len() / 2 {
                    return leader.id;
                }
            }
            assert!(Instant::now() < deadline, "no leader within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The voters of data group `group`, as its leader has them (below five nodes, every node).
    pub async fn holders(&self, group: u32) -> std::collections::BTreeSet<u64> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(holders) = self.holders_now(group).await {
                return holders;
            }
            assert!(Instant::now() < deadline, "data group {group} has no leader to say who holds it");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether node `id` holds a replica of the data group of `topic`'s queue `queue` (below
    /// five nodes, always).
    pub async fn holds_queue(&self, id: u64, topic: &str, queue: u32) -> bool {
        let group = self.queue_group(topic, queue).await;
        self.holders(group).await.contains(&id)
    }

    /// The nodes holding a replica of the data group of `topic`'s queue `queue`: on three nodes
    /// 1 to 3, from five three of them.
    pub async fn queue_holders(&self, topic: &str, queue: u32) -> Vec<u64> {
        let group = self.queue_group(topic, queue).await;
        self.holders(group).await.into_iter().collect()
    }

    /// [`Self::holders`], if a node leads the group now.
    async fn holders_now(&self, group: u32) -> Option<std::collections::BTreeSet<u64>> {
        let leader = self.group_leader_status(group).await?;
        Some(leader.members.iter().filter(|m| m.voter).map(|m| m.id).collect())
    }

    /// The status of `group` on the running node leading it in the highest term, if any.
    async fn group_leader_status(&self, group: u32) -> Option<NodeStatus> {
        let mut best: Option<NodeStatus> = None;
        for n in self.nodes.iter().filter(|n| n.child.is_some()) {
            if let Some(s) = self.status_of(n.id, Some(group)).await
                && s.role == Role::Leader
                && best.as_ref().is_none_or(|b| b.term < s.term)
            {
                best = Some(s);
            }
        }
        best
    }

    /// Makes node `id` the leader of "the leader" of these tests: of the first data group, and
    /// with several data groups of every one it holds, with the leader balancer switched off so
    /// the leaderships stay there. Waits until it leads them.
    pub async fn make_leader(&self, id: u64) {
        let groups: Vec<u32> = (1..=self.data_groups.max(1)).collect();
        self.make_leader_in(id, &groups).await;
    }

    /// [`Self::make_leader`] of those of `groups` node `id` holds a replica of: on five nodes
    /// a test moving only the groups it reads from waits for two hand-overs, not for three.
    pub async fn make_leader_in(&self, id: u64, groups: &[u32]) {
        if self.data_groups > 1 {
            self.admin(pb::ConfigureRequest { balance_leaders: Some(false), ..Default::default() }).await;
        }
        for &group in groups {
            if self.holders(group).await.contains(&id) {
                self.make_leader_of(group, id).await;
            }
        }
    }

    /// Hands data group `group`'s leadership to node `id` and waits until it leads.
    pub async fn make_leader_of(&self, group: u32, id: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        // Leading with a quorum behind it: a node that restarts as leader of its old term
        // reports the role until it hears of the newer one.
        let leads = async || self.wait_for_leader_of(Some(group), Duration::from_secs(10)).await == id;
        loop {
            if leads().await {
                return;
            }
            assert!(Instant::now() < deadline, "node {id} did not become leader of group {group}");
            self.hand_over(group, id).await;
            for _ in 0..30 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if leads().await {
                    return;
                }
            }
        }
    }

    /// Asks data group `group`'s leader to hand its leadership to node `id` (asked of the
    /// leader: a data group's hand-over is not passed on), without waiting for it to happen.
    pub async fn hand_over(&self, group: u32, id: u64) {
        let leader = self.wait_for_leader_of(Some(group), Duration::from_secs(10)).await;
        let _ =
            self.call(&self.node(leader).admin_addr, pb::TransferLeaderRequest { to: id, group: Some(group) }).await;
    }

    /// Waits until node `id` has applied everything the leader has committed, in every data
    /// group.
    pub async fn wait_caught_up(&self, id: u64, timeout: Duration) {
        for group in 1..=self.data_groups.max(1) {
            self.wait_caught_up_in(Some(group), id, timeout).await
        }
    }

    /// [`Cluster::wait_caught_up`] in Raft group `group` (`None`: the group holding the metadata).
    pub async fn wait_caught_up_in(&self, group: Option<u32>, id: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self.wait_for_leader_of(group, timeout).await;
            let (l, n) = (self.status_of(leader, group).await, self.status_of(id, group).await);
            // A node holding no replica of the group has nothing to catch up.
            if l.as_ref().is_some_and(|l| !l.members.iter().any(|m| m.id == id)) {
                return;
            }
            if let (Some(l), Some(n)) = (l, n)
                && l.committed.is_some()
                && n.applied >= l.committed
            {
                return;
            }
            assert!(Instant::now() < deadline, "node {id} did not catch up within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn create_topic(&self, name: &str, queues: u32, kind: TopicKind) {
        let kind = kind.to_string().to_uppercase();
        self.admin(pb::CreateTopicRequest { name: name.into(), queues, kind, lite_ttl_minutes: None }).await;
    }

    pub async fn create_group(&self, name: &str, fifo: bool, max_attempts: u32) {
        let req = pb::CreateGroupRequest { name: name.into(), fifo, max_attempts, ..Default::default() };
        self.admin(req).await;
    }

    /// Sends an admin request to node 1 (or, while it is stopped, the first node running),
    /// retrying until it is answered without an error.
    pub async fn admin<R: AdminCall + Clone>(&self, req: R) -> R::Reply {
        let node = self.nodes.iter().find(|n| n.child.is_some()).unwrap_or(&self.nodes[0]);
        let addr = node.admin_addr.clone();
        retry(Duration::from_secs(20), || {
            let req = req.clone();
            let addr = addr.clone();
            async move { self.call(&addr, req).await.map_err(|e| e.to_string()) }
        })
        .await
    }

    /// Consumer groups and their progress, as node `id` knows them.
    pub async fn groups(&self, id: u64) -> Vec<pb::Group> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let req = pb::ListGroupsRequest { after, limit: 1000 };
            let page = self.call(&self.node(id).admin_addr, req).await;
            let page = page.unwrap_or_else(|e| panic!("listing groups on node {id}: {e}"));
            out.extend(page.groups);
            if page.next_after.is_empty() {
                return out;
            }
            after = page.next_after;
        }
    }

    /// The messages of one queue as node `id` stores them.
    pub async fn local_messages(&self, id: u64, topic: &str, queue: u32) -> Vec<pb::MessageLine> {
        let mut out = Vec::new();
        let mut from = 0;
        loop {
            let req = pb::ListMessagesRequest {
                topic: topic.into(),
                queue,
                from,
                limit: 1000,
                local: true,
                data_group: None,
            };
            let page = self.call(&self.node(id).admin_addr, req).await;
            let page = page.unwrap_or_else(|e| panic!("listing messages on node {id}: {e}"));
            out.extend(page.messages);
            if page.next_from == 0 {
                return out;
            }
            from = page.next_from;
        }
    }

    /// Starts node `id` apart from the cluster (see [`Joiner`]), with the members' secret, on a
    /// data directory `prepare` is given first (leave it empty for a new node); returns once it
    /// listens on its raft port.
    pub async fn start_joiner(&self, id: u64, prepare: impl FnOnce(&Path)) -> Joiner {
        let dir = self._dir.path().join(format!("node{id}"));
        std::fs::create_dir_all(&dir).expect("node dir");
        prepare(&dir);
        let addr = || format!("127.0.0.1:{}", free_port());
        let (raft_addr, client_addr, admin_addr, http_addr) = (addr(), addr(), addr(), addr());
        let config = format!(
            "node_id = {id}\nraft_addr = \"{raft_addr}\"\nclient_addr = \"{client_addr}\"\nadmin_addr = \"{admin_addr}\"\n\
             http_addr = \"{http_addr}\"\ndata_dir = \"{}\"\ncluster_secret = \"{}\"\n\n[storage]\nsegment_size = 1048576\n\n\
             [broker]\nmax_body_bytes = 524288\n",
            dir.display(),
            self.secret
        );
        let child = spawn_node(&dir, &config);
        let mut joiner = Joiner { id, raft_addr, client_addr, admin_addr, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(&joiner.raft_addr).await.is_err() {
            if !matches!(joiner.child.try_wait(), Ok(None)) || Instant::now() >= deadline {
                let log = std::fs::read_to_string(dir.join("node.log")).unwrap_or_default();
                panic!("node {id} did not listen on {} within 30 s; its log:\n{log}", joiner.raft_addr);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        joiner
    }

    /// The data group holding `topic`'s queue `queue`, as node 1 lists it.
    pub async fn queue_group(&self, topic: &str, queue: u32) -> u32 {
        let listed = self.admin(pb::ListTopicsRequest { after: String::new(), limit: 1000 }).await;
        let topic = listed.topics.iter().find(|t| t.name == topic).expect("the topic is listed");
        // None named: every queue in the first data group.
        topic.groups.get(queue as usize).copied().unwrap_or(1)
    }

    /// `topic` as sends to it are routed: its queues and the data group of each (the queue a send
    /// lands in is `rockraft::proxy::queue_for` of it).
    pub async fn topic_config(&self, topic: &str) -> rockraft::broker::TopicConfig {
        let listed = self.admin(pb::ListTopicsRequest { after: String::new(), limit: 1000 }).await;
        let t = listed.topics.iter().find(|t| t.name == topic).expect("the topic is listed");
        let mut config = rockraft::broker::TopicConfig::new(topic, t.queues, rockraft::broker::TopicKind::Normal);
        config.groups = t.groups.clone();
        config
    }

    /// The message ids node `id` (holding every queue of `topic`) stores more than once, with
    /// where: a send stored twice, in one queue or in two.
    pub async fn ids_stored_twice(&self, id: u64, topic: &str) -> Vec<(String, Vec<(u32, u64)>)> {
        let mut places: BTreeMap<String, Vec<(u32, u64)>> = BTreeMap::new();
        for q in 0..self.topic_config(topic).await.queues {
            for m in self.local_messages(id, topic, q).await {
                places.entry(m.message_id).or_default().push((q, m.offset));
            }
        }
        places.into_iter().filter(|(_, at)| at.len() > 1).collect()
    }

    /// Where node `id` keeps data group `group`'s log, state and snapshot.
    pub fn group_dir(&self, id: u64, group: u32) -> PathBuf {
        self.node(id).data_dir.join(data_group_dir(group))
    }

    /// Every ConsumeQueue file of node `id` in data group `group`, by path relative to the
    /// group's queue directory.
    pub fn queue_files(&self, id: u64, group: u32) -> BTreeMap<String, Vec<u8>> {
        let root = self.group_dir(id, group).join("broker/queues");
        let mut out = BTreeMap::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(bytes) = std::fs::read(&p) {
                    out.insert(p.strip_prefix(&root).expect("under root").display().to_string(), bytes);
                }
            }
        }
        out
    }
}

/// A group's directory under a node's data directory (`store::layout`).
fn data_group_dir(group: u32) -> PathBuf {
    Path::new("groups").join(group.to_string())
}

/// Where two sets of ConsumeQueue files differ, in a few words (`None` if they are identical).
pub fn queue_difference(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> Option<String> {
    let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for name in names {
        match (a.get(name), b.get(name)) {
            (Some(x), Some(y)) if x == y => {}
            (Some(x), Some(y)) => {
                let at = x.iter().zip(y).position(|(p, q)| p != q).unwrap_or(x.len().min(y.len()));
                return Some(format!("{name}: first difference in record {} (byte {at})", at / 20));
            }
            (Some(_), None) => return Some(format!("{name} exists only on the first node")),
            _ => return Some(format!("{name} exists only on the second node")),
        }
    }
    None
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // ROCKRAFT_KEEP_DATA=1 keeps the nodes' data and logs of a failed test for a post-mortem.
        if std::thread::panicking() && std::env::var_os("ROCKRAFT_KEEP_DATA").is_some() {
            let kept = std::mem::replace(&mut self._dir, tempfile::tempdir().expect("temp dir")).keep();
            eprintln!("kept the nodes' data in {}", kept.display());
        }
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Retries `f` until it succeeds or `timeout` passes (then panics with the last error).
pub async fn retry<T, F, Fut>(timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("gave up after {timeout:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Runs one of the Python client scenarios in `cluster-tests/python/` with the interpreter that
/// `scripts/setup.sh` prepared (`target/python`, or `$ROCKRAFT_PYTHON`); returns its exit status
/// and what it printed.
pub fn run_python(script: &str, args: &[&str]) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python =
        std::env::var("ROCKRAFT_PYTHON").map(PathBuf::from).unwrap_or_else(|_| target_dir().join("python/bin/python"));
    assert!(python.exists(), "{} is missing: run scripts/setup.sh (it installs the Python client)", python.display());
    let out = Command::new(&python)
        .arg(root.join("python").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Runs one of the RocketMQ 4.x Remoting client scenarios (`cluster-tests/python/remoting/`,
/// PyPI `rocketmq` 0.4.4 in its own virtualenv, installed by `scripts/setup.sh`).
pub fn run_remoting_python(script: &str, args: &[&str]) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = target_dir().join("python-remoting/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/setup.sh (it installs the 4.x client)", python.display());
    let out = Command::new(&python)
        .arg(root.join("python/remoting").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Starts one of the Python client scenarios with stdin and stdout piped, for a scenario the test
/// steps through while it runs (it prints a line and waits for one); stderr is inherited.
pub fn spawn_python(script: &str, args: &[&str]) -> std::process::Child {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python =
        std::env::var("ROCKRAFT_PYTHON").map(PathBuf::from).unwrap_or_else(|_| target_dir().join("python/bin/python"));
    assert!(python.exists(), "{} is missing: run scripts/setup.sh (it installs the Python client)", python.display());
    Command::new(&python)
        .arg(root.join("python").join(script))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {script}: {e}"))
}

/// Runs one of the Node.js client scenarios in `cluster-tests/node/` with the client that
/// `scripts/setup.sh` installed under `target/node`; returns its exit status and what it printed.
pub fn run_node(script: &str, args: &[&str]) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = target_dir().join("node/node_modules");
    assert!(
        modules.exists(),
        "{} is missing: run scripts/setup.sh (it installs the Node.js client)",
        modules.display()
    );
    let out = Command::new("node")
        .arg(root.join("node").join(script))
        .args(args)
        .env("NODE_PATH", &modules)
        .output()
        .unwrap_or_else(|e| panic!("running node {script}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// A module speaking ABI v1 (WAT): a filter whose `rockraft_filter` body is `call`, or a
/// transaction checker whose `rockraft_tx_check` body is. `data` fills memory from byte 4096;
/// `pages` is its initial size.
pub fn abi_v1_module(kind: PluginKind, call: &str, pages: u32, data: &str) -> Vec<u8> {
    let export = match kind {
        PluginKind::Filter => "rockraft_filter",
        PluginKind::TxChecker => "rockraft_tx_check",
    };
    let manifest = format!(r#"{{"abi":1,"name":"hostile","version":"1","kinds":["{kind}"],"bodies":false}}"#);
    let text = format!(
        r#"(module
          (memory (export "memory") {pages})
          (data (i32.const 16) "{}")
          (data (i32.const 4096) "{data}")
          (func (export "rockraft_abi_v1"))
          (func (export "rockraft_manifest") (result i64) (i64.or (i64.shl (i64.const 16) (i64.const 32)) (i64.const {})))
          (func (export "rockraft_alloc") (param i32) (result i32) (i32.const 1024))
          (func (export "rockraft_open") (param i32 i32 i32) (result i32) (i32.const 0))
          (func (export "rockraft_close") (param i32))
          (func (export "rockraft_last_error") (result i64) (i64.const 0))
          (func (export "{export}") (param i32 i32 i32 i32 i32) (result i32) {call}))"#,
        manifest.replace('"', "\\\""),
        manifest.len()
    );
    wat::parse_str(text).expect("test module assembles")
}

/// GETs `path` from `addr` (a node's HTTP listener) over plain HTTP/1.0: (status code, body).
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await.ok()?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut response)).await.ok()?.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// The official Rust client as most cluster tests use it: plain TCP, and an empty receive back
/// after 2 s (less a margin), so "nothing more" is known quickly.
pub mod clients {
    use std::time::Duration;

    use rocketmq::conf::{ClientOption, ProducerOption, SimpleConsumerOption};
    use rocketmq::{Producer, SimpleConsumer};

    pub fn client_option(access_url: &str) -> ClientOption {
        let mut co = ClientOption::default();
        co.set_access_url(access_url);
        co.set_enable_tls(false);
        co.set_long_polling_timeout(Duration::from_secs(2));
        co
    }

    /// A started producer of `topic`.
    pub async fn producer(access_url: &str, topic: &str) -> Producer {
        let mut po = ProducerOption::default();
        po.set_topics(vec![topic]);
        let mut p = Producer::new(po, client_option(access_url)).expect("producer");
        p.start().await.expect("producer start");
        p
    }

    /// A started simple consumer of `topic` in `group`.
    pub async fn consumer(access_url: &str, group: &str, topic: &str) -> SimpleConsumer {
        let mut so = SimpleConsumerOption::default();
        so.set_consumer_group(group);
        so.set_topics(vec![topic]);
        let mut c = SimpleConsumer::new(so, client_option(access_url)).expect("consumer");
        c.start().await.expect("consumer start");
        c
    }

    /// Receives and acks `topic`'s messages (every tag) through `c` until `want` ids are acked,
    /// failing the test after `within`. A receive that fails is tried again; a message whose ack
    /// fails (a retriable answer while a group elects a leader: the official clients do not
    /// retry acks) comes again once its 10 s of invisibility pass, and is acked then. The ids
    /// acked.
    pub async fn receive_all(
        c: &SimpleConsumer,
        topic: &str,
        want: usize,
        within: Duration,
    ) -> std::collections::BTreeSet<String> {
        use rocketmq::model::common::{FilterExpression, FilterType};
        let all = FilterExpression::new(FilterType::Tag, "*");
        let mut acked = std::collections::BTreeSet::new();
        let deadline = std::time::Instant::now() + within;
        while acked.len() < want {
            assert!(std::time::Instant::now() < deadline, "acked {} of {want}", acked.len());
            match c.receive_with(topic, &all, 32, Duration::from_secs(10)).await {
                Ok(batch) => {
                    for m in batch {
                        match c.ack(&m).await {
                            Ok(()) => _ = acked.insert(m.message_id().to_string()),
                            Err(e) => eprintln!("ack of {} failed (it comes again): {e:?}", m.message_id()),
                        }
                    }
                }
                Err(e) => eprintln!("receive failed (retrying): {e:?}"),
            }
        }
        acked
    }
}

/// Signs every request as the official clients do, as the user given (or not at all), and names
/// a client id (`cluster-test`) unless the request names its own.
#[derive(Clone)]
pub struct Signer(pub Option<(String, String)>);

impl tonic::service::Interceptor for Signer {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some((key, secret)) = &self.0 {
            let (date_time, header) = rockraft::auth::signature::sign(key, secret, time::OffsetDateTime::now_utc());
            r.metadata_mut().insert("x-mq-date-time", date_time.parse().expect("ascii"));
            r.metadata_mut().insert("authorization", header.parse().expect("ascii"));
        }
        if !r.metadata().contains_key("x-mq-client-id") {
            r.metadata_mut().insert("x-mq-client-id", "cluster-test".parse().expect("ascii"));
        }
        Ok(r)
    }
}

/// A RocketMQ client of the client port at `addr`, signing as `user` (or not at all).
pub type SignedClient = rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Signer>,
>;

/// A [`SignedClient`] of `addr` (plain HTTP/2), connecting on its first call.
pub fn signed_client(addr: &str, user: Option<(&str, &str)>) -> SignedClient {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("url").connect_lazy();
    let signer = Signer(user.map(|(k, s)| (k.into(), s.into())));
    rockraft_proto::rocketmq::messaging_service_client::MessagingServiceClient::with_interceptor(channel, signer)
        .max_encoding_message_size(usize::MAX)
}
