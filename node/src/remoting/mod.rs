//! The RocketMQ 4.x Remoting front end: the protocol of the Java `rocketmq-client` 4.x, Go v2,
//! C++ and the Python packages built on it. Every node serves it on `remoting_addr`, at once the
//! clients' name server and their broker: routes name this node, as RocketMQ 5's proxy names
//! itself.
//!
//! Requests become the typed requests the gRPC front end (`proxy`) serves, over the same storage
//! and the same checks: sends go through the proxy's send path, pulls read the queues the POP
//! path reads, a pull consumer's commit is the group's replicated position on that queue.
//!
//! - `frame`: the frame and both header forms; `codes`: request and response codes;
//! - `message`: properties, the stored-message layout, commit-log offsets and message ids;
//! - `route`: routes; `send`: sends and send-backs; `pull`: pulls and long polling;
//!   `offsets`: consumer offsets and queue bounds; `clients`: heartbeats and queue locks;
//!   `signature`: the ACL signature; `transaction`: END_TRANSACTION and the checks of open halves.

pub mod clients;
pub mod codes;
pub mod frame;
pub mod message;
mod offsets;
mod pull;
mod route;
mod send;
pub mod signature;
mod transaction;

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::auth::{Authenticator, Caller};
use crate::proxy::Proxy;
use codes::*;
use frame::{Frame, FrameLimits};

/// What the Remoting front end needs of the node's configuration.
#[derive(Debug, Clone)]
pub struct RemotingOptions {
    /// Where clients reach this node's Remoting listener: routes name it, and stored messages
    /// carry it as their store host (clients send messages back there).
    pub advertised: SocketAddrV4,
    /// The broker and cluster name routes give.
    pub broker_name: String,
    pub limits: FrameLimits,
    /// Most Remoting consumers this node registers.
    pub max_clients: usize,
    /// Longest a pull is held (long polling), whatever the client asks.
    pub max_long_poll: Duration,
    /// Most requests of one connection served at once; its next frames wait.
    pub max_requests_per_connection: usize,
}

/// Most queues one lock request names (the rest are not locked).
const MAX_LOCKED_PER_REQUEST: usize = 1024;
/// Most frames waiting to be written to one connection.
const OUTBOX: usize = 1024;
/// A connection that sends nothing for this long is closed (RocketMQ's idle time; the clients
/// send heartbeats every 30 s, and a held pull lasts at most a minute).
const IDLE: Duration = Duration::from_secs(120);
/// Longest an answer may wait for the client to take it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a connection is read, and of its answers written, at once.
const IO_BUFFER: usize = 64 << 10;

pub struct Remoting {
    proxy: Arc<Proxy>,
    authenticator: Arc<Authenticator>,
    options: RemotingOptions,
    clients: Arc<clients::Clients>,
    /// Each open connection's outbox, for requests this node sends its clients.
    connections: std::sync::Mutex<std::collections::HashMap<u64, mpsc::Sender<Bytes>>>,
    next_connection: AtomicU64,
    next_opaque: std::sync::atomic::AtomicI32,
    log_limit: LogLimit,
}

impl Remoting {
    pub fn new(proxy: Arc<Proxy>, authenticator: Arc<Authenticator>, options: RemotingOptions) -> Arc<Remoting> {
        let clients = Arc::new(clients::Clients::new(options.max_clients));
        // Other nodes ask for this node's consumers of a group (`PeerService.RemotingConsumers`).
        proxy.sessions().set_consumer_directory(Arc::clone(&clients) as Arc<dyn crate::sessions::ConsumerDirectory>);
        Arc::new(Remoting {
            proxy,
            authenticator,
            clients,
            options,
            connections: Default::default(),
            next_connection: AtomicU64::new(1),
            next_opaque: std::sync::atomic::AtomicI32::new(1),
            log_limit: LogLimit::default(),
        })
    }

