"""analysis.validate: error metrics and the join rule hand-checked on small tables, the captured-trace
reader on a synthetic trace, repeats combined by median on hand-made phases (the end-to-end validations:
tests/app/test_validate.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from layerscope.analysis.compare import abs_error_stats
from layerscope.analysis.validate import (
    FORWARD,
    ForwardError,
    OpRow,
    PhaseValidation,
    PredictedOp,
    Unmatched,
    ValidationResult,
    captured_times,
    combine_phases,
    combine_repeats,
    join_phase,
)
from layerscope.errors import AnalysisError

from .conftest import write_trace


def test_abs_error_stats_by_hand() -> None:
    # |errors| sorted: 0.1 0.2 0.3 0.4 0.5; NaN (nothing measured) is left out.
    median, p90 = abs_error_stats([0.1, -0.2, 0.3, float("nan"), -0.4, 0.5])
    assert median == pytest.approx(0.3)
    # Linear interpolation between closest ranks: h = (5 - 1) * 0.9 = 3.6 -> x3 + 0.6 (x4 - x3).
    assert p90 == pytest.approx(0.4 + 0.6 * 0.1)
    # Even count: the median is the mean of the middle two.
    assert abs_error_stats([-1.0, 0.5, 0.25, 2.0])[0] == pytest.approx((0.5 + 1.0) / 2)
    assert abs_error_stats([]) == (None, None)
    assert abs_error_stats([float("nan")]) == (None, None)


# Inclusive captured times (s) of one phase; the forward (phase range) is 12 s.
MEASURED = {
    "embed_tokens": 1.0,
    "rotary_emb": 0.25,
    "layers.0": 10.0,
    "layers.0.self_attn": 6.0,
    "layers.0.self_attn.q_proj": 2.0,
    "layers.0.mlp": 3.0,
    "layers.0.mlp.act_fn": 0.5,
}
PREDICTED = [
    PredictedOp("embed_tokens", "embed_tokens", "embedding", 1.5),
    PredictedOp("layers.0.self_attn.q_proj", "layers.0.self_attn.q_proj", "gemm", 1.0),
    PredictedOp("layers.0.self_attn.rope", "layers.0.self_attn", "rope", 0.5),
    PredictedOp("layers.0.self_attn.attn", "layers.0.self_attn", "attention", 1.5),
    PredictedOp("layers.0.residual_attn", "layers.0", "residual_add", 0.2),
    PredictedOp("layers.0.mlp.act_mul", "layers.0.mlp", "activation", 2.0),
    PredictedOp("lm_head", "lm_head", "gemm", 0.4),  # no captured lm_head
]


def test_join_rule_by_hand() -> None:
    p = join_phase("prefill", PREDICTED, MEASURED, 12.0)
    rows = {r.name: r for r in p.rows}
    # Leaf modules 1:1 on inclusive time.
    assert (rows["embed_tokens"].rule, rows["embed_tokens"].error) == ("module", pytest.approx(0.5))
    assert rows["layers.0.self_attn.q_proj"].error == pytest.approx(-0.5)
    # self_attn's exclusive time (6 - q_proj 2) against rope + attn.
    sa = rows["layers.0.self_attn"]
    assert (sa.rule, sa.kind, sa.measured_s, sa.predicted_s) == ("self", "attention+rope", 4.0, 2.0)
    assert sa.predicted_ops == ("layers.0.self_attn.rope", "layers.0.self_attn.attn")
    # The decoder layer's exclusive time (10 - 6 - 3) against the residual add.
    assert (rows["layers.0"].measured_s, rows["layers.0"].predicted_s) == (pytest.approx(1.0), 0.2)
    # act_fn has nothing predicted: folded into mlp, whose whole time is compared with act_mul.
    mlp = rows["layers.0.mlp"]
    assert (mlp.rule, mlp.measured_s, mlp.folded) == ("module", 3.0, ("layers.0.mlp.act_fn",))
    # lm_head was not captured: compared within the forward's own time (12 - 1 - 10; rotary_emb folded in).
    fwd = rows[FORWARD]
    assert (fwd.rule, fwd.measured_s, fwd.predicted_ops) == ("self", pytest.approx(1.0), ("lm_head",))
    assert [(u.name, u.counted_in) for u in p.only_predicted] == [("lm_head", FORWARD)]
    assert {(u.name, u.counted_in) for u in p.only_measured} == {("layers.0.mlp.act_fn", "layers.0.mlp"),
                                                                  ("rotary_emb", FORWARD)}
    # |errors|: 0.5 0.5 0.5 0.8 1/3 0.6 -> sorted 1/3 .5 .5 .5 .6 .8; p90 at rank 4.5.
    assert p.median_abs_error == pytest.approx(0.5)
    assert p.p90_abs_error == pytest.approx(0.6 + 0.5 * (0.8 - 0.6))
    assert p.forward.predicted_s == pytest.approx(7.1) and p.forward.error == pytest.approx(7.1 / 12 - 1)
    gemm = {k.kind: k for k in p.by_kind()}["gemm"]
    # q_proj, and the (forward) row whose only op is lm_head.
    assert (gemm.rows, gemm.predicted_s, gemm.measured_s) == (2, pytest.approx(1.4), pytest.approx(3.0))
    assert p.worst(1)[0].name == "layers.0.self_attn"  # |2 - 4| is the largest gap
    assert p.ops.column("op").to_pylist() == [r.name for r in p.rows]
    assert p.to_dict()["ops_joined"] == 6


def test_instrumentation_is_subtracted_per_child_call_by_hand() -> None:
    # One call of every module, 0.1 s of hooks per call, charged to the parent that made the call.
    calls = dict.fromkeys(MEASURED, 1.0)
    calls["layers.0.self_attn.q_proj"] = 2.0  # two calls inside self_attn
    p = join_phase("prefill", PREDICTED, MEASURED, 12.0, calls=calls, call_overhead_s=0.1)
    rows = {r.name: r.measured_s for r in p.rows}
    assert rows["layers.0.self_attn.q_proj"] == pytest.approx(2.0)  # a leaf keeps its inclusive time
    assert rows["layers.0.self_attn"] == pytest.approx(6.0 - 2.0 - 0.2)
    assert rows["layers.0"] == pytest.approx(10.0 - 6.0 - 3.0 - 0.2)
    assert rows["layers.0.mlp"] == pytest.approx(3.0 - 0.1)  # folded act_fn's call too
    assert rows[FORWARD] == pytest.approx(12.0 - 1.0 - 10.0 - 0.3)  # embed, rotary_emb, layers.0
    assert p.instrumentation_s == pytest.approx(0.8) and p.call_overhead_s == 0.1
    sa = next(r for r in p.rows if r.name == "layers.0.self_attn")
    assert sa.instrumentation_s == pytest.approx(0.2) and sa.raw_error == pytest.approx(2.0 / 4.0 - 1)
    assert p.forward.measured_s == pytest.approx(11.2)
    unmodelled = sum(u.time_s for u in p.only_measured if u.counted_in is None)
    assert sum(rows.values()) + unmodelled == pytest.approx(p.forward.measured_s)
    # No overhead: the raw join.
    raw = join_phase("prefill", PREDICTED, MEASURED, 12.0, calls=calls)
    plain = join_phase("prefill", PREDICTED, MEASURED, 12.0)
    assert [r.measured_s for r in raw.rows] == [r.measured_s for r in plain.rows]
    with pytest.raises(AnalysisError, match="call_overhead_s"):
        join_phase("prefill", PREDICTED, MEASURED, 12.0, calls=calls, call_overhead_s=-1.0)


# cpu_op events inside each module's ranges (every nesting depth); 300 inside the phase range.
EVENTS = {
    "embed_tokens": 10.0,
    "rotary_emb": 20.0,
    "layers.0": 200.0,
    "layers.0.self_attn": 120.0,
    "layers.0.self_attn.q_proj": 10.0,
    "layers.0.mlp": 30.0,
    "layers.0.mlp.act_fn": 1.0,
}


def test_profiler_time_is_subtracted_per_event_by_hand() -> None:
    # 1 ms of profiler bookkeeping per recorded event, no hooks.
    p = join_phase("prefill", PREDICTED, MEASURED, 12.0, events=EVENTS, forward_events=300.0,
                   event_overhead_s=1e-3)
    rows = {r.name: r for r in p.rows}
    # A module row loses every event in its range.
    assert rows["embed_tokens"].measured_s == pytest.approx(1.0 - 0.010)
    assert rows["layers.0.self_attn.q_proj"].measured_s == pytest.approx(2.0 - 0.010)
    # mlp keeps its folded act_fn, whose event is already among mlp's 30.
    assert rows["layers.0.mlp"].measured_s == pytest.approx(3.0 - 0.030)
    # A self row loses the events outside its kept children: 120 - 10 in self_attn, 200 - 120 - 30 in layers.0.
    sa = rows["layers.0.self_attn"]
    assert (sa.measured_s, sa.profiler_s) == (pytest.approx(4.0 - 0.110), pytest.approx(0.110))
    assert rows["layers.0"].measured_s == pytest.approx(1.0 - 0.050)
    # The forward's own time: 300 - 10 (embed) - 200 (layers.0) events, rotary_emb's 20 among them (folded).
    assert rows[FORWARD].measured_s == pytest.approx(1.0 - 0.090)
    # The raw error keeps the profiler time: self_attn predicted 2 against 4 s.
    assert sa.raw_error == pytest.approx(2.0 / 4.0 - 1) and sa.error == pytest.approx(2.0 / 3.89 - 1)
    assert p.raw_median_abs_error == join_phase("prefill", PREDICTED, MEASURED, 12.0).median_abs_error
    # The forward loses all 300 events; rows and unmodelled time still add up to it.
    assert (p.profiler_s, p.event_overhead_s) == (pytest.approx(0.3), 1e-3)
    assert p.forward.measured_s == pytest.approx(11.7)
    unmodelled = sum(u.time_s for u in p.only_measured if u.counted_in is None)
    assert sum(r.measured_s for r in p.rows) + unmodelled == pytest.approx(p.forward.measured_s)
    assert p.to_dict()["ops"][0]["profiler_s"] == pytest.approx(0.010)
    with pytest.raises(AnalysisError, match="event_overhead_s"):
        join_phase("prefill", PREDICTED, MEASURED, 12.0, events=EVENTS, event_overhead_s=-1e-3)


def test_hooks_and_profiler_are_subtracted_together_by_hand() -> None:
    calls = dict.fromkeys(MEASURED, 1.0)
    p = join_phase("prefill", PREDICTED, MEASURED, 12.0, calls=calls, call_overhead_s=0.1, events=EVENTS,
                   forward_events=300.0, event_overhead_s=1e-3)
    sa = next(r for r in p.rows if r.name == "layers.0.self_attn")
    # 6 - 2 (q_proj) - 0.1 (q_proj's hooks) - 0.110 (110 events)
    assert sa.measured_s == pytest.approx(3.79)
    assert (sa.instrumentation_s, sa.profiler_s) == (pytest.approx(0.1), pytest.approx(0.11))
    assert sa.raw_error == pytest.approx(-0.5)
    # 12 - 7 module calls x 0.1 - 300 events x 1 ms
    assert p.forward.measured_s == pytest.approx(12.0 - 0.7 - 0.3)


def test_one_sided_time_is_listed_and_accounted() -> None:
    predicted = [op for op in PREDICTED if op.name not in ("layers.0.residual_attn", "lm_head")]
    p = join_phase("prefill", predicted, MEASURED, 12.0)
    names = {r.name for r in p.rows}
    assert "layers.0" not in names and FORWARD not in names
    unmodelled = {u.name: u.time_s for u in p.only_measured if u.counted_in is None}
    assert unmodelled == {"layers.0": pytest.approx(1.0), FORWARD: pytest.approx(1.0)}
    # Rows plus the time counted nowhere else add up to the whole forward on each side.
    assert sum(r.measured_s for r in p.rows) + sum(unmodelled.values()) == pytest.approx(12.0)
    assert sum(r.predicted_s for r in p.rows) == pytest.approx(p.forward.predicted_s)
    # A phase with nothing captured: every op is compared within the forward.
    empty = join_phase("decode", PREDICTED, {}, 3.0)
    assert [r.name for r in empty.rows] == [FORWARD] and len(empty.only_predicted) == len(PREDICTED)
    # Nothing measured at all: no row, the ops are listed.
    none = join_phase("decode", PREDICTED[:1], {}, 0.0)
    assert none.rows == () and none.only_predicted[-1].counted_in is None
    assert none.median_abs_error is None


def _x(name: str, ts: float, dur: float) -> dict[str, object]:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def test_captured_times_per_phase_and_iteration(tmp_path: Path) -> None:
    events = []
    for it, t0 in enumerate((0.0, 1000.0)):
        events += [_x(f"ProfilerStep#{it}", t0, 900), _x("prefill", t0 + 1, 500), _x("layers.0", t0 + 2, 300),
                   _x("layers.0.mlp", t0 + 3, 100 + it * 20), _x("decode_step_0", t0 + 600, 200),
                   _x("layers.0", t0 + 601, 150)]
    path = write_trace(tmp_path / "cap.json", events)
    got = captured_times(path)
    assert got.iterations == 2
    assert got.ranges == pytest.approx({"prefill": 500e-6, "decode_step_0": 200e-6})
    assert got.modules["prefill"] == pytest.approx({"layers.0": 300e-6, "layers.0.mlp": 110e-6})
    assert got.modules["decode_step_0"] == pytest.approx({"layers.0": 150e-6})
    assert got.calls["prefill"] == {"layers.0": 1.0, "layers.0.mlp": 1.0}
    assert got.call_overhead_s == 0.0  # no sibling ranges: nothing to measure the hooks by


def test_call_overhead_is_the_smallest_median_sibling_gap(tmp_path: Path) -> None:
    events = []
    for it, t0 in enumerate((0.0, 1000.0)):
        # siblings under layers.0: norm -> attn (gap 12 + it us), attn -> mlp (gap 40 us)
        events += [_x(f"ProfilerStep#{it}", t0, 900), _x("prefill", t0 + 1, 500), _x("layers.0", t0 + 2, 400),
                   _x("layers.0.norm", t0 + 3, 50), _x("layers.0.attn", t0 + 65 + it, 100),
                   _x("layers.0.mlp", t0 + 205 + it, 100)]
    got = captured_times(write_trace(tmp_path / "cap.json", events))
    assert got.call_overhead_s == pytest.approx(12.5e-6)
    assert got.calls["prefill"] == {"layers.0": 1.0, "layers.0.norm": 1.0, "layers.0.attn": 1.0, "layers.0.mlp": 1.0}
    assert got.instrumentation_s("prefill") == pytest.approx(4 * 12.5e-6)
    with pytest.raises(AnalysisError, match="prefill"):
        captured_times(write_trace(tmp_path / "none.json", [_x("layers.0", 0, 1)]))


def _op(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, object]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def test_captured_times_count_the_aten_events_in_each_range(tmp_path: Path) -> None:
    events = []
    for it, t0 in enumerate((0.0, 1000.0)):
        events += [_x(f"ProfilerStep#{it}", t0, 900), _x("prefill", t0 + 1, 500), _x("layers.0", t0 + 2, 300),
                   _x("layers.0.mlp", t0 + 3, 100),
                   # in mlp: linear with a nested mm (two events); in layers.0 after mlp: an add
                   _op("aten::linear", t0 + 4, 50), _op("aten::mm", t0 + 5, 40), _op("aten::add", t0 + 150, 10),
                   # in prefill outside any module; on another thread inside mlp's time (not counted)
                   _op("aten::arange", t0 + 400, 5), _op("aten::copy_", t0 + 10, 5, tid=2),
                   _x("decode_step_0", t0 + 600, 200), _op("aten::argmax", t0 + 610, 5)]
        if it == 1:  # a second add in the second iteration: 1.5 per iteration
            events.append(_op("aten::add", t0 + 200, 10))
    got = captured_times(write_trace(tmp_path / "cap.json", events))
    assert got.events["prefill"] == pytest.approx({"layers.0": 3.5, "layers.0.mlp": 2.0})
    assert got.range_events == pytest.approx({"prefill": 4.5, "decode_step_0": 1.0})
    assert got.events["decode_step_0"] == {}


def _repeat(q_s: float, sa_s: float, steps_s: tuple[float, float], act_fn_s: float,
            rotary_s: float | None = None, *, swap_rows: bool = False, overhead_s: float = 1e-5) -> PhaseValidation:
    """One capture's decode join, made by hand: two rows, two steps, one-sided entries."""
    rows = (OpRow("layers.0.self_attn.q_proj", "gemm", "module", 1.0, q_s, ("layers.0.self_attn.q_proj",),
                  instrumentation_s=0.0, profiler_s=10 * overhead_s),
            OpRow("layers.0.self_attn", "attention+rope", "self", 2.0, sa_s, ("rope", "attn"),
                  instrumentation_s=1e4 * overhead_s, profiler_s=20 * overhead_s))
    only_measured = [Unmatched("layers.0.mlp.act_fn", act_fn_s, "nothing predicted; folded into layers.0.mlp",
                               "layers.0.mlp")]
    if rotary_s is not None:
        only_measured.append(Unmatched("rotary_emb", rotary_s, "nothing predicted; folded into (forward)", FORWARD))
    return PhaseValidation(
        phase="decode", rows=rows[::-1] if swap_rows else rows,
        only_predicted=(Unmatched("lm_head", 0.4, "no captured module; compared within (forward)", FORWARD),),
        only_measured=tuple(only_measured),
        forward=ForwardError("decode", 3.0, sum(steps_s)),
        steps=(ForwardError("decode_step_0", 1.0, steps_s[0]), ForwardError("decode_step_1", 2.0, steps_s[1])),
        call_overhead_s=overhead_s, instrumentation_s=1e5 * overhead_s, event_overhead_s=overhead_s / 10,
        profiler_s=1e4 * overhead_s,
    )


