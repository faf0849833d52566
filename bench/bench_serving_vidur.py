"""layerscope's serving simulator beside Microsoft's Vidur on the same requests (issue #29, point 4).

``python bench/bench_serving_vidur.py [--requests N] [--rate R] [--schedulers vllm,sarathi] [--no-vidur]``

One trace: ``--requests`` (10,000) Poisson arrivals at ``--rate`` (20/s), 512 prompt and 128 output tokens, from
``layerscope.serving.generate_requests`` (seed 0). Llama-2-7B (``llama-2-7b-hf`` here, Vidur's
``meta-llama/Llama-2-7b-hf``, the one model both have for an H100: Vidur has profiles for it on ``h100``) on one
H100 SXM, TP1, one replica, bf16. Per scheduler pair, the same cap of 256 running requests and step budget
(``--budget``, 4096 tokens: the largest step in Vidur's profile of the linear layers; beyond it Vidur's
predictor extrapolates, and its linear regression gives steps of ~6,000 tokens and more a negative time), KV blocks
of 16 tokens:

* ``vllm``: layerscope ``vllm`` without chunked prefill, prompts first (vLLM V0's default) against Vidur's
  ``vllm`` replica scheduler (``batch_size_cap``, ``max_tokens_in_batch``);
* ``sarathi``: layerscope ``sarathi`` (decodes first, prompts chunked into the budget left) against Vidur's
  ``sarathi`` (``batch_size_cap``, ``chunk_size`` = the budget).

layerscope runs ``simulate_requests`` on the request list in this process, cold (step timer's tables built from
graphs) and warm (reused). Vidur runs in its own virtualenv (``bench/peers/.vidur-venv``; source and profiles in
``bench/peers/.vidur-src``, a checkout of github.com/microsoft/vidur) through bench/peers/vidur_driver.py on the
same requests written as its trace-replay CSV; its first run fits its execution-time predictor (``--predictor``:
random forest, its default, or linear regression; cached under ``bench/peers/.vidur-work/cache``) and tabulates its
predictions, a second run reuses both. Either way Vidur's event loop reads step times from those tables, so its
``run`` phase costs the same whichever predictor filled them. Both simulators also time a few fixed step
compositions (``PROBES``: prompts alone, decodes alone, mixed) and print them side by side, with Vidur's count of
steps whose predicted time is not positive. Wall times are reported
as Vidur / layerscope. Where the venv or the source is missing the script says so and runs layerscope alone.
Set up Vidur with ``--setup`` (pip into the venv from the package index; the source from the local mirror of
microsoft/vidur, or ``--vidur-src``).

Nothing is tuned on either side: each uses its own defaults for everything not listed (KV capacity: layerscope
from 90% of the GPU's memory, Vidur from its memory planner; step times: layerscope's roofline preset for
h100-sxm, Vidur's profiles; see vidur_driver.py for the attention profile it lacks offline).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from layerscope.model import load_model_spec
from layerscope.serving import (
    LengthSpec,
    SchedulerSpec,
    ServingRequest,
    TrafficSpec,
    generate_requests,
    simulate_requests,
    summarize,
)

BENCH = Path(__file__).resolve().parent
PEERS = BENCH / "peers"
VENV_PY = PEERS / ".vidur-venv" / "bin" / "python"
VIDUR_SRC = PEERS / ".vidur-src"
WORK = PEERS / ".vidur-work"
MIRROR = Path("/work/.mirror/microsoft+vidur/repo")
RESULT_MARK = "@@PEER-RESULT@@ "
# Pinned to what installs on Python 3.11; wandb is imported by Vidur but disabled (WANDB_MODE=disabled).
VIDUR_REQUIREMENTS = ["numpy<2.1", "pandas<2.3", "scikit-learn<1.6", "wandb<0.19", "kaleido==0.2.1", "ddsketch",
                      "plotly_express", "matplotlib", "seaborn", "fasteners"]
# What the driver checks out of the mirror: code, the H100 profiles of Llama-2-7B, the network tables.
VIDUR_PATHS = ["vidur", "setup.py", "requirements.txt", "LICENSE",
               "data/profiling/compute/h100/meta-llama/Llama-2-7b-hf", "data/profiling/network/h100_pairwise_nvlink"]

MODEL, HARDWARE = "llama-2-7b-hf", "h100-sxm"
VIDUR_MODEL, VIDUR_DEVICE, VIDUR_NETWORK = "meta-llama/Llama-2-7b-hf", "h100", "h100_pairwise_nvlink"
MAX_SEQS, BLOCK = 256, 16
#: The most tokens per step in Vidur's profile of the linear layers (its mlp.csv): beyond, its predictor
#: extrapolates (the linear regression's polynomial goes negative near 6,000 tokens).
VIDUR_PROFILED_TOKENS = 4096
#: Tokens per step on both sides: within Vidur's profile.
BUDGET = VIDUR_PROFILED_TOKENS


def schedulers(budget: int) -> dict[str, SchedulerSpec]:
    """The paired scheduler specs at a step budget of ``budget`` tokens."""
    return {
        "vllm": SchedulerSpec(name="vllm", max_num_seqs=MAX_SEQS, max_num_batched_tokens=budget,
                              chunked_prefill=False, priority="prefill-first", block_tokens=BLOCK),
        "sarathi": SchedulerSpec(name="sarathi", max_num_seqs=MAX_SEQS, max_num_batched_tokens=budget,
                                 block_tokens=BLOCK),
    }


SCHEDULERS = schedulers(BUDGET)


def setup(src: Path | None) -> None:
    """Create bench/peers/.vidur-venv and bench/peers/.vidur-src (both ignored by git)."""
    if not VENV_PY.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV_PY.parent.parent)], check=True)
    subprocess.run([str(VENV_PY), "-m", "pip", "install", "-q", *VIDUR_REQUIREMENTS], check=True)
    if not VIDUR_SRC.exists():
        origin = src or MIRROR
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(origin), str(VIDUR_SRC)], check=True)
        # Check out only what is used; the mirror lacks the attention profiles' blobs, so where the model's whole
        # folder fails, its mlp.csv alone (the driver then writes a stand-in attention table).
        git = ["git", "-C", str(VIDUR_SRC), "checkout", "HEAD", "--"]
        if subprocess.run([*git, *VIDUR_PATHS], capture_output=True).returncode:
            subprocess.run([*git, *[p if "compute" not in p else f"{p}/mlp.csv" for p in VIDUR_PATHS]], check=True)


def vidur_missing() -> str | None:
    if not VENV_PY.exists():
        return f"no Vidur virtualenv at {VENV_PY.parent.parent} (run with --setup)"
    if not (VIDUR_SRC / "vidur" / "simulator.py").is_file():
        return f"no Vidur source at {VIDUR_SRC} (run with --setup)"
    mlp = VIDUR_SRC / "data/profiling/compute" / VIDUR_DEVICE / VIDUR_MODEL / "mlp.csv"
    if not mlp.is_file():
        return f"no Vidur profile {mlp}"
    probe = subprocess.run([str(VENV_PY), "-c", "import pandas, sklearn, fasteners, ddsketch, wandb"],
                           capture_output=True, text=True)
    if probe.returncode:
        return f"Vidur's venv lacks its requirements: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def vidur_commit() -> str:
    r = subprocess.run(["git", "-C", str(VIDUR_SRC), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


#: Step compositions timed by both simulators: prompts as (new, cached) tokens, decodes by cached tokens.
PROBES: list[dict[str, Any]] = (
    [{"prompts": [(512, 0)] * n} for n in (1, 8, 16)]
    + [{"decodes": [576] * b} for b in (32, 128, 191, 256)]
    + [{"prompts": [(512, 0)] * 8, "decodes": [576] * 128}])


def probe_tokens(probe: dict[str, Any]) -> int:
    return sum(c for c, _ in probe.get("prompts", [])) + len(probe.get("decodes", []))


def probe_label(probe: dict[str, Any]) -> str:
    parts = []
    if probe.get("prompts"):
        parts.append(f"{len(probe['prompts'])} x {probe['prompts'][0][0]}-token prompt")
    if probe.get("decodes"):
        parts.append(f"{len(probe['decodes'])} decodes at {probe['decodes'][0]}")
    return " + ".join(parts)


def layerscope_probe_s(request: ServingRequest, probe: dict[str, Any]) -> float:
    """layerscope's seconds for the step ``probe`` describes, by the timer and host terms its simulation uses."""
    import numpy as np

    from layerscope.serving import simulator

    spec, hw = simulator._resolve(request)
    timer = simulator._timer(spec, hw, simulator._template(spec, request), request.cost_model, request.timer)
    chunks = [(int(c), int(p)) for c, p in probe.get("prompts", [])]
    ctx = np.asarray(probe.get("decodes", []), dtype=np.int64)
    forward = timer.forward_s(chunks, ctx)
    return timer.step_s(forward, len(chunks) + len(ctx), first=bool(chunks), admitted=bool(chunks))