    /// Serves one connection until it closes, `stop` fires, or a frame cannot be read (logged,
    /// and nothing it asked is done).
    pub async fn serve_connection<IO>(
        self: Arc<Self>,
        io: IO,
        peer: std::net::SocketAddr,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) where
        IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let id = self.next_connection.fetch_add(1, Ordering::Relaxed);
        let (reader, mut writer) = tokio::io::split(io);
        // Buffered: a busy connection's frames are read many per system call.
        let mut reader = tokio::io::BufReader::with_capacity(IO_BUFFER, reader);
        let (tx, mut rx) = mpsc::channel::<Bytes>(OUTBOX);
        self.connections.lock().unwrap_or_else(|p| p.into_inner()).insert(id, tx.clone());
        let write = tokio::spawn(async move {
            // The answers ready together go out in one write.
            let mut out = BytesMut::with_capacity(IO_BUFFER);
            while let Some(frame) = rx.recv().await {
                out.extend_from_slice(&frame);
                while out.len() < IO_BUFFER
                    && let Ok(more) = rx.try_recv()
                {
                    out.extend_from_slice(&more);
                }
                // A client that stops reading is dropped; its requests' answers then go nowhere.
                match tokio::time::timeout(WRITE_TIMEOUT, writer.write_all(&out)).await {
                    Ok(Ok(())) => {}
                    _ => break,
                }
                out.clear();
            }
            let _ = writer.shutdown().await;
        });
        // The leader's questions about this connection's open transactions, asked as
        // CHECK_TRANSACTION_STATE.
        let (link, mut questions) = transaction::ProducerLink::new(Arc::clone(self.proxy.sessions()));
        let link = Arc::new(link);
        let asker = {
            let (this, tx) = (Arc::clone(&self), tx.clone());
            tokio::spawn(async move {
                while let Some(question) = questions.recv().await {
                    if let Some(frame) = this.check_frame(question)
                        && tx.send(frame.encode()).await.is_err()
                    {
                        break;
                    }
                }
            })
        };
        let in_flight = Arc::new(tokio::sync::Semaphore::new(self.options.max_requests_per_connection.max(1)));
        loop {
            let frame = tokio::select! {
                f = read_frame(&mut reader, self.options.limits) => f,
                _ = stop.wait_for(|s| *s) => break,
            };
            let frame = match frame {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    if self.log_limit.allow() {
                        tracing::warn!(%peer, error = %e, "closing a Remoting connection");
                    }
                    break;
                }
            };
            // Answers to what this node asked (NOTIFY_CONSUMER_IDS_CHANGED wants none).
            if frame.is_response() {
                continue;
            }
            if tx.is_closed() {
                break;
            }
            let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else { break };
            let (this, tx, link) = (Arc::clone(&self), tx.clone(), Arc::clone(&link));
            let oneway = frame.flag & frame::ONEWAY != 0;
            tokio::spawn(async move {
                let answer = this.handle(frame, id, peer, &link).await;
                // Java's oneway requests want no answer (the C++ client marks none so).
                if !oneway {
                    let _ = tx.send(answer.encode()).await;
                }
                // Held until the answer is queued: a client that does not read its answers
                // stops being read, instead of piling up answers.
                drop(permit);
            });
        }
        self.connections.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        for group in self.clients.connection_closed(id) {
            self.notify_group_changed(&group, id);
        }
        drop(link);
        asker.abort();
        drop(tx);
        // The writer ends once every request still running has answered.
        let _ = write.await;
    }

    /// Serves one request: every request is answered, an unknown code with
    /// REQUEST_CODE_NOT_SUPPORTED (the C++ client drops a connection whose request times out).
    async fn handle(
        &self,
        request: Frame,
        connection: u64,
        peer: std::net::SocketAddr,
        link: &transaction::ProducerLink,
    ) -> Frame {
        let caller = self.caller(&request);
        match request.code {
            GET_ROUTEINFO_BY_TOPIC => self.route(&request, &caller).await,
            SEND_MESSAGE | SEND_MESSAGE_V2 | SEND_BATCH_MESSAGE => self.send(&request, &caller, peer, link).await,
            END_TRANSACTION => self.end_transaction(&request, &caller).await,
            CONSUMER_SEND_MSG_BACK => self.send_back(&request, &caller).await,
            PULL_MESSAGE => self.pull(&request, &caller, connection).await,
            QUERY_CONSUMER_OFFSET => self.query_offset(&request, &caller).await,
            UPDATE_CONSUMER_OFFSET => self.update_offset(&request, &caller).await,
            GET_MAX_OFFSET | GET_MIN_OFFSET | SEARCH_OFFSET_BY_TIMESTAMP | GET_EARLIEST_MSG_STORETIME => {
                self.queue_bound(&request, &caller).await
            }
            HEART_BEAT => self.heartbeat(&request, &caller, connection),
            UNREGISTER_CLIENT => self.unregister(&request, connection),
            GET_CONSUMER_LIST_BY_GROUP => self.consumer_list(&request, &caller).await,
            LOCK_BATCH_MQ => self.lock(&request, &caller, connection, true),
            UNLOCK_BATCH_MQ => self.lock(&request, &caller, connection, false),
            CHECK_CLIENT_CONFIG => Frame::answer(&request, SUCCESS),
            code => Frame::answer(&request, REQUEST_CODE_NOT_SUPPORTED)
                .with_remark(format!("request code {code} is not supported")),
        }
    }

    /// Who sent `request`: anyone with authentication off; else the user whose secret signs it.
    fn caller(&self, request: &Frame) -> Caller {
        if !self.authenticator.enabled() {
            return Caller::Open;
        }
        match signature::verify(request, |key| self.authenticator.credential(key)) {
            Ok((access_key, admin)) => Caller::User { access_key: access_key.into(), admin },
            Err(why) => Caller::Refused(why),
        }
    }

    /// `None` if `caller` may do all of `needs`; else the refusal (NO_PERMISSION).
    fn refused(&self, request: &Frame, caller: &Caller, needs: crate::proxy::Needs<'_>) -> Option<Frame> {
        self.proxy.refused_caller(caller, needs).map(|s| Frame::answer(request, NO_PERMISSION).with_remark(s.message))
    }

    fn heartbeat(&self, request: &Frame, caller: &Caller, connection: u64) -> Frame {
        if let Err(why) = caller.authenticated() {
            return Frame::answer(request, NO_PERMISSION).with_remark(format!("{why:?}"));
        }
        let beat = match clients::Heartbeat::parse(&request.body) {
            Ok(b) => b,
            Err(e) => return Frame::answer(request, SYSTEM_ERROR).with_remark(e.to_string()),
        };
        // A consumer joins only the groups its user may consume as.
        for (group, _) in &beat.consumers {
            let needs =
                [(crate::broker::access::Action::Sub, crate::broker::access::ResourceKind::Group, group.as_str())];
            if let Some(refused) = self.refused(request, caller, &needs) {
                return refused;
            }
        }
        match self.clients.heartbeat(connection, &beat, Instant::now()) {
            Ok(changed) => {
                for group in changed {
                    self.notify_group_changed(&group, connection);
                }
                Frame::answer(request, SUCCESS)
            }
            Err(why) => Frame::answer(request, SYSTEM_BUSY).with_remark(why.to_string()),
        }
    }

    fn unregister(&self, request: &Frame, connection: u64) -> Frame {
        let client = request.field("clientID").unwrap_or_default();
        let group = request.field("consumerGroup").unwrap_or_default();
        if !group.is_empty() {
            for g in self.clients.unregister(connection, client, group) {
                self.notify_group_changed(&g, connection);
            }
        }
        Frame::answer(request, SUCCESS)
    }

    /// The group's members over the whole cluster: each client heartbeats to the node its route
    /// named, and the queues are shared out among all of them.
    async fn consumer_list(&self, request: &Frame, caller: &Caller) -> Frame {
        let group = request.field("consumerGroup").unwrap_or_default();
        if let Some(refused) = self.refused(
            request,
            caller,
            &[(crate::broker::access::Action::Sub, crate::broker::access::ResourceKind::Group, group)],
        ) {
            return refused;
        }
        let members = self.proxy.groups().metadata().remoting_consumers(group).await;
        if members.is_empty() {
            return Frame::answer(request, SYSTEM_ERROR).with_remark(format!("no consumer of group {group}"));
        }
        let body = serde_json::json!({ "consumerIdList": members });
        Frame::answer(request, SUCCESS).with_body(serde_json::to_vec(&body).unwrap_or_default())
    }

    /// LOCK_BATCH_MQ and UNLOCK_BATCH_MQ: for a client registered on this connection, on queues
    /// of topics its user may consume.
    fn lock(&self, request: &Frame, caller: &Caller, connection: u64, lock: bool) -> Frame {
        let body: serde_json::Value = match serde_json::from_slice(&request.body) {
            Ok(v) => v,
            Err(e) => return Frame::answer(request, SYSTEM_ERROR).with_remark(format!("lock body is not JSON: {e}")),
        };
        let text = |k: &str| body.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let (group, client) = (text("consumerGroup"), text("clientId"));
        let queues: Vec<(String, u32)> = body
            .get("mqSet")
            .and_then(|v| v.as_array())
            .map(|set| {
                set.iter()
                    .filter_map(|q| {
                        let topic = q.get("topic")?.as_str()?.to_string();
                        let id = q.get("queueId")?.as_u64().and_then(|n| u32::try_from(n).ok())?;
                        Some((topic, id))
                    })
                    .filter(|(topic, _)| topic.len() <= clients::MAX_NAME_BYTES)
                    .take(MAX_LOCKED_PER_REQUEST)
                    .collect()
            })
            .unwrap_or_default();
        let mut needs =
            vec![(crate::broker::access::Action::Sub, crate::broker::access::ResourceKind::Group, group.as_str())];
        let topics: std::collections::BTreeSet<&str> = queues.iter().map(|(t, _)| t.as_str()).collect();
        needs.extend(
            topics.iter().map(|t| (crate::broker::access::Action::Sub, crate::broker::access::ResourceKind::Topic, *t)),
        );
        if let Some(refused) = self.refused(request, caller, &needs) {
            return refused;
        }
        if !self.clients.registered(connection, &client) {
            return Frame::answer(request, SYSTEM_ERROR)
                .with_remark(format!("client {client} has sent no heartbeat on this connection"));
        }
        if !lock {
            self.clients.unlock(&group, &client, &queues);
            return Frame::answer(request, SUCCESS);
        }
        let held = self.clients.lock(&group, &client, &queues, Instant::now());
        let set: Vec<serde_json::Value> = held
            .iter()
            .map(|(topic, id)| serde_json::json!({"brokerName": self.options.broker_name, "queueId": id, "topic": topic}))
            .collect();
        let body = serde_json::json!({ "lockOKMQSet": set });
        Frame::answer(request, SUCCESS).with_body(serde_json::to_vec(&body).unwrap_or_default())
    }

    /// Tells `group`'s other members on this node to rebalance now (they also do every 10-20 s).
    fn notify_group_changed(&self, group: &str, except: u64) {
        let outboxes: Vec<mpsc::Sender<Bytes>> = {
            let connections = self.connections.lock().unwrap_or_else(|p| p.into_inner());
            self.clients.connections(group, except).iter().filter_map(|c| connections.get(c).cloned()).collect()
        };
        for outbox in outboxes {
            let opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed) & i32::MAX;
            let ext = BTreeMap::from([("consumerGroup".to_string(), group.to_string())]);
            // A full outbox skips the notice: the client rebalances on its own timer anyway.
            let _ = outbox.try_send(Frame::request(NOTIFY_CONSUMER_IDS_CHANGED, opaque, ext).encode());
        }
    }
}

