//! Operator requests carry a stronger signature than the official clients can send: it covers
//! the method, the time, a nonce and a hash of the request body, and each one is taken once.
//!
//! ```text
//! x-mq-date-time:            20261207T093000Z
//! x-rockraft-nonce:          <16 to 64 letters and digits, new for each request>
//! x-rockraft-content-sha256: <hex of SHA-256 of the request's HTTP/2 body: its gRPC frame>
//! authorization:             RockRaft-HMAC-SHA256 Credential=<access key>, Signature=<hex>
//! ```
//!
//! The signature is HMAC-SHA256 under the user's secret of the method's path, the time, the nonce
//! and the hash, one per line. The CLI signs so ([`SignOperator`], a layer on its channel); the
//! admin port and, for operator requests members pass on, the raft port check it
//! ([`OperatorGate`]): from the headers first (an unsigned caller's body is never read), then the
//! body against its hash, then the nonce against the ones this node took within the time window
//! ([`Replays`]). The 5.x clients' `MQv2-HMAC-SHA1` stays what the client port takes: they sign
//! only the time, to the second, and cannot be changed.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use tonic::body::Body;
use tonic::codegen::Service;
use tonic::codegen::http::{self, HeaderMap, HeaderValue};
use tonic::server::NamedService;
use tonic::{Code, Status};

use crate::auth::signature::{DATE_TIME, Refusal, parse_date_time};
use crate::auth::{Authenticator, Caller};

pub const SCHEME: &str = "RockRaft-HMAC-SHA256";
pub const NONCE: &str = "x-rockraft-nonce";
pub const CONTENT_SHA256: &str = "x-rockraft-content-sha256";
/// Set by a member that passes on one part of an operator's request (the part for one data
/// group of a request for every group): narrows it, never widens it, so it is not signed.
pub const DATA_GROUP: &str = "x-rockraft-data-group";

/// Marks a refusal of the operator (not of the member who passed the request on) in the answer
/// on the raft port: a member that gets one does not take its peer for refusing it
/// (`raft::refusals`), which would hold back replication to it for an operator's mistake.
pub const OPERATOR_REFUSAL: &str = "x-rockraft-operator-refusal";

/// The longest request body an operator signature is checked over: a plugin registration.
pub const MAX_BODY_BYTES: usize = crate::broker::plugins::MAX_MODULE_BYTES + (64 << 10) + 5;

/// Signatures remembered at once (each within its time window); beyond, operator requests are
/// refused until old ones expire. Only valid signatures are remembered.
pub const MAX_REMEMBERED: usize = 100_000;

/// The headers of an operator request's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub date_time: String,
    pub nonce: String,
    pub content_sha256: String,
    pub authorization: String,
}

fn mac(secret: &str, method: &str, date_time: &str, nonce: &str, content_sha256: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    for part in [method, date_time, nonce, content_sha256] {
        mac.update(part.as_bytes());
        mac.update(b"\n");
    }
    mac
}

/// The signature of a request to `method` (its path, `/rockraft.v1.AdminService/CreateTopic`)
/// whose body is `body`, at `now`, with `nonce`.
pub fn sign(access_key: &str, secret: &str, method: &str, body: &[u8], now: OffsetDateTime, nonce: &str) -> Signature {
    let compact = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let date_time = now.to_offset(time::UtcOffset::UTC).format(compact).expect("a UTC time formats");
    let content_sha256 = hex::encode(Sha256::digest(body));
    let signature = hex::encode(mac(secret, method, &date_time, nonce, &content_sha256).finalize().into_bytes());
    let authorization = format!("{SCHEME} Credential={access_key}, Signature={signature}");
    Signature { date_time, nonce: nonce.to_string(), content_sha256, authorization }
}

/// A new nonce: 32 hex digits from the OS's random source.
fn new_nonce() -> Result<String, crate::auth::NoRandomness> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes))?;
    Ok(hex::encode(bytes))
}

