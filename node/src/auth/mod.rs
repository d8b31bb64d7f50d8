//! Who is calling, and may they. Services never parse credentials themselves: a tonic
//! interceptor on each listener works out the [`Caller`] before the request is decoded.
//!
//! - `member`: the raft port serves current cluster members only (the cluster secret, the member
//!   certificate), and members only what members need;
//! - `member_tls`: mutual TLS between members, each certificate naming one member;
//! - `member_listener`: the raft port's connections (caps, handshakes, closed on removal);
//! - `handles`: receipt handles, recall handles and transaction ids sealed with the cluster's
//!   replicated handle key;
//! - `signature`: the `MQv2-HMAC-SHA1` signature the official clients send;
//! - `operator`: the stronger signature of operator requests (method, time, nonce, body; once);
//! - `tls`: TLS on the client and admin listeners, and the CLI's TLS channel;
//! - here: the `[auth]` configuration, the [`Authenticator`] that turns a signature into a
//!   [`Caller`] against the replicated users (`broker::access`);
//! - `gate`: the client plane's gate (marks the caller; a refused caller's body is never
//!   decoded, and the proxy answers it with RocketMQ's UNAUTHORIZED);
//! - `connections`: how many connections one address may hold open on a listener;
//! - `at_rest`: the node's files private to its user.

pub mod at_rest;
pub mod connections;
pub mod gate;
pub mod handles;
pub mod member;
pub mod member_listener;
pub mod member_tls;
pub mod operator;
pub mod signature;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tonic::Request;
use tonic::codegen::http::HeaderMap;
use tonic::metadata::MetadataMap;

use crate::broker::Broker;
use crate::broker::access::{Action, CredentialError, ResourceKind, Secret, check_access_key, check_secret};
use signature::Refusal;

/// The OS's random source could not be read: no key can be made.
#[derive(Debug, thiserror::Error)]
#[error("reading /dev/urandom: {0}")]
pub struct NoRandomness(#[from] std::io::Error);

/// 32 bytes from the OS's random source, hex: a new handle key.
pub fn random_key() -> Result<String, NoRandomness> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    if crate::simulation::active() {
        // A simulation's keys come from its seed, so a run repeats.
        for chunk in bytes.chunks_mut(8) {
            chunk.copy_from_slice(&crate::simulation::draw().unwrap_or_default().to_le_bytes());
        }
        return Ok(hex::encode(bytes));
    }
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes))?;
    Ok(hex::encode(bytes))
}

/// Why the `[auth]` section's admin credential cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    #[error("[auth] admin_secret_key and admin_secret_key_file: give one of them")]
    TwoSecrets,
    #[error("[auth] admin_secret_key_file {0}")]
    SecretFile(#[source] std::io::Error),
    #[error("[auth] admin_access_key: {0}")]
    AccessKey(#[source] CredentialError),
    #[error("[auth] admin_secret_key: {0}")]
    SecretKey(#[source] CredentialError),
    #[error("[auth] admin_access_key and admin_secret_key go together")]
    HalfCredential,
}

/// Reads a secret kept in a file of its own (a mounted secret, a systemd credential): the file's
/// text less surrounding whitespace (a trailing newline is usual).
pub fn read_secret_file(path: &std::path::Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(path)?.trim().to_string())
}

/// The `[auth]` section of a node's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Whether clients and operators must sign their requests. Off: every caller may do
    /// everything (the loopback quick start).
    pub enabled: bool,
    /// How far a request's signed time may be from this node's clock (0: not checked).
    pub max_clock_skew_secs: u64,
    /// An admin credential kept in this file rather than in the replicated users: how the first
    /// users are created. Admin on every plane of this node.
    pub admin_access_key: Option<String>,
    pub admin_secret_key: Option<Secret>,
    /// A file holding `admin_secret_key`, read at start: keeps the secret out of this file.
    pub admin_secret_key_file: Option<std::path::PathBuf>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            enabled: false,
            max_clock_skew_secs: 900,
            admin_access_key: None,
            admin_secret_key: None,
            admin_secret_key_file: None,
        }
    }
}

