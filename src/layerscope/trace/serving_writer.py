"""A serving run (:class:`~layerscope.serving.ServingRun`) as a Chrome JSON trace that Perfetto loads.

Layout: one process per engine (pid ``sim_pid(engine)``, named ``engine r (role)``), with
* a ``steps`` thread: one slice per engine step (iteration), its args the batch's composition (prompt tokens
  computed, decoding sequences, sequences in the step, KV blocks held, requests waiting);
* ``requests k`` threads: each request's phases on one lane of the engine that finished it (lanes are packed so
  that a lane's requests never overlap): ``queued`` (arrival to the first step that ran its tokens), ``prefill``
  (to its first token) and ``decode`` (to its last token), args its lengths, TTFT, TPOT, preemptions;
* counters ``engine kv blocks``, ``engine queue length``, ``engine batch sequences``, ``engine running`` (one
  Chrome counter event ``engine`` a step, a track per argument as Perfetto imports them), at each step's start;
  where the hardware has energy figures, ``engine power W``: the engine's devices' average power over each step
  (``serving.energy``), falling to their idle power at a step's end when no step follows at once.
Flows (``first token``): from each request's ``prefill`` slice to the step that produced its first token.

Times are the run's seconds from the first arrival, written in microseconds with ns precision. A
``.json.gz`` path is gzip-compressed. Written atomically (:func:`layerscope.units.atomic_write`).
"""

from __future__ import annotations

import gzip
import heapq
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from layerscope.errors import TraceError
from layerscope.trace.writers import TID_BASE, sim_pid
from layerscope.units import atomic_write

if TYPE_CHECKING:
    from layerscope.serving import ServingRun

__all__ = ["request_lanes", "serving_events", "write_serving_trace"]

#: Thread of the engine steps; request lanes follow it.
STEPS_TRACK = 0


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _dur(start_s: float, end_s: float) -> float:
    """A slice's duration from its rounded endpoints, so that back-to-back slices never overlap once rounded."""
    return round(_us(end_s) - _us(start_s), 3)


def request_lanes(start_s: np.ndarray, end_s: np.ndarray) -> np.ndarray:
    """A lane per interval such that intervals on one lane never overlap (greedy interval partitioning: the
    fewest lanes, the largest number of intervals alive at once)."""
    order = np.argsort(start_s, kind="stable")
    lanes = np.zeros(len(start_s), dtype=np.int64)
    free: list[tuple[float, int]] = []  # (end, lane)
    count = 0
    for i in order.tolist():
        if free and free[0][0] <= start_s[i]:
            _, lane = heapq.heappop(free)
        else:
            lane, count = count, count + 1
        lanes[i] = lane
        heapq.heappush(free, (float(end_s[i]), lane))
    return lanes


def _tid(engine: int, track: int) -> int:
    return sim_pid(engine) * 1000 + TID_BASE + track


