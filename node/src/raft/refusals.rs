//! Members that refuse this node: a peer that answers `UNAUTHENTICATED` or `PERMISSION_DENIED`
//! (another cluster secret), or whose TLS handshake fails (a certificate from another CA, or one
//! that does not name the address dialled), is not a member this node can work with until its
//! configuration changes. Calling it again at once only burns CPU and fills the log.
//!
//! Every channel to a member goes through a [`Gated`] service sharing one [`Gate`] per address
//! (raft replication and heartbeats, the peer calls, the clock and disk readings, the status
//! page): after a refusal, calls to that member fail at once, without touching the network,
//! until its back-off ends (100 ms, doubling up to 5 s); then one call goes out. Any answer that
//! is not a refusal opens the gate again.
//!
//! The log says once when a member starts refusing (warn: its address, id and the reason, never
//! a secret), once when it stops, and otherwise at most once a minute with the count since.
//! `/metrics` and the status page show who refuses us ([`Refusals::report`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;
use tonic::codegen::http;

use crate::raft::NodeId;

/// The first pause after a refusal; it doubles with each further one.
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two tries at a refusing member.
pub const MAX_PAUSE: Duration = Duration::from_secs(5);
/// While a member goes on refusing, the log says so at most this often.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every member's gate, by raft address. Clones share the gates.
#[derive(Clone, Default)]
pub struct Refusals {
    gates: Arc<Mutex<HashMap<String, Arc<Gate>>>>,
}

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.report()).finish()
    }
}

/// What `/metrics` and the status page show of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalReport {
    pub addr: String,
    /// Why it refuses us now; `None` when it does not.
    pub refusing: Option<String>,
    /// Refusals since this node started.
    pub total: u64,
}

impl Refusals {
    /// The gate of the member at `addr`, made on first use.
    pub fn gate(&self, addr: &str) -> Arc<Gate> {
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(gates.entry(addr.to_string()).or_insert_with(|| Arc::new(Gate::new(addr))))
    }

    /// Names the member at `addr` in what the log says of it.
    pub fn name(&self, addr: &str, id: NodeId) {
        self.gate(addr).state().id = Some(id);
    }

    /// Every member this node has called, by address.
    pub fn report(&self) -> Vec<RefusalReport> {
        let gates: Vec<Arc<Gate>> = self.gates.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let mut out: Vec<RefusalReport> = gates
            .iter()
            .map(|g| {
                let s = g.state();
                RefusalReport {
                    addr: g.addr.clone(),
                    refusing: s.refusing.as_ref().map(|r| r.reason.clone()),
                    total: s.total,
                }
            })
            .collect();
        out.sort_by(|a, b| a.addr.cmp(&b.addr));
        out
    }

    /// Why the member at `addr` refuses us, if it does.
    pub fn refusing(&self, addr: &str) -> Option<String> {
        let gate = self.gates.lock().unwrap_or_else(|p| p.into_inner()).get(addr).cloned()?;
        gate.state().refusing.as_ref().map(|r| r.reason.clone())
    }
}

/// One member's refusals.
pub struct Gate {
    addr: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    id: Option<NodeId>,
    refusing: Option<Refusing>,
    total: u64,
    /// When the log last said this member could not be reached, and whether it has been reached
    /// since (openraft's own line per failed call is turned down: see `cli::run`).
    unreachable_logged: Option<Instant>,
    reached_since: bool,
}

struct Refusing {
    reason: String,
    pause: Duration,
    /// No call goes out before then.
    next_try: Instant,
    /// Refusals the log has not counted yet, and when it last spoke of this member.
    unlogged: u64,
    logged_at: Instant,
}

