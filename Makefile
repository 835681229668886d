# leasehold — see README.md. `make test` is what CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
GO ?= go
PKGS ?= ./...
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test vet spec lint fuzz mutants bench check bench-peers

# The modules of their own whose tests make test runs too: they need
# dependencies the library's go.mod does not carry (the OpenTelemetry SDK, an
# exporter, chromedp).
TEST_MODULES ?= core/oteltest examples/metrics test/browser

# vet, then every test with the race detector, of the library and of
# TEST_MODULES. The output lists every test and subtest that ran, so a log
# shows which scenarios were exercised.
test: vet
	$(GO) test -race -count=1 -timeout 20m -v $(PKGS) 2>&1 | tee .test.log | \
	  grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS|panic)|^\s+\S+\.go:[0-9]+:' ; \
	  for m in $(TEST_MODULES); do \
	    (cd $$m && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m -v ./...) 2>&1 | tee -a .test.log | \
	      grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS|panic)|^\s+\S+\.go:[0-9]+:|^# |vet:' ; \
	  done; \
	  grep -c -E '^\s*--- PASS' .test.log | sed 's/^/tests and subtests passed: /'

vet:
	$(GO) vet $(PKGS)

# Regenerate the spec document from the model's transition table.
spec:
	$(GO) generate ./spec

lint: vet
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) run $(STATICCHECK) $(PKGS)

# Long property runs of the model and the adapters, and the harness on a
# Redis Cluster through five master failovers a run.
fuzz:
	$(GO) test ./fuzz/... -count=1 -rapid.checks=20000 -timeout 60m
	LEASEHOLD_FAILOVERS=5 $(GO) test ./linearizability/ -count=1 -run 'TestClusterFailoverHistories' -timeout 20m
	$(GO) test ./adapters/redis/ -run '^$$' -fuzz '^FuzzDecodeTask$$' -fuzztime 60s
	$(GO) test ./adapters/sqlite/ -run '^$$' -fuzz '^FuzzDecodeTask$$' -fuzztime 60s
	$(GO) test ./adapters/postgres/ -run '^$$' -fuzz '^FuzzDecodeTask$$' -fuzztime 60s

# The mutant catalogue: each historical bug must be caught by the harness.
mutants:
	$(GO) run ./fuzz/mutants/cmd/mutants

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# leasehold beside asynq, River and goqite (bench/peers, a module of its own;
# see bench/peers/README.md). The program starts a private redis-server on a
# free port (--save "" --appendonly no) and stops it, and runs River on the
# local PostgreSQL. Flags: make bench-peers BENCH_PEERS_FLAGS="-tasks 2000".
BENCH_PEERS_FLAGS ?=
bench-peers:
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	  cd bench/peers && $(GO) build -o "$$dir/peers" . && \
	  timeout --signal=INT --kill-after=1m 3h "$$dir/peers" $(BENCH_PEERS_FLAGS)

# The main job: the linearizability check on the embedded memory store.
check:
	$(GO) run ./cmd/leasehold check
