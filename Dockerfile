# signpost container image.
#
#   docker build -t signpost .
#   docker run -p 8080:8080 -v "$PWD/policy.toml:/etc/signpost/policy.toml:ro" signpost
#
# Two stages: the build stage compiles the `signpost` binary with the official Rust image, the
# runtime stage is Debian slim with that binary, the default policy at /etc/signpost/policy.toml
# and an unprivileged user (uid/gid 10001). See docker/README.md.
#
# Works with the classic builder and with BuildKit alike (no BuildKit-only syntax), so that
# docker/test.sh can build it on a machine without a registry from locally made stand-ins for
# the two base images.

FROM rust:1-bookworm AS build

# Pingora builds zlib (and friends) with cmake; the Rust image has gcc, g++, make and perl but not
# cmake. Skipped when the base image already has it (the offline stand-in of docker/test.sh does).
RUN if ! command -v cmake >/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends cmake \
        && rm -rf /var/lib/apt/lists/*; \
    fi

WORKDIR /src
COPY . .

# Crates come from crates.io, or from a vendored directory when the build context carries a
# .cargo/config.toml that replaces crates.io (docker/test.sh does that to build offline).
# The target directory lives outside the source tree (and outside any host target/) and is
# removed in the same step, so the layer keeps only the binary.
# No debug info by default: it is four fifths of the binary (symbols stay, so backtraces still
# name functions). --build-arg CARGO_PROFILE_RELEASE_DEBUG=line-tables-only keeps line tables.
ARG CARGO_PROFILE_RELEASE_DEBUG=false
# The shipped image is built with the workspace's release profile (fat LTO, one codegen unit).
# docker/test.sh in CI may pass `off` and `16`: the same program, built several minutes faster,
# which is all a behaviour test needs.
ARG CARGO_PROFILE_RELEASE_LTO=fat
ARG CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
ENV CARGO_TARGET_DIR=/tmp/cargo-target
RUN cargo build --release --locked -p signpost \
    && install -D -m 0755 "$CARGO_TARGET_DIR/release/signpost" /out/signpost \
    && rm -rf "$CARGO_TARGET_DIR"


FROM debian:bookworm-slim

# TLS origins are verified against the system roots; take the bundle from the build stage (the
# Rust image has ca-certificates) instead of installing packages here.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt

RUN groupadd --system --gid 10001 signpost \
    && useradd --system --uid 10001 --gid signpost --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin signpost

COPY --from=build /out/signpost /usr/local/bin/signpost
# The default policy: mount your own over it (-v ./policy.toml:/etc/signpost/policy.toml:ro).
COPY config/default.toml /etc/signpost/policy.toml

LABEL org.opencontainers.image.title="signpost" \
      org.opencontainers.image.description="An edge reverse proxy on Pingora that answers its own errors in HTML, JSON or Markdown" \
      org.opencontainers.image.licenses="Apache-2.0"

USER 10001:10001
EXPOSE 8080

# Every command reads this policy unless given another (`--config`).
ENV SIGNPOST_CONFIG=/etc/signpost/policy.toml

# `signpost health` asks the admin listener the policy names (127.0.0.1:9901 by default) and exits
# 0 when it answers.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["signpost", "health"]

ENTRYPOINT ["signpost"]
CMD ["run", "--config", "/etc/signpost/policy.toml"]
