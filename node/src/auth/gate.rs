//! The client plane's gate: every request to the client port is marked with its [`Caller`],
//! found from the signature in its headers before anything reads the body. A refused caller's
//! body is never decoded: it is replaced by one empty message, so the proxy answers with
//! RocketMQ's UNAUTHORIZED (which every official client reports) at the cost of a header check,
//! however large the request or however long the stream an anonymous caller opened. An
//! anonymous `Telemetry` stream thereby ends with its one answer.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tonic::body::Body;
use tonic::codegen::Service;
use tonic::codegen::http::{Request, Response};
use tonic::server::NamedService;

use super::{Authenticator, Caller};

/// One gRPC message frame of no bytes: not compressed, length 0. Decodes as a message with
/// every field at its default.
const EMPTY_MESSAGE_FRAME: [u8; 5] = [0; 5];

/// Wraps the client plane's service (see the module's doc).
#[derive(Clone)]
pub struct ClientGate<S> {
    inner: S,
    authenticator: Arc<Authenticator>,
}

impl<S> ClientGate<S> {
    pub fn new(inner: S, authenticator: Arc<Authenticator>) -> ClientGate<S> {
        ClientGate { inner, authenticator }
    }
}

impl<S: NamedService> NamedService for ClientGate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<Request<Body>> for ClientGate<S>
where
    S: Service<Request<Body>, Response = Response<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        let caller = self.authenticator.identify_headers(request.headers());
        if matches!(caller, Caller::Refused(_)) {
            // Dropping the body resets the stream once the answer is out; nothing more is read.
            *request.body_mut() = Body::new(http_body_util::Full::new(Bytes::from_static(&EMPTY_MESSAGE_FRAME)));
        }
        request.extensions_mut().insert(caller);
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// Records what reached the service: the caller it was marked with and the body it got.
    #[derive(Clone, Default)]
    struct Seen(Arc<std::sync::Mutex<Vec<(Caller, Bytes)>>>);

    impl Service<Request<Body>> for Seen {
        type Response = Response<Body>;
        type Error = std::convert::Infallible;
        type Future = std::pin::Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<Body>) -> Self::Future {
            let seen = self.0.clone();
            Box::pin(async move {
                let caller = request.extensions().get::<Caller>().cloned().expect("marked");
                let body = request.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
                seen.lock().unwrap().push((caller, body));
                Ok(Response::new(Body::empty()))
            })
        }
    }

    #[tokio::test]
    async fn an_unsigned_request_s_body_is_never_read_and_an_open_plane_passes_everything() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::broker::state_test::node(dir.path()).broker;
        let big = Bytes::from(vec![7u8; 1 << 20]);
        for (enabled, expected_body) in [(true, Bytes::from_static(&EMPTY_MESSAGE_FRAME)), (false, big.clone())] {
            let seen = Seen::default();
            let config = super::super::AuthConfig { enabled, ..Default::default() };
            let mut gate = ClientGate::new(seen.clone(), Authenticator::new(config, broker.clone()));
            let request = Request::new(Body::new(http_body_util::Full::new(big.clone())));
            gate.call(request).await.unwrap();
            let (caller, body) = seen.0.lock().unwrap().pop().unwrap();
            assert_eq!(matches!(caller, Caller::Refused(_)), enabled, "{caller:?}");
            assert_eq!(body, expected_body, "auth on: {enabled}");
        }
    }
}
