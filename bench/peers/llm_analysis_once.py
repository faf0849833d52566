"""One llm-analysis estimate in a fresh process: what ``layerscope estimate`` does as a whole process.

Run by bench/bench_cli_startup.py as ``bench/.peer-venv/bin/python llm_analysis_once.py ARCH.json``: import
llm-analysis, build the model config from the HF config's numbers (as llm_analysis_driver.py does) and an H100 SXM
(989 TFLOP/s bf16, 3.35 TB/s), run one ``LLMAnalysis.inference`` (decode at batch 1 with a 1024-token cache,
which also computes the prefill) and print its TTFT and TPOT.
"""

from __future__ import annotations

import json
import logging
import sys

from llm_analysis.analysis import LLMAnalysis
from llm_analysis.config import DtypeConfig, ParallelismConfig
from llm_analysis_driver import gpu_config, model_config


def main() -> None:
    logging.getLogger().setLevel(logging.ERROR)
    with open(sys.argv[1]) as fh:
        arch = json.load(fh)
    gpu = gpu_config({"bandwidth_bytes_per_s": 3.35e12, "flops_per_s": 989e12})
    r = LLMAnalysis(model_config(arch), gpu, DtypeConfig(), ParallelismConfig()).inference(
        batch_size_per_gpu=1, seq_len=1024, num_tokens_to_generate=1)
    print(f"ttft {r['prefill_latency']:.6g} s, tpot {r['decode_latency']:.6g} s")


if __name__ == "__main__":
    main()
