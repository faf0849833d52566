"""Bundled presets: each loads, its peaks equal the datasheet numbers, every figure is cited."""

from __future__ import annotations

import math

import pytest

from layerscope.errors import HardwareSpecError
from layerscope.hardware import HardwareSpec, dump_hardware_yaml, list_presets, load_hardware
from layerscope.hardware.loaders import dump_hardware_json
from layerscope.hardware.presets import bundled_spreadsheet_example, preset_names
from layerscope.units import DType

# Hand-copied from /work/shared/data/hardware-specs.md (dense figures; B/s; bytes).
# name: (bf16 FLOP/s, main-memory B/s, main-memory bytes, engines, FP32 non-tensor FLOP/s)
DATASHEET = {
    "a100-sxm": (312e12, 2039e9, 80e9, 108, 19.5e12),
    "a100-pcie": (312e12, 1935e9, 80e9, 108, 19.5e12),
    "h100-sxm": (989e12, 3350e9, 80e9, 132, 67e12),
    "h100-pcie": (756e12, 2000e9, 80e9, 114, 51e12),
    "h200": (989e12, 4800e9, 141e9, 132, 67e12),
    "gh200": (989e12, 4800e9, 141e9, 132, 67e12),
    "b200": (2250e12, 7.7e12, 180e9, 148, 75e12),
    "l40s": (362e12, 864e9, 48e9, 142, 91.6e12),
    "rtx-4090": (165.2e12, 1008e9, 24e9, 128, 82.6e12),
    "mi300x": (1307.4e12, 5.3e12, 192e9, 304, 163.4e12),
    "tpu-v5e": (197e12, 819e9, 16e9, 1, None),
    "server-cpu": (96 * 2.4e9 * 2 * 32, 460.8e9, None, 96, 96 * 2.4e9 * 2 * 16),
    # Spreadsheet accelerators (../shared/data/seed-hardware-sheet.csv, base units, binary prefixes):
    # peak = cores * clock * 2 * MACs/cycle/core; JGS's MACs are fp32, so bf16 runs at that rate.
    "nvl-ax": (32 * 2.5e9 * 2048 * 2, 342 * 2**30, math.inf, 32, None),
    "jgs": (192 * 1.5e9 * 8192 * 2, 30 * 2**40, math.inf, 192, None),
}

FP8 = {"h100-sxm": 1979e12, "h100-pcie": 1513e12, "h200": 1979e12, "b200": 4500e12, "l40s": 733e12,
       "rtx-4090": 330.3e12, "mi300x": 2614.9e12}
TF32 = {"a100-sxm": 156e12, "h100-sxm": 494.5e12, "h100-pcie": 378e12, "b200": 1125e12, "l40s": 183e12,
        "rtx-4090": 82.6e12, "mi300x": 653.7e12}


def test_every_preset_is_listed_with_a_one_line_description() -> None:
    presets = list_presets()
    assert sorted(presets) == sorted(DATASHEET)
    assert preset_names() == sorted(DATASHEET)
    for name, description in presets.items():
        assert description and "\n" not in description, name


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_preset_peaks_equal_the_datasheet(name: str) -> None:
    spec = load_hardware(name)
    bf16, bandwidth, capacity, engines, vector = DATASHEET[name]
    assert spec.peak_flops(DType.BF16) == pytest.approx(bf16, rel=1e-12)
    assert spec.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth, rel=1e-12)
    if capacity is not None:
        assert spec.memory_capacity_bytes == pytest.approx(capacity, rel=1e-12)
    assert spec.engines.count == engines
    if vector is not None:
        assert spec.engines.vector_flops_per_s == pytest.approx(vector, rel=1e-12)
    if name in FP8:
        assert spec.engines.peak_flops_per_s[DType.FP8] == pytest.approx(FP8[name], rel=1e-12)
    if name in TF32:
        assert spec.engines.tf32_flops_per_s == pytest.approx(TF32[name], rel=1e-12)


