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
