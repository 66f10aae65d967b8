# Conveniences; the README's commands are the reference.
GO ?= go
PREFIX ?= /usr/local

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS = -X github.com/sandboxd/sandboxd/daemon.Version=$(VERSION)
DEBIAN_MIRROR ?= http://deb.debian.org/debian
DEBIAN_SECURITY_MIRROR ?= http://deb.debian.org/debian-security
# The image's packages: the same as the Dockerfile's (a test checks).
IMAGE_PACKAGES = bash ca-certificates procps python3 python3-ipykernel chromium fonts-dejavu-core
IMAGE_ROOT ?= build/image-root

.PHONY: build install uninstall test test-long fuzz bench image
# Static binaries: the helper runs inside containers of any image.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/sandboxd ./cmd/sandboxd
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/sandboxd-helper ./cmd/sandboxd-helper

install: build
	./bin/sandboxd install --prefix $(PREFIX) --enable

uninstall:
	./bin/sandboxd uninstall --prefix $(PREFIX)

test:
	$(GO) test -race -count=1 -timeout 60m ./...

# The load and churn tests at the issue's sizes (64 clients, 20 containerd
# sandboxes, 60 s runs, 20 churn rounds); `make test` runs them short.
test-long:
	SANDBOXD_TEST_LONG=1 $(GO) test -race -count=1 -timeout 90m -run 'TestLoad|TestChurn' ./tests/

# Every fuzz target from its corpus in testdata/fuzz, FUZZTIME each (CI
# runs them for 20s; longer on demand: make fuzz FUZZTIME=30m).
FUZZTIME ?= 30s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# Every benchmark beside its floor, a short load run, and the results
# written into docs/benchmarks.md (scripts/bench.sh has the groups and
# their -benchtime; under 10 minutes on 2 cores). BENCHTIME=1x checks the
# tooling quickly.
bench:
	GO=$(GO) ./scripts/bench.sh

# The daemon image without a registry: a Debian root from debootstrap with
# the image's packages (apt-get in the root: debootstrap's own --include
# does not resolve alternatives such as chromium's), the static binaries,
# and the Dockerfile's ENTRYPOINT and EXPOSE, loaded with docker import as
# sandboxd:$(VERSION) and sandboxd:latest. Needs root, debootstrap and a
# running dockerd.
image: build
	rm -rf $(IMAGE_ROOT) && mkdir -p $(IMAGE_ROOT)
	debootstrap --variant=minbase bookworm $(IMAGE_ROOT) $(DEBIAN_MIRROR)
	echo "deb $(DEBIAN_SECURITY_MIRROR) bookworm-security main" >> $(IMAGE_ROOT)/etc/apt/sources.list
	chroot $(IMAGE_ROOT) apt-get update
	chroot $(IMAGE_ROOT) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(IMAGE_PACKAGES)
	chroot $(IMAGE_ROOT) apt-get clean
	rm -rf $(IMAGE_ROOT)/var/lib/apt/lists/* $(IMAGE_ROOT)/var/log/* $(IMAGE_ROOT)/tmp/*
	install -m 0755 bin/sandboxd bin/sandboxd-helper $(IMAGE_ROOT)/usr/local/bin/
	tar -C $(IMAGE_ROOT) --numeric-owner -c . | docker import \
	  --change "$$(grep '^EXPOSE ' Dockerfile)" --change "$$(grep '^ENTRYPOINT ' Dockerfile)" \
	  --message "sandboxd $(VERSION), built by make image" - sandboxd:$(VERSION)
	docker tag sandboxd:$(VERSION) sandboxd:latest
	rm -rf $(IMAGE_ROOT)
