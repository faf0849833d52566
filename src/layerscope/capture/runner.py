"""Run a built model under torch.profiler: warm-up iterations unrecorded, then the recorded ones,
each a ``prefill`` and ``decode_step_K`` steps feeding back the argmax token with a KV cache."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerscope.capture.annotate import ModuleAnnotator, annotated_modules
from layerscope.capture.quiet import QuietProfiler
from layerscope.capture.unprofiled import ModuleCallTimer, SpanClock, UnprofiledTimes, unprofiled_times
from layerscope.workload.steps import PREFILL_RANGE, step_range

logger = logging.getLogger(__name__)

#: Annotation of the greedy token choice; the name of the graph's sampling op.
SAMPLING = "sampling"


@dataclass(frozen=True)
class RunPlan:
    """What one capture runs; sizes in tokens."""

    device: str
    batch: int
    prompt_len: int
    decode_steps: int
    warmup: int
    iterations: int
    cache: str
    """``dynamic`` (DynamicCache) or ``static`` (StaticCache of prompt_len + decode_steps)."""
    seed: int


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _make_cache(transformers: Any, model: Any, plan: RunPlan) -> Any:
    if plan.cache == "static":
        return transformers.StaticCache(config=model.config, max_cache_len=plan.prompt_len + plan.decode_steps)
    return transformers.DynamicCache(config=model.config)


#: The forward keyword of the KV cache: transformers 5 calls it ``cache`` (its ``past_key_values``
#: is a deprecated alias that warns), 4.x ``past_key_values``; the first the model takes wins.
CACHE_KWARGS: tuple[str, ...] = ("cache", "past_key_values")


def cache_kwarg(model: Any) -> str:
    """The name under which ``model.forward`` takes its KV cache (see :data:`CACHE_KWARGS`)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return next((name for name in CACHE_KWARGS if name in params), CACHE_KWARGS[-1])


def returned_cache(out: Any) -> Any:
    """The KV cache a forward returned: ``out.cache`` (transformers 5) or ``out.past_key_values``."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _forward_kwargs(model: Any) -> dict[str, Any]:
    """Keyword arguments every forward gets: ``logits_to_keep=1`` where the model takes it.

    HF ``generate`` computes the logits of the last position only (``logits_to_keep=1``), as
    serving engines do and as the graph's ``lm_head`` op does; without it a 256-token prefill
    would run lm_head on all 256 rows, a vocabulary-wide GEMM 256 times larger than needed.
    """
    import inspect

    params = inspect.signature(model.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def _sample(logits: Any, span: Any) -> Any:
    """Greedy next token of each sequence, annotated ``sampling`` like the graph's sampling op."""
    from layerscope.capture.recorder import note_sampling

    # logits: [B, S, V] -> token: [B, 1]
    with span(SAMPLING):
        last = logits[:, -1, :]
        note_sampling(last)
        return last.argmax(dim=-1, keepdim=True)


def _one_iteration(torch: Any, transformers: Any, model: Any, input_ids: Any, plan: RunPlan,
                   annotator: ModuleAnnotator | ModuleCallTimer, span: Any = None) -> None:
    """One prefill and ``plan.decode_steps`` greedy decode steps; each phase's range closes
    after a device synchronize, so its kernels land inside it. ``span`` opens the phase and
    sampling ranges (``record_function`` unless given)."""
    from torch.autograd.profiler import record_function

    span = span or record_function
    cache = _make_cache(transformers, model, plan)
    device = plan.device
    extra = _forward_kwargs(model)
    cache_key = cache_kwarg(model)
    # input_ids: [B, S]
    annotator.phase = "prefill"
    with span(PREFILL_RANGE):
        positions = torch.arange(plan.prompt_len, device=device)
        out = model(input_ids=input_ids, use_cache=True, cache_position=positions, **{cache_key: cache}, **extra)
        token = _sample(out.logits, span)  # [B, 1]
        _sync(torch, device)
    annotator.phase = "decode"
    for step in range(plan.decode_steps):
        with span(step_range(step)):
            positions = torch.tensor([plan.prompt_len + step], device=device)
            out = model(input_ids=token, use_cache=True, cache_position=positions,
                        **{cache_key: returned_cache(out)}, **extra)
            token = _sample(out.logits, span)
            _sync(torch, device)


