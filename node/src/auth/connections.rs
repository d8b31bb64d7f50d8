//! How many connections one source (an address; for IPv6, its /64) may hold open on a listener. A caller that opens
//! more is disconnected at once, before TLS or HTTP/2 begins, so no address can take a node's
//! sockets or memory however many connections it opens; everyone else is served as before.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};

/// How often a listener says how many connections it turned away.
const REPORT_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Counts {
    open: HashMap<IpAddr, usize>,
    /// Turned away since the last report, and when that was.
    refused: u64,
    reported: Option<Instant>,
}

/// The open connections per source address of one listener.
#[derive(Clone)]
pub struct ConnectionCap {
    listener: &'static str,
    max_per_address: usize,
    counts: Arc<Mutex<Counts>>,
}

impl ConnectionCap {
    /// `max_per_address` 0: no cap.
    pub fn new(listener: &'static str, max_per_address: usize) -> ConnectionCap {
        ConnectionCap { listener, max_per_address, counts: Arc::default() }
    }

    /// A slot for one more connection from `ip`, or `None` when its source holds its share.
    pub fn admit(&self, ip: IpAddr) -> Option<Slot> {
        let ip = source(ip);
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let open = counts.open.entry(ip).or_default();
        if self.max_per_address > 0 && *open >= self.max_per_address {
            counts.refused += 1;
            let due = counts.reported.is_none_or(|at| at.elapsed() >= REPORT_EVERY);
            if due {
                tracing::warn!(
                    listener = self.listener,
                    %ip,
                    refused = counts.refused,
                    max = self.max_per_address,
                    "connections refused: an address holds the most connections one address may (limits.max_connections_per_address)"
                );
                counts.refused = 0;
                counts.reported = Some(Instant::now());
            }
            return None;
        }
        *open += 1;
        Some(Slot { ip, counts: Arc::clone(&self.counts) })
    }

    /// `incoming`'s connections, less those over the cap (closed as they come).
    pub fn limit(self, incoming: TcpIncoming) -> impl Stream<Item = io::Result<Capped>> {
        incoming.filter_map(move |accepted| {
            let admitted = match accepted {
                Err(e) => Some(Err(e)),
                Ok(stream) => {
                    let ip = stream.peer_addr().map(|a: SocketAddr| a.ip());
                    // A socket whose peer is already gone has nothing to serve.
                    ip.ok().and_then(|ip| self.admit(ip)).map(|slot| Ok(Capped { stream, _slot: slot }))
                }
            };
            std::future::ready(admitted)
        })
    }
}

/// Whose share a connection from `ip` counts against: its address, or for IPv6 its /64 (one host
/// is commonly given a whole /64, so counting single addresses would not bound it). An IPv4
/// address mapped into IPv6 counts as itself.
fn source(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(v6.to_bits() & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}

/// One admitted connection's place in its address's count, given back when it closes.
pub struct Slot {
    ip: IpAddr,
    counts: Arc<Mutex<Counts>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = counts.open.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                counts.open.remove(&self.ip);
            }
        }
    }
}

/// An admitted connection: the socket, holding its slot for as long as it is open.
pub struct Capped {
    stream: TcpStream,
    _slot: Slot,
}

impl Connected for Capped {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Capped {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Capped {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_share_and_a_closed_connection_frees_its_slot() {
        let cap = ConnectionCap::new("client", 2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = cap.admit(a).expect("first");
        let _second = cap.admit(a).expect("second");
        assert!(cap.admit(a).is_none(), "a third from the same address is refused");
        let _other = cap.admit(b).expect("another address is not affected");
        drop(first);
        assert!(cap.admit(a).is_some(), "a closed connection frees its slot");
        let unlimited = ConnectionCap::new("client", 0);
        let held: Vec<_> = (0..100).map(|_| unlimited.admit(a).expect("no cap")).collect();
        assert_eq!(held.len(), 100);
        drop(held);
        assert!(unlimited.counts.lock().unwrap().open.is_empty(), "nothing is kept for closed connections");
    }

    #[test]
    fn ipv6_addresses_of_one_64_share_one_share() {
        let cap = ConnectionCap::new("raft", 2);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let _a = cap.admit(ip("2001:db8:1:2::1")).expect("first");
        let _b = cap.admit(ip("2001:db8:1:2:ffff::9")).expect("second, same /64");
        assert!(cap.admit(ip("2001:db8:1:2::3")).is_none(), "a third address of the same /64");
        assert!(cap.admit(ip("2001:db8:1:3::1")).is_some(), "another /64");
        let _c = cap.admit(ip("::ffff:10.0.0.1")).expect("mapped IPv4");
        let _d = cap.admit(ip("10.0.0.1")).expect("the same IPv4 address");
        assert!(cap.admit(ip("10.0.0.1")).is_none(), "mapped and plain count together");
    }
}
