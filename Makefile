# The two commands that matter: `make dev` and `make test`. Both install what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUNTIME := $(VENV)/.runtime-stamp

.PHONY: install dev test bench layers lint openapi browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# `make dev` needs only the runtime; tests, benchmarks and deployment add the dev and infra extras.
$(RUNTIME): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[local]'
	touch $(RUNTIME)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,infra]'
	touch $(STAMP) $(RUNTIME)

install: $(STAMP)

dev: $(RUNTIME)
	$(BIN)/postbox dev

# The suite on TEST_WORKERS processes (one per core by default), each on its own embedded PostgreSQL;
# a test module stays on one worker, so its module fixtures are built once. Tests marked `serial`
# (schemathesis's generated tests, which xdist's workers collect but never run) run after, in one process.
TEST_WORKERS ?= auto
test: install browser
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial"
	$(BIN)/python -m pytest -m serial

# Debian's Chromium for the web console's browser tests (Playwright drives it: no browser download).
# Installed once with apt when missing (root, as CI runs); without apt the browser tests are skipped.
APT := DEBIAN_FRONTEND=noninteractive apt-get -y -q -o=Dpkg::Use-Pty=0
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's chromium for the console's browser tests"; \
	    $(APT) install --no-install-recommends chromium >/dev/null 2>&1 || \
	      { $(APT) update >/dev/null && $(APT) install --no-install-recommends chromium >/dev/null; }; \
	  else \
	    echo "no chromium, and no apt-get as root to install it: the console's browser tests will be skipped"; \
	  fi; }

bench: install
	$(BIN)/python bench/queues.py
	$(BIN)/python bench/partitioned.py
	$(BIN)/python bench/flows.py
	$(BIN)/python bench/durable.py
	$(BIN)/python bench/gateway.py
	$(BIN)/python bench/cold_imports.py
	$(BIN)/python bench/cold_start.py
	$(BIN)/python bench/work.py
	$(BIN)/python bench/work_peers.py
	$(BIN)/python bench/keyed_streams.py
	$(BIN)/python bench/sqs.py
	$(BIN)/python bench/soak.py

layers: install
	$(BIN)/python layers/build.py

openapi: install
	$(BIN)/python -m functions.openapi docs/openapi.json

lint: install
	$(BIN)/ruff check .