impl AuthConfig {
    /// Takes `admin_secret_key_file` into `admin_secret_key`.
    pub fn read_secret_files(&mut self) -> Result<(), AuthConfigError> {
        if let Some(file) = &self.admin_secret_key_file {
            if self.admin_secret_key.is_some() {
                return Err(AuthConfigError::TwoSecrets);
            }
            let secret = read_secret_file(file).map_err(AuthConfigError::SecretFile)?;
            self.admin_secret_key = Some(Secret::new(secret));
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), AuthConfigError> {
        match (&self.admin_access_key, &self.admin_secret_key) {
            (Some(key), Some(secret)) => {
                check_access_key(key).map_err(AuthConfigError::AccessKey)?;
                check_secret(secret.expose()).map_err(AuthConfigError::SecretKey)
            }
            (None, None) => Ok(()),
            _ => Err(AuthConfigError::HalfCredential),
        }
    }
}

/// Who sent a request, as the interceptor found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is off: the caller may do everything.
    Open,
    User {
        access_key: Arc<str>,
        admin: bool,
    },
    /// Unsigned, or signed wrongly.
    Refused(Refusal),
}

/// Why a request may not go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// Not authenticated (RocketMQ's UNAUTHORIZED).
    Unauthenticated(String),
    /// Authenticated, but not allowed this (RocketMQ's FORBIDDEN).
    Forbidden(String),
}

impl Caller {
    pub fn is_admin(&self) -> bool {
        matches!(self, Caller::Open | Caller::User { admin: true, .. })
    }

    /// May the caller do `action` on the named topic or group, by the rules `broker` has applied?
    pub fn may(&self, broker: &Broker, action: Action, kind: ResourceKind, name: &str) -> Result<(), Denied> {
        match self {
            Caller::Open | Caller::User { admin: true, .. } => Ok(()),
            Caller::Refused(why) => Err(Denied::Unauthenticated(why.to_string())),
            Caller::User { access_key, admin: false } => {
                if broker.access(|t| t.permits(access_key, action, kind, name)) {
                    Ok(())
                } else {
                    Err(Denied::Forbidden(format!("{access_key} may not {action:?} on {kind:?} {name}")))
                }
            }
        }
    }

    /// Any authenticated caller may (heartbeats, the end of a session).
    pub fn authenticated(&self) -> Result<(), Denied> {
        match self {
            Caller::Refused(why) => Err(Denied::Unauthenticated(why.to_string())),
            _ => Ok(()),
        }
    }

    /// The caller a request was marked with; a request that never passed an interceptor is
    /// refused rather than served as anyone.
    pub fn of<T>(request: &Request<T>) -> Caller {
        request
            .extensions()
            .get::<Caller>()
            .cloned()
            .unwrap_or(Caller::Refused(Refusal::Malformed("the request was not authenticated")))
    }
}

/// Finds the caller of a request from its signature.
pub struct Authenticator {
    config: AuthConfig,
    broker: Broker,
}

impl Authenticator {
    pub fn new(config: AuthConfig, broker: Broker) -> Arc<Authenticator> {
        Arc::new(Authenticator { config, broker })
    }

    /// Whether callers must sign.
    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// How far a signed time may be from this node's clock.
    pub fn max_skew(&self) -> Duration {
        Duration::from_secs(self.config.max_clock_skew_secs)
    }

    /// The secret and admin flag of `access_key`: the admin credential of this node's
    /// configuration, or a replicated user.
    pub fn credential(&self, access_key: &str) -> Option<(String, bool)> {
        if let (Some(key), Some(secret)) = (&self.config.admin_access_key, &self.config.admin_secret_key)
            && key == access_key
        {
            return Some((secret.expose().to_string(), true));
        }
        self.broker.access(|t| t.user(access_key).map(|u| (u.secret.expose().to_string(), u.admin)))
    }

    pub fn identify(&self, metadata: &MetadataMap) -> Caller {
        self.identify_headers(metadata.as_ref())
    }

