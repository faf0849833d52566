"""Normalization ops (RMSNorm, LayerNorm), including the per-head q/k norms of Qwen3/Gemma3.

FLOP convention, per normalized element:

* RMSNorm ``y = x / sqrt(mean(x^2) + eps) * g`` (Zhang & Sennrich 2019, arXiv 1910.07467, eq. 4):
  square, accumulate, multiply by the reciprocal RMS, multiply by the gain = **4 FLOPs**; the one
  rsqrt per row is not counted.
* LayerNorm ``y = (x - mean) / sqrt(var + eps) * g + b`` (Ba et al. 2016, arXiv 1607.06450, eq. 4):
  accumulate for the mean, subtract, square, accumulate for the variance, multiply by the
  reciprocal std, multiply by the gain, add the bias = **7 FLOPs** (6 without a bias).

Norm weights are stored in the activation dtype: checkpoints keep them unquantized.
"""

from __future__ import annotations

from layerscope.graph._common import BuildContext, act, nbytes, weight
from layerscope.graph.ops import Op, make_op

#: FLOPs per normalized element (see the module docstring for the count).
RMSNORM_FLOPS_PER_ELEMENT = 4
LAYERNORM_FLOPS_PER_ELEMENT = 6
LAYERNORM_BIAS_FLOPS_PER_ELEMENT = 1


def norm_op(ctx: BuildContext, name: str, layer: int | None, x: str, width: int, *,
            rows: int | None = None, groups: int = 1, kind: str | None = None) -> Op:
    """A norm over the last ``width`` elements of ``x[rows, groups*width]``; output ``{name}:out``.

    ``groups`` > 1 normalizes each head separately (q_norm/k_norm: ``width`` = head_dim).
    ``kind`` overrides ``spec.norm_kind`` (the q/k norms of layernorm models are still RMSNorms).
    """
    spec = ctx.spec
    norm_kind = spec.norm_kind if kind is None else kind
    rows = ctx.tokens if rows is None else rows
    adt = ctx.act_dtype
    numel = rows * groups * width
    inputs = [act(x, (rows, groups * width), adt), weight(f"{name}.weight", (width,), adt)]
    if norm_kind == "rmsnorm":
        per_el = RMSNORM_FLOPS_PER_ELEMENT
        wnumel = width
        definition = f"rmsnorm_h{width}"
    else:
        per_el = LAYERNORM_FLOPS_PER_ELEMENT
        wnumel = width
        definition = f"layernorm_h{width}"
        if spec.norm_bias:
            per_el += LAYERNORM_BIAS_FLOPS_PER_ELEMENT
            wnumel += width
            inputs.append(weight(f"{name}.bias", (width,), adt))
    return make_op(
        name=name, kind="norm", module=name, layer=layer, inputs=tuple(inputs),
        outputs=(act(f"{name}:out", (rows, groups * width), adt),),
        flops=per_el * numel, weight_bytes=nbytes(wnumel, adt.bits),
        act_read_bytes=nbytes(numel, adt.bits), act_write_bytes=nbytes(numel, adt.bits),
        matrix_class="Reduction", definition=definition,
    )
