//! The accept loop: HTTP/1 connections (HTTP/2 for the gRPC of `--rls-listen`), over TLS when a certificate is given,
//! at most a bound of them at once, each with a timer on its TLS handshake and on each HTTP/1 request header, until
//! SIGTERM or Ctrl-C (or until the hook's writer stopped), then a graceful stop.
//!
//! Beyond the bound, new connections wait: the loop accepts no more until one closes, and the kernel holds the new
//! ones in the listening socket's backlog, in the order they came. Not 503: answering one takes what the bound
//! protects (a descriptor, a TLS handshake), while waiting costs the server nothing. The wait is short, since every
//! connection that holds a place without sending a request is closed after the header timeout: a client arriving
//! behind idle connections is accepted after one header timeout for each bound's worth of them ahead of it in the
//! backlog, and its request, already sent, is then answered at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::SHUTDOWN_WAIT_MS;

/// Why the accept loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGTERM or Ctrl-C.
    Signal,
    /// `also_stop` answered (the hook's writer stopped).
    Asked,
}

/// How connections are accepted and held.
#[derive(Clone)]
pub(crate) struct Accepting {
    /// Connections open at once at most; more wait in the backlog.
    pub(crate) connections_max: usize,
    /// The places of that bound, shared by every listener of the server: each connection holds a file descriptor,
    /// and the bound is sized to the open-file limit.
    pub(crate) places: Arc<Semaphore>,
    /// How long a client may take to finish its TLS handshake, then each request header (or leave a kept-alive
    /// connection idle: hyper times both the same way).
    pub(crate) header_timeout: Duration,
    /// TLS, when a certificate was given.
    pub(crate) tls: Option<TlsAcceptor>,
}

/// The HTTP a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// The JSON API.
    Http1,
    /// gRPC (`--rls-listen`): HTTP/2 alone, as gRPC clients open it (with prior knowledge, or ALPN `h2` over TLS).
    Http2,
}

/// A connection's HTTP, configured.
#[derive(Clone)]
enum Builder {
    Http1(hyper::server::conn::http1::Builder),
    Http2(hyper::server::conn::http2::Builder<TokioExecutor>),
}

impl Builder {
    fn of(protocol: Protocol, header_timeout: Duration) -> Builder {
        match protocol {
            Protocol::Http1 => {
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
                Builder::Http1(builder)
            }
            // No header timer in HTTP/2: a client holds one connection for all its calls (Envoy one per worker), and
            // its place in the bound is what a connection costs. A ping every header timeout closes one whose peer
            // went away without a word.
            Protocol::Http2 => {
                let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                builder.timer(TokioTimer::new()).keep_alive_interval(Some(header_timeout));
                Builder::Http2(builder)
            }
        }
    }
}

/// The first byte of a TLS connection: a handshake record (RFC 8446, 5.1).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Answers, to every listener, once SIGTERM or Ctrl-C came or `also_stop` answered.
pub(crate) fn stop_watch(signals: Signals, also_stop: impl Future<Output = ()> + Send + 'static) -> StopWatch {
    let (sender, receiver) = tokio::sync::watch::channel(None);
    tokio::spawn(async move {
        let stop = tokio::select! {
            _ = signals.stop() => Stop::Signal,
            _ = also_stop => Stop::Asked,
        };
        // The listeners may be gone already: nothing then waits for it.
        let _ = sender.send(Some(stop));
    });
    StopWatch(receiver)
}

/// Why the listeners stop, once they do ([`stop_watch`]).
#[derive(Clone)]
pub(crate) struct StopWatch(tokio::sync::watch::Receiver<Option<Stop>>);

impl StopWatch {
    async fn stopped(mut self) -> Stop {
        match self.0.wait_for(Option::is_some).await {
            Ok(stop) => stop.unwrap_or(Stop::Signal),
            // The sender went with its task: the runtime is stopping.
            Err(_) => Stop::Signal,
        }
    }
}

