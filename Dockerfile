# Multi-stage build: the host binary (without the demo and the simulators) and the handler
# components, then a slim runtime image.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# rust-toolchain.toml pins the toolchain and the wasm32-wasip2 target; install them first so
# the layer is cached across source changes.
COPY rust-toolchain.toml ./
RUN rustup toolchain install && rustup target list --installed | grep -q wasm32-wasip2
COPY . .
# The binary without its default `demo` feature: no simulator, no demo, no test kit linked
# (`cargo tree -p slotd --no-default-features -e normal,build` shows it; .ci/run checks it).
RUN cargo build --release --locked -p slotd --no-default-features \
    && mkdir -p /out \
    && cp target/release/slotd /out/slotd
# The handlers, a build step of their own: host/handlers/build.rs builds plugins/ for
# wasm32-wasip2 and installs the provider handlers' .wasm files into plugins/ (the test
# fixtures it also builds stay in target/wasm-plugins; .dockerignore keeps the build context's
# own plugins/*.wasm out, so what is copied is what this step built).
RUN cargo build --release --locked -p slotd-handlers \
    && mkdir -p /out/plugins \
    && cp plugins/*.wasm /out/plugins/

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
