"""Runs every selected corpus case once, concurrently, before the first of them is checked.

Each case is a subprocess; a small thread pool overlaps their start-up (importing the CLI costs
about a second a run). ``LAYERSCOPE_ROBUSTNESS_WORKERS`` sets the pool size (default 4) and
``LAYERSCOPE_ROBUSTNESS_REPORT=FILE`` writes every outcome there as JSON.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import pytest

from .harness import Case, Corpus, is_root, layerscope_command, run_case, violations

WORKERS = int(os.environ.get("LAYERSCOPE_ROBUSTNESS_WORKERS", "4"))


@pytest.fixture(scope="session")
def corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Outcomes of the corpus cases selected in this session, keyed by case id."""
    cases: dict[str, Case] = {}
    for item in request.session.items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        if isinstance(case, Case) and not (case.root_skip and is_root()):
            cases[case.id] = case
    root = tmp_path_factory.mktemp("robustness")
    command = layerscope_command()
    start = time.monotonic()
    # Slowest first (bombs, timeouts-to-be) so they overlap with the many quick ones.
    ordered = sorted(cases.values(), key=lambda c: not c.id.startswith(("trace-gz-bomb", "hw-yaml-bomb")))
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {case.id: pool.submit(run_case, case, root / case.id, command) for case in ordered}
        outcomes = {case_id: future.result() for case_id, future in futures.items()}
    seconds = time.monotonic() - start
    report = os.environ.get("LAYERSCOPE_ROBUSTNESS_REPORT")
    if report:
        rows = {case_id: {**asdict(outcome), "summary": outcome.summary(),
                          "violations": violations(cases[case_id], outcome)}
                for case_id, outcome in outcomes.items()}
        Path(report).write_text(json.dumps({"seconds": seconds, "workers": WORKERS, "cases": rows}, indent=1))
    return Corpus(outcomes, seconds)
