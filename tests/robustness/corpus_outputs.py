"""Outputs: no writer overwrites an input (however its path is spelled), and a place that cannot be
written is one error line, not a traceback or a half-written file."""

from __future__ import annotations

from pathlib import Path

from .harness import Case, Make
from .inputs import DIR, config_text, model_dir, preset_json_with, preset_text, sheet, symlink_to, trace_file


def read_only_dir(path: Path) -> None:
    path.mkdir()
    path.chmod(0o555)


CFG = {"cfg.json": config_text()}
HW_CSV = {"hw.csv": sheet()}
HW_YAML = {"hw/ok.yaml": preset_text()}
REAL = {"in.json.gz": lambda: trace_file("cpu-only.json.gz")}
RO = {"ro": Make(read_only_dir)}


def out(case_id: str, argv: tuple[str, ...], files: dict[str, object], *expect: str, root_skip: bool = False) -> Case:
    return Case(f"out-{case_id}", argv, files, expect, root_skip=root_skip)  # type: ignore[arg-type]


CASES: list[Case] = [
    # Positive controls: each writer writes where it may.
    Case("out-ok-estimate-csv", ("estimate", "--model", "cfg.json", "--csv", "ops.csv"), CFG, code=0,
         creates=("ops.csv",)),
    Case("out-ok-simulate-out", ("simulate", "--out", "s.json.gz"), {}, code=0, creates=("s.json.gz",)),
    Case("out-ok-analyze-csv", ("analyze", "in.json.gz", "--csv", "reports"), REAL, code=0, creates=("reports",)),
    # Inputs named as outputs, spelled every way.
    out("estimate-csv-is-model", ("estimate", "--csv", "cfg.json", "--model", "cfg.json"), CFG, "cfg.json"),
    out("estimate-csv-is-model-dot", ("estimate", "--csv", "./cfg.json", "--model", "cfg.json"), CFG, "cfg.json"),
    out("estimate-csv-is-model-absolute", ("estimate", "--csv", "{d}/cfg.json", "--model", "cfg.json"), CFG,
        "cfg.json"),
    out("estimate-csv-is-model-symlink", ("estimate", "--csv", "link.csv", "--model", "cfg.json"),
        {**CFG, "link.csv": symlink_to("cfg.json")}, "cfg.json"),
    out("estimate-csv-is-hardware", ("estimate", "--hardware", "hw.csv", "--csv", "hw.csv"), HW_CSV, "hw.csv"),
    out("estimate-csv-dotdot-hardware", ("estimate", "--hardware", "hw/ok.yaml", "--csv", "hw/../hw/ok.yaml"),
        HW_YAML, "ok.yaml"),
    out("estimate-csv-in-model-dir", ("estimate", "--model", "ckpt", "--csv", "ckpt/config.json"),
        {"ckpt": model_dir()}, "config.json"),
    out("simulate-out-in-model-dir", ("simulate", "--model", "ckpt", "--out", "ckpt/config.json"),
        {"ckpt": model_dir()}, "config.json"),
    out("simulate-out-is-model", ("simulate", "--model", "cfg.json", "--out", "cfg.json"), CFG, "cfg.json"),
    out("simulate-out-is-hardware", ("simulate", "--hardware", "hw/ok.yaml", "--out", "hw/ok.yaml"), HW_YAML,
        "ok.yaml"),
    out("simulate-out-is-hardware-json", ("simulate", "--hardware", "hw.json", "--out", "hw.json"),
        {"hw.json": lambda: preset_json_with(("name",), "from-file")},
        "hw.json"),
    out("analyze-csv-is-trace", ("analyze", "in.json.gz", "--csv", "in.json.gz"), REAL, "in.json.gz"),
    out("capture-out-is-model", ("capture", "--model", "cfg.json", "--layers", "1", "--random-weights", "--out",
                                 "cfg.json"), CFG, "cfg.json"),
    out("capture-out-in-model-dir", ("capture", "--model", "ckpt", "--layers", "1", "--random-weights", "--out",
                                     "ckpt/config.json"), {"ckpt": model_dir()}, "config.json"),
    out("workloads-out-is-model", ("workloads", "--from-graph", "--model", "cfg.json", "--out", "cfg.json"), CFG,
        "cfg.json"),
    out("workloads-out-is-model-dir-file", ("workloads", "--from-graph", "--model", "ckpt", "--out",
                                            "ckpt/config.json"), {"ckpt": model_dir()}, "config.json"),
    out("calibrate-out-exists", ("calibrate", "--out", "spec.yaml", "--quick"), {"spec.yaml": preset_text()},
        "spec.yaml"),
    out("calibrate-out-is-dir", ("calibrate", "--out", "specdir", "--quick"), {"specdir": DIR}, "specdir"),
    out("calibrate-out-unknown-suffix", ("calibrate", "--out", "spec.txt", "--quick"), {}, "spec.txt"),
    out("calibrate-out-proc", ("calibrate", "--out", "/proc/layerscope-spec.yaml", "--quick"), {}, "/proc"),
    # Places that cannot be written (as root too: /proc and /sys refuse new files).
    out("simulate-out-proc", ("simulate", "--out", "/proc/x.json"), {}, "/proc/x.json"),
    out("simulate-out-proc-missing-dir", ("simulate", "--out", "/proc/layerscope/x.json.gz"), {}, "/proc"),
    out("simulate-out-sys", ("simulate", "--out", "/sys/x.pftrace"), {}, "/sys/x.pftrace"),
    out("simulate-out-missing-dir", ("simulate", "--out", "nodir/x.json"), {}, "nodir"),
    out("simulate-out-is-dir", ("simulate", "--out", "outdir"), {"outdir": DIR}, "outdir"),
    out("simulate-out-unknown-suffix", ("simulate", "--out", "x.txt"), {}, "x.txt"),
    out("simulate-out-empty", ("simulate", "--out", ""), {}, "--out"),
    out("simulate-out-read-only-dir", ("simulate", "--out", "ro/x.json"), RO, "ro", root_skip=True),
    out("estimate-csv-proc", ("estimate", "--csv", "/proc/x.csv"), {}, "/proc/x.csv"),
    out("estimate-csv-sys", ("estimate", "--csv", "/sys/x.csv"), {}, "/sys/x.csv"),
    out("estimate-csv-missing-dir", ("estimate", "--csv", "nodir/x.csv"), {}, "nodir"),
    out("estimate-csv-is-dir", ("estimate", "--csv", "csvdir"), {"csvdir": DIR}, "csvdir"),
    out("estimate-csv-read-only-dir", ("estimate", "--csv", "ro/x.csv"), RO, "ro", root_skip=True),
    out("analyze-csv-proc", ("analyze", "in.json.gz", "--csv", "/proc/reports"), REAL, "/proc/reports"),
    out("analyze-csv-is-file", ("analyze", "in.json.gz", "--csv", "notadir.txt"), {**REAL, "notadir.txt": b"x"},
        "notadir.txt"),
    out("analyze-csv-read-only-dir", ("analyze", "in.json.gz", "--csv", "ro/reports"), {**REAL, **RO}, "ro",
        root_skip=True),
    out("capture-out-proc", ("capture", "--model", "gpt2", "--layers", "1", "--random-weights", "--out",
                             "/proc/x.json.gz"), {}, "/proc/x.json.gz"),
    out("capture-out-is-dir", ("capture", "--model", "gpt2", "--layers", "1", "--random-weights", "--out", "outdir"),
        {"outdir": DIR}, "outdir"),
    out("workloads-out-proc", ("workloads", "--from-graph", "--model", "llama-3.2-1b", "--layers", "1", "--out",
                               "/proc/layerscope-wl"), {}, "/proc/layerscope-wl"),
    out("workloads-out-is-file", ("workloads", "--from-graph", "--model", "llama-3.2-1b", "--layers", "1", "--out",
                                  "notadir.txt"), {"notadir.txt": b"x"}, "notadir.txt"),
    out("demo-out-proc", ("demo", "--hardware", "h100-sxm", "--out", "/proc/layerscope-demo"), {}, "/proc"),
    out("demo-out-is-file", ("demo", "--hardware", "h100-sxm", "--out", "notadir.txt"), {"notadir.txt": b"x"},
        "notadir.txt"),
    out("validate-out-proc", ("validate", "--model", "gpt2", "--hardware", "h100-sxm", "--out",
                              "/proc/layerscope-validate"), {}, "/proc"),
    out("validate-out-is-file", ("validate", "--model", "gpt2", "--hardware", "h100-sxm", "--out", "notadir.txt"),
        {"notadir.txt": b"x"}, "notadir.txt"),
]
