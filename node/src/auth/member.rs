//! Node-to-node calls are accepted only from cluster members. Every member is configured with the
//! same `cluster_secret`; every call one member makes to another carries it in a header, and the
//! raft port checks it (in constant time) before anything is decoded. Without it nothing reaches
//! Raft (votes, appends, snapshots), the peer calls (forwarded writes of raw command bytes, pop
//! planning, read index, producer asks) or the operator requests members forward to the leader.
//!
//! A node configured without a secret accepts every caller on that port, and says so at start.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use subtle::ConstantTimeEq;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The header that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-rockraft-cluster-secret";

/// Shortest secret a node accepts.
pub const MIN_SECRET_LEN: usize = 16;

/// The secret shared by a cluster's members. Never printed: its `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(Arc<str>);

impl ClusterSecret {
    /// A secret of at least [`MIN_SECRET_LEN`] printable ASCII characters (it travels in a header).
    pub fn new(secret: &str) -> Result<ClusterSecret, String> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(format!("cluster_secret must be at least {MIN_SECRET_LEN} characters"));
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("cluster_secret must be printable ASCII without spaces".into());
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

/// Refuses calls without the secret (a server-side interceptor); with no secret configured,
/// accepts every call.
#[derive(Clone, Default)]
pub struct Check(Option<ClusterSecret>);

impl Check {
    pub fn new(secret: Option<&ClusterSecret>) -> Check {
        Check(secret.cloned())
    }
}

impl Interceptor for Check {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.0 else { return Ok(request) };
        let given = request.metadata().get(SECRET_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
        if bool::from(given.ct_eq(expected.0.as_bytes())) {
            Ok(request)
        } else {
            Err(Status::unauthenticated("not a member of this cluster: the cluster secret is missing or wrong"))
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
        let mut check = Check::new(Some(&secret));
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
        assert!(Attach::default().call(Request::new(())).unwrap().metadata().get(SECRET_HEADER).is_none());
    }

    #[test]
    fn short_or_unprintable_secrets_are_refused_and_a_secret_is_never_printed() {
        assert!(ClusterSecret::new("short").is_err());
        assert!(ClusterSecret::new("0123456789 abcdef").is_err());
        assert!(ClusterSecret::new("0123456789abcdé0").is_err());
        let s = ClusterSecret::new("0123456789abcdef").unwrap();
        assert!(!format!("{s:?}").contains("0123"));
    }
}
