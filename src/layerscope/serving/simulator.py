"""The serving simulation: requests arrive, engines batch them step by step, every step timed by the cost model
(``serving.timer``), the KV cache paged in blocks (``serving.kv``).

An event loop in simulated time, like ``schedule``'s: the next event is the earliest of an engine finishing its
step, a KV transfer landing (disaggregated) and a request arriving; after the events of one instant, every idle
engine with work forms its next step through its scheduler policy (``serving.schedulers``). A step's tokens all
appear at its end.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, TypeVar

import numpy as np

from layerscope.cost.collectives import collective_time_s
from layerscope.errors import LayerscopeError
from layerscope.hardware import HardwareSpec, load_hardware
from layerscope.model import ModelSpec, load_model_spec
from layerscope.schedule.core import paused_gc
from layerscope.serving.energy import ServingEnergy, StepEnergy, serving_energy
from layerscope.serving.kv import kv_capacity
from layerscope.serving.schedulers import SCHEDULERS, SchedulerPolicy
from layerscope.serving.spec import ServingError, ServingRequest
from layerscope.serving.timer import StepTimer
from layerscope.serving.traffic import Request, generate_requests
from layerscope.workload import Workload, make_workload
from layerscope.workload.workload import check_parallel

__all__ = ["ServingRun", "run_serving", "simulate_requests"]

#: Most decode steps taken at once by one leap (bounds its arrays: batch × steps).
_MAX_LEAP = 256
#: Leaps of at most this many steps are timed on floats, term by term (numpy's per-call cost exceeds the work).
_FEW_STEPS = 32
#: No slots (shared: never written to).
_NO_SLOTS = np.empty(0, dtype=np.int64)
#: ``a.sum()`` and ``a.min()`` of a 1-D array without numpy's Python wrapper (the same reduction; ~2× cheaper on the
#: small arrays of a step).
_sum, _min = np.add.reduce, np.minimum.reduce


@dataclass(frozen=True)
class ServingRun:
    """What a simulation produced. Per request (one row per request, sorted by id): times in seconds from the
    first arrival. Per iteration (one row per engine step, in order of start): what the step ran and the state
    of its engine when it started. Tokens: every token's time, grouped by request (``token_offsets``)."""

    request: ServingRequest
    id: np.ndarray
    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    prefix_hit_tokens: np.ndarray
    queued_s: np.ndarray
    """From arrival to the first step that ran any of the request's tokens."""
    preemptions: np.ndarray
    replica: np.ndarray
    """The engine that produced the request's last token."""
    token_s: np.ndarray
    """Every token's time, request after request, in order within each."""
    token_offsets: np.ndarray
    """Request i's tokens are ``token_s[token_offsets[i]:token_offsets[i + 1]]`` ([requests + 1])."""
    start_s: np.ndarray
    end_s: np.ndarray
    iteration_replica: np.ndarray
    prefill_tokens: np.ndarray
    """Prompt tokens computed in the step (chunks and recomputations)."""
    decode_seqs: np.ndarray
    batch_seqs: np.ndarray
    """Sequences in the step: decodes and prompt chunks."""
    kv_blocks_used: np.ndarray
    """Blocks held on the engine while the step runs."""
    queue_len: np.ndarray
    """Requests waiting (or swapped out) on the engine when the step started."""
    running: np.ndarray
    """Requests admitted on the engine (holding a slot) when the step started, those in the step included."""
    kv_capacity_blocks: int
    """Blocks per engine."""
    block_tokens: int
    roles: tuple[str, ...]
    """Each engine's role: ``mixed``, ``prefill`` or ``decode``."""
    kv_bytes_per_token: float
    graph_builds: int = 0
    """Graphs the step timer built."""
    wall_s: float = 0.0
    """Seconds the simulation took on this machine."""
    extra: dict[str, float] = field(default_factory=dict)
    decode_context_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Per iteration: the decodes' cached tokens summed (the KV they read)."""
    prefill_pairs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Per iteration: the (query, key) pairs the prompt chunks attend (causal)."""
    token_iteration: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per token (as ``token_s``): the iteration (row of the per-iteration arrays) that made it."""
    energy: ServingEnergy | None = None
    """Joules per step and per request (``serving.energy``); None where the hardware spec has no energy figures."""

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_capacity_blocks * self.block_tokens

    @property
    def kv_usage(self) -> np.ndarray:
        """Per iteration, the share of its engine's blocks in use."""
        return self.kv_blocks_used / self.kv_capacity_blocks

    def itl_s(self, i: int | None = None) -> np.ndarray:
        """Inter-token latencies: of request ``i`` (its gaps between successive tokens), or of every request."""
        if i is not None:
            return np.diff(self.token_s[self.token_offsets[i]:self.token_offsets[i + 1]])
        gaps = np.diff(self.token_s)
        starts = self.token_offsets[1:-1] - 1  # the gap from a request's last token to the next one's first
        keep = np.ones(len(gaps), dtype=bool)
        keep[starts[(starts >= 0) & (starts < len(gaps))]] = False
        return gaps[keep]


class _GrowingBlocks(NamedTuple):
    """The blocks an engine uses at each step of a leap, kept to be counted later (``_blocks_used``):
    ``used_before`` blocks before it, and its decodes' cached tokens and blocks; at step j (0 …) decode i holds
    max(blocks_i, ⌈(ctx_i + j + 1) / B⌉) blocks."""

    used_before: int
    ctx: np.ndarray
    blocks: np.ndarray


