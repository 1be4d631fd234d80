# The whole test suite: tools the tests need, static checks, every test with the race detector
# against real redis-server processes, then a short seeded run of the fault-injection suite.
.PHONY: test deps lint promcheck unit stress packaging chaos bench demo e2e image dist systemd-verify manifests

test: deps lint promcheck unit packaging
	@$(MAKE) --no-print-directory chaos DURATION=90s SEED=1 FAULTS=all DAEMONS=1 BURST=50 CHAOS_TIMEOUT=15m
	@$(MAKE) --no-print-directory chaos DURATION=20s SEED=2 FAULTS=pause,freeze-after-success DAEMONS=1 FENCE=postgres CHAOS_TIMEOUT=10m

deps:
	@scripts/deps.sh

# go.work puts bench in the workspace, but ./... stays within the module it is run from.
# docscheck: every qualified Go name the docs give in backticks (redlock.X, Client.MaxTTL…)
# exists in the code. funclen: no function of redlock, middleware or scheduler over 60 lines
# without a "// long: why" line in its doc comment.
# apicount: each library package's exported count (top-level names plus exported methods)
# beside its target (redlock 60, middleware 30, scheduler 45, job 30); it fails above a
# target, and for an exported name missing from its package's API table (doc.go) or named by
# no example, README.md or docs/ page.
lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	go vet ./... ./bench/...
	go tool staticcheck ./... ./bench/...
	@! go list -deps ./job | grep -E 'cronlock/cronlock/.+|go-redis' | grep -v 'cronlock/cronlock/job$$' \
		|| { echo "job must stay a leaf: no cronlock package, no Redis client"; exit 1; }
	@! go list -deps ./fence ./fence/redisfence | grep -q jackc \
		|| { echo "fence and fence/redisfence must not pull pgx: a Redis user of the fence does not need it"; exit 1; }
	@! go list -f '{{join .Imports "\n"}}' ./examples/... | grep 'cronlock/cronlock/internal' \
		|| { echo "examples must use only the public API, so that each can be copied out of the repo"; exit 1; }
	go run ./internal/docscheck
	go run ./internal/funclen
	go run ./internal/apicount

# The monitoring files: deploy/prometheus/alerts.yml checked and unit-tested by promtool, and
# every query of deploy/grafana/cronlock.json parsed by promtool (scripts/promcheck.sh).
promcheck:
	scripts/promcheck.sh

# internal/containertest runs alone, in packaging: its containers would compete for the two
# cores with the timing-sensitive tests of the other packages.
unit:
	go test -race -count=1 -timeout 20m $$(go list ./... | grep -v /internal/containertest)

# The unit suite (or STRESS_PKGS) COUNT times beside a CPU hog on every core (stress-ng,
# scripts/stress.sh), then the failed tests counted by name: a test that fails here waits on
# time instead of on the event it needs. `scripts/stress.sh bash .ci/run` hogs the whole CI.
COUNT ?= 3
STRESS_PKGS ?= $$(go list ./... | grep -v /internal/containertest)
STRESS_RUN ?= .
stress: deps
	scripts/stress.sh go test -race -count=$(COUNT) -timeout 60m -run '$(STRESS_RUN)' $(STRESS_PKGS)

# The fault-injection suite (internal/chaos, docs/reliability.md): 5 real nodes behind fault
# proxies, 4 worker processes (DAEMONS of them cronlock run daemons, the others testworkers),
# a seeded fault schedule, then the checker. SEED=0 draws a seed (printed, with the command
# that replays it); FAULTS is "all" or a comma-separated list. FENCE=postgres makes the runs'
# fenced writes go through package pgfence to a Postgres server (internal/pgtest) instead of
# a script on the ledger node, so that the store itself refuses stale writes. BURST is the
# size of the burst set that the burst class (in "all") adds to every worker's jobs.
DURATION ?= 2m
SEED ?= 0
FAULTS ?= all
DAEMONS ?= 1
FENCE ?= redis
BURST ?= 300
CHAOS_TIMEOUT ?= 3h
chaos: deps
	go test -count=1 -timeout $(CHAOS_TIMEOUT) -run '^TestChaos$$' -v ./internal/chaos \
		-chaos.duration=$(DURATION) -chaos.seed=$(SEED) -chaos.faults=$(FAULTS) -chaos.daemons=$(DAEMONS) -chaos.fence=$(FENCE) -chaos.burst=$(BURST)

