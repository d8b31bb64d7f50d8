//! Who is calling, and may they. Services never parse credentials themselves: a tonic
//! interceptor on each listener works out the [`Caller`] before the request is decoded.
//!
//! - `member`: the raft port serves cluster members only (the cluster secret);
//! - `handles`: receipt handles, recall handles and transaction ids sealed with the cluster's
//!   replicated handle key;
//! - `signature`: the `MQv2-HMAC-SHA1` signature the official clients send;
//! - `tls`: TLS on the client and admin listeners, and the CLI's TLS channel;
//! - here: the `[auth]` configuration, the [`Authenticator`] that turns a signature into a
//!   [`Caller`] against the replicated users (`broker::access`), and the admin plane's
//!   interceptor (refuses anyone but an admin);
//! - `gate`: the client plane's gate (marks the caller; a refused caller's body is never
//!   decoded, and the proxy answers it with RocketMQ's UNAUTHORIZED);
//! - `connections`: how many connections one address may hold open on a listener;
//! - `at_rest`: the node's files private to its user.

pub mod at_rest;
pub mod connections;
pub mod gate;
pub mod handles;
pub mod member;
pub mod signature;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tonic::codegen::http::HeaderMap;
use tonic::metadata::MetadataMap;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::broker::Broker;
use crate::broker::access::{Action, ResourceKind, Secret, check_access_key, check_secret};
use signature::Refusal;

/// 32 bytes from the OS's random source, hex: a new handle key.
pub fn random_key() -> Result<String, String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("reading /dev/urandom: {e}"))?;
    Ok(hex::encode(bytes))
}

/// Reads a secret kept in a file of its own (a mounted secret, a systemd credential): the file's
/// text less surrounding whitespace (a trailing newline is usual).
pub fn read_secret_file(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text.trim().to_string())
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
    pub fn read_secret_files(&mut self) -> Result<(), String> {
        if let Some(file) = &self.admin_secret_key_file {
            if self.admin_secret_key.is_some() {
                return Err("[auth] admin_secret_key and admin_secret_key_file: give one of them".into());
            }
            let secret = read_secret_file(file).map_err(|e| format!("[auth] admin_secret_key_file {e}"))?;
            self.admin_secret_key = Some(Secret::new(secret));
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), String> {
        match (&self.admin_access_key, &self.admin_secret_key) {
            (Some(key), Some(secret)) => {
                check_access_key(key).map_err(|e| format!("[auth] admin_access_key: {e}"))?;
                check_secret(secret.expose()).map_err(|e| format!("[auth] admin_secret_key: {e}"))
            }
            (None, None) => Ok(()),
            _ => Err("[auth] admin_access_key and admin_secret_key go together".into()),
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

    fn verify(&self, metadata: &HeaderMap) -> Result<Caller, Refusal> {
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
            return Ok(Caller::User { access_key: key.as_str().into(), admin: true });
        }
        let user = self.broker.access(|t| t.user(signed.access_key).cloned()).ok_or(Refusal::UnknownAccessKey)?;
        signature::verify(&signed, user.secret.expose(), date_time, now, max_skew)?;
        Ok(Caller::User { access_key: signed.access_key.into(), admin: user.admin })
    }
}

/// The admin plane: only admins get through, before the request is decoded.
#[derive(Clone)]
pub struct AdminsOnly(pub Arc<Authenticator>);

impl Interceptor for AdminsOnly {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match self.0.identify(request.metadata()) {
            Caller::Refused(why) => Err(Status::unauthenticated(why.to_string())),
            caller if caller.is_admin() => Ok(request),
            Caller::User { access_key, .. } => Err(Status::permission_denied(format!("{access_key} is not an admin"))),
            Caller::Open => Ok(request),
        }
    }
}
