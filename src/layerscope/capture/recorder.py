"""Operator workload recording of a running HF model: forward pre-hooks turn module calls into records.

Each module is classified once, by type, into a role (:data:`ROLES`): linear layers (``nn.Linear``
and HF's ``Conv1D``), MoE routers, RMSNorm/LayerNorm, embeddings, activation modules, attention
modules (which also run RoPE when they receive ``position_embeddings``) and fused MoE expert
modules. A role's handler reads the op's axes from the module's attributes and the call's
tensors and returns :class:`~layerscope.records.schema.OpCall`\\ s, named by the same op-type
registry the graph-derived records use, so the two sources meet by definition name.

* Names and layers come from :func:`layerscope.capture.annotate.module_op_name`, as for the trace
  annotations; a module's layer is the index after the decoder stack's container (``layers.3.``).
* Phase: a forward pass of the top-level model is ``decode`` when it brings one token per
  sequence, ``prefill`` otherwise (how the graph names attention kernels).
* Modules inside a fused MoE expert module (its ``act_fn``) are part of the expert op.
* Hooks read shapes, dtypes and module attributes only and return ``None``: they never change
  a value, so outputs are bit-identical with and without recording.

torch is imported only inside functions.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from layerscope.capture.annotate import module_op_name
from layerscope.errors import LayerscopeError
from layerscope.graph.attention import kv_tokens_read
from layerscope.model.spec import ModelSpec
from layerscope.records.schema import OpCall, RecordSet, dtype_name

logger = logging.getLogger(__name__)

#: Recorders that want the runner's sampling calls (see :func:`note_sampling`).
_ACTIVE: list[Recorder] = []

_GENERIC_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)(?:\.|$)")


def _dt(t: Any) -> str:
    return dtype_name(str(t.dtype))


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any], *names: str) -> Any:
    import torch

    for n in names:
        v = kwargs.get(n)
        if isinstance(v, torch.Tensor):
            return v
    for v in args:
        if isinstance(v, torch.Tensor):
            return v
    return None


class _Ctx:
    """What a handler needs besides the call: the model's spec (if parsed) and the MoE impl tag."""

    def __init__(self, spec: ModelSpec | None) -> None:
        self.spec = spec
        self.impl = spec.moe.impl if spec is not None and spec.moe is not None else "fused"


def _by_role(act: Any, weight: Any = None) -> dict[str, str]:
    out = {"act": _dt(act)}
    out["weight"] = _dt(weight) if weight is not None else out["act"]
    return out


