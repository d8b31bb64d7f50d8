//! The raft port's connections: at most so many from one source (`auth::connections`); on mutual
//! TLS a handshake done within a bound, by a task of its own (a caller that never finishes one
//! holds up no one), with at most so many under way, from one source and in all; the
//! certificate must name a current member; and the connection is closed when that member is
//! removed.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::sync::Semaphore;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::HeaderMap;
use tonic::transport::server::{Connected, TcpIncoming};

use crate::auth::connections::{Capped, ConnectionCap};
use crate::auth::member::{RefusalLog, Roster};
use crate::auth::member_tls::{MemberConnection, MemberStream, MemberTls};

/// TLS handshakes under way at once on the raft port, and from one source (an address; for IPv6
/// its /64); connections beyond are closed at once. A flood from a few sources cannot keep the
/// members (each from its own address) from connecting.
pub const MAX_HANDSHAKES: usize = 1024;
pub const MAX_HANDSHAKES_PER_SOURCE: usize = 16;

/// How long a caller has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A member connection over mutual TLS.
pub type TlsMember = MemberStream<tokio_rustls::server::TlsStream<Capped>>;

/// What the raft port's listener checks of each connection.
pub struct MemberListener {
    pub cap: ConnectionCap,
    pub roster: Arc<dyn Roster>,
    pub refusals: Arc<RefusalLog>,
}

impl MemberListener {
    /// Connections without TLS (the secret is checked per request).
    pub fn plain(self, tcp: TcpIncoming) -> impl Stream<Item = io::Result<MemberStream<Capped>>> {
        self.cap.limit(tcp).map(|accepted| {
            accepted.map(|stream| {
                let remote = stream.connect_info().remote_addr();
                MemberStream::new(stream, MemberConnection { remote, member: None, subject: "".into() }, None)
            })
        })
    }

    /// Connections over mutual TLS whose certificate names a current member.
    pub fn mutual_tls(self, tcp: TcpIncoming, tls: MemberTls) -> impl Stream<Item = io::Result<TlsMember>> {
        let (tx, rx) = tokio::sync::mpsc::channel(MAX_HANDSHAKES);
        let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        let per_source = ConnectionCap::new("raft (TLS handshakes)", MAX_HANDSHAKES_PER_SOURCE);
        tokio::spawn(async move {
            let mut accepted = std::pin::pin!(self.cap.clone().limit(tcp));
            let listener = Arc::new(self);
            while let Some(connection) = accepted.next().await {
                if tx.is_closed() {
                    break;
                }
                // An accept error is about one connection (too many files, a reset): the next goes on.
                let Ok(connection) = connection else { continue };
                let remote = connection.connect_info().remote_addr();
                // Said by the cap itself, at most once a minute.
                let Some(source_slot) = remote.and_then(|r| per_source.admit(r.ip())) else { continue };
                let Ok(permit) = Arc::clone(&handshakes).try_acquire_owned() else {
                    let info = MemberConnection { remote, member: None, subject: "".into() };
                    listener.refusals.refused(Some(&info), "too many TLS handshakes under way");
                    continue;
                };
                let (tx, tls, listener) = (tx.clone(), tls.clone(), Arc::clone(&listener));
                tokio::spawn(async move {
                    let handshake = tls.accept(connection, HANDSHAKE_TIMEOUT).await;
                    drop((permit, source_slot));
                    let stream = match handshake {
                        Ok(stream) => stream,
                        Err(e) => {
                            let info = MemberConnection { remote, member: None, subject: "".into() };
                            listener.refusals.refused(Some(&info), &format!("TLS handshake failed: {e}"));
                            return;
                        }
                    };
                    let named = tls.peer_of(&stream);
                    let subject: Arc<str> = named.subject.into();
                    let info = |member| MemberConnection { remote, member, subject: Arc::clone(&subject) };
                    match named.member {
                        Ok(id) if listener.roster.admits(id, &HeaderMap::new(), false) => {
                            let closed = listener.roster.gone(id);
                            let _ = tx.send(Ok(MemberStream::new(stream, info(Some(id)), Some(closed)))).await;
                        }
                        Ok(id) => listener.refusals.refused(Some(&info(Some(id))), "not a current member"),
                        Err(why) => listener.refusals.refused(Some(&info(None)), &why.to_string()),
                    }
                });
            }
        });
        ReceiverStream::new(rx)
    }
}
