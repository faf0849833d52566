"""Tile and wave quantization of a GPU GEMM: the share of its engines' time spent on useful output.

A tiled GEMM kernel gives each engine (SM) one BM × BN output tile at a time, and every tile costs a full tile's
MMA work over the whole K, so a GEMM of M × N outputs (per group) takes ``waves = ceil(tiles / engines)`` rounds
of tile time, ``tiles = ceil(M / BM) · ceil(N / BN) · groups``. Its efficiency is the useful share of those
rounds, ``M · N · groups / (waves · engines · min(M, BM) · BN)``: the partial tiles at the edges (tile
quantization) and the idle engines of the last round (wave quantization), both named in NVIDIA's *Matrix
Multiplication Background User's Guide*, "Dimension Quantization Effects". A GEMM of M ≤ BM rows counts its M
rows per tile: Hopper's 64-row MMA pads them, but such a GEMM streams its weights and its arithmetic never binds,
so counting the padding would only move a number no time depends on.

Which tile? A kernel library picks it per shape. We take the rule DeepGEMM publishes in its source (the kernel
behind gpu-kernels.md S16 and T1): BM = 64 when M ≤ 64, else 128; BN from 16 to 128 in steps of 8, and 144 and
160; the tile with the fewest waves, then the fullest last wave, then the narrowest (``get_best_configs`` in
``deep_gemm/jit_kernels/gemm.py`` at commit 55ab91f, T1's). It is charged to fp8 GEMMs only
(:data:`TILED_DTYPES`): DeepGEMM is the table's fp8 GEMM library and the one serving engines run for
block-scaled fp8 on Hopper, while 16-bit GEMMs run cuBLAS, whose tile heuristics are not published. Applied to
bf16 as well, the fitted h200 preset predicted our own cuBLAS K-sweep (bench/gpu/h200-2026-11-27, never
fitted) worse, median |error| 14.9 % -> 25.3 %: the rule is not cuBLAS's.
"""

from __future__ import annotations

import numpy as np

#: BM by M: 64-row tiles (one Hopper warpgroup MMA's M) up to M = 64, else 128.
SMALL_M_TILE = 64
LARGE_M_TILE = 128
#: Dtypes whose GEMMs pay the rule (module docstring): DeepGEMM's.
TILED_DTYPES = frozenset({"fp8"})
#: BN candidates (DeepGEMM ``get_best_configs``, commit 55ab91f: ``tuple(range(16, 129, 8)) + (144, 160)``).
N_TILES = np.array((*range(16, 129, 8), 144, 160), dtype=np.float64)


def tile_plan(m: np.ndarray, n: np.ndarray, groups: np.ndarray, engines: int) -> tuple[np.ndarray, np.ndarray]:
    """Per GEMM (arrays of one shape), of the tile the module docstring's rule picks: the useful share
    ``M·N·groups / (waves · engines · min(M, BM) · BN)`` in (0, 1], and the waves, rounds of at most ``engines``
    tiles (at least 1). Share 1 and one wave where M or N is 0 (no GEMM)."""
    m = np.asarray(m, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    g = np.maximum(np.asarray(groups, dtype=np.float64), 1.0)
    engines = max(int(engines), 1)
    bm = np.where(m <= SMALL_M_TILE, SMALL_M_TILE, LARGE_M_TILE)
    tiles = np.ceil(m / bm)[..., None] * np.ceil(n[..., None] / N_TILES) * g[..., None]
    waves = np.ceil(tiles / engines)
    last_wave = tiles - (waves - 1.0) * engines
    # fewest waves, then the fullest last wave, then the narrowest tile: one key, as waves and last_wave are
    # integers with last_wave <= engines, and argmin takes the first (narrowest) of equal keys
    best = np.argmin(waves * (engines + 1) - last_wave, axis=-1)
    chosen_waves = np.take_along_axis(waves, best[..., None], axis=-1)[..., 0]
    slots = chosen_waves * engines * np.minimum(m, bm) * N_TILES[best]
    gemm = (m > 0) & (n > 0)
    return (np.where(gemm, m * n * g / np.maximum(slots, 1.0), 1.0),
            np.where(gemm, np.maximum(chosen_waves, 1.0), 1.0))
