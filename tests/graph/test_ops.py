"""OpGraph validation and the fast op factory."""

from __future__ import annotations

import dataclasses

import pytest

from layerscope.errors import GraphError
from layerscope.graph.ops import GemmShape, Op, OpGraph, TensorSpec, make_op, relabel_op
from layerscope.units import DType


def t(name: str, role: str = "activation") -> TensorSpec:
    return TensorSpec(name, (1, 4), DType.BF16, role)  # type: ignore[arg-type]


def mk(name: str, ins: tuple[str, ...], outs: tuple[str, ...]) -> Op:
    return Op(name=name, kind="gemm", module=name, layer=0, inputs=tuple(t(x) for x in ins),
              outputs=tuple(t(x) for x in outs), flops=1)


def test_make_op_equals_constructor() -> None:
    fields = [f.name for f in dataclasses.fields(Op)]
    values = dict(name="a", kind="gemm", module="a", layer=3, inputs=(t("x"),), outputs=(t("y"),), flops=10,
                  weight_bytes=1, act_read_bytes=2, act_write_bytes=3, kv_read_bytes=4, kv_write_bytes=5,
                  matrix_class="Ma_Mw", definition="gemm_n4_k4", gemm=GemmShape(1, 4, 4), multiplicity=1,
                  attrs=(("k", 1),), comm_bytes=7)
    fast = make_op(*(values[f] for f in fields))
    slow = Op(**values)  # type: ignore[arg-type]
    assert type(fast) is Op and fast == slow and hash(fast) == hash(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.flops = 3  # type: ignore[misc]
    assert fast.attr("k") == 1 and fast.attr("missing", 0) == 0


def test_make_op_takes_keywords_and_op_defaults() -> None:
    kw = dict(name="a", kind="norm", module="a", layer=None, inputs=(t("x"),), outputs=(t("y"),), flops=4,
              act_read_bytes=8, matrix_class="Reduction")
    fast, slow = make_op(**kw), Op(**kw)  # type: ignore[arg-type]
    assert type(fast) is Op and fast == slow and repr(fast) == repr(slow)


def test_relabel_op_equals_replace() -> None:
    op = Op(name="a", kind="gemm", module="m", layer=0, inputs=(t("x"), t("w", "weight")), outputs=(t("y"),),
            flops=10, weight_bytes=1, gemm=GemmShape(1, 4, 4), attrs=(("k", 1),), comm_bytes=3)
    new = relabel_op(op, "b", "n", 7, (t("x2"),), (t("y2"),))
    assert type(new) is Op and new == dataclasses.replace(op, name="b", module="n", layer=7, inputs=(t("x2"),),
                                                          outputs=(t("y2"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.name = "c"  # type: ignore[misc]


def test_prevalidated_graph_equals_validated() -> None:
    ops = (mk("a", ("x",), ("y",)), mk("b", ("y", "x"), ("z",)), mk("c", ("y", "z"), ("w",)))
    fast = OpGraph._prevalidated(ops, "g", frozenset({"x"}))
    slow = OpGraph(ops=ops, name="g")
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.dependencies == slow.dependencies and fast.index == slow.index


def test_graph_derives_dependencies_and_inputs() -> None:
    g = OpGraph(ops=(mk("a", ("x",), ("y",)), mk("b", ("y", "x"), ("z",)), mk("c", ("y", "z"), ("w",))))
    assert g.dependencies == ((), (0,), (0, 1))
    assert g.graph_inputs == frozenset({"x"})


def test_graph_rejects_tensor_produced_twice() -> None:
    with pytest.raises(GraphError, match="produced twice"):
        OpGraph(ops=(mk("a", (), ("y",)), mk("b", (), ("y",))))


def test_graph_rejects_cycle() -> None:
    with pytest.raises(GraphError, match="cycle"):
        OpGraph(ops=(mk("a", ("z",), ("y",)), mk("b", ("y",), ("z",))))
    with pytest.raises(GraphError, match="cycle"):
        OpGraph(ops=(mk("a", ("y",), ("y",)),))


def test_graph_rejects_duplicate_names() -> None:
    with pytest.raises(GraphError, match="appears twice"):
        OpGraph(ops=(mk("a", (), ("y",)), mk("a", (), ("z",))))


def test_weights_are_not_edges() -> None:
    w = t("w", "weight")
    a = Op(name="a", kind="gemm", module="a", layer=0, inputs=(w,), outputs=(t("y"),), flops=1)
    b = Op(name="b", kind="gemm", module="b", layer=0, inputs=(w, t("y")), outputs=(t("z"),), flops=1)
    g = OpGraph(ops=(a, b))
    assert g.graph_inputs == frozenset() and g.dependencies == ((), (0,))