/// Accepts and serves connections until SIGTERM or Ctrl-C, or until `also_stop` answers (`stop`), then lets the
/// requests in flight finish (for [`SHUTDOWN_WAIT_MS`] at most). What `axum::serve` does, plus a timeout on the
/// request header (which needs a timer that `axum::serve` does not give hyper), TLS, and a bound on connections.
pub(crate) async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: Router,
    accepting: Accepting,
    protocol: Protocol,
    stop: StopWatch,
) -> Stop {
    let builder = Builder::of(protocol, accepting.header_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let places = Arc::clone(&accepting.places);
    let mut stop = std::pin::pin!(stop.stopped());
    // Out of file descriptors, accept fails ten times a second until one is closed: said once, not each time.
    let mut said = kafka::Said::default();
    let mut full = kafka::Said::default();
    let stopped = loop {
        let place = match Arc::clone(&places).try_acquire_owned() {
            Ok(place) => {
                if full.over() {
                    tracing::info!("serve: below the bound of connections again");
                }
                place
            }
            Err(_) => {
                if full.again("full") {
                    tracing::warn!(
                        connections = accepting.connections_max,
                        "serve: connections at the bound (--connections-max): new ones wait until one closes"
                    );
                }
                tokio::select! {
                    place = Arc::clone(&places).acquire_owned() => place.expect("the semaphore is never closed"),
                    stopped = &mut stop => break stopped,
                }
            }
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was accepted: the next may work.
                    let error = error.to_string();
                    if said.again(&error) {
                        tracing::warn!(%error, "serve: cannot accept a connection");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            stopped = &mut stop => break stopped,
        };
        if said.over() {
            tracing::info!("serve: accepting connections again");
        }
        // Answers leave at once: without TCP_NODELAY a small answer may wait for the client's delayed ACK.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::warn!(%error, "serve: cannot set TCP_NODELAY on a connection");
        }
        let connection = Connection {
            builder: builder.clone(),
            router: router.clone(),
            watcher: graceful.watcher(),
            header_timeout: accepting.header_timeout,
        };
        let tls = accepting.tls.clone();
        tokio::spawn(async move {
            // The connection's place in the bound, given back when it ends, however it ends.
            let _place = place;
            match tls {
                None => connection.serve(stream).await,
                Some(tls) => connection.serve_tls(stream, tls).await,
            }
        });
    };
    if tokio::time::timeout(Duration::from_millis(SHUTDOWN_WAIT_MS), graceful.shutdown()).await.is_err() {
        tracing::warn!(wait_ms = SHUTDOWN_WAIT_MS, "serve: requests still in flight; exiting without them");
    }
    stopped
}

/// What serving one accepted connection needs.
struct Connection {
    builder: Builder,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
    header_timeout: Duration,
}

impl Connection {
    /// HTTP on `io` until the client goes, times out, or the server stops.
    async fn serve(self, io: impl AsyncRead + AsyncWrite + Unpin + Send + 'static) {
        let service = hyper_util::service::TowerToHyperService::new(self.router);
        // A client that goes away or times out ends its connection; nothing to tell the operator.
        let _ = match self.builder {
            Builder::Http1(builder) => self.watcher.watch(builder.serve_connection(TokioIo::new(io), service)).await,
            Builder::Http2(builder) => self.watcher.watch(builder.serve_connection(TokioIo::new(io), service)).await,
        };
    }

    /// HTTP/1 over TLS. The handshake has the header timeout to finish: a client that connects and sends nothing
    /// would otherwise hold its place for ever. A client speaking plain HTTP to this port is told so in plain
    /// HTTP (as nginx does), then the connection is closed.
    async fn serve_tls(self, stream: TcpStream, tls: TlsAcceptor) {
        let mut first = [0u8; 1];
        let opened = tokio::time::timeout(self.header_timeout, async {
            match stream.peek(&mut first).await {
                Ok(1) if first[0] == TLS_HANDSHAKE_RECORD => tls.accept(stream).await.map(Some),
                Ok(1) => {
                    refuse_plain_http(stream).await;
                    Ok(None)
                }
                Ok(_) => Ok(None),
                Err(error) => Err(error),
            }
        });
        // A handshake refused (no protocol or cipher in common, a client that does not trust the certificate) or
        // cut short is the client's to see: nothing to tell the operator for each one.
        if let Ok(Ok(Some(stream))) = opened.await {
            self.serve(stream).await;
        }
    }
}

/// How long, and how many bytes at most, the rest of a plain HTTP request is read and dropped after its 400: a
/// socket closed with unread bytes sends a reset, which may destroy the answer before the client reads it.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES_MAX: usize = crate::limits::BODY_LIMIT_BYTES * 2;

/// Answers a plain HTTP request sent to the TLS port with 400 and closes the connection.
async fn refuse_plain_http(mut stream: TcpStream) {
    use tokio::io::AsyncReadExt;
    let message = "this port speaks HTTPS: send the request over TLS (https://)";
    let members =
        serde_json::Map::from_iter([("error".into(), "bad_request".into()), ("message".into(), message.into())]);
    // Written by hand, below the router and its layers: a problem document as every other error.
    let body = crate::answer::problem(axum::http::StatusCode::BAD_REQUEST, members).to_string();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: {}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n\
         {body}",
        crate::answer::PROBLEM_JSON,
        body.len()
    );
    // The client may be gone already: nothing to do about it.
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
    let _ = tokio::time::timeout(LINGER, async {
        let mut dropped = [0u8; 4096];
        let mut left = LINGER_BYTES_MAX;
        while let Ok(read @ 1..) = stream.read(&mut dropped).await {
            left = left.saturating_sub(read);
            if left == 0 {
                break;
            }
        }
    })
    .await;
}

/// SIGTERM and SIGINT (Ctrl-C), listened for from before serve says it listens: a supervisor's SIGTERM right after
/// that line is a clean stop, not the default action's exit (a signal delivered before a stream exists is missed).
pub(crate) struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Listens for both (inside the runtime).
    pub(crate) fn listen() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals { terminate: signal(SignalKind::terminate())?, interrupt: signal(SignalKind::interrupt())? })
    }

    /// Answers at the first of them.
    async fn stop(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
