//! Simulated TCP for the gRPC listeners and for dialling other nodes.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::codegen::http::Uri;
use tonic::transport::server::{Connected, TcpConnectInfo};
use turmoil::net::{TcpListener, TcpStream};

/// A connection a simulated listener accepted, as tonic serves it.
pub struct Accepted(TcpStream);

impl Connected for Accepted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo { local_addr: self.0.local_addr().ok(), remote_addr: self.0.peer_addr().ok() }
    }
}

impl Accepted {
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.0.peer_addr().ok()
    }
}

impl AsyncRead for Accepted {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// Binds a simulated listener at `addr`'s port (a simulated host binds only the unspecified
/// address; it has one address anyway).
pub async fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, addr.port())).await
}

/// The connections `listener` accepts, for `serve_with_incoming`.
pub fn incoming(listener: TcpListener) -> impl Stream<Item = io::Result<Accepted>> + Send + 'static {
    futures_util::stream::unfold(listener, |listener| async move {
        let next = listener.accept().await.map(|(stream, _)| Accepted(stream));
        Some((next, listener))
    })
}

/// Dials `http://host:port` over simulated TCP (a tonic connector).
#[derive(Clone, Copy, Default)]
pub struct Connector;

/// The connector for every channel to another node inside a simulation.
pub fn connector() -> Connector {
    Connector
}

impl tonic::codegen::Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<TcpStream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(async move {
            let authority = uri.authority().map(|a| a.to_string());
            let authority = authority.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host"))?;
            TcpStream::connect(authority).await.map(TokioIo::new)
        })
    }
}
