//! The HTTP client of plain-`http://` endpoints: `hyper` over TCP connections that
//! acknowledge what they receive at once (`TCP_QUICKACK` after every read and write).
//!
//! Why: a server that leaves Nagle's algorithm on (Garage 2.5 does) holds the last, short
//! segment of a response until the client acknowledges the segments before it, and Linux
//! delays that acknowledgement by up to 40 ms when it expects to send data soon (an HTTP
//! client does: its next request). On loopback that stall was most of a request's time: a
//! 16 KiB GET took 44 ms, and 1.5 ms acknowledging at once; a ranged read of 128 KiB and a
//! listing stalled as often. Linux clears the flag by itself, so it is set again after every
//! read and every write (one system call beside each `recv` and `send`): sending a request
//! within the delayed-ACK timeout of the last response received puts a Linux socket back
//! into delaying acknowledgements ("pingpong" mode), so a flag set after the reads alone
//! was cleared again by the next request before its response's headers came. Set after
//! the write, the headers are acknowledged at once. (What this does not fix: on a 3-node
//! Garage cluster listings and reads of small objects still take 40-50 ms, against
//! 0.3-1 ms on a single node with the same client: that wait is inside the cluster.)
//! `https://` endpoints keep `object_store`'s default client (TLS through reqwest).

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use object_store::client::{
    HttpClient, HttpError, HttpErrorKind, HttpRequest, HttpRequestBody, HttpResponse,
    HttpResponseBody, HttpService,
};
use object_store::ClientOptions;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Builds [`QuickAckClient`]s for `object_store` (see the module doc).
#[derive(Debug)]
pub(super) struct QuickAckConnector {
    /// Idle connections kept per host (`--connections`).
    pub(super) idle_per_host: usize,
    pub(super) connect_timeout: Duration,
    /// A request's whole time, response body included.
    pub(super) timeout: Duration,
}

impl object_store::client::HttpConnector for QuickAckConnector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(self.connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(self.idle_per_host)
            .build(QuickAckConnect(http));
        Ok(HttpClient::new(QuickAckClient {
            client,
            timeout: self.timeout,
        }))
    }
}

/// `hyper`'s pooled client over [`QuickAckStream`]s.
#[derive(Debug)]
struct QuickAckClient {
    client: Client<QuickAckConnect, HttpRequestBody>,
    timeout: Duration,
}

#[async_trait::async_trait]
impl HttpService for QuickAckClient {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let timeout = self.timeout;
        let call = async {
            let response = self
                .client
                .request(req)
                .await
                .map_err(|e| HttpError::new(request_error_kind(&e), e))?;
            let (parts, body) = response.into_parts();
            let body = body.map_err(|e| HttpError::new(HttpErrorKind::Decode, e));
            // The body is read later, by the caller: reading it ends by the same deadline.
            let body = DeadlineBody {
                body,
                deadline: Box::pin(tokio::time::sleep(timeout)),
            };
            Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
        };
        tokio::time::timeout(timeout, call).await.map_err(|_| {
            HttpError::new(
                HttpErrorKind::Timeout,
                io::Error::new(io::ErrorKind::TimedOut, "request timed out"),
            )
        })?
    }
}

/// What kind of failure a request's error is, for `object_store`'s messages.
fn request_error_kind(e: &hyper_util::client::legacy::Error) -> HttpErrorKind {
    if e.is_connect() {
        HttpErrorKind::Connect
    } else {
        HttpErrorKind::Request
    }
}

/// A response body whose reading fails once its deadline has passed (a server that stops
/// sending mid-body does not hang the caller).
struct DeadlineBody<B> {
    body: B,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<B> hyper::body::Body for DeadlineBody<B>
where
    B: hyper::body::Body<Data = Bytes, Error = HttpError> + Unpin,
{
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, HttpError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::new(
                HttpErrorKind::Timeout,
                io::Error::new(io::ErrorKind::TimedOut, "response body timed out"),
            )))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// `hyper-util`'s TCP connector, its connections wrapped in [`QuickAckStream`].
#[derive(Clone, Debug)]
struct QuickAckConnect(HttpConnector);

type Connecting =
    Pin<Box<dyn Future<Output = Result<TokioIo<QuickAckStream>, io::Error>> + Send + 'static>>;

impl tower_service::Service<hyper::Uri> for QuickAckConnect {
    type Response = TokioIo<QuickAckStream>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        self.0.poll_ready(cx).map_err(io::Error::other)
    }

    fn call(&mut self, uri: hyper::Uri) -> Connecting {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let tcp = connecting.await.map_err(io::Error::other)?.into_inner();
            Ok(TokioIo::new(QuickAckStream(tcp)))
        })
    }
}

/// A TCP stream that acknowledges at once what it has read (see the module doc).
#[derive(Debug)]
pub(super) struct QuickAckStream(TcpStream);

impl QuickAckStream {
    fn ack_now(&self) {
        // Best effort: without it a response may only come later.
        let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
    }

    /// After a write that sent bytes (a request, or part of one): the kernel has just put
    /// the socket back into delaying acknowledgements (see the module doc).
    fn ack_after_write(&self, polled: &Poll<io::Result<usize>>) {
        if matches!(polled, Poll::Ready(Ok(n)) if *n > 0) {
            self.ack_now();
        }
    }
}

impl AsyncRead for QuickAckStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.ack_now();
        }
        polled
    }
}

impl AsyncWrite for QuickAckStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.0).poll_write(cx, buf);
        self.ack_after_write(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.0).poll_write_vectored(cx, bufs);
        self.ack_after_write(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl Connection for QuickAckStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::SockRef;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A client socket on loopback, wrapped as the connector wraps it, and the server's end.
    async fn connected() -> (QuickAckStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (QuickAckStream(client), server)
    }

    /// Every read that brings bytes leaves the socket acknowledging at once, though the
    /// kernel had it delaying acknowledgements (as it does for a client between requests).
    #[test]
    fn reads_leave_the_socket_acknowledging_at_once() {
        runtime().block_on(async {
            let (mut stream, mut server) = connected().await;
            for round in 0..3 {
                SockRef::from(&stream.0).set_tcp_quickack(false).unwrap();
                assert!(!SockRef::from(&stream.0).tcp_quickack().unwrap());
                server.write_all(b"a response").await.unwrap();
                let mut got = [0u8; 10];
                stream.read_exact(&mut got).await.unwrap();
                assert_eq!(&got, b"a response");
                assert!(
                    SockRef::from(&stream.0).tcp_quickack().unwrap(),
                    "round {round}: the read left acknowledgements delayed"
                );
            }
        });
    }

    /// A request written leaves the socket acknowledging at once: sending soon after
    /// receiving puts a Linux socket back into delaying acknowledgements, and the response's
    /// headers would then wait out the delay behind a server's Nagle.
    #[test]
    fn writes_leave_the_socket_acknowledging_at_once() {
        runtime().block_on(async {
            let (mut stream, mut server) = connected().await;
            for round in 0..3 {
                // A response read, then the next request sent at once (as a client does).
                server.write_all(b"a response").await.unwrap();
                let mut got = [0u8; 10];
                stream.read_exact(&mut got).await.unwrap();
                SockRef::from(&stream.0).set_tcp_quickack(false).unwrap();
                stream.write_all(b"a request").await.unwrap();
                assert!(
                    SockRef::from(&stream.0).tcp_quickack().unwrap(),
                    "round {round}: the write left acknowledgements delayed"
                );
                let mut req = [0u8; 9];
                server.read_exact(&mut req).await.unwrap();
            }
        });
    }
}
