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
# The results `make bench-publish` copies into docs/benchmarks/data/ (b9 b11); empty: all.
BENCH_PUBLISH ?=
# `make test` runs the tests of the machine's one real node (REAL_NODE_TESTS) in a pytest
# session of their own beside the others' (they wait on pods, the others on the broker and the
# control plane), with the slowest few of the others (SIDE_TESTS) so the two sessions end
# together; 0 runs all in one session. With PYTEST_ARGS set, one session runs those.
TEST_SPLIT ?= 1
REAL_NODE_TESTS := tests/e2e tests/testbed/test_real_node.py
# The whole operator on three brokers while one dies (OPERATOR_FAULT_TESTS) needs the control
# plane as well as the cluster: not in the three-broker session, which starts before the
# control plane's binaries are built (k8s-tools, the set-up's critical path), but last in this
# one, which starts its own three brokers for it (80 to 100 s in all).
OPERATOR_FAULT_TESTS := tests/operator/test_operator_on_a_rolling_cluster.py
SIDE_TESTS := $(REAL_NODE_TESTS) tests/operator/test_fleet_at_scale.py \
  tests/spark/test_spark_workers.py $(OPERATOR_FAULT_TESTS)
# The tests of moves and failures on a cluster of three brokers (tests/faults: rolling
# bounces, killed coordinators and leaders, bounced workers; the operator's lag reading) mostly
# wait on sessions and elections, and need only the jars: a third session, started as soon as
# FAULT_SETUP is done, beside the rest of the set-up (the Go builds) and the other two.
# The documentation site read in a real browser (about 70 s alone, 3 minutes in CI) needs no
# broker at all: it runs first in that session, whose set-up is short, so the longest session
# (the main one) does not carry it.
DOCS_BROWSER_TESTS := tests/docs/test_site_in_a_browser.py
# Two files of the main session that need only a broker and the jars, and mostly wait (on
# share acquisition locks, on a cluster that does not answer): about 3.5 minutes that the main
# session, the longest, no longer carries (a cold run: main 40.4 min of tests, this one 39.3).
BROKER_ONLY_TESTS := tests/share/test_record_limit.py tests/consumer/test_dead_letter_topic.py
FAULT_TESTS := $(DOCS_BROWSER_TESTS) tests/faults tests/operator/test_lag_on_a_rolling_cluster.py \
  tests/operator/test_committed_offsets_on_a_rolling_cluster.py $(BROKER_ONLY_TESTS)
FAULT_SETUP := jars share-jars delta-jars docs-mermaid browser
# Exactly-once into Delta through a roll, a coordinator kill and a worker killed between its
# Delta write and its commit: about 4 minutes of two Spark workers since the tables they create
# are partitioned by Kafka partition (their writes no longer conflict); in the faults session,
# and alone with `make test-faults-eos`.
EOS_FAULT_TESTS := tests/faults/test_exactly_once_on_a_rolling_cluster.py
# Real KEDA's tests: KEDA's build (10 to 20 minutes of both cores) would take a cold CI run past
# its 40 minutes, so `make bench` builds it and runs them (`make test-keda` alone); `make test`
# leaves them out.
KEDA_TESTS := tests/keda
# How many set-up steps `make test` and `make bench` run side by side (the Go builds use the
# cores while the downloads and the image builds wait on the network and the disk).
SETUP_JOBS ?= 4
# `make k8s-nodes`: extra kwok nodes on the development control plane, and pods per node
# (8 x 1,250 hold 10,000 pods; the plane's own two hold 110 each). KWOK_NODES=0 removes them.
KWOK_NODES ?= 8
KWOK_NODE_PODS ?= 1250
# kafleet's version, from consumer/kafleet/__init__.py: the images' tag and version label.
VERSION ?= $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' consumer/kafleet/__init__.py)
# The images that `make image` builds: the default target, and `--target spark`.
IMG ?= kafleet:$(VERSION)
IMG_SPARK ?= kafleet-spark:$(VERSION)
# The images' base, if not the Dockerfile's python:3.11-slim-bookworm (a mirror, a pinned digest).
BASE_IMAGE ?=
# More flags for every build of `make image` (kind-e2e: --provenance=false --sbom=false --load).
IMAGE_BUILD_FLAGS ?=
# docker (only if `docker info` reaches an engine), else podman, else buildah.
CONTAINER_TOOL ?= $(shell if docker info >/dev/null 2>&1; then echo docker; \
  elif command -v podman >/dev/null 2>&1; then echo podman; \
  elif command -v buildah >/dev/null 2>&1; then echo buildah; fi)