# Three captures of one decode phase; forwards 10, 13 and 11 s.
REPEATS = [
    _repeat(2.0, 4.0, (4.0, 6.0), 0.5, overhead_s=1e-5),
    _repeat(3.0, 3.0, (6.0, 7.0), 0.3, rotary_s=0.2, swap_rows=True, overhead_s=3e-5),
    _repeat(2.5, 5.0, (5.0, 6.0), 0.4, rotary_s=0.4, overhead_s=2e-5),
]


def test_combine_phases_takes_medians_by_hand() -> None:
    p = combine_phases(REPEATS)
    # Rows in the first repeat's order, matched by name (the second repeat lists them swapped).
    rows = {r.name: r for r in p.rows}
    assert [r.name for r in p.rows] == ["layers.0.self_attn.q_proj", "layers.0.self_attn"]
    q, sa = rows["layers.0.self_attn.q_proj"], rows["layers.0.self_attn"]
    # q_proj measured 2, 3, 2.5 -> 2.5; self_attn 4, 3, 5 -> 4. Errors from the medians.
    assert (q.measured_s, q.predicted_s, q.error) == (2.5, 1.0, pytest.approx(1.0 / 2.5 - 1))
    assert (sa.measured_s, sa.predicted_s, sa.error) == (4.0, 2.0, pytest.approx(-0.5))
    assert (sa.rule, sa.kind, sa.predicted_ops) == ("self", "attention+rope", ("rope", "attn"))
    # Hooks 0.1, 0.3, 0.2 -> 0.2 and profiler 200, 600, 400 us -> 400 us, each its own median.
    assert sa.instrumentation_s == pytest.approx(0.2) and sa.profiler_s == pytest.approx(4e-4)
    assert sa.raw_error == pytest.approx(2.0 / (4.0 + 0.2 + 4e-4) - 1)
    assert p.median_abs_error == pytest.approx((0.6 + 0.5) / 2)
    # Forward 10, 13, 11 -> 11; steps 4, 6, 5 -> 5 and 6, 7, 6 -> 6.
    assert (p.forward.measured_s, p.forward.predicted_s) == (11.0, 3.0)
    assert p.forward.error == pytest.approx(3.0 / 11.0 - 1)
    assert [(s.name, s.measured_s, s.predicted_s) for s in p.steps] == [("decode_step_0", 5.0, 1.0),
                                                                         ("decode_step_1", 6.0, 2.0)]
    # act_fn 0.5, 0.3, 0.4 -> 0.4; rotary_emb only in repeats 2 and 3: 0.2, 0.4 -> 0.3.
    assert [(u.name, u.time_s, u.counted_in) for u in p.only_measured] == [
        ("layers.0.mlp.act_fn", pytest.approx(0.4), "layers.0.mlp"), ("rotary_emb", pytest.approx(0.3), FORWARD)]
    assert [(u.name, u.time_s) for u in p.only_predicted] == [("lm_head", 0.4)]
    # Per-call and per-event costs and the phase's subtracted totals: medians too (the 2e-5 repeat's).
    assert (p.call_overhead_s, p.event_overhead_s) == (pytest.approx(2e-5), pytest.approx(2e-6))
    assert (p.instrumentation_s, p.profiler_s) == (pytest.approx(2.0), pytest.approx(0.2))
    # Every capture's forward, in order, and their spread: (13 - 10) / 11.
    assert (p.repeats, p.forward_measured_all_s) == (3, (10.0, 13.0, 11.0))
    assert p.forward_spread == pytest.approx(3.0 / 11.0)
    doc = p.to_dict()
    assert (doc["repeats"], doc["forward_measured_all_s"]) == (3, [10.0, 13.0, 11.0])
    assert doc["forward_spread"] == pytest.approx(3.0 / 11.0)
    # Two repeats: the median is their mean.
    assert combine_phases(REPEATS[:2]).forward.measured_s == pytest.approx(11.5)


