from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from layerscope.analysis.engine import TraceDB

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test of this folder caches traces in a fresh directory, never in ~/.cache."""
    path = tmp_path_factory.mktemp("trace-cache")
    old = os.environ.get("LAYERSCOPE_CACHE_DIR")
    os.environ["LAYERSCOPE_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("LAYERSCOPE_CACHE_DIR", None)
    else:
        os.environ["LAYERSCOPE_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def control_db(_cache_dir: Path) -> Iterator[TraceDB]:
    with TraceDB(DATA / "gpu-training-control.json.gz") as db:
        yield db


@pytest.fixture(scope="session")
def test_db(_cache_dir: Path) -> Iterator[TraceDB]:
    with TraceDB(DATA / "gpu-training-test.json.gz") as db:
        yield db


def write_trace(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    """A Chrome JSON trace (gzip when the name ends in .gz)."""
    text = json.dumps({"traceEvents": events, **top}).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


def annotated_events(scale: float = 1.0, steps: int = 2) -> list[dict[str, Any]]:
    """A captured-style trace: two profiler steps, each with module annotations of 2 layers."""
    events: list[dict[str, Any]] = []
    t = 0.0
    for step in range(steps):
        start = t
        for layer in range(2):
            lstart = t
            for module, dur in (("self_attn.q_proj", 10.0), ("self_attn.attn", 30.0), ("mlp.up_proj", 20.0)):
                events.append({"ph": "X", "cat": "user_annotation", "name": f"model.layers.{layer}.{module}",
                               "pid": 1, "tid": 1, "ts": t + 1, "dur": dur * scale})
                t += dur * scale + 2
            events.append({"ph": "X", "cat": "user_annotation", "name": f"model.layers.{layer}",
                           "pid": 1, "tid": 1, "ts": lstart, "dur": t - lstart + 1})
            t += 5
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": start - 0.5, "dur": t - start + 2})
        t += 10
    return events


#: A CUDA capture as Kineto writes one (µs): module ranges nest on the CPU thread (pid 1, tid 1), each
#: launch (``cuda_runtime``, with its ``correlation``) makes one piece of GPU work on stream 7, linked by
#: an ``ac2g`` flow; Kineto's ``gpu_user_annotation`` ranges cover each range's *innermost* kernels only.
#: (module, phase) → the span of the GPU work launched inside its CPU range, by hand.
CUDA_SPANS_US = {
    ("prefill", "layers.0.mlp.up_proj"): 40 - 30, ("prefill", "layers.0.mlp.down_proj"): 52 - 40,
    ("prefill", "layers.0.mlp"): 55 - 30, ("prefill", "layers.0"): 77 - 30, ("prefill", "lm_head"): 95 - 85,
    ("decode_step_0", "lm_head"): 230 - 215,
}


def cuda_capture_events() -> list[dict[str, Any]]:
    def cpu(name: str, ts: float, dur: float) -> dict[str, Any]:
        return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    def gpu_annotation(name: str, ts: float, dur: float) -> dict[str, Any]:
        return {"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur}

    events = [cpu("prefill", 0, 100), cpu("layers.0", 10, 70), cpu("layers.0.mlp", 20, 40),
              cpu("layers.0.mlp.up_proj", 22, 8), cpu("layers.0.mlp.down_proj", 32, 8), cpu("lm_head", 82, 8),
              cpu("rotary_emb", 91, 2), cpu("decode_step_0", 200, 60), cpu("lm_head", 210, 10)]
    # (correlation, launch ts, GPU work category, start, end)
    launches = [(1, 1, "kernel", 5, 6), (2, 23, "kernel", 30, 40), (3, 33, "kernel", 40, 52),
                (4, 45, "kernel", 52, 55), (5, 70, "kernel", 75, 77), (6, 83, "kernel", 85, 95),
                (7, 211, "gpu_memcpy", 215, 216), (8, 212, "kernel", 216, 230)]
    for corr, ts, cat, start, end in launches:
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 0.5,
             "args": {"correlation": corr}},
            {"ph": "X", "cat": cat, "name": f"work_{corr}", "pid": 0, "tid": 7, "ts": start, "dur": end - start,
             "args": {"correlation": corr, "stream": 7}},
            {"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": ts, "cat": "ac2g", "name": "ac2g"},
            {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": start, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        ]
    # What Kineto draws on the GPU: the innermost range of each launch (what must not be read as module time).
    events += [gpu_annotation("prefill", 5, 1), gpu_annotation("layers.0.mlp.up_proj", 30, 10),
               gpu_annotation("layers.0.mlp.down_proj", 40, 12), gpu_annotation("layers.0.mlp", 52, 3),
               gpu_annotation("layers.0", 75, 2), gpu_annotation("lm_head", 85, 10),
               gpu_annotation("lm_head", 215, 15)]
    return events
