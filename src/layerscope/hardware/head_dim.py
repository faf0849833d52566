"""The head-dim factor of a fused attention kernel: the second Hockney factor of ``hardware.attention_fit``.

A tile of a 64-wide head does half the MMA work per byte of a 128-wide one, so the fraction of peak a fused
attention kernel reaches scales as ``d / (d + d½)`` (Hockney & Jesshope 1988, §1.3.3, in the head dim; K-10,
hdim 64: 497 TFLOP/s where K-04, hdim 128, reaches 648 in ``data/gpu-kernels.md``), taken relative to its value
at :data:`REFERENCE_HEAD_DIM`, where the fitted curves are tabulated. The fit (``hardware.attention_fit``) and
the cost model (``cost.models``) both apply it; it lives apart so that timing an op does not import the fit.
"""

from __future__ import annotations

import numpy as np

#: The head dim at which ``PrefillFit.efficiency`` is the fraction of peak (the head-dim factor is 1 there).
REFERENCE_HEAD_DIM = 128.0


def head_dim_factor(d: np.ndarray | float, half_d: float) -> np.ndarray:
    """``d / (d + d½)`` relative to its value at :data:`REFERENCE_HEAD_DIM`; 1 where ``d½`` is 0."""
    d = np.asarray(d, dtype=np.float64)
    if half_d <= 0:
        return np.ones_like(d)
    return d / (d + half_d) * (REFERENCE_HEAD_DIM + half_d) / REFERENCE_HEAD_DIM