def serving_events(run: ServingRun) -> list[dict[str, Any]]:
    """The trace's events (module docstring), in a deterministic order."""
    events: list[dict[str, Any]] = []
    engines = len(run.roles)
    for e, role in enumerate(run.roles):
        pid = sim_pid(e)
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"engine {e} ({role})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": e}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": _tid(e, STEPS_TRACK),
                       "args": {"name": "steps"}})
    # Engine steps.
    order = np.lexsort((run.start_s, run.iteration_replica))
    for i in order.tolist():
        e = int(run.iteration_replica[i])
        events.append({
            "ph": "X", "name": "step", "cat": "step", "pid": sim_pid(e), "tid": _tid(e, STEPS_TRACK),
            "ts": _us(float(run.start_s[i])), "dur": _dur(float(run.start_s[i]), float(run.end_s[i])),
            "args": {"prefill_tokens": int(run.prefill_tokens[i]), "decode_seqs": int(run.decode_seqs[i]),
                     "batch_seqs": int(run.batch_seqs[i]), "kv_blocks": int(run.kv_blocks_used[i]),
                     "queue_len": int(run.queue_len[i]), "running": int(run.running[i])}})
    for i in order.tolist():  # one counter event a step, a track per series ("engine kv blocks", …)
        e = int(run.iteration_replica[i])
        events.append({"ph": "C", "name": "engine", "pid": sim_pid(e), "ts": _us(float(run.start_s[i])),
                       "args": {"kv blocks": int(run.kv_blocks_used[i]), "queue length": int(run.queue_len[i]),
                                "batch sequences": int(run.batch_seqs[i]), "running": int(run.running[i])}})
    if run.energy is not None:
        energy = run.energy
        ordered = order.tolist()
        first_step = len(events) - 2 * len(ordered)  # the step slices, then their counters, were just written
        for n, i in enumerate(ordered):
            e = int(run.iteration_replica[i])
            events[first_step + n]["args"]["energy_j"] = round(float(energy.step_j[i]), 6)
            events.append({"ph": "C", "name": "engine power", "pid": sim_pid(e), "ts": _us(float(run.start_s[i])),
                           "args": {"W": round(float(energy.step_power_w[i]), 3)}})
            nxt = ordered[n + 1] if n + 1 < len(ordered) else None
            if nxt is None or int(run.iteration_replica[nxt]) != e or run.start_s[nxt] > run.end_s[i]:
                events.append({"ph": "C", "name": "engine power", "pid": sim_pid(e), "ts": _us(float(run.end_s[i])),
                               "args": {"W": round(energy.idle_power_w, 3)}})
    # The step that produced each request's first token: the step of its engine ending at that time.
    ends = {e: np.sort(run.end_s[run.iteration_replica == e]) for e in range(engines)}
    # Request phases on lanes per engine.
    done = ~np.isnan(run.finish_s)
    ttft = run.first_token_s - run.arrival_s
    from layerscope.serving import tpot_s

    tpot = tpot_s(run)
    flow = 0
    for e in range(engines):
        mine = np.flatnonzero(done & (run.replica == e))
        if not len(mine):
            continue
        lanes = request_lanes(run.arrival_s[mine], run.finish_s[mine])
        for lane in range(int(lanes.max()) + 1):
            events.append({"ph": "M", "name": "thread_name", "pid": sim_pid(e), "tid": _tid(e, 1 + lane),
                           "args": {"name": f"requests {lane}"}})
        for k, r in enumerate(mine.tolist()):
            tid = _tid(e, 1 + int(lanes[k]))
            arrive, first = float(run.arrival_s[r]), float(run.first_token_s[r])
            began = arrive + float(run.queued_s[r]) if math.isfinite(float(run.queued_s[r])) else arrive
            finish = float(run.finish_s[r])
            args = {"request": int(run.id[r]), "prompt_len": int(run.prompt_len[r]),
                    "output_len": int(run.output_len[r]), "ttft_ms": round(float(ttft[r]) * 1e3, 3),
                    "tpot_ms": None if math.isnan(float(tpot[r])) else round(float(tpot[r]) * 1e3, 3),
                    "preemptions": int(run.preemptions[r])}
            for name, a, b in (("queued", arrive, began), ("prefill", began, first), ("decode", first, finish)):
                if b > a:
                    events.append({"ph": "X", "name": name, "cat": "request", "pid": sim_pid(e), "tid": tid,
                                   "ts": _us(a), "dur": _dur(a, b), "args": args})
            # flow: the prefill slice to the step that ended at the first token (that step ran on this engine
            # unless a disaggregated prefill engine made it; then no flow)
            engine_ends = ends[e]
            j = int(np.searchsorted(engine_ends, first - 1e-12))
            if first > began and j < len(engine_ends) and abs(float(engine_ends[j]) - first) < 1e-9:
                flow += 1
                events.append({"ph": "s", "name": "first token", "cat": "flow", "id": flow, "pid": sim_pid(e),
                               "tid": tid, "ts": _us(first - min(1e-6, (first - began) / 2))})
                events.append({"ph": "f", "bp": "e", "name": "first token", "cat": "flow", "id": flow,
                               "pid": sim_pid(e), "tid": _tid(e, STEPS_TRACK),
                               "ts": _us(first - min(1e-6, (first - began) / 2))})
    return events


def write_serving_trace(run: ServingRun, path: str | os.PathLike[str], *,
                        inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """Write ``run`` as Chrome JSON (``.json`` or ``.json.gz``); returns the path."""
    out = Path(path)
    name = out.name.lower()
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        raise TraceError(f"{out}: a serving trace is .json or .json.gz (Chrome JSON, which Perfetto loads)")
    data = json.dumps({"traceEvents": serving_events(run), "displayTimeUnit": "ns",
                       "metadata": {"layerscope": "serving", "engines": len(run.roles)}},
                      separators=(",", ":")).encode()
    with atomic_write(out, "wb", inputs=inputs) as fh:
        if name.endswith(".gz"):
            with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=1, mtime=0) as gz:
                gz.write(data)
        else:
            fh.write(data)
    return out
