"""The operator types a record can name: one :class:`OpType` per category, in :data:`REGISTRY`.

An op type fixes how a definition is named from its const axes (``gemm_n{N}_k{K}``), which axes
are const (part of the name) and which vary per call (``M``, ``num_tokens``), the tensors with
axis-named shapes, and a small PyTorch reference (``def run(...)``) the way flashinfer-bench
definitions carry one. Names equal the ``definition`` field :mod:`layerscope.graph` assigns, so
records derived from a graph and recorded from a run meet by name.

Tensor roles set a tensor's dtype in a definition: ``act`` the activation dtype, ``weight`` the
weight dtype, ``index`` always ``int64`` (token and expert ids as torch produces them).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from layerscope.errors import RecordsError
from layerscope.registry import Registry

TensorRole = Literal["act", "weight", "index"]

#: dtype of index tensors (token ids, expert ids) in every definition.
INDEX_DTYPE_NAME = "int64"

#: Coarse operator categories ``verify`` reports on, in report order.
CATEGORIES: tuple[str, ...] = (
    "embedding", "norm", "gemm", "rope", "attention", "softmax", "activation",
    "moe_router", "moe_topk", "moe_experts", "sampling",
)


@dataclass(frozen=True, eq=False)
class TensorDecl:
    """A tensor of an op type: its shape as axis names and its role (which dtype it takes)."""

    shape: tuple[str, ...]
    role: TensorRole = "act"
    description: str = ""


@dataclass(frozen=True, eq=False)
class OpType:
    """One operator category: naming, axes, tensors and a reference implementation."""

    op_type: str
    template: str
    """Definition name from params: ``gemm_n{N}_k{K}``; fields that are not const axes are tags (``impl``)."""
    const_axes: Mapping[str, str]
    """Const axis -> description (values are part of the definition)."""
    var_axes: Mapping[str, str]
    """Var axis -> description (values are part of each workload)."""
    inputs: Mapping[str, TensorDecl]
    outputs: Mapping[str, TensorDecl]
    description: str
    reference: str
    derive: Callable[[Mapping[str, int]], dict[str, int]] | None = None
    """Const axes computed from the others (``gemm1_out_size = 2·intermediate_size``)."""
    tags: tuple[str, ...] = field(default=())

    @property
    def name_fields(self) -> tuple[str, ...]:
        return tuple(f for _, f, _, _ in string.Formatter().parse(self.template) if f)

    def consts(self, params: Mapping[str, int | str]) -> dict[str, int]:
        """The const axis values of ``params`` (derived ones filled in); raises on a missing axis."""
        values: dict[str, int] = {}
        for axis in self.const_axes:
            if axis in params:
                values[axis] = int(params[axis])
        if self.derive is not None:
            values.update({k: v for k, v in self.derive(values).items() if k not in values})
        missing = [a for a in self.const_axes if a not in values]
        if missing:
            raise RecordsError(f"{self.op_type}: missing const axes {', '.join(missing)}")
        return values

    def name(self, params: Mapping[str, int | str]) -> str:
        """The definition name of ``params`` (const axes and tags)."""
        missing = [f for f in self.name_fields if f not in params]
        if missing:
            raise RecordsError(f"{self.op_type}: cannot name a definition without {', '.join(missing)}")
        return self.template.format(**params)

    def shapes(self, values: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        """Concrete shapes of every input from axis values (const and var)."""
        return {n: tuple(values[a] for a in t.shape) for n, t in self.inputs.items()}


_ACT_REF = {
    "silu": "import torch\n\ndef run(x):\n    return torch.nn.functional.silu(x)\n",
    "gelu": "import torch\n\ndef run(x):\n    return torch.nn.functional.gelu(x, approximate=\"tanh\")\n",
    "relu": "import torch\n\ndef run(x):\n    return torch.relu(x)\n",
}

_ATTN_REF = '''import math
import torch

def run(q, k, v):
    # q: [Tq, Hq, D], k: [Tk, Hk, D], v: [Tk, Hk, Dv]; one sequence, causal, queries are the last Tq keys.
    tq, hq, d = q.shape
    tk, hk = k.shape[0], k.shape[1]
    k = k.repeat_interleave(hq // hk, dim=1).float()
    v = v.repeat_interleave(hq // hk, dim=1).float()
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) / math.sqrt(d)
    mask = torch.ones(tq, tk, dtype=torch.bool).tril(diagonal=tk - tq)
    probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)
'''

_GQA_AXES_VAR = {
    "batch_size": "sequences in the pass",
    "num_qo_tokens": "query tokens of all sequences",
    "num_kv_tokens": "key/value tokens attended, summed over the sequences",
}

_GQA_CONST = {"num_qo_heads": "query heads", "num_kv_heads": "key/value heads", "head_dim": "head width"}

_GQA_TENSORS_IN = {
    "q": TensorDecl(("num_qo_tokens", "num_qo_heads", "head_dim")),
    "k": TensorDecl(("num_kv_tokens", "num_kv_heads", "head_dim")),
    "v": TensorDecl(("num_kv_tokens", "num_kv_heads", "head_dim")),
}
_GQA_TENSORS_OUT = {"output": TensorDecl(("num_qo_tokens", "num_qo_heads", "head_dim"))}


def _moe_derive(c: Mapping[str, int]) -> dict[str, int]:
    return {"gemm1_out_size": 2 * c["intermediate_size"]} if "intermediate_size" in c else {}


def _op_types() -> tuple[OpType, ...]:
    ops: list[OpType] = [
        OpType(
            "gemm", "gemm_n{N}_k{K}", {"N": "output features", "K": "input features"}, {"M": "rows (tokens)"},
            {"A": TensorDecl(("M", "K")), "B": TensorDecl(("N", "K"), "weight")},
            {"C": TensorDecl(("M", "N"))},
            "Linear layer C = A @ B^T (bias, if any, not included).",
            "import torch\n\ndef run(A, B):\n    return torch.matmul(A, B.T)\n",
        ),
        OpType(
            "rmsnorm", "rmsnorm_h{hidden_size}", {"hidden_size": "normalized width"}, {"batch_size": "rows"},
            {"hidden_states": TensorDecl(("batch_size", "hidden_size")), "weight": TensorDecl(("hidden_size",))},
            {"output": TensorDecl(("batch_size", "hidden_size"))},
            "RMSNorm y = x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019, arXiv 1910.07467).",
            "import torch\n\ndef run(hidden_states, weight):\n    x = hidden_states.float()\n"
            "    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)\n"
            "    return (x * weight.float()).to(hidden_states.dtype)\n",
        ),
        OpType(
            "layernorm", "layernorm_h{hidden_size}", {"hidden_size": "normalized width"}, {"batch_size": "rows"},
            {"hidden_states": TensorDecl(("batch_size", "hidden_size")), "weight": TensorDecl(("hidden_size",)),
             "bias": TensorDecl(("hidden_size",))},
            {"output": TensorDecl(("batch_size", "hidden_size"))},
            "LayerNorm y = (x - mean) / sqrt(var + eps) * weight + bias (Ba et al. 2016, arXiv 1607.06450).",
            "import torch\n\ndef run(hidden_states, weight, bias):\n"
            "    return torch.nn.functional.layer_norm(hidden_states, weight.shape, weight, bias, 1e-5)\n",
        ),
        OpType(
            "rope", "rope_h{num_qo_heads}_d{rotary_dim}", {"num_qo_heads": "query heads", "rotary_dim": "rotated dims"},
            {"num_tokens": "tokens", "num_kv_heads": "key heads rotated"},
            {"q": TensorDecl(("num_tokens", "num_qo_heads", "rotary_dim")),
             "k": TensorDecl(("num_tokens", "num_kv_heads", "rotary_dim")),
             "cos": TensorDecl(("num_tokens", "rotary_dim")), "sin": TensorDecl(("num_tokens", "rotary_dim"))},
            {"q_out": TensorDecl(("num_tokens", "num_qo_heads", "rotary_dim")),
             "k_out": TensorDecl(("num_tokens", "num_kv_heads", "rotary_dim"))},
            "Rotary position embedding of q and k, rotate-half form (RoFormer, arXiv 2104.09864).",
            "import torch\n\ndef run(q, k, cos, sin):\n    def rot(x):\n"
            "        x1, x2 = x.chunk(2, dim=-1)\n        return torch.cat((-x2, x1), dim=-1)\n"
            "    c, s = cos[:, None, :], sin[:, None, :]\n    return q * c + rot(q) * s, k * c + rot(k) * s\n",
        ),
        OpType(
            "embedding", "embedding_v{vocab_size}_d{hidden_size}", {"vocab_size": "table rows",
                                                                      "hidden_size": "row width"},
            {"num_tokens": "tokens looked up"},
            {"input_ids": TensorDecl(("num_tokens",), "index"),
             "weight": TensorDecl(("vocab_size", "hidden_size"), "weight")},
            {"output": TensorDecl(("num_tokens", "hidden_size"))},
            "Embedding lookup: one table row per token id.",
            "import torch\n\ndef run(input_ids, weight):\n    return weight[input_ids]\n",
        ),
        OpType(
            "gqa_ragged", "gqa_ragged_prefill_causal_h{num_qo_heads}_kv{num_kv_heads}_d{head_dim}", _GQA_CONST,
            _GQA_AXES_VAR, _GQA_TENSORS_IN, _GQA_TENSORS_OUT,
            "Causal grouped-query attention of several new tokens per sequence (prefill) over their KV.",
            _ATTN_REF,
        ),
        OpType(
            "gqa_paged", "gqa_paged_decode_h{num_qo_heads}_kv{num_kv_heads}_d{head_dim}", _GQA_CONST,
            _GQA_AXES_VAR, _GQA_TENSORS_IN, _GQA_TENSORS_OUT,
            "Grouped-query attention of one new token per sequence (decode) over the KV cache.",
            _ATTN_REF,
        ),
        OpType(
            "mla_ragged", "mla_ragged_prefill_causal_h{num_qo_heads}_qk{qk_head_dim}_vo{v_head_dim}",
            {"num_qo_heads": "heads", "qk_head_dim": "q/k width (nope + rope)", "v_head_dim": "value width"},
            _GQA_AXES_VAR,
            {"q": TensorDecl(("num_qo_tokens", "num_qo_heads", "qk_head_dim")),
             "k": TensorDecl(("num_kv_tokens", "num_qo_heads", "qk_head_dim")),
             "v": TensorDecl(("num_kv_tokens", "num_qo_heads", "v_head_dim"))},
            {"output": TensorDecl(("num_qo_tokens", "num_qo_heads", "v_head_dim"))},
            "Multi-head latent attention, naive form: K/V expanded from the latent by kv_b_proj, then causal "
            "MHA (DeepSeek-V2, arXiv 2405.04434 §2.1).",
            _ATTN_REF,
        ),
    ]
    mla_const = {"num_qo_heads": "heads", "ckv_dim": "latent width (kv_lora_rank)",
                 "kpe_dim": "rope key width (qk_rope_head_dim)"}
    mla_in = {"q_nope": TensorDecl(("num_qo_tokens", "num_qo_heads", "ckv_dim")),
              "q_pe": TensorDecl(("num_qo_tokens", "num_qo_heads", "kpe_dim")),
              "ckv_cache": TensorDecl(("num_kv_tokens", "ckv_dim")),
              "kpe_cache": TensorDecl(("num_kv_tokens", "kpe_dim"))}
    mla_out = {"output": TensorDecl(("num_qo_tokens", "num_qo_heads", "ckv_dim"))}
    mla_ref = ('import math\nimport torch\n\ndef run(q_nope, q_pe, ckv_cache, kpe_cache):\n'
               '    # one sequence; the latent serves as K (with kpe) and as V.\n'
               '    d = q_nope.shape[-1] + q_pe.shape[-1]\n'
               '    s = (torch.einsum("qhc,kc->hqk", q_nope.float(), ckv_cache.float())\n'
               '         + torch.einsum("qhp,kp->hqk", q_pe.float(), kpe_cache.float())) / math.sqrt(d)\n'
               '    tq, tk = q_nope.shape[0], ckv_cache.shape[0]\n'
               '    mask = torch.ones(tq, tk, dtype=torch.bool).tril(diagonal=tk - tq)\n'
               '    p = s.masked_fill(~mask, float("-inf")).softmax(-1)\n'
               '    return torch.einsum("hqk,kc->qhc", p, ckv_cache.float()).to(q_nope.dtype)\n')
    ops += [
        OpType("mla_paged", "mla_paged_decode_h{num_qo_heads}_ckv{ckv_dim}_kpe{kpe_dim}", mla_const, _GQA_AXES_VAR,
               mla_in, mla_out, "Multi-head latent attention with W_UK/W_UV absorbed, one new token per sequence "
               "over the latent cache (arXiv 2405.04434 §2.1.2).", mla_ref),
        OpType("mla_paged_prefill", "mla_paged_prefill_causal_h{num_qo_heads}_ckv{ckv_dim}_kpe{kpe_dim}", mla_const,
               _GQA_AXES_VAR, mla_in, mla_out, "Absorbed multi-head latent attention of several new tokens per "
               "sequence over the latent cache (arXiv 2405.04434 §2.1.2).", mla_ref),
    ]
    for fam, desc in (("silu", "SiLU x·sigmoid(x) (Elfwing et al. 2017, arXiv 1702.03118)"),
                      ("gelu", "GELU (Hendrycks & Gimpel 2016, arXiv 1606.08415), tanh form"),
                      ("relu", "ReLU max(x, 0)")):
        ops.append(OpType(
            fam, fam + "_h{hidden_size}", {"hidden_size": "width"}, {"num_tokens": "rows"},
            {"x": TensorDecl(("num_tokens", "hidden_size"))}, {"output": TensorDecl(("num_tokens", "hidden_size"))},
            f"{desc}; in a gated MLP the product with the up projection is not part of this op.", _ACT_REF[fam],
        ))
    ops += [
        OpType(
            "moe", "moe_{impl}_e{num_experts}_h{hidden_size}_i{intermediate_size}_topk{top_k}",
            {"num_experts": "routed experts", "hidden_size": "model width", "intermediate_size": "expert FFN width",
             "top_k": "experts per token", "gemm1_out_size": "gate+up width (2·intermediate_size)"},
            {"num_tokens": "tokens routed"},
            {"hidden_states": TensorDecl(("num_tokens", "hidden_size")),
             "topk_ids": TensorDecl(("num_tokens", "top_k"), "index"),
             "topk_weights": TensorDecl(("num_tokens", "top_k")),
             "w13": TensorDecl(("num_experts", "gemm1_out_size", "hidden_size"), "weight"),
             "w2": TensorDecl(("num_experts", "hidden_size", "intermediate_size"), "weight")},
            {"output": TensorDecl(("num_tokens", "hidden_size"))},
            "Routed experts of a mixture-of-experts layer: each token's top_k gated SiLU MLPs, weighted and summed.",
            "import torch\n\ndef run(hidden_states, topk_ids, topk_weights, w13, w2):\n"
            "    out = torch.zeros_like(hidden_states, dtype=torch.float32)\n"
            "    for t in range(hidden_states.shape[0]):\n        for j in range(topk_ids.shape[1]):\n"
            "            e = int(topk_ids[t, j])\n"
            "            gate, up = (w13[e].float() @ hidden_states[t].float()).chunk(2)\n"
            "            y = w2[e].float() @ (torch.nn.functional.silu(gate) * up)\n"
            "            out[t] += topk_weights[t, j].float() * y\n"
            "    return out.to(hidden_states.dtype)\n",
            derive=_moe_derive, tags=("impl",),
        ),
        OpType(
            "topk", "topk_d{dim}_k{k}", {"dim": "scores per row (experts or vocabulary)", "k": "selected"},
            {"batch_size": "rows"},
            {"scores": TensorDecl(("batch_size", "dim"))},
            {"values": TensorDecl(("batch_size", "k")), "indices": TensorDecl(("batch_size", "k"), "index")},
            "Top-k selection over each row (MoE routing, greedy sampling with k = 1).",
            "import torch\n\ndef run(scores, k=1):\n    return torch.topk(scores, k, dim=-1)\n",
        ),
        OpType(
            "softmax", "softmax_d{dim}", {"dim": "longest row (attended keys)"}, {"batch_size": "rows"},
            {"x": TensorDecl(("batch_size", "dim"))}, {"output": TensorDecl(("batch_size", "dim"))},
            "Safe softmax over attention scores (unfused attention view; Milakov & Gimelshein 2018).",
            "import torch\n\ndef run(x):\n    return torch.softmax(x.float(), dim=-1).to(x.dtype)\n",
        ),
    ]
    return tuple(ops)


#: Every op type, keyed by ``op_type``.
REGISTRY: Registry[OpType] = Registry("op type", RecordsError, {op.op_type: op for op in _op_types()})


def op_type(name: str) -> OpType:
    """The registered :class:`OpType` ``name``; an unknown name's error lists the known ones."""
    return REGISTRY.lookup(name)