impl Gate {
    fn new(addr: &str) -> Gate {
        Gate { addr: addr.to_string(), state: Mutex::default() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn who(&self, id: Option<NodeId>) -> String {
        match id {
            Some(id) => format!("member {id} at {}", self.addr),
            None => format!("the member at {}", self.addr),
        }
    }

    /// Whether a call may go out now; if not, why, and when the next may. When a refusing
    /// member's pause is over, this call is the one try: the next waits out another pause.
    pub fn admit(&self) -> Result<(), (String, Instant)> {
        let mut s = self.state();
        let Some(r) = s.refusing.as_mut() else { return Ok(()) };
        let now = Instant::now();
        if now < r.next_try {
            return Err((r.reason.clone(), r.next_try));
        }
        r.next_try = now + r.pause;
        Ok(())
    }

    /// When the next call to this member may go out (`None`: now).
    pub fn next_try(&self) -> Option<Instant> {
        self.state().refusing.as_ref().map(|r| r.next_try).filter(|at| *at > Instant::now())
    }

    /// The member refused a call.
    pub fn refused(&self, reason: String) {
        let mut s = self.state();
        s.total += 1;
        let now = Instant::now();
        let who = self.who(s.id);
        match s.refusing.as_mut() {
            None => {
                tracing::warn!(
                    "{who} refuses this node: {reason}; calls to it are retried with back-off (up to {MAX_PAUSE:?}) \
                     until it accepts us (another cluster secret, or a certificate not signed by the cluster's CA \
                     or not naming its address?)"
                );
                s.refusing = Some(Refusing {
                    reason,
                    pause: FIRST_PAUSE,
                    next_try: now + FIRST_PAUSE,
                    unlogged: 0,
                    logged_at: now,
                });
            }
            Some(r) => {
                r.pause = (r.pause * 2).min(MAX_PAUSE);
                r.next_try = now + r.pause;
                r.unlogged += 1;
                r.reason = reason;
                if now.duration_since(r.logged_at) >= LOG_EVERY {
                    tracing::warn!(
                        "{who} still refuses this node: {} refusals in the last {:?}; {}",
                        r.unlogged,
                        now.duration_since(r.logged_at),
                        r.reason
                    );
                    r.unlogged = 0;
                    r.logged_at = now;
                }
            }
        }
    }

    /// The member answered a call without refusing it.
    pub fn answered(&self) {
        let mut s = self.state();
        if let Some(r) = s.refusing.take() {
            tracing::info!(
                "{} accepts this node again ({} refusals since the last report)",
                self.who(s.id),
                r.unlogged + 1
            );
        }
        if !s.reached_since && s.unreachable_logged.is_some() {
            tracing::info!("{} answers again", self.who(s.id));
        }
        s.reached_since = true;
    }

    /// A call to the member got no answer (no connection, or it broke): said once, and again at
    /// most once a minute while it lasts.
    fn unreachable(&self, why: &(dyn std::error::Error + 'static)) {
        let mut s = self.state();
        let now = Instant::now();
        if s.reached_since || s.unreachable_logged.is_none_or(|at| now.duration_since(at) >= LOG_EVERY) {
            let mut reason = why.to_string();
            let mut source = why.source();
            while let Some(e) = source {
                reason = format!("{reason}: {e}");
                source = e.source();
            }
            tracing::warn!("{} does not answer: {reason}", self.who(s.id));
            s.unreachable_logged = Some(now);
            s.reached_since = false;
        }
    }

    /// What a call's outcome says of the member: a refusal, an answer, or nothing (it could not
    /// be reached, which is not this gate's business).
    fn observe<B>(&self, outcome: &Result<http::Response<B>, BoxError>) {
        match outcome {
            // An operator's request refused on the member's raft port refuses the operator, not
            // this node.
            Ok(response) if response.headers().contains_key(crate::auth::operator::OPERATOR_REFUSAL) => self.answered(),
            Ok(response) => match tonic::Status::from_header_map(response.headers()) {
                Some(status)
                    if matches!(status.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied) =>
                {
                    self.refused(format!("{:?}: {}", status.code(), status.message()))
                }
                _ => self.answered(),
            },
            Err(e) => match tls_failure(e.as_ref()) {
                Some(tls) => self.refused(format!("TLS handshake failed: {tls}")),
                None => self.unreachable(e.as_ref()),
            },
        }
    }
}

/// The TLS error somewhere in `e`'s causes, if any. I/O errors wrap TLS errors without exposing
/// them as their `source`, so those are looked into too.
fn tls_failure<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref())
            && let Some(tls) = tls_failure(inner)
        {
            return Some(tls);
        }
        next = e.source();
    }
    None
}