PY := $(VENV)/bin/python
KAFKA := $(PY) -m tests.infra.kafka
DELTA_JARS := .cache/spark/delta-4.4.0
K8S := $(PY) -m tests.infra.k8s
NODE := $(PY) -m tests.infra.node

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
	@echo "setting up $(VENV): kafleet (editable, every extra) and its dev tools (once)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@# setuptools warns on every editable install that folders named like the package in the
	@# working directory may shadow it; kafleet's live in consumer/ and operator/, so the
	@# warning is silenced rather than shown to every newcomer.
	@PYTHONWARNINGS='ignore:Editable installation' \
	  $(PY) -m pip install --quiet -e '.[operator,spark,share,dev,docs]'
	@touch $@

.PHONY: lint
lint: venv ## Check with ruff (lint and format), mypy --strict, and the layers' import contracts (pyproject.toml).
	$(PY) -m ruff check consumer operator monitoring tests bench examples docgen docs/gen
	$(PY) -m ruff format --check consumer operator monitoring tests bench examples docgen docs/gen
	$(PY) -m mypy consumer/kafleet operator/kafleet_operator monitoring docgen docs/gen bench/publish.py
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m monitoring --check

.PHONY: fmt
fmt: venv ## Format the code and apply ruff's safe fixes.
	$(PY) -m ruff format consumer operator monitoring tests bench examples docgen docs/gen
	$(PY) -m ruff check --fix consumer operator monitoring tests bench examples docgen docs/gen

.PHONY: dashboards
dashboards: venv ## Write the chart's Grafana dashboards (charts/kafleet/dashboards/) from monitoring/ (make lint checks they are current).
	$(PY) -m monitoring

# MkDocs and its plugins print notices about MkDocs' future on every run; they say nothing of
# this site, whose warnings still fail the build (strict).
DOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true

.PHONY: docs
docs: venv docs-mermaid ## Build the documentation site (mkdocs.yml, docs/) into .cache/site with mkdocs build --strict: a warning fails it.
	$(DOCS_ENV) $(PY) -m mkdocs build --strict

.PHONY: docs-serve
docs-serve: venv docs-mermaid ## Serve the documentation site on http://127.0.0.1:8000, rebuilt as its files change.
	$(DOCS_ENV) $(PY) -m mkdocs serve

.PHONY: docs-mermaid
docs-mermaid: venv ## Fetch Mermaid.js (a pinned, checked npm package) into .cache/mermaid/ for the site's diagrams (once; needs npm).
	@$(PY) docs/hooks/mermaid.py fetch >/dev/null

##@ Images (docker, podman or buildah; see the Dockerfile's header)

.PHONY: image
image: ## Build the image IMG (worker, sidecar, operator) and IMG_SPARK (plus Spark and Delta) with CONTAINER_TOOL.
	@case "$(CONTAINER_TOOL)" in \
	  "") echo "error: no container tool found: install docker (with a running engine)," \
	       "podman or buildah, or set CONTAINER_TOOL" >&2; exit 1;; \
	  *buildah) build="$(CONTAINER_TOOL) bud --layers --network host";; \
	  *docker) build="env DOCKER_BUILDKIT=1 $(CONTAINER_TOOL) build";; \
	  *) build="$(CONTAINER_TOOL) build";; \
	esac; \
	set -- $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) \
	  --build-arg VERSION=$(VERSION) \
	  --build-arg REVISION="$$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
	  --build-arg CREATED="$$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
	  --build-arg SOURCE="$$(git remote get-url origin 2>/dev/null | sed -E 's#//[^/@]*@#//#' || true)"; \
	set -x; \
	$$build "$$@" $(IMAGE_BUILD_FLAGS) -t $(IMG) .; \
	$$build "$$@" $(IMAGE_BUILD_FLAGS) --target spark -t $(IMG_SPARK) .

