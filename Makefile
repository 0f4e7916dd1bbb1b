# The two commands a fresh machine needs: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: serve cluster test test-fast lint bench clean reference js browser etcd go-harness

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

# A local cluster to try: etcd (installed by `make etcd` when missing) and three brokers on
# 127.0.0.1:9092-9094 in the foreground, data in ./cluster-data; Ctrl-C stops them all.
cluster: $(STAMP) etcd
	$(VENV)/bin/oncelog dev-cluster $(ARGS)

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check oncelog tests bench examples
	$(VENV)/bin/mypy

# The reference Apache Kafka 4.4 broker and the Java harness (docs/reference-kafka.md):
# fetched once with Maven into .cache/, a no-op afterwards. Not needed by `make serve`.
reference:
	tests/support/fetch_kafka.sh

# KafkaJS for the admin-client tests (tests/js, driven by tests/support/kafkajs.py): `npm ci`
# from the committed lock file, redone only when the lock changes (the stamp is newer).
JS_STAMP := tests/js/node_modules/.installed

$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund
	touch $@

js: $(JS_STAMP)

# Debian's chromium for the transactions console's browser test (tests/integration/
# test_ui_browser.py drives it headless over the DevTools protocol). Installed only when
# missing; the package lists are refreshed only when apt does not know the package.
browser:
	@test -x /usr/bin/chromium || { \
		apt-cache show chromium >/dev/null 2>&1 || apt-get update; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; }

# Debian's etcd (package etcd-server, /usr/bin/etcd) for the cluster tests (tests/cluster:
# oncelog/harness/etcd.py starts one per test module as the metadata store). Installed only
# when missing, like chromium; `make serve` (one node) never needs it.
etcd:
	@test -x /usr/bin/etcd || { \
		apt-cache show etcd-server >/dev/null 2>&1 || apt-get update; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server; }

# The Go client test's program (tests/go: franz-go's GroupTransactSession, driven by
# tests/integration/test_go_client.py), built into the reference cache; make rebuilds it
# only when a source or the module files are newer than the binary. Needs Go and the module
# proxy the first time (~2 min on this machine, mostly compiling franz-go).
GO_CACHE := $(or $(ONCELOG_REFERENCE_CACHE),.cache)
GO_HARNESS := $(GO_CACHE)/go-harness/oncelog-go-harness

$(GO_HARNESS): tests/go/go.mod tests/go/go.sum $(wildcard tests/go/*.go)
	cd tests/go && go build -o $(abspath $@) .

go-harness: $(GO_HARNESS)

# The suite runs in two pytest processes at once: the Spark tests in one process, one at a
# time (one SparkSession; two Spark JVMs at once starve each other on 2 cores), and every
# other test on TEST_WORKERS pytest-xdist workers (most wait on subprocesses: brokers, JVMs,
# etcd). The Spark run's output is printed when both have finished; the target fails when
# either does. (pytest-xdist's --dist loadgroup would keep the Spark tests on one worker,
# but with pytest 9 it does not group at all.) TEST_WORKERS=0: one process for the rest.
TEST_WORKERS ?= 2
SPARK_LOG := $(or $(TMPDIR),/tmp)/oncelog-spark-tests.log

# Each broker, CLI command and verify worker the suite starts is a new Python process (many
# hundreds): oncelog is compiled to __pycache__ once, first, so that they read its bytecode
# instead of compiling ~250 modules each (0.5 s of CPU a process) — also where
# PYTHONDONTWRITEBYTECODE is set, which keeps processes from writing it but not from reading.
test: $(TEST_STAMP) lint reference js browser etcd go-harness
	@$(PY) -m compileall -q oncelog
	@$(VENV)/bin/pytest -q -p no:cacheprovider tests/spark > $(SPARK_LOG) 2>&1 & spark=$$!; \
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --ignore=tests/spark tests; rest=$$?; \
	wait $$spark; sparked=$$?; \
	echo "== the Spark tests (tests/spark, in their own process) =="; cat $(SPARK_LOG); \
	test $$rest -eq 0 && test $$sparked -eq 0

# For development: lint and the unit tests only (no broker processes, no Java), under a minute.
test-fast: $(TEST_STAMP) lint
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/unit

bench: $(TEST_STAMP) reference
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/run.py $(ARGS)

clean:
	rm -rf $(VENV) data .cache tests/js/node_modules
