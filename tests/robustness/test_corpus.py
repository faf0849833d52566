"""Every bad input through the installed ``layerscope`` keeps the contract of :mod:`.harness`;
every positive control exits 0 and writes only what it was asked to."""

from __future__ import annotations

import pytest

from .corpus import ALL_CASES, BAD_CASES
from .harness import Case, Corpus, is_root, violations
from .selection import slow_ids

SLOW = slow_ids(list(ALL_CASES))
PARAMS = [pytest.param(case, id=case.id, marks=[pytest.mark.slow] if case.id in SLOW else [])
          for case in ALL_CASES]


def test_the_default_run_keeps_at_least_200_bad_inputs() -> None:
    assert len([case for case in BAD_CASES if case.id not in SLOW]) >= 200


@pytest.mark.parametrize("case", PARAMS)
def test_input(case: Case, corpus: Corpus) -> None:
    if case.root_skip and is_root():
        pytest.skip("running as root: a read-only mode does not stop root's writes (the /proc cases cover it)")
    outcome = corpus.outcomes[case.id]
    problems = violations(case, outcome)
    assert not problems, (f"layerscope {' '.join(case.argv)}\n  " + "\n  ".join(problems)
                          + f"\n  stderr: {outcome.stderr[-2000:]!r}")