##@ Test

.PHONY: test
test: lint ## Lint, set everything up (SETUP_JOBS steps side by side), and run every test against the real test bed.
	@if [ -n "$(PYTEST_ARGS)" ] || [ "$(TEST_SPLIT)" = 0 ]; then \
	  $(MAKE) --no-print-directory -j$(SETUP_JOBS) testbed prometheus grafana-schema; \
	  set -x; $(PY) -m pytest $(if $(PYTEST_ARGS),$(PYTEST_ARGS),--ignore=$(KEDA_TESTS)); \
	else \
	  mkdir -p .cache/test-logs; log=.cache/test-logs/side.log; \
	  faults=.cache/test-logs/faults.log; \
	  $(MAKE) --no-print-directory -j$(SETUP_JOBS) $(FAULT_SETUP); \
	  echo "the docs in a browser, then the three-broker cluster's tests, start now, beside the" \
	    "rest of the set-up and the other tests (they need only the jars and Chromium); their" \
	    "output: $$faults (shown at the end)"; \
	  $(PY) -m pytest $(FAULT_TESTS) >$$faults 2>&1 & cluster=$$!; \
	  trap 'kill $$cluster 2>/dev/null || true' EXIT; \
	  $(MAKE) --no-print-directory -j$(SETUP_JOBS) testbed prometheus grafana-schema; \
	  echo "the real node's tests and the slowest run beside the others; their output: $$log" \
	    "(shown at the end)"; \
	  $(PY) -m pytest $(SIDE_TESTS) >$$log 2>&1 & node=$$!; \
	  status=0; \
	  $(PY) -m pytest $(addprefix --ignore=,$(SIDE_TESTS) $(FAULT_TESTS) $(KEDA_TESTS)) \
	    || status=$$?; \
	  wait $$node || status=$$((status ? status : $$?)); \
	  wait $$cluster || status=$$((status ? status : $$?)); \
	  trap - EXIT; \
	  echo; echo "=== the real node's tests and the slowest ($$log) ==="; cat $$log; \
	  echo; echo "=== the three-broker cluster's tests ($$faults) ==="; cat $$faults; \
	  exit $$status; \
	fi

.PHONY: test-faults-eos
test-faults-eos: venv jars delta-jars ## Exactly-once into Delta on three brokers through a roll and kills, alone (about 4 minutes; make test runs it too).
	$(PY) -m pytest $(EOS_FAULT_TESTS) $(PYTEST_ARGS)

.PHONY: bench
bench: venv ## Set up the test bed and KEDA (side by side), check KEDA runs (tests/keda), and run the benchmarks, printing their tables (B8 on the real node).
	@$(MAKE) --no-print-directory -j$(SETUP_JOBS) testbed keda
	$(PY) -m pytest -q $(KEDA_TESTS)
	$(PY) -m bench

.PHONY: bench-publish
bench-publish: venv ## Copy benchmark results (BENCH_PUBLISH='b9 b11'; default: all) from bench/results/ into docs/benchmarks/data/, which the site's Charts page is drawn from.
	$(PY) -m bench.publish $(BENCH_PUBLISH)

.PHONY: test-keda
test-keda: venv k8s-tools jars keda ## Build KEDA and run its tests (a ScaledObject scales a lagging group's Deployment).
	$(PY) -m pytest $(KEDA_TESTS) $(PYTEST_ARGS)

.PHONY: testbed
testbed: jars share-jars delta-jars k8s-tools node-tools images docs-mermaid browser ## Fetch and build everything the tests and benchmarks run on (make -j runs it side by side).

##@ Test bed (everything it fetches or starts lives in .cache/)

.PHONY: jars
jars: venv ## Fetch the Kafka broker's jars from Maven Central (once).
	@$(KAFKA) jars >/dev/null

.PHONY: share-jars
share-jars: venv ## Fetch Kafka's Java client for share groups (share.classpath) from Maven Central (once).
	@$(VENV)/bin/kafleet share-jars .cache/share-client/4.3.1 >/dev/null

.PHONY: kafka-up
kafka-up: venv ## Start a development Kafka broker (reused if running); prints its address.
	@$(KAFKA) up

