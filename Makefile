# The two commands: `make run` (the main job on the embedded default) and `make test`.
# Both install the project with both DSLs (CuTe DSL, TIRx: the `cute` and `tirx` extras) into
# $(VENV), beside the pinned torch; they coexist (about 15 s and 0.8 GB more than torch alone).
SHELL := /bin/bash
# Python's default: compiled modules are cached in __pycache__ (git ignores them). Some hosts
# export PYTHONDONTWRITEBYTECODE=1; then every process of the suite (each pytest worker's
# assertion rewriting, each warm parent, each `mkb` child) compiled the project afresh.
# Jailed runners set it again for themselves (judge/runner_proc.py: their tree is read-only).
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTHON_FOR_VENV := $(shell .ci/find-python)

.PHONY: run test test-fast lint typecheck importlint install system-deps test-system-deps demo bench clean

$(STAMP): pyproject.toml
	@test -n "$(PYTHON_FOR_VENV)" || { echo "error: python3.12 or python3.13 is required (Harbor needs Python >= 3.12)"; exit 1; }
	@test -x $(PY) || $(PYTHON_FOR_VENV) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,cute,tirx,ray]'
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP) system-deps

# The local sandbox runs agents in a bubblewrap jail: as root, install it with apt-get when
# missing; elsewhere say so (the local sandbox needs root anyway; `mkb sandbox check` reports).
system-deps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (the agent jail)"; \
	    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  elif [ "$$(id -u)" = 0 ]; then \
	    echo "error: bubblewrap (bwrap) is missing and apt-get is not available; install bubblewrap"; exit 1; \
	  else \
	    echo "warning: bubblewrap (bwrap) is missing: the local sandbox's agent jail needs it (as root: apt-get install bubblewrap)"; \
	  fi; }

# The test suite drives the TUI in a real terminal (tmux: tests/tui/test_tmux_smoke.py) and
# the browser view in the system Chromium (tests/tui/test_browser.py; Playwright never downloads
# a browser). As root, install what is missing with apt-get; elsewhere say what will skip.
# Only `make test` needs them, so `make run` and `make install` never pull in a browser.
test-system-deps:
	@missing=""; \
	command -v tmux >/dev/null 2>&1 || missing="$$missing tmux"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing (the real-terminal and browser tests)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "warning: missing$$missing: the tmux / browser tests will skip (as root: apt-get install$$missing)"; \
	  fi; \
	fi

run: $(STAMP) system-deps
	$(VENV)/bin/mkb demo

# The suite in two tiers (docs/architecture.md, "Tests"): `make test` runs all of it (what
# .ci/run calls), `make test-fast` leaves out the tests marked slow. Both run the tests marked
# serial (timing-sensitive) first, alone in one process, then the rest on TEST_WORKERS
# pytest-xdist workers (3 on 2 cores: a worker waits on its children, Ray or a terminal for
# part of each test; 3 kept both cores busy and took the parallel run from 578 s to 510 s,
# docs/benchmarks.md); tests that share a resource (a module's warm grader, a Ray cluster's
# ports, one demo run) carry an xdist_group and run on one worker (--dist loadgroup).
TEST_WORKERS ?= 3
PYTEST := $(PY) -m pytest -q -p no:cacheprovider
# sorted: tests/tui's modules do `from conftest import`, which finds the conftest loaded last
SERIAL_FILES = $(sort $(shell grep -rlE --include='test_*.py' 'pytest\.mark\.serial' tests))
# The serial files that mostly wait (the Ray cluster module: its nodes and actors use about a
# third of one core): `make test` runs mypy beside them, the other serial files alone after it.
SERIAL_WAITING = tests/scale/test_ray_cluster.py
# $(1): a marker expression ANDed to both runs; $(2): more options for the parallel run;
# $(3): a command run in the background beside the SERIAL_WAITING files (then the other serial
# files run in a pytest of their own, once it has ended). Every run always happens; the recipe
# fails if any failed (exit 5, none selected, is fine).
define run_tiers
	@status=0; serial="$(SERIAL_FILES)"; \
	$(if $(3),log=$$(mktemp); echo "+ $(3) (beside $(SERIAL_WAITING))"; \
	  ( $(3) ) >"$$log" 2>&1 & beside=$$!; \
	  serial="$(filter-out $(SERIAL_WAITING),$(SERIAL_FILES))"; \
	  if [ -n "$(filter $(SERIAL_WAITING),$(SERIAL_FILES))" ]; then \
	    echo "+ pytest -m 'serial$(1)' $(filter $(SERIAL_WAITING),$(SERIAL_FILES))"; \
	    $(PYTEST) -m "serial$(1)" $(filter $(SERIAL_WAITING),$(SERIAL_FILES)) \
	      || { rc=$$?; [ $$rc = 5 ] || status=$$rc; }; \
	  fi; \
	  wait $$beside || status=$$?; cat "$$log"; rm -f "$$log";) \
	if [ -n "$$serial" ]; then \
	  echo "+ pytest -m 'serial$(1)' (alone)"; \
	  $(PYTEST) -m "serial$(1)" $$serial || { rc=$$?; [ $$rc = 5 ] || status=$$rc; }; \
	fi; \
	echo "+ pytest -n $(TEST_WORKERS) --dist loadgroup -m 'not serial$(1)'"; \
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup -m "not serial$(1)" $(2) || status=$$?; \
	exit $$status
endef

# ruff and the import contracts take a second: they run first, so a lint error stops the run
# at once; mypy (about 45 s of one core with no cache, as on a fresh clone) runs beside the
# Ray cluster's serial tests, and its failure fails the recipe once the tests have run. After
# mypy, still beside them, one collection of the parallel run's tests writes the bytecode of
# the project and of pytest's rewritten test modules, which the parallel run's workers would
# otherwise each compile at once (a fresh clone's collection: 26 s of CPU, 18 s once cached).
BESIDE_SERIAL = $(VENV)/bin/mypy && $(PYTEST) --collect-only -m 'not serial' >/dev/null
test: $(STAMP) system-deps test-system-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(call run_tiers,,--durations=12,$(BESIDE_SERIAL))

test-fast: $(STAMP) system-deps
	$(call run_tiers, and not slow,--durations=5)

# ruff's linter and the import contracts: the tree is not held to `ruff format` (problem files
# and fixtures keep the layout their recorded hashes and line-numbered findings were taken from)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

importlint: $(STAMP)
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(PY) benchmarks/storage_write.py --seconds 5
	$(PY) benchmarks/engine_scale.py --attempts 2000
	$(PY) benchmarks/analysis_full.py --repeats 3

clean:
	rm -rf $(VENV) mkb-data .pytest_cache
