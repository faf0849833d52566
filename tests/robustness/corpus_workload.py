"""Workload arguments: sizes that overflow, vanish or exceed the model; splits that do not divide;
unknown phases, dtypes, policies and ranges."""

from __future__ import annotations

from .harness import Case
from .inputs import DIR

HUGE = "100000000000000000000000"
TP = "tp|tensor_parallel"


def est(case_id: str, *args: str, expect: tuple[str, ...]) -> Case:
    return Case(f"args-estimate-{case_id}", ("estimate", *args), {}, expect)


def sim(case_id: str, *args: str, expect: tuple[str, ...]) -> Case:
    return Case(f"args-simulate-{case_id}", ("simulate", *args), {}, expect)


def wl(case_id: str, *args: str, expect: tuple[str, ...]) -> Case:
    return Case(f"args-workloads-{case_id}", ("workloads", "--from-graph", "--model", "llama-3.2-1b", "--out", "wl",
                                              *args), {}, expect)


def cap(case_id: str, *args: str, expect: tuple[str, ...]) -> Case:
    """``capture`` of gpt2 with a bad argument: refused before torch loads anything."""
    return Case(f"args-capture-{case_id}", ("capture", "--model", "gpt2", "--layers", "1", "--random-weights",
                                            "--out", "t.json.gz", *args), {}, expect)


