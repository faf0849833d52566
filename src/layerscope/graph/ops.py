"""Operators, tensors and the operator graph.

An :class:`Op` is one operator instance of one forward pass, named after the HF module that runs
it (``layers.0.self_attn.q_proj``; ops that are not modules of their own get a suffix under their
module, e.g. ``layers.0.self_attn.rope``). Its dependencies are not stored: they follow from
named tensors (an op depends on the producer of each of its inputs), and :class:`OpGraph`
derives and validates them.

Bytes are split by what moves: weights, activations and KV cache, read and written. FLOPs count
a multiply-add as 2 FLOPs.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cached_property
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar, overload

import numpy as np

from layerscope.errors import GraphError
from layerscope.units import DType

_T = TypeVar("_T")

TensorRole = Literal["weight", "activation", "kv_cache"]

#: Op kinds, the ``cat`` of trace slices and the rows of the by-kind breakdown.
OP_KINDS: tuple[str, ...] = (
    "embedding",
    "norm",
    "gemm",
    "rope",
    "kv_write",
    "kv_read",
    "attention",
    "qk_matmul",
    "softmax_max",
    "softmax_exp",
    "softmax_norm",
    "pv_matmul",
    "residual_add",
    "activation",
    "router",
    "topk",
    "moe_experts",
    "sampling",
    "communication",
)

#: Matrix classes of hardware studies: M = matrix, V = vector; a = activation, w = weight,
#: qa = query/attention operand, KVCache = cache traffic. ``Ma_Mw`` is a GEMM of activations by
#: weights, ``Va_Mw`` a GEMV (decode), ``Ma_Ma`` activation-by-activation (prefill attention),
#: ``Ma_Mqa``/``Va_Mqa`` attention against cached K/V, ``Elementwise`` and ``Reduction`` the rest.
MATRIX_CLASSES: tuple[str, ...] = (
    "Ma_Mw",
    "Va_Mw",
    "Ma_Ma",
    "Ma_Mqa",
    "Va_Mqa",
    "KVCache",
    "Elementwise",
    "Reduction",
    "Lookup",
    "Collective",
)


class TensorSpec(NamedTuple):
    """A named tensor: ``shape`` in elements, ``dtype``, and whether it is a weight, activation or cache."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    role: TensorRole = "activation"

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Storage bytes, rounded up for 4-bit types."""
        return -(-self.numel * self.dtype.bits // 8)


class GemmShape(NamedTuple):
    """``batch`` independent (m x k) @ (k x n) products; used by the tiling cost models."""

    m: int
    n: int
    k: int
    batch: int = 1


@dataclass(frozen=True, slots=True)
class Op:
    """One operator instance; all sizes for the whole pass (all sequences of the batch)."""

    name: str
    """Module path (+ suffix for non-module ops): ``layers.0.self_attn.q_proj``."""
    kind: str
    """One of :data:`OP_KINDS`."""
    module: str
    """The HF module that runs this op (``layers.0.self_attn``); equals ``name`` for module ops."""
    layer: int | None
    """Decoder layer index, or ``None`` for embedding / final norm / lm_head / sampling."""
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    flops: int
    weight_bytes: int = 0
    """Weight bytes read."""
    act_read_bytes: int = 0
    act_write_bytes: int = 0
    kv_read_bytes: int = 0
    kv_write_bytes: int = 0
    matrix_class: str = "Elementwise"
    definition: str = ""
    """flashinfer-bench-style definition name (``gemm_n2048_k2048``)."""
    gemm: GemmShape | None = None
    """The matrix product this op performs, if it is one."""
    multiplicity: int = 1
    """How many identical instances this op stands for (1 unless a builder folds them)."""
    attrs: tuple[tuple[str, object], ...] = ()
    """Extra facts for traces and records (``("tokens_per_expert", 3.2)``)."""
    comm_bytes: int = 0
    """Bytes each device sends over the interconnect (``communication`` ops; 0 otherwise)."""

    def attr(self, key: str, default: object = None) -> object:
        """The value of ``key`` in :attr:`attrs`, or ``default``."""
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def read_bytes(self) -> int:
        return self.weight_bytes + self.act_read_bytes + self.kv_read_bytes

    @property
    def write_bytes(self) -> int:
        return self.act_write_bytes + self.kv_write_bytes

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.write_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved to or from memory."""
        return self.flops / self.total_bytes if self.total_bytes else float("inf")


