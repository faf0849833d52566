"""Fixtures shared by the trace tests."""

from __future__ import annotations

import pytest

from layerscope.schedule import ScheduleProblem, schedule


@pytest.fixture(scope="module")
def timed():  # type: ignore[no-untyped-def]
    from layerscope.cost import time_graph
    from layerscope.graph import build_model_graph
    from layerscope.hardware import load_hardware
    from layerscope.model import model_spec_from_dict, tiny_config
    from layerscope.workload import make_workload

    spec = model_spec_from_dict(tiny_config("llama"), "tiny-llama")
    w = make_workload(phase="decode", context=64)
    return time_graph(build_model_graph(spec, w.passes()[0], w, "unfused"), load_hardware("h100-sxm"))


@pytest.fixture(scope="module")
def sched(timed):  # type: ignore[no-untyped-def]
    return schedule(ScheduleProblem.from_timed(timed), 3)
