"""Vectorized sweeps over a grid of configurations (models x hardware x batch x length).

Building an op graph costs far more than timing it, and a sweep times the same graph structure
at thousands of (batch, length) points. Every op's FLOPs and bytes are linear in a small basis
of workload quantities:

    phi = [1, T, S, P_full, K_full, P_slide, K_slide, X]

with T tokens in the pass, S sequences, P attention (query, key) pairs and K cached tokens
read, each for full-attention and sliding-window layers, and X the expected number of routed
experts touched, E·(1 - (1 - k/E)^T) (uniform routing). So the graph is built at a handful of
sample points, each op's coefficients on phi are solved by least squares (exact: the residual
is checked), ops with identical coefficients and hardware behaviour are merged with a
multiplicity (the layers of a model repeat), and the whole grid is timed as one matrix product
and one vectorized roofline: no Python loop per configuration.

That is exact when an op's time depends on its work alone (and on what does not change across
the grid: its kind, dtype, weights). It is not when the time reads a GEMM's own shape, which
the fitted graph keeps from one sample point: the ``tiling`` and ``hierarchical`` cost models
(tile searches), efficiency tables by row count (``efficiency.matmul_rows``/``matmul_shapes``,
from ``layerscope calibrate``), Hockney's half-performance work (``efficiency.matmul_half_flops``, charged to
GEMMs with more than one row: a step at M = 1; the fitted GPU presets carry it), those presets' tile and wave
quantization of each fp8 GEMM (``cost.models.gemm_tile_plan``) and, in prefill, fused attention's
efficiency by query length (``efficiency.attention_rows``) and a kernel profile other than ``fused``
(HF eager's lm_head passes grow with the batch; ``serving-graph`` replays a prefill as a piecewise CUDA graph up
to ``graph_max_tokens`` tokens). :func:`time_grid` refuses such hardware. :func:`sweep` times it in decode with
:func:`time_by_batch` (a decode step's GEMMs run M = batch rows whatever the context, so one graph per distinct
batch carries every shape, and the lengths' work comes from the linear model, all at once) and otherwise point by
point with :func:`~layerscope.cost.api.estimate`: the same numbers either way. Decode steps
under ``serving-graph`` are vectorized up to ``graph_max_tokens`` sequences (one full graph each) and timed point
by point beyond; every point pays the engine's host time per step (``cost.execution.engine_terms``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

import numpy as np

from layerscope.cost.api import estimate
from layerscope.cost.execution import EXECUTION_PROFILES, engine_terms, host_step_s, kernel_plan, step_time_s
from layerscope.cost.features import OpFeatures, op_features
from layerscope.cost.models import gemm_tiles_apply, get_cost_model, tiled_gemms
from layerscope.errors import WorkloadError
from layerscope.graph import build_model_graph
from layerscope.hardware.spec import HardwareSpec
from layerscope.model.spec import ModelSpec
from layerscope.workload import Workload

SWEEP_PHASES = ("prefill", "decode")
_BASIS_NAMES = ("one", "tokens", "seqs", "pairs_full", "kv_full", "pairs_slide", "kv_slide", "experts")
#: Largest relative residual of the basis fit accepted as exact (float rounding only).
_FIT_TOLERANCE = 1e-6


def _window_pairs(length: np.ndarray, window: float) -> np.ndarray:
    """Causal (query, key) pairs of a length-``length`` prompt when each query sees <= window keys.

    sum_{i=1..L} min(i, W) = L(L+1)/2 for L <= W, else W(W+1)/2 + (L - W)·W.
    """
    full = length * (length + 1) / 2
    capped = window * (window + 1) / 2 + (length - window) * window
    return np.where(length <= window, full, capped)


def basis(spec: ModelSpec, phase: str, batch: np.ndarray, length: np.ndarray) -> np.ndarray:
    """phi for every grid point -> [points, len(_BASIS_NAMES)].

    prefill: ``length`` prompt tokens per sequence, nothing cached; decode: ``length`` tokens
    cached, one new token per sequence.
    """
    b = np.asarray(batch, dtype=np.float64)
    L = np.asarray(length, dtype=np.float64)
    window = float(spec.sliding_window) if spec.sliding_window else np.inf
    if phase == "prefill":
        tokens = b * L
        pairs_full = b * L * (L + 1) / 2
        kv_full = b * L
        pairs_slide = b * (_window_pairs(L, window) if np.isfinite(window) else L * (L + 1) / 2)
        kv_slide = b * np.minimum(L, window)
    elif phase == "decode":
        tokens = b
        pairs_full = b * (L + 1)
        kv_full = b * (L + 1)
        pairs_slide = b * np.minimum(L + 1, window)
        kv_slide = pairs_slide
    else:
        raise WorkloadError(f"phase: sweeps support {', '.join(SWEEP_PHASES)}, not {phase!r}")
    if spec.moe is not None:
        e, k = spec.moe.num_experts, spec.moe.num_experts_per_tok
        experts = e * (1.0 - (1.0 - k / e) ** tokens)
    else:
        experts = np.zeros_like(tokens)
    one = np.ones_like(tokens)
    return np.stack([one, tokens, b, pairs_full, kv_full, pairs_slide, kv_slide, experts], axis=-1)


@dataclass(frozen=True)
class LinearGraphModel:
    """An op graph's work as linear functions of phi, with identical ops merged.

    ``coef`` is [4, basis, groups] for flops, weight, activation and KV bytes; ``count`` how many
    ops of the graph each group stands for; ``static`` the per-group hardware behaviour.
    """

    spec: ModelSpec
    phase: str
    coef: np.ndarray
    count: np.ndarray
    static: OpFeatures
    num_ops: int
    op_group: np.ndarray
    """For each op of the whole graph, the index of its group ([num_ops]): a group's work is each of its ops'."""


def _sample_points(spec: ModelSpec, phase: str) -> list[tuple[int, int]]:
    window = spec.sliding_window or 0
    # A one-token prefill is built like a decode pass (e.g. MLA's absorbed form): a different
    # graph, so prefill fits use lengths >= 2 and sweep() times length-1 prefills point by point.
    lengths = [2, 3, 7, 64, 300, 1000, 2500] if phase == "prefill" else [1, 2, 3, 7, 64, 300, 1000, 2500]
    if window:
        lengths += [max(1, window - 1), window, window + 1, 2 * window + 3]
    batches = [1, 2, 3, 8]
    points = sorted({(b, L) for b, L in product(batches, lengths)})
    return points


def fit_linear_graph(spec: ModelSpec, phase: str, template: Workload) -> LinearGraphModel:
    """Build the model's graph at sample points and fit each op's work on phi (exactly)."""
    points = _sample_points(spec, phase)
    feats: list[OpFeatures] = []
    for b, L in points:
        w = template.model_copy(update={"phase": phase, "batch": b, "prompt_len": L, "context": L})
        fwd = w.prefill_pass() if phase == "prefill" else w.decode_pass(L)
        feats.append(op_features(build_model_graph(spec, fwd, w)))
    phi = basis(spec, phase, np.array([p[0] for p in points]), np.array([p[1] for p in points]))
    y = np.stack([
        np.stack([getattr(f, a) for f in feats]) for a in ("flops", "weight_bytes", "act_bytes", "kv_bytes")
    ])  # [4, points, ops]
    n_ops = y.shape[2]
    flat = y.transpose(1, 0, 2).reshape(len(points), 4 * n_ops)
    # Column scaling keeps the least-squares problem well conditioned across magnitudes.
    scale = np.abs(phi).max(axis=0)
    scale[scale == 0] = 1.0
    sol, *_ = np.linalg.lstsq(phi / scale, flat, rcond=None)
    sol = sol / scale[:, None]
    fitted = phi @ sol
    err = np.abs(fitted - flat) / np.maximum(np.abs(flat), 1.0)
    if err.max() > _FIT_TOLERANCE:
        worst = int(np.argmax(err.max(axis=0)) % n_ops)
        raise WorkloadError(
            f"sweep: op #{worst} of {spec.name} is not linear in the sweep basis "
            f"({', '.join(_BASIS_NAMES)}); sweep this model point by point with estimate()"
        )
    coef = sol.reshape(len(phi[0]), 4, n_ops).transpose(1, 0, 2)  # [4, basis, ops]
    static = feats[0]
    # Every profile's plan among the whole pass's ops (serving-graph's fusions read each op's neighbours, which a
    # merged group no longer has), kept per group below and part of the merge key.
    plans = {name: kernel_plan(name, static.ops) for name in EXECUTION_PROFILES} if static.ops else {}
    # Merge ops whose coefficients and hardware behaviour are identical (repeated layers).
    key_rows = np.concatenate([
        np.round(coef.reshape(-1, n_ops).T, 6),
        static.uses_matrix_units[:, None].astype(float),
        static.dtype_code[:, None].astype(float),
        *(plan.key_rows() for plan in plans.values()),
    ], axis=1)
    _, first, inverse, counts = np.unique(key_rows, axis=0, return_index=True, return_inverse=True,
                                          return_counts=True)
    # np.unique orders groups by key; keep them in program order of their first op.
    order = np.argsort(first)
    groups = first[order]
    count = counts[order]
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    group_static = static.take(groups, tuple(static.ops[g] for g in groups) if static.ops else (),
                               {name: plan.take(groups) for name, plan in plans.items()})
    return LinearGraphModel(spec=spec, phase=phase, coef=coef[:, :, groups], count=count.astype(np.float64),
                            static=group_static, num_ops=n_ops, op_group=position[np.ravel(inverse)])


@dataclass(frozen=True)
class SweepResult:
    """One row per configuration, as columns."""

    model: np.ndarray
    hardware: np.ndarray
    phase: str
    batch: np.ndarray
    length: np.ndarray
    time_s: np.ndarray
    """Pass time: TTFT for prefill, TPOT for decode."""
    tokens_per_s: np.ndarray
    weights_bytes: np.ndarray
    kv_cache_bytes: np.ndarray
    fits_in_memory: np.ndarray

    def __len__(self) -> int:
        return len(self.time_s)

    def records(self) -> list[dict[str, object]]:
        cols = ("model", "hardware", "batch", "length", "time_s", "tokens_per_s", "weights_bytes",
                "kv_cache_bytes", "fits_in_memory")
        arrays = [getattr(self, c) for c in cols]
        return [dict(zip(cols, (_py(a[i]) for a in arrays), strict=True)) | {"phase": self.phase}
                for i in range(len(self))]


def _py(value: object) -> object:
    """A numpy scalar as the Python scalar (strings of object arrays are already Python)."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def shape_dependent(hw: HardwareSpec, cost_model: str, phase: str, static: OpFeatures | None = None) -> str | None:
    """Why timing on ``hw`` with ``cost_model`` reads GEMM shapes the linear model does not
    carry (see the module docstring), or ``None`` when work alone decides. ``static``: the ops timed (a
    :class:`LinearGraphModel`'s), so that a reason only some dtypes have (fp8's tile and wave quantization) is
    given only where such an op is there; None: any op may be."""
    if cost_model != "roofline":
        return f"the {cost_model!r} cost model tiles each GEMM for its own shape"
    if hw.efficiency.matmul_rows or hw.efficiency.matmul_shapes:
        return f"{hw.name} has GEMM efficiency by row count (efficiency.matmul_rows/matmul_shapes)"
    if gemm_tiles_apply(hw) and (static is None or tiled_gemms(static, hw).any()):
        return f"{hw.name}'s fp8 GEMMs pay tile and wave quantization by their M and N (cost.models.gemm_tile_plan)"
    if any(hw.efficiency.matmul_half_flops.values()):
        return (f"{hw.name} charges GEMMs of more than one row a half-performance work "
                "(efficiency.matmul_half_flops), a step at M = 1")
    if hw.efficiency.attention_rows and phase == "prefill":
        return f"{hw.name} has attention efficiency by query length (efficiency.attention_rows)"
    if hw.execution.cold_by_reuse:
        return (f"{hw.name} charges each op's kernels by the bytes moved since its code last ran "
                "(execution.cold_by_reuse), which merged layers do not keep")
    if hw.execution.fresh_pages is not None:
        return (f"{hw.name} charges page faults on tensors of at least {hw.execution.fresh_pages.min_bytes:.4g} B "
                "(execution.fresh_pages), a step in the shapes")
    if phase == "prefill" and hw.execution.kernels != "fused":
        return (f"{hw.name} runs the {hw.execution.kernels!r} kernel profile, whose prefill "
                f"{_PREFILL_SHAPES.get(hw.execution.kernels, 'kernels depend on the shapes')}")
    return None