def picker(idx: Sequence[int]) -> Callable[[Sequence[_T]], Sequence[_T]]:
    """A getter of the items at ``idx`` of a sequence, in one C call: a tuple of them from a tuple (for one
    index or none, a slice: ``itemgetter`` of one index gives the item itself, and of none is an error)."""
    if len(idx) == 1:
        return itemgetter(slice(idx[0], idx[0] + 1))
    if not idx:
        return itemgetter(slice(0, 0))
    return itemgetter(*idx)


class DeferredOps(Sequence[Op]):
    """A graph's ops, made on first use from a builder's record of them (:meth:`_make`), which can also say
    without making them which op each one copies but for its names (:meth:`layout`).

    Why: a model graph is mostly copies of a few template layers under other names, and what a cost model
    needs of an op (kind, FLOPs, bytes, shapes, dtypes, attributes) is its template's; so a graph builder may
    defer its ~500 ops (an 8B decode pass) and an estimate compute features once per template op
    (:func:`layerscope.cost.features.op_features`). Anything that reads the ops gets them made, once.
    """

    __slots__ = ("_count", "_ops")

    def __init__(self, count: int) -> None:
        self._count = count
        self._ops: tuple[Op, ...] | None = None

    @property
    def ops(self) -> tuple[Op, ...]:
        """The ops, made on the first call."""
        ops = self._ops
        if ops is None:
            ops = self._ops = self._make()
            assert len(ops) == self._count
        return ops

    @abstractmethod
    def _make(self) -> tuple[Op, ...]:
        """The ops (called once)."""

    @abstractmethod
    def layout(self) -> tuple[tuple[Op, ...], np.ndarray]:
        """``(reps, rep_of)``: distinct ops, and per op of the graph the index in ``reps`` of the op it equals
        in every field but ``name``, ``module``, ``layer`` and its tensors' names."""

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Op: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Op, ...]: ...

    def __getitem__(self, index: int | slice) -> Op | tuple[Op, ...]:
        return self.ops[index]

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)


