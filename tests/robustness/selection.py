"""Which corpus cases ``make test`` runs and which only ``make test-slow`` runs (marked ``slow``).

Every case costs a process start (about a second of CPU), so the default run keeps the attacks the
corpus was written for (issue #24's list: bombs, deep nesting, random bytes, out-of-range sizes, SQL
file and extension access, outputs over inputs or into unwritable places, swapped or empty
arguments), every third remaining case in corpus order, and the first case of each command no other kept
case runs, which covers every family and command; commands that load torch (capture, validate, demo,
calibrate) keep only their named attacks, and the per-command repeats of one trace attack keep their
``query`` form. ``make test-slow`` (and ``make test-all``) runs the whole corpus."""

from __future__ import annotations

import re

from .harness import Case

#: Ids (substrings) of the attacks the default run always keeps.
ATTACKS = (
    "bomb", "deep", "random-bytes", "1e12", "batch-huge", "batch-2e63", "non-utf8", "-proc", "-sys", "read-only",
    "sql-read", "sql-glob", "sql-copy", "sql-attach", "sql-install", "sql-load", "sql-set", "sql-reset",
    "sql-export", "sql-pragma", "sql-replacement", "sql-empty", "sql-semicolon", "hidden_size-0", "input-huge",
    "tp-3", "swapped", "rows-negative", "threshold-nan", "-is-model", "-is-hardware", "-is-trace", "dotdot",
    "in-model-dir", "huge-int", "utf16", "fifo", "symlink", "cached-empty",
)
#: One in this many of the remaining (non-attack, non-control) cases runs in make test: each is a CLI process of
#: about 1.8 s of CPU on the 2-core reference VM (test_corpus keeps at least 200 bad inputs in make test).
PLAIN_EVERY = 3
#: Commands whose every run loads torch and transformers (seconds of CPU each).
TORCH_COMMANDS = frozenset({"capture", "validate", "demo", "calibrate"})


def _is_attack(case: Case) -> bool:
    return any(word in case.id for word in ATTACKS)


def slow_ids(cases: list[Case]) -> frozenset[str]:
    """The ids of ``cases`` that run only under ``-m slow``; positive controls (exit 0) always run."""
    slow: set[str] = set()
    kept_plain = 0
    commands = {c.argv[0] for c in cases if c.argv and (c.code == 0 or _is_attack(c))}
    for case in cases:
        if case.code == 0 or _is_attack(case):
            continue
        if (case.argv and case.argv[0] in TORCH_COMMANDS) or re.match(r"trace-.*-(analyze|compare)$", case.id):
            slow.add(case.id)
            continue
        first_of_command = bool(case.argv) and case.argv[0] not in commands
        if kept_plain % PLAIN_EVERY and not first_of_command:
            slow.add(case.id)
        else:
            commands.add(case.argv[0] if case.argv else "")
        kept_plain += 1
    return frozenset(slow)
