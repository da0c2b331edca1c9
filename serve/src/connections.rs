//! The accept loop: HTTP/1 connections, at most a bound of them at once, each with a timer on each request header,
//! until SIGTERM or Ctrl-C (or until the hook's writer stopped), then a graceful stop.
//!
//! Beyond the bound, new connections wait: the loop accepts no more until one closes, and the kernel holds the new
//! ones in the listening socket's backlog. Not 503: answering one takes what the bound protects (a descriptor, a
//! TLS handshake), while waiting costs the server nothing. The wait is short, since every connection that holds a
//! place without sending a request is closed after the header timeout: a client arriving behind idle connections is
//! accepted within that time, and a request that already waits in the backlog is answered when it is.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;

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
pub(crate) struct Accepting {
    /// Connections open at once at most; more wait in the backlog.
    pub(crate) connections_max: usize,
    /// How long a client may take to send each request header (or leave a kept-alive connection idle: hyper times
    /// both the same way).
    pub(crate) header_timeout: Duration,
}

/// Accepts and serves HTTP/1 connections until SIGTERM or Ctrl-C, or until `also_stop` answers, then lets the
/// requests in flight finish (for [`SHUTDOWN_WAIT_MS`] at most). What `axum::serve` does, plus a timeout on the
/// request header (which needs a timer that `axum::serve` does not give hyper), and a bound on connections.
pub(crate) async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: Router,
    accepting: Accepting,
    also_stop: impl Future<Output = ()>,
) -> Stop {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(accepting.header_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let places = Arc::new(Semaphore::new(accepting.connections_max));
    let mut stop = std::pin::pin!(async {
        tokio::select! {
            _ = shutdown() => Stop::Signal,
            _ = also_stop => Stop::Asked,
        }
    });
    // Out of file descriptors, accept fails ten times a second until one is closed: said once, not each time.
    let mut said = kafka::Said::default();
    let mut full = kafka::Said::default();
    let stopped = loop {
        let place = match Arc::clone(&places).try_acquire_owned() {
            Ok(place) => {
                if full.over() {
                    log::info!("serve: below the bound of connections again");
                }
                place
            }
            Err(_) => {
                if full.again("full") {
                    log::warn!(
                        "serve: {} connections open, the bound (--connections-max): new ones wait until one closes",
                        accepting.connections_max
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
                        log::warn!("serve: cannot accept a connection: {error}");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            stopped = &mut stop => break stopped,
        };
        if said.over() {
            log::info!("serve: accepting connections again");
        }
        // Answers leave at once: without TCP_NODELAY a small answer may wait for the client's delayed ACK.
        if let Err(error) = stream.set_nodelay(true) {
            log::warn!("serve: cannot set TCP_NODELAY on a connection: {error}");
        }
        let connection = Connection { builder: builder.clone(), router: router.clone(), watcher: graceful.watcher() };
        tokio::spawn(async move {
            // The connection's place in the bound, given back when it ends, however it ends.
            let _place = place;
            connection.serve(stream).await
        });
    };
    if tokio::time::timeout(Duration::from_millis(SHUTDOWN_WAIT_MS), graceful.shutdown()).await.is_err() {
        log::warn!("serve: requests still in flight after {SHUTDOWN_WAIT_MS} ms; exiting without them");
    }
    stopped
}

/// What serving one accepted connection needs.
struct Connection {
    builder: hyper::server::conn::http1::Builder,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
}

impl Connection {
    /// HTTP/1 on `io` until the client goes, times out, or the server stops.
    async fn serve(self, io: impl AsyncRead + AsyncWrite + Unpin + Send + 'static) {
        let service = hyper_util::service::TowerToHyperService::new(self.router);
        let connection = self.builder.serve_connection(TokioIo::new(io), service);
        // A client that goes away or times out ends its connection; nothing to tell the operator.
        let _ = self.watcher.watch(connection).await;
    }
}

/// Answers at SIGTERM or Ctrl-C.
async fn shutdown() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
