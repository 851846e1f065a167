# Builds the command-ledger binary from the committed sources and offline
# query data (no database needed at build time).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
ENV SQLX_OFFLINE=true
RUN cargo build --release --locked --bin command-ledger

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 ledger \
    && mkdir -p /var/lib/command-ledger && chown ledger /var/lib/command-ledger
COPY --from=build /src/target/release/command-ledger /usr/local/bin/command-ledger
USER ledger
EXPOSE 8080
ENTRYPOINT ["command-ledger"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