/// A signed request's parts, as read from its headers.
struct Claimed<'a> {
    access_key: &'a str,
    signature: Vec<u8>,
    date_time: &'a str,
    nonce: &'a str,
    content_sha256: [u8; 32],
    content_hex: &'a str,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn claimed(headers: &HeaderMap) -> Result<Claimed<'_>, Refusal> {
    let authorization = header(headers, crate::auth::signature::AUTHORIZATION).ok_or(Refusal::Anonymous)?;
    let rest = authorization.strip_prefix(SCHEME).ok_or(Refusal::Malformed(
        "operator requests are signed RockRaft-HMAC-SHA256 (method, time, nonce and body), as the rockraft CLI signs",
    ))?;
    let (mut access_key, mut signature) = (None, None);
    for part in rest.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => access_key = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => return Err(Refusal::Malformed("expected Credential=… and Signature=…")),
        }
    }
    let access_key = access_key.filter(|k| !k.is_empty()).ok_or(Refusal::Anonymous)?;
    let signature =
        hex::decode(signature.unwrap_or_default()).map_err(|_| Refusal::Malformed("the signature is not hex"))?;
    let date_time = header(headers, DATE_TIME).ok_or(Refusal::Malformed("x-mq-date-time is missing"))?;
    let nonce = header(headers, NONCE).ok_or(Refusal::Malformed("x-rockraft-nonce is missing"))?;
    if !(16..=64).contains(&nonce.len()) || !nonce.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(Refusal::Malformed("x-rockraft-nonce must be 16 to 64 letters and digits"));
    }
    let content_hex =
        header(headers, CONTENT_SHA256).ok_or(Refusal::Malformed("x-rockraft-content-sha256 is missing"))?;
    let content_sha256: [u8; 32] = hex::decode(content_hex)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(Refusal::Malformed("x-rockraft-content-sha256 is not 64 hex digits"))?;
    Ok(Claimed { access_key, signature, date_time, nonce, content_sha256, content_hex })
}

/// The operator signatures this node took, until their time is up: one is taken once.
#[derive(Default)]
pub struct Replays {
    /// A digest of (access key, nonce, data group narrowed to) → when it expires (Unix seconds).
    seen: Mutex<HashMap<[u8; 32], i64>>,
}

impl Replays {
    /// Takes the signature, or says it was taken before (or too many are remembered).
    fn take(&self, taken: &Taken, now: i64) -> Result<(), Status> {
        let key: [u8; 32] = Sha256::new()
            .chain_update(&taken.access_key)
            .chain_update([0])
            .chain_update(&taken.nonce)
            .chain_update([0])
            .chain_update(&taken.narrowed)
            .finalize()
            .into();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.get(&key).is_some_and(|at| *at >= now) {
            return Err(Status::unauthenticated("this signed request was taken before: sign each request anew"));
        }
        if seen.len() >= MAX_REMEMBERED {
            seen.retain(|_, at| *at >= now);
            if seen.len() >= MAX_REMEMBERED {
                return Err(Status::resource_exhausted("too many operator requests within the signature window"));
            }
        }
        seen.insert(key, taken.expires);
        Ok(())
    }
}

/// Where an [`OperatorGate`] stands, which decides what it asks of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// The admin port: every request exactly as its operator signed it, once.
    AdminPort,
    /// The raft port, where members pass operators' requests on: what members ask for themselves
    /// ([`MEMBER_READS`]) needs no operator; a read may be a page of the request its operator
    /// signed (so its body is not compared, and it may come more than once); a change must be
    /// exactly what its operator signed (or that narrowed to one data group), once.
    RaftPort,
}

/// What members ask of each other's operator service for themselves (the status page's view of
/// each member).
pub const MEMBER_READS: &[&str] = &["/rockraft.v1.AdminService/GetStatus"];

/// Whether a method only reads.
fn reads_only(path: &str) -> bool {
    let method = path.rsplit('/').next().unwrap_or_default();
    method.starts_with("Get") || method.starts_with("List")
}

