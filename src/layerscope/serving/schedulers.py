"""Batching policies, registered by name: each is an object the simulator's engines call, never a name the loop
branches on (``SCHEDULERS``).

* ``static``: a batch of up to ``static_batch`` waiting requests, their whole prompts in one step and their decodes
  until the last one finishes, no admission in between; blocks for prompt + output reserved up front (the
  request-level batching of FasterTransformer that Orca compares against: Yu et al., OSDI 2022, §2.2).
* ``vllm``: continuous (iteration-level) batching with paged KV blocks as vLLM does it (Kwon et al., SOSP 2023;
  vLLM's scheduler docs): at most ``max_num_seqs`` running and ``max_num_batched_tokens`` per step; with
  ``chunked_prefill`` a prompt is cut to the budget left; ``decode-first`` gives the budget to running requests
  and then admits (vLLM's chunked-prefill / V1 policy), ``prefill-first`` admits waiting prompts first (vLLM V0's
  default; without chunked prefill a step is then prompts only). Out of blocks, the most recently admitted
  request is preempted (recompute or swap), as vLLM does.
* ``sarathi``: stall-free batching (Agrawal et al., Sarathi-Serve, OSDI 2024, §4): every running decode first,
  then ongoing prompt chunks, then new prompts, all within the token budget, chunked always.
* ``disaggregated``: prefill and decode on separate engines (DistServe: Zhong et al., OSDI 2024; Mooncake: Qin et
  al., arXiv 2407.00079): ``prefill_replicas`` engines run prompts only; a request's KV goes to the least loaded
  of ``decode_replicas`` decode engines over the interconnect (``cost.collectives`` send/recv) and decodes there.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerscope.registry import Registry
from layerscope.serving.spec import SchedulerSpec, ServingError

__all__ = ["SCHEDULERS", "ContinuousBatching", "Disaggregated", "Sarathi", "SchedulerPolicy", "StaticBatching"]


@dataclass(frozen=True)
class SchedulerPolicy:
    """The hooks an engine calls to form a step. Subclasses set the class attributes; ``spec`` the numbers."""

    spec: SchedulerSpec

    #: Running requests get the token budget before waiting ones.
    def decode_first(self) -> bool:
        return self.spec.priority == "decode-first"

    def chunked(self) -> bool:
        """Prompts may be cut into chunks that fit the budget left."""
        return self.spec.chunked_prefill

    def token_budget(self) -> int | None:
        """Tokens per step (None: no limit)."""
        return self.spec.max_num_batched_tokens

    def max_running(self) -> int:
        """Most requests running on an engine."""
        return self.spec.max_num_seqs

    def may_admit(self, running: int) -> bool:
        """Whether waiting requests may join now, with ``running`` requests on the engine."""
        return True

    def prompts_only_when_admitting(self) -> bool:
        """A step that admits prompts runs no decodes (vLLM V0 without chunked prefill)."""
        return not self.spec.chunked_prefill and not self.decode_first()

    def reserve_output(self) -> bool:
        """Blocks for prompt and output are taken at admission (no growth, no preemption)."""
        return False

    def roles(self, replicas: int) -> list[str]:
        """The engines' roles: ``mixed`` (prompts and decodes), ``prefill`` or ``decode``."""
        return ["mixed"] * replicas


class ContinuousBatching(SchedulerPolicy):
    """vLLM's continuous batching (module docstring)."""


class Sarathi(SchedulerPolicy):
    """Sarathi-Serve's stall-free batching: decodes first, chunked prompts in the budget left."""

    def decode_first(self) -> bool:
        return True

    def chunked(self) -> bool:
        return True


class StaticBatching(SchedulerPolicy):
    """Request-level batching: a batch runs to its last token before the next is admitted."""

    def chunked(self) -> bool:
        return False

    def decode_first(self) -> bool:
        return False

    def token_budget(self) -> int | None:
        return None

    def max_running(self) -> int:
        return self.spec.static_batch

    def may_admit(self, running: int) -> bool:
        return running == 0

    def prompts_only_when_admitting(self) -> bool:
        return True

    def reserve_output(self) -> bool:
        return True


class Disaggregated(SchedulerPolicy):
    """Prefill and decode engines; each runs vLLM's continuous batching on its share (decode-first, chunked)."""

    def decode_first(self) -> bool:
        return True

    def roles(self, replicas: int) -> list[str]:
        return ["prefill"] * self.spec.prefill_replicas + ["decode"] * self.spec.decode_replicas


SCHEDULERS: Registry[type[SchedulerPolicy]] = Registry("scheduler", ServingError, {
    "static": StaticBatching,
    "vllm": ContinuousBatching,
    "sarathi": Sarathi,
    "disaggregated": Disaggregated,
})
