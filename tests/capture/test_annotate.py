"""Module op names and the profiler-range hooks of :mod:`layerscope.capture.annotate`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from layerscope.capture.annotate import module_op_name


@pytest.mark.parametrize(
    ("path", "root", "expected"),
    [
        ("model.layers.0.self_attn.q_proj", "model.", "layers.0.self_attn.q_proj"),
        ("model.layers.3.mlp.experts", "model.", "layers.3.mlp.experts"),
        ("model.embed_tokens", "model.", "embed_tokens"),
        ("model.norm", "model.", "norm"),
        ("lm_head", "model.", "lm_head"),
        ("model", "model.", ""),
        ("", "model.", ""),
        ("transformer.h.0.attn.c_attn", "transformer.", "h.0.attn.c_attn"),
        ("model.decoder.layers.1.fc1", "model.decoder.", "layers.1.fc1"),
        ("model.language_model.layers.0.mlp", "model.language_model.", "layers.0.mlp"),
        # Without a ModelSpec: the known base-model prefixes, the most specific first.
        ("model.layers.0.self_attn.q_proj", None, "layers.0.self_attn.q_proj"),
        ("transformer.h.0.mlp.c_fc", None, "h.0.mlp.c_fc"),
        ("model.decoder.layers.0.self_attn.k_proj", None, "layers.0.self_attn.k_proj"),
        ("model.language_model.layers.2.self_attn", None, "layers.2.self_attn"),
        ("lm_head", None, "lm_head"),
        ("transformer", None, ""),
        ("model", None, ""),
    ],
)
def test_module_op_name(path: str, root: str | None, expected: str) -> None:
    assert module_op_name(path, root) == expected


def test_spec_root_is_not_guessed_past() -> None:
    # With a root, only that root is stripped: a Llama-4 style root leaves other prefixes alone.
    assert module_op_name("language_model.model.layers.0.feed_forward", "language_model.model.") == (
        "layers.0.feed_forward"
    )
    assert module_op_name("transformer.h.0", "model.") == "transformer.h.0"


def test_importing_capture_does_not_import_torch() -> None:
    code = (
        "import sys, layerscope.capture, layerscope.cli.capture; "
        "sys.exit(1 if 'torch' in sys.modules or 'transformers' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


class _Block:
    """Namespace for a tiny torch model built inside the tests (torch imported lazily)."""

    @staticmethod
    def make() -> object:
        torch = pytest.importorskip("torch")

        class Inner(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.q_proj = torch.nn.Linear(8, 4)
                self.act = torch.nn.GELU()

            def forward(self, x: object) -> object:
                return self.act(self.q_proj(x))

        class Outer(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = torch.nn.Module()
                self.model.layers = torch.nn.ModuleList([Inner(), Inner()])
                self.lm_head = torch.nn.Linear(4, 3)

            def forward(self, x: object, fail: bool = False) -> object:
                h = self.model.layers[0](x)
                if fail:
                    raise RuntimeError("boom")
                h = self.model.layers[1](torch.nn.functional.pad(h, (0, 4)))
                return self.lm_head(h)

        torch.manual_seed(0)
        return Outer().eval()


def _range_names(prof: object) -> list[str]:
    return [e.name for e in prof.events() if e.name.startswith(("layers", "lm_head"))]  # type: ignore[attr-defined]


def test_annotator_names_nesting_shapes_and_numerics() -> None:
    torch = pytest.importorskip("torch")
    from layerscope.capture.annotate import ModuleAnnotator

    model = _Block.make()
    x = torch.randn(2, 5, 8)
    expected = model(x)  # type: ignore[operator]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, \
            ModuleAnnotator(model, "model.") as ann:
        got = model(x)  # type: ignore[operator]
    assert torch.equal(got, expected)  # hooks never change numerics
    assert ann.names == ["layers.0", "layers.0.q_proj", "layers.0.act", "layers.1", "layers.1.q_proj",
                         "layers.1.act", "lm_head"]
    names = _range_names(prof)
    assert sorted(names) == sorted(ann.names)
    events = {e.name: e for e in prof.events()}
    outer, inner = events["layers.0"].time_range, events["layers.0.q_proj"].time_range
    assert outer.start <= inner.start and inner.end <= outer.end  # ranges nest like the calls
    rec = ann.calls[("prefill", "layers.0.q_proj")]
    assert (rec.calls, rec.input_shapes, rec.output_shapes) == (1, [(2, 5, 8)], [(2, 5, 4)])
    assert ann.calls[("prefill", "lm_head")].output_shapes == [(2, 5, 3)]
    # Hooks are gone after the context: the same call records nothing more.
    model(x)  # type: ignore[operator]
    assert ann.calls[("prefill", "layers.0.q_proj")].calls == 1
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())  # type: ignore[attr-defined]


def test_annotator_closes_ranges_after_an_exception() -> None:
    torch = pytest.importorskip("torch")
    from layerscope.capture.annotate import ModuleAnnotator

    model = _Block.make()
    x = torch.randn(1, 3, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with pytest.raises(RuntimeError, match="boom"), ModuleAnnotator(model, "model.") as ann:
            model(x, fail=True)  # type: ignore[operator]
        assert not ann._stack
    assert "layers.0" in _range_names(prof)
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())  # type: ignore[attr-defined]


def test_annotator_keys_shapes_by_phase() -> None:
    torch = pytest.importorskip("torch")
    from layerscope.capture.annotate import ModuleAnnotator

    model = _Block.make()
    with ModuleAnnotator(model, "model.") as ann:
        model(torch.randn(1, 6, 8))  # type: ignore[operator]
        ann.phase = "decode"
        model(torch.randn(1, 1, 8))  # type: ignore[operator]
        model(torch.randn(1, 1, 8))  # type: ignore[operator]
    assert ann.calls[("prefill", "lm_head")].input_shapes == [(1, 6, 4)]
    decode = ann.calls[("decode", "lm_head")]
    assert (decode.calls, decode.input_shapes) == (2, [(1, 1, 4)])
