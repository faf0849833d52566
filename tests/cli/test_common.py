"""Shared CLI formatting (:mod:`layerscope.cli.common`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from enum import IntEnum

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerscope.cli.common import _indented_json, fmt_time_s, to_json_text


@pytest.mark.parametrize(("seconds", "text"), [
    (2.5, "2.500 s"), (0.0123, "12.300 ms"), (4.5e-5, "45.00 µs"), (3e-8, "30 ns"), (0.0, "0 ns"),
    # A negative time (the profiler's share of a forward, within noise) keeps its unit by magnitude.
    (-0.004726997, "-4.727 ms"), (-2.5e-6, "-2.50 µs"), (-1.5, "-1.500 s"), (math.nan, "-"),
])
def test_fmt_time_s(seconds: float, text: str) -> None:
    assert fmt_time_s(seconds) == text


@pytest.fixture
def root_level():
    """The root logger's level as ``layerscope`` (plain) or ``layerscope -v`` sets it; restored after."""
    import logging

    root = logging.getLogger()
    before = root.level

    def set_level(verbose: bool) -> None:
        root.setLevel(logging.INFO if verbose else logging.WARNING)

    yield set_level
    root.setLevel(before)


def test_quiet_third_party_hides_their_warnings_unless_verbose(root_level, capsys, monkeypatch) -> None:
    import logging
    import os
    import warnings

    from layerscope.cli.common import quiet_third_party

    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    transformers_log = logging.getLogger("transformers")
    level_before = transformers_log.level  # NOTSET, or WARNING where transformers was imported in this process
    root_level(False)
    with quiet_third_party():
        warnings.warn("torch: TypedStorage is deprecated", UserWarning, stacklevel=1)
        assert not transformers_log.isEnabledFor(logging.WARNING)
        assert os.environ["TRANSFORMERS_VERBOSITY"] == "error"  # for a transformers imported later
        assert logging.getLogger("layerscope.capture").isEnabledFor(logging.WARNING)  # ours still speak
    assert "TypedStorage" not in capsys.readouterr().err
    assert "TRANSFORMERS_VERBOSITY" not in os.environ and transformers_log.level == level_before  # as before
    root_level(True)
    with pytest.MonkeyPatch.context() as mp, quiet_third_party():
        records: list[logging.LogRecord] = []
        handler = logging.Handler()
        handler.emit = records.append  # type: ignore[method-assign]
        mp.setattr(logging.getLogger("py.warnings"), "handlers", [handler])
        warnings.warn("torch: TypedStorage is deprecated", UserWarning, stacklevel=1)
    assert any("TypedStorage" in r.getMessage() for r in records)  # -v: logged


class _Terminal:
    """A text stream that says it is a terminal, keeping what was written."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("no descriptor")


def test_step_progress_draws_on_a_terminal_and_not_for_json(monkeypatch) -> None:
    import sys

    from layerscope.cli.common import step_progress

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with step_progress(False, "capture") as progress:
        assert progress is None  # --json
    with step_progress(True, "capture") as progress:
        assert progress is not None
        progress(0, 3, "loading the model")
        progress(2, 3, "profiled iteration 1/1")
        progress(3, 3, "done")
    shown = "".join(terminal.parts)
    assert "capture" in shown and "profiled iteration 1/1" in shown and "2/3" in shown
    monkeypatch.setattr(terminal, "isatty", lambda: False)
    with step_progress(True, "capture") as progress:
        assert progress is None  # not a terminal: no bar


_LEAVES = (st.none() | st.booleans() | st.integers() | st.floats() | st.text()
           | st.floats().map(np.float64) | st.sampled_from([np.int64(3), IntEnum("E", "a").a]))
_JSONISH = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
                        | st.dictionaries(st.integers() | st.floats() | st.booleans() | st.none(), inner, max_size=2),
                        max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(_JSONISH)
def test_print_json_writes_the_bytes_of_the_stdlib_encoder(value: object) -> None:
    """``print_json``'s encoder writes what ``json.dumps(indent=2)`` of the NaN-cleaned value writes, byte for
    byte; values it does not know (numpy scalars, enums, non-str keys) go the stdlib's way, and raise as it does."""
    def outcome(encode: Callable[[], str]) -> tuple[str, str]:
        try:
            return "text", encode()
        except (TypeError, ValueError) as exc:
            return type(exc).__name__, str(exc)

    assert outcome(lambda: _indented_json(value)) == outcome(lambda: to_json_text(value, indent=2))


def test_print_json_writes_an_estimate_as_its_dump_does() -> None:
    from layerscope.app.estimate import EstimateRequest, estimate

    result = estimate(EstimateRequest(model="deepseek-v2-lite", hardware="h100-sxm", layer=1))
    assert _indented_json(result) == json.dumps(result.model_dump(mode="json"), indent=2)
    assert _indented_json({"result": result}) == to_json_text({"result": result}, indent=2)  # nested: the fallback
