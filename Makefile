# Conveniences; the README's commands are the reference.
GO ?= go
PREFIX ?= /usr/local

.PHONY: build install uninstall test
# Static binaries: the helper runs inside containers of any image.
build:
	CGO_ENABLED=0 $(GO) build -o bin/sandboxd ./cmd/sandboxd
	CGO_ENABLED=0 $(GO) build -o bin/sandboxd-helper ./cmd/sandboxd-helper

install: build
	./bin/sandboxd install --prefix $(PREFIX) --enable

uninstall:
	./bin/sandboxd uninstall --prefix $(PREFIX)

test:
	$(GO) test -race -count=1 ./...