    /// [`Self::identify`] from a request's HTTP headers, before tonic has seen it.
    pub fn identify_headers(&self, headers: &HeaderMap) -> Caller {
        if !self.config.enabled {
            return Caller::Open;
        }
        match self.verify(headers) {
            Ok(caller) => caller,
            Err(why) => Caller::Refused(why),
        }
    }

    /// What a long-lived stream keeps of its opening so its caller can be found again per
    /// command ([`Pin::caller`]): the access key and a digest of the secret that verified the
    /// signature it was opened with.
    pub fn pin(&self, metadata: &MetadataMap) -> Pin {
        if !self.config.enabled {
            return Pin::Open;
        }
        match self.verify_pinned(metadata.as_ref()) {
            Ok((_, pin)) => pin,
            Err(why) => Pin::Refused(why),
        }
    }

    /// The pin of a caller another front end verified a moment ago (Remoting): re-resolved when
    /// the connection is used later, as a stream's is.
    pub fn pin_of(&self, caller: &Caller) -> Pin {
        match caller {
            Caller::Open => Pin::Open,
            Caller::Refused(why) => Pin::Refused(why.clone()),
            Caller::User { access_key, .. } if self.config.admin_access_key.as_deref() == Some(&**access_key) => {
                Pin::FileAdmin(Arc::clone(access_key))
            }
            Caller::User { access_key, .. } => {
                match self.broker.access(|t| t.user(access_key).map(|u| secret_digest(&u.secret))) {
                    Some(secret) => Pin::User { access_key: Arc::clone(access_key), secret },
                    None => Pin::Refused(Refusal::Revoked),
                }
            }
        }
    }

    fn verify(&self, metadata: &HeaderMap) -> Result<Caller, Refusal> {
        self.verify_pinned(metadata).map(|(caller, _)| caller)
    }

    fn verify_pinned(&self, metadata: &HeaderMap) -> Result<(Caller, Pin), Refusal> {
        let header = match metadata.get(signature::AUTHORIZATION) {
            None => return Err(Refusal::Anonymous),
            Some(v) => v.to_str().map_err(|_| Refusal::Malformed("authorization is not ASCII"))?,
        };
        let signed = signature::parse(header)?;
        let date_time = metadata
            .get(signature::DATE_TIME)
            .and_then(|v| v.to_str().ok())
            .ok_or(Refusal::Malformed("x-mq-date-time is missing"))?;
        let now = time::OffsetDateTime::now_utc();
        let max_skew = Duration::from_secs(self.config.max_clock_skew_secs);
        if let (Some(key), Some(secret)) = (&self.config.admin_access_key, &self.config.admin_secret_key)
            && key == signed.access_key
        {
            signature::verify(&signed, secret.expose(), date_time, now, max_skew)?;
            let access_key: Arc<str> = key.as_str().into();
            return Ok((Caller::User { access_key: Arc::clone(&access_key), admin: true }, Pin::FileAdmin(access_key)));
        }
        let user = self.broker.access(|t| t.user(signed.access_key).cloned()).ok_or(Refusal::UnknownAccessKey)?;
        signature::verify(&signed, user.secret.expose(), date_time, now, max_skew)?;
        let access_key: Arc<str> = signed.access_key.into();
        let pin = Pin::User { access_key: Arc::clone(&access_key), secret: secret_digest(&user.secret) };
        Ok((Caller::User { access_key, admin: user.admin }, pin))
    }
}

/// A stream's caller as it was when the stream opened, to be re-resolved against the replicated
/// users whenever the stream is used: a user deleted or given a new secret since is no longer
/// authenticated on it, and its admin flag is read afresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    /// Authentication is off.
    Open,
    /// The stream was not authenticated when it opened; it never will be.
    Refused(Refusal),
    /// The admin credential of this node's configuration: it does not change while the node runs.
    FileAdmin(Arc<str>),
    /// A replicated user, and a digest of the secret its signature was verified with.
    User { access_key: Arc<str>, secret: [u8; 32] },
}

/// SHA-256 of a secret: enough to tell whether it was replaced, without keeping a copy of it.
fn secret_digest(secret: &Secret) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(secret.expose().as_bytes()).into()
}