#: What makes a profile's prefill depend on the pass's shape (:func:`shape_dependent`).
_PREFILL_SHAPES = {"hf-eager": "lm_head grows with the batch",
                   "serving-graph": "replays a piecewise CUDA graph up to execution.graph_max_tokens tokens"}


def _beyond_graphs(hw: HardwareSpec, phase: str, batch: np.ndarray) -> np.ndarray:
    """Per decode point: more sequences than the engine replays as one CUDA graph, so its kernels launch one by
    one where the fitted graph's decode step (one sequence) replays (``execution.graph_max_tokens``)."""
    terms = engine_terms(hw.execution)
    if phase != "decode" or terms.graph_max_tokens <= 0 or hw.execution.kernels == "fused":
        return np.zeros(len(batch), dtype=bool)
    return np.asarray(batch) > terms.graph_max_tokens


def _engine_pass_s(forward_s: np.ndarray, hw: HardwareSpec, phase: str, batch: np.ndarray) -> np.ndarray:
    """Each point's pass time with the engine's host time per step, as :func:`~layerscope.cost.api.estimate`
    adds it: a prefill is a request's first step (and pays ``request_overhead_s``), a decode step is not."""
    terms = engine_terms(hw.execution)
    first = phase == "prefill"
    out = step_time_s(forward_s, host_step_s(terms, np.asarray(batch, dtype=np.float64)), terms, first=first)
    return np.asarray(out, dtype=np.float64) + (terms.request_overhead_s if first else 0.0)


