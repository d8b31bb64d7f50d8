//! Node-to-node calls are accepted only from cluster members. Every member is configured with the
//! same `cluster_secret`; every call one member makes to another carries it in a header, and the
//! raft port checks it (in constant time) before anything is decoded. Without it nothing reaches
//! Raft (votes, appends, snapshots), the peer calls (forwarded writes of raw command bytes, pop
//! planning, read index, producer asks) or the operator requests members forward to the leader.
//!
//! A node configured without a secret accepts every caller on that port, and says so at start.
//!
//! With `[tls] peer_ca_file` the raft port is on mutual TLS instead (`auth::tls`): the handshake
//! admits only callers whose certificate the cluster's CA signed, and that is the membership
//! check. The secret is then neither needed nor checked (a member still attaches it when one is
//! configured, harmless inside TLS): one check, not two that could disagree during a rollout.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use subtle::ConstantTimeEq;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::auth::tls::MemberTls;

/// The header that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-rockraft-cluster-secret";

/// Shortest secret a node accepts.
pub const MIN_SECRET_LEN: usize = 16;

/// Why a cluster secret is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClusterSecretError {
    #[error("cluster_secret must be at least {MIN_SECRET_LEN} characters")]
    TooShort,
    /// It travels in a header.
    #[error("cluster_secret must be printable ASCII without spaces")]
    NotPrintable,
}

/// The secret shared by a cluster's members. Never printed: its `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Arc<str>);

impl ClusterSecret {
    /// A secret of at least [`MIN_SECRET_LEN`] printable ASCII characters (it travels in a header).
    pub fn new(secret: &str) -> Result<ClusterSecret, ClusterSecretError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(ClusterSecretError::TooShort);
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ClusterSecretError::NotPrintable);
        }
        Ok(ClusterSecret(secret.into()))
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

impl<'de> Deserialize<'de> for ClusterSecret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ClusterSecret::new(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Adds the secret to every call a member makes (a client-side interceptor).
#[derive(Clone, Default)]
pub struct Attach(Option<MetadataValue<Ascii>>);

impl Attach {
    pub fn new(secret: Option<&ClusterSecret>) -> Attach {
        // A checked secret is printable ASCII, so it always makes a header value.
        Attach(secret.and_then(|s| MetadataValue::try_from(&*s.0).ok()))
    }
}

impl fmt::Debug for Attach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Attach(<redacted>)" } else { "Attach(none)" })
    }
}

impl Interceptor for Attach {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert(SECRET_HEADER, value.clone());
        }
        Ok(request)
    }
}

/// How this node proves it is a member to the others: the secret it attaches, and with mutual
/// TLS the certificate it presents (and the CA it trusts for theirs).
#[derive(Clone, Default, Debug)]
pub struct MemberCredentials {
    pub attach: Attach,
    pub tls: Option<MemberTls>,
}

impl MemberCredentials {
    pub fn new(secret: Option<&ClusterSecret>, tls: Option<MemberTls>) -> MemberCredentials {
        MemberCredentials { attach: Attach::new(secret), tls }
    }
}

/// Refuses calls from non-members (a server-side interceptor).
#[derive(Clone, Default)]
pub enum Check {
    /// No secret configured and no mutual TLS: every call is accepted.
    #[default]
    Open,
    /// Calls must carry the secret.
    Secret(ClusterSecret),
    /// The listener is on mutual TLS: the handshake checked the caller's certificate against the
    /// cluster's CA; a call that did not come over such a connection is refused.
    Certificate,
}

impl Check {
    pub fn new(secret: Option<&ClusterSecret>, mutual_tls: bool) -> Check {
        match (mutual_tls, secret) {
            (true, _) => Check::Certificate,
            (false, Some(s)) => Check::Secret(s.clone()),
            (false, None) => Check::Open,
        }
    }
}

impl Interceptor for Check {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match self {
            Check::Open => Ok(request),
            Check::Secret(expected) => {
                let given = request.metadata().get(SECRET_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
                if bool::from(given.ct_eq(expected.0.as_bytes())) {
                    Ok(request)
                } else {
                    Err(Status::unauthenticated("not a member of this cluster: the cluster secret is missing or wrong"))
                }
            }
            Check::Certificate => match request.peer_certs() {
                Some(certs) if !certs.is_empty() => Ok(request),
                _ => Err(Status::unauthenticated("not a member of this cluster: no certificate from the cluster's CA")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(secret: Option<&str>) -> Request<()> {
        let mut r = Request::new(());
        if let Some(s) = secret {
            r.metadata_mut().insert(SECRET_HEADER, MetadataValue::try_from(s).unwrap());
        }
        r
    }

    #[test]
    fn only_calls_carrying_the_secret_pass() {
        let secret = ClusterSecret::new("0123456789abcdef0123").unwrap();
        let mut check = Check::new(Some(&secret), false);
        assert!(check.call(with(Some("0123456789abcdef0123"))).is_ok());
        for wrong in [None, Some(""), Some("0123456789abcdef012"), Some("0123456789abcdef01234"), Some("x")] {
            let refused = check.call(with(wrong)).expect_err("refused");
            assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{wrong:?}");
        }
        // What a member attaches is what the others check.
        let attached = Attach::new(Some(&secret)).call(Request::new(())).unwrap();
        assert!(check.call(attached).is_ok());
        // A node without a secret accepts anyone, and attaches nothing.
        assert!(Check::default().call(with(None)).is_ok());
        assert!(Check::new(None, false).call(with(None)).is_ok());
        assert!(Attach::default().call(Request::new(())).unwrap().metadata().get(SECRET_HEADER).is_none());
    }

    #[test]
    fn on_mutual_tls_a_call_needs_a_certificate_and_the_secret_alone_does_not_do() {
        let secret = ClusterSecret::new("0123456789abcdef0123").unwrap();
        // A request that did not come over a verified TLS connection carries no certificates.
        for check in [Check::new(Some(&secret), true), Check::new(None, true)] {
            for given in [None, Some("0123456789abcdef0123")] {
                let refused = check.clone().call(with(given)).expect_err("refused");
                assert_eq!(refused.code(), tonic::Code::Unauthenticated);
            }
        }
    }

    #[test]
    fn short_or_unprintable_secrets_are_refused_and_a_secret_is_never_printed() {
        assert_eq!(ClusterSecret::new("short"), Err(ClusterSecretError::TooShort));
        assert_eq!(ClusterSecret::new("0123456789 abcdef"), Err(ClusterSecretError::NotPrintable));
        assert_eq!(ClusterSecret::new("0123456789abcdé0"), Err(ClusterSecretError::NotPrintable));
        let s = ClusterSecret::new("0123456789abcdef").unwrap();
        assert!(!format!("{s:?}").contains("0123"));
    }
}
