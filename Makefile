# Every target installs what it needs: a fresh clone needs only Python 3.11 (and Java 17 for Spark).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ROWS ?= 200000
SEED ?= 1
DATA_DIR ?= data
# pytest-xdist processes for `make test`: the Docker tests run in one of them, one after the
# other (tests/conftest.py), the rest spread over all. 0: one process, no xdist.
TEST_WORKERS ?= 2

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: build test lint data docker-image clean

# setup.py builds the one C extension (services/broker/kafka/_record_walk.c) in place.
$(STAMP): pyproject.toml setup.py services/broker/kafka/_record_walk.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

#: create `.venv/` and install the pinned dependencies (and the C extension) into it
build: $(STAMP)

#: ruff over the whole tree
lint: $(STAMP)
	$(VENV)/bin/ruff check .

#: ruff, then the whole pytest suite (unit, integration; the Docker tests where an engine answers)
test: $(STAMP) lint
	$(PY) -m pytest -n $(TEST_WORKERS)

#: generate `DATA_DIR/itineraries.csv` and `airports.csv` (`ROWS`, `SEED`) unless they are there
data: $(STAMP)
	@if [ -s $(DATA_DIR)/itineraries.csv ] && [ -s $(DATA_DIR)/airports.csv ]; then \
		echo "$(DATA_DIR)/ already holds data"; \
	else \
		$(PY) -m scripts.generate_data --rows $(ROWS) --seed $(SEED) --out $(DATA_DIR); \
	fi

#: remove `.venv/` and the caches
clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build

# Offline images: base (debootstrap from the host's apt mirror when no registry answers),
# wheels downloaded on the host, then runtime (deps) and code layers. Needs root and Docker.
#: build the base, runtime and code images, offline if need be (root, Docker)
docker-image: $(STAMP)
	PYTHON=$(abspath $(PY)) scripts/build_images.sh

# The embedded default: three brokers (one replicated cluster), query service and health
# checkers as local processes, a generated sample (ROWS rows), one client session; results and
# logs in DEMO_DIR.
DEMO_DIR ?= results/demo
.PHONY: demo
#: the embedded default: local brokers, query service, checkers and one client session on a generated sample
demo: $(STAMP)
	$(PY) -m scripts.run_local --results-dir $(DEMO_DIR) --rows $(ROWS) --seed $(SEED)

# --- Docker Compose deployment (compose/docker-compose-dev.yaml, rendered from the template by
# `python -m scripts.compose_generator`). One client session per `make docker-compose-up`: its
# results land in RESULTS_DIR/client-<i>/; the deployment keeps running until
# `make docker-compose-down` (which keeps its named volumes: `make docker-compose-clean` wipes
# them). Prometheus, its alerts and every service's metrics: http://127.0.0.1:9090/.
# `make chaos` SIGKILLs random containers of it meanwhile.
COMPOSE_PROJECT ?= flights-optimizer
COMPOSE_FILE_DEV ?= compose/docker-compose-dev.yaml
RESULTS_DIR ?= results
CHAOS_INTERVAL_S ?= 5
CHAOS_DURATION_S ?= 120
CHAOS_PAUSE_RATIO ?= 0.3
COMPOSE := docker-compose -f $(COMPOSE_FILE_DEV) -p $(COMPOSE_PROJECT)
# What the compose file reads (see its header); the clients write as the calling user.
# The deployment's cluster secret (peer frames, heartbeats, election): generated once, readable
# by its owner only, handed to docker-compose in the environment (never on a command line).
CLUSTER_SECRET_FILE ?= .secrets/cluster_secret
COMPOSE_ENV := COMPOSE_PROJECT_NAME=$(COMPOSE_PROJECT) \
	FLIGHTS_DATA_DIR=$(abspath $(DATA_DIR)) FLIGHTS_RESULTS_DIR=$(abspath $(RESULTS_DIR)) \
	FLIGHTS_UID=$$(id -u) FLIGHTS_GID=$$(id -g) \
	FLIGHTS_CLUSTER_SECRET=$$(cat $(CLUSTER_SECRET_FILE))
