# crew's build and test entry points. `make test` is what CI runs.

GO ?= go
PKGS := ./...
BENCHFLAGS ?=
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build build-etcd install docs test test-local test-etcd vet vet-etcd unit e2e soak cross fuzz bench bench-check clean

all: build

# The production binary: static (no cgo: cobra's flag package imports net,
# which would link libc dynamically and cost every start the dynamic
# loader), without absolute paths. Benchmarks and the static-link test
# build it through this target, so there is one definition of it.
# crew --version says VERSION (from git describe; empty: what the Go
# toolchain recorded in the binary).
BIN ?= bin/crew
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS = -X main.version=$(VERSION)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/crew

# make install [PREFIX=/usr/local] [DESTDIR=]: crew in PREFIX/bin, its man
# pages in PREFIX/share/man/man1 (both under DESTDIR, for packagers).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
install: build
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(MANDIR)/man1"
	install -m 0755 $(BIN) "$(DESTDIR)$(BINDIR)/crew"
	install -m 0644 docs/man/*.1 "$(DESTDIR)$(MANDIR)/man1/"

# The command reference (docs/commands/) and the man pages (docs/man/),
# generated from the local build's commands by internal/tools/gendocs,
# which is not linked into crew. They are committed; a test
# (internal/tools/gendocs) fails when they are stale.
docs: build
	$(GO) run ./internal/tools/gendocs -crew $(BIN) -out docs

# crew with the etcd store (README, "Running across machines"): the same
# commands, plus --store etcd://... The etcd client (gRPC, protobuf) is
# linked only here, so the local default above never pays its start-up.
ETCD_BIN ?= bin/crew-etcd
build-etcd:
	CGO_ENABLED=0 $(GO) build -tags etcd -trimpath -ldflags "$(LDFLAGS)" -o $(ETCD_BIN) ./cmd/crew

# Everything: the local build (vet, unit and e2e tests with -race, the
# darwin cross-build), then the etcd store's.
test: test-local test-etcd

test-local: vet cross
	$(GO) test -race -count=1 -timeout 8m $(PKGS)

# The etcd store: vet and staticcheck of the tagged packages, their unit
# tests against an embedded etcd, and the e2e fleet tests (TestFleet)
# against an embedded 3-member cluster, all with -race (one race build of
# etcd's server serves both). The rest of e2e ran in test-local.
ETCD_PKGS := ./internal/fleet/ ./internal/leaseguard/ ./cmd/crew/ ./cmd/crew-etcd-dev/
test-etcd: vet-etcd
	$(GO) test -race -count=1 -timeout 5m -tags etcd $(ETCD_PKGS)
	$(GO) test -race -count=1 -timeout 5m -tags etcd -run '^TestFleet$$' ./e2e/

vet-etcd:
	$(GO) vet -tags etcd $(ETCD_PKGS) ./e2e/
	$(GO) run $(STATICCHECK) -tags etcd $(ETCD_PKGS)
	GOOS=darwin GOARCH=arm64 $(GO) build -tags etcd -o /dev/null ./cmd/crew

vet:
	@test -z "$$(gofmt -l .)" || (echo "gofmt needed on:"; gofmt -l .; exit 1)
	$(GO) vet $(PKGS)
	$(GO) vet -tags failpoints $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	$(GO) run $(STATICCHECK) -tags failpoints $(PKGS)

cross:
	GOOS=darwin GOARCH=arm64 $(GO) build ./...
	GOOS=darwin GOARCH=arm64 $(GO) build -tags failpoints ./...
	GOOS=linux $(GO) build ./...

unit:
	$(GO) test -race -count=1 ./internal/... ./cmd/...

e2e:
	$(GO) test -race -count=1 -v ./e2e/

# Soak: the e2e stress, queue and chaos tests round after round for
# SOAKTIME (make soak SOAKTIME=1h; SOAKTIMEOUT must exceed it). Not part of
# `make test`, which runs each of them once. CREW_CHAOS_SEED=N replays a
# chaos seed in every round.
SOAKTIME ?= 10m
SOAKTIMEOUT ?= 1h
soak:
	CREW_SOAK=1 $(GO) test -race -count=1 -run 'Regression' ./internal/dispatch/
	CREW_SOAK=1 CREW_SOAK_DURATION=$(SOAKTIME) $(GO) test -race -count=1 -timeout $(SOAKTIMEOUT) -run '^TestSoak$$' -v ./e2e/

fuzz:
	$(GO) test ./internal/record/ -run '^$$' -fuzz FuzzDecodeRecord -fuzztime 20s
	$(GO) test ./internal/record/ -run '^$$' -fuzz FuzzDecodeConfig -fuzztime 20s
	$(GO) test ./internal/record/ -run '^$$' -fuzz FuzzAppendJSONString -fuzztime 20s

# Go benchmarks, then the whole-process comparison with flock, sem, tsp and nq
# (bench/README.md; results in docs/benchmarks.md). Smoke run: make bench BENCHFLAGS=-quick
# The harness is its own module (bench/go.mod): it builds crew from this
# tree as a user would and drives only the binary. A relative -o in
# BENCHFLAGS is relative to bench/.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	cd bench && $(GO) run ./cmd/crewbench -crew-src "$(CURDIR)" $(BENCHFLAGS)

# gofmt, vet and unit tests of the harness module only (make test skips it).
bench-check:
	@cd bench && test -z "$$(gofmt -l .)" || (echo "gofmt needed on (in bench/):"; gofmt -l .; exit 1)
	cd bench && $(GO) vet ./...
	cd bench && $(GO) test -count=1 ./...

clean:
	rm -rf bin
