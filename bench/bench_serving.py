"""Wall time of the serving simulation: 10,000 requests on Llama-3.1-8B on one H100 SXM (issue #29: ≤ 2 s).

Prints one line per scenario: the wall seconds of the first run (the step timer's tables built from graphs) and
of the least of ``--repeat`` later runs of the same request (tables reused), with the CPU seconds of that process
in each (on a shared machine the wall time includes waiting for a core; the CPU time does not), the graphs built,
the engine steps simulated, and the throughput and latencies the run reports.
``python bench/bench_serving.py [--requests N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import os
import time

from layerscope.serving import LengthSpec, SchedulerSpec, ServingRequest, TrafficSpec, run_serving, summarize

SCENARIOS = {
    "poisson 20/s, 512 in / 128 out": TrafficSpec(rate_per_s=20, prompt=LengthSpec(mean=512),
                                                  output=LengthSpec(mean=128)),
    "poisson 60/s, 512 in / 128 out": TrafficSpec(rate_per_s=60, prompt=LengthSpec(mean=512),
                                                  output=LengthSpec(mean=128)),
    "poisson 4/s, chat mix": TrafficSpec(rate_per_s=4, mix="chat"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per scenario (the least is reported)")
    args = parser.parse_args()
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    for name, traffic in SCENARIOS.items():
        request = ServingRequest(model="llama-3.1-8b", hardware="h100-sxm", scheduler=SchedulerSpec(),
                                 traffic=traffic.model_copy(update={"requests": args.requests}))
        from layerscope.serving import simulator

        simulator._TIMERS.clear()  # a cold start: the step timer's tables built from graphs
        t0, c0 = time.perf_counter(), time.process_time()
        run = run_serving(request)
        cold, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
        warm, warm_cpu = [], []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            run_serving(request)
            warm.append(time.perf_counter() - t0)
            warm_cpu.append(time.process_time() - c0)
        m = summarize(run)
        print(f"{name:32s} cold {cold:6.2f} s (cpu {cold_cpu:5.2f})  warm {min(warm):6.2f} s (cpu "
              f"{min(warm_cpu):5.2f}; of {args.repeat}: {' '.join(f'{w:.2f}' for w in warm)})  "
              f"graphs {run.graph_builds:4d}  "
              f"steps {m.iterations:6d}  {m.request_throughput:6.2f} req/s  TTFT p50 {m.median_ttft_ms:7.1f} ms  "
              f"TPOT p50 {m.median_tpot_ms:6.2f} ms  KV max {m.max_kv_usage:5.1%}")


if __name__ == "__main__":
    main()