/// Reads one frame; `None` at a clean end of the connection.
async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    limits: FrameLimits,
) -> Result<Option<Frame>, FrameReadError> {
    let mut len = [0u8; 4];
    match tokio::time::timeout(IDLE, reader.read_exact(&mut len)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Ok(Err(e)) => return Err(FrameReadError::Io(e)),
        Err(_) => return Err(FrameReadError::Idle),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > limits.max_frame {
        return Err(FrameReadError::Frame(frame::FrameError::TooLarge(len, limits.max_frame)));
    }
    // Grown as the bytes arrive: a client that announces a large frame and sends nothing holds
    // no more memory than it sent.
    let mut bytes = Vec::with_capacity(len.min(IO_BUFFER));
    reader.take(len as u64).read_to_end(&mut bytes).await.map_err(FrameReadError::Io)?;
    if bytes.len() < len {
        return Err(FrameReadError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    frame::decode(Bytes::from(bytes), limits).map(Some).map_err(FrameReadError::Frame)
}

#[derive(Debug, thiserror::Error)]
enum FrameReadError {
    #[error("no frame for {} s", IDLE.as_secs())]
    Idle,
    #[error("{0}")]
    Io(std::io::Error),
    #[error("{0}")]
    Frame(frame::FrameError),
}

/// At most one line a second for a kind of event that clients can cause at will.
#[derive(Default)]
struct LogLimit {
    last_ms: AtomicI64,
}

impl LogLimit {
    fn allow(&self) -> bool {
        let now = crate::cluster::now_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        now - last >= 1000 && self.last_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

/// An ext field as a number: the clients send some as JSON numbers, some as strings.
fn number<T: std::str::FromStr>(request: &Frame, key: &str) -> Option<T> {
    request.field(key).and_then(|v| v.trim().parse().ok())
}

/// An ext field as a flag: "1", "true" (any case).
fn flag(request: &Frame, key: &str) -> bool {
    request.field(key).is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Serves Remoting clients on `listener` until `stop` fires; connections beyond
/// `max_per_address` from one address are refused.
pub async fn serve(
    remoting: Arc<Remoting>,
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    cap: crate::auth::connections::ConnectionCap,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                if remoting.log_limit.allow() {
                    tracing::warn!(error = %e, "Remoting listener could not accept");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = cap.admit(peer.ip()) else { continue };
        let _ = stream.set_nodelay(true);
        let (remoting, stop, tls) = (Arc::clone(&remoting), stop.clone(), tls.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tls {
                None => remoting.serve_connection(stream, peer, stop).await,
                Some(acceptor) => match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => remoting.serve_connection(tls, peer, stop).await,
                    _ => {
                        if remoting.log_limit.allow() {
                            tracing::debug!(%peer, "Remoting TLS handshake failed");
                        }
                    }
                },
            }
        });
    }
}

/// Longest a client may take over its TLS handshake.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);
