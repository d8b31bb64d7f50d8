//! The node's TOML configuration. Every key has a default except `node_id`; see
//! `docs/configuration.md` for the full list.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::raft::{NodeId, NodeInfo};
use crate::store::free_space::Watermarks;
use crate::store::{DEFAULT_SEGMENT_SIZE, Durability, LogConfig};

/// What one message may add to its Raft entry besides its body and user properties: message id,
/// tag, keys, message group, born host, topic name and the encoding's framing. The proxy bounds
/// each of those (`proxy/send.rs`) to far less than this.
pub const MESSAGE_OVERHEAD_BYTES: u64 = 64 << 10;

use crate::auth::member::ClusterSecret;

/// Takes a cluster secret kept in a file of its own into `secret` (`setting` names the pair).
fn read_cluster_secret(
    secret: &mut Option<ClusterSecret>,
    file: &Option<PathBuf>,
    setting: &'static str,
) -> Result<(), ConfigError> {
    let Some(path) = file else { return Ok(()) };
    let file_setting = if setting == "cluster_secret" { "cluster_secret_file" } else { "cluster_secret_next_file" };
    if secret.is_some() {
        return Err(invalid(format!("{setting} and {file_setting}: give one of them")));
    }
    let text = crate::auth::read_secret_file(path).map_err(|source| ConfigError::ClusterSecretFile {
        setting: file_setting,
        path: path.clone(),
        source,
    })?;
    let read = ClusterSecret::new(&text).map_err(|source| ConfigError::ClusterSecret {
        setting: file_setting,
        path: path.clone(),
        source,
    })?;
    *secret = Some(read);
    Ok(())
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: {source}", path.display())]
    Parse { path: PathBuf, source: Box<toml::de::Error> },
    /// `setting`: `cluster_secret_file` or `cluster_secret_next_file`.
    #[error("{setting} {}: {source}", path.display())]
    ClusterSecretFile { setting: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{setting} {}: {source}", path.display())]
    ClusterSecret { setting: &'static str, path: PathBuf, source: crate::auth::member::ClusterSecretError },
    /// The `[auth]` admin credential, or the file that holds its secret.
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthConfigError),
    /// A value, or a combination of values, the node refuses.
    #[error("{0}")]
    Invalid(String),
}

fn invalid(why: impl ToString) -> ConfigError {
    ConfigError::Invalid(why.to_string())
}

/// Why clients could not dial an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Undialable(String);

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
    /// The RocketMQ proxy endpoint for clients: listen address. It serves `MessagingService` only.
    #[serde(default = "default_client_addr")]
    pub client_addr: String,
    /// The operator API (the CLI): listen address, and where other members' CLIs reach this
    /// node. Admins only when `[auth] enabled`.
    #[serde(default = "default_admin_addr")]
    pub admin_addr: String,
    /// HTTP for people and monitoring: `/` (the status page), `/metrics` (Prometheus),
    /// `/healthz` and `/readyz`: listen address. Read-only; keep it on a private network.
    #[serde(default = "default_http_addr")]
    pub http_addr: String,
    /// The address clients reach `client_addr` at, when that differs (NAT, containers, a listen
    /// address of `0.0.0.0`): what routes hand out for this node. Default: `client_addr`.
    #[serde(default)]
    pub advertised_client_addr: Option<String>,
    /// RocketMQ 4.x Remoting clients (`namesrvAddr`): listen address of this node's name server
    /// and broker in one. None: no Remoting listener.
    #[serde(default)]
    pub remoting_addr: Option<String>,
    /// The IPv4 `address:port` Remoting clients reach `remoting_addr` at, when that differs:
    /// routes name it, and messages carry it as their store host. Default: `remoting_addr`.
    #[serde(default)]
    pub advertised_remoting_addr: Option<String>,
    /// The rack (or zone) this node runs in, as `cluster add-node --rack` records it; empty: none
    /// named. From five nodes each data group has three replicas, on as many racks as there are.
    #[serde(default)]
    pub rack: String,
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
    /// The secret every member of the cluster shares: calls to the raft port must carry it
    /// (`auth/member.rs`). Without it that port accepts any caller.
    #[serde(default)]
    pub cluster_secret: Option<ClusterSecret>,
    /// A file holding the cluster secret, read at start (a mounted Kubernetes or compose secret,
    /// a systemd credential): keeps the secret out of this file. Not with `cluster_secret`.
    #[serde(default)]
    pub cluster_secret_file: Option<PathBuf>,
    /// A second secret this node accepts (but does not attach) on the raft port: the new one
    /// during a rotation (`docs/security.md`). Read again, with `cluster_secret`, on SIGHUP.
    #[serde(default)]
    pub cluster_secret_next: Option<ClusterSecret>,
    /// A file holding `cluster_secret_next`. Not with `cluster_secret_next`.
    #[serde(default)]
    pub cluster_secret_next_file: Option<PathBuf>,
    /// Where this configuration was read from (set by [`NodeConfig::load`]): read again on SIGHUP.
    #[serde(skip)]
    pub path: Option<PathBuf>,
    /// Serve even though a listener that grants everything is reachable from the network (the
    /// raft port without a cluster secret, the admin port with `[auth]` off). Off: such a
    /// configuration is refused at start.
    #[serde(default)]
    pub allow_insecure: bool,
    /// Client and operator authentication.
    #[serde(default)]
    pub auth: crate::auth::AuthConfig,
    /// TLS on the client and admin listeners.
    #[serde(default)]
    pub tls: crate::auth::tls::TlsConfig,
    /// What one client may hold of this node at once.
    #[serde(default)]
    pub limits: LimitsConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub id: NodeId,
    pub raft_addr: String,
    /// Where clients reach this member: its advertised client address.
    pub client_addr: String,
    /// Where operators reach this member's admin API.
    #[serde(default)]
    pub admin_addr: String,
    /// The rack (or zone) this member runs in; empty: none named.
    #[serde(default)]
    pub rack: String,
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
    /// Under disk pressure (free space below `free_space::Watermarks::purge`) the log is kept
    /// smaller still, as far as held messages allow.
    pub disk_budget_bytes: u64,
    pub consume_queue_records_per_file: u64,
    /// Below this much free space on this node's data filesystem, the cluster stores no new
    /// messages (default: 4 segments; 0 turns the mark off).
    pub free_space_soft_mark_bytes: Option<u64>,
    /// Below this much, the cluster appends only what frees space (default: 2 segments).
    pub free_space_hard_mark_bytes: Option<u64>,
    /// How fast the scrubber re-reads sealed log segments to find damaged records, in MB/s
    /// (0: no scrubbing). Damage it finds is filled from another member.
    pub scrub_mb_per_sec: f64,
    /// The pause between two scrubs of the whole log.
    pub scrub_pause_secs: f64,
}