.PHONY: kafka-down
kafka-down: venv ## Stop the development Kafka broker.
	$(KAFKA) down

.PHONY: kafka-cluster-up
kafka-cluster-up: venv jars ## Start a development cluster of three Kafka brokers (reused if running; a node left down is started); prints its bootstrap servers.
	$(PY) -m tests.infra.kafka_cluster up

.PHONY: kafka-cluster-down
kafka-cluster-down: venv ## Stop the development cluster of three brokers.
	$(PY) -m tests.infra.kafka_cluster down

.PHONY: delta-jars
delta-jars: venv jars ## Fetch Delta Lake's jars for the pip-installed Spark from Maven Central (once).
	@$(PY) -m tests.infra.spark jars >/dev/null

.PHONY: spark-connect
spark-connect: delta-jars ## Run a local Spark Connect server with Delta on sc://localhost:15002 (foreground; Ctrl-C stops it).
	$(VENV)/bin/kafleet spark-connect --port 15002 --jars $(DELTA_JARS)

.PHONY: prometheus
prometheus: venv ## Install Prometheus from Debian's packages if missing (root), build one with Kubernetes discovery from its Go module, fetch the Prometheus Operator's CRDs (once).
	@$(PY) -m tests.infra.prometheus install >/dev/null

.PHONY: browser
browser: venv ## Install Chromium from Debian's packages if missing (root): the documentation site's test reads every page in it, headless, driven by Playwright.
	@$(PY) -m tests.infra.browser install >/dev/null

.PHONY: grafana-schema
grafana-schema: venv ## Install Grafana 11.6's and 12.4's dashboard types (@grafana/schema) and TypeScript with npm from tests/infra/grafana-schema/'s lockfile (once): the dashboards are type-checked against them.
	@$(PY) -m tests.infra.grafana_schema install >/dev/null

.PHONY: keda
keda: venv ## Build KEDA's operator and metrics adapter from its Go module (once; 10 to 20 minutes): tests and benchmarks run the real KEDA.
	@$(PY) -m tests.infra.keda build >/dev/null

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

.PHONY: k8s-nodes
k8s-nodes: venv ## Keep KWOK_NODES more fake nodes (KWOK_NODE_PODS pods each) that kwok runs, on the development control plane.
	$(K8S) nodes $(KWOK_NODES) --pods $(KWOK_NODE_PODS)

.PHONY: node-packages
node-packages: venv ## Install containerd, runc, CNI plugins, buildah, mmdebstrap, iptables from Debian's packages if missing (root).
	@$(NODE) packages

.PHONY: node-tools
node-tools: k8s-tools node-packages ## The node's packages, and build the pause image (once).
	@$(NODE) tools >/dev/null

.PHONY: node-up
node-up: node-tools k8s-up ## Start a real node (containerd, runc, kubelet, kube-proxy; root) on the development control plane, with the project's images imported (make images).
	$(NODE) up
	$(NODE) images

.PHONY: node-down
node-down: venv ## Stop the development real node (and undo what it changed on the machine).
	$(NODE) down

.PHONY: images
images: venv node-packages ## Build the real node's images with mmdebstrap and buildah (root; once per code change); prints the tarballs.
	$(PY) -m tests.infra.images build

##@ On a cluster of your own (needs Docker; cannot run on the test bed's machines)

KIND_VERSION ?= v0.33.0
KIND_CLUSTER ?= kafleet-e2e
KIND := .cache/kind/$(KIND_VERSION)/kind
KIND_KUBECONFIG := .cache/kind/$(KIND_CLUSTER).kubeconfig

$(KIND):
	GOBIN=$(abspath $(dir $@)) GOTOOLCHAIN=local go install sigs.k8s.io/kind@$(KIND_VERSION)