/// A channel to one member that goes through its [`Gate`].
#[derive(Clone)]
pub struct Gated<S> {
    inner: S,
    gate: Arc<Gate>,
}

impl<S> Gated<S> {
    pub fn new(inner: S, gate: Arc<Gate>) -> Gated<S> {
        Gated { inner, gate }
    }
}

impl<S, ReqBody, ResBody> tonic::codegen::Service<http::Request<ReqBody>> for Gated<S>
where
    S: tonic::codegen::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        if let Err((reason, next_try)) = self.gate.admit() {
            let wait = next_try.saturating_duration_since(Instant::now());
            let status = tonic::Status::unauthenticated(format!(
                "{} refuses this node ({reason}); not tried again for {wait:?}",
                self.gate.addr
            ));
            return Box::pin(std::future::ready(Err(Box::new(status) as BoxError)));
        }
        let call = self.inner.call(request);
        let gate = Arc::clone(&self.gate);
        Box::pin(async move {
            let outcome = call.await.map_err(Into::into);
            gate.observe(&outcome);
            outcome
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal() -> Result<http::Response<()>, BoxError> {
        Ok(tonic::Status::unauthenticated("not a member of this cluster").into_http())
            .map(|r: http::Response<tonic::body::Body>| r.map(|_| ()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusing_member_is_tried_again_after_doubling_pauses_and_at_once_after_it_answers() {
        let refusals = Refusals::default();
        let gate = refusals.gate("127.0.0.1:9082");
        assert!(gate.admit().is_ok());
        gate.observe(&refusal());
        assert_eq!(
            refusals.refusing("127.0.0.1:9082").as_deref(),
            Some("Unauthenticated: not a member of this cluster")
        );
        // Tries go out only after each pause; the pause doubles up to its cap.
        let mut pauses = Vec::new();
        let mut last = Instant::now();
        for _ in 0..10 {
            while gate.admit().is_err() {
                tokio::time::advance(Duration::from_millis(10)).await;
            }
            pauses.push(Instant::now() - last);
            last = Instant::now();
            // Others calling meanwhile wait for this try's outcome.
            assert!(gate.admit().is_err());
            gate.observe(&refusal());
        }
        assert!(pauses[0] >= FIRST_PAUSE && pauses[1] >= FIRST_PAUSE * 2 && pauses[2] >= FIRST_PAUSE * 4, "{pauses:?}");
        assert!(pauses.iter().all(|p| *p <= MAX_PAUSE + Duration::from_millis(10)), "{pauses:?}");
        assert!(pauses[9] >= MAX_PAUSE, "{pauses:?}");
        assert_eq!(refusals.report()[0].total, 11);
        // An answer that is not a refusal (here a plain error) opens the gate for every caller.
        while gate.admit().is_err() {
            tokio::time::advance(Duration::from_millis(10)).await;
        }
        let answer: http::Response<tonic::body::Body> = tonic::Status::not_found("no such thing").into_http();
        gate.observe(&Ok(answer));
        assert!(gate.admit().is_ok() && gate.admit().is_ok());
        assert_eq!(refusals.refusing("127.0.0.1:9082"), None);
        assert_eq!(refusals.report(), vec![RefusalReport { addr: "127.0.0.1:9082".into(), refusing: None, total: 11 }]);
    }

    #[test]
    fn a_tls_error_is_found_behind_the_errors_that_wrap_it() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, tls.clone());
        #[derive(Debug)]
        struct Wrapper(std::io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("transport error")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let wrapped: BoxError = Box::new(Wrapper(io));
        assert_eq!(tls_failure(wrapped.as_ref()), Some(&tls));
        let refused: BoxError = Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(tls_failure(refused.as_ref()), None);
        // A member that cannot be reached is not taken for one that refuses.
        let gate = Gate::new("a:1");
        gate.observe::<()>(&Err(refused));
        assert!(gate.admit().is_ok());
        gate.observe::<()>(&Err(wrapped));
        assert!(gate.admit().is_err());
    }
}
