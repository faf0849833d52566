"""Shared pieces of the graph builders: the per-pass build context and op factories.

Everything here works on plain ints (element counts, bits) so building a graph stays cheap;
bytes are ``ceil(numel * bits / 8)`` so 4-bit types round up like :attr:`TensorSpec.nbytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerscope.graph.ops import GemmShape, Op, TensorSpec, make_op
from layerscope.model.spec import ModelSpec
from layerscope.units import DType
from layerscope.workload.workload import check_tensor_parallel

#: Element type used for integer index tensors (token ids, expert ids): int32 is 4 bytes like fp32,
#: and :class:`DType` has no int32 member.
INDEX_DTYPE = DType.FP32


def nbytes(numel: int, bits: int) -> int:
    """Storage bytes of ``numel`` elements of ``bits`` bits each, rounded up."""
    return -(-numel * bits // 8)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class Group:
    """One sequence group as plain ints: ``count`` sequences of ``new`` tokens over ``cached``."""

    count: int
    new: int
    cached: int


@dataclass(frozen=True, slots=True)
class BuildContext:
    """What every builder of one forward pass needs, precomputed once per pass.

    Per-device sizes follow Megatron-LM tensor parallelism (Shoeybi et al. 2019,
    arXiv 1909.08053 §3): attention heads and FFN columns are split across ``tp`` devices, the
    hidden size is not; KV heads are split too but never below one (replicated when fewer than
    ``tp``).
    """

    spec: ModelSpec
    tokens: int
    """T: tokens of the pass, the M dimension of every projection GEMM."""
    num_sequences: int
    groups: tuple[Group, ...]
    weight_dtype: DType
    act_dtype: DType
    kv_dtype: DType
    tp: int
    heads: int
    """Query heads per device."""
    kv_heads: int
    """KV heads per device (at least 1)."""
    intermediate: int
    """Dense MLP width per device."""
    decode_only: bool
    """Every group brings exactly one new token (decode-shaped attention)."""
    any_cached: bool
    """Some group attends to tokens already in the KV cache."""
    ep: int = 1
    """Expert-parallel devices (``Workload.expert_parallel``): routed experts whole, ``experts / ep`` per device,
    reached by an all-to-all dispatch and combine (:func:`layerscope.graph.moe.build_moe`)."""
    stage_ends: tuple[int, ...] = ()
    """Last layer of every pipeline stage but the final one; an activation send follows each."""
    stage_gpus: int = 1
    """GPUs of one pipeline stage (``tensor_parallel × data_parallel``): where a stage's sends land."""
    sp: bool = False
    """Sequence parallelism: norms and residual adds on ``tokens / tp`` rows, each tensor-parallel all-reduce a
    reduce-scatter, an all-gather before each column-parallel block."""

    @property
    def sp_tokens(self) -> int:
        """Rows of the sequence-parallel regions (norms, residual adds): ``ceil(tokens / tp)`` under sequence
        parallelism, else all the tokens."""
        return ceil_div(self.tokens, self.tp) if self.sp else self.tokens

    @property
    def wbits(self) -> int:
        return self.weight_dtype.bits

    @property
    def abits(self) -> int:
        return self.act_dtype.bits

    @property
    def kbits(self) -> int:
        return self.kv_dtype.bits


def make_context(spec: ModelSpec, groups: tuple[Group, ...], weight_dtype: DType, act_dtype: DType,
                 kv_dtype: DType, tp: int, *, ep: int = 1, stage_ends: tuple[int, ...] = (),
                 stage_gpus: int = 1, sp: bool = False) -> BuildContext:
    """Build the context of one pass; FFN widths round up when not divisible by ``tp`` (heads must
    divide: :func:`layerscope.workload.check_tensor_parallel`)."""
    check_tensor_parallel(spec, tp)
    tokens = sum(g.count * g.new for g in groups)
    return BuildContext(
        spec=spec,
        tokens=tokens,
        num_sequences=sum(g.count for g in groups),
        groups=groups,
        weight_dtype=weight_dtype,
        act_dtype=act_dtype,
        kv_dtype=kv_dtype,
        tp=tp,
        heads=ceil_div(spec.num_attention_heads, tp),
        kv_heads=max(1, ceil_div(spec.num_kv_heads, tp)),
        intermediate=ceil_div(spec.intermediate_size, tp),
        decode_only=all(g.new == 1 for g in groups),
        any_cached=any(g.cached > 0 for g in groups),
        ep=ep,
        stage_ends=stage_ends,
        stage_gpus=stage_gpus,
        sp=sp and tp > 1,
    )


