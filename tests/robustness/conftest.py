"""Runs every selected corpus case once, concurrently, before the first of them is checked.

Each case is a subprocess; a small thread pool overlaps their start-up (importing the CLI costs
about a second a run). ``LAYERSCOPE_ROBUSTNESS_WORKERS`` sets the pool size (default 4) and
``LAYERSCOPE_ROBUSTNESS_REPORT=FILE`` writes every outcome there as JSON lines, each as it comes.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict

import pytest

from .harness import Case, Corpus, is_root, layerscope_command, run_case, violations

WORKERS = int(os.environ.get("LAYERSCOPE_ROBUSTNESS_WORKERS", "4"))
SLOW_WORDS = ("bomb", "fifo", "capture", "validate", "demo", "calibrate", "deep")


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
    # The possibly slow first (bombs, hangs, commands that load torch) so they overlap with the many quick ones.
    ordered = sorted(cases.values(), key=lambda c: not any(word in c.id for word in SLOW_WORDS))
    report = os.environ.get("LAYERSCOPE_ROBUSTNESS_REPORT")
    sink = open(report, "w") if report else None  # noqa: SIM115  (open for the whole run, closed below)
    outcomes = {}
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {pool.submit(run_case, case, root / case.id, command): case for case in ordered}
        for future in as_completed(futures):
            case = futures[future]
            outcome = outcomes[case.id] = future.result()
            if sink is not None:
                sink.write(json.dumps({"id": case.id, **asdict(outcome), "summary": outcome.summary(),
                                       "violations": violations(case, outcome)}) + "\n")
                sink.flush()
    seconds = time.monotonic() - start
    if sink is not None:
        total = {"id": "(corpus)", "seconds": seconds, "workers": WORKERS, "cases": len(outcomes)}
        sink.write(json.dumps(total) + "\n")
        sink.close()
    return Corpus(outcomes, seconds)
