# hongbao — run `make` for the list of targets.
GO       ?= go
BIN      := bin
PKGS     := ./...
# The packages with allocation tests or memory bounds: the plain pass builds only these.
ALLOCPKGS = $(sort $(dir $(shell grep -rlE 'func Test[A-Za-z0-9_]*(Alloc|BoundsMemory)' --include='*_test.go' .)))
BENCHTIME ?= 1s
COUNT    ?= 5
USERS    ?= 10000
QPS      ?= 10000
DURATION ?= 30s
CONNS    ?= 19000
PINGCONNS ?= 1000
INFLIGHT ?= 1
PINGTIME ?= 10s
PERFFLAGS ?=
SOAKFLAGS ?=
PINGCOUNT ?= 3

.DEFAULT_GOAL := help
.PHONY: help build test test-failover test-short sim bench bench-ring lint fuzz clean demo demo-cluster connmem pingbench perf perf-open perf-compare soak

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build the binaries into bin/, nats-server among them (from its Go module: the demos' NATS, nothing to install)
	@# -buildvcs=auto: the binaries say their revision (-version, hongbao_build_info) even where GOFLAGS turns stamping off
	$(GO) build -buildvcs=auto -o $(BIN)/ ./cmd/...
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

# The packages whose tests take longest under -race, mostly waiting on timers.
LONGPKGS = ./server/ ./loadclient/ ./perf/cmd/democluster/ ./cmd/server/ ./cluster/

# The tests whose latency judgements run only without -race.
JUDGED = ^(TestHostileUnderLoad|TestOverload|TestMaxConns)$$

test: lint ## what CI runs: vet, gofmt, every test under -race, fuzz seeds included, then the allocation tests, memory bounds and latency judgements
	@# -p 4 -parallel 4: most packages and the tests that call t.Parallel wait on timers (leases, JetStream, rates), not on the CPU: run more of them at once than there are cores.
	@# LONGPKGS first: go test starts packages in the order named, and these wait longest.
	$(GO) test -race -count=1 -p 4 -parallel 4 -timeout 9m $(LONGPKGS) $(PKGS)
	@# The race detector allocates and blurs heap figures, so the zero-allocation tests and the memory bounds skip under -race: run them plainly.
	$(GO) test -count=1 -run 'Alloc|BoundsMemory' $(ALLOCPKGS)
	@# The detector's cost blurs latency too: under -race these tests check what the ledger and the answers say, and only here judge their latencies (a p99 against the baseline's, a probe served during a blast, a refused connection closed at once).
	$(GO) test -count=1 -run '$(JUDGED)' ./server/
	@# The simulation runs on one goroutine, where the detector finds nothing and costs twelvefold: its seeds run here.
	$(GO) test -count=1 -run 'TestSeeds' ./sim/

test-failover: ## the failover scenario's own test, alone: NATS, 3 gateways and a load client under -race for ~30 s
	HONGBAO_FAILOVER_TEST=1 $(GO) test -race -count=1 -run TestFailover ./perf/cmd/demofailover/

SEEDS ?= 10000
sim: ## the seeded simulation of a replicated cluster under faults, SEEDS seeds on every core: seeds/s, faults by kind, transitions reached, each failing seed's replay command (SEEDS, SIMFLAGS)
	$(GO) run ./cmd/sim -seeds $(SEEDS) $(SIMFLAGS)

test-short: ## quick tests without -race
	$(GO) test -short -count=1 $(PKGS)

BENCHPKGS ?= $(PKGS)
bench: ## every benchmark, one package at a time (two cores: never in parallel) (BENCHPKGS, BENCHTIME)
	@set -e; for p in $$($(GO) list -f '{{.ImportPath}}:{{.Dir}}' $(BENCHPKGS)); do \
	  grep -qs '^func Benchmark' $${p#*:}/*_test.go || continue; \
	  echo "== $${p%%:*}"; \
	  $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $${p%%:*}; \
	done

bench-ring: ## ring vs go-disruptor vs channel side by side, medians of COUNT runs, table in perf/out/ (COUNT, BENCHTIME)
	$(GO) run ./perf/cmd/benchring -count $(COUNT) -benchtime $(BENCHTIME)

demo: build ## server + campaigns + load client on loopback, reconciled (USERS, QPS, DURATION)
	$(GO) run ./perf/cmd/demo -users $(USERS) -qps $(QPS) -duration $(DURATION)

CLUSTERFLAGS ?=
demo-cluster: build ## NATS + 3 gateways + campaigns + load client (30,000 users, 20,000 SHAKE/s) on loopback, redirected and reconciled with /cluster/stats (CLUSTERFLAGS, e.g. -duration 60 or -mode cpu)
	$(GO) run ./perf/cmd/democluster $(CLUSTERFLAGS)

FAILOVERFLAGS ?=
.PHONY: demo-failover
demo-failover: build ## 3 NATS servers (JetStream) + 3 gateways whose SETs fail over, 3,000 users at 3,000 SHAKE/s + campaigns; kill -9, SIGSTOP past the lease, a NATS server killed, kill -9 again, each restarted: time to each moved SET's first money answer, money before ≤ after, no fenced answer in JetStream, money told == counted at the end, campaigns at exactly their totals, the load client's history checked (FAILOVERFLAGS, e.g. -kills 5)
	$(GO) run ./perf/cmd/demofailover $(FAILOVERFLAGS)

ROLLINGFLAGS ?=
.PHONY: demo-rolling
demo-rolling: build ## a rolling upgrade under load: 3 NATS servers (JetStream) + 3 gateways whose SETs move online, 3,000 users at 3,000 SHAKE/s + campaigns; each gateway stopped (SIGTERM: its SETs handed over) and started again, a fourth joins, one leaves: each move's pause, the p99 against the lead's, refusals, money before ≤ after, strict reconciliation (ROLLINGFLAGS)
	$(GO) run ./perf/cmd/demorolling $(ROLLINGFLAGS)

connmem: build ## server memory per idle logged-in connection, epoll vs netpoll (CONNS)
	$(GO) run ./perf/cmd/connmem -conns $(CONNS)

pingbench: build ## PING round trips a second, epoll vs netpoll, median of PINGCOUNT runs (PINGCONNS, INFLIGHT, PINGTIME)
	$(GO) run ./perf/cmd/pingbench -conns $(PINGCONNS) -inflight $(INFLIGHT) -duration $(PINGTIME) -count $(PINGCOUNT)

perf: build ## seed scenario, 19,000 users: profiles, GC trace, flame graphs, charts, report in perf/out/<time>/ (PERFFLAGS)
	$(GO) run ./perf/cmd/perf $(PERFFLAGS)

COMPAREFLAGS ?=
perf-compare: build ## the same load against every ablation (bare I/O, netpoll, go-disruptor, channels, per-frame egress, hand-off, unpaced journal rounds, no journal, no shedding, the flight recorder of -trace-slow), interleaved rounds: one table of ratios in perf/out/compare-<time>/ (COMPAREFLAGS)
	$(GO) run ./perf/cmd/compare $(COMPAREFLAGS)

soak: build ## 10 min at half the max QPS with connection churn and campaigns: RSS/heap/goroutine/fd slopes, reconciliation (SOAKFLAGS, e.g. -duration 2m)
	$(GO) run ./perf/cmd/soak $(SOAKFLAGS)

MILLIONFLAGS ?=
.PHONY: million
million: build ## 1,000,000 connections: 56 servers + 56 load clients over 112 source addresses, 60,000 QPS for 60 s + campaigns, reconciled per server; ramp time, memory per connection (MILLIONFLAGS, e.g. -conns 100000)
	$(GO) run ./perf/cmd/million $(MILLIONFLAGS)

CRASHFLAGS ?=
.PHONY: crash
crash: build ## 19,000 users at 30,000 SHAKE/s + SENDs + campaigns, kill -9 at 5 random moments, each a restart on the same -data and ports: money told ≤ recovered per crash and == counted overall (what a kill left unanswered sent again with its request id), invariants, ids, shares, campaigns, recovery times; -single: one kill; -scale: 10M pooled + 1M live group envelopes recovered (CRASHFLAGS, e.g. -single, -scale)
	$(GO) run ./perf/cmd/crash $(CRASHFLAGS)

perf-open: ## serve the latest perf run's CPU profile in pprof's web UI on 127.0.0.1:8081 until Ctrl-C
	@prof=$$(ls -1 perf/out/[0-9]*/cpu.pprof 2>/dev/null | sort | tail -n 1); \
	  if [ -z "$$prof" ]; then echo "no perf/out/<time>/cpu.pprof yet: run make perf first"; exit 1; fi; \
	  echo "go tool pprof -http=127.0.0.1:8081 $$prof   # serves until Ctrl-C"; \
	  $(GO) tool pprof -http=127.0.0.1:8081 $$prof

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	$(GO) test ./proto/ -run '^$$' -fuzz '^FuzzNextRequest$$' -fuzztime $${FUZZTIME:-30s}
	$(GO) test ./proto/ -run '^$$' -fuzz '^FuzzNextResponse$$' -fuzztime $${FUZZTIME:-30s}
	$(GO) test ./stages/ -run '^$$' -fuzz '^FuzzStages$$' -fuzztime $${FUZZTIME:-30s} -parallel 1
	$(GO) test ./stages/ -run '^$$' -fuzz '^FuzzSplitRestore$$' -fuzztime $${FUZZTIME:-30s}
	$(GO) test ./stages/ -run '^$$' -fuzz '^FuzzShareRecords$$' -fuzztime $${FUZZTIME:-30s}
	$(GO) test ./stages/ -run '^$$' -fuzz '^FuzzKeptPushes$$' -fuzztime $${FUZZTIME:-30s}
	$(GO) test ./journal/ -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $${FUZZTIME:-30s}
	$(GO) test ./journal/ -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $${FUZZTIME:-30s} -parallel 1

clean: ## remove build and perf outputs
	rm -rf $(BIN) perf/out
	$(GO) clean -testcache
