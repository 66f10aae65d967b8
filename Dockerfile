# The sandboxd daemon image, for registries and Docker users:
#   docker build -t sandboxd:latest .
# Offline, or without a registry, `make image` builds the same image from
# Debian packages with debootstrap and loads it with `docker import`.
#
# Inside, the daemon uses the process backend: the container is the
# isolation boundary (client.StartDocker runs one per agent), so sandboxes
# run as root in it, each in its own workspace. It listens on TCP 7070 and
# needs a token: SANDBOXD_TOKEN (client.StartDocker makes one).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/sandboxd ./cmd/sandboxd && \
    CGO_ENABLED=0 go build -trimpath -o /out/sandboxd-helper ./cmd/sandboxd-helper

FROM debian:bookworm-slim
RUN apt-get update && \
    apt-get install -y --no-install-recommends bash ca-certificates procps \
      python3 python3-ipykernel chromium fonts-dejavu-core && \
    rm -rf /var/lib/apt/lists/*
COPY --from=build /out/sandboxd /out/sandboxd-helper /usr/local/bin/
EXPOSE 7070
ENTRYPOINT ["sandboxd", "serve", "--listen", "tcp://0.0.0.0:7070", "--allow-insecure-listen", "--state-dir", "/var/lib/sandboxd", "--set", "process.user_isolation=false", "--set", "containerd.enabled=false"]
