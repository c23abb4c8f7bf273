# Everything bootstraps itself: `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-all lint matrix bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "dynascope needs $(PYTHON) on PATH (or run: make PYTHON=python3 ...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: a bare range would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# compile the numba kernels (trace writer, memory sampler, analysis scanner) once, now, instead of on first use
	$(PY) -c "from dynascope.trace import memory, oplines; from dynascope.analyze.read import _scan; oplines.warm_up(); _scan.warm_up(); memory.warm_up()"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/dynascope demo

test: $(STAMP)
	$(PY) -m pytest -n 2 -q

test-all: $(STAMP)
	$(PY) -m pytest -n 2 -q -m ''

# ruff (lint), mypy (types, src/) and lint-imports (the import layering of docs/architecture.md), all configured in
# pyproject.toml; all three run, and any finding fails the target.
lint: $(STAMP)
	@status=0; \
	$(VENV)/bin/ruff check . || status=1; \
	$(VENV)/bin/mypy || status=1; \
	$(VENV)/bin/lint-imports --no-logo || status=1; \
	exit $$status

# The version matrix (noxfile.py): oldest and newest torch, Python 3.10 to 3.13, in scratch venvs
# under .nox/. One session: make matrix ARGS="-s 'torch_free(3.12)'"; list them: make matrix ARGS=-l
matrix: $(STAMP)
	$(VENV)/bin/nox $(ARGS)

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .nox build dist src/*.egg-info .mypy_cache .ruff_cache .import_linter_cache
