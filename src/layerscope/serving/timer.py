"""The time of one engine step: the forward pass of a mixed batch (prompt chunks and decodes, each over its own
cached tokens) by the cost model, plus the engine's host time per step (``cost.execution``).

A step's forward is three kinds of kernels, each timed by the cost model: every op but attention over the whole
batch (T tokens, S sequences: projections, norms, MLP, collectives, KV writes, lm_head and sampling on one row per
sequence); the decodes' attention, one kernel; and each prompt chunk's attention, one kernel per distinct chunk
shape, as vLLM runs prefill and decode attention as separate kernels in a chunked-prefill step (its V0
FlashAttention backend: ``flash_attn_varlen_func`` for the prompts, ``flash_attn_with_kvcache`` for the
decodes).
The cost model's own treatment of one attention op over groups of different query lengths (no single query
length: the op at the peak) is not used.

Two paths give it:

* ``exact``: each of those kernels from a graph built for it, memoized by its shape;
* ``fast``: t = tok(T) + seq(S) + dec(d, k̄) + Σ_chunks pre(c, p), with d decodes at mean cached length k̄ and
  one (c new, p cached) per chunk (equal chunks together, exactly, as the exact path has them), every part
  read from small tables built on demand from exact graphs: exact at integers up to :data:`EXACT_UP_TO` and at
  a geometric grid of ratio 2^(1/4) beyond, linear in between; the attention parts linear in the cached length
  between two builds (exact for decode attention, whose work is affine in the context; sliding-window layers
  capped at the window). ``tests/serving/test_timer.py`` holds the fast path within :data:`FAST_PATH_TOLERANCE`
  of the exact one over random mixed steps of a full-attention model.

Either path times a whole graph's ops from a graph of its first two decoder layers where the layers repeat: the
same numbers, bit for bit (``serving.passes``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from layerscope.cost.execution import EngineTerms, engine_terms, host_step_s, step_time_s
from layerscope.cost.features import op_features
from layerscope.cost.models import get_cost_model
from layerscope.graph import build_layer_graph, build_model_graph
from layerscope.graph.ops import OpGraph
from layerscope.hardware.spec import HardwareSpec
from layerscope.model.spec import ModelSpec
from layerscope.serving.passes import layers_repeat, same_pass, two_layer_graph, whole_order
from layerscope.workload import ForwardPass, SequenceGroup, Workload

__all__ = ["EXACT_UP_TO", "FAST_PATH_TOLERANCE", "StepTimer", "grid_points"]

#: Table entries are exact for every count up to this; a geometric grid beyond.
EXACT_UP_TO = 16
#: Grid ratio beyond :data:`EXACT_UP_TO`: 2^(1/4).
_STEPS_PER_OCTAVE = 4
#: The cached length of the second build of each attention entry (tokens).
_REF_CONTEXT = 1024
#: The largest relative error of the fast path against the exact one that the tests accept.
FAST_PATH_TOLERANCE = 0.02


def grid_points(x: float) -> tuple[int, int]:
    """The grid points around ``x`` (≥ 1): equal when ``x`` is one."""
    if x <= EXACT_UP_TO:
        return max(1, math.floor(x)), max(1, math.ceil(x))
    k = _STEPS_PER_OCTAVE * math.log2(x / EXACT_UP_TO)
    lo_k, hi_k = math.floor(k + 1e-12), math.ceil(k - 1e-12)
    lo = round(EXACT_UP_TO * 2 ** (lo_k / _STEPS_PER_OCTAVE))
    hi = round(EXACT_UP_TO * 2 ** (hi_k / _STEPS_PER_OCTAVE))
    return lo, max(hi, lo)


@dataclass(frozen=True)
class _Parts:
    tok_s: float
    seq_s: float
    attn_full_s: float
    attn_slide_s: float


class StepTimer:
    """Seconds of engine steps of one model on one hardware spec under one plan (``template``: dtypes and plan)."""

    def __init__(self, spec: ModelSpec, hardware: HardwareSpec, template: Workload, cost_model: str = "roofline",
                 mode: str = "fast") -> None:
        self.spec = spec
        self.hardware = hardware
        self.template = template
        self.cost_fn = get_cost_model(cost_model)
        self.mode = mode
        self.terms: EngineTerms = engine_terms(hardware.execution)
        self.builds = 0
        window = spec.sliding_window
        self._sliding = window is not None and any(spec.layer_is_sliding(i) for i in range(spec.num_layers))
        self._window = int(window) if self._sliding and window is not None else None
        self._ref_full = _REF_CONTEXT
        self._ref_slide = min(_REF_CONTEXT, self._window - 1) if self._window is not None else _REF_CONTEXT
        self._seq_names: frozenset[str] | None = None
        self._two_layers = False  # set by _seq_ops
        self._layer_ok: bool | None = None
        kinds: dict[str, list[int]] = {"full": [], "slide": []}
        for i in range(spec.num_layers):
            kinds["slide" if self._sliding and spec.layer_is_sliding(i) else "full"].append(i)
        self._layer_kinds = kinds
        self._exact: dict[tuple[object, ...], float] = {}
        self._tok: dict[int, float] = {}
        self._seq: dict[int, float] = {}
        self._dec: dict[int, tuple[float, float, float, float]] = {}
        self._pre: dict[int, tuple[float, float, float, float]] = {}
        self._grid_cache: dict[float, tuple[int, int]] = {}
        self._lines: dict[int, tuple[float, float]] = {}
        # memos of the fast path's parts (the same interpolations, looked up once per shape)
        self._base_memo: dict[tuple[int, int], float] = {}
        self._dec_memo: dict[int, tuple[float, float]] = {}
        self._pre_memo: dict[tuple[int, int], float] = {}
        self._host_free = not (self.terms.step_overhead_s or self.terms.step_overhead_per_request_s)

    # -- exact graphs -------------------------------------------------------------------------------------------

    def pass_time_s(self, fwd: ForwardPass) -> float:
        """The forward time of ``fwd``: its graph timed op by op (the sum of the op times)."""
        return sum(self._op_times(fwd)[1]).__float__()

    def _op_times(self, fwd: ForwardPass) -> tuple[list[object], np.ndarray]:
        graph = build_model_graph(self.spec, fwd, self.template)
        self.builds += 1
        return list(graph.ops), np.asarray(self.cost_fn(op_features(graph), self.hardware).time_s, dtype=float)

    def _two_layer_times(self, fwd: ForwardPass) -> tuple[OpGraph, np.ndarray]:
        graph = two_layer_graph(self.spec, fwd, self.template)
        self.builds += 1
        return graph, np.asarray(self.cost_fn(op_features(graph), self.hardware).time_s, dtype=float)

    def _pass_times(self, fwd: ForwardPass) -> tuple[Sequence[object], list[float]]:
        """The whole graph's ops and op times of ``fwd``, in its order: from the two-layer graph where that
        stands for the whole (``serving.passes``, checked on the first passes), else from the whole graph."""
        self._seq_ops()  # decides _two_layers
        if self._two_layers:
            graph, times = self._two_layer_times(fwd)
            order = whole_order(graph, self.spec.num_layers)
            return [graph.ops[i] for i in order.tolist()], times[order].tolist()
        ops, whole = self._op_times(fwd)
        return ops, whole.tolist()

    def _parts(self, fwd: ForwardPass) -> _Parts:
        ops, times = self._pass_times(fwd)
        seq_names = self._seq_ops()
        tok = seq = full = slide = 0.0
        for op, t in zip(ops, times, strict=True):
            name, kind, layer = op.name, op.kind, op.layer  # type: ignore[attr-defined]
            if kind == "attention":
                if self._sliding and layer is not None and self.spec.layer_is_sliding(layer):
                    slide += t
                else:
                    full += t
            elif name in seq_names:
                seq += t
            else:
                tok += t
        return _Parts(tok, seq, full, slide)

    def _attn_parts(self, fwd: ForwardPass) -> tuple[float, float]:
        """The attention seconds of ``fwd`` on full-attention and on sliding-window layers: one layer of each kind
        built and multiplied by its layers, where that was checked to equal the whole model's graph (on the first
        call); else from the whole graph."""
        if self._layer_ok is not False:
            reps = [(kind, layers[0], len(layers)) for kind, layers in self._layer_kinds.items() if layers]
            by_layers = {"full": 0.0, "slide": 0.0}
            for kind, layer, count in reps:
                graph = build_layer_graph(self.spec, fwd, self.template, layer=layer)
                self.builds += 1
                times = self.cost_fn(op_features(graph), self.hardware).time_s
                by_layers[kind] += count * float(sum(t for op, t in zip(graph.ops, times, strict=True)
                                                     if op.kind == "attention"))
            if self._layer_ok:
                return by_layers["full"], by_layers["slide"]
            whole = self._parts(fwd)
            self._layer_ok = (math.isclose(whole.attn_full_s, by_layers["full"], rel_tol=1e-9)
                              and math.isclose(whole.attn_slide_s, by_layers["slide"], rel_tol=1e-9))
            return whole.attn_full_s, whole.attn_slide_s
        whole = self._parts(fwd)
        return whole.attn_full_s, whole.attn_slide_s

    def _seq_ops(self) -> frozenset[str]:
        """Names of the ops outside attention that run one row per sequence: those whose time differs between a
        prompt of 64 tokens and 64 decodes (the same tokens, 1 against 64 sequences). Their two whole graphs also
        decide whether two-layer graphs stand for whole ones (``serving.passes.same_pass`` on both)."""
        if self._seq_names is None:
            probe = 64
            passes = (ForwardPass(groups=(SequenceGroup(count=1, new_tokens=probe),)),
                      ForwardPass(groups=(SequenceGroup(count=probe, new_tokens=1, cached_tokens=1),)))
            (a_ops, a), (b_ops, b) = (self._op_times(fwd) for fwd in passes)
            if layers_repeat(self.spec, self.template):
                wholes = [build_model_graph(self.spec, fwd, self.template) for fwd in passes]
                checks = [(*self._two_layer_times(fwd), whole, times)
                          for fwd, whole, times in zip(passes, wholes, (a, b), strict=True)]
                self._two_layers = all(
                    same_pass(whole, times, graph, mine, whole_order(graph, self.spec.num_layers))
                    for graph, mine, whole, times in checks)
            b_by_name = {op.name: t for op, t in zip(b_ops, b, strict=True)}  # type: ignore[attr-defined]
            self._seq_names = frozenset(
                op.name for op, t in zip(a_ops, a, strict=True)  # type: ignore[attr-defined]
                if op.kind != "attention" and op.name in b_by_name  # type: ignore[attr-defined]
                and not math.isclose(float(t), float(b_by_name[op.name]), rel_tol=1e-9))  # type: ignore[attr-defined]
        return self._seq_names

    # -- fast tables --------------------------------------------------------------------------------------------

    def _decode_entry(self, g: int) -> tuple[float, float, float, float]:
        entry = self._dec.get(g)
        if entry is None:
            def fwd(cached: int) -> ForwardPass:
                return ForwardPass(groups=(SequenceGroup(count=g, new_tokens=1, cached_tokens=cached),))

            if g in self._tok and g in self._seq:
                at1 = self._attn_parts(fwd(1))
            else:
                whole = self._parts(fwd(1))
                self._tok.setdefault(g, whole.tok_s)
                self._seq.setdefault(g, whole.seq_s)
                at1 = (whole.attn_full_s, whole.attn_slide_s)
            at_full = self._attn_parts(fwd(self._ref_full))
            at_slide = at_full if self._ref_slide == self._ref_full else self._attn_parts(fwd(self._ref_slide))
            entry = self._dec[g] = (at1[0], at_full[0], at1[1], at_slide[1])
        return entry

    def _prefill_entry(self, c: int) -> tuple[float, float, float, float]:
        entry = self._pre.get(c)
        if entry is None:
            def fwd(cached: int) -> ForwardPass:
                return ForwardPass(groups=(SequenceGroup(count=1, new_tokens=c, cached_tokens=cached),))

            if c in self._tok and 1 in self._seq:
                at0 = self._attn_parts(fwd(0))
            else:
                whole = self._parts(fwd(0))
                self._tok.setdefault(c, whole.tok_s)
                self._seq.setdefault(1, whole.seq_s)
                at0 = (whole.attn_full_s, whole.attn_slide_s)
            at_full = self._attn_parts(fwd(self._ref_full))
            at_slide = at_full if self._ref_slide == self._ref_full else self._attn_parts(fwd(self._ref_slide))
            entry = self._pre[c] = (at0[0], at_full[0], at0[1], at_slide[1])
        return entry

    def _tok_at(self, x: int) -> float:
        value = self._tok.get(x)
        if value is None:
            self._prefill_entry(x)
            value = self._tok[x]
        return value

    def _seq_at(self, x: int) -> float:
        value = self._seq.get(x)
        if value is None:
            self._decode_entry(x)
            value = self._seq[x]
        return value

    def _points(self, x: float) -> tuple[int, int]:
        pts = self._grid_cache.get(x)
        if pts is None:
            pts = grid_points(x)
            if len(self._grid_cache) < 1 << 16:
                self._grid_cache[x] = pts
        return pts

    def _interp(self, x: float, table_at: Callable[[int], float]) -> float:
        lo, hi = self._grid_cache.get(x) or self._points(x)
        a = table_at(lo)
        if hi == lo:
            return float(a)
        b = table_at(hi)
        return float(a + (b - a) * (x - lo) / (hi - lo))

    def _dec_attn(self, g: int, mean_ctx: float) -> float:
        f1, fc, s1, sc = self._decode_entry(g)
        full = f1 + (fc - f1) * (mean_ctx - 1) / (self._ref_full - 1)
        if not self._sliding:
            return full
        capped = min(mean_ctx, float(self._ref_slide))
        return full + s1 + (sc - s1) * (capped - 1) / (self._ref_slide - 1)

    def _pre_interp(self, c: int, cached: float) -> float:
        """``_interp(c, lambda x: _pre_attn(x, cached))``, the same arithmetic in fewer calls (once per chunk shape)."""
        lo, hi = self._grid_cache.get(c) or self._points(c)
        a = self._pre_attn(lo, cached)
        if hi == lo:
            return float(a)
        b = self._pre_attn(hi, cached)
        return float(a + (b - a) * (c - lo) / (hi - lo))

    def _pre_attn(self, c: int, cached: float) -> float:
        f0, fc, s0, sc = self._pre.get(c) or self._prefill_entry(c)
        full = f0 + (fc - f0) * cached / self._ref_full
        if not self._sliding:
            return full
        capped = min(cached, float(self._ref_slide))
        return full + s0 + (sc - s0) * capped / self._ref_slide

    def fast_forward_s(self, chunks: Sequence[tuple[int, int]], decodes: int, decode_ctx_sum: float) -> float:
        """The fast path's forward seconds of a step of prompt ``chunks`` ((new, cached) each) and ``decodes``
        decodes whose cached lengths sum to ``decode_ctx_sum``."""
        tokens = decodes + (chunks[0][0] if len(chunks) == 1 else sum(c for c, _ in chunks))
        seqs = decodes + len(chunks)
        if tokens == 0:
            return 0.0
        total = self._base_memo.get((tokens, seqs))
        if total is None:
            total = self._base_memo[(tokens, seqs)] = (self._interp(tokens, self._tok_at)
                                                       + self._interp(seqs, self._seq_at))
        if decodes:
            mean_ctx = decode_ctx_sum / decodes
            if self._sliding:
                total += self._interp(decodes, lambda g: self._dec_attn(g, mean_ctx))
            else:
                # without sliding layers the decodes' attention is affine in their mean context (_dec_attn), and
                # so is its interpolation between two batch sizes: two numbers per batch size
                line = self._dec_memo.get(decodes)
                if line is None:
                    at1 = self._interp(decodes, lambda g: self._dec_attn(g, 1.0))
                    at_ref = self._interp(decodes, lambda g: self._dec_attn(g, float(self._ref_full)))
                    line = self._dec_memo[decodes] = (at1, (at_ref - at1) / (self._ref_full - 1))
                total += line[0] + line[1] * (mean_ctx - 1.0)
        groups = Counter(chunks).items() if len(chunks) > 1 else [(chunk, 1) for chunk in chunks]
        for (c, p), n in groups:
            if n == 1:
                pre = self._pre_memo.get((c, p))
                if pre is None:
                    pre = self._pre_memo[(c, p)] = self._pre_interp(c, p)
                total += pre
            else:  # equal chunks share one kernel: its exact time (few shapes repeat)
                total += self._chunks_attention_s(c, p, n)
        return max(total, 0.0)

    def exact_forward_s(self, chunks: Sequence[tuple[int, int]], decode_ctx: np.ndarray) -> float:
        """The exact forward seconds of a step: every op but attention from the step's own graph, the decodes'
        attention from a graph of the decodes alone, and each distinct prompt chunk's attention (equal chunks
        together) from a graph of that chunk alone; each memoized by its shape."""
        ctx_values, ctx_counts = np.unique(np.asarray(decode_ctx, dtype=np.int64), return_counts=True)
        decodes = tuple(zip(ctx_values.tolist(), ctx_counts.tolist(), strict=True))
        prompt_groups = tuple(sorted(Counter(chunks).items()))
        if not decodes and not prompt_groups:
            return 0.0
        total = self._memo(("all", prompt_groups, decodes), lambda: self._rest_s(
            [SequenceGroup(count=n, new_tokens=c, cached_tokens=p) for (c, p), n in prompt_groups]
            + [SequenceGroup(count=n, new_tokens=1, cached_tokens=k) for k, n in decodes]))
        if decodes:
            total += self._memo(("dec", decodes), lambda: self._attention_s(
                [SequenceGroup(count=n, new_tokens=1, cached_tokens=k) for k, n in decodes]))
        for (c, p), n in prompt_groups:
            total += self._chunks_attention_s(c, p, n)
        return total

    def _chunks_attention_s(self, new: int, cached: int, count: int) -> float:
        """The attention kernel of ``count`` equal prompt chunks (memoized)."""
        key = ("pre", new, cached, count)
        value = self._exact.get(key)
        if value is None:
            value = self._exact[key] = self._attention_s(
                [SequenceGroup(count=count, new_tokens=new, cached_tokens=cached)])
        return value

    def _memo(self, key: tuple[object, ...], compute: Callable[[], float]) -> float:
        value = self._exact.get(key)
        if value is None:
            value = self._exact[key] = compute()
        return value

    def _rest_s(self, groups: list[SequenceGroup]) -> float:
        parts = self._parts(ForwardPass(groups=tuple(groups)))
        return parts.tok_s + parts.seq_s

    def _attention_s(self, groups: list[SequenceGroup]) -> float:
        full, slide = self._attn_parts(ForwardPass(groups=tuple(groups)))
        return full + slide

    def forward_s(self, chunks: Sequence[tuple[int, int]], decode_ctx: np.ndarray) -> float:
        """Forward seconds of a step by this timer's mode."""
        if self.mode == "exact":
            return self.exact_forward_s(chunks, decode_ctx)
        return self.fast_forward_s(chunks, len(decode_ctx), float(np.sum(decode_ctx)) if len(decode_ctx) else 0.0)

    def decode_line(self, decodes: int) -> tuple[float, float]:
        """(a, b): the fast path's forward seconds of ``decodes`` decodes alone as a + b · (their cached tokens'
        sum), exact where :attr:`linear_in_context`."""
        line = self._lines.get(decodes)
        if line is None:
            f0 = self.fast_forward_s((), decodes, float(decodes))
            f1 = self.fast_forward_s((), decodes, float(decodes) * (1 + _REF_CONTEXT))
            slope = (f1 - f0) / (decodes * _REF_CONTEXT)
            line = self._lines[decodes] = (f0 - slope * decodes, slope)
        return line

    @property
    def linear_in_context(self) -> bool:
        """Whether a decode-only step's fast time is affine in the cached tokens (no sliding-window layers)."""
        return not self._sliding

    @property
    def host_free(self) -> bool:
        """Whether a step's wall time is its forward time (no host time per step): :meth:`steps_s` returns its
        input."""
        return self._host_free

    def steps_s(self, forward_s: np.ndarray, sequences: int) -> np.ndarray:
        """Wall seconds of decode-only steps of ``sequences`` sequences (no request starts in them)."""
        if self._host_free:
            return np.asarray(forward_s, dtype=float)
        host = host_step_s(self.terms, sequences)
        return np.asarray(step_time_s(np.asarray(forward_s, dtype=float), host, self.terms, first=False),
                          dtype=float) * np.ones(len(forward_s))

    def step_s(self, forward_s: float, sequences: int, *, first: bool, admitted: bool) -> float:
        """Wall seconds of a step: its forward and the engine's host time per step (overlapped with the forward
        where the profile does and the step starts no request: ``cost.execution.step_time_s``), plus the
        request overhead when it admits requests."""
        # host_step_s and step_time_s on floats, without numpy (the same arithmetic): a call per engine step
        terms = self.terms
        host = terms.step_overhead_s + terms.step_overhead_per_request_s * sequences
        total = float(max(forward_s, host) if terms.overlap_host and not first else forward_s + host)
        return total + (terms.request_overhead_s if admitted else 0.0)
