//! The node's HTTP listener (`http_addr`), for people and monitoring, read-only:
//! - `/`: the status page (`page.rs`): members and roles, the leader and its term, topics,
//!   groups, plugins and recent leadership changes; plain HTML that refreshes itself;
//! - `/metrics`: every metric in the Prometheus text format (counters from `metrics`, the rest
//!   read from the node's state at each scrape: `scrape.rs`);
//! - `/healthz`: the process serves; `/readyz`: it follows a leader and has applied what that
//!   leader had committed, so it can answer clients (503 otherwise).
//!
//! The listener is open to whoever reaches it, so it bounds what a caller can hold: a request's
//! headers must arrive within [`Limits::header_read`] (no slowloris), a connection lives at most
//! [`Limits::lifetime`], busy or idle, and at most [`Limits::connections`] are served at once.
//! Beyond that, a connection is answered at once and closed ([`answer_over_cap`]): `/healthz`
//! with `ok` (so a probe never takes a node that serves for a dead one because others hold every
//! connection), anything else with 503; at most [`OVER_CAP`] such answers are under way, and
//! more connections wait in the listen backlog. The status page gathers its data at most once a
//! second however many ask (`page::Cached`).

mod page;
mod scrape;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use crate::admin::api::NodeStatus;
use crate::admin::{AdminParts, AdminServer, NodeConfig};
use crate::cluster::Cluster;
use crate::store::LogReader;

/// How long the page waits for another member's status before it shows the member as not
/// answering.
const MEMBER_WAIT: Duration = Duration::from_millis(700);

/// What the listener lets one caller hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub connections: usize,
    /// The most a request's headers may take to arrive.
    pub header_read: Duration,
    /// The longest a connection is kept, busy or idle (pages and scrapers reconnect).
    pub lifetime: Duration,
}

impl Limits {
    pub const DEFAULT: Limits =
        Limits { connections: 256, header_read: Duration::from_secs(5), lifetime: Duration::from_secs(60) };
}

/// How long connections in flight get to finish once the node stops.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Connections answered at once while every slot is taken (see the module's doc), and how long
/// such a connection has to send its request line.
const OVER_CAP: usize = 32;
const OVER_CAP_READ: Duration = Duration::from_secs(1);

/// Pause after a failed accept (out of file descriptors, most likely) before the next.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    cluster: Cluster,
    parts: AdminParts,
    admin: AdminServer,
    log: LogReader,
    data_dir: PathBuf,
    /// What `allow_insecure` let through: shown in red on every page.
    insecure: Vec<String>,
    /// The status page's data, gathered at most once a second.
    page: Arc<page::Cached>,
}

impl HttpState {
    pub fn new(cluster: Cluster, parts: AdminParts, config: std::sync::Arc<NodeConfig>, log: LogReader) -> HttpState {
        let data_dir = config.data_dir.clone();
        let insecure = config.insecure_listeners();
        let page = Arc::new(page::Cached::default());
        let admin = AdminServer::new(cluster.clone(), parts.clone(), config);
        HttpState { admin, cluster, parts, log, data_dir, insecure, page }
    }

    /// Every member's status as it reports it (this node's own without a call), `None` for a
    /// member that did not answer in time.
    async fn members(&self, own: &NodeStatus) -> Vec<(u64, String, Option<NodeStatus>)> {
        let asks = own.members.iter().map(|m| async move {
            if m.id == own.id {
                return (m.id, m.client_addr.clone(), Some(own.clone()));
            }
            let status = async {
                use rockraft_proto::rockraft as pb;
                let channel = self.cluster.member_channel(&m.raft_addr).ok()?;
                let mut member = pb::admin_service_client::AdminServiceClient::new(channel);
                let reply = member.get_status(pb::GetStatusRequest::default()).await.ok()?;
                NodeStatus::try_from(reply.into_inner()).ok()
            };
            (m.id, m.client_addr.clone(), tokio::time::timeout(MEMBER_WAIT, status).await.ok().flatten())
        });
        futures_util::future::join_all(asks).await
    }
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(state)
}

/// Serves the pages on `listener` until `stop` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_bounded(listener, router(state), Limits::DEFAULT, stop).await;
    Ok(())
}

/// Serves `app` on `listener` within `limits` until `stop` resolves; then gives the connections
/// in flight [`STOP_GRACE`] to finish.
async fn serve_bounded(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: Limits,
    stop: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let service = hyper_util::service::TowerToHyperService::new(app);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read);
    let mut failed_accepts = 0u64;
    tokio::pin!(stop);
    let over_cap = Arc::new(tokio::sync::Semaphore::new(OVER_CAP));
    loop {
        // Something to do with a connection before an accept: a slot, or (every slot taken) one
        // of the quick answers; with neither, connections wait in the backlog.
        let slot = tokio::select! {
            biased;
            _ = &mut stop => break,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => Ok(slot),
                Err(_) => break,
            },
            quick = Arc::clone(&over_cap).acquire_owned() => match quick {
                Ok(quick) => Err(quick),
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    failed_accepts += 1;
                    // Logged at the first failure and then every thousandth.
                    if failed_accepts % 1000 == 1 {
                        tracing::warn!(error = %e, failed_accepts, "the HTTP listener could not accept a connection");
                    }
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                    continue;
                }
            },
        };
        let slot = match slot {
            Ok(slot) => slot,
            Err(quick) => {
                tokio::spawn(async move {
                    let _quick = quick;
                    answer_over_cap(stream).await;
                });
                continue;
            }
        };
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service.clone()));
        tokio::spawn(async move {
            let _slot = slot;
            // Errors (a client gone, headers too slow) end only that connection.
            let _ = tokio::time::timeout(limits.lifetime, connection).await;
        });
    }
    let _ = tokio::time::timeout(STOP_GRACE, graceful.shutdown()).await;
}