CASES: list[Case] = [
    # Positive controls.
    Case("args-ok-estimate-prefill", ("estimate", "--phase", "prefill", "--batch", "4", "--prompt-len", "128",
                                      "--json"),
         code=0, stdout_json=True),
    Case("args-ok-estimate-deprecated-spellings", ("estimate", "--phase", "generate", "--input", "64", "--output", "4",
                                                   "--cost", "tiling", "--json"),
         code=0, stdout_json=True, stderr_expect=("--input is deprecated", "--output is deprecated",
                                                  "--cost is deprecated")),
    Case("args-ok-simulate-range", ("simulate", "--engines", "1..2", "--json"), code=0, stdout_json=True),
    Case("args-ok-workloads-graph", ("workloads", "--from-graph", "--model", "llama-3.2-1b", "--layers", "1",
                                     "--out", "wl", "--json"), code=0, creates=("wl",), stdout_json=True),
    # estimate: sizes.
    est("batch-huge", "--batch", HUGE, expect=("batch",)),
    est("batch-2e63", "--batch", str(2**63), expect=("batch",)),
    est("batch-zero", "--batch", "0", expect=("batch",)),
    est("batch-negative", "--batch", "-1", expect=("batch",)),
    est("batch-word", "--batch", "many", expect=("--batch",)),
    est("batch-float", "--batch", "1.5", expect=("--batch",)),
    est("batch-missing-value", "--batch", expect=("--batch",)),
    *(Case(f"args-estimate-warns-{case_id}", ("estimate", *args), code=0, stderr_expect=("max_position_embeddings",))
      for case_id, args in (("input-beyond-max-positions", ("--phase", "prefill", "--prompt-len", "200000")),
                            ("generate-beyond-max-positions", ("--phase", "generate", "--prompt-len", "131000",
                                                               "--decode-steps", "999")),
                            ("context-beyond-max-positions", ("--context", "10000000")))),
    est("prompt-len-huge", "--phase", "prefill", "--prompt-len", HUGE, expect=("prompt_len",)),
    est("prompt-len-zero", "--phase", "prefill", "--prompt-len", "0", expect=("prompt_len",)),
    est("prompt-len-negative", "--phase", "prefill", "--prompt-len", "-512", expect=("prompt_len",)),
    est("decode-steps-negative", "--phase", "generate", "--decode-steps", "-1", expect=("decode_steps",)),
    est("output-zero-deprecated", "--phase", "generate", "--output", "0", expect=("--output",)),
    est("decode-steps-huge", "--phase", "generate", "--decode-steps", HUGE, expect=("decode_steps",)),
    est("both-spellings", "--prompt-len", "8", "--input", "8", expect=("--prompt-len",)),
    est("context-negative", "--context", "-1", expect=("context",)),
    est("chunk-zero", "--phase", "chunked", "--chunk", "0", expect=("chunk",)),
    est("chunk-negative", "--phase", "chunked", "--chunk", "-512", expect=("chunk",)),
    # estimate: parallelism, layers, names.
    est("tp-3-on-32-heads", "--tp", "3", expect=(TP,)),
    est("tp-zero", "--tp", "0", expect=(TP,)),
    est("tp-negative", "--tp", "-2", expect=(TP,)),
    est("tp-huge", "--tp", HUGE, expect=(TP,)),
    est("layer-out-of-range", "--layer", "16", expect=("layer",)),
    est("layer-negative", "--layer", "-1", expect=("layer",)),
    est("top-negative", "--top", "-3", expect=("top",)),
    est("phase-unknown", "--phase", "training", expect=("training",)),
    est("phase-empty", "--phase", "", expect=("phase",)),
    est("weight-dtype-unknown", "--weight-dtype", "fp7", expect=("fp7",)),
    est("act-dtype-unknown", "--act-dtype", "bf17", expect=("bf17",)),
    est("kv-dtype-unknown", "--kv-dtype", "int3", expect=("int3",)),
    est("cost-unknown", "--cost-model", "magic", expect=("magic",)),
    est("attention-unknown", "--attention", "sparse", expect=("sparse",)),
    # simulate.
    sim("engines-zero", "--engines", "0", expect=("engines",)),
    sim("engines-negative", "--engines", "-4", expect=("engines",)),
    sim("engines-empty-range", "--engines", "1..0", expect=("1..0",)),
    sim("engines-open-range", "--engines", "1..", expect=("engines",)),
    sim("engines-word", "--engines", "lots", expect=("lots",)),
    sim("engines-list-hole", "--engines", "1,,2", expect=("engines",)),
    sim("engines-huge", "--engines", HUGE, expect=("engines",)),
    sim("engines-range-huge", "--engines", f"1..{HUGE}", expect=("engines",)),
    sim("engines-above-limit", "--engines", "100000", expect=("engines",)),
    sim("engines-empty", "--engines", "", expect=("engines",)),
    sim("policy-unknown", "--policy", "random", expect=("random",)),
    sim("phase-unknown", "--phase", "generate", expect=("generate",)),
    sim("batch-zero", "--batch", "0", expect=("batch",)),
    sim("batch-huge", "--batch", HUGE, expect=("batch",)),
    sim("context-negative", "--context", "-1", expect=("context",)),
    sim("prompt-len-zero", "--phase", "prefill", "--prompt-len", "0", expect=("prompt_len",)),
    sim("chunk-zero", "--phase", "chunked", "--chunk", "0", expect=("chunk",)),
    sim("decode-steps-zero", "--decode-steps", "0", expect=("decode_steps",)),
    sim("decode-steps-negative", "--decode-steps", "-2", expect=("decode_steps",)),
    sim("layer-out-of-range", "--layer", "99", expect=("layer",)),
    sim("cost-unknown", "--cost-model", "magic", expect=("magic",)),
    sim("weight-dtype-unknown", "--weight-dtype", "fp7", expect=("fp7",)),
    sim("open-without-out", "--open", expect=("--out",)),
    # workloads --from-graph.
    wl("tp-3-on-32-heads", "--tp", "3", expect=(TP,)),
    wl("tp-zero", "--tp", "0", expect=(TP,)),
    wl("batch-zero", "--batch", "0", expect=("batch",)),
    wl("prompt-len-zero", "--prompt-len", "0", expect=("prompt-len",)),
    Case("args-workloads-warns-prompt-len-beyond-max", ("workloads", "--from-graph", "--model", "llama-3.2-1b",
                                                        "--layers", "1", "--prompt-len", "200000", "--out", "wl"),
         code=0, creates=("wl",), stderr_expect=("max_position_embeddings",)),
    wl("layers-zero", "--layers", "0", expect=("layers",)),
    wl("decode-steps-negative", "--decode-steps", "-1", expect=("decode-steps",)),
    wl("mla-form-unknown", "--mla-form", "folded", expect=("folded",)),
    wl("dtype-unknown", "--dtype", "fp7", expect=("fp7",)),
    # capture / validate / demo / calibrate / verify: refused before any model runs.
    cap("dtype-unknown", "--dtype", "fp7", expect=("fp7",)),
    cap("device-unknown", "--device", "tpu", expect=("tpu",)),
    cap("batch-zero", "--batch", "0", expect=("batch",)),
    cap("prompt-len-zero", "--prompt-len", "0", expect=("prompt-len",)),
    cap("prompt-len-beyond-max", "--prompt-len", "5000", expect=("position",)),
    cap("layers-zero", "--layers", "0", expect=("layers",)),
    cap("decode-steps-negative", "--decode-steps", "-1", expect=("decode-steps",)),
    cap("iterations-zero", "--iterations", "0", expect=("iterations",)),
    cap("cache-unknown", "--cache", "paged", expect=("paged",)),
    Case("args-validate-repeats-zero", ("validate", "--model", "gpt2", "--hardware", "h100-sxm", "--repeats", "0",
                                        "--out", "v"), {}, ("repeats",)),
    Case("args-validate-cost-model-unknown", ("validate", "--model", "gpt2", "--hardware", "h100-sxm",
                                              "--cost-model", "magic", "--out", "v"), {}, ("magic",)),
    Case("args-validate-dtype-unknown", ("validate", "--model", "gpt2", "--hardware", "h100-sxm", "--dtype", "fp7",
                                         "--out", "v"), {}, ("fp7",)),
    Case("args-demo-engines-zero", ("demo", "--engines", "0", "--hardware", "h100-sxm", "--out", "d"), {},
         ("engines",)),
    Case("args-demo-prompt-len-zero", ("demo", "--prompt-len", "0", "--hardware", "h100-sxm", "--out", "d"), {},
         ("prompt-len",)),
    Case("args-calibrate-device-unknown", ("calibrate", "--device", "tpu", "--out", "spec.yaml"), {}, ("tpu",)),
    Case("args-verify-missing-traces", ("verify", "--traces", "nothere", "--model", "llama-3.2-1b"), {},
         ("nothere",)),
    Case("args-verify-empty-traces", ("verify", "--traces", "recs", "--model", "llama-3.2-1b"), {"recs": DIR},
         ("recs",)),
    Case("args-verify-traces-is-file", ("verify", "--traces", "recs.json", "--model", "llama-3.2-1b"),
         {"recs.json": b"{}"}, ("recs.json",)),
]
