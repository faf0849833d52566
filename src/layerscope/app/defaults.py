"""Defaults every verb and command shares, in a module with no imports, so the CLI can declare its options
(and ``layerscope --help`` run) without loading the library."""

from __future__ import annotations

from typing import Final

#: The attention view every verb uses unless told otherwise: one fused kernel per attention, as
#: FlashAttention and PyTorch's SDPA run it (``unfused`` shows QKᵀ, softmax and PV as their own ops).
DEFAULT_ATTENTION: Final = "fused"