def test_nvl_ax_and_jgs_peaks_follow_from_macs() -> None:
    nvl = load_hardware("NVL-AX")
    assert nvl.engines.peak_flops_per_s == {DType.FP16: pytest.approx(327.68e12, rel=1e-12)}
    assert nvl.peak_flops(DType.BF16) == pytest.approx(327.68e12, rel=1e-12)  # bf16 shares fp16
    assert nvl.level("l3").capacity_bytes == 36 * 2**20
    jgs = load_hardware("jgs")
    assert jgs.engines.macs_per_cycle == {DType.FP32: 8192}  # the design notebook: JGS MACs are fp32
    assert jgs.engines.peak_flops_per_s == {DType.FP32: pytest.approx(192 * 1.5e9 * 8192 * 2, rel=1e-12)}
    assert jgs.resolve_flops(DType.FP16).dtype == DType.FP32  # 16-bit work runs on the fp32 MACs
    assert jgs.level("l3").capacity_bytes == 120 * 2**20
    assert jgs.memory_bandwidth_bytes_per_s == 30 * 2**40


def test_sparse_figures_are_not_used() -> None:
    assert load_hardware("h100-sxm").peak_flops(DType.BF16) != 1979e12
    assert load_hardware("b200").peak_flops(DType.FP4) == 9000e12


def _base(name: str) -> HardwareSpec:
    """A GPU preset's hand-written base file (datasheet facts and hand-set efficiencies citing calibration.md; the
    shipped GPU presets are the table fit of these: tests/hardware/test_presets_fitted.py), else the preset."""
    from layerscope.hardware.presets import load_base_preset

    return load_base_preset(name)


@pytest.mark.parametrize("name, matmul, row", [
    ("h100-sxm", 0.803, "G-15"), ("a100-sxm", 0.869, "G-14"), ("mi300x", 0.514, "G-17"),
    ("gh200", 0.836, "G-16"),
])
def test_gpu_base_efficiencies_cite_their_calibration_rows(name: str, matmul: float, row: str) -> None:
    spec = _base(name)
    assert spec.efficiency.matmul == matmul
    assert row in spec.efficiency.matmul_source
    assert spec.efficiency.memory == 0.834
    assert "G-29" in spec.efficiency.memory_source


def test_fp8_efficiency_overrides_cite_rows() -> None:
    h100 = _base("h100-sxm")
    assert h100.efficiency.matmul_for(DType.FP8) == 0.709
    assert "G-19" in h100.efficiency.matmul_per_dtype_source
    assert _base("gh200").efficiency.matmul_for(DType.FP8) == 0.776


def test_assumed_efficiencies_say_so() -> None:
    for name in ("h200", "b200", "l40s", "rtx-4090", "mi300x", "tpu-v5e", "server-cpu", "a100-pcie"):
        assert "assumption" in _base(name).efficiency.memory_source, name
    assert "assumption" in _base("gh200").sources["memory.hbm.bandwidth_bytes_per_s"]


def _figure_paths(spec: HardwareSpec) -> list[str]:
    paths = ["engines.count", "engines.clock_hz", "engines.vector_flops_per_s", "launch_overhead_s"]
    paths += [f"engines.peak_flops_per_s.{d.value}" for d in spec.engines.peak_flops_per_s]
    paths += [f"engines.macs_per_cycle.{d.value}" for d in spec.engines.macs_per_cycle]
    if spec.engines.tf32_flops_per_s is not None:
        paths.append("engines.tf32_flops_per_s")
    for level in spec.memory:
        paths.append(f"memory.{level.name}.capacity_bytes")
        if level.bandwidth_bytes_per_s is not None:
            paths.append(f"memory.{level.name}.bandwidth_bytes_per_s")
    if spec.interconnect is not None:
        paths += ["interconnect.bandwidth_bytes_per_s", "interconnect.latency_s"]
    return paths


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_every_figure_has_a_source(name: str) -> None:
    spec = load_hardware(name)
    missing = [p for p in _figure_paths(spec) if not spec.sources.get(p)]
    assert not missing, f"{name}: figures without a source: {missing}"
    for field in ("matmul_source", "vector_source", "memory_source"):
        assert getattr(spec.efficiency, field), (name, field)


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_yaml_and_json_round_trip(name: str, tmp_path) -> None:
    spec = load_hardware(name)
    (tmp_path / "spec.yaml").write_text(dump_hardware_yaml(spec), encoding="utf-8")
    (tmp_path / "spec.json").write_text(dump_hardware_json(spec), encoding="utf-8")
    assert load_hardware(tmp_path / "spec.yaml") == spec
    assert load_hardware(tmp_path / "spec.json") == spec


