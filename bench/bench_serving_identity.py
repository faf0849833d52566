"""Hashes of every array of ``ServingRun`` (its ``ServingEnergy`` included) over 20 varied serving scenarios, for the
checkout given (its ``src`` first on the path): schedulers, rates, mixes, chunked prefill, prefix hits, preemption by
swap and recompute, a closed loop, sliding windows, the exact timer, TP2, replicas, execution profiles. Each run twice
(warm must equal cold). Run it on two trees and compare the lines: a change meant to keep the outputs must print the
same hashes. ``python bench/bench_serving_identity.py TREE [REQUESTS]``.
"""

import dataclasses
import hashlib
import math
import os
import sys

TREE = os.path.abspath(sys.argv[1])
sys.path.insert(0, TREE + "/src")  # the tree asked for, before any other layerscope
import numpy as np  # noqa: E402

import layerscope.serving.simulator as S  # noqa: E402
from layerscope.serving import LengthSpec, SchedulerSpec, ServingRequest, TrafficSpec  # noqa: E402

assert S.__file__.startswith(TREE), S.__file__
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
P = TrafficSpec(rate_per_s=20, prompt=LengthSpec(mean=512), output=LengthSpec(mean=128), requests=N)
LOG = TrafficSpec(rate_per_s=40, requests=N // 4, prompt=LengthSpec(dist="lognormal", mean=600, high=2000),
                  output=LengthSpec(dist="lognormal", mean=150, high=400), seed=5)
cases = {
    "20/s": dict(traffic=P),
    "60/s": dict(traffic=P.model_copy(update={"rate_per_s": 60})),
    "chat": dict(traffic=TrafficSpec(rate_per_s=4, mix="chat", requests=N)),
    "sarathi": dict(traffic=LOG, scheduler=SchedulerSpec(name="sarathi")),
    "vllm-prefill-first-nochunk": dict(traffic=LOG, scheduler=SchedulerSpec(chunked_prefill=False)),
    "decode-first": dict(traffic=LOG, scheduler=SchedulerSpec(priority="decode-first", max_num_batched_tokens=512)),
    "static": dict(traffic=LOG, scheduler=SchedulerSpec(name="static", static_batch=8)),
    "disagg 1+2": dict(traffic=LOG, scheduler=SchedulerSpec(name="disaggregated", decode_replicas=2)),
    "swap": dict(traffic=LOG, kv_capacity_tokens=6000, scheduler=SchedulerSpec(preemption="swap")),
    "recompute": dict(traffic=LOG, kv_capacity_tokens=5000),
    "prefix": dict(traffic=LOG, scheduler=SchedulerSpec(prefix_hit_rate=0.5)),
    "closed": dict(traffic=TrafficSpec(arrival="closed-loop", users=16, think_s=0.5, requests=N // 4)),
    "inf burst": dict(traffic=TrafficSpec(rate_per_s=math.inf, requests=200,
                                          prompt=LengthSpec(dist="uniform", low=64, high=400),
                                          output=LengthSpec(dist="uniform", low=50, high=300), seed=2),
                      kv_capacity_tokens=2048,
                      scheduler=SchedulerSpec(max_num_seqs=32)),
    "gemma sliding": dict(model="gemma-2-9b-it", traffic=LOG),
    "exact timer": dict(model="llama-3.2-1b", traffic=LOG.model_copy(update={"requests": 150}), timer="exact"),
    "tp2": dict(hardware="dgx-h100", plan={"tensor_parallel": 2}, traffic=LOG),
    "replicas 2": dict(replicas=2, traffic=P.model_copy(update={"rate_per_s": 40})),
    "serving-graph host": dict(execution="serving-graph", traffic=P.model_copy(update={"requests": N // 2})),
    "hf-eager chat": dict(execution="hf-eager", model="llama-3.2-1b",
                          traffic=TrafficSpec(rate_per_s=8, requests=N // 4, mix="chat", seed=3)),
    "1b chat": dict(model="llama-3.2-1b", traffic=TrafficSpec(rate_per_s=30, requests=N // 2, mix="chat", seed=5),
                    scheduler=SchedulerSpec(max_num_seqs=64)),
}
total = hashlib.sha256()
for name, kw in cases.items():
    S._TIMERS.clear()
    S._ENERGIES.clear()
    run = S.run_serving(ServingRequest(**kw))
    h = hashlib.sha256()
    for f in dataclasses.fields(run):
        v = getattr(run, f.name)
        if isinstance(v, np.ndarray):
            h.update(f.name.encode())
            h.update(v.tobytes())
        elif f.name in ("kv_capacity_blocks", "block_tokens", "roles", "kv_bytes_per_token"):
            h.update(repr(v).encode())
    if run.energy is not None:
        e = run.energy
        for f in dataclasses.fields(e):
            v = getattr(e, f.name)
            h.update(v.tobytes() if isinstance(v, np.ndarray) else repr(v).encode())
    # warm rerun must match too
    run2 = S.run_serving(ServingRequest(**kw))
    same = all(getattr(run, f.name).tobytes() == getattr(run2, f.name).tobytes() for f in dataclasses.fields(run)
               if isinstance(getattr(run, f.name), np.ndarray))
    print(f"{name:28s} {h.hexdigest()[:16]} iters {len(run.start_s):7d} tokens {len(run.token_s):8d} "
          f"builds {run.graph_builds:4d} warm-same {same}", flush=True)
    total.update(h.digest())
print("TOTAL", total.hexdigest())
