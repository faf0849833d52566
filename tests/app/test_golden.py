"""The golden traces in tests/data/golden (``make golden``, layerscope/app/golden.py).

Three checks, so that a bug in the simulation or the writers fails here even after someone runs
``make golden`` and commits what it wrote:

* the files are what ``make golden`` produces today, byte for byte (drift);
* they hold :data:`GOLDEN_SLICES` and :data:`GOLDEN_COUNTS`, numbers written down from the real
  Perfetto trace processor (``python tests/oracle.py FILE SQL``) when the files were reviewed,
  checked with our SQL engine and, where Chromium is installed, with the live trace processor;
* those spans are also computed here by hand from the ops' bytes and the schedule's rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from layerscope.analysis.engine import TraceDB
from layerscope.app.golden import GOLDEN_NAMES, write_golden

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"

#: (name, ts ns, dur ns, thread) of every slice, ordered by ts then thread, as trace_processor
#: read both golden files (2026-11-26).
GOLDEN_SLICES = [
    ("layers.0.input_layernorm", 0, 4000, "engine 0"),
    ("layers.0.self_attn.q_proj", 4000, 4005, "engine 0"),
    ("layers.0.self_attn.k_proj", 4000, 4003, "engine 1"),
    ("layers.0.self_attn.v_proj", 8003, 4002, "engine 1"),
    ("layers.0.self_attn.rope", 8005, 4000, "engine 0"),
    ("layers.0.self_attn.kv_write", 12005, 4000, "engine 0"),
    ("layers.0.self_attn.kv_read", 16005, 4006, "engine 0"),
    ("layers.0.self_attn.qk_matmul", 20011, 4002, "engine 0"),
    ("layers.0.self_attn.softmax_max", 24013, 4000, "engine 0"),
    ("layers.0.self_attn.softmax_exp", 28013, 4000, "engine 0"),
    ("layers.0.self_attn.softmax_norm", 32013, 4001, "engine 0"),
    ("layers.0.self_attn.pv_matmul", 36014, 4001, "engine 0"),
    ("layers.0.self_attn.o_proj", 40015, 4003, "engine 0"),
    ("layers.0.residual_attn", 44018, 4000, "engine 0"),
    ("layers.0.post_attention_layernorm", 48018, 4001, "engine 0"),
    ("layers.0.mlp.gate_proj", 52019, 4012, "engine 0"),
    ("layers.0.mlp.up_proj", 52019, 4012, "engine 1"),
    ("layers.0.mlp.act_mul", 56031, 4000, "engine 0"),
    ("layers.0.mlp.down_proj", 60031, 4006, "engine 0"),
    ("layers.0.residual_mlp", 64037, 4000, "engine 0"),
]

#: Totals trace_processor reported for both golden files (2026-11-26; the power counter 2026-11-27, its integral
#: checked by hand in tests/trace/test_power_counter.py).
GOLDEN_COUNTS = {
    "slices": 20, "dur_sum": 80054, "end_ns": 68037, "flows": 26, "slice_args": 436,
    "engines busy": (6, 7), "memory bandwidth GB/s": (28, 27939), "power W": (19, 1312.125),
    "process": "tiny-llama:decode@64:layer0 on h100-sxm · 2 engines (list)",
}

_SLICES_SQL = ("SELECT s.name, s.ts, s.dur, t.name AS thread FROM slice s JOIN thread_track tt ON s.track_id = tt.id "
               "JOIN thread t USING (utid) ORDER BY s.ts, t.tid")
_COUNTS_SQL = ("SELECT COUNT(*) AS slices, SUM(dur) AS dur_sum, MAX(ts + dur) AS end_ns, "
               "(SELECT COUNT(*) FROM flow) AS flows, "
               "(SELECT COUNT(*) FROM args a JOIN slice s USING (arg_set_id)) AS slice_args, "
               "(SELECT name FROM process WHERE pid = 1) AS process FROM slice")
_COUNTERS_SQL = ("SELECT t.name, COUNT(*) AS n, SUM(c.value) AS total FROM counter c "
                 "JOIN counter_track t ON c.track_id = t.id GROUP BY t.name ORDER BY t.name")


def hand_spans() -> list[tuple[str, int, int, str]]:
    """The golden schedule worked by hand (times in float ns, rounded once at the end).

    Every op pays the launch overhead, then streams its bytes; all of them are memory-bound (a
    few kFLOP against 1e15 FLOP/s), so an op alone streams at the chip's bandwidth and ops
    streaming at once split it equally. Two engines, ``list``: a free engine takes the ready op
    of longest remaining chain, ties to the lower engine."""
    bw = 3.35e12 * 0.834 / 1e9  # bytes/ns: h100-sxm HBM 3.35 TB/s x memory efficiency 0.834
    overhead = 4000.0  # h100-sxm launch_overhead_s, ns
    spans: list[tuple[str, float, float, int]] = []

    def alone(name: str, start: float, nbytes: float) -> float:
        end = start + overhead + nbytes / bw
        spans.append((name, start, end, 0))
        return end

    ln = alone("input_layernorm", 0.0, 384)  # x[64] in and out, weight[64], bf16
    # q (8448 B: weight 64x64 + x + q, bf16) on engine 0 and k (4288 B: 64x32 weight) on engine 1
    # start together, stream together at bw/2 until k is done, then q alone.
    k_end = ln + overhead + 4288 / (bw / 2)
    q_end = k_end + (8448 - 4288) / bw
    # v (4288 B) takes engine 1 when k ends, rope (448 B) engine 0 when q ends: v streams alone
    # from k_end + overhead to q_end + overhead (moving (q_end - k_end) * bw bytes), then both at bw/2.
    v_left = 4288 - (q_end - k_end) * bw
    v_end = q_end + overhead + v_left / (bw / 2)
    rope_end = v_end + (448 - v_left) / bw
    spans += [("q_proj", ln, q_end, 0), ("k_proj", ln, k_end, 1), ("v_proj", k_end, v_end, 1),
              ("rope", q_end, rope_end, 0)]
    t = rope_end
    for name, nbytes in (("kv_write", 256), ("kv_read", 16640), ("qk_matmul", 4808), ("softmax_max", 528),
                         ("softmax_exp", 1056), ("softmax_norm", 1048), ("pv_matmul", 4808), ("o_proj", 8448),
                         ("residual_attn", 384), ("post_attention_layernorm", 384)):
        t = alone(name, t, nbytes)
    # gate and up (16768 B each: weight 64x128 bf16 + x + out) side by side, each at bw/2
    gate_end = t + overhead + 16768 / (bw / 2)
    spans += [("gate_proj", t, gate_end, 0), ("up_proj", t, gate_end, 1)]
    t = gate_end
    for name, nbytes in (("act_mul", 768), ("down_proj", 16768), ("residual_mlp", 384)):
        t = alone(name, t, nbytes)
    attn = {"q_proj", "k_proj", "v_proj", "rope", "kv_write", "kv_read", "qk_matmul", "softmax_max", "softmax_exp",
            "softmax_norm", "pv_matmul", "o_proj"}
    rows = [(f"layers.0.{'self_attn.' if name in attn else 'mlp.' if name.endswith(('proj', 'mul')) else ''}{name}",
             round(start), round(end) - round(start), f"engine {engine}") for name, start, end, engine in spans]
    return sorted(rows, key=lambda r: (r[1], r[3]))


def test_hand_computed_spans_are_the_written_down_ones() -> None:
    assert hand_spans() == GOLDEN_SLICES


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_trace_has_not_drifted(tmp_path: Path, name: str) -> None:
    write_golden(tmp_path)
    expected = (GOLDEN / name).read_bytes()
    assert (tmp_path / name).read_bytes() == expected, (
        f"{name} drifted from tests/data/golden; if the change is intended run `make golden` and review the diff"
    )


def _check_numbers(records: Any) -> None:
    assert [tuple(r.values()) for r in records(_SLICES_SQL)] == GOLDEN_SLICES
    counts = records(_COUNTS_SQL)[0]
    counters = {r["name"]: (r["n"], round(r["total"], 6)) for r in records(_COUNTERS_SQL)}
    assert {**counts, **counters} == GOLDEN_COUNTS


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_file_holds_the_written_down_numbers(name: str) -> None:
    with TraceDB(GOLDEN / name, use_cache=False) as db:
        _check_numbers(db.records)


def test_golden_files_in_the_real_trace_processor(perfetto_oracle: Any) -> None:
    for name in GOLDEN_NAMES:
        trace = perfetto_oracle.load(GOLDEN / name)
        assert trace.errors() == [], name
        _check_numbers(trace.query)
        with TraceDB(GOLDEN / name, use_cache=False) as db:
            assert trace.disagreements(db.records) == [], name
