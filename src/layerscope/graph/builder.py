"""Whole-layer, whole-model and multi-step graphs.

Speed: layers differ only by full/sliding attention and dense/MoE MLP, so the ops of each
distinct layer *signature* are built once per pass and re-labelled for every layer (plain string
concatenation and one :class:`Op` per op, copied from the template's by
:data:`~layerscope.graph.ops.relabel_op`). The graph's validation follows the same split: what
:class:`OpGraph` checks tensor by tensor is found once per template and checked per layer on a few
name sets (:class:`_GraphCheck`; anything it cannot vouch for is validated op by op, as before).
A model or steps graph keeps its layers as instances of their templates and makes their ops on the
first read of ``graph.ops`` (:class:`_Ops`); timing a graph reads the templates' ops only
(:func:`layerscope.cost.features.op_features`). Whole graphs are memoized on their (frozen,
hashable) arguments (the 32 most recent per builder), so a repeated request returns the same
immutable :class:`OpGraph`.

Dtypes: GEMM, expert and embedding weights use ``workload.weight_dtype`` (``spec.weight_dtype``
and ``quantized_modules_excluded`` are not consulted: the workload decides); norm weights and
activations use ``workload.act_dtype``; the KV cache ``workload.kv_dtype``.

Names: see :mod:`layerscope.graph.naming`. ``build_steps_graph`` prefixes every op and
activation name with ``decode_step_{t}.`` (weights and ``Op.module`` keep their HF names).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise, repeat
from typing import NamedTuple

import numpy as np

from layerscope.errors import GraphError
from layerscope.graph._common import (
    BuildContext,
    Group,
    all_gather,
    ceil_div,
    collective_op,
    elementwise_add,
    make_context,
)
from layerscope.graph.attention import AttentionView, MLAForm, build_attention, check_attention_view
from layerscope.graph.embedding import LogitsMode, build_embedding, build_head
from layerscope.graph.mlp import build_dense_mlp
from layerscope.graph.moe import build_moe
from layerscope.graph.naming import INPUT_IDS, layer_names, layer_prefix
from layerscope.graph.norms import norm_op
from layerscope.graph.ops import DeferredOps, Op, OpGraph, TensorSpec, picker, relabel_op
from layerscope.model.spec import ModelSpec
from layerscope.units import DType
from layerscope.workload.steps import step_range
from layerscope.workload.workload import ForwardPass, Workload, check_parallel, pipeline_stages

_PLACEHOLDER = "\x00layer_input"
_MLA_FORMS = ("absorbed", "naive")


def _check_options(spec: ModelSpec, attention: str, mla_form: str | None, logits: str = "last") -> None:
    check_attention_view(attention)
    if mla_form is not None and mla_form not in _MLA_FORMS:
        raise GraphError(f"mla_form: unknown form {mla_form!r}; known: {', '.join(_MLA_FORMS)}")
    if logits not in ("last", "all"):
        raise GraphError(f"logits: unknown mode {logits!r}; known: last, all")


def pass_context(spec: ModelSpec, fwd: ForwardPass, workload: Workload) -> BuildContext:
    """The build context of one forward pass on one device (tokens, groups, dtypes, per-device widths).

    With data parallelism or micro-batches the device runs its share: each group's sequences divided by
    ``data_parallel`` and then by ``micro_batches`` (twice as many under two-batch overlap), rounded up (the
    busiest replica's micro-batch)."""
    split = workload.micro_batches * (2 if workload.two_batch_overlap else 1)
    if workload.data_parallel * split == 1:
        groups = tuple(Group(g.count, g.new_tokens, g.cached_tokens) for g in fwd.groups)
    else:
        groups = tuple(Group(ceil_div(ceil_div(g.count, workload.data_parallel), split), g.new_tokens,
                             g.cached_tokens) for g in fwd.groups)
    check_parallel(spec, workload)
    stages = pipeline_stages(spec.num_layers, workload.pipeline_parallel)
    return make_context(spec, groups, workload.weight_dtype, workload.act_dtype, workload.kv_dtype,
                        workload.tensor_parallel, ep=workload.expert_parallel,
                        stage_ends=tuple(r[-1] for r in stages[:-1]),
                        stage_gpus=workload.tensor_parallel * workload.data_parallel,
                        sp=workload.sequence_parallel)


def _layer_ops(ctx: BuildContext, layer: int, x: str, view: AttentionView,
               mla_form: MLAForm | None) -> tuple[list[Op], str]:
    """The ops of decoder layer ``layer`` reading hidden states ``x``; returns ops and output tensor."""
    spec = ctx.spec
    mods = spec.modules
    names = layer_names(mods, layer)
    lp = names.prefix
    hidden = spec.hidden_size
    sliding = spec.sliding_window is not None and spec.layer_is_sliding(layer)
    moe = spec.is_moe_layer(layer)
    # Norms and residual adds run on the sequence-parallel slice under sequence parallelism (all tokens else).
    sctx = replace(ctx, tokens=ctx.sp_tokens) if ctx.sp else ctx
    n1 = norm_op(sctx, f"{lp}{mods.input_norm}", layer, x, hidden)
    ops = [n1]

    def gathered(name: str, inp: str) -> str:
        """``inp`` on every token: an all-gather over the tensor-parallel devices under sequence parallelism."""
        if not ctx.sp:
            return inp
        ag = all_gather(ctx, name, name.rsplit(".", 1)[0], layer, inp, hidden)
        ops.append(ag)
        return ag.outputs[0].name

    attn_in = gathered(f"{names.attn}.all_gather", n1.outputs[0].name)
    attn_ops, a = build_attention(ctx, names, layer, attn_in, sliding=sliding, view=view, mla_form=mla_form)
    ops += attn_ops

    def mlp(inp: str) -> str:
        if moe and ctx.ep > 1:  # expert parallelism dispatches each device's own tokens: no gather first
            m_ops, m_out = build_moe(ctx, names, layer, inp)
        else:
            if inp != attn_in:  # a parallel block's MLP reads the input attention already gathered
                inp = gathered(f"{names.mlp}.all_gather", inp)
            m_ops, m_out = build_moe(ctx, names, layer, inp) if moe else build_dense_mlp(ctx, names.mlp, layer, inp)
        ops.extend(m_ops)
        return m_out

    if spec.block_layout == "parallel":
        # GPT-J/Falcon: attention and MLP read the same normed input; one residual add of both.
        if mods.post_attn_norm:
            n2 = norm_op(sctx, f"{lp}{mods.post_attn_norm}", layer, x, hidden)
            ops.append(n2)
            m = mlp(n2.outputs[0].name)
        else:
            m = mlp(attn_in)
        res = elementwise_add(sctx, f"{lp}residual", lp[:-1], layer, (x, a, m), hidden)
        ops.append(res)
        return ops, res.outputs[0].name
    if spec.extra_norms and mods.post_attn_norm:
        # Gemma2/3: post_attention_layernorm normalizes the attention output before the residual.
        pa = norm_op(sctx, f"{lp}{mods.post_attn_norm}", layer, a, hidden)
        ops.append(pa)
        a = pa.outputs[0].name
    r1 = elementwise_add(sctx, f"{lp}residual_attn", lp[:-1], layer, (x, a), hidden)
    ops.append(r1)
    pre_mlp = mods.pre_ffn_norm if spec.extra_norms else mods.post_attn_norm
    h = r1.outputs[0].name
    if pre_mlp:
        n2 = norm_op(sctx, f"{lp}{pre_mlp}", layer, h, hidden)
        ops.append(n2)
        m = mlp(n2.outputs[0].name)
    else:
        m = mlp(h)
    if spec.extra_norms and mods.post_ffn_norm:
        pf = norm_op(sctx, f"{lp}{mods.post_ffn_norm}", layer, m, hidden)
        ops.append(pf)
        m = pf.outputs[0].name
    r2 = elementwise_add(sctx, f"{lp}residual_mlp", lp[:-1], layer, (h, m), hidden)
    ops.append(r2)
    return ops, r2.outputs[0].name


_Row = tuple[str, tuple[int, ...], DType, str]
_Pick = Callable[[Sequence[TensorSpec]], Sequence[TensorSpec]]


@dataclass(frozen=True, slots=True)
class _Plan:
    """How to re-label a template's ops for another layer / step (see :func:`_plan`).

    Tensors are de-duplicated: ``act`` (names in ``act_sfx``), ``wgt`` and ``ext`` hold the distinct tensors
    renamed as ``step + prefix + suffix``, ``prefix + suffix`` and ``step + name``; ``fixed`` those kept as
    they are (weights outside the prefix), ``inp`` the layer input's specs. An instance's tensors
    are their concatenation, and ``ops`` picks each op's inputs and outputs from it by index.

    ``produced`` and ``reads`` give the names of what :class:`_GraphCheck` needs of an instance (without
    making its tensors). ``trusted`` is false when a produced tensor is not an ``act`` one (then instances
    are validated tensor by tensor).
    """

    act: tuple[tuple[tuple[int, ...], ...], tuple[DType, ...], tuple[str, ...]]
    """Shapes, dtypes and roles (a column each)."""
    act_sfx: tuple[str, ...]
    wgt: tuple[tuple[tuple[int, ...], ...], tuple[DType, ...], tuple[str, ...]]
    wgt_sfx: tuple[str, ...]
    ext: tuple[_Row, ...]
    fixed: tuple[TensorSpec, ...]
    inp: tuple[tuple[tuple[int, ...], DType, str], ...]
    ops: tuple[tuple[Op, _Pick, _Pick], ...]
    """Each template op (its fields but the re-labelled ones are copied) and the pickers of its inputs and
    outputs."""
    op_sfx: tuple[str, ...]
    modules: Callable[[Sequence[str]], Sequence[str]]
    """Each op's module from ``[*op names, *(prefix + mod_sfx), prefix[:-1]]`` (no step: a module op's
    module is its name)."""
    mod_sfx: tuple[str, ...]
    step_modules: Callable[[Sequence[str]], Sequence[str]]
    """Each op's module from ``[*(prefix + step_mod_sfx), prefix[:-1]]`` (with a step, which op names have
    and modules do not)."""
    step_mod_sfx: tuple[str, ...]
    produced: Callable[[Sequence[str]], Sequence[str]]
    """Picks the names of the tensors the ops produce (non-weights, once per producing op) from the ``act``
    names (when ``trusted``: they are all ``act`` ones)."""
    reads: tuple[tuple[int, int, str], ...]
    """The tensors read before any op of the template produces them (non-weights), as (class, index, text):
    the ``act`` tensor at index (class 0), the ``ext`` tensor named text (2) or the layer input (4)."""
    trusted: bool


def _columns(tensors: Sequence[TensorSpec]) -> tuple[tuple[tuple[int, ...], ...], tuple[DType, ...], tuple[str, ...]]:
    return tuple(t.shape for t in tensors), tuple(t.dtype for t in tensors), tuple(t.role for t in tensors)


def _plan(ops: Sequence[Op], prefix: str, input_name: str) -> _Plan:
    n = len(prefix)
    groups: tuple[list[TensorSpec], ...] = ([], [], [], [], [])
    # Equal tensors are one: keyed by value, the dtype by identity (members are singletons, and an Enum
    # member's hash is a Python call).
    where: dict[tuple[str, tuple[int, ...], int, str], tuple[int, int]] = {}
    placed: list[list[tuple[int, int]]] = []  # (class, index within the class) of each op's inputs, outputs
    # The validation's facts, by name as OpGraph.__post_init__ finds them (weights are not checked).
    made: set[str] = set()
    reads: dict[tuple[int, int], str] = {}
    produced: list[tuple[int, int]] = []
    for op in ops:
        for is_output, side in ((False, op.inputs), (True, op.outputs)):
            at = []
            for t in side:
                name, shape, dtype, role = t
                key = (name, shape, id(dtype), role)
                w = where.get(key)
                if w is None:
                    if name == input_name:
                        c = 4
                    elif name.startswith(prefix):
                        c = 1 if role == "weight" else 0
                    else:
                        c = 3 if role == "weight" else 2
                    w = where[key] = (c, len(groups[c]))
                    groups[c].append(t)
                at.append(w)
                if role == "weight":
                    continue
                if is_output:
                    made.add(name)
                    produced.append(w)
                elif name not in made:
                    reads[w] = name
            placed.append(at)
    offsets = [0]
    for g in groups[:-1]:
        offsets.append(offsets[-1] + len(g))
    index = {w: offsets[w[0]] + w[1] for w in where.values()}
    trusted = all(c == 0 for c, _ in produced)
    pickers = [picker([index[w] for w in at]) for at in placed]

    op_sfx = []
    mod_sfx: dict[str, int] = {}
    step_mod_sfx: dict[str, int] = {}
    mod_idx = []
    step_mod_idx = []
    for op in ops:
        assert op.name.startswith(prefix)
        op_sfx.append(op.name[n:])
        if prefix and op.module == prefix[:-1]:  # the decoder layer module itself (``layers.N``: residual adds)
            mod_idx.append(-1)
            step_mod_idx.append(-1)
            continue
        assert op.module.startswith(prefix)
        sfx = op.module[n:]
        step_mod_idx.append(step_mod_sfx.setdefault(sfx, len(step_mod_sfx)))
        mod_idx.append(len(op_sfx) - 1 if op.module == op.name else len(ops) + mod_sfx.setdefault(sfx, len(mod_sfx)))
    return _Plan(
        act=_columns(groups[0]),
        act_sfx=tuple(t.name[n:] for t in groups[0]),
        wgt=_columns(groups[1]),
        wgt_sfx=tuple(t.name[n:] for t in groups[1]),
        ext=tuple(tuple(t) for t in groups[2]),  # type: ignore[misc]
        fixed=tuple(groups[3]),
        inp=tuple((t.shape, t.dtype, t.role) for t in groups[4]),
        ops=tuple(zip(ops, pickers[::2], pickers[1::2], strict=True)),
        op_sfx=tuple(op_sfx),
        modules=picker([len(ops) + len(mod_sfx) if i < 0 else i for i in mod_idx]),
        mod_sfx=tuple(mod_sfx),
        step_modules=picker([len(step_mod_sfx) if i < 0 else i for i in step_mod_idx]),
        step_mod_sfx=tuple(step_mod_sfx),
        produced=picker([i for _, i in produced] if trusted else []),
        reads=tuple((c, i, name) for (c, i), name in reads.items()),
        trusted=trusted,
    )


class _Direct(NamedTuple):
    """A block of ops made directly: their names, the tensors they produce and those they read from outside."""

    names: Sequence[str]
    produced: Sequence[str]
    reads: Sequence[str]


class _Instance(NamedTuple):
    """One instance of a plan in a graph, its ops not made yet (:func:`_apply`): op and activation names
    ``step + prefix + suffix``, weights ``prefix + suffix``, the layer input ``x``."""

    plan: _Plan
    step: str
    prefix: str
    layer: int | None
    x: str

    def reads(self) -> tuple[list[str], list[str]]:
        """The tensors it reads from outside itself: those under its own prefix (``act`` ones), and the others
        (the layer input, the step's tensors)."""
        plan, step, ap = self.plan, self.step, self.step + self.prefix
        return ([ap + plan.act_sfx[k] for c, k, _ in plan.reads if c == 0],
                [self.x if c == 4 else step + t for c, _, t in plan.reads if c != 0])

    def names(self) -> _Direct:
        """Its block made out name by name."""
        ap = self.step + self.prefix
        own, other = self.reads()
        return _Direct([ap + sfx for sfx in self.plan.op_sfx], self.plan.produced([ap + s for s in self.plan.act_sfx]),
                       own + other)


def _instance(plan: _Plan, step: str, prefix: str, layer: int | None, x: str, check: _GraphCheck) -> _Instance:
    """An instance of a plan; ``check`` takes it (a plan that is not ``trusted`` makes the graph validate tensor
    by tensor)."""
    inst = _Instance(plan, step, prefix, layer, x)
    if plan.trusted:
        check.blocks.append(inst)
    else:
        check.trusted = False
    return inst


def _apply(inst: _Instance) -> list[Op]:
    """The ops of an instance (:func:`_instance`)."""
    plan, step, prefix, layer, x = inst
    ap = step + prefix
    names = list(map(ap.__add__, plan.op_sfx))
    act = list(map(ap.__add__, plan.act_sfx))
    new = tuple.__new__
    ts = TensorSpec
    # map over zip: the specs made in C (zip re-uses its tuple), ~30% faster than a comprehension
    t_list = list(map(new, repeat(ts), zip(act, *plan.act, strict=True)))
    t_list += map(new, repeat(ts), zip(map(prefix.__add__, plan.wgt_sfx), *plan.wgt, strict=True))
    t_list += [new(ts, (step + s, sh, dt, r)) for s, sh, dt, r in plan.ext]
    t_list += plan.fixed
    t_list += [new(ts, (x, sh, dt, r)) for sh, dt, r in plan.inp]
    tensors = tuple(t_list)
    if step:
        modules = plan.step_modules([*map(prefix.__add__, plan.step_mod_sfx), prefix[:-1]])
    else:
        modules = plan.modules([*names, *map(prefix.__add__, plan.mod_sfx), prefix[:-1]])
    rl = relabel_op
    return [rl(op, name, module, layer, ins(tensors), outs(tensors))
            for (op, ins, outs), name, module in zip(plan.ops, names, modules, strict=True)]


# Why deferred: making the ops is most of a build (0.44 of 0.70 ms for Llama-3.1-8B decode, 2-core VM, Python
# 3.11), and a cold estimate needs only the templates' ops: 0.26 ms a build and 0.65 ms with time_graph, against
# 0.69 and 1.90 ms making them (bench/RESULTS.md, issue #31).
class _Ops(DeferredOps):
    """A graph's ops as built: ops made directly and instances of plans, made on first use."""

    __slots__ = ("items",)

    def __init__(self, items: list[Op | _Instance]) -> None:
        super().__init__(sum(1 if isinstance(item, Op) else len(item.plan.ops) for item in items))
        self.items = items

    def _make(self) -> tuple[Op, ...]:
        ops: list[Op] = []
        for item in self.items:
            if isinstance(item, Op):
                ops.append(item)
            else:
                ops += _apply(item)
        return tuple(ops)

    def layout(self) -> tuple[tuple[Op, ...], np.ndarray]:
        """A plan's template ops stand for the ops of its instances; an op made directly for itself."""
        reps: list[Op] = []
        rep_of: list[int] = []
        start: dict[int, int] = {}  # id of a plan (alive in self.items) -> index of its first template op
        for item in self.items:
            if isinstance(item, Op):
                rep_of.append(len(reps))
                reps.append(item)
                continue
            plan = item.plan
            first = start.get(id(plan))
            if first is None:
                first = start[id(plan)] = len(reps)
                reps += (op for op, _, _ in plan.ops)
            rep_of += range(first, first + len(plan.ops))
        return tuple(reps), np.array(rep_of, dtype=np.intp)


class _GraphCheck:
    """What :meth:`OpGraph.__post_init__` checks, found block by block rather than tensor by tensor.

    Why: a graph is mostly instances of a few templates (one per layer signature), and an instance's
    ops read the tensors of its own block that its template's ops read, in the same order. So a
    block needs only its produced names (to find names produced twice), the names its template reads
    from outside the block (the graph's inputs, or a read before the producer: a cycle) and its op
    names; set operations on those cover the rest. :meth:`graph` validates tensor by tensor
    (``OpGraph(...)``, which raises the error it raises today) whenever a check fails or cannot be
    made, so a graph is rejected exactly as before.

    Blocks are kept in order and checked at :meth:`graph`: first from the instances' name prefixes alone
    (:meth:`_by_prefix`), without making their names, and where that cannot decide, name by name
    (:meth:`_by_name`).
    """

    __slots__ = ("blocks", "trusted")

    def __init__(self) -> None:
        self.blocks: list[_Direct | _Instance] = []
        self.trusted = True

    def block(self, names: Sequence[str], produced: Sequence[str], reads: Sequence[str]) -> None:
        """A block of ops named ``names`` producing the tensors named ``produced`` and reading ``reads``
        from outside itself (both without weights); the reads go first, since a block's own outputs do not
        satisfy them."""
        self.blocks.append(_Direct(names, produced, reads))

    def op(self, op: Op) -> None:
        """One op built directly (a block of one)."""
        self.block((op.name,), [t.name for t in op.outputs if t.role != "weight"],
                   [t.name for t in op.inputs if t.role != "weight"])

    def graph(self, ops: tuple[Op, ...] | DeferredOps, name: str) -> OpGraph:
        """The graph of ``ops``: without a second validation if every check held (deferred ops not made),
        else ``OpGraph(...)``."""
        if self.trusted:
            missing = self._by_prefix()
            if missing is None:
                missing = self._by_name(len(ops))
            if missing is not None:
                return OpGraph._prevalidated(ops, name, missing)
        return OpGraph(ops=ops if isinstance(ops, tuple) else ops.ops, name=name)

    def _by_name(self, n_ops: int) -> frozenset[str] | None:
        """The graph's inputs if every block checks out name by name (no op name or produced tensor twice, no read
        before its producer), else None."""
        made: set[str] = set()
        names: set[str] = set()
        missing: list[str] = []
        n_made = n_names = 0
        for block in self.blocks:
            op_names, produced, reads = block if isinstance(block, _Direct) else block.names()
            missing += [r for r in reads if r not in made]
            made.update(produced)
            n_made += len(produced)
            names.update(op_names)
            n_names += len(op_names)
        if len(made) == n_made and len(names) == n_names == n_ops:
            inputs = frozenset(missing)
            if inputs.isdisjoint(made):
                return inputs
        return None

    def _by_prefix(self) -> frozenset[str] | None:
        """The graph's inputs, decided from the instances' prefixes: when no instance's ``step + prefix`` begins
        another's, the names of two instances cannot meet (the prefix a name could begin with is the one before
        it in sorted order), so a plan's own suffixes being distinct, and the few directly made ops' names meeting
        no instance's, rule out names twice; each read is then looked up (its producer must be an earlier block).
        None where that cannot decide (overlapping prefixes, a repeated name, a read of a later block's tensor):
        :meth:`_by_name` then does."""
        starts: list[tuple[str, int, _Plan]] = []  # (step + prefix, block, plan) of every instance
        sfx: dict[int, tuple[frozenset[str], frozenset[str]]] = {}  # id(plan) -> (op suffixes, produced ones)
        direct_names: set[str] = set()
        direct_made: dict[str, int] = {}
        for i, block in enumerate(self.blocks):
            if isinstance(block, _Direct):
                n_before = len(direct_names) + len(block.names)
                direct_names.update(block.names)
                if len(direct_names) != n_before:
                    return None
                for t in block.produced:
                    if t in direct_made:
                        return None
                    direct_made[t] = i
                continue
            plan = block.plan
            starts.append((block.step + block.prefix, i, plan))
            if id(plan) not in sfx:
                produced = plan.produced(plan.act_sfx)
                ops_sfx, made_sfx = frozenset(plan.op_sfx), frozenset(produced)
                if len(ops_sfx) != len(plan.op_sfx) or len(made_sfx) != len(produced):
                    return None
                if any(c == 0 and plan.act_sfx[k] in made_sfx for c, k, _ in plan.reads):
                    return None  # the block reads one of its own outputs before making it
                sfx[id(plan)] = (ops_sfx, made_sfx)
        starts.sort()
        aps = [ap for ap, _, _ in starts]
        if any(later.startswith(ap) for ap, later in pairwise(aps)):
            return None  # one prefix begins another (or is repeated)
        suffixes = [sfx[id(plan)] for _, _, plan in starts]
        at = [i for _, i, _ in starts]

        def instance_of(text: str, which: int) -> int | None:
            """The block of the instance whose op names (``which`` 0) or produced tensors (1) hold ``text``."""
            j = bisect_right(aps, text) - 1
            if j >= 0 and text.startswith(aps[j]) and text[len(aps[j]):] in suffixes[j][which]:
                return at[j]
            return None

        if any(instance_of(t, 0) is not None for t in direct_names) or any(
                instance_of(t, 1) is not None for t in direct_made):
            return None
        missing: set[str] = set()
        for i, block in enumerate(self.blocks):
            own: Sequence[str]
            if isinstance(block, _Direct):
                own, reads = (), block.reads
            else:
                # a read under the block's own prefix: no other instance's names can hold it (prefixes begin none
                # of each other) and the block makes it not (checked per plan above): a direct op's, or an input
                own, reads = block.reads()
            for r in own:
                by = direct_made.get(r)
                if by is None:
                    missing.add(r)
                elif by >= i:
                    return None
            for r in reads:
                by = direct_made.get(r)
                if by is None:
                    by = instance_of(r, 1)
                if by is None:
                    missing.add(r)
                elif by >= i:
                    return None  # read before (or by) its producer
        return frozenset(missing)


def layer_signature(spec: ModelSpec, layer: int) -> tuple[bool, bool]:
    """What makes layers' ops differ: (sliding-window attention, MoE MLP)."""
    return (spec.sliding_window is not None and spec.layer_is_sliding(layer), spec.is_moe_layer(layer))


def _model_ops(ctx: BuildContext, layers: Sequence[int], view: AttentionView, mla_form: MLAForm | None,
               logits: LogitsMode, step: str, ids: str, check: _GraphCheck, head: bool = True) -> list[Op | _Instance]:
    """The ops of one pass: ops made directly, and instances of plans (a plan per layer signature)."""
    spec = ctx.spec
    mods = spec.modules
    ops: list[Op | _Instance]
    if step:
        emb_ops, x = build_embedding(ctx, _PLACEHOLDER)
        ops = [_instance(_plan(emb_ops, "", _PLACEHOLDER), step, "", None, ids, check)]
        x = step + x
    else:  # re-labelled with no step and no prefix, the embedding would be the one built on ``ids``
        emb_ops, x = build_embedding(ctx, ids)
        for op in emb_ops:
            check.op(op)
        ops = [*emb_ops]
    templates: dict[tuple[bool, bool], tuple[_Plan, str]] = {}
    for layer in layers:
        sig = layer_signature(spec, layer)
        entry = templates.get(sig)
        if entry is None:
            t_ops, t_out = _layer_ops(ctx, layer, _PLACEHOLDER, view, mla_form)
            lp = layer_prefix(mods, layer)
            entry = (_plan(t_ops, lp, _PLACEHOLDER), t_out[len(lp):])
            templates[sig] = entry
        lp = layer_prefix(mods, layer)
        ops.append(_instance(entry[0], step, lp, layer, x, check))
        x = step + lp + entry[1]
        if layer in ctx.stage_ends:
            send = stage_send(ctx, f"{step}{lp}pp_send", lp[:-1], layer, x)
            ops.append(send)
            check.op(send)
            x = send.outputs[0].name
    if head and ctx.sp and layers:  # the head reads every token: gather the last layer's slices
        ag = all_gather(ctx, f"{step}norm.all_gather", "norm", None, x, spec.hidden_size)
        ops.append(ag)
        check.op(ag)
        x = ag.outputs[0].name
    if head:
        if step:
            head_ops, _ = build_head(ctx, _PLACEHOLDER, logits)
            ops.append(_instance(_plan(head_ops, "", _PLACEHOLDER), step, "", None, x, check))
        else:
            head_ops, _ = build_head(ctx, x, logits)
            for op in head_ops:
                check.op(op)
            ops += head_ops
    return ops


def stage_send(ctx: BuildContext, name: str, module: str, layer: int, x: str) -> Op:
    """The pipeline's point-to-point send of the hidden states ``x[T, hidden]`` from the stage ending at
    ``layer`` to the next (each device to its peer in the next stage, as vLLM's and Megatron's pipelines
    send; Narayanan et al. 2021, arXiv 2104.04473 §2.2). Placement: the stage's index and size ride in the
    attrs, for the cost model to find whether the pair crosses a node."""
    t = ctx.tokens
    hidden = ctx.spec.hidden_size
    tensor = TensorSpec(x, (t, hidden), ctx.act_dtype, "activation")
    msg = tensor.nbytes
    return collective_op(name, module, layer, tensor, TensorSpec(f"{name}:out", (t, hidden), ctx.act_dtype,
                                                                 "activation"),
                         collective="send_recv", gpus=2, message_bytes=msg, comm_bytes=msg,
                         definition=f"send_recv_h{hidden}",
                         attrs=(("pp_stage", ctx.stage_ends.index(layer)), ("stage_gpus", ctx.stage_gpus)))


def _layers(spec: ModelSpec, layers: Sequence[int] | None) -> tuple[int, ...]:
    if layers is None:
        return tuple(range(spec.num_layers))
    chosen = tuple(layers)
    for layer in chosen:
        if not 0 <= layer < spec.num_layers:
            raise GraphError(f"layers: layer {layer} out of range 0..{spec.num_layers - 1}")
    return chosen


def build_layer_graph(spec: ModelSpec, fwd: ForwardPass, workload: Workload, layer: int = 0,
                      attention: AttentionView = "fused", *,
                      mla_form: MLAForm | None = None) -> OpGraph:
    """The ops of one decoder layer for one forward pass; its input tensor is ``layers.N:in``.

    ``attention="fused"`` gives one ``{attn}.attn`` op (KV-cache read included); ``"unfused"``
    the ``kv_read``/``qk_matmul``/``softmax_*``/``pv_matmul`` steps. ``mla_form`` (MLA models
    only): ``"absorbed"`` or ``"naive"``; default absorbed for decode, naive otherwise.
    """
    _check_options(spec, attention, mla_form)
    _layers(spec, (layer,))
    return _cached_layer_graph(spec, fwd, workload, layer, attention, mla_form)


@lru_cache(maxsize=32)
def _cached_layer_graph(spec: ModelSpec, fwd: ForwardPass, workload: Workload, layer: int,
                        attention: AttentionView, mla_form: MLAForm | None) -> OpGraph:
    ctx = pass_context(spec, fwd, workload)
    ops, _ = _layer_ops(ctx, layer, f"{layer_prefix(spec.modules, layer)[:-1]}:in", attention, mla_form)
    return OpGraph(ops=tuple(ops), name=f"{spec.name}:{fwd.label}:layer{layer}")


def build_model_graph(spec: ModelSpec, fwd: ForwardPass, workload: Workload,
                      attention: AttentionView = "fused", layers: Sequence[int] | None = None,
                      *, logits: LogitsMode = "last", mla_form: MLAForm | None = None) -> OpGraph:
    """Embedding, the decoder layers (all, or ``layers`` in the order given), final norm, lm_head, sampling.

    ``logits="last"`` (default) computes lm_head for the last token of each sequence only, as
    serving engines do; ``"all"`` for every token, the HF ``forward`` default. The graph starts from
    the ``input_ids`` tensor (and ``position_ids`` for learned positions).
    """
    _check_options(spec, attention, mla_form, logits)
    chosen = _layers(spec, layers)
    return _cached_model_graph(spec, fwd, workload, attention, chosen, logits, mla_form)


@lru_cache(maxsize=64)
def _cached_model_graph(spec: ModelSpec, fwd: ForwardPass, workload: Workload, attention: AttentionView,
                        layers: tuple[int, ...], logits: LogitsMode, mla_form: MLAForm | None) -> OpGraph:
    ctx = pass_context(spec, fwd, workload)
    check = _GraphCheck()
    ops = _model_ops(ctx, layers, attention, mla_form, logits, "", INPUT_IDS, check)
    return check.graph(_Ops(ops), f"{spec.name}:{fwd.label}")


def build_steps_graph(spec: ModelSpec, workload: Workload, steps: int,
                      attention: AttentionView = "fused", all_layers: bool = True, *,
                      logits: LogitsMode = "last", mla_form: MLAForm | None = None) -> OpGraph:
    """``steps`` consecutive decode passes with a growing KV cache, as one graph.

    Step ``t`` decodes ``workload.batch`` sequences at cached length ``start + t``, where
    ``start`` is ``workload.context`` for decode/chunked workloads and ``prompt_len`` for
    prefill/generate ones. Op and activation names are prefixed ``decode_step_{t}.``; step ``t+1``'s
    embedding reads step ``t``'s sampled tokens. ``all_layers=False`` keeps only layer 0.
    """
    if steps < 1:
        raise GraphError(f"steps: must be >= 1 (got {steps})")
    _check_options(spec, attention, mla_form, logits)
    start = workload.context if workload.phase in ("decode", "chunked") else workload.prompt_len
    start = max(start, 1)
    layers = tuple(range(spec.num_layers)) if all_layers else (0,)
    ops: list[Op | _Instance] = []
    ids = INPUT_IDS
    check = _GraphCheck()
    for t in range(steps):
        fwd = workload.decode_pass(start + t)
        ctx = pass_context(spec, fwd, workload)
        step = f"{step_range(t)}."
        ops += _model_ops(ctx, layers, attention, mla_form, logits, step, ids, check)
        ids = f"{step}sampling:out"
    return check.graph(_Ops(ops), f"{spec.name}:decode_steps{steps}")
