"""Chrome Trace Event JSON for a schedule, as Perfetto's JSON importer reads it.

Layout: one process (the simulated chip, ``pid`` :func:`~layerscope.trace.writers.sim_pid` of the
metadata's device index: 1 for device 0; ``process_sort_index`` the device index) whose threads are the engines
(``tid = k + TID_BASE``, named ``engine k`` and sorted by ``thread_sort_index``); one complete
(``X``) slice per op with ``cat`` = op kind and the op's facts in ``args``; a flow per dependency
edge (``s`` at the producer, ``f`` with ``bp: "e"`` at the consumer, each at the midpoint of its
slice so the binding to the enclosing slice is unambiguous); and counter (``C``) tracks:
memory bandwidth in use (GB/s), engines busy, and where the metadata has op energies the chip's power (W:
:func:`~layerscope.trace.writers.power_counter`). ``ts``/``dur`` are microseconds written with
three decimals, i.e. exact nanoseconds. The output is deterministic and streamed in chunks.
"""

from __future__ import annotations

import functools
import gzip as gzip_mod
import json
import re
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from layerscope.trace.writers import (
    BANDWIDTH_COUNTER,
    BANDWIDTH_UNIT,
    FLOW_CATEGORY,
    POWER_COUNTER,
    POWER_UNIT,
    TID_BASE,
    TraceMetadata,
    power_counter,
    sim_pid,
    slice_order,
)

if TYPE_CHECKING:
    from layerscope.schedule.core import Schedule

__all__ = ["process_title", "write_chrome_json"]

_CHUNK = 20_000
#: zlib level of ``.json.gz``: 1 compresses a trace ~4x faster than 6 for a ~20% larger file.
_GZIP_LEVEL = 1
# UTF-8 as is: trace_processor's JSON parser keeps \uXXXX escapes literally in strings.
_dumps = functools.partial(json.dumps, ensure_ascii=False)


def _us(ns: int) -> str:
    """Integer ns as a JSON number of microseconds, exact: 1234 -> 1.234."""
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}" if r else str(q)


_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _quoted(names: Sequence[str]) -> list[str]:
    """JSON string literals of ``names`` (fast path when none needs escaping)."""
    if not _NEEDS_ESCAPE.search("".join(names)):
        return ['"' + s + '"' for s in names]
    return [_dumps(s) for s in names]


def _us_all(ns: np.ndarray) -> list[str]:
    """Integer ns as JSON numbers of µs with 3 decimals (exact below 2**53 ns / 1000)."""
    return [f"{v:.3f}" for v in (np.asarray(ns, dtype=np.int64) / 1000).tolist()]


def process_title(schedule: Schedule, meta: TraceMetadata) -> str:
    return f"{meta.process_name} · {schedule.engines.count} engines ({schedule.policy})"


def _arg_value(v: Any) -> str:
    if isinstance(v, float):
        return repr(round(v, 9)) if v == v and v not in (float("inf"), float("-inf")) else "null"
    return _dumps(v)


def write_chrome_json(schedule: Schedule, meta: TraceMetadata, handle: IO[bytes], *, gzip: bool = False) -> None:
    """Stream the trace to a binary handle (gzip with mtime 0 when ``gzip``)."""
    if gzip:
        with gzip_mod.GzipFile(filename="", mode="wb", fileobj=handle, mtime=0, compresslevel=_GZIP_LEVEL) as gz:
            _write(schedule, meta, gz)
    else:
        _write(schedule, meta, handle)


