"""Write tests/data/traces/ranks/: a 3-rank set derived from the real single-rank trace gpu-sampled-rank0.

    python tests/data/make_rank_traces.py

The HTA test data has one rank of this job (``distributedInfo.rank`` 0 of 128); the other ranks are made from it,
so every kernel name, stream and launch is a real one:

* rank0.json.gz: the trace unchanged.
* rank1.json.gz: ``distributedInfo.rank`` 1, every timestamp 1 ms later (another host's clock), its GPU memory
  copies and memsets dropped (a rank whose inputs were already on the device).
* rank2.json.gz: ``distributedInfo.rank`` 2, every time 5/4 of rank 0's from the trace's first event (a rank
  running 25% slower throughout: the straggler), both ends rounded down to whole microseconds.

Deterministic: the same bytes on every run (gzip mtime 0, keys in the source's order).
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "traces"
SOURCE = HERE / "gpu-sampled-rank0.json.gz"
OUT = HERE / "ranks"


def _write(path: Path, trace: dict[str, Any]) -> None:
    # json.dumps's default separators: HTA finds a rank by the regex `"rank":\s+(\d+)`, as Kineto writes it
    text = json.dumps(trace).encode()
    path.write_bytes(gzip.compress(text, compresslevel=9, mtime=0))


def _ranked(trace: dict[str, Any], rank: int) -> dict[str, Any]:
    out = copy.deepcopy(trace)
    out["distributedInfo"] = {**out.get("distributedInfo", {}), "rank": rank, "world_size": 3}
    return out


def main() -> None:
    trace = json.loads(gzip.decompress(SOURCE.read_bytes()))
    OUT.mkdir(exist_ok=True)
    _write(OUT / "rank0.json.gz", _ranked(trace, 0))

    shifted = _ranked(trace, 1)
    shifted["traceEvents"] = [
        {**e, "ts": e["ts"] + 1000} if "ts" in e else e
        for e in shifted["traceEvents"] if e.get("cat") not in ("gpu_memcpy", "gpu_memset")]
    _write(OUT / "rank1.json.gz", shifted)

    slow = _ranked(trace, 2)
    t0 = min(e["ts"] for e in slow["traceEvents"] if "ts" in e)
    for event in slow["traceEvents"]:
        if "ts" not in event:
            continue
        # both ends mapped by one monotone function: a slice nested in another stays nested
        start = t0 + (event["ts"] - t0) * 5 // 4
        if "dur" in event:
            event["dur"] = t0 + (event["ts"] + event["dur"] - t0) * 5 // 4 - start
        event["ts"] = start
    _write(OUT / "rank2.json.gz", slow)


if __name__ == "__main__":
    main()