.PHONY: kind-e2e
kind-e2e: venv jars k8s-tools $(KIND) ## Build the images with Docker, load them into a kind cluster, run tests/e2e/ there (the chart is installed with helm).
	@docker info >/dev/null 2>&1 || { echo "error: kind-e2e needs a running Docker engine" >&2; exit 1; }
	@# No attestations, loaded into the engine: kind's load fails on BuildKit's provenance
	@# manifests with Docker's containerd image store (kubernetes-sigs/kind#3795).
	$(MAKE) image CONTAINER_TOOL=docker IMAGE_BUILD_FLAGS='--provenance=false --sbom=false --load'
	docker build --provenance=false --sbom=false --load -t kafleet-examples:$(VERSION) \
	  --build-arg KAFLEET_IMAGE=$(IMG) examples
	docker build --provenance=false --sbom=false --load -t kafleet-examples-spark:$(VERSION) \
	  --build-arg KAFLEET_IMAGE=$(IMG_SPARK) examples
	$(KIND) get clusters | grep -qx '$(KIND_CLUSTER)' || \
	  $(KIND) create cluster --name $(KIND_CLUSTER) --kubeconfig $(KIND_KUBECONFIG) --wait 120s
	$(KIND) export kubeconfig --name $(KIND_CLUSTER) --kubeconfig $(KIND_KUBECONFIG)
	docker save -o .cache/kind/images.tar $(IMG) kafleet-examples:$(VERSION) kafleet-examples-spark:$(VERSION)
	$(KIND) load image-archive --name $(KIND_CLUSTER) .cache/kind/images.tar
	@# Pods reach the host's test broker at the IPv4 gateway of kind's Docker network (the
	@# network lists its IPv6 subnet first, without a gateway).
	gateway=$$(docker network inspect kind -f '{{range .IPAM.Config}}{{println .Gateway}}{{end}}' \
	  | grep -m1 -E '^[0-9.]+$$') || { echo "error: kind's network has no IPv4 gateway" >&2; exit 1; }; \
	KAFLEET_E2E_KUBECONFIG=$(abspath $(KIND_KUBECONFIG)) KAFLEET_E2E_BROKER_HOST=$$gateway \
	  $(PY) -m pytest tests/e2e $(PYTEST_ARGS)

.PHONY: kind-down
kind-down: ## Delete the kind cluster of kind-e2e.
	-$(KIND) delete cluster --name $(KIND_CLUSTER)

##@ Packages (into dist/; kafleet's version is consumer/kafleet/__init__.py's __version__)

# A helm of your own for chart-package; empty: the test bed's (make k8s-tools builds it).
HELM ?=

.PHONY: dist
dist: venv ## Build the sdist and, from it, the wheel into dist/ (python -m build), and check both with twine check.
	rm -f dist/*.whl dist/*.tar.gz
	$(PY) -m build --quiet --outdir dist .
	$(PY) -m twine check --strict dist/*.whl dist/*.tar.gz

.PHONY: chart-package
chart-package: $(if $(HELM),,k8s-tools) ## Lint charts/kafleet and package it into dist/ with helm package, its appVersion VERSION.
	@mkdir -p dist
	helm=$(or $(HELM),"$$($(PY) -m tests.infra.k8s_build build)/helm"); \
	$$helm lint charts/kafleet; \
	$$helm package charts/kafleet --app-version $(VERSION) --destination dist

##@ Demo

.PHONY: demo
demo: venv delta-jars ## Start a broker, round-trip records, bill slow orders in parallel into Delta, query them back.
	@$(KAFKA) up --quiet
	@# Each prints its own story; what Kafka's client, Spark and kafleet log goes to .cache/demo/.
	@$(PY) examples/roundtrip.py --bootstrap-servers "$$($(KAFKA) status)"
	@$(PY) examples/demo.py --bootstrap-servers "$$($(KAFKA) status)" --jars $(DELTA_JARS)

##@ Clean up

.PHONY: clean
clean: ## Stop the development broker and control plane, remove caches of the tools and dist/ (keeps .cache and .venv).
	-@[ -x $(PY) ] && $(KAFKA) down || true
	-@[ -x $(PY) ] && $(PY) -m tests.infra.kafka_cluster down || true
	-@[ -x $(PY) ] && $(NODE) down || true
	-@[ -x $(PY) ] && $(K8S) down || true
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist kafleet.egg-info \
	  bench/results
	find . -name __pycache__ -type d -prune -not -path './.venv/*' -exec rm -rf {} +

.PHONY: distclean
distclean: clean ## Also remove .cache (jars, built binaries, brokers' data) and .venv.
	rm -rf .cache $(VENV) consumer/*.egg-info operator/*.egg-info