def time_grid(lin: LinearGraphModel, hw: HardwareSpec, batch: np.ndarray, length: np.ndarray,
              cost_model: str = "roofline") -> np.ndarray:
    """Pass time for every (batch, length) pair, vectorized: [points].

    Raises :class:`WorkloadError` where the time depends on GEMM shapes (:func:`shape_dependent`);
    :func:`sweep` times those point by point.
    """
    why = shape_dependent(hw, cost_model, lin.phase, lin.static)
    if why is None and _beyond_graphs(hw, lin.phase, batch).any():
        why = f"{hw.name} launches decode steps of more than execution.graph_max_tokens sequences kernel by kernel"
    if why is not None:
        raise WorkloadError(f"time_grid: {why}; the vectorized grid would time every point at one sample "
                            "point's shapes (use sweep(), which times such hardware point by point)")
    phi = basis(lin.spec, lin.phase, batch, length)  # [P, basis]
    work = phi @ lin.coef  # [4, P, groups]
    cost = get_cost_model(cost_model)(lin.static.with_work(work[0], work[1], work[2], work[3]), hw)
    return _engine_pass_s(cost.time_s @ lin.count, hw, lin.phase, batch)


def shapes_by_batch(hw: HardwareSpec, cost_model: str, phase: str) -> bool:
    """Whether every GEMM shape the timing on ``hw`` reads is decided by the batch alone, so that one graph per
    batch (:func:`time_by_batch`) times a decode grid exactly: a decode step's projections run M = batch rows at
    every context length, and what the context changes (attention's keys, the KV cache's bytes) is work, which
    the linear model carries. Not so for prefill (M = batch x length), for the tile searches of the ``tiling`` and
    ``hierarchical`` cost models (they read the attention's shapes too), or for page faults by tensor size
    (``execution.fresh_pages``: the KV cache's tensors grow with the context)."""
    return phase == "decode" and cost_model == "roofline" and hw.execution.fresh_pages is None


