# quota-ledger in a container: built in a Rust image, run as a non-root user from a slim Debian image that holds the
# binary and the C libraries it links (OpenSSL, zlib). docs/operations.md, "Running in a container".
#
#   docker build -t quota-ledger .
#   docker run -v ledger:/var/lib/quota-ledger -v ./etc:/etc/quota-ledger:ro -p 8080:8080 quota-ledger
#
# /etc/quota-ledger/quota-ledger.toml holds the flags (`[serve]` with `listen = "0.0.0.0:8080"` and a certificate, or
# `insecure-listen = true` behind a TLS-terminating proxy, and `tokens`); `quota-ledger config check` prints them.

FROM rust:1.94-slim-bookworm AS build
# librdkafka and SQLite are built from source by their crates: a C toolchain, make, and OpenSSL's and zlib's headers.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential pkg-config libssl-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p quota-ledger \
    && install -m 0755 target/release/quota-ledger /usr/local/bin/quota-ledger

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 quota-ledger \
    && useradd --system --uid 10001 --gid quota-ledger --home-dir /var/lib/quota-ledger --shell /usr/sbin/nologin quota-ledger \
    && install -d -o quota-ledger -g quota-ledger -m 0700 /var/lib/quota-ledger \
    && install -d -m 0755 /etc/quota-ledger
COPY --from=build /usr/local/bin/quota-ledger /usr/local/bin/quota-ledger
USER 10001:10001
WORKDIR /var/lib/quota-ledger
ENV QUOTA_LEDGER_PATH=/var/lib/quota-ledger/quota-ledger.db \
    QUOTA_LEDGER_CONFIG=/etc/quota-ledger/quota-ledger.toml \
    QUOTA_LEDGER_LOG_FORMAT=json
VOLUME ["/var/lib/quota-ledger"]
EXPOSE 8080
# `/healthz` answers 200 while the hook records and 503 once a restart is what would end a failure (a refused sync of
# the log, a stopped writer). Plain HTTP on the container's loopback: with TLS on the listener, set a HEALTHCHECK that
# speaks it (an orchestrator's HTTPS probe, say).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5m --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
# SIGTERM stops it cleanly: in-flight requests finish and every queued decision is recorded before it exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/quota-ledger"]
CMD ["serve"]
