"""Dense MLP ops: gated (``down(act(gate(x)) * up(x))``) and plain (``fc2(act(fc1(x)))``).

Activation FLOPs per element count each transcendental (exp, tanh) as 1 FLOP:

* SiLU ``x / (1 + exp(-x))`` (Elfwing et al. 2017, arXiv 1702.03118): exp, add, divide, negate = 4.
* GELU, tanh form ``0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))`` (Hendrycks & Gimpel 2016,
  arXiv 1606.08415 §2): cube (2), scale, add, scale, tanh, add, two multiplies = 9; the erf form
  is counted the same.
* ReLU: 1 compare.

The gated form adds 1 multiply per element (``act(gate) * up``, Shazeer 2020, arXiv 2002.05202).
"""

from __future__ import annotations

from layerscope.graph._common import BuildContext, act, all_reduce, linear, nbytes
from layerscope.graph.ops import Op, make_op

#: FLOPs per element of each activation family (see the module docstring).
ACTIVATION_FLOPS: dict[str, int] = {"silu": 4, "gelu": 9, "relu": 1}
_FAMILY = {
    "silu": "silu", "swish": "silu", "swiglu": "silu",
    "gelu": "gelu", "gelu_new": "gelu", "gelu_fast": "gelu", "gelu_pytorch_tanh": "gelu",
    "gelu_tanh": "gelu", "gelu_python": "gelu", "quick_gelu": "gelu", "geglu": "gelu",
    "relu": "relu", "relu2": "relu",
}


def activation_family(activation: str) -> str:
    """``silu``, ``gelu`` or ``relu`` for an HF ``hidden_act`` name (unknown names count as silu)."""
    return _FAMILY.get(activation.lower(), "silu")


def activation_flops(activation: str) -> int:
    """FLOPs per element of ``activation`` (see the module docstring)."""
    return ACTIVATION_FLOPS[activation_family(activation)]


def _activation_op(ctx: BuildContext, name: str, module: str, layer: int, xs: tuple[str, ...],
                   width: int) -> Op:
    """``act(xs[0])`` (plain) or ``act(xs[0]) * xs[1]`` (gated) over ``[T, width]``."""
    t = ctx.tokens
    adt = ctx.act_dtype
    fam = activation_family(ctx.spec.activation)
    per_el = ACTIVATION_FLOPS[fam] + (len(xs) - 1)
    numel = t * width
    return make_op(
        name=name, kind="activation", module=module, layer=layer,
        inputs=tuple(act(x, (t, width), adt) for x in xs), outputs=(act(f"{name}:out", (t, width), adt),),
        flops=per_el * numel, act_read_bytes=len(xs) * nbytes(numel, adt.bits),
        act_write_bytes=nbytes(numel, adt.bits), matrix_class="Elementwise", definition=f"{fam}_h{width}",
        attrs=(("activation", ctx.spec.activation),),
    )


def build_dense_mlp(ctx: BuildContext, mlp: str, layer: int, x: str, *, intermediate: int | None = None,
                    gated: bool | None = None, bias: bool | None = None,
                    reduce: bool = True) -> tuple[list[Op], str]:
    """The MLP at module path ``mlp`` reading ``x[T, hidden]``; returns its ops and output tensor.

    ``intermediate`` is the per-device width (default: the dense width / tp). With ``reduce`` and
    ``tp > 1`` an all-reduce follows ``down_proj`` (Megatron-LM row-parallel, arXiv 1909.08053 §3).
    """
    spec = ctx.spec
    mods = spec.modules
    width = ctx.intermediate if intermediate is None else intermediate
    hidden = spec.hidden_size
    is_gated = (spec.mlp_kind == "gated") if gated is None else gated
    has_bias = spec.mlp_bias if bias is None else bias
    ops: list[Op] = []
    if is_gated:
        if mods.gate_up_proj:
            name = f"{mlp}.{mods.gate_up_proj}"
            gu = linear(ctx, name, name, layer, x, hidden, 2 * width, bias=has_bias)
            ops.append(gu)
            srcs = (gu.outputs[0].name, gu.outputs[0].name)
        else:
            gate = f"{mlp}.{mods.gate_proj or 'gate_proj'}"
            up = f"{mlp}.{mods.up_proj or 'up_proj'}"
            g_op = linear(ctx, gate, gate, layer, x, hidden, width, bias=has_bias)
            u_op = linear(ctx, up, up, layer, x, hidden, width, bias=has_bias)
            ops += (g_op, u_op)
            srcs = (g_op.outputs[0].name, u_op.outputs[0].name)
        a_op = _activation_op(ctx, f"{mlp}.act_mul", mlp, layer, srcs, width)
    else:
        fc1 = f"{mlp}.{mods.up_proj or 'fc1'}"
        f_op = linear(ctx, fc1, fc1, layer, x, hidden, width, bias=has_bias)
        ops.append(f_op)
        # The plain MLP's activation is a module of its own in HF (gpt2 ``mlp.act``, OPT ``activation_fn``).
        act = f"{mlp}.{mods.act}"
        a_op = _activation_op(ctx, act, act, layer, (f_op.outputs[0].name,), width)
    ops.append(a_op)
    down = f"{mlp}.{mods.down_proj}"
    d_op = linear(ctx, down, down, layer, a_op.outputs[0].name, width, hidden, bias=has_bias)
    ops.append(d_op)
    out = d_op.outputs[0].name
    if reduce and ctx.tp > 1:
        ar = all_reduce(ctx, f"{down}.all_reduce", down, layer, out, hidden)
        ops.append(ar)
        out = ar.outputs[0].name
    return ops, out