def time_by_batch(lin: LinearGraphModel, template: Workload, hw: HardwareSpec, batch: np.ndarray,
                  length: np.ndarray, cost_model: str = "roofline") -> np.ndarray | None:
    """Pass time for every (batch, length) pair of a decode grid on hardware whose timing reads the GEMMs' M
    (:func:`shapes_by_batch`): per distinct batch, the graph's ops at that batch (their shapes) with each length's
    work from the linear model, timed as one array. None where the batch's graph does not have the fitted graph's
    ops (the caller times those points one by one)."""
    out = np.empty(len(batch))
    for b in sorted(set(np.asarray(batch).tolist())):
        sel = np.flatnonzero(batch == b)
        w = template.model_copy(update={"phase": lin.phase, "batch": int(b), "prompt_len": 1, "context": 1})
        feats = op_features(build_model_graph(lin.spec, w.decode_pass(1), w))
        if len(feats.kinds) != lin.num_ops:
            return None
        # the classes depend on the ops, the work groups and the execution profile: kept with the (memoized) graph
        kept = feats.plans.get("(timed alike)")
        if kept is None or kept[0] is not lin.op_group or kept[1] != hw.execution:
            kept = feats.plans["(timed alike)"] = (lin.op_group, hw.execution,
                                                   _ops_timed_alike(feats, lin.op_group, hw))
        alike, group, count = kept[2]
        # the classes' work at these lengths, the same for every GPU of a sweep: kept with the classes
        lengths = length[sel]
        done = alike.plans.get("(sweep work)")
        if done is None or done[0] is not lin.coef or not np.array_equal(done[1], lengths):
            work = (basis(lin.spec, lin.phase, batch[sel], lengths) @ lin.coef)[:, :, group]  # [4, P, classes]
            done = alike.plans["(sweep work)"] = (lin.coef, lengths.copy(), alike.with_work(*work))
        cost = get_cost_model(cost_model)(done[2], hw)
        out[sel] = _engine_pass_s(cost.time_s @ count, hw, lin.phase, batch[sel])
    return out