def _linear(module: Any, ctx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[OpCall]:
    x = _first_tensor(args, kwargs, "input", "x", "hidden_states")
    w = module.weight
    if type(module).__name__ == "Conv1D":  # HF's transposed linear: weight [in, out]
        k, n = int(w.shape[0]), int(w.shape[1])
    else:
        n, k = int(w.shape[0]), int(w.shape[1])
    m = x.numel() // k
    by_role = _by_role(x, w)
    return [OpCall("gemm", "gemm", {"N": n, "K": k}, {"M": m}, by_role,
                   shapes={"A": (m, k), "B": (n, k)}, dtypes={"A": _dt(x), "B": _dt(w)})]


def _router(module: Any, ctx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[OpCall]:
    x = _first_tensor(args, kwargs, "hidden_states")
    e, h = (int(d) for d in module.weight.shape)
    rows = x.numel() // h
    k = int(getattr(module, "top_k", 0) or (ctx.spec.moe.num_experts_per_tok if ctx.spec and ctx.spec.moe else 1))
    by_role = _by_role(x, module.weight)
    return [
        OpCall("gemm", "moe_router", {"N": e, "K": h}, {"M": rows}, by_role, shapes={"A": (rows, h), "B": (e, h)},
               dtypes={"A": _dt(x), "B": _dt(module.weight)}),
        OpCall("topk", "moe_topk", {"dim": e, "k": k}, {"batch_size": rows}, by_role),
    ]


def _norm(module: Any, ctx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[OpCall]:
    x = _first_tensor(args, kwargs, "hidden_states", "input", "x")
    w = getattr(module, "weight", None)
    width = int(w.shape[-1]) if w is not None else int(x.shape[-1])
    kind = "layernorm" if "layernorm" in type(module).__name__.lower() else "rmsnorm"
    rows = x.numel() // width
    dtypes = {"hidden_states": _dt(x)}
    if w is not None:
        dtypes["weight"] = _dt(w)
    return [OpCall(kind, "norm", {"hidden_size": width}, {"batch_size": rows}, _by_role(x),
                   shapes={"hidden_states": (rows, width)}, dtypes=dtypes)]


def _embedding(module: Any, ctx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[OpCall]:
    ids = _first_tensor(args, kwargs, "input", "input_ids")
    w = module.weight
    v, d = int(w.shape[0]), int(w.shape[1])
    by_role = {"act": _dt(w), "weight": _dt(w)}
    return [OpCall("embedding", "embedding", {"vocab_size": v, "hidden_size": d}, {"num_tokens": ids.numel()},
                   by_role, shapes={"input_ids": (ids.numel(),)}, dtypes={"input_ids": _dt(ids), "weight": _dt(w)})]


def _activation_family(module: Any) -> str:
    name = type(module).__name__.lower()
    if "gelu" in name:
        return "gelu"
    if "relu" in name:
        return "relu"
    return "silu"


def _activation(module: Any, ctx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[OpCall]:
    x = _first_tensor(args, kwargs, "input", "x")
    width = int(x.shape[-1])
    rows = x.numel() // width
    return [OpCall(_activation_family(module), "activation", {"hidden_size": width}, {"num_tokens": rows},
                   _by_role(x), shapes={"x": (rows, width)}, dtypes={"x": _dt(x)})]


#: Keywords under which an attention module receives the KV cache: ``cache`` in transformers 5,
#: ``past_key_values`` / ``past_key_value`` in 4.x.
ATTENTION_CACHE_KWARGS: tuple[str, ...] = ("cache", "past_key_values", "past_key_value")


def _cached_tokens(module: Any, kwargs: dict[str, Any]) -> int:
    """Tokens already in the layer's KV cache when the attention module is called."""
    cache = next((kwargs[k] for k in ATTENTION_CACHE_KWARGS if kwargs.get(k) is not None), None)
    layer_idx = getattr(module, "layer_idx", None)
    if cache is None or layer_idx is None or not hasattr(cache, "get_seq_length"):
        return 0
    return int(cache.get_seq_length(layer_idx))


def _attention(module: Any, ctx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[OpCall]:
    x = _first_tensor(args, kwargs, "hidden_states")
    b, s = int(x.shape[0]), int(x.shape[1])
    cached = _cached_tokens(module, kwargs)
    window = getattr(module, "sliding_window", None)
    kv = b * kv_tokens_read(s, cached, window if isinstance(window, int) and window > 0 else None)
    config = getattr(module, "config", None)
    heads = int(getattr(config, "num_attention_heads", 0) or module.num_heads)
    var = {"batch_size": b, "num_qo_tokens": b * s, "num_kv_tokens": kv}
    by_role = _by_role(x)
    calls: list[OpCall] = []
    pos = kwargs.get("position_embeddings")
    if pos is None and len(args) > 1 and isinstance(args[1], tuple):
        pos = args[1]
    if hasattr(module, "kv_lora_rank"):  # MLA as HF runs it: K/V expanded from the latent (naive form)
        qk, vo, rope_d = int(module.qk_head_dim), int(module.v_head_dim), int(module.qk_rope_head_dim)
        attn = OpCall("mla_ragged", "attention", {"num_qo_heads": heads, "qk_head_dim": qk, "v_head_dim": vo}, var,
                      by_role)
        rope_kv = 1
    else:
        kv_heads = int(getattr(config, "num_key_value_heads", 0) or getattr(module, "num_key_value_heads", 0) or heads)
        head_dim = int(module.head_dim)
        rope_d = ctx.spec.rotary_dim if ctx.spec is not None and ctx.spec.rotary_dim else head_dim
        op = "gqa_paged" if s == 1 else "gqa_ragged"
        attn = OpCall(op, "attention", {"num_qo_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim},
                      var, by_role)
        rope_kv = kv_heads
    if pos is not None:
        calls.append(OpCall("rope", "rope", {"num_qo_heads": heads, "rotary_dim": rope_d},
                            {"num_tokens": b * s, "num_kv_heads": rope_kv}, by_role))
    calls.append(attn)
    return calls


def _experts(module: Any, ctx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[OpCall]:
    x = _first_tensor(args, kwargs, "hidden_states")
    ids: Any = args[1] if len(args) > 1 else kwargs.get("top_k_index", kwargs.get("router_indices"))
    h = int(x.shape[-1])
    rows = x.numel() // h
    k = int(ids.shape[-1])
    width = int(getattr(module, "intermediate_dim", 0) or getattr(module, "intermediate_size", 0)
                or getattr(module, "expert_dim", 0))
    params: dict[str, int | str] = {"impl": ctx.impl, "num_experts": int(module.num_experts), "hidden_size": h,
                                    "intermediate_size": width, "top_k": k}
    return [OpCall("moe", "moe_experts", params, {"num_tokens": rows}, _by_role(x, module.gate_up_proj),
                   shapes={"hidden_states": (rows, h), "topk_ids": (rows, k)},
                   dtypes={"hidden_states": _dt(x), "topk_ids": _dt(ids)})]


Handler = Callable[[Any, _Ctx, tuple[Any, ...], dict[str, Any]], list[OpCall]]

#: Role -> handler; the roles a module can take (see :func:`classify`).
ROLES: dict[str, Handler] = {
    "linear": _linear,
    "router": _router,
    "norm": _norm,
    "embedding": _embedding,
    "activation": _activation,
    "attention": _attention,
    "experts": _experts,
}


def classify(module: Any) -> str | None:
    """The role of ``module`` (a key of :data:`ROLES`), or ``None`` when its calls are not operators."""
    import torch

    cls = type(module).__name__
    if isinstance(module, torch.nn.Embedding):
        return "embedding"
    if isinstance(module, torch.nn.Linear) or cls == "Conv1D":
        return "linear"
    if cls.endswith("Router") and getattr(module, "weight", None) is not None:
        return "router"
    if cls.endswith("RMSNorm") or isinstance(module, torch.nn.LayerNorm):
        return "norm"
    if cls.endswith("Experts") and hasattr(module, "num_experts") and hasattr(module, "gate_up_proj"):
        return "experts"
    if cls.endswith("Attention") and (hasattr(module, "head_dim") or hasattr(module, "kv_lora_rank")):
        return "attention"
    if (isinstance(module, (torch.nn.SiLU, torch.nn.GELU, torch.nn.ReLU))
            or type(module).__module__ == "transformers.activations"):
        return "activation"
    return None


def _model_spec(model: Any) -> ModelSpec | None:
    from layerscope.model import model_spec_from_dict

    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        return None
    try:
        return model_spec_from_dict(config.to_dict(), str(getattr(config, "_name_or_path", "") or type(model).__name__))
    except LayerscopeError as exc:
        logger.info("no ModelSpec for %s (%s); layers found by generic names", type(model).__name__, exc)
        return None


class Recorder:
    """Records the operator calls of HF models into a :class:`RecordSet`.

    ``attach(model)`` hooks one model's modules; ``watch_all()`` hooks every HF model (a module
    with a ``config``) the first time it is called. ``close()`` removes every hook.
    """

    def __init__(self, records: RecordSet | None = None, *, source: str = "trace") -> None:
        self.records = records if records is not None else RecordSet()
        self.records.meta.setdefault("source", source)
        self.phase = "prefill"
        self._pending = False
        self._inside = 0
        self._experts_depth = 0
        self._attached: set[int] = set()
        self._handles: list[Any] = []

    # -- hooks ---------------------------------------------------------------------------------

    def attach(self, model: Any, spec: ModelSpec | None = None) -> None:
        """Hook every module of ``model`` (an HF causal LM); ``spec`` defaults to one parsed from its config."""
        import torch

        if id(model) in self._attached:
            return
        self._attached.add(id(model))
        spec = spec if spec is not None else _model_spec(model)
        ctx = _Ctx(spec)
        root = spec.modules.root if spec is not None else None
        layer_re = (re.compile(rf"^{re.escape(spec.modules.layers)}\.(\d+)(?:\.|$)") if spec is not None
                    else _GENERIC_LAYER)
        self._set_meta(model, spec)
        containers = (torch.nn.ModuleList, torch.nn.ModuleDict)
        for path, module in model.named_modules():
            if path == "":
                self._handles.append(module.register_forward_pre_hook(self._root_pre, with_kwargs=True))
                self._handles.append(module.register_forward_hook(self._root_post, always_call=True))
                continue
            if isinstance(module, containers):
                continue
            role = classify(module)
            if role is None:
                continue
            name = module_op_name(path, root)
            match = layer_re.search(name)
            layer = int(match.group(1)) if match else None
            self._handles.append(module.register_forward_pre_hook(
                self._make_pre(ROLES[role], ctx, layer, role == "experts"), with_kwargs=True))
            if role == "experts":
                self._handles.append(module.register_forward_hook(self._experts_post, always_call=True))

    def watch_all(self) -> None:
        """Attach to every HF model (a module with a ``config``) on its first top-level call."""
        import torch

        self._handles.append(torch.nn.modules.module.register_module_forward_pre_hook(self._discover))

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._attached.clear()
        if self in _ACTIVE:
            _ACTIVE.remove(self)

    def __enter__(self) -> Recorder:
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _set_meta(self, model: Any, spec: ModelSpec | None) -> None:
        meta = self.records.meta
        if "model" in meta:
            return
        config = getattr(model, "config", None)
        meta["model"] = spec.name if spec is not None else type(model).__name__
        meta["model_type"] = str(getattr(config, "model_type", "") or "")
        param = next(iter(model.parameters()), None)
        if param is not None:
            from layerscope.units import parse_dtype

            try:
                meta["dtype"] = parse_dtype(str(param.dtype).removeprefix("torch.")).value
            except LayerscopeError:
                meta["dtype"] = str(param.dtype)
        layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
        if isinstance(layers, int):
            meta["layers"] = layers
        meta.setdefault("mla_form", "naive")  # HF expands K/V from the latent (the graph's naive form)
        meta.setdefault("attention", "fused")
        meta.setdefault("tp", 1)

    def _discover(self, module: Any, args: tuple[Any, ...]) -> None:
        if self._inside or id(module) in self._attached or getattr(module, "config", None) is None:
            return
        if not hasattr(module, "named_modules") or not hasattr(module.config, "to_dict"):
            return
        self.attach(module)
        # This call's own pre-hooks were collected before attach; start its pass here.
        self._start_pass(_first_tensor(args, {}))

    def _start_pass(self, ids: Any) -> None:
        self._inside += 1
        if self._inside > 1:
            return
        if ids is not None and ids.dim() >= 2:
            self._begin(int(ids.shape[1]))
        else:
            self._pending = True  # decided by the first recorded op of the pass

    def _begin(self, seq_len: int) -> None:
        self._pending = False
        self.phase = "decode" if seq_len == 1 else "prefill"
        self.records.add_pass(self.phase)

    def _root_pre(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._start_pass(_first_tensor(args, kwargs, "input_ids", "inputs_embeds"))

    def _root_post(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        self._inside = max(0, self._inside - 1)

    def _experts_post(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        self._experts_depth = max(0, self._experts_depth - 1)

    def _make_pre(self, handler: Handler, ctx: _Ctx, layer: int | None, is_experts: bool) -> Any:
        def pre(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self._experts_depth:
                return
            if is_experts:
                self._experts_depth += 1
            calls = handler(module, ctx, args, kwargs)
            if self._pending:
                x = _first_tensor(args, kwargs, "hidden_states", "input")
                self._begin(int(x.shape[-1]) if x.dim() <= 2 and not x.is_floating_point() else int(x.shape[-2]))
            for call in calls:
                self.records.add(call, layer, self.phase)

        return pre

    def note_sampling(self, logits: Any) -> None:
        """Record a greedy top-1 over ``logits[rows, vocab]`` (the runner's sampling)."""
        rows, vocab = int(logits.shape[0]), int(logits.shape[-1])
        self.records.add(OpCall("topk", "sampling", {"dim": vocab, "k": 1}, {"batch_size": rows},
                                {"act": _dt(logits)}, shapes={"scores": (rows, vocab)},
                                dtypes={"scores": _dt(logits)}), None, self.phase)


def note_sampling(logits: Any) -> None:
    """Tell active recorders about a sampling call (``logits``: [rows, vocab])."""
    for rec in _ACTIVE:
        rec.note_sampling(logits)


@contextmanager
def tracing(out_dir: str | os.PathLike[str], model: Any = None) -> Iterator[Recorder]:
    """Record the operator workloads of every HF model run inside the block (or only ``model``)
    and write them to ``out_dir`` when the block ends."""
    rec = Recorder(source="trace")
    if model is not None:
        rec.attach(model)
    else:
        rec.watch_all()
    try:
        with rec:
            yield rec
    finally:
        rec.records.write(out_dir)
