"""Attention rows of the kernel table: their shapes, and the prefill and decode curves fitted on them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from layerscope.hardware import attention_fit as af
from layerscope.hardware.kernel_table import KernelRow, read_kernel_table
from layerscope.hardware.presets import load_preset


@pytest.fixture(scope="module")
def rows() -> dict[str, KernelRow]:
    return {r.id: r for r in read_kernel_table()}


def test_shapes_are_read_from_the_descriptions_and_continue_down_same_rows(rows) -> None:
    k18 = rows["K-18"].attention
    assert (k18.heads, k18.kv_heads, k18.head_dim, k18.decode) == (16, 2, 128, True)
    assert rows["K-21"].attention == k18  # "same"
    k12 = rows["K-12"].attention  # (B,H,S,D)=(1,16,16384,128)
    assert (k12.heads, k12.kv_heads, k12.head_dim, k12.decode, k12.causal) == (16, 16, 128, False, None)
    assert rows["K-03"].attention.causal is False  # the source names the non-causal panel
    assert rows["K-04"].attention.causal is False  # "same panel"
    assert rows["K-08"].attention.causal is True
    ax08 = rows["AX-08"].attention  # "same, h_q=64, s_q=1" over AX-07's MLA decode
    assert (ax08.heads, ax08.kv_heads, ax08.head_dim, ax08.value_dim, ax08.latent) == (64, 1, 576, 512, True)
    ax12 = rows["AX-12"].attention  # "Llama-3-70B shapes (64 q / 8 kv, hdim 128)"
    assert (ax12.heads, ax12.kv_heads, ax12.head_dim) == (64, 8, 128)
    assert rows["G-15"].attention is None


def test_decode_bytes_and_times_by_hand(rows) -> None:
    # K-18: 1 sequence x 65536 tokens x 2 KV heads x 128 x (K and V) x 2 B, plus 16 heads' query and output
    assert af.decode_bytes(rows["K-18"]) == 65536 * 2 * 128 * 2 * 2 + 16 * (128 + 128) * 2
    # AX-07, MLA: one 576-wide latent per token serves as K and V
    assert af.decode_bytes(rows["AX-07"]) == 128 * (4096 * 576 * 2 + 16 * (576 + 512) * 2)
    assert af.row_time_s(rows["K-18"]) == pytest.approx(64.4e-6)
    assert af.row_time_s(rows["AX-09"]) == pytest.approx(27.6e-6)  # GB/s row, time quoted in its notes
    assert af.row_time_s(rows["AX-07"]) == pytest.approx(0.215e-3)
    assert af.row_time_s(rows["AX-01"]) is None


def test_kernels_no_engine_runs_stay_out(rows) -> None:
    decode = {r.row.id for r in af.decode_rows(rows.values())}
    assert {"K-18", "K-21", "AX-12", "AX-15"} <= decode
    assert decode.isdisjoint({"K-19", "K-20", "K-30", "K-31"})  # no split-KV, PyTorch eager, L-tagged
    prefill = {r.row.id for r in af.prefill_rows(rows.values(), lambda g, dt: 989e12 if dt == "bf16" else 1979e12)}
    assert {"K-08", "K-09", "K-12", "K-14"} <= prefill
    # unfused PyTorch, Triton's tutorial kernel, FlashAttention-2 at a point FlashAttention-3 reaches 1.75x, L
    assert prefill.isdisjoint({"K-07", "K-15", "K-05", "K-32"})


def _prefill(template: KernelRow, m: float, d: float, fraction: float, causal: bool = True) -> af.PrefillRow:
    return af.PrefillRow(replace(template, id=f"X-{m:g}-{d:g}"), "bf16", m, fraction, causal, d)


def test_prefill_fit_recovers_the_curve_it_was_made_from(rows) -> None:
    e, half_m, half_d = 0.66, 631.0, 52.0
    truth = af.PrefillFit(e, half_m, half_d, ())
    made = [_prefill(rows["K-08"], m, d, float(truth.fraction(m, d)))
            for m in (256, 512, 2048, 16384) for d in (64, 128)]
    fit = af.fit_prefill(made)
    assert fit is not None
    for r in made:
        assert float(fit.fraction(r.m, r.head_dim)) == pytest.approx(r.fraction, rel=0.03)
    # the head-dim factor is 1 at a 128-wide head and d/(d+d½)·(128+d½)/128 elsewhere
    assert float(af.head_dim_factor(128, 52.0)) == pytest.approx(1.0)
    assert float(af.head_dim_factor(64, 52.0)) == pytest.approx(64 / 116 * 180 / 128)


def test_decode_fit_recovers_floor_and_bandwidth(rows) -> None:
    bw, t0, e, floor = 3.35e12, 2e-6, 0.8, 10e-6
    made = [af.DecodeRow(replace(rows["K-18"], id=f"X-{b:g}"), b, t0 + floor + b / (bw * e)) for b in (1e7, 1e8, 1e9)]
    fit = af.fit_decode(made, bw, t0)
    assert fit is not None
    assert fit.efficiency == pytest.approx(e, abs=0.02) and fit.floor_s == pytest.approx(floor, abs=1.1e-6)
    assert af.fit_decode(made[:1], bw, t0) is None  # one size cannot split floor from bandwidth


def test_decode_fit_beside_the_streaming_efficiency_pins_the_floor_alone(rows) -> None:
    # made at e = 0.8 and a 10 µs floor: given e, even one row gives the floor, and e is returned as given
    bw, t0, e, floor = 3.35e12, 2e-6, 0.8, 10e-6
    made = [af.DecodeRow(replace(rows["K-18"], id=f"X-{b:g}"), b, t0 + floor + b / (bw * e)) for b in (1e7, 1e8, 1e9)]
    for subset in (made, made[:1], made[2:]):
        fit = af.fit_decode(subset, bw, t0, efficiency=e)
        assert fit is not None and fit.efficiency == e and fit.floor_s == pytest.approx(floor, abs=0.6e-6)
    # a slower kernel (same bytes, 1.5x the time on the long cache) cannot lower e: the floor takes what it can
    slow = [af.DecodeRow(r.row, r.bytes, t0 + floor + r.bytes / (bw * e / 1.5)) for r in made]
    fit = af.fit_decode(slow, bw, t0, efficiency=e)
    assert fit is not None and fit.efficiency == e and fit.floor_s > floor
    assert af.fit_decode([], bw, t0, efficiency=e) is None


def test_shipped_presets_carry_the_attention_fit_and_cite_its_rows() -> None:
    h100 = load_preset("h100-sxm").efficiency
    assert "K-08" in h100.attention_rows_source and "K-09" in h100.attention_rows_source
    assert "AX-12" in h100.attention_decode_source
    assert 0 < (h100.attention_decode_memory or 0) <= 1 and h100.attention_decode_floor_s > 0
    assert h100.attention_half_head_dim > 0
    table = np.array(h100.attention_rows[next(iter(h100.attention_rows))])
    assert np.all(np.diff(table[:, 1]) > 0) and table[-1, 1] <= 1.0  # rises with M, capped at the GEMM rate
    h200 = load_preset("h200").efficiency
    assert "h100-sxm's fit" in h200.attention_decode_source and "h100-sxm's fit" in h200.attention_rows_source
    b200 = load_preset("b200").efficiency
    assert "AX-15" in b200.attention_decode_source and "h100-sxm" not in b200.attention_decode_source


@pytest.mark.parametrize("name", ["a100-sxm", "h100-sxm", "h200", "b200", "mi300x"])
def test_decode_attention_streams_at_the_presets_own_streaming_efficiency(name: str) -> None:
    # the floor may come from a nearest GPU's rows; the long-cache rate is this GPU's own memory fit
    eff = load_preset(name).efficiency
    assert eff.attention_decode_memory == eff.memory and eff.attention_decode_floor_s > 0
    assert "e = efficiency.memory" in eff.attention_decode_source


def test_one_fixed_cost_per_thread_block_gives_both_half_lengths_by_hand() -> None:
    # c = 2 key tiles per block: a non-causal block of n = M/128 tiles is busy n/(n + 2) of its time, M½ = 256;
    # a causal one does j + 1 tiles (its diagonal whole) for n²/2 useful, n/(n + 1 + 4): M½ = 640
    assert float(af.tile_half_m(2.0, causal=False)) == 256.0
    assert float(af.tile_half_m(2.0, causal=True)) == 640.0
    # brute force over the blocks of a 1024-token causal prefill (n = 8): useful tiles over busy tiles
    n, c = 8, 2.0
    busy = sum(j + 1 + c for j in range(n))
    assert (n * n / 2) / busy == pytest.approx(1024 / (1024 + float(af.tile_half_m(c, causal=True))))


def test_causal_and_noncausal_curves_share_the_block_cost_they_were_made_from(rows) -> None:
    truth_c, truth_nc = af.PrefillFit(0.64, 640.0, 0.0, ()), af.PrefillFit(0.70, 256.0, 0.0, ())
    causal = [_prefill(rows["K-08"], m, 128, float(truth_c.fraction(m))) for m in (512, 16384)]
    noncausal = [_prefill(rows["K-14"], m, 128, float(truth_nc.fraction(m)), causal=False)
                 for m in (2048, 16384)]
    fit_c, fit_nc = af.fit_prefill_pair(causal, noncausal)
    assert (fit_c.efficiency, fit_nc.efficiency) == pytest.approx((0.64, 0.70), abs=0.011)
    assert fit_nc.half_m == pytest.approx(256.0, rel=0.06) and fit_c.half_m == pytest.approx(640.0, rel=0.06)
    # the non-causal curve was pinned only at 2048 and 16384 tokens: its 512-token value comes from the causal rows
    assert float(fit_nc.fraction(512)) == pytest.approx(float(truth_nc.fraction(512)), rel=0.03)
