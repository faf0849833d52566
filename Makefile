# The two set-up commands of the README:
#   make demo   the main job on the bundled default (no downloads)
#   make test   the whole test suite (lint, types, tests)
PYTHON ?= python3
# torch is pinned so the install takes the local CPU build instead of pulling CUDA wheels.
TORCH_PIN ?= torch==2.13.0

.PHONY: install demo test lint typecheck pytest golden bench

install:
	$(PYTHON) -m pip install -q -e '.[dev,capture]' '$(TORCH_PIN)'

demo: install
	layerscope demo --out out/demo

lint:
	$(PYTHON) -m ruff check src tests bench

typecheck:
	$(PYTHON) -m mypy

pytest:
	$(PYTHON) -m pytest -p no:cacheprovider

test: install lint typecheck pytest

golden:
	$(PYTHON) -m layerscope.trace.golden tests/data/golden

bench:
	$(PYTHON) bench/bench_estimate.py
	$(PYTHON) bench/bench_simulate.py
	$(PYTHON) bench/bench_ingest.py
