# Two commands for a fresh machine: `make run` and `make test`.
# `make test` runs two pytest passes at once (tests/run_suite.py): the whole suite on SQLite in
# two processes (pytest-xdist), a test file in one of them (module fixtures such as the browser or
# the installed package are set up once), and beside it, on a PostgreSQL the session starts
# (Debian's postgresql package), the tests marked `pg`, those whose proof depends on the
# database; its output follows the SQLite pass's. Mark new tests by the rule in tests/conftest.py.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test install install-dev lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(VENV)/.installed $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/malamar

test: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tests/run_suite.py

lint: install-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install-dev
	$(BIN)/python bench/events.py
	$(BIN)/python bench/runner.py --quick

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
