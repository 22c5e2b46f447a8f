# syntax=docker/dockerfile:1
#
# quotagate container image: a static binary on distroless, run as non-root.
#
#   docker build -t quotagate --build-arg VERSION=$(git describe --always) .
#   docker run --rm -p 8080:8080 -p 9090:9090 quotagate
#
# The image listens on 0.0.0.0:8080 (gateway) and 0.0.0.0:9090 (admin:
# /healthz /readyz /metrics), set by the QUOTAGATE_SERVER_* variables below,
# which override the config file. On 0.0.0.0 the admin listener refuses
# /config, /hotkeys and /debug/pprof/ (403) until a bearer token is set:
#   -e QUOTAGATE_SERVER_ADMIN_TOKEN_ENV=QG_ADMIN_TOKEN -e QG_ADMIN_TOKEN=... Mount your own config over
# /etc/quotagate/config.yaml; the default one is the repository's config.yaml
# (in-process store, built-in echo upstream).

# --- build: compile on the build host's platform for the target platform ---
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/quotagate ./cmd/quotagate

# --- runtime: no shell, no package manager, CA certificates and tzdata only ---
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/quotagate /usr/local/bin/quotagate
COPY config.yaml /etc/quotagate/config.yaml
ENV QUOTAGATE_SERVER_LISTEN=0.0.0.0:8080 \
    QUOTAGATE_SERVER_ADMIN_LISTEN=0.0.0.0:9090
EXPOSE 8080 9090
# 65532 is distroless's "nonroot" user; numeric so that runAsNonRoot checks pass.
USER 65532:65532
# The image has no curl or wget: the binary probes its own admin listener.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/quotagate", "healthcheck", "-url", "http://127.0.0.1:9090/readyz"]
# SIGTERM (the default stop signal) drains in-flight requests for up to
# server.shutdown_timeout; give `docker stop -t` at least that long.
ENTRYPOINT ["/usr/local/bin/quotagate"]
CMD ["-config", "/etc/quotagate/config.yaml"]
