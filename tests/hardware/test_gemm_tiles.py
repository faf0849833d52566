"""Tile and wave quantization of GPU GEMMs (layerscope.hardware.gemm_tiles)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from layerscope.hardware.gemm_tiles import tile_plan


def _q(m: int, n: int, engines: int, groups: int = 1) -> float:
    return float(tile_plan(np.array([m]), np.array([n]), np.array([groups]), engines)[0][0])


def _deepgemm_choice(m: int, n: int, groups: int, engines: int) -> tuple[int, int]:
    """DeepGEMM's ``get_best_configs`` block choice at commit 55ab91f, as its loop reads (a reference written
    independently of the vectorized key): (BM, BN)."""
    block_m = 64 if m <= 64 else 128
    best_n = None

    def waves(bn: int) -> int:
        return math.ceil(math.ceil(m / block_m) * math.ceil(n / bn) * groups / engines)

    def last_wave(bn: int) -> int:
        left = (math.ceil(m / block_m) * math.ceil(n / bn) * groups) % engines
        return engines if left == 0 else left

    for bn in (*range(16, 129, 8), 144, 160):
        if best_n is None or waves(bn) < waves(best_n) or (
                waves(bn) == waves(best_n) and last_wave(bn) > last_wave(best_n)):
            best_n = bn
    assert best_n is not None
    return block_m, best_n


def test_deepgemms_narrow_n_shape_by_hand():
    # M = 4096, N = 2112 on 132 SMs (gpu-kernels.md GX-07): 32 row tiles x 15 column tiles of 144 = 480 tiles,
    # 4 waves (the fewest any BN reaches), so 4096·2112 / (4·132·128·144) = 0.8889
    assert _q(4096, 2112, 132) == pytest.approx(4096 * 2112 / (4 * 132 * 128 * 144))
    assert _q(4096, 2112, 132) == pytest.approx(8 / 9)
    # M = 64: 132 column tiles of 16 fill the 132 SMs exactly
    assert _q(64, 2112, 132) == 1.0
    # 4096 x 4096: BN = 160 gives 32 x 26 = 832 tiles in 7 waves (BN = 128 needs 8): 4096² / (7·132·128·160)
    assert _q(4096, 4096, 132) == pytest.approx(4096**2 / (7 * 132 * 128 * 160))


def test_skinny_and_grouped_gemms_by_hand():
    # a GEMV's N = 2048 outputs: 128 column tiles of 16 (BN = 15.5 would fill 132), one wave: 2048 / (132·16)
    assert _q(1, 2048, 132) == pytest.approx(2048 / (132 * 16))
    # 8 experts x (16 rows, 1024 columns): 8·16 = 128 tiles of 64 columns, one wave; each tile holds its 16 rows
    assert _q(16, 1024, 132, groups=8) == pytest.approx(16 * 1024 * 8 / (132 * 16 * 64))
    assert _q(0, 4096, 132) == 1.0 and _q(4096, 0, 132) == 1.0


def test_the_vectorized_choice_is_deepgemms_loop():
    ms = np.array([1, 7, 64, 65, 128, 200, 1000, 4096, 16384])
    ns = np.array([16, 100, 1024, 2112, 4096, 7168, 24576])
    for engines in (4, 108, 132, 148):
        for groups in (1, 3):
            m, n = np.meshgrid(ms, ns, indexing="ij")
            got = tile_plan(m, n, np.full(m.shape, groups), engines)[0]
            for (i, j), q in np.ndenumerate(got):
                mm, nn = int(ms[i]), int(ns[j])
                bm, bn = _deepgemm_choice(mm, nn, groups, engines)
                tiles = math.ceil(mm / bm) * math.ceil(nn / bn) * groups
                want = mm * nn * groups / (math.ceil(tiles / engines) * engines * min(mm, bm) * bn)
                assert q == pytest.approx(want), (mm, nn, groups, engines)
                assert 0 < q <= 1.0
