# tupleflow: `make demo` to see a topology run, `make test` to run what CI runs.
#
# Everything runs inside .venv. Each extra set is installed once and remembered by a stamp file
# (.venv/.stamp-<extras>) that is newer than pyproject.toml, setup.py and the C source of the
# engine's hot closures; editing any of them reinstalls (and so rebuilds the C extension).

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Workers for `make test` (pytest-xdist; 0 runs the suite in this process, serially). Three on
# 2 cores: with two, the cores idled half the run (the tests wait on processes, sockets and
# timers); docs/internals/performance.md, "The suite's time".
PYTEST_WORKERS ?= 3
# Extra arguments for pytest, e.g. `make test PYTEST_ARGS='-m "not slow" -x'`.
PYTEST_ARGS ?=
# pip older than this cannot install a pyproject.toml-only project in editable mode (PEP 660).
MIN_PIP := 21.3
PIP_INSTALL := $(PY) -m pip install --quiet --progress-bar off
# What an install builds: the package's metadata, and the optional C extension (setup.py).
BUILD_INPUTS := pyproject.toml setup.py $(wildcard runtime/engine/_hot*.[ch])
# After an install: one line when the C extension could not be built (pip --quiet hides
# setup.py's own). The engine then runs its Python closures, and `make test` expects them
# only when told so.
CHECK_HOT := $(PY) -c 'import runtime.engine._hot' 2>/dev/null || echo "tupleflow: the C \
extension runtime/engine/_hot*.c was not built (no C compiler or Python headers?): the engine \
runs in pure Python. Set TUPLEFLOW_PURE_PYTHON=1 to run the tests that way." >&2

.PHONY: help venv demo test lint bench clean system-deps bytecode

help:
	@echo "make demo    run examples/wordcount.py for 10 seconds"
	@echo "make test    system packages, ruff, then the whole pytest suite (what CI runs)"
	@echo "make lint    ruff check, and lint-imports (the import contracts in pyproject.toml)"
	@echo "make bench   python benchmarks/wordcount.py"
	@echo "make lab     JupyterLab on 127.0.0.1, opening tutorials/ (%load_ext kernel_ext works)"
	@echo "make tutorials  run every tutorial; HTML copies with outputs in build/tutorials/"
	@echo "make clean   remove .venv, caches and run directories"

# --- the virtual environment -------------------------------------------------------------------

# The interpreter: (re)created when missing or broken. Refuses a Python older than 3.11.
$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "tupleflow needs Python >= 3.11, but '$(PYTHON)' is $$($(PYTHON) -V 2>&1 || echo missing)." >&2; \
	  echo "Run e.g. 'make $(MAKECMDGOALS) PYTHON=python3.11'." >&2; exit 1; }
	@echo "creating $(VENV) with $$($(PYTHON) -V 2>&1)"
	@rm -rf $(VENV)
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -c 'import sys, pip; v = tuple(int(p) for p in pip.__version__.split(".")[:2]); \
	  sys.exit(v < tuple(int(p) for p in "$(MIN_PIP)".split(".")))' \
	  || $(PIP_INSTALL) --upgrade pip

# One stamp per set of extras. Installing the test extra also satisfies the base stamp.
$(VENV)/.stamp-base: $(BUILD_INPUTS) | $(PY)
	@echo "installing tupleflow (editable) into $(VENV)"
	@$(PIP_INSTALL) -e .
	@$(CHECK_HOT)
	@touch $@

$(VENV)/.stamp-test: $(BUILD_INPUTS) | $(PY)
	@echo "installing tupleflow[test] (editable) into $(VENV)"
	@$(PIP_INSTALL) -e '.[test]'
	@$(CHECK_HOT)
	@touch $@ $(VENV)/.stamp-base

venv: $(VENV)/.stamp-base

# --- targets -----------------------------------------------------------------------------------

# Every process a topology starts imports the runtime: compiled once here, so that none
# compiles ~60 modules from source at each start (0.40 -> 0.22 s of CPU an instance,
# measured 2026-11-26), which is what happens when PYTHONDONTWRITEBYTECODE is set in the
# environment (Python then reads .pyc files but never writes them; compileall still does).
bytecode: $(VENV)/.stamp-base
	@$(PY) -m compileall -q runtime workbench kernel_ext benchmarks examples >/dev/null

demo: $(VENV)/.stamp-base bytecode
	$(PY) -m runtime run examples/wordcount.py:topology --seconds 10

system-deps:
	@bash .ci/system-deps.sh

# lint-imports: imports point one way ([tool.importlinter] in pyproject.toml); no cache
# folder is left in the checkout.
lint: $(VENV)/.stamp-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache --no-logo

# pytest's exit code 5 means it collected no test: a failure here, never a silent pass.
test: $(VENV)/.stamp-test system-deps lint bytecode
	@status=0; $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS) || status=$$?; \
	if [ "$$status" -eq 5 ]; then \
	  echo "make test: FAILED: pytest collected no tests (exit code 5)" >&2; exit 1; \
	fi; \
	exit "$$status"

bench: $(VENV)/.stamp-base
	$(PY) benchmarks/wordcount.py

# The test extra includes the notebook one (JupyterLab, ipywidgets); tupleflow is installed
# editable, so the kernel imports kernel_ext and workbench from this checkout. Loopback only.
.PHONY: lab
# overrides.json turns on "save widget state", so a notebook saved while a dashboard is live
# reopens showing its last picture instead of "model not found". As root (a container, often),
# Jupyter refuses to start without --allow-root: it is added only then.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings
lab: $(VENV)/.stamp-test
	@mkdir -p $(LAB_SETTINGS)
	@echo '{"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": true}}' \
	  > $(LAB_SETTINGS)/overrides.json
	$(PY) -m jupyterlab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=tutorials \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# --- tutorials as HTML (issue 24) ---------------------------------------------------------------
# Every tutorial executed in a fresh kernel (cwd tutorials/, this checkout first on the kernel's
# path, as tests/tutorials runs them), then written with its outputs (charts, graphs, the
# dashboards' static last pictures) as build/tutorials/NN-name.html, readable without running
# anything. The .ipynb files in git stay output-free (a test checks it). A tutorial whose
# lesson does not hold raises, and the target fails.
.PHONY: tutorials
TUTORIAL_CELL_TIMEOUT := 300
tutorials: $(VENV)/.stamp-test
	@mkdir -p build/tutorials
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m nbconvert --to html --execute \
	  --ExecutePreprocessor.kernel_name=python3 \
	  --ExecutePreprocessor.timeout=$(TUTORIAL_CELL_TIMEOUT) \
	  --output-dir build/tutorials tutorials/[0-9][0-9]-*.ipynb
	@echo "tutorials with their outputs: build/tutorials/*.html"

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis .tupleflow artifacts build dist *.egg-info
	rm -f runtime/engine/_hot.*.so
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
