//! Node-to-node calls are accepted only from current cluster members, and serve them only what
//! members need.
//!
//! - **The cluster secret.** Every member is configured with the same `cluster_secret`; every call
//!   one member makes to another carries it in a header, and the raft port checks it (in
//!   constant time) before anything is decoded. During a rotation a node also accepts
//!   `cluster_secret_next` ([`Secrets`]; both are read again on SIGHUP).
//! - **The member's certificate.** With `[tls] peer_ca_file` the raft port is on mutual TLS
//!   (`auth::member_tls`), and the certificate names one member id. The secret is still checked
//!   when one is configured: a stolen key alone is not enough, nor a stolen secret alone.
//! - **A current member.** A named member must be a voter or learner of the group it calls (the
//!   cluster's, for the peer and operator services) as this node knows it now ([`Roster`]); the
//!   connection of a member that is removed is closed. Raft messages must come from the member
//!   they say they come from (`raft::service` compares with [`MemberCaller`]).
//! - **Operator requests stay the operator's.** The admin service on the raft port is where a
//!   member passes an operator's request on to the leader: the operator's own signature travels
//!   with it and is checked there as on the admin port (`auth::operator`). Being a member grants
//!   none.
//!
//! A node configured with neither a secret nor mutual TLS accepts every caller on that port (on
//! loopback only, or with `allow_insecure`), and says so at start.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

use futures_util::future::Either;
use serde::{Deserialize, Deserializer};
use subtle::ConstantTimeEq;
use tonic::body::Body;
use tonic::codegen::Service;
use tonic::codegen::http::{self, HeaderMap};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::server::NamedService;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::auth::member_tls::{MemberConnection, MemberTls};

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

/// The secrets a node attaches and accepts, replaced whole when the configuration is read again
/// (SIGHUP): `current` is attached to every call and accepted; `next` is accepted too, during a
/// rotation (`docs/security.md`).
#[derive(Clone, Default)]
pub struct Secrets {
    shared: Arc<RwLock<SecretPair>>,
}

#[derive(Clone, Default)]
struct SecretPair {
    current: Option<ClusterSecret>,
    next: Option<ClusterSecret>,
    /// `current` as a header value, made once.
    header: Option<MetadataValue<Ascii>>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pair = self.shared.read().unwrap_or_else(|p| p.into_inner());
        write!(f, "Secrets(current: {}, next: {})", pair.current.is_some(), pair.next.is_some())
    }
}

impl Secrets {
    pub fn new(current: Option<&ClusterSecret>, next: Option<&ClusterSecret>) -> Secrets {
        let secrets = Secrets::default();
        secrets.replace(current, next);
        secrets
    }

    /// Takes up a new pair (a configuration read again); calls already in flight keep theirs.
    pub fn replace(&self, current: Option<&ClusterSecret>, next: Option<&ClusterSecret>) {
        // A checked secret is printable ASCII, so it always makes a header value.
        let header = current.and_then(|s| MetadataValue::try_from(&*s.0).ok());
        let pair = SecretPair { current: current.cloned(), next: next.cloned(), header };
        *self.shared.write().unwrap_or_else(|p| p.into_inner()) = pair;
    }

    /// Whether any secret is configured (and so checked).
    pub fn configured(&self) -> bool {
        self.shared.read().unwrap_or_else(|p| p.into_inner()).current.is_some()
    }

    /// Whether `given` is the current or the next secret (compared in constant time). `None`
    /// when no secret is configured. One read lock, nothing copied: every call to the raft port
    /// asks.
    fn accepts(&self, given: &[u8]) -> Option<bool> {
        let pair = self.shared.read().unwrap_or_else(|p| p.into_inner());
        pair.current.as_ref()?;
        let matches = |s: &Option<ClusterSecret>| s.as_ref().is_some_and(|s| bool::from(given.ct_eq(s.0.as_bytes())));
        // Both compared, always: the time taken says nothing of which matched.
        let (current, next) = (matches(&pair.current), matches(&pair.next));
        Some(current | next)
    }
}

/// Adds the current secret to every call a member makes (a client-side interceptor).
#[derive(Clone, Default)]
pub struct Attach(Secrets);

impl Attach {
    pub fn new(secrets: Secrets) -> Attach {
        Attach(secrets)
    }
}

impl fmt::Debug for Attach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.configured() { "Attach(<redacted>)" } else { "Attach(none)" })
    }
}

impl Interceptor for Attach {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let header = self.0.shared.read().unwrap_or_else(|p| p.into_inner()).header.clone();
        if let Some(value) = header {
            request.metadata_mut().insert(SECRET_HEADER, value);
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
    pub fn new(secrets: Secrets, tls: Option<MemberTls>) -> MemberCredentials {
        MemberCredentials { attach: Attach::new(secrets), tls }
    }
}

/// Who the members of the cluster are now, as this node's replicas know them. Implemented where
/// the groups are (`raft::roster`).
pub trait Roster: Send + Sync + 'static {
    /// Whether member `id` may make a call with these headers: to the replica of the group they
    /// name (`replication`, a Raft message), or to the cluster (a peer or operator call).
    fn admits(&self, id: u64, headers: &HeaderMap, replication: bool) -> bool;

