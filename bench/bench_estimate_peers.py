"""Benchmark: layerscope's estimate and sweep against peer analytical tools, side by side.

    python bench/bench_estimate_peers.py [--setup] [--quick] [--append] [--peers genz,llm-analysis,llm-flops]

Measures, in one run and on the same inputs, for layerscope and each peer:

(a) one full-model estimate, warm and in-process (first call discarded, median of N): Llama-3.1-8B,
    Llama-3.1-70B and Mixtral-8x7B on an H100 SXM (989e12 bf16 FLOP/s, 3.35e12 B/s, 80 GB), decode
    at batch 1 with a 1024-token KV cache and prefill of 1024 tokens at batch 1; with the number of
    ops each tool models and the TTFT/TPOT each tool gives (shown, not judged);
(b) the time per configuration over a sweep grid (Llama-3.1-8B decode, batch 1..256 x 8 lengths),
    with the peers looped over the grid one call per configuration as their APIs require.

It prints a Markdown section "## estimate vs peers" and, with ``--append``, appends it to
bench/RESULTS.md in one O_APPEND write under an exclusive lock (other sections are left alone).
Timings are never pass/fail: compare the ratios measured in the same run.

Peers (installed from PyPI into a separate virtual environment, never into layerscope's):

* GenZ (``genz-llm``, module ``GenZ``): its built-in model zoo (the driver reports any field that
  differs from the HF config); hardware passed as a dict with the datasheet numbers.
* llm-analysis (``llm-analysis``): pins transformers<5 and huggingface-hub<0.15, which conflict with
  layerscope's environment, hence the separate venv; model config built from the HF config's numbers.
* llm-flops (``llm-flops``): whole-model closed-form roofline; model config from the HF config.
* LLM-Viewer is not on PyPI and is skipped. None of these needs torch; setup refuses to install
  anything that would pull it.

Each peer runs in the venv through a small driver (bench/peers/*_driver.py) that times the peer in
its own process the same way (warm, first call discarded, median of N) and prints JSON.

Setting up the peer venv (done automatically on first run when bench/.peer-venv is missing;
``--setup`` forces a (re)install)::

    python -m venv bench/.peer-venv
    bench/.peer-venv/bin/pip install --dry-run --report r.json genz-llm==0.0.16 llm-analysis==0.2.2 llm-flops==0.0.1
    # ... check that r.json installs no torch, then:
    bench/.peer-venv/bin/pip install genz-llm==0.0.16 llm-analysis==0.2.2 llm-flops==0.0.1

bench/.peer-venv/ is git-ignored. No network is needed at run time (HF_HUB_OFFLINE=1 in drivers).
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _util import clear_graph_memo, cpu_model, median_s

from layerscope.cost import estimate
from layerscope.cost.sweep import fit_linear_graph, shape_dependent, sweep, time_grid
from layerscope.hardware import load_hardware
from layerscope.hardware.spec import HardwareSpec
from layerscope.model import load_model_spec
from layerscope.model.spec import ModelSpec
from layerscope.workload import make_workload

BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".peer-venv"
VENV_PY = VENV / "bin" / "python"
RESULTS = BENCH / "RESULTS.md"
RESULT_MARK = "@@PEER-RESULT@@ "

PEER_PINS = ["genz-llm==0.0.16", "llm-analysis==0.2.2", "llm-flops==0.0.1"]
DRIVERS = {"genz": "genz_driver.py", "llm-analysis": "llm_analysis_driver.py", "llm-flops": "llmflops_driver.py"}
PEER_LABEL = {"genz": "GenZ", "llm-analysis": "llm-analysis", "llm-flops": "llm-flops"}

# (layerscope catalog name, GenZ zoo name, display name)
MODELS = [
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B", "Llama-3.1-8B"),
    ("llama-3.1-70b", "meta-llama/Llama-3.1-70B", "Llama-3.1-70B"),
    ("mixtral-8x7b-v0.1", "mistralai/Mixtral-8x7B", "Mixtral-8x7B"),
]
DECODE = {"batch": 1, "context": 1024}
PREFILL = {"batch": 1, "input": 1024}
SWEEP_MODEL = "llama-3.1-8b"
SWEEP_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
SWEEP_LENGTHS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]


# ---------------------------------------------------------------- setup


def setup_venv(force: bool) -> None:
    """Create bench/.peer-venv and install the pinned peers, refusing any resolution that pulls torch."""
    if VENV_PY.exists() and not force:
        return
    print(f"setting up {VENV} ...", file=sys.stderr)
    if not VENV_PY.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV_PY), "-m", "pip", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([*pip, "install", "-q", "--dry-run", "--report", str(report), *PEER_PINS], check=True)
        names = sorted(item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"])
    heavy = [n for n in names if n in ("torch", "tensorflow", "jax", "jaxlib") or n.startswith("nvidia-")]
    if heavy:
        raise SystemExit(f"refusing to install peers: the resolution pulls {heavy}")
    subprocess.run([*pip, "install", "-q", *PEER_PINS], check=True)


# ---------------------------------------------------------------- helpers








def arch(spec: ModelSpec) -> dict[str, Any]:
    """The HF config's numbers that every peer's model config is built from."""
    moe = spec.moe
    return {
        "name": spec.name, "model_type": spec.model_type, "hidden_size": spec.hidden_size,
        "num_layers": spec.num_layers, "num_attention_heads": spec.num_attention_heads,
        "num_kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim,
        "intermediate_size": moe.expert_intermediate_size if moe else spec.intermediate_size,
        "vocab_size": spec.vocab_size, "max_position_embeddings": spec.max_position_embeddings,
        "num_experts": moe.num_experts if moe else None, "top_k": moe.num_experts_per_tok if moe else None,
        "tie_word_embeddings": spec.tie_word_embeddings,
    }


def ideal(hw: HardwareSpec) -> HardwareSpec:
    """``hw`` at 100 % of peak FLOP/s and bandwidth with no launch overhead, as the peers assume: every fitted
    efficiency (per dtype, per shape, attention curves, weight streaming) goes back to the ideal defaults."""
    data = hw.model_dump()
    data["efficiency"] = {}
    data["launch_overhead_s"] = 0.0
    return HardwareSpec.model_validate(data)


def fmt_t(s: float | None) -> str:
    if s is None:
        return "—"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def fmt_r(r: float | None) -> str:
    if r is None:
        return "—"
    return f"{r:,.0f}×" if r >= 100 else f"{r:.1f}×" if r >= 1 else f"{r:.2f}×"


# ---------------------------------------------------------------- layerscope


def time_layerscope(repeat: int) -> dict[str, Any]:
    h100 = load_hardware("h100-sxm")
    h100_ideal = ideal(h100)
    wd = make_workload(phase="decode", batch=DECODE["batch"], context=DECODE["context"])
    wp = make_workload(phase="prefill", batch=PREFILL["batch"], prompt_len=PREFILL["input"])
    out: dict[str, Any] = {"models": {}, "preset": {
        "matmul": h100.efficiency.matmul, "memory": h100.efficiency.memory, "launch_us": h100.launch_overhead_s * 1e6,
        "shapes": bool(h100.efficiency.matmul_half_flops or h100.efficiency.attention_rows)}}
    for key, _, _ in MODELS:
        spec = load_model_spec(key)
        d, p = estimate(spec, h100, wd), estimate(spec, h100, wp)
        di, pi = estimate(spec, h100_ideal, wd), estimate(spec, h100_ideal, wp)

        def cold(w: Any, spec: ModelSpec = spec) -> Any:
            clear_graph_memo()
            return estimate(spec, h100, w)

        kinds = {str(r["kind"]): int(r["ops"]) for r in d.breakdown("kind")}  # type: ignore[call-overload]
        out["models"][key] = {
            "decode_memo_s": median_s(lambda spec=spec: estimate(spec, h100, wd), repeat),
            "prefill_memo_s": median_s(lambda spec=spec: estimate(spec, h100, wp), repeat),
            "decode_cold_s": median_s(lambda: cold(wd), repeat),
            "prefill_cold_s": median_s(lambda: cold(wp), repeat),
            "tpot_s": d.tpot_s, "ttft_s": p.ttft_s, "tpot_ideal_s": di.tpot_s, "ttft_ideal_s": pi.ttft_s,
            "ops": len(d.ops), "kinds": kinds, "arch": arch(spec),
        }
    # Sweep over the same grid the peers loop over.
    spec = load_model_spec(SWEEP_MODEL)
    n_cfg = len(SWEEP_BATCHES) * len(SWEEP_LENGTHS)

    def sweep_cold() -> None:
        clear_graph_memo()  # end to end: fit the model's graph from scratch, as a first sweep does
        sweep([spec], [h100], SWEEP_BATCHES, SWEEP_LENGTHS, phase="decode")

    sweep_s = median_s(sweep_cold, max(3, repeat // 5))
    lin = fit_linear_graph(spec, "decode", make_workload())
    b_grid, l_grid = (a.ravel() for a in np.meshgrid(SWEEP_BATCHES, SWEEP_LENGTHS, indexing="ij"))
    # The vectorized grid refuses hardware whose GEMM time depends on shapes (h100-sxm's fitted half-performance
    # work): sweep() times that one graph per batch (time_by_batch). The grid row times the same grid on the ideal
    # H100, where time_grid's one matrix product is the whole cost.
    grid_hw = h100 if shape_dependent(h100, "roofline", "decode", lin.static) is None else h100_ideal
    grid_s = median_s(lambda: time_grid(lin, grid_hw, b_grid, l_grid), repeat)

    def loop() -> None:
        for b in SWEEP_BATCHES:
            for n in SWEEP_LENGTHS:
                estimate(spec, h100, make_workload(phase="decode", batch=b, context=n))

    loop()
    t0 = time.perf_counter()
    loop()
    loop_s = time.perf_counter() - t0
    out["sweep"] = {"configs": n_cfg, "sweep_s": sweep_s, "grid_s": grid_s, "loop_s": loop_s,
                    "grid_hardware": "h100-sxm" if grid_hw is h100 else "the ideal H100 (h100-sxm is shape-dependent)"}
    return out


# ---------------------------------------------------------------- peers


def run_peer(peer: str, job_path: str, timeout_s: float) -> dict[str, Any]:
    cmd = [str(VENV_PY), str(BENCH / "peers" / DRIVERS[peer]), job_path]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=BENCH / "peers")
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: " + " / ".join(tail)}


# ---------------------------------------------------------------- report


SKIPS = {
    "GenZ": "norms, RoPE, activation, residual adds, embedding lookup, KV-cache write, sampling "
            "(softmax is folded into the attention ops)",
    "llm-analysis": "RoPE, residual adds, KV-cache write (a whole-cache read+write term instead), sampling; "
                    "attention and MLP are one block each; the MLP is modelled as 2 matrices (no gate_proj)",
    "llm-flops": "every op (no per-op breakdown)",
}


def render(ls: dict[str, Any], peers: dict[str, dict[str, Any]], args: argparse.Namespace, repeat: int,
           wall_s: float) -> str:
    now = datetime.date.today().isoformat()
    flags = " ".join(f for f, on in (("--quick", args.quick), ("--append", args.append)) if on)
    versions = ", ".join(f"{r['tool']} {r['version']}" for r in peers.values() if "version" in r)
    L: list[str] = []
    L.append("## estimate vs peers\n")
    L.append(f"`python bench/bench_estimate_peers.py{(' ' + flags) if flags else ''}` · {os.cpu_count()} cores, "
             f"{cpu_model()} · Python {platform.python_version()} · {now} · peers in bench/.peer-venv: "
             f"{versions or 'none ran'} · whole run {wall_s:.0f} s\n")
    L.append("Same inputs for every tool: H100 SXM at 989e12 bf16 FLOP/s, 3.35e12 B/s, 80 GB; bf16 weights, "
             f"activations and KV cache; decode = batch {DECODE['batch']} with a {DECODE['context']}-token KV cache; "
             f"prefill = batch {PREFILL['batch']} x {PREFILL['input']} tokens. Each tool is timed warm in its own "
             f"process (first call discarded, median of {repeat}); layerscope in this process, each peer in "
             "bench/.peer-venv through bench/peers/*_driver.py. Ratios are peer time / layerscope time.\n")
    for key, _, display in MODELS:
        m = ls["models"][key]
        L.append(f"### {display}: one full-model estimate\n")
        L.append("| tool | ops modelled (decode) | decode estimate | prefill estimate | peer / layerscope memoized "
                 "| peer / layerscope cold | TTFT prefill 1024 | TPOT decode b1 c1024 |")
        L.append("|---|---|---|---|---|---|---|---|")
        L.append(f"| layerscope, `estimate()` memoized graph | {m['ops']} | {fmt_t(m['decode_memo_s'])} | "
                 f"{fmt_t(m['prefill_memo_s'])} | 1× | — | {fmt_t(m['ttft_s'])} | {fmt_t(m['tpot_s'])} |")
        L.append(f"| layerscope, graph rebuilt each call (cold) | {m['ops']} | {fmt_t(m['decode_cold_s'])} | "
                 f"{fmt_t(m['prefill_cold_s'])} | — | 1× | ″ | ″ |")
        L.append(f"| layerscope at 100 % efficiency, no launch overhead | {m['ops']} | ″ | ″ | — | — | "
                 f"{fmt_t(m['ttft_ideal_s'])} | {fmt_t(m['tpot_ideal_s'])} |")
        for peer, r in peers.items():
            if "error" in r:
                L.append(f"| {PEER_LABEL[peer]} | did not run: {r['error']} | | | | | | |")
                continue
            pm = r["models"].get(key)
            if pm is None:
                L.append(f"| {r['tool']} | not supported | | | | | | |")
                continue
            pre = "same call" if pm["same_call"] else fmt_t(pm["prefill_s"])
            L.append(f"| {r['tool']} {r['version']} | {pm['ops']} | {fmt_t(pm['decode_s'])} | {pre} | "
                     f"{fmt_r(pm['decode_s'] / m['decode_memo_s'])} | {fmt_r(pm['decode_s'] / m['decode_cold_s'])} | "
                     f"{fmt_t(pm['ttft_s'])} | {fmt_t(pm['tpot_s'])} |")
        L.append("")
    # Op coverage, from the Llama-3.1-8B decode graph of each tool.
    key8 = MODELS[0][0]
    m8 = ls["models"][key8]
    L.append("What each tool models (Llama-3.1-8B decode):\n")
    L.append("- layerscope: " + ", ".join(f"{k} {v}" for k, v in m8["kinds"].items()) + f" = {m8['ops']} ops.")
    for r in peers.values():
        if "error" in r or key8 not in r["models"]:
            continue
        L.append(f"- {r['tool']}: {r['models'][key8]['ops_detail']}. Not modelled: {SKIPS[r['tool']]}.")
    L.append("")
    # Sweep
    sw = ls["sweep"]
    n = sw["configs"]
    loop_pc = sw["loop_s"] / n
    sweep_pc = sw["sweep_s"] / n
    grid_pc = sw["grid_s"] / n
    L.append(f"### Sweep: Llama-3.1-8B decode on H100 SXM, batch {SWEEP_BATCHES[0]}..{SWEEP_BATCHES[-1]} "
             f"({len(SWEEP_BATCHES)}) x length {SWEEP_LENGTHS[0]}..{SWEEP_LENGTHS[-1]} ({len(SWEEP_LENGTHS)}) "
             f"= {n} configurations\n")
    L.append("| tool | how | configurations | total | per configuration | peer / layerscope `sweep()` "
             "| peer / layerscope `time_grid()` | peer / layerscope `estimate()` loop |")
    L.append("|---|---|---|---|---|---|---|---|")
    L.append(f"| layerscope | `sweep()` end to end, vectorized over the grid, graph memo cleared first (includes "
             f"fitting the model's graph) | {n} | {fmt_t(sw['sweep_s'])} | {fmt_t(sweep_pc)} | 1× | — | — |")
    L.append(f"| layerscope | `time_grid()` with the fitted graph reused, on {sw['grid_hardware']} | {n} | "
             f"{fmt_t(sw['grid_s'])} | "
             f"{fmt_t(grid_pc)} | — | 1× | — |")
    L.append(f"| layerscope | `estimate()` once per configuration (full op graph each) | {n} | {fmt_t(sw['loop_s'])} | "
             f"{fmt_t(loop_pc)} | — | — | 1× |")
    for peer, r in peers.items():
        if "error" in r:
            L.append(f"| {PEER_LABEL[peer]} | did not run | | | | | | |")
            continue
        s = r["sweep"]
        how = "`decode_moddeling()` per configuration" if r["tool"] == "GenZ" else \
            "`LLMAnalysis.inference()` per configuration (prefill + decode)" if r["tool"] == "llm-analysis" else \
            "`llmflops.estimate()` per configuration (prefill + decode)"
        pc = s["per_config_s"]
        L.append(f"| {r['tool']} {r['version']} | {how} | {s['configs']} | {fmt_t(s['total_s'])} | {fmt_t(pc)} | "
                 f"{fmt_r(pc / sweep_pc)} | {fmt_r(pc / grid_pc)} | {fmt_r(pc / loop_pc)} |")
    L.append("")
    L.append("Reading (computed from the tables above):\n")
    for r in peers.values():
        if "error" in r:
            continue
        keys = [k for k, _, _ in MODELS if k in r["models"]]
        cold = [r["models"][k]["decode_s"] / ls["models"][k]["decode_cold_s"] for k in keys]
        memo = [r["models"][k]["decode_s"] / ls["models"][k]["decode_memo_s"] for k in keys]
        ops = "/".join(str(r["models"][k]["ops"]) for k in keys)
        L.append(f"- {r['tool']} ({ops} ops vs layerscope's "
                 f"{'/'.join(str(ls['models'][k]['ops']) for k in keys)}): one decode estimate takes "
                 f"{fmt_r(min(cold))}–{fmt_r(max(cold))} as long as layerscope's cold estimate and "
                 f"{fmt_r(min(memo))}–{fmt_r(max(memo))} as long as its memoized one; per configuration of the "
                 f"sweep grid, {fmt_r(r['sweep']['per_config_s'] / sweep_pc)} layerscope's end-to-end `sweep()` "
                 f"and {fmt_r(r['sweep']['per_config_s'] / grid_pc)} its fitted-grid timing.")
    L.append(f"- On a grid this small ({n} configurations), fitting the model's graph dominates layerscope's "
             "`sweep()`; once fitted, each further configuration costs the `time_grid()` figure.")
    L.append("")
    L.append("Notes:\n")
    pre = ls["preset"]
    L.append(f"- layerscope's `h100-sxm` preset applies fitted efficiencies (matmul {pre['matmul']:.3g}, memory "
             f"{pre['memory']:.4g}" + (", a GEMM efficiency that grows with the work and attention curves per length"
                                       if pre["shapes"] else "") +
             f") and a {pre['launch_us']:g} µs launch overhead per op; GenZ and llm-analysis assume 100 % of peak "
             "by default, llm-flops "
             "0.5 (compute) and 0.8 (memory). The \"100 % efficiency\" row separates op coverage from those "
             "factors. The TTFT/TPOT columns are shown so the tools' numbers can be compared, not judged.")
    L.append("- Llama-3.1-70B in bf16 (141 GB of weights) does not fit one 80 GB H100; GenZ and llm-analysis "
             "refuse such an estimate, so their capacity was raised (it does not enter their latency); "
             "layerscope reports it with fits_in_memory = false.")
    L.append("- llm-analysis and llm-flops compute prefill and decode in one call, so their one estimate "
             "covers both columns; GenZ writes and re-reads a CSV of the layer table under /tmp/genz/data/ on "
             "every call, which is part of its time.")
    L.append("- \"memoized\": layerscope reuses an op graph it built for the same model and pass (an "
             "interactive session or a repeated query); \"cold\" clears that memo before each call, which is the "
             "fair comparison with peers that recompute everything per call.")
    for r in peers.values():
        for note in r.get("notes", []):
            L.append(f"- {r['tool']}: {note}")
    return "\n".join(L) + "\n"


def append_results(section: str) -> None:
    """Append ``section`` to RESULTS.md in one O_APPEND write, under an exclusive lock."""
    fd = os.open(RESULTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        prefix = ""
        if size:
            with open(RESULTS, "rb") as fh:
                fh.seek(max(0, size - 2))
                tail = fh.read()
            prefix = "" if tail.endswith(b"\n\n") else "\n" if tail.endswith(b"\n") else "\n\n"
        os.write(fd, (prefix + section).encode())
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--setup", action="store_true", help="(re)install the peers into bench/.peer-venv")
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--append", action="store_true", help="append the section to bench/RESULTS.md")
    ap.add_argument("--peers", default=",".join(DRIVERS), help="comma-separated subset of " + ", ".join(DRIVERS))
    ap.add_argument("--peer-timeout", type=float, default=120.0, help="seconds per peer driver")
    args = ap.parse_args()
    t_start = time.perf_counter()
    repeat = 5 if args.quick else 20
    peers_wanted = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers_wanted if p not in DRIVERS]
    if unknown:
        raise SystemExit(f"--peers: unknown {unknown}; known: {', '.join(DRIVERS)}")
    setup_venv(args.setup)

    ls = time_layerscope(repeat)
    job = {
        "repeat": repeat,
        "hw": {"name": "H100 SXM", "flops_per_s": 989e12, "bandwidth_bytes_per_s": 3.35e12, "memory_bytes": 80e9},
        "decode": DECODE, "prefill": PREFILL,
        "models": [{"key": k, "genz": g, "arch": ls["models"][k]["arch"]} for k, g, _ in MODELS],
        "sweep": {"model": SWEEP_MODEL, "batches": SWEEP_BATCHES, "lengths": SWEEP_LENGTHS},
    }
    peers: dict[str, dict[str, Any]] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(job, fh)
        job_path = fh.name
    try:
        for peer in peers_wanted:
            t0 = time.perf_counter()
            peers[peer] = run_peer(peer, job_path, args.peer_timeout)
            print(f"{peer}: {time.perf_counter() - t0:.1f} s"
                  + (f" ({peers[peer]['error']})" if "error" in peers[peer] else ""), file=sys.stderr)
    finally:
        os.unlink(job_path)
    section = render(ls, peers, args, repeat, time.perf_counter() - t_start)
    print(section)
    if args.append:
        append_results(section)


if __name__ == "__main__":
    main()
