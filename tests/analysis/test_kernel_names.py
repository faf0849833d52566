"""Kernel-name decoding and the name → category classifier (layerscope/analysis/kernel_names.py)."""

from __future__ import annotations

import pytest

from layerscope.analysis.kernel_names import CATEGORIES, classify, decode_kernel

CASES = [
    # (name, family, op, tile, dtype, arch, layout, extra ⊇)
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "cublas_gemm", "gemm", "128x128", "bf16",
     "sm80", "tn", {}),
    ("ampere_sgemm_128x64_nn", "cublas_gemm", "gemm", "128x64", "fp32", "sm80", "nn", {}),
    ("volta_h884gemm_64x64_ldg8_nn", "cublas_gemm", "gemm", "64x64", "fp16", "sm70", "nn", {}),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", "cublas_gemm", "gemm", "128x128x64", "bf16", "sm90", "tn", {}),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nt_align1>(cutlass_80_tensorop_s1688gemm_"
     "128x128_16x4_nt_align1::Params)", "cutlass_gemm", "gemm", "128x128", "fp32", "sm80", "nt",
     {"k_tile": "16", "stages": "4", "opclass": "tensorop"}),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x256_64x3_tn_align8", "cutlass_gemm", "gemm", "128x256",
     "bf16", "sm80", "tn", {"stages": "3"}),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "nvjet_gemm", "gemm", "128x256", None, "sm90+", "tnt",
     {"variant": "tst", "k_tile": "64", "stages": "4"}),
    ("flash_fwd_kernel", "flash_attention", "attention", None, None, None, None, {"direction": "fwd"}),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true>"
     "(Flash_fwd_params)", "flash_attention", "attention", None, "bf16", None, None,
     {"direction": "fwd", "variant": "splitkv"}),
    ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "flash_attention", "attention", None, None, None, None,
     {"direction": "bwd"}),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "fmha", "attention", "64x64", "bf16", "sm80", None,
     {"direction": "fwd"}),
    ("BatchDecodeWithPagedKVCacheKernel", "flashinfer", "attention", None, None, None, None, {"kind": "decode"}),
    ("triton_poi_fused_add_cos_sin_0", "triton", "add_cos_sin", None, None, None, None,
     {"kind": "pointwise", "fused": "yes"}),
    ("triton_red_fused__to_copy_mean_pow_1", "triton", "_to_copy_mean_pow", None, None, None, None,
     {"kind": "reduction"}),
    ("triton_per_fused_native_layer_norm_2", "triton", "native_layer_norm", None, None, None, None,
     {"kind": "persistent_reduction"}),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "nccl", "AllReduce", None, "bf16", None, None,
     {"algo": "RING", "protocol": "LL", "redop": "Sum"}),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "nccl", "SendRecv", None, "int8", None, None,
     {"protocol": "SIMPLE"}),
    ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "cudnn", "conv", "128x64", "fp32", "sm70", "nn",
     {"phase": "infer"}),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array"
     "<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", "aten",
     "CUDAFunctor_add", None, "fp32", None, None, {"kernel": "vectorized_elementwise_kernel"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0][:40] for c in CASES])
def test_decode_families(case: tuple) -> None:  # type: ignore[type-arg]
    name, family, op, tile, dtype, arch, layout, extra = case
    info = decode_kernel(name)
    assert (info.family, info.op, info.tile, info.dtype, info.arch, info.layout) == (
        family, op, tile, dtype, arch, layout)
    assert extra.items() <= info.extra.items()


@pytest.mark.parametrize(("name", "category"), [
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm"),
    ("aten::mm", "gemm"),
    ("flash_fwd_kernel", "attention"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "attention"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>", "norm"),
    ("triton_per_fused_native_layer_norm_2", "norm"),
    ("rms_norm_kernel", "norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise"),
    ("triton_poi_fused_mul_0", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda>", "activation"),
    ("act_and_mul_kernel<silu>", "activation"),
    ("Memcpy HtoD (Pageable -> Device)", "memory"),
    ("Memset (Device)", "memory"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>", "concat"),
    ("some_custom_kernel", "other"),
    ("", "other"),
])
def test_classify(name: str, category: str) -> None:
    assert classify(name) == category
    assert category in CATEGORIES


def test_unknown_kernel() -> None:
    info = decode_kernel("my_kernel")
    assert info.family == "unknown" and info.extra == {"category": "other"}
    assert info.as_dict()["family"] == "unknown"
