"""Positive contracts of issue #24, through the installed command: every command takes ``--json``;
``query`` reads SQL from a pipe; names from data are printed as they are (no markup, no emoji);
``verify`` exits 1 on gaps. Run in the corpus's pool (see conftest)."""

from __future__ import annotations

import pytest

from .corpus_traces import GOOD, REAL
from .harness import Case, Corpus, violations
from .inputs import markup_trace

# Each contract also has a faster check on every landing (tests/cli/test_exit_codes.py: --json on every
# command and verify's 0/1; tests/cli/test_analyze_cli.py and test_markup_cli.py: SQL from a pipe,
# names printed literally); these run them once more over real traces under `make test-slow`.
pytestmark = pytest.mark.slow

#: Commands too slow to run here (they load torch and time a model): ``--json`` is checked as an
#: accepted option (an unknown one is a usage error before ``--help`` is handled).
JSON_ACCEPTED = ("open", "capture", "demo", "validate", "calibrate")

CASES: list[Case] = [
    Case("json-estimate", ("estimate", "--json"), code=0, stdout_json=True),
    Case("json-models", ("models", "--json"), code=0, stdout_json=True),
    Case("json-hardware", ("hardware", "--json"), code=0, stdout_json=True),
    Case("json-simulate", ("simulate", "--engines", "1,2", "--json"), code=0, stdout_json=True),
    Case("json-query", ("query", REAL, "select count(*) as n from slice", "--json"), {REAL: GOOD[REAL]}, code=0,
         stdout_json=True),
    Case("json-analyze", ("analyze", REAL, "--json"), {REAL: GOOD[REAL]}, code=0, stdout_json=True),
    Case("json-compare", ("compare", REAL, REAL, "--json"), {REAL: GOOD[REAL]}, code=0, stdout_json=True),
    Case("json-workloads", ("workloads", "--from-graph", "--model", "llama-3.2-1b", "--layers", "1", "--out", "wl",
                            "--json"), code=0, creates=("wl",), stdout_json=True),
    Case("json-verify", ("verify", "--traces", "wl", "--model", "llama-3.2-1b", "--json"), code=0, stdout_json=True,
         before=(("workloads", "--from-graph", "--model", "llama-3.2-1b", "--layers", "1", "--out", "wl"),)),
    *(Case(f"json-accepted-{command}", (command, "--json", "--help"), code=0) for command in JSON_ACCEPTED),
    Case("exit-verify-gaps-is-1", ("verify", "--traces", "wl", "--model", "qwen3-30b-a3b"), code=1,
         before=(("workloads", "--from-graph", "--model", "llama-3.2-1b", "--layers", "1", "--out", "wl"),)),
    Case("stdin-query-pipe", ("query", REAL), {REAL: GOOD[REAL]}, code=0, stdin="select 41 + 1 as answer\n",
         stdout_expect=("42",)),
    Case("stdin-query-file-dash", ("query", REAL, "--file", "-"), {REAL: GOOD[REAL]}, code=0,
         stdin="select 41 + 1 as answer\n", stdout_expect=("42",)),
    Case("markup-query-literal", ("query", REAL, "select '[/bold]' as a, ':x:' as b, '[red]r[/red]' as c"),
         {REAL: GOOD[REAL]}, code=0, stdout_expect=("[/bold]", ":x:", "[red]r[/red]")),
    Case("markup-analyze-event-names", ("analyze", "m.json", "--rows", "10"), {"m.json": markup_trace}, code=0,
         stdout_expect=("[/bold]", ":x:", "[red]op[/red]")),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_contract(case: Case, corpus: Corpus) -> None:
    outcome = corpus.outcomes[case.id]
    problems = violations(case, outcome)
    assert not problems, (f"layerscope {' '.join(case.argv)}\n  " + "\n  ".join(problems)
                          + f"\n  stderr: {outcome.stderr[-2000:]!r}")