impl StorageConfig {
    /// This node's free-space marks, the defaults relative to the segment size.
    pub fn watermarks(&self) -> Watermarks {
        let defaults = Watermarks::for_segment_size(self.segment_size);
        Watermarks {
            soft: self.free_space_soft_mark_bytes.unwrap_or(defaults.soft),
            hard: self.free_space_hard_mark_bytes.unwrap_or(defaults.hard),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BrokerConfig {
    /// Moved to the replicated cluster settings (`rockraft cluster configure`): refused here
    /// with a pointer there, since apply depends on it and nodes must never disagree.
    #[serde(default)]
    pub dedupe_window_secs: Option<u64>,
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

/// Bounds on what clients may hold of a node at once; each refused with a status the clients
/// act on, never by exhausting the node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// HTTP/2 streams one connection to the client port may have open (clients queue the rest).
    pub max_streams_per_connection: u32,
    /// Long polls (`ReceiveMessage`) waiting on this node at once; more get TOO_MANY_REQUESTS.
    pub max_long_polls: usize,
    /// Long polls one client (`x-mq-client-id`) may have waiting on this node at once.
    pub max_long_polls_per_client: usize,
    /// With `[auth] enabled`: long polls one user may have waiting on this node at once, however
    /// many client ids its clients use.
    pub max_long_polls_per_user: usize,
    /// With `[auth] enabled`: client ids this node keeps bound to the user that first used them
    /// (a new one beyond gets TOO_MANY_REQUESTS until an idle one is forgotten).
    pub max_client_ids: usize,
    /// ...of which one user may hold this many.
    pub max_client_ids_per_user: usize,
    /// The longest a receive may ask to wait; longer gets ILLEGAL_POLLING_TIME.
    pub max_long_poll_secs: u64,
    /// Entries one `AckMessage` may carry; more gets BAD_REQUEST.
    pub max_ack_entries: usize,
    /// Connections one source address may hold open to the client port, and to the admin port
    /// (0: no cap); more are closed as they are accepted.
    pub max_connections_per_address: usize,
    /// Connections one source may hold open to the raft port (0: no cap). Members on one host
    /// (the loopback quick start) share one address, and each holds a few per group.
    pub max_member_connections_per_address: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_streams_per_connection: 1024,
            max_long_polls: 4096,
            max_long_polls_per_client: 256,
            max_long_polls_per_user: 1024,
            max_client_ids: 65536,
            max_client_ids_per_user: 4096,
            max_long_poll_secs: 60,
            max_ack_entries: 1024,
            max_connections_per_address: 512,
            max_member_connections_per_address: 512,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTimings {
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// A node whose clock differs from a majority of the members by more than this does not
    /// lead (0: never checked). The leader's clock times every delivery and expiry.
    pub max_clock_skew_ms: u64,
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
fn default_admin_addr() -> String {
    "127.0.0.1:7081".into()
}
fn default_http_addr() -> String {
    "127.0.0.1:6081".into()
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
            free_space_soft_mark_bytes: None,
            free_space_hard_mark_bytes: None,
            scrub_mb_per_sec: 8.0,
            scrub_pause_secs: 3600.0,
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            dedupe_window_secs: None,
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
        // A follower calls an election once it has heard nothing for the leader's lease (openraft
        // takes election_timeout_max) plus its own timeout: 0.8-1.0 s here, so a dead leader is
        // replaced within about a second, while a leader whose heartbeats stall for most of a
        // second (an fsync on a busy disk) keeps its place. openraft's own defaults (150-300 ms)
        // flap on a loaded two-core machine. Heartbeats every 200 ms still fit four or five into
        // that silence; openraft's timer ticks at 13/64 of the heartbeat interval in every group
        // on every node, so a shorter one costs an idle cluster more wake-ups than anything else.
        // Commits reach followers at once either way (openraft sends them when they move).
        RaftTimings {
            heartbeat_ms: 200,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 500,
            max_clock_skew_ms: 2000,
        }
    }
}

impl NodeConfig {
    pub fn load(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let mut config: NodeConfig = toml::from_str(&text)
            .map_err(|source| ConfigError::Parse { path: path.to_path_buf(), source: Box::new(source) })?;
        config.read_secret_files()?;
        config.validate()?;
        config.path = Some(path.to_path_buf());
        Ok(config)
    }

    /// Takes the secrets kept in files of their own into the config.
    pub fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        read_cluster_secret(&mut self.cluster_secret, &self.cluster_secret_file, "cluster_secret")?;
        read_cluster_secret(&mut self.cluster_secret_next, &self.cluster_secret_next_file, "cluster_secret_next")?;
        Ok(self.auth.read_secret_files()?)
    }

    /// The cluster secrets as the file says now (SIGHUP): the current one and the next, read
    /// again from their own files where they are kept.
    pub fn reread_secrets(path: &Path) -> Result<(Option<ClusterSecret>, Option<ClusterSecret>), ConfigError> {
        let config = NodeConfig::load(path)?;
        Ok((config.cluster_secret, config.cluster_secret_next))
    }

    /// Warns of each file or directory holding a secret of this node that others can read: the
    /// data directory (the replicated users' secrets and the handle keys are in its log,
    /// snapshots and state), this config when it holds a secret, and the secret files.
    pub fn warn_of_open_secrets(&self, path: &Path) {
        let mut held = vec![(self.data_dir.as_path(), "the replicated user secrets and handle keys")];
        let inline = self.cluster_secret_file.is_none() && self.cluster_secret.is_some()
            || self.cluster_secret_next_file.is_none() && self.cluster_secret_next.is_some()
            || self.auth.admin_secret_key_file.is_none() && self.auth.admin_secret_key.is_some();
        if inline {
            held.push((path, "a secret"));
        }
        if let Some(file) = &self.cluster_secret_file {
            held.push((file, "the cluster secret"));
        }
        if let Some(file) = &self.cluster_secret_next_file {
            held.push((file, "the next cluster secret"));
        }
        if let Some(file) = &self.auth.admin_secret_key_file {
            held.push((file, "the admin secret key"));
        }
        crate::auth::at_rest::warn_if_open(&held);
    }

    /// Whether calls to the raft port must prove membership: the cluster secret, or a
    /// certificate the cluster's CA signed.
    pub fn members_authenticated(&self) -> bool {
        self.cluster_secret.is_some() || self.tls.peer_ca_file.is_some()
    }

    /// The listeners that grant everything to whoever reaches them from the network: what
    /// `allow_insecure` must acknowledge, and what the log and the status page then warn of.
    pub fn insecure_listeners(&self) -> Vec<String> {
        let mut open = Vec::new();
        if !self.members_authenticated() && !is_loopback(&self.raft_addr) {
            open.push(format!(
                "raft_addr {} is reachable from the network without a cluster secret or [tls] peer_ca_file: any \
                 caller may act as a member (append to the log, vote, change anything)",
                self.raft_addr
            ));
        }
        if !self.auth.enabled && !is_loopback(&self.admin_addr) {
            open.push(format!(
                "admin_addr {} is reachable from the network with [auth] off: any caller may make every operator \
                 request (delete topics, change members, add users)",
                self.admin_addr
            ));
        }
        open
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let log = self.log_config(self.data_dir.clone());
        log.validate().map_err(invalid)?;
        // A record never spans two segments: a message the proxy accepts but the log cannot hold
        // would fail at append time, after the client was told nothing better than an error.
        let largest = self
            .broker
            .max_body_bytes
            .saturating_add(self.broker.max_properties_bytes)
            .saturating_add(MESSAGE_OVERHEAD_BYTES);
        if largest > log.max_record_payload() {
            return Err(invalid(format!(
                "broker.max_body_bytes ({}) + broker.max_properties_bytes ({}) + {MESSAGE_OVERHEAD_BYTES} bytes of \
                 per-message overhead must fit one log record, at most {} bytes with storage.segment_size = {}: \
                 lower the limits or raise segment_size",
                self.broker.max_body_bytes,
                self.broker.max_properties_bytes,
                log.max_record_payload(),
                self.storage.segment_size
            )));
        }
        let marks = self.storage.watermarks();
        if marks.soft < marks.hard {
            return Err(invalid(format!(
                "storage.free_space_soft_mark_bytes ({}) is below storage.free_space_hard_mark_bytes ({}): the soft \
                 mark (no new messages) must trip first",
                marks.soft, marks.hard
            )));
        }
        if let Some(secs) = self.broker.dedupe_window_secs {
            return Err(invalid(format!(
                "broker.dedupe_window_secs ({secs}) is a cluster setting now, the same on every node: remove it \
                 here and run `rockraft cluster configure --dedupe-window-secs {secs}` once"
            )));
        }
        if let Some(bytes) = self.plugins.max_module_bytes {
            return Err(invalid(format!(
                "plugins.max_module_bytes ({bytes}) is a cluster setting now, the same on every node: remove it \
                 here and run `rockraft cluster configure --max-module-bytes {bytes}` once"
            )));
        }
        if self.raft.election_timeout_min_ms <= self.raft.heartbeat_ms
            || self.raft.election_timeout_max_ms <= self.raft.election_timeout_min_ms
        {
            return Err(invalid("raft timings need heartbeat_ms < election_timeout_min_ms < election_timeout_max_ms"));
        }
        if !self.members.is_empty() && !self.members.iter().any(|m| m.id == self.node_id) {
            return Err(invalid(format!("members does not list this node ({})", self.node_id)));
        }
        self.auth.validate()?;
        if self.cluster_secret_next.is_some() && self.cluster_secret.is_none() {
            return Err(invalid(
                "cluster_secret_next needs a cluster_secret: it is the second of two during a rotation",
            ));
        }
        // Both credentials: a stolen member key alone is not enough, nor a stolen secret alone.
        if self.tls.peer_ca_file.is_some() && self.cluster_secret.is_none() {
            return Err(invalid(
                "[tls] peer_ca_file needs a cluster_secret (or cluster_secret_file) as well: members prove both \
                 the certificate and the secret",
            ));
        }
        if self.auth.enabled && !self.members_authenticated() {
            return Err(invalid(
                "[auth] enabled needs a cluster_secret (or cluster_secret_file, or [tls] peer_ca_file for \
                 members over mutual TLS): without one the raft port serves every member call, the operator API \
                 included, to anyone who reaches it",
            ));
        }
        let open = self.insecure_listeners();
        if !open.is_empty() && !self.allow_insecure {
            return Err(invalid(format!(
                "{}; bind these listeners to loopback, set a cluster_secret and [auth] enabled = true, or set \
                 allow_insecure = true to serve like this anyway",
                open.join("; ")
            )));
        }
        self.validate_remoting_addrs()?;
        self.validate_client_addrs()
    }

    /// The addresses routes hand out must be ones a client can dial: `host:port`, and not a
    /// wildcard listen address.
    /// Where Remoting clients reach this node, if it serves them: an IPv4 address and port (what
    /// the stored-message layout and the C++ clients hold).
    pub fn advertised_remoting_addr(&self) -> Option<&str> {
        self.advertised_remoting_addr.as_deref().or(self.remoting_addr.as_deref())
    }

    fn validate_remoting_addrs(&self) -> Result<(), ConfigError> {
        let Some(listen) = &self.remoting_addr else {
            return match &self.advertised_remoting_addr {
                Some(_) => Err(invalid("advertised_remoting_addr needs remoting_addr".to_string())),
                None => Ok(()),
            };
        };
        listen.parse::<std::net::SocketAddr>().map_err(|e| invalid(format!("remoting_addr {listen}: {e}")))?;
        let advertised = self.advertised_remoting_addr().unwrap_or(listen);
        match advertised.parse::<std::net::SocketAddrV4>() {
            Ok(a) if !a.ip().is_unspecified() && a.port() != 0 => Ok(()),
            _ => Err(invalid(format!(
                "the Remoting address clients reach, {advertised}, must be an IPv4 address and port (set \
                 advertised_remoting_addr)"
            ))),
        }
    }

    fn validate_client_addrs(&self) -> Result<(), ConfigError> {
        if let Some(a) = &self.advertised_client_addr {
            check_dialable(a).map_err(|e| invalid(format!("advertised_client_addr: {e}")))?;
        }
        match self.members.iter().find(|m| m.id == self.node_id) {
            // The group is initialised from the members table: this node's entry is what routes
            // will show for it.
            Some(me) => {
                if let Some(a) = self.advertised_client_addr.as_ref().filter(|a| **a != me.client_addr) {
                    return Err(invalid(format!(
                        "advertised_client_addr is {a} but [[members]] gives this node's client_addr as {}; \
                         the members table should name the advertised address",
                        me.client_addr
                    )));
                }
            }
            None => check_dialable(self.advertised_client_addr()).map_err(|e| {
                invalid(format!(
                    "client_addr: {e}; set advertised_client_addr to the address clients reach this node at"
                ))
            })?,
        }
        for m in &self.members {
            check_dialable(&m.client_addr)
                .map_err(|e| invalid(format!("[[members]] id {}: client_addr: {e}", m.id)))?;
        }
        Ok(())
    }

    /// Where clients reach this node: `advertised_client_addr`, else `client_addr`.
    pub fn advertised_client_addr(&self) -> &str {
        self.advertised_client_addr.as_deref().unwrap_or(&self.client_addr)
    }

    /// This node as the group's membership records it (a group of one initialised here).
    pub fn node_info(&self) -> NodeInfo {
        NodeInfo {
            raft_addr: self.raft_addr.clone(),
            client_addr: self.advertised_client_addr().to_string(),
            admin_addr: self.admin_addr.clone(),
            rack: self.rack.clone(),
        }
    }

    /// The settings of a group's log kept in `dir`.
    pub fn log_config(&self, dir: PathBuf) -> LogConfig {
        let mut c = LogConfig::new(dir);
        c.segment_size = self.storage.segment_size;
        c.durability = self.storage.durability;
        c.flush_interval = Duration::from_millis(self.storage.flush_interval_ms.max(1));
        c
    }
}

/// Whether a listen address takes connections from this machine only: a loopback IP or
/// `localhost`. A host name is taken to be reachable from elsewhere.
pub(crate) fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether clients can dial `addr`: `host:port` (`[v6]:port` for an IPv6 address) with a host
/// name or a specific IP address, not a wildcard (`0.0.0.0`, `[::]`) nor port 0.
pub(crate) fn check_dialable(addr: &str) -> Result<(), Undialable> {
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| Undialable(format!("{addr:?} is not host:port")))?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(Undialable(format!("{addr:?} has no valid port"))),
    }
    let ip = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => Some(
            v6.parse::<std::net::Ipv6Addr>()
                .map(std::net::IpAddr::V6)
                .map_err(|_| Undialable(format!("{addr:?}: {host} is not an IPv6 address")))?,
        ),
        None => host.parse::<std::net::IpAddr>().ok(),
    };
    match ip {
        Some(std::net::IpAddr::V6(_)) if !host.starts_with('[') => {
            Err(Undialable(format!("{addr:?}: write an IPv6 address in brackets, [{host}]:{port}")))
        }
        Some(ip) if ip.is_unspecified() => {
            Err(Undialable(format!("{addr:?} is a wildcard listen address, which clients cannot dial")))
        }
        Some(_) => Ok(()),
        None if host.is_empty()
            || !host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_') =>
        {
            Err(Undialable(format!("{addr:?}: {host:?} is neither an IP address nor a host name")))
        }
        None => Ok(()),
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
        c.validate().unwrap();
        let moved: NodeConfig = toml::from_str("node_id = 1\n[broker]\ndedupe_window_secs = 60").unwrap();
        let why = moved.validate().unwrap_err().to_string();
        assert!(why.contains("rockraft cluster configure --dedupe-window-secs 60"), "{why}");
        assert!(toml::from_str::<NodeConfig>("node_id = 1\nsegmnet_size = 5").is_err());
        let bad: NodeConfig = toml::from_str("node_id = 1\n[storage]\nsegment_size = 10").unwrap();
        assert!(bad.validate().is_err());
    }

