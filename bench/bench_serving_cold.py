"""Cold and warm seconds of the serving simulation in fresh processes, trees alternated (issue #29: ≤ 2 s cold).

Cold is what one ``layerscope serving`` pays: a fresh process's first ``run_serving`` (the step timer's tables and
the energy fit built from graphs); warm is the least of its later runs (tables reused). For each round and each
scenario, every tree given runs in its own process, one after the other, so that a shared machine's drift moves
them alike; each line prints wall / CPU seconds of every run. A tree is a checkout whose ``src`` is put first on
the path (default: this one).
``python bench/bench_serving_cold.py [--trees A B] [--rounds R] [--runs N] [--scenarios 20 60 chat]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1] + "/src")
from layerscope.serving import LengthSpec, SchedulerSpec, ServingRequest, TrafficSpec, run_serving
import layerscope.serving.simulator as simulator
assert simulator.__file__.startswith(sys.argv[1]), simulator.__file__
traffic = {"20": TrafficSpec(rate_per_s=20, prompt=LengthSpec(mean=512), output=LengthSpec(mean=128)),
           "60": TrafficSpec(rate_per_s=60, prompt=LengthSpec(mean=512), output=LengthSpec(mean=128)),
           "chat": TrafficSpec(rate_per_s=4, mix="chat")}[sys.argv[2]]
request = ServingRequest(model="llama-3.1-8b", hardware="h100-sxm", scheduler=SchedulerSpec(),
                         traffic=traffic.model_copy(update={"requests": 10000}))
out = []
for _ in range(int(sys.argv[3])):
    t, c = time.perf_counter(), time.process_time()
    run_serving(request)
    out.append(f"{time.perf_counter() - t:.2f}/{time.process_time() - c:.2f}")
print(sys.argv[1], sys.argv[2], " ".join(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", default=[str(Path(__file__).resolve().parents[1])])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3, help="runs per process: the first cold, the rest warm")
    parser.add_argument("--scenarios", nargs="+", default=["20", "60", "chat"], choices=["20", "60", "chat"])
    args = parser.parse_args()
    for r in range(args.rounds):
        print(f"round {r + 1}: load average {os.getloadavg()[0]:.1f}", flush=True)
        for scenario in args.scenarios:
            for tree in args.trees:
                subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(tree), scenario, str(args.runs)],
                               check=True)


if __name__ == "__main__":
    main()