def test_one_capture_has_one_forward_and_no_spread() -> None:
    p = join_phase("prefill", PREDICTED, MEASURED, 12.0)
    assert (p.repeats, p.forward_measured_all_s, p.forward_spread) == (1, (12.0,), None)
    assert combine_phases([p]) is p
    assert PhaseValidation("prefill", (), (), (), ForwardError("prefill", 1.0, 2.0)).forward_spread is None


def test_combine_phases_rejects_phases_that_do_not_match() -> None:
    missing = dataclasses.replace(REPEATS[2], rows=REPEATS[2].rows[:1])
    with pytest.raises(AnalysisError, match=r"rows of repeat 3 differ.*layers\.0\.self_attn \(in one"):
        combine_phases([REPEATS[0], REPEATS[1], missing])
    with pytest.raises(AnalysisError, match="steps of repeat 2"):
        combine_phases([REPEATS[0], dataclasses.replace(REPEATS[1], steps=REPEATS[1].steps[:1])])
    with pytest.raises(AnalysisError, match="'prefill' differs from 'decode'"):
        combine_phases([REPEATS[0], dataclasses.replace(REPEATS[1], phase="prefill")])
    other = dataclasses.replace(REPEATS[1], forward=ForwardError("decode", 3.5, 13.0))
    with pytest.raises(AnalysisError, match="predicted time of decode forward differs"):
        combine_phases([REPEATS[0], other])
    with pytest.raises(AnalysisError, match="median of medians"):
        combine_phases([combine_phases(REPEATS), REPEATS[0]])
    with pytest.raises(AnalysisError, match="no phases"):
        combine_phases([])