@pytest.mark.parametrize("alias", ["h100-sxm", "H100_SXM", "h100 sxm", "H100SXM"])
def test_preset_names_are_case_and_dash_insensitive(alias: str) -> None:
    assert load_hardware(alias).name == "h100-sxm"


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(HardwareSpecError, match=r"unknown hardware 'h900'.*h100-sxm"):
        load_hardware("h900")


def test_bundled_spreadsheet_is_shipped_next_to_the_presets() -> None:
    path = bundled_spreadsheet_example()
    assert path.name == "accelerators.csv" and path.is_file()
    assert load_hardware(path, device="JGS") == load_hardware("jgs")


def test_every_gpu_base_preset_cites_calibration_md_for_its_efficiencies() -> None:
    from layerscope.hardware import preset_names

    gpus = [spec for spec in map(_base, preset_names()) if spec.kind == "gpu"]
    assert len(gpus) >= 10
    for spec in gpus:
        eff = spec.efficiency
        for source in (eff.matmul_source, eff.vector_source, eff.memory_source):
            assert "calibration.md" in source, (spec.name, source)
        if eff.matmul_per_dtype:
            assert "calibration.md" in eff.matmul_per_dtype_source, spec.name


def test_compiled_presets_are_up_to_date() -> None:
    from layerscope.hardware.presets import COMPILED, compiled_text

    assert COMPILED.read_text(encoding="utf-8") == compiled_text(), "run `make presets`"


@pytest.mark.parametrize("name", [n for n in preset_names() if n not in ("nvl-ax", "jgs")])
def test_a_compiled_preset_is_the_spec_its_yaml_gives(name: str) -> None:
    from layerscope.hardware.loaders import load_hardware_file
    from layerscope.hardware.presets import PRESET_DIR

    assert load_hardware(name) == load_hardware_file(PRESET_DIR / f"{name}.yaml")


def same_objects(a: object, b: object, where: str = "spec") -> None:
    """``a`` and ``b`` are the same objects, type for type (a dtype key is a DType, not its string), in the same
    order, and every model has the same fields set: stricter than ``==``."""
    from pydantic import BaseModel

    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, BaseModel):
        assert isinstance(b, BaseModel)
        assert list(a.__dict__) == list(b.__dict__), where
        assert a.model_fields_set == b.model_fields_set, where
        assert (a.__pydantic_extra__, a.__pydantic_private__) == (b.__pydantic_extra__, b.__pydantic_private__), where
        for name in a.__dict__:
            same_objects(a.__dict__[name], b.__dict__[name], f"{where}.{name}")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
            same_objects(ka, kb, f"{where}[{ka!r}]")
            same_objects(va, vb, f"{where}[{ka!r}]")
    elif isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same_objects(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} vs {b!r}"


COMPILED_NAMES = [n for n in preset_names() if n not in ("nvl-ax", "jgs")]


