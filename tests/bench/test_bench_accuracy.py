"""bench/bench_accuracy.py's file handling: a run replaces its own device's region of ACCURACY.md and
nothing else (the hand-written analysis around it survives)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_accuracy", BENCH / "bench_accuracy.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_accuracy"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))
        sys.modules.pop("bench_accuracy", None)


def region(bench: ModuleType, device: str, body: str) -> str:
    begin, end = bench.MARKERS[device]
    return f"{begin}\n{body}\n{end}\n"


def test_each_device_replaces_only_its_own_region(bench: ModuleType) -> None:
    old = ("# title\n\nintro\n\n" + region(bench, "cpu", "old cpu table") + "\n## cpu analysis\n\nkept\n\n"
           "## On a GPU\n\n" + region(bench, "cuda", "old gpu table") + "\ngpu notes\n")
    after_gpu = bench.replace_region(old, region(bench, "cuda", "new gpu table"), "cuda")
    assert "new gpu table" in after_gpu and "old gpu table" not in after_gpu
    assert "old cpu table" in after_gpu and "kept" in after_gpu and after_gpu.endswith("gpu notes\n")
    after_cpu = bench.replace_region(after_gpu, region(bench, "cpu", "new cpu table"), "cpu")
    assert after_cpu == after_gpu.replace("old cpu table", "new cpu table")


def test_a_file_without_the_region_gets_it_appended(bench: ModuleType) -> None:
    old = "# title\n\n" + region(bench, "cpu", "cpu table") + "\n## analysis\n"
    new = bench.replace_region(old, region(bench, "cuda", "gpu table"), "cuda")
    assert new.startswith(old.rstrip("\n")) and new.index("## On a GPU") < new.index("gpu table")
    assert bench.replace_region(None, region(bench, "cpu", "t"), "cpu").count(bench.MARKERS["cpu"][0]) == 1


def test_the_repository_file_has_both_regions(bench: ModuleType) -> None:
    text = (BENCH / "ACCURACY.md").read_text()
    for begin, end in bench.MARKERS.values():
        assert text.count(begin) == 1 and text.count(end) == 1 and text.index(begin) < text.index(end)


def test_every_case_matrix_is_distinct_and_labelled(bench: ModuleType) -> None:
    for cases in bench.MATRICES.values():
        assert len({c.slug for c in cases}) == len(cases)
    assert all(c.layers is None for c in bench.CUDA_FULL) and "all layers" in bench.CUDA_FULL[0].label