    /// Resolves once `id` is no longer a member of the cluster.
    fn gone(&self, id: u64) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// Every member is admitted: a listener without mutual TLS (no member ids to look up).
pub struct Everyone;

impl Roster for Everyone {
    fn admits(&self, _: u64, _: &HeaderMap, _: bool) -> bool {
        true
    }

    fn gone(&self, _: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(std::future::pending())
    }
}

/// The member a request on the raft port came from, as its certificate names it; `None` on a
/// listener without mutual TLS. Put in the request's extensions by [`MemberGate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberCaller(pub Option<u64>);

/// Which service of the raft port a [`MemberGate`] guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Raft messages: the caller must be a member of the group addressed.
    Replication,
    /// What members ask of each other (forwarded writes, pops, read index), and operators'
    /// requests they pass on (whose operator's signature `auth::operator` checks besides):
    /// cluster members.
    Members,
}

/// What a [`MemberGate`] checks.
#[derive(Clone)]
pub struct MemberPolicy {
    pub secrets: Secrets,
    /// Mutual TLS: a caller must come over a connection whose certificate names a member.
    pub mutual_tls: bool,
    pub roster: Arc<dyn Roster>,
    /// Refusals, reported at most once a minute.
    pub refusals: Arc<RefusalLog>,
}

/// Guards one service of the raft port (see the module's doc): a refused call is answered with
/// its status and never decoded.
#[derive(Clone)]
pub struct MemberGate<S> {
    inner: S,
    audience: Audience,
    policy: MemberPolicy,
}

impl<S> MemberGate<S> {
    pub fn new(inner: S, audience: Audience, policy: MemberPolicy) -> MemberGate<S> {
        MemberGate { inner, audience, policy }
    }
}

impl<S: NamedService> NamedService for MemberGate<S> {
    const NAME: &'static str = S::NAME;
}

impl MemberPolicy {
    /// Who the caller is, or why it may not go on.
    fn check<B>(&self, request: &http::Request<B>, audience: Audience) -> Result<MemberCaller, Status> {
        let headers = request.headers();
        let connection = request.extensions().get::<MemberConnection>();
        let given = headers.get(SECRET_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
        if self.secrets.accepts(given) == Some(false) {
            self.refusals.refused(connection, "the cluster secret is missing or wrong");
            return Err(Status::unauthenticated(
                "not a member of this cluster: the cluster secret is missing or wrong",
            ));
        }
        let member = match (self.mutual_tls, connection.and_then(|c| c.member)) {
            (false, _) => None,
            (true, Some(id)) => {
                if !self.roster.admits(id, headers, audience == Audience::Replication) {
                    self.refusals.refused(connection, "not a current member");
                    return Err(Status::permission_denied(format!(
                        "member {id} is not a current member of this group"
                    )));
                }
                Some(id)
            }
            (true, None) => {
                self.refusals.refused(connection, "no member certificate");
                return Err(Status::unauthenticated("not a member of this cluster: no member certificate"));
            }
        };
        Ok(MemberCaller(member))
    }
}

impl<S> Service<http::Request<Body>> for MemberGate<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<S::Future, std::future::Ready<Result<http::Response<Body>, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        match self.policy.check(&request, self.audience) {
            Ok(caller) => {
                request.extensions_mut().insert(caller);
                Either::Left(self.inner.call(request))
            }
            Err(status) => Either::Right(std::future::ready(Ok(status.into_http()))),
        }
    }
}

/// Says who was refused at the raft port: the first refusal at once, then at most once a minute
/// with the count since (a refused caller may retry many times a second).
#[derive(Default)]
pub struct RefusalLog {
    state: Mutex<(u64, Option<Instant>)>,
}

/// How often refusals at the raft port are logged while they go on.
const REFUSALS_EVERY: Duration = Duration::from_secs(60);

