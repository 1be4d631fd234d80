# The whole test suite: tools the tests need, static checks, every test with the race detector
# against real redis-server processes, then a short seeded run of the fault-injection suite.
.PHONY: test deps lint unit chaos bench demo e2e

test: deps lint unit
	@$(MAKE) --no-print-directory chaos DURATION=90s SEED=1 FAULTS=all DAEMONS=1 CHAOS_TIMEOUT=15m

deps:
	@scripts/deps.sh

# go.work puts bench in the workspace, but ./... stays within the module it is run from.
# docscheck: every qualified Go name the docs give in backticks (redlock.X, Client.MaxTTL…)
# exists in the code.
lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	go vet ./... ./bench/...
	go tool staticcheck ./... ./bench/...
	@! go list -deps ./job | grep -E 'cronlock/cronlock/.+|go-redis' | grep -v 'cronlock/cronlock/job$$' \
		|| { echo "job must stay a leaf: no cronlock package, no Redis client"; exit 1; }
	@! go list -deps ./examples/... | grep 'cronlock/cronlock/internal' \
		|| { echo "examples must use only the public API, so that each can be copied out of the repo"; exit 1; }
	go run ./internal/docscheck

unit:
	go test -race -count=1 -timeout 20m ./...

# The fault-injection suite (internal/chaos, docs/reliability.md): 5 real nodes behind fault
# proxies, 4 worker processes (DAEMONS of them cronlock run daemons, the others testworkers),
# a seeded fault schedule, then the checker. SEED=0 draws a seed (printed, with the command
# that replays it); FAULTS is "all" or a comma-separated list.
DURATION ?= 2m
SEED ?= 0
FAULTS ?= all
DAEMONS ?= 1
CHAOS_TIMEOUT ?= 3h
chaos: deps
	go test -count=1 -timeout $(CHAOS_TIMEOUT) -run '^TestChaos$$' -v ./internal/chaos \
		-chaos.duration=$(DURATION) -chaos.seed=$(SEED) -chaos.faults=$(FAULTS) -chaos.daemons=$(DAEMONS)

bench:
	go test -run '^$$' -bench . -benchmem -count 6 ./redlock/ | tee bench.txt

# The Jaeger end-to-end tracing test alone (builds Jaeger the first time; .ci/run sets
# CRONLOCK_JAEGER so that `make test` runs it too).
e2e:
	CRONLOCK_JAEGER="$$(scripts/jaeger.sh)" go test -race -count=1 -run TestJaeger -v ./internal/e2e/
