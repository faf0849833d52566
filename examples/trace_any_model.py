"""A plain transformers script, the kind ``LAYERSCOPE_TRACE=1`` records without any change to it.

It builds a decoder LM from a ``config.json`` with random weights (nothing is downloaded), keeps its
first ``--layers`` decoder layers, and generates ``--new-tokens`` tokens greedily after a random
prompt. The default config is the bundled Qwen3-0.6B one (``layerscope/model/catalog``); the script
only reads that file, it calls no layerscope code. Traced, as the README's tour runs it::

    LAYERSCOPE_TRACE=1 LAYERSCOPE_TRACE_DIR=records-script/ python examples/trace_any_model.py

writes the operator records of every module call (``definitions/``, ``workloads/``, ``calls.json``)
to ``records-script/`` when the interpreter exits. Untraced, it only prints what it generated.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
from pathlib import Path
from typing import Any

#: The bundled config the script runs by default, inside the installed package.
DEFAULT_CONFIG = ("model", "catalog", "Qwen--Qwen3-0.6B", "config.json")


def read_config(path: str | None) -> dict[str, Any]:
    """The HF config dict at ``path``, or the bundled default."""
    if path is not None:
        text = Path(path).read_text(encoding="utf-8")
    else:
        text = importlib.resources.files("layerscope").joinpath(*DEFAULT_CONFIG).read_text(encoding="utf-8")
    config = json.loads(text)
    if not isinstance(config, dict) or not config.get("model_type"):
        raise SystemExit(f"error: {path or 'the bundled config'}: not a config.json with a model_type")
    return config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="a config.json (default: the bundled Qwen3-0.6B config)")
    parser.add_argument("--layers", type=int, default=2, help="decoder layers kept (default 2)")
    parser.add_argument("--prompt-len", type=int, default=32, help="prompt tokens (default 32)")
    parser.add_argument("--new-tokens", type=int, default=4, help="tokens generated (default 4)")
    args = parser.parse_args(argv)

    import torch
    import transformers

    config = read_config(args.config)
    config["num_hidden_layers"] = args.layers
    model_type = config.pop("model_type")
    hf_config = transformers.AutoConfig.for_model(model_type, **config)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32).eval()
    prompt = torch.randint(hf_config.vocab_size, (1, args.prompt_len))
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False)
    print(f"{model_type}, {args.layers} layers, random weights: generated {out.shape[1] - args.prompt_len} tokens "
          f"after a {args.prompt_len}-token prompt: {out[0, args.prompt_len:].tolist()}")


if __name__ == "__main__":
    main()