def _result(phase: PhaseValidation, repeat: int, **workload: Any) -> ValidationResult:
    """A validation around one hand-made phase, with stand-ins for what combining only carries along."""
    fields: dict[str, Any] = {"model": "tiny", "hardware": SimpleNamespace(name="server-cpu"),
                              "cost_model": "roofline", "device": "cpu", "dtype": "fp32", "layers": 1, "batch": 1,
                              "prompt_len": 8, "decode_steps": 2, **workload}
    trace = Path(f"captured-{repeat}.json.gz")
    return ValidationResult(**fields, hardware_path=None, threads=2, estimate=SimpleNamespace(),
                            capture=SimpleNamespace(trace_path=trace), phases=(phase,),
                            traces={"simulated_prefill": Path("simulated-prefill.json.gz"), "captured": trace})


def test_combine_repeats_keeps_the_first_and_lists_every_capture() -> None:
    from layerscope.capture.probe import MachineProbe

    # Separate validations (the accuracy bench's rounds) each number their capture 1: renumbered in order.
    results = [dataclasses.replace(_result(p, i), probes=(MachineProbe("before", (), 1), MachineProbe("after", (), 1)))
               for i, p in enumerate(REPEATS, start=1)]
    r = combine_repeats(results)
    assert [p.label for p in r.probes] == [f"{w} capture {i}" for i in (1, 2, 3) for w in ("before", "after")]
    assert r.phase("decode").forward.measured_s == 11.0 and r.phase("decode").repeats == 3
    assert r.capture is results[0].capture and r.estimate is results[0].estimate
    assert r.traces == {"simulated_prefill": Path("simulated-prefill.json.gz"), "captured": Path("captured-1.json.gz"),
                        **{f"captured_{i}": Path(f"captured-{i}.json.gz") for i in (2, 3)}}
    assert combine_repeats(results[:1]) is results[0]
    with pytest.raises(AnalysisError, match="no validations"):
        combine_repeats([])


