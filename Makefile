# Every target installs what it needs: a fresh clone needs only Python 3.11 (and Java 17 for Spark).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ROWS ?= 200000
SEED ?= 1
DATA_DIR ?= data

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: build test lint data docker-image clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

build: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP) lint
	$(PY) -m pytest

data: $(STAMP)
	@if [ -s $(DATA_DIR)/itineraries.csv ] && [ -s $(DATA_DIR)/airports.csv ]; then \
		echo "$(DATA_DIR)/ already holds data"; \
	else \
		$(PY) -m scripts.generate_data --rows $(ROWS) --seed $(SEED) --out $(DATA_DIR); \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build

# Offline images: base (debootstrap from the host's apt mirror when no registry answers),
# wheels downloaded on the host, then runtime (deps) and code layers. Needs root and Docker.
docker-image: $(STAMP)
	PYTHON=$(abspath $(PY)) scripts/build_images.sh

# The embedded default: broker, query service and health checkers as local processes, a
# generated sample (ROWS rows), one client session; results and logs in DEMO_DIR.
DEMO_DIR ?= results/demo
.PHONY: demo
demo: $(STAMP)
	$(PY) -m scripts.run_local --results-dir $(DEMO_DIR) --rows $(ROWS) --seed $(SEED)