def _write(schedule: Schedule, meta: TraceMetadata, out: IO[bytes] | gzip_mod.GzipFile) -> None:
    buf: list[str] = []
    flush_every = _CHUNK

    def flush() -> None:
        out.write("".join(buf).encode("utf-8"))
        buf.clear()

    pid = sim_pid(meta.device)
    buf.append('{"displayTimeUnit":"ns","otherData":{"generator":"layerscope"},"traceEvents":[\n')
    head = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": process_title(schedule, meta)}},
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": meta.device}},
    ]
    for k, ename in enumerate(schedule.engines.names):
        tid = k + TID_BASE
        head.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": ename}})
        head.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": k}})
    buf.append(",\n".join(_dumps(e, separators=(",", ":")) for e in head))

    # Static args of each template, encoded once: '"key":value,...' (without braces).
    tmpl = [",".join(f"{_dumps(k)}:{_arg_value(v)}" for k, v in t.items() if k != "kind")
            for t in meta.templates]
    cats = [_dumps(str(t["kind"])) for t in meta.templates]
    template = meta.template.tolist()
    names = meta.names
    qnames = _quoted(names)
    p = schedule.problem
    indptr = p.indptr.tolist()
    indices = p.indices.tolist()
    order = slice_order(schedule).tolist()
    # Per-op strings, built in bulk: ts/dur/midpoint in µs (3 decimals = exact ns), tid, args tail.
    ts_s = _us_all(schedule.start_ns)
    dur_s = _us_all(schedule.end_ns - schedule.start_ns)
    mid_s = _us_all((schedule.start_ns + schedule.end_ns) // 2)
    tid_s = [str(e + TID_BASE) for e in range(schedule.engines.count)]
    engine = schedule.engine.tolist()
    layer_s: dict[int, str] = {-1: ""}
    if meta.layer is not None:
        for v in np.unique(meta.layer).tolist():
            if v >= 0:
                layer_s[v] = f'"layer":{v}'
    layer = meta.layer.tolist() if meta.layer is not None else [-1] * len(names)
    # '"module":"…"' per op whose module is not its own name (one string per distinct module).
    distinct = sorted(set(meta.module) - {""}) if meta.module is not None else []
    module_s = {m: f'"module":{q}' for m, q in zip(distinct, _quoted(distinct), strict=True)}
    module_s[""] = ""
    module = meta.module if meta.module is not None else [""] * len(names)
    targs = tmpl
    prefix = f',\n{{"ph":"X","pid":{pid},"tid":'
    s_head = f',\n{{"ph":"s","pid":{pid},"name":"dependency","cat":"{FLOW_CATEGORY}","id":'
    f_head = f',\n{{"ph":"f","bp":"e","pid":{pid},"name":"dependency","cat":"{FLOW_CATEGORY}","id":'
    append = buf.append
    for i in order:
        t = template[i]
        e = engine[i]
        a, b = indptr[i], indptr[i + 1]
        deps = indices[a:b]
        extra = [x for x in (targs[t], layer_s[layer[i]], module_s[module[i]]) if x]
        if deps:
            extra.append('"dependencies":[' + ",".join([qnames[j] for j in deps]) + "]")
        append(
            f'{prefix}{tid_s[e]},"ts":{ts_s[i]},"dur":{dur_s[i]},"name":{qnames[i]},"cat":{cats[t]},'
            f'"args":{{{",".join(extra)}}}}}'
        )
        # Flows into op i: one per dependency edge, id = edge position + 1.
        for k, j in enumerate(deps, a + 1):
            append(f'{s_head}{k},"tid":{tid_s[engine[j]]},"ts":{mid_s[j]}}}'
                   f'{f_head}{k},"tid":{tid_s[e]},"ts":{mid_s[i]}}}')
        if len(buf) >= flush_every:
            flush()

    bw_t = schedule.bandwidth_time_ns.tolist()
    bw_v = (schedule.bandwidth_bytes_per_s / 1e9).tolist()
    for t, v in zip(bw_t, bw_v, strict=True):
        buf.append(f',\n{{"ph":"C","pid":{pid},"tid":0,"ts":{_us(t)},"name":"{BANDWIDTH_COUNTER}",'
                   f'"args":{{"{BANDWIDTH_UNIT}":{round(v, 6)!r}}}}}')
        if len(buf) >= flush_every:
            flush()
    busy_t, busy_v = schedule.engines_busy()
    for t, v in zip(busy_t.tolist(), busy_v.tolist(), strict=True):
        buf.append(f',\n{{"ph":"C","pid":{pid},"tid":0,"ts":{_us(t)},"name":"engines",'
                   f'"args":{{"busy":{v}}}}}')
        if len(buf) >= flush_every:
            flush()
    power = power_counter(meta, schedule.start_ns, schedule.end_ns)
    if power is not None:
        for t, v in zip(power[0].tolist(), power[1].tolist(), strict=True):
            buf.append(f',\n{{"ph":"C","pid":{pid},"tid":0,"ts":{_us(t)},"name":"{POWER_COUNTER}",'
                       f'"args":{{"{POWER_UNIT}":{round(v, 6)!r}}}}}')
            if len(buf) >= flush_every:
                flush()
    buf.append("\n]}\n")
    flush()