impl Pin {
    /// The stream's caller now: one read of the replicated users under their read lock.
    pub fn caller(&self, broker: &Broker) -> Caller {
        match self {
            Pin::Open => Caller::Open,
            Pin::Refused(why) => Caller::Refused(why.clone()),
            Pin::FileAdmin(access_key) => Caller::User { access_key: Arc::clone(access_key), admin: true },
            Pin::User { access_key, secret } => {
                use subtle::ConstantTimeEq as _;
                let admin = broker.access(|t| {
                    t.user(access_key).filter(|u| bool::from(secret_digest(&u.secret).ct_eq(secret))).map(|u| u.admin)
                });
                match admin {
                    Some(admin) => Caller::User { access_key: Arc::clone(access_key), admin },
                    None => Caller::Refused(Refusal::Revoked),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Command;
    use crate::broker::access::AccessCommand;
    use crate::broker::state_test::node;

    fn signed(key: &str, secret: &str) -> MetadataMap {
        let (date_time, header) = signature::sign(key, secret, time::OffsetDateTime::now_utc());
        let mut m = MetadataMap::new();
        m.insert(signature::DATE_TIME, date_time.parse().expect("ascii"));
        m.insert(signature::AUTHORIZATION, header.parse().expect("ascii"));
        m
    }

    fn put(key: &str, secret: &str, admin: bool, create: bool) -> Command {
        let secret = Secret::new(secret);
        Command::Access(AccessCommand::PutUser { access_key: key.into(), secret, admin, create })
    }

    fn config() -> AuthConfig {
        AuthConfig {
            enabled: true,
            admin_access_key: Some("root".into()),
            admin_secret_key: Some(Secret::new("root-secret")),
            ..Default::default()
        }
    }

    #[test]
    fn a_stream_s_caller_is_found_again_demoted_at_once_and_refused_once_deleted_or_rotated() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = node(dir.path());
        n.commit(&put("ops", "ops-secret-1", true, true));
        let auth = Authenticator::new(config(), n.broker.clone());
        let pin = auth.pin(&signed("ops", "ops-secret-1"));
        let ops = |admin| Caller::User { access_key: "ops".into(), admin };
        assert_eq!(pin.caller(&n.broker), ops(true));

        n.commit(&put("ops", "ops-secret-1", false, false));
        assert_eq!(pin.caller(&n.broker), ops(false), "demoted: no longer admin on the open stream");

        n.commit(&put("ops", "ops-secret-2", false, false));
        assert_eq!(pin.caller(&n.broker), Caller::Refused(Refusal::Revoked), "a new secret");
        let rotated = auth.pin(&signed("ops", "ops-secret-2"));
        assert_eq!(rotated.caller(&n.broker), ops(false), "a stream signed with the new secret");

        n.commit(&Command::Access(AccessCommand::DeleteUser { access_key: "ops".into() }));
        assert_eq!(rotated.caller(&n.broker), Caller::Refused(Refusal::Revoked), "deleted");
        n.commit(&put("ops", "ops-secret-2", false, true));
        assert_eq!(rotated.caller(&n.broker), ops(false), "made again with the same secret: the same credential");
    }

    #[test]
    fn the_configured_admin_unsigned_callers_and_auth_off_pin_what_identify_says() {
        let dir = tempfile::tempdir().unwrap();
        let n = node(dir.path());
        let auth = Authenticator::new(config(), n.broker.clone());
        let root = signed("root", "root-secret");
        assert_eq!(auth.pin(&root).caller(&n.broker), auth.identify(&root));
        assert!(auth.pin(&root).caller(&n.broker).is_admin());
        let wrong = signed("root", "not-the-secret");
        assert_eq!(auth.pin(&wrong).caller(&n.broker), Caller::Refused(Refusal::BadSignature));
        assert_eq!(auth.pin(&MetadataMap::new()).caller(&n.broker), Caller::Refused(Refusal::Anonymous));
        let open = Authenticator::new(AuthConfig::default(), n.broker.clone());
        assert_eq!(open.pin(&wrong).caller(&n.broker), Caller::Open);
    }
}
