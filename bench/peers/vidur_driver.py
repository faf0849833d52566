"""Run Microsoft's Vidur (LLM-serving simulator) on a request trace in its own process; print JSON.

Run by bench/bench_serving_vidur.py as ``bench/peers/.vidur-venv/bin/python vidur_driver.py JOB.json``
(Vidur's own virtualenv, never layerscope's; this file imports nothing from layerscope). The job names the
trace (CSV of ``arrived_at, num_prefill_tokens, num_decode_tokens``, replayed by Vidur's ``trace_replay``
request generator), the model, device, scheduler, and Vidur's source root (whose ``data/profiling`` holds its
profiled kernel tables). The result, one JSON line after ``RESULT_MARK``, holds wall times by phase:

* ``init_s``: ``Simulator(config)``: the execution-time predictor fitted to the profiles (scikit-learn, its
  models cached under the job's ``cache_dir`` after the first run) and its prediction tables, the trace read;
* ``run_s``: ``Simulator.run()``, the event loop;
* ``write_s``: the metrics CSVs written (plots and the Chrome trace off, as layerscope's run writes none);

and the simulated metrics read back from Vidur's ``request_metrics.csv``: TTFT (``prefill_e2e_time``), TPOT
((e2e - TTFT) / (decode tokens - 1), the first token being the prefill's in Vidur as in layerscope), request
throughput (requests / (last completion - first arrival)).

Vidur's profile of the attention kernels (``attention.csv``, 9-17 MB per model and GPU) is absent from the
offline snapshot of its repository (files of 4 MiB and more were not copied) and its PyPI wheel fetches the
profiles from the Hugging Face hub, unreachable here. Where the file is missing the driver writes a stand-in
on Vidur's own profiling grid (``vidur/profiling/utils``: chunk sizes, KV sizes, decode batch 1-128, block 16,
max length 4096) from a plain roofline, max(FLOPs / (peak x e_mm), bytes / (bandwidth x e_mem)) per layer,
with the job's peak, bandwidth and efficiencies; the result says which (``attention_profile``). The linear
layers, norms, activation, RoPE and residual adds come from Vidur's profiled ``mlp.csv`` as published.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from _driver_util import emit, load_job

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

# Vidur's profiling grid (vidur/profiling/utils/__init__.py at microsoft/vidur 7d47513), copied because that
# module imports torch and sarathi, which are not needed to simulate.
_PREFILL_CHUNKS = (list(range(64, 128 + 1, 16)) + list(range(128, 1024 + 1, 32)) + list(range(1024, 4096 + 1, 64))
                   + list(range(4096, 16384 + 1, 128)) + list(range(16384, 65536 + 1, 256)))
_SEQ_LENGTHS = list(range(0, 1024 + 1, 32)) + list(range(1024, 4096 + 1, 64)) + list(range(4096, 65536 + 1, 256))
_BATCHES = list(range(1, 128 + 1)) + list(range(128, 1024 + 1, 8))


def _grid(max_seq_len: int, max_batch: int) -> list[tuple[int, int, int, bool]]:
    """(prefill_chunk_size, kv_cache_size, batch_size, is_prefill), as ``get_attention_input_combinations``."""
    out: list[tuple[int, int, int, bool]] = []
    chunks = sorted({c for c in _PREFILL_CHUNKS if c <= max_seq_len})
    for c in chunks:
        out += [(c, i * c, 1, True) for i in range(max_seq_len // c)]
    seqs = sorted({s for s in _SEQ_LENGTHS if s < max_seq_len})
    out += [(n, 0, 1, True) for n in seqs]
    out += [(0, k, b, False) for k in seqs for b in sorted({b for b in _BATCHES if b <= max_batch})]
    valid = []
    for c, k, b, pre in out:
        if pre and (c == 0 or c + k > max_seq_len):
            continue
        if not pre and (k == 0 or k > max_seq_len):
            continue
        valid.append((c, k, b, pre))
    return valid


def write_standin_attention(path: Path, model: dict[str, Any], hw: dict[str, Any], *, block_size: int,
                            max_seq_len: int = 4096, max_batch: int = 128) -> int:
    """A roofline attention table in Vidur's ``attention.csv`` layout (times in ms per layer, TP1)."""
    import pandas as pd

    h, nq, nkv = model["embedding_dim"], model["num_q_heads"], model["num_kv_heads"]
    d = h // nq
    flops_s = hw["peak_flops_per_s"] * hw["matmul_efficiency"]
    bytes_s = hw["bandwidth_bytes_per_s"] * hw["memory_efficiency"]
    kv_tok = 2 * nkv * d * 2  # K and V, bf16
    rows = []
    for c, k, b, pre in _grid(max_seq_len, max_batch):
        if pre:
            flops = 4 * nq * d * c * (k + (c + 1) / 2)  # QK^T and PV, causal over the chunk
            nbytes = (k + c) * kv_tok + 2 * c * nq * d * 2  # KV read, Q in and O out
            t_pre, t_dec = max(flops / flops_s, nbytes / bytes_s), 0.0
        else:
            flops = 4 * nq * d * b * k
            nbytes = b * k * kv_tok + 2 * b * nq * d * 2
            t_pre, t_dec = 0.0, max(flops / flops_s, nbytes / bytes_s)
        save = 2 * max(c, b) * kv_tok / bytes_s  # new K, V read and written to the paged cache
        row = {"n_embd": h, "n_q_head": nq, "n_kv_head": nkv, "block_size": block_size,
               "num_tensor_parallel_workers": 1, "max_model_len": max_seq_len, "batch_size": b,
               "prefill_chunk_size": c, "kv_cache_size": k, "is_prefill": pre,
               "attention_backend": "AttentionBackend.ROOFLINE_STANDIN"}
        for name, t in (("attn_prefill", t_pre), ("attn_decode", t_dec), ("attn_kv_cache_save", save),
                        ("attn_input_reshape", 0.0), ("attn_output_reshape", 0.0)):
            for stat in ("min", "max", "mean", "median"):
                row[f"time_stats.{name}.{stat}"] = t * 1e3
            row[f"time_stats.{name}.std"] = 0.0
        rows.append(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)
    return len(rows)


