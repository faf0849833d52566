"""Energy of a serving run (issue #30): joules per engine step, per request and per output token, watts over time.

A step's dynamic energy is what :mod:`layerscope.cost.energy` charges its forward pass (Σ FLOPs × pJ/FLOP + bytes
× pJ/B per level + wire bytes × pJ/B). Over the steps a serving run makes, that is an affine function of what
the step holds — the first-order model's operation counts are::

    E_dyn(step) = e0 + e_tok · T + e_seq · S + e_ctx · K + e_pair · P + e_exp · U(T)

with T tokens, S sequences, K the decodes' cached tokens summed (the KV bytes they read), P the prompt chunks'
attended (query, key) pairs (their attention FLOPs) and, for mixture-of-experts models, U(T) = E·(1 − (1 − k/E)^T)
the experts T tokens are expected to touch (their weights read: ``graph.moe.expected_experts_touched``). The
coefficients are fitted by least squares on graphs of the model built for the purpose (two-layer graphs where the
layers repeat: ``serving.passes``) and charged by ``cost.energy`` (:data:`BASIS_PASSES`); the fit's largest
relative error over them is kept (:attr:`StepEnergy.max_error`) and held under :data:`BASIS_TOLERANCE` by the
tests. A step's energy adds the board's idle power over its duration; between steps an engine draws idle power.

Not modelled: the clock drop under the board limit (``cost.energy`` stretches an estimate's compute-bound ops; a
serving step keeps the step timer's time, and :attr:`ServingEnergy.over_limit_share` says how much of the run's
busy time exceeds the limit). Sliding-window layers read at most their window of KV: K is taken as is (the fit
sees the cap only through its residual).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layerscope.cost.api import PhaseOps
from layerscope.cost.energy import op_dynamic_energy_j
from layerscope.cost.features import op_features
from layerscope.cost.models import get_cost_model
from layerscope.graph import build_model_graph
from layerscope.graph.ops import OpGraph
from layerscope.hardware.spec import HardwareSpec
from layerscope.model.spec import ModelSpec
from layerscope.serving.passes import layers_repeat, same_pass, two_layer_graph, whole_order
from layerscope.serving.spec import ServingError
from layerscope.workload import ForwardPass, SequenceGroup, Workload

__all__ = ["BASIS_PASSES", "BASIS_TOLERANCE", "ServingEnergy", "StepEnergy", "pass_counts", "serving_energy"]

#: The forward passes the coefficients are fitted on, as ((count, new tokens, cached tokens), ...) groups: decodes
#: at several batch sizes and contexts, and prompts of several lengths, some over cached tokens. No mixed pass: the
#: graph times one attention op over groups of different query lengths as one padded kernel, which the step timer
#: avoids (it charges the decodes' and each chunk's attention apart, ``serving.timer``), and so does this basis.
BASIS_PASSES: tuple[tuple[tuple[int, int, int], ...], ...] = (
    ((1, 1, 1),), ((1, 1, 2048),), ((8, 1, 512),), ((32, 1, 128),), ((32, 1, 4096),), ((128, 1, 1024),),
    ((1, 128, 0),), ((1, 1024, 0),), ((1, 4096, 0),), ((1, 512, 1024),), ((4, 256, 0),), ((2, 64, 2048),),
)
#: The largest relative error of the fitted step energy against ``cost.energy`` on the basis passes the tests accept.
BASIS_TOLERANCE = 0.03


def experts_touched(tokens: np.ndarray, moe: tuple[int, int] | None) -> np.ndarray:
    """U(T) for ``moe`` = (experts, experts per token); 0 for a dense model."""
    t = np.asarray(tokens, dtype=np.float64)
    if moe is None:
        return np.zeros_like(t)
    experts, top_k = moe
    return experts * (1.0 - (1.0 - top_k / experts) ** t)


def pass_counts(groups: tuple[tuple[int, int, int], ...], moe: tuple[int, int] | None = None) -> np.ndarray:
    """(1, T, S, K, P, U) of a pass of (count, new, cached) groups: the regressors of :class:`StepEnergy`. A decode
    (new = 1) adds its cached tokens to K; a prompt chunk of c new tokens over p cached attends c·p + c(c+1)/2
    pairs (causal); U is :func:`experts_touched` of the tokens."""
    tokens = seqs = ctx = pairs = 0.0
    for count, new, cached in groups:
        tokens += count * new
        seqs += count
        if new == 1:
            ctx += count * cached
        else:
            pairs += count * (new * cached + new * (new + 1) / 2)
    return np.array([1.0, tokens, seqs, ctx, pairs, float(experts_touched(np.array(tokens), moe))])


@dataclass(frozen=True)
class StepEnergy:
    """Dynamic joules of one engine step on one device, affine in the step's counts (module docstring)."""

    coefficients: np.ndarray
    """(e0, e_tok, e_seq, e_ctx, e_pair, e_exp) in joules per unit."""
    max_error: float
    """Largest relative error of the fit over the basis passes."""
    idle_power_w: float
    board_power_limit_w: float
    moe: tuple[int, int] | None = None
    """(experts, experts per token) of a mixture-of-experts model."""

    @classmethod
    def fit(cls, spec: ModelSpec, hw: HardwareSpec, template: Workload, cost_model: str = "roofline") -> StepEnergy:
        if hw.energy is None:
            raise ServingError(f"{hw.name}: the hardware spec has no energy figures (energy:), so a serving run "
                               "has no energy")
        cost_fn = get_cost_model(cost_model)
        moe = (spec.moe.num_experts, spec.moe.num_experts_per_tok) if spec.moe is not None else None

        def pass_j(graph: OpGraph) -> np.ndarray:
            feats = op_features(graph)
            cost = cost_fn(feats, hw)
            part = PhaseOps(graph=graph, phase="step", time_s=np.asarray(cost.time_s, dtype=float),
                            work=(feats.flops, feats.weight_bytes, feats.act_bytes, feats.kv_bytes),
                            bound=np.asarray(cost.bound), cost=cost)
            return np.asarray(op_dynamic_energy_j(part, hw).total_j)

        # each pass's joules from its two-layer graph where that stands for the whole graph (serving.passes),
        # checked on the first pass
        two_layers = layers_repeat(spec, template)
        rows: list[np.ndarray] = []
        energies: list[float] = []
        for groups in BASIS_PASSES:
            fwd = ForwardPass(groups=tuple(SequenceGroup(count=c, new_tokens=n, cached_tokens=k)
                                           for c, n, k in groups))
            op_j = None
            if two_layers:
                graph = two_layer_graph(spec, fwd, template)
                order = whole_order(graph, spec.num_layers)
                op_j = pass_j(graph)
                if not rows:
                    whole = build_model_graph(spec, fwd, template)
                    two_layers = same_pass(whole, pass_j(whole), graph, op_j, order)
                op_j = op_j[order] if two_layers else None
            if op_j is None:
                op_j = pass_j(build_model_graph(spec, fwd, template))
            energies.append(float(op_j.sum()))
            rows.append(pass_counts(groups, moe))
        x, y = np.array(rows), np.array(energies)
        # relative least squares: every basis pass weighs alike whatever its size
        coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones(len(y)), rcond=None)
        error = float(np.max(np.abs(x @ coef / y - 1.0)))
        return cls(coefficients=coef, max_error=error, idle_power_w=hw.energy.idle_power_w,
                   board_power_limit_w=hw.energy.board_power_limit_w, moe=moe)

    def dynamic_j(self, tokens: np.ndarray, seqs: np.ndarray, ctx: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """Dynamic joules of steps with these counts (arrays alike)."""
        c = self.coefficients
        used = c[0] + c[1] * tokens + c[2] * seqs + c[3] * ctx + c[4] * pairs + c[5] * experts_touched(tokens, self.moe)
        return np.maximum(used, 0.0)


@dataclass(frozen=True)
class ServingEnergy:
    """A serving run's energy, every device of every replica counted."""

    step_j: np.ndarray
    """Per iteration: dynamic and idle joules of the step on all its replica's devices."""
    step_power_w: np.ndarray
    """Per iteration: the replica's average power while the step runs (all its devices)."""
    total_j: float
    """Steps, plus idle power on every replica between its steps, from the first arrival to the last token."""
    request_j: np.ndarray
    """Per request: the steps' joules shared by tokens (a step's joules split evenly over the prompt tokens and
    decodes it ran; a request's prompt tokens take the per-token joules of the step that made its first token;
    scaled so that the shares add up to the steps' joules), plus the idle joules shared by output tokens. The
    requests' joules add up to :attr:`total_j`."""
    idle_power_w: float
    """Of one replica (all its devices)."""
    over_limit_share: float
    """Share of the busy time in steps whose power per device exceeds the board limit."""
    fit_max_error: float


def serving_energy(step: StepEnergy, *, devices: int, replicas: int, duration_s: float, start_s: np.ndarray,
                   end_s: np.ndarray, tokens: np.ndarray, seqs: np.ndarray, ctx: np.ndarray, pairs: np.ndarray,
                   token_step: np.ndarray, token_offsets: np.ndarray, prompt_tokens: np.ndarray,
                   output_tokens: np.ndarray) -> ServingEnergy:
    """Joules of a run's iterations (arrays aligned) and their share per request: each request's tokens after its
    first take the per-token joules of the step that made them (``token_step``, indices into the iterations); its
    first token's step also pays for its prompt."""
    duration = end_s - start_s
    dyn = step.dynamic_j(tokens, seqs, ctx, pairs) * devices
    step_j = dyn + step.idle_power_w * devices * duration
    with np.errstate(divide="ignore", invalid="ignore"):
        power = np.where(duration > 0, step_j / duration, 0.0)
    busy_s = float(duration.sum())
    idle_j = step.idle_power_w * devices * max(replicas * duration_s - busy_s, 0.0)
    total = float(step_j.sum()) + idle_j
    over = power / devices > step.board_power_limit_w
    over_share = float(duration[over].sum() / busy_s) if busy_s > 0 else 0.0
    # per-token joules of each step, taken by every token from the step that made it
    work = np.maximum(tokens, 1)
    per_token = step_j / work
    n = len(token_offsets) - 1
    request_j = np.zeros(n)
    if n and len(token_step):
        owner = np.repeat(np.arange(n), np.diff(token_offsets))
        first = token_offsets[:-1][output_tokens > 0]
        weighted = per_token[token_step]  # a new array (fancy indexing), weighted in place
        weighted[first] *= prompt_tokens[output_tokens > 0]  # the first token's step ran the prompt
        shares = np.bincount(owner, weights=weighted, minlength=n).astype(np.float64)
        # the shares are exact where no prompt is split over steps; chunked prompts' earlier chunks are charged at
        # their first token's step, so the shares are scaled to the steps' joules, and the idle joules between steps
        # shared by output tokens
        if shares.sum() > 0:
            request_j = shares * (float(step_j.sum()) / float(shares.sum()))
        total_out = float(output_tokens.sum())
        if total_out:
            request_j += idle_j * output_tokens / total_out
    return ServingEnergy(step_j=step_j, step_power_w=power, total_j=total, request_j=request_j,
                         idle_power_w=step.idle_power_w * devices, over_limit_share=over_share,
                         fit_max_error=step.max_error)