/// Admits admins only, by the signature of this module (see its doc), before the request is
/// decoded. With authentication off, every request passes.
#[derive(Clone)]
pub struct OperatorGate<S> {
    inner: S,
    door: Door,
    authenticator: Arc<Authenticator>,
    replays: Arc<Replays>,
}

impl<S> OperatorGate<S> {
    pub fn new(inner: S, door: Door, authenticator: Arc<Authenticator>, replays: Arc<Replays>) -> OperatorGate<S> {
        OperatorGate { inner, door, authenticator, replays }
    }
}

impl<S: NamedService> NamedService for OperatorGate<S> {
    const NAME: &'static str = S::NAME;
}

/// What a request's headers prove, before its body is read.
struct Verified {
    caller: Caller,
    /// The body's hash to compare, and the signature to take once, if this request needs them.
    content_sha256: Option<[u8; 32]>,
    replay: Option<Taken>,
}

/// A signature [`Replays`] takes once: whose, its nonce, the data group it was narrowed to, and
/// when its window ends (Unix seconds).
struct Taken {
    access_key: String,
    nonce: String,
    narrowed: String,
    expires: i64,
}

/// How far an operator signature's time may be from this node's clock: the configured skew, or
/// with that 0 (not checked for the official clients) the default, since a signature must expire
/// for its nonce to be forgotten.
fn window(configured: Duration) -> Duration {
    if configured.is_zero() { Duration::from_secs(DEFAULT_WINDOW_SECS) } else { configured }
}

/// [`window`] when the skew is not checked.
const DEFAULT_WINDOW_SECS: u64 = 900;

impl<S> OperatorGate<S> {
    fn verify(&self, request: &http::Request<Body>) -> Result<Verified, Status> {
        let path = request.uri().path();
        let open = Verified { caller: Caller::Open, content_sha256: None, replay: None };
        if !self.authenticator.enabled() || (self.door == Door::RaftPort && MEMBER_READS.contains(&path)) {
            return Ok(open);
        }
        let refused = |why: Refusal| Status::unauthenticated(why.to_string());
        let claimed = claimed(request.headers()).map_err(refused)?;
        let (secret, admin) =
            self.authenticator.credential(claimed.access_key).ok_or(Refusal::UnknownAccessKey).map_err(refused)?;
        let mac = mac(&secret, path, claimed.date_time, claimed.nonce, claimed.content_hex);
        mac.verify_slice(&claimed.signature).map_err(|_| refused(Refusal::BadSignature))?;
        let signed_at = parse_date_time(claimed.date_time)
            .ok_or(Refusal::Malformed("x-mq-date-time is not a date"))
            .map_err(refused)?;
        let now = OffsetDateTime::now_utc();
        let window = window(self.authenticator.max_skew());
        let by_secs = (signed_at - now).whole_seconds();
        if by_secs.unsigned_abs() > window.as_secs() {
            return Err(refused(Refusal::Skewed { by_secs, max_secs: window.as_secs() }));
        }
        if !admin {
            return Err(Status::permission_denied(format!("{} is not an admin", claimed.access_key)));
        }
        let caller = Caller::User { access_key: claimed.access_key.into(), admin };
        if self.door == Door::RaftPort && reads_only(path) {
            return Ok(Verified { caller, content_sha256: None, replay: None });
        }
        let narrowed = header(request.headers(), DATA_GROUP).unwrap_or_default().to_string();
        let expires = (signed_at + window).unix_timestamp();
        let replay =
            Taken { access_key: claimed.access_key.to_string(), nonce: claimed.nonce.to_string(), narrowed, expires };
        Ok(Verified { caller, content_sha256: Some(claimed.content_sha256), replay: Some(replay) })
    }
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S> Service<http::Request<Body>> for OperatorGate<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<http::Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // The service that was polled ready serves this call; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let verified = self.verify(&request);
        let replays = Arc::clone(&self.replays);
        let door = self.door;
        let refused = move |status: Status| {
            let mut answer = status.into_http::<Body>();
            if door == Door::RaftPort {
                answer.headers_mut().insert(OPERATOR_REFUSAL, HeaderValue::from_static("1"));
            }
            answer
        };
        Box::pin(async move {
            let Verified { caller, content_sha256, replay } = match verified {
                Ok(v) => v,
                Err(status) => return Ok(refused(status)),
            };
            let (mut parts, body) = request.into_parts();
            let body = match content_sha256 {
                None => body,
                Some(expected) => {
                    let read = http_body_util::Limited::new(body, MAX_BODY_BYTES).collect().await;
                    let bytes: Bytes = match read {
                        Ok(collected) => collected.to_bytes(),
                        Err(_) => {
                            return Ok(refused(Status::new(
                                Code::ResourceExhausted,
                                "the request body is too large or broken",
                            )));
                        }
                    };
                    if Sha256::digest(&bytes).as_slice() != expected {
                        // Passed on by a member, the body was decoded and encoded again: one that
                        // does not come back the same (unknown fields, a field twice) is the
                        // request's own fault, not its signature's.
                        return Ok(refused(match door {
                            Door::AdminPort => Status::unauthenticated("the request body is not the one signed"),
                            Door::RaftPort => Status::invalid_argument(
                                "the request passed on is not the one signed: a request whose body has unknown \
                                 fields or a field twice is not the same once decoded; send it to the leader",
                            ),
                        }));
                    }
                    Body::new(http_body_util::Full::new(bytes))
                }
            };
            if let Some(taken) = replay {
                let now = OffsetDateTime::now_utc().unix_timestamp();
                if let Err(status) = replays.take(&taken, now) {
                    return Ok(refused(status));
                }
            }
            parts.extensions.insert(caller);
            inner.call(http::Request::from_parts(parts, body)).await
        })
    }
}

