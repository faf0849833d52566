"""Hardware specs: YAML bombs and nesting, hostile bytes, impossible figures, unknown units and names."""

from __future__ import annotations

from .harness import Case
from .inputs import (
    DIR,
    FIFO,
    SEED_SHEET,
    TWO_DEVICE_SHEET,
    nested,
    preset_json_with,
    preset_text,
    preset_with,
    random_bytes,
    sheet,
    yaml_bomb,
    zip_without_workbook,
)

HBM_BW = "    bandwidth_bytes_per_s: 3.35e+12\n"
BF16_PEAK = "    bf16: 989.0e+12\n"
ENGINES = "  count: 132\n"
HBM_CAP = "    capacity_bytes: 80.0e+9\n"


def hw(case_id: str, name: str, content: object, *expect: str, command: str = "estimate") -> Case:
    """``COMMAND --hardware NAME`` with NAME holding ``content``; the error names the file unless told."""
    return Case(f"hw-{case_id}", (command, "--hardware", name), {name: content}, expect or (name,))  # type: ignore[dict-item]


def yaml_field(case_id: str, old: str, new: str, *expect: str) -> Case:
    """The bundled h100-sxm preset as a file, one line changed; the error names the field."""
    return hw(case_id, "hw.yaml", preset_with(old, new), *expect)


def sheet_case(case_id: str, content: bytes, *expect: str) -> Case:
    return hw(case_id, "chips.csv", content, *expect)


