# The two commands that matter: `make dev` and `make test`. Both install what they need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUNTIME := $(VENV)/.runtime-stamp

.PHONY: install dev test bench layers lint

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

test: install
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python bench/queues.py
	$(BIN)/python bench/partitioned.py
	$(BIN)/python bench/flows.py
	$(BIN)/python bench/durable.py
	$(BIN)/python bench/gateway.py

layers: install
	$(BIN)/python layers/build.py

lint: install
	$(BIN)/ruff check .