    #[test]
    fn free_space_marks_default_to_segments_and_the_soft_one_trips_first() {
        let c: NodeConfig = toml::from_str("node_id = 1\n[storage]\nsegment_size = 67108864").unwrap();
        assert_eq!(c.storage.watermarks(), Watermarks { soft: 256 << 20, hard: 128 << 20 });
        let set = "node_id = 1\n[storage]\nfree_space_soft_mark_bytes = 1000\nfree_space_hard_mark_bytes = 10\n";
        let c: NodeConfig = toml::from_str(set).unwrap();
        c.validate().unwrap();
        assert_eq!(c.storage.watermarks(), Watermarks { soft: 1000, hard: 10 });
        let upside_down = "node_id = 1\n[storage]\nfree_space_soft_mark_bytes = 10\n";
        let err = toml::from_str::<NodeConfig>(upside_down).unwrap().validate().unwrap_err().to_string();
        assert!(err.contains("free_space_soft_mark_bytes"), "{err}");
    }

    /// A secret too short to resist guessing is refused when the config is read, naming the key;
    /// a config printed in a log never shows the secret.
    #[test]
    fn a_weak_cluster_secret_is_refused_and_a_good_one_is_never_printed() {
        let err = toml::from_str::<NodeConfig>("node_id = 1\ncluster_secret = \"guessable\"").unwrap_err().to_string();
        assert!(err.to_string().contains("cluster_secret"), "{err}");
        let c: NodeConfig = toml::from_str("node_id = 1\ncluster_secret = \"5f0c2a9e77d14b3c8a61\"").unwrap();
        assert!(c.cluster_secret.is_some());
        assert!(!format!("{c:?}").contains("5f0c2a9e"), "the secret is redacted");
    }