def _ops_timed_alike(feats: OpFeatures, op_group: np.ndarray,
                     hw: HardwareSpec) -> tuple[OpFeatures, np.ndarray, np.ndarray]:
    """``feats``' ops merged into classes that a cost model times alike, in program order of their first op:
    the same work (``op_group``, the linear model's), the same template op (``OpFeatures.rep_of``: kind, shapes,
    dtypes and every per-op fact; each op its own class without one) and the same kernel plan under ``hw``'s
    execution profile (a plan reads an op's neighbours). Returns the classes' features (their template ops),
    each class's work group and its number of ops: a decode graph's ~500 ops are ~20 classes, one per layer
    template op, so a grid is timed over those (``cost.time_s @ count``). Not with ``execution.cold_by_reuse``: an
    op's fixed cost there reads the bytes every op between it and its previous run moves (its neighbours, all of
    them), so each op is its own class."""
    n = len(feats.kinds)
    if hw.execution.cold_by_reuse:
        return feats, np.asarray(op_group), np.ones(n)
    rep_of = feats.rep_of if feats.rep_of is not None and len(feats.rep_of) == n else np.arange(n)
    # one integer per (work group, template op): a 1-D unique, not a row-wise one (a sort of void records)
    key = np.asarray(op_group, dtype=np.int64) * (int(rep_of.max(initial=0)) + 1) + rep_of
    kernels = hw.execution.kernels
    plan = None
    if not hw.execution.is_default and feats.ops:
        plan = feats.plans.get(kernels)
        if plan is None:
            plan = feats.plans[kernels] = kernel_plan(kernels, feats.ops)
        rows = np.concatenate([key[:, None].astype(np.float64), plan.key_rows()], axis=1)
        key = np.unique(rows, axis=0, return_inverse=True)[1].ravel()
    _, first, count = np.unique(key, return_index=True, return_counts=True)
    order = np.argsort(first)
    idx, count = first[order], count[order].astype(np.float64)
    if feats.rep_of is not None and len(feats.rep_of) == n:
        ops: tuple = tuple(feats.reps[r] for r in rep_of[idx])
    else:
        ops = tuple(feats.ops[i] for i in idx) if feats.ops else ()
    alike = feats.take(idx, ops, {} if plan is None else {kernels: plan.take(idx)})
    return alike, np.asarray(op_group)[idx], count