@dataclass(frozen=True)
class OpGraph:
    """A validated DAG of ops in program order; edges derived from named tensors."""

    ops: tuple[Op, ...]
    name: str = "graph"
    graph_inputs: frozenset[str] = field(default_factory=frozenset)
    """Tensor names consumed but produced by no op (token ids, the KV cache, weights)."""

    def __post_init__(self) -> None:
        # One pass over the ops in program order: every non-weight input must already have a
        # producer (program order is a topological order, so a later producer means a cycle).
        producers: dict[str, int] = {}
        missing: set[str] = set()
        ops = self.ops
        for i, op in enumerate(ops):
            for name, _shape, _dtype, role in op.inputs:
                if role != "weight" and name not in producers:
                    missing.add(name)
            for name, _shape, _dtype, role in op.outputs:
                if role == "weight":
                    continue
                if name in producers:
                    raise GraphError(
                        f"tensor {name!r} is produced twice: by {ops[producers[name]].name!r} and {op.name!r}"
                    )
                producers[name] = i
        if len({op.name for op in ops}) != len(ops):
            seen: set[str] = set()
            for op in ops:
                if op.name in seen:
                    raise GraphError(f"op name {op.name!r} appears twice")
                seen.add(op.name)
        for name in missing & producers.keys():
            # Read before (or by) its producer: a cycle or a misordered graph.
            src = producers[name]
            reader = next(op for op in ops if any(t.name == name for t in op.inputs))
            raise GraphError(
                f"op {reader.name!r} reads {name!r} before its producer {ops[src].name!r} runs (cycle)"
            )
        object.__setattr__(self, "graph_inputs", frozenset(missing))
        object.__setattr__(self, "_producers", producers)

    @classmethod
    def _prevalidated(cls, ops: tuple[Op, ...] | DeferredOps, name: str, graph_inputs: frozenset[str]) -> OpGraph:
        """The graph of ``ops`` without :meth:`__post_init__`'s pass over every tensor, for a builder
        that has established what that pass would: op names and produced tensor names unique, no tensor
        read before its producer, ``graph_inputs`` the tensors read before (and never) produced.

        Why: the graph builders instantiate most ops from templates checked once, so they can check a
        whole model's graph per layer instead of per tensor (:mod:`layerscope.graph.builder`). The
        result equals ``OpGraph(ops=ops, name=name)``; only the producers' index is derived later, when
        :attr:`dependencies` first needs it. With :class:`DeferredOps`, :attr:`ops` is made on first
        access (the same tuple of ops)."""
        graph = object.__new__(cls)
        if isinstance(ops, DeferredOps):
            object.__setattr__(graph, "_deferred", ops)
        else:
            object.__setattr__(graph, "ops", ops)
        object.__setattr__(graph, "name", name)
        object.__setattr__(graph, "graph_inputs", graph_inputs)
        return graph

    if not TYPE_CHECKING:  # hidden from mypy, which would otherwise accept any attribute of a graph

        def __getattr__(self, attr: str) -> Any:
            # Called only for attributes not found: ``ops`` of a graph of deferred ops, before its first use.
            deferred = self.__dict__.get("_deferred") if attr == "ops" else None
            if deferred is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
            ops = deferred.ops
            object.__setattr__(self, "ops", ops)
            return ops

    def __getstate__(self) -> dict[str, Any]:
        """For pickle and copy: the ops made (a builder's record of them need not pickle), derived data dropped."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("_deferred", "_op_features")}
        state["ops"] = self.ops
        return state

    def op_layout(self) -> tuple[Sequence[Op], tuple[Op, ...], np.ndarray | None]:
        """``(ops, reps, rep_of)``: the ops (a :class:`DeferredOps` not made yet, if the builder deferred them),
        and ``reps``/``rep_of`` as :meth:`DeferredOps.layout` gives them (``reps`` the ops themselves and
        ``rep_of`` None when they were not deferred)."""
        deferred = self.__dict__.get("_deferred")
        if deferred is None:
            return self.ops, self.ops, None
        reps, rep_of = deferred.layout()
        return deferred, reps, rep_of

    @cached_property
    def _producers(self) -> dict[str, int]:
        """Tensor name to the index of the op producing it (weights excluded); set by :meth:`__post_init__`,
        computed here for a graph made by :meth:`_prevalidated`."""
        return {name: i for i, op in enumerate(self.ops) for name, _shape, _dtype, role in op.outputs
                if role != "weight"}

    def __len__(self) -> int:
        deferred = self.__dict__.get("_deferred")
        return len(self.ops) if deferred is None else len(deferred)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    @cached_property
    def dependencies(self) -> tuple[tuple[int, ...], ...]:
        """For each op, the sorted indices of the ops producing its inputs."""
        producers = self._producers
        deps = []
        for op in self.ops:
            d = {producers[t.name] for t in op.inputs if t.role != "weight" and t.name in producers}
            deps.append(tuple(sorted(d)))
        return tuple(deps)

    @cached_property
    def index(self) -> dict[str, int]:
        """Op name to position."""
        return {op.name: i for i, op in enumerate(self.ops)}

    def column(self, attr: str, dtype: type = np.float64) -> np.ndarray:
        """One numeric field of every op as an array (``flops``, ``weight_bytes`` …)."""
        return np.fromiter((getattr(op, attr) for op in self.ops), dtype=dtype, count=len(self.ops))

    @classmethod
    def concat(cls, graphs: Sequence[OpGraph], name: str) -> OpGraph:
        """Ops of several graphs in sequence (e.g. decode steps); names must already be unique."""
        return cls(ops=tuple(op for g in graphs for op in g.ops), name=name)


# Why generated code: builders create every op of every graph (one per pass and per decode breakpoint in
# ``estimate``, one per sample point in ``sweep``), and the frozen dataclass ``__init__`` (one
# ``object.__setattr__`` per field) is most of an op's construction. Measured (2-core dev VM, Python 3.11; an
# A/B swapping ``builder.make_op`` for ``Op``, best of 15 interleaved rounds): 0.85 µs an op against 3.1 µs; a
# graph build 31-45% faster and a whole ``estimate`` 16-27% (llama-3.2-1b and qwen3-30b-a3b, prefill 512 and
# generate 512+128, h100-sxm). ``relabel_op`` is the builders' per-layer copy of a template op: five arguments
# instead of 18 (the other fields read from the template), 15 ops of a Llama layer in 5.0 µs against 7.6 µs
# with ``make_op`` (same VM, best of 30).
def _op_factories() -> tuple[Callable[..., Op], Callable[..., Op]]:
    """Constructors of :class:`Op` without the frozen dataclass ``__init__`` (which sets each field
    through ``object.__setattr__``): ``make_op``, taking the arguments ``Op(...)`` takes, and
    ``relabel_op``, a copy of an op under new names (see :data:`relabel_op`).

    They fill a layout-identical mutable slots class and re-class the object to :class:`Op`
    (CPython allows ``__class__`` assignment between classes with the same slots), so the result
    is indistinguishable from ``Op(...)``. Fall back to ``Op`` and :func:`dataclasses.replace`
    where that is not allowed.
    """
    slots = Op.__slots__
    namespace: dict[str, object] = {"_new": object.__new__, "_Op": Op}
    params = []
    for f in fields(Op):  # Op's own defaults, so that keyword calls may leave fields out as with Op(...)
        if f.default_factory is not MISSING:
            return Op, _relabel_replace
        if f.default is MISSING:
            params.append(f.name)
        else:
            namespace[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
    body = "".join(f"    o.{n} = {n}\n" for n in slots)
    copied = "".join(f"    o.{n} = {n if n in _RELABELLED else f'op.{n}'}\n" for n in slots)
    src = (f"class _MutableOp:\n    __slots__ = {tuple(slots)!r}\n"
           f"def make_op({', '.join(params)}):\n    o = _new(_MutableOp)\n{body}    o.__class__ = _Op\n"
           f"    return o\n"
           f"def relabel_op(op, {', '.join(_RELABELLED)}):\n    o = _new(_MutableOp)\n{copied}"
           f"    o.__class__ = _Op\n    return o\n")
    exec(src, namespace)  # generated from Op's own slots, so it follows any field added to Op
    factory, relabel = namespace["make_op"], namespace["relabel_op"]
    assert callable(factory) and callable(relabel)
    try:
        probe = factory(*(None for _ in slots))
    except TypeError:
        return Op, _relabel_replace
    return (factory, relabel) if type(probe) is Op else (Op, _relabel_replace)


#: The fields :data:`relabel_op` takes, in its argument order.
_RELABELLED = ("name", "module", "layer", "inputs", "outputs")


def _relabel_replace(op: Op, name: str, module: str, layer: int | None, inputs: tuple[TensorSpec, ...],
                     outputs: tuple[TensorSpec, ...]) -> Op:
    return replace(op, name=name, module=module, layer=layer, inputs=inputs, outputs=outputs)


_FACTORIES = _op_factories()
make_op: Callable[..., Op] = _FACTORIES[0]
"""``make_op(name, kind, module, layer, inputs, outputs, flops, weight_bytes, act_read_bytes,
act_write_bytes, kv_read_bytes, kv_write_bytes, matrix_class, definition, gemm, multiplicity,
attrs, comm_bytes)``: the same :class:`Op` as ``Op(...)`` with the same arguments (positional or
keyword, with :class:`Op`'s defaults), several times faster; for builders that create many ops."""
relabel_op: Callable[..., Op] = _FACTORIES[1]
"""``relabel_op(op, name, module, layer, inputs, outputs)``: ``op`` with those five fields replaced, the
same :class:`Op` as ``dataclasses.replace(op, name=name, ...)``, as fast as :data:`make_op`; for
builders that copy a template's ops under other names."""