@pytest.mark.parametrize(("field", "value"), [
    ("model", "other"), ("hardware", SimpleNamespace(name="laptop-cpu")), ("cost_model", "calibrated"),
    ("device", "cuda"), ("dtype", "bf16"), ("layers", 2), ("batch", 4), ("prompt_len", 16), ("decode_steps", 3),
])
def test_combine_repeats_rejects_other_workloads(field: str, value: Any) -> None:
    with pytest.raises(AnalysisError, match=f"{field} of repeat 2 .* differs from repeat 1's"):
        combine_repeats([_result(REPEATS[0], 1), _result(REPEATS[1], 2, **{field: value})])


def test_combine_repeats_rejects_other_phases() -> None:
    prefill = dataclasses.replace(REPEATS[1], phase="prefill")
    with pytest.raises(AnalysisError, match=r"phases of repeat 2 \(prefill\) differ"):
        combine_repeats([_result(REPEATS[0], 1), _result(prefill, 2)])


def test_unprofiled_join_keeps_the_trace_as_raw_by_hand() -> None:
    from layerscope.analysis.validate import _with_profiled

    # The same phase: the trace measured every module 10% slower than the pass without the profiler.
    traced = {k: 1.1 * v for k, v in MEASURED.items()}
    calls = dict.fromkeys(MEASURED, 1.0)
    clean = join_phase("prefill", PREDICTED, MEASURED, 12.0, calls=calls, call_overhead_s=0.01)
    raw = join_phase("prefill", PREDICTED, traced, 13.2)
    got = _with_profiled(clean, raw)
    assert got.timing == "unprofiled" and got.event_overhead_s == 0
    rows, raw_rows = {r.name: r for r in got.rows}, {r.name: r for r in raw.rows}
    for name, row in rows.items():
        # Measured from the unprofiled pass, hooks subtracted; raw = the trace's own time.
        assert row.measured_s == {r.name: r for r in clean.rows}[name].measured_s
        assert row.measured_s + row.instrumentation_s + row.profiler_s == pytest.approx(raw_rows[name].measured_s)
        assert row.raw_error == pytest.approx(raw_rows[name].error)
    # self_attn: clean 6 - 2 - one child call 0.01 = 3.99; trace 6.6 - 2.2 = 4.4 -> profiler 0.4.
    sa = rows["layers.0.self_attn"]
    assert (sa.measured_s, sa.instrumentation_s, sa.profiler_s) == (pytest.approx(3.99), pytest.approx(0.01),
                                                                    pytest.approx(0.4))
    # The forward: 12 less every call's hooks (7 x 0.01); the trace adds 1.2 on top of the unhooked 12.
    assert got.forward.measured_s == pytest.approx(12.0 - 0.07)
    assert got.profiler_s == pytest.approx(13.2 - 12.0)