def _point_time_s(spec: ModelSpec, hw: HardwareSpec, template: Workload, phase: str, batch: int, length: int,
                  cost_model: str) -> float:
    """One grid point through :func:`estimate`: the prefill's TTFT or the decode step's TPOT."""
    w = template.model_copy(update={"phase": phase, "batch": batch, "prompt_len": length, "context": length})
    result = estimate(spec, hw, w, cost_model=cost_model)
    pass_s = result.ttft_s if phase == "prefill" else result.tpot_s
    return float(pass_s if pass_s is not None else result.e2e_s)


def sweep(specs: Sequence[ModelSpec], hardware: Sequence[HardwareSpec], batches: Sequence[int],
          lengths: Sequence[int], phase: str = "decode", template: Workload | None = None,
          cost_model: str = "roofline") -> SweepResult:
    """Time every (model, hardware, batch, length) combination of the grid."""
    if phase not in SWEEP_PHASES:
        raise WorkloadError(f"phase: sweeps support {', '.join(SWEEP_PHASES)}, not {phase!r}")
    if not batches or not lengths or min(batches) < 1 or min(lengths) < 1:
        raise WorkloadError("sweep: batches and lengths must be non-empty lists of positive integers")
    from layerscope.model.params import weight_bytes

    tmpl = template or Workload()
    b_grid, l_grid = (a.ravel() for a in np.meshgrid(np.asarray(batches), np.asarray(lengths), indexing="ij"))
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("model", "hardware", "batch", "length", "time_s",
                                                         "weights", "kv", "cap")}
    for spec in specs:
        lin = fit_linear_graph(spec, phase, tmpl)
        w_bytes = float(weight_bytes(spec, tmpl.weight_dtype))
        ctx = l_grid + (1 if phase == "decode" else 0)
        kv = np.zeros(len(l_grid))
        for layer in range(spec.num_layers):
            span = np.minimum(ctx, spec.sliding_window) if (spec.sliding_window and spec.layer_is_sliding(layer)) \
                else ctx
            kv += span
        kv = kv * b_grid * spec.kv_values_per_token_per_layer() * tmpl.kv_dtype.bytes
        single = (l_grid == 1) if phase == "prefill" else np.zeros(len(l_grid), dtype=bool)
        for hw in hardware:
            t = np.empty(len(l_grid))
            pointwise = np.ones(len(l_grid), dtype=bool)  # exact, one estimate per point (module docstring)
            if shape_dependent(hw, cost_model, phase, lin.static) is None:
                pointwise = single | _beyond_graphs(hw, phase, b_grid)
                grid = ~pointwise
                if grid.any():
                    t[grid] = time_grid(lin, hw, b_grid[grid], l_grid[grid], cost_model)
            elif shapes_by_batch(hw, cost_model, phase):  # one graph per batch, every length at once
                grid = ~_beyond_graphs(hw, phase, b_grid)
                by_batch = time_by_batch(lin, tmpl, hw, b_grid[grid], l_grid[grid], cost_model)
                if by_batch is not None:  # else the batch's graph differs from the fitted one: every point alone
                    pointwise = ~grid
                    t[grid] = by_batch
            for i in np.flatnonzero(pointwise):
                t[i] = _point_time_s(spec, hw, tmpl, phase, int(b_grid[i]), int(l_grid[i]), cost_model)
            n = len(t)
            cols["model"].append(np.full(n, spec.name, dtype=object))
            cols["hardware"].append(np.full(n, hw.name, dtype=object))
            cols["batch"].append(b_grid)
            cols["length"].append(l_grid)
            cols["time_s"].append(t)
            cols["weights"].append(np.full(n, w_bytes))
            cols["kv"].append(kv)
            cols["cap"].append(np.full(n, hw.memory_capacity_bytes))
    cat = {k: np.concatenate(v) for k, v in cols.items()}
    return SweepResult(
        model=cat["model"], hardware=cat["hardware"], phase=phase, batch=cat["batch"], length=cat["length"],
        time_s=cat["time_s"], tokens_per_s=cat["batch"] / cat["time_s"], weights_bytes=cat["weights"],
        kv_cache_bytes=cat["kv"], fits_in_memory=(cat["weights"] + cat["kv"]) <= cat["cap"],
    )
