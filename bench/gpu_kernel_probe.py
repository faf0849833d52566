"""Kernel-level truth on a CUDA GPU, apart from the host: ``python bench/gpu_kernel_probe.py --out DIR``.

What ``calibrate`` cannot see with CUDA events around eager launches (each small kernel there is timed
together with the host's launch of it): every kernel below is captured into a CUDA graph and replayed, so
the time per kernel is the GPU's own (plus the graph's per-node cost, measured on its own). Beside it, the
host's side: eager dispatch per op with the GPU kept busy, and whole eager forwards of the bundled models
without profiler or hooks (the number a profiled capture inflates).

Steps (``--only``, comma-separated; the default runs the first six): ``overheads``, ``gemms``, ``ksweep``,
``memory``, ``attention``, ``forwards``, and on request ``softmax`` (rows past the on-chip capacity), ``kloop``
(the serial K-loop of small grids, bf16 beside fp8: what ``efficiency.gemm_k_loop_s`` is measured on) and
``kblock`` (the same sweep with block-scaled fp8) and ``int4`` (weight-only int4 GEMMs beside bf16).

Writes ``DIR/gpu-kernels-measured.json``: one record per measurement, each with what was run, its shape,
bytes and FLOPs as counted here, and the median seconds per kernel over ``--repeats`` replays.
Nothing here needs layerscope; torch (with CUDA) and, for the forwards, transformers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

CATALOG = Path(__file__).resolve().parents[1] / "src" / "layerscope" / "model" / "catalog"
RECORDS: list[dict[str, Any]] = []


def _events_s(fn: Any, repeats: int) -> float:
    """Median seconds of ``fn()`` between two CUDA events, over ``repeats`` runs after one warm-up."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def graph_s(body: Any, calls: int, repeats: int) -> float:
    """Median seconds per call of ``body`` captured ``calls`` times into one CUDA graph and replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            body()
    return _events_s(graph.replay, repeats) / calls


def timed_or_skip(what: str, body: Any, calls: int, repeats: int) -> float | None:
    """Seconds per kernel of ``body`` (``calls`` kernels, one CUDA graph); None, with a line on stderr, where the
    kernel refuses the shape or the scales."""
    try:
        return graph_s(body, 1, repeats) / calls
    except RuntimeError as exc:
        print(f"skip {what}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return None


def record(kind: str, **fields: Any) -> None:
    RECORDS.append({"kind": kind, **fields})
    shown = {k: (f"{v * 1e6:.2f} us" if k.endswith("_s") and not k.endswith("_per_s") else v)
             for k, v in fields.items()}
    print(kind, shown, flush=True)


def overheads(repeats: int) -> None:
    a = torch.ones(1024, device="cuda")
    out = torch.empty_like(a)
    add = lambda: torch.add(a, a, out=out)  # noqa: E731
    record("graph_node", op="add 1024 fp32", seconds_per_kernel_s=graph_s(add, 1000, repeats))
    # Eager dispatch with the GPU never the bottleneck: n tiny launches back to back, one sync.
    for name, fn in (("torch.add", add), ("F.linear 1x64x64 bf16", _linear_tiny())):
        n = 2000
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) / n)
        record("eager_dispatch", op=name, seconds_per_call_s=statistics.median(samples))
    # One launch timed alone by events on an idle GPU: what calibrate's empty op sees.
    record("event_single_launch", op="add 1024 fp32", seconds_s=_events_s(add, 50))


def _linear_tiny() -> Any:
    x = torch.randn(1, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    return lambda: F.linear(x, w)


def gemms(repeats: int, l2_bytes: float, quick: bool) -> None:
    shapes = [(2048, 2048), (8192, 2048), (2048, 8192), (4096, 4096), (14336, 4096), (4096, 14336),
              (128256, 2048)]
    ms = [1, 8, 32, 128, 512, 2048, 8192] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096,
                                                          8192, 16384]
    for dname, dt in gemm_dtypes():
        for n, k in shapes:
            esize = torch.tensor([], dtype=dt).element_size()
            count = max(2, min(32, int(-(-2 * l2_bytes // (n * k * esize)))))
            weights = [torch.randn(n, k, device="cuda").to(dt) for _ in range(count)]
            for m in ms:
                if m * n * 2 > 2e9:
                    continue
                gemm_record("gemm", dname, dt, m, weights, repeats)
            weights = []


def gemm_dtypes() -> list[tuple[str, Any]]:
    """bf16, and fp8 (e4m3, per-tensor scales, bf16 out) where the GPU has fp8 matrix units."""
    dtypes: list[tuple[str, Any]] = [("bf16", torch.bfloat16)]
    if hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability() >= (8, 9):
        dtypes.append(("fp8", torch.float8_e4m3fn))
    return dtypes


def gemm_record(kind: str, dname: str, dt: Any, m: int, weights: list[Any], repeats: int) -> None:
    """Time ``x[m, K] @ w.T`` over ``weights`` (cold: together they exceed L2), one CUDA graph, and record it;
    a shape the fp8 kernel refuses (M not a multiple of 16 ...) is skipped with a line on stderr."""
    n, k = weights[0].shape
    esize = torch.tensor([], dtype=dt).element_size()
    x = torch.randn(m, k, device="cuda").to(dt)
    if dname == "fp8":
        one = torch.ones((), device="cuda")

        def body() -> None:
            for w in weights:
                torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        def body() -> None:
            for w in weights:
                F.linear(x, w)
    s = timed_or_skip(f"{kind} {dname} {m}x{n}x{k}", body, len(weights), repeats)
    if s is None:
        return
    record(kind, dtype=dname, m=m, n=n, k=k, flops=2.0 * m * n * k, bytes=float(esize * (m * k + n * k) + 2 * m * n),
           seconds_s=s, tflops=2.0 * m * n * k / s / 1e12, weights=len(weights))


def ksweep(repeats: int, l2_bytes: float) -> None:
    """GEMMs over the reduction width K at fixed N (bf16, and fp8 where the GPU has it), and bf16 over narrow N at
    fixed K: what a GEMM's fixed cost per output tile (prologue, epilogue, K-loop ramp) and the wave quantization
    of few output tiles do to the rate. The fp8 sweep says whether a one-wave grid's serial K-loop costs per element
    or per byte of K (bench/GPU-KERNELS.md, G-23 and GX-04). Our own data, kept as a check on the published-row
    fit, never fitted."""
    for dname, dt in gemm_dtypes():
        esize = torch.tensor([], dtype=dt).element_size()
        for n, ks in ((4096, (256, 512, 1024, 2048, 4096, 8192, 16384)), (14336, (512, 1024, 2048, 4096))):
            for k in ks:
                count = max(2, min(32, int(-(-2 * l2_bytes // (n * k * esize)))))
                weights = [torch.randn(n, k, device="cuda").to(dt) for _ in range(count)]
                for m in (1, 16, 64, 256, 1024, 4096, 16384):
                    gemm_record("gemm_ksweep", dname, dt, m, weights, repeats)
                weights = []
    k = 4096
    for n in (128, 256, 512, 1024, 1536, 2048, 3072, 6144):
        count = max(2, min(32, int(-(-2 * l2_bytes // (n * k * 2)))))
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
        for m in (64, 256, 1024, 4096, 16384):
            gemm_record("gemm_narrow_n", "bf16", torch.bfloat16, m, weights, repeats)
        weights = []


def kloop(repeats: int, l2_bytes: float) -> None:
    """The K-loop of grids too small to fill the chip, bf16 beside fp8 at the same shapes: narrow N (few output
    tiles) over K = 256…16384 at M = 16, 64, 128, with DeepGEMM's published H100 shapes (N = 2112 and 7168; G-23,
    GX-04) among them. Per element of K, bf16 and fp8 take the same time per unit of K; per byte, fp8 takes half.
    Weights rotate past the L2 where they can (``weights`` in each record says how many were rotated)."""
    for dname, dt in gemm_dtypes():
        esize = torch.tensor([], dtype=dt).element_size()
        for n in (128, 256, 512, 1024, 2112, 7168):
            for k in (256, 512, 1024, 2048, 4096, 7168, 16384):
                count = max(2, min(128, int(-(-2 * l2_bytes // (n * k * esize)))))
                weights = [torch.randn(n, k, device="cuda").to(dt) for _ in range(count)]
                for m in (16, 64, 128):
                    gemm_record("gemm_kloop", dname, dt, m, weights, repeats)
                weights = []


def _block_scales(x: Any, w: Any) -> list[tuple[str, Any, Any]]:
    """Candidate DeepSeek-style scale pairs for ``x[M, K] @ w[N, K].T``: activations 1 x 128 (shape (M, K/128),
    M-major), weights 128 x 128 (shape (K/128, N/128) against mat_b = w.T) in both memory orders, then weights
    1 x 128 too; the first one torch accepts is timed."""
    m, k = x.shape
    n = w.shape[0]
    kb, nb = -(-k // 128), -(-n // 128)
    sa = torch.ones(kb, m, device="cuda").t()
    return [("1x128,128x128", sa, torch.ones(kb, nb, device="cuda")),
            ("1x128,128x128t", sa, torch.ones(nb, kb, device="cuda").t()),
            ("1x128,1x128", sa, torch.ones(n, kb, device="cuda").t())]


def kblock(repeats: int, l2_bytes: float) -> None:
    """The K-loop sweep of ``kloop`` with block-scaled fp8 (scales per 1 x 128 of the activations and 128 x 128 of
    the weights, DeepSeek-V3's recipe and DeepGEMM's; torch._scaled_mm's CUTLASS kernel on sm90): whether the
    per-K-block promotion of the accumulators costs per unit of K beyond per-tensor fp8 (bench/GPU-KERNELS.md,
    G-23)."""
    if ("fp8", torch.float8_e4m3fn) not in gemm_dtypes():
        print("skip kblock: no fp8 matrix units", file=sys.stderr)
        return
    dt = torch.float8_e4m3fn
    for n in (128, 256, 512, 1024, 2048, 2112, 7168):
        for k in (256, 512, 1024, 2048, 4096, 7168, 16384):
            count = max(2, min(128, int(-(-2 * l2_bytes // (n * k)))))
            weights = [torch.randn(n, k, device="cuda").to(dt) for _ in range(count)]
            for m in (16, 64, 128):
                x = torch.randn(m, k, device="cuda").to(dt)
                for recipe, sa, sb in _block_scales(x, weights[0]):
                    def body(x: Any = x, ws: list[Any] = weights, sa: Any = sa, sb: Any = sb) -> None:
                        for w in ws:
                            torch._scaled_mm(x, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
                    s = timed_or_skip(f"kblock {recipe} {m}x{n}x{k}", body, len(weights), repeats)
                    if s is None:
                        continue
                    record("gemm_kblock", dtype="fp8", scales=recipe, m=m, n=n, k=k, flops=2.0 * m * n * k,
                           bytes=float(m * k + n * k + 2 * m * n), seconds_s=s,
                           tflops=2.0 * m * n * k / s / 1e12, weights=len(weights))
                    break
            weights = []


def int4(repeats: int, l2_bytes: float) -> None:
    """Weight-only int4 GEMMs (W4A16: PyTorch's tinygemm kernel, ``torch._weight_int4pack_mm``, bf16 activations,
    group-wise scales and zeros) beside bf16 ``F.linear`` on the same shapes, M = 1…64, cold weights: the weight
    stream a dequantizing kernel reaches (bench/GPU-KERNELS.md, GX-32: Marlin at 1.25 TB/s on an H100)."""
    for n, k in ((4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336), (28672, 8192)):
        for group in (128,):
            count = max(2, min(64, int(-(-2 * l2_bytes // (n * k // 2)))))
            packed, scales = [], []
            try:
                for _ in range(count):
                    w = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
                    packed.append(torch._convert_weight_to_int4pack(w, 8))
                    scales.append(torch.rand(k // group, n, 2, device="cuda", dtype=torch.bfloat16))
            except (RuntimeError, AttributeError) as exc:
                print(f"skip int4 {n}x{k}: {str(exc).splitlines()[0]}", file=sys.stderr)
                return
            for m in (1, 4, 16, 64):
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)

                def body(x: Any = x, ws: list[Any] = packed, ss: list[Any] = scales, g: int = group) -> None:
                    for w, sz in zip(ws, ss, strict=True):
                        torch._weight_int4pack_mm(x, w, g, sz)
                s = timed_or_skip(f"int4 {m}x{n}x{k}", body, len(packed), repeats)
                if s is None:
                    continue
                record("gemm_w4a16", dtype="w4a16", group=group, m=m, n=n, k=k, flops=2.0 * m * n * k,
                       weight_bytes=float(n * k // 2), seconds_s=s, weight_gbps=n * k / 2 / s / 1e9,
                       weights=len(packed))
            packed, scales = [], []
        bf = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
              for _ in range(max(2, min(32, int(-(-2 * l2_bytes // (n * k * 2))))))]
        for m in (1, 4, 16, 64):
            gemm_record("gemm_w16a16", "bf16", torch.bfloat16, m, bf, repeats)
        bf = []


def softmax_rows(repeats: int) -> None:
    """fp32 softmax over rows of growing width, eager and torch.compile'd: useful bandwidth (input read once, output
    written once) by row width, to see where a row stops fitting on chip and the kernel reads it again (the
    published MX-02/MX-03 rows' reading). Our own data, never fitted."""
    rows_bytes = 2**30  # 1 GiB of input per shape
    compiled = torch.compile(lambda x: torch.softmax(x, dim=-1), dynamic=False)
    for width in (4096, 16384, 65536, 262144):
        x = torch.randn(rows_bytes // (4 * width), width, device="cuda", dtype=torch.float32)
        for name, fn in (("eager", lambda x=x: torch.softmax(x, dim=-1)), ("compiled", lambda x=x: compiled(x))):
            try:
                s = graph_s(fn, 1, repeats)
            except Exception as exc:  # a compile the image cannot run: keep the rest
                print(f"skip softmax {name} {width}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            record("softmax_rows", impl=name, rows=x.shape[0], width=width, bytes=2.0 * x.numel() * 4,
                   seconds_s=s, useful_tb_per_s=2.0 * x.numel() * 4 / s / 1e12)


def memory(repeats: int) -> None:
    for mib in (1, 4, 16, 64, 256, 1024):
        n = mib * 2**20 // 2
        a = torch.ones(n, device="cuda", dtype=torch.bfloat16)
        b = torch.empty_like(a)
        s = graph_s(lambda: b.copy_(a), 10, repeats)  # noqa: B023
        record("copy", dtype="bf16", bytes=2.0 * a.numel() * 2, seconds_s=s, tb_per_s=4.0 * n / s / 1e12)
    hidden = 2048
    for tokens in (1, 8, 128, 512, 2048, 8192):
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(hidden, device="cuda", dtype=torch.bfloat16)

        def hf_rmsnorm(x: Any = x, w: Any = w) -> Any:  # transformers' LlamaRMSNorm.forward
            h = x.to(torch.float32)
            var = h.pow(2).mean(-1, keepdim=True)
            h = h * torch.rsqrt(var + 1e-5)
            return w * h.to(torch.bfloat16)

        record("rmsnorm_hf_eager", tokens=tokens, hidden=hidden, bytes=4.0 * tokens * hidden,
               seconds_s=graph_s(hf_rmsnorm, 10, repeats))
        if hasattr(F, "rms_norm"):
            record("rmsnorm_fused", tokens=tokens, hidden=hidden, bytes=4.0 * tokens * hidden,
                   seconds_s=graph_s(lambda x=x, w=w: F.rms_norm(x, (hidden,), w, 1e-5), 10, repeats))
        g, u = torch.randn(tokens, 8192, device="cuda", dtype=torch.bfloat16), torch.randn(
            tokens, 8192, device="cuda", dtype=torch.bfloat16)
        record("silu_mul_eager", tokens=tokens, inter=8192, bytes=2.0 * 5 * tokens * 8192,
               seconds_s=graph_s(lambda g=g, u=u: F.silu(g) * u, 10, repeats))


def attention(repeats: int, quick: bool) -> None:
    for heads, kv, hd in ((32, 8, 64), (32, 8, 128)):
        for seq in ((512, 2048, 8192) if quick else (128, 512, 1024, 2048, 4096, 8192, 16384)):
            q = torch.randn(1, heads, seq, hd, device="cuda", dtype=torch.bfloat16)
            kk = torch.randn(1, kv, seq, hd, device="cuda", dtype=torch.bfloat16)
            vv = torch.randn_like(kk)
            s = graph_s(lambda q=q, kk=kk, vv=vv: F.scaled_dot_product_attention(q, kk, vv, is_causal=True,
                                                                              enable_gqa=True), 3, repeats)
            flops = 4.0 * heads * seq * seq * hd / 2  # causal: half the score and value products
            record("attention_prefill", heads=heads, kv_heads=kv, head_dim=hd, seq=seq, causal=True, flops=flops,
                   seconds_s=s, tflops=flops / s / 1e12)
        for batch in (1, 8, 32):
            for ctx in ((2048, 16384) if quick else (512, 2048, 8192, 32768)):
                if batch * ctx > 2**19:
                    continue
                q = torch.randn(batch, heads, 1, hd, device="cuda", dtype=torch.bfloat16)
                kk = torch.randn(batch, kv, ctx, hd, device="cuda", dtype=torch.bfloat16)
                vv = torch.randn_like(kk)
                s = graph_s(lambda q=q, kk=kk, vv=vv: F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True),
                            3, repeats)
                kv_bytes = 2.0 * 2 * batch * kv * ctx * hd
                record("attention_decode", heads=heads, kv_heads=kv, head_dim=hd, batch=batch, kv_len=ctx,
                       bytes=kv_bytes, seconds_s=s, tb_per_s=kv_bytes / s / 1e12)


def forwards(repeats: int) -> None:
    """Whole eager forwards, no profiler, no hooks: wall seconds per forward (the host-bound truth)."""
    try:
        import transformers
    except ImportError:
        print("no transformers: skipping forwards", file=sys.stderr)
        return
    for slug in ("meta-llama--Llama-3.2-1B", "Qwen--Qwen3-0.6B"):
        cfg = json.loads((CATALOG / slug / "config.json").read_text())
        config = transformers.AutoConfig.for_model(**cfg)
        config._attn_implementation = "sdpa"
        with torch.device("cuda"):  # random init on the GPU: seconds, not the CPU's minute
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
        for batch, prompt in ((1, 128), (1, 512), (1, 2048), (8, 512)):
            ids = torch.randint(0, cfg["vocab_size"], (batch, prompt), device="cuda")
            with torch.no_grad():
                def fwd(ids: Any = ids, model: Any = model) -> None:
                    model(input_ids=ids, use_cache=False)
                fwd()
                torch.cuda.synchronize()
                walls = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    fwd()
                    torch.cuda.synchronize()
                    walls.append(time.perf_counter() - t0)
                record("eager_forward", model=slug, batch=batch, prompt_len=prompt,
                       wall_s=statistics.median(walls), gpu_s=_events_s(fwd, repeats))
            # one decode step after the prompt's prefill, cache kept (it grows by one token per repeat)
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=True)
                cache = out.past_key_values
                nxt = ids[:, :1]
                torch.cuda.synchronize()
                walls = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    model(input_ids=nxt, past_key_values=cache, use_cache=True)
                    torch.cuda.synchronize()
                    walls.append(time.perf_counter() - t0)
                record("eager_decode_step", model=slug, batch=batch, context=prompt, wall_s=statistics.median(walls))
        model = None
        torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu-probe"))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="overheads,gemms,ksweep,memory,attention,forwards")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("torch sees no CUDA GPU")
    a.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    l2 = float(getattr(props, "L2_cache_size", 50 * 2**20))
    meta = {"gpu": props.name, "sms": props.multi_processor_count, "l2_bytes": l2, "torch": torch.__version__,
            "cuda": torch.version.cuda, "date": time.strftime("%Y-%m-%d"), "repeats": a.repeats}
    print(meta, flush=True)
    steps = {"overheads": lambda: overheads(a.repeats), "gemms": lambda: gemms(a.repeats, l2, a.quick),
             "memory": lambda: memory(a.repeats), "ksweep": lambda: ksweep(a.repeats, l2),
             "kloop": lambda: kloop(a.repeats, l2),
             "kblock": lambda: kblock(a.repeats, l2),
             "int4": lambda: int4(a.repeats, l2),
             "softmax": lambda: softmax_rows(a.repeats),
             "attention": lambda: attention(a.repeats, a.quick),
             "forwards": lambda: forwards(a.repeats)}
    for name in a.only.split(","):
        t0 = time.perf_counter()
        try:
            steps[name]()
        except (Exception, KeyboardInterrupt) as exc:  # keep what this and the other steps measured
            # (``timeout -s INT`` stops a step with KeyboardInterrupt: its records so far are still written)
            print(f"step {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        print(f"step {name}: {time.perf_counter() - t0:.1f} s", flush=True)
        (a.out / "gpu-kernels-measured.json").write_text(json.dumps({"meta": meta, "records": RECORDS}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
