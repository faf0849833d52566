"""How stable is the demo's prediction on a busy machine? Ten demos back to back, quiet and with another process
spinning on one core.

``--mode demo`` (default) runs ``layerscope demo --json`` as a user does: the first run of a condition measures this
machine and keeps the measurement (when the machine was not busy), the others time on it (``--remeasure``: every
run measures afresh). For each run it records what the demo predicted (the layer's estimate and the validated
1-layer forward), what it measured, the threads it chose, how busy the machine was and the verdict.
``--mode measure`` runs, in a fresh process each time, only what a fresh prediction depends on: the thread choice,
the measurement in rounds and the layer's estimate on it.

Beside every run, in the same condition, the machine measurement as it was before issue #25 (one pass, torch's own
threads: ``measure_machine`` of commit 80a85e0, loaded from git) times the same layer: the peer this is compared
against. The spread of a condition's predictions is (max − min) / median over its runs.

    python bench/bench_demo_stability.py --runs 10 [--mode demo|measure] [--remeasure] [--conditions quiet,loaded]
        [--json out.json] [--append]

``--append`` adds the table to bench/RESULTS.md. Needs the ``capture`` extra (torch) and git.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import itertools

from _util import cpu_model

ROOT = Path(__file__).resolve().parent.parent
BEFORE_COMMIT = "80a85e0"
LAYERSCOPE = str(Path(sys.executable).with_name("layerscope"))


def _old_measure_machine() -> Any:
    """``measure_machine`` as it was at :data:`BEFORE_COMMIT` (one pass of the probes, torch's threads)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE_COMMIT}:src/layerscope/capture/machine.py"],
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "machine_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("machine_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.measure_machine


def _old_prediction_s() -> float:
    """The demo layer's estimate (Llama-3.2-1B layer 0, 256-token fp32 prefill) on the old measurement, in a child
    process so that torch's thread count is its default, as the old demo ran."""
    bench = str(Path(__file__).parent)
    code = f"import sys; sys.path.insert(0, {bench!r}); import bench_demo_stability as b; print(b._old_in_process())"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def _old_in_process() -> float:
    from layerscope.cost import estimate
    from layerscope.model import load_model_spec
    from layerscope.workload import make_workload

    hw = _old_measure_machine()("cpu")
    workload = make_workload(phase="prefill", prompt_len=256, weight_dtype="fp32", act_dtype="fp32", kv_dtype="fp32")
    return float(estimate(load_model_spec("llama-3.2-1b"), hw, workload, layer=0, attention="fused").ttft_s)


def _measure_in_process() -> str:
    """What the demo predicts, without the capture: threads chosen from the load, this machine measured in rounds
    (waiting up to 10 s for quiet), the demo layer estimated on it. One JSON line."""
    from layerscope.capture.machine import choose_threads, measure_machine_robust, torch_threads
    from layerscope.cost import estimate
    from layerscope.model import load_model_spec
    from layerscope.workload import make_workload

    choice = choose_threads(None)
    with torch_threads(choice.threads):
        m = measure_machine_robust("cpu", max_wait_s=10.0)
    workload = make_workload(phase="prefill", prompt_len=256, weight_dtype="fp32", act_dtype="fp32", kv_dtype="fp32")
    spec = load_model_spec("llama-3.2-1b")
    return json.dumps({
        "layer_predicted_s": estimate(spec, m.spec, workload, layer=0, attention="fused").ttft_s,
        "layer_slowest_s": estimate(spec, m.slowest, workload, layer=0, attention="fused").ttft_s,
        "threads": choice.threads, "measure_busy_cores": None if m.load is None else m.load.busy_cores,
        "measure_gemm_spread": m.spread("gemm"), "waited_s": m.waited_s,
        "forward_predicted_s": None, "forward_slowest_s": None, "forward_measured_s": None, "forward_error": None,
        "capture_busy_cores": None})


def _measure(out: Path, machines: Path) -> dict[str, Any]:
    bench = str(Path(__file__).parent)
    code = (f"import sys; sys.path.insert(0, {bench!r}); import bench_demo_stability as b; "
            "print(b._measure_in_process())")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall_s": time.perf_counter() - t0, **row}


REMEASURE = False


def _demo(out: Path, machines: Path) -> dict[str, Any]:
    env = {**os.environ, "LAYERSCOPE_MACHINES_DIR": str(machines)}
    t0 = time.perf_counter()
    proc = subprocess.run([LAYERSCOPE, "demo", "--out", str(out), "--json", *(["--remeasure"] if REMEASURE else [])],
                          capture_output=True, text=True, env=env, check=False)
    wall_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"layerscope demo failed ({proc.returncode}): {proc.stderr[-2000:]}")
    doc = json.loads(proc.stdout)
    cmp = doc["comparison"]["forward"]
    meas = doc["machine_measurement"] or {}
    loads = [c for c in doc["capture_loads"] if c]
    return {
        "wall_s": wall_s,
        "hardware_source": doc["hardware_source"],
        "layer_predicted_s": doc["estimate"]["ttft_s"],
        "forward_predicted_s": cmp["predicted_s"],
        "forward_slowest_s": doc["predicted_slowest_s"],
        "forward_measured_s": cmp["measured_s"],
        "forward_error": cmp["error"],
        "machine_adjusted_error": doc.get("machine_adjusted_error"),
        "threads": doc["threads"]["threads"],
        "measure_busy_cores": (meas.get("load") or {}).get("busy_cores"),
        "measure_gemm_spread": meas.get("spread", {}).get("gemm_fp32"),
        "waited_s": meas.get("waited_s"),
        "capture_busy_cores": loads[0]["busy_cores"] if loads else None,
        "verdict": doc["verdict"],
    }