def act(name: str, shape: tuple[int, ...], dtype: DType) -> TensorSpec:
    return TensorSpec(name, shape, dtype, "activation")


def weight(name: str, shape: tuple[int, ...], dtype: DType) -> TensorSpec:
    return TensorSpec(name, shape, dtype, "weight")


def gemm_class(m: int) -> str:
    """``Va_Mw`` (GEMV) for a single row, ``Ma_Mw`` otherwise."""
    return "Va_Mw" if m == 1 else "Ma_Mw"


def linear(ctx: BuildContext, name: str, module: str, layer: int | None, x: str, k: int, n: int, *,
           bias: bool = False, m: int | None = None, kind: str = "gemm", in_rows: int | None = None,
           weight_name: str | None = None, weight_dtype: DType | None = None,
           attrs: tuple[tuple[str, object], ...] = ()) -> Op:
    """A linear layer of the pass (:func:`linear_op`): ``m`` defaults to the pass's tokens, the dtypes
    to the pass's weight and activation dtypes."""
    return linear_op(name, module, layer, x, m=ctx.tokens if m is None else m, n=n, k=k,
                     weight_dtype=ctx.weight_dtype if weight_dtype is None else weight_dtype,
                     act_dtype=ctx.act_dtype, bias=bias, kind=kind, in_rows=in_rows, weight_name=weight_name,
                     attrs=attrs)


def linear_op(name: str, module: str, layer: int | None, x: str, *, m: int, n: int, k: int, weight_dtype: DType,
              act_dtype: DType, bias: bool = False, kind: str = "gemm", in_rows: int | None = None,
              weight_name: str | None = None, attrs: tuple[tuple[str, object], ...] = (), groups: int = 1) -> Op:
    """A linear layer ``y[m, n] = x[m, k] @ W[n, k]^T (+ b)``, output tensor ``{name}:out``.

    FLOPs: 2·m·n·k (a multiply-add is 2 FLOPs; Kaplan et al. 2020, arXiv 2001.08361 §2.1) plus m·n
    for the bias add. Weights are read once.
    ``in_rows`` is the row count of the input tensor when it differs from ``m`` (lm_head reading
    only the last token of each sequence).
    ``groups`` > 1: one grouped GEMM kernel of ``groups`` such products, each with its own weights (an MoE
    layer's experts in one launch, as DeepGEMM's contiguous layout runs them): every count above per group.
    """
    wdt = weight_dtype
    adt = act_dtype
    abits = adt.bits
    g = groups
    wname = f"{name}.weight" if weight_name is None else weight_name
    inputs = [act(x, ((m if in_rows is None else in_rows) * g, k), adt),
              weight(wname, (n, k) if g == 1 else (g, n, k), wdt)]
    flops = 2 * m * n * k * g
    wbytes = nbytes(n * k * g, wdt.bits)
    if bias:
        inputs.append(weight(f"{name}.bias", (n,) if g == 1 else (g, n), wdt))
        flops += m * n * g
        wbytes += nbytes(n * g, wdt.bits)
    return make_op(
        name=name, kind=kind, module=module, layer=layer, inputs=tuple(inputs),
        outputs=(act(f"{name}:out", (m * g, n), adt),),
        flops=flops, weight_bytes=wbytes,
        act_read_bytes=nbytes(m * k * g, abits), act_write_bytes=nbytes(m * n * g, abits),
        matrix_class=gemm_class(m), definition=f"gemm_n{n}_k{k}" if g == 1 else f"grouped_gemm_g{g}_n{n}_k{k}",
        gemm=GemmShape(m, n, k, g),
        attrs=attrs,
    )


def elementwise_add(ctx: BuildContext, name: str, module: str, layer: int | None, xs: tuple[str, ...],
                    width: int, kind: str = "residual_add") -> Op:
    """``out = sum(xs)``: (len(xs)-1) adds per element; reads every input, writes one tensor."""
    t = ctx.tokens
    adt = ctx.act_dtype
    numel = t * width
    return make_op(
        name=name, kind=kind, module=module, layer=layer,
        inputs=tuple(act(x, (t, width), adt) for x in xs),
        outputs=(act(f"{name}:out", (t, width), adt),),
        flops=(len(xs) - 1) * numel,
        act_read_bytes=len(xs) * nbytes(numel, adt.bits), act_write_bytes=nbytes(numel, adt.bits),
        matrix_class="Elementwise", definition=f"residual_add_h{width}",
    )


