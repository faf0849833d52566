"""How a run's forward passes are named wherever they appear: ``prefill`` and ``decode_step_K``.

A multi-step graph prefixes each op of decode step K with ``decode_step_K.`` (``decode_step_3.layers.0.mlp``);
a capture puts each forward in a range named after its phase or step (``prefill``, ``decode_step_3``). The
simulated trace, the measured one and the joins between them (``validate``, ``compare --sim``) read them
from here.
"""

from __future__ import annotations

import re

#: The capture's range around a prefill forward.
PREFILL_RANGE = "prefill"
#: The names of a capture's phase ranges; plain syntax, so it is also a DuckDB regex (use ``fullmatch``).
PHASE_RANGE_RE = re.compile(r"prefill|decode_step_[0-9]+")
#: The prefix of an op of a multi-step graph: its step, then the op's own name (group 1: the step).
STEP_PREFIX = re.compile(r"^decode_step_(\d+)\.")


def step_range(step: int) -> str:
    """The name of decode step ``step``: the capture's range around it, and (with a dot) its ops' prefix."""
    return f"decode_step_{step}"


def is_phase_range(name: str) -> bool:
    """Whether ``name`` names a phase range (``prefill``, ``decode_step_K``)."""
    return PHASE_RANGE_RE.fullmatch(name) is not None


def step_of_range(name: str) -> int | None:
    """The K of ``decode_step_K``; None for any other name."""
    return int(name.rsplit("_", 1)[1]) if is_phase_range(name) and name != PREFILL_RANGE else None


def without_step(name: str) -> str:
    """An op's name without its ``decode_step_K.`` prefix (unchanged when it has none)."""
    return STEP_PREFIX.sub("", name, count=1)
