//! The node's HTTP listener (`http_addr`), for people and monitoring, read-only:
//! - `/`: the status page (`page.rs`): members and roles, the leader and its term, topics,
//!   groups, plugins and recent leadership changes; plain HTML that refreshes itself;
//! - `/metrics`: every metric in the Prometheus text format (counters from `metrics`, the rest
//!   read from the node's state at each scrape: `scrape.rs`);
//! - `/healthz`: the process serves; `/readyz`: it follows a leader and has applied what that
//!   leader had committed, so it can answer clients (503 otherwise).

mod page;
mod scrape;

use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use crate::admin::api::{AdminRequest, AdminResponse, NodeStatus};
use crate::admin::{AdminServer, NodeConfig};
use crate::cluster::Cluster;
use crate::store::LogReader;

/// How long the page waits for another member's status before it shows the member as not
/// answering.
const MEMBER_WAIT: Duration = Duration::from_millis(700);

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    cluster: Cluster,
    admin: AdminServer,
    log: LogReader,
    data_dir: PathBuf,
    /// What `allow_insecure` let through: shown in red on every page.
    insecure: Vec<String>,
}

impl HttpState {
    pub fn new(cluster: Cluster, config: std::sync::Arc<NodeConfig>, log: LogReader) -> HttpState {
        let data_dir = config.data_dir.clone();
        let insecure = config.insecure_listeners();
        HttpState { admin: AdminServer::new(cluster.clone(), config), cluster, log, data_dir, insecure }
    }

    /// What the admin API answers to `req` on this node (read-only requests only).
    async fn local<T>(&self, req: AdminRequest, pick: impl FnOnce(AdminResponse) -> Option<T>) -> Option<T> {
        pick(self.admin.handle(req).await)
    }

    /// Every member's status as it reports it (this node's own without a call), `None` for a
    /// member that did not answer in time.
    async fn members(&self, own: &NodeStatus) -> Vec<(u64, String, Option<NodeStatus>)> {
        let asks = own.members.iter().map(|m| async move {
            if m.id == own.id {
                return (m.id, m.client_addr.clone(), Some(own.clone()));
            }
            let status = async {
                let channel = self.cluster.member_channel(&m.raft_addr).ok()?;
                match crate::admin::call_on(channel, &AdminRequest::Status).await {
                    Ok(AdminResponse::Status(s)) => Some(s),
                    _ => None,
                }
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
    axum::serve(listener, router(state)).with_graceful_shutdown(stop).await
}

async fn metrics(State(state): State<HttpState>) -> Response {
    let mut text = String::new();
    let encoded = state.cluster.meters().encode(&mut text).and_then(|()| scrape::encode(&state, &mut text));
    match encoded {
        Ok(()) => {
            ([(header::CONTENT_TYPE, prometheus_client::encoding::prometheus_text::CONTENT_TYPE)], text).into_response()
        }
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "metrics could not be encoded\n").into_response(),
    }
}

async fn ready(State(state): State<HttpState>) -> Response {
    let m = state.cluster.metrics();
    let why = match (m.current_leader, m.last_applied.map(|l| l.index), m.local_committed.map(|l| l.index)) {
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

async fn status_page(State(state): State<HttpState>) -> Html<String> {
    Html(page::render(&page::View::gather(&state).await))
}
