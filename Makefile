# Genesis — two commands on a fresh machine: `make run` and `make test`.
# Debian's CPython (built with PGO/LTO) parses and runs ~2x faster here than a plain source build.
PYTHON ?= $(shell test -x /usr/bin/python3.11 && echo /usr/bin/python3.11 || echo python3.11)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-unit lint format services venv bench image clean-state help lock licences

help:
	@echo "make run       start every service, then the worker, the engine and the API (Ctrl-C stops them)"
	@echo "make test      make lint, start every service, then run the whole test suite (unit, then stack)"
	@echo "make test-unit only the tests that need no service (seconds)"
	@echo "make bench     run the benchmarks in bench/ (JSON on stdout)"
	@echo "make lint      import rules (import-linter), lint and format (ruff), types (mypy)"
	@echo "make format    apply ruff's format and its safe fixes to every Python file"
	@echo "make lock      regenerate requirements.lock (pins with hashes) from pyproject.toml"
	@echo "make licences check that the runtime dependencies' licences fit Apache-2.0"
	@echo "make services  only install/start Docker, Redis, Postgres, Temporal; migrate; build the sandbox image"

venv: $(STAMP)

# requirements.lock pins every package of the venv with its hashes (pip refuses a download whose
# hash is not listed); genesis itself is installed on top without dependencies.
$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --require-hashes -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	@touch $@

# The lock is generated, never edited: it resolves pyproject.toml's runtime dependencies and the
# extras `make venv` needs (tests, benchmarks, the GEPA adapter, uv itself) for
# CPython 3.11 on Linux. Versions already in the lock are kept; to move one on, run e.g.
# `make lock LOCK_UPGRADE="--upgrade-package NAME"` (or `--upgrade` for all).
LOCK_EXTRAS := test bench gepa lock
lock: $(STAMP)
	$(VENV)/bin/uv pip compile --quiet pyproject.toml $(addprefix --extra ,$(LOCK_EXTRAS)) \
	  --python-version 3.11 --python-platform linux --generate-hashes \
	  --custom-compile-command "make lock" $(LOCK_UPGRADE) -o requirements.lock

services: venv
	@bash scripts/services.sh

licences: venv
	$(PY) scripts/licences.py

run: services
	$(PY) -m cli.run

# The checks of `make lint` first, then both layers: tests/unit (no service, seconds), then
# tests/stack on the real services. Each layer ends with its slowest tests, to see where the
# suite's time goes.
test: lint services
	$(PY) -m pytest tests/unit --durations=15
	$(PY) -m pytest tests/stack --durations=40

test-unit: venv
	$(PY) -m pytest tests/unit

# Every check runs, and the target fails if any failed ([tool.importlinter], [tool.ruff] and
# [tool.mypy] in pyproject.toml say what each covers).
lint: venv
	@status=0; \
	$(VENV)/bin/lint-imports || status=1; \
	$(VENV)/bin/ruff check . || status=1; \
	$(VENV)/bin/ruff format --check --output-format concise . || status=1; \
	$(VENV)/bin/mypy || status=1; \
	exit $$status

# The safe fixes first (they may leave lines to reformat), then the format.
format: venv
	-$(VENV)/bin/ruff check --fix --quiet .
	$(VENV)/bin/ruff format .

# The benchmarks propose without API keys and far faster than the seed's rate limits allow.
bench: export GENESIS_AUTH := open
bench: export GENESIS_RATELIMIT_ACTIVE_PER_AGENT := 100000
bench: export GENESIS_RATELIMIT_PROPOSALS_PER_IP_MINUTE := 100000
bench: export GENESIS_RATELIMIT_PROPOSALS_PER_AGENT_HOUR := 100000
bench: services
	@command -v wrk >/dev/null && command -v hey >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk hey
	$(PY) bench/bench_gatekeeper.py
	$(PY) bench/bench_pipeline.py
	$(PY) -m bench.bench_api
	$(PY) -m bench.engine --entities 500,5000 --traits 3 --ticks 300 --compare-mesa
	$(PY) -m bench.journal --entities 500,5000 --ticks 600
	$(PY) -m bench.engine_process --seconds 60
	$(PY) -m bench.rounds --agents 100 --rate 50 --seconds 20
	$(PY) -m bench.shadow --entities 500 --ticks 600
	$(PY) -m bench.soak --minutes 10 --traits 60 --agents 20
	$(PY) -m bench.soak --hostile --minutes 1 --kinds stateless,stateful
	$(PY) -m bench.bench_gepa
	$(PY) -m bench.evolution --seeds 5 --ticks 20000
	$(PY) -m bench.verdicts

image: venv
	$(PY) -m sandbox.image build