def prompt_ids(torch: Any, vocab: int, plan: RunPlan) -> Any:
    """The prompt of a run: ``[batch, prompt_len]`` token ids drawn from ``plan.seed``, on its device."""
    generator = torch.Generator().manual_seed(plan.seed)
    return torch.randint(0, vocab, (plan.batch, plan.prompt_len), generator=generator).to(plan.device)


def _silent(label: str) -> None:
    """No progress reported."""


def run_profiled(model: Any, plan: RunPlan, *, root: str | None, trace_path: Path,
                 tick: Callable[[str], None] | None = None) -> ModuleAnnotator:
    """Run ``plan`` on ``model`` and write the profiler's Chrome JSON trace to ``trace_path``; ``tick(label)`` is
    called as each iteration (warm-up ones included) starts.

    Profiler schedule: wait=0, warmup=1 when there is a warm-up iteration to spend on it (the
    profiler's own start-up cost then stays out of the recorded steps), active=iterations.
    Returns the annotator with the per-module call counts and shapes of the recorded steps.
    """
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile, schedule

    input_ids = prompt_ids(torch, int(model.config.vocab_size), plan)

    activities = [ProfilerActivity.CPU]
    if plan.device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    profiler_warmup = 1 if plan.warmup >= 1 else 0
    exported: list[Path] = []

    def on_trace_ready(prof: Any) -> None:
        prof.export_chrome_trace(str(trace_path))
        exported.append(trace_path)

    say = tick if tick is not None else _silent
    with torch.inference_mode():
        for i in range(plan.warmup - profiler_warmup):
            say(f"warm-up {i + 1}/{plan.warmup}")
            with ModuleAnnotator(model, root) as scratch:
                _one_iteration(torch, transformers, model, input_ids, plan, scratch)
        _sync(torch, plan.device)
        with warnings.catch_warnings():
            # warmup=0 is what the caller asked for (--warmup 0); torch warns about it.
            warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
            sched = schedule(wait=0, warmup=profiler_warmup, active=plan.iterations, repeat=1)
        # Kineto's own lines (profiler_start/stop) go to the log, not the terminal (layerscope.capture.quiet).
        with QuietProfiler(profile(activities=activities, schedule=sched, record_shapes=True,
                                   on_trace_ready=on_trace_ready)) as prof:
            for _ in range(profiler_warmup):
                say(f"warm-up {plan.warmup}/{plan.warmup} (profiler)")
                with ModuleAnnotator(model, root) as scratch:
                    _one_iteration(torch, transformers, model, input_ids, plan, scratch)
                prof.step()
            with ModuleAnnotator(model, root) as annotator:
                for i in range(plan.iterations):
                    say(f"profiled iteration {i + 1}/{plan.iterations}")
                    _one_iteration(torch, transformers, model, input_ids, plan, annotator)
                    prof.step()
    if not exported:  # the schedule's last active step ends with the profiler context
        prof.export_chrome_trace(str(trace_path))
    logger.info("profiled %d iteration(s) after %d warm-up", plan.iterations, plan.warmup)
    return annotator


def run_unprofiled(model: Any, plan: RunPlan, *, root: str | None,
                   tick: Callable[[str], None] | None = None) -> UnprofiledTimes:
    """Run ``plan``'s recorded iterations again without the profiler, every module call (whole, by
    :class:`ModuleCallTimer`) and phase range timed by a :class:`SpanClock`
    (:mod:`layerscope.capture.unprofiled`), after one untimed
    iteration when the plan has warm-up. CPU only (``capture`` refuses other devices): on a GPU,
    ``perf_counter`` around a module measures its launches, not its kernels. ``tick(label)`` is called as each
    iteration starts."""
    import torch
    import transformers

    input_ids = prompt_ids(torch, int(model.config.vocab_size), plan)
    modules = annotated_modules(model, root)
    clock = SpanClock()
    say = tick if tick is not None else _silent
    with torch.inference_mode():
        if plan.warmup >= 1:
            say("warm-up (no profiler)")
            scratch_clock = SpanClock()
            with ModuleCallTimer(torch.nn.Module, modules, scratch_clock.span) as scratch:
                _one_iteration(torch, transformers, model, input_ids, plan, scratch, span=scratch_clock.span)
        with ModuleCallTimer(torch.nn.Module, modules, clock.span) as timer:
            for i in range(plan.iterations):
                say(f"iteration {i + 1}/{plan.iterations} without the profiler")
                _one_iteration(torch, transformers, model, input_ids, plan, timer, span=clock.span)
    logger.info("timed %d iteration(s) without the profiler", plan.iterations)
    return unprofiled_times(clock, plan.iterations)
