"""Errors of a capture, through the CLI: each one clear message and exit code 2."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from layerscope.errors import CaptureError
from layerscope.model import tiny_config


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """Run the ``layerscope`` console script in-process: (exit code, stdout, stderr)."""
    from layerscope.cli.app import main

    monkeypatch.setattr(sys, "argv", ["layerscope", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_unknown_model(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    code, _, err = run_cli(["capture", "--model", "llama-3.2-1c"], capsys, monkeypatch)
    assert code == 2
    assert "unknown model 'llama-3.2-1c'" in err and "did you mean 'llama-3.2-1b'" in err


def test_missing_path(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    code, _, err = run_cli(["capture", "--model", str(tmp_path / "nope" / "config.json")], capsys, monkeypatch)
    assert code == 2 and "does not exist" in err


def test_checkpoint_directory_without_config(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "model.safetensors").write_bytes(b"")
    code, _, err = run_cli(["capture", "--model", str(tmp_path)], capsys, monkeypatch)
    assert code == 2 and "has no config.json" in err


def test_unreadable_checkpoint(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                               tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "config.json").write_text(json.dumps(tiny_config("llama")))
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    code, _, err = run_cli(["capture", "--model", str(tmp_path), "--prompt-len", "4", "--out",
                            str(tmp_path / "t.json.gz")], capsys, monkeypatch)
    assert code == 2 and "cannot load the checkpoint" in err


def test_cuda_without_gpu(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = run_cli(["capture", "--model", "llama-3.2-1b", "--device", "cuda"], capsys, monkeypatch)
    assert code == 2 and "sees no CUDA GPU" in err and "--device cpu" in err


def test_model_too_big(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    code, _, err = run_cli(["capture", "--model", "meta-llama/Llama-3.1-405B"], capsys, monkeypatch)
    assert code == 2
    # 405.8e9 params x 2 bytes of bf16 = 811.7 GB of weights, whatever this machine has.
    assert "would not fit" in err and "weights 811.7 GB" in err and "try --layers 1" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", "0"], "layers: 0 is out of range; the model has 16 decoder layers"),
        (["--layers", "17"], "layers: 17 is out of range"),
        (["--dtype", "fp8"], "dtype: cannot capture in 'fp8'"),
        (["--dtype", "fp7"], "dtype: unknown dtype 'fp7'"),
        (["--cache", "paged"], "cache: unknown KV cache kind 'paged'"),
        (["--prompt-len", "0"], "prompt_len: 0 is out of range"),
        (["--device", "tpu"], "device: unknown device 'tpu'"),
    ],
)
def test_bad_arguments(args: list[str], message: str, capsys: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    code, _, err = run_cli(["capture", "--model", "llama-3.2-1b", *args], capsys, monkeypatch)
    assert code == 2 and message in err


def test_without_torch_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                           tiny_config_path: Callable[[str], Path]) -> None:
    from layerscope.capture import capture

    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(CaptureError, match=r"pip install 'layerscope\[capture\]' torch==2.13.0"):
        capture(tiny_config_path("llama"))


def test_learned_positions_bound_the_prompt(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                            tiny_config_path: Callable[[str], Path]) -> None:
    pytest.importorskip("torch")
    config = tiny_config_path("gpt2")  # 128 learned positions
    code, _, err = run_cli(["capture", "--model", str(config), "--prompt-len", "128", "--decode-steps", "1"],
                           capsys, monkeypatch)
    assert code == 2 and "prompt_len + decode_steps = 129 exceeds the 128 learned positions" in err


def test_missing_output_directory_fails_before_running(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from layerscope.capture import api

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model ran although the output directory is missing")

    monkeypatch.setattr(api, "run_profiled", never)
    code, _, err = run_cli(["capture", "--model", "gpt2", "--layers", "1", "--out",
                            str(tmp_path / "missing" / "t.json.gz")], capsys, monkeypatch)
    assert code == 2 and "output directory" in err and "does not exist" in err


def test_unprofiled_timing_is_cpu_only(tiny_config_path: Callable[[str], Path]) -> None:
    from layerscope.capture import capture

    with pytest.raises(CaptureError, match=r"unprofiled: .* needs device 'cpu', not 'cuda'"):
        capture(tiny_config_path("llama"), device="cuda", unprofiled=True)
