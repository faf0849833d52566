"""What a GPU kernel name says: its category, family, tile shape, dtype and architecture.

Two registries of regexes, tried in order:

* :data:`CATEGORY_RULES` — name → one of :data:`CATEGORIES` (attention, gemm, norm,
  elementwise, activation, memory, communication, concat, other). Used by the reports to
  split time; it works on kernel names and on CPU op names (``aten::mm`` → gemm).
* :data:`KERNEL_FAMILIES` — name → :class:`KernelInfo`: cuBLAS (``ampere_bf16_s16816gemm_…``,
  ``sm90_xmma_gemm_…``), ``nvjet_…``, CUTLASS (``cutlass_80_tensorop_…``), cuDNN,
  FlashAttention (``flash_fwd_kernel``, ``flash::flash_fwd_splitkv_kernel``), FlashInfer,
  ``fmha``, Triton (``triton_poi_fused_…``, ``triton_red_``, ``triton_per_``), NCCL
  (``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``) and PyTorch's ATen kernels.

Patterns follow the libraries' naming schemes: cuBLAS/CUTLASS
``<arch>_<opclass>_<dtype><mma shape>gemm_<tile MxN>_<K x stages>_<layout>``; NCCL
``ncclDevKernel_<coll>_<redop>_<dtype>_<algo>_<proto>``; Triton Inductor
``triton_<poi|red|per|tem>_fused_<ops>_<n>``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

CATEGORIES: tuple[str, ...] = ("attention", "gemm", "norm", "elementwise", "activation", "memory",
                               "communication", "concat", "other")

#: (category, regex) in order; the first match wins. Case-insensitive.
CATEGORY_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("communication", re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
                                 r"sendrecv|c10d::|broadcast|gloo", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|attn|sdpa|softmax|paged_?kv|"
                             r"batch(prefill|decode)with|mla_|rotary|rope", re.I)),
    ("norm", re.compile(r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|"
                        r"bn_(fw|bw)|GammaBetaBackward|welford|_norm\b|norm_kernel", re.I)),
    ("concat", re.compile(r"\bcat\b|CatArray|concat|aten::cat|::cat_|aten::stack", re.I)),
    ("memory", re.compile(r"memcpy|memset|copy_kernel|direct_copy|aten::copy_|aten::to\b|"
                          r"_to_copy|aten::contiguous|aten::clone|fill_kernel|aten::fill_|"
                          r"aten::zero_|aten::empty|index_select|gather|scatter|embedding", re.I)),
    ("gemm", re.compile(r"gemm|gemv|matmul|cutlass|cublas|nvjet|xmma|s1688|s16816|h884|h1688|"
                        r"hmma|imma|wgmma|scudnn|conv|dgrad|wgrad|winograd|aten::(mm|bmm|addmm|"
                        r"linear|baddbmm)\b|_mm_|splitk", re.I)),
    ("activation", re.compile(r"relu|gelu|silu|swish|sigmoid|tanh|threshold|softplus|"
                              r"act_and_mul|swiglu|geglu|hardswish|mish|elu\b", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise|triton_poi|"
                               r"foreach|multi_tensor_apply|functor|aten::(add|mul|sub|div|neg|"
                               r"exp|log|pow|sqrt|rsqrt|where|clamp|abs|masked_fill)", re.I)),
]


def classify(name: str | None) -> str:
    """The category of a kernel or op name (``other`` when no rule matches)."""
    if not name:
        return "other"
    for category, pattern in CATEGORY_RULES:
        if pattern.search(name):
            return category
    return "other"


@dataclass(frozen=True)
class KernelInfo:
    """What a kernel name encodes. Fields a family does not encode are ``None``."""

    family: str
    library: str | None = None
    op: str | None = None
    tile: str | None = None
    dtype: str | None = None
    arch: str | None = None
    layout: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_DTYPES = {
    "bf16": "bf16", "bfloat16": "bf16", "f16": "fp16", "fp16": "fp16", "half": "fp16", "h": "fp16",
    "s": "fp32", "f32": "fp32", "fp32": "fp32", "float": "fp32", "tf32": "tf32", "d": "fp64",
    "f64": "fp64", "double": "fp64", "e4m3": "fp8", "e5m2": "fp8", "fp8": "fp8", "f8": "fp8",
    "i8": "int8", "int8": "int8", "int8_t": "int8", "s8": "int8", "i32": "int32", "int32": "int32",
    "int": "int32", "uint8": "uint8", "u8": "uint8", "i": "int8", "c": "complex64", "z": "complex128",
}
_ARCH = {"maxwell": "sm50", "pascal": "sm60", "volta": "sm70", "turing": "sm75", "ampere": "sm80",
         "ada": "sm89", "hopper": "sm90", "blackwell": "sm100"}


def _dtype(token: str | None) -> str | None:
    return _DTYPES.get(token.lower()) if token else None


def _tile(text: str) -> str | None:
    match = re.search(r"(?<![0-9])(\d{1,4}x\d{1,4}(?:x\d{1,4})?)(?![0-9])", text)
    return match.group(1) if match else None


def _layout(text: str) -> str | None:
    match = re.search(r"_(nn|nt|tn|tt|NN|NT|TN|TT|[NT]{3})(?:_|$|\b)", text)
    return match.group(1).lower() if match else None


def _cublas(m: re.Match[str]) -> KernelInfo:
    body = m.group(0)
    arch = m.group("arch").lower()
    # ampere_bf16_s16816gemm_bf16_... : the explicit dtype, else the letter before the MMA shape
    dt = m.group("dt1") or m.group("dt2")
    return KernelInfo("cublas_gemm", "cuBLAS", "gemm", _tile(body.split("gemm", 1)[1]), _dtype(dt),
                      _ARCH.get(arch, arch), _layout(body))


def _xmma(m: re.Match[str]) -> KernelInfo:
    body = m.group(0)
    tile = re.search(r"tilesize(\d+x\d+(?:x\d+)?)", body)
    dt = re.search(r"gemm_([a-z0-9]+?)(?:bf16|f16|f32|e4m3|e5m2)?_", body)
    return KernelInfo("cublas_gemm", "cuBLAS", "gemm", tile.group(1) if tile else _tile(body),
                      _dtype(dt.group(1)) if dt else None, f"sm{m.group('sm')}", _layout(body))


def _cutlass(m: re.Match[str]) -> KernelInfo:
    body = m.group(0)
    dt = m.group("dt1") or m.group("dt2")
    stages = re.search(r"_\d+x\d+_(\d+)x(\d+)_", body)
    extra = {"k_tile": stages.group(1), "stages": stages.group(2)} if stages else {}
    return KernelInfo("cutlass_gemm", "CUTLASS", "gemm", _tile(body.split("gemm", 1)[-1]), _dtype(dt),
                      f"sm{m.group('sm')}", _layout(body), {"opclass": m.group("opclass"), **extra})


def _nvjet(m: re.Match[str]) -> KernelInfo:
    layout = re.search(r"_([NT]{2,3})$", m.group(0))
    stages = re.search(r"nvjet_\w+?_\d+x\d+_(\d+)x(\d+)", m.group(0))
    extra = {"variant": m.group("variant")}
    if stages:
        extra.update(k_tile=stages.group(1), stages=stages.group(2))
    return KernelInfo("nvjet_gemm", "cuBLAS", "gemm", m.group("tile"), None, "sm90+",
                      layout.group(1).lower() if layout else None, extra)


def _cudnn(m: re.Match[str]) -> KernelInfo:
    body = m.group(0)
    arch = m.group("arch").lower()
    return KernelInfo("cudnn", "cuDNN", "conv", _tile(body), _dtype(m.group("dt")), _ARCH.get(arch, arch),
                      _layout(body), {"phase": m.group("phase")})


def _flash(m: re.Match[str]) -> KernelInfo:
    body = m.string
    direction = "bwd" if re.search(r"bwd|backward", body, re.I) else "fwd"
    extra = {"direction": direction}
    if re.search(r"split_?kv", body, re.I):
        extra["variant"] = "splitkv"
    version = re.search(r"flash_?attn_?(\d)|fa(\d)\b|flash(\d)", body, re.I)
    if version:
        extra["version"] = next(g for g in version.groups() if g)
    dt = re.search(r"cutlass::(bfloat16_t|half_t)|\b(bf16|fp16|e4m3)\b", body)
    dtype = ("bf16" if "bfloat16" in dt.group(0) or dt.group(0) == "bf16" else
             _dtype(dt.group(0).replace("cutlass::half_t", "fp16"))) if dt else None
    sm = re.search(r"[Ss]m(\d{2,3})", body)
    return KernelInfo("flash_attention", "FlashAttention", "attention", None, dtype,
                      f"sm{sm.group(1)}" if sm else None, None, extra)


def _flashinfer(m: re.Match[str]) -> KernelInfo:
    return KernelInfo("flashinfer", "FlashInfer", "attention", None, None, None, None,
                      {"kind": m.group("kind").lower()})


def _fmha(m: re.Match[str]) -> KernelInfo:
    body = m.string
    sm = re.search(r"[Ss]m(\d{2,3})", body)
    dt = re.search(r"(bf16|fp16|f16|e4m3|fp32|f32)", body, re.I)
    direction = "bwd" if re.search(r"bwd|backward|dgrad", body, re.I) else "fwd"
    return KernelInfo("fmha", None, "attention", _tile(body), _dtype(dt.group(1)) if dt else None,
                      f"sm{sm.group(1)}" if sm else None, None, {"direction": direction})


_TRITON_KINDS = {"poi": "pointwise", "red": "reduction", "per": "persistent_reduction",
                 "tem": "template", "unk": "unknown", "for": "foreach"}


def _triton(m: re.Match[str]) -> KernelInfo:
    ops = m.group("ops") or ""
    return KernelInfo("triton", "Triton", ops or None, None, None, None, None,
                      {"kind": _TRITON_KINDS.get(m.group("kind"), m.group("kind")),
                       "fused": "yes" if m.group("fused") else "no"})


def _nccl(m: re.Match[str]) -> KernelInfo:
    parts = [p for p in re.split(r"_", m.group("rest")) if p]
    algo = next((p for p in parts if p.upper() in ("RING", "TREE", "NVLS", "NVLSTREE", "COLLNET",
                                                     "COLLNETDIRECT", "COLLNETCHAIN", "PAT")), None)
    proto = next((p for p in parts if p.upper() in ("LL", "LL128", "SIMPLE")), None)
    redop = next((p for p in parts if p in ("Sum", "Prod", "Max", "Min", "Avg", "PreMulSum",
                                            "SumPostDiv")), None)
    dtype = next((_dtype(p) for p in parts if _dtype(p)), None)
    extra = {k: v for k, v in (("algo", algo), ("protocol", proto), ("redop", redop)) if v}
    return KernelInfo("nccl", "NCCL", m.group("coll"), None, dtype, None, None, extra)


def _aten(m: re.Match[str]) -> KernelInfo:
    rest = m.group("rest") or ""
    functor = re.search(r"(CUDAFunctor_\w+|\w+Functor|\w+_kernel(?:_cuda)?|\w+Kernel\w*)", rest)
    dt = re.search(r"\b(float|half|bfloat16|double)\b", rest)
    return KernelInfo("aten", "PyTorch", functor.group(1) if functor else m.group("kernel"), None,
                      _dtype(dt.group(1)) if dt else None, None, None, {"kernel": m.group("kernel")})


#: (regex, decoder) in order; the first match wins.
KERNEL_FAMILIES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], KernelInfo]]] = [
    (re.compile(r"nccl(?:Dev)?Kernel_(?P<coll>[A-Za-z]+)(?P<rest>[\w]*)"), _nccl),
    (re.compile(r"triton_(?P<kind>poi|red|per|tem|unk|for)_(?P<fused>fused_)?(?P<ops>[a-zA-Z0-9_]*?)(?:_\d+)?$"),
     _triton),
    (re.compile(r"flash_?(?:fwd|bwd|attn)|flash::|FlashAttn|flash_attention", re.I), _flash),
    (re.compile(r"Batch(?P<kind>Prefill|Decode)With"), _flashinfer),
    (re.compile(r"fmha", re.I), _fmha),
    (re.compile(r"nvjet_(?P<variant>[a-z]+)_(?P<tile>\d+x\d+)\w*"), _nvjet),
    (re.compile(r"sm(?P<sm>\d{2,3})_xmma_gemm\w*"), _xmma),
    (re.compile(r"cutlass_(?P<sm>\d{2,3})_(?P<opclass>tensorop|simt|wmma)_(?:(?P<dt1>[a-z0-9]+)_)?"
                r"(?P<dt2>[a-z]+?)?\d*gemm\w*"), _cutlass),
    (re.compile(r"(?P<arch>maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell)_(?:(?P<dt1>bf16|fp16|"
                r"f16|fp32|tf32|i8|int8|e4m3)_)?(?P<dt2>[a-z]+?)?\d*gemm\w*"), _cublas),
    (re.compile(r"cudnn_(?P<phase>infer|train)_(?P<arch>maxwell|pascal|volta|turing|ampere|hopper)_"
                r"(?P<dt>[a-z])?cudnn\w*"), _cudnn),
    (re.compile(r"at::native::(?:\(anonymous namespace\)::)?(?P<kernel>\w+)(?:<(?P<rest>.*))?"), _aten),
]


def decode_kernel(name: str) -> KernelInfo:
    """Decode a kernel name; unknown names give ``KernelInfo("unknown")`` with the category."""
    for pattern, decode in KERNEL_FAMILIES:
        match = pattern.search(name)
        if match:
            return decode(match)
    return KernelInfo("unknown", extra={"category": classify(name)})