def write_trace(requests: list[Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fh.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
        for r in requests:
            fh.write(f"{r.arrival_s!r},{r.prompt_len},{r.output_len}\n")


def run_vidur(job: dict[str, Any], job_path: Path, timeout_s: float) -> dict[str, Any]:
    job_path.write_text(json.dumps(job))
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONHASHSEED": "0"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([str(VENV_PY), str(PEERS / "vidur_driver.py"), str(job_path)], capture_output=True,
                              text=True, timeout=timeout_s, env=env, cwd=PEERS)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    wall = time.perf_counter() - t0
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return {**json.loads(line[len(RESULT_MARK):]), "process_s": wall}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--schedulers", default="vllm,sarathi")
    parser.add_argument("--budget", type=int, default=BUDGET,
                        help=f"tokens per step on both sides ({BUDGET}: Vidur's linear layers are profiled up to "
                             f"{VIDUR_PROFILED_TOKENS} tokens, beyond which its predictor extrapolates)")
    parser.add_argument("--setup", action="store_true", help="create Vidur's venv and source checkout first")
    parser.add_argument("--vidur-src", type=Path, default=None, help="a clone of microsoft/vidur for --setup")
    parser.add_argument("--no-vidur", action="store_true", help="run layerscope alone")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per Vidur run")
    parser.add_argument("--repeat", type=int, default=1, help="warm runs of each simulator (the least is kept)")
    parser.add_argument("--predictor", default="random_forrest", choices=["random_forrest", "linear_regression"],
                        help="Vidur's execution-time predictor (its default: random_forrest, whose first fit takes "
                             "hours on two busy cores; linear_regression fits in a minute or two)")
    args = parser.parse_args()
    if args.setup:
        setup(args.vidur_src)

    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · {os.cpu_count()} cpus · load average "
          f"{os.getloadavg()[0]:.1f} · Python {platform.python_version()}")
    traffic = TrafficSpec(rate_per_s=args.rate, prompt=LengthSpec(mean=512), output=LengthSpec(mean=128),
                          requests=args.requests)
    requests = generate_requests(traffic)
    max_tokens = max(r.prompt_len + r.output_len for r in requests)
    trace = WORK / f"trace-{args.requests}-{args.rate:g}.csv"
    write_trace(requests, trace)
    print(f"trace: {len(requests)} requests, Poisson {args.rate:g}/s, 512 in / 128 out ({trace})")

    if args.budget > VIDUR_PROFILED_TOKENS:
        print(f"note: a budget of {args.budget} tokens per step is beyond Vidur's profile of its linear layers "
              f"({VIDUR_PROFILED_TOKENS} tokens): its steps of more tokens are extrapolated (see 'step time <= 0')")
    missing = "--no-vidur" if args.no_vidur else vidur_missing()
    if missing:
        print(f"Vidur not run: {missing}; layerscope alone")
    spec = load_model_spec(MODEL)
    arch = {"embedding_dim": spec.hidden_size, "num_q_heads": spec.num_attention_heads,
            "num_kv_heads": spec.num_kv_heads}
    from layerscope.hardware import load_hardware

    hw = load_hardware(HARDWARE)
    from layerscope.serving import simulator

    for name in args.schedulers.split(","):
        request = ServingRequest(model=MODEL, hardware=HARDWARE, scheduler=schedulers(args.budget)[name],
                                 traffic=traffic)
        simulator._TIMERS.clear()  # cold: the step timer's tables built from graphs
        t0 = time.perf_counter()
        run = simulate_requests(request, requests)
        cold = time.perf_counter() - t0
        warms = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            simulate_requests(request, requests)
            warms.append(time.perf_counter() - t0)
        warm = min(warms, default=cold)  # the machine is shared: the least disturbed of the repeats
        m = summarize(run)
        prefill = run.prefill_tokens > 0
        print(f"[{name}] layerscope  preemptions {int(run.preemptions.sum())}  prompt tokens run "
              f"{int(run.prefill_tokens.sum()):,} (of {sum(r.prompt_len for r in requests):,})  decode-only steps: "
              f"batch p50 {float(np.median(run.decode_seqs[~prefill])) if (~prefill).any() else 0:.0f}  "
              f"running max {int(run.running.max())}")
        print(f"[{name}] layerscope  cold {cold:7.2f} s  warm {warm:7.2f} s (min of {len(warms)})  "
              f"steps {m.iterations:7d}  {m.request_throughput:6.2f} req/s  TTFT p50 {m.median_ttft_ms:8.1f} ms  "
              f"p99 {m.p99_ttft_ms:8.1f} ms  "
              f"TPOT p50 {m.median_tpot_ms:6.2f} ms  p99 {m.p99_tpot_ms:6.2f} ms  KV {run.kv_capacity_tokens:,} tokens"
              f"  KV max {m.max_kv_usage:5.1%}", flush=True)
        if missing:
            continue
        job = {"trace": str(trace), "vidur_root": str(VIDUR_SRC), "work_dir": str(WORK), "device": VIDUR_DEVICE,
               "network_device": VIDUR_NETWORK, "vidur_model": VIDUR_MODEL, "scheduler": name,
               "max_num_seqs": MAX_SEQS, "max_num_batched_tokens": args.budget, "block_tokens": BLOCK,
               "max_tokens": max_tokens, "model_arch": arch, "predictor": args.predictor,
               "probe": [p for p in PROBES if probe_tokens(p) <= args.budget],
               "vidur_version": f"git {vidur_commit()}",
               "hw": {"peak_flops_per_s": hw.engines.peak_flops_per_s["bf16"],
                      "bandwidth_bytes_per_s": hw.memory[-1].bandwidth_bytes_per_s,
                      "matmul_efficiency": hw.efficiency.matmul, "memory_efficiency": hw.efficiency.memory}}
        results = []
        for attempt in ["first"] + [f"warm {i + 1}" for i in range(args.repeat)]:
            r = run_vidur(job, WORK / f"job-{name}.json", args.timeout)
            results.append(r)
            if "error" in r:
                print(f"[{name}] Vidur ({attempt} run) failed: {r['error']}")
                break
            init = "init (fit + tabulate)" if r["fitted"] else "init (cached)"
            print(f"[{name}] Vidur {attempt:7s} process {r['process_s']:7.2f} s = import {r['import_s']:.2f} + "
                  f"{init} {r['init_s']:.2f} + run {r['run_s']:.2f} + write {r['write_s']:.2f} (+ start-up)  "
                  f"batches {r['batches']}  {r['req_per_s']:6.2f} req/s  TTFT p50 {r['ttft_p50_ms']:8.1f} ms  "
                  f"p99 {r['ttft_p99_ms']:8.1f} ms  TPOT p50 {r['tpot_p50_ms']:6.2f} ms  p99 {r['tpot_p99_ms']:6.2f} ms"
                  f"  KV {r['kv_blocks'] * BLOCK if r.get('kv_blocks') else '?'} tokens  restarts {r['restarts']}  "
                  f"attention: {r['attention_profile']}", flush=True)
        ok = [r for r in results if "error" not in r]
        if ok:
            r = ok[-1]
            print(f"[{name}] Vidur  batches with a step time <= 0: {r['batches_not_positive']} (least "
                  f"{r['batch_time_min_s'] * 1e3:.1f} ms)  prompt tokens run {r['prefill_tokens_run']:,}  "
                  f"decode-only batch p50 {r['decode_batch_p50']}")
            for probe in r["probe"]:
                ours = layerscope_probe_s(request, probe)
                print(f"[{name}] step {probe_label(probe):40s} layerscope {ours * 1e3:8.2f} ms  Vidur "
                      f"{probe['total_s'] * 1e3:8.2f} ms (decode attention {probe['attention_decode_s'] * 1e3:.2f},"
                      f" prefill attention {probe['attention_prefill_s'] * 1e3:.2f}, MLP up+down "
                      f"{probe['mlp_up_down_s'] * 1e3:.2f})", flush=True)
        if ok:
            rest = ok[1:] or ok
            last = {"process_s": min(r["process_s"] for r in rest), "run_s": min(r["run_s"] for r in rest)}
            first = (f" · cold {ok[0]['process_s'] / cold:.1f}x (Vidur fitting its {ok[0]['predictor']} predictor, "
                     f"layerscope building its tables)") if ok[0]["fitted"] else ""
            print(f"[{name}] ratio Vidur / layerscope (least of the warm runs each): whole process "
                  f"{last['process_s'] / warm:.1f}x ({last['process_s']:.1f} s / {warm:.2f} s; predictor cached, "
                  f"tables reused) · Vidur's event loop alone {last['run_s'] / warm:.1f}x{first}",
                  flush=True)
    if not missing and shutil.which("git") is None:
        print("(git not found: Vidur's version unknown)")


if __name__ == "__main__":
    main()