def _spread(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else float("nan")


def _back_to_back(values: list[float]) -> float:
    """The largest relative difference between consecutive runs."""
    return max((abs(b - a) / min(a, b) for a, b in itertools.pairwise(values)), default=0.0)


def run(runs: int, conditions: list[str], mode: str = "demo") -> dict[str, Any]:
    results: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="demo-stability-"))
    for condition in conditions:
        spinner = None
        if condition not in ("quiet", "loaded"):
            raise SystemExit(f"--conditions: unknown {condition!r}; use quiet and/or loaded")
        if condition == "loaded":
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(1.0)
        try:
            rows = []
            for i in range(runs):
                row = (_demo if mode == "demo" else _measure)(work / f"{condition}-{i}", work / "machines")
                row["before_layer_predicted_s"] = _old_prediction_s()
                rows.append(row)
                print(f"{condition} {i + 1}/{runs}: " + ", ".join(
                    f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                    if k != "verdict"), flush=True)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        results[condition] = rows
    return results


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for condition, rows in results.items():
        def col(name: str, rows: list[dict[str, Any]] = rows) -> list[float]:
            return [r[name] for r in rows if r[name] is not None]

        out.append({
            "condition": condition, "runs": len(rows),
            "threads": sorted(set(col("threads"))),
            "layer_ms": [1e3 * x for x in col("layer_predicted_s")],
            "layer_spread": _spread(col("layer_predicted_s")),
            "layer_back_to_back": _back_to_back(col("layer_predicted_s")),
            "forward_spread": _spread(col("forward_predicted_s")) if col("forward_predicted_s") else None,
            "before_ms": [1e3 * x for x in col("before_layer_predicted_s")],
            "before_spread": _spread(col("before_layer_predicted_s")),
            "before_back_to_back": _back_to_back(col("before_layer_predicted_s")),
            "errors": col("forward_error") or [float("nan")],
            "measure_busy": col("measure_busy_cores"),
            "capture_busy": col("capture_busy_cores") or [float("nan")],
            "wall_s": statistics.median(col("wall_s")),
        })
    return out


def markdown(summ: list[dict[str, Any]], command: str) -> str:
    import torch

    lines = [f"`{command}` · {os.cpu_count()} cores, {cpu_model()} · torch {torch.__version__} · Python "
             f"{platform.python_version()} · {datetime.date.today().isoformat()}", "",
             "| condition | runs | threads chosen | layer predicted, ms (min – median – max) | spread | largest "
             "back-to-back | before #25: spread | before: back-to-back | before: min – max ms | forward error "
             "(min … max) | others' load while measuring, cores | during capture | demo wall s (median) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summ:
        ms, before = s["layer_ms"], s["before_ms"]
        lines.append(
            f"| {s['condition']} | {s['runs']} | {', '.join(map(str, s['threads']))} | {min(ms):.1f} – "
            f"{statistics.median(ms):.1f} – {max(ms):.1f} | {s['layer_spread']:.1%} | {s['layer_back_to_back']:.1%} | "
            f"{s['before_spread']:.1%} | {s['before_back_to_back']:.1%} | {min(before):.1f} – {max(before):.1f} | "
            f"{min(s['errors']):+.0%} … {max(s['errors']):+.0%} | "
            f"{min(s['measure_busy']):.2f} – {max(s['measure_busy']):.2f} | "
            f"{min(s['capture_busy']):.2f} – {max(s['capture_busy']):.2f} | {s['wall_s']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--conditions", default="quiet,loaded")
    parser.add_argument("--mode", choices=("demo", "measure"), default="demo",
                        help="demo: whole `layerscope demo` runs; measure: only what its prediction depends on (the "
                             "thread choice, the measurement in rounds, the estimate), each in a fresh process")
    parser.add_argument("--remeasure", action="store_true",
                        help="demo mode: every demo measures afresh (else the first of a condition measures and "
                             "keeps its measurement, and the others time on it, as `layerscope demo` does)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--append", action="store_true", help="Add the table to bench/RESULTS.md's section.")
    args = parser.parse_args()
    global REMEASURE
    REMEASURE = args.remeasure
    results = run(args.runs, args.conditions.split(","), args.mode)
    summ = summary(results)
    command = "python bench/bench_demo_stability.py " + " ".join(sys.argv[1:])
    table = markdown(summ, command)
    print(table)
    if args.json:
        args.json.write_text(json.dumps({"runs": results, "summary": summ}, indent=1))
    if args.append:
        with open(ROOT / "bench" / "RESULTS.md", "a") as fh:
            fh.write("\n" + table + "\n")


if __name__ == "__main__":
    main()