bench:
	go test -run '^$$' -bench . -benchmem -count 6 ./redlock/ | tee bench.txt

# The Jaeger end-to-end tracing test alone (builds Jaeger the first time; .ci/run sets
# CRONLOCK_JAEGER so that `make test` runs it too).
e2e:
	CRONLOCK_JAEGER="$$(scripts/jaeger.sh)" go test -race -count=1 -run TestJaeger -v ./internal/e2e/

# Release builds: static binaries (no cgo; the time zone database embedded, for CRON_TZ on
# hosts and images without one) stamped with the version, commit and build date that
# `cronlock version` prints.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
# Expanded once: every archive, stamp and check of one make run names the same build.
VERSION := $(VERSION)
COMMIT := $(COMMIT)
BUILD_DATE := $(BUILD_DATE)
STAMP = github.com/cronlock/cronlock/cmd/cronlock/internal/buildinfo
GOBUILD = CGO_ENABLED=0 go build -trimpath -tags timetzdata \
	-ldflags '-s -w -X $(STAMP).stampVersion=$(VERSION) -X $(STAMP).stampCommit=$(COMMIT) -X $(STAMP).stampDate=$(BUILD_DATE)'

# The container image (Dockerfile): the binary for the host's architecture (IMAGE_ARCH) and
# the host's CA certificates in build/image/, then podman or docker (CONTAINER=) builds
# FROM scratch with them. Nothing is pulled from a registry.
CONTAINER ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
IMAGE ?= cronlock:dev
IMAGE_ARCH ?= $(shell go env GOARCH)
CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt
image:
	@mkdir -p build/image
	GOOS=linux GOARCH=$(IMAGE_ARCH) $(GOBUILD) -o build/image/cronlock ./cmd/cronlock
	cp $(CA_CERTS) build/image/ca-certificates.crt
	$(CONTAINER) build --platform linux/$(IMAGE_ARCH) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) \
		--build-arg CREATED=$(BUILD_DATE) -t $(IMAGE) -f Dockerfile .

# Release archives: dist/cronlock_<version>_<os>_<arch>.tar.gz (the binary, README, LICENSE)
# and dist/SHA256SUMS; then the linux/amd64 binary must print its stamped version.
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
dist:
	@rm -rf dist && mkdir -p dist
	@set -e; for p in $(PLATFORMS); do \
		name=cronlock_$(VERSION)_$${p%/*}_$${p#*/}; echo "dist/$$name.tar.gz"; \
		mkdir -p dist/$$name; \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GOBUILD) -o dist/$$name/cronlock ./cmd/cronlock; \
		cp README.md LICENSE dist/$$name/; \
		tar -C dist --sort=name --owner=0 --group=0 --numeric-owner -czf dist/$$name.tar.gz $$name; \
		rm -r dist/$$name; \
	done
	cd dist && sha256sum *.tar.gz > SHA256SUMS
	@case "$(PLATFORMS) $$(go env GOHOSTOS)/$$(go env GOHOSTARCH)" in *linux/amd64*linux/amd64) \
		out="$$(tar -xzOf dist/cronlock_$(VERSION)_linux_amd64.tar.gz cronlock_$(VERSION)_linux_amd64/cronlock > dist/.version-check \
			&& chmod +x dist/.version-check && dist/.version-check version)"; rm -f dist/.version-check; echo "$$out"; \
		echo "$$out" | grep -qx 'cronlock $(VERSION)' && echo "$$out" | grep -qx 'commit: $(COMMIT)' \
			|| { echo "dist: the linux/amd64 binary does not print version $(VERSION), commit $(COMMIT)"; exit 1; };; \
	esac

# The deployment files: deploy/systemd verified by systemd-analyze, deploy/kubernetes decoded
# strictly with the Kubernetes API types (a module of its own, outside go.work, so that
# cronlock's module does not take on Kubernetes' dependencies), and the release archives.
packaging: systemd-verify manifests dist
	go test -count=1 -timeout 10m ./internal/containertest/

systemd-verify:
	scripts/systemd-verify.sh deploy/systemd/cronlock.service

manifests:
	cd deploy/kubernetes/manifests_test && GOWORK=off go vet ./... && GOWORK=off go test -count=1 ./...