.PHONY: docker-compose-up docker-compose-down docker-compose-clean docker-compose-logs chaos

$(CLUSTER_SECRET_FILE):
	@mkdir -p $(dir $@)
	@umask 077 && $(PYTHON) -c 'import secrets; print(secrets.token_hex(32))' > $@
	@echo "generated the cluster secret in $@"

#: images, data, the whole Compose deployment; follows the client until its results are written
docker-compose-up: docker-image data $(CLUSTER_SECRET_FILE)
	@mkdir -p $(RESULTS_DIR)
	@# A fresh session: a client that finds no client id in its state directory starts one.
	rm -rf $(RESULTS_DIR)/client-*/state
	@started_at=$$(date +%s.%N); \
	$(COMPOSE_ENV) $(COMPOSE) up -d && \
	$(PY) -m scripts.compose_follow --project $(COMPOSE_PROJECT) --started-at $$started_at
	@echo "results: $(RESULTS_DIR)/client-*/ ; the deployment keeps running (make docker-compose-logs, make chaos, make docker-compose-down)"

#: stop the deployment; its named volumes (brokers' logs, checkpoints, Prometheus) are kept
docker-compose-down: $(CLUSTER_SECRET_FILE)
	$(COMPOSE_ENV) $(COMPOSE) down --remove-orphans
	@echo "the deployment's volumes are kept (its data is there at the next up); make docker-compose-clean wipes them"

#: stop the deployment and DELETE its named volumes: every topic, checkpoint and metric it kept
docker-compose-clean: $(CLUSTER_SECRET_FILE)
	@echo "deleting the volumes of Compose project $(COMPOSE_PROJECT): brokers' logs, checkpoints, Prometheus data"
	$(COMPOSE_ENV) $(COMPOSE) down --volumes --remove-orphans

#: follow every service's log
docker-compose-logs: $(CLUSTER_SECRET_FILE)
	$(COMPOSE_ENV) $(COMPOSE) logs --follow --tail=100

# Nobody is spared, the last health checker included: the checkers heal one another faster
# than a fault every CHAOS_INTERVAL_S arrives (`make chaos-verify` proves it).
#: SIGKILL or pause a random container of the deployment every `CHAOS_INTERVAL_S` for `CHAOS_DURATION_S`
chaos: $(STAMP)
	$(PY) -m scripts.killer --backend docker --project $(COMPOSE_PROJECT) --random \
		--pause-ratio $(CHAOS_PAUSE_RATIO) --interval-s $(CHAOS_INTERVAL_S) \
		--duration-s $(CHAOS_DURATION_S)

# The built-in proof (scripts/chaos_verify.py, its library scripts/verify/): CHAOS_ROUNDS
# rounds, each a fresh deployment (its own Compose project; CHAOS_LOCAL=1: run_local's
# processes) running one client session while a
# random service, nobody spared, is SIGKILLed or paused every CHAOS_INTERVAL_S seconds
# (CHAOS_PAUSE_RATIO of the faults are pauses; CHAOS_VICTIMS=round-robin hits the service
# kinds in turn); every result file is checked against the reference, every fault against its
# heal. Fails if a round is not exact or a fault did not heal. More flags: CHAOS_VERIFY_ARGS.
CHAOS_ROUNDS ?= 3
CHAOS_VICTIMS ?= random
CHAOS_LOCAL ?=
CHAOS_VERIFY_ARGS ?=
.PHONY: chaos-verify
#: `CHAOS_ROUNDS` fresh deployments, each a session under random faults, checked exact and healed
chaos-verify: $(STAMP) $(if $(CHAOS_LOCAL),,docker-image)
	$(PY) -m scripts.chaos_verify --rounds $(CHAOS_ROUNDS) --interval-s $(CHAOS_INTERVAL_S) \
		--pause-ratio $(CHAOS_PAUSE_RATIO) --victims $(CHAOS_VICTIMS) \
		$(if $(CHAOS_LOCAL),--local) $(CHAOS_VERIFY_ARGS)

