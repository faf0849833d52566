"""``layerscope plan`` speed: ``python bench/bench_plan.py [--record]``.

Plans of three models over 8..64 GPUs of a DGX H100 cluster (8 nodes), timed whole (enumeration, checks, timing,
ranking) with the graph memo cleared first, beside the plain way to get the same numbers: one
``cost.api.estimate`` per valid plan (``estimate --tp --pp --ep --dp`` in a loop), measured on a sample of the
plans and scaled to all of them, in the same process on the same machine. The two give equal numbers
(tests/cli/test_plan_cli.py); the ratio is what sharing one timing per device workload saves.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "src"))

from _util import clear_graph_memo, cpu_model  # noqa: E402

from layerscope.app.plan import PlanRequest, plan  # noqa: E402
from layerscope.app.requests import WorkloadRequest  # noqa: E402

CASES = (
    ("llama-3.1-8b", WorkloadRequest(phase="prefill", batch=64, prompt_len=1024)),
    ("llama-3.1-70b", WorkloadRequest(phase="decode", batch=256, context=2048)),
    ("qwen3-30b-a3b", WorkloadRequest(phase="decode", batch=64, context=1024)),
)
SAMPLE = 40


def naive_s(request: PlanRequest, rows: list) -> float:
    """Seconds of one whole estimate per plan, measured on ``SAMPLE`` plans spread over the list, scaled."""
    from layerscope.cost.api import estimate
    from layerscope.hardware.cluster import cluster_of
    from layerscope.model import load_model_spec

    spec = load_model_spec(request.model)
    cluster = cluster_of(request.hardware)
    assert cluster is not None and request.nodes is not None
    hw = cluster.with_nodes(request.nodes).device_spec()
    step = max(1, len(rows) // SAMPLE)
    sample = rows[::step][:SAMPLE]
    clear_graph_memo()
    t0 = time.perf_counter()
    for r in sample:
        from layerscope.app.requests import ParallelPlan

        w = request.workload.to_workload(ParallelPlan(
            tensor_parallel=r.tensor_parallel, pipeline_parallel=r.pipeline_parallel,
            expert_parallel=r.expert_parallel, data_parallel=r.data_parallel, micro_batches=r.micro_batches))
        estimate(spec, hw, w)
    return (time.perf_counter() - t0) / len(sample) * len(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="Append the table to bench/RESULTS.md.")
    a = ap.parse_args()
    import os

    lines = [f"`python bench/bench_plan.py --record` · {os.cpu_count()} cores, {cpu_model()} · Python "
             f"{platform.python_version()} · {datetime.date.today().isoformat()} · DGX H100 preset with 8 nodes, "
             "8..64 GPUs; ratio = one estimate per valid plan / plan (same process, graph memo cleared before each)",
             "",
             "| model | phase | plans | valid | device timings | plan s | ms per plan | one estimate per valid plan s "
             "| ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for model, workload in CASES:
        req = PlanRequest(model=model, hardware="dgx-h100", nodes=8, gpus=(8, 64), workload=workload)
        clear_graph_memo()
        t0 = time.perf_counter()
        result = plan(req)
        took = time.perf_counter() - t0
        n = len(result.plans) + len(result.failures)
        naive = naive_s(req, result.plans)
        lines.append(f"| {model} | {workload.phase} | {n} | {len(result.plans)} | {result.graphs_timed} | "
                     f"{took:.2f} | {took / n * 1e3:.2f} | {naive:.1f} | {naive / took:.0f}x |")
    text = "\n".join(lines)
    print(text)
    if a.record:
        path = ROOT / "bench" / "RESULTS.md"
        path.write_text(path.read_text().rstrip("\n") + "\n\n## plan (issue #28): 1,000 plans\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
