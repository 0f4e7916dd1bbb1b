# The two commands a fresh machine needs: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: serve test lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

serve: $(STAMP)
	$(VENV)/bin/oncelog serve $(ARGS)

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check oncelog tests bench
	$(VENV)/bin/mypy

test: $(TEST_STAMP) lint
	$(VENV)/bin/pytest -q tests

bench: $(TEST_STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/run.py $(ARGS)

clean:
	rm -rf $(VENV) data
