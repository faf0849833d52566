"""Published GPU kernel measurements against the presets fitted on the others: ``python bench/bench_gpu_kernels.py``.

Writes ``bench/GPU-KERNELS.md``: every row of ``src/layerscope/data/gpu-kernels.md`` that maps to one op, its
published value beside the prediction of its GPU's preset fitted without the row's own source
(``layerscope.analysis.kernel_replay``), the headline error over E/D rows, and the rows not replayed with the
reason. Also the H200 kernels this project timed itself by CUDA-graph replay (``bench/gpu/h200-2026-11-26``), an
independent check the fit never sees. Deterministic: no timing, no randomness.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from layerscope.analysis.kernel_replay import (  # noqa: E402
    Replayed,
    gemm_tflops,
    headline,
    measured_attention_s,
    replay,
)
from layerscope.hardware.kernel_fit import (  # noqa: E402
    K_LOOP_MAX_K,
    K_LOOP_MAX_M,
    K_LOOP_MAX_N,
    GemmRow,
    fit_preset,
    k_loop_per_k_s,
)
from layerscope.hardware.kernel_table import GemmShape, KernelRow, read_kernel_table  # noqa: E402
from layerscope.hardware.presets import load_base_preset  # noqa: E402
from layerscope.hardware.spec import HardwareSpec  # noqa: E402

GPUS = ("a100-sxm", "a100-pcie", "h100-sxm", "h100-pcie", "h200", "gh200", "b200", "l40s", "mi300x")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
OWN_H200 = ROOT / "bench" / "gpu" / "h200-2026-11-26" / "kernels-cuda-graph.json"
OWN_H200_KSWEEP = ROOT / "bench" / "gpu" / "h200-2026-11-27" / "kernels-ksweep-cuda-graph.json"
OWN_H200_KLOOP = ROOT / "bench" / "gpu" / "h200-2026-11-27b" / "kernels-kloop-cuda-graph.json"
OWN_H200_KSWEEP_FP8 = ROOT / "bench" / "gpu" / "h200-2026-11-27b" / "kernels-ksweep-fp8-cuda-graph.json"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _errors(errors: list[float]) -> str:
    """``median |error| X%, p90 Y%`` of ``errors`` (the p90 as the file's other tables take it)."""
    e = sorted(errors)
    return f"median |error| {e[len(e) // 2] * 100:.1f}%, p90 {e[int(0.9 * (len(e) - 1))] * 100:.1f}%"


def own_gemms(path: Path, kinds: tuple[str, ...], spec: HardwareSpec, template: KernelRow) -> list[tuple[dict, float]]:
    """(record, predicted TFLOPS) for the GEMM records of ``kinds`` in ``path`` (``bench/gpu_kernel_probe.py``'s
    output: our own graph-timed H200 kernels), each timed as a table row of the h200 preset ``spec`` would be;
    ``template`` is any published GEMM row (the fields a probe record does not carry)."""
    if not path.exists():
        return []
    out = []
    for rec in json.loads(path.read_text())["records"]:
        if rec["kind"] not in kinds:
            continue
        row = replace(template, id="own", gpu="h200", source="own", precision=rec["dtype"],
                      gemm=GemmShape(rec["m"], rec["n"], rec["k"]), value=rec["tflops"], tags=frozenset({"E"}))
        g = GemmRow.of(row)
        if g is not None:
            out.append((rec, gemm_tflops(g, spec)))
    return out


def own_h200_rows(spec: HardwareSpec, template: KernelRow) -> list[tuple[str, float, float]]:
    """(shape, measured TFLOPS, predicted TFLOPS) for our own graph-timed H200 bf16/fp8 GEMMs, predicted by the
    h200 preset fitted on the whole published table."""
    return [(f"own {rec['dtype']} {rec['m']}x{rec['n']}x{rec['k']}", rec["tflops"], p)
            for rec, p in own_gemms(OWN_H200, ("gemm",), spec, template)]


def own_h200_ksweep(spec: HardwareSpec, template: KernelRow) -> list[tuple[str, int, int, int, float, float, float]]:
    """(kind, m, n, k, measured TFLOPS, predicted TFLOPS, measured s) for our own graph-timed H200 bf16 GEMMs over
    the reduction width K and over narrow N (``bench/gpu_kernel_probe.py --only ksweep``), predicted by the h200
    preset fitted on the whole published table."""
    return [(rec["kind"], rec["m"], rec["n"], rec["k"], rec["tflops"], p, rec["seconds_s"])
            for rec, p in own_gemms(OWN_H200_KSWEEP, ("gemm_ksweep", "gemm_narrow_n"), spec, template)]


def ksweep_section(spec: HardwareSpec, template: KernelRow) -> list[str]:
    """The K-sweep and narrow-N GEMMs beside the preset, and the small-kernel time floor by K they show."""
    sweep = own_h200_ksweep(spec, template)
    if not sweep:
        return []
    # The floor: the fastest kernel at each K among those doing little work (at most 0.5 GFLOP), where neither
    # the weight bytes nor the FLOPs explain the time.
    floor: dict[int, float] = {}
    for _kind, m, n, k, _, _, s in sweep:
        if 2.0 * m * n * k <= 0.5e9 and 2.0 * n * k <= 16e6:
            floor[k] = min(floor.get(k, s), s)
    ks = sorted(floor)
    lines = ["", "## Our own H200 GEMMs over K and narrow N (CUDA-graph replay, 2026-11-27, never fitted)", "",
             f"{len(sweep)} bf16 GEMMs from `{OWN_H200_KSWEEP.relative_to(ROOT)}` (`bench/gpu_kernel_probe.py --only "
             "ksweep`: N = 4096 and 14336 at K = 256…16384, and N = 128…6144 at K = 4096, M = 1…16384, cold "
             "weights), predicted by the h200 preset fitted on the whole table: "
             f"{_errors([abs(p / m - 1) for *_, m, p, _ in sweep])}.", ""]
    if len(ks) >= 2:
        slope, icpt = np.polyfit(np.array(ks, dtype=float), np.array([floor[k] for k in ks]), 1)
        lines += ["Fastest small kernel (≤ 0.5 GFLOP, ≤ 16 MB of weights) by K: " + ", ".join(
            f"K = {k}: {floor[k] * 1e6:.2f} µs" for k in ks) + f"; a line through them: {icpt * 1e6:.2f} µs + "
            f"{slope * 1e9:.2f} ns per unit of K.", ""]
    lines += ["| sweep | M | N | K | measured TFLOPS | predicted | error | measured µs |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {kind.removeprefix('gemm_')} | {m} | {n} | {k} | {mt:.1f} | {p:.1f} | {_pct(p / mt - 1)} | "
              f"{s * 1e6:.2f} |" for kind, m, n, k, mt, p, s in sweep]
    return lines


def _used_for_k_loop(m: int, n: int, k: int) -> bool:
    return n <= K_LOOP_MAX_N and m <= K_LOOP_MAX_M and k <= K_LOOP_MAX_K


def kloop_section(spec: HardwareSpec, template: KernelRow, base: HardwareSpec) -> list[str]:
    """The K-loop sweep (bf16 and fp8) that sets ``efficiency.gemm_k_loop_s`` (``base``: the h200 preset before
    the fit), and the fp8 K-sweep beside it, predicted by the h200 preset fitted on the whole table (``spec``)."""
    if not OWN_H200_KLOOP.exists():
        return []
    per_k = k_loop_per_k_s(json.loads(OWN_H200_KLOOP.read_text())["records"])
    # (kind, dtype, m, n, k, measured s, predicted s)
    kloop, sweep = ([(rec["kind"], rec["dtype"], rec["m"], rec["n"], rec["k"], rec["seconds_s"],
                      rec["flops"] / (p * 1e12)) for rec, p in own_gemms(path, (kind,), spec, template)]
                    for path, kind in ((OWN_H200_KLOOP, "gemm_kloop"), (OWN_H200_KSWEEP_FP8, "gemm_ksweep")))

    def stats(items: list[tuple[float, float]]) -> str:
        return f"{len(items)} GEMMs, {_errors([abs(p / m - 1) for m, p in items])}" if items else "none"

    lines = ["", "## The serial K-loop: our own H200, bf16 beside fp8 (CUDA-graph replay, 2026-11-27b)", "",
             f"`{OWN_H200_KLOOP.relative_to(ROOT)}` (`bench/gpu_kernel_probe.py --only kloop`: cuBLAS GEMMs, "
             "fp8 by `torch._scaled_mm` with per-tensor scales, N = 128…7168, K = 256…16384, M = 16, 64, 128). "
             f"`kernel_fit.k_loop_per_k_s` on its shapes of N ≤ {K_LOOP_MAX_N}, M ≤ {K_LOOP_MAX_M}, K ≤ "
             f"{K_LOOP_MAX_K} (a few output tiles; below the K where cuBLAS splits K): " + ", ".join(
                 f"{dt} {s * 1e9:.3f} ns per unit of K (median of {n} shapes' slopes)" for dt, (s, n) in per_k.items())
             + "; the h200 base preset carries " + ", ".join(
                 f"{dt.value} {v * 1e9:.3g} ns" for dt, v in base.efficiency.gemm_k_loop_s.items()) + ". fp8 "
             "costs 0.67 of bf16 per unit of K: neither per element (1) nor per byte (0.5) of K.", "",
             "Predicted by the h200 preset fitted on the whole table (its K-loop figure is these rows' slope; "
             "everything else is fitted on the published rows):", "",
             f"- shapes the K-loop figure was measured on: "
             f"{stats([(m, p) for _, _, mm, n, k, m, p in kloop if _used_for_k_loop(mm, n, k)])}",
             f"- the other K-loop rows (N ≥ 2112, or K > {K_LOOP_MAX_K}): "
             f"{stats([(m, p) for _, _, mm, n, k, m, p in kloop if not _used_for_k_loop(mm, n, k)])}",
             f"- fp8 K-sweep (N = 4096 and 14336, M = 1…16384; `{OWN_H200_KSWEEP_FP8.relative_to(ROOT)}`), "
             f"never fitted: {stats([(m, p) for _, dt, *_, m, p in sweep if dt == 'fp8'])}; its bf16 rows, "
             f"the same run: {stats([(m, p) for _, dt, *_, m, p in sweep if dt == 'bf16'])}", "",
             "| dtype | M | N | K | measured µs | predicted µs | error | sets τ |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {dt} | {mm} | {n} | {k} | {m * 1e6:.2f} | {p * 1e6:.2f} | {_pct(p / m - 1)} | "
              f"{'yes' if _used_for_k_loop(mm, n, k) else ''} |" for _, dt, mm, n, k, m, p in kloop]
    return lines


def own_h200_attention(spec: HardwareSpec) -> list[tuple[str, str, float, float]]:
    """(phase, shape, measured s, predicted s) for our own graph-timed H200 SDPA calls on the h200 preset ``spec``."""
    if not OWN_H200.exists():
        return []
    out = []
    for rec in json.loads(OWN_H200.read_text())["records"]:
        if rec["kind"] == "attention_prefill":
            t = measured_attention_s(spec, batch=1, new=rec["seq"], cached=0, heads=rec["heads"],
                                     kv_heads=rec["kv_heads"], head_dim=rec["head_dim"], causal=rec["causal"])
            out.append(("prefill", f"d{rec['head_dim']} S={rec['seq']}", rec["seconds_s"], t))
        elif rec["kind"] == "attention_decode":
            t = measured_attention_s(spec, batch=rec["batch"], new=1, cached=rec["kv_len"] - 1, heads=rec["heads"],
                                     kv_heads=rec["kv_heads"], head_dim=rec["head_dim"])
            out.append(("decode", f"d{rec['head_dim']} B={rec['batch']} KV={rec['kv_len']}", rec["seconds_s"], t))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "GPU-KERNELS.md")
    ap.add_argument("--no-record", action="store_true", help="Print, do not write --out.")
    a = ap.parse_args()
    rows = read_kernel_table()
    presets = {g: load_base_preset(g) for g in GPUS}  # the fit's inputs, as `make presets` fits them
    done, skipped = replay(rows, presets)
    lines = [
        f"`python bench/bench_gpu_kernels.py` · {datetime.date.today().isoformat()} · deterministic (no timing)",
        "",
        "Each row is predicted by its GPU's preset fitted (`layerscope.hardware.kernel_fit`) on every table row "
        "except those of the row's own source (the `held out` column), so no row is scored by a fit its source "
        "took part in. GEMMs: one linear op timed by the roofline cost model; memory-bound rows: the preset's "
        "streaming bandwidth. Error = predicted / published − 1. Headline: E- and D-tagged rows (F and L rows "
        "are listed, not counted). Target on rows not used to fit: median |error| ≤ 10%, p90 ≤ 25%.",
        "",
        "| rows | headline rows | median \\|error\\| | p90 \\|error\\| |",
        "|---|---|---|---|",
    ]
    for kind in (None, "gemm", "memory", "attention"):
        n, med, p90 = headline(done, kind)
        label = "all" if kind is None else kind
        lines.append(f"| {label} | {n} | {med * 100:.1f}% | {p90 * 100:.1f}% |")
    lines += ["", "| id | GPU | kind | what | unit | published | predicted | error | held out | headline |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(done, key=lambda r: (r.kind, r.gpu, r.id)):
        lines.append(_row(r))
    lines += ["", f"Not replayed ({len(skipped)} rows):", ""]
    by_reason: dict[str, list[str]] = {}
    for s in skipped:
        by_reason.setdefault(s.why, []).append(s.id)
    for why, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- {why}: {', '.join(ids)}")
    # the h200 preset fitted on the whole table, which every section on our own H200 kernels predicts with
    h200 = fit_preset(presets["h200"], rows, presets).spec
    template = next(r for r in rows if r.kind == "gemm" and r.gemm is not None and r.unit == "TFLOPS")
    own = own_h200_rows(h200, template)
    if own:
        lines += ["", "## Our own H200 GEMMs (CUDA-graph replay, never fitted)", "",
                  f"{len(own)} GEMMs from `{OWN_H200.relative_to(ROOT)}` (bf16 and fp8, M = 1…16384 over Llama "
                  "projection shapes, cold weights), predicted by the h200 preset fitted on the whole table: "
                  f"{_errors([abs(p / m - 1) for _, m, p in own])}.", "",
                  "| GEMM | measured TFLOPS | predicted | error |", "|---|---|---|---|"]
        lines += [f"| {name} | {m:.1f} | {p:.1f} | {_pct(p / m - 1)} |" for name, m, p in own]
    own_attn = own_h200_attention(h200)
    if own_attn:
        lines += ["", "## Our own H200 attention kernels (CUDA-graph replay, never fitted)", "",
                  f"{len(own_attn)} `scaled_dot_product_attention` calls from `{OWN_H200.relative_to(ROOT)}` (causal "
                  "prefill at batch 1, 32/8 heads; decode over a contiguous cache), predicted by the h200 preset "
                  "fitted on the whole table (its attention curves are h100-sxm's: the table has no H200 attention "
                  "rows).", ""]
        for phase in ("prefill", "decode"):
            errs = [abs(p / m - 1) for ph, _, m, p in own_attn if ph == phase]
            if errs:
                lines.append(f"- {phase}: {len(errs)} calls, {_errors(errs)}")
        lines += ["", "| phase | shape | measured µs | predicted µs | error |", "|---|---|---|---|---|"]
        lines += [f"| {ph} | {name} | {m * 1e6:.1f} | {p * 1e6:.1f} | {_pct(p / m - 1)} |"
                  for ph, name, m, p in own_attn]
    lines += ksweep_section(h200, template)
    lines += kloop_section(h200, template, presets["h200"])
    lines += collectives_section(rows)
    text = "\n".join(lines) + "\n"
    if a.no_record:
        print(text)
        return 0
    # The generated part goes between the markers; what is written by hand around it stays.
    old = a.out.read_text() if a.out.exists() else f"{BEGIN}\n{END}\n"
    if BEGIN not in old or END not in old:
        print(f"error: {a.out} has no {BEGIN} … {END} region to replace", file=sys.stderr)
        return 2
    a.out.write_text(old[:old.index(BEGIN)] + f"{BEGIN}\n{text}{END}" + old[old.index(END) + len(END):])
    print(f"wrote {a.out}")
    return 0


def collectives_section(rows: list[KernelRow]) -> list[str]:
    """The "Collectives" section: every collective row the interconnect fit reads, replayed leave-one-source-out
    (``layerscope.analysis.collective_replay``) on the shipped presets."""
    from layerscope.analysis.collective_replay import replay_collectives
    from layerscope.hardware.collective_fit import SKIPPED

    done = replay_collectives(rows)
    lines = ["", "## Collectives (α-β per algorithm, leave-one-source-out)", "",
             "Each collective row (NCCL all-reduce / all-gather / reduce-scatter by size and GPU count, P2P copies as "
             "send/recv, and the second values the rows' notes give) predicted by its GPU's shipped preset with the "
             "interconnect refitted (`layerscope.hardware.collective_fit`) without the row's source, timed as the cost "
             "model times a communication op (`cost.collectives`: α·steps + bytes / (β·B), the kernel's launch in α, "
             "the row's algorithm within a node, the fastest across nodes). Rows whose terms only their own source "
             "pins are predicted by the full fit and marked `self`: they test the α-β form, not its transfer. Rows "
             "without a message size are asymptotic bandwidths, compared as time per byte. Error = predicted / "
             "published time − 1.", "",
             "| rows | E/D rows | median \\|error\\| | p90 \\|error\\| |", "|---|---|---|---|"]
    for label, held in (("all", None), ("held out", True), ("self-fitted", False)):
        n, med, p90 = done.summary(held_out=held)
        lines.append(f"| {label} | {n} | {med * 100:.1f}% | {p90 * 100:.1f}% |")
    lines += ["", "| id | GPU | collective | GPUs | message | algorithm | published | predicted | error | fit |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in done.rows:
        size = "asymptotic" if r.message_bytes is None else f"{r.message_bytes:.4g} B"
        unit, scale = ("ps/B", 1e12) if r.message_bytes is None else ("µs", 1e6)
        lines.append(f"| {r.id} | {r.gpu} | {r.collective} | {r.gpus} | {size} | {r.algorithm} | "
                     f"{r.measured_s * scale:.4g} {unit} | {r.predicted_s * scale:.4g} {unit} | {_pct(r.error)} | "
                     f"{'self' if r.self_fitted else 'held out'} |")
    lines += ["", f"Self-fitted: {', '.join(done.self_fitted) or 'none'}.", "",
              "Not read by the collective fit: " + "; ".join(f"{k} ({v})" for k, v in SKIPPED.items()) +
              "; CX-24…CX-31 (DeepEP all-to-all on H800 / SM90 / SM100 cells, no preset GPU).", ""]
    return lines


def _row(r: Replayed) -> str:
    what = r.description.replace("|", "/")
    return (f"| {r.id} | {r.gpu} | {r.kind} | {what} | {r.unit} | {r.published:g} | {r.predicted:.4g} | "
            f"{_pct(r.error)} | {r.held_out} | {'yes' if r.headline else 'no'} |")


if __name__ == "__main__":
    raise SystemExit(main())