@pytest.mark.parametrize("name", COMPILED_NAMES)
def test_a_compiled_spec_is_the_validated_spec_object_for_object(name: str) -> None:
    """The spec rebuilt without validation is the one the validators give, from the mapping the earlier format of
    compiled.json held (the YAML's, keys sorted)."""
    import json

    from layerscope.hardware.loaders import MAPPING_READERS, spec_from_mapping
    from layerscope.hardware.presets import PRESET_DIR, _compiled, spec_sources_crc

    path = PRESET_DIR / f"{name}.yaml"
    assert "spec" in _compiled()["files"][path.name] and _compiled()["sources_crc32"] == spec_sources_crc()
    data = json.loads(json.dumps(MAPPING_READERS.lookup(".yaml")(path), sort_keys=True))
    validated = spec_from_mapping(data, str(path), path)
    same_objects(load_hardware(name), validated)
    assert load_hardware(name).model_dump_json() == validated.model_dump_json()


@pytest.mark.parametrize("name", COMPILED_NAMES[:3])
def test_a_spec_survives_its_encoding(name: str) -> None:
    import json

    from layerscope.hardware.loaders import load_hardware_file
    from layerscope.hardware.presets import PRESET_DIR, decode_spec, encode_spec

    spec = load_hardware_file(PRESET_DIR / f"{name}.yaml")  # YAML order, validated
    same_objects(decode_spec(json.loads(json.dumps(encode_spec(spec)))), spec)


def test_a_compiled_spec_names_only_layerscope_classes() -> None:
    from layerscope.hardware.presets import decode_spec

    for ref in ("builtins:object", "layerscope.units:quote", "os:system"):
        with pytest.raises(HardwareSpecError, match="is not a layerscope"):
            decode_spec({"$model": ref, "$set": []})
    with pytest.raises(HardwareSpecError):
        decode_spec({"$enum": "layerscope.hardware.spec:HardwareSpec", "value": 1})


def test_changed_spec_code_is_not_trusted_with_a_compiled_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """After an edit of the code that validates a spec (a CRC of SPEC_SOURCES other than the compiled one), a preset
    is read from its YAML and validated: ``make presets`` encodes it again."""
    import layerscope.hardware.loaders as loaders
    import layerscope.hardware.presets as presets

    read: list[str] = []
    real = loaders.load_hardware_file
    monkeypatch.setattr(loaders, "load_hardware_file", lambda path, device=None: read.append(str(path)) or real(
        path, device))
    monkeypatch.setattr(presets, "spec_sources_crc", lambda: -1)
    presets._load.cache_clear()
    try:
        spec = presets.load_preset("h100-sxm")
    finally:
        presets._load.cache_clear()
    assert read == [str(presets.PRESET_DIR / "h100-sxm.yaml")] and spec.name == "h100-sxm"


def test_loading_a_preset_builds_no_validator() -> None:
    import subprocess
    import sys

    code = ("from layerscope.hardware import load_hardware, HardwareSpec; from layerscope.hardware import spec as s\n"
            "load_hardware('h100-sxm').achievable_flops_per_s('bf16')\n"
            "print(sorted(c.__name__ for c in vars(s).values() if isinstance(c, type) and "
            "getattr(c, '__pydantic_complete__', False)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "[]"


def test_an_edited_file_is_read_from_its_text_not_from_the_compiled_copy(tmp_path) -> None:
    import zlib

    from layerscope.hardware.presets import _compiled_entry

    path = tmp_path / "x.yaml"
    path.write_text("name: x\n")
    entry = {"crc32": zlib.crc32(b"name: x\n"), "data": {"name": "x"}}
    assert _compiled_entry(entry, path) is entry
    path.write_text("name: y\n")
    assert _compiled_entry(entry, path) is None
    assert _compiled_entry(entry, tmp_path / "missing.yaml") is None
    assert _compiled_entry(None, path) is None


def test_loading_a_preset_reads_no_yaml_and_no_spreadsheet() -> None:
    from tests.conftest import modules_loaded

    code = ("import layerscope.hardware.loaders as L; L.sheet_devices = None\n"  # a spreadsheet read would fail
            "from layerscope.hardware import load_hardware; load_hardware('h100-sxm'); load_hardware('H100_SXM')")
    assert modules_loaded(code, ("yaml", "openpyxl", "layerscope.hardware.cluster",
                                 "layerscope.hardware.calibration")) == []
