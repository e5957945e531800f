# Quick start: `make run` (set up + the main job), `make test` (set up + the test suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU machines this project is developed on serve this exact wheel from local disk;
# on a GPU machine it is the CUDA build of the same version.
TORCH_SPEC ?= torch==2.13.0

.PHONY: run test lint clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

run: $(VENV)/.installed
	$(BIN)/trainperf step

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests

clean:
	rm -rf $(VENV) trainperf.db
