"""The scheduler's event loop in C (``_event_loop.c``); :func:`layerscope.schedule.core._run_native` calls it."""

from typing import Any

def run(
    dispatch: int,
    engine_choice: int,
    share_bandwidth: bool,
    n: int,
    m: int,
    bw_per_ns: float,
    overhead_ns: Any,
    main_ns: Any | None,
    demand: Any | None,
    compute_ns: Any,
    bytes: Any,
    fraction: Any,
    succ_ptr: Any,
    succ_idx: Any,
    indegree: Any,
    priority: Any | None,
    order: Any | None,
    engine_out: Any,
    start_out: Any,
    end_out: Any,
    /,
) -> tuple[int, bytes, bytes]: ...