CASES: list[Case] = [
    # Positive controls: a preset name, the preset as a file, a sheet, the seed sheet as written.
    Case("hw-ok-preset", ("estimate", "--hardware", "h100-sxm", "--json"), code=0, stdout_json=True),
    Case("hw-ok-yaml", ("estimate", "--hardware", "hw.yaml", "--json"), {"hw.yaml": preset_text()}, code=0,
         stdout_json=True),
    Case("hw-ok-sheet", ("estimate", "--hardware", "chips.csv", "--json"), {"chips.csv": sheet()}, code=0,
         stdout_json=True),
    Case("hw-ok-seed-sheet", ("estimate", "--hardware", "seed.csv", "--device-column", "JGS", "--json"),
         {"seed.csv": SEED_SHEET}, code=0, stdout_json=True),
    # YAML attacks: alias bombs (the error must stay one short line), deep nesting, unsafe tags.
    hw("yaml-bomb-billion-laughs", "hw.yaml", yaml_bomb()),
    hw("yaml-bomb-5-level", "hw.yaml", yaml_bomb(levels=5)),
    hw("yaml-bomb-as-field", "hw.yaml", yaml_bomb(levels=6) + b"name: *f\n"),
    hw("yaml-bomb-simulate", "hw.yaml", yaml_bomb(), command="simulate"),
    hw("yaml-deep-flow-list", "hw.yaml", nested("[", 100_000)),
    hw("yaml-deep-block-mapping", "hw.yaml", "".join(f"{' ' * i}k:\n" for i in range(1500)).encode()),
    hw("yaml-deep-flow-mapping", "hw.yaml", nested("{a: ", 50_000)),
    hw("yaml-python-tag", "hw.yaml", b"!!python/object/apply:os.system ['touch pwned']\n"),
    hw("yaml-empty", "hw.yaml", b""),
    hw("yaml-comment-only", "hw.yaml", b"# nothing here\n"),
    hw("yaml-random-bytes", "hw.yaml", random_bytes()),
    hw("yaml-list", "hw.yaml", b"- 1\n- 2\n"),
    hw("yaml-scalar", "hw.yaml", b"42\n"),
    hw("yaml-syntax-error", "hw.yaml", b"name: [h100, \nkind: gpu\n"),
    hw("yaml-tabs", "hw.yaml", b"name: x\n\tkind: gpu\n"),
    hw("yaml-duplicate-documents", "hw.yaml", preset_text().encode() + b"\n---\nname: other\n"),
    hw("yml-random-bytes", "hw.yml", random_bytes(seed=3)),
    hw("json-empty", "hw.json", b""),
    hw("json-random-bytes", "hw.json", random_bytes()),
    hw("json-deep-list", "hw.json", nested("[", 200_000)),
    hw("json-number", "hw.json", b"3.35e12"),
    hw("json-bandwidth-negative", "hw.json", preset_json_with(("memory", "2", "bandwidth_bytes_per_s"), -3.35e12),
       "bandwidth"),
    hw("json-bandwidth-nan", "hw.json", preset_json_with(("memory", "2", "bandwidth_bytes_per_s"), float("nan")),
       "bandwidth"),
    hw("json-engines-count-string", "hw.json", preset_json_with(("engines", "count"), "many"), "count"),
    # Impossible figures in a YAML spec.
    yaml_field("bandwidth-negative", HBM_BW, "    bandwidth_bytes_per_s: -3.35e+12\n", "bandwidth"),
    yaml_field("bandwidth-zero", HBM_BW, "    bandwidth_bytes_per_s: 0\n", "bandwidth"),
    yaml_field("bandwidth-nan", HBM_BW, "    bandwidth_bytes_per_s: .nan\n", "bandwidth"),
    yaml_field("bandwidth-inf", HBM_BW, "    bandwidth_bytes_per_s: .inf\n", "bandwidth"),
    yaml_field("bandwidth-unknown-unit", HBM_BW, '    bandwidth_bytes_per_s: "3.35 TQ/s"\n', "TQ/s"),
    yaml_field("bandwidth-wrong-dimension", HBM_BW, '    bandwidth_bytes_per_s: "3.35 GHz"\n', "bandwidth"),
    yaml_field("bandwidth-word", HBM_BW, "    bandwidth_bytes_per_s: fast\n", "bandwidth"),
    yaml_field("bandwidth-list", HBM_BW, "    bandwidth_bytes_per_s: [1, 2]\n", "bandwidth"),
    yaml_field("peak-negative", BF16_PEAK, "    bf16: -989.0e+12\n", "bf16"),
    yaml_field("peak-zero", BF16_PEAK, "    bf16: 0\n", "bf16"),
    yaml_field("peak-nan", BF16_PEAK, "    bf16: .nan\n", "bf16"),
    yaml_field("peak-unknown-dtype", BF16_PEAK, "    bf17: 989.0e+12\n", "bf17"),
    yaml_field("engines-zero", ENGINES, "  count: 0\n", "count"),
    yaml_field("engines-negative", ENGINES, "  count: -132\n", "count"),
    yaml_field("engines-fraction", ENGINES, "  count: 1.5\n", "count"),
    yaml_field("engines-huge", ENGINES, "  count: 1000000000000000000000000000000\n", "count"),
    yaml_field("capacity-negative", HBM_CAP, "    capacity_bytes: -80.0e+9\n", "capacity"),
    yaml_field("capacity-unknown-unit", HBM_CAP, '    capacity_bytes: "80 GQ"\n', "80 GQ"),
    yaml_field("unknown-kind", "kind: gpu\n", "kind: abacus\n", "abacus"),
    hw("missing-engines", "hw.yaml", b"name: x\nkind: gpu\nmemory:\n  - name: hbm\n    capacity_bytes: 1e9\n"
       b"    bandwidth_bytes_per_s: 1e12\n", "engines"),
    hw("memory-empty", "hw.yaml", preset_text().split("memory:")[0].encode() + b"memory: []\n", "memory"),
    # Spreadsheets.
    sheet_case("csv-empty", b""),
    sheet_case("csv-header-only", b"Parameter,NVL-AX\n"),
    sheet_case("csv-random-bytes", random_bytes()),
    sheet_case("csv-nul-bytes", b"Parameter,NVL-AX\n\x00\x00\x00,1\n"),
    sheet_case("csv-bandwidth-negative", sheet(Bandwidth="-342 GB/s"), "bandwidth"),
    sheet_case("csv-bandwidth-zero", sheet(Bandwidth="0 GB/s"), "bandwidth"),
    sheet_case("csv-bandwidth-nan", sheet(Bandwidth="nan"), "bandwidth"),
    sheet_case("csv-bandwidth-inf", sheet(Bandwidth="inf GB/s"), "bandwidth"),
    sheet_case("csv-bandwidth-unknown-unit", sheet(Bandwidth="342 GQ/s"), "GQ/s"),
    sheet_case("csv-bandwidth-word", sheet(Bandwidth="fast"), "bandwidth"),
    sheet_case("csv-cores-zero", sheet(Num_Cores="0"), "num_cores"),
    sheet_case("csv-cores-negative", sheet(Num_Cores="-32"), "num_cores"),
    sheet_case("csv-frequency-wrong-unit", sheet(Frequency="2.5 GB/s"), "frequency"),
    sheet_case("csv-missing-bandwidth", sheet(drop=("Bandwidth",)), "bandwidth"),
    sheet_case("csv-missing-cores", sheet(drop=("Num_Cores",)), "num_cores"),
    sheet_case("csv-unknown-macs-dtype", sheet(MACs_dtype="fp7"), "fp7"),
    Case("hw-csv-several-devices-no-column", ("estimate", "--hardware", "chips.csv"), {"chips.csv": TWO_DEVICE_SHEET},
         ("--device-column",)),
    Case("hw-csv-unknown-device-column", ("estimate", "--hardware", "chips.csv", "--device-column", "XX"),
         {"chips.csv": TWO_DEVICE_SHEET}, ("XX",)),
    Case("hw-csv-empty-device-column", ("estimate", "--hardware", "chips.csv", "--device-column", ""),
         {"chips.csv": TWO_DEVICE_SHEET}, ("device",)),
    hw("xlsx-random-bytes", "chips.xlsx", random_bytes()),
    hw("xlsx-empty", "chips.xlsx", b""),
    hw("xlsx-zip-without-workbook", "chips.xlsx", zip_without_workbook()),
    hw("xlsx-csv-text", "chips.xlsx", sheet()),
    # Names and paths that are not a spec.
    Case("hw-unknown-preset", ("estimate", "--hardware", "h100-sxmm"), {}, ("h100-sxm",)),
    Case("hw-unknown-preset-simulate", ("simulate", "--hardware", "b300"), {}, ("b300",)),
    Case("hw-empty-name", ("estimate", "--hardware", ""), {}, ("hardware",)),
    Case("hw-missing-file", ("estimate", "--hardware", "nothere.yaml"), {}, ("nothere.yaml",)),
    Case("hw-directory", ("estimate", "--hardware", "hwdir"), {"hwdir": DIR}, ("hwdir",)),
    Case("hw-directory-yaml-suffix", ("estimate", "--hardware", "hw.yaml"), {"hw.yaml": DIR}, ("hw.yaml",)),
    Case("hw-unknown-suffix", ("estimate", "--hardware", "hw.txt"), {"hw.txt": preset_text()}, ("hw.txt",)),
    Case("hw-fifo", ("estimate", "--hardware", "hw.yaml"), {"hw.yaml": FIFO}, ("hw.yaml",)),
    Case("hw-validate-unknown-preset", ("validate", "--model", "gpt2", "--hardware", "h100-sxmm", "--out", "v"), {},
         ("h100-sxm",)),
    Case("hw-demo-unknown-preset", ("demo", "--hardware", "h100-sxmm", "--out", "d"), {}, ("h100-sxm",)),
]