# The replication state machine's soak (tests/unit/broker/replication/test_raft_property.py):
# SOAK_ROUNDS rounds of the simulated cluster (about 3.4 steps a round), every safety and
# liveness check on; a benchmark, not part of `make test`.
SOAK_ROUNDS ?= 2000000
.PHONY: soak
#: the replication state machine's soak (`SOAK_ROUNDS`), every safety check on
soak: $(STAMP)
	RAFT_SOAK_STEPS=$(SOAK_ROUNDS) $(PY) -m pytest -q -s --timeout=0 -k soak \
		tests/unit/broker/replication/test_raft_property.py

# Benchmarks (figures and how to read them: docs/benchmarks.md). BENCH_ROWS sizes the query one,
# PIPELINE_ROWS the pipeline-vs-Spark-vs-DuckDB one (a generated sample, kept in /tmp).
PIPELINE_ROWS ?= 2000000
BENCH_ROWS ?= 200000
.PHONY: bench
#: broker, replication, query and pipeline benchmarks, one JSON line each
bench: $(STAMP)
	$(PY) -m scripts.bench_broker
	$(PY) -m scripts.bench_replication
	$(PY) -m scripts.bench_queries --rows $(BENCH_ROWS) --repeats 3 --warmups 1
	$(PY) -m scripts.bench_pipeline --rows $(PIPELINE_ROWS)

# Mutation testing (docs/mutation.md): cosmic-ray mutates each data- or safety-critical module
# (MUTATE_MODULE: one of them; empty: all, in priority order) and runs only that module's unit
# tests against each mutant, one test process at a time, for at most MUTATE_MINUTES per module;
# the session in .mutation/ resumes on the next run, and its verdicts in docs/mutation-ledger/ (in git)
# let a fresh clone resume too. A benchmark-style run, not part of `make test`.
MUTATE_MODULE ?=
MUTATE_MINUTES ?= 10
.PHONY: mutate
#: mutation testing of the data- and safety-critical modules against their unit tests (resumable)
mutate: $(STAMP)
	$(PY) -m scripts.mutate $(if $(MUTATE_MODULE),--module $(MUTATE_MODULE)) --minutes $(MUTATE_MINUTES)

# The nemesis (scripts/nemesis/): NEMESIS_BROKERS real brokers for NEMESIS_SECONDS under a seeded
# random schedule of SIGKILL + restart, SIGSTOP/SIGCONT, cut links between brokers, restarts
# with a wiped data directory and topic delete + re-create, while idempotent acks=all producers
# and consumers run; then convergence, every acknowledged record (once, in order, in its own
# incarnation), every replica's bytes and the brokers' idle CPU are checked. Exits non-zero on
# any finding, printing the seed and the schedule to replay it (NEMESIS_SEED; empty: a random
# one, printed). More flags (--groups, --fault-interval-s, ...): NEMESIS_ARGS. A soak, not part
# of `make test`; one short seeded round is (tests/integration/replication/test_nemesis.py).
NEMESIS_SECONDS ?= 300
NEMESIS_SEED ?=
NEMESIS_BROKERS ?= 3
NEMESIS_ARGS ?=
.PHONY: nemesis
#: real brokers under a seeded random fault schedule, then every acknowledged record checked
nemesis: $(STAMP)
	$(PY) -m scripts.nemesis --seconds $(NEMESIS_SECONDS) --brokers $(NEMESIS_BROKERS) \
		$(if $(NEMESIS_SEED),--seed $(NEMESIS_SEED)) $(NEMESIS_ARGS)

# docs/cli.md, the command and flag reference, regenerated from every entry point's --help and
# the `#:` lines above the targets here (tests/unit/scripts/test_cli_reference.py checks it).
.PHONY: docs
#: regenerate docs/cli.md from the parsers and these targets' `#:` lines
docs: $(STAMP)
	$(PY) -m scripts.cli_reference
