# casestream developer entry points. Every target is idempotent; `make` alone lists them.
# Local infrastructure runs without Docker (deploy/infra.sh): Kafka, PostgreSQL, Apicurio
# Registry and an SMTP sink, state in .local/. See deploy/README.md.

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
VENV_STAMP := $(VENV)/.casestream-installed
INFRA := deploy/infra.sh
# Extra arguments for pytest, e.g. make test PYTEST_ARGS="-m unit -x"
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (0 or 1: one process); tests/support/layout.py groups them
PYTEST_WORKERS ?= 4
# Extra arguments for the soak, e.g. make soak SOAK_ARGS="--seed 7 --rate 2"
SOAK_ARGS ?=
# Extra arguments for the demo, e.g. make demo DEMO_ARGS="--cases 100"
DEMO_ARGS ?=
# Length of `make soak` in minutes, e.g. make soak SOAK_MINUTES=20
SOAK_MINUTES ?= 20
# Length of `make chaos` in minutes and its extra arguments, e.g. make chaos CHAOS_MINUTES=60
# CHAOS_ARGS="--seed 7 --replicas 3"
CHAOS_MINUTES ?= 10
CHAOS_ARGS ?=
# Instances of every service for `make demo` and `make soak`, e.g. make demo REPLICAS=3
# (default: demo one of each; soak two case and two audit instances, one of the others)
REPLICAS ?=
# Services `make run` starts, comma-separated (default: every installed service), e.g.
# make run SERVICES=case,audit (same as CASESTREAM_RUN_SERVICES=case,audit make run)
SERVICES ?=
# xdist's options for PYTEST_WORKERS > 1: one group per module, the e2e modules one group,
# longest first (tests/conftest.py's scheduler for --dist loadfile)
XDIST := $(if $(filter-out 0 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)
# Runs a command with the CASESTREAM_* endpoints of the local infrastructure exported.
WITH_ENV := eval "$$($(INFRA) env)" &&

.PHONY: help venv compose k8s-tools prometheus-tools browser infra-up infra-down infra-status infra-logs run demo soak chaos toxiproxy-tools bench-journeys test test-chaos test-edge test-cluster test-secured test-scaling schema-check clean

help: ## list the targets
	@echo "casestream - make targets:"
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'
	@echo "Ports and paths: deploy/infra.sh --help"

venv: $(VENV_STAMP) ## create .venv and install the pinned packages (requirements.lock, requirements-dev.lock) + the platform, the suite's contracts, the suite and examples/watch (editable)

$(VENV_STAMP): pyproject.toml schemas/pyproject.toml services/pyproject.toml examples/watch/pyproject.toml requirements.lock requirements-dev.lock
	@command -v $(PYTHON) >/dev/null || { echo "make: '$(PYTHON)' not found: install Python 3.11+ (or make PYTHON=/path/to/python3.11)" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "make: $$($(PYTHON) --version 2>&1) is too old: casestream needs Python 3.11+ (make PYTHON=python3.11)" >&2; exit 1; }
	@test -x $(VENV)/bin/python || { echo "make: creating $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@# requirements.lock: runtime (what the image installs); requirements-dev.lock: test tools.
	@# `-e` lines would name the project itself (installed below, from this checkout).
	@grep -hv '^-e ' requirements.lock requirements-dev.lock > $(VENV)/requirements.txt
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r $(VENV)/requirements.txt
	@# Four distributions: the platform (casestream, the repository root), the suite's event
	@# contracts (casestream-suite-schemas, schemas/pyproject.toml), the regulator suite
	@# (casestream-suite, services/pyproject.toml) and the example team's service (examples/watch).
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -e schemas
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -e services
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -e examples/watch
	@touch $@

compose: ## make `docker compose` available (builds the plugin with Go if missing; used by the contract test)
	@deploy/compose.sh install

k8s-tools: venv ## build helm and kubeconform (Go module proxy) and the Kubernetes JSON schemas into .local/k8s (the chart's contract test)
	@deploy/k8s/tools.sh install

prometheus-tools: ## build promtool (Go module proxy) into .local/prometheus (checks deploy/prometheus/alerts.yml)
	@deploy/prometheus/tools.sh install

browser: ## install headless Chromium + chromedriver from Debian's packages when missing (the console's browser test)
	@deploy/browser.sh install

infra-up: venv ## install what is missing and start Kafka, PostgreSQL, registry, SMTP sink (waits until ready)
	@$(INFRA) up

infra-down: ## stop the local infrastructure (data in .local/ is kept)
	@$(INFRA) down

infra-status: ## show what runs where
	@$(INFRA) status

infra-logs: ## last lines of each infrastructure log
	@$(INFRA) logs

run: infra-up ## infrastructure + the installed services in the foreground (SERVICES=case,audit chooses; Ctrl-C stops all)
	@$(WITH_ENV) exec $(VENV)/bin/python -m casestream.service.devstack run $(if $(SERVICES),--services $(SERVICES))

demo: infra-up ## start the five suite services (REPLICAS=N instances of each), drive 25 cases and the regulator journeys through them, print each, keep a notice PDF in .local/demo-notice.pdf
	@$(WITH_ENV) $(VENV)/bin/python -m services.demo $(if $(REPLICAS),--replicas $(REPLICAS)) $(DEMO_ARGS)

soak: infra-up ## fault soak: the suite under load while instances, relays, Kafka and PostgreSQL are killed/restarted (SOAK_MINUTES=20, REPLICAS=N of every service), then invariants
	@$(WITH_ENV) $(VENV)/bin/python -m services.soak --minutes $(SOAK_MINUTES) $(if $(REPLICAS),--replicas $(REPLICAS)) $(SOAK_ARGS)

chaos: infra-up toxiproxy-tools ## chaos rig: the suite + examples/watch through Toxiproxy (PostgreSQL, registry, a private broker) under kills, SIGSTOP zombies, network toxics, ambiguous commits, a held xmin, hot locks; then the ledger (CHAOS_MINUTES=10, CHAOS_ARGS="--seed 7 --replicas 3"; takes the e2e lock)
	@$(WITH_ENV) flock /tmp/casestream-e2e.lock $(VENV)/bin/python -m services.chaos --minutes $(CHAOS_MINUTES) $(CHAOS_ARGS)

toxiproxy-tools: ## builds toxiproxy-server from the Go module proxy into .local/toxiproxy (the chaos rig's network faults)
	@deploy/toxiproxy/tools.sh install

bench-journeys: infra-up ## load bench: cases through the running suite's HTTP API at 25/50/100 journeys/s and at saturation; journey and per-stage latency, CPU per process (JOURNEYS_ARGS="--help"; run under flock /tmp/casestream-e2e.lock)
	@$(WITH_ENV) $(VENV)/bin/python bench/journeys.py $(JOURNEYS_ARGS)

.PHONY: bench-peers
bench-peers: venv infra-up ## casestream beside FastStream, a hand-rolled loop, Pyrallel Consumer and Debezium (bench/peers.py; installs bench/requirements-peers.txt; PEERS_ARGS="--quick", "--help")
	@# pyrallel-consumer declares Python >= 3.12; its 1.0.0 runs on 3.11 (the bench checks every run)
	@$(VENV)/bin/pip install -q --ignore-requires-python -r bench/requirements-peers.txt
	@$(WITH_ENV) $(VENV)/bin/python bench/peers.py $(PEERS_ARGS)

test: venv compose k8s-tools prometheus-tools toxiproxy-tools browser infra-up ## the whole test suite against the real infrastructure (.ci/run calls this)
	@# tests marked exclusive restart the shared infrastructure: alone, after the parallel run
	@$(WITH_ENV) { $(VENV)/bin/pytest -m "not debezium and not scaling and not chaos and not exclusive" $(XDIST) $(PYTEST_ARGS); rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit status 5); that is a failure" >&2; fi; \
		$(VENV)/bin/pytest -m "exclusive and not debezium and not scaling and not chaos" $(PYTEST_ARGS); rc2=$$?; \
		if [ $$rc -eq 0 ] && [ $$rc2 -ne 5 ]; then rc=$$rc2; fi; \
		exit $$rc; }

test-chaos: venv toxiproxy-tools infra-up ## only the short chaos run (tests/e2e/test_chaos.py, ~5 min; make test leaves it out)
	@$(WITH_ENV) $(VENV)/bin/pytest -m chaos -s tests/e2e/test_chaos.py $(PYTEST_ARGS)

test-edge: venv infra-up ## the live-edge e2e test in full: schemathesis against each of the six services
	@$(WITH_ENV) CASESTREAM_TEST_EDGE_FULL=1 $(VENV)/bin/pytest tests/e2e/test_edge_live.py -p no:cacheprovider $(PYTEST_ARGS)

test-scaling: venv infra-up ## a consumer group scaled 2 -> 6 -> 2 -> 6 -> 2 under a steady stream, both group protocols, key-parallel too (~7 min; the 2 -> 4 -> 2 variant under the consumer protocol runs in make test)
	@$(WITH_ENV) $(VENV)/bin/pytest -m scaling -s tests/integration/test_consumer_scaling.py $(PYTEST_ARGS)

test-debezium: venv infra-up ## Debezium as the outbox publisher: same records as the relay, CDC status/retention, both handovers under a steady writer (starts Kafka Connect; ~40 s warm, + ~90 s Maven resolution cold)
	@$(WITH_ENV) $(VENV)/bin/pytest -m debezium -s tests/integration/test_debezium.py $(PYTEST_ARGS)

test-cluster: venv infra-up ## only the three-broker tests (also in make test): a broker SIGKILLed under load, two brokers stopped (~2.5 min; own throwaway cluster in .local/kafka-cluster-test)
	@$(WITH_ENV) $(VENV)/bin/pytest -m cluster -s tests/integration/test_kafka_cluster.py $(PYTEST_ARGS)

test-secured: venv infra-up ## only the registry-authentication tests (also in make test): the registry client against a second Apicurio Registry that demands bearer JWTs / HTTP basic (~30-40 s, mostly its start)
	@$(WITH_ENV) $(VENV)/bin/pytest -m secured -s tests/integration/test_registry_auth.py $(PYTEST_ARGS)

SCHEMA_BASE ?= origin/main
schema-check: venv ## check schemas/: compatibility of every subject's versions; published versions unchanged against $(SCHEMA_BASE) when that ref exists
	@against=""; if git rev-parse -q --verify "$(SCHEMA_BASE)^{commit}" >/dev/null 2>&1; then against="--against $(SCHEMA_BASE)"; \
		else echo "schema-check: $(SCHEMA_BASE) not found, published versions not compared (set SCHEMA_BASE=<ref>)" >&2; fi; \
	$(WITH_ENV) $(VENV)/bin/casestream schemas check $$against

clean: ## stop the infrastructure, remove .local/ and .venv/
	@if [ -x $(INFRA) ]; then $(INFRA) purge; fi
	rm -rf .local $(VENV)
