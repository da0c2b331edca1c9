//! The accept loop: HTTP/1 connections with a timer on each request header, until SIGTERM or Ctrl-C (or until the
//! hook's writer stopped), then a graceful stop.

use std::future::Future;
use std::time::Duration;

use axum::Router;

use crate::SHUTDOWN_WAIT_MS;

/// Why the accept loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGTERM or Ctrl-C.
    Signal,
    /// `also_stop` answered (the hook's writer stopped).
    Asked,
}

/// Accepts and serves HTTP/1 connections until SIGTERM or Ctrl-C, or until `also_stop` answers, then lets the
/// requests in flight finish (for [`SHUTDOWN_WAIT_MS`] at most). What `axum::serve` does, plus a timeout on the
/// request header, which needs a timer that `axum::serve` does not give hyper.
pub(crate) async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: Router,
    header_timeout: Duration,
    also_stop: impl Future<Output = ()>,
) -> Stop {
    use hyper_util::rt::{TokioIo, TokioTimer};

    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = std::pin::pin!(async {
        tokio::select! {
            _ = shutdown() => Stop::Signal,
            _ = also_stop => Stop::Asked,
        }
    });
    // Out of file descriptors, accept fails ten times a second until one is closed: said once, not each time.
    let mut said = kafka::Said::default();
    let stopped = loop {
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
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that goes away or times out ends its connection; nothing to tell the operator.
            let _ = connection.await;
        });
    };
    if tokio::time::timeout(Duration::from_millis(SHUTDOWN_WAIT_MS), graceful.shutdown()).await.is_err() {
        log::warn!("serve: requests still in flight after {SHUTDOWN_WAIT_MS} ms; exiting without them");
    }
    stopped
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
