# The whole test suite: tools the tests need, static checks, then every test with the race
# detector against real redis-server processes.
.PHONY: test deps lint unit bench demo e2e

test: deps lint unit

deps:
	@scripts/deps.sh

lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	go vet ./...
	go tool staticcheck ./...

unit:
	go test -race -count=1 -timeout 20m ./...

bench:
	go test -run '^$$' -bench . -benchmem -count 6 ./redlock/ | tee bench.txt

# The Jaeger end-to-end tracing test alone (builds Jaeger the first time; .ci/run sets
# CRONLOCK_JAEGER so that `make test` runs it too).
e2e:
	CRONLOCK_JAEGER="$$(scripts/jaeger.sh)" go test -race -count=1 -run TestJaeger -v ./internal/e2e/
