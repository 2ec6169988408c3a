# kafleet: run `make` (or `make help`) for the list of targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

##@ Settings (override on the command line: make test PYTEST_ARGS='-k smoke')

# The Python that creates the virtual environment (3.11 or newer).
PYTHON ?= python3
# Where the virtual environment lives.
VENV ?= .venv
# Extra arguments for pytest.
PYTEST_ARGS ?=
# The container image that `make docker-build` would tag.
IMG ?= kafleet:dev

PY := $(VENV)/bin/python
KAFKA := $(PY) -m tests.infra.kafka
DELTA_JARS := .cache/spark/delta-4.4.0
K8S := $(PY) -m tests.infra.k8s

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: venv install
venv: $(VENV)/.installed ## Create .venv with kafleet (all extras) installed editable and the dev tools.
install: venv ## The same as venv.

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "kafleet needs Python 3.11 or newer, not " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[operator,spark,dev]'
	@touch $@

.PHONY: lint
lint: venv ## Check with ruff (lint and format) and mypy --strict.
	$(PY) -m ruff check consumer operator tests bench examples
	$(PY) -m ruff format --check consumer operator tests bench examples
	$(PY) -m mypy consumer/kafleet operator/kafleet_operator

.PHONY: fmt
fmt: venv ## Format the code and apply ruff's safe fixes.
	$(PY) -m ruff format consumer operator tests bench examples
	$(PY) -m ruff check --fix consumer operator tests bench examples

##@ Test

.PHONY: test
test: lint jars delta-jars k8s-tools prometheus ## Set everything up, lint, and run every test against the real test bed.
	$(PY) -m pytest $(PYTEST_ARGS)

.PHONY: bench
bench: venv jars delta-jars ## Run the benchmarks side by side and print their tables.
	$(PY) -m bench

##@ Test bed (everything it fetches or starts lives in .cache/)

.PHONY: jars
jars: venv ## Fetch the Kafka broker's jars from Maven Central (once).
	@$(KAFKA) jars >/dev/null

.PHONY: kafka-up
kafka-up: venv ## Start a development Kafka broker (reused if running); prints its address.
	$(KAFKA) up

.PHONY: kafka-down
kafka-down: venv ## Stop the development Kafka broker.
	$(KAFKA) down

.PHONY: delta-jars
delta-jars: venv ## Fetch Delta Lake's jars for the pip-installed Spark from Maven Central (once).
	@$(PY) -m tests.infra.spark jars >/dev/null

.PHONY: spark-connect
spark-connect: delta-jars ## Run a local Spark Connect server with Delta on sc://localhost:15002 (foreground; Ctrl-C stops it).
	$(VENV)/bin/kafleet spark-connect --port 15002 --jars $(DELTA_JARS)

.PHONY: prometheus
prometheus: venv ## Install Prometheus from Debian's packages if it is missing (needs root).
	@$(PY) -m tests.infra.prometheus install >/dev/null

.PHONY: k8s-tools
k8s-tools: venv ## Build etcd, kube-apiserver, controller manager, scheduler, kubectl, helm, kwok (once).
	@$(PY) -m tests.infra.k8s_build build >/dev/null

.PHONY: k8s-gomod
k8s-gomod: venv ## Regenerate tests/infra/k8s-tools/go.mod after bumping the Kubernetes version.
	$(PY) -m tests.infra.k8s_build gomod

.PHONY: k8s-up
k8s-up: k8s-tools ## Start a development control plane (reused if running); prints its kubeconfig.
	$(K8S) up

.PHONY: k8s-down
k8s-down: venv ## Stop the development control plane.
	$(K8S) down

##@ Demo

.PHONY: demo
demo: kafka-up delta-jars ## Start a broker, round-trip records, bill slow orders in parallel into Delta, query them back.
	$(PY) examples/roundtrip.py --bootstrap-servers "$$($(KAFKA) status)"
	$(PY) examples/demo.py --bootstrap-servers "$$($(KAFKA) status)" --jars $(DELTA_JARS)

##@ Clean up

.PHONY: clean
clean: ## Stop the development broker and control plane, remove caches of the tools (keeps .cache and .venv).
	-@[ -x $(PY) ] && $(KAFKA) down || true
	-@[ -x $(PY) ] && $(K8S) down || true
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist bench/results
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +

.PHONY: distclean
distclean: clean ## Also remove .cache (jars, built binaries, brokers' data) and .venv.
	rm -rf .cache $(VENV) consumer/*.egg-info operator/*.egg-info
