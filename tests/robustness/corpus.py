"""The whole corpus: every family's cases, in one list."""

from __future__ import annotations

from . import corpus_cli, corpus_hardware, corpus_models, corpus_outputs, corpus_traces, corpus_workload
from .harness import USER_ERROR, Case

FAMILIES: dict[str, list[Case]] = {
    "models": corpus_models.CASES,
    "hardware": corpus_hardware.CASES,
    "workload": corpus_workload.CASES,
    "traces": corpus_traces.CASES,
    "outputs": corpus_outputs.CASES,
    "cli": corpus_cli.CASES,
}

ALL_CASES: list[Case] = [case for cases in FAMILIES.values() for case in cases]
BAD_CASES: list[Case] = [case for case in ALL_CASES if case.code == USER_ERROR]
