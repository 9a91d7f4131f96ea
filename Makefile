# The two commands: `make run` (the main job on the embedded default) and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PYTHON_FOR_VENV := $(shell .ci/find-python)

.PHONY: run test lint typecheck importlint install system-deps demo bench clean

$(STAMP): pyproject.toml
	@test -n "$(PYTHON_FOR_VENV)" || { echo "error: python3.12 or python3.13 is required (Harbor needs Python >= 3.12)"; exit 1; }
	@test -x $(PY) || $(PYTHON_FOR_VENV) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
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

run: $(STAMP) system-deps
	$(VENV)/bin/mkb demo

test: $(STAMP) system-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

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