def probe_step_times(predictor: Any, probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Vidur's predicted time (seconds) of each probed step: ``prompts`` (new tokens, cached tokens) chunks and
    ``decodes`` (cached tokens each), built as Vidur's own ``Batch`` of ``Request`` objects and timed by the
    predictor its replica uses (``total_time``, and the summed per-layer parts for a look inside)."""
    from vidur.entities import Batch, Request

    out = []
    for probe in probes:
        requests, tokens = [], []
        for new, cached in probe.get("prompts", []):
            r = Request(arrived_at=0.0, num_prefill_tokens=int(new + cached), num_decode_tokens=2,
                        num_processed_tokens=int(cached))
            requests.append(r)
            tokens.append(int(new))
        for ctx in probe.get("decodes", []):
            r = Request(arrived_at=0.0, num_prefill_tokens=int(ctx), num_decode_tokens=2,
                        num_processed_tokens=int(ctx))
            r._is_prefill_complete = True
            requests.append(r)
            tokens.append(1)
        t = predictor.get_execution_time(Batch(0, requests, tokens), 0)
        layers = t.num_layers
        out.append({**probe, "total_s": t.total_time,
                    "attention_decode_s": t.attention_decode_execution_time * layers * 1e-3,
                    "attention_prefill_s": t.attention_prefill_execution_time * layers * 1e-3,
                    "mlp_up_down_s": (t.mlp_layer_up_proj_execution_time + t.mlp_layer_down_proj_execution_time)
                    * layers * 1e-3})
    return out


def batch_series(sim: Any) -> dict[str, list[float]]:
    """Vidur's per-batch records (in batch order): execution time (s), tokens, prefill tokens, decode tokens."""
    store = sim.metric_store
    series: dict[str, list[float]] = {}
    for table in (store._batch_metrics_time_distribution_per_batch,
                  store._batch_metrics_count_distribution_per_batch):
        for name, data in table.items():
            rows = sorted(data._data_series)
            series[name.value] = [float(y) for _, y in rows]
    return series


def _pct(values: Any, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q))