impl RefusalLog {
    pub fn refused(&self, connection: Option<&MemberConnection>, why: &str) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0 += 1;
        if state.1.is_some_and(|at| at.elapsed() < REFUSALS_EVERY) {
            return;
        }
        let (remote, subject) = match connection {
            Some(c) => (c.remote.map(|a| a.to_string()).unwrap_or_default(), c.subject.to_string()),
            None => (String::new(), String::new()),
        };
        let member = connection.and_then(|c| c.member);
        tracing::warn!(%remote, %subject, ?member, refused = state.0, "raft port: a caller was refused: {why}");
        *state = (0, Some(Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123";
    const NEXT: &str = "fedcba9876543210fedc";

    /// Admits the members listed.
    struct Listed(Vec<u64>);

    impl Roster for Listed {
        fn admits(&self, id: u64, _: &HeaderMap, _: bool) -> bool {
            self.0.contains(&id)
        }

        fn gone(&self, _: u64) -> Pin<Box<dyn Future<Output = ()> + Send>> {
            Box::pin(std::future::pending())
        }
    }

    fn policy(secrets: Secrets, mutual_tls: bool, members: Vec<u64>) -> MemberPolicy {
        MemberPolicy { secrets, mutual_tls, roster: Arc::new(Listed(members)), refusals: Arc::default() }
    }

    fn request(path: &str, secret: Option<&str>, member: Option<u64>) -> http::Request<()> {
        let mut r = http::Request::builder().uri(path).body(()).unwrap();
        if let Some(s) = secret {
            r.headers_mut().insert(SECRET_HEADER, s.parse().unwrap());
        }
        let connection = MemberConnection { remote: None, member, subject: "CN=test".into() };
        r.extensions_mut().insert(connection);
        r
    }

    fn secret(s: &str) -> ClusterSecret {
        ClusterSecret::new(s).unwrap()
    }

    const VOTE: &str = "/rockraft.v1.RaftService/Vote";

    #[test]
    fn only_calls_carrying_the_current_or_the_next_secret_pass_and_a_reload_changes_both() {
        let secrets = Secrets::new(Some(&secret(SECRET)), None);
        let p = policy(secrets.clone(), false, vec![]);
        assert_eq!(p.check(&request(VOTE, Some(SECRET), None), Audience::Replication).unwrap(), MemberCaller(None));
        for wrong in [None, Some(""), Some("0123456789abcdef012"), Some("0123456789abcdef01234"), Some(NEXT)] {
            let refused = p.check(&request(VOTE, wrong, None), Audience::Replication).expect_err("refused");
            assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{wrong:?}");
        }
        // A rotation: both accepted, the current one attached.
        secrets.replace(Some(&secret(SECRET)), Some(&secret(NEXT)));
        for given in [SECRET, NEXT] {
            assert!(p.check(&request(VOTE, Some(given), None), Audience::Replication).is_ok(), "{given}");
        }
        let attached = Attach::new(secrets.clone()).call(Request::new(())).unwrap();
        assert_eq!(attached.metadata().get(SECRET_HEADER).unwrap(), SECRET);
        // Its end: the old one is refused.
        secrets.replace(Some(&secret(NEXT)), None);
        assert!(p.check(&request(VOTE, Some(SECRET), None), Audience::Replication).is_err());
        assert!(p.check(&request(VOTE, Some(NEXT), None), Audience::Replication).is_ok());
        let attached = Attach::new(secrets).call(Request::new(())).unwrap();
        assert_eq!(attached.metadata().get(SECRET_HEADER).unwrap(), NEXT);
        // A node without a secret accepts anyone, and attaches nothing.
        let open = policy(Secrets::default(), false, vec![]);
        assert!(open.check(&request(VOTE, None, None), Audience::Replication).is_ok());
        assert!(Attach::default().call(Request::new(())).unwrap().metadata().get(SECRET_HEADER).is_none());
    }

    #[test]
    fn on_mutual_tls_a_call_needs_a_current_member_s_certificate_and_the_secret_as_well() {
        let p = policy(Secrets::new(Some(&secret(SECRET)), None), true, vec![1, 2]);
        let caller = p.check(&request(VOTE, Some(SECRET), Some(2)), Audience::Replication).unwrap();
        assert_eq!(caller, MemberCaller(Some(2)), "the member its certificate names");
        let not_member = p.check(&request(VOTE, Some(SECRET), Some(3)), Audience::Replication).expect_err("3");
        assert_eq!(not_member.code(), tonic::Code::PermissionDenied);
        let unnamed = p.check(&request(VOTE, Some(SECRET), None), Audience::Members).expect_err("no member named");
        assert_eq!(unnamed.code(), tonic::Code::Unauthenticated);
        let no_secret = p.check(&request(VOTE, None, Some(1)), Audience::Members).expect_err("a key alone");
        assert_eq!(no_secret.code(), tonic::Code::Unauthenticated);
        // A request that did not come over the listener's connections at all.
        let bare = http::Request::builder().uri(VOTE).body(()).unwrap();
        assert!(p.check(&bare, Audience::Replication).is_err());
    }

    #[test]
    fn short_or_unprintable_secrets_are_refused_and_a_secret_is_never_printed() {
        assert_eq!(ClusterSecret::new("short"), Err(ClusterSecretError::TooShort));
        assert_eq!(ClusterSecret::new("0123456789 abcdef"), Err(ClusterSecretError::NotPrintable));
        assert_eq!(ClusterSecret::new("0123456789abcdé0"), Err(ClusterSecretError::NotPrintable));
        let s = ClusterSecret::new("0123456789abcdef").unwrap();
        assert!(!format!("{s:?}").contains("0123"));
        assert!(!format!("{:?}", Secrets::new(Some(&s), None)).contains("0123"));
    }
}
