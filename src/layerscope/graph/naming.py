"""Op and tensor names: HF module paths with ``ModuleNames.root`` stripped.

An op run by a module is named after it (``layers.0.self_attn.q_proj``). Ops that are not
modules of their own get a suffix under the module that runs them:

========================================  =================================================
``{attn}.rope``                            rotary embedding of q and k
``{attn}.kv_write`` / ``{attn}.kv_read``   KV-cache append / read (unfused view)
``{attn}.attn``                            fused attention (KV-cache read included)
``{attn}.qk_matmul``, ``{attn}.softmax_max``, ``{attn}.softmax_exp``, ``{attn}.softmax_norm``,
``{attn}.pv_matmul``                       unfused attention
``{attn}.{kv_b_proj}.absorb_q`` / ``.absorb_o``  MLA with W_UK / W_UV absorbed
``{attn}.{o_proj}.all_reduce``             tensor-parallel all-reduce after o_proj
``layers.N.residual_attn`` / ``layers.N.residual_mlp``  residual adds (``layers.N.residual``
                                           for the parallel block layout)
``{mlp}.act_mul`` / ``{mlp}.{act}``        gated activation·mul / the plain MLP's activation module
``{mlp}.topk``                             MoE top-k routing (run by the router module: ``Op.module``)
``{mlp}.shared_add``                       routed + shared experts
``{mlp}.{down_proj}.all_reduce`` / ``{mlp}.all_reduce``  all-reduce after the dense / MoE MLP
``{pos_embed}.add``                        token + learned position embedding
``sampling``                               top-k/argmax over the vocabulary
========================================  =================================================

The output tensor of an op is ``{op}:out`` (``{attn}.rope:q`` / ``{attn}.rope:k`` for RoPE,
``{attn}.kv_cache`` for the cache entries a layer writes); weights are ``{module}.weight``.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerscope.model.spec import ModuleNames

#: Tensor name of the token ids a forward pass starts from.
INPUT_IDS = "input_ids"
#: Tensor name of the position ids (learned positional embeddings).
POSITION_IDS = "position_ids"


@dataclass(frozen=True, slots=True)
class LayerNames:
    """The module paths of one decoder layer (``prefix`` is ``layers.N.``)."""

    prefix: str
    attn: str
    mlp: str

    def attn_mod(self, leaf: str) -> str:
        return f"{self.attn}.{leaf}"

    def mlp_mod(self, leaf: str) -> str:
        return f"{self.mlp}.{leaf}"


def layer_prefix(modules: ModuleNames, layer: int) -> str:
    """``layers.N.`` for ``modules.layers == "layers"``."""
    return f"{modules.layers}.{layer}."


def layer_names(modules: ModuleNames, layer: int) -> LayerNames:
    p = layer_prefix(modules, layer)
    # OPT's MLP modules hang directly off the layer (``modules.mlp == ""``): then the MLP's
    # module is the layer itself, and its leaves are ``layers.N.fc1``.
    mlp = f"{p}{modules.mlp}" if modules.mlp else p.rstrip(".")
    return LayerNames(prefix=p, attn=f"{p}{modules.attn}", mlp=mlp)


def layer_module_leaves(modules: ModuleNames) -> frozenset[str]:
    """Every module path relative to ``layers.N.`` that a layer's op names may start with."""
    leaves: set[str] = set()
    attn_leaves = (modules.q_proj, modules.k_proj, modules.v_proj, modules.qkv_proj, modules.o_proj,
                   modules.q_norm, modules.k_norm, modules.q_a_proj, modules.q_a_norm, modules.q_b_proj,
                   modules.kv_a_proj, modules.kv_a_norm, modules.kv_b_proj)
    mlp_leaves = (modules.gate_proj, modules.up_proj, modules.gate_up_proj, modules.down_proj, modules.act,
                  modules.router, modules.experts, modules.shared_experts)
    leaves.add(modules.attn)
    if modules.mlp:
        leaves.add(modules.mlp)
    leaves.update(f"{modules.attn}.{x}" for x in attn_leaves if x)
    leaves.update(".".join(p for p in (modules.mlp, x) if p) for x in mlp_leaves if x)
    for norm in (modules.input_norm, modules.post_attn_norm, modules.pre_ffn_norm, modules.post_ffn_norm):
        if norm:
            leaves.add(norm)
    return frozenset(leaves)