/// A connection taken while every slot is: `/healthz` is answered `ok`, anything else 503, and
/// the connection closed; a request line that does not come within [`OVER_CAP_READ`] gets
/// nothing.
async fn answer_over_cap(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = [0u8; 64];
    let mut read = 0;
    let line_read = tokio::time::timeout(OVER_CAP_READ, async {
        while read < head.len() && !head[..read].contains(&b'\n') {
            match stream.read(&mut head[read..]).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => read += n,
            }
        }
        true
    })
    .await;
    if !matches!(line_read, Ok(true)) {
        return;
    }
    let answer: &[u8] = match head.starts_with(b"GET /healthz ") {
        true => b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n",
        false => b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 5\r\nconnection: close\r\n\r\nbusy\n",
    };
    let _ = tokio::time::timeout(OVER_CAP_READ, stream.write_all(answer)).await;
}

async fn metrics(State(state): State<HttpState>) -> Response {
    let mut text = String::new();
    let encoded = state.parts.meters.encode(&mut text).and_then(|()| scrape::encode(&state, &mut text));
    match encoded {
        Ok(()) => {
            ([(header::CONTENT_TYPE, prometheus_client::encoding::prometheus_text::CONTENT_TYPE)], text).into_response()
        }
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "metrics could not be encoded\n").into_response(),
    }
}

async fn ready(State(state): State<HttpState>) -> Response {
    let m = state.cluster.status();
    let why = match (m.leader, m.applied, m.committed) {
        (None, ..) => Some("no leader known".to_string()),
        (Some(_), applied, committed) if applied < committed => {
            Some(format!("applying: {} of {} committed", applied.unwrap_or(0), committed.unwrap_or(0)))
        }
        _ => None,
    };
    match why {
        None => (StatusCode::OK, "ready\n".to_string()).into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response(),
    }
}

async fn status_page(State(state): State<HttpState>, RawQuery(query): RawQuery) -> Html<String> {
    let view = state.page.get(|| page::View::gather(&state)).await;
    Html(page::render(&view, &page::At::parse(query.as_deref())))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// A generous bound for what must happen "soon": no test asserts on time beyond it.
    const EVENTUALLY: Duration = Duration::from_secs(20);

    async fn listening(limits: Limits) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", get(|| async { "ok\n" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve_bounded(listener, app, limits, async move {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    /// Everything the server sends until it closes the connection, or `None` if it has not
    /// closed it within [`EVENTUALLY`].
    async fn until_closed(stream: &mut TcpStream) -> Option<String> {
        let mut out = Vec::new();
        match tokio::time::timeout(EVENTUALLY, stream.read_to_end(&mut out)).await {
            Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
            Err(_) => None,
        }
    }

    #[tokio::test]
    async fn a_request_whose_headers_never_end_is_closed() {
        let limits = Limits { header_read: Duration::from_millis(200), ..Limits::DEFAULT };
        let (addr, _stop) = listening(limits).await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.unwrap();
        let answer = until_closed(&mut slow).await.expect("the connection is closed");
        assert!(!answer.contains("ok"), "nothing is served: {answer:?}");
        // The listener itself still serves.
        let mut fine = TcpStream::connect(addr).await.unwrap();
        fine.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        assert!(until_closed(&mut fine).await.expect("answered").ends_with("ok\n"));
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_at_the_end_of_its_lifetime() {
        let limits = Limits { lifetime: Duration::from_millis(300), ..Limits::DEFAULT };
        let (addr, _stop) = listening(limits).await;
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        // Kept alive after its answer, then closed.
        let answer = until_closed(&mut idle).await.expect("the connection is closed");
        assert!(answer.ends_with("ok\n"), "{answer:?}");
    }

    #[tokio::test]
    async fn beyond_the_cap_healthz_is_answered_at_once_and_the_rest_is_told_to_come_back() {
        let limits = Limits { connections: 2, header_read: Duration::from_secs(60), ..Limits::DEFAULT };
        let (addr, _stop) = listening(limits).await;
        let holding = [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
        let mut probe = TcpStream::connect(addr).await.unwrap();
        probe.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let answer = until_closed(&mut probe).await.expect("answered and closed while the cap is held");
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok\n"), "{answer:?}");
        let mut page = TcpStream::connect(addr).await.unwrap();
        page.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let answer = until_closed(&mut page).await.expect("answered and closed while the cap is held");
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
        // A connection that sends nothing is closed too.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        assert_eq!(until_closed(&mut silent).await.as_deref(), Some(""), "closed, unanswered");
        drop(holding);
        // Slots free again: served as usual.
        let mut fine = TcpStream::connect(addr).await.unwrap();
        fine.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        assert!(until_closed(&mut fine).await.expect("answered").ends_with("ok\n"));
    }
}