def _blocks_used(used: Sequence[np.ndarray | _GrowingBlocks], lens: np.ndarray, block_tokens: int) -> np.ndarray:
    """Blocks used at every step of the leaps (``lens[i]`` steps each; ``used[i]``: its blocks per step, or a
    :class:`_GrowingBlocks` to count), concatenated. Decode i, holding b_i ≥ ⌈c_i / B⌉ blocks, first needs a
    new one at step j_i = b_i·B − c_i and then every B steps: the growth at step j is the count of those
    crossings at or before j."""
    out = np.empty(int(lens.sum()), dtype=np.float64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    grow = []
    for i, u in enumerate(used):
        if isinstance(u, _GrowingBlocks):
            grow.append((i, u))
        else:
            out[starts[i]:starts[i] + lens[i]] = u
    if not grow:
        return out
    index = np.array([i for i, _ in grow], dtype=np.int64)
    k = lens[index]
    base = starts[index]
    d = np.array([len(g.ctx) for _, g in grow], dtype=np.int64)
    ctx = np.concatenate([g.ctx for _, g in grow])
    blocks = np.concatenate([g.blocks for _, g in grow])
    k_each = np.repeat(k, d)
    first = blocks * block_tokens - ctx  # the step of each decode's first new block
    assert (first >= 0).all(), "a decode holds fewer blocks than its cached tokens fill"
    crossings = np.where(first < k_each, (k_each - first + block_tokens - 1) // block_tokens, 0)
    owner = np.repeat(np.repeat(base, d), crossings)
    nth = np.arange(int(crossings.sum())) - np.repeat(np.cumsum(crossings) - crossings, crossings)
    at = owner + np.repeat(first, crossings) + block_tokens * nth
    total = np.concatenate([[0], np.cumsum(np.bincount(at, minlength=len(out)))])  # crossings before each step
    steps = np.repeat(base, k) + np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
    used_before = np.array([g.used_before for _, g in grow], dtype=np.int64)
    out[steps] = np.repeat(used_before - total[base], k) + total[steps + 1]
    return out


class _Engine:
    """One engine's state: waiting and swapped queues, running slots as arrays, free KV blocks."""

    def __init__(self, index: int, role: str, slots: int, blocks: int) -> None:
        self.index = index
        self.role = role
        self.free = blocks
        self.waiting: deque[int] = deque()
        self.swapped: deque[int] = deque()
        self.order: list[int] = []  # running slots, oldest admission first
        self.prefilling: list[int] = []  # running slots still computing their prompt, oldest first
        self.s_active = np.zeros(slots, dtype=bool)
        self.s_dec = np.zeros(slots, dtype=bool)  # running slots whose prompt is in the KV cache
        # cached tokens, tokens generated, output tokens, blocks held, prompt target, request (−1: none): rows of
        # one array, so that one gather reads them all for a set of slots (``state.take(slots, axis=1)``)
        self.state = np.zeros((6, slots), dtype=np.int64)
        self.s_ctx, self.s_gen, self.s_out, self.s_blocks, self.s_target, self.s_req = self.state
        self.s_req[:] = -1
        self.free_slots = list(range(slots - 1, -1, -1))
        self.busy = False
        self.inbound = 0  # transfers on their way here
        self.step: tuple[np.ndarray, list[tuple[int, int]], int, int] | None = None  # decodes, chunks, leap, ref
        self._decoding: np.ndarray | None = None
        self.leap_done = _NO_SLOTS  # the decodes the running leap finishes

    def decoding(self) -> np.ndarray:
        """The running slots whose prompt is in the KV cache, ascending (kept until ``s_dec`` changes: the
        caller does not write to it)."""
        if self._decoding is None:
            self._decoding = self.s_dec.nonzero()[0]
        return self._decoding

    def set_decoding(self, slot: int, value: bool) -> None:
        self.s_dec[slot] = value
        self._decoding = None

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.swapped) + len(self.order) + self.inbound

    def has_work(self) -> bool:
        return bool(self.waiting or self.swapped or self.order)


def _resolve(request: ServingRequest) -> tuple[ModelSpec, HardwareSpec]:
    spec = request.model if isinstance(request.model, ModelSpec) else load_model_spec(os.fspath(request.model))
    hw = request.hardware if isinstance(request.hardware, HardwareSpec) else load_hardware(
        os.fspath(request.hardware))
    if request.execution is not None:
        from layerscope.cost.execution import with_profile

        hw = with_profile(hw, request.execution)
    return spec, hw


def _template(spec: ModelSpec, request: ServingRequest) -> Workload:
    plan = request.plan
    fields: dict[str, object] = {"phase": "decode", "batch": 1, "context": 1, "weight_dtype": request.weight_dtype,
                                 "act_dtype": request.act_dtype, "kv_dtype": request.kv_dtype}
    for name in ("tensor_parallel", "pipeline_parallel", "expert_parallel"):
        if getattr(plan, name) != 1:
            fields[name] = getattr(plan, name)
    if plan.sequence_parallel:
        fields["sequence_parallel"] = True
    try:
        workload = make_workload(**fields)
    except LayerscopeError as exc:
        raise ServingError(f"serving plan: {exc}") from None
    check_parallel(spec, workload)
    return workload


_T = TypeVar("_T")


def _recall(cache: list[tuple[tuple[object, ...], _T]], key: tuple[object, ...], make: Callable[[], _T]) -> _T:
    """The value of ``key`` in ``cache`` (the 8 most recently made, by equality of the keys: the same model, hardware
    and plan, however loaded; pydantic compares fields, without serializing them), else ``make()``'s, kept."""
    for known, value in cache:
        if known == key:
            return value
    value = make()
    if len(cache) >= 8:
        cache.pop(0)
    cache.append((key, value))
    return value


#: Step timers of recent runs, by what their tables depend on: runs of one model, hardware and plan (a rate
#: search, a grid) share their tables.
_TIMERS: list[tuple[tuple[object, ...], StepTimer]] = []


def _timer(spec: ModelSpec, hw: HardwareSpec, template: Workload, cost_model: str, mode: str) -> StepTimer:
    return _recall(_TIMERS, (spec, hw, template, cost_model, mode),
                   lambda: StepTimer(spec, hw, template, cost_model, mode))


def run_serving(request: ServingRequest, progress: Callable[[float], None] | None = None) -> ServingRun:
    """Simulate ``request``: its traffic (``generate_requests``) served by its engines. ``progress`` is called with
    the share of requests finished (0 … 1) as they finish. Deterministic: the same request gives the same arrays."""
    return simulate_requests(request, generate_requests(request.traffic), progress)


def simulate_requests(request: ServingRequest, requests: list[Request],
                      progress: Callable[[float], None] | None = None) -> ServingRun:
    """Simulate ``requests`` (ids 0 … n−1 in order; NaN arrivals: a closed loop of ``traffic.users``) on the engines
    ``request`` describes."""
    wall0 = time.perf_counter()
    spec, hw = _resolve(request)
    template = _template(spec, request)
    sched = request.scheduler
    if sched.max_num_batched_tokens < sched.max_num_seqs and sched.name != "static":
        raise ServingError(f"scheduler: max_num_batched_tokens ({sched.max_num_batched_tokens}) must be at least "
                           f"max_num_seqs ({sched.max_num_seqs}), so every running decode fits a step")
    policy: SchedulerPolicy = SCHEDULERS.lookup(sched.name)(sched)
    cap = kv_capacity(spec, hw, template, max_batched_tokens=sched.max_num_batched_tokens,
                      block_tokens=sched.block_tokens, utilization=request.gpu_memory_utilization,
                      override_tokens=request.kv_capacity_tokens)
    timer = _timer(spec, hw, template, request.cost_model, request.timer)
    roles = policy.roles(request.replicas * request.plan.data_parallel)
    sim = _Simulation(request, requests, policy, timer, roles, cap.blocks, cap.bytes_per_token, hw, progress)
    # The loop allocates ~10^5 small tuples and arrays, none in a reference cycle: the collector's passes over them
    # found nothing and cost ~8% of a 10,000-request run (paused, and restored as it was, whatever happens).
    with paused_gc():
        sim.run()
    run = sim.result(time.perf_counter() - wall0, cap.bytes_per_token)
    if hw.energy is not None:
        step = _step_energy(spec, hw, template, request.cost_model)
        plan = request.plan
        duration = float(np.nanmax(run.finish_s) - np.nanmin(run.arrival_s)) if len(run.finish_s) else 0.0
        energy = serving_energy(
            step, devices=plan.tensor_parallel * plan.pipeline_parallel, replicas=len(roles), duration_s=duration,
            start_s=run.start_s, end_s=run.end_s, tokens=(run.prefill_tokens + run.decode_seqs).astype(np.float64),
            seqs=run.batch_seqs.astype(np.float64), ctx=run.decode_context_tokens, pairs=run.prefill_pairs,
            token_step=run.token_iteration, token_offsets=run.token_offsets,
            prompt_tokens=run.prompt_len - run.prefix_hit_tokens, output_tokens=run.output_len)
        run = replace(run, energy=energy, wall_s=time.perf_counter() - wall0)
    return run


#: Fitted step energies of recent runs, kept as :data:`_TIMERS`.
_ENERGIES: list[tuple[tuple[object, ...], StepEnergy]] = []


def _step_energy(spec: ModelSpec, hw: HardwareSpec, template: Workload, cost_model: str) -> StepEnergy:
    return _recall(_ENERGIES, (spec, hw, template, cost_model), lambda: StepEnergy.fit(spec, hw, template, cost_model))


class _Simulation:
    def __init__(self, request: ServingRequest, requests: list[Request], policy: SchedulerPolicy,
                 timer: StepTimer, roles: list[str], blocks: int, kv_bytes_per_token: float, hw: HardwareSpec,
                 progress: Callable[[float], None] | None) -> None:
        self.request = request
        self.policy = policy
        self.timer = timer
        self.hw = hw
        self.progress = progress
        sched = request.scheduler
        self.B = sched.block_tokens
        self.blocks = blocks
        self.block_bytes = kv_bytes_per_token * self.B
        self.kv_bytes_per_token = kv_bytes_per_token
        self.roles = tuple(roles)
        n = len(requests)
        self.n = n
        if any(r.id != i for i, r in enumerate(requests)):
            raise ServingError("requests must have ids 0 … n−1 in order")
        self.arrival = np.array([r.arrival_s for r in requests], dtype=np.float64)
        self.prompt = np.array([r.prompt_len for r in requests], dtype=np.int64)
        self.output = np.array([r.output_len for r in requests], dtype=np.int64)
        hits = np.array([r.prefix_hit_tokens for r in requests], dtype=np.int64)
        if sched.prefix_hit_rate > 0:
            # Whole blocks of the prompt, at least its last token computed (vLLM's automatic prefix caching).
            cached = np.floor(sched.prefix_hit_rate * (self.prompt - 1) / self.B).astype(np.int64) * self.B
            hits = np.maximum(hits, cached)
        self.hit = np.minimum(hits, self.prompt - 1)
        need = -(-(self.prompt + self.output) // self.B)
        if n and int(need.max()) > blocks:
            worst = int(np.argmax(need))
            raise ServingError(f"request {worst} needs {int(need[worst])} KV blocks ({int(self.prompt[worst])} + "
                               f"{int(self.output[worst])} tokens) but an engine holds {blocks} blocks of {self.B}")
        self.r_ctx = np.zeros(n, dtype=np.int64)
        self.r_gen = np.zeros(n, dtype=np.int64)
        self.r_kv_ready = np.zeros(n, dtype=bool)
        self.r_target = np.zeros(n, dtype=np.int64)  # where a request with its KV kept resumes its prompt
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.first_sched = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.replica = np.full(n, -1, dtype=np.int64)
        slots = policy.max_running()
        self.engines = [_Engine(i, role, slots, blocks) for i, role in enumerate(roles)]
        self.entry = [e for e in self.engines if e.role in ("mixed", "prefill")]
        self.decoders = [e for e in self.engines if e.role == "decode"]
        self.heap: list[tuple[float, int, int, int, int]] = []  # (time, kind, seq, engine, request)
        self.seq = 0
        # (requests, steps k, iteration): each request made a token at the end of each of k steps, the first
        # iteration i ≥ 0 the i-th of self.it, −(L + 1) the first of leap L (self.it_blocks), the rest after it
        self.tokens: list[tuple[np.ndarray, int, int]] = []
        self.it: list[tuple[float, float, int, int, int, int, int, int, int, float, float]] = []
        # Leaps' iterations: starts, ends, engine, decodes, blocks used per step, queue, running, decode context of
        # the first step (d more each step).
        self.it_blocks: list[tuple[np.ndarray, np.ndarray, int, int, np.ndarray | _GrowingBlocks, int, int,
                                   float]] = []
        self.lines: dict[int, tuple[float, float, float]] = {}  # decodes: the timer's decode_line, shortest step
        self.done = 0
        self.preempted = 0
        self.next_progress = 0.0
        self.closed = bool(n) and bool(np.isnan(self.arrival).any())
        self.next_id = 0
        self.think = request.traffic.think_s
        if self.closed:
            users = request.traffic.users or 1
            for _ in range(min(users, n)):
                self._push(0.0, 2, -1, self.next_id)
                self.next_id += 1
        self.ptr = 0
        order = np.argsort(self.arrival, kind="stable") if not self.closed else np.arange(n)
        self.order: list[int] = order.tolist()
        # open loop: the arrival times in order, then ∞
        self.next_arrival: list[float] = ([] if self.closed else self.arrival[order].tolist()) + [math.inf]

    def _push(self, t: float, kind: int, engine: int, req: int) -> None:
        heapq.heappush(self.heap, (t, kind, self.seq, engine, req))
        self.seq += 1

    # -- the loop ------------------------------------------------------------------------------------------------

    def run(self) -> None:
        dirty: set[int] = set()
        heap, next_arrival, pop = self.heap, self.next_arrival, heapq.heappop  # (the same list objects throughout)
        while True:
            t_heap = heap[0][0] if heap else math.inf
            t_arr = next_arrival[self.ptr]
            now = t_arr if t_arr < t_heap else t_heap
            if now == math.inf:
                break
            while heap and heap[0][0] <= now:
                _, kind, _, engine, req = pop(heap)
                if kind == 0:
                    self._end_step(self.engines[engine], now)
                    dirty.add(engine)
                elif kind == 1:
                    eng = self.engines[engine]
                    eng.inbound -= 1
                    eng.waiting.append(req)
                    dirty.add(engine)
                else:
                    self.arrival[req] = now
                    dirty.add(self._dispatch(req))
            while next_arrival[self.ptr] <= now:
                dirty.add(self._dispatch(self.order[self.ptr]))
                self.ptr += 1
            for index in sorted(dirty) if len(dirty) > 1 else dirty:
                eng = self.engines[index]
                if not eng.busy and eng.has_work():
                    self._start_step(eng, now)
            dirty.clear()
        if self.done != self.n:
            raise ServingError(f"the simulation stalled with {self.n - self.done} of {self.n} requests unfinished")

    def _dispatch(self, req: int) -> int:
        # Least loaded engine (fewest unfinished requests), ties to the lowest index.
        eng = self.entry[0] if len(self.entry) == 1 else min(self.entry, key=lambda e: (e.load, e.index))
        eng.waiting.append(req)
        return eng.index

    # -- forming a step ------------------------------------------------------------------------------------------

    def _blocks_for(self, tokens: np.ndarray | int) -> np.ndarray | int:
        return -(-tokens // self.B)

    def _preempt(self, eng: _Engine, slot: int) -> float:
        """Evict ``slot`` (the most recently admitted running request); seconds of swap-out copy it costs."""
        req = int(eng.s_req[slot])
        self.preemptions[req] += 1
        self.preempted += 1
        blocks = int(eng.s_blocks[slot])
        eng.free += blocks
        self.r_gen[req] = eng.s_gen[slot]
        seconds = 0.0
        if self.request.scheduler.preemption == "swap":
            self.r_ctx[req] = eng.s_ctx[slot]
            self.r_target[req] = eng.s_target[slot]
            self.r_kv_ready[req] = True
            eng.swapped.append(req)
            seconds = blocks * self.block_bytes / self.request.scheduler.swap_bytes_per_s
        else:
            self.r_ctx[req] = 0
            self.r_kv_ready[req] = False
            eng.waiting.appendleft(req)
        self._release(eng, slot)
        return seconds

    def _release(self, eng: _Engine, slot: int) -> None:
        eng.s_active[slot] = False
        eng.set_decoding(slot, False)
        if eng.s_ctx[slot] < eng.s_target[slot]:
            eng.prefilling.remove(slot)
        eng.s_req[slot] = -1
        eng.s_blocks[slot] = 0
        eng.order.remove(slot)
        eng.free_slots.append(slot)

    def _admit(self, eng: _Engine, req: int, now: float) -> int:
        slot = eng.free_slots.pop()
        eng.s_active[slot] = True
        eng.s_req[slot] = req
        gen = int(self.r_gen[req])
        if self.r_kv_ready[req]:
            ctx = int(self.r_ctx[req])
            target = max(ctx, int(self.r_target[req]))
        else:
            # A prompt (again, after a recompute preemption: prompt and the tokens generated so far).
            ctx = int(self.hit[req])
            target = int(self.prompt[req]) + gen
        eng.s_ctx[slot] = ctx
        eng.s_target[slot] = target
        eng.s_gen[slot] = gen
        eng.s_out[slot] = self.output[req]
        eng.s_blocks[slot] = 0
        eng.order.append(slot)
        if ctx < target:
            eng.prefilling.append(slot)
        else:
            eng.set_decoding(slot, True)
        if math.isnan(self.first_sched[req]):
            self.first_sched[req] = now
        return slot

    def _decodes(self, eng: _Engine, limit: int | None) -> np.ndarray:
        dec = eng.decoding()
        if limit is not None and len(dec) > limit:
            rank = {slot: i for i, slot in enumerate(eng.order)}
            dec = np.array(sorted(dec.tolist(), key=rank.__getitem__)[:limit], dtype=np.int64)
        return dec

    def _admit_with_kv(self, eng: _Engine, queue: deque[int], now: float, reserved: int) -> int:
        """Admit the head of ``queue``, a request whose KV exists (swapped out, or transferred from a prefill
        engine), with blocks for its context and the next token beside the ``reserved`` ones; returns the blocks
        taken, 0 when they do not fit."""
        req = queue[0]
        need = int(self._blocks_for(int(self.r_ctx[req]) + 1))
        if need > eng.free - reserved:
            return 0
        queue.popleft()
        slot = self._admit(eng, req, now)
        eng.s_blocks[slot] = need
        eng.free -= need
        return need

    def _start_step(self, eng: _Engine, now: float, carry_s: float = 0.0, again: bool = True) -> None:
        policy = self.policy
        running_before = len(eng.order)
        preempted_before = self.preempted
        if (carry_s == 0.0 and self.timer.mode == "fast" and not eng.prefilling and eng.order
                and (not (eng.waiting or eng.swapped) or not policy.may_admit(len(eng.order))
                     or len(eng.order) >= policy.max_running()) and self._leap(eng, now)):
            return
        budget = policy.token_budget()
        left = budget if budget is not None else 1 << 62
        chunked = policy.chunked()
        reserve = policy.reserve_output()
        max_running = policy.max_running()
        swap_s = carry_s
        chunks: list[tuple[int, int]] = []  # (slot, new tokens)
        admitted = False
        dec = _NO_SLOTS
        dec_blocks = 0
        pending = 0  # blocks promised to this step's prompt chunks
        promised: dict[int, tuple[int, int]] = {}  # slot -> (its blocks in ``pending``, its chunk's tokens)

        def preempt(slot: int) -> None:
            """Evict ``slot``; a chunk it was given in this step leaves the step and gives back its blocks and
            tokens (vLLM's scheduler returns a preempted request's tokens to the step's budget likewise)."""
            nonlocal swap_s, pending, left
            swap_s += self._preempt(eng, slot)
            if slot in promised:
                blocks, tokens = promised.pop(slot)
                chunks.remove((slot, tokens))
                pending -= blocks
                left += tokens

        planned: tuple[np.ndarray, np.ndarray, np.ndarray, int] | None = None  # decodes, contexts, blocks wanted

        def plan_decodes(limit: int | None) -> tuple[np.ndarray, int]:
            nonlocal swap_s, planned
            while True:
                d = self._decodes(eng, limit)
                if reserve or not len(d):
                    return d, 0
                sub = eng.state.take(d, axis=1)
                ctx = sub[0]
                want = (ctx + self.B) // self.B  # ⌈(ctx + 1) / B⌉
                need = int(_sum(want - sub[3]))
                if need <= eng.free or not eng.order:
                    planned = (d, ctx, want, self.preempted)
                    return d, need
                preempt(eng.order[-1])

        def plan_running_prompts() -> None:
            nonlocal left, swap_s, pending
            taken = {slot for slot, _ in chunks}
            for slot in list(eng.prefilling):
                if left <= 0:
                    break
                if not eng.s_active[slot] or slot in taken:
                    continue
                rest = int(eng.s_target[slot] - eng.s_ctx[slot])
                if rest <= 0:
                    continue
                c = min(rest, left) if chunked else rest
                if c > left:
                    continue
                need = int(self._blocks_for(int(eng.s_ctx[slot]) + c)) - int(eng.s_blocks[slot])
                while need > eng.free - dec_blocks - pending and eng.order[-1] != slot:
                    preempt(eng.order[-1])
                if need > eng.free - dec_blocks - pending:
                    preempt(slot)
                    break
                chunks.append((slot, c))
                promised[slot] = (need, c)
                pending += need
                left -= c

        def admit_waiting() -> None:
            nonlocal left, swap_s, admitted, pending
            if not policy.may_admit(len(eng.order)):
                return
            while len(eng.order) < max_running and left > 0:
                if eng.swapped:
                    need = self._admit_with_kv(eng, eng.swapped, now, dec_blocks + pending)
                    if not need:
                        return
                    swap_s += need * self.block_bytes / self.request.scheduler.swap_bytes_per_s
                    continue
                if not eng.waiting:
                    return
                req = eng.waiting[0]
                if self.r_kv_ready[req]:  # a transferred request: its KV is here, it decodes next step
                    if not self._admit_with_kv(eng, eng.waiting, now, dec_blocks + pending):
                        return
                    continue
                gen = int(self.r_gen[req])
                ctx = int(self.hit[req])
                rest = int(self.prompt[req]) + gen - ctx
                c = min(rest, left) if chunked else rest
                if c > left and (chunks or len(dec)):
                    return
                total = int(self.prompt[req] + self.output[req]) if reserve else ctx + c
                need = int(self._blocks_for(total))
                if need > eng.free - dec_blocks - pending:
                    return
                eng.waiting.popleft()
                slot = self._admit(eng, req, now)
                admitted = True
                eng.s_blocks[slot] = need if reserve else 0
                if reserve:
                    eng.free -= need
                else:
                    pending += need
                promised[slot] = (0 if reserve else need, c)
                chunks.append((slot, c))
                left -= c

        if policy.decode_first():
            dec, dec_blocks = plan_decodes(None)
            dec_reqs = eng.s_req[dec]
            left -= len(dec)
            plan_running_prompts()
            admit_waiting()
        else:
            # Prompts first, with the blocks the running decodes need kept for them.
            dec, dec_blocks = plan_decodes(None)
            dec_reqs = eng.s_req[dec]
            admit_waiting()
            plan_running_prompts()
            if admitted and policy.prompts_only_when_admitting():
                dec, dec_blocks = np.empty(0, dtype=np.int64), 0
            elif len(dec) > max(left, 0):
                dec = self._decodes(eng, max(left, 0))
                dec_reqs = eng.s_req[dec]
                dec_blocks = int((self._blocks_for(eng.s_ctx[dec] + 1) - eng.s_blocks[dec]).sum()) \
                    if not reserve and len(dec) else 0
        # Decodes preempted while the step was formed leave it (their slots may hold others now; a chunk leaves in
        # preempt()).
        if len(dec) and self.preempted != preempted_before:
            dec = dec[eng.s_dec[dec] & (eng.s_req[dec] == dec_reqs)] if len(dec_reqs) == len(dec) \
                else dec[eng.s_dec[dec]]
            dec_blocks = int((self._blocks_for(eng.s_ctx[dec] + 1) - eng.s_blocks[dec]).sum()) \
                if not reserve and len(dec) else 0
        # Take the blocks: decodes grow by one token, chunks by theirs. (The decodes as planned, where no
        # preemption came after: their contexts and blocks wanted are still those.)
        same = planned is not None and planned[0] is dec and planned[3] == self.preempted
        dec_ctx = planned[1] if planned is not None and same else eng.s_ctx[dec]
        if len(dec) and not reserve:
            eng.s_blocks[dec] = planned[2] if planned is not None and same else (dec_ctx + self.B) // self.B
            eng.free -= dec_blocks
        step_chunks: list[tuple[int, int]] = []
        for slot, c in chunks:
            if not reserve:
                want = int(self._blocks_for(int(eng.s_ctx[slot]) + c))
                eng.free -= want - int(eng.s_blocks[slot])
                eng.s_blocks[slot] = want
            step_chunks.append((c, int(eng.s_ctx[slot])))
        assert eng.free >= 0, "KV blocks over capacity"
        if not len(dec) and not chunks:
            if again and (len(eng.order) > running_before or swap_s > 0):
                # Requests joined with their KV (swapped in, transferred): they decode in a step formed now.
                self._start_step(eng, now, swap_s, again=False)
                return
            raise ServingError(f"engine {eng.index}: no step fits (blocks free {eng.free} of {self.blocks}, "
                               f"{len(eng.waiting)} waiting, {len(eng.order)} running)")
        ctx_sum = float(int(_sum(dec_ctx))) if len(dec) else 0.0
        forward = self.timer.fast_forward_s(step_chunks, len(dec), ctx_sum) if self.timer.mode == "fast" \
            else self.timer.forward_s(step_chunks, dec_ctx)
        seqs = len(dec) + len(chunks)
        dt = self.timer.step_s(forward, seqs, first=bool(chunks), admitted=admitted) + swap_s
        eng.busy = True
        eng.step = (dec, chunks, 0, len(self.it))
        self.it.append((now, now + dt, eng.index, sum(c for c, _ in step_chunks), len(dec), seqs,
                        self.blocks - eng.free, len(eng.waiting) + len(eng.swapped), len(eng.order),
                        ctx_sum,
                        sum(c * p + c * (c + 1) / 2 for c, p in step_chunks)))
        self._push(now + dt, 0, eng.index, -1)

    def _leap(self, eng: _Engine, now: float) -> bool:
        """Run the next k decode-only steps at once where nothing can change the batch in between: no prompt in
        progress, nobody admissible, k up to the first request's last token, the blocks free, and no step
        starting at or after the next event (an arrival, a transfer, another engine's step end). Each step is
        timed as the step-by-step path times it (the fast timer is affine in the cached tokens at a fixed batch,
        evaluated at every step for sliding-window models). False: take one step the ordinary way."""
        d = len(eng.order)  # no prompt in progress: every running request decodes
        timer = self.timer
        t_event = min(self.heap[0][0] if self.heap else math.inf, self.next_arrival[self.ptr])
        linear = timer.linear_in_context
        if linear:
            line = self.lines.get(d)
            if line is None:
                a, b = timer.decode_line(d)
                # Each decode holds at least one token: no step is shorter than this.
                line = self.lines[d] = (a, b, timer.step_s(a + b * d, d, first=False, admitted=False))
            a, b, shortest = line
            # two steps must start before the event
            if shortest > 0 and t_event != math.inf and t_event - now < 2 * shortest:
                return False
        dec = eng.decoding()
        sub = eng.state.take(dec, axis=1)
        ctx, blocks = sub[0], sub[3]
        left = sub[2] - sub[1]  # tokens each has still to make
        first_done = int(_min(left))
        k = min(first_done, _MAX_LEAP)
        if k < 2:
            return False
        ctx_sum = float(_sum(ctx))
        if linear:
            f0, step = a + b * ctx_sum, b * d
        else:
            f0 = timer.fast_forward_s((), d, ctx_sum)
            step = timer.fast_forward_s((), d, ctx_sum + d) - f0
        shortest = timer.step_s(min(f0, f0 + step), d, first=False, admitted=False)
        if shortest > 0 and t_event != math.inf:
            k = min(k, int((t_event - now) / shortest) + 1)
        if k < 2:
            return False
        if linear and timer.host_free and k <= _FEW_STEPS:
            # the array path's arithmetic on floats, term by term (a cumsum adds left to right): the same bits
            dt_s = [f0 + step * i for i in range(k)]
            ends_s = [now + total for total in itertools.accumulate(dt_s)]
            starts_s = [end - t for end, t in zip(ends_s, dt_s, strict=True)]
            k = min(k, bisect.bisect_left(starts_s, t_event))
            if k < 2:
                return False
            starts, ends = np.array(starts_s[:k]), np.array(ends_s[:k])
        else:
            if linear:
                forward = f0 + step * np.arange(k)
            else:
                forward = np.array([timer.fast_forward_s((), d, ctx_sum + i * d) for i in range(k)])
            dt = timer.steps_s(forward, d)
            ends = now + dt.cumsum()
            starts = ends - dt
            k = min(k, int(starts.searchsorted(t_event, side="left")))
            if k < 2:
                return False
        used_before = self.blocks - eng.free
        used: np.ndarray | _GrowingBlocks
        if self.policy.reserve_output():
            used = np.full(k, used_before, dtype=np.int64)
        else:
            after = np.maximum(blocks, (ctx + (k + self.B - 1)) // self.B)  # each decode's blocks after k steps
            grown_last = int(_sum(after - blocks))
            if grown_last <= eng.free:
                # The blocks do not bind (the growth is monotone in the steps): the blocks used at each step
                # are counted once for all leaps in ``result`` (_GrowingBlocks).
                used = _GrowingBlocks(used_before, ctx, blocks)
            else:
                j = np.arange(k)
                grown = np.maximum(blocks[:, None], -(-(ctx[:, None] + j[None, :] + 1) // self.B)).sum(axis=0) \
                    - int(_sum(blocks))
                k = min(k, int(grown.searchsorted(eng.free, side="right")))
                if k < 2:
                    return False
                after = np.maximum(blocks, (ctx + (k + self.B - 1)) // self.B)
                grown_last = int(grown[k - 1])
                used = used_before + grown[:k]
            eng.s_blocks[dec] = after
            eng.free -= grown_last
        eng.s_ctx[dec] = ctx + k
        eng.s_gen[dec] = sub[1] + k
        ref = -(len(self.it_blocks) + 1)
        self.tokens.append((sub[5], k, ref))
        rows = (starts[:k], ends[:k], eng.index, d, used, len(eng.waiting) + len(eng.swapped),
                len(eng.order), ctx_sum)
        self.it_blocks.append(rows)
        eng.busy = True
        eng.step = (dec, [], k, ref)
        eng.leap_done = dec[left == k] if k == first_done else _NO_SLOTS
        self._push(float(ends[k - 1]), 0, eng.index, -1)
        return True

    # -- ending a step -------------------------------------------------------------------------------------------

    def _end_step(self, eng: _Engine, now: float) -> None:
        assert eng.step is not None
        dec, chunks, applied, ref = eng.step
        eng.step = None
        eng.busy = False
        emitted: list[int] = []
        if len(dec) and not applied:
            sub = eng.state.take(dec, axis=1)
            gen = sub[1] + 1
            eng.s_ctx[dec] = sub[0] + 1
            eng.s_gen[dec] = gen
            done = dec[gen >= sub[2]]
            self.tokens.append((sub[5], 1, ref))
        elif len(dec):
            done = eng.leap_done
        for slot, c in chunks:
            eng.s_ctx[slot] += c
            if eng.s_ctx[slot] >= eng.s_target[slot]:
                eng.prefilling.remove(slot)
                eng.set_decoding(slot, True)
                eng.s_gen[slot] += 1
                req = int(eng.s_req[slot])
                emitted.append(req)
                if math.isnan(self.first_token[req]):
                    self.first_token[req] = now
        if emitted:
            self.tokens.append((np.array(emitted, dtype=np.int64), 1, ref))
        if len(dec):
            for slot in done.tolist():
                self._finish(eng, slot, now)
        for slot, _ in chunks:
            if not eng.s_active[slot]:
                continue
            if eng.s_gen[slot] >= eng.s_out[slot]:
                self._finish(eng, slot, now)
            elif eng.role == "prefill" and eng.s_ctx[slot] >= eng.s_target[slot]:
                self._hand_off(eng, slot, now)

    def _finish(self, eng: _Engine, slot: int, now: float) -> None:
        req = int(eng.s_req[slot])
        self.finish[req] = now
        self.replica[req] = eng.index
        eng.free += int(eng.s_blocks[slot])
        self._release(eng, slot)
        self.done += 1
        if self.closed and self.next_id < self.n:
            self._push(now + self.think, 2, -1, self.next_id)
            self.next_id += 1
        if self.progress is not None and (self.done / self.n >= self.next_progress or self.done == self.n):
            self.progress(self.done / self.n)
            self.next_progress = self.done / self.n + 0.01

    def _hand_off(self, eng: _Engine, slot: int, now: float) -> None:
        """A prompt done on a prefill engine: its KV goes to the least loaded decode engine over the interconnect
        (send/recv of the request's KV, every device of the plan sending its shard at once)."""
        req = int(eng.s_req[slot])
        ctx = int(eng.s_ctx[slot])
        self.r_ctx[req] = ctx
        self.r_target[req] = ctx
        self.r_gen[req] = eng.s_gen[slot]
        self.r_kv_ready[req] = True
        eng.free += int(eng.s_blocks[slot])
        self._release(eng, slot)
        target = min(self.decoders, key=lambda e: (e.load, e.index))
        target.inbound += 1
        self._push(now + self.transfer_s(ctx), 1, target.index, req)

    def transfer_s(self, tokens: int) -> float:
        interconnect = self.hw.interconnect
        if interconnect is None:
            raise ServingError(f"disaggregated serving sends the KV between engines: {self.hw.name} has no "
                               f"interconnect")
        return float(collective_time_s("send_recv", tokens * self.kv_bytes_per_token, 2, interconnect))

    # -- the result ----------------------------------------------------------------------------------------------

    def _token_arrays(self, leap_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every token, grouped by request and in step order within each: its iteration (a row of self.it, then
        of the leaps' rows, which start at ``leap_rows``), whose end is its time; and the tokens per request.
        Each record made a token for each of its requests at each of its steps; a request's records are in time
        order, so sorting the (record, request) pairs by request, stably, lays the tokens out."""
        if not self.tokens:
            return np.empty(0, dtype=np.int64), np.zeros(self.n, dtype=np.int64)
        reqs = [r for r, _, _ in self.tokens]  # (zip(*self.tokens) over ~10^5 records is several times slower)
        rec_reqs = np.concatenate(reqs)
        d = np.fromiter(map(len, reqs), dtype=np.int64, count=len(reqs))
        k = np.array([steps for _, steps, _ in self.tokens], dtype=np.int64)
        ref = np.array([i for _, _, i in self.tokens], dtype=np.int64)
        first_row = np.where(ref >= 0, ref, leap_rows[np.maximum(-ref - 1, 0)] if len(leap_rows) else 0)
        order = np.argsort(rec_reqs, kind="stable")
        rec_k = np.repeat(k, d)
        pair_k = rec_k[order]
        pair_row = np.repeat(first_row, d)[order]
        token = np.arange(int(pair_k.sum()))  # the tokens laid out; pair i's start at its tokens before it
        start = pair_k.cumsum() - pair_k
        counts = np.bincount(rec_reqs, weights=rec_k, minlength=self.n).astype(np.int64)
        return np.repeat(pair_row - start, pair_k) + token, counts

    def result(self, wall_s: float, kv_bytes_per_token: float) -> ServingRun:
        lens = np.array([len(b[0]) for b in self.it_blocks], dtype=np.int64)
        token_rows, counts = self._token_arrays(len(self.it) + np.cumsum(lens) - lens)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        leaps = np.empty((0, 11))
        if self.it_blocks:
            leaps = np.empty((int(lens.sum()), 11))
            leaps[:, 0] = np.concatenate([b[0] for b in self.it_blocks])
            leaps[:, 1] = np.concatenate([b[1] for b in self.it_blocks])
            leaps[:, 6] = _blocks_used([b[4] for b in self.it_blocks], lens, self.B)
            # the decodes' cached tokens at each step: the leap's first step's, d more each step
            step = np.arange(len(leaps)) - np.repeat(np.cumsum(lens) - lens, lens)
            leaps[:, 9] = (np.repeat(np.array([b[7] for b in self.it_blocks], dtype=np.float64), lens)
                           + np.repeat(np.array([b[3] for b in self.it_blocks], dtype=np.int64), lens) * step)
            leaps[:, 10] = 0
            leaps[:, 3] = 0
            for col, field in ((2, 2), (4, 3), (5, 3), (7, 5), (8, 6)):
                leaps[:, col] = np.repeat(np.array([b[field] for b in self.it_blocks], dtype=np.float64), lens)
        it = np.concatenate([np.array(self.it, dtype=np.float64).reshape(-1, 11), leaps])
        times = it[:, 1][token_rows]  # a token appears at the end of its step
        order = np.lexsort((it[:, 2], it[:, 0]))
        it = it[order]
        row_of = np.empty(len(order), dtype=np.int64)
        row_of[order] = np.arange(len(order))
        ints = it[:, 2:9].astype(np.int64)
        return ServingRun(
            request=self.request, id=np.arange(self.n, dtype=np.int64), arrival_s=self.arrival.copy(),
            first_token_s=self.first_token, finish_s=self.finish, prompt_len=self.prompt, output_len=self.output,
            prefix_hit_tokens=self.hit, queued_s=self.first_sched - self.arrival, preemptions=self.preemptions,
            replica=self.replica, token_s=times, token_offsets=offsets, token_iteration=row_of[token_rows],
            start_s=it[:, 0].copy(), end_s=it[:, 1].copy(), iteration_replica=ints[:, 0].copy(),
            prefill_tokens=ints[:, 1].copy(), decode_seqs=ints[:, 2].copy(), batch_seqs=ints[:, 3].copy(),
            kv_blocks_used=ints[:, 4].copy(), queue_len=ints[:, 5].copy(), running=ints[:, 6].copy(),
            kv_capacity_blocks=self.blocks, block_tokens=self.B, roles=self.roles,
            kv_bytes_per_token=kv_bytes_per_token, graph_builds=self.timer.builds, wall_s=wall_s,
            decode_context_tokens=it[:, 9].copy(), prefill_pairs=it[:, 10].copy())