/// Signs each request passing through with this module's signature (`None`: passes requests
/// unsigned): a layer on the CLI's channel. Operator requests are unary, so the body is read
/// whole to be hashed.
#[derive(Clone)]
pub struct SignOperator<S> {
    inner: S,
    credentials: Option<(String, crate::broker::access::Secret)>,
}

impl<S> SignOperator<S> {
    pub fn new(inner: S, credentials: Option<(String, crate::broker::access::Secret)>) -> SignOperator<S> {
        SignOperator { inner, credentials }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S> Service<http::Request<Body>> for SignOperator<S>
where
    S: Service<http::Request<Body>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let credentials = self.credentials.clone();
        Box::pin(async move {
            let Some((access_key, secret)) = credentials else { return inner.call(request).await.map_err(Into::into) };
            let (mut parts, body) = request.into_parts();
            let bytes = body.collect().await.map(|c| c.to_bytes())?;
            let nonce = new_nonce()?;
            let signed =
                sign(&access_key, secret.expose(), parts.uri.path(), &bytes, OffsetDateTime::now_utc(), &nonce);
            let value = |v: String| -> Result<HeaderValue, BoxError> {
                HeaderValue::try_from(v)
                    .map_err(|_| Status::invalid_argument("credentials must be printable ASCII").into())
            };
            parts.headers.insert(DATE_TIME, value(signed.date_time)?);
            parts.headers.insert(NONCE, value(signed.nonce)?);
            parts.headers.insert(CONTENT_SHA256, value(signed.content_sha256)?);
            parts.headers.insert(crate::auth::signature::AUTHORIZATION, value(signed.authorization)?);
            inner
                .call(http::Request::from_parts(parts, Body::new(http_body_util::Full::new(bytes))))
                .await
                .map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthConfig;
    use crate::broker::access::Secret;

    /// Answers every request it gets with OK, after reading its body.
    #[derive(Clone)]
    struct Served;

    impl Service<http::Request<Body>> for Served {
        type Response = http::Response<Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Result<http::Response<Body>, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Body>) -> Self::Future {
            Box::pin(async move {
                let _ = request.into_body().collect().await;
                Ok(Status::ok("served").into_http())
            })
        }
    }

    const CREATE: &str = "/rockraft.v1.AdminService/CreateUser";
    const LIST: &str = "/rockraft.v1.AdminService/ListUsers";

    struct Fixture {
        admin_port: OperatorGate<Served>,
        raft_port: OperatorGate<Served>,
        _dir: tempfile::TempDir,
    }

    fn fixture(enabled: bool) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut n = crate::broker::state_test::node(dir.path());
        let user = crate::broker::access::AccessCommand::PutUser {
            access_key: "reader".into(),
            secret: Secret::new("reader-secret"),
            admin: false,
            create: true,
        };
        n.commit(&crate::broker::Command::Access(user));
        let config = AuthConfig {
            enabled,
            admin_access_key: Some("root".into()),
            admin_secret_key: Some(Secret::new("root-secret")),
            ..Default::default()
        };
        let authenticator = Authenticator::new(config, n.broker.clone());
        let replays = Arc::new(Replays::default());
        Fixture {
            admin_port: OperatorGate::new(Served, Door::AdminPort, Arc::clone(&authenticator), Arc::clone(&replays)),
            raft_port: OperatorGate::new(Served, Door::RaftPort, authenticator, replays),
            _dir: dir,
        }
    }

    fn request(method: &str, body: &[u8], signature: Option<&Signature>) -> http::Request<Body> {
        let mut builder = http::Request::builder().uri(method);
        if let Some(s) = signature {
            builder = builder
                .header(DATE_TIME, &s.date_time)
                .header(NONCE, &s.nonce)
                .header(CONTENT_SHA256, &s.content_sha256)
                .header(crate::auth::signature::AUTHORIZATION, &s.authorization);
        }
        builder.body(Body::new(http_body_util::Full::new(Bytes::copy_from_slice(body)))).unwrap()
    }

    async fn code(gate: &mut OperatorGate<Served>, request: http::Request<Body>) -> Code {
        let response = gate.call(request).await.unwrap();
        Status::from_header_map(response.headers()).map_or(Code::Ok, |s| s.code())
    }

    fn signed(key: &str, secret: &str, method: &str, body: &[u8], nonce: &str) -> Signature {
        sign(key, secret, method, body, OffsetDateTime::now_utc(), nonce)
    }

    #[tokio::test]
    async fn an_admin_s_request_is_taken_once_exactly_as_signed() {
        let mut f = fixture(true);
        let body = b"\0\0\0\0\x05hello";
        let root = signed("root", "root-secret", CREATE, body, "0123456789abcdef0");
        assert_eq!(code(&mut f.admin_port, request(CREATE, body, Some(&root))).await, Code::Ok);
        // The same request again, on either door of this node: a replay.
        assert_eq!(code(&mut f.admin_port, request(CREATE, body, Some(&root))).await, Code::Unauthenticated);
        assert_eq!(code(&mut f.raft_port, request(CREATE, body, Some(&root))).await, Code::Unauthenticated);
        // Another body, or another method, under a signature made for this one.
        let fresh = signed("root", "root-secret", CREATE, body, "0123456789abcdef1");
        assert_eq!(
            code(&mut f.admin_port, request(CREATE, b"\0\0\0\0\x05world", Some(&fresh))).await,
            Code::Unauthenticated
        );
        let other = "/rockraft.v1.AdminService/DeleteUser";
        assert_eq!(code(&mut f.admin_port, request(other, body, Some(&fresh))).await, Code::Unauthenticated);
        // A wrong secret, a non-admin, an unsigned caller, the official clients' signature.
        let wrong = signed("root", "not-the-secret", CREATE, body, "0123456789abcdef2");
        assert_eq!(code(&mut f.admin_port, request(CREATE, body, Some(&wrong))).await, Code::Unauthenticated);
        let reader = signed("reader", "reader-secret", CREATE, body, "0123456789abcdef3");
        assert_eq!(code(&mut f.admin_port, request(CREATE, body, Some(&reader))).await, Code::PermissionDenied);
        assert_eq!(code(&mut f.admin_port, request(CREATE, body, None)).await, Code::Unauthenticated);
        let (date, v1) = crate::auth::signature::sign("root", "root-secret", OffsetDateTime::now_utc());
        let mut official = request(CREATE, body, None);
        official.headers_mut().insert(DATE_TIME, date.parse().unwrap());
        official.headers_mut().insert(crate::auth::signature::AUTHORIZATION, v1.parse().unwrap());
        assert_eq!(code(&mut f.admin_port, official).await, Code::Unauthenticated);
        // A time outside the window.
        let old = OffsetDateTime::now_utc() - time::Duration::hours(1);
        let stale = sign("root", "root-secret", CREATE, body, old, "0123456789abcdef4");
        assert_eq!(code(&mut f.admin_port, request(CREATE, body, Some(&stale))).await, Code::Unauthenticated);
    }

    #[tokio::test]
    async fn an_unsigned_caller_s_body_is_never_read() {
        let mut f = fixture(true);
        // A body that never ends: reading it would never return.
        let (_tx, rx) = tokio::sync::mpsc::channel::<Result<hyper::body::Frame<Bytes>, Status>>(1);
        let endless = Body::new(http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)));
        let request = http::Request::builder().uri(CREATE).body(endless).unwrap();
        let answered = tokio::time::timeout(Duration::from_secs(5), code(&mut f.admin_port, request)).await;
        assert_eq!(answered, Ok(Code::Unauthenticated));
    }

    #[tokio::test]
    async fn on_the_raft_port_a_member_s_own_read_needs_no_operator_and_a_change_may_be_narrowed_to_each_group_once() {
        let mut f = fixture(true);
        let status = "/rockraft.v1.AdminService/GetStatus";
        assert_eq!(code(&mut f.raft_port, request(status, b"", None)).await, Code::Ok);
        assert_eq!(code(&mut f.admin_port, request(status, b"", None)).await, Code::Unauthenticated);
        // A page of a signed read: another body, more than once.
        let list = signed("root", "root-secret", LIST, b"page 1", "0123456789abcdef5");
        for _ in 0..2 {
            assert_eq!(code(&mut f.raft_port, request(LIST, b"page 2", Some(&list))).await, Code::Ok);
        }
        // A change for every group, passed on narrowed to each: each part once.
        let body = b"\0\0\0\0\x01x";
        let reset = "/rockraft.v1.AdminService/ResetOffset";
        let signature = signed("root", "root-secret", reset, body, "0123456789abcdef6");
        let part = |group: u32| {
            let mut r = request(reset, body, Some(&signature));
            r.headers_mut().insert(DATA_GROUP, group.into());
            r
        };
        assert_eq!(code(&mut f.raft_port, part(1)).await, Code::Ok);
        assert_eq!(code(&mut f.raft_port, part(2)).await, Code::Ok);
        assert_eq!(code(&mut f.raft_port, part(2)).await, Code::Unauthenticated, "the same part twice");
    }

    #[tokio::test]
    async fn with_authentication_off_every_request_passes() {
        let mut f = fixture(false);
        assert_eq!(code(&mut f.admin_port, request(CREATE, b"x", None)).await, Code::Ok);
    }

    #[tokio::test]
    async fn the_signing_layer_signs_what_the_gate_takes() {
        let f = fixture(true);
        let credentials = Some(("root".to_string(), Secret::new("root-secret")));
        let mut client = SignOperator::new(f.admin_port.clone(), credentials);
        for _ in 0..2 {
            let response = client.call(request(CREATE, b"\0\0\0\0\x01y", None)).await.unwrap();
            assert!(
                Status::from_header_map(response.headers()).is_none_or(|s| s.code() == Code::Ok),
                "a new nonce each time"
            );
        }
        let mut wrong = SignOperator::new(f.admin_port.clone(), Some(("root".to_string(), Secret::new("wrong"))));
        let response = wrong.call(request(CREATE, b"y", None)).await.unwrap();
        assert_eq!(Status::from_header_map(response.headers()).map(|s| s.code()), Some(Code::Unauthenticated));
    }
}