def main() -> None:
    job = load_job()
    root = Path(job["vidur_root"]).resolve()
    work = Path(job["work_dir"]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(root))  # the source checkout, if Vidur is not installed in the venv
    t_import = time.perf_counter()
    from vidur.config import SimulationConfig
    from vidur.simulator import Simulator
    from vidur.utils.random import set_seeds
    import_s = time.perf_counter() - t_import

    device, model = job["device"], job["vidur_model"]
    compute = root / "data" / "profiling" / "compute" / device / model
    attention = compute / "attention.csv"
    attention_profile = "vidur (profiled)"
    if not attention.is_file():
        attention = work / "profiling" / "compute" / device / model / "attention.csv"
        if not attention.is_file():
            write_standin_attention(attention, job["model_arch"], job["hw"], block_size=job["block_tokens"])
        attention_profile = "stand-in (roofline on Vidur's grid)"
    sched, pred = job["scheduler"], job.get("predictor", "random_forrest")
    max_seqs, budget = int(job["max_num_seqs"]), int(job["max_num_batched_tokens"])
    argv = [
        "vidur", "--seed", "42", "--log_level", "warning",
        "--replica_config_device", device, "--replica_config_network_device", job["network_device"],
        "--replica_config_model_name", model, "--cluster_config_num_replicas", "1",
        "--replica_config_tensor_parallel_size", "1", "--replica_config_num_pipeline_stages", "1",
        "--request_generator_config_type", "trace_replay",
        "--trace_request_generator_config_trace_file", str(Path(job["trace"]).resolve()),
        "--trace_request_generator_config_max_tokens", str(job["max_tokens"]),
        "--global_scheduler_config_type", "round_robin",
        "--replica_scheduler_config_type", sched, "--execution_time_predictor_config_type", pred,
        f"--{sched}_scheduler_config_batch_size_cap", str(max_seqs),
        f"--{sched}_scheduler_config_block_size", str(job["block_tokens"]),
        f"--{pred}_execution_time_predictor_config_compute_input_file", str(compute / "mlp.csv"),
        f"--{pred}_execution_time_predictor_config_attention_input_file", str(attention),
        f"--{pred}_execution_time_predictor_config_all_reduce_input_file",
        str(root / "data/profiling/network/{NETWORK_DEVICE}/all_reduce.csv"),
        f"--{pred}_execution_time_predictor_config_send_recv_input_file",
        str(root / "data/profiling/network/{NETWORK_DEVICE}/send_recv.csv"),
        f"--{pred}_execution_time_predictor_config_prediction_max_batch_size", str(max_seqs),
        # Token counts of whole steps (the linear layers) and KV lengths are looked up up to this.
        f"--{pred}_execution_time_predictor_config_prediction_max_tokens_per_request",
        str(max(budget, job["max_tokens"])),
        # A step's prefills are looked up as one chunk of sqrt(sum of squares) tokens: up to the step budget.
        f"--{pred}_execution_time_predictor_config_prediction_max_prefill_chunk_size",
        str(max(budget, job["max_tokens"])),
        "--metrics_config_output_dir", str(work / "simulator_output"),
        "--metrics_config_cache_dir", str(work / "cache"),
        "--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace",
        "--no-metrics_config_write_json_trace",
    ]
    if sched == "sarathi":
        argv += ["--sarathi_scheduler_config_chunk_size", str(budget)]
    else:
        argv += [f"--{sched}_scheduler_config_max_tokens_in_batch", str(budget)]
    sys.argv = argv
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)

    cache = Path(config.metrics_config.cache_dir)
    cached = set(cache.glob("*.pkl")) if cache.is_dir() else set()
    t0 = time.perf_counter()
    sim = Simulator(config)
    init_s = time.perf_counter() - t0
    fitted = bool(set(cache.glob("*.pkl")) - cached)  # models or prediction tables made, not read from the cache
    t0 = time.perf_counter()
    sim.run()
    run_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim._write_output()
    write_s = time.perf_counter() - t0
    import atexit

    atexit.unregister(sim._write_output)  # Vidur registers it to run again at exit

    import numpy as np
    import pandas as pd

    stage = sim.scheduler.get_replica_scheduler(0)._replica_stage_schedulers[0]
    probes = probe_step_times(stage._execution_time_predictor, job.get("probe", []))
    batches = batch_series(sim)
    exec_s = np.asarray(batches.get("batch_execution_time", []))
    prefill_tok = np.asarray(batches.get("batch_num_prefill_tokens", []))
    decode_tok = np.asarray(batches.get("batch_num_decode_tokens", []))
    decode_only = prefill_tok == 0
    batches_path = work / f"batches-{sched}.json"
    batches_path.write_text(json.dumps(batches))

    out_dir = Path(config.metrics_config.output_dir)
    req = pd.read_csv(out_dir / "request_metrics.csv").sort_values("Request Id")
    trace = pd.read_csv(job["trace"])
    ttft = req["prefill_e2e_time"].to_numpy()
    e2e = req["request_e2e_time"].to_numpy()
    dec = trace["num_decode_tokens"].to_numpy()[: len(req)]
    tpot = (e2e - ttft)[dec > 1] / (dec[dec > 1] - 1)
    arrivals = trace["arrived_at"].to_numpy()[: len(req)]
    span = float((arrivals + e2e).max() - arrivals.min())
    sketches = list(sim.metric_store._batch_metrics_count_distribution.values())
    replica_scheduler = sim.scheduler.get_replica_scheduler(0)
    emit({
        "tool": "Vidur", "version": job.get("vidur_version", "?"), "scheduler": sched, "model": model,
        "device": device, "attention_profile": attention_profile, "requests": len(req),
        "predictor": pred, "fitted": fitted, "import_s": import_s, "init_s": init_s, "run_s": run_s, "write_s": write_s,
        "batches": len(sketches[0]) if sketches else None,
        "kv_blocks": int(replica_scheduler._config.num_blocks),
        "max_batch_size": int(replica_scheduler._max_batch_size),
        "ttft_p50_ms": _pct(ttft, 50) * 1e3, "ttft_p99_ms": _pct(ttft, 99) * 1e3,
        "tpot_p50_ms": _pct(tpot, 50) * 1e3, "tpot_p99_ms": _pct(tpot, 99) * 1e3,
        "e2e_p50_s": _pct(e2e, 50), "req_per_s": len(req) / span if span > 0 else None,
        "restarts": int(req["request_num_restarts"].sum()) if "request_num_restarts" in req else None,
        "output_dir": str(out_dir),
        "probe": probes, "batches_file": str(batches_path),
        "batch_time_min_s": float(exec_s.min()) if len(exec_s) else None,
        "batches_not_positive": int((exec_s <= 0).sum()),
        "batch_time_sum_s": float(exec_s.sum()),
        "prefill_tokens_run": int(prefill_tok.sum()),
        "decode_batch_p50": float(np.median(decode_tok[decode_only])) if decode_only.any() else None,
    })


if __name__ == "__main__":
    main()
