# crew's build and test entry points. `make test` is what CI runs.

GO ?= go
PKGS := ./...
BENCHFLAGS ?=
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build test vet unit e2e soak cross fuzz bench clean

all: build

build:
	$(GO) build -o bin/crew ./cmd/crew

# vet, unit tests, e2e tests (all with -race), and the darwin cross-build.
test: vet cross
	$(GO) test -race -count=1 -timeout 8m $(PKGS)

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
	CREW_SOAK=1 CREW_SOAK_DURATION=$(SOAKTIME) $(GO) test -race -count=1 -timeout $(SOAKTIMEOUT) -run '^TestSoak$$' -v ./e2e/

fuzz:
	$(GO) test ./internal/runstore/ -run '^$$' -fuzz FuzzDecodeRecord -fuzztime 20s
	$(GO) test ./internal/runstore/ -run '^$$' -fuzz FuzzDecodeConfig -fuzztime 20s

# Go benchmarks, then the whole-process comparison with flock, sem, tsp and nq
# (bench/README.md; results in docs/benchmarks.md). Smoke run: make bench BENCHFLAGS=-quick
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./bench/cmd/crewbench $(BENCHFLAGS)

clean:
	rm -rf bin
