"""Regenerate the golden simulated traces: ``python -m layerscope.app.golden [OUT_DIR]``.

A tiny Llama (2 layers, hidden 64; the config is spelled out here so the golden files change only
when the simulation or the writers do) decoding one token against 64 cached tokens, layer 0 with
unfused attention, on the ``h100-sxm`` datasheet preset (``presets/base``, its hand-set efficiencies, no
K-loop floor)
split into 2 engines with the ``list`` policy and shared bandwidth. Writes ``tiny_layer_trace.json``
and ``tiny_layer_trace.pftrace`` to OUT_DIR (default ``tests/data/golden``). The test suite regenerates
them in a temporary directory and compares bytes, so any drift fails CI until this is re-run
(``make golden``) and reviewed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from layerscope.hardware.spec import HardwareSpec

__all__ = ["GOLDEN_CONFIG", "GOLDEN_NAMES", "golden_hardware", "write_golden"]

GOLDEN_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
GOLDEN_NAMES = ("tiny_layer_trace.json", "tiny_layer_trace.pftrace")


def golden_hardware() -> HardwareSpec:
    """The datasheet h100-sxm preset with its hand-set efficiencies: the golden pins the schedule and the trace
    format, with numbers computed by hand (tests/app/test_golden.py), not the table fit, which moves with the
    table, nor the K-loop floor measured on our own GPU runs (``efficiency.gemm_k_loop_s``), which moves with
    them: every op of the tiny layer stays memory-bound."""
    from layerscope.hardware.presets import load_base_preset

    base = load_base_preset("h100-sxm")
    return base.model_copy(update={"efficiency": base.efficiency.model_copy(update={"gemm_k_loop_s": {}})})


def write_golden(out_dir: str | Path) -> list[Path]:
    """Simulate the golden case and write both trace formats into ``out_dir``."""
    from layerscope.app.requests import WorkloadRequest
    from layerscope.app.simulate import SimulateRequest, run_simulation
    from layerscope.model import model_spec_from_dict

    spec = model_spec_from_dict(dict(GOLDEN_CONFIG), "tiny-llama")
    hardware = golden_hardware()
    paths = []
    for name in GOLDEN_NAMES:
        run = run_simulation(SimulateRequest(
            model=spec, hardware=hardware, engines=2, policy="list", layer=0, attention="unfused",
            workload=WorkloadRequest(phase="decode", context=64), out=Path(out_dir) / name))
        assert run.trace_path is not None
        paths.append(run.trace_path)
    return paths


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for path in write_golden(args[0] if args else "tests/data/golden"):
        sys.stdout.write(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
