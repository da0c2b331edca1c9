//! `bench rls`: the same check asked two ways of one `serve`, in one run: Envoy's `ShouldRateLimit` over gRPC
//! (`--rls-listen`, one descriptor mapped to the hook's request) and `POST /v1/check` over HTTP/1.1, each client on a
//! kept-alive connection of its own, at each concurrency. What the gRPC layer (HTTP/2, protobuf, the mapping) costs
//! beside the JSON one, on the same hook and ledger.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use serve::rls::proto::{Code, Entry, RateLimitDescriptor, RateLimitRequest, RateLimitResponse};

use crate::client::Connection;
use crate::hook::{ChildGuard, Client, Driver, Figures, HttpCheck, TOKEN, free_port, fresh_ledger, wait_for};

/// The mapping of the measured descriptors: the tenant from an entry, the benchmark's metric, Envoy's request id.
const MAPPING: &str = "[[domain]]\nname = \"bench\"\n\n[[domain.descriptor]]\ntenant = { key = \"tenant\" }\n\
                       metric = { value = \"tokens\" }\nrequest_id = \"x-request-id\"\n";

/// What to measure.
#[derive(Debug, Clone)]
pub struct RlsBenchSettings {
    /// Clients of each measurement, one measurement of each way each.
    pub concurrency: Vec<usize>,
    /// Seconds each measurement counts, after half a second of warm-up.
    pub seconds: f64,
    /// `full` or `normal`: the served ledger's durability.
    pub durability: String,
    /// The `quota-ledger` binary whose `serve` is measured.
    pub binary: std::path::PathBuf,
}

/// Measures both ways at each concurrency of `settings`; `measured` is given each concurrency's figures as they come.
pub fn run(
    settings: &RlsBenchSettings,
    measured: &mut dyn FnMut(&[Figures]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Figures>> {
    let seconds = settings.seconds;
    anyhow::ensure!(seconds.is_finite() && seconds > 0.0, "--seconds must be positive, not {seconds}");
    let dir = tempfile::tempdir()?;
    let driver = Driver::new(seconds)?;
    let mut figures = Vec::new();
    let mut run = 0;
    for &clients in &settings.concurrency {
        let first = figures.len();
        for grpc in [true, false] {
            run += 1;
            figures.push(measure(settings, &driver, dir.path(), (run, clients), grpc)?);
        }
        measured(&figures[first..])?;
    }
    Ok(figures)
}

/// One measurement on a fresh ledger and `serve`: over gRPC, or over HTTP.
fn measure(
    settings: &RlsBenchSettings,
    driver: &Driver,
    dir: &Path,
    (run, clients): (usize, usize),
    grpc: bool,
) -> anyhow::Result<Figures> {
    let path = dir.join(format!("rls-{run}.db"));
    fresh_ledger(&path, 0)?;
    let (tokens, mapping) = (dir.join("tokens.toml"), dir.join("rls.toml"));
    serve::tokens::write_private(
        &tokens,
        &format!("[[token]]\nname = \"bench\"\nsecret = \"{TOKEN}\"\ntenants = [\"*\"]\n"),
    )?;
    std::fs::write(&mapping, MAPPING)?;
    let (http_port, rls_port) = (free_port()?, free_port()?);
    let child = Command::new(&settings.binary)
        .arg("--ledger")
        .arg(&path)
        .args(["serve", "--listen", &format!("127.0.0.1:{http_port}"), "--durability", &settings.durability])
        .args(["--rls-listen", &format!("127.0.0.1:{rls_port}"), "--tokens"])
        .arg(&tokens)
        .arg("--rls-config")
        .arg(&mapping)
        .stdout(Stdio::null())
        .spawn()
        .context("cannot start serve")?;
    let _guard = ChildGuard(child);
    wait_for(http_port)?;
    wait_for(rls_port)?;
    let durability = &settings.durability;
    if grpc {
        let clients = driver.runtime.block_on(async {
            let mut connected = Vec::with_capacity(clients);
            for client in 0..clients {
                connected.push(RlsCheck { sender: open(rls_port).await?, port: rls_port, run, client });
            }
            anyhow::Ok(connected)
        })?;
        driver.measure(&format!("hook over Envoy RLS, gRPC ({durability})"), clients)
    } else {
        let clients = driver.runtime.block_on(async {
            let mut connected = Vec::with_capacity(clients);
            for client in 0..clients {
                let connection = Connection::open(http_port).await?;
                connected.push(HttpCheck { connection, run, client, random_ids: false });
            }
            anyhow::Ok(connected)
        })?;
        driver.measure(&format!("hook over HTTP /v1/check ({durability})"), clients)
    }
}

/// An HTTP/2 connection, as a gRPC client holds one (hyper's client: an HTTP/2 client by hand would measure itself).
async fn open(port: u16) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One client's `ShouldRateLimit` calls: a descriptor of the benchmark's tenant with its own request id.
struct RlsCheck {
    sender: SendRequest<Full<Bytes>>,
    port: u16,
    run: usize,
    client: usize,
}

impl Client for RlsCheck {
    async fn call(&mut self, i: usize) -> anyhow::Result<()> {
        let (run, c) = (self.run, self.client);
        let entry = |key: &str, value: String| Entry { key: key.into(), value };
        let entries = vec![entry("tenant", "org-bench".into()), entry("x-request-id", format!("r{run}-c{c}-i{i}"))];
        let message = RateLimitRequest {
            domain: "bench".into(),
            descriptors: vec![RateLimitDescriptor { entries, hits_addend: None }],
            hits_addend: 1,
        };
        // gRPC's framing: uncompressed (0), the length (big-endian), the message.
        let length = message.encoded_len();
        let mut body = Vec::with_capacity(5 + length);
        body.push(0);
        body.extend_from_slice(&u32::try_from(length)?.to_be_bytes());
        message.encode(&mut body)?;
        let request = hyper::Request::post(format!(
            "http://127.0.0.1:{}{}",
            self.port,
            serve::rls::proto::SHOULD_RATE_LIMIT_PATH
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Full::new(Bytes::from(body)))?;
        let response = self.sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        let collected = body.collect().await?;
        let status =
            collected.trailers().and_then(|t| t.get("grpc-status")).or_else(|| parts.headers.get("grpc-status"));
        anyhow::ensure!(status.is_some_and(|s| s == "0"), "the call failed: {status:?}");
        let data = collected.to_bytes();
        let answer = RateLimitResponse::decode(data.get(5..).context("an answer without its message")?)?;
        anyhow::ensure!(answer.overall_code == Code::Ok as i32, "every benchmark check is allowed: {answer:?}");
        Ok(())
    }
}