    /// A node open to the network is refused unless something checks who calls, or the config
    /// says in so many words that it means to be open.
    #[test]
    fn listeners_open_to_the_network_need_authentication_or_an_explicit_allow_insecure() {
        let at = |extra: &str| {
            let text = format!(
                "node_id = 1\nraft_addr = \"0.0.0.0:9081\"\nadmin_addr = \"10.0.0.1:7081\"\n\
                 advertised_client_addr = \"10.0.0.1:8081\"\n{extra}"
            );
            toml::from_str::<NodeConfig>(&text).unwrap().validate()
        };
        let open = at("").unwrap_err().to_string();
        assert!(open.contains("raft_addr 0.0.0.0:9081") && open.contains("admin_addr 10.0.0.1:7081"), "{open}");
        assert!(open.contains("allow_insecure"), "{open}");
        let secret = "cluster_secret = \"5f0c2a9e77d14b3c8a61\"\n";
        let admin_open = at(secret).unwrap_err().to_string();
        assert!(admin_open.contains("admin_addr") && !admin_open.contains("raft_addr"), "{admin_open}");
        at(&format!("{secret}[auth]\nenabled = true\n")).unwrap();
        // Mutual TLS between members comes with the secret: both are proved.
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, ca) = (dir.path().join("n.pem"), dir.path().join("n.key"), dir.path().join("ca.pem"));
        let mtls =
            format!("[auth]\nenabled = true\n[tls]\ncert_file = {cert:?}\nkey_file = {key:?}\npeer_ca_file = {ca:?}\n");
        let alone = at(&mtls).unwrap_err().to_string();
        assert!(alone.contains("peer_ca_file needs a cluster_secret"), "{alone}");
        at(&format!("{secret}{mtls}")).unwrap();
        // The next secret of a rotation, only beside a current one.
        let next = "cluster_secret_next = \"a8d1c0e7b3f24a9e5c61\"\n";
        at(&format!("{secret}{next}[auth]\nenabled = true\n")).unwrap();
        let lone_next = at(&format!("{next}allow_insecure = true\n")).unwrap_err().to_string();
        assert!(lone_next.contains("cluster_secret_next needs a cluster_secret"), "{lone_next}");
        at("allow_insecure = true\n").unwrap();
        let config: NodeConfig =
            toml::from_str("node_id = 1\nraft_addr = \"0.0.0.0:9081\"\nallow_insecure = true").unwrap();
        assert_eq!(config.insecure_listeners().len(), 1, "what the log and the status page then show");
        // Loopback listeners need neither (the quick start without --auth).
        for loopback in ["127.0.0.1:9081", "localhost:9081", "[::1]:9081", "127.0.0.2:1"] {
            assert!(is_loopback(loopback), "{loopback}");
        }
        for reachable in ["0.0.0.0:9081", "[::]:9081", "10.0.0.1:9081", "node1:9081"] {
            assert!(!is_loopback(reachable), "{reachable}");
        }
        toml::from_str::<NodeConfig>("node_id = 1").unwrap().validate().unwrap();
    }

    /// With authentication on, the raft port must check membership too: it serves the operator
    /// requests members forward, so without a secret it would be an unchecked admin port.
    #[test]
    fn authentication_without_a_cluster_secret_is_refused() {
        let err = toml::from_str::<NodeConfig>("node_id = 1\n[auth]\nenabled = true\n")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("cluster_secret"), "{err}");
    }

    /// Secrets may be files of their own (mounted secrets, systemd credentials); a config names
    /// a secret one way only.
    #[test]
    fn secrets_are_read_from_their_own_files() {
        let dir = tempfile::tempdir().unwrap();
        let (cluster, admin) = (dir.path().join("cluster-secret"), dir.path().join("admin-secret-key"));
        std::fs::write(&cluster, "5f0c2a9e77d14b3c8a61\n").unwrap();
        std::fs::write(&admin, "a-long-admin-secret\n").unwrap();
        let text = format!(
            "node_id = 1\ncluster_secret_file = {cluster:?}\n[auth]\nenabled = true\nadmin_access_key = \"admin\"\n\
             admin_secret_key_file = {admin:?}\n"
        );
        let path = dir.path().join("config.toml");
        std::fs::write(&path, &text).unwrap();
        let config = NodeConfig::load(&path).unwrap();
        assert_eq!(
            config.cluster_secret,
            Some(crate::auth::member::ClusterSecret::new("5f0c2a9e77d14b3c8a61").unwrap())
        );
        assert_eq!(config.auth.admin_secret_key.as_ref().map(|s| s.expose()), Some("a-long-admin-secret"));
        std::fs::write(&cluster, "short\n").unwrap();
        assert!(
            NodeConfig::load(&path).unwrap_err().to_string().contains("cluster_secret_file"),
            "a weak secret is refused"
        );
        std::fs::remove_file(&cluster).unwrap();
        assert!(NodeConfig::load(&path).unwrap_err().to_string().contains("cluster-secret"), "a missing file is named");
        let both = format!("cluster_secret = \"5f0c2a9e77d14b3c8a61\"\n{text}");
        std::fs::write(&path, both).unwrap();
        assert!(NodeConfig::load(&path).unwrap_err().to_string().contains("one of them"));
    }

    #[test]
    fn the_largest_message_a_send_accepts_must_fit_one_segment() {
        // 1 MiB segments cannot hold the default 4 MiB body.
        let small = "node_id = 1\n[storage]\nsegment_size = 1048576\n";
        let c: NodeConfig = toml::from_str(small).unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("max_body_bytes"), "{err}");
        let c: NodeConfig = toml::from_str(&format!("{small}[broker]\nmax_body_bytes = 524288\n")).unwrap();
        c.validate().unwrap();
        // Exactly full is fine; one byte more is not.
        let room = c.log_config(c.data_dir.clone()).max_record_payload() - MESSAGE_OVERHEAD_BYTES;
        let at = |body: u64| format!("{small}[broker]\nmax_body_bytes = {body}\nmax_properties_bytes = 0\n");
        toml::from_str::<NodeConfig>(&at(room)).unwrap().validate().unwrap();
        assert!(toml::from_str::<NodeConfig>(&at(room + 1)).unwrap().validate().is_err());
    }

    #[test]
    fn the_advertised_client_address_is_what_the_membership_records() {
        let c: NodeConfig = toml::from_str("node_id = 1\nclient_addr = \"127.0.0.1:8081\"").unwrap();
        c.validate().unwrap();
        assert_eq!(c.node_info().client_addr, "127.0.0.1:8081");
        let nat =
            "node_id = 1\nclient_addr = \"0.0.0.0:8081\"\nadvertised_client_addr = \"broker-1.example.com:18081\"";
        let c: NodeConfig = toml::from_str(nat).unwrap();
        c.validate().unwrap();
        assert_eq!(c.node_info().client_addr, "broker-1.example.com:18081");
        // A wildcard listen address with nothing advertised would send clients nowhere.
        let bare: NodeConfig = toml::from_str("node_id = 1\nclient_addr = \"0.0.0.0:8081\"").unwrap();
        assert!(bare.validate().unwrap_err().to_string().contains("advertised_client_addr"));
    }

    #[test]
    fn advertised_addresses_must_be_dialable_host_and_port() {
        for good in ["127.0.0.1:8081", "broker-1.example.com:8081", "[::1]:8081", "node_2:1"] {
            assert_eq!(check_dialable(good), Ok(()), "{good}");
        }
        for bad in [
            "127.0.0.1",
            "host:",
            "host:0",
            "host:70000",
            ":8081",
            "0.0.0.0:8081",
            "[::]:8081",
            "::1:8081",
            "http://h:1",
            "[x]:1",
        ] {
            assert!(check_dialable(bad).is_err(), "{bad}");
        }
        let with = |advertised: &str| {
            let text = format!(
                "node_id = 1\nadvertised_client_addr = \"{advertised}\"\n[[members]]\nid = 1\nraft_addr = \"10.0.0.1:9081\"\nclient_addr = \"10.0.0.1:8081\"\n"
            );
            toml::from_str::<NodeConfig>(&text).unwrap().validate()
        };
        with("10.0.0.1:8081").unwrap();
        // The members table initialises the group: it must agree with what this node advertises.
        assert!(with("10.0.0.9:8081").unwrap_err().to_string().contains("[[members]]"));
        assert!(with("0.0.0.0:8081").unwrap_err().to_string().contains("wildcard"));
    }
}
