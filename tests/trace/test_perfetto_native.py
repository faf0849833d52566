"""The C packet loop of the Perfetto writer (layerscope/trace/_perfetto_packets.c) against the Python loop it
mirrors (perfetto_writer._write_events_python).

Both must write the same file, byte for byte: the golden case (power counter, module and layer annotations),
a whole-model simulate (every dependency a flow and an interned name), zero-duration slices, op names long
enough to take the Python loop's computed-varint branch (``_VarintTable``), an op with over a thousand
dependencies, and metadata without layers or modules. The C entry point refuses bad arguments with an
exception instead of reading out of bounds.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest

from layerscope.schedule import ScheduleProblem, schedule
from layerscope.schedule.core import Schedule
from layerscope.trace import perfetto_writer
from layerscope.trace.writers import TraceMetadata

native = perfetto_writer._perfetto_packets
needs_native = pytest.mark.skipif(native is None, reason="the C packet loop is not built (no C compiler)")


def _both(sched: Schedule, meta: TraceMetadata, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    """The trace written by the C loop and by the Python loop."""
    out = []
    for flag in ("1", "0"):
        with monkeypatch.context() as m:
            m.setenv("LAYERSCOPE_TRACE_NATIVE", flag)
            assert (perfetto_writer._native_writer() is not None) == (flag == "1")
            buf = io.BytesIO()
            perfetto_writer.write_perfetto_protobuf(sched, meta, buf)
            out.append(buf.getvalue())
    return out[0], out[1]


def test_the_loop_is_built_where_a_compiler_is() -> None:
    if shutil.which("cc") or shutil.which("gcc"):
        assert native is not None, "setup.py should have built layerscope.trace._perfetto_packets"


def test_off_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERSCOPE_TRACE_NATIVE", "0")
    assert perfetto_writer._native_writer() is None


@needs_native
def test_golden_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from layerscope.app.golden import GOLDEN_NAMES, write_golden

    name = next(n for n in GOLDEN_NAMES if n.endswith(".pftrace"))
    committed = (Path(__file__).parents[1] / "data" / "golden" / name).read_bytes()
    for flag in ("1", "0"):
        with monkeypatch.context() as m:
            m.setenv("LAYERSCOPE_TRACE_NATIVE", flag)
            out = tmp_path / flag
            out.mkdir()
            (path,) = [p for p in write_golden(out) if p.name == name]
            assert path.read_bytes() == committed, f"LAYERSCOPE_TRACE_NATIVE={flag}"


@needs_native
def test_whole_model_with_flows_and_power(monkeypatch: pytest.MonkeyPatch) -> None:
    from layerscope.app.simulate import SimulateRequest, run_simulation, with_power

    run = run_simulation(SimulateRequest(model="llama-3.2-1b", engines=3, all_layers=True))
    meta = with_power(TraceMetadata.from_timed(run.timed), run.timed)
    assert meta.op_dynamic_j is not None and meta.module is not None and meta.layer is not None
    assert run.schedule.problem.num_edges > run.schedule.problem.n  # flows and interned dependency names
    c, py = _both(run.schedule, meta, monkeypatch)
    assert c == py
    assert b"power W" in c  # the power counter track rides along


def _chain(durations_s: list[float], deps: list[list[int]]) -> ScheduleProblem:
    indptr = np.cumsum([0] + [len(d) for d in deps])
    indices = np.asarray([j for d in deps for j in d], dtype=np.int64)
    n = len(durations_s)
    return ScheduleProblem(indptr, indices, np.asarray(durations_s), np.zeros(n), np.zeros(n), 1e12)


@needs_native
def test_zero_duration_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    # ops 1, 2 and 4 take no time: each begin is followed by its end at the same instant
    problem = _chain([1e-6, 0.0, 0.0, 2e-6, 0.0], [[], [0], [0], [1, 2], [3]])
    sched = schedule(problem, 2)
    assert int((sched.end_ns == sched.start_ns).sum()) == 3
    meta = TraceMetadata.minimal([f"op{i}" for i in range(5)], ["matmul", "view", "view", "matmul", "view"])
    c, py = _both(sched, meta, monkeypatch)
    assert c == py


@needs_native
def test_long_names_take_the_computed_varint_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    # names of 2048+ characters (one non-ASCII, 2 UTF-8 bytes each) turn the Python loop's `fast` off
    names = ["é" * 3000, "b" * 70_000, "c", "d" * 2048]
    problem = _chain([1e-6, 2e-6, 1e-6, 0.0], [[], [0], [0, 1], [2]])
    meta = TraceMetadata.minimal(names, ["a", "b", "a", "c"], extra={"a": {"note": "x" * 20_000}})
    c, py = _both(schedule(problem, 2), meta, monkeypatch)
    assert c == py
    assert b"b" * 70_000 in c and "é".encode() * 3000 in c


@needs_native
def test_an_op_with_over_a_thousand_dependencies(monkeypatch: pytest.MonkeyPatch) -> None:
    fan_in = 1500
    problem = _chain([1e-7] * fan_in + [1e-6], [[] for _ in range(fan_in)] + [list(range(fan_in))])
    meta = TraceMetadata.minimal([f"load{i}" for i in range(fan_in)] + ["sum"], ["load"] * fan_in + ["sum"])
    c, py = _both(schedule(problem, 4), meta, monkeypatch)
    assert c == py


@needs_native
def test_layers_without_modules(timed, sched, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    meta = TraceMetadata.from_timed(timed)
    assert meta.layer is not None and (meta.layer < 0).any(), "ops outside a layer: an empty layer piece"
    for variant in (meta, dataclasses.replace(meta, module=None), dataclasses.replace(meta, layer=None)):
        c, py = _both(sched, variant, monkeypatch)
        assert c == py


@needs_native
def test_written_in_bounded_chunks() -> None:
    # an 80,000-op chain: ~11 MB of packets, handed to `write` in chunks of about 4 MiB, not at once
    chunks: list[int] = []

    class Sink:
        def write(self, b: bytes) -> int:
            chunks.append(len(b))
            return len(b)

    big = _chain([1e-6] * 80_000, [[]] + [[i] for i in range(79_999)])
    meta = TraceMetadata.minimal([f"a.rather.long.module.path.op{i}" for i in range(80_000)], ["k"] * 80_000)
    perfetto_writer.write_perfetto_protobuf(schedule(big, 2), meta, Sink())  # type: ignore[arg-type]
    assert sum(chunks) > 2 * (1 << 22)
    assert len(chunks) >= 3 and max(chunks) < (1 << 22) + (1 << 16)


@needs_native
def test_bad_arguments_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, object] = {}

    def capture(*args: object) -> None:
        calls["args"] = args

    # the arguments of a real call, captured, then spoiled one at a time
    problem = _chain([1e-6, 1e-6], [[], [0]])
    meta = TraceMetadata.minimal(["a", "b"], ["k", "k"])
    monkeypatch.setattr(perfetto_writer, "_perfetto_packets", type("Stub", (), {"write_events": capture}))
    perfetto_writer.write_perfetto_protobuf(schedule(problem, 1), meta, io.BytesIO())
    args = list(calls["args"])  # type: ignore[call-overload]
    assert native is not None
    sink = io.BytesIO()
    native.write_events(sink.write, *args[1:])
    assert sink.getvalue()

    def spoiled(k: int, value: object) -> list[object]:
        a = list(args)
        a[0] = io.BytesIO().write
        a[k] = value
        return a

    with pytest.raises(TypeError):
        native.write_events(*spoiled(4, bytearray(args[4])))  # counter events not bytes
    with pytest.raises(TypeError):
        native.write_events(*spoiled(9, [1, 2]))  # names not str
    with pytest.raises(ValueError):
        native.write_events(*spoiled(8, np.array([0, 9], dtype=np.int64)))  # engine out of range
    with pytest.raises(ValueError):
        native.write_events(*spoiled(1, np.array([0, 99], dtype=np.int64)))  # event code out of range
    with pytest.raises(ValueError):
        native.write_events(*spoiled(8, np.array([0], dtype=np.int64)))  # too short
    past = np.array(args[5], dtype=np.int64)
    past[1] = 10**6
    with pytest.raises(ValueError, match="counter_off"):
        native.write_events(*spoiled(5, past))  # a counter event past the end of the blob
    with pytest.raises(TypeError):
        native.write_events(*spoiled(0, None))

    def failing(b: bytes) -> int:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        native.write_events(failing, *args[1:])
