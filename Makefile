# The whole test suite: tools the tests need, static checks, then every test with the race
# detector against real redis-server processes.
.PHONY: test deps lint unit bench demo

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
