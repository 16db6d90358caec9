# Multi-stage build: the host binary and the handler components, then a slim runtime image.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# rust-toolchain.toml pins the toolchain and the wasm32-wasip2 target; install them first so
# the layer is cached across source changes.
COPY rust-toolchain.toml ./
RUN rustup toolchain install && rustup target list --installed | grep -q wasm32-wasip2
COPY . .
# host/testkit/build.rs builds the handlers in plugins/ for wasm32-wasip2 and places the provider
# handlers' .wasm files in plugins/.
RUN cargo build --release --locked -p slotd \
    && mkdir -p /out/plugins \
    && cp target/release/slotd /out/slotd \
    && (cp plugins/*.wasm /out/plugins/ 2>/dev/null || true)

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/slotd --create-home slotd
COPY --from=build /out/slotd /usr/local/bin/slotd
COPY --from=build /out/plugins /opt/slotd/plugins
USER slotd
WORKDIR /var/lib/slotd
ENV SLOTD_PLUGINS_DIR=/opt/slotd/plugins \
    SLOTD_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["slotd"]
CMD ["serve"]
