//! The benchmark's client: one kept-alive connection on loopback, requests written by hand, the same few lines for
//! both peers of `bench hook` (HTTP/1.1 to `serve`, RESP to Redis), so that the figures compare servers, not client
//! libraries.

use anyhow::Context;

/// One kept-alive connection on loopback, requests written by hand: to `serve` HTTP/1.1 (responses read with
/// `httparse`), to Redis its protocol, RESP. The same few lines of client for both peers, so that the figures
/// compare servers, not client libraries. (ureq, tried first, let the client cost more than the server: 5,000
/// checks/s where `wrk` drove the same server to 14,000.)
pub(crate) struct Connection {
    stream: tokio::net::TcpStream,
    buffer: Vec<u8>,
}

impl Connection {
    pub(crate) async fn open(port: u16) -> anyhow::Result<Connection> {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        Ok(Connection { stream, buffer: Vec::with_capacity(4_096) })
    }

    /// Sends `request` and reads until `complete` finds a whole answer at the start of what arrived; answers
    /// `complete`'s value.
    async fn exchange<T>(
        &mut self,
        request: &[u8],
        complete: impl Fn(&[u8]) -> anyhow::Result<Option<T>>,
    ) -> anyhow::Result<T> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.stream.write_all(request).await?;
        self.buffer.clear();
        loop {
            if let Some(answer) = complete(&self.buffer)? {
                return Ok(answer);
            }
            let read = self.stream.read_buf(&mut self.buffer).await?;
            anyhow::ensure!(read > 0, "the server closed the connection");
        }
    }

    /// POSTs a JSON body and answers the response's status, after reading the whole response.
    pub(crate) async fn post(&mut self, path: &str, token: &str, body: &str) -> anyhow::Result<u16> {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.exchange(request.as_bytes(), |received| {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            let httparse::Status::Complete(head) = response.parse(received)? else { return Ok(None) };
            let length = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
                .context("a response without Content-Length")?;
            let status = response.code.context("a response without a status")?;
            Ok((received.len() >= head + length).then_some(status))
        })
        .await
    }

    /// Sends one Redis command and answers its reply.
    pub(crate) async fn command(&mut self, arguments: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut request = format!("*{}\r\n", arguments.len()).into_bytes();
        for argument in arguments {
            request.extend_from_slice(format!("${}\r\n", argument.len()).as_bytes());
            request.extend_from_slice(argument);
            request.extend_from_slice(b"\r\n");
        }
        self.exchange(&request, Reply::parse).await
    }
}

/// A Redis reply of the kinds the benchmark's commands answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Integer(i64),
    Bulk(Option<Vec<u8>>),
}

impl Reply {
    /// The reply at the start of `received`, if it arrived whole; an error reply (`-ERR ...`) is an error.
    fn parse(received: &[u8]) -> anyhow::Result<Option<Reply>> {
        let Some(end) = received.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let line = std::str::from_utf8(&received[1..end])?;
        match received[0] {
            b':' => Ok(Some(Reply::Integer(line.parse()?))),
            b'$' if line == "-1" => Ok(Some(Reply::Bulk(None))),
            b'$' => {
                let length: usize = line.parse()?;
                let body = end + 2;
                Ok((received.len() >= body + length + 2)
                    .then(|| Reply::Bulk(Some(received[body..body + length].to_vec()))))
            }
            b'-' => anyhow::bail!("redis answered {line}"),
            other => anyhow::bail!("an unexpected redis reply: {:?}", other as char),
        }
    }
}
