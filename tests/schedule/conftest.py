"""Random DAG problems for the scheduler's property tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from layerscope.schedule import ScheduleProblem

#: 1 byte per ns keeps hand arithmetic easy.
BANDWIDTH = 1e9


@st.composite
def problems(draw: st.DrawFn, max_ops: int = 24, zero_overhead: bool = False) -> ScheduleProblem:
    n = draw(st.integers(1, max_ops))
    deps = []
    for i in range(n):
        if i == 0:
            deps.append([])
            continue
        k = draw(st.integers(0, min(3, i)))
        deps.append(sorted(draw(st.lists(st.integers(0, i - 1), min_size=k, max_size=k, unique=True))))
    times = st.one_of(st.just(0.0), st.floats(1e-9, 5e-6))
    compute = [draw(times) for _ in range(n)]
    memory = [draw(st.one_of(st.just(0.0), st.floats(1.0, 5000.0))) for _ in range(n)]
    overhead = [0.0] * n if zero_overhead else [draw(st.one_of(st.just(0.0), st.floats(1e-9, 1e-6)))
                                               for _ in range(n)]
    return ScheduleProblem.from_dependencies(deps, compute, memory, overhead, BANDWIDTH, name="random")


def critical_path_ns(problem: ScheduleProblem, duration_ns: np.ndarray) -> float:
    finish = np.zeros(problem.n)
    for i in range(problem.n):
        ready = max((finish[j] for j in problem.dependencies(i)), default=0.0)
        finish[i] = ready + duration_ns[i]
    return float(finish.max()) if problem.n else 0.0
