# crew's build and test entry points. `make test` is what CI runs.

GO ?= go
PKGS := ./...
BENCHFLAGS ?=
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build test vet unit e2e cross fuzz bench clean

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

fuzz:
	$(GO) test ./internal/record/ -run '^$$' -fuzz FuzzDecodeRecord -fuzztime 20s
	$(GO) test ./internal/record/ -run '^$$' -fuzz FuzzDecodeConfig -fuzztime 20s

# Go benchmarks, then the whole-process comparison with flock, sem, tsp and nq
# (bench/README.md; results in docs/benchmarks.md). Smoke run: make bench BENCHFLAGS=-quick
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./bench/cmd/crewbench $(BENCHFLAGS)

clean:
	rm -rf bin