def test_combine_refuses_captures_measured_differently() -> None:
    other = dataclasses.replace(REPEATS[1], timing="unprofiled")
    with pytest.raises(AnalysisError, match="measured the same way"):
        combine_phases([REPEATS[0], other])
    assert combine_phases([dataclasses.replace(r, timing="unprofiled") for r in REPEATS]).timing == "unprofiled"


def test_cuda_module_times_are_the_spans_of_the_gpu_work_they_launched(tmp_path: Path) -> None:
    """On CUDA a module's time is the span of the kernels launched inside its CPU range, children included
    (Kineto's gpu_user_annotation ranges cover only each range's innermost kernels: mlp 3 µs, layers.0 2 µs);
    the capture summary reads the same spans from the raw events."""
    from layerscope.capture.annotate import ModuleCalls
    from layerscope.capture.summary import module_records

    from .conftest import CUDA_SPANS_US, cuda_capture_events

    events = cuda_capture_events()
    path = write_trace(tmp_path / "cuda.json", events)
    got = captured_times(path, device="cuda")
    assert got.iterations == 1 and got.call_overhead_s == 0.0
    assert got.ranges == pytest.approx({"prefill": 100e-6, "decode_step_0": 60e-6})
    spans = {(phase, name): t * 1e6 for phase, table in got.modules.items() for name, t in table.items()}
    assert spans == pytest.approx(CUDA_SPANS_US)  # rotary_emb launched nothing: not a GPU row
    assert got.calls["prefill"]["layers.0.mlp"] == 1
    calls = {("prefill", n): ModuleCalls(n, "prefill", 1, [], []) for (p, n) in CUDA_SPANS_US if p == "prefill"}
    calls[("decode", "lm_head")] = ModuleCalls("lm_head", "decode", 1, [], [])
    records = {(r.phase, r.name): r.device_ms for r in module_records({"traceEvents": events}, calls, [])}
    assert records == pytest.approx({("decode" if p != "prefill" else p, n): t / 1e3
                                     for (p, n), t in CUDA_SPANS_US.items()})