def collective_op(name: str, module: str, layer: int | None, x: TensorSpec, out: TensorSpec, *, collective: str,
                  gpus: int, message_bytes: int, comm_bytes: int, flops: int = 0, definition: str,
                  attrs: tuple[tuple[str, object], ...] = ()) -> Op:
    """A communication op over ``gpus`` devices: ``message_bytes`` in NCCL's convention (the all-to-all's send
    buffer, the all-gather's output, the send's payload), ``comm_bytes`` what one device puts on the wire;
    the local buffers read and written once (act bytes). Timed on the interconnect by
    :mod:`layerscope.cost.collectives`."""
    return make_op(
        name=name, kind="communication", module=module, layer=layer, inputs=(x,), outputs=(out,),
        flops=flops, act_read_bytes=x.nbytes, act_write_bytes=out.nbytes,
        matrix_class="Collective", definition=definition,
        attrs=(("collective", collective), ("gpus", gpus), ("message_bytes", message_bytes), *attrs),
        comm_bytes=comm_bytes,
    )


def all_reduce(ctx: BuildContext, name: str, module: str, layer: int | None, x: str, width: int) -> Op:
    """Ring all-reduce of ``x[T, width]`` across the ``tp`` devices of a tensor-parallel group.

    A ring all-reduce sends and receives 2·(p-1)/p of the message per device (reduce-scatter then
    all-gather; Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 69(2)) and adds (p-1)/p of its elements. Bytes on the wire are in
    ``comm_bytes``; the local buffer is read and written once (act bytes).
    """
    t = ctx.tokens
    p = ctx.tp
    adt = ctx.act_dtype
    numel = t * width
    msg = nbytes(numel, adt.bits)
    if ctx.sp:
        return reduce_scatter(ctx, name.removesuffix(".all_reduce") + ".reduce_scatter", module, layer, x, width)
    return make_op(
        name=name, kind="communication", module=module, layer=layer,
        inputs=(act(x, (t, width), adt),), outputs=(act(f"{name}:out", (t, width), adt),),
        flops=(p - 1) * numel // p, act_read_bytes=msg, act_write_bytes=msg,
        matrix_class="Collective", definition=f"all_reduce_h{width}",
        attrs=(("collective", "all_reduce"), ("algorithm", "ring"), ("tp", p), ("message_bytes", msg)),
        comm_bytes=2 * (p - 1) * msg // p,
    )


def reduce_scatter(ctx: BuildContext, name: str, module: str, layer: int | None, x: str, width: int) -> Op:
    """Ring reduce-scatter of ``x[T, width]`` over the ``tp`` devices, each keeping ``T/tp`` rows of the sum
    (sequence parallelism's replacement of the all-reduce after a row-parallel linear, Korthikanti et al. 2022
    §4.2.2): (p−1)/p of the message on the wire (Thakur et al. 2005 §4.4) and (p−1)/p of its elements added."""
    t, p, adt = ctx.tokens, ctx.tp, ctx.act_dtype
    full = act(x, (t, width), adt)
    out = act(f"{name}:out", (ctx.sp_tokens, width), adt)
    return collective_op(name, module, layer, full, out, collective="reduce_scatter", gpus=p,
                         message_bytes=full.nbytes, comm_bytes=(p - 1) * full.nbytes // p,
                         flops=(p - 1) * t * width // p, definition=f"reduce_scatter_h{width}",
                         attrs=(("tp", p),))


def all_gather(ctx: BuildContext, name: str, module: str, layer: int | None, x: str, width: int) -> Op:
    """Ring all-gather of each device's ``T/tp`` rows of ``x`` into ``x[T, width]`` on every device (sequence
    parallelism, before a column-parallel linear): (p−1)/p of the output on the wire (Thakur et al. 2005 §4.1)."""
    t, p, adt = ctx.tokens, ctx.tp, ctx.act_dtype
    out = act(f"{name}:out", (t, width), adt)
    return collective_op(name, module, layer, act(x, (ctx.sp_tokens, width), adt), out, collective="all_gather",
                         gpus=p, message_bytes=out.nbytes, comm_bytes=(p - 1) * out.nbytes // p,
                         definition=f"all_gather_h{width}", attrs=(("tp", p),))
